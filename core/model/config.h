/* core/model/config.h — a model's hyper-parameters and parts, read from GGUF metadata (ARCH =
 * general.architecture).
 *
 * The parts come from the architecture's row (core/model/arch.c). Keys and defaults follow llama.cpp. Every
 * architecture: ARCH.block_count, .context_length, .embedding_length, .feed_forward_length,
 * .attention.layer_norm_rms_epsilon, .rope.freq_base (default 10000), .rope.scaling.* (none, linear, yarn),
 * .vocab_size (default: the length of tokenizer.ggml.tokens, else token_embd's rows); by layout:
 * .leading_dense_block_count (dense-first), .full_attention_interval (hybrid, default 4); where the row says so
 * .nextn_predict_layers (default 0: the last blocks of block_count that are multi-token-prediction layers). Then
 * each part reads its own keys, listed in its file: core/model/attn_gqa.c (head counts and sizes,
 * rope.dimension_count), core/model/attn_gdn.c (ssm.*), core/model/ffn_moe.c (expert counts and widths),
 * core/model/ffn_dense.c
 * (feed_forward_length), core/model/router_softmax.c and router_sigmoid_grouped.c (weight scale and norm,
 * groups).
 */
#ifndef GUILD_MODEL_CONFIG_H
#define GUILD_MODEL_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/gguf/gguf.h"
#include "core/model/arch.h"
#include "core/util/err.h"

typedef enum model_rope_scaling {
    MODEL_ROPE_SCALING_NONE,
    MODEL_ROPE_SCALING_LINEAR, /* positions multiplied by freq_scale */
    MODEL_ROPE_SCALING_YARN,   /* ggml's rope_yarn with the parameters below */
} model_rope_scaling_t;

typedef struct model_config {
    model_arch_t arch;
    /* the parts (core/model/parts.h), copied from the architecture's row; model_layer_parts() picks per layer */
    model_layout_t layout;
    model_part_t attn;         /* attention of every layer (hybrid: of the full-attention layers) */
    model_part_t attn_linear;  /* hybrid: attention of the other layers */
    model_part_t router;       /* router of the MoE FFNs */
    model_part_t ffn;          /* FFN of every layer (dense-first: after the leading layers) */
    model_part_t ffn_lead;     /* dense-first: FFN of the leading layers */
    int32_t n_layer_dense_lead; /* dense-first: how many leading layers use ffn_lead */
    int32_t full_attn_interval; /* hybrid: layers il with (il + 1) % this == 0 use attn */

    char name[96];             /* general.name, "" when absent (truncated) */
    int32_t file_type;         /* general.file_type, -1 when absent */

    int32_t n_layer;           /* transformer blocks that run (block_count less the MTP layers) */
    int32_t n_layer_mtp;       /* multi-token-prediction blocks after them (nextn_predict_layers): bound and
                                  checked (model_weights_t.mtp), run by backend_mtp_step only */
    int32_t n_ctx_train;       /* context length the model was trained for */
    int32_t n_embd;            /* residual stream width */
    int32_t n_vocab;           /* rows of token_embd / logits per position */
    int32_t n_ff;              /* feed_forward_length (0 when absent and not needed) */

    int32_t n_head;            /* query heads */
    int32_t n_head_kv;         /* key/value heads (grouped-query attention: n_head % n_head_kv == 0; MLA: n_head) */
    int32_t head_dim;          /* per head, keys and values alike (MLA: a key, nope + rope) */
    int32_t head_dim_v;        /* per head, values (GQA: head_dim) */
    int32_t n_rot;             /* leading dimensions of each head that RoPE rotates (even, <= head_dim; MLA: the
                                  last n_rot of a key, the rotated part shared by the heads) */
    bool rope_neox;            /* RoPE rotates pairs (x[i], x[i + n_rot/2]), else (x[2i], x[2i+1]); set by the
                                  attention part that rotates (attn_gqa.c: option rope neox) */
    float norm_eps;            /* RMSNorm epsilon */

    float rope_freq_base;      /* theta base */
    model_rope_scaling_t rope_scaling;
    float rope_freq_scale;     /* 1 / scaling factor (1 when none) */
    int32_t rope_n_ctx_orig;   /* yarn: original context length */
    float yarn_ext_factor;     /* yarn: 1 (0 when not yarn) */
    float yarn_attn_factor;    /* yarn: 1 unless the file says otherwise */
    float yarn_beta_fast;      /* yarn: 32 */
    float yarn_beta_slow;      /* yarn: 1 */

    /* attention mla (core/model/attn_mla.c) */
    int32_t n_lora_q;          /* q LoRA rank: attn_q_a, its norm, attn_q_b (0: attn_q) */
    int32_t n_lora_kv;         /* the latent's width: what the cache holds per position, with the n_rot rope part */
    bool mla_kv_split;         /* the up-projections as attn_k_b and attn_v_b (files with key_length_mla), else
                                  attn_kv_b */
    float yarn_log_mul;        /* yarn: mscale_all_dim (rope.scaling.yarn_log_multiplier / 0.1), 0 when absent */
    float mla_kq_scale;        /* what the attention logits are multiplied by (mscale^2 / sqrt(head_dim)) */

    /* attention option sliding window (core/model/attn_gqa.c): which layers slide, model_layer_window() */
    int32_t n_swa;             /* a sliding layer's query at position p sees keys p - n_swa + 1 .. p */
    int32_t swa_period;        /* layer il slides when il % swa_period < swa_period - 1 (0: every layer) */
    /* FFN option clamped swiglu (core/model/ffn_moe.c): h = swiglu_oai(gate, up) with these */
    float swiglu_alpha;        /* sigmoid sharpness: gate * sigmoid(alpha * gate) */
    float swiglu_limit;        /* gate clamped above, up clamped to [-limit, limit] */

    /* attention gdn (core/model/attn_gdn.c): the gated delta net's shape, llama.cpp's ssm.* keys */
    int32_t ssm_d_conv;        /* ssm.conv_kernel: taps of the causal convolution */
    int32_t ssm_d_state;       /* ssm.state_size: size of a key head (and of a value head) */
    int32_t ssm_n_group;       /* ssm.group_count: key heads */
    int32_t ssm_dt_rank;       /* ssm.time_step_rank: value heads */
    int32_t ssm_d_inner;       /* ssm.inner_size: value heads * their size */
    int32_t n_layer_attn;      /* layers whose attention keeps a K/V cache (all but the gdn ones) */

    int32_t n_expert;          /* routed experts per layer */
    int32_t n_expert_used;     /* experts per token (top-k) */
    int32_t n_ff_exp;          /* hidden width of one routed expert */
    int32_t n_ff_shexp;        /* hidden width of the shared expert (0 when the architecture has none) */
    int32_t n_expert_shared;   /* option shared expert (ungated): expert_shared_count, n_ff_shexp / n_ff_exp */
    float expert_weights_scale; /* multiplies the router weights when not 0 or 1 */
    int32_t n_expert_groups;   /* sigmoid-grouped router: experts in this many equal groups (0 or 1: no groups) */
    int32_t n_group_used;      /* sigmoid-grouped router with groups: the experts of this many best groups compete */
} model_config_t;

/* Reads the configuration from g. Fails with a message naming the file and the key for an unknown architecture,
 * a part Guild does not implement (naming the architecture and the part), a missing or malformed key, or
 * values that are inconsistent or out of Guild's limits. */
int model_config_load(model_config_t *cfg, const gguf_t *g, guild_err_t *err);

/* How many positions up to its own a query of layer il attends to: c->n_swa for a sliding layer, 0 for full
 * attention (every earlier position). As llama.cpp's set_swa_pattern (core/model/attn_gqa.c). */
int32_t model_layer_window(const model_config_t *c, int32_t il);

/* The widest hidden FFN row a layer computes on the dense side: the shared expert's (n_ff_shexp) or a dense FFN
 * layer's (n_ff); 0 when neither. What the backends size their FFN buffers by. */
int32_t model_config_ff_hidden(const model_config_t *cfg);

/* Whether layer il's attention keeps a recurrent state (a gdn layer) instead of K/V. */
bool model_layer_recurrent(const model_config_t *c, int32_t il);

/* Whether some layer keeps a recurrent state: the model's cache cannot be cut back to a shorter prefix
 * (backend_kv_truncate below the length empties it). */
bool model_recurrent(const model_config_t *c);

/* The gdn layer's recurrent state sizes in floats: the convolution's last ssm_d_conv - 1 inputs of each channel,
 * and the delta rule's state, one ssm_d_state x (d_inner / dt_rank) matrix per value head. */
int64_t model_gdn_conv_channels(const model_config_t *c);
int64_t model_gdn_conv_state(const model_config_t *c);
int64_t model_gdn_ssm_state(const model_config_t *c);

/* Prints the configuration, one "  key = value" per line, after a header line. */
void model_config_print(const model_config_t *cfg, FILE *out);

#endif
