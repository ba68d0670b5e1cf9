/* gpu-worker/dense/cuda/rmsnorm_row.cuh — what fixes the bits of a row's RMSNorm on the CUDA backend, shared by
 * cuda_rmsnorm (rmsnorm.cu) and the router that norms its own input (router.cu): the block's width, which fixes
 * the tree of the sum of squares (thread T sums elements T, T + threads, ... in double, each warp folds its 32
 * threads, thread 0 adds the warps' sums in order), and the non-finite check's report of an element. */
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
