/* tests/stager-mock/cuda_runtime_api.h — the few CUDA runtime calls gpu-worker/dense/cuda/cuda_stage.c makes, on the
 * host, so that its ring path runs in CI without a GPU (tests/check_stager.c). Copies are deferred like a
 * stream's: cudaMemcpyAsync queues, cudaEventRecord marks the queue, cudaEventSynchronize and
 * cudaStreamSynchronize run the queue up to the mark; a slot handed back before its event completed would be
 * refilled under a pending copy, and the copy would then read the wrong bytes. */
#ifndef GUILD_TESTS_STAGER_MOCK_CUDA_RUNTIME_API_H
#define GUILD_TESTS_STAGER_MOCK_CUDA_RUNTIME_API_H

#include <stddef.h>

typedef enum cudaError { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2 } cudaError_t;
typedef enum cudaMemcpyKind { cudaMemcpyHostToDevice = 1 } cudaMemcpyKind_t;
typedef struct mock_stream *cudaStream_t;
typedef struct mock_event *cudaEvent_t;
#define cudaHostRegisterPortable 1u
#define cudaHostRegisterReadOnly 8u
#define cudaEventDisableTiming 2u
enum cudaDeviceAttr { cudaDevAttrHostRegisterReadOnlySupported = 113 };

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, cudaStream_t s);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t ev);
cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t s);
cudaError_t cudaEventSynchronize(cudaEvent_t ev);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaHostRegister(void *p, size_t bytes, unsigned flags);
cudaError_t cudaHostUnregister(void *p);
cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device);
cudaError_t cudaMallocHost(void **p, size_t bytes);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaGetLastError(void);
const char *cudaGetErrorString(cudaError_t e);

/* test side */
typedef struct mock_cuda_stats {
    size_t copies, pinned_copies; /* copies queued; of those, from registered host memory */
    size_t registered;            /* live registrations */
    size_t events;                /* live events */
    size_t pending;               /* copies queued and not yet run */
} mock_cuda_stats_t;
void mock_cuda_stats(mock_cuda_stats_t *out);
void mock_cuda_reset(void);
/* The next cudaHostRegister and cudaMallocHost calls fail with cudaErrorMemoryAllocation (nonzero) or succeed
 * (0); the flags of the last successful registration. Page-locked allocations count as registrations. */
void mock_cuda_fail_register(int fail);
unsigned mock_cuda_last_register_flags(void);

#endif
