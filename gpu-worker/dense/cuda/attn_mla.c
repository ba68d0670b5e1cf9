/* Multi-head latent attention (MODEL_ATTN_MLA, deepseek2) on the CUDA backend: the CPU backend's absorbed form
 * (gpu-worker/dense/cpu/attn_mla.c) step for step, each step kernels on the backend's stream, for every batch
 * size (the expanded form is the CPU backend's only):
 *
 *   q = wq xn, or wq_b rmsnorm(wq_a xn)              kv = wkv_a xn; the latent rmsnorm'ed in place
 *   RoPE of each head's rotated part and of the key's; [latent | rotated key] -> the cache at the row's position
 *   qk_h = [attn_k_b_h q_nope_h | q_pe_h]             (per head, cuda_linear over head h's matrix)
 *   lat_h = softmax(qk_h . cache_j * scale) cache_j[0, R) over positions j <= pos  (cuda_mla_attention: on tensor
 *           cores with an F16 cache, mla_attention_mma.cu; decode batches split over positions in b->mla_split)
 *   att_h = attn_v_b_h lat_h;  x += wo att
 *
 * Positions come from b->d_pos (per sequence group, cuda_state.h), so steps can be captured as graphs. Files
 * with one attn_kv_b (before the k/v split) are refused at create (cuda_backend.c): their keys' up-projection is
 * a product over columns.
 */
#include <cuda_runtime_api.h>

#include "gpu-worker/dense/cuda/cuda_kernels.h"
#include "gpu-worker/dense/cuda/cuda_parts.h"
#include "gpu-worker/dense/cuda/cuda_util.h"

/* y_h = W_h x_h for every head h of a 3-D tensor W [n_in, n_rows, H] (attn_k_b, attn_v_b), x_h the first n_in of
 * the xh floats at x + h * xh in rows of H * xh floats (token t's heads side by side), y_h at y + h * ldh in rows of
 * ldy: the same bits as one cuda_linear per head. Small batches quantize every head's row at once and run the heads
 * in one launch (cuda_matmul_heads): 2 x 128 launches a layer were most of a DeepSeek decode step's dense part. */
static int heads_linear(cuda_backend_t *b, const cuda_tensor_t *W, int64_t H, const float *x, int64_t xh, int32_t n,
                        float *y, int64_t ldh, int64_t ldy, guild_err_t *err)
{
    const guild_type_t at = quant_type_info(W->type)->dot_type;
    const size_t head = (size_t)W->n_rows * W->row_bytes;
    uint64_t row = 0;
    if (at == GUILD_TYPE_F32)
        return cuda_matmul_heads(W->type, W->n_in, W->n_rows, n, (int32_t)H, W->d, W->row_bytes, head, x,
                                 (size_t)(H * xh) * sizeof(float), (size_t)xh * sizeof(float), y, ldy, ldh, b->stream,
                                 err);
    if (quant_row_bytes(at, (uint64_t)W->n_in, &row, err) < 0)
        return -1;
    row = (row + 3) / 4 * 4; /* the activation rows' alignment */
    if (n >= CUDA_MATMUL_MMA_MIN_TOK || (uint64_t)n * (uint64_t)H * row > (uint64_t)b->n_batch * b->act_row) {
        for (int64_t h = 0; h < H; h++) { /* large batches: each head's product fills the GPU alone */
            cuda_tensor_t t = *W;
            t.d = (const char *)W->d + (size_t)h * head;
            if (cuda_linear(b, &t, x + h * xh, H * xh, n, y + h * ldh, ldy, false, err) < 0)
                return -1;
        }
        return 0;
    }
    /* token t's head h is row t * H + h of n * H rows xh floats apart */
    if (cuda_quantize(at, x, xh, b->act, (size_t)row, W->n_in, n * (int32_t)H, b->stream, err) < 0)
        return -1;
    b->act_src = NULL; /* `act` no longer holds one buffer's rows */
    return cuda_matmul_heads(W->type, W->n_in, W->n_rows, n, (int32_t)H, W->d, W->row_bytes, head, b->act,
                             (size_t)H * (size_t)row, (size_t)row, y, ldy, ldh, b->stream, err);
}

static int mla_forward(cuda_backend_t *b, const model_part_t *p, int32_t il, int32_t n, guild_err_t *err)
{
    const model_config_t *c = b->cfg;
    const cuda_layer_t *L = &b->layers[il];
    const int64_t E = c->n_embd, H = c->n_head, K = c->head_dim, V = c->head_dim_v, R = c->n_lora_kv;
    const int64_t r = c->n_rot, nope = K - r, RR = R + r, Q = H * K;
    cudaStream_t s = b->stream;
    (void)p;

    if (c->n_lora_q > 0) {
        const int64_t RQ = c->n_lora_q;
        if (cuda_linear(b, &L->wq_a, b->xn, E, n, b->mla_qa, RQ, false, err) < 0 ||
            cuda_rmsnorm(b->mla_qa, RQ, b->mla_qa, RQ, NULL, L->q_a_norm.d, RQ, n, c->norm_eps, s, err) < 0 ||
            cuda_linear(b, &L->wq_b, b->mla_qa, RQ, n, b->q, Q, false, err) < 0)
            return -1;
    } else if (cuda_linear(b, &L->wq, b->xn, E, n, b->q, Q, false, err) < 0) {
        return -1;
    }
    /* the latent normed in place, then per sequence group (cuda_state.h) the rotated parts at its rows' positions
     * and the cache rows, stored twice over themselves by cuda_kv_store_dyn's K and V (the same bytes: MLA has no
     * value rows) */
    if (cuda_linear(b, &L->wkv_a, b->xn, E, n, b->mla_kv, RR, true, err) < 0 ||
        cuda_rmsnorm(b->mla_kv, RR, b->mla_kv, RR, NULL, L->kv_a_norm.d, R, n, c->norm_eps, s, err) < 0)
        return -1;
    for (int32_t g = 0; g < b->n_grp; g++) {
        const int32_t r0 = b->grp_row0[g], ng = b->grp_rows[g];
        const int32_t *pos = b->d_pos + g;
        float *kv = b->mla_kv + (size_t)r0 * (size_t)RR;
        void *cache = cuda_kv_k(b, il, b->grp_seq[g]);
        if (cuda_rope_dyn(b->q + (size_t)r0 * (size_t)Q + nope, Q, ng, (int32_t)H, (int32_t)K, (int32_t)r, false,
                          b->rope_cs, pos, s, err) < 0 ||
            cuda_rope_dyn(kv + R, RR, ng, 1, (int32_t)r, (int32_t)r, false, b->rope_cs, pos, s, err) < 0 ||
            cuda_kv_store_dyn(b->kv_type, cache, cache, kv, kv, RR, ng, pos, s, err) < 0)
            return -1;
    }
    /* the queries in the latent space, their rotated parts beside them */
    if (heads_linear(b, &L->wk_b, H, b->q, K, n, b->mla_qk, RR, H * RR, err) < 0)
        return -1;
    if (cuda_check(cudaMemcpy2DAsync(b->mla_qk + R, (size_t)RR * sizeof(float), b->q + nope, (size_t)K * sizeof(float),
                                     (size_t)r * sizeof(float), (size_t)(n * H), cudaMemcpyDeviceToDevice, s),
                   "mla: copy the rotated queries", err) < 0)
        return -1;
    for (int32_t g = 0; g < b->n_grp; g++) {
        const size_t r0 = (size_t)b->grp_row0[g];
        if (cuda_mla_attention(b->mla_lat + r0 * (size_t)(H * R), b->mla_qk + r0 * (size_t)(H * RR), b->kv_type,
                               cuda_kv_k(b, il, b->grp_seq[g]), b->grp_rows[g], b->d_pos + g, b->n_ctx, (int32_t)H,
                               (int32_t)R, (int32_t)RR, c->mla_kq_scale, b->mla_split, b->mla_split_bytes, s,
                               err) < 0)
            return -1;
    }
    if (heads_linear(b, &L->wv_b, H, b->mla_lat, R, n, b->att, V, H * V, err) < 0)
        return -1;
    if (cuda_linear(b, &L->wo, b->att, H * V, n, b->proj, E, false, err) < 0)
        return -1;
    return cuda_add(b->x, b->proj, (int64_t)n * E, s, err);
}

const cuda_attn_part_t cuda_attn_mla = {
    .opts = 0,
    .forward = mla_forward,
};
