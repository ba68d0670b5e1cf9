/* ipc/expert_store_map.h — a CPU worker's expert store (ipc/expert_store.h) as the processes that read it map it:
 * the GPU worker, which streams its experts, and the other CPU workers of its node, which split each exchange's
 * experts with it (cpu-expert-worker/experts/expert_share.h). Read only, waited for until its first fill is
 * published, every entry it holds checked against the model's expert matrices before anyone reads them.
 */
#ifndef GUILD_IPC_EXPERT_STORE_MAP_H
#define GUILD_IPC_EXPERT_STORE_MAP_H

#include <stdint.h>

#include "core/model/model.h"
#include "core/util/err.h"
#include "ipc/arena.h"
#include "ipc/expert_store.h"

/* Maps the store in arena `name` (the tag and size its ArenaRef names) read only into *a, waits up to 600 s for
 * its first fill (interrupted as expert_store_wait's), and checks every entry it holds: the gate, up and down rows
 * of the entry's layer inside the data space. 0 with *s the view; -1 with err naming the store (and the entry).
 * *a is the arena whenever it was attached, also on an error: the caller destroys it. */
int expert_store_map(const char *name, uint64_t tag, uint64_t size, const model_t *m,
                     int (*interrupted)(void *ctx, guild_err_t *err), void *ctx, guild_arena_t **a, expert_store_t *s,
                     guild_err_t *err);

#endif
