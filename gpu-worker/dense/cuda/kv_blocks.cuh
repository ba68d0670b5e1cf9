/* gpu-worker/dense/cuda/kv_blocks.cuh — the KV cache's block formats on the device (gpu-worker/dense/kv_format.h):
 * an element of a Q8_0 or Q4_0 row as ggml dequantizes it, and the normalised Walsh-Hadamard transform of a head
 * in shared memory with kv_hadamard's operations in its order (the same bits as the CPU). Shared by the store
 * (kv_store.cu) and the attention that reads the blocks (attn_blocks.cu). */
#ifndef GUILD_GPU_WORKER_KV_BLOCKS_CUH
#define GUILD_GPU_WORKER_KV_BLOCKS_CUH

#include "core/quant/blocks.h"
#include "gpu-worker/dense/cuda/cuda_common.cuh"

/* Element e of a row of blocks (the row's first block at p): quant_dequant_q8_0_ref's q * d. */
static __device__ __forceinline__ float kv_q8_0_elem(const quant_block_q8_0 *p, int e)
{
    const quant_block_q8_0 *b = p + e / 32;
    return (float)b->qs[e % 32] * quant_f16_to_f32(b->d);
}

/* quant_dequant_q4_0_ref's (nibble - 8) * d: element j of a block in the low nibble of byte j, j + 16 in the high
 * one. */
static __device__ __forceinline__ float kv_q4_0_elem(const quant_block_q4_0 *p, int e)
{
    const quant_block_q4_0 *b = p + e / 32;
    const int j = e % 32;
    const int q = j < 16 ? b->qs[j] & 0x0f : b->qs[j - 16] >> 4;
    return (float)(q - 8) * quant_f16_to_f32(b->d);
}

/* kv_hadamard of x[0..n) in shared memory by the nthreads threads of the block (all of them must call it): the
 * butterflies (a, b) -> (a + b, a - b) at strides 1, 2, ... n/2, then every element times scale (the host's
 * (float)(1 / sqrt(n))). Synchronises the block before and after. */
static __device__ __forceinline__ void kv_hadamard_shared(float *x, int n, float scale, int tid, int nthreads)
{
    __syncthreads();
    for (int len = 1; len < n; len <<= 1) {
        for (int i = tid; i < n / 2; i += nthreads) {
            const int j = (i / len) * 2 * len + i % len; /* pair i of this stride: (j, j + len) */
            const float a = x[j], b = x[j + len];
            x[j] = a + b;
            x[j + len] = a - b;
        }
        __syncthreads();
    }
    for (int i = tid; i < n; i += nthreads)
        x[i] *= scale;
    __syncthreads();
}

#endif
