/* tests/stager_mock_cuda.c — a host model of the CUDA calls cuda_stage.c makes (see
 * tests/stager-mock/cuda_runtime_api.h); one stream, copies deferred until an event or stream sync. */
#include "config.h"

#include <cuda_runtime_api.h>

#include "gpu-worker/dense/cuda/cuda_util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_OPS 65536
#define MAX_REG 8

typedef struct op {
    void *dst;
    const void *src;
    size_t bytes;
} op_t;

struct mock_event {
    size_t mark; /* ops before this index have run once the event completed */
};

static op_t ops[MAX_OPS]; /* a ring: op i at ops[i % MAX_OPS] */
static size_t n_ops, n_run; /* queued, run (ever) */
static struct {
    const char *p;
    size_t bytes;
} regs[MAX_REG];
static size_t n_regs, n_events, n_copies, n_pinned;

static void run_until(size_t mark)
{
    for (; n_run < mark; n_run++)
        memcpy(ops[n_run % MAX_OPS].dst, ops[n_run % MAX_OPS].src, ops[n_run % MAX_OPS].bytes);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, cudaStream_t s)
{
    (void)s;
    if (kind != cudaMemcpyHostToDevice)
        return cudaErrorInvalidValue;
    if (n_ops - n_run == MAX_OPS) /* a full queue: the device makes progress */
        run_until(n_run + 1);
    ops[n_ops++ % MAX_OPS] = (op_t){dst, src, bytes};
    n_copies++;
    for (size_t i = 0; i < MAX_REG; i++)
        if (regs[i].p && (const char *)src >= regs[i].p && (const char *)src + bytes <= regs[i].p + regs[i].bytes) {
            n_pinned++;
            break;
        }
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned flags)
{
    (void)flags;
    *ev = calloc(1, sizeof **ev);
    if (!*ev)
        return cudaErrorMemoryAllocation;
    n_events++;
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t ev)
{
    free(ev);
    n_events--;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t s)
{
    (void)s;
    ev->mark = n_ops;
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t ev)
{
    run_until(ev->mark > n_run ? ev->mark : n_run);
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    (void)s;
    run_until(n_ops);
    return cudaSuccess;
}

static int fail_register;
static unsigned last_flags;

void mock_cuda_fail_register(int fail)
{
    fail_register = fail;
}

unsigned mock_cuda_last_register_flags(void)
{
    return last_flags;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
    (void)device;
    *value = attr == cudaDevAttrHostRegisterReadOnlySupported;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
    run_until(n_ops);
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device)
{
    *device = 0;
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void)
{
    return cudaSuccess;
}

const char *cudaGetErrorString(cudaError_t e)
{
    return e == cudaSuccess ? "no error" : e == cudaErrorMemoryAllocation ? "out of memory" : "invalid argument";
}

cudaError_t cudaHostRegister(void *p, size_t bytes, unsigned flags)
{
    if (fail_register)
        return cudaErrorMemoryAllocation;
    last_flags = flags;
    for (size_t i = 0; i < MAX_REG; i++)
        if (!regs[i].p) {
            regs[i].p = p;
            regs[i].bytes = bytes;
            n_regs++;
            return cudaSuccess;
        }
    return cudaErrorMemoryAllocation;
}

cudaError_t cudaMallocHost(void **p, size_t bytes)
{
    if (fail_register)
        return cudaErrorMemoryAllocation;
    void *m = malloc(bytes);
    if (!m)
        return cudaErrorMemoryAllocation;
    for (size_t i = 0; i < MAX_REG; i++)
        if (!regs[i].p) {
            regs[i].p = m;
            regs[i].bytes = bytes;
            n_regs++;
            *p = m;
            return cudaSuccess;
        }
    free(m);
    return cudaErrorMemoryAllocation;
}

cudaError_t cudaFreeHost(void *p)
{
    const cudaError_t e = cudaHostUnregister(p);
    if (e == cudaSuccess)
        free(p);
    return e;
}

cudaError_t cudaHostUnregister(void *p)
{
    for (size_t i = 0; i < MAX_REG; i++)
        if (regs[i].p == p) {
            regs[i].p = NULL;
            n_regs--;
            return cudaSuccess;
        }
    return cudaErrorInvalidValue;
}

int cuda_check(cudaError_t e, const char *what, guild_err_t *err)
{
    return e == cudaSuccess ? 0 : guild_err_set(err, "cuda: %s: mock error %d", what, (int)e);
}

void mock_cuda_stats(mock_cuda_stats_t *out)
{
    out->copies = n_copies;
    out->pinned_copies = n_pinned;
    out->registered = n_regs;
    out->events = n_events;
    out->pending = n_ops - n_run;
}

void mock_cuda_reset(void)
{
    run_until(n_ops);
    n_copies = n_pinned = 0;
    fail_register = 0;
    last_flags = 0;
}
