/* cuda_rmsnorm: cpu_rmsnorm on rows, one thread block per row. The sum of squares is accumulated in double as
 * the CPU does, but in a tree over the block's threads rather than left to right. */
#include "gpu-worker/dense/cuda/cuda_common.cuh"

#define RN_MAX_THREADS 256

#define RN_PER 8 /* elements a thread keeps in registers (rows up to RN_PER * RN_MAX_THREADS) */

/* CACHED: the row and the weights are loaded once, all at the start, so the weights' latency hides behind the
 * row's and the reduction's (a decode step's norm is one block, bound by latency; the loop form waited for the
 * weights after the reduction). The sums are the same, in the same order. */
template <bool CACHED>
static __global__ void rmsnorm_kernel(float *out, int64_t ldo, const float *x, int64_t ldx, const int32_t *rows,
                                      const float *__restrict__ w, int n, float eps)
{
    __shared__ double partial[RN_MAX_THREADS / WARP_SIZE];
    __shared__ float scale_sh;
    const int i_out = blockIdx.x;
    const float *xr = x + (rows ? rows[i_out] : i_out) * ldx;
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
    }
    __syncthreads();
    const float scale = scale_sh;
    if (CACHED) {
#pragma unroll
        for (int k = 0; k < RN_PER; k++) {
            const int i = threadIdx.x + k * blockDim.x;
            if (i < n)
                yr[i] = __fmul_rn(xv[k], scale) * wv[k];
        }
    } else {
        for (int i = threadIdx.x; i < n; i += blockDim.x)
            yr[i] = __fmul_rn(xr[i], scale) * w[i];
    }
}

static void rmsnorm_launch(float *out, int64_t ldo, const float *x, int64_t ldx, const int32_t *rows, const float *w,
                           int64_t n, int32_t n_rows, float eps, cudaStream_t s)
{
    int threads = (int)((n + WARP_SIZE - 1) / WARP_SIZE) * WARP_SIZE;
    if (threads > RN_MAX_THREADS)
        threads = RN_MAX_THREADS;
    if (n <= (int64_t)threads * RN_PER)
        rmsnorm_kernel<true><<<(unsigned)n_rows, threads, 0, s>>>(out, ldo, x, ldx, rows, w, (int)n, eps);
    else
        rmsnorm_kernel<false><<<(unsigned)n_rows, threads, 0, s>>>(out, ldo, x, ldx, rows, w, (int)n, eps);
}

extern "C" int cuda_rmsnorm(float *out, int64_t ldo, const float *x, int64_t ldx, const int32_t *rows,
                            const float *w, int64_t n, int32_t n_rows, float eps, cudaStream_t s, guild_err_t *err)
{
    if (n_rows <= 0)
        return 0;
    if (n <= 0 || n > INT32_MAX)
        return guild_err_set(err, "cuda: rmsnorm: a row of %lld elements", (long long)n);
    rmsnorm_launch(out, ldo, x, ldx, rows, w, n, n_rows, eps, s);
    return cuda_launch_check("rmsnorm", err);
}
