/* The layer program of the CUDA backend: the CPU backend's (gpu-worker/dense/cpu/cpu_layer.c) step for step, each
 * step one kernel on the backend's stream.
 *
 *   xn = rmsnorm(x, attn_norm);  q,k,v = W xn (+ bias);  q,k norms;  RoPE;  k,v -> cache (F16 or F32)
 *   att = causal attention (decode kernel for a few rows, flash-attention kernel for a batch)
 *   x += wo att;  xn = rmsnorm(x, ffn_norm);  router top-k
 *   routed experts: submitted to the cuda_moe_t bridge; the shared expert runs meanwhile; collected
 *   x += sum over slots in order of w * y  [+ sigmoid(gate) * shared]
 */
#include <math.h>

#include "core/quant/quant.h"
#include "gpu-worker/dense/cuda/cuda_kernels.h"
#include "gpu-worker/dense/cuda/cuda_state.h"

/* Batches up to this many rows use the decode attention kernel (keys split across blocks); captured graphs
 * (CUDA_GRAPH_ROWS) rely on it reading the cache length from the device. */
#define DECODE_ROWS 4
_Static_assert(CUDA_GRAPH_ROWS <= DECODE_ROWS, "graphs capture only the decode attention kernel");

int cuda_linear(cuda_backend_t *b, const cuda_tensor_t *W, const float *x, int64_t ldx, int32_t n, float *y,
                int64_t ldy, bool reuse, guild_err_t *err)
{
    const guild_type_t at = quant_type_info(W->type)->dot_type;
    if (at == GUILD_TYPE_F32) /* the products read x itself (cuda_quantize's F32 "quantization" is a copy) */
        return cuda_matmul(W->type, W->n_in, W->n_rows, n, W->d, W->row_bytes, x, (size_t)ldx * sizeof(float), y,
                           ldy, b->stream, err);
    uint64_t row = 0;
    if (quant_row_bytes(at, (uint64_t)W->n_in, &row, err) < 0)
        return -1;
    if (!(reuse && b->act_src == x && b->act_type == at)) {
        if (cuda_quantize(at, x, ldx, b->act, b->act_row, W->n_in, n, b->stream, err) < 0)
            return -1;
        b->act_src = x;
        b->act_type = at;
    }
    return cuda_matmul(W->type, W->n_in, W->n_rows, n, W->d, W->row_bytes, b->act, b->act_row, y, ldy, b->stream,
                       err);
}

/* Biases, Q/K norms, RoPE, and the K/V rows into the cache (qk_prepare_task of the CPU backend). */
static int qk_prepare(cuda_backend_t *b, const cuda_layer_t *L, int32_t il, int32_t n, guild_err_t *err)
{
    const model_config_t *c = b->cfg;
    const model_arch_info_t *info = model_arch_info(c->arch);
    const int64_t HD = c->head_dim, Q = (int64_t)c->n_head * HD, KV = (int64_t)c->n_head_kv * HD;
    cudaStream_t s = b->stream;
    if (info->qkv_bias && (cuda_add_bias(b->q, Q, L->bq.d, Q, n, s, err) < 0 ||
                           cuda_add_bias(b->k, KV, L->bk.d, KV, n, s, err) < 0 ||
                           cuda_add_bias(b->v, KV, L->bv.d, KV, n, s, err) < 0))
        return -1;
    const bool neox = info->rope == MODEL_ROPE_NEOX;
    const size_t layer0 = (size_t)il * (size_t)b->n_ctx * (size_t)KV * b->kv_elem; /* bytes */
    if (info->qk_norm != MODEL_QK_NORM_FULL && HD % 32 == 0 && HD <= 256) /* one kernel, the same bits */
        return cuda_qk_prepare(b->q, b->k, b->v, n, c->n_head, c->n_head_kv, c->head_dim,
                               info->qk_norm == MODEL_QK_NORM_HEAD ? L->q_norm.d : NULL,
                               info->qk_norm == MODEL_QK_NORM_HEAD ? L->k_norm.d : NULL, c->norm_eps, c->n_rot, neox,
                               b->rope_cs, b->d_pos, b->kv_type, (char *)b->k_cache + layer0,
                               (char *)b->v_cache + layer0, s, err);
    if (info->qk_norm == MODEL_QK_NORM_HEAD) {
        if (cuda_rmsnorm(b->q, HD, b->q, HD, NULL, L->q_norm.d, HD, n * c->n_head, c->norm_eps, s, err) < 0 ||
            cuda_rmsnorm(b->k, HD, b->k, HD, NULL, L->k_norm.d, HD, n * c->n_head_kv, c->norm_eps, s, err) < 0)
            return -1;
    } else if (info->qk_norm == MODEL_QK_NORM_FULL) {
        if (cuda_rmsnorm(b->q, Q, b->q, Q, NULL, L->q_norm.d, Q, n, c->norm_eps, s, err) < 0 ||
            cuda_rmsnorm(b->k, KV, b->k, KV, NULL, L->k_norm.d, KV, n, c->norm_eps, s, err) < 0)
            return -1;
    }
    /* positions from the device (b->d_pos): a captured graph replays at any cache length */
    if (cuda_rope_dyn(b->q, Q, n, c->n_head, c->head_dim, c->n_rot, neox, b->rope_cs, b->d_pos, s, err) < 0 ||
        cuda_rope_dyn(b->k, KV, n, c->n_head_kv, c->head_dim, c->n_rot, neox, b->rope_cs, b->d_pos, s, err) < 0 ||
        cuda_kv_store_dyn(b->kv_type, (char *)b->k_cache + layer0, (char *)b->v_cache + layer0, b->k, b->v, KV, n,
                          b->d_pos, s, err) < 0)
        return -1;
    return 0;
}

int cuda_layer_forward(cuda_backend_t *b, int32_t il, int32_t n, guild_err_t *err)
{
    const model_config_t *c = b->cfg;
    const cuda_layer_t *L = &b->layers[il];
    const int64_t E = c->n_embd, HD = c->head_dim, Q = (int64_t)c->n_head * HD, KV = (int64_t)c->n_head_kv * HD;
    const float scale = 1.0f / sqrtf((float)c->head_dim);
    cudaStream_t s = b->stream;

    /* attention */
    if (cuda_rmsnorm(b->xn, E, b->x, E, NULL, L->attn_norm.d, E, n, c->norm_eps, s, err) < 0 ||
        cuda_linear(b, &L->wq, b->xn, E, n, b->q, Q, false, err) < 0 ||
        cuda_linear(b, &L->wk, b->xn, E, n, b->k, KV, true, err) < 0 ||
        cuda_linear(b, &L->wv, b->xn, E, n, b->v, KV, true, err) < 0 || qk_prepare(b, L, il, n, err) < 0)
        goto fail;
    const size_t layer0 = (size_t)il * (size_t)b->n_ctx * (size_t)KV * b->kv_elem; /* bytes */
    const void *kc = (const char *)b->k_cache + layer0, *vc = (const char *)b->v_cache + layer0;
    const int rc = n <= DECODE_ROWS
                       ? cuda_attention_decode_dyn(b->att, b->q, b->kv_type, kc, vc, n, b->d_pos, b->n_ctx - n,
                                                   c->n_head, c->n_head_kv, c->head_dim, scale, b->attn_scratch,
                                                   b->attn_scratch_bytes, s, err)
                       : cuda_attention_prefill(b->att, b->q, b->kv_type, kc, vc, n, b->kv_len, c->n_head,
                                                c->n_head_kv, c->head_dim, scale, s, err);
    if (rc < 0 || cuda_linear(b, &L->wo, b->att, Q, n, b->proj, E, false, err) < 0 ||
        cuda_add(b->x, b->proj, (int64_t)n * E, s, err) < 0)
        goto fail;

    /* mixture of experts */
    const int32_t K = c->n_expert_used;
    const bool shared = model_arch_info(c->arch)->shared_expert;
    if (cuda_rmsnorm(b->xn, E, b->x, E, NULL, L->ffn_norm.d, E, n, c->norm_eps, s, err) < 0 ||
        cuda_linear(b, &L->router, b->xn, E, n, b->router_logits, c->n_expert, false, err) < 0 ||
        cuda_router_topk(b->router_logits, n, c->n_expert, K, model_arch_info(c->arch)->router_renorm,
                         c->expert_weights_scale, b->ids, b->route_w, s, err) < 0 ||
        b->moe->ops->submit(b->moe, il, n, b->xn, b->ids, s, err) < 0)
        goto fail;
    if (shared) {
        const int64_t F = c->n_ff_shexp;
        if (cuda_linear(b, &L->shexp_gate_inp, b->xn, E, n, b->sh_logit, 1, true, err) < 0 ||
            cuda_linear(b, &L->shexp_gate, b->xn, E, n, b->sh_gate, F, true, err) < 0 ||
            cuda_linear(b, &L->shexp_up, b->xn, E, n, b->sh_up, F, true, err) < 0 ||
            cuda_swiglu(b->sh_gate, b->sh_up, (int64_t)n * F, s, err) < 0 ||
            cuda_linear(b, &L->shexp_down, b->sh_gate, F, n, b->proj, E, false, err) < 0)
            goto fail;
    }
    const float *y = NULL;
    if (b->moe->ops->collect(b->moe, &y, s, err) < 0)
        return guild_err_prefix(err, "layer %d: routed experts: ", il);
    if (cuda_moe_combine(b->x, y, b->route_w, shared ? b->proj : NULL, b->sh_logit, n, K, E, s, err) < 0)
        goto fail;
    return 0;
fail:
    return guild_err_prefix(err, "layer %d: ", il);
}
