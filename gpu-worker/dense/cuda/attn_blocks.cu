/* cuda_attention_blocks: causal attention over a KV cache of the block formats (Q8_0, Q4_0; k8v4's rotated Q4_0
 * values), reading the blocks directly: each key and value element is dequantized as the dot product or the
 * weighted sum takes it (kv_blocks.cuh), never into a copy of the cache.
 *
 * One block per (query head, row) whatever the batch: the row's keys are visited in the same order, by the same
 * threads, for any batch split, so a position's output is the same bits in any split (the backend contract).
 * Positions in chunks of AB_CHUNK: the warps score the chunk's keys (lane l takes elements l, l + 32, ... of the
 * head, which are element l of each block: one byte per lane per block, coalesced), reduced in the warp; then
 * every thread folds the chunk into its dims of the output with the running maximum and sum (online softmax). A
 * sink joins at the end; with rotated values the head's output goes through the Walsh-Hadamard transform once
 * (kv_format.h says why that undoes the rotation). The CPU's cpu_attention_head_cache within float rounding (the
 * summation orders differ), not bit for bit. */
#include "gpu-worker/dense/cuda/cuda_common.cuh"
#include "gpu-worker/dense/cuda/kv_blocks.cuh"

#define AB_THREADS 128
#define AB_WARPS (AB_THREADS / WARP_SIZE)
#define AB_CHUNK 32
#define AB_DIMS 2 /* output dims per thread: head_dim <= AB_THREADS * AB_DIMS */

template <bool KQ8>
static __device__ __forceinline__ float key_elem(const void *row, int e)
{
    return KQ8 ? kv_q8_0_elem((const quant_block_q8_0 *)row, e) : kv_q4_0_elem((const quant_block_q4_0 *)row, e);
}

template <bool VQ8>
static __device__ __forceinline__ float value_elem(const void *row, int e)
{
    return VQ8 ? kv_q8_0_elem((const quant_block_q8_0 *)row, e) : kv_q4_0_elem((const quant_block_q4_0 *)row, e);
}

/* q: [n_tok][n_head * HD]; kc, vc: one layer's rows (k_row, v_row bytes apart), head hkv's slice at hkv * k_head
 * (v_head) bytes; out: [n_tok][n_head * HD]. */
template <bool KQ8, bool VQ8, bool ROT>
static __global__ void __launch_bounds__(AB_THREADS)
    attn_blocks_kernel(float *__restrict__ out, const float *__restrict__ q, const char *__restrict__ kc,
                       const char *__restrict__ vc, int kv0, const int32_t *kv0_dev, int n_head, int group, int hd,
                       int64_t k_row, int64_t v_row, int64_t k_head, int64_t v_head, float scale, int window,
                       const float *__restrict__ sinks, float rot_scale)
{
    extern __shared__ float sh[]; /* [hd] the query, then [AB_CHUNK] the chunk's scores, then [hd] the output */
    float *qs = sh, *sc = sh + hd, *os = sh + hd + AB_CHUNK;
    if (kv0_dev)
        kv0 = *kv0_dev;
    const int h = blockIdx.x, t = blockIdx.y, hkv = h / group;
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    const float *qrow = q + ((int64_t)t * n_head + h) * hd;
    for (int i = threadIdx.x; i < hd; i += AB_THREADS)
        qs[i] = qrow[i];
    __syncthreads();
    const int pos = kv0 + t;
    const int first = window > 0 && pos + 1 > window ? pos + 1 - window : 0;
    const char *kh = kc + hkv * k_head, *vh = vc + hkv * v_head;
    float acc[AB_DIMS];
#pragma unroll
    for (int k = 0; k < AB_DIMS; k++)
        acc[k] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int j0 = first; j0 <= pos; j0 += AB_CHUNK) {
        const int nb = pos + 1 - j0 < AB_CHUNK ? pos + 1 - j0 : AB_CHUNK;
        for (int p = warp; p < nb; p += AB_WARPS) {
            const char *row = kh + (int64_t)(j0 + p) * k_row;
            float s = 0.0f;
            for (int e = lane; e < hd; e += WARP_SIZE)
                s += qs[e] * key_elem<KQ8>(row, e);
            s = warp_sum_f32(s);
            if (lane == 0)
                sc[p] = s * scale;
        }
        __syncthreads();
        float cm = -INFINITY;
        for (int p = 0; p < nb; p++)
            cm = fmaxf(cm, sc[p]);
        const float mn = fmaxf(m, cm);
        const float corr = m == -INFINITY ? 0.0f : expf(m - mn);
        l *= corr;
#pragma unroll
        for (int k = 0; k < AB_DIMS; k++)
            acc[k] *= corr;
        for (int p = 0; p < nb; p++) {
            const float e = expf(sc[p] - mn);
            const char *row = vh + (int64_t)(j0 + p) * v_row;
            l += e;
#pragma unroll
            for (int k = 0; k < AB_DIMS; k++) {
                const int d = threadIdx.x + k * AB_THREADS;
                if (d < hd)
                    acc[k] += e * value_elem<VQ8>(row, d);
            }
        }
        m = mn;
        __syncthreads(); /* the next chunk's scores overwrite sc */
    }
    if (sinks) { /* the sink's share of the softmax weighs no value */
        const float s = sinks[h], mn = fmaxf(m, s), corr = m == -INFINITY ? 0.0f : expf(m - mn);
        l = l * corr + expf(s - mn);
#pragma unroll
        for (int k = 0; k < AB_DIMS; k++)
            acc[k] *= corr;
    }
    const float inv = 1.0f / l;
    float *orow = out + ((int64_t)t * n_head + h) * hd;
#pragma unroll
    for (int k = 0; k < AB_DIMS; k++) {
        const int d = threadIdx.x + k * AB_THREADS;
        if (d < hd) {
            if (ROT)
                os[d] = acc[k] * inv;
            else
                orow[d] = acc[k] * inv;
        }
    }
    if (ROT) {
        kv_hadamard_shared(os, hd, rot_scale, threadIdx.x, AB_THREADS);
        for (int d = threadIdx.x; d < hd; d += AB_THREADS)
            orow[d] = os[d];
    }
}

template <bool KQ8, bool VQ8, bool ROT>
static void launch(dim3 grid, size_t shared, cudaStream_t s, float *out, const float *q, const void *kc,
                   const void *vc, int kv0, const int32_t *kv0_dev, int n_head, int group, int hd, int64_t k_row,
                   int64_t v_row, int64_t k_head, int64_t v_head, float scale, int window, const float *sinks,
                   float rot_scale)
{
    attn_blocks_kernel<KQ8, VQ8, ROT><<<grid, AB_THREADS, shared, s>>>(
        out, q, (const char *)kc, (const char *)vc, kv0, kv0_dev, n_head, group, hd, k_row, v_row, k_head, v_head,
        scale, window, sinks, rot_scale);
}

static int64_t row_bytes(guild_type_t t, int64_t n)
{
    return n / 32 * (t == GUILD_TYPE_Q8_0 ? (int64_t)sizeof(quant_block_q8_0) : (int64_t)sizeof(quant_block_q4_0));
}

extern "C" int cuda_attention_blocks(float *out, const float *q, guild_type_t kt, guild_type_t vt, bool v_rot,
                                     const void *k_cache, const void *v_cache, int32_t n_tok, int32_t kv0,
                                     const int32_t *kv0_dev, int32_t n_head, int32_t n_head_kv, int32_t head_dim,
                                     float scale, const cuda_attn_ext_t *ext, cudaStream_t s, guild_err_t *err)
{
    if (n_tok <= 0)
        return 0;
    if (n_head_kv <= 0 || n_head % n_head_kv || n_head > 65535 || n_tok > 65535)
        return guild_err_set(err, "cuda: attention: %d query heads over %d KV heads, %d rows", n_head, n_head_kv,
                             n_tok);
    if (head_dim % 32 || head_dim > AB_THREADS * AB_DIMS || (v_rot && (head_dim & (head_dim - 1))))
        return guild_err_set(err, "cuda: attention: head dimension %d over a block cache (a multiple of 32 up to %d%s)",
                             head_dim, AB_THREADS * AB_DIMS, v_rot ? ", a power of two" : "");
    const bool kq8 = kt == GUILD_TYPE_Q8_0, vq8 = vt == GUILD_TYPE_Q8_0;
    if ((!kq8 && kt != GUILD_TYPE_Q4_0) || (!vq8 && vt != GUILD_TYPE_Q4_0) || (v_rot && (!kq8 || vq8)))
        return guild_err_set(err, "cuda: attention: cache types %d, %d%s are not a block format's", (int)kt, (int)vt,
                             v_rot ? " rotated" : "");
    const int window = ext && ext->window > 0 ? ext->window : 0;
    const float *sinks = ext ? ext->sinks : NULL;
    const int64_t KV = (int64_t)n_head_kv * head_dim;
    const int64_t k_row = row_bytes(kt, KV), v_row = row_bytes(vt, KV);
    const int64_t k_head = row_bytes(kt, head_dim), v_head = row_bytes(vt, head_dim);
    const dim3 grid((unsigned)n_head, (unsigned)n_tok);
    const size_t shared = (2 * (size_t)head_dim + AB_CHUNK) * sizeof(float);
    const float rot_scale = (float)(1.0 / sqrt((double)head_dim)); /* kv_hadamard's */
    const int group = n_head / n_head_kv;
#define AB_ARGS grid, shared, s, out, q, k_cache, v_cache, kv0, kv0_dev, n_head, group, head_dim, k_row, v_row, \
                k_head, v_head, scale, window, sinks, rot_scale
    if (kq8 && vq8)
        launch<true, true, false>(AB_ARGS);
    else if (kq8 && v_rot)
        launch<true, false, true>(AB_ARGS);
    else if (kq8)
        launch<true, false, false>(AB_ARGS);
    else if (vq8)
        launch<false, true, false>(AB_ARGS);
    else
        launch<false, false, false>(AB_ARGS);
#undef AB_ARGS
    return cuda_launch_check("attention_blocks", err);
}
