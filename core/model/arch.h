/* core/model/arch.h — the architectures Guild knows, each one row naming its parts (core/model/parts.h).
 *
 * Each row is llama.cpp's behaviour for that architecture (src/models/<arch>.cpp, llama_model_rope_type):
 *
 *   arch       attention                                    router                  FFN
 *   qwen3moe   gqa: rope neox, q/k norm per head            softmax top-k, renorm   moe
 *   qwen2moe   gqa: rope neox, qkv bias                     softmax top-k           moe + sigmoid-gated shared expert
 *   llama      gqa: rope norm, partial rope                 softmax top-k, renorm   moe  (Mixtral: expert_count > 0)
 *   olmoe      gqa: rope neox, q/k norm of the whole vector softmax top-k           moe
 *   gpt-oss    gqa: rope neox, qkv and output biases,       top-k then softmax,     moe: experts with biases,
 *              sinks, sliding window on alternate layers    logit bias              clamped swiglu
 *   glm4moe    gqa: rope neox, partial rope, qkv bias,      sigmoid grouped, score  dense first, then moe + shared
 *              q/k norm per head where the file has them    bias, renorm by key     expert (ungated)
 *   deepseek2  mla: q LoRA where the file has one,          by expert_gating_func:  dense first, then moe + shared
 *              rope norm on the decoupled part, yarn        softmax top-k, or as    expert (ungated)
 *                                                           glm4moe's
 *   qwen3next  hybrid: gdn; every 4th layer gqa: rope neox, softmax top-k, renorm   moe + sigmoid-gated shared expert
 *   qwen35moe  partial rope, q/k norm per head, output gate
 *
 * Each row is checked against llama.cpp's graph and metadata by whoever implements its parts.
 */
#ifndef GUILD_MODEL_ARCH_H
#define GUILD_MODEL_ARCH_H

#include <stdbool.h>
#include <stddef.h>

#include "core/model/parts.h"

typedef enum model_arch {
    MODEL_ARCH_QWEN3MOE,
    MODEL_ARCH_QWEN2MOE,
    MODEL_ARCH_LLAMA,
    MODEL_ARCH_OLMOE,
    MODEL_ARCH_QWEN3NEXT,
    MODEL_ARCH_QWEN35MOE,
    MODEL_ARCH_DEEPSEEK2,
    MODEL_ARCH_GLM4MOE,
    MODEL_ARCH_GPT_OSS,
    MODEL_ARCH_COUNT
} model_arch_t;

/* Which parts each layer uses (model_layer_parts). */
typedef enum model_layout {
    MODEL_LAYOUT_UNIFORM,     /* every layer: attn, ffn */
    MODEL_LAYOUT_DENSE_FIRST, /* layers below ARCH.leading_dense_block_count use ffn_lead, the others ffn */
    MODEL_LAYOUT_HYBRID,      /* layer il uses attn when (il + 1) % ARCH.full_attention_interval == 0, else
                                 attn_linear */
} model_layout_t;

/* What ARCH.expert_feed_forward_length defaults to when a file lacks it (as the architecture's converter and
 * llama.cpp read it). */
typedef enum model_expert_ff_default {
    MODEL_EXPERT_FF_IS_FF,    /* feed_forward_length (llama, olmoe) */
    MODEL_EXPERT_FF_PER_USED, /* feed_forward_length / expert_used_count (qwen) */
} model_expert_ff_default_t;

typedef struct model_arch_info {
    const char *name;           /* general.architecture */
    model_layout_t layout;
    model_part_t attn;          /* attention of every layer (hybrid: of the full-attention layers) */
    model_part_t attn_linear;   /* hybrid: attention of the other layers */
    model_part_t router;        /* router of the MoE FFN */
    model_part_t ffn;           /* FFN of every layer (dense-first: of the layers after the leading ones) */
    model_part_t ffn_lead;      /* dense-first: FFN of the leading layers */
    model_expert_ff_default_t expert_ff_default;
    const char *ffn_norm;       /* the FFN block's pre-norm tensor, blk.L.<this>.weight: NULL for "ffn_norm"
                                   (glm4moe, gpt-oss: "post_attention_norm") */
    bool nextn;                 /* the last ARCH.nextn_predict_layers of ARCH.block_count blocks are
                                   multi-token-prediction layers: loaded and checked, not run by the model's
                                   forward pass (as llama.cpp); backend_mtp_step runs the first (--spec mtp) */
    bool gating_picks_router;   /* ARCH.expert_gating_func picks the router: softmax (1, or absent, as llama.cpp
                                   reads older files) router_softmax, sigmoid (2) router */
    model_part_t router_softmax; /* with gating_picks_router: the router of softmax-gated files */
} model_arch_info_t;

/* The architecture called `name` (general.architecture); -1 when Guild does not know it. */
int model_arch_from_name(const char *name, size_t len);

const model_arch_info_t *model_arch_info(model_arch_t arch);

/* "qwen3moe, qwen2moe, ...": the architectures whose every part is implemented, for error messages. */
const char *model_arch_list(void);

#endif
