/* cuda_rmsnorm: cpu_rmsnorm on rows, one thread block per row. The sum of squares is accumulated in double as
 * the CPU does, but in a tree over the block's threads rather than left to right.
 *
 * With `found` (cuda_rmsnorm_checked), the non-finite check of gpu-worker/dense/finite_check.h: thread 0 sees a
 * residual row that is not finite in its scale (NaN, or 0 when the sum overflows), each thread tests the
 * values it stores; a find (the rare path) goes to *found by atomicMin. No barrier or reduction is added, and
 * the stored values are the same.
 *
 * cuda_rmsnorm_fused is the same kernel with two optional ends, for a decode step's chain of small launches: before
 * the norm, the residual update that precedes it in the layer program (the addition or the MoE combine of
 * residual.cuh, written back to x); after it, the normed row quantized for the next product (quantize.cuh, from a
 * copy of the row in shared memory). Each element takes the operations of the separate kernels in their order,
 * and the norm's reduction is the same tree over the same threads, so the bits are those of the three launches. */
#include <atomic>

#include "gpu-worker/dense/cuda/cluster.cuh"
#include "gpu-worker/dense/cuda/quantize.cuh"
#include "gpu-worker/dense/cuda/residual.cuh"
#include "gpu-worker/dense/cuda/rmsnorm_row.cuh"

enum { RN_Q_NONE, RN_Q8_0, RN_Q8_1, RN_Q8_K }; /* the quantization after the norm */

/* The combine whose rows are read where cuda_norm_pre_t.y_at says (cuda_moe_combine_at): a PRE of its own. */
#define RN_PRE_COMBINE_AT (CUDA_PRE_COMBINE + 16)
#define RN_IS_COMBINE(pre) ((pre) == CUDA_PRE_COMBINE || (pre) == RN_PRE_COMBINE_AT)

#define RN_SLOTS 8 /* the combine's slots whose loads go out together (Qwen3's top-8; more slots: in pairs after) */

/* The fused ends' operands (cuda_rmsnorm_fused): the residual update's (cuda_norm_pre_t, x written back through
 * xw) and the quantized rows' destination. */
typedef struct rn_fuse {
    float *xw;
    const float *p, *y, *w, *sh, *sh_logit;
    const float *const *y_at;
    int n_used;
    char *q;
    size_t q_stride;
} rn_fuse_t;

/* residual_combine's steps for a thread's E elements at[0 .. E) of row `row` (n elements), slot by slot, into xv
 * (x's values in, the updated ones out). The loads of the first RN_SLOTS slots' weights and elements all go out
 * before the first sum (a loop over the slots, two at a time, waited for each pair's loads in turn: a decode step's
 * combine is bound by those round trips); the sums are then made in residual_combine's order. The loads have no
 * branch: the caller points an element past the row at element 0 and drops its result (xv and its square are not
 * used past n), and a slot past n_used reads slot 0, whose sum is not made. The one-block kernel takes its RN_PER
 * elements, the cluster form its one. AT: the rows where *f.y_at says (host rows: combine_y's volatile loads). */
template <int E, bool AT>
static __device__ __forceinline__ void rn_combine(const rn_fuse_t &f, int row, int n, const int (&at)[E],
                                                  float (&xv)[E])
{
    const float *wt = f.w + (int64_t)row * f.n_used;
    const float *yt = (AT ? *f.y_at : f.y) + (int64_t)row * n * f.n_used;
    float ws[RN_SLOTS], yv[RN_SLOTS][E], acc[E];
#pragma unroll
    for (int s = 0; s < RN_SLOTS; s++) {
        const int sl = s < f.n_used ? s : 0;
        ws[s] = wt[sl];
#pragma unroll
        for (int k = 0; k < E; k++)
            yv[s][k] = combine_y<AT>(yt + (int64_t)sl * n + at[k]);
    }
#pragma unroll
    for (int k = 0; k < E; k++)
        acc[k] = combine_first(ws[0], yv[0][k]);
#pragma unroll
    for (int s = 1; s < RN_SLOTS; s++)
        if (s < f.n_used)
#pragma unroll
            for (int k = 0; k < E; k++)
                acc[k] = combine_next(acc[k], ws[s], yv[s][k]);
#pragma unroll 2
    for (int s = RN_SLOTS; s < f.n_used; s++) {
        const float wsl = wt[s];
        const float *ys = yt + (int64_t)s * n;
#pragma unroll
        for (int k = 0; k < E; k++)
            acc[k] = combine_next(acc[k], wsl, combine_y<AT>(ys + at[k]));
    }
#pragma unroll
    for (int k = 0; k < E; k++)
        xv[k] = combine_end(acc[k], f.sh, f.sh_logit, row, (int64_t)row * n + at[k], xv[k]);
}

/* CACHED: the row and the weights are loaded once, all at the start, so the weights' latency hides behind the
 * row's and the reduction's (a decode step's norm is one block, bound by latency; the loop form waited for the
 * weights after the reduction). The sums are the same, in the same order. */
template <bool CACHED, int PRE, int QT>
static __global__ void rmsnorm_kernel(float *out, int64_t ldo, const float *x, int64_t ldx, const int32_t *rows,
                                      const float *__restrict__ w, int n, float eps, unsigned long long *found,
                                      uint32_t site, rn_fuse_t f)
{
    static_assert(CACHED || (PRE == CUDA_PRE_NONE && QT == RN_Q_NONE), "the fused ends need the cached row");
    extern __shared__ float normed_sh[]; /* QT: the normed row, for the quantizing warps */
    __shared__ double partial[RN_MAX_THREADS / WARP_SIZE];
    __shared__ float scale_sh;
    float xv[CACHED ? RN_PER : 1], wv[CACHED ? RN_PER : 1];
    if (CACHED) /* the weights (no kernel's output, cuda_common.cuh) while the kernel before ends */
#pragma unroll
        for (int k = 0; k < RN_PER; k++) {
            const int i = threadIdx.x + k * blockDim.x;
            wv[k] = i < n ? w[i] : 0.0f;
        }
    pdl_begin();
    const int i_out = blockIdx.x;
    const int row = rows ? rows[i_out] : i_out;
    const float *xr = x + row * ldx;
    float *yr = out + i_out * ldo;
    double sum = 0;
    if (CACHED) {
#pragma unroll
        for (int k = 0; k < RN_PER; k++) {
            const int i = threadIdx.x + k * blockDim.x;
            xv[k] = i < n ? xr[i] : 0.0f;
        }
        /* the residual update (rows NULL, ldx == n): x[row] = its result */
        if (PRE == CUDA_PRE_ADD) { /* the loads without a branch, as the combine's below */
#pragma unroll
            for (int k = 0; k < RN_PER; k++) {
                const int i = threadIdx.x + k * blockDim.x, at = i < n ? i : 0;
                xv[k] = residual_add(xv[k], f.p[(int64_t)row * n + at]);
                if (i < n)
                    f.xw[(int64_t)row * ldx + i] = xv[k];
            }
        } else if constexpr (RN_IS_COMBINE(PRE)) { /* only the combine's instances, all CACHED: xv[RN_PER] */
            int at[RN_PER];
#pragma unroll
            for (int k = 0; k < RN_PER; k++) {
                const int i = threadIdx.x + k * blockDim.x;
                at[k] = i < n ? i : 0;
            }
            rn_combine<RN_PER, PRE == RN_PRE_COMBINE_AT>(f, row, n, at, xv);
#pragma unroll
            for (int k = 0; k < RN_PER; k++)
                if (threadIdx.x + k * blockDim.x < n)
                    f.xw[(int64_t)row * ldx + at[k]] = xv[k];
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
        scale_sh = rmsnorm_scale(partial, (int)(blockDim.x / WARP_SIZE), n, eps);
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
                if (QT != RN_Q_NONE)
                    normed_sh[i] = y;
                if (found && !isfinite(y))
                    rmsnorm_found(found, site, row, i, xv[k], scale);
            }
        }
        if (QT != RN_Q_NONE) { /* warp j quantizes blocks j, j + warps, ... of the row */
            __syncthreads();
            char *qr = f.q + (size_t)i_out * f.q_stride;
            const int n_warps = blockDim.x / WARP_SIZE;
            if (QT == RN_Q8_K) {
                for (int b = warp; b < n / QUANT_QK_K; b += n_warps) {
                    float v[8];
#pragma unroll
                    for (int j = 0; j < 8; j++)
                        v[j] = normed_sh[b * QUANT_QK_K + lane * 8 + j];
                    quantize_block_q8_K(v, lane, (quant_block_q8_K *)qr + b);
                }
            } else {
                const size_t bytes = QT == RN_Q8_1 ? sizeof(quant_block_q8_1) : sizeof(quant_block_q8_0);
                for (int b = warp; b < n / 32; b += n_warps)
                    quantize_block_q8_32<QT == RN_Q8_1>(normed_sh[b * 32 + lane], lane, qr + (size_t)b * bytes);
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

/* ---- the cluster form of the fused kernel (cuda_set_norm_cluster) ---------------------------------------------
 * A decode step's fused norm is one block a row, bound by its round trips, the combine's loads first (n_used rows of
 * the experts' outputs through one SM: 64 KiB for Qwen3's 8 x 2048). Here a row is a cluster of ceil(n / vt)
 * blocks of the kernel's vt threads: block b's thread T holds element T + b vt, the element the one block's thread
 * T held as its k = b, with the same residual update. The squares go through distributed shared memory into every
 * block, whose thread T adds them in k order as the one block's thread T did, then the same warp tree and the same
 * sum of the warps' sums: each block makes the same scale itself (the squares come as async stores counted on
 * each block's mbarrier, cluster.cuh: no barrier after them; the first block's scale sent back had taken a second).
 * Each then writes and quantizes its vt elements (whole quantization blocks: vt is 256 for Q8_K rows, a multiple of
 * 32 always). The same operations on the same values: the same bits. Rows of 2 to RN_PER blocks (the one block
 * holds RN_PER elements a thread). */
template <int PRE, int QT>
static __global__ void __launch_bounds__(RN_MAX_THREADS)
    rmsnorm_cl_kernel(float *out, const float *__restrict__ w, int n, float eps, unsigned long long *found,
                      uint32_t site, rn_fuse_t f)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    __shared__ float sq[RN_PER][RN_MAX_THREADS]; /* every block's squares, [k][T] */
    __shared__ double partial[RN_MAX_THREADS / WARP_SIZE];
    __shared__ float normed_sh[RN_MAX_THREADS];
    __shared__ __align__(8) unsigned long long sq_in; /* the other blocks' squares: their bytes counted */
    const int b = blockIdx.x, T = threadIdx.x, vt = blockDim.x, row = blockIdx.y;
    const int warp = T / WARP_SIZE, lane = T % WARP_SIZE;
    const int i = T + b * vt, at = i < n ? i : 0;
    const int64_t o = (int64_t)row * n;
    const float wv = i < n ? w[i] : 0.0f; /* the weights (no kernel's output) while the kernel before ends */
    if (T == 0)
        cluster_mbar_init(&sq_in, (gridDim.x - 1) * (unsigned)vt * (unsigned)sizeof(float));
    cluster_arrive_relaxed(); /* phase 1: when it completes, every block of the cluster runs */
    pdl_wait();
    float xv = i < n ? f.xw[o + i] : 0.0f;
    if (PRE == CUDA_PRE_ADD) {
        xv = residual_add(xv, f.p[o + at]);
    } else if (RN_IS_COMBINE(PRE)) { /* the one block's loads and sums for its element k = b */
        const int at1[1] = {at};
        float xv1[1] = {xv};
        rn_combine<1, PRE == RN_PRE_COMBINE_AT>(f, row, n, at1, xv1);
        xv = xv1[0];
    }
    const float q = i < n ? __fmul_rn(xv, xv) : 0.0f;
    pdl_trigger(); /* the next product's blocks (its weights asked for before its wait) after the row's loads */
    cluster_wait_acquire();
    const uint32_t mb = (uint32_t)__cvta_generic_to_shared(&sq_in);
    for (unsigned r = 0; r < gridDim.x; r++)
        if (r == (unsigned)b)
            sq[b][T] = q;
        else
            cluster_send_f32(cluster_map(&sq[b][T], r), q, cluster_map_addr(mb, r));
    __syncthreads();           /* this block's own squares */
    cluster_mbar_wait(&sq_in); /* and every other block's */
    double sum = 0;
#pragma unroll
    for (int k = 0; k < RN_PER; k++)
        if (T + k * vt < n)
            sum += (double)sq[k][T];
    sum = warp_sum_f64(sum);
    if (lane == 0)
        partial[warp] = sum;
    __syncthreads();
    const float scale = rmsnorm_scale(partial, vt / WARP_SIZE, n, eps); /* every thread: no second barrier */
    if (found && b == 0 && T == 0 && !(scale > 0.0f))
        atomicMin(found, (unsigned long long)FINITE_KEY(site, FINITE_RESIDUAL, row, FINITE_ELEM_NONE));
    /* x's update, stored after the barrier: no block of the cluster reads it (whether a store before a release
     * delays it was not told apart by session 47's timings, bench/results/dense47-h200-2026-12-05-s47.md) */
    if (PRE != CUDA_PRE_NONE && i < n)
        f.xw[o + i] = xv;
    if (i < n) {
        const float y = __fmul_rn(xv, scale) * wv;
        out[o + i] = y;
        normed_sh[T] = y;
        if (found && !isfinite(y))
            rmsnorm_found(found, site, row, i, xv, scale);
    }
    if (QT == RN_Q_NONE)
        return;
    __syncthreads();
    char *qr = f.q + (size_t)row * f.q_stride;
    if (QT == RN_Q8_K) { /* vt = 256: the block's elements are quantization block b */
        if (warp == 0) {
            float v[8];
#pragma unroll
            for (int j = 0; j < 8; j++)
                v[j] = normed_sh[lane * 8 + j];
            quantize_block_q8_K(v, lane, (quant_block_q8_K *)qr + b);
        }
    } else if (b * vt + warp * 32 < n) { /* warp j: the block's j-th of 32 elements */
        const size_t bytes = QT == RN_Q8_1 ? sizeof(quant_block_q8_1) : sizeof(quant_block_q8_0);
        quantize_block_q8_32<QT == RN_Q8_1>(normed_sh[warp * 32 + lane], lane,
                                             qr + (size_t)(b * vt / 32 + warp) * bytes);
    }
#endif
}

static std::atomic<bool> g_norm_cluster{true};

extern "C" void cuda_set_norm_cluster(bool on)
{
    g_norm_cluster.store(on, std::memory_order_relaxed);
}

/* Whether rmsnorm_cl_kernel<PRE, QT> runs here with clusters of cb blocks (sm_90, such a cluster schedulable);
 * asked once a process and size. A row of two blocks or more is wider than RN_MAX_THREADS: its blocks have that
 * many threads (rmsnorm_threads). */
template <int PRE, int QT>
static bool rn_cl_usable(int cb)
{
    static std::atomic<int> ok[RN_PER + 1]; /* 0 unknown, 1 no, 2 yes */
    if (ok[cb].load(std::memory_order_relaxed) == 0)
        ok[cb].store(cuda_cluster_fits(rmsnorm_cl_kernel<PRE, QT>, (unsigned)cb, 1, RN_MAX_THREADS, 0) ? 2 : 1,
                     std::memory_order_relaxed);
    return ok[cb].load(std::memory_order_relaxed) == 2;
}

/* The cluster form for n_rows rows where it applies (on, 2 to RN_PER blocks a row, at most
 * CUDA_NORM_CLUSTER_ROWS rows: a prefill's many rows fill the device with one block each); whether it launched. */
template <int PRE, int QT>
static bool rmsnorm_cl_launch(float *out, const float *w, int64_t n, int32_t n_rows, float eps,
                              unsigned long long *found, uint32_t site, const rn_fuse_t &f, cudaStream_t s)
{
    const int threads = rmsnorm_threads(n), cb = (int)((n + threads - 1) / threads);
    if (!g_norm_cluster.load(std::memory_order_relaxed) || cb < 2 || cb > RN_PER ||
        n_rows > CUDA_NORM_CLUSTER_ROWS || !rn_cl_usable<PRE, QT>(cb))
        return false;
    cuda_launch_pdl_cluster(rmsnorm_cl_kernel<PRE, QT>, dim3((unsigned)cb, (unsigned)n_rows), dim3(threads), 0,
                            (unsigned)cb, s, out, w, (int)n, eps, found, site, f);
    return true;
}

static void rmsnorm_launch(float *out, int64_t ldo, const float *x, int64_t ldx, const int32_t *rows, const float *w,
                           int64_t n, int32_t n_rows, float eps, unsigned long long *found, uint32_t site,
                           cudaStream_t s)
{
    const int threads = rmsnorm_threads(n);
    const rn_fuse_t none = {};
    if (n <= (int64_t)threads * RN_PER)
        cuda_launch_pdl(rmsnorm_kernel<true, CUDA_PRE_NONE, RN_Q_NONE>, (unsigned)n_rows, threads, 0, s, out, ldo, x,
                        ldx, rows, w, (int)n, eps, found, site, none);
    else
        cuda_launch_pdl(rmsnorm_kernel<false, CUDA_PRE_NONE, RN_Q_NONE>, (unsigned)n_rows, threads, 0, s, out, ldo, x,
                        ldx, rows, w, (int)n, eps, found, site, none);
}

/* The fused kernel for PRE, by the quantization (the row cached: n <= threads * RN_PER). */
template <int PRE>
static void rmsnorm_fused_launch(int qt, float *out, float *x, const float *w, int64_t n, int32_t n_rows, float eps,
                                 unsigned long long *found, uint32_t site, const rn_fuse_t &f, cudaStream_t s)
{
    const int threads = rmsnorm_threads(n);
    const size_t smem = qt == RN_Q_NONE ? 0 : (size_t)n * sizeof(float);
    if ((qt == RN_Q8_0 && rmsnorm_cl_launch<PRE, RN_Q8_0>(out, w, n, n_rows, eps, found, site, f, s)) ||
        (qt == RN_Q8_1 && rmsnorm_cl_launch<PRE, RN_Q8_1>(out, w, n, n_rows, eps, found, site, f, s)) ||
        (qt == RN_Q8_K && rmsnorm_cl_launch<PRE, RN_Q8_K>(out, w, n, n_rows, eps, found, site, f, s)) ||
        (qt == RN_Q_NONE && rmsnorm_cl_launch<PRE, RN_Q_NONE>(out, w, n, n_rows, eps, found, site, f, s)))
        return;
    switch (qt) {
    case RN_Q8_0:
        cuda_launch_pdl(rmsnorm_kernel<true, PRE, RN_Q8_0>, (unsigned)n_rows, threads, smem, s, out, n, x, n, NULL, w,
                        (int)n, eps, found, site, f);
        break;
    case RN_Q8_1:
        cuda_launch_pdl(rmsnorm_kernel<true, PRE, RN_Q8_1>, (unsigned)n_rows, threads, smem, s, out, n, x, n, NULL, w,
                        (int)n, eps, found, site, f);
        break;
    case RN_Q8_K:
        cuda_launch_pdl(rmsnorm_kernel<true, PRE, RN_Q8_K>, (unsigned)n_rows, threads, smem, s, out, n, x, n, NULL, w,
                        (int)n, eps, found, site, f);
        break;
    default:
        cuda_launch_pdl(rmsnorm_kernel<true, PRE, RN_Q_NONE>, (unsigned)n_rows, threads, smem, s, out, n, x, n, NULL, w,
                        (int)n, eps, found, site, f);
    }
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

static __global__ void finite_reset_kernel(unsigned long long *found)
{
    pdl_begin();
    *found = (unsigned long long)FINITE_NONE;
}

extern "C" int cuda_finite_reset(uint64_t *found, cudaStream_t s, guild_err_t *err)
{
    cuda_launch_pdl(finite_reset_kernel, dim3(1), dim3(1), 0, s, (unsigned long long *)found);
    return cuda_launch_check("reset the non-finite check", err);
}

extern "C" int cuda_rmsnorm(float *out, int64_t ldo, const float *x, int64_t ldx, const int32_t *rows,
                            const float *w, int64_t n, int32_t n_rows, float eps, cudaStream_t s, guild_err_t *err)
{
    return cuda_rmsnorm_checked(out, ldo, x, ldx, rows, w, n, n_rows, eps, NULL, 0, s, err);
}

extern "C" int cuda_rmsnorm_fused(float *out, float *x, const float *w, int64_t n, int32_t n_rows, float eps,
                                  uint64_t *found, uint32_t site, const cuda_norm_pre_t *pre, guild_type_t q_type,
                                  void *q, size_t q_stride, cudaStream_t s, guild_err_t *err)
{
    const cuda_norm_pre_t none = {};
    if (!pre)
        pre = &none;
    if (n_rows <= 0)
        return 0;
    if (n <= 0 || n > INT32_MAX)
        return guild_err_set(err, "cuda: rmsnorm: a row of %lld elements", (long long)n);
    if (pre->kind != CUDA_PRE_NONE && pre->kind != CUDA_PRE_ADD && pre->kind != CUDA_PRE_COMBINE)
        return guild_err_set(err, "cuda: rmsnorm: residual update %d is not one of none, add, combine",
                             (int)pre->kind);
    if (pre->kind == CUDA_PRE_COMBINE && pre->n_used < 1)
        return guild_err_set(err, "cuda: rmsnorm: combine of %d experts per token", pre->n_used);
    if (found && (site >= FINITE_MAX_SITES || n > (int64_t)FINITE_MAX_ELEMS))
        return guild_err_set(err, "cuda: rmsnorm: site %u or a row of %lld elements is past the non-finite check's "
                             "keys", site, (long long)n);
    const int qt = !q                           ? RN_Q_NONE
                   : q_type == GUILD_TYPE_Q8_0 ? RN_Q8_0
                   : q_type == GUILD_TYPE_Q8_1 ? RN_Q8_1
                   : q_type == GUILD_TYPE_Q8_K ? RN_Q8_K
                                               : -1;
    const int64_t qk = qt == RN_Q8_K ? QUANT_QK_K : 32;
    if (n > (int64_t)rmsnorm_threads(n) * RN_PER || qt < 0 || (qt != RN_Q_NONE && n % qk)) {
        /* not one kernel: the separate launches, which the fused kernel equals */
        const int64_t total = n * n_rows;
        if ((pre->kind == CUDA_PRE_ADD && cuda_add(x, pre->p, total, s, err) < 0) ||
            (pre->kind == CUDA_PRE_COMBINE && cuda_moe_combine_pre(x, pre, n_rows, n, s, err) < 0) ||
            cuda_rmsnorm_checked(out, n, x, n, NULL, w, n, n_rows, eps, found, site, s, err) < 0 ||
            (q && cuda_quantize(q_type, out, n, q, q_stride, n, n_rows, s, err) < 0))
            return -1;
        return 0;
    }
    const rn_fuse_t f = {x,         pre->p,      pre->y,    pre->w,  pre->sh, pre->sh_logit,
                         pre->y_at, pre->n_used, (char *)q, q_stride};
    unsigned long long *fd = (unsigned long long *)found;
    if (pre->kind == CUDA_PRE_ADD)
        rmsnorm_fused_launch<CUDA_PRE_ADD>(qt, out, x, w, n, n_rows, eps, fd, site, f, s);
    else if (pre->kind == CUDA_PRE_COMBINE && pre->y_at)
        rmsnorm_fused_launch<RN_PRE_COMBINE_AT>(qt, out, x, w, n, n_rows, eps, fd, site, f, s);
    else if (pre->kind == CUDA_PRE_COMBINE)
        rmsnorm_fused_launch<CUDA_PRE_COMBINE>(qt, out, x, w, n, n_rows, eps, fd, site, f, s);
    else
        rmsnorm_fused_launch<CUDA_PRE_NONE>(qt, out, x, w, n, n_rows, eps, fd, site, f, s);
    return cuda_launch_check("rmsnorm (fused)", err);
}
