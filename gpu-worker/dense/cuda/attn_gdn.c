/* The gated delta net (MODEL_ATTN_GDN) on the CUDA backend: gpu-worker/dense/cpu/attn_gdn.c step for step, each
 * step one kernel on the backend's stream (gdn.cu):
 *
 *   qkv = attn_qkv xn; z = attn_gate xn; beta, alpha logits = ssm_ba xn (or ssm_beta xn, ssm_alpha xn)
 *   qkv = silu(causal conv1d with the layer's conv state)             cuda_gdn_conv, one thread per channel
 *   key heads L2-normalised, beta, the decay's log                    cuda_gdn_prep
 *   the delta rule per value head, its output normed and gated        cuda_gdn_delta, a block per value head, one
 *                                                                     row after the other (the CPU's sequential
 *                                                                     form); a batch of CUDA_GDN_CHUNK_MIN_ROWS or
 *                                                                     more: cuda_gdn_chunk, the chunkwise parallel
 *                                                                     form (gdn_chunk.cu), equal within rounding
 *   x  += ssm_out o
 *
 * Decode steps, speculative verify steps and captured graphs (up to CUDA_DECODE_ROWS rows, below
 * CUDA_GDN_CHUNK_MIN_ROWS) stay on the sequential form, which is batch-invariant.
 *
 * The states are device buffers at fixed addresses, one set per sequence, so captured decode graphs replay with
 * them; the backend zeroes a sequence's before a step that starts it at position 0 (cuda_backend.c). With
 * backend_options_t.rollback a group of at most rb_rows rows also writes the state after each row aside (the
 * chunked form never runs there), which a truncation restores (cuda_backend.c).
 */
#include "gpu-worker/dense/cuda/cuda_kernels.h"
#include "gpu-worker/dense/cuda/cuda_parts.h"

_Static_assert(CUDA_GRAPH_ROWS < CUDA_GDN_CHUNK_MIN_ROWS && CUDA_DECODE_ROWS < CUDA_GDN_CHUNK_MIN_ROWS,
               "captured and batch-invariant steps take the sequential form");

static int gdn_forward(cuda_backend_t *b, const model_part_t *p, int32_t il, int32_t n, guild_err_t *err)
{
    const model_config_t *c = b->cfg;
    const cuda_layer_t *L = &b->layers[il];
    const int64_t E = c->n_embd, CH = model_gdn_conv_channels(c), IN = c->ssm_d_inner, NV = c->ssm_dt_rank;
    const int32_t slot = b->rec_slot[il];
    const size_t conv_n = (size_t)model_gdn_conv_state(c), ssm_n = (size_t)model_gdn_ssm_state(c);
    const size_t R = (size_t)b->n_recurrent;
    cudaStream_t s = b->stream;
    const bool split = p->opts & MODEL_GDN_BA_SPLIT, tiled = p->opts & MODEL_GDN_KV_TILED;

    if (cuda_linear(b, &L->ssm_qkv, b->xn, E, n, b->gdn_qkv, CH, false, err) < 0 ||
        cuda_linear(b, &L->ssm_gate, b->xn, E, n, b->gdn_z, IN, true, err) < 0)
        return -1;
    if (split ? cuda_linear(b, &L->ssm_beta, b->xn, E, n, b->gdn_ba, 2 * NV, true, err) < 0 ||
                    cuda_linear(b, &L->ssm_alpha, b->xn, E, n, b->gdn_ba + NV, 2 * NV, true, err) < 0
              : cuda_linear(b, &L->ssm_ba, b->xn, E, n, b->gdn_ba, 2 * NV, true, err) < 0)
        return -1;
    /* the recurrence per sequence group (cuda_state.h), over that sequence's states, as its rows alone */
    for (int32_t g = 0; g < b->n_grp; g++) {
        const size_t r0 = (size_t)b->grp_row0[g], st = (size_t)b->grp_seq[g] * R + (size_t)slot;
        const int32_t ng = b->grp_rows[g];
        float *conv = b->conv_state + st * conv_n, *ssm = b->ssm_state + st * ssm_n;
        /* rollback: a short call's state after each row, at [seq][row][n_recurrent][...] (cuda_state.h) */
        const bool keep = b->rb_rows && ng <= b->rb_rows;
        const size_t kept = ((size_t)b->grp_seq[g] * (size_t)b->rb_rows * R + (size_t)slot);
        float *rb_conv = keep ? b->rb_conv + kept * conv_n : NULL, *rb_ssm = keep ? b->rb_ssm + kept * ssm_n : NULL;
        float *qkv = b->gdn_qkv + r0 * (size_t)CH, *beta = b->gdn_beta + r0 * (size_t)NV;
        float *gd = b->gdn_g + r0 * (size_t)NV, *z = b->gdn_z + r0 * (size_t)IN, *o = b->gdn_o + r0 * (size_t)IN;
        if (cuda_gdn_conv(qkv, CH, ng, L->ssm_conv1d.d, conv, c->ssm_d_conv, rb_conv, (int64_t)(R * conv_n), s,
                          err) < 0 ||
            cuda_gdn_prep(qkv, CH, b->gdn_ba + r0 * (size_t)(2 * NV), beta, gd, L->ssm_dt.d, L->ssm_a.d, ng,
                          c->ssm_d_state, c->ssm_n_group, c->ssm_dt_rank, split, c->norm_eps, s, err) < 0 ||
            (ng >= CUDA_GDN_CHUNK_MIN_ROWS && b->gdn_chunk
                 ? cuda_gdn_chunk(qkv, CH, beta, gd, ssm, z, L->ssm_norm.d, o, IN, ng, c->ssm_d_state, c->ssm_n_group,
                                  c->ssm_dt_rank, tiled, c->norm_eps, b->gdn_chunk, s, err)
                 : cuda_gdn_delta(qkv, CH, beta, gd, ssm, z, L->ssm_norm.d, o, IN, ng, c->ssm_d_state,
                                  c->ssm_n_group, c->ssm_dt_rank, tiled, c->norm_eps, rb_ssm, (int64_t)(R * ssm_n), s,
                                  err)) < 0)
            return -1;
    }
    if (cuda_linear(b, &L->ssm_out, b->gdn_o, IN, n, b->proj, E, false, err) < 0)
        return -1;
    return cuda_add(b->x, b->proj, (int64_t)n * E, s, err);
}

const cuda_attn_part_t cuda_attn_gdn = {
    .opts = MODEL_GDN_BA_SPLIT | MODEL_GDN_KV_TILED,
    .forward = gdn_forward,
};
