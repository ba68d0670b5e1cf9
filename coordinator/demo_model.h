/* coordinator/demo_model.h — the built-in demo model of `guild run` (no -m): a small qwen3moe with RANDOM
 * weights and the built-in vocabulary, written by guild-mkmodel on first use and cached under
 * $XDG_CACHE_HOME/guild (else ~/.cache/guild). It shows the machinery running; its text is gibberish. */
#ifndef GUILD_COORDINATOR_DEMO_MODEL_H
#define GUILD_COORDINATOR_DEMO_MODEL_H

#include "core/util/err.h"

/* The prompt used when `guild run` is given neither -p nor -f with the demo model. */
#define DEMO_MODEL_PROMPT "Once upon a time"

/* Sets *path (malloc'ed, caller frees) to the cached demo model, generating it first when absent: guild-mkmodel
 * is looked for next to this executable, then in tools/ of the build directory, then on PATH. -1 with a
 * message when no cache directory can be made or the generator is missing or fails. */
int demo_model_path(char **path, guild_err_t *err);

#endif
