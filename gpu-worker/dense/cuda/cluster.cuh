/* gpu-worker/dense/cuda/cluster.cuh — thread block clusters' barrier and distributed shared memory (sm_90), for
 * the kernels whose blocks of a cluster hand values to each other: the router's cluster form (router.cu) and the
 * decode attention's (attn_decode.cu). On an older device these compile to nothing: their callers' bodies are
 * sm_90 only and their launchers check the device (cuda_cluster_fits).
 * The barrier comes in halves: arrive (relaxed: only "this block has started"; release: this block's writes to
 * shared memory, its own and other blocks', released to the cluster) and wait (acquire: the others' writes seen). */
#ifndef GUILD_GPU_WORKER_CUDA_CLUSTER_CUH
#define GUILD_GPU_WORKER_CUDA_CLUSTER_CUH

#include <stdint.h>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define CLUSTER_ASM(...) asm volatile(__VA_ARGS__)
#else
#define CLUSTER_ASM(...) ((void)0)
#endif

static __device__ __forceinline__ void cluster_arrive_relaxed()
{
    CLUSTER_ASM("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}

static __device__ __forceinline__ void cluster_arrive_release()
{
    CLUSTER_ASM("barrier.cluster.arrive.release.aligned;" ::: "memory");
}

static __device__ __forceinline__ void cluster_wait_acquire()
{
    CLUSTER_ASM("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

/* The address in block `rank` of the cluster of what is at p in this block's shared memory. */
static __device__ __forceinline__ uint32_t cluster_map(const void *p, uint32_t rank)
{
    uint32_t r = 0;
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    CLUSTER_ASM("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
    (void)a; /* (an older device's pass) */
    return r;
}

static __device__ __forceinline__ void cluster_store_f32(uint32_t addr, float v)
{
    CLUSTER_ASM("st.shared::cluster.f32 [%0], %1;" ::"r"(addr), "f"(v) : "memory");
}

static __device__ __forceinline__ void cluster_store_f32x2(uint32_t addr, float x, float y)
{
    CLUSTER_ASM("st.shared::cluster.v2.f32 [%0], {%1, %2};" ::"r"(addr), "f"(x), "f"(y) : "memory");
}

#undef CLUSTER_ASM

#endif
