/* coordinator/supervisor.h — the coordinator's side of the multi-process pipeline: the arena, the control
 * socket and the worker processes, kept alive.
 *
 * sup_new creates the arena (the MoE exchange and the step region), binds the control ROUTER in a private
 * run directory (and on cfg->listen for CPU workers started by hand), and starts the supervisor thread, which
 * spawns `guild-gpu-worker` and one `guild-cpu-worker --node N` per plan worker (unless they are to come by
 * hand), and `guild-stager --ring` on a staging ring of its own when cfg->stage_slot_bytes asks for one,
 * assigns each its part (Assign), and from then on:
 *   - sends a Heartbeat to every worker each heartbeat_ms; a worker not heard from for hang_ms is hung;
 *   - reaps its children at once (a death is seen within one 10 ms tick);
 *   - watches the arena: an exchange a CPU worker has not completed, or a step request the GPU worker has not
 *     answered while the CPU workers are idle, for stall_ms without progress, is a hang too;
 *   - kills a hung worker (SIGKILL), and respawns any dead one with the same part; a CPU worker resumes at
 *     the exchange it died in (the slot's inputs are intact), so the GPU worker's wait simply completes; a
 *     GPU worker comes back with an empty cache, which the remote backend refills (remote_backend.h);
 *   - gives up when a worker dies more than max_restarts times within a minute, when a worker cannot load
 *     its part (its Error, with the cause, becomes the pipeline's error), or when a worker does not report
 *     Ready within start_ms: then the pipeline has failed, the GPU worker's pending wait is aborted through
 *     the step region, and sup_check / sup_wait_ready return the reason.
 * The coordinator never exits because a worker did; workers exit on their own when it disappears.
 */
#ifndef GUILD_COORDINATOR_SUPERVISOR_H
#define GUILD_COORDINATOR_SUPERVISOR_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/model/config.h"
#include "core/util/err.h"
#include "core/util/log.h"
#include "gpu-worker/dense/backend.h"
#include "coordinator/placement.h"
#include "ipc/step.h"

typedef struct sup_config {
    const char *model_path;  /* absolute: workers open it themselves */
    const char *worker_dir;  /* directory holding guild-gpu-worker and guild-cpu-worker */
    const placement_t *plan;      /* borrowed; must outlive the supervisor */
    const char *listen;      /* NULL: spawn the CPU workers; else also bind this endpoint and wait for them */
    const char *arena_dir;   /* NULL: anonymous memfd arena; else a named file there (ipc/arena.h) */
    const char *backend;     /* the GPU worker's dense backend */
    int n_threads;           /* threads per worker (0: each worker's default) */
    int32_t n_ctx;           /* KV capacity */
    int32_t n_batch;         /* tokens per step request and per exchange */
    int32_t max_out;         /* logits rows per step request */
    bool mlock;              /* CPU workers lock their shard */
    uint64_t spin_ns;        /* doorbell spin before sleeping, every process */
    uint32_t heartbeat_ms;   /* period of the coordinator's heartbeats */
    uint32_t hang_ms;        /* a worker silent this long is hung */
    uint32_t stall_ms;       /* an exchange or request pending this long without progress is a hang */
    uint32_t silence_ms;     /* workers exit when the coordinator is silent this long */
    uint32_t start_ms;       /* a (re)started worker must be ready within this */
    int max_restarts;        /* deaths of one worker within a minute that are tolerated */
    guild_log_level_t log_level; /* passed to the workers */
    uint64_t gpu_mem;        /* GPU worker: device memory budget; 0: none */
    int32_t gpu_expert_layers; /* GPU worker: backend_options_t.gpu_expert_layers */
    bool no_graph;           /* GPU worker: no CUDA graphs */
    int32_t gate_up_rows;    /* CPU workers: expert pipeline row blocks (tuning file); 0: automatic */
    int32_t down_rows;
    bool interleave_gate_up; /* CPU workers: gate and up rows alternating in the shard copy (tuning file) */
    int expert_layout;       /* CPU workers: expert_layout_t of the shard copy; < 0: auto */
    /* The GPU worker's streamed experts (gpu-worker/dense/backend.h backend_stager_t; the pipeline sets these only
     * when its cuda backend's memory plan streams): stage_slot_bytes > 0 creates a staging ring of 3 slots of
     * this size and supervises `guild-stager --ring` on it like a worker (restarted when it dies; the GPU
     * worker's next forward pass then takes the ring up again); else stager BACKEND_STAGER_THREAD asks the GPU
     * worker for a ring of its own. */
    int stager;              /* backend_stager_t */
    int stager_threads;      /* copy threads (0: half the online CPUs) */
    uint64_t stage_slot_bytes;
    double split_gpu_fraction; /* GPU worker, tests: backend_options_t.split_gpu_fraction */
} sup_config_t;

/* Defaults for the timing fields (heartbeat 100 ms, hang 600 ms, stall 30 s, silence 3 s, start 120 s,
 * 3 restarts a minute); the rest zero. */
void sup_config_defaults(sup_config_t *c);

typedef struct sup sup_t;

/* Sets up and starts supervising (see above); does not wait for the workers. -1 with err on failure
 * (nothing left running). */
int sup_new(sup_t **out, const sup_config_t *cfg, const model_config_t *mc, guild_err_t *err);

/* Shuts the workers down (Shutdown, then SIGKILL after 2 s), joins the thread, removes the arena and the run
 * directory; nulls *ps. NULL-safe. */
void sup_destroy(sup_t **ps);

/* Waits until every worker is ready. 0 with the GPU worker's epoch (a number that changes whenever a new GPU
 * worker, with an empty cache, takes over) in *epoch; -1 with err when the pipeline failed or timeout_ms
 * passed. */
int sup_wait_ready(sup_t *s, uint32_t timeout_ms, uint64_t *epoch, guild_err_t *err);

/* 0: the GPU worker of `epoch` is alive and ready; 1: it is gone (wait and replay); -1 with err: the
 * pipeline failed. Cheap: call it between doorbell wait slices. */
int sup_check(sup_t *s, uint64_t epoch, guild_err_t *err);

/* The coordinator's view of the step region (owned by the supervisor). */
guild_step_t *sup_step(sup_t *s);

/* The name of the staging ring guild-stager serves (stage_ring_attach opens it), or NULL without one. */
const char *sup_stage_ring(const sup_t *s);

/* Restarts so far, per role. */
void sup_restarts(sup_t *s, int *gpu, int *cpu);

/* The GPU worker's streaming counters (backend_stats_t's streamed_*, split_* and stage fields; the others 0),
 * fresh from the worker (or its last heartbeat's if it does not answer within 300 ms). */
void sup_gpu_stats(sup_t *s, backend_stats_t *out);

/* One line per worker: pid, restarts, exchanges served, time busy and waiting, heartbeat round trip. */
void sup_print_stats(sup_t *s, FILE *out);

#endif
