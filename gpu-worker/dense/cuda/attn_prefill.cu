/* cuda_attention_prefill: causal attention of a batch of query rows (flash attention). The entry point picks
 * the tensor-core kernel of attn_prefill_mma.cu for F16 caches of head dimension 64 or 128 and batches of at
 * least CUDA_ATTN_MMA_MIN_ROWS rows; this file's FP32 kernel (cuda_attention_prefill_fp32) does the rest, and
 * is the reference-precision path (F32 caches).
 *
 * The FP32 kernel:
 * Grid (query tile of AP_BQ rows, query head). The block stages the tile's queries, then walks the keys in
 * tiles of AP_BK positions (converted from the F16 or F32 cache to float in shared memory); warp w owns
 * query rows 4w .. 4w+3 of the tile. For a key tile, lane j scores key j against a query (K rows padded by one float so
 * the 32 lanes hit 32 banks), the warp updates that query's online softmax, and lane j accumulates output dims
 * j, j+32, ... from the V tile with the 32 probabilities broadcast by shuffles. Keys after a query's position
 * are masked; key tiles past the tile's last query are not visited. With a sliding window, keys before a
 * query's window are masked too and key tiles before the tile's first window are not visited, nor, by a query,
 * the tiles before its own window (so that every tile a query visits has a key it sees). Sinks join each
 * query's softmax at the end.
 */
#include <cuda_fp16.h>

#include "gpu-worker/dense/cuda/cuda_common.cuh"

#define AP_WARPS 8
#define AP_QPW 4                    /* query rows per warp */
#define AP_BQ (AP_WARPS * AP_QPW)   /* query rows per block */
#define AP_BK 32                    /* keys per tile: one per lane */

static __device__ __forceinline__ float kv_get(const __half *p)
{
    return __half2float(*p);
}

static __device__ __forceinline__ float kv_get(const float *p)
{
    return *p;
}

template <int HD, typename KT>
static __global__ void __launch_bounds__(AP_WARPS * WARP_SIZE)
    attn_prefill_kernel(float *__restrict__ out, const float *__restrict__ q, const KT *__restrict__ kc,
                        const KT *__restrict__ vc, int n_tok, int kv0, int n_head, int group, float scale, int window,
                        const float *__restrict__ sinks)
{
    constexpr int DL = HD / WARP_SIZE; /* output dims per lane */
    extern __shared__ float smem[];
    float *qs = smem;                       /* [AP_BQ][HD] */
    float *ks = qs + AP_BQ * HD;            /* [AP_BK][HD + 1] */
    float *vs = ks + AP_BK * (HD + 1);      /* [AP_BK][HD] */
    const int tile = blockIdx.x, h = blockIdx.y;
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int hkv = h / group, kvd = (n_head / group) * HD;
    const int t0 = tile * AP_BQ;
    const int nq = min(AP_BQ, n_tok - t0);

    for (int i = threadIdx.x; i < AP_BQ * HD; i += AP_WARPS * WARP_SIZE) {
        const int r = i / HD, d = i % HD;
        qs[i] = r < nq ? q[((int64_t)(t0 + r) * n_head + h) * HD + d] : 0.0f;
    }

    float m[AP_QPW], l[AP_QPW], acc[AP_QPW][DL];
#pragma unroll
    for (int qi = 0; qi < AP_QPW; qi++) {
        m[qi] = -INFINITY;
        l[qi] = 0.0f;
#pragma unroll
        for (int i = 0; i < DL; i++)
            acc[qi][i] = 0.0f;
    }

    const int last_pos = kv0 + t0 + nq - 1; /* the tile's last query sees keys 0 .. last_pos */
    /* the tile's first query sees keys from first_key on (all with no window) */
    const int first_key = window > 0 && kv0 + t0 + 1 > window ? kv0 + t0 + 1 - window : 0;
    for (int k0 = first_key / AP_BK * AP_BK; k0 <= last_pos; k0 += AP_BK) {
        __syncthreads(); /* the previous tile is no longer read (and qs is written, the first time) */
        for (int i = threadIdx.x; i < AP_BK * HD; i += AP_WARPS * WARP_SIZE) {
            const int r = i / HD, d = i % HD;
            const int j = k0 + r;
            float kf = 0.0f, vf = 0.0f;
            if (j <= last_pos) {
                kf = kv_get(kc + (int64_t)j * kvd + hkv * HD + d);
                vf = kv_get(vc + (int64_t)j * kvd + hkv * HD + d);
            }
            ks[r * (HD + 1) + d] = kf;
            vs[r * HD + d] = vf;
        }
        __syncthreads();
#pragma unroll
        for (int qi = 0; qi < AP_QPW; qi++) {
            const int r = warp * AP_QPW + qi;
            if (r >= nq)
                break; /* warp-uniform */
            const int pos = kv0 + t0 + r;
            const int lo = window > 0 && pos + 1 > window ? pos + 1 - window : 0; /* its first key */
            if (k0 > pos || k0 + AP_BK <= lo)
                continue; /* no visible key in this tile (warp-uniform) */
            const int j = k0 + lane;
            const float *qr = qs + r * HD;
            const float *kr = ks + lane * (HD + 1);
            float s = 0.0f;
#pragma unroll 8
            for (int d = 0; d < HD; d++)
                s = fmaf(qr[d], kr[d], s);
            const bool seen = j <= pos && j >= lo;
            s = seen ? s * scale : -INFINITY;
            const float m_new = fmaxf(m[qi], warp_max_f32(s));
            const float corr = expf(m[qi] - m_new);
            const float p = seen ? expf(s - m_new) : 0.0f;
            l[qi] = fmaf(l[qi], corr, warp_sum_f32(p));
#pragma unroll
            for (int i = 0; i < DL; i++)
                acc[qi][i] = acc[qi][i] * corr;
#pragma unroll 8
            for (int jj = 0; jj < AP_BK; jj++) {
                const float pj = __shfl_sync(FULL_MASK, p, jj);
#pragma unroll
                for (int i = 0; i < DL; i++)
                    acc[qi][i] = fmaf(pj, vs[jj * HD + lane + WARP_SIZE * i], acc[qi][i]);
            }
            m[qi] = m_new;
        }
    }
#pragma unroll
    for (int qi = 0; qi < AP_QPW; qi++) {
        const int r = warp * AP_QPW + qi;
        if (r >= nq)
            break;
        float *o = out + ((int64_t)(t0 + r) * n_head + h) * HD;
        if (sinks) { /* the sink joins the softmax and weighs no value */
            const float ms = fmaxf(m[qi], sinks[h]), f = expf(m[qi] - ms);
            const float ls = l[qi] * f + expf(sinks[h] - ms);
#pragma unroll
            for (int i = 0; i < DL; i++)
                o[lane + WARP_SIZE * i] = acc[qi][i] * f / ls;
            continue;
        }
#pragma unroll
        for (int i = 0; i < DL; i++)
            o[lane + WARP_SIZE * i] = acc[qi][i] / l[qi];
    }
}

template <int HD, typename KT>
static cudaError_t attn_prefill_launch(float *out, const float *q, const void *kc, const void *vc, int n_tok, int kv0,
                                       int n_head, int group, float scale, int window, const float *sinks,
                                       cudaStream_t s)
{
    const size_t smem = (size_t)(AP_BQ * HD + AP_BK * (HD + 1) + AP_BK * HD) * sizeof(float);
    cudaError_t e = cudaFuncSetAttribute(attn_prefill_kernel<HD, KT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)smem);
    if (e != cudaSuccess)
        return e;
    const dim3 grid((unsigned)((n_tok + AP_BQ - 1) / AP_BQ), (unsigned)n_head);
    attn_prefill_kernel<HD, KT><<<grid, AP_WARPS * WARP_SIZE, smem, s>>>(out, q, (const KT *)kc, (const KT *)vc,
                                                                        n_tok, kv0, n_head, group, scale, window,
                                                                        sinks);
    return cudaSuccess;
}

template <typename KT>
static cudaError_t attn_prefill_dispatch(int head_dim, float *out, const float *q, const void *kc, const void *vc,
                                         int n_tok, int kv0, int n_head, int group, float scale, int w,
                                         const float *sk, cudaStream_t s)
{
    switch (head_dim) {
    case 32: return attn_prefill_launch<32, KT>(out, q, kc, vc, n_tok, kv0, n_head, group, scale, w, sk, s);
    case 64: return attn_prefill_launch<64, KT>(out, q, kc, vc, n_tok, kv0, n_head, group, scale, w, sk, s);
    case 128: return attn_prefill_launch<128, KT>(out, q, kc, vc, n_tok, kv0, n_head, group, scale, w, sk, s);
    default: return attn_prefill_launch<256, KT>(out, q, kc, vc, n_tok, kv0, n_head, group, scale, w, sk, s);
    }
}

extern "C" int cuda_attention_prefill_fp32(float *out, const float *q, guild_type_t kv_type, const void *k_cache,
                                           const void *v_cache, int32_t n_tok, int32_t kv0, int32_t n_head,
                                           int32_t n_head_kv, int32_t head_dim, float scale,
                                           const cuda_attn_ext_t *ext, cudaStream_t s, guild_err_t *err)
{
    const int window = ext && ext->window > 0 ? ext->window : 0;
    const float *sinks = ext ? ext->sinks : NULL;
    if (n_tok <= 0)
        return 0;
    if (n_head_kv <= 0 || n_head % n_head_kv || n_head > 65535)
        return guild_err_set(err, "cuda: attention: %d query heads over %d KV heads", n_head, n_head_kv);
    if (head_dim != 32 && head_dim != 64 && head_dim != 128 && head_dim != 256)
        return guild_err_set(err, "cuda: attention: head dimension %d is not one of 32, 64, 128, 256", head_dim);
    if (kv_type != GUILD_TYPE_F16 && kv_type != GUILD_TYPE_F32)
        return guild_err_set(err, "cuda: attention: cache type %d is not f16 or f32", (int)kv_type);
    const int group = n_head / n_head_kv;
    const cudaError_t e = kv_type == GUILD_TYPE_F16
                              ? attn_prefill_dispatch<__half>(head_dim, out, q, k_cache, v_cache, n_tok, kv0, n_head,
                                                              group, scale, window, sinks, s)
                              : attn_prefill_dispatch<float>(head_dim, out, q, k_cache, v_cache, n_tok, kv0, n_head,
                                                             group, scale, window, sinks, s);
    if (e != cudaSuccess)
        return guild_err_set(err, "cuda: attention_prefill: %s", cudaGetErrorString(e));
    return cuda_launch_check("attention_prefill", err);
}

extern "C" int cuda_attention_prefill(float *out, const float *q, guild_type_t kv_type, const void *k_cache,
                                      const void *v_cache, int32_t n_tok, int32_t kv0, int32_t n_head,
                                      int32_t n_head_kv, int32_t head_dim, float scale, const cuda_attn_ext_t *ext,
                                      cudaStream_t s, guild_err_t *err)
{
    /* below CUDA_ATTN_MMA_MIN_ROWS most of a 64-row tensor-core tile would be padding */
    if (n_tok >= CUDA_ATTN_MMA_MIN_ROWS && cuda_attention_prefill_mma_takes(kv_type, head_dim, out, q, k_cache, v_cache))
        return cuda_attention_prefill_mma(out, q, kv_type, k_cache, v_cache, n_tok, kv0, n_head, n_head_kv, head_dim,
                                          scale, ext, s, err);
    return cuda_attention_prefill_fp32(out, q, kv_type, k_cache, v_cache, n_tok, kv0, n_head, n_head_kv, head_dim,
                                       scale, ext, s, err);
}
