/* gpu-worker/dense/cuda/mma_s8.cuh — the int8 tensor-core products (PTX mma.sync, s8 x s8 -> s32) that the int8
 * mma kernels share: the routed experts' and dense large batches' (expert_mma.cu) and the few-token dense kernel
 * (matmul.cu's matmul_few_kernel). Fragments as PTX lays them out (expert_mma_traits.cuh: which bytes a thread
 * gives). Integer sums: exact whatever the order. */
#ifndef GUILD_GPU_WORKER_CUDA_MMA_S8_CUH
#define GUILD_GPU_WORKER_CUDA_MMA_S8_CUH

/* c += the 16x8 product of a (16x32: a0..a3) and b (32x8: b0, b1), m16n8k32. */
static __device__ __forceinline__ void mma_s8_k32(int (&c)[4], int a0, int a1, int a2, int a3, int b0, int b1)
{
#if __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
    __trap(); /* never launched: the build targets sm_90 */
#endif
}

/* c += the 16x8 product of a (16x16: a0, a1) and b (16x8: b0), m16n8k16. */
static __device__ __forceinline__ void mma_s8_k16(int (&c)[4], int a0, int a1, int b0)
{
#if __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a0), "r"(a1), "r"(b0));
#else
    __trap();
#endif
}

#endif
