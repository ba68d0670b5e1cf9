/* cuda_attention_blocks: causal attention over a KV cache of the block formats (Q8_0, Q4_0; k8v4's rotated Q4_0
 * values), reading the blocks directly: each key and value element is dequantized as the dot product or the
 * weighted sum takes it (kv_blocks.cuh), never into a copy of the cache.
 *
 * The order of the arithmetic is defined by the row alone: the keys a row sees are cut into splits by
 * ab_split_plan from the row's own span (at least AB_SPLIT_MIN keys a split, at most AB_MAX_SPLITS splits); each
 * split's partial softmax state (max m, sum l, output acc) is computed from an empty state, and the partials are
 * merged in split order by ab_merge (explicitly rounded products and sums: no contraction can differ between the
 * two kernels that merge). Where they are merged is free: with scratch, blocks (head, row, split) run the
 * splits in parallel and attn_blocks_merge_kernel merges them (flash-decoding: a long context is not one block per
 * head); without (or for batches larger than the scratch holds) one block per (head, row) walks the splits
 * in order and merges as it goes. Both give the same bits, and a row's output is the same bits in any batch split
 * (the backend contract).
 *
 * Two kernels compute the splits: attn_blocks_gqa_kernel (below: a block per KV head, the tile of keys dequantized
 * once for its query heads) for the formats' usual shapes, attn_blocks_kernel (a block per query head) for the others
 * and cuda_attention_blocks_per_head. Within a split of the latter, positions in chunks of AB_CHUNK: the warps score
 * the chunk's keys (lane l takes elements l, l + 32, ... of the head, which are element l of each block: one byte per
 * lane per block, coalesced), reduced in the warp; then every thread folds the chunk into its dims of the output with
 * the running maximum and sum (online softmax). A sink joins at the end; with rotated values the head's output goes
 * through the Walsh-Hadamard transform once (kv_format.h says why that undoes the rotation). The CPU's
 * cpu_attention_head_cache within float rounding (the summation orders differ), not bit for bit.
 */
#include <cuda_fp16.h>

#include <type_traits>

#include "gpu-worker/dense/cuda/cuda_common.cuh"
#include "gpu-worker/dense/cuda/kv_blocks.cuh"
#include "gpu-worker/dense/cuda/seq_rows.cuh"

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
                       const float *__restrict__ sinks, float rot_scale, float *__restrict__ partials,
                       const __grid_constant__ cuda_seq_rows_t sr)
{
    extern __shared__ float sh[]; /* [hd] the query, then [AB_CHUNK] the chunk's scores, then [hd] the output */
    float *qs = sh, *sc = sh + hd, *os = sh + hd + AB_CHUNK;
    const int h = blockIdx.x, t = blockIdx.y, hkv = h / group;
    const seq_row_t sq = seq_row_of(sr, t, kv0, kv0_dev); /* row t's cache length, place and caches */
    const int pos = sq.kv0 + sq.t;
    kc += sq.ko;
    vc += sq.vo;
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
                             float rot_scale, const __grid_constant__ cuda_seq_rows_t sr)
{
    extern __shared__ float os[];
    const int h = blockIdx.x, t = blockIdx.y;
    const seq_row_t sq = seq_row_of(sr, t, kv0, kv0_dev);
    int first, n_split, len;
    ab_split_plan(sq.kv0 + sq.t, window, &first, &n_split, &len);
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

/* ---- the grouped-query tile kernel (decode at long contexts) ----
 * attn_blocks_kernel reads a KV head's blocks once per query head and a byte per lane, which bounds it far below
 * the memory's rate. attn_blocks_gqa_kernel: grid (KV head, row, split), AG_WARPS warps serving the KV head's
 * `group` query heads (AG_WARPS / group warps a head). The block loads a tile of TK keys' blocks (and values')
 * with W-byte loads into shared memory, the next tile's loads in flight while it works on this one; its threads
 * dequantize the tile once into floats (each element q * d as kv_blocks.cuh's, the integer converted exactly by
 * its float bits), and each warp runs the online softmax of attn_decode.cu's GQA kernel (8 lanes a key, lane r
 * holding dims r*4 + 32k ..: 16-byte shared loads without bank conflicts) over its head's share of the tile.
 * Each split's partial is computed from an empty state as above; with parallel splits it goes to the scratch and
 * attn_blocks_merge_kernel merges it, else the block merges its splits in order with ab_merge's arithmetic and
 * finishes with ab_finish's: the two give the same bits, a row's output is the same in any batch. Not the bits
 * of attn_blocks_kernel (the sums' orders differ): both are the CPU within the attention tolerance. */
#define AG_WARPS 8
#define AG_THREADS (AG_WARPS * WARP_SIZE)

template <int HD>
struct ag_shape {
    static constexpr int TK = HD <= 128 ? 4096 / HD : 8; /* keys a tile: 16 KiB of floats each for K and V */
    static constexpr int W = HD % 128 == 0 ? 8 : 4;      /* bytes a load: a head's slice is a multiple of it */
};

/* exact float of a two's complement byte (low 8 bits of b), and of a nibble minus 8 */
static __device__ __forceinline__ float ag_i8(uint32_t b)
{
    return __uint_as_float(0x4B000000u | ((b ^ 0x80u) & 0xffu)) - 8388736.0f; /* 2^23 + 128 */
}

static __device__ __forceinline__ float ag_u4m8(uint32_t n)
{
    return __uint_as_float(0x4B000000u | n) - 8388616.0f; /* 2^23 + 8 */
}

/* Element e of a head's slice of blocks in shared memory: q * d, kv_q8_0_elem's / kv_q4_0_elem's value. */
template <bool Q8>
static __device__ __forceinline__ float ag_elem(const unsigned char *row, int e)
{
    const unsigned char *b = row + (e / 32) * (Q8 ? 34 : 18);
    const float d = __half2float(__ushort_as_half(*(const unsigned short *)b));
    const int j = e % 32;
    if (Q8)
        return __fmul_rn(ag_i8(b[2 + j]), d);
    return __fmul_rn(ag_u4m8(j < 16 ? b[2 + j] & 0x0fu : (uint32_t)b[2 + j - 16] >> 4), d);
}

/* A thread's CH words (WT) of the tile of TK keys at jt: word c = threadIdx.x + i AG_THREADS is word c % NW of key
 * jt + c / NW (rows `row` bytes apart from base); keys past j1 and words past the tile are zeros. */
template <int CH, int NW, int TK, typename WT>
static __device__ __forceinline__ void ag_load(const char *__restrict__ base, int64_t row, int jt, int j1, WT *w)
{
#pragma unroll
    for (int i = 0; i < CH; i++) {
        const int c = (int)threadIdx.x + i * AG_THREADS, key = c / NW;
        w[i] = c < TK * NW && jt + key < j1 ? *(const WT *)(base + (int64_t)(jt + key) * row + (c % NW) * sizeof(WT))
                                            : WT{};
    }
}

template <int CH, int NW, int TK, typename WT>
static __device__ __forceinline__ void ag_store(unsigned char *raw, const WT *w)
{
#pragma unroll
    for (int i = 0; i < CH; i++) {
        const int c = (int)threadIdx.x + i * AG_THREADS;
        if (c < TK * NW)
            *(WT *)(raw + c * sizeof(WT)) = w[i];
    }
}

/* Lane r of a group of 8 holds dims ag_dim(r, i), i < HD / 8: four consecutive dims every 32. */
static __device__ __forceinline__ int ag_dim(int r, int i)
{
    return (i / 4) * 32 + r * 4 + i % 4;
}

static __device__ __forceinline__ float ag_rescale(float m, float M)
{
    return m == -INFINITY ? 0.0f : expf(m - M);
}

/* One key of a group's online softmax (attn_decode.cu's key_step): every lane of the warp calls it. */
template <int DPL>
static __device__ __forceinline__ void ag_key(const float *qv, const float *kf, const float *vf, bool valid,
                                              float scale, float &m, float &l, float *acc)
{
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < DPL; i++)
        s = fmaf(qv[i], kf[i], s);
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

/* ab_merge over the RD dims a thread holds of a head (d < hd of them valid: the others are never read). */
template <int RD>
static __device__ __forceinline__ void ag_merge(float &m, float &l, float *acc, float pm, float pl, const float *pacc)
{
    if (pm == -INFINITY)
        return;
    if (m == -INFINITY) {
        m = pm;
        l = pl;
#pragma unroll
        for (int k = 0; k < RD; k++)
            acc[k] = pacc[k];
        return;
    }
    const float M = fmaxf(m, pm), a = expf(m - M), b = expf(pm - M);
    l = __fadd_rn(__fmul_rn(l, a), __fmul_rn(pl, b));
#pragma unroll
    for (int k = 0; k < RD; k++)
        acc[k] = __fadd_rn(__fmul_rn(acc[k], a), __fmul_rn(pacc[k], b));
    m = M;
}

/* q, out: as attn_blocks_kernel's; kc, vc: one layer's rows (k_row, v_row bytes apart), KV head hkv's slice at
 * hkv * (its bytes). partials: attn_blocks_kernel's layout (per query head). */
template <bool KQ8, bool VQ8, bool ROT, int HD>
static __global__ void __launch_bounds__(AG_THREADS)
    attn_blocks_gqa_kernel(float *__restrict__ out, const float *__restrict__ q, const char *__restrict__ kc,
                           const char *__restrict__ vc, int kv0, const int32_t *kv0_dev, int n_head, int group,
                           int64_t k_row, int64_t v_row, float scale, int window, const float *__restrict__ sinks,
                           float rot_scale, float *__restrict__ partials, const __grid_constant__ cuda_seq_rows_t sr)
{
    constexpr int TK = ag_shape<HD>::TK, W = ag_shape<HD>::W, DPL = HD / 8, RD = HD / WARP_SIZE;
    constexpr int KH = HD / 32 * (KQ8 ? 34 : 18), VH = HD / 32 * (VQ8 ? 34 : 18); /* a head's bytes a key */
    constexpr int KNW = KH / W, VNW = VH / W;
    constexpr int KCH = (TK * KNW + AG_THREADS - 1) / AG_THREADS, VCH = (TK * VNW + AG_THREADS - 1) / AG_THREADS;
    static_assert(KH % W == 0 && VH % W == 0 && TK % 4 == 0 && TK * HD % AG_THREADS == 0 && TK >= AG_WARPS,
                  "tile shape");
    typedef typename std::conditional<W == 8, uint2, uint32_t>::type WT;
    __shared__ __align__(16) unsigned char kraw[TK * KH], vraw[TK * VH];
    __shared__ __align__(16) float kf_s[TK * HD], vf_s[TK * HD];
    __shared__ float sh_m[AG_WARPS], sh_l[AG_WARPS];
    float(*sh_acc)[HD] = (float(*)[HD])kf_s; /* the warps' states after a split's tiles */
    float *os = vf_s;                        /* the rotated outputs [group][HD] */

    const int hkv = blockIdx.x, t = blockIdx.y;
    const seq_row_t sq = seq_row_of(sr, t, kv0, kv0_dev); /* row t's cache length, place and caches */
    const int pos = sq.kv0 + sq.t;
    int first, n_split, len;
    ab_split_plan(pos, window, &first, &n_split, &len);
    if ((int)blockIdx.z >= n_split)
        return; /* a grid sized for the batch's longest row, or for the longest cache (captured graphs) */
    const bool par = gridDim.z > 1 && n_split > 1;
    const int tid = threadIdx.x, warp = tid / WARP_SIZE, lane = tid % WARP_SIZE, g = lane / 8, r = lane % 8;
    const int P = AG_WARPS / group, hl = warp / P, pw = warp % P, h = hkv * group + hl;
    const int ht = pw * WARP_SIZE + lane, hn = P * WARP_SIZE; /* this thread among its head's threads */

    float qv[DPL];
    const float *qr = q + ((int64_t)t * n_head + h) * HD;
#pragma unroll
    for (int i = 0; i < DPL; i++)
        qv[i] = qr[ag_dim(r, i)];
    const char *kb = kc + sq.ko + (int64_t)hkv * KH, *vb = vc + sq.vo + (int64_t)hkv * VH;
    float racc[RD];
#pragma unroll
    for (int k = 0; k < RD; k++)
        racc[k] = 0.0f;
    float rm = -INFINITY, rl = 0.0f;
    for (int split = blockIdx.z; split < n_split; split += gridDim.z) {
        const int j0 = first + split * len, j1 = min(pos + 1, j0 + len);
        float acc[DPL];
#pragma unroll
        for (int i = 0; i < DPL; i++)
            acc[i] = 0.0f;
        float m = -INFINITY, l = 0.0f;
        WT kw[KCH], vw[VCH];
        ag_load<KCH, KNW, TK>(kb, k_row, j0, j1, kw);
        ag_load<VCH, VNW, TK>(vb, v_row, j0, j1, vw);
        for (int jt = j0; jt < j1; jt += TK) {
            __syncthreads(); /* the previous tile's floats (or the previous split's states) are consumed */
            ag_store<KCH, KNW, TK>(kraw, kw);
            ag_store<VCH, VNW, TK>(vraw, vw);
            __syncthreads();
            if (jt + TK < j1) {
                ag_load<KCH, KNW, TK>(kb, k_row, jt + TK, j1, kw);
                ag_load<VCH, VNW, TK>(vb, v_row, jt + TK, j1, vw);
            }
#pragma unroll 4
            for (int x = tid; x < TK * HD; x += AG_THREADS) {
                kf_s[x] = ag_elem<KQ8>(kraw + (x / HD) * KH, x % HD);
                vf_s[x] = ag_elem<VQ8>(vraw + (x / HD) * VH, x % HD);
            }
            __syncthreads();
            for (int jj = pw * 4; jj < TK; jj += 4 * P) { /* a warp-uniform trip count */
                const int jl = jj + g;
                float kf[DPL], vf[DPL];
#pragma unroll
                for (int i = 0; i < DPL; i += 4) {
                    const float4 a = *(const float4 *)(kf_s + jl * HD + ag_dim(r, i));
                    const float4 b = *(const float4 *)(vf_s + jl * HD + ag_dim(r, i));
                    kf[i] = a.x, kf[i + 1] = a.y, kf[i + 2] = a.z, kf[i + 3] = a.w;
                    vf[i] = b.x, vf[i + 1] = b.y, vf[i + 2] = b.z, vf[i + 3] = b.w;
                }
                ag_key<DPL>(qv, kf, vf, jt + jl < j1, scale, m, l, acc);
            }
        }
        /* the warp's 4 groups merged (attn_decode.cu's group_merge), then its state to shared memory */
#pragma unroll
        for (int o = 8; o < WARP_SIZE; o <<= 1) {
            const float om = __shfl_xor_sync(FULL_MASK, m, o), ol = __shfl_xor_sync(FULL_MASK, l, o);
            const float M = fmaxf(m, om), a = ag_rescale(m, M), b = ag_rescale(om, M);
#pragma unroll
            for (int i = 0; i < DPL; i++) {
                const float oa = __shfl_xor_sync(FULL_MASK, acc[i], o);
                acc[i] = acc[i] * a + oa * b;
            }
            l = l * a + ol * b;
            m = M;
        }
        __syncthreads(); /* the tile's floats are consumed: sh_acc overlays them */
        if (g == 0) {
#pragma unroll
            for (int i = 0; i < DPL; i++)
                sh_acc[warp][ag_dim(r, i)] = acc[i];
            if (r == 0) {
                sh_m[warp] = m;
                sh_l[warp] = l;
            }
        }
        __syncthreads();
        /* the head's split partial: its warps merged in order */
        const int w0 = hl * P;
        float M = -INFINITY;
        for (int w = w0; w < w0 + P; w++)
            M = fmaxf(M, sh_m[w]);
        float L = 0.0f;
        for (int w = w0; w < w0 + P; w++)
            L = __fadd_rn(L, __fmul_rn(sh_l[w], ag_rescale(sh_m[w], M)));
        float pacc[RD];
#pragma unroll
        for (int k = 0; k < RD; k++) {
            const int d = ht + k * hn;
            float a = 0.0f;
            if (d < HD)
                for (int w = w0; w < w0 + P; w++)
                    a = __fadd_rn(a, __fmul_rn(sh_acc[w][d], ag_rescale(sh_m[w], M)));
            pacc[k] = a;
        }
        if (par) {
            float *pt = partials + (((int64_t)t * n_head + h) * AB_MAX_SPLITS + split) * (HD + 2);
#pragma unroll
            for (int k = 0; k < RD; k++)
                if (ht + k * hn < HD)
                    pt[2 + ht + k * hn] = pacc[k];
            if (ht == 0) {
                pt[0] = M;
                pt[1] = L;
            }
            return; /* the whole block: par is the block's */
        }
        ag_merge<RD>(rm, rl, racc, M, L, pacc);
    }
    /* ab_finish's arithmetic */
    if (sinks) {
        const float s = sinks[h], mn = fmaxf(rm, s), corr = rm == -INFINITY ? 0.0f : expf(rm - mn);
        rl = __fadd_rn(__fmul_rn(rl, corr), expf(s - mn));
#pragma unroll
        for (int k = 0; k < RD; k++)
            racc[k] = __fmul_rn(racc[k], corr);
    }
    const float inv = __frcp_rn(rl);
    float *orow = out + ((int64_t)t * n_head + h) * HD;
    if (!ROT) {
#pragma unroll
        for (int k = 0; k < RD; k++)
            if (ht + k * hn < HD)
                orow[ht + k * hn] = __fmul_rn(racc[k], inv);
        return;
    }
    __syncthreads(); /* vf_s (os) is free */
#pragma unroll
    for (int k = 0; k < RD; k++)
        if (ht + k * hn < HD)
            os[hl * HD + ht + k * hn] = __fmul_rn(racc[k], inv);
    for (int hh = 0; hh < group; hh++)
        kv_hadamard_shared(os + hh * HD, HD, rot_scale, tid, AG_THREADS);
    float *o0 = out + ((int64_t)t * n_head + (int64_t)hkv * group) * HD;
    for (int i = tid; i < group * HD; i += AG_THREADS)
        o0[i] = os[i];
}

/* The tile kernel's shapes: q8_0, q4_0 and k8v4 (the formats kv_format.h defines), head dims 64, 128, 256, query
 * heads a KV head 1 to AG_WARPS (a power of two), caches aligned to the loads. */
static bool gqa_takes(bool kq8, bool vq8, bool v_rot, int hd, int group, const void *kc, const void *vc)
{
    const bool fmt = (kq8 && vq8 && !v_rot) || (!kq8 && !vq8 && !v_rot) || (kq8 && !vq8 && v_rot);
    const uintptr_t w = hd % 128 == 0 ? 8 : 4;
    return fmt && (hd == 64 || hd == 128 || hd == 256) && group >= 1 && group <= AG_WARPS &&
           (group & (group - 1)) == 0 && ((uintptr_t)kc % w) == 0 && ((uintptr_t)vc % w) == 0;
}

template <bool KQ8, bool VQ8, bool ROT, int HD>
static void launch_gqa(dim3 grid, cudaStream_t s, float *out, const float *q, const void *kc, const void *vc, int kv0,
                       const int32_t *kv0_dev, int n_head, int group, int64_t k_row, int64_t v_row, float scale,
                       int window, const float *sinks, float rot_scale, float *partials, const cuda_seq_rows_t &sr)
{
    attn_blocks_gqa_kernel<KQ8, VQ8, ROT, HD><<<grid, AG_THREADS, 0, s>>>(
        out, q, (const char *)kc, (const char *)vc, kv0, kv0_dev, n_head, group, k_row, v_row, scale, window, sinks,
        rot_scale, partials, sr);
}

template <bool KQ8, bool VQ8, bool ROT>
static void launch_gqa_hd(int hd, dim3 grid, cudaStream_t s, float *out, const float *q, const void *kc,
                          const void *vc, int kv0, const int32_t *kv0_dev, int n_head, int group, int64_t k_row,
                          int64_t v_row, float scale, int window, const float *sinks, float rot_scale, float *partials,
                          const cuda_seq_rows_t &sr)
{
#define AG_ARGS grid, s, out, q, kc, vc, kv0, kv0_dev, n_head, group, k_row, v_row, scale, window, sinks, rot_scale, \
                partials, sr
    if (hd == 64)
        launch_gqa<KQ8, VQ8, ROT, 64>(AG_ARGS);
    else if (hd == 128)
        launch_gqa<KQ8, VQ8, ROT, 128>(AG_ARGS);
    else
        launch_gqa<KQ8, VQ8, ROT, 256>(AG_ARGS);
#undef AG_ARGS
    if (grid.z > 1)
        attn_blocks_merge_kernel<ROT><<<dim3(grid.x * group, grid.y), AB_THREADS, (size_t)hd * sizeof(float), s>>>(
            out, partials, kv0, kv0_dev, n_head, hd, window, sinks, rot_scale, sr);
}

template <bool KQ8, bool VQ8, bool ROT>
static void launch(dim3 grid, size_t shared, cudaStream_t s, float *out, const float *q, const void *kc,
                   const void *vc, int kv0, const int32_t *kv0_dev, int n_head, int group, int hd, int64_t k_row,
                   int64_t v_row, int64_t k_head, int64_t v_head, float scale, int window, const float *sinks,
                   float rot_scale, float *partials, const cuda_seq_rows_t &sr)
{
    attn_blocks_kernel<KQ8, VQ8, ROT><<<grid, AB_THREADS, shared, s>>>(
        out, q, (const char *)kc, (const char *)vc, kv0, kv0_dev, n_head, group, hd, k_row, v_row, k_head, v_head,
        scale, window, sinks, rot_scale, partials, sr);
    if (grid.z > 1)
        attn_blocks_merge_kernel<ROT><<<dim3(grid.x, grid.y), AB_THREADS, (size_t)hd * sizeof(float), s>>>(
            out, partials, kv0, kv0_dev, n_head, hd, window, sinks, rot_scale, sr);
}

static int64_t row_bytes(guild_type_t t, int64_t n)
{
    return n / 32 * (t == GUILD_TYPE_Q8_0 ? (int64_t)sizeof(quant_block_q8_0) : (int64_t)sizeof(quant_block_q4_0));
}

static int attention_blocks(float *out, const float *q, guild_type_t kt, guild_type_t vt, bool v_rot,
                            const void *k_cache, const void *v_cache, int32_t n_tok, int32_t kv0,
                            const int32_t *kv0_dev, int32_t n_head, int32_t n_head_kv, int32_t head_dim, float scale,
                            const cuda_attn_ext_t *ext, void *scratch, size_t scratch_bytes, bool per_head,
                            const cuda_seq_rows_t &sr, cudaStream_t s, guild_err_t *err)
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
    if (!per_head && gqa_takes(kq8, vq8, v_rot, head_dim, group, k_cache, v_cache)) {
        const dim3 gg((unsigned)n_head_kv, (unsigned)n_tok, (unsigned)n_split);
#define AG_ARGS head_dim, gg, s, out, q, k_cache, v_cache, kv0, kv0_dev, n_head, group, k_row, v_row, scale, window, \
                sinks, rot_scale, (float *)scratch, sr
        if (kq8 && vq8)
            launch_gqa_hd<true, true, false>(AG_ARGS);
        else if (v_rot)
            launch_gqa_hd<true, false, true>(AG_ARGS);
        else
            launch_gqa_hd<false, false, false>(AG_ARGS);
#undef AG_ARGS
        return cuda_launch_check("attention_blocks", err);
    }
#define AB_ARGS grid, shared, s, out, q, k_cache, v_cache, kv0, kv0_dev, n_head, group, head_dim, k_row, v_row, \
                k_head, v_head, scale, window, sinks, rot_scale, (float *)scratch, sr
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

extern "C" int cuda_attention_blocks(float *out, const float *q, guild_type_t kt, guild_type_t vt, bool v_rot,
                                     const void *k_cache, const void *v_cache, int32_t n_tok, int32_t kv0,
                                     const int32_t *kv0_dev, int32_t n_head, int32_t n_head_kv, int32_t head_dim,
                                     float scale, const cuda_attn_ext_t *ext, void *scratch, size_t scratch_bytes,
                                     cudaStream_t s, guild_err_t *err)
{
    return attention_blocks(out, q, kt, vt, v_rot, k_cache, v_cache, n_tok, kv0, kv0_dev, n_head, n_head_kv, head_dim,
                            scale, ext, scratch, scratch_bytes, false, seq_rows_none, s, err);
}

extern "C" int cuda_attention_blocks_per_head(float *out, const float *q, guild_type_t kt, guild_type_t vt,
                                              bool v_rot, const void *k_cache, const void *v_cache, int32_t n_tok,
                                              int32_t kv0, const int32_t *kv0_dev, int32_t n_head, int32_t n_head_kv,
                                              int32_t head_dim, float scale, const cuda_attn_ext_t *ext,
                                              void *scratch, size_t scratch_bytes, cudaStream_t s, guild_err_t *err)
{
    return attention_blocks(out, q, kt, vt, v_rot, k_cache, v_cache, n_tok, kv0, kv0_dev, n_head, n_head_kv, head_dim,
                            scale, ext, scratch, scratch_bytes, true, seq_rows_none, s, err);
}

extern "C" int cuda_attention_blocks_seqs(float *out, const float *q, guild_type_t kt, guild_type_t vt, bool v_rot,
                                          const void *k_cache, const void *v_cache, const cuda_seq_rows_t *rows,
                                          int32_t n_ctx, int32_t n_head, int32_t n_head_kv, int32_t head_dim,
                                          float scale, const cuda_attn_ext_t *ext, void *scratch, size_t scratch_bytes,
                                          cudaStream_t s, guild_err_t *err)
{
    if (!rows || rows->n < 1 || rows->n > CUDA_SEQ_ROWS || !rows->len || rows->n > n_ctx)
        return guild_err_set(err, "cuda: attention: a row table of %d rows (1 to %d)", rows ? rows->n : 0,
                             CUDA_SEQ_ROWS);
    /* the grid as a group's own launch sizes it (kv0_max = n_ctx - its rows); a row's bits do not depend on it */
    return attention_blocks(out, q, kt, vt, v_rot, k_cache, v_cache, rows->n, n_ctx - rows->n, NULL, n_head,
                            n_head_kv, head_dim, scale, ext, scratch, scratch_bytes, false, *rows, s, err);
}
