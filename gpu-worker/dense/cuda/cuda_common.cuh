/* gpu-worker/dense/cuda/cuda_common.cuh — what every kernel file of the CUDA backend shares: the C headers it may
 * include from C++, the launch check of the entry points, and warp/block reductions.
 *
 * Numerics: the kernels are compiled with --fmad=false (see gpu-worker/dense/cuda/module.am), so a*b+c is two
 * rounded operations exactly as in the CPU backend (built with -ffp-contract=off); a kernel that wants a fused
 * multiply-add writes fmaf(). Division and sqrtf are IEEE (nvcc's defaults, never --use_fast_math).
 */
#ifndef GUILD_GPU_WORKER_CUDA_COMMON_CUH
#define GUILD_GPU_WORKER_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "core/quant/fp16.h"
#include "gpu-worker/dense/cuda/cuda_kernels.h" /* also core/util/err.h, wrapped for C++ */

#define WARP_SIZE 32
#define FULL_MASK 0xffffffffu

/* The tail of every entry point: the launch's own error (bad configuration, no device) with the op named.
 * Errors of earlier asynchronous work also surface here; they are sticky, so the caller stops anyway. */
static inline int cuda_launch_check(const char *op, guild_err_t *err)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return guild_err_set(err, "cuda: %s: %s (%s)", op, cudaGetErrorString(e), cudaGetErrorName(e));
    return 0;
}

/* Sum over the warp, result in every lane; integers are exact in any order. */
static __device__ __forceinline__ int warp_sum_int(int v)
{
#pragma unroll
    for (int o = WARP_SIZE / 2; o > 0; o >>= 1)
        v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

static __device__ __forceinline__ float warp_sum_f32(float v)
{
#pragma unroll
    for (int o = WARP_SIZE / 2; o > 0; o >>= 1)
        v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

static __device__ __forceinline__ double warp_sum_f64(double v)
{
#pragma unroll
    for (int o = WARP_SIZE / 2; o > 0; o >>= 1)
        v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

static __device__ __forceinline__ float warp_max_f32(float v)
{
#pragma unroll
    for (int o = WARP_SIZE / 2; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, o));
    return v;
}

/* Integer sum over groups of G consecutive lanes (G a power of two <= 32), result in every lane of a group. */
template <int G>
static __device__ __forceinline__ int group_sum_int(int v)
{
#pragma unroll
    for (int o = G / 2; o > 0; o >>= 1)
        v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

#endif
