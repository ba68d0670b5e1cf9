/* core/model/weights.h — every tensor of a model, bound to its bytes in the mapped GGUF file.
 *
 * Shapes are written as GGUF stores them, ne[0] innermost: a matrix "[n_in, n_out]" is n_out rows of n_in
 * elements, and y = W x is y[r] = dot(row r, x). Binding checks each tensor's presence, dimensions and type:
 * norms and biases must be F32; matrices any type Guild computes with (quant_type_info()->computable).
 */
#ifndef GUILD_MODEL_WEIGHTS_H
#define GUILD_MODEL_WEIGHTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/gguf/gguf.h"
#include "core/model/config.h"
#include "core/quant/types.h"
#include "core/util/err.h"

/* What a tensor is used as: read directly as floats (norms, biases: F32 only), or through dot products or row
 * dequantization (matrices: any type Guild computes with). */
typedef enum model_tensor_kind {
    MODEL_TENSOR_F32,
    MODEL_TENSOR_MATRIX,
} model_tensor_kind_t;

typedef struct model_tensor {
    const char *name;  /* GGUF name (lives as long as the gguf_t); NULL when the tensor is absent */
    const void *data;  /* first byte in the mapping; NULL when absent */
    guild_type_t type;
    int64_t ne[4];     /* elements per dimension, ne[0] innermost; unused dimensions are 1 */
    size_t row_bytes;  /* bytes of one row of ne[0] elements */
    size_t mat_bytes;  /* bytes of one ne[0] x ne[1] matrix (one expert of a 3-D expert tensor) */
} model_tensor_t;

typedef struct model_layer {
    /* every layer: the pre-norms of its two blocks */
    model_tensor_t attn_norm;      /* [n_embd] f32 */
    model_tensor_t ffn_norm;       /* [n_embd] f32 */
    /* attention gqa (core/model/attn_gqa.c) */
    model_tensor_t wq;             /* [n_embd, n_head*head_dim] */
    model_tensor_t wk;             /* [n_embd, n_head_kv*head_dim] */
    model_tensor_t wv;             /* [n_embd, n_head_kv*head_dim] */
    model_tensor_t bq;             /* [n_head*head_dim] f32, option qkv bias */
    model_tensor_t bk;             /* [n_head_kv*head_dim] f32, option qkv bias */
    model_tensor_t bv;             /* [n_head_kv*head_dim] f32, option qkv bias */
    model_tensor_t q_norm;         /* f32, option q/k norm: per head [head_dim]; whole vector [n_head*head_dim] */
    model_tensor_t k_norm;         /* f32, option q/k norm: per head [head_dim]; whole vector [n_head_kv*head_dim] */
    model_tensor_t wo;             /* [n_head*head_dim, n_embd] */
    model_tensor_t bo;             /* attn_output.bias [n_embd] f32, option output bias */
    model_tensor_t sinks;          /* attn_sinks [n_head] f32: each head's sink logit, option attention sinks */
    /* attention mla (core/model/attn_mla.c): wq (without q LoRA) and wo above, and (key = head_dim, nope = key -
     * n_rot, value = head_dim_v, latent = n_lora_kv) */
    model_tensor_t wq_a;           /* attn_q_a [n_embd, n_lora_q], with q LoRA */
    model_tensor_t q_a_norm;       /* attn_q_a_norm [n_lora_q] f32, with q LoRA */
    model_tensor_t wq_b;           /* attn_q_b [n_lora_q, n_head*key], with q LoRA */
    model_tensor_t wkv_a;          /* attn_kv_a_mqa [n_embd, latent + n_rot] */
    model_tensor_t kv_a_norm;      /* attn_kv_a_norm [latent] f32 */
    model_tensor_t wkv_b;          /* attn_kv_b [latent, n_head*(nope + value)]: per head nope key rows, then value
                                      rows (files without key_length_mla) */
    model_tensor_t wk_b;           /* attn_k_b [nope, latent, n_head]: per head latent rows of nope (files with it) */
    model_tensor_t wv_b;           /* attn_v_b [latent, value, n_head]: per head value rows of latent */
    /* option output gate: wq is [n_embd, 2 * n_head*head_dim], each head's query then its gate */
    /* attention gdn (core/model/attn_gdn.c; CH = 2 * ssm_n_group * ssm_d_state + ssm_d_inner, NV = ssm_dt_rank) */
    model_tensor_t ssm_qkv;        /* attn_qkv [n_embd, CH] */
    model_tensor_t ssm_gate;       /* attn_gate [n_embd, ssm_d_inner] */
    model_tensor_t ssm_conv1d;     /* [ssm_d_conv, CH] f32 */
    model_tensor_t ssm_dt;         /* ssm_dt.bias [NV] f32 */
    model_tensor_t ssm_a;          /* ssm_a [NV] f32 */
    model_tensor_t ssm_ba;         /* [n_embd, 2 * NV], without option separate beta and alpha */
    model_tensor_t ssm_beta;       /* [n_embd, NV], option separate beta and alpha */
    model_tensor_t ssm_alpha;      /* [n_embd, NV], option separate beta and alpha */
    model_tensor_t ssm_norm;       /* [ssm_d_state] f32 */
    model_tensor_t ssm_out;        /* [ssm_d_inner, n_embd] */
    /* router softmax-topk (core/model/router_softmax.c), topk-softmax (router_topk_softmax.c), sigmoid-grouped
     * (router_sigmoid_grouped.c) */
    model_tensor_t router;         /* ffn_gate_inp [n_embd, n_expert] */
    model_tensor_t router_bias;    /* ffn_gate_inp.bias [n_expert] f32, option logit bias */
    model_tensor_t score_bias;     /* exp_probs_b.bias [n_expert] f32, sigmoid-grouped option score bias */
    /* FFN moe (core/model/ffn_moe.c) */
    model_tensor_t gate_exps;      /* [n_embd, n_ff_exp, n_expert] */
    model_tensor_t up_exps;        /* [n_embd, n_ff_exp, n_expert] */
    model_tensor_t down_exps;      /* [n_ff_exp, n_embd, n_expert] */
    /* option clamped swiglu with biases: [n_ff_exp, n_expert], [n_ff_exp, n_expert], [n_embd, n_expert] f32;
     * bound with mat_bytes = row_bytes, so that model_tensor_row(t, expert, 0) is one expert's bias, as it is
     * that expert's matrix of the weights (model_expert_tensor) */
    model_tensor_t gate_exps_b, up_exps_b, down_exps_b;
    model_tensor_t shexp_gate_inp; /* [n_embd] (one output: the shared expert's gate logit), option shared expert
                                      with sigmoid gate */
    model_tensor_t shexp_gate;     /* [n_embd, n_ff_shexp], options shared expert (gated or not) */
    model_tensor_t shexp_up;       /* [n_embd, n_ff_shexp], options shared expert */
    model_tensor_t shexp_down;     /* [n_ff_shexp, n_embd], options shared expert */
    /* FFN dense (core/model/ffn_dense.c) */
    model_tensor_t ffn_gate;       /* [n_embd, n_ff] */
    model_tensor_t ffn_up;         /* [n_embd, n_ff] */
    model_tensor_t ffn_down;       /* [n_ff, n_embd] */
    void *owned;                   /* memory some tensors above point into instead of the file (a fused ssm_in's rows
                                      in the split form: core/model/attn_gdn.c), freed by model_weights_fini; NULL */
} model_layer_t;

/* True when layer L has routed experts (a MoE FFN; a dense-first model's leading layers have none). */
static inline bool model_layer_has_experts(const model_layer_t *L)
{
    return L->gate_exps.data != NULL;
}

/* The dense tensors of model_layer_t (all but the routed experts), in order, with their kind: X(field, kind) for
 * each. The backends' device copies (gpu-worker/dense/cuda/cuda_state.h: cuda_layer_t), their uploads and their
 * activation-buffer sizes are built from this list, so a part's new dense tensor is a field above, an entry here
 * and its binding in the part's file (core/model/KIND.c). */
#define MODEL_LAYER_DENSE_TENSORS(X)                                                                             \
    X(attn_norm, MODEL_TENSOR_F32)                                                                               \
    X(wq, MODEL_TENSOR_MATRIX) X(wk, MODEL_TENSOR_MATRIX) X(wv, MODEL_TENSOR_MATRIX)                             \
    X(bq, MODEL_TENSOR_F32) X(bk, MODEL_TENSOR_F32) X(bv, MODEL_TENSOR_F32)                                      \
    X(q_norm, MODEL_TENSOR_F32) X(k_norm, MODEL_TENSOR_F32) X(wo, MODEL_TENSOR_MATRIX)                           \
    X(bo, MODEL_TENSOR_F32) X(sinks, MODEL_TENSOR_F32)                                                          \
    X(wq_a, MODEL_TENSOR_MATRIX) X(q_a_norm, MODEL_TENSOR_F32) X(wq_b, MODEL_TENSOR_MATRIX)                       \
    X(wkv_a, MODEL_TENSOR_MATRIX) X(kv_a_norm, MODEL_TENSOR_F32) X(wkv_b, MODEL_TENSOR_MATRIX)                  \
    X(wk_b, MODEL_TENSOR_MATRIX) X(wv_b, MODEL_TENSOR_MATRIX)                                                   \
    X(ssm_qkv, MODEL_TENSOR_MATRIX) X(ssm_gate, MODEL_TENSOR_MATRIX) X(ssm_conv1d, MODEL_TENSOR_F32)             \
    X(ssm_dt, MODEL_TENSOR_F32) X(ssm_a, MODEL_TENSOR_F32) X(ssm_ba, MODEL_TENSOR_MATRIX)                        \
    X(ssm_beta, MODEL_TENSOR_MATRIX) X(ssm_alpha, MODEL_TENSOR_MATRIX) X(ssm_norm, MODEL_TENSOR_F32)             \
    X(ssm_out, MODEL_TENSOR_MATRIX)                                                                              \
    X(ffn_norm, MODEL_TENSOR_F32) X(router, MODEL_TENSOR_MATRIX) X(router_bias, MODEL_TENSOR_F32)               \
    X(shexp_gate_inp, MODEL_TENSOR_MATRIX) X(shexp_gate, MODEL_TENSOR_MATRIX) X(shexp_up, MODEL_TENSOR_MATRIX)   \
    X(shexp_down, MODEL_TENSOR_MATRIX)                                                                           \
    X(score_bias, MODEL_TENSOR_F32) X(ffn_gate, MODEL_TENSOR_MATRIX) X(ffn_up, MODEL_TENSOR_MATRIX)              \
    X(ffn_down, MODEL_TENSOR_MATRIX)

/* A multi-token-prediction layer (ARCH.nextn_predict_layers, after the model's own layers): its block, bound like
 * a layer's, and the tensors that feed it. The model's forward pass never runs it; the backends run the first one
 * for speculative decoding (backend_options_t.mtp, backend_mtp_step):
 *
 *     x      = eh_proj [rmsnorm(embed(t), enorm) ; rmsnorm(h, hnorm)]   (the embedding first, then the state)
 *     x      = the block (x) at the position of h, with a K/V cache of its own
 *     logits = head (rmsnorm(x, head_norm))
 *
 * h is the hidden state (the last layer's output, before output_norm) of position p, t the token at p + 1; the
 * logits predict the token at p + 2. Chained, x (before the norm) is the next step's h (DeepSeek-V3's MTP module
 * as its reference code and llama.cpp's MTP graphs run it). embed_tokens, head and head_norm default to the
 * model's token_embd, output and output_norm. */
typedef struct model_mtp_layer {
    model_layer_t block;           /* blk.L.* of its attention, router and FFN */
    model_tensor_t eh_proj;        /* nextn.eh_proj [2*n_embd, n_embd] */
    model_tensor_t enorm;          /* nextn.enorm [n_embd] f32 */
    model_tensor_t hnorm;          /* nextn.hnorm [n_embd] f32 */
    model_tensor_t embed_tokens;   /* nextn.embed_tokens [n_embd, n_vocab], optional */
    model_tensor_t head;           /* nextn.shared_head_head [n_embd, n_vocab], optional */
    model_tensor_t head_norm;      /* nextn.shared_head_norm [n_embd] f32, optional */
} model_mtp_layer_t;

/* The routed-expert tensors of a layer: k = 0, 1, 2 the gate, up and down weights, 3, 4, 5 their biases (option
 * clamped swiglu; data NULL without it). Expert e's slice of each is model_tensor_row(t, e, 0), mat_bytes long:
 * what a shard copies, sends and fingerprints per expert. */
#define MODEL_EXPERT_TENSORS 6
static inline const model_tensor_t *model_expert_tensor(const model_layer_t *L, int k)
{
    const model_tensor_t *const all[MODEL_EXPERT_TENSORS] = {&L->gate_exps,   &L->up_exps,   &L->down_exps,
                                                             &L->gate_exps_b, &L->up_exps_b, &L->down_exps_b};
    return all[k];
}

typedef struct model_weights {
    model_tensor_t token_embd;  /* [n_embd, n_vocab] */
    model_tensor_t output_norm; /* [n_embd] f32 */
    model_tensor_t output;      /* [n_embd, n_vocab]; a copy of token_embd when the file has none (tied) */
    bool tied_output;           /* output.weight was absent */
    model_tensor_t rope_freqs;  /* [n_rot/2] f32 per-pair frequency divisors (llama 3 style); usually absent */
    model_layer_t *layers;      /* [n_layer] */
    int32_t n_layer;
    model_mtp_layer_t *mtp;     /* [n_layer_mtp] (blocks n_layer ..), NULL when none */
    int32_t n_mtp;
} model_weights_t;

/* Block il of the model: layer il (il < n_layer) or MTP layer il - n_layer's block. */
static inline const model_layer_t *model_block(const model_weights_t *w, int32_t il)
{
    return il < w->n_layer ? &w->layers[il] : &w->mtp[il - w->n_layer].block;
}

/* Binds every tensor the configuration needs: the model's own, and in each layer its norms and the tensors of
 * its parts (each part binds its own: core/model/part_core.h). Fails with "FILE: tensor NAME: problem" for a
 * missing tensor, a wrong shape (expected and found) or a type that is not supported for that tensor. Tensors
 * no part uses are ignored. On success w->layers is allocated (release with model_weights_fini). */
int model_weights_bind(model_weights_t *w, const gguf_t *g, const model_config_t *cfg, guild_err_t *err);

/* Frees what model_weights_bind allocated; the tensors point into the gguf_t, which the caller owns. */
void model_weights_fini(model_weights_t *w);

/* Row r of a 2-D tensor, or of matrix `expert` of a 3-D one. */
static inline const void *model_tensor_row(const model_tensor_t *t, int64_t expert, int64_t r)
{
    return (const char *)t->data + (size_t)expert * t->mat_bytes + (size_t)r * t->row_bytes;
}

#endif
