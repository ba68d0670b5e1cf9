/* gpu-worker/dense/cuda/cuda_common.cuh — what every kernel file of the CUDA backend shares: the C headers it may
 * include from C++, the launch check of the entry points, and warp/block reductions.
 *
 * Numerics: the kernels are compiled with --fmad=false (see gpu-worker/dense/cuda/module.am), so a*b+c is two
 * rounded operations exactly as in the CPU backend (built with -ffp-contract=off); a kernel that wants a fused
 * multiply-add writes fmaf(). Division and sqrtf are IEEE (nvcc's defaults, never --use_fast_math).
 */
#ifndef GUILD_GPU_WORKER_CUDA_COMMON_CUH
#define GUILD_GPU_WORKER_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "core/quant/fp16.h"
#include "gpu-worker/dense/cuda/cuda_kernels.h" /* also core/util/err.h, wrapped for C++ */

#define WARP_SIZE 32
#define FULL_MASK 0xffffffffu

/* The tail of every entry point: the launch's own error (bad configuration, no device) with the op named.
 * Errors of earlier asynchronous work also surface here; they are sticky, so the caller stops anyway. */
static inline int cuda_launch_check(const char *op, guild_err_t *err)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return guild_err_set(err, "cuda: %s: %s (%s)", op, cudaGetErrorString(e), cudaGetErrorName(e));
    return 0;
}

/* ---- programmatic dependent launch (sm_90) ----
 * A kernel launched by cuda_launch_pdl may be scheduled while the kernel before it on the stream still runs (its
 * launch and block dispatch overlap that kernel's tail: a decode step is a chain of short kernels). Such a kernel
 * calls pdl_begin() before its first access to global memory that another kernel may write or read: it waits
 * there until every kernel before it has finished and its writes are visible, then lets the next kernel launch.
 * Work that touches no such memory (an L2 prefetch of the kernel's own weights, pdl_prefetch_l2) may come before.
 * Launched without the attribute (cuda_set_pdl(false), or a plain <<<>>> launch) pdl_begin() returns at once.
 * The arithmetic is the same either way, so are the bits. */
static __device__ __forceinline__ void pdl_begin()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* pdl_begin in two: the wait, and later the next kernel's launch (pdl_trigger; a block that never calls it lets the
 * next kernel launch when it exits). A kernel whose own latency-bound part would share its SMs and the memory with
 * the next kernel's early blocks (their weights asked for before their wait) lets that kernel launch after it. */
static __device__ __forceinline__ void pdl_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

static __device__ __forceinline__ void pdl_trigger()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* Lines of 128 bytes of [p, p + bytes) into L2, one a thread from `lane`, `lanes` threads taking part: weights, no
 * kernel's output, so that a kernel may ask for them before pdl_begin(). */
static __device__ __forceinline__ void prefetch_l2_lines(const char *p, size_t bytes, int lane, int lanes)
{
    for (size_t o = (size_t)lane * 128; o < bytes; o += (size_t)lanes * 128)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(p + o));
}

/* silu(g) * u with model_silu's operations (x / (1 + expf(-x))): the one expression of cuda_swiglu and of the routed
 * experts' kernels, so that their outputs agree bit for bit. */
static __device__ __forceinline__ float silu_mul(float g, float u)
{
    return g / (1.0f + expf(-g)) * u;
}

/* Prefetch bytes [p, p + n) into L2 (p 16-byte aligned, n a multiple of 16, < 2^32): memory no kernel writes
 * during a step (weights), issued by one thread, before pdl_begin(). */
static __device__ __forceinline__ void pdl_prefetch_l2(const void *p, uint32_t n)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (n)
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(n) : "memory");
#endif
}

/* A timing program's timeline stamp (cuda_set_attn_timeline, cuda_set_router_timeline): thread 0 writes the
 * %globaltimer reading (ns) into stamp i of this block's `per`, block (x, y, z) at [((z gridDim.y + y) gridDim.x +
 * x) per]. */
static __device__ __forceinline__ void block_stamp(unsigned long long *tl, int per, int i)
{
    if (threadIdx.x == 0) {
        unsigned long long t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        tl[((blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x) * per + i] = t;
    }
}

/* kernel<<<grid, block, smem, s>>>(args...) in thread block clusters of cluster_x blocks along x (0 or 1: no
 * clusters; above 1 sm_90, the caller having checked that such a cluster can be scheduled and allowed a
 * non-portable size above 8 on the kernel), with programmatic stream serialization when cuda_pdl_enabled(): the
 * kernel must call pdl_begin() as said above; with win (num_bytes > 0) that access policy window for the launch
 * (l2_stream.cuh). The launch's error is left for cuda_launch_check. */
template <typename... P, typename... A>
static inline void cuda_launch_pdl_win(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, unsigned cluster_x,
                                       const cudaAccessPolicyWindow *win, cudaStream_t s, A... args)
{
    cudaLaunchAttribute at[3];
    unsigned n = 0;
    if (cluster_x > 1) {
        at[n].id = cudaLaunchAttributeClusterDimension;
        at[n].val.clusterDim.x = cluster_x;
        at[n].val.clusterDim.y = 1;
        at[n].val.clusterDim.z = 1;
        n++;
    }
    if (cuda_pdl_enabled()) {
        at[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[n].val.programmaticStreamSerializationAllowed = 1;
        n++;
    }
    if (win && win->num_bytes) {
        at[n].id = cudaLaunchAttributeAccessPolicyWindow;
        at[n].val.accessPolicyWindow = *win;
        n++;
    }
    cudaLaunchConfig_t c = {};
    c.gridDim = grid;
    c.blockDim = block;
    c.dynamicSmemBytes = smem;
    c.stream = s;
    c.attrs = at;
    c.numAttrs = n;
    (void)cudaLaunchKernelEx(&c, kernel, ((P)args)...);
}

/* cuda_launch_pdl_win without a window. */
template <typename... P, typename... A>
static inline void cuda_launch_pdl_cluster(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                                           unsigned cluster_x, cudaStream_t s, A... args)
{
    cuda_launch_pdl_win(kernel, grid, block, smem, cluster_x, (const cudaAccessPolicyWindow *)NULL, s, args...);
}

/* Whether clusters of cluster_x blocks of `threads` threads and smem bytes of dynamic shared memory of kernel can be
 * scheduled here, in a grid of `rows` clusters (gridDim.y): an sm_90 device (or later) with room for at least one.
 * The caller has allowed the kernel that much shared memory (and a non-portable size above 8). A failed query
 * counts as no. */
template <typename... P>
static inline bool cuda_cluster_fits(void (*kernel)(P...), unsigned cluster_x, unsigned rows, unsigned threads,
                                     size_t smem)
{
    int dev = 0, major = 0, n = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess || major < 9) {
        (void)cudaGetLastError();
        return false;
    }
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = cluster_x;
    at[0].val.clusterDim.y = 1;
    at[0].val.clusterDim.z = 1;
    cudaLaunchConfig_t c = {};
    c.gridDim = dim3(cluster_x, rows);
    c.blockDim = dim3(threads);
    c.dynamicSmemBytes = smem;
    c.attrs = at;
    c.numAttrs = 1;
    if (cudaOccupancyMaxActiveClusters(&n, kernel, &c) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return n >= 1;
}

/* cuda_launch_pdl_cluster without clusters. */
template <typename... P, typename... A>
static inline void cuda_launch_pdl(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                                   A... args)
{
    cuda_launch_pdl_cluster(kernel, grid, block, smem, 0u, s, args...);
}

/* Sum over the warp, result in every lane; integers are exact in any order. */
static __device__ __forceinline__ int warp_sum_int(int v)
{
#pragma unroll
    for (int o = WARP_SIZE / 2; o > 0; o >>= 1)
        v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

static __device__ __forceinline__ float warp_sum_f32(float v)
{
#pragma unroll
    for (int o = WARP_SIZE / 2; o > 0; o >>= 1)
        v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

static __device__ __forceinline__ double warp_sum_f64(double v)
{
#pragma unroll
    for (int o = WARP_SIZE / 2; o > 0; o >>= 1)
        v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

static __device__ __forceinline__ float warp_max_f32(float v)
{
#pragma unroll
    for (int o = WARP_SIZE / 2; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, o));
    return v;
}

/* Integer sum over groups of G consecutive lanes (G a power of two <= 32), result in every lane of a group. */
template <int G>
static __device__ __forceinline__ int group_sum_int(int v)
{
#pragma unroll
    for (int o = G / 2; o > 0; o >>= 1)
        v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

#endif
