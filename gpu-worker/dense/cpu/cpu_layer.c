/* The layer program of the CPU backend: one transformer block, for the n tokens of a batch, composed of the
 * layer's parts (core/model/parts.h; each kind's implementation in its own file, cpu_parts.h):
 *
 *   xn  = rmsnorm(x, attn_norm)
 *   x  += attention part (xn)        writes every row's K/V; only the kept rows go on
 *   xn  = rmsnorm(x, ffn_norm)
 *   x  += FFN part (xn)              a MoE FFN asks the router part for its experts
 */
#include <string.h>

#include "gpu-worker/dense/cpu/cpu_parts.h"

typedef struct norm_job {
    cpu_backend_t *b;
    const model_tensor_t *w;
} norm_job_t;

static void norm_task(void *ctx, int64_t t, int thread)
{
    norm_job_t *j = ctx;
    const int64_t E = j->b->cfg->n_embd;
    (void)thread;
    cpu_rmsnorm(j->b->xn + t * E, j->b->x + t * E, j->w->data, E, j->b->cfg->norm_eps);
}

void cpu_gather_rows(float *buf, int64_t width, const int32_t *keep, int32_t n_keep, float *scratch)
{
    for (int32_t j = 0; j < n_keep; j++)
        memcpy(scratch + j * width, buf + (int64_t)keep[j] * width, (size_t)width * sizeof *buf);
    memcpy(buf, scratch, (size_t)n_keep * (size_t)width * sizeof *buf);
}

int cpu_layer_forward(cpu_backend_t *b, int32_t il, int32_t n, const int32_t *keep, int32_t n_keep,
                      guild_err_t *err)
{
    const model_config_t *c = b->cfg;
    const model_layer_t *L = &b->w->layers[il];
    const model_layer_parts_t lp = model_layer_parts(c, il);

    norm_job_t j = {b, &L->attn_norm};
    guild_pool_run(b->pool, n, norm_task, &j);
    if (keep) /* x is read again only by the residual of the kept rows; proj is free until the part writes it */
        cpu_gather_rows(b->x, c->n_embd, keep, n_keep, b->proj);
    if (cpu_attn_parts[lp.attn->kind]->forward(b, lp.attn, il, n, keep, n_keep, err) < 0)
        return guild_err_prefix(err, "layer %d: ", il);
    if (keep)
        n = n_keep;
    if (n == 0)
        return 0;

    j.w = &L->ffn_norm;
    guild_pool_run(b->pool, n, norm_task, &j);
    if (cpu_ffn_parts[lp.ffn->kind]->forward(b, &lp, il, n, err) < 0)
        return guild_err_prefix(err, "layer %d: ", il);
    return 0;
}
