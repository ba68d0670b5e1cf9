/* The softmax-then-top-k router (MODEL_ROUTER_SOFTMAX_TOPK) on the CUDA backend: logits = ffn_gate_inp xn, then
 * cuda_router_topk with the configuration's expert groups (gpu-worker/dense/cpu/router_softmax.c step for step),
 * which also counts the routing when the backend counts it. A decode step's few rows with F32 router weights take
 * both in one launch (cuda_router_fused, the same bits) unless the block norms do not fuse (cuda_config_t.no_fuse:
 * every kernel on its own); then the FFN's block norm before them joins that launch too (cuda_router_fused_norm:
 * the layer program leaves it in b->norm_defer), where the residual update pending for it is none or an addition
 * and a row fits the norm's registers; that launch also publishes a lone token to the MoE exchange where the layer
 * program offers it one (b->xpub: one launch fewer). */
#include "gpu-worker/dense/cuda/cuda_kernels.h"
#include "gpu-worker/dense/cuda/cuda_parts.h"

/* cuda_router_fused's case: F32 router weights, a decode step's rows (one session's or several's), the block norms
 * fused. */
static bool fused(const cuda_backend_t *b, int32_t il, int32_t n)
{
    const model_config_t *c = b->cfg;
    const cuda_tensor_t *R = &b->layers[il].router;
    return b->fuse && R->type == GUILD_TYPE_F32 && n <= CUDA_ROUTER_FUSED_MAX && R->n_in == c->n_embd &&
           R->n_rows == c->n_expert;
}

bool cuda_router_softmax_takes_norm(const cuda_backend_t *b, const model_layer_parts_t *lp, int32_t il, int32_t n)
{
    return lp->ffn->kind == MODEL_FFN_MOE && lp->router->kind == MODEL_ROUTER_SOFTMAX_TOPK && fused(b, il, n) &&
           b->cfg->n_embd <= CUDA_ROUTER_NORM_MAX && (b->pend.kind == CUDA_PRE_NONE || b->pend.kind == CUDA_PRE_ADD);
}

static int softmax_route(cuda_backend_t *b, const model_part_t *p, int32_t il, int32_t n, guild_err_t *err)
{
    const model_config_t *c = b->cfg;
    const cuda_tensor_t *R = &b->layers[il].router;
    unsigned long long *counts = b->route_counts && il < c->n_layer /* not the MTP layer's */
                                     ? b->route_counts + (size_t)il * (size_t)c->n_expert
                                     : NULL;
    const bool renorm = p->opts & MODEL_ROUTER_RENORM;
    if (b->norm_defer.w) { /* the FFN's block norm in the same launch (cuda_router_softmax_takes_norm) */
        GUILD_ASSERT(fused(b, il, n));
        const cuda_router_norm_t nm = {.x = b->x,
                                       .p = b->norm_defer.p,
                                       .w = b->norm_defer.w->d,
                                       .eps = c->norm_eps,
                                       .xn = b->xn,
                                       .found = b->d_finite,
                                       .site = b->norm_defer.site,
                                       .pub = b->xpub};
        b->norm_defer.w = NULL;
        b->act_fresh = NULL; /* as cuda_linear leaves it */
        const int rc = cuda_router_fused_norm(&nm, R->d, R->row_bytes, (int32_t)c->n_embd, b->router_logits, n,
                                              c->n_expert, c->n_expert_used, c->n_expert_groups, c->n_group_used,
                                              renorm, c->expert_weights_scale, b->ids, b->route_w, counts,
                                              b->d_router_done, b->stream, err);
        b->xpub_done = rc > 0;
        return rc < 0 ? -1 : 0;
    }
    if (fused(b, il, n)) {
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
