/* The layer program of the CPU backend: one transformer block, for the n tokens of a batch, composed of the
 * layer's parts (core/model/parts.h; each kind's implementation in its own file, cpu_parts.h):
 *
 *   xn  = rmsnorm(x, attn_norm)
 *   x  += attention part (xn)        writes every row's K/V; only the kept rows go on
 *   xn  = rmsnorm(x, ffn_norm)
 *   x  += FFN part (xn)              a MoE FFN asks the router part for its experts
 *
 * The norms are where the stream is checked for NaN and infinity (gpu-worker/dense/finite_check.h).
 */
#include <stdatomic.h>
#include <string.h>

#include "gpu-worker/dense/cpu/cpu_parts.h"

typedef struct norm_job {
    cpu_backend_t *b;
    const model_tensor_t *w;
    uint32_t site;           /* of the non-finite check (finite_check.h) */
    const int32_t *rows;     /* the batch row of each row (a narrowed batch); NULL: the same */
    _Atomic uint64_t found;  /* FINITE_NONE, or the smallest find's key */
} norm_job_t;

static void norm_task(void *ctx, int64_t t, int thread)
{
    norm_job_t *j = ctx;
    const int64_t E = j->b->cfg->n_embd;
    (void)thread;
    float *out = j->b->xn + t * E;
    const float *x = j->b->x + t * E;
    if (!j->b->check_finite) {
        cpu_rmsnorm(out, x, j->w->data, E, j->b->cfg->norm_eps);
        return;
    }
    uint64_t key = cpu_rmsnorm_checked(out, x, j->w->data, E, j->b->cfg->norm_eps);
    if (key == FINITE_NONE)
        return;
    key |= FINITE_KEY(j->site, 0, j->rows ? j->rows[t] : t, 0);
    uint64_t cur = atomic_load(&j->found);
    while (key < cur && !atomic_compare_exchange_weak(&j->found, &cur, key))
        ;
}

int cpu_norm_rows(cpu_backend_t *b, const model_tensor_t *w, int32_t n, uint32_t site, const int32_t *rows,
                  guild_err_t *err)
{
    norm_job_t j = {.b = b, .w = w, .site = site, .rows = rows, .found = FINITE_NONE};
    guild_pool_run(b->pool, n, norm_task, &j);
    const uint64_t found = atomic_load(&j.found);
    if (found == FINITE_NONE)
        return 0;
    /* the message counts positions from row 0's: the found row's position less its row */
    const int32_t row = (int32_t)((found >> 25) & (FINITE_MAX_ROWS - 1));
    return finite_report(found, b->cfg, b->tok_pos[row] - row, err);
}

void cpu_gather_rows(float *buf, int64_t width, const int32_t *keep, int32_t n_keep, float *scratch)
{
    for (int32_t j = 0; j < n_keep; j++)
        memcpy(scratch + j * width, buf + (int64_t)keep[j] * width, (size_t)width * sizeof *buf);
    memcpy(buf, scratch, (size_t)n_keep * (size_t)width * sizeof *buf);
}

void cpu_rows_where(cpu_backend_t *b, int32_t n, const int32_t *keep, int32_t n_keep)
{
    if (!keep)
        n_keep = n;
    for (int32_t t = 0; t < n_keep; t++) {
        const int32_t r = keep ? keep[t] : t;
        b->row_pos[t] = b->tok_pos[r];
        b->row_seq[t] = b->tok_seq[r];
    }
}

int cpu_layer_forward(cpu_backend_t *b, int32_t il, int32_t n, const int32_t *keep, int32_t n_keep,
                      guild_err_t *err)
{
    const model_config_t *c = b->cfg;
    const model_layer_t *L = model_block(b->w, il);
    const model_layer_parts_t lp = model_layer_parts(c, il);

    if (cpu_norm_rows(b, &L->attn_norm, n, 2 * (uint32_t)il, NULL, err) < 0)
        return -1;
    if (keep) /* x is read again only by the residual of the kept rows; proj is free until the part writes it */
        cpu_gather_rows(b->x, c->n_embd, keep, n_keep, b->proj);
    if (cpu_attn_parts[lp.attn->kind]->forward(b, lp.attn, il, n, keep, n_keep, err) < 0)
        return guild_err_prefix(err, "layer %d: ", il);
    if (keep)
        n = n_keep;
    if (n == 0)
        return 0;

    if (cpu_norm_rows(b, &L->ffn_norm, n, 2 * (uint32_t)il + 1, keep, err) < 0)
        return -1;
    if (cpu_ffn_parts[lp.ffn->kind]->forward(b, &lp, il, n, err) < 0)
        return guild_err_prefix(err, "layer %d: ", il);
    return 0;
}
