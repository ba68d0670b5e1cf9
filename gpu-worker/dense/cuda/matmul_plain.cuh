/* gpu-worker/dense/cuda/matmul_plain.cuh — one warp's dot products of a plain (F32, F16, BF16) weight row with up
 * to NC float activation rows, core/quant/dot_ref.c's order: lane l accumulates elements l, l + 32, ... with fmaf,
 * then the warp folds its 32 lanes in the reference's tree order. cuda_matmul's (matmul.cu); the router that
 * computes its logits in its own launch (router.cu) makes the same operations in the same order with a lane's
 * elements loaded all at once (check_cuda_fused compares the two bit for bit). */
#ifndef GUILD_GPU_WORKER_CUDA_MATMUL_PLAIN_CUH
#define GUILD_GPU_WORKER_CUDA_MATMUL_PLAIN_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "gpu-worker/dense/cuda/cuda_common.cuh"

static __device__ __forceinline__ float plain_to_f32(float v)
{
    return v;
}

static __device__ __forceinline__ float plain_to_f32(__half v)
{
    return __half2float(v);
}

static __device__ __forceinline__ float plain_to_f32(__nv_bfloat16 v)
{
    return __bfloat162float(v);
}

/* acc[t] (lane 0's is the result) = weight row wr (n elements) . activation row t (act + t * act_stride bytes),
 * t < nt <= NC; acc[t] for t >= nt is 0. A lane loads U of its elements (and their activations) before it adds
 * them in order: the same fmaf chain, with U loads in flight instead of one (a row of a few thousand elements was
 * a chain of ~64 dependent L2 round trips a lane). */
template <typename WT, int NC>
static __device__ __forceinline__ void matmul_plain_row(const WT *wr, const char *act, size_t act_stride, int n,
                                                        int nt, int lane, float acc[NC])
{
    constexpr int U = NC <= 2 ? 8 : 4;
#pragma unroll
    for (int t = 0; t < NC; t++)
        acc[t] = 0.0f;
    int i0 = lane;
    for (; i0 + (U - 1) * WARP_SIZE < n; i0 += U * WARP_SIZE) {
        float wv[U], av[U][NC];
#pragma unroll
        for (int u = 0; u < U; u++) {
            wv[u] = plain_to_f32(wr[i0 + u * WARP_SIZE]);
#pragma unroll
            for (int t = 0; t < NC; t++)
                av[u][t] = t < nt ? ((const float *)(act + (size_t)t * act_stride))[i0 + u * WARP_SIZE] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int t = 0; t < NC; t++)
                if (t < nt)
                    acc[t] = fmaf(wv[u], av[u][t], acc[t]);
    }
    for (int i = i0; i < n; i += WARP_SIZE) {
        const float wv = plain_to_f32(wr[i]);
#pragma unroll
        for (int t = 0; t < NC; t++)
            if (t < nt)
                acc[t] = fmaf(wv, ((const float *)(act + (size_t)t * act_stride))[i], acc[t]);
    }
    /* acc[j] = acc[j] + acc[j + h], h = 16, 8, 4, 2, 1: lane j < h reads lane j + h. */
#pragma unroll
    for (int h = WARP_SIZE / 2; h >= 1; h /= 2)
#pragma unroll
        for (int t = 0; t < NC; t++)
            acc[t] = acc[t] + __shfl_down_sync(FULL_MASK, acc[t], h);
}

#endif
