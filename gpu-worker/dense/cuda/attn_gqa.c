/* GQA attention (MODEL_ATTN_GQA) on the CUDA backend: gpu-worker/dense/cpu/attn_gqa.c step for step, each step
 * one kernel on the backend's stream.
 *
 *   q,k,v = W xn (+ bias);  q,k norms;  RoPE;  k,v -> cache (F16, F32, or the block formats of kv_format.h,
 *           quantized as the CPU backend does)
 *   att = causal attention (decode kernel for a few rows, flash-attention kernel for a batch; over a block
 *         cache the kernel that reads the blocks, its splits in parallel up to the scratch's rows, for a few rows
 *         and the tensor-core flash attention over the blocks for a batch where it takes the head dimension),
 *         over the layer's window of keys when it slides, with
 *         the heads' sinks (options sliding window, attention sinks)
 *   att *= sigmoid(gate)        (option output gate: wq gives each head's query, then its gate)
 *   (fused, a decode step: the attention's launch also quantizes att for wo: cuda_attn_ext_t.quant_type)
 *   x += wo att (+ bo, option output bias)
 */
#include <math.h>

#include "gpu-worker/dense/kv_format.h"
#include "gpu-worker/dense/cuda/cuda_kernels.h"
#include "gpu-worker/dense/cuda/cuda_parts.h"
#include "gpu-worker/dense/cuda/cuda_util.h"

/* Batches up to CUDA_DECODE_ROWS rows use the decode attention kernel (keys split across blocks per row): a
 * row's attention is the same bits in any such batch (speculative verify steps equal plain decode); captured
 * graphs (CUDA_GRAPH_ROWS) rely on it reading the cache length from the device. Larger batches (prefill) take
 * the flash-attention kernel, whose tiles follow the batch. */
_Static_assert(CUDA_GRAPH_ROWS <= CUDA_DECODE_ROWS, "graphs capture only the decode attention kernel");

/* Biases, Q/K norms, RoPE, and the K/V rows into the cache (qk_prepare_task of the CPU backend) of the n rows
 * from row r0 of the batch, all of sequence seq, their positions from *pos. */
static int qk_prepare(cuda_backend_t *b, const cuda_layer_t *L, uint32_t opts, int32_t il, int32_t r0, int32_t n,
                      int32_t seq, const int32_t *pos, guild_err_t *err)
{
    const model_config_t *c = b->cfg;
    const int64_t HD = c->head_dim, Q = (int64_t)c->n_head * HD, KV = (int64_t)c->n_head_kv * HD;
    float *q = b->q + (size_t)r0 * (size_t)Q, *k = b->k + (size_t)r0 * (size_t)KV, *v = b->v + (size_t)r0 * (size_t)KV;
    cudaStream_t s = b->stream;
    if ((opts & MODEL_GQA_QKV_BIAS) && (cuda_add_bias(q, Q, L->bq.d, Q, n, s, err) < 0 ||
                                        cuda_add_bias(k, KV, L->bk.d, KV, n, s, err) < 0 ||
                                        cuda_add_bias(v, KV, L->bv.d, KV, n, s, err) < 0))
        return -1;
    const bool neox = c->rope_neox;
    const bool norm_head = opts & MODEL_GQA_QK_NORM_HEAD, norm_full = opts & MODEL_GQA_QK_NORM_FULL;
    char *kc = cuda_kv_k(b, il, seq);
    char *vc = cuda_kv_v(b, il, seq);
    const bool blocks = b->kv_format != KV_TYPE_F16 && b->kv_format != KV_TYPE_F32;
    if (!blocks && !norm_full && HD % 32 == 0 && HD <= 256) /* one kernel, the same bits */
        return cuda_qk_prepare(q, k, v, n, c->n_head, c->n_head_kv, c->head_dim, norm_head ? L->q_norm.d : NULL,
                               norm_head ? L->k_norm.d : NULL, c->norm_eps, c->n_rot, neox, b->rope_cs, pos,
                               b->kv_type, kc, vc, s, err);
    if (norm_head) {
        if (cuda_rmsnorm(q, HD, q, HD, NULL, L->q_norm.d, HD, n * c->n_head, c->norm_eps, s, err) < 0 ||
            cuda_rmsnorm(k, HD, k, HD, NULL, L->k_norm.d, HD, n * c->n_head_kv, c->norm_eps, s, err) < 0)
            return -1;
    } else if (norm_full) {
        if (cuda_rmsnorm(q, Q, q, Q, NULL, L->q_norm.d, Q, n, c->norm_eps, s, err) < 0 ||
            cuda_rmsnorm(k, KV, k, KV, NULL, L->k_norm.d, KV, n, c->norm_eps, s, err) < 0)
            return -1;
    }
    /* positions from the device (b->d_pos): a captured graph replays at any cache length */
    if (cuda_rope_dyn(q, Q, n, c->n_head, c->head_dim, c->n_rot, neox, b->rope_cs, pos, s, err) < 0 ||
        cuda_rope_dyn(k, KV, n, c->n_head_kv, c->head_dim, c->n_rot, neox, b->rope_cs, pos, s, err) < 0 ||
        (blocks ? cuda_kv_store_blocks(b->kv_type, b->v_type, kv_type_rotates_v(b->kv_format), kc, vc, k, v, KV,
                                       c->head_dim, n, 0, pos, s, err)
                : cuda_kv_store_dyn(b->kv_type, kc, vc, k, v, KV, n, pos, s, err)) < 0)
        return -1;
    return 0;
}

/* Group g of the batch (cuda_state.h): its rows' K/V into its sequence's cache, then their attention over it;
 * with qt (not F32) the decode kernel also writes its output rows quantized to qt into b->act (rows of act_row). */
static int group_attention(cuda_backend_t *b, const model_part_t *p, const cuda_layer_t *L, int32_t il, int32_t g,
                           guild_type_t qt, guild_err_t *err)
{
    const model_config_t *c = b->cfg;
    const int64_t Q = (int64_t)c->n_head * c->head_dim;
    const float scale = 1.0f / sqrtf((float)c->head_dim);
    const int32_t r0 = b->grp_row0[g], n = b->grp_rows[g], seq = b->grp_seq[g];
    const int32_t *pos = b->d_pos + g;
    if (qk_prepare(b, L, p->opts, il, r0, n, seq, pos, err) < 0)
        return -1;
    float *att = b->att + (size_t)r0 * (size_t)Q;
    const float *q = b->q + (size_t)r0 * (size_t)Q;
    const void *kc = cuda_kv_k(b, il, seq);
    const void *vc = cuda_kv_v(b, il, seq);
    cudaStream_t s = b->stream;
    if (b->kv_host_k && n > CUDA_DECODE_ROWS) {
        /* the cache in host RAM (the plan's kv_host): a prefill batch's attention reads its layer's rows from a
         * device copy, over PCIe once rather than once per tile of queries; decode reads them in place */
        const size_t rows = (size_t)b->grp_len[g] + (size_t)n;
        if (cuda_check(cudaMemcpyAsync(b->kv_stage_k, kc, rows * (b->k_layer_bytes / (size_t)b->n_ctx),
                                       cudaMemcpyDefault, s), "stage the K cache", err) < 0 ||
            cuda_check(cudaMemcpyAsync(b->kv_stage_v, vc, rows * (b->v_layer_bytes / (size_t)b->n_ctx),
                                       cudaMemcpyDefault, s), "stage the V cache", err) < 0)
            return -1;
        kc = b->kv_stage_k;
        vc = b->kv_stage_v;
    }
    const cuda_attn_ext_t ext = {model_layer_window(c, il), (p->opts & MODEL_GQA_SINKS) ? L->sinks.d : NULL};
    /* fused: a decode row's splits merged in the attention's launch, and (qt) its output quantized there */
    const cuda_attn_fuse_t fuse = {b->d_attn_done, qt,
                                   qt != GUILD_TYPE_F32 ? (char *)b->act + (size_t)r0 * b->act_row : NULL, b->act_row};
    const bool blocks = b->kv_format != KV_TYPE_F16 && b->kv_format != KV_TYPE_F32;
    const bool rot = kv_type_rotates_v(b->kv_format);
    if (blocks && n > CUDA_DECODE_ROWS &&
        cuda_attention_blocks_mma_takes(b->kv_type, b->v_type, rot, c->head_dim, att, q, kc, vc))
        return cuda_attention_blocks_mma(att, q, b->kv_type, b->v_type, rot, kc, vc, n, b->grp_len[g], c->n_head,
                                         c->n_head_kv, c->head_dim, scale, &ext, s, err);
    return blocks ? cuda_attention_blocks(att, q, b->kv_type, b->v_type, kv_type_rotates_v(b->kv_format), kc, vc, n,
                                          b->n_ctx - n, pos, c->n_head, c->n_head_kv, c->head_dim, scale, &ext,
                                          b->attn_scratch, b->attn_scratch_bytes, s, err)
           : n <= CUDA_DECODE_ROWS
               ? cuda_attention_decode_dyn(att, q, b->kv_type, kc, vc, n, pos, b->n_ctx - n, c->n_head, c->n_head_kv,
                                           c->head_dim, scale, &ext, b->attn_scratch, b->attn_scratch_bytes,
                                           b->fuse ? &fuse : NULL, s, err)
               : cuda_attention_prefill(att, q, b->kv_type, kc, vc, n, b->grp_len[g], c->n_head, c->n_head_kv,
                                        c->head_dim, scale, &ext, s, err);
}

static int gqa_forward(cuda_backend_t *b, const model_part_t *p, int32_t il, int32_t n, guild_err_t *err)
{
    const model_config_t *c = b->cfg;
    const cuda_layer_t *L = &b->layers[il];
    const int64_t E = c->n_embd, HD = c->head_dim, Q = (int64_t)c->n_head * HD, KV = (int64_t)c->n_head_kv * HD;
    cudaStream_t s = b->stream;

    const bool gated = p->opts & MODEL_GQA_OUT_GATE;
    /* q, k and v from one quantization of xn, the products of one type in one launch */
    const cuda_tensor_t *W[3] = {&L->wq, &L->wk, &L->wv};
    float *const y[3] = {gated ? b->qg : b->q, b->k, b->v};
    const int64_t ld[3] = {gated ? 2 * Q : Q, KV, KV};
    if (cuda_linear_multi(b, 3, W, b->xn, E, n, y, ld, err) < 0 ||
        (gated && cuda_qg_split(b->qg, b->q, b->gate, n, c->n_head, c->head_dim, s, err) < 0))
        return -1;
    /* fused: a decode step's attention also quantizes its output for the output product (the decode kernel over
     * an F16/F32 cache; gated attention multiplies it first) */
    const guild_type_t ot = quant_type_info(L->wo.type)->dot_type;
    const bool fold = b->fuse && !gated && n <= CUDA_DECODE_ROWS &&
                      (b->kv_format == KV_TYPE_F16 || b->kv_format == KV_TYPE_F32) &&
                      (ot == GUILD_TYPE_Q8_0 || ot == GUILD_TYPE_Q8_1 || ot == GUILD_TYPE_Q8_K);
    for (int32_t g = 0; g < b->n_grp; g++)
        if (group_attention(b, p, L, il, g, fold ? ot : GUILD_TYPE_F32, err) < 0)
            return -1;
    if (fold) { /* what cuda_linear takes for the quantization of att */
        b->act_src = b->att;
        b->act_fresh = b->att;
        b->act_type = ot;
    }
    if ((gated && cuda_sigmoid_mul(b->att, b->gate, (int64_t)n * Q, s, err) < 0) ||
        cuda_linear(b, &L->wo, b->att, Q, n, b->proj, E, false, err) < 0)
        return -1;
    /* x = (proj + bo) + x, the CPU backend's order */
    if ((p->opts & MODEL_GQA_OUT_BIAS) && cuda_add_bias(b->proj, E, L->bo.d, E, n, s, err) < 0)
        return -1;
    return cuda_residual_add(b, b->proj, n, err);
}

const cuda_attn_part_t cuda_attn_gqa = {
    .opts = MODEL_GQA_ROPE_NEOX | MODEL_GQA_ROPE_PARTIAL | MODEL_GQA_QKV_BIAS | MODEL_GQA_QK_NORM_HEAD |
            MODEL_GQA_QK_NORM_FULL | MODEL_GQA_SINKS | MODEL_GQA_SLIDING | MODEL_GQA_OUT_BIAS | MODEL_GQA_OUT_GATE,
    .forward = gqa_forward,
};
