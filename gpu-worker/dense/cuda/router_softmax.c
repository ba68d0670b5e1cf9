/* The softmax-then-top-k router (MODEL_ROUTER_SOFTMAX_TOPK) on the CUDA backend: logits = ffn_gate_inp xn, then
 * cuda_router_topk with the configuration's expert groups (gpu-worker/dense/cpu/router_softmax.c step for step),
 * which also counts the routing when the backend counts it. A decode step's few rows with F32 router weights take
 * both in one launch (cuda_router_fused, the same bits) unless the block norms do not fuse (cuda_config_t.no_fuse:
 * every kernel on its own). */
#include "gpu-worker/dense/cuda/cuda_kernels.h"
#include "gpu-worker/dense/cuda/cuda_parts.h"

static int softmax_route(cuda_backend_t *b, const model_part_t *p, int32_t il, int32_t n, guild_err_t *err)
{
    const model_config_t *c = b->cfg;
    const cuda_tensor_t *R = &b->layers[il].router;
    unsigned long long *counts = b->route_counts && il < c->n_layer /* not the MTP layer's */
                                     ? b->route_counts + (size_t)il * (size_t)c->n_expert
                                     : NULL;
    const bool renorm = p->opts & MODEL_ROUTER_RENORM;
    if (b->fuse && R->type == GUILD_TYPE_F32 && n <= CUDA_ROUTER_FUSED_ROWS && R->n_in == c->n_embd &&
        R->n_rows == c->n_expert) {
        b->act_fresh = NULL; /* as cuda_linear leaves it */
        return cuda_router_fused(R->d, R->row_bytes, b->xn, c->n_embd, (int32_t)c->n_embd, b->router_logits, n,
                                 c->n_expert, c->n_expert_used, c->n_expert_groups, c->n_group_used, renorm,
                                 c->expert_weights_scale, b->ids, b->route_w, counts, b->d_router_done, b->stream,
                                 err);
    }
    if (cuda_linear(b, R, b->xn, c->n_embd, n, b->router_logits, c->n_expert, false, err) < 0 ||
        cuda_router_topk(b->router_logits, n, c->n_expert, c->n_expert_used, c->n_expert_groups, c->n_group_used,
                         renorm, c->expert_weights_scale, b->ids, b->route_w, counts, b->stream, err) < 0)
        return -1;
    return 0;
}

const cuda_router_part_t cuda_router_softmax = {
    .opts = MODEL_ROUTER_RENORM,
    .counts = true,
    .route = softmax_route,
};
