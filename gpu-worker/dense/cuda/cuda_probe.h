/* gpu-worker/dense/cuda/cuda_probe.h — what a benchmark records about the GPU: its name and memory, and the copy
 * bandwidths that bound the pipeline (host to device over PCIe from pinned memory, device to host, and a device
 * to device copy for HBM). Plain C types: benchmarks call it without the CUDA headers. */
#ifndef GUILD_GPU_WORKER_CUDA_PROBE_H
#define GUILD_GPU_WORKER_CUDA_PROBE_H

#include "core/util/err.h"

typedef struct cuda_probe {
    char name[256];      /* device 0 */
    double mem_gib;      /* its memory */
    int sm_count;
    double h2d_gbps;     /* median of timed copies, 1e9 bytes per second */
    double d2h_gbps;
    double d2d_gbps;     /* bytes read plus bytes written */
} cuda_probe_t;

/* Measures device 0 (a few seconds; takes ~1.5 GiB of device memory and 256 MiB pinned for that time). -1 with a
 * message when there is no device or memory is short. */
int cuda_probe(cuda_probe_t *out, guild_err_t *err);

/* Destroys this process's CUDA context (the probe's, kept by the runtime until the process ends): a benchmark that
 * probes before it starts a GPU worker process would otherwise hold the context's device memory (~0.4 GiB on the
 * H200) beside the worker's budget for the whole run. Only for a process that holds nothing else of CUDA. */
void cuda_probe_release(void);

#endif
