/* The grouped sigmoid router (MODEL_ROUTER_SIGMOID_GROUPED) on the CUDA backend: logits = ffn_gate_inp xn, then
 * cuda_router_sigmoid_grouped with the score bias (option) and the configuration's groups, renorm and scale
 * (gpu-worker/dense/cpu/router_sigmoid_grouped.c step for step). */
#include "gpu-worker/dense/cuda/cuda_kernels.h"
#include "gpu-worker/dense/cuda/cuda_parts.h"

static int sigmoid_route(cuda_backend_t *b, const model_part_t *p, int32_t il, int32_t n, guild_err_t *err)
{
    const model_config_t *c = b->cfg;
    const cuda_layer_t *L = &b->layers[il];
    const float *bias = (p->opts & MODEL_ROUTER_SCORE_BIAS) ? L->score_bias.d : NULL;
    if (cuda_linear(b, &L->router, b->xn, c->n_embd, n, b->router_logits, c->n_expert, false, err) < 0 ||
        cuda_router_sigmoid_grouped(b->router_logits, bias, n, c->n_expert, c->n_expert_used, c->n_expert_groups,
                                    c->n_group_used, p->opts & MODEL_ROUTER_RENORM, c->expert_weights_scale, b->ids,
                                    b->route_w, b->stream, err) < 0)
        return -1;
    return 0;
}

const cuda_router_part_t cuda_router_sigmoid_grouped_part = {
    .opts = MODEL_ROUTER_RENORM | MODEL_ROUTER_SCORE_BIAS,
    .route = sigmoid_route,
};
