/* cuda_mla_attention: multi-head latent attention's absorbed form over the latent cache (the CPU backend's
 * latent_attention_task: gpu-worker/dense/cpu/attn_mla.c). The shapes and cache type the tensor-core kernel
 * takes go there (mla_attention_mma.cu); here, on CUDA cores: one block per (query head, row); the positions in
 * chunks of MLA_CHUNK: the warps score a chunk (a lane per 32nd element of the cache row, reduced in the warp),
 * then every thread folds the chunk into its share of the latent output with the running maximum and sum
 * (online softmax). Summation order differs from the CPU's: within a stated tolerance, not bit for bit. */
#include <cuda_fp16.h>

#include "gpu-worker/dense/cuda/cuda_common.cuh"

#define MLA_THREADS 128
#define MLA_WARPS (MLA_THREADS / 32)
#define MLA_CHUNK 32
#define MLA_DIMS 8 /* latent elements per thread: R <= MLA_THREADS * MLA_DIMS */

static __device__ __forceinline__ float kv_get(const __half *p)
{
    return __half2float(*p);
}

static __device__ __forceinline__ float kv_get(const float *p)
{
    return *p;
}

/* qk: [n_tok][n_head][RR] (the latent-space query, then the rotated part); cache: [n_ctx][RR] of one layer, rows
 * 0 .. kv0 + t valid for row t; lat: [n_tok][n_head][R]. */
template <typename KT>
static __global__ void mla_attention_kernel(float *__restrict__ lat, const float *__restrict__ qk,
                                            const KT *__restrict__ cache, const int32_t *__restrict__ kv0,
                                            int32_t n_head, int32_t R, int32_t RR, float scale)
{
    extern __shared__ float sh[]; /* [RR] the query, then [MLA_CHUNK] the chunk's scores */
    float *q = sh, *sc = sh + RR;
    const int32_t h = blockIdx.x, t = blockIdx.y;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const float *qrow = qk + ((int64_t)t * n_head + h) * RR;
    for (int32_t i = threadIdx.x; i < RR; i += MLA_THREADS)
        q[i] = qrow[i];
    __syncthreads();
    const int32_t n_pos = *kv0 + t + 1;
    float acc[MLA_DIMS];
    for (int k = 0; k < MLA_DIMS; k++)
        acc[k] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int32_t j0 = 0; j0 < n_pos; j0 += MLA_CHUNK) {
        const int32_t nb = n_pos - j0 < MLA_CHUNK ? n_pos - j0 : MLA_CHUNK;
        for (int32_t p = warp; p < nb; p += MLA_WARPS) {
            const KT *row = cache + (int64_t)(j0 + p) * RR;
            float s = 0.0f;
            for (int32_t i = lane; i < RR; i += 32)
                s += q[i] * kv_get(row + i);
            for (int o = 16; o > 0; o >>= 1)
                s += __shfl_xor_sync(0xffffffffu, s, o);
            if (lane == 0)
                sc[p] = s * scale;
        }
        __syncthreads();
        float cm = -INFINITY;
        for (int32_t p = 0; p < nb; p++)
            cm = fmaxf(cm, sc[p]);
        const float mn = fmaxf(m, cm);
        const float corr = m == -INFINITY ? 0.0f : expf(m - mn);
        l *= corr;
        for (int k = 0; k < MLA_DIMS; k++)
            acc[k] *= corr;
        for (int32_t p = 0; p < nb; p++) {
            const float e = expf(sc[p] - mn);
            const KT *row = cache + (int64_t)(j0 + p) * RR;
            l += e;
            for (int k = 0; k < MLA_DIMS; k++) {
                const int32_t d = threadIdx.x + k * MLA_THREADS;
                if (d < R)
                    acc[k] += e * kv_get(row + d);
            }
        }
        m = mn;
        __syncthreads(); /* the next chunk's scores overwrite sc */
    }
    float *out = lat + ((int64_t)t * n_head + h) * R;
    const float inv = 1.0f / l;
    for (int k = 0; k < MLA_DIMS; k++) {
        const int32_t d = threadIdx.x + k * MLA_THREADS;
        if (d < R)
            out[d] = acc[k] * inv;
    }
}

extern "C" int cuda_mla_attention(float *lat, const float *qk, guild_type_t kv_type, const void *cache,
                                  int32_t n_tok, const int32_t *kv0, int32_t n_ctx, int32_t n_head, int32_t R,
                                  int32_t RR, float scale, void *scratch, size_t scratch_bytes, cudaStream_t s,
                                  guild_err_t *err)
{
    if (cuda_mla_attention_mma_takes(kv_type, R, RR, lat, qk, cache))
        return cuda_mla_attention_mma(lat, qk, cache, n_tok, kv0, n_ctx, n_head, R, RR, scale, scratch,
                                      scratch_bytes, s, err);
    if (n_tok <= 0)
        return 0;
    if (R < 1 || R > MLA_THREADS * MLA_DIMS || RR < R)
        return guild_err_set(err, "cuda: mla attention: a latent of %d (row %d) is not supported (at most %d)",
                             (int)R, (int)RR, MLA_THREADS * MLA_DIMS);
    const dim3 grid((unsigned)n_head, (unsigned)n_tok);
    const size_t shared = ((size_t)RR + MLA_CHUNK) * sizeof(float);
    if (kv_type == GUILD_TYPE_F16)
        mla_attention_kernel<__half><<<grid, MLA_THREADS, shared, s>>>(lat, qk, (const __half *)cache, kv0, n_head,
                                                                        R, RR, scale);
    else if (kv_type == GUILD_TYPE_F32)
        mla_attention_kernel<float><<<grid, MLA_THREADS, shared, s>>>(lat, qk, (const float *)cache, kv0, n_head, R,
                                                                       RR, scale);
    else
        return guild_err_set(err, "cuda: mla attention: cache type %d is not f16 or f32", (int)kv_type);
    return cuda_launch_check("mla_attention", err);
}
