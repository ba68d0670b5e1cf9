/* core/model/part_core.h — internal to core/model: what the core does for one part kind, its metadata keys
 * and its tensors. One instance per implemented kind, in the file named after the kind (attn_gqa.c,
 * router_softmax.c, ffn_moe.c); parts.c indexes them by family and kind. */
#ifndef GUILD_MODEL_PART_CORE_H
#define GUILD_MODEL_PART_CORE_H

#include "core/model/bind.h"
#include "core/model/config.h"
#include "core/model/keys.h"
#include "core/model/parts.h"
#include "core/model/weights.h"

typedef struct model_part_core {
    uint32_t opts; /* the options whose keys and tensors it reads */
    /* Reads the part's keys into c (p: the part, one of c's). Called once per model for each part some layer
     * uses, after the keys every part shares (core/model/config.c) and in the order attention, FFN, router. It
     * moves the options of p->maybe the file has into p->opts (its file says what decides each). */
    int (*read_config)(model_config_t *c, const model_keys_t *k, model_part_t *p);
    /* Binds the part's tensors of layer b->layer into L. */
    int (*bind)(model_layer_t *L, const model_binder_t *b, const model_part_t *p);
    /* Attention parts: the floats one position of a layer keeps in the KV cache, a key row *k and a value row *v
     * (model_layer_cache_row). NULL for routers and FFNs. */
    void (*cache_row)(const model_config_t *c, const model_part_t *p, int64_t *k, int64_t *v);
} model_part_core_t;

extern const model_part_core_t model_attn_gqa_core;       /* attn_gqa.c */
extern const model_part_core_t model_attn_mla_core;       /* attn_mla.c */
extern const model_part_core_t model_attn_gdn_core;       /* attn_gdn.c */
extern const model_part_core_t model_router_softmax_core; /* router_softmax.c */
extern const model_part_core_t model_ffn_moe_core;        /* ffn_moe.c */
extern const model_part_core_t model_router_topk_softmax_core; /* router_topk_softmax.c */
extern const model_part_core_t model_router_sigmoid_grouped_core; /* router_sigmoid_grouped.c */
extern const model_part_core_t model_ffn_dense_core;      /* ffn_dense.c */

/* Whether the file has tensor blk.L.<suffix> in the first layer L that uses part p (one of c's): for a
 * read_config deciding an option of p->maybe by its tensors (binding then requires them in every layer). */
bool model_part_has_tensor(const model_config_t *c, const model_keys_t *k, const model_part_t *p,
                           const char *suffix);

/* A router's expert groups (llama.cpp's keys and defaults): ARCH.expert_group_count (default 0; above 1 the
 * experts form that many equal groups of at least 2) and .expert_group_used_count (1..groups: the experts of
 * that many best groups compete, and they hold at least expert_used_count experts), into c; -1 with a message
 * naming the key. */
int model_router_read_groups(model_config_t *c, const model_keys_t *k);

/* The core's implementation of a kind; NULL when there is none. */
const model_part_core_t *model_part_core(model_part_family_t family, int32_t kind);

/* What the core implements, for model_parts_check. */
void model_part_core_support(model_part_support_t *s);

#endif
