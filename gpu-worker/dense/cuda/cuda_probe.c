/* The GPU probe of benchmarks (contract in cuda_probe.h): copies timed with events, medians of 7 after one
 * warm-up each. */
#include "gpu-worker/dense/cuda/cuda_probe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "gpu-worker/dense/cuda/cuda_util.h"

#define PCIE_BYTES ((size_t)256 << 20)
#define HBM_BYTES ((size_t)1 << 30)
#define REPS 7

static int cmp_float(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Median milliseconds of REPS copies of `bytes` from src to dst. */
static int time_copy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, cudaEvent_t e0,
                     cudaEvent_t e1, float *ms, guild_err_t *err)
{
    float t[REPS];
    if (cuda_check(cudaMemcpy(dst, src, bytes, kind), "probe copy", err) < 0)
        return -1;
    for (int i = 0; i < REPS; i++) {
        if (cuda_check(cudaEventRecord(e0, 0), "probe event", err) < 0 ||
            cuda_check(cudaMemcpyAsync(dst, src, bytes, kind, 0), "probe copy", err) < 0 ||
            cuda_check(cudaEventRecord(e1, 0), "probe event", err) < 0 ||
            cuda_check(cudaEventSynchronize(e1), "probe copy", err) < 0 ||
            cuda_check(cudaEventElapsedTime(&t[i], e0, e1), "probe event", err) < 0)
            return -1;
    }
    qsort(t, REPS, sizeof *t, cmp_float);
    *ms = t[REPS / 2];
    return 0;
}

int cuda_probe(cuda_probe_t *out, guild_err_t *err)
{
    memset(out, 0, sizeof *out);
    char why[256];
    if (cuda_device_count(why, sizeof why) < 1)
        return guild_err_set(err, "no CUDA device (%s)", why);
    struct cudaDeviceProp prop;
    if (cuda_check(cudaSetDevice(0), "select device 0", err) < 0 ||
        cuda_check(cudaGetDeviceProperties(&prop, 0), "device properties", err) < 0)
        return -1;
    snprintf(out->name, sizeof out->name, "%s", prop.name);
    out->mem_gib = (double)prop.totalGlobalMem / 1073741824.0;
    out->sm_count = prop.multiProcessorCount;
    void *host = NULL, *d0 = NULL, *d1 = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    float ms;
    int rc = -1;
    if (cudaMallocHost(&host, PCIE_BYTES) != cudaSuccess) {
        host = NULL;
        (void)cudaGetLastError();
        guild_err_set(err, "cannot allocate %zu MiB of pinned memory", PCIE_BYTES >> 20);
        goto out;
    }
    memset(host, 1, PCIE_BYTES);
    if (cuda_alloc(&d0, HBM_BYTES, NULL, "the probe", err) < 0 || cuda_alloc(&d1, HBM_BYTES, NULL, "the probe", err) < 0 ||
        cuda_check(cudaMemset(d0, 1, HBM_BYTES), "probe memset", err) < 0 ||
        cuda_check(cudaEventCreate(&e0), "probe event", err) < 0 || cuda_check(cudaEventCreate(&e1), "probe event", err) < 0)
        goto out;
    if (time_copy(d0, host, PCIE_BYTES, cudaMemcpyHostToDevice, e0, e1, &ms, err) < 0)
        goto out;
    out->h2d_gbps = (double)PCIE_BYTES / (ms * 1e6);
    if (time_copy(host, d0, PCIE_BYTES, cudaMemcpyDeviceToHost, e0, e1, &ms, err) < 0)
        goto out;
    out->d2h_gbps = (double)PCIE_BYTES / (ms * 1e6);
    if (time_copy(d1, d0, HBM_BYTES, cudaMemcpyDeviceToDevice, e0, e1, &ms, err) < 0)
        goto out;
    out->d2d_gbps = 2.0 * (double)HBM_BYTES / (ms * 1e6);
    rc = 0;
out:
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    cuda_free(&d0);
    cuda_free(&d1);
    if (host)
        cudaFreeHost(host);
    return rc;
}

void cuda_probe_release(void)
{
    if (cudaDeviceReset() != cudaSuccess)
        (void)cudaGetLastError();
}
