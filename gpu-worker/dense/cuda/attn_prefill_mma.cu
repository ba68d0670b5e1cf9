/* cuda_attention_prefill_mma: causal prefill attention on tensor cores (F16 cache, head dimension 64 or 128).
 *
 * Flash attention 2. Grid (query tile of AM_BQ = 64 rows, query head), the tiles with the most keys first. A
 * block of 4 warps owns the tile's rows, warp w rows 16w .. 16w+15, and walks the keys in tiles of AM_BK = 64
 * positions, copied by cp.async from the cache into shared memory (two stages: the next tile loads while this
 * one is computed). Per key tile each warp computes its 16 x 64 scores S = Q K^T and adds P V to its 16 x HD
 * output, both as mma.sync m16n8k16 (f16 operands, f32 accumulation); the online softmax (row max, expf, row
 * sums) is f32 arithmetic on the score fragments, whose layout is also that of the P operand.
 *
 * Precision: K and V are F16 in the cache, exact operands. Q and P are f32; a plain f16 cast would cost
 * 2^-11 relative, so each is split x = hi + lo (hi = f16(x), lo = f16(x - hi)) and multiplied twice into the
 * same accumulator: ~2^-22 relative, within the FP32 kernel's tolerance. lo must stay clear of f16's
 * subnormals (spacing 2^-24) and hi of its overflow (65504), so the operands are first scaled by powers of two
 * (exact): each query row so that its largest |q| is in [2^13, 2^14) (its scores scaled back in f32), and P by
 * AM_PSCALE (the row sums stay unscaled; the output is divided by both). Infinities and NaNs propagate.
 * Long contexts: each key tile's P V and row sums are summed apart and then added to the running output and
 * sums, so no f32 accumulator takes more than a tile's terms directly (the tensor cores' f32 sums round
 * toward zero; a float64 model of the kernel put the per-step bias past the tolerance at 16384 keys).
 *
 * Keys after a query's position are masked (-inf, probability 0); key tiles past the block's last query are
 * not visited, and a warp skips the tiles past its own last query. Cache rows past the last query are
 * zero-filled, never read: the cache may end there. With a sliding window, keys before a query's window are
 * masked too, key tiles before the block's first window are not visited and a warp skips those before its
 * first row's window; a row may then meet a tile with no key it sees (its maximum stays -inf and its terms
 * are zeros). Sinks join each row's softmax at the end.
 */
#include <cuda_fp16.h>

#include "gpu-worker/dense/cuda/attn_mma_tiles.cuh"

template <int HD>
static __global__ void __launch_bounds__(AM_WARPS *WARP_SIZE, 2)
    attn_prefill_mma_kernel(float *__restrict__ out, const float *__restrict__ q, const __half *__restrict__ kc,
                            const __half *__restrict__ vc, int n_tok, int kv0, int n_head, int group, float scale,
                            int window, const float *__restrict__ sinks)
{
    constexpr int KS = HD / 16;   /* k-steps of the score mma (head dims) */
    constexpr int NO = HD / 8;    /* n-tiles of the output (head dims) */
    constexpr int NS = AM_BK / 8; /* n-tiles of the scores (keys) */
    constexpr int LD = HD + 8;    /* shared row stride in halves: the 16-byte pad makes ldmatrix conflict-free */
    constexpr int CH = HD / 8;    /* 16-byte chunks per cache row */
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __half *sm = (__half *)smem_raw; /* [2 stages][K, V][AM_BK][LD] */

    const int tile = (int)(gridDim.x - 1 - blockIdx.x), h = (int)blockIdx.y;
    const int warp = (int)threadIdx.x / WARP_SIZE, lane = (int)threadIdx.x % WARP_SIZE;
    const int g = lane >> 2, t4 = lane & 3; /* fragment row and column pair */
    const int hkv = h / group, kvd = (n_head / group) * HD;
    const int t0 = tile * AM_BQ;
    const int nq = min(AM_BQ, n_tok - t0);
    const int last_pos = kv0 + t0 + nq - 1; /* the block's last query sees keys 0 .. last_pos */
    const int n_kt = last_pos / AM_BK + 1;
    const int r0 = warp * 16 + g, r1 = r0 + 8; /* block rows of this lane's fragment rows */
    const int pos0 = kv0 + t0 + r0, pos1 = pos0 + 8;
    const int wfirst = kv0 + t0 + warp * 16;      /* the warp's first query position */
    const int wlast = min(wfirst + 15, last_pos); /* and its last valid one */
    const bool active = warp * 16 < nq;           /* warp-uniform */
    /* sliding window: the first key each fragment row sees, the warp's first (its first row's) and the block's */
    const int lo0 = window > 0 && pos0 + 1 > window ? pos0 + 1 - window : 0;
    const int lo1 = window > 0 && pos1 + 1 > window ? pos1 + 1 - window : 0;
    const int wlo = window > 0 && wfirst + 1 > window ? wfirst + 1 - window : 0;
    const int blo = window > 0 && kv0 + t0 + 1 > window ? kv0 + t0 + 1 - window : 0;
    const int kt_first = blo / AM_BK;

    /* Q fragments, split, each row scaled into f16's normal range (rows past the batch are zeros) */
    uint32_t qh[KS][4], ql[KS][4];
    float rs0, rs1; /* score scale of each row: scale * 2^e */
    {
        const bool ok0 = r0 < nq, ok1 = r1 < nq;
        const float *q0 = q + ((int64_t)(t0 + (ok0 ? r0 : 0)) * n_head + h) * HD + 2 * t4;
        const float *q1 = q + ((int64_t)(t0 + (ok1 ? r1 : 0)) * n_head + h) * HD + 2 * t4;
        am_q_split<HD>(q0, q1, ok0, ok1, scale, qh, ql, rs0, rs1);
    }

    float o[NO][4]; /* output fragments: (row g, dims 8nt + 2t4, +1), (row g+8, same) */
    am_zero(o);
    float m0 = -INFINITY, m1 = -INFINITY; /* running row maxima */
    float l0 = 0.0f, l1 = 0.0f;           /* this lane's part of the running row sums */

    /* this thread's 16-byte chunks of a tile: rows lr, lr + RSTEP, ..., column lc; the cache row of a key is
     * kvd halves after the previous one */
    constexpr int RSTEP = AM_WARPS * WARP_SIZE / CH;
    static_assert(AM_WARPS * WARP_SIZE % CH == 0 && AM_BK % RSTEP == 0, "whole rows per pass of the block");
    const int lr = (int)threadIdx.x / CH, lc = ((int)threadIdx.x % CH) * 8;
    const __half *kc_t = kc + (int64_t)hkv * HD + lc, *vc_t = vc + (int64_t)hkv * HD + lc;
    auto load_tile = [&](int kt) {
        __half *ks = sm + (kt & 1) * 2 * AM_BK * LD + lr * LD + lc, *vs = ks + AM_BK * LD;
        const int j0 = kt * AM_BK + lr; /* the key of this thread's first row */
#pragma unroll
        for (int u = 0; u < AM_BK / RSTEP; u++) {
            const int j = j0 + u * RSTEP;
            const bool in = j <= last_pos;
            const int64_t off = (int64_t)(in ? j : 0) * kvd;
            cp_async16(ks + u * RSTEP * LD, kc_t + off, in);
            cp_async16(vs + u * RSTEP * LD, vc_t + off, in);
        }
        cp_async_commit();
    };

    load_tile(kt_first);
    for (int kt = kt_first; kt < n_kt; kt++) {
        if (kt + 1 < n_kt) {
            load_tile(kt + 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads(); /* tile kt is in shared memory for every warp */
        const int k0 = kt * AM_BK;
        if (active && k0 <= wlast && k0 + AM_BK > wlo) {
            const __half *ks = sm + (kt & 1) * 2 * AM_BK * LD, *vs = ks + AM_BK * LD;

            /* S = Q K^T: B fragment of keys 8nt .. (n) and dims 16kk .. (k) is K rows read untransposed */
            float s[NS][4];
            am_zero(s);
#pragma unroll
            for (int kk = 0; kk < KS; kk++)
                am_scores_kstep(s, qh[kk], ql[kk], ks, lane, kk, LD);

            /* scale, mask (only where the tile reaches past the warp's first query, or, sliding, begins before
             * its last query's window), row maxima */
            const bool diag = k0 + AM_BK - 1 > wfirst;
            const bool early = window > 0 && k0 < (wlast + 1 > window ? wlast + 1 - window : 0);
            float mx0 = m0, mx1 = m1;
            am_mask_tile(s, k0, t4, diag, early, pos0, pos1, lo0, lo1, rs0, rs1, mx0, mx1);
            /* Without a window key 0 is in the first tile every warp visits, so the maxima are finite from then
             * on; with one, a row may have seen no key yet (am_softmax_tile). P, split: the score tiles 2kk,
             * 2kk+1 are the A fragment of keys 16kk .. 16kk+15. */
            uint32_t ph[AM_BK / 16][4], pl[AM_BK / 16][4];
            float c0, c1;
            am_softmax_tile(s, mx0, mx1, m0, m1, l0, l1, c0, c1, ph, pl);

            /* O = O c + P V, V rows read transposed */
#pragma unroll
            for (int dp = 0; dp < NO / 2; dp++)
                am_pv_tile(o, dp, ph, pl, vs, lane, dp, LD, c0, c1);
        }
        __syncthreads(); /* every warp is done with tile kt's stage before tile kt+2 loads into it */
    }

    float f0, f1; /* the sink's rescaling of the output */
    am_rows_end(l0, l1, m0, m1, sinks, h, f0, f1);
    am_store_rows<HD, NO>(out, o, t0, r0, r1, nq, n_head, h, t4, sinks != NULL, f0, f1, l0, l1);
}

template <int HD>
static cudaError_t attn_prefill_mma_launch(float *out, const float *q, const __half *kc, const __half *vc, int n_tok,
                                           int kv0, int n_head, int group, float scale, int window, const float *sinks,
                                           cudaStream_t s)
{
    const size_t smem = (size_t)2 * 2 * AM_BK * (HD + 8) * sizeof(__half);
    cudaError_t e = cudaFuncSetAttribute(attn_prefill_mma_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)smem);
    if (e != cudaSuccess)
        return e;
    const dim3 grid((unsigned)((n_tok + AM_BQ - 1) / AM_BQ), (unsigned)n_head);
    attn_prefill_mma_kernel<HD><<<grid, AM_WARPS * WARP_SIZE, smem, s>>>(out, q, kc, vc, n_tok, kv0, n_head, group,
                                                                         scale, window, sinks);
    return cudaSuccess;
}

extern "C" bool cuda_attention_prefill_mma_takes(guild_type_t kv_type, int32_t head_dim, const float *out,
                                                 const float *q, const void *k_cache, const void *v_cache)
{
    /* cp.async copies 16 bytes, Q and the output move as float2 */
    return kv_type == GUILD_TYPE_F16 && (head_dim == 64 || head_dim == 128) && (uintptr_t)k_cache % 16 == 0 &&
           (uintptr_t)v_cache % 16 == 0 && (uintptr_t)q % 8 == 0 && (uintptr_t)out % 8 == 0;
}

extern "C" int cuda_attention_prefill_mma(float *out, const float *q, guild_type_t kv_type, const void *k_cache,
                                          const void *v_cache, int32_t n_tok, int32_t kv0, int32_t n_head,
                                          int32_t n_head_kv, int32_t head_dim, float scale,
                                          const cuda_attn_ext_t *ext, cudaStream_t s, guild_err_t *err)
{
    const int window = ext && ext->window > 0 ? ext->window : 0;
    const float *sinks = ext ? ext->sinks : NULL;
    if (n_tok <= 0)
        return 0;
    if (n_head_kv <= 0 || n_head % n_head_kv || n_head > 65535)
        return guild_err_set(err, "cuda: attention (mma): %d query heads over %d KV heads", n_head, n_head_kv);
    if (!cuda_attention_prefill_mma_takes(kv_type, head_dim, out, q, k_cache, v_cache))
        return guild_err_set(err,
                             "cuda: attention (mma): needs an f16 cache (type %d), head dimension 64 or 128 (%d), "
                             "16-byte aligned caches and 8-byte aligned q/out",
                             (int)kv_type, head_dim);
    const int group = n_head / n_head_kv;
    const __half *kc = (const __half *)k_cache, *vc = (const __half *)v_cache;
    const cudaError_t e =
        head_dim == 64 ? attn_prefill_mma_launch<64>(out, q, kc, vc, n_tok, kv0, n_head, group, scale, window, sinks, s)
                       : attn_prefill_mma_launch<128>(out, q, kc, vc, n_tok, kv0, n_head, group, scale, window, sinks,
                                                      s);
    if (e != cudaSuccess)
        return guild_err_set(err, "cuda: attention_prefill (mma): %s", cudaGetErrorString(e));
    return cuda_launch_check("attention_prefill (mma)", err);
}
