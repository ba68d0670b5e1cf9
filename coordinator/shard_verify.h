/* coordinator/shard_verify.h — the coordinator's side of a CPU worker's proof that its shard holds the
 * coordinator's experts: the digests (core/model/expert_digest.h) of each plan worker's shard in the
 * coordinator's own model file, computed once per worker in a thread of their own (reading a large shard takes
 * seconds, which the supervisor's loop must not stop for), and compared with the digests a worker reports in its
 * Ready (from its own copy of the model, or from the bytes it received). */
#ifndef GUILD_COORDINATOR_SHARD_VERIFY_H
#define GUILD_COORDINATOR_SHARD_VERIFY_H

#include <stddef.h>

#include "coordinator/placement.h"
#include "core/model/expert_digest.h"
#include "core/util/err.h"

typedef struct shard_verify shard_verify_t;

/* For the model at model_path (opened by the thread when first needed) and the plan's workers (plan borrowed:
 * it must outlive the object). -1 with err when the thread cannot start. */
int shard_verify_new(shard_verify_t **out, const char *model_path, const placement_t *plan, guild_err_t *err);

/* Stops the thread (a digest under way finishes first) and frees; nulls *pv. NULL-safe. */
void shard_verify_destroy(shard_verify_t **pv);

/* Compares plan worker `worker`'s reported digests got[n_got] with the coordinator's: 1 when they are the same,
 * 0 when ours are not computed yet (they are being: ask again later), -1 with err naming the first difference
 * ("tensor blk.1.ffn_up_exps (experts 0-7): its bytes differ") or why ours could not be computed. */
int shard_verify_check(shard_verify_t *v, int worker, const expert_digest_t *got, size_t n_got, guild_err_t *err);

#endif
