/* coordinator/supervisor.h — the coordinator's side of the multi-process pipeline: the arena, the control
 * socket and the worker processes, kept alive.
 *
 * sup_new creates the arena (the MoE exchange and the step region), binds the control ROUTER in a private
 * run directory (and on o->listen for CPU workers started by hand), and starts the supervisor thread, which
 * spawns `guild-gpu-worker` and one `guild-cpu-worker --node N` per plan worker (unless they are to come by
 * hand), and `guild-stager --ring` on a staging ring of its own when the GPU's plan streams experts
 * (setup->stage_slot_bytes) and the cuda backend's stager is a process,
 * assigns each its part (Assign), and from then on:
 *   - sends a Heartbeat to every worker each heartbeat_ms; a worker not heard from for hang_ms is hung (a
 *     remote worker that is loading, perhaps receiving its shard over the same link, gets 10 x hang_ms);
 *   - reaps its children at once (a death is seen within one 10 ms tick);
 *   - watches the arena: an exchange a CPU worker has not completed, or a step request the GPU worker has not
 *     answered while the CPU workers are idle, for stall_ms without progress (an exchange, or a layer of the
 *     pass finished: the step region's progress word), is a hang too;
 *   - kills a hung worker (SIGKILL), and respawns any dead one with the same part; a CPU worker resumes at
 *     the exchange it died in (the slot's inputs are intact), so the GPU worker's wait simply completes; a
 *     GPU worker comes back with an empty cache, which the remote backend refills (remote_backend.h);
 *   - backs off when a worker of its own dies more than max_restarts times within a minute: the pipeline is
 *     degraded, the GPU worker's pending wait is aborted through the step region, requests fail at once with
 *     the reason (sup_check, sup_wait_ready, sup_health), and the worker is started again after a back-off
 *     (backoff_ms, doubling with each give-up up to a minute; from the start again after five quiet minutes);
 *     once it is ready the pipeline serves again;
 *   - gives up for good when a worker cannot load its part (its Error, with the cause, becomes the pipeline's
 *     error), when a worker does not report Ready within start_ms, or when a worker started by hand dies more
 *     than max_restarts times within a minute: then the pipeline has failed, the GPU worker's pending wait is
 *     aborted, and sup_check / sup_wait_ready / sup_health return the reason.
 * The coordinator never exits because a worker did; workers exit on their own when it disappears.
 */
#ifndef GUILD_COORDINATOR_SUPERVISOR_H
#define GUILD_COORDINATOR_SUPERVISOR_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/model/config.h"
#include "core/util/err.h"
#include "coordinator/placement.h"
#include "coordinator/stack_options.h"
#include "gpu-worker/dense/backend.h"
#include "ipc/step.h"

/* What a supervisor runs, beside the options: where the model and the worker programs are, and the plan. */
typedef struct sup_setup {
    const char *model_path;     /* absolute: workers open it themselves */
    const char *worker_dir;     /* directory holding guild-gpu-worker, guild-cpu-worker and guild-stager */
    const placement_t *plan;    /* borrowed; must outlive the supervisor */
    uint64_t stage_slot_bytes;  /* the GPU worker's memory plan streams experts through staging slots of this size
                                   (gpu_plan_stage_slot_bytes); 0: it streams none */
    const struct gpu_plan *gpu_plan; /* the GPU memory plan the GPU worker's backend follows (its Assign carries
                                   it: gpu_worker_options_t.plan); borrowed, must outlive the supervisor; NULL:
                                   the backend plans its own (or none) */
    bool count_routing;         /* the GPU worker counts the routing (--stats, --record-routing): sup_gpu_routing */
    /* One copy of each expert in RAM (ipc/expert_store.h): NULL, or the bytes of each CPU worker's copies
     * ([placement workers], read during sup_new): an expert store is created for each (pages allocated as the
     * worker fills it, on its node), named in its Assign and, all of them, in the GPU worker's when
     * gpu_streams_stores (stager CUDA_STAGER_SHARED: the GPU worker streams from them). */
    const uint64_t *expert_store_bytes;
    bool gpu_streams_stores;
    /* The CPU workers of each node split every exchange's experts between them (expert_share.h): each is told
     * the others of its node (placement_node) and named their stores after its own. Needs the stores. */
    bool share_node;
} sup_setup_t;

typedef struct sup sup_t;

/* Sets up and starts supervising (see above) as the checked options o say (copied; its strings must outlive
 * the supervisor; o->n_batch and o->n_ctx set): the listen endpoint, the arena directory, the timings, and
 * each worker role's record, which it completes for each assignment (gpu-worker/gpu_worker_options.h,
 * cpu-expert-worker/cpu_worker_options.h, stager/stager_options.h). Does not wait for the workers. -1 with err
 * on failure (nothing left running). */
int sup_new(sup_t **out, const stack_options_t *o, const sup_setup_t *setup, const model_config_t *mc,
            guild_err_t *err);

/* Shuts the workers down (Shutdown, then SIGKILL after 2 s), joins the thread, removes the arena and the run
 * directory; nulls *ps. NULL-safe. */
void sup_destroy(sup_t **ps);

/* Waits until every worker is ready. 0 with the GPU worker's epoch (a number that changes whenever a new GPU
 * worker, with an empty cache, takes over) in *epoch; -1 with err when the pipeline failed or timeout_ms
 * passed. */
int sup_wait_ready(sup_t *s, uint32_t timeout_ms, uint64_t *epoch, guild_err_t *err);

/* 0: the GPU worker of `epoch` is alive and ready; 1: it is gone (wait and replay); -1 with err: the
 * pipeline failed, or is degraded (a worker backing off). Cheap: call it between doorbell wait slices. */
int sup_check(sup_t *s, uint64_t epoch, guild_err_t *err);

/* Whether a request can succeed now, from any thread: 0 (why ""), 1 degraded (a worker given up on after
 * repeated deaths waits for its back-off or loads again; requests fail until it is ready; or a worker started by
 * hand was lost and has not registered again: the exchanges wait for it up to rejoin_ms) or -1 failed for good,
 * with the reason in why[n]. */
int sup_health(sup_t *s, char *why, size_t n);

/* The coordinator's view of the step region (owned by the supervisor). */
guild_step_t *sup_step(sup_t *s);

/* The name of the staging ring guild-stager serves (stage_ring_attach opens it), or NULL without one. */
const char *sup_stage_ring(const sup_t *s);

/* Restarts so far, per role. */
void sup_restarts(sup_t *s, int *gpu, int *cpu);

/* The GPU worker's streaming counters (backend_stats_t's streamed_*, split_* and stage fields; the others 0),
 * fresh from the worker (or its last heartbeat's if it does not answer within 300 ms). */
void sup_gpu_stats(sup_t *s, backend_stats_t *out);

/* The GPU worker's routing counts per (layer, expert) (setup.count_routing) into counts[n_layer * n_expert], fresh
 * from the worker (or its last answer's if it does not answer within 300 ms): 0, or -1 when it has sent none. */
int sup_gpu_routing(sup_t *s, uint64_t *counts);

/* The workers' processes now (those with a pid; by-hand ones too): pids[i] and names[i] ("cpu-worker[1]"), at
 * most max of them; returns the count. */
int sup_pids(sup_t *s, int *pids, char (*names)[32], int max);

/* One line per worker: pid, restarts, exchanges served, time busy and waiting, heartbeat round trip. */
void sup_print_stats(sup_t *s, FILE *out);

#endif
