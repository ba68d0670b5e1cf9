/* core/model/parts.h — the parts a layer program is built from.
 *
 * Every layer of every architecture Guild knows is
 *
 *     x += attention(rmsnorm(x, attn_norm))
 *     x += ffn(rmsnorm(x, ffn_norm))             (a MoE FFN asks its router which experts to run)
 *
 * and what differs between architectures is which attention, which FFN and which router: the *parts*. A part is
 * a kind within its family (attention, router, FFN) plus option bits of that kind (model_part_t). An
 * architecture is one row of core/model/arch.c naming its parts; model_config_load copies the row into the
 * configuration (where metadata may refine it) and model_layer_parts() says which parts layer il uses, so that
 * hybrid models (attention kinds alternating by layer) and dense-first models (dense FFN layers before the MoE
 * ones) need no code of their own.
 *
 * Each part kind is implemented once per place, in a file of the same name:
 *     core/model/KIND.c               its metadata keys and tensors (config and weight binding)
 *     gpu-worker/dense/cpu/KIND.c     the CPU backend's implementation (the numerical reference)
 *     gpu-worker/dense/cuda/KIND.c    the CUDA backend's
 * (attn_gqa.c, router_softmax.c, router_sigmoid_grouped.c, ffn_moe.c, ffn_dense.c). Each place keeps a table of its
 * implementations indexed by kind,
 * with the options each implements; model_parts_check() refuses a model using a kind or an option that a place
 * lacks, naming the architecture and the part. Kinds and options named here without implementations are the
 * ones the next architectures need (docs/adding-an-architecture.md).
 */
#ifndef GUILD_MODEL_PARTS_H
#define GUILD_MODEL_PARTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/util/err.h"

typedef enum model_part_family {
    MODEL_PART_ATTN,   /* the mixing of positions: attention or a recurrence */
    MODEL_PART_ROUTER, /* a MoE FFN's choice of experts and their weights */
    MODEL_PART_FFN,    /* the per-position feed-forward block */
    MODEL_PART_FAMILIES
} model_part_family_t;

typedef enum model_attn_kind {
    MODEL_ATTN_GQA, /* grouped-query attention over a K/V cache (multi-head and multi-query attention included) */
    MODEL_ATTN_MLA, /* multi-head latent attention over a compressed latent cache (deepseek2): q (through a q LoRA
                       where the file has one), a latent and a decoupled rotated key part shared by the heads, the
                       heads' keys and values up-projected from the latent (core/model/attn_mla.c) */
    MODEL_ATTN_GDN, /* gated delta net, linear attention with a recurrent state (qwen3next, qwen35moe) */
    MODEL_ATTN_KINDS
} model_attn_kind_t;

/* Options of MODEL_ATTN_GQA. Q/K norms and the RoPE order are options too: a backend names every one it does. */
enum {
    MODEL_GQA_ROPE_NEOX = 1u << 0,    /* RoPE rotates pairs (x[i], x[i + n_rot/2]); without it (x[2i], x[2i+1]) */
    MODEL_GQA_ROPE_PARTIAL = 1u << 1, /* rope.dimension_count may be below the head size (the rest unrotated) */
    MODEL_GQA_QKV_BIAS = 1u << 2,     /* attn_q/k/v.bias added after the projections (qwen2moe) */
    MODEL_GQA_QK_NORM_HEAD = 1u << 3, /* RMSNorm of each q/k head after the reshape, weights [head_dim] (qwen3moe) */
    MODEL_GQA_QK_NORM_FULL = 1u << 4, /* RMSNorm of the whole q/k projection before it, weights [n_head*head_dim]
                                         (olmoe) */
    MODEL_GQA_OUT_GATE = 1u << 5,     /* attn_q also yields a gate; output *= sigmoid(gate) (qwen3next) */
    MODEL_GQA_SINKS = 1u << 6,        /* a learned logit per head joins each softmax (gpt-oss) */
    MODEL_GQA_SLIDING = 1u << 7,      /* some layers attend only to the last attention.sliding_window positions */
    MODEL_GQA_OUT_BIAS = 1u << 8,     /* attn_output.bias (gpt-oss) */
};

/* Options of MODEL_ATTN_GDN (the layouts of llama.cpp's two converters). */
enum {
    MODEL_GDN_BA_SPLIT = 1u << 0, /* beta and alpha from ssm_beta and ssm_alpha (qwen35moe); without it from one
                                     ssm_ba, per key head its value heads' betas then their alphas (qwen3next) */
    MODEL_GDN_KV_TILED = 1u << 1, /* value head h reads key head h % n_group (qwen35moe); without it key head
                                     h / (n_v_heads / n_group) (qwen3next) */
};

typedef enum model_router_kind {
    MODEL_ROUTER_SOFTMAX_TOPK,    /* p = softmax(logits) over every expert; the top k by p, weighted by p */
    MODEL_ROUTER_SIGMOID_GROUPED, /* s = sigmoid(logits); top k by s + score bias within the best expert groups,
                                     weighted by s (deepseek2 v3, glm4moe) */
    MODEL_ROUTER_TOPK_SOFTMAX,    /* the top k logits, weighted by the softmax of those k (gpt-oss) */
    MODEL_ROUTER_KINDS
} model_router_kind_t;

/* Options of the routers. */
enum {
    MODEL_ROUTER_RENORM = 1u << 0,     /* the k weights divided by their sum */
    MODEL_ROUTER_LOGIT_BIAS = 1u << 1, /* ffn_gate_inp.bias added to the logits (gpt-oss) */
    MODEL_ROUTER_SCORE_BIAS = 1u << 2, /* exp_probs_b.bias added to the scores for the selection only, not to the
                                          weights (sigmoid-grouped: deepseek2 v3, glm4moe) */
};

typedef enum model_ffn_kind {
    MODEL_FFN_DENSE, /* down(silu(gate x) * up x) over ffn_gate/up/down (dense-first layers) */
    MODEL_FFN_MOE,   /* routed experts (moe_exec_t), combined by the router's weights */
    MODEL_FFN_KINDS
} model_ffn_kind_t;

/* Options of MODEL_FFN_MOE. The two shared-expert options exclude each other. */
enum {
    MODEL_FFN_SHEXP_GATED = 1u << 0, /* plus a shared expert scaled by sigmoid(ffn_gate_inp_shexp x) (qwen2moe) */
    MODEL_FFN_SHEXP = 1u << 1,       /* plus an ungated shared expert (deepseek2, glm4moe) */
    MODEL_FFN_SWIGLU_OAI = 1u << 2,  /* experts with biases and the clamped SwiGLU (alpha, limit) of gpt-oss */
};

/* One part as a model uses it. */
typedef struct model_part {
    int32_t kind;   /* model_attn_kind_t, model_router_kind_t or model_ffn_kind_t, by family */
    uint32_t opts;  /* option bits of that kind */
    uint32_t maybe; /* options the file decides (a key, or whether the option's tensors are there: the part's file
                       says which): in an architecture's row; the part's read_config moves those the file has into
                       opts, and model_config_load clears this (0 in a loaded configuration) */
} model_part_t;

/* What one place (the core's configuration and binding, a backend) implements of each family: has[f][k] for
 * kind k, with opts[f][k] the options it implements of that kind. */
#define MODEL_PART_KINDS_MAX 8
typedef struct model_part_support {
    bool has[MODEL_PART_FAMILIES][MODEL_PART_KINDS_MAX];
    uint32_t opts[MODEL_PART_FAMILIES][MODEL_PART_KINDS_MAX];
} model_part_support_t;

/* Records in s that kind `kind` of `family` is implemented with the options *opts (opts NULL: not implemented,
 * s unchanged): for a place filling s from its table of implementations. */
void model_part_support_set(model_part_support_t *s, model_part_family_t family, int32_t kind,
                            const uint32_t *opts);

/* "attention", "router", "FFN". */
const char *model_part_family_name(model_part_family_t family);

/* The kind's name ("gqa", "softmax-topk", "moe", ...), "?" when out of range. */
const char *model_part_kind_name(model_part_family_t family, int32_t kind);

/* The name of one option bit of a kind ("qkv bias", "shared expert with sigmoid gate", ...). */
const char *model_part_opt_name(model_part_family_t family, int32_t kind, uint32_t bit);

/* Writes "gqa (rope neox, qkv bias)" into buf (always NUL-terminated). */
void model_part_describe(char *buf, size_t size, model_part_family_t family, const model_part_t *p);

/* The parts of one layer. */
typedef struct model_layer_parts {
    const model_part_t *attn;   /* its attention */
    const model_part_t *ffn;    /* its FFN */
    const model_part_t *router; /* the router of its FFN; NULL when the FFN has none (dense) */
} model_layer_parts_t;

struct model_config;

/* The parts layer il of the model uses (core/model/config.h: layout and parts). */
model_layer_parts_t model_layer_parts(const struct model_config *c, int32_t il);

/* What one position of layer il keeps in the KV cache, in floats, as its attention part decides: a key row of k
 * floats and a value row of v (0: the part reads its values from the key row). GQA: n_head_kv * head_dim each;
 * MLA: the latent and the rotated key part, n_lora_kv + n_rot, and 0. */
typedef struct model_cache_row {
    int64_t k, v;
} model_cache_row_t;
model_cache_row_t model_layer_cache_row(const struct model_config *c, int32_t il);

/* 0 when `who` implements every part (kind and options, and the options a file may have: maybe) some layer of c
 * uses; else -1 and
 * "WHO: architecture "ARCH": FAMILY part "KIND" is not implemented" or "...: FAMILY part "KIND": option "OPT" is
 * not implemented" in err. */
int model_parts_check(const struct model_config *c, const model_part_support_t *s, const char *who,
                      guild_err_t *err);

#endif
