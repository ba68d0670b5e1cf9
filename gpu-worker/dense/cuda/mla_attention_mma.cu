/* cuda_mla_attention_mma: multi-head latent attention's absorbed form on tensor cores (F16 cache; latents of 512
 * with 64 rotated dims, DeepSeek-V2/V3/R1 and Kimi-K2, or 64 with 32, the test models).
 *
 * Absorbed MLA is multi-query attention: every head of every row scores the same cache rows [latent | rotated
 * key] (RR wide) and weighs the same latents (the first R of them). A block takes ML_ROWS = 16 consecutive
 * query rows of qk, flattened (row t, head h) -> t * n_head + h, so a block is 16 heads of one row (or, with
 * fewer heads, the heads of several rows, each masked at its own position), and walks the cache in tiles of
 * ML_BK = 64 positions copied by cp.async into shared memory (two stages: the next tile loads while this one is
 * computed). Per tile:
 *   scores: the 4 warps split the RR dims (k-steps), each computes a 16 x 64 partial S = Q K^T with
 *           mma.sync m16n8k16 and writes it to shared memory; every warp then sums the four partials (in warp
 *           order, so every warp holds the same bits), scales, masks (key j > the row's position) and runs the
 *           online softmax on its fragments (the same code as attn_prefill_mma.cu: attn_mma_tiles.cuh);
 *   values: each warp adds P V for its quarter of the R latent columns (V is the cache tile read transposed).
 * Precision as attn_prefill_mma.cu: Q and P split hi + lo into f16 pairs (Q rows scaled by powers of two into
 * f16's range first), the cache F16 exact, f32 accumulation, each tile's P V summed apart and added to the
 * running output; ~2^-22 relative per product, the CPU's result within float rounding.
 *
 * Splits (decode, batches of at most CUDA_MLA_SPLIT_ROWS rows): a row's positions are cut into splits of a
 * length fixed by the context size (mla_split_len), each a block writing its unnormalized output, maximum and
 * sum; mla_combine_kernel merges a row's splits in order. The plan depends only on the row's position and
 * n_ctx, and masked keys add exact zeros, so a row's result does not depend on the other rows of its batch.
 * Larger batches run unsplit (one block per 16 query rows over all their positions). kv0 is read on the
 * device (graphs): the grid is sized for n_ctx and blocks past their rows' last position exit.
 */
#include <cuda_fp16.h>

#include "gpu-worker/dense/cuda/attn_mma_tiles.cuh"

#define ML_WARPS 4
#define ML_THREADS (ML_WARPS * WARP_SIZE)
#define ML_ROWS 16          /* query rows per block: the mma's M */
#define ML_BK AM_BK         /* positions per tile */
#define ML_LDS (ML_BK + 8)  /* row stride of a score partial in floats: float2 stores conflict-free */
#define ML_SPLITS 16        /* a row's positions in at most this many splits */
#define ML_SPLIT_MIN 256    /* positions per split at least */

/* Positions per split for a context of n_ctx: at most ML_SPLITS splits, whole tiles, at least ML_SPLIT_MIN. */
static int mla_split_len(int32_t n_ctx)
{
    int32_t s = (n_ctx + ML_SPLITS - 1) / ML_SPLITS;
    s = (s + ML_BK - 1) / ML_BK * ML_BK;
    return s < ML_SPLIT_MIN ? ML_SPLIT_MIN : s;
}

template <int R, int RR>
static constexpr size_t mla_smem_bytes(void)
{
    return (size_t)(2 * ML_ROWS + 2 * ML_BK) * (RR + 8) * sizeof(__half) +
           (size_t)ML_WARPS * ML_ROWS * ML_LDS * sizeof(float) + ML_ROWS * sizeof(int);
}

/* qk: [n_rows][RR] (n_rows = n_tok * n_head); cache: [n_ctx][RR]; row t's query rows see positions 0 .. kv0 + t.
 * split 0: lat [n_rows][R] normalized; else part: [gridDim.y][n_rows][R] outputs, then [gridDim.y][n_rows][2]
 * (maximum, sum) of split blockIdx.y = positions [split * y, split * (y + 1)). */
template <int R, int RR>
static __global__ void __launch_bounds__(ML_THREADS, 1)
    mla_mma_kernel(float *__restrict__ lat, float *__restrict__ part, const float *__restrict__ qk,
                   const __half *__restrict__ cache, const int32_t *__restrict__ kv0p, int n_rows, int n_head,
                   float scale, int split)
{
    constexpr int KS = RR / 16;                 /* k-steps of the scores */
    constexpr int LD = RR + 8;                  /* shared row stride in halves: ldmatrix conflict-free */
    constexpr int CH = RR / 8;                  /* 16-byte chunks per cache row */
    constexpr int NW = R / (8 * ML_WARPS);      /* output n-tiles per warp */
    constexpr int NS = ML_BK / 8;               /* score n-tiles */
    static_assert(RR % 16 == 0 && NW % 2 == 0 && R <= RR, "latent and row widths");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __half *qh_s = (__half *)smem_raw;                    /* [ML_ROWS][LD] Q hi */
    __half *ql_s = qh_s + ML_ROWS * LD;                   /* [ML_ROWS][LD] Q lo */
    __half *kv_s = ql_s + ML_ROWS * LD;                   /* [2 stages][ML_BK][LD] cache rows */
    float *sp_s = (float *)(kv_s + 2 * ML_BK * LD);       /* [ML_WARPS][ML_ROWS][ML_LDS] score partials */
    int *e_s = (int *)(sp_s + ML_WARPS * ML_ROWS * ML_LDS); /* [ML_ROWS] row exponents */

    const int tile = (int)(gridDim.x - 1 - blockIdx.x); /* the rows with the most positions first */
    const int warp = (int)threadIdx.x / WARP_SIZE, lane = (int)threadIdx.x % WARP_SIZE;
    const int g = lane >> 2, t4 = lane & 3;
    const int q0 = tile * ML_ROWS, nq = min(ML_ROWS, n_rows - q0);
    const int kv0 = *kv0p;
    const int last_pos = kv0 + (q0 + nq - 1) / n_head; /* the block's last row sees 0 .. last_pos */
    int js = 0, je = last_pos + 1;
    if (split > 0) {
        js = (int)blockIdx.y * split;
        if (js > last_pos)
            return; /* no row of the block reaches this split: the combine does not read it */
        je = min(je, js + split);
    }
    /* this lane's fragment rows g and g+8 (rows past the batch: zeros, unmasked, never written) */
    const int pos0 = g < nq ? kv0 + (q0 + g) / n_head : last_pos;
    const int pos1 = g + 8 < nq ? kv0 + (q0 + g + 8) / n_head : last_pos;

    /* Q, split, each row scaled by 2^-e into f16's range (attn_prefill_mma.cuh: am_row_exponent) */
    for (int i = 0; i < ML_ROWS / ML_WARPS; i++) {
        const int r = warp * (ML_ROWS / ML_WARPS) + i;
        float mx = 0.0f;
        if (r < nq)
            for (int d = lane; d < RR; d += WARP_SIZE)
                mx = fmaxf(mx, fabsf(qk[(int64_t)(q0 + r) * RR + d]));
#pragma unroll
        for (int o = WARP_SIZE / 2; o > 0; o >>= 1)
            mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, o));
        if (lane == 0)
            e_s[r] = am_row_exponent(mx);
    }
    __syncthreads();
    for (int i = (int)threadIdx.x; i < ML_ROWS * (RR / 2); i += ML_THREADS) {
        const int r = i / (RR / 2), c = i % (RR / 2);
        float x0 = 0.0f, x1 = 0.0f;
        if (r < nq) {
            const float2 v = *(const float2 *)(qk + (int64_t)(q0 + r) * RR + 2 * c);
            const float f = scalbnf(1.0f, -e_s[r]);
            x0 = v.x * f;
            x1 = v.y * f;
        }
        uint32_t hi, lo;
        am_split_f16x2(x0, x1, &hi, &lo);
        *(uint32_t *)(qh_s + r * LD + 2 * c) = hi;
        *(uint32_t *)(ql_s + r * LD + 2 * c) = lo;
    }
    const float rs0 = scalbnf(scale, e_s[g]), rs1 = scalbnf(scale, e_s[g + 8]);

    float o[NW][4]; /* this warp's output columns: (row g, cols c0 + 8nt + 2t4, +1), (row g+8, same) */
    am_zero(o);
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;

    auto load_tile = [&](int kt) {
        __half *dst = kv_s + (kt & 1) * ML_BK * LD;
        for (int i = (int)threadIdx.x; i < ML_BK * CH; i += ML_THREADS) {
            const int row = i / CH, c = (i % CH) * 8;
            const int j = kt * ML_BK + row;
            const bool in = j <= last_pos; /* later rows may be stale or past the cache: zeros */
            cp_async16(dst + row * LD + c, cache + (int64_t)(in ? j : 0) * RR + c, in);
        }
        cp_async_commit();
    };

    const int kt0 = js / ML_BK, kt1 = (je - 1) / ML_BK;
    const int kb = warp * KS / ML_WARPS, ke = (warp + 1) * KS / ML_WARPS; /* this warp's score k-steps */
    load_tile(kt0);
    for (int kt = kt0; kt <= kt1; kt++) {
        if (kt < kt1) {
            load_tile(kt + 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads(); /* tile kt (and, the first time, Q) is in shared memory for every warp */
        const __half *ks = kv_s + (kt & 1) * ML_BK * LD;
        const int k0 = kt * ML_BK;

        /* this warp's partial scores over k-steps kb .. ke-1; A fragments read from the split Q rows */
        {
            float s[NS][4];
            am_zero(s);
            for (int kk = kb; kk < ke; kk++) {
                const int c = 16 * kk + 2 * t4;
                uint32_t ah[4], al[4];
                ah[0] = *(const uint32_t *)(qh_s + g * LD + c);
                ah[1] = *(const uint32_t *)(qh_s + (g + 8) * LD + c);
                ah[2] = *(const uint32_t *)(qh_s + g * LD + c + 8);
                ah[3] = *(const uint32_t *)(qh_s + (g + 8) * LD + c + 8);
                al[0] = *(const uint32_t *)(ql_s + g * LD + c);
                al[1] = *(const uint32_t *)(ql_s + (g + 8) * LD + c);
                al[2] = *(const uint32_t *)(ql_s + g * LD + c + 8);
                al[3] = *(const uint32_t *)(ql_s + (g + 8) * LD + c + 8);
                am_scores_kstep(s, ah, al, ks, lane, kk, LD);
            }
            float *sp = sp_s + warp * ML_ROWS * ML_LDS;
#pragma unroll
            for (int nt = 0; nt < NS; nt++) {
                *(float2 *)(sp + g * ML_LDS + 8 * nt + 2 * t4) = make_float2(s[nt][0], s[nt][1]);
                *(float2 *)(sp + (g + 8) * ML_LDS + 8 * nt + 2 * t4) = make_float2(s[nt][2], s[nt][3]);
            }
        }
        __syncthreads(); /* every warp's partial is written */

        /* the scores: the partials summed in warp order, scaled, masked; row maxima */
        float s[NS][4];
        float mx0 = m0, mx1 = m1;
#pragma unroll
        for (int nt = 0; nt < NS; nt++) {
            float2 a = *(const float2 *)(sp_s + g * ML_LDS + 8 * nt + 2 * t4);
            float2 b = *(const float2 *)(sp_s + (g + 8) * ML_LDS + 8 * nt + 2 * t4);
#pragma unroll
            for (int w = 1; w < ML_WARPS; w++) {
                const float2 pa = *(const float2 *)(sp_s + (w * ML_ROWS + g) * ML_LDS + 8 * nt + 2 * t4);
                const float2 pb = *(const float2 *)(sp_s + (w * ML_ROWS + g + 8) * ML_LDS + 8 * nt + 2 * t4);
                a.x = a.x + pa.x;
                a.y = a.y + pa.y;
                b.x = b.x + pb.x;
                b.y = b.y + pb.y;
            }
            const int j = k0 + 8 * nt + 2 * t4;
            s[nt][0] = j > pos0 ? -INFINITY : a.x * rs0;
            s[nt][1] = j + 1 > pos0 ? -INFINITY : a.y * rs0;
            s[nt][2] = j > pos1 ? -INFINITY : b.x * rs1;
            s[nt][3] = j + 1 > pos1 ? -INFINITY : b.y * rs1;
            mx0 = fmaxf(mx0, fmaxf(s[nt][0], s[nt][1]));
            mx1 = fmaxf(mx1, fmaxf(s[nt][2], s[nt][3]));
        }
        /* a row with no key yet (a split or tile past its position) keeps -inf (am_softmax_tile) */
        uint32_t ph[ML_BK / 16][4], pl[ML_BK / 16][4];
        float c0, c1;
        am_softmax_tile(s, mx0, mx1, m0, m1, l0, l1, c0, c1, ph, pl);

        /* O = O c + P V over this warp's latent columns (16-column groups warp * NW / 2 + dp) */
#pragma unroll
        for (int dp = 0; dp < NW / 2; dp++)
            am_pv_tile(o, dp, ph, pl, ks, lane, warp * (NW / 2) + dp, LD, c0, c1);
        __syncthreads(); /* every warp is done with the partials and with tile kt's stage */
    }

    l0 = am_row_sum(l0);
    l1 = am_row_sum(l1);
    const int col = warp * (R / ML_WARPS) + 2 * t4;
    if (split == 0) {
        if (g < nq) {
            float *out = lat + (int64_t)(q0 + g) * R + col;
#pragma unroll
            for (int nt = 0; nt < NW; nt++)
                *(float2 *)(out + 8 * nt) = make_float2(o[nt][0] / l0, o[nt][1] / l0);
        }
        if (g + 8 < nq) {
            float *out = lat + (int64_t)(q0 + g + 8) * R + col;
#pragma unroll
            for (int nt = 0; nt < NW; nt++)
                *(float2 *)(out + 8 * nt) = make_float2(o[nt][2] / l1, o[nt][3] / l1);
        }
        return;
    }
    const int64_t prow = (int64_t)blockIdx.y * n_rows + q0; /* the split's row q0 */
    float *pml = part + (int64_t)gridDim.y * n_rows * R + 2 * prow;
    if (g < nq) {
        float *out = part + (prow + g) * R + col;
#pragma unroll
        for (int nt = 0; nt < NW; nt++)
            *(float2 *)(out + 8 * nt) = make_float2(o[nt][0], o[nt][1]);
        if (warp == 0 && t4 == 0) {
            pml[2 * g] = m0;
            pml[2 * g + 1] = l0;
        }
    }
    if (g + 8 < nq) {
        float *out = part + (prow + g + 8) * R + col;
#pragma unroll
        for (int nt = 0; nt < NW; nt++)
            *(float2 *)(out + 8 * nt) = make_float2(o[nt][2], o[nt][3]);
        if (warp == 0 && t4 == 0) {
            pml[2 * (g + 8)] = m1;
            pml[2 * (g + 8) + 1] = l1;
        }
    }
}

/* One block per query row: the row's splits 0 .. ceil(n_pos / split) - 1 merged in order (each weighted by
 * exp(its maximum - the largest)); one split gives the unsplit kernel's bits (weight 1). */
static __global__ void mla_combine_kernel(float *__restrict__ lat, const float *__restrict__ part,
                                          const int32_t *__restrict__ kv0p, int n_rows, int n_head, int R,
                                          int n_split, int split)
{
    const int row = (int)blockIdx.x;
    const int n_pos = *kv0p + row / n_head + 1;
    const int ns = min((n_pos + split - 1) / split, n_split);
    const float *pml = part + (int64_t)n_split * n_rows * R;
    float M = -INFINITY;
    for (int k = 0; k < ns; k++)
        M = fmaxf(M, pml[2 * ((int64_t)k * n_rows + row)]);
    float L = 0.0f;
    for (int k = 0; k < ns; k++) {
        const float m = pml[2 * ((int64_t)k * n_rows + row)], l = pml[2 * ((int64_t)k * n_rows + row) + 1];
        L = L + expf(m - M) * l;
    }
    for (int d = (int)threadIdx.x; d < R; d += (int)blockDim.x) {
        float acc = 0.0f;
        for (int k = 0; k < ns; k++)
            acc = acc + expf(pml[2 * ((int64_t)k * n_rows + row)] - M) * part[((int64_t)k * n_rows + row) * R + d];
        lat[(int64_t)row * R + d] = acc / L;
    }
}

template <int R, int RR>
static cudaError_t mla_mma_launch(float *lat, float *part, const float *qk, const __half *cache, int n_rows,
                                  const int32_t *kv0, int n_head, float scale, int split, int n_split, cudaStream_t s)
{
    const size_t smem = mla_smem_bytes<R, RR>();
    cudaError_t e =
        cudaFuncSetAttribute(mla_mma_kernel<R, RR>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess)
        return e;
    const dim3 grid((unsigned)((n_rows + ML_ROWS - 1) / ML_ROWS), (unsigned)(split ? n_split : 1));
    mla_mma_kernel<R, RR><<<grid, ML_THREADS, smem, s>>>(lat, part, qk, cache, kv0, n_rows, n_head, scale, split);
    if (split)
        mla_combine_kernel<<<(unsigned)n_rows, 128, 0, s>>>(lat, part, kv0, n_rows, n_head, R, n_split, split);
    return cudaSuccess;
}

extern "C" size_t cuda_mla_attention_scratch(int32_t n_head, int32_t R, int32_t n_ctx)
{
    if (n_head <= 0 || R <= 0 || n_ctx <= 0)
        return 0;
    const int split = mla_split_len(n_ctx), n_split = (n_ctx + split - 1) / split;
    return (size_t)n_split * CUDA_MLA_SPLIT_ROWS * (size_t)n_head * ((size_t)R + 2) * sizeof(float);
}

extern "C" bool cuda_mla_attention_mma_takes(guild_type_t kv_type, int32_t R, int32_t RR, const float *lat,
                                             const float *qk, const void *cache)
{
    /* cp.async copies 16 bytes of a cache row, Q and the output move as float2 */
    return kv_type == GUILD_TYPE_F16 && ((R == 512 && RR == 576) || (R == 64 && RR == 96)) &&
           (uintptr_t)cache % 16 == 0 && (uintptr_t)qk % 8 == 0 && (uintptr_t)lat % 8 == 0;
}

extern "C" int cuda_mla_attention_mma(float *lat, const float *qk, const void *cache, int32_t n_tok,
                                      const int32_t *kv0, int32_t n_ctx, int32_t n_head, int32_t R, int32_t RR,
                                      float scale, void *scratch, size_t scratch_bytes, cudaStream_t s,
                                      guild_err_t *err)
{
    if (n_tok <= 0)
        return 0;
    if (n_head <= 0 || n_ctx <= 0 || (int64_t)n_tok * n_head > INT32_MAX / 2)
        return guild_err_set(err, "cuda: mla attention (mma): %d rows of %d heads, context %d", (int)n_tok,
                             (int)n_head, (int)n_ctx);
    if (!cuda_mla_attention_mma_takes(GUILD_TYPE_F16, R, RR, lat, qk, cache))
        return guild_err_set(err, "cuda: mla attention (mma): a latent of %d (row %d) or alignment not supported",
                             (int)R, (int)RR);
    const int n_rows = n_tok * n_head;
    const int split_len = mla_split_len(n_ctx), n_split = (n_ctx + split_len - 1) / split_len;
    /* split batches of the verify/decode size (a row's plan must not change with the batch); without scratch
     * every batch runs unsplit */
    const bool split = n_tok <= CUDA_MLA_SPLIT_ROWS && scratch;
    if (split && scratch_bytes < (size_t)n_split * (size_t)n_rows * ((size_t)R + 2) * sizeof(float))
        return guild_err_set(err, "cuda: mla attention (mma): %zu bytes of scratch for %d rows of %d heads, context %d",
                             scratch_bytes, (int)n_tok, (int)n_head, (int)n_ctx);
    const __half *c = (const __half *)cache;
    float *part = (float *)scratch;
    const cudaError_t e =
        R == 512 ? mla_mma_launch<512, 576>(lat, part, qk, c, n_rows, kv0, n_head, scale, split ? split_len : 0,
                                            n_split, s)
                 : mla_mma_launch<64, 96>(lat, part, qk, c, n_rows, kv0, n_head, scale, split ? split_len : 0,
                                          n_split, s);
    if (e != cudaSuccess)
        return guild_err_set(err, "cuda: mla attention (mma): %s", cudaGetErrorString(e));
    return cuda_launch_check("mla attention (mma)", err);
}
