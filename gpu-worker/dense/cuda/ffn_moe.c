/* The MoE FFN (MODEL_FFN_MOE) on the CUDA backend (gpu-worker/dense/cpu/ffn_moe.c step for step): the router
 * part's choice; the routed experts submitted to the device executor (cuda_moe.h); the shared expert (option)
 * meanwhile; the experts' outputs collected; x += sum over slots in order of w * y [+ sigmoid(gate) * shared | + shared]. */
#include "gpu-worker/dense/cuda/cuda_kernels.h"
#include "gpu-worker/dense/cuda/cuda_parts.h"
#include "gpu-worker/dense/cuda/cuda_step_clock.h" /* the marks */
#include "gpu-worker/dense/cuda/cuda_xchg.h"      /* cuda_xchg_pub_t */

/* The prefetch hint for layer il + 1, enqueued after layer il's experts are submitted (the CPU workers compute
 * them meanwhile: off the dense side's path; the "gpu" executor enqueues its resident experts' products after
 * the hint, so that it reaches the CPU workers before them): layer il + 1's router applied to x, the residual
 * stream that entered layer il's FFN, normed with layer il + 1's ffn_norm ("pre-gating", bench/route_predict.h),
 * its top n_expert_used by the router's own kernels (cuda_rmsnorm, cuda_router_fused: a prediction, not a result;
 * it only moves bytes into the CPU workers' caches). Decode rows only (CUDA_ROUTER_FUSED_MAX: one session's or
 * several's batched step, guild_exchange_hint_pick's rule for each); a next layer that
 * is not a softmax-routed MoE with F32 router weights, or that the executor does not want a hint for (its experts
 * all on the device, or no exchange to carry it: moe_exec_hint_wanted), gets none. */
static int hint_next(cuda_backend_t *b, moe_exec_t *ex, int32_t il, int32_t n, guild_err_t *err)
{
    const model_config_t *c = b->cfg;
    if (!b->pre_ids || il + 1 >= c->n_layer || n > CUDA_ROUTER_FUSED_MAX || !moe_exec_hint_wanted(ex, il + 1))
        return 0;
    const model_layer_parts_t nx = model_layer_parts(c, il + 1);
    const cuda_layer_t *N = &b->layers[il + 1];
    const cuda_tensor_t *R = &N->router;
    if (nx.ffn->kind != MODEL_FFN_MOE || nx.router->kind != MODEL_ROUTER_SOFTMAX_TOPK || R->type != GUILD_TYPE_F32 ||
        R->n_in != c->n_embd || R->n_rows != c->n_expert)
        return 0;
    const int64_t E = c->n_embd;
    if (cuda_rmsnorm(b->pre_xn, E, b->x, E, NULL, N->ffn_norm.d, E, n, c->norm_eps, b->stream, err) < 0 ||
        cuda_router_fused(R->d, R->row_bytes, b->pre_xn, E, (int32_t)E, b->pre_logits, n, c->n_expert,
                          c->n_expert_used, c->n_expert_groups, c->n_group_used, false, 1.0f, b->pre_ids, b->pre_w,
                          NULL, b->d_pre_done, b->stream, err) < 0)
        return -1;
    return moe_exec_hint(ex, il + 1, n, b->pre_ids, b->stream, err);
}

static int moe_forward(cuda_backend_t *b, const model_layer_parts_t *lp, int32_t il, int32_t n, guild_err_t *err)
{
    const model_config_t *c = b->cfg;
    const cuda_layer_t *L = &b->layers[il];
    const int64_t E = c->n_embd;
    const int32_t K = c->n_expert_used;
    const bool shared = lp->ffn->opts & (MODEL_FFN_SHEXP_GATED | MODEL_FFN_SHEXP);
    const bool gated = lp->ffn->opts & MODEL_FFN_SHEXP_GATED;
    cudaStream_t s = b->stream;
    /* the MTP layer's block (il == n_layer): its experts in an executor of their own, as its layer 0, and no
     * routing counts (they are the model's layers') */
    const bool mtp = il >= c->n_layer;
    moe_exec_t *ex = mtp ? b->moe_mtp : b->moe;
    /* the router's launch may publish a lone token itself (one launch fewer); the executor then only notes it */
    cuda_xchg_pub_t pub;
    b->xpub = b->xchg_fuse && !mtp && cuda_moe_pub_of(ex, il, n, &pub) ? &pub : NULL;
    b->xpub_done = false;
    const int routed = cuda_router_parts[lp->router->kind]->route(b, lp->router, il, n, err);
    const bool published = b->xpub_done;
    b->xpub = NULL;
    b->xpub_done = false;
    if (published)
        cuda_moe_published(ex, il, n);
    if (routed < 0 ||
        (b->route_counts && !mtp && !cuda_router_parts[lp->router->kind]->counts &&
         cuda_route_count(b->ids, n * K, c->n_expert, b->route_counts + (size_t)il * c->n_expert, s, err) < 0) ||
        cuda_layer_mark(b, il, CUDA_MARK_L0_ROUTER, err) < 0 ||
        (!published && moe_exec_submit(ex, mtp ? 0 : il, n, b->xn, b->ids, s, err) < 0) ||
        (!mtp && hint_next(b, ex, il, n, err) < 0))
        return -1;
    if (shared) {
        const int64_t F = c->n_ff_shexp;
        if ((gated && cuda_linear(b, &L->shexp_gate_inp, b->xn, E, n, b->sh_logit, 1, true, err) < 0) ||
            cuda_linear(b, &L->shexp_gate, b->xn, E, n, b->sh_gate, F, true, err) < 0 ||
            cuda_linear(b, &L->shexp_up, b->xn, E, n, b->sh_up, F, true, err) < 0 ||
            cuda_swiglu(b->sh_gate, b->sh_up, (int64_t)n * F, s, err) < 0 ||
            cuda_linear(b, &L->shexp_down, b->sh_gate, F, n, b->proj, E, false, err) < 0)
            return -1;
    }
    /* the exchange's rows read in place by the combine where the executor allows (no copy: one launch fewer) */
    const float *y = NULL;
    const float *const *y_at = NULL;
    const int at = b->xchg_fuse ? cuda_moe_collect_at(ex, &y_at, s, err) : 0;
    if (at < 0 || (!at && moe_exec_collect(ex, &y, s, err) < 0))
        return guild_err_prefix(err, "routed experts: ");
    return cuda_residual_combine(b, y, y_at, b->route_w, shared ? b->proj : NULL, gated ? b->sh_logit : NULL, n, K,
                                 err);
}

/* Option clamped swiglu changes only the experts: the device executor (cuda_moe_gpu.c) and the CPU workers apply
 * it with the experts' biases; the combine is the same. */
const cuda_ffn_part_t cuda_ffn_moe = {
    .opts = MODEL_FFN_SHEXP_GATED | MODEL_FFN_SHEXP | MODEL_FFN_SWIGLU_OAI,
    .forward = moe_forward,
};
