/* gpu-worker/dense/cuda/router_groups.cuh — llama.cpp's group-limited expert choice for the routers' warps
 * (one warp per token): the CPU's mask_groups (gpu-worker/dense/cpu/router.c) step for step, shared by the
 * sigmoid router and the softmax one (DeepSeek-V2's groups). */
#ifndef GUILD_CUDA_ROUTER_GROUPS_CUH
#define GUILD_CUDA_ROUTER_GROUPS_CUH

#include "gpu-worker/dense/cuda/cuda_common.cuh"

/* The best of v[0..n) whose value is not NaN (NaN marks what was taken), lowest index first on ties; every lane
 * gets it. n >= 1 with at least one candidate left. */
static __device__ int warp_argmax(const float *v, int n, int lane)
{
    float bv = -INFINITY;
    int bi = 0x7fffffff;
    for (int e = lane; e < n; e += WARP_SIZE)
        if (!isnan(v[e]) && (v[e] > bv || bi == 0x7fffffff)) {
            bv = v[e];
            bi = e;
        }
#pragma unroll
    for (int o = WARP_SIZE / 2; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(FULL_MASK, bv, o);
        const int oi = __shfl_xor_sync(FULL_MASK, bi, o);
        if (oi != 0x7fffffff && (bi == 0x7fffffff || ov > bv || (ov == bv && oi < bi))) {
            bv = ov;
            bi = oi;
        }
    }
    return bi;
}

/* sel[0..n_expert) in shared memory, G > 1 equal groups: a group's score is its two best sel summed (lowest
 * index first on ties), the n_group_used best groups (warp_argmax: lowest group first on ties) keep their experts,
 * the others' sel become -INFINITY. gscore: G floats of shared memory (NaN marks a kept group afterwards). */
static __device__ void warp_mask_groups(float *sel, int n_expert, int G, int n_group_used, float *gscore, int lane)
{
    const int per = n_expert / G;
    for (int g = lane; g < G; g += WARP_SIZE) {
        const float *v = sel + g * per;
        int b1 = 0;
        for (int e = 1; e < per; e++)
            if (v[e] > v[b1])
                b1 = e;
        int b2 = b1 == 0 ? 1 : 0;
        for (int e = 0; e < per; e++)
            if (e != b1 && v[e] > v[b2])
                b2 = e;
        gscore[g] = v[b1] + v[b2];
    }
    __syncwarp();
    for (int j = 0; j < n_group_used; j++) {
        const int best = warp_argmax(gscore, G, lane);
        __syncwarp();
        if (lane == 0)
            gscore[best] = NAN; /* kept */
        __syncwarp();
    }
    for (int e = lane; e < n_expert; e += WARP_SIZE)
        if (!isnan(gscore[e / per]))
            sel[e] = -INFINITY;
    __syncwarp();
}

/* Whether the routers' warps handle top-k of n_expert in G groups (0: none) of which n_group_used compete: 0, or
 * -1 with a message. */
static inline int router_shape_check(int32_t n_expert, int32_t k, int32_t G, int32_t n_group_used, guild_err_t *err)
{
    if (n_expert < 1 || n_expert > 1024 || k < 1 || k > WARP_SIZE || k > n_expert ||
        (G && (n_expert % G || n_expert / G < 2 || n_group_used < 1 || n_group_used > G ||
               (int64_t)n_group_used * (n_expert / G) < k)))
        return guild_err_set(err, "cuda: router: top-%d of %d experts in %d groups (%d used) is outside what the "
                             "kernel handles (<= 1024 experts, k <= 32, equal groups of >= 2 holding k)", k, n_expert,
                             G, n_group_used);
    return 0;
}

#endif
