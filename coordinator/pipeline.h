/* coordinator/pipeline.h — `guild run`'s multi-process mode in one object: the placement plan, the supervised
 * workers (coordinator/supervisor.h) and the remote backend that gen_run drives (coordinator/remote_backend.h).
 */
#ifndef GUILD_COORDINATOR_PIPELINE_H
#define GUILD_COORDINATOR_PIPELINE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "coordinator/stack_options.h"
#include "core/model/model.h"
#include "core/util/err.h"
#include "gpu-worker/dense/backend.h"

typedef struct pipeline pipeline_t;
struct stack_plan;

/* Places the experts, starts the workers as the checked options o say (copied: o need not outlive the call)
 * and the stack's GPU memory plan sp (coordinator/stack_plan.h; borrowed: it must outlive the pipeline) decide,
 * waits until they are ready, and returns the backend to drive in *be (owned by the caller: destroy it before
 * the pipeline). The workers are sized for sp->n_batch tokens a step. m is the coordinator's own copy of the
 * model (configuration and plan); the workers open model_path themselves. -1 with err (naming the worker and its cause) on failure, with nothing left
 * running. */
int pipeline_new(pipeline_t **out, const stack_options_t *o, const struct stack_plan *sp, const model_t *m,
                 const char *model_path, backend_t **be, guild_err_t *err);

/* Whether a request can succeed now (sup_health): 0, 1 degraded or -1 failed, with the reason in why[n]. Any
 * thread. */
int pipeline_health(pipeline_t *p, char *why, size_t n);

/* Stops the workers and frees everything; nulls *p. NULL-safe. */
void pipeline_destroy(pipeline_t **p);

/* Prints the plan pipeline_new would follow for model m: which CPU worker owns which experts (o->cpu_workers;
 * 0: one per node) and, with a GPU memory plan (coordinator/stack_plan.h: the cuda backend, or the cpu backend
 * given --gpu-mem), that plan, whose resident experts no CPU worker owns. -1 with err if no plan fits. */
int pipeline_print_plan(const model_t *m, const stack_options_t *o, FILE *out, guild_err_t *err);

/* The threads the CPU workers of pipeline_new(o, sp) run for model m, as their pools pin them: cpus[i] the CPU of
 * thread i (-1: not pinned), nodes[i] the NUMA node its worker's memory is bound to, workers in order; the count
 * returned (at most max). What a probe of the rate those threads read memory at starts (guild bench sessions).
 * -1 with err when no plan can be made or more than max threads would run. */
int pipeline_worker_threads(const model_t *m, const stack_options_t *o, const struct stack_plan *sp, int *cpus,
                            int *nodes, int max, guild_err_t *err);

/* The pipeline's summary after a run: restarts, replays, and time per decode step split into the GPU
 * worker's forward pass, the part spent waiting on the CPU workers, and the hand-off; be is the backend
 * pipeline_new returned. */
void pipeline_print_stats(pipeline_t *p, const backend_t *be, FILE *out);

/* Worker restarts so far, per role (sup_restarts). Any thread. */
void pipeline_restarts(pipeline_t *p, int *gpu, int *cpu);

/* The worker processes (supervisor.h sup_pids). */
int pipeline_pids(pipeline_t *p, int *pids, char (*names)[32], int max);

#endif
