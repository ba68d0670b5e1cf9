/* The grouped sigmoid router (MODEL_ROUTER_SIGMOID_GROUPED) on the CPU backend: logits = ffn_gate_inp xn, then
 * cpu_router_sigmoid_grouped (cpu_kernels.h) per token, with the score bias exp_probs_b (option score bias), the
 * expert groups of the configuration, renormalised with option renorm, scaled by expert_weights_scale. */
#include "gpu-worker/dense/cpu/cpu_matmul.h"
#include "gpu-worker/dense/cpu/cpu_parts.h"

typedef struct sigmoid_job {
    cpu_backend_t *b;
    const float *bias; /* [n_expert], NULL without option score bias */
    bool renorm;
} sigmoid_job_t;

static void sigmoid_task(void *ctx, int64_t t, int thread)
{
    sigmoid_job_t *j = ctx;
    cpu_backend_t *b = j->b;
    const model_config_t *c = b->cfg;
    const int64_t K = c->n_expert_used;
    cpu_router_sigmoid_grouped(b->router_logits + t * c->n_expert, j->bias, c->n_expert, c->n_expert_used,
                               c->n_expert_groups, c->n_group_used, j->renorm, c->expert_weights_scale,
                               b->ids + t * K, b->weights + t * K, b->probs + (size_t)thread * b->probs_stride);
}

static void sigmoid_route(cpu_backend_t *b, const model_part_t *p, int32_t il, int32_t n)
{
    const model_config_t *c = b->cfg;
    const model_layer_t *L = model_block(b->w, il);
    sigmoid_job_t j = {b, (p->opts & MODEL_ROUTER_SCORE_BIAS) ? L->score_bias.data : NULL,
                       p->opts & MODEL_ROUTER_RENORM};
    cpu_linear(b->pool, &L->router, 0, c->n_expert, n, b->xn, c->n_embd, b->router_logits, c->n_expert, b->act);
    guild_pool_run(b->pool, n, sigmoid_task, &j);
}

const cpu_router_part_t cpu_router_sigmoid_grouped_part = {
    .opts = MODEL_ROUTER_RENORM | MODEL_ROUTER_SCORE_BIAS,
    .route = sigmoid_route,
};
