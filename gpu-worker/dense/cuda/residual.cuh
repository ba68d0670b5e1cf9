/* gpu-worker/dense/cuda/residual.cuh — the residual stream's updates, one element at a time: the residual
 * addition (cuda_add, add.cu) and the MoE combine (cuda_moe_combine, combine.cu), shared with the norm that
 * applies them before it norms the row (rmsnorm.cu): one body, so both give the same bits. */
#ifndef GUILD_GPU_WORKER_CUDA_RESIDUAL_CUH
#define GUILD_GPU_WORKER_CUDA_RESIDUAL_CUH

#include "gpu-worker/dense/cuda/cuda_common.cuh"

/* x + p, the CPU backend's order (p + x). */
static __device__ __forceinline__ float residual_add(float xk, float pk)
{
    return pk + xk;
}

/* The combine of element i of token t (x[t][i] = xk): the weighted sum of the n_used routed experts' outputs
 * y[t][s][i] in slot order, the shared expert sh[t][i] (times sigmoid(sh_logit[t]) when gated), then + x. */
static __device__ __forceinline__ float residual_combine(float xk, const float *__restrict__ y,
                                                         const float *__restrict__ w, const float *__restrict__ sh,
                                                         const float *__restrict__ sh_logit, int n_used,
                                                         int64_t n_embd, int64_t t, int64_t i)
{
    const float *wt = w + t * n_used;
    const float *yt = y + t * n_used * n_embd + i;
    float acc = wt[0] * yt[0];
    for (int s = 1; s < n_used; s++)
        acc = acc + wt[s] * yt[s * n_embd];
    if (sh && sh_logit) {
        const float gate = 1.0f / (1.0f + expf(-sh_logit[t]));
        acc = acc + sh[t * n_embd + i] * gate;
    } else if (sh) {
        acc = acc + sh[t * n_embd + i];
    }
    return acc + xk;
}

#endif
