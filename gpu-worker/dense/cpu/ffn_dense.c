/* The dense FFN (MODEL_FFN_DENSE) on the CPU backend, for the n rows of a batch:
 *
 *   h  = silu(ffn_gate xn) * (ffn_up xn)
 *   x += ffn_down h                       (x[i] = out[i] + x[i])
 */
#include "core/model/activation.h"
#include "gpu-worker/dense/cpu/cpu_matmul.h"
#include "gpu-worker/dense/cpu/cpu_parts.h"

static void swiglu_task(void *ctx, int64_t t, int thread)
{
    cpu_backend_t *b = ctx;
    const int64_t F = b->cfg->n_ff;
    float *g = b->sh_gate + t * F;
    const float *u = b->sh_up + t * F;
    (void)thread;
    for (int64_t i = 0; i < F; i++)
        g[i] = model_silu(g[i]) * u[i];
}

static void residual_task(void *ctx, int64_t t, int thread)
{
    cpu_backend_t *b = ctx;
    const int64_t E = b->cfg->n_embd;
    float *x = b->x + t * E;
    const float *o = b->proj + t * E;
    (void)thread;
    for (int64_t i = 0; i < E; i++)
        x[i] = o[i] + x[i];
}

static int dense_forward(cpu_backend_t *b, const model_layer_parts_t *lp, int32_t il, int32_t n, guild_err_t *err)
{
    const model_config_t *c = b->cfg;
    const model_layer_t *L = model_block(b->w, il);
    const int64_t E = c->n_embd, F = c->n_ff;
    guild_pool_t *pool = b->pool;
    (void)lp;
    (void)err;
    cpu_linear(pool, &L->ffn_gate, 0, F, n, b->xn, E, b->sh_gate, F, b->act);
    cpu_linear(pool, &L->ffn_up, 0, F, n, b->xn, E, b->sh_up, F, b->act);
    guild_pool_run(pool, n, swiglu_task, b);
    cpu_linear(pool, &L->ffn_down, 0, E, n, b->sh_gate, F, b->proj, E, b->act);
    guild_pool_run(pool, n, residual_task, b);
    return 0;
}

const cpu_ffn_part_t cpu_ffn_dense = {
    .opts = 0,
    .forward = dense_forward,
};
