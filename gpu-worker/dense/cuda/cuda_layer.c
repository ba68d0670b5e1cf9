/* The layer program of the CUDA backend: the CPU backend's (gpu-worker/dense/cpu/cpu_layer.c), composed of the
 * same parts (cuda_parts.h), each step one kernel on the backend's stream:
 *
 *   xn = rmsnorm(x, attn_norm);  x += attention part (xn);  xn = rmsnorm(x, ffn_norm);  x += FFN part (xn)
 *
 * and cuda_linear, the matrix product every part and the LM head use. The norms check the stream for NaN and
 * infinity on the device (gpu-worker/dense/finite_check.h).
 *
 * A decode step is a chain of small launches bound by latency, so where it can the block norm is one launch with
 * its neighbours (cuda_rmsnorm_fused): the residual update that ends the part before it (a part's
 * cuda_residual_add/_combine leaves it pending in b->pend), and the quantization of xn for the part's first
 * product, which cuda_linear then takes (b->act_fresh); or the FFN's norm joins the launch after it, the
 * softmax router's (b->norm_defer, router_softmax.c). The bits are those of the separate launches
 * (cuda_config_t.no_fuse runs those). The last layer applies its pending update itself: the LM head's norm
 * reads only the output rows. With the same setting the parts fuse their own launches: GQA's Q, K and V products,
 * of one type or two (cuda_linear_multi), the decode attention's merge of its splits and the quantization of its
 * output for the output product (attn_gqa.c), the router's product and choice (router_softmax.c), the routed
 * experts' route and the quantization of their rows, or for a few tokens no route at all (cuda_moe_gpu.c). Each launch of the chain may start while the one before it ends
 * (programmatic dependent launch, cuda_common.cuh; cuda_config_t.no_pdl turns it off).
 */
#include "core/quant/quant.h"
#include "gpu-worker/dense/cuda/cuda_kernels.h"
#include "gpu-worker/dense/cuda/cuda_parts.h"
#define GUILD_CUDA_STEP_CLOCK_INTERNAL
#include "gpu-worker/dense/cuda/cuda_step_clock.h"

int cuda_linear(cuda_backend_t *b, const cuda_tensor_t *W, const float *x, int64_t ldx, int32_t n, float *y,
                int64_t ldy, bool reuse, guild_err_t *err)
{
    const guild_type_t at = quant_type_info(W->type)->dot_type;
    const bool fresh = b->act_fresh == x && b->act_type == at; /* quantized by the norm that wrote x */
    b->act_fresh = NULL;
    const void *l2 = b->l2_next;
    const size_t l2_bytes = b->l2_next_bytes;
    b->l2_next = NULL;
    b->l2_next_bytes = 0;
    if (at == GUILD_TYPE_F32) /* the products read x itself (cuda_quantize's F32 "quantization" is a copy) */
        return cuda_matmul(W->type, W->n_in, W->n_rows, n, W->d, W->row_bytes, x, (size_t)ldx * sizeof(float), y,
                           ldy, b->stream, err);
    uint64_t row = 0;
    if (quant_row_bytes(at, (uint64_t)W->n_in, &row, err) < 0)
        return -1;
    if (!fresh && !(reuse && b->act_src == x && b->act_type == at)) {
        if (cuda_quantize(at, x, ldx, b->act, b->act_row, W->n_in, n, b->stream, err) < 0)
            return -1;
        b->act_src = x;
        b->act_type = at;
    }
    return cuda_matmul_l2(W->type, W->n_in, W->n_rows, n, W->d, W->row_bytes, b->act, b->act_row, y, ldy, l2,
                          l2_bytes, b->stream, err);
}

int cuda_linear_multi(cuda_backend_t *b, int32_t count, const cuda_tensor_t *const *W, const float *x, int64_t ldx,
                      int32_t n, float *const *y, const int64_t *ldy, guild_err_t *err)
{
    for (int32_t i = 0; i < count;) {
        const guild_type_t at = quant_type_info(W[i]->type)->dot_type;
        int32_t j = i + 1; /* W[i .. j): one dot type and width (fused: one type or two, cuda_matmul_multi_types) */
        while (j < count && W[j]->n_in == W[i]->n_in &&
               (W[j]->type == W[i]->type || (b->fuse && quant_type_info(W[j]->type)->dot_type == at)))
            j++;
        if (j - i == 1 || at == GUILD_TYPE_F32 || !b->fuse) {
            for (; i < j; i++)
                if (cuda_linear(b, W[i], x, ldx, n, y[i], ldy[i], i > 0, err) < 0)
                    return -1;
            continue;
        }
        /* cuda_linear's quantization of x (or the block norm's), once */
        const bool fresh = b->act_fresh == x && b->act_type == at;
        b->act_fresh = NULL;
        if (!fresh && !(i > 0 && b->act_src == x && b->act_type == at)) {
            if (cuda_quantize(at, x, ldx, b->act, b->act_row, W[i]->n_in, n, b->stream, err) < 0)
                return -1;
            b->act_src = x;
            b->act_type = at;
        }
        const void *w[4];
        size_t ws[4];
        int64_t nr[4];
        guild_type_t ty[4];
        for (int32_t k = i; k < j; k++) {
            w[k - i] = W[k]->d;
            ws[k - i] = W[k]->row_bytes;
            nr[k - i] = W[k]->n_rows;
            ty[k - i] = W[k]->type;
        }
        if (cuda_matmul_multi_types(ty, W[i]->n_in, n, j - i, w, ws, nr, b->act, b->act_row, y + i, ldy + i,
                                    b->stream, err) < 0)
            return -1;
        i = j;
    }
    return 0;
}

int cuda_layer_mark(cuda_backend_t *b, int32_t il, int which, guild_err_t *err)
{
    return il == 0 ? cuda_step_clock_mark(b->clock, which, b->stream, err) : 0;
}

int cuda_residual_add(cuda_backend_t *b, const float *p, int32_t n, guild_err_t *err)
{
    if (b->fuse) {
        b->pend = (cuda_norm_pre_t){.kind = CUDA_PRE_ADD, .p = p};
        return 0;
    }
    return cuda_add(b->x, p, (int64_t)n * b->cfg->n_embd, b->stream, err);
}

int cuda_residual_combine(cuda_backend_t *b, const float *y, const float *const *y_at, const float *w,
                          const float *sh, const float *sh_logit, int32_t n, int32_t n_used, guild_err_t *err)
{
    const cuda_norm_pre_t pre = {
        .kind = CUDA_PRE_COMBINE, .y = y, .y_at = y_at, .w = w, .sh = sh, .sh_logit = sh_logit, .n_used = n_used};
    if (b->fuse) {
        b->pend = pre;
        return 0;
    }
    return cuda_moe_combine_pre(b->x, &pre, n, b->cfg->n_embd, b->stream, err);
}

/* The pending residual update on its own. */
static int residual_flush(cuda_backend_t *b, int32_t n, guild_err_t *err)
{
    const cuda_norm_pre_t p = b->pend;
    b->pend.kind = CUDA_PRE_NONE;
    if (p.kind == CUDA_PRE_ADD)
        return cuda_add(b->x, p.p, (int64_t)n * b->cfg->n_embd, b->stream, err);
    if (p.kind == CUDA_PRE_COMBINE)
        return cuda_moe_combine_pre(b->x, &p, n, b->cfg->n_embd, b->stream, err);
    return 0;
}

/* xn = rmsnorm(x, w) at the non-finite check's `site`, after the pending residual update; with W (the block's
 * first product, or NULL), xn also quantized to W's activation type for it when the norm fuses. */
static int block_norm(cuda_backend_t *b, const cuda_tensor_t *w, const cuda_tensor_t *W, uint32_t site, int32_t n,
                      guild_err_t *err)
{
    const model_config_t *c = b->cfg;
    const int64_t E = c->n_embd;
    b->act_src = NULL;
    b->act_fresh = NULL;
    if (!b->fuse)
        return cuda_rmsnorm_checked(b->xn, E, b->x, E, NULL, w->d, E, n, c->norm_eps, b->d_finite, site, b->stream,
                                    err);
    const guild_type_t at = W && W->d ? quant_type_info(W->type)->dot_type : GUILD_TYPE_F32;
    const bool q = at == GUILD_TYPE_Q8_0 || at == GUILD_TYPE_Q8_1 || at == GUILD_TYPE_Q8_K;
    const int rc = cuda_rmsnorm_fused(b->xn, b->x, w->d, E, n, c->norm_eps, b->d_finite, site, &b->pend, at,
                                      q ? b->act : NULL, b->act_row, b->stream, err);
    b->pend.kind = CUDA_PRE_NONE;
    if (rc < 0)
        return -1;
    if (q) {
        b->act_src = b->xn;
        b->act_fresh = b->xn;
        b->act_type = at;
    }
    return 0;
}

/* The FFN's block norm: block_norm, or left with its pending residual addition to the router's launch when the
 * router takes it (cuda_router_softmax_takes_norm: one launch fewer in a decode step). */
static int ffn_norm(cuda_backend_t *b, const model_layer_parts_t *lp, const cuda_tensor_t *w,
                    const cuda_tensor_t *W, uint32_t site, int32_t il, int32_t n, guild_err_t *err)
{
    if (!cuda_router_softmax_takes_norm(b, lp, il, n))
        return block_norm(b, w, W, site, n, err);
    b->norm_defer.w = w;
    b->norm_defer.site = site;
    b->norm_defer.p = b->pend.kind == CUDA_PRE_ADD ? b->pend.p : NULL;
    b->pend.kind = CUDA_PRE_NONE;
    b->act_src = NULL;
    b->act_fresh = NULL;
    return 0;
}

int cuda_layer_forward(cuda_backend_t *b, int32_t il, int32_t n, guild_err_t *err)
{
    const model_config_t *c = b->cfg;
    const cuda_layer_t *L = &b->layers[il];
    const model_layer_parts_t lp = model_layer_parts(c, il);
    const uint32_t site = 2 * (uint32_t)il; /* the non-finite check's (finite_check.h): NULL d_finite, none */
    /* the products that read xn first: GQA's query (the other kinds quantize xn themselves), the dense FFN's gate */
    const cuda_tensor_t *attn_in = lp.attn->kind == MODEL_ATTN_GQA ? &L->wq : NULL;
    const cuda_tensor_t *ffn_in = lp.ffn->kind == MODEL_FFN_DENSE ? &L->ffn_gate : NULL;
    if (il == 0) { /* a failed step's are void */
        b->pend.kind = CUDA_PRE_NONE;
        b->norm_defer.w = NULL;
    }
    cuda_step_clock_t *clock = il == 0 ? b->clock : NULL; /* the step clock's marks between layer 0's parts */
    if (block_norm(b, &L->attn_norm, attn_in, site, n, err) < 0 ||
        cuda_step_clock_mark(clock, CUDA_MARK_L0_NORM, b->stream, err) < 0 ||
        cuda_attn_parts[lp.attn->kind]->forward(b, lp.attn, il, n, err) < 0 ||
        cuda_step_clock_mark(clock, CUDA_MARK_L0_ATTN, b->stream, err) < 0 ||
        ffn_norm(b, &lp, &L->ffn_norm, ffn_in, site + 1, il, n, err) < 0 ||
        cuda_step_clock_mark(clock, CUDA_MARK_L0_FFN_NORM, b->stream, err) < 0 ||
        cuda_ffn_parts[lp.ffn->kind]->forward(b, &lp, il, n, err) < 0 ||
        (il + 1 >= c->n_layer && residual_flush(b, n, err) < 0))
        return guild_err_prefix(err, "layer %d: ", il);
    return 0;
}
