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
#include "core/model/activation.h"
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
    else if (moe_exec_run(b->moe, il, n, b->xn, b->ids, &b->y, err) < 0)
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
