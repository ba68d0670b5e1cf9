/* The device memory trace (contract in cuda_mem_trace.h). */
#include "gpu-worker/dense/cuda/cuda_mem_trace.h"

#include <stdio.h>
#include <string.h>

#include "core/util/log.h"
#include "gpu-worker/dense/cuda/cuda_util.h"
#include "gpu-worker/dense/gpu_plan.h"

#define MiB 1048576.0

static uint64_t in_use(void)
{
    size_t free_b = 0, total = 0;
    if (cudaMemGetInfo(&free_b, &total) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return (uint64_t)(total - free_b);
}

static void append(cuda_mem_trace_t *t, const char *text)
{
    const size_t room = sizeof t->line - t->len;
    const int k = snprintf(t->line + t->len, room, "%s", text);
    if (k > 0)
        t->len += (size_t)k < room ? (size_t)k : room - 1;
}

uint64_t cuda_mem_trace_start(cuda_mem_trace_t *t, uint64_t budget)
{
    memset(t, 0, sizeof *t);
    t->budget = budget;
    (void)cudaFree(0); /* the context, if this is the first call that needs one */
    (void)cudaGetLastError();
    cuda_alloc_totals(&t->alloc, &t->n_alloc);
    t->start_alloc = t->alloc;
    t->used = t->start_used = in_use();
    const uint64_t ctx = t->used > t->alloc ? t->used - t->alloc : 0;
    t->others = ctx > GPU_PLAN_CONTEXT ? ctx - GPU_PLAN_CONTEXT : 0;
    char text[200];
    snprintf(text, sizeof text, "at start %.1f (allocated before: %.1f in %llu; other processes' %.1f)",
             (double)t->used / MiB, (double)t->alloc / MiB, (unsigned long long)t->n_alloc, (double)t->others / MiB);
    append(t, text);
    return t->used ? ctx : 0;
}

/* This process's share of in-use bytes u. */
static uint64_t own(const cuda_mem_trace_t *t, uint64_t u)
{
    return u > t->others ? u - t->others : 0;
}

void cuda_mem_trace_mark(cuda_mem_trace_t *t, const char *phase)
{
    uint64_t a, n;
    cuda_alloc_totals(&a, &n);
    const uint64_t u = in_use();
    char text[200];
    snprintf(text, sizeof text, "; %.80s %+.1f (allocated %+.1f in %+lld)", phase,
             ((double)u - (double)t->used) / MiB, ((double)a - (double)t->alloc) / MiB,
             (long long)n - (long long)t->n_alloc);
    append(t, text);
    t->used = u;
    t->alloc = a;
    t->n_alloc = n;
}

void cuda_mem_trace_log(cuda_mem_trace_t *t, uint64_t planned, uint64_t reserve)
{
    const double beyond = ((double)t->used - (double)t->alloc) / MiB;
    guild_log(GUILD_LOG_INFO, "cuda backend: device memory by phase (MiB in use on the device; cuda_alloc's): %s; "
              "in all %.1f, allocated %.1f, beyond the allocations %.1f (the CUDA context and the driver's share; "
              "the plan's reserve for them %.1f); planned %.1f of a budget of %.1f", t->line, (double)t->used / MiB,
              (double)t->alloc / MiB, beyond, (double)reserve / MiB, (double)planned / MiB, (double)t->budget / MiB);
    if (t->budget && own(t, t->used) > t->budget) {
        t->warned = t->used;
        guild_log(GUILD_LOG_WARN, "cuda backend: %.2f GiB in use on the device after start-up (other processes' "
                  "%.2f GiB at start left out), over the budget of %.2f GiB: %.0f MiB beyond the allocations against "
                  "the plan's reserve of %.0f MiB (the driver's share, or another process on the device)",
                  (double)own(t, t->used) / 1073741824.0, (double)t->others / 1073741824.0,
                  (double)t->budget / 1073741824.0, beyond - (double)t->others / MiB, (double)reserve / MiB);
    }
}

uint64_t cuda_mem_trace_check(cuda_mem_trace_t *t, const char *when)
{
    uint64_t a, n;
    cuda_alloc_totals(&a, &n);
    const uint64_t u = in_use();
    if (!u)
        return 0;
    guild_log(GUILD_LOG_INFO, "cuda backend: device memory after %s: %.1f MiB in use (%+.1f since start-up, "
              "allocated %+.1f)", when, (double)u / MiB, ((double)u - (double)t->used) / MiB,
              ((double)a - (double)t->alloc) / MiB);
    if (t->budget && own(t, u) > t->budget && u > t->warned) {
        t->warned = u;
        guild_log(GUILD_LOG_WARN, "cuda backend: %.2f GiB in use on the device after %s (other processes' %.2f GiB "
                  "at start left out), over the budget of %.2f GiB (%+.0f MiB since start-up: the driver's share "
                  "grew, or another process's)", (double)own(t, u) / 1073741824.0, when,
                  (double)t->others / 1073741824.0, (double)t->budget / 1073741824.0,
                  ((double)u - (double)t->used) / MiB);
    }
    return u;
}
