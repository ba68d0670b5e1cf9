/* gpu-worker/dense/cuda/cluster.cuh — thread block clusters' barrier and distributed shared memory (sm_90), for
 * the kernels whose blocks of a cluster hand values to each other: the router's cluster form (router.cu), the
 * cluster norm's (rmsnorm.cu) and the decode attention's (attn_decode.cu). On an older device these compile to
 * nothing: their callers' bodies are sm_90 only and their launchers check the device (cuda_cluster_fits).
 * The barrier comes in halves: arrive (relaxed: only "this block has started"; release: this block's writes to
 * shared memory, its own and other blocks', released to the cluster) and wait (acquire: the others' writes seen).
 * A release arrive is a GPU-scope memory barrier on sm_90 (MEMBAR.ALL.GPU: it waits for the block's global stores
 * as well), so values handed to one receiving block go instead as asynchronous stores that count themselves on the
 * receiver's mbarrier (st.async ... complete_tx): the receiver waits for its bytes, the senders for nothing. */
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

/* The address in block `rank` of the cluster of what is at shared::cta address a in this block (an mbarrier's,
 * converted once). */
static __device__ __forceinline__ uint32_t cluster_map_addr(uint32_t a, uint32_t rank)
{
    uint32_t r = 0;
    CLUSTER_ASM("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
    (void)a; /* (an older device's pass) */
    return r;
}

/* The address in block `rank` of the cluster of what is at p in this block's shared memory. */
static __device__ __forceinline__ uint32_t cluster_map(const void *p, uint32_t rank)
{
    return cluster_map_addr((uint32_t)__cvta_generic_to_shared(p), rank);
}

static __device__ __forceinline__ void cluster_store_f32(uint32_t addr, float v)
{
    CLUSTER_ASM("st.shared::cluster.f32 [%0], %1;" ::"r"(addr), "f"(v) : "memory");
}

static __device__ __forceinline__ void cluster_store_f32x2(uint32_t addr, float x, float y)
{
    CLUSTER_ASM("st.shared::cluster.v2.f32 [%0], {%1, %2};" ::"r"(addr), "f"(x), "f"(y) : "memory");
}

/* The receiver's mbarrier, by one of its threads before its first cluster arrive (which the senders' wait follows,
 * so no byte counts before it is set): one arrival, made here, and `bytes` to come from other blocks' async stores.
 * The fence makes the initialization visible to the cluster's async stores (the relaxed arrive orders nothing). */
static __device__ __forceinline__ void cluster_mbar_init(unsigned long long *mb, uint32_t bytes)
{
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(mb);
    CLUSTER_ASM("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(a) : "memory");
    CLUSTER_ASM("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(a), "r"(bytes) : "memory");
    CLUSTER_ASM("fence.mbarrier_init.release.cluster;" ::: "memory");
    (void)a;
}

/* Every byte cluster_mbar_init named has come (the mbarrier's first phase done), the stores' values seen. */
static __device__ __forceinline__ void cluster_mbar_wait(unsigned long long *mb)
{
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(mb);
    uint32_t done = 0;
    (void)a;
    do {
        CLUSTER_ASM("{\n\t.reg .pred p;\n\t"
                    "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], 0;\n\t"
                    "selp.u32 %0, 1, 0, p;\n\t}"
                    : "=r"(done)
                    : "r"(a)
                    : "memory");
#if !(defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900)
        done = 1;
#endif
    } while (!done);
}

/* v into another block's shared memory at addr (cluster_map), counted on that block's mbarrier at mb (cluster_map
 * of its cluster_mbar_init'ed barrier). Not to the sending block itself: its own values are plain stores. */
static __device__ __forceinline__ void cluster_send_f32(uint32_t addr, float v, uint32_t mb)
{
    CLUSTER_ASM("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(addr),
                "r"(__float_as_uint(v)), "r"(mb)
                : "memory");
}

static __device__ __forceinline__ void cluster_send_f32x2(uint32_t addr, float x, float y, uint32_t mb)
{
    CLUSTER_ASM("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32 [%0], {%1, %2}, [%3];" ::"r"(addr),
                "r"(__float_as_uint(x)), "r"(__float_as_uint(y)), "r"(mb)
                : "memory");
}

#undef CLUSTER_ASM

#endif
