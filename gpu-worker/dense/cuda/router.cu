/* cuda_router_topk: cpu_router_softmax_grouped, one warp per token: softmax (sum in double), with expert groups
 * the experts of all but the best groups masked (router_groups.cuh), k passes of a warp argmax (ties to the lowest
 * expert id, as the CPU's scan), optional renormalisation summed in slot order, scale. */
#include "gpu-worker/dense/cuda/cuda_common.cuh"
#include "gpu-worker/dense/cuda/router_groups.cuh"

#define ROUTER_WARPS 4

static __global__ void router_kernel(const float *__restrict__ logits, int n_tok, int n_expert, int k, int G,
                                     int n_group_used, bool renorm, float scale, int32_t *ids, float *w)
{
    extern __shared__ float probs_sh[];
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int t = blockIdx.x * ROUTER_WARPS + warp;
    if (t >= n_tok)
        return;
    float *p = probs_sh + (size_t)warp * (n_expert + G);
    const float *l = logits + (int64_t)t * n_expert;

    float mx = -INFINITY;
    for (int e = lane; e < n_expert; e += WARP_SIZE)
        mx = fmaxf(mx, l[e]);
    mx = warp_max_f32(mx);
    double sum = 0;
    for (int e = lane; e < n_expert; e += WARP_SIZE) {
        const float pe = expf(l[e] - mx);
        p[e] = pe;
        sum += pe;
    }
    sum = warp_sum_f64(sum);
    const float inv = (float)(1.0 / sum);
    for (int e = lane; e < n_expert; e += WARP_SIZE)
        p[e] = p[e] * inv;
    __syncwarp();
    if (G) /* masked experts are -INFINITY: below a taken one (-1), never chosen */
        warp_mask_groups(p, n_expert, G, n_group_used, p + n_expert, lane);

    /* Slot s ends in lane s. Probabilities are >= 0, so -1 marks an expert already taken. A NaN (non-finite
     * logits, which the non-finite check reports after the step) counts as -0.5: below every probability, above
     * a taken expert, so that every slot still names a valid expert and the step runs to its end. */
    float my_w = 0.0f;
    int my_id = 0;
    for (int s = 0; s < k; s++) {
        float bv = -1.0f;
        int bi = 0x7fffffff;
        for (int e = lane; e < n_expert; e += WARP_SIZE) {
            const float pe = isnan(p[e]) ? -0.5f : p[e];
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
        if (lane == s) {
            my_w = bv;
            my_id = bi;
        }
        if (lane == bi % WARP_SIZE)
            p[bi] = -1.0f;
        __syncwarp();
    }
    if (renorm) {
        float wsum = 0.0f;
        for (int s = 0; s < k; s++)
            wsum = wsum + __shfl_sync(FULL_MASK, my_w, s);
        if (wsum < 6.103515625e-5f)
            wsum = 6.103515625e-5f;
        my_w = my_w / wsum;
    }
    if (scale != 0.0f && scale != 1.0f)
        my_w = my_w * scale;
    if (lane < k) {
        ids[(int64_t)t * k + lane] = my_id;
        w[(int64_t)t * k + lane] = my_w;
    }
}

extern "C" int cuda_router_topk(const float *logits, int32_t n_tok, int32_t n_expert, int32_t k, int32_t n_groups,
                                int32_t n_group_used, bool renorm, float scale, int32_t *ids, float *w, cudaStream_t s,
                                guild_err_t *err)
{
    if (n_tok <= 0)
        return 0;
    const int32_t G = n_groups > 1 ? n_groups : 0;
    if (router_shape_check(n_expert, k, G, n_group_used, err) < 0)
        return -1;
    const size_t smem = (size_t)ROUTER_WARPS * (size_t)(n_expert + G) * sizeof(float);
    router_kernel<<<(unsigned)((n_tok + ROUTER_WARPS - 1) / ROUTER_WARPS), ROUTER_WARPS * WARP_SIZE, smem, s>>>(
        logits, n_tok, n_expert, k, G, n_group_used, renorm, scale, ids, w);
    return cuda_launch_check("router", err);
}
