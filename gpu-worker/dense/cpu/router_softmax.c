/* The softmax-then-top-k router (MODEL_ROUTER_SOFTMAX_TOPK) on the CPU backend: logits = ffn_gate_inp xn, then
 * cpu_router_softmax_grouped (cpu_kernels.h) per token (the expert groups of the configuration; without groups
 * cpu_router_topk), renormalised with option renorm, scaled by expert_weights_scale. */
#include "gpu-worker/dense/cpu/cpu_matmul.h"
#include "gpu-worker/dense/cpu/cpu_parts.h"

typedef struct router_job {
    cpu_backend_t *b;
    bool renorm;
} router_job_t;

static void topk_task(void *ctx, int64_t t, int thread)
{
    router_job_t *j = ctx;
    cpu_backend_t *b = j->b;
    const model_config_t *c = b->cfg;
    const int64_t K = c->n_expert_used;
    cpu_router_softmax_grouped(b->router_logits + t * c->n_expert, c->n_expert, c->n_expert_used,
                               c->n_expert_groups, c->n_group_used, j->renorm, c->expert_weights_scale,
                               b->ids + t * K, b->weights + t * K, b->probs + (size_t)thread * b->probs_stride);
}

static void softmax_route(cpu_backend_t *b, const model_part_t *p, int32_t il, int32_t n)
{
    const model_config_t *c = b->cfg;
    router_job_t j = {b, p->opts & MODEL_ROUTER_RENORM};
    cpu_linear(b->pool, &model_block(b->w, il)->router, 0, c->n_expert, n, b->xn, c->n_embd, b->router_logits,
               c->n_expert, b->act);
    guild_pool_run(b->pool, n, topk_task, &j);
}

const cpu_router_part_t cpu_router_softmax = {
    .opts = MODEL_ROUTER_RENORM,
    .route = softmax_route,
};
