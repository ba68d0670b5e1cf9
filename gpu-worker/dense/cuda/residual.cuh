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

/* The combine of an element, in three steps: acc = w[0] * y[0] (slot 0); acc = acc + w[s] * y[s] for slots
 * s = 1 .. n_used-1 in order; then the shared expert's term and the residual (combine_end). */
static __device__ __forceinline__ float combine_first(float w0, float y0)
{
    return w0 * y0;
}

static __device__ __forceinline__ float combine_next(float acc, float ws, float ys)
{
    return acc + ws * ys;
}

/* acc + sh[k] * sigmoid(sh_logit[t]) (gated shared expert), acc + sh[k] (ungated) or acc; then + xk. */
static __device__ __forceinline__ float combine_end(float acc, const float *__restrict__ sh,
                                                    const float *__restrict__ sh_logit, int64_t t, int64_t k, float xk)
{
    if (sh && sh_logit) {
        const float gate = 1.0f / (1.0f + expf(-sh_logit[t]));
        acc = acc + sh[k] * gate;
    } else if (sh) {
        acc = acc + sh[k];
    }
    return acc + xk;
}

/* An expert's output element: from device memory, or (HOST) from the rows the CPU workers wrote into the MoE
 * exchange's slot (mapped host memory) with a volatile load, so that no line an earlier exchange in that slot left
 * in the device's caches is read. The same value either way. */
template <bool HOST>
static __device__ __forceinline__ float combine_y(const float *p)
{
    if constexpr (HOST)
        return __ldcv(p);
    else
        return *p;
}

/* The combine of element i of token t (x[t][i] = xk): the weighted sum of the n_used routed experts' outputs
 * y[t][s][i] in slot order, the shared expert sh[t][i] (times sigmoid(sh_logit[t]) when gated), then + x. */
template <bool HOST = false>
static __device__ __forceinline__ float residual_combine(float xk, const float *__restrict__ y,
                                                         const float *__restrict__ w, const float *__restrict__ sh,
                                                         const float *__restrict__ sh_logit, int n_used,
                                                         int64_t n_embd, int64_t t, int64_t i)
{
    const float *wt = w + t * n_used;
    const float *yt = y + t * n_used * n_embd + i;
    float acc = combine_first(wt[0], combine_y<HOST>(yt));
    for (int s = 1; s < n_used; s++)
        acc = combine_next(acc, wt[s], combine_y<HOST>(yt + s * n_embd));
    return combine_end(acc, sh, sh_logit, t, t * n_embd + i, xk);
}

#endif
