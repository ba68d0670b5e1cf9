/* The dense FFN (MODEL_FFN_DENSE) on the CUDA backend (gpu-worker/dense/cpu/ffn_dense.c step for step):
 * h = silu(ffn_gate xn) * (ffn_up xn); x += ffn_down h. */
#include "gpu-worker/dense/cuda/cuda_kernels.h"
#include "gpu-worker/dense/cuda/cuda_parts.h"

static int dense_forward(cuda_backend_t *b, const model_layer_parts_t *lp, int32_t il, int32_t n, guild_err_t *err)
{
    const model_config_t *c = b->cfg;
    const cuda_layer_t *L = &b->layers[il];
    const int64_t E = c->n_embd, F = c->n_ff;
    (void)lp;
    if (cuda_linear(b, &L->ffn_gate, b->xn, E, n, b->sh_gate, F, false, err) < 0 ||
        cuda_linear(b, &L->ffn_up, b->xn, E, n, b->sh_up, F, true, err) < 0 ||
        cuda_swiglu(b->sh_gate, b->sh_up, (int64_t)n * F, b->stream, err) < 0 ||
        cuda_linear(b, &L->ffn_down, b->sh_gate, F, n, b->proj, E, false, err) < 0 ||
        cuda_residual_add(b, b->proj, n, err) < 0)
        return -1;
    return 0;
}

const cuda_ffn_part_t cuda_ffn_dense = {
    .opts = 0,
    .forward = dense_forward,
};
