/* core/model/model.h — a model opened for inference: the mapped GGUF file, its configuration and its bound
 * weights. Shared read-only by every backend and expert executor in the process. */
#ifndef GUILD_MODEL_MODEL_H
#define GUILD_MODEL_MODEL_H

#include "core/gguf/gguf.h"
#include "core/model/config.h"
#include "core/model/weights.h"
#include "core/util/err.h"

typedef struct model model_t;

/* Maps `path`, reads the configuration and binds the weights. -1 with a message naming the file (and the key
 * or tensor) on failure. */
int model_new(model_t **out, const char *path, guild_err_t *err);

/* The same from an opened file; takes ownership of *g (destroyed with the model, or on failure) and sets *g
 * to NULL. */
int model_new_from_gguf(model_t **out, gguf_t **g, guild_err_t *err);

/* Unmaps and frees; sets *m to NULL. NULL-safe. */
void model_destroy(model_t **m);

const model_config_t *model_config(const model_t *m);
const model_weights_t *model_weights(const model_t *m);
const gguf_t *model_gguf(const model_t *m);

#endif
