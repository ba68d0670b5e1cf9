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
 *   (fused, a decode step of several sequences: the K/V stores and the attention once over every sequence's rows,
 *    each row the bits of its sequence's own launch: seqs_attention)
 *   x += wo att (+ bo, option output bias)
 */
#include <math.h>

#include "gpu-worker/dense/kv_format.h"
#include "gpu-worker/dense/cuda/cuda_kernels.h"
#include "gpu-worker/dense/cuda/cuda_parts.h"
#include "gpu-worker/dense/cuda/cuda_util.h"
#include "gpu-worker/dense/cuda/cuda_step_clock.h" /* the marks */

/* Batches up to CUDA_DECODE_ROWS rows use the decode attention kernel (keys split across blocks per row): a
 * row's attention is the same bits in any such batch (speculative verify steps equal plain decode); captured
 * graphs (CUDA_GRAPH_ROWS) rely on it reading the cache length from the device. Larger batches (prefill) take
 * the flash-attention kernel, whose tiles follow the batch. */
_Static_assert(CUDA_GRAPH_ROWS <= CUDA_DECODE_ROWS, "graphs capture only the decode attention kernel");

/* Biases, Q/K norms, RoPE, and the K/V rows into the cache (qk_prepare_task of the CPU backend) of the n rows
 * from row r0 of the batch, all of sequence seq, their positions from *pos; or (rows not NULL) of the rows of a
 * table, from row 0, each at its own sequence's position in its caches (r0, seq and pos unused). */
static int qk_prepare(cuda_backend_t *b, const cuda_layer_t *L, uint32_t opts, int32_t il, int32_t r0, int32_t n,
                      int32_t seq, const int32_t *pos, const cuda_seq_rows_t *rows, guild_err_t *err)
{
    const model_config_t *c = b->cfg;
    const int64_t HD = c->head_dim, Q = (int64_t)c->n_head * HD, KV = (int64_t)c->n_head_kv * HD;
    if (rows) {
        r0 = 0;
        n = rows->n;
        seq = 0; /* the table's cache offsets are from sequence 0's */
    }
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
        return rows ? cuda_qk_prepare_seqs(q, k, v, c->n_head, c->n_head_kv, c->head_dim,
                                           norm_head ? L->q_norm.d : NULL, norm_head ? L->k_norm.d : NULL,
                                           c->norm_eps, c->n_rot, neox, b->rope_cs, rows, b->kv_type, kc, vc, s, err)
                    : cuda_qk_prepare(q, k, v, n, c->n_head, c->n_head_kv, c->head_dim,
                                      norm_head ? L->q_norm.d : NULL, norm_head ? L->k_norm.d : NULL, c->norm_eps,
                                      c->n_rot, neox, b->rope_cs, pos, b->kv_type, kc, vc, s, err);
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
    if (rows) {
        const bool rot = kv_type_rotates_v(b->kv_format);
        return cuda_rope_seqs(q, Q, c->n_head, c->head_dim, c->n_rot, neox, b->rope_cs, rows, s, err) < 0 ||
                       cuda_rope_seqs(k, KV, c->n_head_kv, c->head_dim, c->n_rot, neox, b->rope_cs, rows, s, err) < 0 ||
                       (blocks ? cuda_kv_store_blocks_seqs(b->kv_type, b->v_type, rot, kc, vc, k, v, KV, c->head_dim,
                                                           rows, s, err)
                               : cuda_kv_store_seqs(b->kv_type, kc, vc, k, v, KV, rows, s, err)) < 0
                   ? -1
                   : 0;
    }
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
    if (qk_prepare(b, L, p->opts, il, r0, n, seq, pos, NULL, err) < 0 ||
        cuda_layer_mark(b, il, CUDA_MARK_L0_QK, err) < 0)
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

/* The row table of the batch's groups (cuda_seq_rows_t) when its rows take the decode kernels together: several
 * groups, at most CUDA_SEQ_ROWS rows, under b->fuse (--cuda-off fuse: group by group), the sequences' caches apart
 * by whole 16-byte units (the kernels' loads stay aligned for every sequence as for sequence 0). */
static bool seq_rows_of(const cuda_backend_t *b, int32_t n, cuda_seq_rows_t *rows)
{
    const int64_t k_seq = (int64_t)b->n_kv_layers * (int64_t)b->k_layer_bytes;
    const int64_t v_seq = (int64_t)b->n_kv_layers * (int64_t)b->v_layer_bytes;
    if (!b->fuse || b->n_grp < 2 || n > CUDA_SEQ_ROWS || k_seq % 16 || v_seq % 16)
        return false;
    *rows = (cuda_seq_rows_t){.len = b->d_pos, .k_seq = k_seq, .v_seq = v_seq, .n = n};
    for (int32_t g = 0; g < b->n_grp; g++)
        for (int32_t i = 0; i < b->grp_rows[g]; i++) {
            const int32_t r = b->grp_row0[g] + i;
            rows->seq[r] = b->grp_seq[g];
            rows->grp[r] = (uint8_t)g;
            rows->idx[r] = (uint8_t)i;
        }
    return true;
}

/* Every group's rows (a row table, seq_rows_of) in one launch each: their K/V into their caches, then their
 * decode attention (its splits merged and, qt not F32, its output quantized into b->act in the launch, as
 * group_attention's). Each row the bits of its group's own launches. */
static int seqs_attention(cuda_backend_t *b, const model_part_t *p, const cuda_layer_t *L, int32_t il,
                          const cuda_seq_rows_t *rows, guild_type_t qt, guild_err_t *err)
{
    const model_config_t *c = b->cfg;
    const float scale = 1.0f / sqrtf((float)c->head_dim);
    if (qk_prepare(b, L, p->opts, il, 0, rows->n, 0, NULL, rows, err) < 0 ||
        cuda_layer_mark(b, il, CUDA_MARK_L0_QK, err) < 0)
        return -1;
    const void *kc = cuda_kv_k(b, il, 0), *vc = cuda_kv_v(b, il, 0);
    const cuda_attn_ext_t ext = {model_layer_window(c, il), (p->opts & MODEL_GQA_SINKS) ? L->sinks.d : NULL};
    const cuda_attn_fuse_t fuse = {b->d_attn_done, qt, qt != GUILD_TYPE_F32 ? b->act : NULL, b->act_row};
    if (b->kv_format != KV_TYPE_F16 && b->kv_format != KV_TYPE_F32)
        return cuda_attention_blocks_seqs(b->att, b->q, b->kv_type, b->v_type, kv_type_rotates_v(b->kv_format), kc, vc,
                                          rows, b->n_ctx, c->n_head, c->n_head_kv, c->head_dim, scale, &ext,
                                          b->attn_scratch, b->attn_scratch_bytes, b->stream, err);
    return cuda_attention_decode_seqs(b->att, b->q, b->kv_type, kc, vc, rows, b->n_ctx, c->n_head, c->n_head_kv,
                                      c->head_dim, scale, &ext, b->attn_scratch, b->attn_scratch_bytes, &fuse,
                                      b->stream, err);
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
        (gated && cuda_qg_split(b->qg, b->q, b->gate, n, c->n_head, c->head_dim, s, err) < 0) ||
        cuda_layer_mark(b, il, CUDA_MARK_L0_QKV, err) < 0)
        return -1;
    /* fused: a decode step's attention also quantizes its output for the output product (the decode kernel over
     * an F16/F32 cache; gated attention multiplies it first) */
    const guild_type_t ot = quant_type_info(L->wo.type)->dot_type;
    const bool fold = b->fuse && !gated && n <= CUDA_DECODE_ROWS &&
                      (b->kv_format == KV_TYPE_F16 || b->kv_format == KV_TYPE_F32) &&
                      (ot == GUILD_TYPE_Q8_0 || ot == GUILD_TYPE_Q8_1 || ot == GUILD_TYPE_Q8_K);
    cuda_seq_rows_t rows;
    if (seq_rows_of(b, n, &rows)) {
        if (seqs_attention(b, p, L, il, &rows, fold ? ot : GUILD_TYPE_F32, err) < 0)
            return -1;
    } else {
        for (int32_t g = 0; g < b->n_grp; g++)
            if (group_attention(b, p, L, il, g, fold ? ot : GUILD_TYPE_F32, err) < 0)
                return -1;
    }
    if (cuda_layer_mark(b, il, CUDA_MARK_L0_SCORES, err) < 0)
        return -1;
    if (fold) { /* what cuda_linear takes for the quantization of att */
        b->act_src = b->att;
        b->act_fresh = b->att;
        b->act_type = ot;
    }
    /* a decode step: the output product asks the router's weights into L2 before its wait; the router's blocks
     * cannot become resident, and ask for them themselves, until the product's (which fill every SM) end */
    if (n <= CUDA_DECODE_ROWS && !gated && L->router.d) {
        b->l2_next = L->router.d;
        b->l2_next_bytes = (size_t)L->router.n_rows * L->router.row_bytes;
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
