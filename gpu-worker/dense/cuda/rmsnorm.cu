/* cuda_rmsnorm: cpu_rmsnorm on rows, one thread block per row. The sum of squares is accumulated in double as
 * the CPU does, but in a tree over the block's threads rather than left to right.
 *
 * With `found` (cuda_rmsnorm_checked), the non-finite check of gpu-worker/dense/finite_check.h: thread 0 sees a
 * residual row that is not finite in its scale (NaN, or 0 when the sum overflows), each thread tests the
 * values it stores; a find (the rare path) goes to *found by atomicMin. No barrier or reduction is added, and
 * the stored values are the same. */
#include "gpu-worker/dense/cuda/cuda_common.cuh"
#include "gpu-worker/dense/finite_check.h"

#define RN_MAX_THREADS 256

#define RN_PER 8 /* elements a thread keeps in registers (rows up to RN_PER * RN_MAX_THREADS) */

/* The find of element i, whose input value is xi and output yi, of a row whose scale is `scale` (the rare path:
 * yi is not finite). The residual row is at fault when the scale is not positive; then only the thread holding
 * a non-finite input reports it (thread 0 reports the row without an element). */
static __device__ __noinline__ void rmsnorm_found(unsigned long long *found, uint32_t site, int row, int i, float xi,
                                                  float scale)
{
    if (!(scale > 0.0f)) {
        if (!isfinite(xi))
            atomicMin(found, (unsigned long long)FINITE_KEY(site, FINITE_RESIDUAL, row, i));
    } else {
        atomicMin(found, (unsigned long long)FINITE_KEY(site, FINITE_NORMED, row, i));
    }
}

/* CACHED: the row and the weights are loaded once, all at the start, so the weights' latency hides behind the
 * row's and the reduction's (a decode step's norm is one block, bound by latency; the loop form waited for the
 * weights after the reduction). The sums are the same, in the same order. */
template <bool CACHED>
static __global__ void rmsnorm_kernel(float *out, int64_t ldo, const float *x, int64_t ldx, const int32_t *rows,
                                      const float *__restrict__ w, int n, float eps, unsigned long long *found,
                                      uint32_t site)
{
    __shared__ double partial[RN_MAX_THREADS / WARP_SIZE];
    __shared__ float scale_sh;
    const int i_out = blockIdx.x;
    const int row = rows ? rows[i_out] : i_out;
    const float *xr = x + row * ldx;
    float *yr = out + i_out * ldo;
    float xv[CACHED ? RN_PER : 1], wv[CACHED ? RN_PER : 1];
    double sum = 0;
    if (CACHED) {
#pragma unroll
        for (int k = 0; k < RN_PER; k++) {
            const int i = threadIdx.x + k * blockDim.x;
            xv[k] = i < n ? xr[i] : 0.0f;
            wv[k] = i < n ? w[i] : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < RN_PER; k++)
            if (threadIdx.x + k * blockDim.x < n)
                sum += (double)__fmul_rn(xv[k], xv[k]);
    } else {
        for (int i = threadIdx.x; i < n; i += blockDim.x)
            sum += (double)__fmul_rn(xr[i], xr[i]);
    }
    sum = warp_sum_f64(sum);
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    if (lane == 0)
        partial[warp] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        double total = 0;
        for (int k = 0; k < (int)(blockDim.x / WARP_SIZE); k++)
            total += partial[k];
        const float mean = (float)(total / (double)n);
        scale_sh = 1.0f / sqrtf(mean + eps);
        if (found && !(scale_sh > 0.0f))
            atomicMin(found, (unsigned long long)FINITE_KEY(site, FINITE_RESIDUAL, row, FINITE_ELEM_NONE));
    }
    __syncthreads();
    const float scale = scale_sh;
    if (CACHED) {
#pragma unroll
        for (int k = 0; k < RN_PER; k++) {
            const int i = threadIdx.x + k * blockDim.x;
            if (i < n) {
                const float y = __fmul_rn(xv[k], scale) * wv[k];
                yr[i] = y;
                if (found && !isfinite(y))
                    rmsnorm_found(found, site, row, i, xv[k], scale);
            }
        }
    } else {
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            const float xi = xr[i], y = __fmul_rn(xi, scale) * w[i];
            yr[i] = y;
            if (found && !isfinite(y))
                rmsnorm_found(found, site, row, i, xi, scale);
        }
    }
}

static void rmsnorm_launch(float *out, int64_t ldo, const float *x, int64_t ldx, const int32_t *rows, const float *w,
                           int64_t n, int32_t n_rows, float eps, unsigned long long *found, uint32_t site,
                           cudaStream_t s)
{
    int threads = (int)((n + WARP_SIZE - 1) / WARP_SIZE) * WARP_SIZE;
    if (threads > RN_MAX_THREADS)
        threads = RN_MAX_THREADS;
    if (n <= (int64_t)threads * RN_PER)
        rmsnorm_kernel<true><<<(unsigned)n_rows, threads, 0, s>>>(out, ldo, x, ldx, rows, w, (int)n, eps, found, site);
    else
        rmsnorm_kernel<false><<<(unsigned)n_rows, threads, 0, s>>>(out, ldo, x, ldx, rows, w, (int)n, eps, found,
                                                                     site);
}

extern "C" int cuda_rmsnorm_checked(float *out, int64_t ldo, const float *x, int64_t ldx, const int32_t *rows,
                                    const float *w, int64_t n, int32_t n_rows, float eps, uint64_t *found,
                                    uint32_t site, cudaStream_t s, guild_err_t *err)
{
    if (n_rows <= 0)
        return 0;
    if (n <= 0 || n > INT32_MAX)
        return guild_err_set(err, "cuda: rmsnorm: a row of %lld elements", (long long)n);
    if (found && (site >= FINITE_MAX_SITES || n > (int64_t)FINITE_MAX_ELEMS))
        return guild_err_set(err, "cuda: rmsnorm: site %u or a row of %lld elements is past the non-finite check's "
                             "keys", site, (long long)n);
    rmsnorm_launch(out, ldo, x, ldx, rows, w, n, n_rows, eps, (unsigned long long *)found, site, s);
    return cuda_launch_check("rmsnorm", err);
}

extern "C" int cuda_rmsnorm(float *out, int64_t ldo, const float *x, int64_t ldx, const int32_t *rows,
                            const float *w, int64_t n, int32_t n_rows, float eps, cudaStream_t s, guild_err_t *err)
{
    return cuda_rmsnorm_checked(out, ldo, x, ldx, rows, w, n, n_rows, eps, NULL, 0, s, err);
}
