/* cuda_router_topk_logits: cpu_router_topk_logits (gpt-oss's router), one warp per token: the logits plus the
 * bias into shared memory, k passes of a warp argmax (ties to the lowest expert id, as the CPU's scan), then the
 * softmax of the k chosen logits (the sum in double in slot order, as the CPU), scale. */
#include "gpu-worker/dense/cuda/cuda_common.cuh"

#define ROUTER_WARPS 4

static __global__ void router_topk_logits_kernel(const float *__restrict__ logits, const float *__restrict__ bias,
                                                 int n_tok, int n_expert, int k, float scale, int32_t *ids, float *w)
{
    extern __shared__ float biased_sh[];
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int t = blockIdx.x * ROUTER_WARPS + warp;
    if (t >= n_tok)
        return;
    float *p = biased_sh + warp * n_expert;
    const float *l = logits + (int64_t)t * n_expert;
    for (int e = lane; e < n_expert; e += WARP_SIZE)
        p[e] = bias ? l[e] + bias[e] : l[e];
    __syncwarp();

    /* Slot s ends in lane s. A taken expert is marked -inf; a NaN (non-finite logits, which the non-finite check
     * reports after the step) counts as -FLT_MAX, above a taken expert, so that every slot names a valid expert
     * and the step runs to its end. */
    float my_v = -INFINITY;
    int my_id = 0;
    for (int s = 0; s < k; s++) {
        float bv = -INFINITY;
        int bi = 0x7fffffff;
        for (int e = lane; e < n_expert; e += WARP_SIZE) {
            const float pe = isnan(p[e]) ? -3.402823466e38f : p[e];
            if (pe > bv) {
                bv = pe;
                bi = e;
            }
        }
#pragma unroll
        for (int o = WARP_SIZE / 2; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(FULL_MASK, bv, o);
            const int oi = __shfl_xor_sync(FULL_MASK, bi, o);
            if (ov > bv || (ov == bv && oi < bi)) {
                bv = ov;
                bi = oi;
            }
        }
        if (bi == 0x7fffffff)
            bi = s; /* every logit -inf: a valid id all the same */
        if (lane == s) {
            my_v = bv;
            my_id = bi;
        }
        if (lane == bi % WARP_SIZE)
            p[bi] = -INFINITY;
        __syncwarp();
    }
    /* softmax of the k chosen: max, exponentials, sum in double in slot order, (float)(1 / sum) */
    float mx = -INFINITY;
    for (int s = 0; s < k; s++)
        mx = fmaxf(mx, __shfl_sync(FULL_MASK, my_v, s));
    const float my_e = lane < k ? expf(my_v - mx) : 0.0f;
    double sum = 0;
    for (int s = 0; s < k; s++)
        sum += __shfl_sync(FULL_MASK, my_e, s);
    const float inv = (float)(1.0 / sum);
    float my_w = my_e * inv;
    if (scale != 0.0f && scale != 1.0f)
        my_w = my_w * scale;
    if (lane < k) {
        ids[(int64_t)t * k + lane] = my_id;
        w[(int64_t)t * k + lane] = my_w;
    }
}

extern "C" int cuda_router_topk_logits(const float *logits, const float *bias, int32_t n_tok, int32_t n_expert,
                                       int32_t k, float scale, int32_t *ids, float *w, cudaStream_t s,
                                       guild_err_t *err)
{
    if (n_tok <= 0)
        return 0;
    if (n_expert < 1 || n_expert > 1024 || k < 1 || k > WARP_SIZE || k > n_expert)
        return guild_err_set(err, "cuda: router: top-%d of %d experts is outside what the kernel handles (<= 1024 "
                             "experts, k <= 32)", k, n_expert);
    const size_t smem = (size_t)ROUTER_WARPS * (size_t)n_expert * sizeof(float);
    router_topk_logits_kernel<<<(unsigned)((n_tok + ROUTER_WARPS - 1) / ROUTER_WARPS), ROUTER_WARPS * WARP_SIZE, smem,
                                s>>>(logits, bias, n_tok, n_expert, k, scale, ids, w);
    return cuda_launch_check("router (top-k logits)", err);
}
