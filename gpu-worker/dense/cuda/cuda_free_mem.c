/* Device 0's free memory, asked with a context made and destroyed for it (contract in cuda_free_mem.h). */
#include "gpu-worker/dense/cuda/cuda_free_mem.h"

#include <dlfcn.h>
#include <stdio.h>

#include <cuda_runtime_api.h>

#include "gpu-worker/dense/cuda/cuda_util.h"

/* The driver's own query (cuDevicePrimaryCtxGetState): the runtime has none that leaves a context uncreated. It is
 * looked up in the driver library the runtime has loaded already (the build links no driver library: a machine
 * without one builds and runs the cpu backend). Ints stand for CUresult and CUdevice, as the driver's ABI has them. */
typedef int (*cu_init_fn)(unsigned flags);
typedef int (*cu_device_get_fn)(int *dev, int ordinal);
typedef int (*cu_ctx_state_fn)(int dev, unsigned *flags, int *active);

/* Whether device 0's primary context is active in this process: 0 (in *active), -1 with why when it cannot be told. */
static int ctx_active(int *active, char *why, size_t why_len)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!h)
        h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) {
        snprintf(why, why_len, "the driver library libcuda.so.1 cannot be opened");
        return -1;
    }
    const cu_init_fn init = (cu_init_fn)dlsym(h, "cuInit");
    const cu_device_get_fn get = (cu_device_get_fn)dlsym(h, "cuDeviceGet");
    const cu_ctx_state_fn state = (cu_ctx_state_fn)dlsym(h, "cuDevicePrimaryCtxGetState");
    int rc = -1, dev = 0;
    unsigned flags = 0;
    if (!init || !get || !state)
        snprintf(why, why_len, "the driver library lacks cuDevicePrimaryCtxGetState");
    else if (init(0) != 0 || get(&dev, 0) != 0 || state(dev, &flags, active) != 0)
        snprintf(why, why_len, "the driver cannot say whether this process holds device 0's context");
    else
        rc = 0;
    dlclose(h);
    return rc;
}

int cuda_free_mem(uint64_t *free_b, char *why, size_t why_len)
{
    *free_b = 0;
    if (cuda_device_count(why, why_len) < 1)
        return -1;
    int active = 0;
    if (ctx_active(&active, why, why_len) < 0)
        return -1;
    if (active) {
        snprintf(why, why_len, "this process holds device 0's context already");
        return -1;
    }
    size_t f = 0, t = 0;
    const cudaError_t e = cudaSetDevice(0) == cudaSuccess ? cudaMemGetInfo(&f, &t) : cudaGetLastError();
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(why, why_len, "cudaMemGetInfo: %s", cudaGetErrorString(e));
    }
    if (cudaDeviceReset() != cudaSuccess) /* the context made for the asking, and nothing else of this process's */
        (void)cudaGetLastError();
    if (e != cudaSuccess)
        return -1;
    *free_b = (uint64_t)f;
    return 0;
}
