/* core/model/bind.h — internal to core/model: binding one tensor of the GGUF file to a model_tensor_t with its
 * shape and type checked, for the weights (weights.c) and each part's tensors (attn_gqa.c, ffn_moe.c, ...). */
#ifndef GUILD_MODEL_BIND_H
#define GUILD_MODEL_BIND_H

#include <stdbool.h>
#include <stdint.h>

#include "core/gguf/gguf.h"
#include "core/model/config.h"
#include "core/model/weights.h"
#include "core/util/err.h"

/* Where tensors are bound from: the file, its configuration, and the layer (names "blk.LAYER.<name>"; -1 for
 * the model's own tensors, named as given). */
typedef struct model_binder {
    const gguf_t *g;
    const model_config_t *c;
    int32_t layer;
    guild_err_t *err;
} model_binder_t;

/* Binds tensor `name` with the expected shape (n_dims of ne0, ne1, ne2). Absent and !required: t is zeroed
 * (t->data == NULL). -1 with "FILE: tensor NAME: problem" for a missing tensor, another shape (expected and
 * found) or a type that is not supported for its kind. */
int model_bind(model_tensor_t *t, const model_binder_t *b, const char *name, model_tensor_kind_t kind,
               bool required, uint32_t n_dims, int64_t ne0, int64_t ne1, int64_t ne2);

#endif
