/* tools/mkmodel/config.h — what guild-mkmodel is asked to make: architecture, shape, types, seed, output.
 *
 * Filled from a shape preset (mkmodel_preset_apply) and then from flags (tools/mkmodel/cli.h), validated once by
 * mkmodel_config_validate before anything is written.
 */
#ifndef GUILD_MKMODEL_CONFIG_H
#define GUILD_MKMODEL_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "core/model/arch.h"
#include "core/util/err.h"

/* The architectures guild-mkmodel writes, each a row of the core's table (core/model/arch.c) whose parts say
 * which keys and tensors the file has (model.c, plan.c). */
typedef enum mkmodel_arch {
    MKMODEL_ARCH_QWEN3MOE,
    MKMODEL_ARCH_QWEN2MOE,
    MKMODEL_ARCH_MIXTRAL, /* GGUF architecture "llama" with experts */
    MKMODEL_ARCH_OLMOE,
    MKMODEL_ARCH_GPT_OSS,
    MKMODEL_ARCH_GLM4MOE,
    MKMODEL_ARCH_DEEPSEEK2,
    MKMODEL_ARCH_QWEN3NEXT,
    MKMODEL_ARCH_QWEN35MOE,
    MKMODEL_ARCH_COUNT
} mkmodel_arch_t;

/* How tensor types are chosen: one type for every matrix, or one of llama.cpp's mixes (tools/mkmodel/recipe.h). */
typedef enum mkmodel_recipe {
    MKMODEL_RECIPE_NONE, /* --type */
    MKMODEL_RECIPE_Q4_K_M,
    MKMODEL_RECIPE_MXFP4_MOE, /* routed experts MXFP4, other matrices Q8_0 (gpt-oss as published) */
} mkmodel_recipe_t;

/* How the rows of large quantized tensors are made (tools/mkmodel/pool.h). The zero value is the default. */
typedef enum mkmodel_fill {
    MKMODEL_FILL_EXACT, /* every row drawn and quantized by itself */
    MKMODEL_FILL_POOL,  /* rows assembled from a per-tensor pool of quantized blocks (benchmarks) */
} mkmodel_fill_t;

typedef struct mkmodel_config {
    mkmodel_arch_t arch;
    char name[128];          /* general.name */
    int64_t n_layer;         /* blocks */
    int64_t n_embd;          /* hidden size */
    int64_t n_head;          /* query heads */
    int64_t n_head_kv;       /* key/value heads (GQA) */
    int64_t head_dim;        /* elements per head (key_length = value_length; MLA: a head's key, nope + rope) */
    int64_t n_expert;        /* routed experts per layer */
    int64_t n_expert_used;   /* experts per token (top-k) */
    int64_t n_ff_exp;        /* hidden size of one routed expert */
    int64_t n_ff_shexp;      /* hidden size of the shared expert (qwen2moe, glm4moe: a multiple of n_ff_exp,
                                expert_shared_count of them; 0 = none) */
    int64_t n_ff;            /* feed_forward_length (the dense FFN size: the dense-first layers' width, else
                                metadata only) */
    int64_t n_dense_lead;    /* dense-first architectures: leading dense FFN layers (leading_dense_block_count) */
    int64_t n_nextn;         /* MTP layers after the n_layer (nextn_predict_layers; architectures with them) */
    int64_t n_rot;           /* rope.dimension_count (0: the architecture's default, head_dim or a share of it) */
    int64_t n_expert_groups; /* grouped router: expert_group_count (0: none written) */
    int64_t n_group_used;    /* grouped router: expert_group_used_count */
    double weights_scale;    /* grouped router: expert_weights_scale */
    bool qk_norm;            /* architectures whose q/k norms are optional (glm4moe): write them */
    bool gdn_fused;          /* qwen3next: the gated delta net's q, k, v and z in one ssm_in tensor (llama.cpp's first
                                Qwen3-Next converter, PR 16095) rather than attn_qkv and attn_gate */
    /* multi-head latent attention (deepseek2) */
    int64_t n_lora_q;        /* attention.q_lora_rank (0: attn_q, no q LoRA) */
    int64_t n_lora_kv;       /* attention.kv_lora_rank: the cached latent */
    int64_t head_dim_v;      /* a head's value (value_length_mla) */
    bool gating_softmax;     /* architectures whose gating function the file says (deepseek2): softmax, not sigmoid */
    double yarn_mscale_all;  /* deepseek2 with yarn: mscale_all_dim (rope.scaling.yarn_log_multiplier = 0.1 x) */
    int64_t n_vocab;         /* tokens (built-in vocabulary padded to this size) */
    char vocab_from[4096];   /* GGUF whose tokenizer.* keys are copied; empty = built-in vocabulary */
    int64_t n_ctx;           /* context_length */
    double rope_freq_base;
    double yarn_factor;      /* rope.scaling.type yarn with this factor; 0: no scaling */
    int64_t yarn_orig_ctx;   /* rope.scaling.original_context_length with yarn */
    int64_t n_swa;           /* attention.sliding_window of an architecture with the option (0 elsewhere) */
    /* hybrids (qwen3next, qwen35moe): 0 = the default mkmodel_arch_defaults derives from the attention's shape */
    int64_t full_attn_interval; /* full attention on layers il with (il + 1) % this == 0 (default 4) */
    int64_t ssm_conv;        /* ssm.conv_kernel (default 4) */
    int64_t ssm_state;       /* ssm.state_size: size of a linear-attention head (default head_dim / 2) */
    int64_t ssm_groups;      /* ssm.group_count: linear-attention key heads (default --heads) */
    int64_t ssm_heads;       /* ssm.time_step_rank: linear-attention value heads (default 2 * key heads) */
    double rms_eps;
    uint64_t seed;
    int type;                /* guild_type_t of all matrices with MKMODEL_RECIPE_NONE */
    mkmodel_recipe_t recipe;
    int router_type;         /* type of ffn_gate_inp (F32 as llama.cpp keeps it) */
    bool tie_embeddings;     /* omit output.weight (the LM head is token_embd) */
    mkmodel_fill_t fill;     /* --fill (not set by presets; zero = exact) */
    int threads;             /* worker threads (>= 1) */
    uint64_t split_max_bytes; /* --split-max-size: tensor data per file of a split model (0: one file) */
    char out_path[4096];
} mkmodel_config_t;

/* The shape presets: count, and the name and one-line description of preset i (static strings). */
int mkmodel_preset_count(void);
const char *mkmodel_preset_name(int i);
const char *mkmodel_preset_description(int i);

/* Fills cfg with the named preset (every field: shape, vocabulary size, rope, types, seed 0; threads and out_path
 * untouched). Fails with a message listing the presets when the name is unknown. */
int mkmodel_preset_apply(mkmodel_config_t *cfg, const char *name, guild_err_t *err);

/* The core's row of the architecture: its GGUF name and its parts. */
const model_arch_info_t *mkmodel_arch_info(mkmodel_arch_t arch);

/* The router the file's MoE layers use: the row's, or its softmax one where the row picks by the gating function
 * and --gating softmax says so. */
const model_part_t *mkmodel_router_part(const mkmodel_config_t *cfg);

/* Whether the architecture has a shared expert (its MoE FFN's option), so that --shared-ff applies. */
bool mkmodel_arch_has_shexp(mkmodel_arch_t arch);

/* rope.dimension_count when --rope-dim is not given: head_dim times the architecture's rotary share (glm4moe's
 * converter writes half, partial_rotary_factor 0.5; deepseek2 a third, 64 of a 192 key, in whole blocks of 32),
 * even. */
int64_t mkmodel_arch_default_rot(mkmodel_arch_t arch, int64_t head_dim);

/* Whether the architecture's converter writes ARCH.expert_feed_forward_length (qwen, gpt-oss, glm4moe). */
bool mkmodel_arch_expert_ff_key(mkmodel_arch_t arch);

/* The architecture's own defaults where the flags did not set them: the sliding window (0 without the option),
 * yarn scaling where its converter always writes it (gpt-oss: factor 32), its original context (4096). */
void mkmodel_arch_defaults(mkmodel_config_t *cfg, bool swa_given, bool yarn_factor_given, bool yarn_ctx_given);

/* Multi-head latent attention's sizes where the flags did not set them (given[i]: --q-lora, --kv-lora,
 * --v-head-dim): a q LoRA of half the hidden size, a latent of twice a key, a value the key's unrotated part. */
void mkmodel_mla_defaults(mkmodel_config_t *cfg, const bool given[3]);

/* The fields whose 0 means "derived from the shape", derived: a hybrid's linear attention (Qwen3-Next's
 * proportions: key heads of half the head size, as many as the query heads, twice as many value heads, 4 taps,
 * full attention every 4th layer). The writer and the validation work on the derived values. */
void mkmodel_arch_derive(mkmodel_config_t *cfg);

/* GGUF architecture name ("qwen3moe", "qwen2moe", "llama", "olmoe", "gpt-oss") and the CLI spelling ("mixtral" for
 * llama). */
const char *mkmodel_arch_gguf_name(mkmodel_arch_t arch);
const char *mkmodel_arch_cli_name(mkmodel_arch_t arch);
/* Parses a CLI spelling; -1 if unknown. */
int mkmodel_arch_from_name(const char *name);

/* Checks the shape for consistency (head counts divide, head_dim even for RoPE, top-k within the experts, the
 * shared expert only where the architecture has one, feed_forward_length = expert size where the architecture
 * takes the experts' size from it (mixtral, olmoe), types usable for weights, sizes that cannot overflow). Returns -1 with a message naming the flag(s) on the first problem. */
int mkmodel_config_validate(const mkmodel_config_t *cfg, guild_err_t *err);

#endif
