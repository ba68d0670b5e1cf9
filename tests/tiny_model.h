/* tests/tiny_model.h — small random models of every architecture, built in memory with the GGUF writer, for
 * the model, backend and expert-executor tests (independent of tools/guild-mkmodel). */
#ifndef GUILD_TESTS_TINY_MODEL_H
#define GUILD_TESTS_TINY_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/model/model.h"
#include "core/quant/types.h"

typedef struct tiny_spec {
    const char *arch;      /* general.architecture: qwen3moe, qwen2moe, llama, olmoe (or anything, for errors) */
    int n_layer, n_embd, n_head, n_head_kv, head_dim;
    int n_expert, n_used, n_ff_exp, n_ff_shexp, n_vocab, n_ctx;
    int n_ff;              /* feed_forward_length: the dense FFN layers' width (0: n_ff_exp) */
    int n_dense_lead;      /* dense-first architectures: leading dense layers */
    const int32_t *rope_sections; /* 4 values: ARCH.rope.dimension_sections (qwen35moe's IMRoPE), NULL: none */
    int n_mtp;             /* architectures with MTP layers: blocks after n_layer (nextn_predict_layers) */
    int n_shared;          /* ungated shared expert: expert_shared_count (its width n_shared * n_ff_exp) */
    int n_groups, n_group_used; /* grouped router: expert_group_count, expert_group_used_count (0: not written) */
    int gating;            /* grouped router: expert_gating_func (0: 2, sigmoid) */
    int n_rot;             /* rope.dimension_count (0: not written, the head size) */
    /* multi-head latent attention (deepseek2): the key head_dim is nope + n_rot */
    int n_lora_q;          /* attention.q_lora_rank (0: attn_q, no q LoRA) */
    int n_lora_kv;         /* attention.kv_lora_rank */
    int head_dim_v;        /* a head's value */
    bool mla_kv_b;         /* one attn_kv_b and key_length/value_length the heads' (older files), else attn_k_b,
                              attn_v_b and key_length_mla/value_length_mla as converters write them now */
    float yarn_factor;     /* rope.scaling.type yarn with this factor and yarn_log_multiplier 0.0707 (0: none) */
    bool no_maybe;         /* leave out the tensors of the options the row says a file may have (maybe) */
    guild_type_t wtype;    /* type of every matrix (norms and biases stay F32) */
    bool tied;             /* no output.weight */
    uint64_t seed;
    const char *omit_tensor;  /* leave this tensor out */
    const char *omit_key;     /* leave this metadata key out */
    const char *reshape_tensor; /* give this tensor one more column in ne[0] */
    const char *f16_tensor;   /* store this tensor as F16 */
    bool f32_router;          /* the routers (ffn_gate_inp) as F32 whatever wtype, as llama.cpp's quantizer leaves
                                 them */
} tiny_spec_t;

/* A small qwen3moe-like spec of `arch` with F32 weights: 2 layers, n_embd 64, 4 heads / 2 KV heads of 16, 8
 * experts top-2 of width 32, shared expert 48 (ungated: one expert wide), vocabulary 96, context 64; dense-first
 * architectures: 1 dense layer of width 80 first; no MTP layer; MLA (deepseek2): keys of 32 + 8 rotated, values
 * of 32, a latent of 64, a q LoRA of 32, attn_k_b/attn_v_b. */
tiny_spec_t tiny_spec(const char *arch);

/* The GGUF image of spec (malloc'ed, caller frees). Aborts the test on a writer failure. */
void tiny_model_image(const tiny_spec_t *spec, void **data, size_t *size);

/* Opens the image as a model: 0, or -1 with the loader's message (the image must outlive the model). */
int tiny_model_open(const void *data, size_t size, model_t **out, guild_err_t *err);

/* A qwen3moe spec of weight type wt whose matrices are whole 256-element blocks and 16-row groups (n_embd, n_ff_exp
 * and n_ff_shexp 256, heads of 64): the expert pipelines' kernels take every type. */
tiny_spec_t tiny_spec_blocks(guild_type_t wt);

/* The model of spec, its image in *img (the caller frees it after the model). Aborts the test on a failure. */
model_t *tiny_model_load(const tiny_spec_t *spec, void **img);

#endif
