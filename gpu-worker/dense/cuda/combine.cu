/* cuda_moe_combine: the weighted sum of the routed experts' outputs in slot order, the shared expert (sigmoid-gated
 * or not), and the residual, with the CPU backend's operations in its order (combine_task in cpu_layer.c), one
 * element per thread (residual.cuh). cuda_moe_combine_at reads the rows where a kernel before left their address (the
 * MoE exchange's wait: the slot the CPU workers wrote), with volatile loads. */
#include "gpu-worker/dense/cuda/residual.cuh"

#define COMBINE_THREADS 256

/* AT: y is read from *y_at, the address a kernel before left there (the MoE exchange's slot: host rows). */
template <bool AT>
static __global__ void combine_kernel(float *x, const float *__restrict__ y, const float *const *y_at,
                                      const float *__restrict__ w, const float *__restrict__ sh,
                                      const float *__restrict__ sh_logit, int n_used, int64_t n_embd, int64_t total)
{
    pdl_begin();
    const int64_t k = (int64_t)blockIdx.x * COMBINE_THREADS + threadIdx.x;
    if (k >= total)
        return;
    if constexpr (AT)
        y = *y_at;
    x[k] = residual_combine<AT>(x[k], y, w, sh, sh_logit, n_used, n_embd, k / n_embd, k % n_embd);
}

static int combine_launch(float *x, const float *y, const float *const *y_at, const float *w, const float *sh,
                          const float *sh_logit, int32_t n_tok, int32_t n_used, int64_t n_embd, cudaStream_t s,
                          guild_err_t *err)
{
    const int64_t total = (int64_t)n_tok * n_embd;
    if (total <= 0)
        return 0;
    if (n_used < 1)
        return guild_err_set(err, "cuda: combine: %d experts per token", n_used);
    const unsigned blocks = (unsigned)((total + COMBINE_THREADS - 1) / COMBINE_THREADS);
    if (y_at)
        cuda_launch_pdl(combine_kernel<true>, blocks, COMBINE_THREADS, 0, s, x, (const float *)NULL, y_at, w, sh,
                        sh_logit, n_used, n_embd, total);
    else
        cuda_launch_pdl(combine_kernel<false>, blocks, COMBINE_THREADS, 0, s, x, y, (const float *const *)NULL, w,
                        sh, sh_logit, n_used, n_embd, total);
    return cuda_launch_check("combine", err);
}

extern "C" int cuda_moe_combine(float *x, const float *y, const float *w, const float *sh, const float *sh_logit,
                                int32_t n_tok, int32_t n_used, int64_t n_embd, cudaStream_t s, guild_err_t *err)
{
    return combine_launch(x, y, NULL, w, sh, sh_logit, n_tok, n_used, n_embd, s, err);
}

extern "C" int cuda_moe_combine_pre(float *x, const cuda_norm_pre_t *pre, int32_t n_tok, int64_t n_embd,
                                    cudaStream_t s, guild_err_t *err)
{
    return pre->y_at ? cuda_moe_combine_at(x, pre->y_at, pre->w, pre->sh, pre->sh_logit, n_tok, pre->n_used, n_embd,
                                           s, err)
                     : combine_launch(x, pre->y, NULL, pre->w, pre->sh, pre->sh_logit, n_tok, pre->n_used, n_embd, s,
                                      err);
}

extern "C" int cuda_moe_combine_at(float *x, const float *const *y_at, const float *w, const float *sh,
                                   const float *sh_logit, int32_t n_tok, int32_t n_used, int64_t n_embd,
                                   cudaStream_t s, guild_err_t *err)
{
    if (!y_at)
        return guild_err_set(err, "cuda: combine: no word to read the rows' address from");
    return combine_launch(x, NULL, y_at, w, sh, sh_logit, n_tok, n_used, n_embd, s, err);
}
