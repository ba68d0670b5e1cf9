/* coordinator/pipeline.h — `guild run`'s multi-process mode in one object: the placement plan, the supervised
 * workers (coordinator/supervisor.h) and the remote backend that gen_run drives (coordinator/remote_backend.h).
 */
#ifndef GUILD_COORDINATOR_PIPELINE_H
#define GUILD_COORDINATOR_PIPELINE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/model/model.h"
#include "core/util/err.h"
#include "core/util/log.h"
#include "gpu-worker/dense/backend.h"

/* What `guild run` was asked about the pipeline (validated by its parser). */
typedef struct pipeline_config {
    int cpu_workers;       /* 0: one per NUMA node */
    const char *listen;    /* NULL: spawn the CPU workers; else wait for them on this endpoint */
    const char *arena_dir; /* NULL: memfd arena */
    const char *backend;   /* the GPU worker's dense backend */
    int n_threads;         /* per worker */
    bool mlock;
    int spin_us;           /* doorbell spin before sleeping; < 0: the default */
    guild_log_level_t log_level;
    uint64_t gpu_mem;      /* the GPU worker's device memory budget (gpu-worker/dense/gpu_plan.h); 0: none */
    int32_t gpu_expert_layers; /* backend_options_t.gpu_expert_layers */
    bool no_graph;         /* the GPU worker captures no CUDA graphs */
    int32_t gate_up_rows;  /* CPU workers' expert pipeline row blocks (the model's tuning file); 0: automatic */
    int32_t down_rows;
    bool interleave_gate_up; /* CPU workers' shard copies with gate and up rows alternating (tuning file) */
    int expert_layout;     /* the CPU experts' expert_layout_t (--expert-layout, else the tuning file); < 0: not
                              chosen, auto */
    int stager;            /* backend_stager_t of the streamed experts' copies (cuda backend, when its plan
                              streams); < 0: the mode's default, BACKEND_STAGER_PROCESS here (a guild-stager
                              process), BACKEND_STAGER_THREAD in a single process */
    int stager_threads;    /* the stager's copy threads; 0: half the online CPUs */
    double split_gpu_fraction; /* tests: backend_options_t.split_gpu_fraction (--force-split) */
} pipeline_config_t;

typedef struct pipeline pipeline_t;

/* Plans, starts the workers, waits until they are ready, and returns the backend to drive in *be (owned by
 * the caller: destroy it before the pipeline). m is the coordinator's own copy of the model (configuration
 * and plan); the workers open model_path themselves. -1 with err (naming the worker and its cause) on
 * failure, with nothing left running. */
int pipeline_new(pipeline_t **out, const pipeline_config_t *pc, const model_t *m, const char *model_path,
                 int32_t n_ctx, int32_t n_batch, backend_t **be, guild_err_t *err);

/* Stops the workers and frees everything; nulls *p. NULL-safe. */
void pipeline_destroy(pipeline_t **p);

/* Prints the plan pipeline_new would follow for model m: which CPU worker owns which experts (pc->cpu_workers;
 * 0: one per node) and, with the cuda backend, the GPU's memory plan (pc->gpu_mem, pc->gpu_expert_layers, for
 * n_ctx positions and batches of n_batch), whose resident layers' experts no CPU worker owns. -1 with err if no
 * plan fits. */
int pipeline_print_plan(const model_t *m, const pipeline_config_t *pc, int32_t n_ctx, int32_t n_batch, FILE *out,
                        guild_err_t *err);

/* The pipeline's summary after a run: restarts, replays, and time per decode step split into the GPU
 * worker's forward pass, the part spent waiting on the CPU workers, and the hand-off; be is the backend
 * pipeline_new returned. */
void pipeline_print_stats(pipeline_t *p, const backend_t *be, FILE *out);

#endif
