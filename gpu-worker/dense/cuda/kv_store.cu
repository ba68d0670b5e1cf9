/* cuda_kv_store: the batch's K and V rows into the cache, as F16 (round to nearest even) or F32 (copied). */
#include <cuda_fp16.h>

#include "gpu-worker/dense/cuda/cuda_common.cuh"

#define KV_THREADS 256

static __device__ __forceinline__ void kv_put(__half *p, float v)
{
    *p = __float2half_rn(v);
}

static __device__ __forceinline__ void kv_put(float *p, float v)
{
    *p = v;
}

template <typename KT>
static __global__ void kv_store_kernel(KT *kc, KT *vc, const float *__restrict__ k, const float *__restrict__ v,
                                       int64_t total, int64_t cell0, const int32_t *pos_dev, int64_t kv_dim)
{
    const int64_t i = (int64_t)blockIdx.x * KV_THREADS + threadIdx.x;
    if (i >= total)
        return;
    if (pos_dev)
        cell0 = (int64_t)*pos_dev * kv_dim;
    kv_put(kc + cell0 + i, k[i]);
    kv_put(vc + cell0 + i, v[i]);
}

static int kv_store(guild_type_t kv_type, void *k_cache, void *v_cache, const float *k, const float *v, int64_t kv_dim,
                    int32_t n_tok, int32_t pos0, const int32_t *pos_dev, cudaStream_t s, guild_err_t *err)
{
    const int64_t total = kv_dim * n_tok;
    if (total <= 0)
        return 0;
    const unsigned blocks = (unsigned)((total + KV_THREADS - 1) / KV_THREADS);
    const int64_t cell0 = (int64_t)pos0 * kv_dim;
    if (kv_type == GUILD_TYPE_F16)
        kv_store_kernel<__half><<<blocks, KV_THREADS, 0, s>>>((__half *)k_cache, (__half *)v_cache, k, v, total, cell0,
                                                              pos_dev, kv_dim);
    else if (kv_type == GUILD_TYPE_F32)
        kv_store_kernel<float><<<blocks, KV_THREADS, 0, s>>>((float *)k_cache, (float *)v_cache, k, v, total, cell0,
                                                             pos_dev, kv_dim);
    else
        return guild_err_set(err, "cuda: kv_store: cache type %d is not f16 or f32", (int)kv_type);
    return cuda_launch_check("kv_store", err);
}

extern "C" int cuda_kv_store(guild_type_t kv_type, void *k_cache, void *v_cache, const float *k, const float *v,
                             int64_t kv_dim, int32_t n_tok, int32_t pos0, cudaStream_t s, guild_err_t *err)
{
    return kv_store(kv_type, k_cache, v_cache, k, v, kv_dim, n_tok, pos0, NULL, s, err);
}

extern "C" int cuda_kv_store_dyn(guild_type_t kv_type, void *k_cache, void *v_cache, const float *k, const float *v,
                                 int64_t kv_dim, int32_t n_tok, const int32_t *pos0, cudaStream_t s, guild_err_t *err)
{
    return kv_store(kv_type, k_cache, v_cache, k, v, kv_dim, n_tok, 0, pos0, s, err);
}
