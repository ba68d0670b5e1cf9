/* gpu-worker/dense/cpu/cpu_state.h — internal: the CPU backend's state, shared by its forward driver
 * (cpu_backend.c), its layer program (cpu_layer.c) and the parts that program is made of (cpu_parts.h). Every
 * buffer holds up to n_batch tokens' rows. */
#ifndef GUILD_GPU_WORKER_CPU_STATE_H
#define GUILD_GPU_WORKER_CPU_STATE_H

#include <stdint.h>

#include "core/model/model.h"
#include "core/model/moe_exec.h"
#include "core/util/pool.h"
#include "gpu-worker/dense/backend.h"
#include "gpu-worker/dense/cpu/cpu_kernels.h"
#include "gpu-worker/dense/kv_format.h"

typedef struct cpu_backend {
    backend_t base;
    const model_config_t *cfg;
    const model_weights_t *w;
    guild_pool_t *pool;     /* borrowed */
    moe_exec_t *moe;        /* the executor the layers call: resident, else the borrowed one */
    moe_exec_t *resident;   /* owned, or NULL: the stand-in for a GPU plan's resident experts and the routing
                               counts (cpu_resident.h), wrapping the borrowed executor */
    int32_t plan_layers;    /* layers whose every expert the plan keeps resident (computed by resident) */
    int32_t n_ctx;          /* KV capacity (positions) */
    int32_t n_batch;        /* rows of every activation buffer */
    int64_t ff_hidden;      /* widest hidden FFN row: the shared expert's (n_ff_shexp), a dense FFN's (n_ff) */
    int32_t n_seq;          /* sequences, each with its own cache and recurrent state (backend_options_t.n_seq) */
    int32_t *seq_len;       /* [n_seq] positions [0, seq_len[s]) of sequence s hold valid K/V */
    bool all_rows;          /* no narrowing in the last layer (backend_options_t.all_rows) */
    bool check_finite;      /* the norms check for NaN and infinity (gpu-worker/dense/finite_check.h) */
    uint64_t *progress;     /* backend_options_t.progress: bumped after each layer */
    int n_threads;
    cpu_rope_t rope;

    /* KV cache in the format kv_type (gpu-worker/dense/kv_format.h): layer il keeps n_ctx rows per sequence of the
     * shape its attention part says (model_layer_cache_row), keys in kt, values in vt (MLA: f32 only); sequence s's
     * position p is row s * n_ctx + p (cpu_cell) */
    int32_t kv_type;        /* backend_options_t.kv_type resolved (KV_TYPE_DEFAULT is f32 here) */
    guild_type_t kt, vt;    /* element types of the key and value rows */
    bool v_rot;             /* value rows rotated head by head (kv_hadamard: k8v4) */
    char *kv_cache;         /* every layer's rows, one allocation */
    void **k_layer;         /* [n_layer]: layer il's key rows, [n_seq][n_ctx][row.k] (GQA: n_head_kv * head_dim) */
    void **v_layer;         /* [n_layer]: its value rows, [n_seq][n_ctx][row.v]; NULL when row.v is 0 (MLA) */
    float *kv_rows;         /* [n_threads][2 * head_dim] a key and a value head as floats (dequantized on read,
                               rotated before a store) */
    int32_t mla_form;       /* backend_options_t.mla_form */
    /* recurrent state of the gdn layers (attn_gdn.c), a sequence's zeroed when a forward call starts it at
     * position 0 */
    int32_t *rec_slot;      /* [n_layer] layer il's recurrent state, -1: none */
    float *conv_state;      /* [n_seq][recurrent layers][conv channels][ssm_d_conv - 1] each channel's last inputs */
    float *ssm_state;       /* [n_seq][recurrent layers][value heads][ssm_d_state rows][ssm_d_state] */
    int32_t n_recurrent;    /* layers with a recurrent state */
    /* backend_options_t.rollback: the states after each row of a sequence's last forward call of at most rb_rows
     * rows (attn_gdn.c writes them), NULL and 0 without */
    int32_t rb_rows;
    float *rb_conv;         /* [n_seq][rb_rows][recurrent layers][conv state] the state after the call's row j */
    float *rb_ssm;          /* [n_seq][rb_rows][recurrent layers][ssm state] */
    int32_t *rb_from;       /* [n_seq] the sequence's length before that call */
    int32_t *rb_n;          /* [n_seq] its rows whose states are kept (0: none) */

    /* the current batch's rows (t = row in the batch) */
    int32_t *tok_seq;       /* [n_batch] each row's sequence */
    int32_t *tok_pos;       /* [n_batch] each row's position in its sequence */
    int32_t *seq_rows;      /* [n_seq] rows of each sequence in the batch */
    /* activations of the current batch */
    float *x;               /* [n_batch][n_embd] residual stream */
    float *xn;              /* [n_batch][n_embd] normed input of the current block */
    float *q;               /* [n_batch][n_head * head_dim] */
    float *qg;              /* [n_batch][2 * n_head * head_dim] query and gate (option output gate), else NULL */
    float *gate;            /* [n_batch][n_head * head_dim] the output gate's logits (option output gate) */
    float *k;               /* [n_batch][n_head_kv * head_dim] */
    float *v;               /* [n_batch][n_head_kv * head_dim] */
    float *att;             /* [n_batch][n_head * head_dim] attention output, heads side by side */
    float *proj;            /* [n_batch][n_embd] output of attn_output / of the shared expert */
    float *rope_cs;         /* [n_batch][n_rot] cos/sin pairs of each token's position */
    float *router_logits;   /* [n_batch][n_expert] */
    int32_t *ids;           /* [n_batch][n_expert_used] routed experts, slot order */
    float *weights;         /* [n_batch][n_expert_used] their weights */
    const float *y;         /* [n][n_expert_used][n_embd] unweighted routed-expert outputs: the executor's */
    float *sh_gate;         /* [n_batch][ff_hidden] shared expert's or dense FFN's gate projection, then
                               silu(gate) * up */
    float *sh_up;           /* [n_batch][ff_hidden] their up projection */
    float *sh_logit;        /* [n_batch] shared expert sigmoid-gate logit */
    float *probs;           /* [n_threads][probs_stride] router scratch */
    int64_t probs_stride;   /* >= n_expert: what every router kernel of the model needs */
    float *scores;          /* [n_threads][n_ctx] attention scratch */
    int32_t *row_pos;       /* [n_batch] position of each row after the last layer's rows are narrowed */
    int32_t *row_seq;       /* [n_batch] sequence of each row after the last layer's rows are narrowed */
    /* attention mla (attn_mla.c; NULL without an MLA layer); R = n_lora_kv, r = n_rot */
    float *mla_qa;          /* [n_batch][n_lora_q] the q LoRA's compressed queries */
    float *mla_kv;          /* [n_batch][R + r] each row's latent and rotated key part, as cached */
    float *mla_qk;          /* [n_batch][n_head][R + r] absorbed queries: latent-space query, then its rope part */
    float *mla_lat;         /* [n_batch][n_head][R] attention outputs in the latent space */
    int32_t *mla_perm;      /* [2][n_batch] a batch's rows ordered by form, and their batch rows or inverse */
    char *mla_scratch;      /* [n_threads][mla_scratch_bytes] a head's transposed up-projection, keys and values
                               of a block of positions, the rows' running softmax, quantized activations */
    size_t mla_scratch_bytes;
    /* the gdn layers' activations (NULL without them) */
    float *gdn_qkv;         /* [n_batch][conv channels] projection, then the convolution's output */
    float *gdn_z;           /* [n_batch][ssm_d_inner] the output norm's gate */
    float *gdn_ba;          /* [n_batch][2 * value heads] beta and alpha logits as projected */
    float *gdn_beta;        /* [n_batch][value heads] sigmoid(beta logit) */
    float *gdn_g;           /* [n_batch][value heads] the decay's log */
    float *gdn_o;           /* [n_batch][ssm_d_inner] the delta rule's output, then normed and gated */
    void *act;              /* quantized activations: n_batch rows of the widest input */
    /* the multi-token-prediction layer (backend_options_t.mtp, cpu_mtp.c): block n_layer, with its own K/V
     * (k_layer[n_layer]); NULL and 0 without it */
    bool mtp;
    int32_t n_block;        /* blocks with a cache: n_layer, + 1 with the MTP layer */
    float *mtp_h;           /* [n_ctx][n_embd] each position's hidden state (the last layer's output) */
    int32_t *mtp_tok;       /* [n_ctx] each position's token */
    int32_t mtp_len;        /* the MTP layer's cache holds positions [0, mtp_len) */
    int32_t mtp_next;       /* the step backend_mtp_step takes next (0 after a forward call or a truncation) */
    float *mtp_hc;          /* [n_embd] the last step's output: the next step's hidden state */
    float *mtp_cat;         /* [n_batch][2 * n_embd] the rows' normed embeddings and hidden states */
    float *mtp_y;           /* [n_batch][n_expert_used][n_embd] the MTP block's routed experts' outputs */
    float *mtp_g, *mtp_u;   /* [n_ff_exp] an expert's gate and up projections */
    const float **mtp_rows_h; /* [n_batch] a batch's rows' hidden states */
    int32_t *mtp_rows_tok;  /* [n_batch] the token after each row's position */
} cpu_backend_t;

/* The cache row of sequence seq's position pos (in k_layer[il] / v_layer[il], of the layer's row width). */
static inline size_t cpu_cell(const cpu_backend_t *b, int32_t seq, int32_t pos)
{
    return (size_t)seq * (size_t)b->n_ctx + (size_t)pos;
}

/* Runs layer il on the n tokens of the batch held in b->x (row t at position tok_pos[t] of sequence tok_seq[t]),
 * writing their K/V
 * into the cache. With keep != NULL (the last layer), only rows keep[0..n_keep) go on past the K/V write, moved
 * to rows 0..n_keep-1 of b->x: the other rows' outputs would never be read. Each kept row's values are the same
 * bits as without narrowing. -1 with a message when the expert executor fails, or when the non-finite check
 * finds a NaN or an infinity in the residual stream or the output of a norm. */
/* b->xn rows 0..n-1 = rmsnorm(b->x rows, w), with the non-finite check at `site` when b->check_finite: rows[t]
 * (NULL: t) is the batch row of row t, for the message. -1 with the message of the first find
 * (finite_report), 0 otherwise; the rows are normed either way. */
int cpu_norm_rows(cpu_backend_t *b, const model_tensor_t *w, int32_t n, uint32_t site, const int32_t *rows,
                  guild_err_t *err);

int cpu_layer_forward(cpu_backend_t *b, int32_t il, int32_t n, const int32_t *keep, int32_t n_keep,
                      guild_err_t *err);

/* The MTP block's routed experts (its executor holds the model's layers only), into b->mtp_y, which b->y then
 * points at: for the n rows of b->xn and the slots of b->ids, y = down(silu(gate x) * up x) of each slot's
 * expert. */
void cpu_mtp_experts(cpu_backend_t *b, const model_layer_t *L, int32_t n);

/* backend_mtp_step of the CPU backend (cpu_mtp.c). */
int cpu_mtp_step(backend_t *base, int32_t step, int32_t token, float *logits, guild_err_t *err);

#endif
