/* coordinator/stack_plan.h — the GPU memory plan of a backend stack (gpu-worker/dense/gpu_plan.h), made once from
 * the coordinator's options and the model, then followed by every process: the single process hands it to its
 * backend; the pipeline to its placement (the CPU workers skip the resident experts), to the GPU worker (its
 * Assign: the backend follows it instead of planning again) and to the staging ring's sizing.
 *
 * A plan applies to the cuda backend, and to the cpu backend when --gpu-mem is given: the cpu backend then stands
 * in for a device of that size (it computes the plan's resident experts itself and never streams): the same
 * skip sets, placement and bits without a GPU (tests). Its inputs beyond the backend's settings (--gpu-mem,
 * --gpu-experts, --stager): the batch asked (--batch N: the most a chunk holds, smaller under a tight budget;
 * auto: the plan's choice), the context, the routing profile (stack_options_t.routing_path: the model's
 * MODEL.gguf.routing unless --no-tuning) and the costs the tuning file measured (gpu-worker/dense/gpu_cost.h).
 */
#ifndef GUILD_COORDINATOR_STACK_PLAN_H
#define GUILD_COORDINATOR_STACK_PLAN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "coordinator/stack_options.h"
#include "core/model/model.h"
#include "core/model/routing_profile.h"
#include "core/util/err.h"
#include "gpu-worker/dense/backend.h"
#include "gpu-worker/dense/gpu_plan.h"

/* --batch auto without a plan (a backend that plans no device memory): today's prompt chunk. */
#define STACK_BATCH_DEFAULT 256

typedef struct stack_plan {
    bool on;                    /* a plan applies (gpu below) */
    gpu_plan_t gpu;
    int32_t n_batch;            /* the chunk every stage works with: the plan's, else the batch asked (auto:
                                   STACK_BATCH_DEFAULT), at most n_ctx */
    routing_profile_t *routing; /* the profile planned with, NULL: none */
} stack_plan_t;

/* Makes the plan for model m under options o (o->n_ctx set; o->n_batch the batch asked, 0: auto). -1 with err
 * (naming the file) for a routing profile that is unreadable, malformed or another model's, or a budget the dense
 * part does not fit even at the smallest chunk. */
int stack_plan_make(stack_plan_t *sp, const stack_options_t *o, const model_t *m, guild_err_t *err);

/* --gpu-mem auto, the default: with the cuda backend and no --gpu-mem, a model whose whole plan (every expert on
 * the device, with the context and the driver's share) does not fit what the device leaves this process is planned
 * against that as its budget (o->gpu.cuda.gpu_mem set: the experts that do not fit stay in RAM and stream), one that
 * fits as with no budget. What the device leaves: its memory less what other processes hold, asked of the device
 * (backend_device_memory: a context made and destroyed for the asking, so call this before the process uses the
 * device), else the whole device. o->n_ctx (and the rest of the plan's inputs) must be set. o->gpu_mem_why says what
 * was decided ("" when nothing was: another backend, --gpu-mem given, or a device that cannot be asked). -1 with err
 * as stack_plan_make, or when what the device leaves does not hold the dense part (err says auto chose it). */
int stack_plan_fit(stack_options_t *o, const model_t *m, guild_err_t *err);

/* stack_plan_fit against the device dev (dev->total 0: none asked; tests). */
int stack_plan_fit_to(stack_options_t *o, const model_t *m, const backend_device_mem_t *dev, guild_err_t *err);

void stack_plan_fini(stack_plan_t *sp);

/* The resident experts' flags ([n_layer * n_expert]) for the placement, NULL when nothing stays on the GPU. */
const uint8_t *stack_plan_gpu_experts(const stack_plan_t *sp);

/* The share of the routed pairs in counts[n_layer * n_expert] whose expert the plan keeps resident, as a
 * fraction; -1 without a plan or without pairs. */
double stack_plan_hit_rate(const stack_plan_t *sp, const uint64_t *counts);

#endif
