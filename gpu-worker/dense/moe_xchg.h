/* gpu-worker/dense/moe_xchg.h — the routed-expert executor of the multi-process pipeline ("xchg",
 * core/model/moe_exec.h): the experts are computed by the CPU worker processes, reached through the arena's MoE
 * exchange (ipc/exchange.h). A GPU worker makes one, with backend_exchange_exec_new (gpu-worker/dense/backend.h):
 * driven from the device by kernels for the "cuda" backend (cuda_moe_xchg_new, gpu-worker/dense/cuda/cuda_moe.h),
 * from the host (moe_xchg_new, here) otherwise. Both continue from the exchange's current step.
 *
 * From the host: submit takes the next exchange number, waits for its slot to be free, writes the layer's inputs
 * (x, ids) and publishes; collect waits until every CPU worker has completed it and gives the slot's y rows in
 * place (valid until the next submit). Waits go in slices: between two, interrupted() may give the exchange up
 * (the coordinator aborted, the worker is stopping); a CPU worker that dies mid-exchange is not an error here:
 * the coordinator restarts it, it redoes the exchange, and the wait simply completes later.
 */
#ifndef GUILD_GPU_WORKER_MOE_XCHG_H
#define GUILD_GPU_WORKER_MOE_XCHG_H

#include <stddef.h>
#include <stdint.h>

#include "core/model/moe_exec.h"
#include "core/util/err.h"

struct guild_exchange;

typedef struct moe_xchg_options {
    uint64_t spin_ns;    /* host waits: doorbell spin before sleeping */
    uint64_t slice_ns;   /* host waits: the slice between interrupted() checks (0: 100 ms) */
    uint64_t timeout_ns; /* device waits: one gives up after this (0: 120 s) */
    /* Nonzero: give the exchange up, with the reason in err. Asked between host wait slices, and about once a
     * millisecond while the host waits for a step the device drives. May be NULL. */
    int (*interrupted)(void *ctx, guild_err_t *err);
    void *ctx;
    /* The mapping that holds the exchange (the arena), which a device-driven executor registers for the device. */
    void *map;
    size_t map_bytes;
} moe_xchg_options_t;

/* The host-driven executor over exchange x (borrowed: must outlive it). -1 with err on out of memory. */
int moe_xchg_new(moe_exec_t **out, struct guild_exchange *x, const moe_xchg_options_t *o, guild_err_t *err);

#endif
