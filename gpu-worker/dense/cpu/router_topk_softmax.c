/* The top-k-then-softmax router (MODEL_ROUTER_TOPK_SOFTMAX, gpt-oss) on the CPU backend: logits = ffn_gate_inp xn
 * (+ ffn_gate_inp.bias with option logit bias), then cpu_router_topk_logits (cpu_kernels.h) per token: the k
 * largest logits, weighted by the softmax of those k, scaled by expert_weights_scale. */
#include "gpu-worker/dense/cpu/cpu_matmul.h"
#include "gpu-worker/dense/cpu/cpu_parts.h"

typedef struct router_job {
    cpu_backend_t *b;
    const float *bias; /* [n_expert], NULL without option logit bias */
} router_job_t;

static void topk_task(void *ctx, int64_t t, int thread)
{
    router_job_t *j = ctx;
    cpu_backend_t *b = j->b;
    const model_config_t *c = b->cfg;
    const int64_t K = c->n_expert_used;
    cpu_router_topk_logits(b->router_logits + t * c->n_expert, j->bias, c->n_expert, c->n_expert_used,
                           c->expert_weights_scale, b->ids + t * K, b->weights + t * K,
                           b->probs + (size_t)thread * (size_t)c->n_expert);
}

static void topk_softmax_route(cpu_backend_t *b, const model_part_t *p, int32_t il, int32_t n)
{
    const model_config_t *c = b->cfg;
    const model_layer_t *L = model_block(b->w, il);
    router_job_t j = {b, (p->opts & MODEL_ROUTER_LOGIT_BIAS) ? L->router_bias.data : NULL};
    cpu_linear(b->pool, &L->router, 0, c->n_expert, n, b->xn, c->n_embd, b->router_logits, c->n_expert, b->act);
    guild_pool_run(b->pool, n, topk_task, &j);
}

const cpu_router_part_t cpu_router_topk_softmax = {
    .opts = MODEL_ROUTER_LOGIT_BIAS,
    .route = topk_softmax_route,
};
