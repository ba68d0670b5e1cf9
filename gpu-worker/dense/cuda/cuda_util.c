#include "gpu-worker/dense/cuda/cuda_util.h"

#include <stdatomic.h>
#include <stdio.h>

#include "gpu-worker/dense/cuda/cuda_kernels.h"
#include "gpu-worker/dense/gpu_plan.h"

/* The list lives with the GPU memory plan, which the coordinator computes without CUDA: the layers it plans on
 * the device are the layers whose types the kernels take. */
bool cuda_type_supported(guild_type_t type)
{
    return gpu_plan_type_supported(type);
}

const char *cuda_supported_types(void)
{
    return gpu_plan_supported_types();
}

static atomic_bool g_pdl = true;

void cuda_set_pdl(bool on)
{
    atomic_store_explicit(&g_pdl, on, memory_order_relaxed);
}

bool cuda_pdl_enabled(void)
{
    return atomic_load_explicit(&g_pdl, memory_order_relaxed);
}

int cuda_check(cudaError_t e, const char *what, guild_err_t *err)
{
    if (e == cudaSuccess)
        return 0;
    return guild_err_set(err, "cuda: %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

int cuda_device_count(char *why, size_t why_len)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(why, why_len, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
        (void)cudaGetLastError(); /* not sticky: leave no error behind for later calls */
        return 0;
    }
    if (n == 0)
        snprintf(why, why_len, "cudaGetDeviceCount found no device");
    return n;
}

int cuda_alloc(void **p, size_t bytes, size_t *counter, const char *what, guild_err_t *err)
{
    *p = NULL;
    if (bytes == 0)
        return 0;
    cudaError_t e = cudaMalloc(p, bytes);
    if (e != cudaSuccess) {
        *p = NULL;
        (void)cudaGetLastError();
        return guild_err_set(err, "cuda: cannot allocate %.1f MiB of device memory for %s: %s",
                             (double)bytes / (1 << 20), what, cudaGetErrorString(e));
    }
    if (counter)
        *counter += bytes;
    return 0;
}

void cuda_free(void **p)
{
    if (*p) {
        cudaFree(*p);
        *p = NULL;
    }
}
