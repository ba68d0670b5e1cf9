/* The top-k-then-softmax router (MODEL_ROUTER_TOPK_SOFTMAX, gpt-oss) on the CUDA backend: logits = ffn_gate_inp xn,
 * then cuda_router_topk_logits with ffn_gate_inp.bias (option logit bias): gpu-worker/dense/cpu/router_topk_softmax.c
 * step for step. */
#include "gpu-worker/dense/cuda/cuda_kernels.h"
#include "gpu-worker/dense/cuda/cuda_parts.h"

static int topk_softmax_route(cuda_backend_t *b, const model_part_t *p, int32_t il, int32_t n, guild_err_t *err)
{
    const model_config_t *c = b->cfg;
    const cuda_layer_t *L = &b->layers[il];
    if (cuda_linear(b, &L->router, b->xn, c->n_embd, n, b->router_logits, c->n_expert, false, err) < 0 ||
        cuda_router_topk_logits(b->router_logits, (p->opts & MODEL_ROUTER_LOGIT_BIAS) ? L->router_bias.d : NULL, n,
                                c->n_expert, c->n_expert_used, c->expert_weights_scale, b->ids, b->route_w,
                                b->stream, err) < 0)
        return -1;
    return 0;
}

const cuda_router_part_t cuda_router_topk_softmax = {
    .opts = MODEL_ROUTER_LOGIT_BIAS,
    .route = topk_softmax_route,
};
