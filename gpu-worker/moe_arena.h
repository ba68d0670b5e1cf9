/* gpu-worker/moe_arena.h — the routed-expert executor of the multi-process pipeline: the experts are computed
 * by the CPU worker processes, reached through the arena's MoE exchange (ipc/exchange.h).
 *
 * run() takes the next exchange number, waits for its slot to be free, writes the layer's inputs (x, ids),
 * publishes, waits until every CPU worker has completed it, and copies the y rows out (the dense side then
 * combines them in slot order, so the result is the bits moe_local gives). Waits go in slices:
 * between two, interrupted() may stop the exchange (the coordinator aborted, the worker is shutting down);
 * a CPU worker that dies mid-exchange is not an error here: the coordinator restarts it and it redoes the
 * exchange, and this wait simply completes later.
 */
#ifndef GUILD_GPU_WORKER_MOE_ARENA_H
#define GUILD_GPU_WORKER_MOE_ARENA_H

#include <stdint.h>

#include "core/model/config.h"
#include "core/model/moe_exec.h"
#include "core/util/err.h"
#include "ipc/exchange.h"

typedef struct moe_arena_options {
    uint64_t spin_ns;  /* doorbell spin before sleeping */
    uint64_t slice_ns; /* wait slice between interrupted() checks */
    /* Nonzero: give the exchange up, with the reason in err. May be NULL. */
    int (*interrupted)(void *ctx, guild_err_t *err);
    void *ctx;
} moe_arena_options_t;

typedef struct moe_arena_stats {
    uint64_t exchanges; /* completed */
    uint64_t wait_ns;   /* from publish to every done (the CPU workers' compute and the hand-offs) */
    uint64_t total_ns;  /* in run(), copies and slot waits included */
    uint64_t sleeps;    /* doorbell waits that slept */
} moe_arena_stats_t;

/* An executor over exchange x (borrowed; must outlive it) for a model of configuration cfg, whose width and
 * top-k must match the exchange's. Its first exchange is the one after the exchange's current step.
 * Destroy with moe_exec_destroy. -1 with err on a shape mismatch or out of memory. */
int moe_arena_new(moe_exec_t **out, guild_exchange_t *x, const model_config_t *cfg, const moe_arena_options_t *opt,
                  guild_err_t *err);

/* Counters since creation. */
void moe_arena_stats(const moe_exec_t *e, moe_arena_stats_t *out);

#endif
