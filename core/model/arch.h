/* core/model/arch.h — the architectures Guild runs and what distinguishes them in the forward pass.
 *
 * Each row is llama.cpp's behaviour for that architecture (src/models/<arch>.cpp, llama_model_rope_type):
 *
 *   arch       rope  Q/K norm                       qkv bias  router renorm  shared expert
 *   qwen3moe   neox  per head, [head_dim]            no        yes            no
 *   qwen2moe   neox  none                            yes       no             yes (sigmoid-gated)
 *   llama      norm  none                            no        yes            no    (Mixtral: expert_count > 0)
 *   olmoe      neox  whole vector, before reshape    no        no             no
 *
 * rope "norm" rotates adjacent pairs (x[2i], x[2i+1]); "neox" rotates (x[i], x[i + n_rot/2]).
 */
#ifndef GUILD_MODEL_ARCH_H
#define GUILD_MODEL_ARCH_H

#include <stdbool.h>
#include <stddef.h>

typedef enum model_arch {
    MODEL_ARCH_QWEN3MOE,
    MODEL_ARCH_QWEN2MOE,
    MODEL_ARCH_LLAMA,
    MODEL_ARCH_OLMOE,
    MODEL_ARCH_COUNT
} model_arch_t;

typedef enum model_rope_kind {
    MODEL_ROPE_NORM, /* adjacent pairs */
    MODEL_ROPE_NEOX, /* pairs half a rotation apart */
} model_rope_kind_t;

typedef enum model_qk_norm {
    MODEL_QK_NORM_NONE,
    MODEL_QK_NORM_HEAD, /* RMSNorm of each head, weight [head_dim], after the reshape (qwen3moe) */
    MODEL_QK_NORM_FULL, /* RMSNorm of the whole projection, weight [n_head*head_dim], before it (olmoe) */
} model_qk_norm_t;

typedef struct model_arch_info {
    const char *name;        /* general.architecture */
    model_rope_kind_t rope;
    model_qk_norm_t qk_norm;
    bool qkv_bias;           /* attn_q/k/v have .bias tensors */
    bool router_renorm;      /* the top-k softmax weights are divided by their sum */
    bool shared_expert;      /* ffn_*_shexp with a sigmoid gate ffn_gate_inp_shexp */
} model_arch_info_t;

/* The architecture called `name` (general.architecture); -1 when Guild does not run it. */
int model_arch_from_name(const char *name, size_t len);

const model_arch_info_t *model_arch_info(model_arch_t arch);

/* "qwen3moe qwen2moe llama olmoe": for error messages. */
const char *model_arch_list(void);

#endif
