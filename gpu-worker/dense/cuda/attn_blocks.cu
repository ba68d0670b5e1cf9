/* cuda_attention_blocks: causal attention over a KV cache of the block formats (Q8_0, Q4_0; k8v4's rotated Q4_0
 * values), reading the blocks directly: each key and value element is dequantized as the dot product or the
 * weighted sum takes it (kv_blocks.cuh), never into a copy of the cache.
 *
 * The order of the arithmetic is defined by the row alone: the keys a row sees are cut into splits by
 * ab_split_plan from the row's own span (at least AB_SPLIT_MIN keys a split, at most AB_MAX_SPLITS splits); each
 * split's partial softmax state (max m, sum l, output acc) is computed from an empty state, and the partials are
 * merged in split order by ab_merge (explicitly rounded products and sums: no contraction can differ between the
 * two kernels that merge). Where they are merged is free: with scratch, blocks (query head, row, split) run the
 * splits in parallel and attn_blocks_merge_kernel merges them (flash-decoding: a long context is not one block per
 * head); without (or for batches larger than the scratch holds) one block per (query head, row) walks the splits
 * in order and merges as it goes. Both give the same bits, and a row's output is the same bits in any batch split
 * (the backend contract).
 *
 * Within a split, positions in chunks of AB_CHUNK: the warps score the chunk's keys (lane l takes elements l,
 * l + 32, ... of the head, which are element l of each block: one byte per lane per block, coalesced), reduced in
 * the warp; then every thread folds the chunk into its dims of the output with the running maximum and sum
 * (online softmax). A sink joins at the end; with rotated values the head's output goes through the
 * Walsh-Hadamard transform once (kv_format.h says why that undoes the rotation). The CPU's
 * cpu_attention_head_cache within float rounding (the summation orders differ), not bit for bit. */
#include "gpu-worker/dense/cuda/cuda_common.cuh"
#include "gpu-worker/dense/cuda/kv_blocks.cuh"

#define AB_THREADS 128
#define AB_WARPS (AB_THREADS / WARP_SIZE)
#define AB_CHUNK 32
#define AB_DIMS 2 /* output dims per thread: head_dim <= AB_THREADS * AB_DIMS */
#define AB_SPLIT_MIN 256
#define AB_MAX_SPLITS 64 /* the partials' layout in the scratch: cuda_attention_decode_scratch's */

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

/* The keys [*first, pos] row `pos` sees, cut into *n_split splits of *len keys (the last one shorter). */
static __host__ __device__ __forceinline__ void ab_split_plan(int pos, int window, int *first, int *n_split, int *len)
{
    *first = window > 0 && pos + 1 > window ? pos + 1 - window : 0;
    const int span = pos + 1 - *first;
    int ns = (span + AB_SPLIT_MIN - 1) / AB_SPLIT_MIN;
    ns = ns > AB_MAX_SPLITS ? AB_MAX_SPLITS : ns < 1 ? 1 : ns;
    *n_split = ns;
    *len = (span + ns - 1) / ns;
}

/* Running state (m, l, acc) merged with a split's partial (pm, pl, pacc): the partial as it is into an empty
 * state, nothing from an empty partial; else both rescaled to the larger maximum. */
static __device__ __forceinline__ void ab_merge(float &m, float &l, float *acc, float pm, float pl, const float *pacc)
{
    if (pm == -INFINITY)
        return;
    if (m == -INFINITY) {
        m = pm;
        l = pl;
#pragma unroll
        for (int k = 0; k < AB_DIMS; k++)
            acc[k] = pacc[k];
        return;
    }
    const float M = fmaxf(m, pm), a = expf(m - M), b = expf(pm - M);
    l = __fadd_rn(__fmul_rn(l, a), __fmul_rn(pl, b));
#pragma unroll
    for (int k = 0; k < AB_DIMS; k++)
        acc[k] = __fadd_rn(__fmul_rn(acc[k], a), __fmul_rn(pacc[k], b));
    m = M;
}

/* The head's output from its merged state: the sink joined (it weighs no value), divided by the sum, rotated
 * back (ROT: through os, shared [hd]); every thread of the block calls it. */
template <bool ROT>
static __device__ __forceinline__ void ab_finish(float m, float l, float *acc, const float *sinks, int h, int hd,
                                                 float rot_scale, float *os, float *orow)
{
    if (sinks) {
        const float s = sinks[h], mn = fmaxf(m, s), corr = m == -INFINITY ? 0.0f : expf(m - mn);
        l = __fadd_rn(__fmul_rn(l, corr), expf(s - mn));
#pragma unroll
        for (int k = 0; k < AB_DIMS; k++)
            acc[k] = __fmul_rn(acc[k], corr);
    }
    const float inv = __frcp_rn(l);
#pragma unroll
    for (int k = 0; k < AB_DIMS; k++) {
        const int d = threadIdx.x + k * AB_THREADS;
        if (d < hd) {
            if (ROT)
                os[d] = __fmul_rn(acc[k], inv);
            else
                orow[d] = __fmul_rn(acc[k], inv);
        }
    }
    if (ROT) {
        kv_hadamard_shared(os, hd, rot_scale, threadIdx.x, AB_THREADS);
        for (int d = threadIdx.x; d < hd; d += AB_THREADS)
            orow[d] = os[d];
    }
}

/* q: [n_tok][n_head * HD]; kc, vc: one layer's rows (k_row, v_row bytes apart), head hkv's slice at hkv * k_head
 * (v_head) bytes; out: [n_tok][n_head * HD]. gridDim.z == 1: the block walks its row's splits and writes the
 * output; else block z computes split z (if the row has it) into partials [n_tok][n_head][AB_MAX_SPLITS][HD + 2]
 * (m, l, acc), and a row of one split is written at once. */
template <bool KQ8, bool VQ8, bool ROT>
static __global__ void __launch_bounds__(AB_THREADS)
    attn_blocks_kernel(float *__restrict__ out, const float *__restrict__ q, const char *__restrict__ kc,
                       const char *__restrict__ vc, int kv0, const int32_t *kv0_dev, int n_head, int group, int hd,
                       int64_t k_row, int64_t v_row, int64_t k_head, int64_t v_head, float scale, int window,
                       const float *__restrict__ sinks, float rot_scale, float *__restrict__ partials)
{
    extern __shared__ float sh[]; /* [hd] the query, then [AB_CHUNK] the chunk's scores, then [hd] the output */
    float *qs = sh, *sc = sh + hd, *os = sh + hd + AB_CHUNK;
    if (kv0_dev)
        kv0 = *kv0_dev;
    const int h = blockIdx.x, t = blockIdx.y, hkv = h / group;
    const int pos = kv0 + t;
    int first, n_split, len;
    ab_split_plan(pos, window, &first, &n_split, &len);
    const bool par = gridDim.z > 1;
    if ((int)blockIdx.z >= n_split)
        return; /* a grid sized for the batch's longest row, or for the longest cache (captured graphs) */
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    const float *qrow = q + ((int64_t)t * n_head + h) * hd;
    for (int i = threadIdx.x; i < hd; i += AB_THREADS)
        qs[i] = qrow[i];
    __syncthreads();
    const char *kh = kc + hkv * k_head, *vh = vc + hkv * v_head;
    float racc[AB_DIMS];
#pragma unroll
    for (int k = 0; k < AB_DIMS; k++)
        racc[k] = 0.0f;
    float rm = -INFINITY, rl = 0.0f;
    for (int split = blockIdx.z; split < n_split; split += gridDim.z) {
        const int j_begin = first + split * len, j_end = min(pos + 1, j_begin + len);
        float acc[AB_DIMS];
#pragma unroll
        for (int k = 0; k < AB_DIMS; k++)
            acc[k] = 0.0f;
        float m = -INFINITY, l = 0.0f;
        for (int j0 = j_begin; j0 < j_end; j0 += AB_CHUNK) {
            const int nb = j_end - j0 < AB_CHUNK ? j_end - j0 : AB_CHUNK;
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
        if (par && n_split > 1) {
            float *pt = partials + (((int64_t)t * n_head + h) * AB_MAX_SPLITS + split) * (hd + 2);
#pragma unroll
            for (int k = 0; k < AB_DIMS; k++) {
                const int d = threadIdx.x + k * AB_THREADS;
                if (d < hd)
                    pt[2 + d] = acc[k];
            }
            if (threadIdx.x == 0) {
                pt[0] = m;
                pt[1] = l;
            }
            return;
        }
        ab_merge(rm, rl, racc, m, l, acc);
    }
    ab_finish<ROT>(rm, rl, racc, sinks, h, hd, rot_scale, os, out + ((int64_t)t * n_head + h) * hd);
}

/* Block (query head, row) of AB_THREADS threads: the row's partials merged in split order (ab_merge, the walking
 * block's order), then finished as that block does. Rows of one split were written by the attention kernel. */
template <bool ROT>
static __global__ void __launch_bounds__(AB_THREADS)
    attn_blocks_merge_kernel(float *__restrict__ out, const float *__restrict__ partials, int kv0,
                             const int32_t *kv0_dev, int n_head, int hd, int window, const float *__restrict__ sinks,
                             float rot_scale)
{
    extern __shared__ float os[];
    if (kv0_dev)
        kv0 = *kv0_dev;
    const int h = blockIdx.x, t = blockIdx.y;
    int first, n_split, len;
    ab_split_plan(kv0 + t, window, &first, &n_split, &len);
    if (n_split == 1)
        return;
    float racc[AB_DIMS], pacc[AB_DIMS];
#pragma unroll
    for (int k = 0; k < AB_DIMS; k++)
        racc[k] = 0.0f;
    float rm = -INFINITY, rl = 0.0f;
    const float *p0 = partials + ((int64_t)t * n_head + h) * AB_MAX_SPLITS * (hd + 2);
    for (int sp = 0; sp < n_split; sp++) {
        const float *pt = p0 + (int64_t)sp * (hd + 2);
#pragma unroll
        for (int k = 0; k < AB_DIMS; k++) {
            const int d = threadIdx.x + k * AB_THREADS;
            pacc[k] = d < hd ? pt[2 + d] : 0.0f;
        }
        ab_merge(rm, rl, racc, pt[0], pt[1], pacc);
    }
    ab_finish<ROT>(rm, rl, racc, sinks, h, hd, rot_scale, os, out + ((int64_t)t * n_head + h) * hd);
}

template <bool KQ8, bool VQ8, bool ROT>
static void launch(dim3 grid, size_t shared, cudaStream_t s, float *out, const float *q, const void *kc,
                   const void *vc, int kv0, const int32_t *kv0_dev, int n_head, int group, int hd, int64_t k_row,
                   int64_t v_row, int64_t k_head, int64_t v_head, float scale, int window, const float *sinks,
                   float rot_scale, float *partials)
{
    attn_blocks_kernel<KQ8, VQ8, ROT><<<grid, AB_THREADS, shared, s>>>(
        out, q, (const char *)kc, (const char *)vc, kv0, kv0_dev, n_head, group, hd, k_row, v_row, k_head, v_head,
        scale, window, sinks, rot_scale, partials);
    if (grid.z > 1)
        attn_blocks_merge_kernel<ROT><<<dim3(grid.x, grid.y), AB_THREADS, (size_t)hd * sizeof(float), s>>>(
            out, partials, kv0, kv0_dev, n_head, hd, window, sinks, rot_scale);
}

static int64_t row_bytes(guild_type_t t, int64_t n)
{
    return n / 32 * (t == GUILD_TYPE_Q8_0 ? (int64_t)sizeof(quant_block_q8_0) : (int64_t)sizeof(quant_block_q4_0));
}

extern "C" int cuda_attention_blocks(float *out, const float *q, guild_type_t kt, guild_type_t vt, bool v_rot,
                                     const void *k_cache, const void *v_cache, int32_t n_tok, int32_t kv0,
                                     const int32_t *kv0_dev, int32_t n_head, int32_t n_head_kv, int32_t head_dim,
                                     float scale, const cuda_attn_ext_t *ext, void *scratch, size_t scratch_bytes,
                                     cudaStream_t s, guild_err_t *err)
{
    if (n_tok <= 0)
        return 0;
    if (n_head_kv <= 0 || n_head % n_head_kv || n_head > 65535 || n_tok > 65535 || kv0 < 0)
        return guild_err_set(err, "cuda: attention: %d query heads over %d KV heads, %d rows after %d", n_head,
                             n_head_kv, n_tok, kv0);
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
    /* the splits of the batch's longest row (the last, at the largest kv0) if the scratch holds the partials */
    const size_t need = (size_t)n_tok * (size_t)n_head * AB_MAX_SPLITS * (size_t)(head_dim + 2) * sizeof(float);
    int first, n_split = 1, len;
    if (scratch && scratch_bytes >= need)
        ab_split_plan(kv0 + n_tok - 1, window, &first, &n_split, &len);
    const dim3 grid((unsigned)n_head, (unsigned)n_tok, (unsigned)n_split);
    const size_t shared = (2 * (size_t)head_dim + AB_CHUNK) * sizeof(float);
    const float rot_scale = (float)(1.0 / sqrt((double)head_dim)); /* kv_hadamard's */
    const int group = n_head / n_head_kv;
#define AB_ARGS grid, shared, s, out, q, k_cache, v_cache, kv0, kv0_dev, n_head, group, head_dim, k_row, v_row, \
                k_head, v_head, scale, window, sinks, rot_scale, (float *)scratch
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
