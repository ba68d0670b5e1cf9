/* The routing-prediction observer (contract in route_predict.h). */
#include "config.h"

#include "bench/route_predict.h"

#include <stdlib.h>
#include <string.h>

#include "core/model/parts.h"
#include "gpu-worker/dense/cpu/cpu_kernels.h"
#include "gpu-worker/dense/cpu/cpu_matmul.h"

enum { N_PRED = ROUTE_PREDICT_PREV }; /* the router predictors: PREGATE and PREGATE_RAW */

struct route_predict {
    moe_exec_t base;  /* first: the executor the backend gets */
    moe_exec_t *inner;
    const model_t *m;
    const model_config_t *c;
    guild_pool_t *pool;
    int32_t n_layer, n_expert, k, n_batch;
    int64_t n_embd;
    bool counting;
    /* the next layer's predictions made from this batch: [N_PRED][n_batch][k]; for layer pred_layer, rows pred_n */
    int32_t *pred, pred_layer, pred_n;
    int32_t *prev;     /* [n_layer][k]: each layer's last routed token's experts */
    bool *have_prev;   /* [n_layer] */
    uint64_t *tokens;  /* [n_layer][KINDS] */
    uint64_t *hits;    /* [n_layer][KINDS][k]: hits among the first m = index + 1 */
    float *xr, *logits, *w, *scratch;
    void *act;
};

const char *route_predict_kind_name(int kind)
{
    static const char *const names[ROUTE_PREDICT_KINDS] = {"pregate", "pregate_raw", "prev"};
    return kind >= 0 && kind < ROUTE_PREDICT_KINDS ? names[kind] : "?";
}

static bool is_moe(const model_config_t *c, int32_t il)
{
    return il >= 0 && il < c->n_layer && model_layer_parts(c, il).router != NULL;
}

/* ids[0..n_rows) rows of k: the routing of layer il from x (n_rows rows of n_embd), as the cpu backend's router
 * of that layer would choose it. */
static void route_rows(route_predict_t *rp, int32_t il, int32_t n_rows, const float *x, int32_t *ids)
{
    const model_config_t *c = rp->c;
    const model_layer_t *L = model_block(model_weights(rp->m), il);
    const model_part_t *p = model_layer_parts(c, il).router;
    cpu_linear(rp->pool, &L->router, 0, rp->n_expert, n_rows, x, rp->n_embd, rp->logits, rp->n_expert, rp->act);
    for (int32_t t = 0; t < n_rows; t++) {
        const float *lg = rp->logits + (int64_t)t * rp->n_expert;
        if (p->kind == MODEL_ROUTER_TOPK_SOFTMAX)
            cpu_router_topk_logits(lg, (p->opts & MODEL_ROUTER_LOGIT_BIAS) ? L->router_bias.data : NULL,
                                   rp->n_expert, rp->k, c->expert_weights_scale, ids + t * rp->k, rp->w,
                                   rp->scratch);
        else
            cpu_router_softmax_grouped(lg, rp->n_expert, rp->k, c->n_expert_groups, c->n_group_used,
                                       p->opts & MODEL_ROUTER_RENORM, c->expert_weights_scale, ids + t * rp->k,
                                       rp->w, rp->scratch);
    }
}

/* Adds one token's score: truth[k] against the ranked prediction pred[k]. */
static void score(route_predict_t *rp, int32_t il, int kind, const int32_t *truth, const int32_t *pred)
{
    const int32_t k = rp->k;
    uint64_t *h = rp->hits + ((size_t)il * ROUTE_PREDICT_KINDS + (size_t)kind) * (size_t)k;
    int32_t hit = 0;
    for (int32_t m = 0; m < k; m++) {
        for (int32_t j = 0; j < k; j++)
            if (truth[j] == pred[m]) {
                hit++;
                break;
            }
        h[m] += (uint64_t)hit;
    }
    rp->tokens[(size_t)il * ROUTE_PREDICT_KINDS + (size_t)kind]++;
}

static int rp_submit(moe_exec_t *e, int32_t il, int32_t n, const float *x, const int32_t *ids, void *queue,
                     guild_err_t *err)
{
    route_predict_t *rp = (route_predict_t *)e;
    const int32_t k = rp->k;
    const int64_t E = rp->n_embd;
    if (n > rp->n_batch)
        return guild_err_set(err, "route-predict: a batch of %d rows (at most %d)", n, rp->n_batch);
    if (rp->counting) {
        if (rp->pred_layer == il && rp->pred_n == n)
            for (int kind = 0; kind < N_PRED; kind++)
                for (int32_t t = 0; t < n; t++)
                    score(rp, il, kind, ids + t * k, rp->pred + ((size_t)kind * rp->n_batch + t) * k);
        for (int32_t t = 0; t < n; t++)
            if (t > 0)
                score(rp, il, ROUTE_PREDICT_PREV, ids + t * k, ids + (t - 1) * k);
            else if (rp->have_prev[il])
                score(rp, il, ROUTE_PREDICT_PREV, ids, rp->prev + (size_t)il * k);
    }
    memcpy(rp->prev + (size_t)il * k, ids + (size_t)(n - 1) * k, (size_t)k * sizeof *ids);
    rp->have_prev[il] = true;
    rp->pred_layer = -1;
    if (rp->counting && is_moe(rp->c, il + 1)) {
        const model_weights_t *w = model_weights(rp->m);
        const float *g0 = model_block(w, il)->ffn_norm.data, *g1 = model_block(w, il + 1)->ffn_norm.data;
        for (int32_t t = 0; t < n; t++)
            for (int64_t i = 0; i < E; i++)
                rp->xr[t * E + i] = g0[i] != 0.0f ? x[t * E + i] / g0[i] * g1[i] : 0.0f;
        route_rows(rp, il + 1, n, rp->xr, rp->pred + (size_t)ROUTE_PREDICT_PREGATE * rp->n_batch * k);
        route_rows(rp, il + 1, n, x, rp->pred + (size_t)ROUTE_PREDICT_PREGATE_RAW * rp->n_batch * k);
        rp->pred_layer = il + 1;
        rp->pred_n = n;
    }
    return moe_exec_submit(rp->inner, il, n, x, ids, queue, err);
}

static int rp_collect(moe_exec_t *e, const float **y, void *queue, guild_err_t *err)
{
    return moe_exec_collect(((route_predict_t *)e)->inner, y, queue, err);
}

static void rp_stats(const moe_exec_t *e, moe_exec_stats_t *out)
{
    moe_exec_stats(((const route_predict_t *)e)->inner, out);
}

static void rp_destroy(moe_exec_t *e)
{
    route_predict_t *rp = (route_predict_t *)e;
    free(rp->pred);
    free(rp->prev);
    free(rp->have_prev);
    free(rp->tokens);
    free(rp->hits);
    free(rp->xr);
    free(rp->logits);
    free(rp->w);
    free(rp->scratch);
    free(rp->act);
    free(rp);
}

static const moe_exec_ops_t rp_ops = {
    .name = "route-predict",
    .mem = MOE_EXEC_HOST,
    .submit = rp_submit,
    .collect = rp_collect,
    .destroy = rp_destroy,
    .stats = rp_stats,
};

int route_predict_new(route_predict_t **out, const model_t *m, moe_exec_t *inner, guild_pool_t *pool,
                      int32_t n_batch, guild_err_t *err)
{
    *out = NULL;
    const model_config_t *c = model_config(m);
    if (inner->ops->mem != MOE_EXEC_HOST)
        return guild_err_set(err, "route-predict: the executor '%s' is not a host executor", inner->ops->name);
    if (n_batch < 1)
        return guild_err_set(err, "route-predict: n_batch %d", n_batch);
    size_t act_row = 0;
    for (int32_t il = 0; il < c->n_layer; il++) {
        if (!is_moe(c, il))
            continue;
        const int32_t kind = model_layer_parts(c, il).router->kind;
        if (kind != MODEL_ROUTER_SOFTMAX_TOPK && kind != MODEL_ROUTER_TOPK_SOFTMAX)
            return guild_err_set(err, "route-predict: layer %d's router is sigmoid-grouped (softmax-top-k and "
                                 "top-k-softmax routers only)", il);
        const size_t r = cpu_act_row_bytes(model_block(model_weights(m), il)->router.type, c->n_embd);
        act_row = r > act_row ? r : act_row;
    }
    route_predict_t *rp = calloc(1, sizeof *rp);
    if (!rp)
        return guild_err_set(err, "route-predict: out of memory");
    const size_t L = (size_t)c->n_layer, K = (size_t)c->n_expert_used, X = (size_t)c->n_expert,
                 B = (size_t)n_batch, E = (size_t)c->n_embd;
    rp->base.ops = &rp_ops;
    rp->inner = inner;
    rp->m = m;
    rp->c = c;
    rp->pool = pool;
    rp->n_layer = c->n_layer;
    rp->n_expert = c->n_expert;
    rp->k = c->n_expert_used;
    rp->n_batch = n_batch;
    rp->n_embd = c->n_embd;
    rp->pred_layer = -1;
    rp->pred = malloc(N_PRED * B * K * sizeof *rp->pred);
    rp->prev = malloc(L * K * sizeof *rp->prev);
    rp->have_prev = calloc(L, sizeof *rp->have_prev);
    rp->tokens = calloc(L * ROUTE_PREDICT_KINDS, sizeof *rp->tokens);
    rp->hits = calloc(L * ROUTE_PREDICT_KINDS * K, sizeof *rp->hits);
    rp->xr = malloc(B * E * sizeof *rp->xr);
    rp->logits = malloc(B * X * sizeof *rp->logits);
    rp->w = malloc(K * sizeof *rp->w);
    rp->scratch = malloc((size_t)cpu_router_sigmoid_scratch(c->n_expert, c->n_expert_groups) * sizeof(float));
    rp->act = malloc(B * (act_row ? act_row : 1));
    if (!rp->pred || !rp->prev || !rp->have_prev || !rp->tokens || !rp->hits || !rp->xr || !rp->logits || !rp->w ||
        !rp->scratch || !rp->act) {
        rp_destroy(&rp->base);
        return guild_err_set(err, "route-predict: out of memory");
    }
    *out = rp;
    return 0;
}

void route_predict_destroy(route_predict_t **rp)
{
    if (*rp) {
        rp_destroy(&(*rp)->base);
        *rp = NULL;
    }
}

moe_exec_t *route_predict_exec(route_predict_t *rp)
{
    return &rp->base;
}

void route_predict_counting(route_predict_t *rp, bool on)
{
    rp->counting = on;
}

uint64_t route_predict_tokens(const route_predict_t *rp, int32_t il, int kind)
{
    if (il < 0 || il >= rp->n_layer || kind < 0 || kind >= ROUTE_PREDICT_KINDS)
        return 0;
    return rp->tokens[(size_t)il * ROUTE_PREDICT_KINDS + (size_t)kind];
}

uint64_t route_predict_hits(const route_predict_t *rp, int32_t il, int kind, int32_t m)
{
    if (il < 0 || il >= rp->n_layer || kind < 0 || kind >= ROUTE_PREDICT_KINDS || m < 1 || m > rp->k)
        return 0;
    return rp->hits[((size_t)il * ROUTE_PREDICT_KINDS + (size_t)kind) * (size_t)rp->k + (size_t)(m - 1)];
}
