/* cuda_attention_decode: attention of a few query rows over the whole KV cache (flash-decoding).
 *
 * Grid (query head, query row, key split); a block of 4 warps takes one split of the keys. A warp works on 4
 * keys at once, 8 lanes per key: lane r of a group holds dims [r * HD/8, (r+1) * HD/8) of q, of the key and
 * of its running output, so each key costs a 3-step reduction and 8-byte (F16) or 16-byte (F32) loads. Each group keeps its own
 * online softmax (max m, sum l, output acc); groups, then warps, then splits are merged with the usual
 * rescaling by exp(m_i - M). With one split the block writes the output; otherwise partials (m, l, acc[HD])
 * go to scratch and a second kernel merges them.
 */
#include <cuda_fp16.h>

#include "gpu-worker/cuda/cuda_common.cuh"

#define AD_WARPS 4
#define AD_SPLIT_MIN 256 /* keys per split, at least */
#define AD_MAX_SPLITS 32
#define AD_MAX_TOK 8     /* query rows the scratch is sized for */

/* Four consecutive cache elements as floats (8-byte loads of F16, 16-byte loads of F32). */
static __device__ __forceinline__ void load4(const __half *p, float *f)
{
    const uint2 b = *(const uint2 *)p;
    const float2 a01 = __half22float2(*(const __half2 *)&b.x), a23 = __half22float2(*(const __half2 *)&b.y);
    f[0] = a01.x, f[1] = a01.y, f[2] = a23.x, f[3] = a23.y;
}

static __device__ __forceinline__ void load4(const float *p, float *f)
{
    const float4 b = *(const float4 *)p;
    f[0] = b.x, f[1] = b.y, f[2] = b.z, f[3] = b.w;
}

/* exp(m - M), 0 for an empty partial (m = -inf). */
static __device__ __forceinline__ float rescale(float m, float M)
{
    return m == -INFINITY ? 0.0f : expf(m - M);
}

/* Splits of at least AD_SPLIT_MIN keys, at most split_cap of them (<= AD_MAX_SPLITS: what the scratch holds),
 * for the n_kv keys of the batch's last row; computed on the device from the cache length, so a captured graph
 * (whose grid is sized for the longest cache) splits exactly as a direct launch does. */
static __host__ __device__ __forceinline__ void split_plan(int n_kv, int split_cap, int *n_split, int *split_len)
{
    int ns = (n_kv + AD_SPLIT_MIN - 1) / AD_SPLIT_MIN;
    if (ns > split_cap)
        ns = split_cap;
    if (ns < 1)
        ns = 1;
    *n_split = ns;
    *split_len = (n_kv + ns - 1) / ns;
}

template <int HD, typename KT>
static __global__ void __launch_bounds__(AD_WARPS * WARP_SIZE)
    attn_decode_kernel(float *__restrict__ out, const float *__restrict__ q, const KT *__restrict__ kc,
                       const KT *__restrict__ vc, int kv0, const int32_t *kv0_dev, int n_head, int group,
                       int split_cap, float scale, float *__restrict__ partials)
{
    constexpr int DPL = HD / 8; /* dims per lane */
    if (kv0_dev)
        kv0 = *kv0_dev;
    int n_split, split_len;
    split_plan(kv0 + (int)gridDim.y, split_cap, &n_split, &split_len);
    const int h = blockIdx.x, t = blockIdx.y, split = blockIdx.z;
    if (split >= n_split)
        return; /* a grid sized for the longest cache (captured graphs) */
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int g = lane / 8, r = lane % 8;
    const int n_kv = kv0 + t + 1;
    const int kvd = (n_head / group) * HD; /* floats per cache row */
    const int hkv = h / group;
    const int j0 = split * split_len, j1 = min(n_kv, j0 + split_len);

    float qv[DPL], acc[DPL];
    const float *qr = q + ((int64_t)t * n_head + h) * HD + r * DPL;
#pragma unroll
    for (int i = 0; i < DPL; i++) {
        qv[i] = qr[i];
        acc[i] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    /* The trip count is the warp's (jb), so every lane reaches the shuffles; a group past the split's end
     * (j >= j1) takes part with zeros and keeps its state. */
    for (int jb = j0 + warp * 4; jb < j1; jb += AD_WARPS * 4) {
        const int j = jb + g;
        const bool valid = j < j1;
        float kf[DPL], vf[DPL];
        if (valid) {
            const KT *kr = kc + (int64_t)j * kvd + hkv * HD + r * DPL;
            const KT *vr = vc + (int64_t)j * kvd + hkv * HD + r * DPL;
#pragma unroll
            for (int i = 0; i < DPL; i += 4) {
                load4(kr + i, kf + i);
                load4(vr + i, vf + i);
            }
        } else {
#pragma unroll
            for (int i = 0; i < DPL; i++)
                kf[i] = vf[i] = 0.0f;
        }
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < DPL; i++)
            s = fmaf(qv[i], kf[i], s);
        /* sum over the 8 lanes of the group: xor 4, 2, 1 stays inside it */
        s += __shfl_xor_sync(FULL_MASK, s, 4);
        s += __shfl_xor_sync(FULL_MASK, s, 2);
        s += __shfl_xor_sync(FULL_MASK, s, 1);
        if (valid) {
            s = s * scale;
            const float m_new = fmaxf(m, s);
            const float corr = expf(m - m_new), p = expf(s - m_new);
            l = fmaf(l, corr, p);
#pragma unroll
            for (int i = 0; i < DPL; i++)
                acc[i] = fmaf(acc[i], corr, p * vf[i]);
            m = m_new;
        }
    }

    /* Merge the 4 groups of the warp (lanes r, r+8, r+16, r+24 hold the same dims). */
#pragma unroll
    for (int o = 8; o < WARP_SIZE; o <<= 1) {
        const float om = __shfl_xor_sync(FULL_MASK, m, o), ol = __shfl_xor_sync(FULL_MASK, l, o);
        const float M = fmaxf(m, om);
        const float a = rescale(m, M), b = rescale(om, M);
#pragma unroll
        for (int i = 0; i < DPL; i++) {
            const float oa = __shfl_xor_sync(FULL_MASK, acc[i], o);
            acc[i] = acc[i] * a + oa * b;
        }
        l = l * a + ol * b;
        m = M;
    }

    /* Merge the warps through shared memory. */
    __shared__ float sh_acc[AD_WARPS][HD];
    __shared__ float sh_m[AD_WARPS], sh_l[AD_WARPS];
    if (g == 0) {
#pragma unroll
        for (int i = 0; i < DPL; i++)
            sh_acc[warp][r * DPL + i] = acc[i];
        if (r == 0) {
            sh_m[warp] = m;
            sh_l[warp] = l;
        }
    }
    __syncthreads();
    float M = -INFINITY;
    for (int w = 0; w < AD_WARPS; w++)
        M = fmaxf(M, sh_m[w]);
    float L = 0.0f;
    for (int w = 0; w < AD_WARPS; w++)
        L += sh_l[w] * rescale(sh_m[w], M);
    for (int d = threadIdx.x; d < HD; d += AD_WARPS * WARP_SIZE) {
        float a = 0.0f;
        for (int w = 0; w < AD_WARPS; w++)
            a += sh_acc[w][d] * rescale(sh_m[w], M);
        if (n_split == 1) {
            out[((int64_t)t * n_head + h) * HD + d] = a / L;
        } else {
            float *pt = partials + (((int64_t)t * n_head + h) * n_split + split) * (HD + 2);
            pt[2 + d] = a;
            if (d == 0) {
                pt[0] = M;
                pt[1] = L;
            }
        }
    }
}

template <int HD>
static __global__ void attn_decode_merge_kernel(float *__restrict__ out, const float *__restrict__ partials,
                                                int n_head, int kv0, const int32_t *kv0_dev, int split_cap)
{
    if (kv0_dev)
        kv0 = *kv0_dev;
    int n_split, split_len;
    split_plan(kv0 + (int)gridDim.y, split_cap, &n_split, &split_len);
    if (n_split == 1)
        return; /* the attention kernel wrote the output */
    const int h = blockIdx.x, t = blockIdx.y, d = threadIdx.x;
    const float *p0 = partials + ((int64_t)t * n_head + h) * n_split * (HD + 2);
    float M = -INFINITY;
    for (int sp = 0; sp < n_split; sp++)
        M = fmaxf(M, p0[sp * (HD + 2)]);
    float L = 0.0f, a = 0.0f;
    for (int sp = 0; sp < n_split; sp++) {
        const float *p = p0 + sp * (HD + 2);
        const float f = rescale(p[0], M);
        L += p[1] * f;
        a += p[2 + d] * f;
    }
    out[((int64_t)t * n_head + h) * HD + d] = a / L;
}

extern "C" size_t cuda_attention_decode_scratch(int32_t n_tok, int32_t n_head, int32_t head_dim, int32_t n_ctx)
{
    (void)n_ctx;
    if (n_tok > AD_MAX_TOK)
        n_tok = AD_MAX_TOK;
    return (size_t)n_tok * (size_t)n_head * AD_MAX_SPLITS * (size_t)(head_dim + 2) * sizeof(float);
}

template <int HD, typename KT>
static void attn_decode_launch(float *out, const float *q, const void *kc, const void *vc, int n_tok, int kv0,
                               const int32_t *kv0_dev, int n_head, int group, float scale, float *scratch,
                               int grid_split, int split_cap, cudaStream_t s)
{
    const dim3 grid((unsigned)n_head, (unsigned)n_tok, (unsigned)grid_split);
    attn_decode_kernel<HD, KT><<<grid, AD_WARPS * WARP_SIZE, 0, s>>>(out, q, (const KT *)kc, (const KT *)vc, kv0,
                                                                      kv0_dev, n_head, group, split_cap, scale,
                                                                      scratch);
    if (grid_split > 1)
        attn_decode_merge_kernel<HD><<<dim3((unsigned)n_head, (unsigned)n_tok), HD, 0, s>>>(out, scratch, n_head, kv0,
                                                                                          kv0_dev, split_cap);
}

template <typename KT>
static void attn_decode_dispatch(int head_dim, float *out, const float *q, const void *kc, const void *vc, int n_tok,
                                 int kv0, const int32_t *kv0_dev, int n_head, int group, float scale, float *sc,
                                 int grid_split, int split_cap, cudaStream_t s)
{
#define AD_CASE(HD)                                                                                                \
    attn_decode_launch<HD, KT>(out, q, kc, vc, n_tok, kv0, kv0_dev, n_head, group, scale, sc, grid_split, split_cap, s)
    switch (head_dim) {
    case 32: AD_CASE(32); break;
    case 64: AD_CASE(64); break;
    case 128: AD_CASE(128); break;
    default: AD_CASE(256); break;
    }
#undef AD_CASE
}

/* kv0_dev NULL: kv0 is the cache length; else the kernels read it from *kv0_dev and kv0 is the largest value it
 * may hold then (the grid is sized for it). */
static int attention_decode(float *out, const float *q, guild_type_t kv_type, const void *k_cache, const void *v_cache,
                            int32_t n_tok, int32_t kv0, const int32_t *kv0_dev, int32_t n_head, int32_t n_head_kv,
                            int32_t head_dim, float scale, void *scratch, size_t scratch_bytes, cudaStream_t s,
                            guild_err_t *err)
{
    if (n_tok <= 0)
        return 0;
    if (n_head_kv <= 0 || n_head % n_head_kv || n_head > 65535 || n_tok > 65535)
        return guild_err_set(err, "cuda: attention: %d query heads over %d KV heads, %d rows", n_head, n_head_kv,
                             n_tok);
    if (head_dim != 32 && head_dim != 64 && head_dim != 128 && head_dim != 256)
        return guild_err_set(err, "cuda: attention: head dimension %d is not one of 32, 64, 128, 256", head_dim);
    if (kv_type != GUILD_TYPE_F16 && kv_type != GUILD_TYPE_F32)
        return guild_err_set(err, "cuda: attention: cache type %d is not f16 or f32", (int)kv_type);
    /* Splits of at least AD_SPLIT_MIN keys, at most AD_MAX_SPLITS of them, fewer when the scratch is short. */
    const size_t per_split = (size_t)n_tok * (size_t)n_head * (size_t)(head_dim + 2) * sizeof(float);
    int split_cap = scratch && scratch_bytes / per_split > 1 ? (int)(scratch_bytes / per_split < AD_MAX_SPLITS
                                                                           ? scratch_bytes / per_split
                                                                           : AD_MAX_SPLITS)
                                                             : 1;
    int grid_split, split_len;
    split_plan(kv0 + n_tok, split_cap, &grid_split, &split_len);
    const int group = n_head / n_head_kv;
    if (kv_type == GUILD_TYPE_F16)
        attn_decode_dispatch<__half>(head_dim, out, q, k_cache, v_cache, n_tok, kv0, kv0_dev, n_head, group, scale,
                                     (float *)scratch, grid_split, split_cap, s);
    else
        attn_decode_dispatch<float>(head_dim, out, q, k_cache, v_cache, n_tok, kv0, kv0_dev, n_head, group, scale,
                                    (float *)scratch, grid_split, split_cap, s);
    return cuda_launch_check("attention_decode", err);
}

extern "C" int cuda_attention_decode(float *out, const float *q, guild_type_t kv_type, const void *k_cache,
                                     const void *v_cache, int32_t n_tok, int32_t kv0, int32_t n_head,
                                     int32_t n_head_kv, int32_t head_dim, float scale, void *scratch,
                                     size_t scratch_bytes, cudaStream_t s, guild_err_t *err)
{
    return attention_decode(out, q, kv_type, k_cache, v_cache, n_tok, kv0, NULL, n_head, n_head_kv, head_dim, scale,
                            scratch, scratch_bytes, s, err);
}

extern "C" int cuda_attention_decode_dyn(float *out, const float *q, guild_type_t kv_type, const void *k_cache,
                                         const void *v_cache, int32_t n_tok, const int32_t *kv0, int32_t kv0_max,
                                         int32_t n_head, int32_t n_head_kv, int32_t head_dim, float scale,
                                         void *scratch, size_t scratch_bytes, cudaStream_t s, guild_err_t *err)
{
    return attention_decode(out, q, kv_type, k_cache, v_cache, n_tok, kv0_max, kv0, n_head, n_head_kv, head_dim, scale,
                            scratch, scratch_bytes, s, err);
}
