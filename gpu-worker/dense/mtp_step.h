/* gpu-worker/dense/mtp_step.h — the order of a multi-token-prediction step that every backend's backend_mtp_step
 * follows (gpu-worker/dense/backend.h; the cpu backend's cpu_mtp.c, the cuda backend's cuda_mtp.c): which steps
 * and tokens it takes, and how step 0 catches the layer up with the cache. The backends run the rows. */
#ifndef GUILD_GPU_WORKER_MTP_STEP_H
#define GUILD_GPU_WORKER_MTP_STEP_H

#include <stdbool.h>
#include <stdint.h>

#include "core/util/err.h"

/* Checks a step's arguments: token in a vocabulary of n_vocab, a cache of kv >= 1 positions (sequence 0's) to
 * predict from, step the one that comes next (`next`: 0 after a forward call), and its position kv - 1 + step
 * inside a context of n_ctx. -1 with err saying which does not hold. */
int mtp_step_check(int32_t step, int32_t token, int32_t next, int32_t kv, int32_t n_vocab, int32_t n_ctx,
                   guild_err_t *err);

/* Runs n rows of the layer, at positions pos0 .. pos0 + n - 1, tokens[t] the token after row t's position;
 * last: the batch ends at the cache's last position (its last row goes on to the head). 0 or -1 with err. */
typedef int (*mtp_step_rows_fn)(void *ctx, int32_t pos0, int32_t n, const int32_t *tokens, bool last,
                                guild_err_t *err);

/* Step 0's rows: the positions from `from` (the layer's own count) to kv - 1, in batches of at most n_batch
 * rows, each row's token the next position's (tok[p + 1], every position's token the forward calls kept) and
 * `token` (sampled, not in the cache yet) for position kv - 1. tokens: [n_batch] where a batch's tokens are
 * staged. The first -1 of rows ends it. */
int mtp_step_catch_up(int32_t from, int32_t kv, int32_t n_batch, const int32_t *tok, int32_t token, int32_t *tokens,
                      mtp_step_rows_fn rows, void *ctx, guild_err_t *err);

#endif
