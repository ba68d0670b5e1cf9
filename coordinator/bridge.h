/* coordinator/bridge.h — CPU workers without the arena: their exchanges travel as messages.
 *
 * A worker on another host cannot map the arena. The bridge stands in for it there: for each exchange it
 * waits for the step doorbell like a worker would, sends the slot's inputs (x, ids) to the worker as an
 * ExchangeRequest on the data socket (ipc/data.h), and when the ExchangeResult comes back checks it
 * (exactly the pairs the plan gives that worker, each row n_embd wide), writes the y rows into the slot and
 * rings the worker's done counter. The GPU worker cannot tell the difference: same exchange protocol, another
 * transport. A worker replaced by a new one (a new Assign generation, then its DataHello) gets the pending
 * exchange again. Exchanges go to a worker only once the supervisor says it serves (its shard verified), and
 * only on the data connection of the key its control connection came with.
 *
 * A worker without its own copy of the model reads the bytes its shard needs from the coordinator's file here
 * first (ShardRead, answered with ShardData: cpu-expert-worker/shard_fetch.h), for the generation it was
 * assigned.
 */
#ifndef GUILD_COORDINATOR_BRIDGE_H
#define GUILD_COORDINATOR_BRIDGE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/util/err.h"
#include "ipc/curve.h"
#include "ipc/exchange.h"
#include "coordinator/placement.h"

typedef struct bridge bridge_t;

/* Binds the data ROUTER at endpoint in zctx (a tcp one secured as curve says, like the control socket) and
 * starts the bridge thread over exchange x (borrowed, as are model_path, curve, plan and zctx: they must
 * outlive it); model_path is the file ShardRead reads. -1 with err on failure. */
int bridge_new(bridge_t **out, void *zctx, const char *endpoint, const char *model_path, const guild_curve_t *curve,
               guild_exchange_t *x, const placement_t *plan, guild_err_t *err);

/* Stops the thread, closes the socket; nulls *pb. NULL-safe. */
void bridge_destroy(bridge_t **pb);

/* Worker `worker` is the process assigned `generation`, whose control connection came with the CURVE key named
 * `user` ("": none): it may read the model file and say hello; with `serving` its exchanges go through the
 * bridge (once its hello came on a data connection of the same key). generation 0: nobody. Thread-safe. */
void bridge_set_worker(bridge_t *b, int worker, uint64_t generation, const char *user, bool serving);

#endif
