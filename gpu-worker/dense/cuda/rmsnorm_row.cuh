/* gpu-worker/dense/cuda/rmsnorm_row.cuh — what fixes the bits of a row's RMSNorm on the CUDA backend, shared by
 * cuda_rmsnorm (rmsnorm.cu), the router that norms its own input (router.cu) and the per-head norms of
 * cuda_qk_prepare (qk_prepare.cu): the block's width, which fixes the tree of the sum of squares (thread T sums
 * elements T, T + threads, ... in double, each warp folds its 32 threads, thread 0 adds the warps' sums in order:
 * rmsnorm_scale), and the non-finite check's report of an element. */
#ifndef GUILD_GPU_WORKER_CUDA_RMSNORM_ROW_CUH
#define GUILD_GPU_WORKER_CUDA_RMSNORM_ROW_CUH

#include "gpu-worker/dense/cuda/cuda_common.cuh"
#include "gpu-worker/dense/finite_check.h"

#define RN_MAX_THREADS 256

#define RN_PER 8 /* elements a thread keeps in registers (rows up to RN_PER * RN_MAX_THREADS) */

/* The threads of a row of n elements' block: whole warps, at most RN_MAX_THREADS. */
static inline int rmsnorm_threads(int64_t n)
{
    const int threads = (int)((n + WARP_SIZE - 1) / WARP_SIZE) * WARP_SIZE;
    return threads > RN_MAX_THREADS ? RN_MAX_THREADS : threads;
}

/* The row's scale from its warps' sums partial[0 .. n_warps) (each warp's threads' sums folded by warp_sum_f64):
 * added in warp order from 0.0, the mean rounded to float, 1 / sqrt(mean + eps). Every kernel that norms a row as
 * cuda_rmsnorm does ends its reduction here, so its bits are cuda_rmsnorm's. */
static __device__ __forceinline__ float rmsnorm_scale(const double *partial, int n_warps, int n, float eps)
{
    double total = 0;
    for (int k = 0; k < n_warps; k++)
        total += partial[k];
    const float mean = (float)(total / (double)n);
    return 1.0f / sqrtf(mean + eps);
}

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

#endif
