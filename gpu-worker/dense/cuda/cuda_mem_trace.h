/* gpu-worker/dense/cuda/cuda_mem_trace.h — the device memory the CUDA backend takes, phase by phase: the device's
 * in-use bytes (cudaMemGetInfo: the whole device, this process's context and allocations and any other process's)
 * read after each allocation phase of start-up and at the first prefill batch, the first graph step and as graphs
 * accumulate, beside the bytes cuda_alloc handed out (cuda_alloc_totals). What the memory plan (gpu_plan.h) counts
 * is the allocations; the difference is the driver's: the CUDA context, each allocation rounded to the driver's
 * pages, page tables of host memory mapped for the device, kernels loaded on first use, instantiated graphs.
 * Printed at INFO; a warning whenever this process's share of the device's in-use exceeds the budget, naming the
 * phase. Its share: the in-use less what other processes held at start, taken as all that was in use then beyond
 * the context the plan counts (GPU_PLAN_CONTEXT), as --gpu-mem auto's budget leaves it out (coordinator/stack_plan.h:
 * the same arithmetic on the free memory the coordinator saw). Host C. */
#ifndef GUILD_GPU_WORKER_CUDA_MEM_TRACE_H
#define GUILD_GPU_WORKER_CUDA_MEM_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cuda_mem_trace {
    uint64_t budget;         /* --gpu-mem (0: none) */
    uint64_t start_used;     /* device in use when the trace started (the context exists) */
    uint64_t start_alloc;    /* cuda_alloc's bytes before the trace (the exchange executor's outputs) */
    uint64_t others;         /* in use at start beyond the allocations and GPU_PLAN_CONTEXT: other processes' */
    uint64_t used, alloc;    /* at the last mark: in use, cuda_alloc's bytes */
    uint64_t n_alloc;        /* cuda_alloc's allocations at the last mark */
    uint64_t warned;         /* the in-use last warned about (0: none): a warning again only above it */
    size_t len;
    char line[1400];         /* the phases so far */
} cuda_mem_trace_t;

/* Creates the context of the current device if there is none (cudaFree(0)) and starts the trace there. Returns the
 * device's in-use bytes less what cuda_alloc had handed out before: the context's share (and any other process's
 * use of the device); 0 when the device cannot say. */
uint64_t cuda_mem_trace_start(cuda_mem_trace_t *t, uint64_t budget);

/* Appends "PHASE +X (allocated +Y in N)" for the growth of the device's in-use since the last mark. */
void cuda_mem_trace_mark(cuda_mem_trace_t *t, const char *phase);

/* Logs the phases (INFO) with the total against the plan's (planned bytes, of which `reserve` for the driver);
 * a warning when this process's share of the device's in-use exceeds the budget. */
void cuda_mem_trace_log(cuda_mem_trace_t *t, uint64_t planned, uint64_t reserve);

/* Reads the device's in-use after `when` (the first prefill batch, ...), logs it (INFO) with its growth since
 * start-up and the allocations made since, and warns when this process's share exceeds the budget (again only above
 * the last warning's). Returns the bytes in use (0 when the device cannot say). */
uint64_t cuda_mem_trace_check(cuda_mem_trace_t *t, const char *when);

#endif
