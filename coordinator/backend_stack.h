/* coordinator/backend_stack.h — the backend a command drives, with everything under it, behind one option:
 * in this process (a thread pool, the local routed-expert executor and the dense backend: the reference), or
 * the multi-process pipeline (a GPU worker and CPU expert workers, coordinator/pipeline.h).
 *
 * A stack is opened, driven and closed on one thread: the thread pool's caller is thread 0 of the pool, and the
 * pipeline's spawned workers are tied to the thread that started them (PR_SET_PDEATHSIG). */
#ifndef GUILD_COORDINATOR_BACKEND_STACK_H
#define GUILD_COORDINATOR_BACKEND_STACK_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "coordinator/stack_options.h"
#include "core/model/model.h"
#include "core/model/routing_profile.h"
#include "core/util/err.h"
#include "gpu-worker/dense/backend.h"
#include "gpu-worker/dense/gpu_plan.h"

typedef struct backend_stack backend_stack_t;

/* Builds the stack for model m (borrowed: it must outlive the stack; the pipeline's workers open model_path
 * themselves) as the checked options o say (n_ctx and n_batch set; read during the call only). -1 with err
 * naming what failed; nothing is left running then. */
int backend_stack_open(backend_stack_t **out, const stack_options_t *o, const model_t *m, const char *model_path,
                       guild_err_t *err);

/* The backend to drive (owned by the stack). */
backend_t *backend_stack_backend(backend_stack_t *s);

/* The chunk the stack was sized for: the most tokens one forward call takes (the GPU plan's with a plan, else
 * the batch asked; --batch auto resolved). Commands split prompts by it. */
int32_t backend_stack_n_batch(const backend_stack_t *s);

/* The GPU memory plan every process follows (coordinator/stack_plan.h), NULL without one. */
const gpu_plan_t *backend_stack_plan(const backend_stack_t *s);

/* The GPU's hit rate so far: *routed pairs, *resident of them served by the plan's resident experts; -1 (both
 * 0) without a plan or when the backend counts none (stack_options_t.stats or record_routing make it count). */
int backend_stack_hit_rate(const backend_stack_t *s, uint64_t *routed, uint64_t *resident);

/* --record-routing: adds the routing the stack counted (per (layer, expert)) to the profile at `path`
 * (routing_profile_merge_file: created when absent; `replace`: the old file replaced; refused, the file left as
 * it is, when it is another model's, malformed or truncated). -1 with err naming the file; info (may be NULL):
 * the tokens before and after, and whether a count saturated. */
int backend_stack_record_routing(const backend_stack_t *s, const char *path, bool replace,
                                 routing_profile_merge_t *info, guild_err_t *err);

/* In a single process, the routed-expert executor under the backend (owned by the stack; its counters:
 * moe_exec_stats); NULL for the pipeline, whose GPU worker holds its own. */
const moe_exec_t *backend_stack_experts(const backend_stack_t *s);

/* What the stack counted, on out: the routing per layer and the GPU's hit rate (stack_options_t.stats), the pipeline's summary
 * (pipeline_print_stats); in a single process, the experts the backend streamed and split between the CPU and
 * the GPU, when it did. */
void backend_stack_print_stats(backend_stack_t *s, FILE *out);

/* Whether a request can succeed now: 0 (why ""), 1 degraded (the pipeline backs off from a worker that died
 * too often: requests fail until it is ready again) or -1 failed for good, with the reason in why[n]. The one
 * call that may come from another thread than the stack's. */
int backend_stack_health(backend_stack_t *s, char *why, size_t n);

/* Time the forward passes so far waited for the routed experts computed on the CPU, in ns: the GPU worker's wait
 * for the CPU expert workers (the pipeline), or the in-process executor's wait (moe_exec_stats). On the stack's
 * thread. */
uint64_t backend_stack_expert_wait_ns(backend_stack_t *s);

/* Worker restarts so far, per role (the pipeline's supervisor; 0 in a single process). Any thread. */
void backend_stack_restarts(backend_stack_t *s, int *gpu, int *cpu);

/* The processes the stack runs: this one, then the workers (pipeline_pids); at most max; returns the count. */
int backend_stack_pids(backend_stack_t *s, int *pids, char (*names)[32], int max);

/* "single process" or "GPU worker + N CPU expert workers"-style description, for start-up messages. */
const char *backend_stack_describe(const backend_stack_t *s);

/* Stops the workers (if any) and frees everything; nulls *s. NULL-safe. */
void backend_stack_close(backend_stack_t **s);

#endif
