/* cuda_attention_decode: attention of a few query rows over the whole KV cache (flash-decoding).
 *
 * The keys a row sees are cut into splits (split_plan) planned from that row's own span of keys, so a row's
 * output is the same bits in a batch of any size as when it runs alone at its position (a verify step of
 * speculative decoding gives plain decode's bits). A warp works on 4 keys at once, 8 lanes per key: lane r of a
 * group holds dims [r * HD/8, (r+1) * HD/8) of q, of the key and of its running output, so each key costs a 3-step
 * reduction and 8-byte (F16) or 16-byte (F32) loads. Each group keeps its own online softmax (max m, sum l,
 * output acc); groups, then warps, then splits are merged with the usual rescaling by exp(m_i - M). With one
 * split the block writes the output; otherwise partials (m, l, acc[HD]) go to scratch and a second kernel
 * merges them (or, given a counter per KV head and row, cuda_attn_fuse_t.done, the last of a row's splits to finish
 * merges them in the attention's launch, every query head of the KV head at once with the merge kernel's
 * arithmetic: the same bits, a launch less).
 *   attn_decode_gqa_kernel: grid (KV head, query row, split); its warps serve the KV head's query heads and
 *     share each tile of keys through shared memory (grouped-query models: the cache is read once). With the merge
 *     in its launch it takes the process's launch form (cuda_set_attn_form): fewer blocks along the splits, each
 *     computing several splits in turn (a captured graph's grid is sized for the context, most of its blocks
 *     empty), the row lengths read and the empty blocks gone before the wait on the kernel before, the keys and
 *     values asked into L2 before it in launches of few rows. The same bits in every form.
 *   attn_decode_kernel: grid (query head, query row, split), 4 warps on one head's split; other group sizes.
 *   attn_decode_cl_kernel: the default over F16 caches with heads of 64 or 128 and up to 16 query heads a KV head
 *     (cuda_set_attn_mma): the scores and P V on tensor cores, a cluster of blocks a (KV head, row) whose splits
 *     are merged through distributed shared memory (see its section). Other rounding than the FMA forms above.
 */
#include <cuda_fp16.h>

#include <atomic>
#include <type_traits>

#include "gpu-worker/dense/cuda/attn_mma_tiles.cuh"
#include "gpu-worker/dense/cuda/cluster.cuh"
#include "gpu-worker/dense/cuda/quantize.cuh"
#include "gpu-worker/dense/cuda/seq_rows.cuh"

#define AD_WARPS 4
#ifndef AD_SPLIT_MIN /* (a timing build may set it) */
#define AD_SPLIT_MIN 64 /* keys per split, at least: a decode step's attention is latency-bound, so many short \
                           splits (H200: 512 keys in 8 splits instead of 2) */
#endif
#define AD_SPLIT_SHORT 32 /* keys per split (one tile) of a span of 2..7 splits of AD_SPLIT_MIN: it takes \
                            min(its 32-key splits, AD_SHORT_SPLITS), since the in-launch merge costs about the same \
                            up to that many splits and a split's keys are read one tile after another; a span of one \
                            split keeps it (no merge at all), a longer one AD_SPLIT_MIN (a longer merge) */
#define AD_SHORT_SPLITS 8
#define AD_MAX_SPLITS 64
#define AD_MERGE_PRE 32 /* the in-launch merge's partial values a thread asks for before it has their factors: the
                           first 32 / (its outputs) splits' */
#define AD_MAX_TOK CUDA_DECODE_ROWS /* query rows the scratch is sized for: up to it, every row gets the full
                                       split cap whatever the batch's size */

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

/* The DPL dims of key and value j a lane holds (from element offset off of the row), zeros past the end j1. */
template <int DPL, typename KT>
static __device__ __forceinline__ void load_kv(const KT *__restrict__ kc, const KT *__restrict__ vc, int j, int j1,
                                               int kvd, int off, float *kf, float *vf)
{
    if (j < j1) {
        const KT *kr = kc + (int64_t)j * kvd + off, *vr = vc + (int64_t)j * kvd + off;
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
}

/* exp(m - M), 0 for an empty partial (m = -inf). */
static __device__ __forceinline__ float rescale(float m, float M)
{
    return m == -INFINITY ? 0.0f : expf(m - M);
}

/* One key of the online softmax of a group of 8 lanes (dims r * DPL .. of q, the key kf and value vf): the
 * score summed over the group (xor 4, 2, 1 stays inside it), then m, l and acc updated when the key is valid.
 * Every lane of the warp must call it (shuffles). */
template <int DPL>
static __device__ __forceinline__ void key_step(const float *qv, const float *kf, const float *vf, bool valid,
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

/* Merges the 4 groups of a warp (lanes r, r+8, r+16, r+24 hold the same dims) into every lane. */
template <int DPL>
static __device__ __forceinline__ void group_merge(float &m, float &l, float *acc)
{
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
}

/* A warp's merged state (every lane holds it after group_merge) into shared memory: lanes of group 0 write
 * their dims. */
template <int HD, int DPL>
static __device__ __forceinline__ void warp_state_store(float *sh_acc, float *sh_m, float *sh_l, float m, float l,
                                                        const float *acc)
{
    const int lane = threadIdx.x % WARP_SIZE, g = lane / 8, r = lane % 8;
    if (g == 0) {
#pragma unroll
        for (int i = 0; i < DPL; i++)
            sh_acc[r * DPL + i] = acc[i];
        if (r == 0) {
            *sh_m = m;
            *sh_l = l;
        }
    }
}

/* A finished softmax state (M, L) with the sink logit s joined (it weighs no value): M and L become those of the
 * softmax with it; the return value scales the accumulated output. */
static __device__ __forceinline__ float sink_join(float s, float &M, float &L)
{
    const float M2 = fmaxf(M, s);
    const float f = rescale(M, M2);
    L = L * f + expf(s - M2);
    M = M2;
    return f;
}

/* The states of warps [w0, w0 + nw) of one query head merged and written by threads tid of nthreads: output
 * row `row` (= t * n_head + h) with one split (joined by the head's sink when sink != NULL), else the split's
 * partial (m, l, acc[HD]) for the merge kernel. */
template <int HD>
static __device__ __forceinline__ void head_write(const float (*sh_acc)[HD], const float *sh_m, const float *sh_l,
                                                  int w0, int nw, int tid, int nthreads, int n_split, int split,
                                                  int split_cap, int64_t row, const float *sink, float *out,
                                                  float *partials)
{
    float M = -INFINITY;
    for (int w = w0; w < w0 + nw; w++)
        M = fmaxf(M, sh_m[w]);
    float L = 0.0f;
    for (int w = w0; w < w0 + nw; w++)
        L += sh_l[w] * rescale(sh_m[w], M);
    float Ms = M;
    const float f = n_split == 1 && sink ? sink_join(*sink, Ms, L) : 1.0f;
    for (int d = tid; d < HD; d += nthreads) {
        float a = 0.0f;
        for (int w = w0; w < w0 + nw; w++)
            a += sh_acc[w][d] * rescale(sh_m[w], M);
        if (n_split == 1) {
            out[row * HD + d] = sink ? a * f / L : a / L;
        } else {
            float *pt = partials + (row * split_cap + split) * (HD + 2);
            pt[2 + d] = a;
            if (d == 0) {
                pt[0] = M;
                pt[1] = L;
            }
        }
    }
}

/* The keys a row with n_kv keys in the cache (itself the last) sees: [*base, *base + *span), the last `window`
 * of them with a sliding window (window > 0). The span grows with n_kv, so the batch's last row has the most
 * splits and a grid sized for the longest cache has blocks for every split of a shorter one. */
static __host__ __device__ __forceinline__ void key_span(int n_kv, int window, int *base, int *span)
{
    *base = window > 0 && n_kv > window ? n_kv - window : 0;
    *span = n_kv - *base;
}

/* Splits of at least AD_SPLIT_MIN keys (AD_SPLIT_SHORT for a short span), at most split_cap of them
 * (<= AD_MAX_SPLITS: what the scratch holds), for the n_kv keys one row sees (key_span); computed on the device
 * from the cache length, so a captured graph (whose grid is sized for the longest cache) splits exactly as a direct
 * launch does. split_cap is AD_MAX_SPLITS for batches up to AD_MAX_TOK rows (the scratch is sized so): a row's
 * splits depend on its position only, never on the batch (the batch invariance the verify steps rely on). */
static __host__ __device__ __forceinline__ void split_plan(int n_kv, int split_cap, int *n_split, int *split_len)
{
    int ns = (n_kv + AD_SPLIT_MIN - 1) / AD_SPLIT_MIN;
    const int ns_short = (n_kv + AD_SPLIT_SHORT - 1) / AD_SPLIT_SHORT;
    if (ns > 1 && ns < AD_SHORT_SPLITS) /* at least min(ns_short, 8): the count never falls as n_kv grows */
        ns = ns_short < AD_SHORT_SPLITS ? ns_short : AD_SHORT_SPLITS;
    if (ns > split_cap)
        ns = split_cap;
    if (ns < 1)
        ns = 1;
    *n_split = ns;
    *split_len = (n_kv + ns - 1) / ns;
}

/* Row t's plan (position kv0 + t): its splits, and the keys [j0, j1) of split `split` (empty past its count). */
static __device__ __forceinline__ void row_plan(int kv0, int t, int window, int split_cap, int split, int *n_split,
                                                int *j0, int *j1)
{
    const int n_kv = kv0 + t + 1;
    int base, span, split_len;
    key_span(n_kv, window, &base, &span);
    split_plan(span, split_cap, n_split, &split_len);
    *j0 = base + split * split_len;
    *j1 = min(n_kv, *j0 + split_len);
}

/* The merge of query head h's splits of row t (partials p0, n_split of them) into out row orow, by HD threads
 * (d = 0 .. HD - 1) with shared f_sh, l_sh [AD_MAX_SPLITS], red [HD / 32], *L_sh of their own: the splits'
 * factors exp(m_s - M) are computed once, in parallel; each thread then adds its dim of the partials in split
 * order, the loads unrolled to be in flight together (a split at a time, the merge was latency-bound at many
 * splits). Every thread of the block calls it (__syncthreads; out NULL and n_split 0 for a thread of no head); the
 * partials are read through L2. The merge kernel's body; attn_decode_gqa_kernel's merge is merge_heads (the same
 * bits). */
template <int HD>
static __device__ __forceinline__ void merge_head(float *__restrict__ out, const float *__restrict__ p0, int n_split,
                                                  int d, float *f_sh, float *l_sh, float *red, float *L_sh,
                                                  const float *sink, int64_t orow)
{
    const int warp = d / WARP_SIZE, lane = d % WARP_SIZE;
    /* the largest of the splits' m */
    float mv = -INFINITY;
    for (int sp = d; sp < n_split; sp += HD)
        mv = fmaxf(mv, __ldcg(p0 + sp * (HD + 2)));
    mv = warp_max_f32(mv);
    if (lane == 0)
        red[warp] = mv;
    __syncthreads();
    float M = -INFINITY;
    for (int w = 0; w < (HD + WARP_SIZE - 1) / WARP_SIZE; w++)
        M = fmaxf(M, red[w]);
    for (int sp = d; sp < n_split; sp += HD) {
        f_sh[sp] = rescale(__ldcg(p0 + sp * (HD + 2)), M);
        l_sh[sp] = __ldcg(p0 + sp * (HD + 2) + 1);
    }
    __syncthreads();
    if (d == 0) {
        float L = 0.0f;
        for (int sp = 0; sp < n_split; sp++)
            L += l_sh[sp] * f_sh[sp];
        *L_sh = L;
    }
    float a = 0.0f;
#pragma unroll 16
    for (int sp = 0; sp < n_split; sp++)
        a += __ldcg(p0 + sp * (HD + 2) + 2 + d) * f_sh[sp];
    __syncthreads();
    if (!out)
        return; /* a thread of no head (attn_decode_gqa_kernel's merge): it only took part in the barriers */
    if (sink) { /* every thread joins the head's sink to the same (M, L) */
        float Ms = M, L = *L_sh;
        const float f = sink_join(*sink, Ms, L);
        out[orow * HD + d] = a * f / L;
        return;
    }
    out[orow * HD + d] = a / *L_sh;
}

/* The merge of the splits of `group` query heads of one row (output rows row0 .. row0 + group - 1, partials of
 * n_split splits each, split_cap apart) by the WPB warps of a block, all heads at once: merge_head's arithmetic
 * for every head and dim, each sum in merge_head's order (the max of the splits' m; the factors exp(m_s - M);
 * L = sum of l_s f_s from split 0; each dim's sum of acc_s f_s from split 0; a * f / L with the head's sink), the
 * same bits, with a few barriers for every head where merge_head takes THREADS / HD heads per round of its own
 * barriers and L2 round trips (the 8 heads of a Qwen3 KV head took four rounds). Each thread adds HD / 32 (head,
 * dim) outputs split by split, their loads in flight together. sh_a, sh_b: shared memory of at least 2 WPB
 * AD_MAX_SPLITS and WPB AD_MAX_SPLITS floats (the tiles' buffers, consumed); sinks NULL or the heads' sinks. */
template <int HD, int WPB>
static __device__ __forceinline__ void merge_heads(float *__restrict__ out, const float *__restrict__ partials,
                                                   int64_t row0, int group, int n_split, int split_cap,
                                                   const float *sinks, float *sh_a, float *sh_b)
{
    constexpr int THREADS = WPB * WARP_SIZE, OPT = (WPB * HD + THREADS - 1) / THREADS; /* outputs a thread */
    float *ms = sh_a, *ls = sh_a + WPB * AD_MAX_SPLITS, *fs = sh_b; /* [head][split] */
    __shared__ float hL[WPB];
    const float *p0 = partials + row0 * split_cap * (HD + 2); /* head h's split s: (h split_cap + s) (HD + 2) */
    /* the thread's outputs of the first PRE splits asked for now, beside the (m, l) loads below: their
     * round trip is not waited for again after the factors (a split past n_split or an output past the heads reads
     * the row's first value, dropped) */
    constexpr int PRE = AD_MERGE_PRE / OPT > 0 ? AD_MERGE_PRE / OPT : 1;
    const float *pa[OPT];
    float pre[PRE][OPT];
#pragma unroll
    for (int k = 0; k < OPT; k++) {
        const int o = (int)threadIdx.x + k * THREADS, h = o / HD, d = o % HD;
        pa[k] = p0 + (o < group * HD ? (int64_t)h * split_cap * (HD + 2) + 2 + d : 0);
#pragma unroll
        for (int sp = 0; sp < PRE; sp++)
            pre[sp][k] = __ldcg(pa[k] + (sp < n_split ? sp : 0) * (HD + 2));
    }
    for (int i = threadIdx.x; i < group * n_split; i += THREADS) {
        const int h = i / n_split, sp = i % n_split;
        const float *p = p0 + ((int64_t)h * split_cap + sp) * (HD + 2);
        ms[h * AD_MAX_SPLITS + sp] = __ldcg(p);
        ls[h * AD_MAX_SPLITS + sp] = __ldcg(p + 1);
    }
    __syncthreads();
    /* warp h: head h's M (a max: exact in any order), its factors, then (lane 0) L in split order */
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    for (int h = warp; h < group; h += WPB) {
        float mv = -INFINITY;
        for (int sp = lane; sp < n_split; sp += WARP_SIZE)
            mv = fmaxf(mv, ms[h * AD_MAX_SPLITS + sp]);
        const float M = warp_max_f32(mv);
        for (int sp = lane; sp < n_split; sp += WARP_SIZE)
            fs[h * AD_MAX_SPLITS + sp] = rescale(ms[h * AD_MAX_SPLITS + sp], M);
        __syncwarp();
        if (lane == 0) {
            float L = 0.0f;
            for (int sp = 0; sp < n_split; sp++)
                L += ls[h * AD_MAX_SPLITS + sp] * fs[h * AD_MAX_SPLITS + sp];
            hL[h] = L;
            ms[h * AD_MAX_SPLITS] = M; /* read back below for the sink (after the barrier; the factors are taken) */
        }
    }
    __syncthreads();
    float a[OPT];
    const float *fa[OPT];
#pragma unroll
    for (int k = 0; k < OPT; k++) {
        const int o = (int)threadIdx.x + k * THREADS, h = o / HD;
        a[k] = 0.0f;
        fa[k] = fs + (o < group * HD ? h * AD_MAX_SPLITS : 0);
    }
#pragma unroll
    for (int sp = 0; sp < PRE; sp++)
        if (sp < n_split)
#pragma unroll
            for (int k = 0; k < OPT; k++)
                a[k] += pre[sp][k] * fa[k][sp];
#pragma unroll 4
    for (int sp = PRE; sp < n_split; sp++)
#pragma unroll
        for (int k = 0; k < OPT; k++)
            a[k] += __ldcg(pa[k] + sp * (HD + 2)) * fa[k][sp];
#pragma unroll
    for (int k = 0; k < OPT; k++) {
        const int o = (int)threadIdx.x + k * THREADS, h = o / HD, d = o % HD;
        if (o >= group * HD)
            continue;
        if (sinks) { /* merge_head's: the head's sink joined to (M, L) */
            float Ms = ms[h * AD_MAX_SPLITS], L = hL[h];
            const float f = sink_join(sinks[h], Ms, L);
            out[(row0 + h) * HD + d] = a[k] * f / L;
        } else {
            out[(row0 + h) * HD + d] = a[k] / hL[h];
        }
    }
}

/* The output rows quantized for the next product (cuda_attn_fuse_t.quant_type): the activation type (0: none),
 * where row t goes (dst + t * stride). */
typedef struct ad_quant {
    int qt;
    char *dst;
    size_t stride;
} ad_quant_t;

/* Elements [e0, e0 + n) of output row t (block-aligned) quantized from src (element e0 of them: in shared memory, the
 * values a block just computed, or the output row) by the block's nw warps with cuda_quantize's warp bodies: the same
 * bytes. */
static __device__ __forceinline__ void slice_quantize(const ad_quant_t &q, const float *src, int t, int e0, int n,
                                                      int nw)
{
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    char *dr = q.dst + (size_t)t * q.stride;
    if (q.qt == GUILD_TYPE_Q8_K) {
        for (int b = e0 / QUANT_QK_K + warp; b < (e0 + n) / QUANT_QK_K; b += nw) {
            const float *xb = src + (b * QUANT_QK_K - e0) + lane * 8;
            float v[8];
#pragma unroll
            for (int k = 0; k < 8; k++)
                v[k] = xb[k];
            quantize_block_q8_K(v, lane, (quant_block_q8_K *)dr + b);
        }
    } else {
        for (int b = e0 / 32 + warp; b < (e0 + n) / 32; b += nw) {
            const float v = src[b * 32 - e0 + lane];
            if (q.qt == GUILD_TYPE_Q8_1)
                quantize_block_q8_32<true>(v, lane, dr + (size_t)b * sizeof(quant_block_q8_1));
            else
                quantize_block_q8_32<false>(v, lane, dr + (size_t)b * sizeof(quant_block_q8_0));
        }
    }
}

/* Elements [e0, e0 + n) of output row `row` (block-aligned) quantized by the block's nw warps into row t of q.dst,
 * with cuda_quantize's warp bodies: the same bytes. The block wrote them (visible after a barrier). */
static __device__ __forceinline__ void out_quantize(const ad_quant_t &q, const float *row, int t, int e0, int n,
                                                    int nw)
{
    slice_quantize(q, row + e0, t, e0, n, nw);
}

template <int HD, typename KT>
static __global__ void __launch_bounds__(AD_WARPS * WARP_SIZE)
    attn_decode_kernel(float *__restrict__ out, const float *__restrict__ q, const KT *__restrict__ kc,
                       const KT *__restrict__ vc, int kv0, const int32_t *kv0_dev, int n_head, int group,
                       int split_cap, float scale, int window, const float *__restrict__ sinks,
                       float *__restrict__ partials, const __grid_constant__ cuda_seq_rows_t sr)
{
    pdl_begin();
    constexpr int DPL = HD / 8; /* dims per lane */
    const int h = blockIdx.x, t = blockIdx.y, split = blockIdx.z;
    const seq_row_t sq = seq_row_of(sr, t, kv0, kv0_dev); /* row t's cache length, place and caches */
    kc = (const KT *)((const char *)kc + sq.ko);
    vc = (const KT *)((const char *)vc + sq.vo);
    int n_split, j0, j1;
    row_plan(sq.kv0, sq.t, window, split_cap, split, &n_split, &j0, &j1);
    if (split >= n_split)
        return; /* a grid sized for the batch's last row, or for the longest cache (captured graphs) */
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int g = lane / 8, r = lane % 8;
    const int kvd = (n_head / group) * HD; /* floats per cache row */
    const int hkv = h / group;

    float qv[DPL], acc[DPL];
    const float *qr = q + ((int64_t)t * n_head + h) * HD + r * DPL;
#pragma unroll
    for (int i = 0; i < DPL; i++) {
        qv[i] = qr[i];
        acc[i] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    /* The trip count is the warp's (jb), so every lane reaches the shuffles; a group past the split's end
     * (j >= j1) takes part with zeros and keeps its state. The next keys' loads are issued before this key's
     * arithmetic: an iteration is bound by the load latency, not by bandwidth. */
    float kf[DPL], vf[DPL];
    load_kv<DPL>(kc, vc, j0 + warp * 4 + g, j1, kvd, hkv * HD + r * DPL, kf, vf);
    for (int jb = j0 + warp * 4; jb < j1; jb += AD_WARPS * 4) {
        const int j = jb + g;
        float kn[DPL], vn[DPL];
        load_kv<DPL>(kc, vc, j + AD_WARPS * 4, j1, kvd, hkv * HD + r * DPL, kn, vn);
        key_step<DPL>(qv, kf, vf, j < j1, scale, m, l, acc);
#pragma unroll
        for (int i = 0; i < DPL; i++)
            kf[i] = kn[i], vf[i] = vn[i];
    }

    group_merge<DPL>(m, l, acc);

    /* Merge the warps through shared memory. */
    __shared__ float sh_acc[AD_WARPS][HD];
    __shared__ float sh_m[AD_WARPS], sh_l[AD_WARPS];
    warp_state_store<HD, DPL>(sh_acc[warp], &sh_m[warp], &sh_l[warp], m, l, acc);
    __syncthreads();
    head_write<HD>(sh_acc, sh_m, sh_l, 0, AD_WARPS, threadIdx.x, AD_WARPS * WARP_SIZE, n_split, split, split_cap,
                   (int64_t)t * n_head + h, sinks ? sinks + h : NULL, out, partials);
}

/* A thread's CH 16-byte chunks of the K and V tile starting at key jt: chunk c = threadIdx.x + i THREADS is
 * bytes (c % ROWC) * 16 of key jt + c / ROWC (rows kvd elements apart from kb, vb); keys past j1 read as zeros. */
template <int CH, int THREADS, int ROWC, typename KT>
static __device__ __forceinline__ void tile_load(const char *__restrict__ kb, const char *__restrict__ vb, int jt,
                                                 int j1, int kvd, uint4 *kr, uint4 *vr)
{
#pragma unroll
    for (int i = 0; i < CH; i++) {
        const int c = (int)threadIdx.x + i * THREADS, key = jt + c / ROWC;
        const int64_t o = (int64_t)key * kvd * (int64_t)sizeof(KT) + (c % ROWC) * 16;
        kr[i] = key < j1 ? *(const uint4 *)(kb + o) : make_uint4(0, 0, 0, 0);
        vr[i] = key < j1 ? *(const uint4 *)(vb + o) : make_uint4(0, 0, 0, 0);
    }
}

/* What a launch of attn_decode_gqa_kernel does beyond its grid (cuda_attn_form_t, resolved for the launch by
 * attn_decode_launch; zeros: today's block a split, the lengths read after the wait). */
typedef struct ad_form {
    int early;    /* the row's length read, and a block without a split gone, before pdl_begin */
    int prefetch; /* (with early) the block's splits' keys and values asked into L2 before pdl_begin */
    unsigned long long *tl; /* the launch's timeline (cuda_set_attn_timeline), NULL: none */
} ad_form_t;

/* The timeline of a launch (cuda_set_attn_timeline, timing programs only): CUDA_ATTN_TL_STAMPS block_stamp
 * readings a block, each where its phase ends (cuda_kernels.h). Nothing in a kernel instantiated without a timeline
 * (TL false). */
template <bool TL>
static __device__ __forceinline__ void tl_stamp(unsigned long long *tl, int i)
{
    if (TL)
        block_stamp(tl, CUDA_ATTN_TL_STAMPS, i);
}

/* Keys [j0, j1) of a KV head's K and V rows (kb, vb; rows `row` bytes apart, ROWB bytes of them the head's) asked
 * into L2, a 128-byte line a thread at a time: the cache, which only qk_prepare's newest row writes, and L2 is where
 * its write and these lines meet (the reads after pdl_begin see it). Hints only: no value is read. */
template <int ROWB>
static __device__ __forceinline__ void kv_prefetch_l2(const char *kb, const char *vb, int j0, int j1, int64_t row)
{
    constexpr int LPR = ROWB >= 128 ? ROWB / 128 : 1; /* lines a key's row */
    for (int i = (int)threadIdx.x; i < (j1 - j0) * LPR; i += (int)blockDim.x) {
        const int64_t o = (int64_t)(j0 + i / LPR) * row + (i % LPR) * 128;
        asm volatile("prefetch.global.L2 [%0];" ::"l"(kb + o));
        asm volatile("prefetch.global.L2 [%0];" ::"l"(vb + o));
    }
}

/* The GQA kernel: grid (KV head, query row, G blocks along the splits), WPB warps per block serve the `group` query
 * heads of the KV head (WPB / group warps per head). Block z computes the row's splits z, z + G, ... one after the
 * other, each as a block of its own would (G = the split count: a block a split): it reads each key and value of a
 * split once from memory, in tiles of 8 KiB (TK keys) staged through shared memory, the next tile's loads (the next
 * split's first, after a split's last) in flight while the warps work on this one; each warp runs the
 * 8-lanes-per-key online softmax of attn_decode_kernel on its head's share of the tile's keys. attn_decode_kernel
 * reads the cache once per query head (8 times for Qwen3's 32/4 heads), so this kernel is as fast from a few
 * thousand keys on and pulls ahead as the context grows; at a few hundred keys the per-head kernel is slightly
 * faster (timings: bench/results/code-comment-measurements.md). fm: ad_form_t. MULTI: a block may compute several
 * splits (a grid cut below the row's split count); without it exactly one, as the loop's state held across a
 * split's end costs registers (sm_90: head dimensions 64 and 256 lost a block an SM). */
template <int HD, typename KT, int WPB, bool MULTI, bool TL = false>
static __global__ void __launch_bounds__(WPB * WARP_SIZE)
    attn_decode_gqa_kernel(float *__restrict__ out, const float *__restrict__ q, const KT *__restrict__ kc,
                           const KT *__restrict__ vc, int kv0, const int32_t *kv0_dev, int n_head, int group,
                           int split_cap, float scale, int window, const float *__restrict__ sinks,
                           float *__restrict__ partials, unsigned int *__restrict__ done, ad_quant_t oq, ad_form_t fm,
                           const __grid_constant__ cuda_seq_rows_t sr)
{
    constexpr int DPL = HD / 8;
    constexpr int ROWC = HD * (int)sizeof(KT) / 16; /* 16-byte chunks per cache row */
    constexpr int TK = 8192 / (HD * (int)sizeof(KT)); /* keys per tile */
    constexpr int TCH = TK * ROWC;                    /* chunks per tile of K (and of V): 512 */
    constexpr int THREADS = WPB * WARP_SIZE;
    constexpr int CH = TCH / THREADS;
    constexpr int STRIDE = HD * (int)sizeof(KT); /* bytes per key in shared memory (padding rows to spread the
                                                    banks made no difference on the H200) */
    static_assert(TCH % THREADS == 0 && TK % 4 == 0, "tile shape");
    static_assert(TK * STRIDE >= 2 * WPB * AD_MAX_SPLITS * (int)sizeof(float), "merge_heads' arrays in ks, vs");
    __shared__ __align__(16) char ks[TK * STRIDE], vs[TK * STRIDE];
    __shared__ float sh_acc[WPB][HD];
    __shared__ float sh_m[WPB], sh_l[WPB];

    tl_stamp<TL>(fm.tl, CUDA_ATTN_TL_ENTRY);
    if (!fm.early)
        pdl_begin();
    const int hkv = blockIdx.x, t = blockIdx.y, z = blockIdx.z, G = gridDim.z;
    /* row t's cache length, place and caches: with fm.early before the wait (the step's start copy, never a
     * kernel's output: cuda_attention_decode_dyn's contract) */
    const seq_row_t sq = seq_row_of(sr, t, kv0, kv0_dev);
    int n_split, j0, j1;
    row_plan(sq.kv0, sq.t, window, split_cap, z, &n_split, &j0, &j1);
    if (z >= n_split) {
        tl_stamp<TL>(fm.tl, CUDA_ATTN_TL_END);
        return; /* a grid sized for the batch's last row, or for the longest cache (captured graphs) */
    }
    const int kvd = (n_head / group) * HD; /* elements per cache row */
    const char *kb = (const char *)(kc + hkv * HD) + sq.ko, *vb = (const char *)(vc + hkv * HD) + sq.vo;
    if (fm.early) {
        if (fm.prefetch)
            for (int sp = z; sp < n_split; sp += MULTI ? G : n_split) {
                int ns, p0, p1;
                row_plan(sq.kv0, sq.t, window, split_cap, sp, &ns, &p0, &p1);
                kv_prefetch_l2<STRIDE>(kb, vb, p0, p1, (int64_t)kvd * (int64_t)sizeof(KT));
            }
        pdl_begin();
    }
    tl_stamp<TL>(fm.tl, CUDA_ATTN_TL_WAIT);
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int g = lane / 8, r = lane % 8;
    const int P = WPB / group;             /* warps per query head */
    const int h = hkv * group + warp / P, pw = warp % P;

    const float *qr = q + ((int64_t)t * n_head + h) * HD + r * DPL;
    uint4 kr[CH], vr[CH];
    tile_load<CH, THREADS, ROWC, KT>(kb, vb, j0, j1, kvd, kr, vr);
    unsigned int count = 0; /* splits this block computed */
    for (int split = z;;) {
        float qv[DPL], acc[DPL]; /* the split's state from its start (q again: L1) */
#pragma unroll
        for (int i = 0; i < DPL; i++) {
            qv[i] = qr[i];
            acc[i] = 0.0f;
        }
        float m = -INFINITY, l = 0.0f;
        const int next = MULTI ? split + G : n_split;
        int nj0 = 0, nj1 = 0;
        if (MULTI && next < n_split) {
            int ns;
            row_plan(sq.kv0, sq.t, window, split_cap, next, &ns, &nj0, &nj1);
        }
        for (int jt = j0; jt < j1; jt += TK) {
            __syncthreads(); /* the previous tile is consumed */
#pragma unroll
            for (int i = 0; i < CH; i++) {
                const int c = (int)threadIdx.x + i * THREADS, so = c / ROWC * STRIDE + c % ROWC * 16;
                *(uint4 *)(ks + so) = kr[i];
                *(uint4 *)(vs + so) = vr[i];
            }
            __syncthreads();
            if (jt == j0 && split == z)
                tl_stamp<TL>(fm.tl, CUDA_ATTN_TL_TILE);
            if (jt + TK < j1)
                tile_load<CH, THREADS, ROWC, KT>(kb, vb, jt + TK, j1, kvd, kr, vr);
            else if (MULTI && next < n_split) /* the block's next split's first tile */
                tile_load<CH, THREADS, ROWC, KT>(kb, vb, nj0, nj1, kvd, kr, vr);
            /* keys pw * 4 + g + 4 P k of the tile: a warp-uniform trip count; four key steps an iteration, so that
             * a warp (its time goes to dependent arithmetic) has the next keys' loads and dot products to schedule
             * beside this key's exponentials; the same operations on each key, in the same order: the same bits
             * (the count measured: bench/results/dense42-h200-2026-12-04-s42.md) */
#pragma unroll 4
            for (int jj = pw * 4; jj < TK; jj += 4 * P) {
                const int jl = jj + g;
                float kf[DPL], vf[DPL];
                const KT *kp = (const KT *)(ks + jl * STRIDE), *vp = (const KT *)(vs + jl * STRIDE);
#pragma unroll
                for (int i = 0; i < DPL; i += 4) {
                    load4(kp + r * DPL + i, kf + i);
                    load4(vp + r * DPL + i, vf + i);
                }
                key_step<DPL>(qv, kf, vf, jt + jl < j1, scale, m, l, acc);
            }
        }
        tl_stamp<TL>(fm.tl, CUDA_ATTN_TL_KEYS);
        group_merge<DPL>(m, l, acc);
        warp_state_store<HD, DPL>(sh_acc[warp], &sh_m[warp], &sh_l[warp], m, l, acc);
        __syncthreads();
        head_write<HD>(sh_acc, sh_m, sh_l, warp - pw, P, pw * WARP_SIZE + lane, P * WARP_SIZE, n_split, split,
                       split_cap, (int64_t)t * n_head + h, sinks ? sinks + h : NULL, out, partials);
        count++;
        tl_stamp<TL>(fm.tl, CUDA_ATTN_TL_PARTIAL);
        if (!MULTI || next >= n_split)
            break;
        __syncthreads(); /* head_write's reads of sh_acc done before the next split's state goes there */
        split = next;
        j0 = nj0;
        j1 = nj1;
    }
    /* the block that writes the KV head's segment of a row quantizes it (oq: the launch's caller made sure the
     * segment is whole blocks) */
    const int seg = group * HD;
    if (n_split == 1) {
        if (oq.qt) {
            __syncthreads();
            out_quantize(oq, out + (int64_t)t * n_head * HD, t, hkv * seg, seg, WPB);
        }
        tl_stamp<TL>(fm.tl, CUDA_ATTN_TL_END);
        return;
    }
    if (!done)
        return;
    /* The row's last block to finish (its splits counted with the others') merges the splits of the KV head's query
     * heads and sets the row's counter back to 0. */
    __shared__ unsigned int ticket;
    __threadfence(); /* this block's partials visible before the count says so */
    __syncthreads();
    if (threadIdx.x == 0)
        ticket = atomicAdd(done + hkv * gridDim.y + t, count);
    __syncthreads();
    tl_stamp<TL>(fm.tl, CUDA_ATTN_TL_TICKET);
    if (ticket + count != (unsigned int)n_split) {
        tl_stamp<TL>(fm.tl, CUDA_ATTN_TL_END);
        return;
    }
    __threadfence();
    merge_heads<HD, WPB>(out, partials, (int64_t)t * n_head + hkv * group, group, n_split, split_cap,
                         sinks ? sinks + hkv * group : NULL, (float *)ks, (float *)vs);
    if (threadIdx.x == 0)
        done[hkv * gridDim.y + t] = 0; /* every split has counted: ready for the next launch */
    tl_stamp<TL>(fm.tl, CUDA_ATTN_TL_MERGE);
    if (oq.qt) {
        __syncthreads();
        out_quantize(oq, out + (int64_t)t * n_head * HD, t, hkv * seg, seg, WPB);
    }
    tl_stamp<TL>(fm.tl, CUDA_ATTN_TL_END);
}

/* ---- the tensor-core form (cuda_set_attn_mma; F16 caches, heads of 64 or 128, up to 16 query heads a KV head) ----
 * A cluster of AD_CL_BLOCKS blocks a (KV head, row): block z of the cluster takes split z of the row's keys (splits
 * planned from the row's own span: the same bits in any batch), in tiles of AD_CL_BK keys (two stages of cp.async
 * copies; the rows of earlier steps asked for before the wait on the kernel before, this step's after it). A tile's
 * scores on tensor cores with the prefill kernel's arithmetic (attn_mma_tiles.cuh: Q and P split into two f16
 * halves, f32 accumulation): each of the 4 warps scores 16 keys for the KV head's query heads (the rows of an
 * m16n8k16 A operand, rows past the group zeros); the tile's row maxima are shared through shared memory, so every
 * warp keeps the same running maximum; P goes through shared memory and each warp takes P V for its quarter of the
 * head's dims over all the tile's keys (no merge of warps' outputs). Each split's state (m, l, acc) goes into the
 * shared memory of the blocks that merge it (distributed shared memory), each block a slice of the KV head's
 * outputs (whole blocks of the output's quantization), which it writes and quantizes: no partials in global memory,
 * no counters, no last-block ticket. Blocks of no split leave at once; a row of one split is block 0's alone.
 * Other bits than the FMA forms (the summation order differs); within their tolerance. */
#define AD_CL_BLOCKS 8 /* blocks a cluster: a row's splits at most */
#define AD_CL_WARPS 4
#define AD_CL_BK 64  /* keys a tile: 16 a warp's scores, and 16 a k-step of P V */
#define AD_CL_MIN 64 /* keys a split at least */

static __host__ __device__ __forceinline__ void split_plan_cl(int span, int *n_split, int *split_len)
{
    int ns = (span + AD_CL_MIN - 1) / AD_CL_MIN;
    ns = ns > AD_CL_BLOCKS ? AD_CL_BLOCKS : ns < 1 ? 1 : ns;
    *n_split = ns;
    *split_len = (span + ns - 1) / ns;
}

template <int HD>
struct cl_layout {
    static constexpr int LD = HD + 8;                                  /* halves a tile row (16-byte rows apart) */
    static constexpr size_t tiles = (size_t)2 * 2 * AD_CL_BK * LD * 2; /* [stage][K, V][key][LD] halves */
    static constexpr size_t pfr = (size_t)(AD_CL_BK / 16) * 2 * 32 * 16; /* [k-step][hi, lo][lane] uint4 */
    static constexpr size_t rows = (size_t)2 * AD_CL_WARPS * 16 * 4;     /* tile maxima, warps' sums */
    static constexpr size_t merge = (size_t)(16 * AD_CL_BLOCKS + 32) * 4; /* factors [16][blocks], L, f */
    /* the inbox: the splits' m and l [blocks][2][16], their values of this block's slice [blocks][slice] (other
     * blocks write it while this one may still be on its keys) */
    static constexpr int inbox = 16 * HD + (AD_CL_BLOCKS - 1) * QUANT_QK_K; /* floats: slices of all splits */
    static constexpr size_t in = ((size_t)AD_CL_BLOCKS * 32 + inbox) * 4;
    static constexpr size_t bytes = tiles + pfr + rows + merge + in;
    static_assert((size_t)16 * HD * 4 <= tiles, "the results (after the keys) fit the tiles' place");
};

template <int HD>
static __global__ void __launch_bounds__(AD_CL_WARPS * WARP_SIZE)
    attn_decode_cl_kernel(float *__restrict__ out, const float *__restrict__ q, const __half *__restrict__ kc,
                          const __half *__restrict__ vc, int kv0, const int32_t *kv0_dev, int n_head, int group,
                          float scale, int window, const float *__restrict__ sinks, ad_quant_t oq, int early,
                          const __grid_constant__ cuda_seq_rows_t sr, unsigned long long *tl)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 /* clusters (an older device never launches it: cl_ready) */
    typedef cl_layout<HD> LY;
    constexpr int W = AD_CL_WARPS, BK = AD_CL_BK, KS = HD / 16, LD = LY::LD, CH = HD / 8, CL = AD_CL_BLOCKS;
    constexpr int DW = HD / W, NOW = DW / 8, KT = BK / 16;
    static_assert(KT == W && DW % 16 == 0, "a warp's 16 keys are a k-step of P V; its dims whole pairs of n-tiles");
    extern __shared__ __align__(16) unsigned char ad_cl_smem[];
    __half *tiles = (__half *)ad_cl_smem;
    uint4 *pfr = (uint4 *)(ad_cl_smem + LY::tiles);
    float *smax = (float *)(ad_cl_smem + LY::tiles + LY::pfr), *slw = smax + W * 16;
    float *fac = (float *)(ad_cl_smem + LY::tiles + LY::pfr + LY::rows), *rL = fac + 16 * CL, *rF = rL + 16;
    float *in_ml = rF + 16, *in_o = in_ml + CL * 32, *res = (float *)ad_cl_smem; /* (res: after the keys) */
    auto stamp = [&](int i) {
        if (tl)
            tl_stamp<true>(tl, i);
    };
    stamp(CUDA_ATTN_TL_ENTRY);
    if (!early)
        pdl_wait();
    const int z = (int)(blockIdx.x % CL), hkv = (int)(blockIdx.x / CL), t = blockIdx.y;
    const seq_row_t sq = seq_row_of(sr, t, kv0, kv0_dev);
    const int n_kv = sq.kv0 + sq.t + 1;
    int base, span, n_split, split_len;
    key_span(n_kv, window, &base, &span);
    split_plan_cl(span, &n_split, &split_len);
    if (n_split == 1 && z > 0) { /* one split: block 0 alone, no cluster barrier */
        stamp(CUDA_ATTN_TL_END);
        return;
    }
    const int j0 = base + z * split_len, j1 = min(n_kv, j0 + split_len);
    if (z >= n_split || j0 >= j1) { /* no split: gone (an exited block holds up no cluster barrier) */
        stamp(CUDA_ATTN_TL_END);
        return;
    }
    /* The splits' states go into the inboxes of the blocks that merge them: block s of the cluster merges elements
     * [s per, (s + 1) per) of the KV head's segment (whole blocks of the output's quantization, else whole heads),
     * and gets from each other split its m and l and its values of that slice, as async stores counted on its
     * mbarrier (no release barrier: cluster.cuh). */
    const int seg = group * HD;
    const int unit = oq.qt == GUILD_TYPE_Q8_K ? QUANT_QK_K : oq.qt ? 32 : HD;
    const int per = (seg / unit + n_split - 1) / n_split * unit;
    const int e0 = z * per, e1 = min(seg, e0 + per);
    __shared__ __align__(8) unsigned long long in_bytes;
    if (n_split > 1) { /* this block has started (its shared memory may be written from now on: the wait below) */
        if (threadIdx.x == 0 && e0 < e1) {
            int others = 0; /* the blocks that send: a split of keys each (as the test above) */
            for (int s2 = 0; s2 < n_split; s2++)
                others += s2 != z && base + s2 * split_len < n_kv;
            cluster_mbar_init(&in_bytes, (unsigned)(others * (e1 - e0 + 2 * group)) * (unsigned)sizeof(float));
        }
        cluster_arrive_relaxed();
    }
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int g = lane >> 2, t4 = lane & 3;
    const int kvd = (n_head / group) * HD;
    const int n_kt = (j1 - j0 + BK - 1) / BK;

    constexpr int RSTEP = W * WARP_SIZE / CH;
    static_assert(W * WARP_SIZE % CH == 0 && BK % RSTEP == 0, "whole rows per pass of the block");
    const int lr = (int)threadIdx.x / CH, lc = ((int)threadIdx.x % CH) * 8;
    const __half *kc_t = (const __half *)((const char *)kc + sq.ko) + (int64_t)hkv * HD + lc;
    const __half *vc_t = (const __half *)((const char *)vc + sq.vo) + (int64_t)hkv * HD + lc;
    /* tile kt's rows: part 0 those of earlier steps (j < sq.kv0: no kernel of this step writes them), part 1 the
     * rest (this step's rows, written by the kernel before; and the zeros past the split), part 2 all */
    auto load_tile = [&](int kt, int part) {
        __half *ks = tiles + (kt & 1) * 2 * BK * LD + lr * LD + lc, *vs = ks + BK * LD;
        const int jb = j0 + kt * BK + lr;
#pragma unroll
        for (int u = 0; u < BK / RSTEP; u++) {
            const int j = jb + u * RSTEP;
            const bool in = j < j1, old = in && j < sq.kv0;
            if (part == 2 || (part == 0) == old) {
                const int64_t off = (int64_t)(in ? j : 0) * kvd;
                cp_async16(ks + u * RSTEP * LD, kc_t + off, in);
                cp_async16(vs + u * RSTEP * LD, vc_t + off, in);
            }
        }
    };
    if (early) {
        load_tile(0, 0);
        pdl_wait();
        load_tile(0, 1);
    } else {
        load_tile(0, 2);
    }
    cp_async_commit();
    stamp(CUDA_ATTN_TL_WAIT);

    float o[NOW][4];
    am_zero(o);
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    {
        /* Q fragments of the KV head's query heads (rows g, g+8), split, each row scaled into f16's normal range */
        const bool ok0 = g < group, ok1 = g + 8 < group;
        uint32_t qh[KS][4], ql[KS][4];
        float rs0, rs1;
        {
            const int64_t qrow = (int64_t)t * n_head + (int64_t)hkv * group;
            const float *q0 = q + (qrow + (ok0 ? g : 0)) * HD + 2 * t4;
            const float *q1 = q + (qrow + (ok1 ? g + 8 : 0)) * HD + 2 * t4;
            am_q_split<HD>(q0, q1, ok0, ok1, scale, qh, ql, rs0, rs1);
        }
        for (int kt = 0; kt < n_kt; kt++) {
            if (kt + 1 < n_kt) {
                load_tile(kt + 1, 2);
                cp_async_commit();
                cp_async_wait<1>();
            } else {
                cp_async_wait<0>();
            }
            __syncthreads();
            if (kt == 0)
                stamp(CUDA_ATTN_TL_TILE);
            const __half *ks = tiles + (kt & 1) * 2 * BK * LD, *vs = ks + BK * LD;
            const int k0 = j0 + kt * BK + 16 * warp; /* this warp's 16 keys */
            /* Q's halves into accumulators of their own: two chains of mma half as long (then added) */
            float s[2][4], sl[2][4];
            am_zero(s);
            am_zero(sl);
#pragma unroll
            for (int kk = 0; kk < KS; kk++) {
                uint32_t b[4];
                ldmatrix_x4(b, ks + 16 * warp * LD + am_k_ldsm_offset(lane, 0, kk, LD));
                mma_f16(s[0], qh[kk], b[0], b[1]);
                mma_f16(sl[0], ql[kk], b[0], b[1]);
                mma_f16(s[1], qh[kk], b[2], b[3]);
                mma_f16(sl[1], ql[kk], b[2], b[3]);
            }
#pragma unroll
            for (int nt = 0; nt < 2; nt++)
#pragma unroll
                for (int c = 0; c < 4; c++)
                    s[nt][c] = s[nt][c] + sl[nt][c];
            float mx0 = -INFINITY, mx1 = -INFINITY;
            am_mask_tile(s, k0, t4, k0 + 15 >= j1, false, j1 - 1, j1 - 1, 0, 0, rs0, rs1, mx0, mx1);
            mx0 = am_quad_max(mx0);
            mx1 = am_quad_max(mx1);
            if (t4 == 0) {
                smax[warp * 16 + g] = mx0;
                smax[warp * 16 + g + 8] = mx1;
            }
            __syncthreads();
            float M0 = m0, M1 = m1; /* the tile's maxima with the running ones: the same in every warp */
#pragma unroll
            for (int w = 0; w < W; w++) {
                M0 = fmaxf(M0, smax[w * 16 + g]);
                M1 = fmaxf(M1, smax[w * 16 + g + 8]);
            }
            uint32_t ph[1][4], pl[1][4];
            float c0, c1;
            am_softmax_tile(s, M0, M1, m0, m1, l0, l1, c0, c1, ph, pl);
            pfr[(warp * 2) * 32 + lane] = make_uint4(ph[0][0], ph[0][1], ph[0][2], ph[0][3]);
            pfr[(warp * 2 + 1) * 32 + lane] = make_uint4(pl[0][0], pl[0][1], pl[0][2], pl[0][3]);
            __syncthreads();
            uint32_t ah[KT][4], al[KT][4];
#pragma unroll
            for (int kk = 0; kk < KT; kk++) {
                const uint4 a = pfr[(kk * 2) * 32 + lane], b = pfr[(kk * 2 + 1) * 32 + lane];
                ah[kk][0] = a.x, ah[kk][1] = a.y, ah[kk][2] = a.z, ah[kk][3] = a.w;
                al[kk][0] = b.x, al[kk][1] = b.y, al[kk][2] = b.z, al[kk][3] = b.w;
            }
#pragma unroll
            for (int dp = 0; dp < NOW / 2; dp++)
                am_pv_tile(o, dp, ah, al, vs, lane, warp * (DW / 16) + dp, LD, c0, c1);
            __syncthreads(); /* the stage and P are free */
        }
    }
    stamp(CUDA_ATTN_TL_KEYS);
    pdl_trigger(); /* the output product's blocks (its weights asked for before its wait) after the keys */

    /* the block's state: m (the same in every warp), l (the warps' sums, in warp order), acc (P's scale undone: a
     * power of two) */
    float L0 = 0.0f, L1 = 0.0f;
    {
        const float a0 = am_quad_sum(l0), a1 = am_quad_sum(l1);
        if (t4 == 0) {
            slw[warp * 16 + g] = a0;
            slw[warp * 16 + g + 8] = a1;
        }
        __syncthreads();
#pragma unroll
        for (int w = 0; w < W; w++) {
            L0 += slw[w * 16 + g];
            L1 += slw[w * 16 + g + 8];
        }
    }
    const int d0 = warp * DW + 2 * t4;
    const float *sk = sinks ? sinks + hkv * group : NULL;
    float *orow = out + ((int64_t)t * n_head + hkv * group) * HD; /* the KV head's segment of row t */
    if (n_split == 1) { /* block 0, the whole row: the output */
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const int r = g + 8 * hh;
            if (r >= group)
                continue;
            float Ms = hh ? m1 : m0, L = hh ? L1 : L0;
            const float f = sk ? sink_join(sk[r], Ms, L) : 1.0f;
#pragma unroll
            for (int nt = 0; nt < NOW; nt++) {
                const float x0 = o[nt][2 * hh] / AM_PSCALE, x1 = o[nt][2 * hh + 1] / AM_PSCALE;
                const float2 y = sk ? make_float2(x0 * f / L, x1 * f / L) : make_float2(x0 / L, x1 / L);
                *(float2 *)(orow + r * HD + d0 + 8 * nt) = y;
                *(float2 *)(res + r * HD + d0 + 8 * nt) = y;
            }
        }
        stamp(CUDA_ATTN_TL_PARTIAL);
        if (oq.qt) {
            __syncthreads();
            slice_quantize(oq, res, t, hkv * seg, seg, W);
        }
        stamp(CUDA_ATTN_TL_END);
        return;
    }
    /* The first wait: every block of the cluster has started (long since, by now), its mbarrier set. Every split's
     * m and l go to every block that merges (s per < seg), its values to their slice's block; this block's own are
     * plain stores. */
    cluster_wait_acquire();
    stamp(CUDA_ATTN_TL_PARTIAL);
    const uint32_t in_cta = (uint32_t)__cvta_generic_to_shared(&in_bytes);
    if (warp == 0 && t4 == 0)
        for (int s2 = 0; s2 < n_split && s2 * per < seg; s2++) {
            const uint32_t mb = cluster_map_addr(in_cta, (uint32_t)s2);
#pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                const int r = g + 8 * hh;
                if (r < group) {
                    float *pm = in_ml + z * 32 + r, *pl = pm + 16;
                    if (s2 == z) {
                        *pm = hh ? m1 : m0;
                        *pl = hh ? L1 : L0;
                    } else {
                        cluster_send_f32(cluster_map(pm, (uint32_t)s2), hh ? m1 : m0, mb);
                        cluster_send_f32(cluster_map(pl, (uint32_t)s2), hh ? L1 : L0, mb);
                    }
                }
            }
        }
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        const int r = g + 8 * hh;
        if (r < group)
#pragma unroll
            for (int nt = 0; nt < NOW; nt++) {
                const int e = r * HD + d0 + 8 * nt, owner = e / per;
                float *pv = in_o + z * per + (e - owner * per);
                const float x0 = o[nt][2 * hh] / AM_PSCALE, x1 = o[nt][2 * hh + 1] / AM_PSCALE;
                if (owner == z)
                    *(float2 *)pv = make_float2(x0, x1);
                else
                    cluster_send_f32x2(cluster_map(pv, (uint32_t)owner), x0, x1,
                                       cluster_map_addr(in_cta, (uint32_t)owner));
            }
    }
    if (e0 < e1) { /* this block's own stores, then every other split's */
        __syncthreads();
        cluster_mbar_wait(&in_bytes);
    }
    stamp(CUDA_ATTN_TL_TICKET);
    if (e0 < e1) {
        const int r0 = e0 / HD, nr = (e1 - 1) / HD - r0 + 1; /* the slice's rows (query heads) */
        if ((int)threadIdx.x < nr) {
            const int r = r0 + (int)threadIdx.x;
            float ms[CL], M = -INFINITY, L = 0.0f;
#pragma unroll
            for (int s2 = 0; s2 < CL; s2++)
                if (s2 < n_split) {
                    ms[s2] = in_ml[s2 * 32 + r];
                    M = fmaxf(M, ms[s2]);
                }
#pragma unroll
            for (int s2 = 0; s2 < CL; s2++)
                if (s2 < n_split) {
                    const float f = rescale(ms[s2], M);
                    fac[threadIdx.x * CL + s2] = f;
                    L += in_ml[s2 * 32 + 16 + r] * f;
                }
            rF[threadIdx.x] = sk ? sink_join(sk[r], M, L) : 1.0f;
            rL[threadIdx.x] = L;
        }
        __syncthreads();
        for (int e = e0 + (int)threadIdx.x; e < e1; e += W * WARP_SIZE) {
            const int rl = e / HD - r0;
            float v[CL], a = 0.0f;
#pragma unroll
            for (int s2 = 0; s2 < CL; s2++)
                v[s2] = s2 < n_split ? in_o[s2 * per + (e - e0)] : 0.0f;
#pragma unroll
            for (int s2 = 0; s2 < CL; s2++)
                if (s2 < n_split)
                    a += v[s2] * fac[rl * CL + s2];
            const float L = rL[rl], y = sk ? a * rF[rl] / L : a / L;
            orow[e] = y;
            res[e - e0] = y;
        }
        stamp(CUDA_ATTN_TL_MERGE);
        if (oq.qt) {
            __syncthreads();
            slice_quantize(oq, res, t, hkv * seg + e0, e1 - e0, W);
        }
    }
    stamp(CUDA_ATTN_TL_END);
#endif
}

static std::atomic<int> g_attn_mma{1}; /* cuda_set_attn_mma: on unless turned off */
static std::atomic<unsigned long long *> g_attn_tl{nullptr}; /* cuda_set_attn_timeline */
static std::atomic<int> g_attn_early{1}; /* the launch form's: the row lengths read before the wait */

/* Whether the cluster form runs here (an sm_90 device on which a cluster of its blocks can be scheduled), its shared
 * memory allowed: asked once a process, outside any stream capture (cuda_set_attn_form and cuda_set_attn_mma run at
 * a backend's creation or a test's setup). Elsewhere the FMA forms run. */
template <int HD>
static bool cl_usable_hd()
{
    if (cudaFuncSetAttribute(attn_decode_cl_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)cl_layout<HD>::bytes) != cudaSuccess) {
        (void)cudaGetLastError(); /* (an older device: no kernel image) */
        return false;
    }
    return cuda_cluster_fits(attn_decode_cl_kernel<HD>, AD_CL_BLOCKS, 1, AD_CL_WARPS * WARP_SIZE,
                             cl_layout<HD>::bytes);
}

static bool cl_ready()
{
    static const bool ok = cl_usable_hd<64>() && cl_usable_hd<128>();
    return ok;
}

extern "C" void cuda_set_attn_mma(bool on)
{
    (void)cl_ready();
    g_attn_mma.store(on ? 1 : 0, std::memory_order_relaxed);
}

/* The tensor-core form's launch where it applies (see above); false: the caller launches another form. */
template <int HD, typename KT>
static bool mma_launch(float *out, const float *q, const void *kc, const void *vc, int n_tok, int kv0,
                       const int32_t *kv0_dev, int n_head, int group, float scale, int window, const float *sinks,
                       const ad_quant_t &kq, bool early, const cuda_seq_rows_t &sr, cudaStream_t s)
{
    if constexpr (!std::is_same<KT, __half>::value || (HD != 64 && HD != 128))
        return false;
    else {
        if (!g_attn_mma.load(std::memory_order_relaxed) || group > 16 || !cl_ready())
            return false;
        const dim3 grid((unsigned)(n_head / group * AD_CL_BLOCKS), (unsigned)n_tok);
        cuda_launch_pdl_cluster(attn_decode_cl_kernel<HD>, grid, AD_CL_WARPS * WARP_SIZE, cl_layout<HD>::bytes,
                                AD_CL_BLOCKS, s, out, q, (const __half *)kc, (const __half *)vc, kv0, kv0_dev, n_head,
                                group, scale, window, sinks, kq, early ? 1 : 0, sr,
                                g_attn_tl.load(std::memory_order_relaxed));
        return true;
    }
}

/* Block (query head, row) of HD threads: merge_head. */
template <int HD>
static __global__ void attn_decode_merge_kernel(float *__restrict__ out, const float *__restrict__ partials,
                                                int n_head, int kv0, const int32_t *kv0_dev, int split_cap, int window,
                                                const float *__restrict__ sinks,
                                                const __grid_constant__ cuda_seq_rows_t sr)
{
    pdl_begin();
    __shared__ float f_sh[AD_MAX_SPLITS], l_sh[AD_MAX_SPLITS];
    __shared__ float red[HD / WARP_SIZE > 0 ? HD / WARP_SIZE : 1];
    __shared__ float L_sh;
    const int h = blockIdx.x, t = blockIdx.y;
    const seq_row_t sq = seq_row_of(sr, t, kv0, kv0_dev);
    int n_split, j0, j1;
    row_plan(sq.kv0, sq.t, window, split_cap, 0, &n_split, &j0, &j1);
    if (n_split == 1)
        return; /* the attention kernel wrote the output */
    const int64_t row = (int64_t)t * n_head + h;
    merge_head<HD>(out, partials + row * split_cap * (HD + 2), n_split, threadIdx.x, f_sh, l_sh, red, &L_sh,
                   sinks ? sinks + h : NULL, row);
}

extern "C" size_t cuda_attention_decode_scratch(int32_t n_tok, int32_t n_head, int32_t head_dim, int32_t n_ctx)
{
    (void)n_ctx;
    if (n_tok > AD_MAX_TOK)
        n_tok = AD_MAX_TOK;
    return (size_t)n_tok * (size_t)n_head * AD_MAX_SPLITS * (size_t)(head_dim + 2) * sizeof(float);
}

/* The launch form (cuda_set_attn_form): process-wide, read at each launch. */
static std::atomic<int> g_attn_waves{CUDA_ATTN_WAVES_DEFAULT},
    g_attn_prefetch_rows{CUDA_ATTN_PREFETCH_ROWS_DEFAULT}, g_attn_row_blocks{0};

extern "C" void cuda_set_attn_timeline(unsigned long long *stamps)
{
    g_attn_tl.store(stamps, std::memory_order_relaxed);
}

extern "C" cuda_attn_form_t cuda_attn_form_default(void)
{
    return cuda_attn_form_t{CUDA_ATTN_WAVES_DEFAULT, true, CUDA_ATTN_PREFETCH_ROWS_DEFAULT, 0};
}

extern "C" cuda_attn_form_t cuda_attn_form(void)
{
    return cuda_attn_form_t{g_attn_waves.load(std::memory_order_relaxed),
                            g_attn_early.load(std::memory_order_relaxed) != 0,
                            g_attn_prefetch_rows.load(std::memory_order_relaxed),
                            g_attn_row_blocks.load(std::memory_order_relaxed)};
}

/* The blocks of attn_decode_gqa_kernel<HD, KT, WPB, true> (the form that a cut grid launches) the device holds at
 * once (blocks an SM x SMs), asked once a process; 0 where the runtime cannot say (then no cut). */
template <int HD, typename KT, int WPB>
static int gqa_resident()
{
    static const int n = [] {
        int dev = 0, sms = 0, per_sm = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, attn_decode_gqa_kernel<HD, KT, WPB, true>,
                                                          WPB * WARP_SIZE, 0) != cudaSuccess) {
            (void)cudaGetLastError();
            return 0;
        }
        return per_sm * sms;
    }();
    return n;
}

/* Every instantiation's gqa_resident asked now: the setter runs outside stream capture (the backend's creation, a
 * test's or timing's setup), a launch may run inside it, where the runtime may refuse what it sees as unsafe. */
template <typename KT>
static void gqa_resident_warm()
{
    (void)gqa_resident<32, KT, 8>(), (void)gqa_resident<32, KT, 16>();
    (void)gqa_resident<64, KT, 8>(), (void)gqa_resident<64, KT, 16>();
    (void)gqa_resident<128, KT, 8>(), (void)gqa_resident<128, KT, 16>();
    (void)gqa_resident<256, KT, 8>(), (void)gqa_resident<256, KT, 16>();
}

extern "C" void cuda_set_attn_form(const cuda_attn_form_t *form)
{
    const cuda_attn_form_t f = form ? *form : cuda_attn_form_default();
    if (g_attn_mma.load(std::memory_order_relaxed))
        (void)cl_ready();
    if (f.waves > 0) {
        gqa_resident_warm<__half>();
        gqa_resident_warm<float>();
    }
    g_attn_waves.store(f.waves > 0 ? f.waves : 0, std::memory_order_relaxed);
    g_attn_early.store(f.early ? 1 : 0, std::memory_order_relaxed);
    g_attn_prefetch_rows.store(f.prefetch_rows > 0 ? f.prefetch_rows : 0, std::memory_order_relaxed);
    g_attn_row_blocks.store(f.row_blocks > 0 ? f.row_blocks : 0, std::memory_order_relaxed);
}

/* attn_decode_gqa_kernel<HD, KT, WPB, MULTI, TL> on grid with PDL, MULTI when multi (a grid cut below the splits). */
template <int HD, typename KT, int WPB, bool TL>
static void gqa_kernel_launch(bool multi, dim3 grid, float *out, const float *q, const void *kc, const void *vc,
                              int kv0, const int32_t *kv0_dev, int n_head, int group, int split_cap, float scale,
                              int window, const float *sinks, float *scratch, unsigned int *dn, const ad_quant_t &kq,
                              const ad_form_t &fm, const cuda_seq_rows_t &sr, cudaStream_t s)
{
    if (multi)
        cuda_launch_pdl(attn_decode_gqa_kernel<HD, KT, WPB, true, TL>, grid, WPB * WARP_SIZE, 0, s, out, q,
                        (const KT *)kc, (const KT *)vc, kv0, kv0_dev, n_head, group, split_cap, scale, window, sinks,
                        scratch, dn, kq, fm, sr);
    else
        cuda_launch_pdl(attn_decode_gqa_kernel<HD, KT, WPB, false, TL>, grid, WPB * WARP_SIZE, 0, s, out, q,
                        (const KT *)kc, (const KT *)vc, kv0, kv0_dev, n_head, group, split_cap, scale, window, sinks,
                        scratch, dn, kq, fm, sr);
}

/* The KV-head kernel's launch: with the merge in the launch (dn), in the process's form (cuda_attn_form_t): its
 * blocks along the splits cut (gz), early, prefetch; else a block a split, as the merge kernel's launches. */
template <int HD, typename KT, int WPB>
static void gqa_launch(float *out, const float *q, const void *kc, const void *vc, int n_tok, int kv0,
                       const int32_t *kv0_dev, int n_head, int group, float scale, int window, const float *sinks,
                       float *scratch, int grid_split, int split_cap, unsigned int *dn, const ad_quant_t &kq,
                       const cuda_seq_rows_t &sr, cudaStream_t s)
{
    const int n_kvh = n_head / group;
    int gz = grid_split;
    ad_form_t fm = {0, 0, NULL};
    if (dn) {
        const cuda_attn_form_t f = cuda_attn_form();
        const int res = f.waves > 0 ? gqa_resident<HD, KT, WPB>() : 0;
        if (res > 0) { /* at most waves x res blocks (rounded down: a few blocks past a whole wave would hold the
                          launch a block's time longer) */
            const int64_t cut = (int64_t)f.waves * res / ((int64_t)n_kvh * n_tok);
            gz = cut < gz ? (int)(cut > 1 ? cut : 1) : gz;
        }
        if (f.row_blocks > 0 && f.row_blocks < gz)
            gz = f.row_blocks;
        fm.early = f.early;
        fm.prefetch = f.early && n_tok <= f.prefetch_rows;
        fm.tl = g_attn_tl.load(std::memory_order_relaxed);
    }
    const dim3 grid((unsigned)n_kvh, (unsigned)n_tok, (unsigned)gz);
    if constexpr (HD == 128 && std::is_same<KT, __half>::value && WPB == 8) /* the timed shape (Qwen3's) only */
        if (fm.tl) {
            gqa_kernel_launch<HD, KT, WPB, true>(gz < grid_split, grid, out, q, kc, vc, kv0, kv0_dev, n_head, group,
                                                 split_cap, scale, window, sinks, scratch, dn, kq, fm, sr, s);
            return;
        }
    fm.tl = NULL;
    gqa_kernel_launch<HD, KT, WPB, false>(gz < grid_split, grid, out, q, kc, vc, kv0, kv0_dev, n_head, group,
                                          split_cap, scale, window, sinks, scratch, dn, kq, fm, sr, s);
}

template <int HD, typename KT>
static void attn_decode_launch(float *out, const float *q, const void *kc, const void *vc, int n_tok, int kv0,
                               const int32_t *kv0_dev, int n_head, int group, float scale, int window,
                               const float *sinks, float *scratch, int grid_split, int split_cap, bool per_head,
                               unsigned int *done, const ad_quant_t &oq, const cuda_seq_rows_t &sr, bool *quantized,
                               cudaStream_t s)
{
    const bool aligned = ((uintptr_t)kc | (uintptr_t)vc) % 16 == 0;
    const int qk = oq.qt == GUILD_TYPE_Q8_K ? QUANT_QK_K : 32; /* the output's quantization block */
    if (!per_head && aligned && (uintptr_t)q % 8 == 0) { /* the tensor-core form (cuda_set_attn_mma) */
        const ad_quant_t kq = oq.qt && (group * HD) % qk == 0 ? oq : ad_quant_t{0, NULL, 0};
        /* the lengths before the wait where the fused launches' contract says so (cuda_attention_decode_dyn) */
        const bool early = done && g_attn_early.load(std::memory_order_relaxed);
        if (mma_launch<HD, KT>(out, q, kc, vc, n_tok, kv0, kv0_dev, n_head, group, scale, window, sinks, kq, early,
                               sr, s)) {
            *quantized = kq.qt != 0;
            return;
        }
    }
    if (!per_head && aligned && group <= 16 && (group & (group - 1)) == 0) {
        unsigned int *dn = grid_split > 1 && n_tok <= AD_MAX_TOK ? done : NULL; /* the merge in its launch */
        /* the segment's quantization in the launch: where the block writing it exists (one split, or the merge in
         * the launch) and the segments are whole activation blocks */
        const ad_quant_t kq = oq.qt && (grid_split == 1 || dn) && (group * HD) % qk == 0 ? oq : ad_quant_t{0, NULL, 0};
        *quantized = kq.qt != 0;
        if (group <= 8)
            gqa_launch<HD, KT, 8>(out, q, kc, vc, n_tok, kv0, kv0_dev, n_head, group, scale, window, sinks, scratch,
                                  grid_split, split_cap, dn, kq, sr, s);
        else
            gqa_launch<HD, KT, 16>(out, q, kc, vc, n_tok, kv0, kv0_dev, n_head, group, scale, window, sinks, scratch,
                                   grid_split, split_cap, dn, kq, sr, s);
        if (dn)
            return;
    } else {
        const dim3 grid((unsigned)n_head, (unsigned)n_tok, (unsigned)grid_split);
        cuda_launch_pdl(attn_decode_kernel<HD, KT>, grid, AD_WARPS * WARP_SIZE, 0, s, out, q, (const KT *)kc,
                        (const KT *)vc, kv0, kv0_dev, n_head, group, split_cap, scale, window, sinks, scratch, sr);
    }
    if (grid_split > 1)
        cuda_launch_pdl(attn_decode_merge_kernel<HD>, dim3((unsigned)n_head, (unsigned)n_tok), HD, 0, s, out, scratch,
                        n_head, kv0, kv0_dev, split_cap, window, sinks, sr);
}

template <typename KT>
static void attn_decode_dispatch(int head_dim, float *out, const float *q, const void *kc, const void *vc, int n_tok,
                                 int kv0, const int32_t *kv0_dev, int n_head, int group, float scale, int window,
                                 const float *sinks, float *sc, int grid_split, int split_cap, bool per_head,
                                 unsigned int *done, const ad_quant_t &oq, const cuda_seq_rows_t &sr, bool *quantized,
                                 cudaStream_t s)
{
#define AD_CASE(HD)                                                                                                \
    attn_decode_launch<HD, KT>(out, q, kc, vc, n_tok, kv0, kv0_dev, n_head, group, scale, window, sinks, sc,     \
                               grid_split, split_cap, per_head, done, oq, sr, quantized, s)
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
                            int32_t head_dim, float scale, const cuda_attn_ext_t *ext, void *scratch,
                            size_t scratch_bytes, bool per_head, const cuda_attn_fuse_t *fuse,
                            const cuda_seq_rows_t &sr, cudaStream_t s, guild_err_t *err)
{
    const int window = ext && ext->window > 0 ? ext->window : 0;
    const float *sinks = ext ? ext->sinks : NULL;
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
    if (sr.n && split_cap != AD_MAX_SPLITS) /* a group's own launch has the full cap: so must the table's */
        return guild_err_set(err, "cuda: attention: %zu bytes of scratch for %d rows of several sequences (%zu "
                             "needed)", scratch_bytes, n_tok, per_split * AD_MAX_SPLITS);
    int base, span, grid_split, split_len; /* the batch's last row has the most splits */
    key_span(kv0 + n_tok, window, &base, &span);
    split_plan(span, split_cap, &grid_split, &split_len);
    const int group = n_head / n_head_kv;
    unsigned int *done = fuse ? fuse->done : NULL;
    const guild_type_t qt = fuse && fuse->quant_dst ? fuse->quant_type : GUILD_TYPE_F32;
    const bool quant = qt == GUILD_TYPE_Q8_0 || qt == GUILD_TYPE_Q8_1 || qt == GUILD_TYPE_Q8_K;
    if (fuse && fuse->quant_dst && !quant)
        return guild_err_set(err, "cuda: attention: its output quantized to type %d (q8_0, q8_1 or q8_K)", (int)qt);
    const ad_quant_t oq = {quant ? (int)qt : 0, quant ? (char *)fuse->quant_dst : NULL, quant ? fuse->quant_stride : 0};
    bool quantized = false;
    if (kv_type == GUILD_TYPE_F16)
        attn_decode_dispatch<__half>(head_dim, out, q, k_cache, v_cache, n_tok, kv0, kv0_dev, n_head, group, scale,
                                     window, sinks, (float *)scratch, grid_split, split_cap, per_head, done, oq, sr,
                                     &quantized, s);
    else
        attn_decode_dispatch<float>(head_dim, out, q, k_cache, v_cache, n_tok, kv0, kv0_dev, n_head, group, scale,
                                    window, sinks, (float *)scratch, grid_split, split_cap, per_head, done, oq, sr,
                                    &quantized, s);
    if (cuda_launch_check("attention_decode", err) < 0)
        return -1;
    /* asked for and not done in the launch: cuda_quantize's */
    return oq.qt && !quantized ? cuda_quantize(qt, out, (int64_t)n_head * head_dim, oq.dst, oq.stride,
                                               (int64_t)n_head * head_dim, n_tok, s, err)
                               : 0;
}

extern "C" int cuda_attention_decode(float *out, const float *q, guild_type_t kv_type, const void *k_cache,
                                     const void *v_cache, int32_t n_tok, int32_t kv0, int32_t n_head,
                                     int32_t n_head_kv, int32_t head_dim, float scale, const cuda_attn_ext_t *ext,
                                     void *scratch, size_t scratch_bytes, cudaStream_t s, guild_err_t *err)
{
    return attention_decode(out, q, kv_type, k_cache, v_cache, n_tok, kv0, NULL, n_head, n_head_kv, head_dim, scale,
                            ext, scratch, scratch_bytes, false, NULL, seq_rows_none, s, err);
}

extern "C" int cuda_attention_decode_per_head(float *out, const float *q, guild_type_t kv_type, const void *k_cache,
                                              const void *v_cache, int32_t n_tok, int32_t kv0, int32_t n_head,
                                              int32_t n_head_kv, int32_t head_dim, float scale,
                                              const cuda_attn_ext_t *ext, void *scratch, size_t scratch_bytes,
                                              cudaStream_t s, guild_err_t *err)
{
    return attention_decode(out, q, kv_type, k_cache, v_cache, n_tok, kv0, NULL, n_head, n_head_kv, head_dim, scale,
                            ext, scratch, scratch_bytes, true, NULL, seq_rows_none, s, err);
}

extern "C" int cuda_attention_decode_dyn(float *out, const float *q, guild_type_t kv_type, const void *k_cache,
                                         const void *v_cache, int32_t n_tok, const int32_t *kv0, int32_t kv0_max,
                                         int32_t n_head, int32_t n_head_kv, int32_t head_dim, float scale,
                                         const cuda_attn_ext_t *ext, void *scratch, size_t scratch_bytes,
                                         const cuda_attn_fuse_t *fuse, cudaStream_t s, guild_err_t *err)
{
    return attention_decode(out, q, kv_type, k_cache, v_cache, n_tok, kv0_max, kv0, n_head, n_head_kv, head_dim, scale,
                            ext, scratch, scratch_bytes, false, fuse, seq_rows_none, s, err);
}

extern "C" int cuda_attention_decode_seqs(float *out, const float *q, guild_type_t kv_type, const void *k_cache,
                                          const void *v_cache, const cuda_seq_rows_t *rows, int32_t n_ctx,
                                          int32_t n_head, int32_t n_head_kv, int32_t head_dim, float scale,
                                          const cuda_attn_ext_t *ext, void *scratch, size_t scratch_bytes,
                                          const cuda_attn_fuse_t *fuse, cudaStream_t s, guild_err_t *err)
{
    if (!rows || rows->n < 1 || rows->n > CUDA_SEQ_ROWS || !rows->len || rows->n > n_ctx)
        return guild_err_set(err, "cuda: attention: a row table of %d rows (1 to %d)", rows ? rows->n : 0,
                             CUDA_SEQ_ROWS);
    /* the grid as a group's own launch sizes it (cuda_attention_decode_dyn with kv0_max = n_ctx - its rows): for
     * n_ctx keys */
    return attention_decode(out, q, kv_type, k_cache, v_cache, rows->n, n_ctx - rows->n, NULL, n_head, n_head_kv,
                            head_dim, scale, ext, scratch, scratch_bytes, false, fuse, *rows, s, err);
}
