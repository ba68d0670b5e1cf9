/* core/model/keys.h — internal to core/model: reading ARCH.* metadata keys with defaults and ranges, for the
 * configuration (config.c) and the parts' own keys (attn_gqa.c, router_softmax.c, ffn_moe.c, ...). */
#ifndef GUILD_MODEL_KEYS_H
#define GUILD_MODEL_KEYS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/gguf/gguf.h"
#include "core/util/err.h"

/* Limits that keep every size computed from the configuration far from overflow; real models are well inside. */
#define MODEL_MAX_LAYERS 1024
#define MODEL_MAX_WIDTH (1 << 20) /* n_embd, n_ff, head_dim * n_head */
#define MODEL_MAX_HEADS 4096
#define MODEL_MAX_EXPERTS 4096
#define MODEL_MAX_VOCAB (1 << 24)
#define MODEL_MAX_CTX (1 << 24)

typedef struct model_keys {
    const gguf_t *g;
    const char *arch; /* prefix of the keys: general.architecture */
    guild_err_t *err;
} model_keys_t;

/* Whether ARCH.suffix is present. */
bool model_key_present(const model_keys_t *k, const char *suffix);

/* Reads ARCH.suffix into *out. Absent: *out = def when optional, else an error naming the file and the key.
 * Present: must be an integer in [lo, hi]. */
int model_key_i32(const model_keys_t *k, const char *suffix, int32_t *out, bool required, int32_t def, int64_t lo,
                  int64_t hi);

/* The same for a finite float of magnitude <= 1e30. */
int model_key_f32(const model_keys_t *k, const char *suffix, float *out, bool required, float def);

#endif
