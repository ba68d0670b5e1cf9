/* The softmax-then-top-k router (MODEL_ROUTER_SOFTMAX_TOPK) on the CUDA backend: logits = ffn_gate_inp xn, then
 * cuda_router_topk with the configuration's expert groups (gpu-worker/dense/cpu/router_softmax.c step for step). */
#include "gpu-worker/dense/cuda/cuda_kernels.h"
#include "gpu-worker/dense/cuda/cuda_parts.h"

static int softmax_route(cuda_backend_t *b, const model_part_t *p, int32_t il, int32_t n, guild_err_t *err)
{
    const model_config_t *c = b->cfg;
    if (cuda_linear(b, &b->layers[il].router, b->xn, c->n_embd, n, b->router_logits, c->n_expert, false, err) < 0 ||
        cuda_router_topk(b->router_logits, n, c->n_expert, c->n_expert_used, c->n_expert_groups, c->n_group_used,
                         p->opts & MODEL_ROUTER_RENORM, c->expert_weights_scale, b->ids, b->route_w, b->stream,
                         err) < 0)
        return -1;
    return 0;
}

const cuda_router_part_t cuda_router_softmax = {
    .opts = MODEL_ROUTER_RENORM,
    .route = softmax_route,
};
