/* cuda_moe_combine: the weighted sum of the routed experts' outputs in slot order, the shared expert (sigmoid-gated
 * or not), and the residual, with the CPU backend's operations in its order (combine_task in cpu_layer.c), one
 * element per thread (residual.cuh). */
#include "gpu-worker/dense/cuda/residual.cuh"

#define COMBINE_THREADS 256

static __global__ void combine_kernel(float *x, const float *__restrict__ y, const float *__restrict__ w,
                                      const float *__restrict__ sh, const float *__restrict__ sh_logit, int n_used,
                                      int64_t n_embd, int64_t total)
{
    pdl_begin();
    const int64_t k = (int64_t)blockIdx.x * COMBINE_THREADS + threadIdx.x;
    if (k >= total)
        return;
    x[k] = residual_combine(x[k], y, w, sh, sh_logit, n_used, n_embd, k / n_embd, k % n_embd);
}

extern "C" int cuda_moe_combine(float *x, const float *y, const float *w, const float *sh, const float *sh_logit,
                                int32_t n_tok, int32_t n_used, int64_t n_embd, cudaStream_t s, guild_err_t *err)
{
    const int64_t total = (int64_t)n_tok * n_embd;
    if (total <= 0)
        return 0;
    if (n_used < 1)
        return guild_err_set(err, "cuda: combine: %d experts per token", n_used);
    cuda_launch_pdl(combine_kernel, (unsigned)((total + COMBINE_THREADS - 1) / COMBINE_THREADS), COMBINE_THREADS, 0, s,
                    x, y, w, sh, sh_logit, n_used, n_embd, total);
    return cuda_launch_check("combine", err);
}
