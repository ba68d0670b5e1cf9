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
#include "core/util/err.h"
#include "gpu-worker/dense/backend.h"

typedef struct backend_stack backend_stack_t;

/* Builds the stack for model m (borrowed: it must outlive the stack; the pipeline's workers open model_path
 * themselves) as the checked options o say (n_ctx and n_batch set; read during the call only). -1 with err
 * naming what failed; nothing is left running then. */
int backend_stack_open(backend_stack_t **out, const stack_options_t *o, const model_t *m, const char *model_path,
                       guild_err_t *err);

/* The backend to drive (owned by the stack). */
backend_t *backend_stack_backend(backend_stack_t *s);

/* In a single process, the routed-expert executor under the backend (owned by the stack; its counters:
 * moe_exec_stats); NULL for the pipeline, whose GPU worker holds its own. */
const moe_exec_t *backend_stack_experts(const backend_stack_t *s);

/* What the stack counted, on out: the routing per layer (stack_options_t.stats), or the pipeline's summary
 * (pipeline_print_stats); in a single process, the experts the backend streamed and split between the CPU and
 * the GPU, when it did. */
void backend_stack_print_stats(backend_stack_t *s, FILE *out);

/* "single process" or "GPU worker + N CPU expert workers"-style description, for start-up messages. */
const char *backend_stack_describe(const backend_stack_t *s);

/* Stops the workers (if any) and frees everything; nulls *s. NULL-safe. */
void backend_stack_close(backend_stack_t **s);

#endif
