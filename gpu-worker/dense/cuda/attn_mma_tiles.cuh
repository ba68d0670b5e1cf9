/* gpu-worker/dense/cuda/attn_mma_tiles.cuh — the device side shared by the tensor-core attention kernels
 * (attn_prefill_mma.cu, mla_attention_mma.cu): cp.async copies into shared memory, ldmatrix and mma.sync
 * m16n8k16, and the steps of a key tile both take alike: a k-step of the scores, the online softmax's update
 * and P V. The fragment layouts and the per-lane arithmetic the host tests emulate: attn_prefill_mma.cuh.
 */
#ifndef GUILD_GPU_WORKER_CUDA_ATTN_MMA_TILES_CUH
#define GUILD_GPU_WORKER_CUDA_ATTN_MMA_TILES_CUH

#include <cuda_fp16.h>

#include "gpu-worker/dense/cuda/attn_prefill_mma.cuh"
#include "gpu-worker/dense/cuda/cuda_common.cuh"

static __device__ __forceinline__ uint32_t smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16 bytes global -> shared, asynchronous; zero-filled when !in (src is then not read). */
static __device__ __forceinline__ void cp_async16(void *dst, const void *src, bool in)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(in ? 16 : 0));
}

static __device__ __forceinline__ void cp_async_commit(void)
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int N>
static __device__ __forceinline__ void cp_async_wait(void)
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* Four 8x8 b16 matrices; lanes 8i .. 8i+7 give the row addresses of matrix i, register i receives lane's
 * (row lane/4, columns 2(lane%4), +1) of matrix i; with .trans, (rows 2(lane%4), +1, column lane/4). */
static __device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const __half *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

static __device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const __half *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

/* d += a b: A 16x16 row-major fragment, B 16x8 column fragment, D 16x8 f32 (PTX ISA fragment layouts). */
static __device__ __forceinline__ void mma_f16(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* The largest and the sum of x over the four lanes of a quad (a fragment row's lanes), in lane-xor order 1, 2. */
static __device__ __forceinline__ float am_quad_max(float x)
{
    x = fmaxf(x, __shfl_xor_sync(FULL_MASK, x, 1));
    x = fmaxf(x, __shfl_xor_sync(FULL_MASK, x, 2));
    return x;
}

static __device__ __forceinline__ float am_quad_sum(float x)
{
    x = x + __shfl_xor_sync(FULL_MASK, x, 1);
    x = x + __shfl_xor_sync(FULL_MASK, x, 2);
    return x;
}

/* The split A fragments of Q (am_q_frags) of fragment rows q0 (g) and q1 (g+8), each pointing at its row's element
 * 2t (rows not ok: zeros), each row scaled into f16's normal range by a power of two (am_row_exponent); rs0, rs1:
 * the rows' score scales, scale times that power. */
template <int HD>
static __device__ __forceinline__ void am_q_split(const float *q0, const float *q1, bool ok0, bool ok1, float scale,
                                                  uint32_t (&qh)[HD / 16][4], uint32_t (&ql)[HD / 16][4], float &rs0,
                                                  float &rs1)
{
    float mx0, mx1;
    am_q_absmax<HD>(q0, q1, ok0, ok1, &mx0, &mx1);
    mx0 = am_quad_max(mx0);
    mx1 = am_quad_max(mx1);
    const int e0 = am_row_exponent(mx0), e1 = am_row_exponent(mx1);
    rs0 = scalbnf(scale, e0);
    rs1 = scalbnf(scale, e1);
    asm volatile("" ::: "memory"); /* reload q below: not the first pass's HD / 2 values kept live */
    am_q_frags<HD>(q0, q1, ok0, ok1, scalbnf(1.0f, -e0), scalbnf(1.0f, -e1), qh, ql);
}

/* Zeros in N accumulator fragments. */
template <int N>
static __device__ __forceinline__ void am_zero(float (&a)[N][4])
{
#pragma unroll
    for (int nt = 0; nt < N; nt++)
        a[nt][0] = a[nt][1] = a[nt][2] = a[nt][3] = 0.0f;
}

/* k-step kk of the scores S = Q K^T of a key tile: s[NS] (NS score n-tiles of 8 keys) += the split A fragments
 * (ah + al) times the K rows of shared tile ks (row stride ld halves), read untransposed. */
template <int NS>
static __device__ __forceinline__ void am_scores_kstep(float (&s)[NS][4], const uint32_t ah[4], const uint32_t al[4],
                                                       const __half *ks, int lane, int kk, int ld)
{
#pragma unroll
    for (int np = 0; np < NS / 2; np++) {
        uint32_t b[4];
        ldmatrix_x4(b, ks + am_k_ldsm_offset(lane, np, kk, ld));
        mma_f16(s[2 * np], ah, b[0], b[1]);
        mma_f16(s[2 * np], al, b[0], b[1]);
        mma_f16(s[2 * np + 1], ah, b[2], b[3]);
        mma_f16(s[2 * np + 1], al, b[2], b[3]);
    }
}

/* The online softmax over a key tile's scores s (scaled and masked; mx0, mx1: the running maxima m0, m1 and this
 * lane's scores of rows g and g+8): the rows' new maxima over the quad, the factors c0, c1 that rescale the
 * running output and sums, P as the split A fragments ph, pl (keys 16kk .. 16kk+15, times AM_PSCALE) and the
 * running sums l0, l1 rescaled plus the tile's. The tile's sums are added to l as one term each, not NS * 2
 * single terms: an f32 sum of thousands of terms to a growing total would drift past the tolerance at long
 * contexts. A row that has seen no key yet (a sliding window, a split or tile past its position) keeps -inf as
 * its maximum: its exponentials then take 0 as the maximum (its scores are -inf, its terms 0; -inf - -inf would
 * be NaN) and its state stays as it is. Finite maxima take the same path as before. */
template <int NS>
static __device__ __forceinline__ void am_softmax_tile(const float (&s)[NS][4], float mx0, float mx1, float &m0,
                                                       float &m1, float &l0, float &l1, float &c0, float &c1,
                                                       uint32_t (&ph)[NS / 2][4], uint32_t (&pl)[NS / 2][4])
{
    mx0 = am_quad_max(mx0);
    mx1 = am_quad_max(mx1);
    c0 = mx0 == -INFINITY ? 1.0f : expf(m0 - mx0);
    c1 = mx1 == -INFINITY ? 1.0f : expf(m1 - mx1);
    m0 = mx0;
    m1 = mx1;
    const float e0 = mx0 == -INFINITY ? 0.0f : mx0, e1 = mx1 == -INFINITY ? 0.0f : mx1;
    float lt0 = 0.0f, lt1 = 0.0f;
#pragma unroll
    for (int kk = 0; kk < NS / 2; kk++)
        am_p_frags(s[2 * kk], s[2 * kk + 1], e0, e1, ph[kk], pl[kk], &lt0, &lt1);
    l0 = l0 * c0 + lt0;
    l1 = l1 * c1 + lt1;
}

/* O = O c + P V for output tiles o[2dp], o[2dp+1] (rows g: c0, g+8: c1), the V columns 16 dcol .. 16 dcol + 15
 * of shared tile vs (row stride ld halves) read transposed. The tile's products go to a fresh accumulator (KT
 * k-steps) added to O in f32: the tensor cores round their f32 sums toward zero, and hundreds of steps on the
 * running O would bias it past the tolerance at long contexts. */
template <int N, int KT>
static __device__ __forceinline__ void am_pv_tile(float (&o)[N][4], int dp, const uint32_t (&ph)[KT][4],
                                                  const uint32_t (&pl)[KT][4], const __half *vs, int lane, int dcol,
                                                  int ld, float c0, float c1)
{
    float t[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int kk = 0; kk < KT; kk++) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, vs + am_v_ldsm_offset(lane, kk, dcol, ld));
        mma_f16(t[0], ph[kk], b[0], b[1]);
        mma_f16(t[0], pl[kk], b[0], b[1]);
        mma_f16(t[1], ph[kk], b[2], b[3]);
        mma_f16(t[1], pl[kk], b[2], b[3]);
    }
#pragma unroll
    for (int u = 0; u < 2; u++) {
        float *ou = o[2 * dp + u];
        ou[0] = ou[0] * c0 + t[u][0];
        ou[1] = ou[1] * c0 + t[u][1];
        ou[2] = ou[2] * c1 + t[u][2];
        ou[3] = ou[3] * c1 + t[u][3];
    }
}

/* A tile's scores s (keys k0 + 8nt + 2t4 and + 1; rows g and g+8 of the warp, at positions pos0 and pos1) scaled
 * by their row's rs0, rs1, and masked to -inf where a key is past its row's position (only when diag: the tile
 * reaches past the warp's first query) or, with a sliding window, before its row's first key lo0, lo1 (only when
 * early: the tile begins before its last query's window); the rows' maxima over the tile folded into mx0, mx1. */
template <int NS>
static __device__ __forceinline__ void am_mask_tile(float (&s)[NS][4], int k0, int t4, bool diag, bool early, int pos0,
                                                    int pos1, int lo0, int lo1, float rs0, float rs1, float &mx0,
                                                    float &mx1)
{
#pragma unroll
    for (int nt = 0; nt < NS; nt++)
#pragma unroll
        for (int c = 0; c < 2; c++) {
            const int j = k0 + 8 * nt + 2 * t4 + c;
            s[nt][c] = (diag && j > pos0) || (early && j < lo0) ? -INFINITY : s[nt][c] * rs0;
            s[nt][2 + c] = (diag && j > pos1) || (early && j < lo1) ? -INFINITY : s[nt][2 + c] * rs1;
            mx0 = fmaxf(mx0, s[nt][c]);
            mx1 = fmaxf(mx1, s[nt][2 + c]);
        }
}

/* A fragment row's softmax denominator: this lane's running sum l summed over the quad, in P's scale (exact:
 * AM_PSCALE is a power of two). */
static __device__ __forceinline__ float am_row_sum(float l)
{
    l = am_quad_sum(l);
    return l * AM_PSCALE;
}

/* The end of a fragment row pair's softmax: the denominators l0, l1 (this lane's running sums, am_row_sum) and,
 * with sinks (NULL or [n_head]: head h's), the sink joining each row's softmax (in P's scale) and weighing no
 * value: f0, f1 the output's rescaling (1 without). m0, m1: the rows' running maxima. */
static __device__ __forceinline__ void am_rows_end(float &l0, float &l1, float m0, float m1, const float *sinks, int h,
                                                   float &f0, float &f1)
{
    l0 = am_row_sum(l0);
    l1 = am_row_sum(l1);
    f0 = 1.0f;
    f1 = 1.0f;
    if (sinks) {
        const float sk = sinks[h], ms0 = fmaxf(m0, sk), ms1 = fmaxf(m1, sk);
        f0 = expf(m0 - ms0);
        f1 = expf(m1 - ms1);
        l0 = l0 * f0 + AM_PSCALE * expf(sk - ms0);
        l1 = l1 * f1 + AM_PSCALE * expf(sk - ms1);
    }
}

/* The output fragments o (rows g and g+8 of the warp: the block's rows r0, r1; dims 8nt + 2t4 and + 1) over their
 * rows' denominators (am_rows_end; with a sink, times its rescaling) into out's rows t0 + r0, t0 + r1 of head h
 * ([n_tok][n_head][HD]), each when below the block's nq rows. */
template <int HD, int NO>
static __device__ __forceinline__ void am_store_rows(float *out, const float (&o)[NO][4], int t0, int r0, int r1,
                                                     int nq, int n_head, int h, int t4, bool sink, float f0, float f1,
                                                     float l0, float l1)
{
    if (r0 < nq) {
        float *o0 = out + ((int64_t)(t0 + r0) * n_head + h) * HD + 2 * t4;
#pragma unroll
        for (int nt = 0; nt < NO; nt++)
            *(float2 *)(o0 + 8 * nt) = sink ? make_float2(o[nt][0] * f0 / l0, o[nt][1] * f0 / l0)
                                            : make_float2(o[nt][0] / l0, o[nt][1] / l0);
    }
    if (r1 < nq) {
        float *o1 = out + ((int64_t)(t0 + r1) * n_head + h) * HD + 2 * t4;
#pragma unroll
        for (int nt = 0; nt < NO; nt++)
            *(float2 *)(o1 + 8 * nt) = sink ? make_float2(o[nt][2] * f1 / l1, o[nt][3] * f1 / l1)
                                            : make_float2(o[nt][2] / l1, o[nt][3] / l1);
    }
}

#endif
