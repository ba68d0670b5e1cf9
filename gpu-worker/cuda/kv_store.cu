/* cuda_kv_store: the batch's K and V rows into the F16 cache (round to nearest even). */
#include <cuda_fp16.h>

#include "gpu-worker/cuda/cuda_common.cuh"

#define KV_THREADS 256

static __global__ void kv_store_kernel(quant_half_t *kc, quant_half_t *vc, const float *__restrict__ k,
                                       const float *__restrict__ v, int64_t total, int64_t cell0)
{
    const int64_t i = (int64_t)blockIdx.x * KV_THREADS + threadIdx.x;
    if (i >= total)
        return;
    kc[cell0 + i] = __half_as_ushort(__float2half_rn(k[i]));
    vc[cell0 + i] = __half_as_ushort(__float2half_rn(v[i]));
}

extern "C" int cuda_kv_store(quant_half_t *k_cache, quant_half_t *v_cache, const float *k, const float *v,
                             int64_t kv_dim, int32_t n_tok, int32_t pos0, cudaStream_t s, guild_err_t *err)
{
    const int64_t total = kv_dim * n_tok;
    if (total <= 0)
        return 0;
    kv_store_kernel<<<(unsigned)((total + KV_THREADS - 1) / KV_THREADS), KV_THREADS, 0, s>>>(
        k_cache, v_cache, k, v, total, (int64_t)pos0 * kv_dim);
    return cuda_launch_check("kv_store", err);
}
