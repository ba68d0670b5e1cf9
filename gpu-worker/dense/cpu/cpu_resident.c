/* The cpu backend's resident experts and routing counts (contract in cpu_resident.h). A pair is computed as the
 * experts library computes it (cpu-expert-worker/experts/expert_exec.c): x quantized to each matrix's dot type,
 * gate and up products (+ their biases), h = silu(gate) * up (or the model's activation), h quantized to down's
 * dot type, the down product (+ its bias); every output element is the kernels' fixed-order sum, whatever the
 * rows or tokens a call takes, so the bits are the CPU workers'. One task per pair: the stand-in is for tests
 * and small resident sets, not for speed. */
#include "gpu-worker/dense/cpu/cpu_resident.h"

#include <stdlib.h>
#include <string.h>

#include "core/kern/kern.h"
#include "core/model/activation.h"
#include "core/quant/quant.h"

typedef struct cpu_resident {
    moe_exec_t base;
    moe_exec_t *inner;
    const model_config_t *c;
    const model_weights_t *w;
    guild_pool_t *pool;
    uint8_t *resident;   /* [n_layer * n_expert], NULL: none */
    uint8_t *any;        /* [n_layer]: the layer has a resident expert */
    uint8_t *all;        /* [n_layer]: every expert of the layer is resident (no CPU worker computes one) */
    int32_t *hint;       /* [hint_cap] a prefetch hint's ids, resident experts masked */
    size_t hint_cap;
    uint64_t *counts;    /* [n_layer * n_expert] routed pairs */
    uint64_t routed, served;
    int32_t *ids;        /* [cap] the executor's ids: resident pairs masked */
    int32_t *pairs;      /* [cap] the pairs computed here */
    float *y;            /* [cap][n_embd] the batch's outputs: this side's rows, then the executor's */
    size_t cap;
    int32_t n;           /* tokens of the batch in flight */
    int64_t np;          /* its pairs computed here (0: the executor's y is the batch's) */
    int nt;              /* pool threads: per-thread scratch below */
    size_t xrow, hrow;   /* bytes of the widest quantized x and h rows */
    char *xq, *xq2, *hq; /* [nt][xrow], [nt][xrow], [nt][hrow] */
    float *g, *u;        /* [nt][n_ff_exp] */
} cpu_resident_t;

typedef struct job {
    cpu_resident_t *r;
    int32_t layer;
    const float *x;
    const int32_t *ids; /* the batch's, unmasked */
    float *y;
} job_t;

static size_t act_row(guild_type_t type, int64_t n)
{
    uint64_t b = 0;
    if (quant_row_bytes(quant_type_info(type)->dot_type, (uint64_t)n, &b, NULL) < 0)
        return 0;
    return (size_t)b;
}

static void pair_task(void *ctx, int64_t i, int thread)
{
    job_t *j = ctx;
    cpu_resident_t *r = j->r;
    const model_layer_t *L = &r->w->layers[j->layer];
    const int64_t E = r->c->n_embd, F = r->c->n_ff_exp, K = r->c->n_expert_used;
    const int32_t p = r->pairs[i], e = j->ids[p];
    const float *x = j->x + (p / K) * E;
    char *xg = r->xq + (size_t)thread * r->xrow, *xu = r->xq2 + (size_t)thread * r->xrow;
    char *hq = r->hq + (size_t)thread * r->hrow;
    float *g = r->g + (size_t)thread * (size_t)F, *u = r->u + (size_t)thread * (size_t)F;
    const guild_type_t ga = quant_type_info(L->gate_exps.type)->dot_type, ua = quant_type_info(L->up_exps.type)->dot_type;
    const guild_type_t da = quant_type_info(L->down_exps.type)->dot_type;
    kern_quantize(ga, x, xg, E);
    if (ua != ga)
        kern_quantize(ua, x, xu, E);
    else
        xu = xg;
    kern_matmul(L->gate_exps.type, E, F, 1, model_tensor_row(&L->gate_exps, e, 0), L->gate_exps.row_bytes, xg,
                r->xrow, g, (size_t)F);
    kern_matmul(L->up_exps.type, E, F, 1, model_tensor_row(&L->up_exps, e, 0), L->up_exps.row_bytes, xu, r->xrow,
                u, (size_t)F);
    const model_expert_act_t act = model_expert_act_of(r->c);
    if (L->gate_exps_b.data) {
        const float *gb = model_tensor_row(&L->gate_exps_b, e, 0), *ub = model_tensor_row(&L->up_exps_b, e, 0);
        for (int64_t k = 0; k < F; k++)
            g[k] = model_expert_act(&act, g[k] + gb[k], u[k] + ub[k]);
    } else {
        for (int64_t k = 0; k < F; k++)
            g[k] = model_expert_act(&act, g[k], u[k]);
    }
    kern_quantize(da, g, hq, F);
    float *y = j->y + (size_t)p * (size_t)E;
    kern_matmul(L->down_exps.type, F, E, 1, model_tensor_row(&L->down_exps, e, 0), L->down_exps.row_bytes, hq,
                r->hrow, y, (size_t)E);
    if (L->down_exps_b.data) {
        const float *db = model_tensor_row(&L->down_exps_b, e, 0);
        for (int64_t k = 0; k < E; k++)
            y[k] += db[k];
    }
}

/* A host executor's submit: counts, then hands the executor the batch with this side's pairs as skip slots and
 * computes them meanwhile (the CPU workers work on theirs at the same time). */
static int resident_submit(moe_exec_t *base, int32_t layer, int32_t n, const float *x, const int32_t *ids,
                           void *queue, guild_err_t *err)
{
    cpu_resident_t *r = (cpu_resident_t *)base;
    const int32_t N = r->c->n_expert;
    const size_t P = (size_t)(n > 0 ? n : 0) * (size_t)r->c->n_expert_used;
    r->np = 0;
    r->n = n;
    if (layer < 0 || layer >= r->c->n_layer)
        return moe_exec_submit(r->inner, layer, n, x, ids, queue, err);
    uint64_t *cnt = r->counts + (size_t)layer * (size_t)N;
    for (size_t q = 0; q < P; q++)
        if (ids[q] >= 0 && ids[q] < N) {
            cnt[ids[q]]++;
            r->routed++;
        }
    if (!r->resident || !r->any[layer])
        return moe_exec_submit(r->inner, layer, n, x, ids, queue, err);
    if (P > r->cap) {
        int32_t *a = realloc(r->ids, P * sizeof *a);
        if (a)
            r->ids = a;
        int32_t *b = a ? realloc(r->pairs, P * sizeof *b) : NULL;
        if (b)
            r->pairs = b;
        float *y = b ? realloc(r->y, P * (size_t)r->c->n_embd * sizeof *y) : NULL;
        if (!y)
            return guild_err_set(err, "resident experts: out of memory for %zu pairs", P);
        r->y = y;
        r->cap = P;
    }
    const uint8_t *res = r->resident + (size_t)layer * (size_t)N;
    int64_t np = 0;
    for (size_t q = 0; q < P; q++) {
        const bool mine = ids[q] >= 0 && ids[q] < N && res[ids[q]];
        r->ids[q] = mine ? -1 : ids[q]; /* a skip slot for the executor */
        if (mine)
            r->pairs[np++] = (int32_t)q;
    }
    if (moe_exec_submit(r->inner, layer, n, x, r->ids, queue, err) < 0)
        return -1;
    job_t j = {r, layer, x, ids, r->y};
    if (np)
        guild_pool_run(r->pool, np, pair_task, &j);
    r->np = np;
    r->served += (uint64_t)np;
    return 0;
}

/* The executor's rows, with this side's in its own buffer. */
static int resident_collect(moe_exec_t *base, const float **y, void *queue, guild_err_t *err)
{
    cpu_resident_t *r = (cpu_resident_t *)base;
    const float *yi;
    if (moe_exec_collect(r->inner, &yi, queue, err) < 0)
        return -1;
    if (!r->np) {
        *y = yi;
        return 0;
    }
    const size_t E = (size_t)r->c->n_embd, P = (size_t)r->n * (size_t)r->c->n_expert_used;
    /* runs of the executor's computed pairs (ids >= 0 after masking) in one copy each */
    for (size_t p = 0; p < P;) {
        if (r->ids[p] < 0) {
            p++;
            continue;
        }
        size_t q = p + 1;
        while (q < P && r->ids[q] >= 0)
            q++;
        memcpy(r->y + p * E, yi + p * E, (q - p) * E * sizeof *r->y);
        p = q;
    }
    *y = r->y;
    return 0;
}

static int32_t resident_hint_experts(const moe_exec_t *base)
{
    return moe_exec_hint_experts(((const cpu_resident_t *)base)->inner);
}

/* The prediction for `layer` passed on with its resident experts masked (ids < 0: the executor's workers never
 * compute them, so the hint names only experts they will); a layer resident whole gets none. */
static int resident_hint(moe_exec_t *base, int32_t layer, int32_t n, const int32_t *ids, void *queue,
                         guild_err_t *err)
{
    cpu_resident_t *r = (cpu_resident_t *)base;
    const int32_t N = r->c->n_expert;
    if (n < 1 || layer < 0 || layer >= r->c->n_layer || !r->resident || !r->any[layer])
        return moe_exec_hint(r->inner, layer, n, ids, queue, err);
    if (r->all[layer])
        return 0;
    const size_t P = (size_t)n * (size_t)r->c->n_expert_used;
    if (P > r->hint_cap) {
        int32_t *h = realloc(r->hint, P * sizeof *h);
        if (!h)
            return guild_err_set(err, "resident experts: out of memory for a hint of %zu ids", P);
        r->hint = h;
        r->hint_cap = P;
    }
    const uint8_t *res = r->resident + (size_t)layer * (size_t)N;
    for (size_t q = 0; q < P; q++)
        r->hint[q] = ids[q] >= 0 && ids[q] < N && res[ids[q]] ? -1 : ids[q];
    return moe_exec_hint(r->inner, layer, n, r->hint, queue, err);
}

static bool resident_hint_wanted(const moe_exec_t *base, int32_t layer)
{
    const cpu_resident_t *r = (const cpu_resident_t *)base;
    if (r->resident && layer >= 0 && layer < r->c->n_layer && r->all[layer])
        return false;
    return moe_exec_hint_wanted(r->inner, layer);
}

static void resident_stats(const moe_exec_t *base, moe_exec_stats_t *out)
{
    moe_exec_stats(((const cpu_resident_t *)base)->inner, out);
}

static void resident_destroy(moe_exec_t *base)
{
    cpu_resident_t *r = (cpu_resident_t *)base;
    free(r->resident);
    free(r->any);
    free(r->all);
    free(r->hint);
    free(r->counts);
    free(r->ids);
    free(r->pairs);
    free(r->y);
    free(r->xq);
    free(r->xq2);
    free(r->hq);
    free(r->g);
    free(r->u);
    free(r);
}

static const moe_exec_ops_t resident_ops = {
    .name = "resident",
    .mem = MOE_EXEC_HOST,
    .submit = resident_submit,
    .collect = resident_collect,
    .destroy = resident_destroy,
    .stats = resident_stats,
    .hint_experts = resident_hint_experts,
    .hint = resident_hint,
    .hint_wanted = resident_hint_wanted,
};

int cpu_resident_new(moe_exec_t **out, moe_exec_t *inner, const model_t *m, guild_pool_t *pool,
                     const uint8_t *resident, guild_err_t *err)
{
    *out = NULL;
    const model_config_t *c = model_config(m);
    const model_weights_t *w = model_weights(m);
    const size_t LN = (size_t)(c->n_layer > 0 ? c->n_layer : 1) * (size_t)(c->n_expert > 0 ? c->n_expert : 1);
    cpu_resident_t *r = calloc(1, sizeof *r);
    if (!r)
        return guild_err_set(err, "resident experts: out of memory");
    r->base.ops = &resident_ops;
    r->inner = inner;
    r->c = c;
    r->w = w;
    r->pool = pool;
    r->nt = guild_pool_threads(pool);
    const size_t NL = (size_t)(c->n_layer > 0 ? c->n_layer : 1);
    if (!(r->counts = calloc(LN, sizeof *r->counts)) || !(r->any = calloc(NL, 1)) || !(r->all = calloc(NL, 1)))
        goto oom;
    bool have = false;
    for (int32_t il = 0; resident && il < c->n_layer; il++) {
        const model_layer_t *L = &w->layers[il];
        int32_t nr = 0;
        for (int32_t e = 0; e < c->n_expert; e++)
            nr += resident[(size_t)il * (size_t)c->n_expert + (size_t)e] != 0;
        r->any[il] = nr > 0;
        r->all[il] = nr == c->n_expert;
        if (!r->any[il])
            continue;
        have = true;
        const model_tensor_t *t[3] = {&L->gate_exps, &L->up_exps, &L->down_exps};
        for (int k = 0; k < 3; k++)
            if (!t[k]->data || !kern_can_matmul(t[k]->type) || !act_row(t[k]->type, t[k]->ne[0])) {
                resident_destroy(&r->base);
                return guild_err_set(err, "resident experts: layer %d: its experts cannot be computed here (%s)", il,
                                     t[k]->data ? quant_type_info(t[k]->type)->name : "missing");
            }
        const size_t xa = act_row(L->gate_exps.type, c->n_embd), xb = act_row(L->up_exps.type, c->n_embd);
        const size_t h = act_row(L->down_exps.type, c->n_ff_exp);
        r->xrow = xa > r->xrow ? xa : r->xrow;
        r->xrow = xb > r->xrow ? xb : r->xrow;
        r->hrow = h > r->hrow ? h : r->hrow;
    }
    if (have) {
        const size_t nt = (size_t)r->nt, F = (size_t)c->n_ff_exp;
        if (!(r->resident = malloc(LN)) || !(r->xq = malloc(nt * r->xrow)) || !(r->xq2 = malloc(nt * r->xrow)) ||
            !(r->hq = malloc(nt * r->hrow)) || !(r->g = malloc(nt * F * sizeof *r->g)) ||
            !(r->u = malloc(nt * F * sizeof *r->u)))
            goto oom;
        memcpy(r->resident, resident, LN);
    }
    *out = &r->base;
    return 0;
oom:
    resident_destroy(&r->base);
    return guild_err_set(err, "resident experts: out of memory");
}

void cpu_resident_counts(const moe_exec_t *e, uint64_t *counts, uint64_t *routed, uint64_t *resident)
{
    const cpu_resident_t *r = (const cpu_resident_t *)e;
    if (counts)
        memcpy(counts, r->counts, (size_t)r->c->n_layer * (size_t)r->c->n_expert * sizeof *counts);
    *routed = r->routed;
    *resident = r->served;
}
