/* coordinator/cmd_model.h — the model a generating command (guild run, guild serve) works with: -m FILE, or
 * without it the built-in demo model (coordinator/demo_model.h); opened with its tokenizer, whose vocabulary
 * must fit in the model's rows of logits. */
#ifndef GUILD_COORDINATOR_CMD_MODEL_H
#define GUILD_COORDINATOR_CMD_MODEL_H

#include <stdint.h>

#include "core/model/model.h"
#include "core/tokenizer/tok.h"
#include "core/util/err.h"

typedef struct cmd_model {
    const char *path; /* the file opened: -m's, or the demo model's in the cache */
    model_t *model;
    tok_t *tok;
    char *demo_path;  /* the demo model's path (owned), NULL with -m */
} cmd_model_t;

/* Opens `path` (NULL: the demo model, generated on first use) and its tokenizer. -1 with err naming the file
 * or the mismatch; cmd_model_fini is still to be called then. */
int cmd_model_init(cmd_model_t *cm, const char *path, guild_err_t *err);

/* The context length a command uses for model m: n_ctx when given (> 0), else the model's training context, at
 * most 4096. */
int32_t cmd_model_n_ctx(const model_t *m, int32_t n_ctx);

/* Frees what cmd_model_init made and zeroes *cm. */
void cmd_model_fini(cmd_model_t *cm);

#endif
