/* cpu-expert-worker/experts/moe_local.h — the in-process routed-expert executor: every expert of every layer computed
 * by this process's thread pool (single-process mode, tests, and the reference for the multi-process one). */
#ifndef GUILD_CPU_EXPERT_WORKER_MOE_LOCAL_H
#define GUILD_CPU_EXPERT_WORKER_MOE_LOCAL_H

#include "core/model/model.h"
#include "core/model/moe_exec.h"
#include "core/util/err.h"
#include <stdbool.h>

#include "core/util/pool.h"
#include "cpu-expert-worker/experts/expert_pipe.h"
#include "cpu-expert-worker/experts/expert_shard.h"

/* A host executor (core/model/moe_exec.h) over all experts of m using pool (both borrowed: they must outlive it),
 * reading the experts in the model's mapping (plain layout, no copy). The work runs in collect, on the caller's
 * thread and the pool's. Destroy it with moe_exec_destroy. -1 on out of memory. */
int moe_local_new(moe_exec_t **out, const model_t *m, guild_pool_t *pool, guild_err_t *err);

/* The same with a tuning file's choices (expert_tuning.h): the pipeline's row blocks (NULL: automatic) and the
 * experts' layout: when `layout` packs any expert matrix of m (expert_layout_packs) or interleave_gate_up is
 * set, every expert is copied out of the mapping (memory for a copy of every expert) and laid out as
 * expert_shard_new_copy does; otherwise the mapping is read as is. Speed only, the bits do not change. -1 on
 * out of memory or blocks that are not multiples of 16. */
int moe_local_new_tuned(moe_exec_t **out, const model_t *m, guild_pool_t *pool, const expert_pipe_tuning_t *tuning,
                        bool interleave_gate_up, expert_layout_t layout, guild_err_t *err);

/* From now on e (a "local" executor) counts, per layer, how many routed slots went to each expert (`guild run
 * --stats`). -1 on out of memory. */
int moe_local_count_routing(moe_exec_t *e, guild_err_t *err);

/* Slots routed to `expert` in `layer` since counting started (0 when it never did). */
int64_t moe_local_routed(const moe_exec_t *e, int32_t layer, int32_t expert);

/* The experts e (a moe_local executor) computes from: their memory, for a GPU that streams the same bytes. */
const expert_shard_t *moe_local_shard(const moe_exec_t *e);

#endif
