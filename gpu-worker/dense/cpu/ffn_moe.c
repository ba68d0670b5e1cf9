/* The MoE FFN (MODEL_FFN_MOE) on the CPU backend, for the n rows of a batch:
 *
 *   ids, w = the router part's choice from xn
 *   y      = the routed experts (moe_exec_t: unweighted, per slot)
 *   x     += (sum over slots k ascending of w[k] * y[k]) [+ sigmoid(shexp_gate_inp xn) * shexp(xn)]
 *                                                           [+ shexp(xn)]
 *
 * (option shared expert with sigmoid gate: the first bracket; option shared expert, ungated: the second;
 * shexp(xn) = shexp_down(silu(shexp_gate xn) * shexp_up xn)).
 */
#include <stdlib.h>

#include "core/model/activation.h"
#include "gpu-worker/dense/cpu/cpu_kernels.h"
#include "gpu-worker/dense/cpu/cpu_matmul.h"
#include "gpu-worker/dense/cpu/cpu_parts.h"

typedef struct moe_job {
    cpu_backend_t *b;
    bool shared; /* a shared expert */
    bool gated;  /* ... scaled by its sigmoid gate */
} moe_job_t;

static void swiglu_task(void *ctx, int64_t t, int thread)
{
    moe_job_t *j = ctx;
    const int64_t F = j->b->cfg->n_ff_shexp;
    float *g = j->b->sh_gate + t * F;
    const float *u = j->b->sh_up + t * F;
    (void)thread;
    for (int64_t i = 0; i < F; i++)
        g[i] = model_silu(g[i]) * u[i];
}

/* x[t] = (sum_k w[t][k] * y[t][k] [+ sigmoid(logit) * shexp | + shexp]) + x[t] */
static void combine_task(void *ctx, int64_t t, int thread)
{
    moe_job_t *j = ctx;
    cpu_backend_t *b = j->b;
    const model_config_t *c = b->cfg;
    const int64_t E = c->n_embd, K = c->n_expert_used;
    const bool shared = j->shared, gated = j->gated;
    const float gate = gated ? model_sigmoid(b->sh_logit[t]) : 0.0f;
    const float *w = b->weights + t * K;
    const float *y = b->y + t * K * E;
    const float *sh = b->proj + t * E;
    float *x = b->x + t * E;
    (void)thread;
    for (int64_t i = 0; i < E; i++) {
        float acc = w[0] * y[i];
        for (int64_t k = 1; k < K; k++)
            acc += w[k] * y[k * E + i];
        if (gated)
            acc += sh[i] * gate;
        else if (shared)
            acc += sh[i];
        x[i] = acc + x[i];
    }
}

/* The prefetch hint (moe_exec.h) for layer il + 1, given before layer il's experts are submitted (they carry it:
 * the host has nothing else to do meanwhile, and the workers then find it every time): its router applied to x
 * (the residual stream that entered layer il's FFN) normed with its own ffn_norm ("pre-gating"), each token's top
 * n_expert_used logits in order. Decode rows only (one session's or several sessions' batched step, as the CUDA
 * backend; guild_exchange_hint_pick's rule for each); a next layer that is not a softmax-routed MoE, or whose
 * experts the executor computes all itself (moe_exec_hint_wanted), gets none. */
#define HINT_ROWS 16
static int hint_next(cpu_backend_t *b, int32_t il, int32_t n, guild_err_t *err)
{
    const model_config_t *c = b->cfg;
    if (il + 1 >= c->n_layer || n > HINT_ROWS || !moe_exec_hint_wanted(b->moe, il + 1))
        return 0;
    const model_layer_parts_t nx = model_layer_parts(c, il + 1);
    if (nx.ffn->kind != MODEL_FFN_MOE || nx.router->kind != MODEL_ROUTER_SOFTMAX_TOPK)
        return 0;
    const model_layer_t *L = model_block(b->w, il + 1);
    const int64_t E = c->n_embd, X = c->n_expert, K = c->n_expert_used;
    float *xn = malloc((size_t)n * (size_t)(E + X) * sizeof *xn);
    int32_t *ids = malloc((size_t)n * (size_t)K * sizeof *ids);
    if (!xn || !ids) {
        free(xn);
        free(ids);
        return guild_err_set(err, "prefetch hint: out of memory");
    }
    float *logits = xn + (size_t)n * (size_t)E;
    for (int32_t t = 0; t < n; t++)
        cpu_rmsnorm(xn + (size_t)t * (size_t)E, b->x + (size_t)t * (size_t)E, L->ffn_norm.data, E, c->norm_eps);
    cpu_linear(b->pool, &L->router, 0, X, n, xn, E, logits, X, b->act);
    for (int32_t t = 0; t < n; t++) /* the top K by logit, ties to the lower id */
        for (int64_t k = 0; k < K; k++) {
            int32_t best = -1;
            for (int32_t e = 0; e < X; e++) {
                bool taken = false;
                for (int64_t j = 0; j < k && !taken; j++)
                    taken = ids[t * K + j] == e;
                if (!taken && (best < 0 || logits[t * X + e] > logits[t * X + best]))
                    best = e;
            }
            ids[t * K + k] = best;
        }
    const int rc = moe_exec_hint(b->moe, il + 1, n, ids, NULL, err);
    free(xn);
    free(ids);
    return rc;
}

static int moe_forward(cpu_backend_t *b, const model_layer_parts_t *lp, int32_t il, int32_t n, guild_err_t *err)
{
    const model_config_t *c = b->cfg;
    const model_layer_t *L = model_block(b->w, il);
    const int64_t E = c->n_embd;
    const uint32_t o = lp->ffn->opts;
    moe_job_t j = {b, o & (MODEL_FFN_SHEXP_GATED | MODEL_FFN_SHEXP), o & MODEL_FFN_SHEXP_GATED};
    guild_pool_t *pool = b->pool;

    cpu_router_parts[lp->router->kind]->route(b, lp->router, il, n);
    if (il >= c->n_layer) /* the MTP layer's: the executor holds the model's layers only */
        cpu_mtp_experts(b, L, n);
    else if ((moe_exec_hint_experts(b->moe) > 0 && hint_next(b, il, n, err) < 0) ||
             moe_exec_run(b->moe, il, n, b->xn, b->ids, &b->y, err) < 0)
        return guild_err_prefix(err, "routed experts: ");
    if (j.shared) {
        const int64_t F = c->n_ff_shexp;
        if (j.gated)
            cpu_linear(pool, &L->shexp_gate_inp, 0, 1, n, b->xn, E, b->sh_logit, 1, b->act);
        cpu_linear(pool, &L->shexp_gate, 0, F, n, b->xn, E, b->sh_gate, F, b->act);
        cpu_linear(pool, &L->shexp_up, 0, F, n, b->xn, E, b->sh_up, F, b->act);
        guild_pool_run(pool, n, swiglu_task, &j);
        cpu_linear(pool, &L->shexp_down, 0, E, n, b->sh_gate, F, b->proj, E, b->act);
    }
    guild_pool_run(pool, n, combine_task, &j);
    return 0;
}

/* Option clamped swiglu changes only the experts, which the executor computes (it learns the activation and the
 * biases from the model: model_expert_act in core/model/activation.h); the combine is the same. */
const cpu_ffn_part_t cpu_ffn_moe = {
    .opts = MODEL_FFN_SHEXP_GATED | MODEL_FFN_SHEXP | MODEL_FFN_SWIGLU_OAI,
    .forward = moe_forward,
};
