/* GQA attention (MODEL_ATTN_GQA) on the CUDA backend: gpu-worker/dense/cpu/attn_gqa.c step for step, each step
 * one kernel on the backend's stream.
 *
 *   q,k,v = W xn (+ bias);  q,k norms;  RoPE;  k,v -> cache (F16, F32, or the block formats of kv_format.h,
 *           quantized as the CPU backend does)
 *   att = causal attention (decode kernel for a few rows, flash-attention kernel for a batch; over a block
 *         cache the kernel that reads the blocks, any batch), over the layer's window of keys when it slides, with
 *         the heads' sinks (options sliding window, attention sinks)
 *   att *= sigmoid(gate)        (option output gate: wq gives each head's query, then its gate)
 *   x += wo att (+ bo, option output bias)
 */
#include <math.h>

#include "gpu-worker/dense/kv_format.h"
#include "gpu-worker/dense/cuda/cuda_kernels.h"
#include "gpu-worker/dense/cuda/cuda_parts.h"

/* Batches up to CUDA_DECODE_ROWS rows use the decode attention kernel (keys split across blocks per row): a
 * row's attention is the same bits in any such batch (speculative verify steps equal plain decode); captured
 * graphs (CUDA_GRAPH_ROWS) rely on it reading the cache length from the device. Larger batches (prefill) take
 * the flash-attention kernel, whose tiles follow the batch. */
_Static_assert(CUDA_GRAPH_ROWS <= CUDA_DECODE_ROWS, "graphs capture only the decode attention kernel");

/* Biases, Q/K norms, RoPE, and the K/V rows into the cache (qk_prepare_task of the CPU backend). */
static int qk_prepare(cuda_backend_t *b, const cuda_layer_t *L, uint32_t opts, int32_t il, int32_t n,
                      guild_err_t *err)
{
    const model_config_t *c = b->cfg;
    const int64_t HD = c->head_dim, Q = (int64_t)c->n_head * HD, KV = (int64_t)c->n_head_kv * HD;
    cudaStream_t s = b->stream;
    if ((opts & MODEL_GQA_QKV_BIAS) && (cuda_add_bias(b->q, Q, L->bq.d, Q, n, s, err) < 0 ||
                                        cuda_add_bias(b->k, KV, L->bk.d, KV, n, s, err) < 0 ||
                                        cuda_add_bias(b->v, KV, L->bv.d, KV, n, s, err) < 0))
        return -1;
    const bool neox = c->rope_neox;
    const bool norm_head = opts & MODEL_GQA_QK_NORM_HEAD, norm_full = opts & MODEL_GQA_QK_NORM_FULL;
    char *kc = (char *)b->k_cache + (size_t)b->kv_slot[il] * b->k_layer_bytes;
    char *vc = (char *)b->v_cache + (size_t)b->kv_slot[il] * b->v_layer_bytes;
    const bool blocks = b->kv_format != KV_TYPE_F16 && b->kv_format != KV_TYPE_F32;
    if (!blocks && !norm_full && HD % 32 == 0 && HD <= 256) /* one kernel, the same bits */
        return cuda_qk_prepare(b->q, b->k, b->v, n, c->n_head, c->n_head_kv, c->head_dim,
                               norm_head ? L->q_norm.d : NULL, norm_head ? L->k_norm.d : NULL, c->norm_eps, c->n_rot,
                               neox, b->rope_cs, b->d_pos, b->kv_type, kc, vc, s, err);
    if (norm_head) {
        if (cuda_rmsnorm(b->q, HD, b->q, HD, NULL, L->q_norm.d, HD, n * c->n_head, c->norm_eps, s, err) < 0 ||
            cuda_rmsnorm(b->k, HD, b->k, HD, NULL, L->k_norm.d, HD, n * c->n_head_kv, c->norm_eps, s, err) < 0)
            return -1;
    } else if (norm_full) {
        if (cuda_rmsnorm(b->q, Q, b->q, Q, NULL, L->q_norm.d, Q, n, c->norm_eps, s, err) < 0 ||
            cuda_rmsnorm(b->k, KV, b->k, KV, NULL, L->k_norm.d, KV, n, c->norm_eps, s, err) < 0)
            return -1;
    }
    /* positions from the device (b->d_pos): a captured graph replays at any cache length */
    if (cuda_rope_dyn(b->q, Q, n, c->n_head, c->head_dim, c->n_rot, neox, b->rope_cs, b->d_pos, s, err) < 0 ||
        cuda_rope_dyn(b->k, KV, n, c->n_head_kv, c->head_dim, c->n_rot, neox, b->rope_cs, b->d_pos, s, err) < 0 ||
        (blocks ? cuda_kv_store_blocks(b->kv_type, b->v_type, kv_type_rotates_v(b->kv_format), kc, vc, b->k, b->v,
                                       KV, c->head_dim, n, 0, b->d_pos, s, err)
                : cuda_kv_store_dyn(b->kv_type, kc, vc, b->k, b->v, KV, n, b->d_pos, s, err)) < 0)
        return -1;
    return 0;
}

static int gqa_forward(cuda_backend_t *b, const model_part_t *p, int32_t il, int32_t n, guild_err_t *err)
{
    const model_config_t *c = b->cfg;
    const cuda_layer_t *L = &b->layers[il];
    const int64_t E = c->n_embd, HD = c->head_dim, Q = (int64_t)c->n_head * HD, KV = (int64_t)c->n_head_kv * HD;
    const float scale = 1.0f / sqrtf((float)c->head_dim);
    cudaStream_t s = b->stream;

    const bool gated = p->opts & MODEL_GQA_OUT_GATE;
    if (gated ? cuda_linear(b, &L->wq, b->xn, E, n, b->qg, 2 * Q, false, err) < 0 ||
                    cuda_qg_split(b->qg, b->q, b->gate, n, c->n_head, c->head_dim, s, err) < 0
              : cuda_linear(b, &L->wq, b->xn, E, n, b->q, Q, false, err) < 0)
        return -1;
    if (cuda_linear(b, &L->wk, b->xn, E, n, b->k, KV, true, err) < 0 ||
        cuda_linear(b, &L->wv, b->xn, E, n, b->v, KV, true, err) < 0 || qk_prepare(b, L, p->opts, il, n, err) < 0)
        return -1;
    const void *kc = (const char *)b->k_cache + (size_t)b->kv_slot[il] * b->k_layer_bytes;
    const void *vc = (const char *)b->v_cache + (size_t)b->kv_slot[il] * b->v_layer_bytes;
    const cuda_attn_ext_t ext = {model_layer_window(c, il), (p->opts & MODEL_GQA_SINKS) ? L->sinks.d : NULL};
    const bool blocks = b->kv_format != KV_TYPE_F16 && b->kv_format != KV_TYPE_F32;
    const int rc = blocks ? cuda_attention_blocks(b->att, b->q, b->kv_type, b->v_type, kv_type_rotates_v(b->kv_format),
                                                  kc, vc, n, 0, b->d_pos, c->n_head, c->n_head_kv, c->head_dim, scale,
                                                  &ext, s, err)
                   : n <= CUDA_DECODE_ROWS
                       ? cuda_attention_decode_dyn(b->att, b->q, b->kv_type, kc, vc, n, b->d_pos, b->n_ctx - n,
                                                   c->n_head, c->n_head_kv, c->head_dim, scale, &ext, b->attn_scratch,
                                                   b->attn_scratch_bytes, s, err)
                       : cuda_attention_prefill(b->att, b->q, b->kv_type, kc, vc, n, b->kv_len, c->n_head,
                                                c->n_head_kv, c->head_dim, scale, &ext, s, err);
    if (rc < 0 || (gated && cuda_sigmoid_mul(b->att, b->gate, (int64_t)n * Q, s, err) < 0) ||
        cuda_linear(b, &L->wo, b->att, Q, n, b->proj, E, false, err) < 0)
        return -1;
    /* x = (proj + bo) + x, the CPU backend's order */
    if ((p->opts & MODEL_GQA_OUT_BIAS) && cuda_add_bias(b->proj, E, L->bo.d, E, n, s, err) < 0)
        return -1;
    return cuda_add(b->x, b->proj, (int64_t)n * E, s, err);
}

const cuda_attn_part_t cuda_attn_gqa = {
    .opts = MODEL_GQA_ROPE_NEOX | MODEL_GQA_ROPE_PARTIAL | MODEL_GQA_QKV_BIAS | MODEL_GQA_QK_NORM_HEAD |
            MODEL_GQA_QK_NORM_FULL | MODEL_GQA_SINKS | MODEL_GQA_SLIDING | MODEL_GQA_OUT_BIAS | MODEL_GQA_OUT_GATE,
    .forward = gqa_forward,
};
