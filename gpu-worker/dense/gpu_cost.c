/* The plan's cost model (contract in gpu_cost.h). */
#include "gpu-worker/dense/gpu_cost.h"

#include <stdio.h>
#include <string.h>

void gpu_cost_default(gpu_cost_t *c, gpu_copy_path_t path)
{
    memset(c, 0, sizeof *c);
    c->h2d_gbps = path == GPU_COPY_PINNED ? GPU_COST_H2D_PINNED_GBPS
                  : path == GPU_COPY_RING ? GPU_COST_H2D_RING_GBPS
                                          : GPU_COST_H2D_PAGEABLE_GBPS;
    c->gpu_tflops = GPU_COST_GPU_TFLOPS;
    c->cpu_tflops = GPU_COST_CPU_TFLOPS;
    c->cpu_gbps = GPU_COST_CPU_GBPS;
    c->exchange_us = GPU_COST_EXCHANGE_US;
    c->slice_us = GPU_COST_SLICE_US;
    c->refill_us = GPU_COST_REFILL_US;
    c->pass_us = GPU_COST_PASS_US;
    snprintf(c->source, sizeof c->source, "defaults (the H200 device machine)");
}

void gpu_cost_measured(gpu_cost_t *c, gpu_copy_path_t path, double h2d_pinned_gbps, double gpu_tflops,
                       double cpu_tflops, double cpu_gbps, const char *source)
{
    if (h2d_pinned_gbps > 0 && path == GPU_COPY_PINNED)
        c->h2d_gbps = h2d_pinned_gbps;
    if (gpu_tflops > 0)
        c->gpu_tflops = gpu_tflops;
    if (cpu_tflops > 0)
        c->cpu_tflops = cpu_tflops;
    if (cpu_gbps > 0)
        c->cpu_gbps = cpu_gbps;
    if (source && *source)
        snprintf(c->source, sizeof c->source, "%s", source);
}

double gpu_cost_pair_flop(int64_t n_embd, int64_t n_ff)
{
    return 6.0 * (double)n_embd * (double)n_ff; /* gate and up: 2 E F each; down: 2 F E */
}
