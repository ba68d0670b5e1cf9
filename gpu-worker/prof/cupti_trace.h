/* gpu-worker/prof/cupti_trace.h — a trace of this process's device activity (core/prof/prof_trace.h) taken with
 * CUPTI's activity API: every kernel (a graph's kernels one record a node), copy and memset, with their start
 * and end on CUPTI's clock, kernel names demangled without their parameter lists (at most PROF_NAME_MAX
 * characters). The device host has no nsys;
 * bench/guild-cuda-prof traces its one-process stack with this, guild-gpu-worker --prof the pipeline's dense
 * side.
 *
 * One tracer a process: CUPTI's buffer callbacks carry no context, and may run on CUPTI's own thread (the trace
 * is filled under a lock). Start it before any CUDA context exists, so that every graph instantiated later is
 * traced per node. Built only where configure finds CUPTI; elsewhere (cupti_trace_off.c) cupti_trace_start fails
 * saying so and the rest do nothing. */
#ifndef GUILD_GPU_WORKER_PROF_CUPTI_TRACE_H
#define GUILD_GPU_WORKER_PROF_CUPTI_TRACE_H

#include <stdint.h>

#include "core/prof/prof_trace.h"
#include "core/util/err.h"

/* Starts tracing into t (initialized by the caller; its cap holds) until cupti_trace_stop. -1 with err when
 * CUPTI refuses, a tracer already runs, or this build has no CUPTI. */
int cupti_trace_start(prof_trace_t *t, guild_err_t *err);

/* CUPTI's clock now (that of the records), ns. -1 with err. */
int cupti_trace_now(uint64_t *ns, guild_err_t *err);

/* From now on, records that start before `start` (CUPTI's clock) are not kept (0: all are). */
void cupti_trace_window(uint64_t start);

/* Appends a step to the trace under the tracer's lock (the callbacks may be filling its records). -1 with err. */
int cupti_trace_add_step(const prof_step_t *s, guild_err_t *err);

/* Delivers every record still buffered, stops tracing and lets go of the trace: it is the caller's again, whole.
 * -1 with err when CUPTI fails or a record could not be kept (out of memory); the trace then holds what was kept.
 * Without a running tracer: 0. */
int cupti_trace_stop(guild_err_t *err);

/* Lets go of the trace without flushing (an error path; tracing stays on, but the callbacks keep nothing more).
 * After it the caller may free the trace. */
void cupti_trace_abandon(void);

#endif
