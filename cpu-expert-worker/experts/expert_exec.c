#include "cpu-expert-worker/experts/expert_exec.h"

#include <stdlib.h>
#include <string.h>

#include "core/kern/pack.h"
#include "core/model/activation.h"
#include "core/quant/types.h"
#include "cpu-expert-worker/experts/expert_matmul.h"

/* Output rows per task: one task reads ROWS weight rows once for all tokens of its expert. */
#define GU_ROWS 32
#define DOWN_ROWS 32
_Static_assert(GU_ROWS % KERN_PACK_ROWS == 0 && DOWN_ROWS % KERN_PACK_ROWS == 0,
               "a task's rows start on a packed matrix's 16-row group");

struct expert_exec {
    const expert_shard_t *shard;
    guild_pool_t *pool;
    const model_config_t *cfg;
    model_expert_act_t act;

    /* scratch, grown to the largest batch seen; p = a pair's index in expert order */
    int64_t cap_pairs;
    int32_t *pair;     /* [cap_pairs] t * n_used + k of pair p */
    int32_t *count;    /* [n_expert] pairs per expert, then a cursor */
    int32_t *used;     /* [n_expert] experts with pairs, ascending */
    int32_t *start;    /* [n_expert + 1] first p of used[i] */
    char *xg;          /* [cap_pairs][gate act row] x[t] in gate's activation type */
    char *xu;          /* [cap_pairs][up act row] x[t] in up's activation type (when it differs) */
    float *g;          /* [cap_pairs][n_ff_exp] gate projection, then silu(gate) * up */
    float *u;          /* [cap_pairs][n_ff_exp] up projection */
    char *hq;          /* [cap_pairs][down act row] the hidden vector in down's activation type */
    float *out;        /* [cap_pairs][n_embd] expert outputs, pair order */
};

/* What one run needs, shared with the tasks. */
typedef struct run_job {
    expert_exec_t *e;
    int32_t layer;
    int32_t n_used_experts;
    const float *x;
    const int32_t *ids;
    float *y;
    guild_type_t gate_act, up_act, down_act;
    size_t xg_row, xu_row, hq_row; /* bytes */
    const expert_mats_t *any;      /* the layer's types and row sizes are the same for every expert */
} run_job_t;

int expert_exec_new(expert_exec_t **out, const expert_shard_t *shard, guild_pool_t *pool, guild_err_t *err)
{
    *out = NULL;
    const model_config_t *c = expert_shard_config(shard);
    expert_exec_t *e = calloc(1, sizeof *e);
    if (!e)
        return guild_err_set(err, "expert executor: out of memory");
    e->shard = shard;
    e->pool = pool;
    e->cfg = c;
    e->act = model_expert_act_of(c);
    e->count = calloc((size_t)c->n_expert, sizeof *e->count);
    e->used = calloc((size_t)c->n_expert, sizeof *e->used);
    e->start = calloc((size_t)c->n_expert + 1, sizeof *e->start);
    if (!e->count || !e->used || !e->start) {
        expert_exec_destroy(&e);
        return guild_err_set(err, "expert executor: out of memory");
    }
    *out = e;
    return 0;
}

static void free_scratch(expert_exec_t *e)
{
    free(e->pair);
    free(e->xg);
    free(e->xu);
    free(e->g);
    free(e->u);
    free(e->hq);
    free(e->out);
    e->pair = NULL;
    e->xg = e->xu = e->hq = NULL;
    e->g = e->u = e->out = NULL;
    e->cap_pairs = 0;
}

void expert_exec_destroy(expert_exec_t **ep)
{
    expert_exec_t *e = *ep;
    if (!e)
        return;
    free_scratch(e);
    free(e->count);
    free(e->used);
    free(e->start);
    free(e);
    *ep = NULL;
}

static size_t act_row(guild_type_t weight_type, int64_t n)
{
    uint64_t bytes = 0;
    int rc = quant_row_bytes(quant_type_info(weight_type)->dot_type, (uint64_t)n, &bytes, NULL);
    GUILD_ASSERT(rc == 0);
    return (size_t)bytes;
}

/* Room for n_pairs pairs; activation rows sized for the widest types (F32) so one allocation fits every layer. */
static int reserve(expert_exec_t *e, int64_t n_pairs, guild_err_t *err)
{
    if (n_pairs <= e->cap_pairs)
        return 0;
    free_scratch(e);
    const size_t P = (size_t)n_pairs, E = (size_t)e->cfg->n_embd, F = (size_t)e->cfg->n_ff_exp;
    e->pair = malloc(P * sizeof *e->pair);
    e->xg = malloc(P * E * sizeof(float));
    e->xu = malloc(P * E * sizeof(float));
    e->g = malloc(P * F * sizeof(float));
    e->u = malloc(P * F * sizeof(float));
    e->hq = malloc(P * F * sizeof(float));
    e->out = malloc(P * E * sizeof(float));
    if (!e->pair || !e->xg || !e->xu || !e->g || !e->u || !e->hq || !e->out) {
        free_scratch(e);
        return guild_err_set(err, "expert executor: out of memory for %lld (token, expert) pairs",
                             (long long)n_pairs);
    }
    e->cap_pairs = n_pairs;
    return 0;
}

static void quantize_x_task(void *ctx, int64_t p, int thread)
{
    run_job_t *j = ctx;
    expert_exec_t *e = j->e;
    const int64_t E = e->cfg->n_embd;
    const float *x = j->x + (int64_t)(e->pair[p] / e->cfg->n_expert_used) * E;
    (void)thread;
    expert_quantize(j->gate_act, x, e->xg + (size_t)p * j->xg_row, E);
    if (j->up_act != j->gate_act)
        expert_quantize(j->up_act, x, e->xu + (size_t)p * j->xu_row, E);
}

/* task = i * n_chunks + chunk: gate and up rows [r0, r0 + nr) of expert used[i] for all its pairs, then
 * silu(gate) * up into g. */
static void gate_up_task(void *ctx, int64_t task, int thread)
{
    run_job_t *j = ctx;
    expert_exec_t *e = j->e;
    const int64_t F = e->cfg->n_ff_exp, E = e->cfg->n_embd;
    const int64_t n_chunks = (F + GU_ROWS - 1) / GU_ROWS;
    const int32_t i = (int32_t)(task / n_chunks);
    const int64_t r0 = (task % n_chunks) * GU_ROWS, nr = F - r0 < GU_ROWS ? F - r0 : GU_ROWS;
    const int32_t p0 = e->start[i], np = e->start[i + 1] - p0;
    const expert_mats_t *m = expert_shard_get(e->shard, j->layer, e->used[i]);
    const char *xu = j->up_act != j->gate_act ? e->xu : e->xg;
    const size_t xu_row = j->up_act != j->gate_act ? j->xu_row : j->xg_row;
    (void)thread;
    /* GU_ROWS is a multiple of the packed layout's 16-row groups, and a packed matrix has a multiple of 16 rows */
    GUILD_ASSERT(!(m->gate_packed || m->up_packed) || r0 % KERN_PACK_ROWS == 0);
    expert_matmul(m->gate_type, m->gate_packed, E, nr, np, (const char *)m->gate + (size_t)r0 * m->gate_row,
                  m->gate_row, e->xg + (size_t)p0 * j->xg_row, j->xg_row, e->g + (size_t)p0 * (size_t)F + (size_t)r0,
                  (size_t)F);
    expert_matmul(m->up_type, m->up_packed, E, nr, np, (const char *)m->up + (size_t)r0 * m->up_row, m->up_row,
                  xu + (size_t)p0 * xu_row, xu_row, e->u + (size_t)p0 * (size_t)F + (size_t)r0, (size_t)F);
    for (int32_t p = p0; p < p0 + np; p++) {
        float *g = e->g + (size_t)p * (size_t)F;
        const float *u = e->u + (size_t)p * (size_t)F;
        if (m->gate_b)
            for (int64_t r = r0; r < r0 + nr; r++)
                g[r] = model_expert_act(&e->act, g[r] + m->gate_b[r], u[r] + m->up_b[r]);
        else
            for (int64_t r = r0; r < r0 + nr; r++)
                g[r] = model_expert_act(&e->act, g[r], u[r]);
    }
}

static void quantize_h_task(void *ctx, int64_t p, int thread)
{
    run_job_t *j = ctx;
    expert_exec_t *e = j->e;
    const int64_t F = e->cfg->n_ff_exp;
    (void)thread;
    expert_quantize(j->down_act, e->g + (size_t)p * (size_t)F, e->hq + (size_t)p * j->hq_row, F);
}

static void down_task(void *ctx, int64_t task, int thread)
{
    run_job_t *j = ctx;
    expert_exec_t *e = j->e;
    const int64_t F = e->cfg->n_ff_exp, E = e->cfg->n_embd;
    const int64_t n_chunks = (E + DOWN_ROWS - 1) / DOWN_ROWS;
    const int32_t i = (int32_t)(task / n_chunks);
    const int64_t r0 = (task % n_chunks) * DOWN_ROWS, nr = E - r0 < DOWN_ROWS ? E - r0 : DOWN_ROWS;
    const int32_t p0 = e->start[i], np = e->start[i + 1] - p0;
    const expert_mats_t *m = expert_shard_get(e->shard, j->layer, e->used[i]);
    (void)thread;
    GUILD_ASSERT(!m->down_packed || r0 % KERN_PACK_ROWS == 0);
    expert_matmul(m->down_type, m->down_packed, F, nr, np, (const char *)m->down + (size_t)r0 * m->down_row, m->down_row,
                  e->hq + (size_t)p0 * j->hq_row, j->hq_row, e->out + (size_t)p0 * (size_t)E + (size_t)r0,
                  (size_t)E);
}

static void scatter_task(void *ctx, int64_t p, int thread)
{
    run_job_t *j = ctx;
    expert_exec_t *e = j->e;
    const size_t E = (size_t)e->cfg->n_embd;
    (void)thread;
    float *y = j->y + (size_t)e->pair[p] * E;
    memcpy(y, e->out + (size_t)p * E, E * sizeof(float));
    const expert_mats_t *m = expert_shard_get(e->shard, j->layer, j->ids[e->pair[p]]);
    if (m->down_b)
        for (size_t r = 0; r < E; r++)
            y[r] += m->down_b[r];
}

int64_t expert_exec_run(expert_exec_t *e, int32_t layer, int32_t n_tokens, const float *x, const int32_t *ids,
                        float *y, guild_err_t *err)
{
    const model_config_t *c = e->cfg;
    const int32_t K = c->n_expert_used;
    if (layer < 0 || layer >= c->n_layer)
        return guild_err_set(err, "expert executor: layer %d is out of range (%d layers)", layer, c->n_layer);
    if (n_tokens <= 0)
        return 0;
    const int64_t n_all = (int64_t)n_tokens * K;
    for (int64_t q = 0; q < n_all; q++)
        if (ids[q] >= c->n_expert)
            return guild_err_set(err, "expert executor: layer %d token %lld slot %lld: expert id %d is out of range",
                                 layer, (long long)(q / K), (long long)(q % K), ids[q]);
    if (reserve(e, n_all, err) < 0)
        return -1;

    /* group owned pairs by expert (counting sort: stable, so tokens stay in order within an expert); a skipped
     * pair (id < 0, moe_exec.h) is owned by nobody here */
    memset(e->count, 0, (size_t)c->n_expert * sizeof *e->count);
    for (int64_t q = 0; q < n_all; q++)
        if (ids[q] >= 0 && expert_shard_get(e->shard, layer, ids[q]))
            e->count[ids[q]]++;
    int32_t n_used = 0, total = 0;
    for (int32_t ex = 0; ex < c->n_expert; ex++) {
        if (!e->count[ex])
            continue;
        e->used[n_used] = ex;
        e->start[n_used] = total;
        total += e->count[ex];
        e->count[ex] = e->start[n_used]; /* now the cursor */
        n_used++;
    }
    e->start[n_used] = total;
    if (total == 0)
        return 0;
    for (int64_t q = 0; q < n_all; q++)
        if (ids[q] >= 0 && expert_shard_get(e->shard, layer, ids[q]))
            e->pair[e->count[ids[q]]++] = (int32_t)q;

    const expert_mats_t *any = expert_shard_get(e->shard, layer, e->used[0]);
    run_job_t j = {
        .e = e,
        .layer = layer,
        .n_used_experts = n_used,
        .x = x,
        .ids = ids,
        .y = y,
        .gate_act = quant_type_info(any->gate_type)->dot_type,
        .up_act = quant_type_info(any->up_type)->dot_type,
        .down_act = quant_type_info(any->down_type)->dot_type,
        .xg_row = act_row(any->gate_type, c->n_embd),
        .xu_row = act_row(any->up_type, c->n_embd),
        .hq_row = act_row(any->down_type, c->n_ff_exp),
        .any = any,
    };
    const int64_t gu_chunks = (c->n_ff_exp + GU_ROWS - 1) / GU_ROWS;
    const int64_t down_chunks = (c->n_embd + DOWN_ROWS - 1) / DOWN_ROWS;
    guild_pool_run(e->pool, total, quantize_x_task, &j);
    guild_pool_run(e->pool, n_used * gu_chunks, gate_up_task, &j);
    guild_pool_run(e->pool, total, quantize_h_task, &j);
    guild_pool_run(e->pool, n_used * down_chunks, down_task, &j);
    guild_pool_run(e->pool, total, scatter_task, &j);
    return total;
}
