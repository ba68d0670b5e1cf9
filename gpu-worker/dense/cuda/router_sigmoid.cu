/* cuda_router_sigmoid_grouped: cpu_router_sigmoid_grouped, one warp per token: the gates and the selection
 * scores, each group's two best scores summed, n_group_used passes of a warp argmax over the groups, the experts
 * of the others masked to -INFINITY, k passes of a warp argmax over the scores (ties to the lowest id, as the
 * CPU's scans), the gates of the chosen as weights, optional renormalisation summed in slot order, scale. */
#include "gpu-worker/dense/cuda/cuda_common.cuh"
#include "gpu-worker/dense/cuda/router_groups.cuh"

#define SIGMOID_WARPS 4

static __global__ void sigmoid_kernel(const float *__restrict__ logits, const float *__restrict__ bias, int n_tok,
                                      int n_expert, int k, int n_groups, int n_group_used, bool renorm, float scale,
                                      int32_t *ids, float *w)
{
    extern __shared__ float sh[];
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int t = blockIdx.x * SIGMOID_WARPS + warp;
    if (t >= n_tok)
        return;
    const int G = n_groups > 1 ? n_groups : 0;
    float *gate = sh + (size_t)warp * (2 * n_expert + G), *sel = gate + n_expert, *gscore = sel + n_expert;
    const float *l = logits + (int64_t)t * n_expert;
    /* A NaN score (non-finite logits, which the non-finite check reports after the step) counts as -INFINITY so
     * that every slot still names a valid expert and the step runs to its end; NaN then marks a taken one. */
    for (int e = lane; e < n_expert; e += WARP_SIZE) {
        gate[e] = 1.0f / (1.0f + expf(-l[e]));
        const float v = bias ? gate[e] + bias[e] : gate[e];
        sel[e] = isnan(v) ? -INFINITY : v;
    }
    __syncwarp();
    if (G)
        warp_mask_groups(sel, n_expert, G, n_group_used, gscore, lane);
    float my_w = 0.0f;
    int my_id = 0;
    for (int s = 0; s < k; s++) {
        const int bi = warp_argmax(sel, n_expert, lane);
        if (lane == s) {
            my_id = bi;
            my_w = gate[bi];
        }
        __syncwarp();
        if (lane == 0)
            sel[bi] = NAN;
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

extern "C" int cuda_router_sigmoid_grouped(const float *logits, const float *bias, int32_t n_tok, int32_t n_expert,
                                           int32_t k, int32_t n_groups, int32_t n_group_used, bool renorm,
                                           float scale, int32_t *ids, float *w, cudaStream_t s, guild_err_t *err)
{
    if (n_tok <= 0)
        return 0;
    const int32_t G = n_groups > 1 ? n_groups : 0;
    if (router_shape_check(n_expert, k, G, n_group_used, err) < 0)
        return -1;
    const size_t smem = (size_t)SIGMOID_WARPS * (size_t)(2 * n_expert + G) * sizeof(float);
    sigmoid_kernel<<<(unsigned)((n_tok + SIGMOID_WARPS - 1) / SIGMOID_WARPS), SIGMOID_WARPS * WARP_SIZE, smem, s>>>(
        logits, bias, n_tok, n_expert, k, G, n_group_used, renorm, scale, ids, w);
    return cuda_launch_check("router sigmoid", err);
}
