#include "gpu-worker/dense/cuda/cuda_util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "gpu-worker/dense/cuda/cuda_kernels.h"
#include "gpu-worker/dense/cuda/l2_stream.h"
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

/* The largest access policy window of the device (l2_stream.h), -1 until asked; 0: marking off, or no windows. */
static atomic_llong g_l2_max = -1;

static long long l2_window_max(void)
{
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&v, cudaDevAttrMaxAccessPolicyWindowSize, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        v = 0;
    }
    return v > 0 ? v : 0;
}

void cuda_set_l2_stream(bool on)
{
    atomic_store_explicit(&g_l2_max, on ? l2_window_max() : 0, memory_order_relaxed);
}

size_t cuda_l2_stream_max(void)
{
    long long m = atomic_load_explicit(&g_l2_max, memory_order_relaxed);
    if (m < 0) { /* a test's launch without a backend: on, as the backend's default */
        m = l2_window_max();
        atomic_store_explicit(&g_l2_max, m, memory_order_relaxed);
    }
    return (size_t)m;
}

int cuda_check(cudaError_t e, const char *what, guild_err_t *err)
{
    if (e == cudaSuccess)
        return 0;
    return guild_err_set(err, "cuda: %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

uint64_t cuda_device_memory(void)
{
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) { /* no driver, no device */
        (void)cudaGetLastError();
        return 0;
    }
    return (uint64_t)prop.totalGlobalMem;
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

/* The live device allocations of the process (the exchange executor's, the backend's, the experts'), for the memory
 * trace: their bytes and count, and each one's size by address so that cuda_free takes it off (an open-addressing
 * table; an allocation beyond its room stays counted, as if never freed). */
#define LIVE_SLOTS 4096
static struct live {
    pthread_mutex_t lock;
    uint64_t bytes, count;
    struct {
        void *p;
        size_t bytes;
    } slot[LIVE_SLOTS];
} live = {.lock = PTHREAD_MUTEX_INITIALIZER};

static size_t live_hash(const void *p)
{
    return (size_t)(((uintptr_t)p >> 8) * 0x9E3779B97F4A7C15ull >> 52) % LIVE_SLOTS;
}

static void live_add(void *p, size_t bytes)
{
    pthread_mutex_lock(&live.lock);
    live.bytes += bytes;
    live.count++;
    for (size_t i = live_hash(p), k = 0; k < LIVE_SLOTS; k++, i = (i + 1) % LIVE_SLOTS)
        if (!live.slot[i].p) {
            live.slot[i].p = p;
            live.slot[i].bytes = bytes;
            break;
        }
    pthread_mutex_unlock(&live.lock);
}

static void live_remove(void *p)
{
    pthread_mutex_lock(&live.lock);
    for (size_t i = live_hash(p), k = 0; k < LIVE_SLOTS && live.slot[i].p; k++, i = (i + 1) % LIVE_SLOTS)
        if (live.slot[i].p == p) {
            live.bytes -= live.slot[i].bytes;
            live.count--;
            /* backward-shift deletion keeps the probe chains whole */
            size_t j = i;
            for (;;) {
                j = (j + 1) % LIVE_SLOTS;
                if (!live.slot[j].p)
                    break;
                const size_t h = live_hash(live.slot[j].p);
                if ((j > i && (h <= i || h > j)) || (j < i && h <= i && h > j)) {
                    live.slot[i] = live.slot[j];
                    i = j;
                }
            }
            live.slot[i].p = NULL;
            break;
        }
    pthread_mutex_unlock(&live.lock);
}

void cuda_alloc_totals(uint64_t *bytes, uint64_t *count)
{
    pthread_mutex_lock(&live.lock);
    *bytes = live.bytes;
    *count = live.count;
    pthread_mutex_unlock(&live.lock);
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
    live_add(*p, bytes);
    return 0;
}

void cuda_free(void **p)
{
    if (*p) {
        live_remove(*p);
        cudaFree(*p);
        *p = NULL;
    }
}
