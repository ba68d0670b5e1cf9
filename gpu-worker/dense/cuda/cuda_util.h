/* gpu-worker/dense/cuda/cuda_util.h — CUDA runtime errors as Guild errors, device discovery, and device memory that
 * keeps count of its bytes (for the start-up report and, later, the --gpu-mem budget). Host C. */
#ifndef GUILD_GPU_WORKER_CUDA_UTIL_H
#define GUILD_GPU_WORKER_CUDA_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "core/util/err.h"

/* 0 when e is cudaSuccess; otherwise -1 with "cuda: WHAT: message (cudaErrorName)". */
int cuda_check(cudaError_t e, const char *what, guild_err_t *err);

/* The number of usable CUDA devices; 0 when there is none, with the reason in why (no driver, no device:
 * cudaGetDeviceCount's message). Never fails otherwise. */
int cuda_device_count(char *why, size_t why_len);

/* Device 0's memory in bytes (cudaGetDeviceProperties: a query of the device, which needs no context), 0 when there is
 * no device or it cannot be asked. */
uint64_t cuda_device_memory(void);

/* cudaMalloc of bytes (0 allowed: *p = NULL), adding them to *counter. -1 with a message naming `what` and
 * the size when the device is out of memory. */
int cuda_alloc(void **p, size_t bytes, size_t *counter, const char *what, guild_err_t *err);

/* The bytes and the number of cuda_alloc's allocations live in this process (allocated, not yet cuda_free'd): what
 * the memory trace (cuda_mem_trace.h) tells apart from the driver's own use of the device. */
void cuda_alloc_totals(uint64_t *bytes, uint64_t *count);

/* cudaFree and NULL; NULL-safe. */
void cuda_free(void **p);

#endif
