/* tools/mkmodel/plan.h — the tensors of a synthetic model: names, shapes, types and how their values are drawn.
 *
 * Names and shapes follow llama.cpp's GGUF conventions, per part of the architecture's row (core/model/arch.c;
 * the core binds them in core/model/KIND.c): token_embd, per block attn_norm, the attention's tensors (gqa:
 * attn_q/k/v, biases with option qkv bias, attn_output, attn_q_norm/attn_k_norm with a q/k norm option, attn_q
 * with each head's gate rows with the output gate; gdn, on a hybrid's linear layers: attn_qkv, attn_gate,
 * ssm_conv1d, ssm_dt, ssm_a, ssm_ba or ssm_beta/ssm_alpha, ssm_norm, ssm_out),
 * ffn_norm (or the row's name for it), the router's (ffn_gate_inp, exp_probs_b with the score bias), the FFN's
 * (moe: ffn_{gate,up,down}_exps, the shared expert with its option; dense: ffn_{gate,up,down}), then the MTP
 * layers' (a MoE layer's and nextn.*), output_norm and output (unless embeddings are tied). ne[0] is the innermost
 * (contiguous) dimension; a "row" is ne[0] elements; rows = ne[1] * ne[2].
 */
#ifndef GUILD_MKMODEL_PLAN_H
#define GUILD_MKMODEL_PLAN_H

#include <stdint.h>

#include "core/model/parts.h"
#include "core/quant/types.h"
#include "core/util/err.h"
#include "tools/mkmodel/config.h"

typedef enum mkmodel_role {
    MKMODEL_ROLE_TOKEN_EMBD,
    MKMODEL_ROLE_OUTPUT,
    MKMODEL_ROLE_NORM,        /* RMSNorm weights (attn, ffn, output, q/k norms) */
    MKMODEL_ROLE_BIAS,        /* q/k/v biases, the router's score bias (exp_probs_b) */
    MKMODEL_ROLE_ATTN_Q,
    MKMODEL_ROLE_ATTN_K,
    MKMODEL_ROLE_ATTN_V,
    MKMODEL_ROLE_ATTN_OUTPUT,
    MKMODEL_ROLE_ROUTER,      /* ffn_gate_inp */
    MKMODEL_ROLE_FFN_GATE,    /* ffn_gate_exps, ffn_gate_shexp, ffn_gate (dense layers) */
    MKMODEL_ROLE_FFN_UP,      /* ffn_up_exps, ffn_up_shexp, ffn_up */
    MKMODEL_ROLE_FFN_DOWN,    /* ffn_down_exps, ffn_down_shexp, ffn_down */
    MKMODEL_ROLE_SHEXP_GATE,  /* ffn_gate_inp_shexp: one sigmoid gate per token */
    MKMODEL_ROLE_MATRIX,      /* any other matrix (an MTP layer's nextn.*): the recipe's default type */
} mkmodel_role_t;

typedef struct mkmodel_tensor {
    char name[64];
    mkmodel_role_t role;
    int64_t layer;      /* block index, -1 outside the blocks */
    uint32_t n_dims;
    int64_t ne[4];      /* unused dimensions are 1 */
    guild_type_t type;  /* chosen by the recipe (tools/mkmodel/recipe.h), after any fallback */
    guild_type_t wanted;/* what the recipe wanted before a block-size fallback (== type when none) */
    float mean, std;    /* every element is mean + std * N(0,1) (quantized to `type`) */
    uint64_t row_bytes; /* bytes of one row of ne[0] elements in `type` */
    uint64_t n_rows;    /* ne[1] * ne[2] * ne[3] */
    /* a fused ssm_in (--gdn-fused; fuse_nk 0 otherwise): row r is drawn as the row of attn_qkv or attn_gate that
     * the split form of layer `layer` has in its place (per key head g of fuse_nk, rows [q (fuse_dk), k (fuse_dk),
     * v (fuse_vr), z (fuse_vr)]), so that both forms hold the same model */
    int64_t fuse_nk, fuse_dk, fuse_vr;
} mkmodel_tensor_t;

typedef struct mkmodel_plan mkmodel_plan_t;

/* The part kinds and options whose tensors (here) and keys (model.c) guild-mkmodel writes; an architecture
 * with another is refused by mkmodel_config_validate. */
void mkmodel_plan_support(model_part_support_t *s);

/* Lays out every tensor of the model described by cfg (which must have passed mkmodel_config_validate) and
 * chooses types. Fails with a message naming the tensor when a type cannot hold its rows (block size) and no
 * fallback exists. */
int mkmodel_plan_new(mkmodel_plan_t **out, const mkmodel_config_t *cfg, int64_t n_vocab, guild_err_t *err);
void mkmodel_plan_destroy(mkmodel_plan_t **p);

int64_t mkmodel_plan_n_tensors(const mkmodel_plan_t *p);
const mkmodel_tensor_t *mkmodel_plan_tensor(const mkmodel_plan_t *p, int64_t i);
/* Sum of all tensor data bytes (without alignment padding). */
uint64_t mkmodel_plan_data_bytes(const mkmodel_plan_t *p);
/* Number of tensors whose type fell back from what the recipe wanted because of the block size. */
int64_t mkmodel_plan_n_fallbacks(const mkmodel_plan_t *p);

#endif
