/* gpu-worker/dense/cuda/attn_prefill_mma.cuh — the per-lane arithmetic and fragment addressing of the tensor-core
 * prefill attention kernel (attn_prefill_mma.cu), compiled for host and device so that
 * tests/cuda/check_cuda_attn_host can run a warp's fragments through host emulations of ldmatrix and mma.sync.
 *
 * Fragments of mma.sync.m16n8k16 (PTX ISA; g = lane / 4, t = lane % 4; a register holds two f16, the lower
 * column in the low half):
 *   A 16x16: a0 (row g, cols 2t, 2t+1), a1 (row g+8, same), a2 (row g, cols 2t+8, +9), a3 (row g+8, same)
 *   B 16x8:  b0 (rows 2t, 2t+1, col g), b1 (rows 2t+8, +9, col g)
 *   C 16x8:  c0, c1 (row g, cols 2t, 2t+1), c2, c3 (row g+8, same)
 * A warp's scores S (16 rows x AM_BK keys) are AM_BK / 8 C tiles; the C tiles 2kk and 2kk+1 are, element for
 * element, the A fragment of keys 16kk .. 16kk+15 for P V.
 */
#ifndef GUILD_GPU_WORKER_CUDA_ATTN_PREFILL_MMA_CUH
#define GUILD_GPU_WORKER_CUDA_ATTN_PREFILL_MMA_CUH

#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#define AM_WARPS 4
#define AM_BQ (AM_WARPS * 16) /* query rows per block: 16 per warp, the mma's M */
#define AM_BK 64              /* keys per tile */
#define AM_PSCALE 4096.0f     /* P operand scale: p <= 1 becomes <= 2^12, its lo part normal down to p ~ 2^-15 */

#define AM_HD __host__ __device__ __forceinline__

/* (x0, x1) = hi + lo, each an f16 pair (x0 in the low half). x - f16(x) is exact in f32. */
static AM_HD void am_split_f16x2(float x0, float x1, uint32_t *hi, uint32_t *lo)
{
    const __half h0 = __float2half_rn(x0), h1 = __float2half_rn(x1);
    const __half l0 = __float2half_rn(x0 - __half2float(h0)), l1 = __float2half_rn(x1 - __half2float(h1));
    *hi = (uint32_t)__half_as_ushort(h0) | (uint32_t)__half_as_ushort(h1) << 16;
    *lo = (uint32_t)__half_as_ushort(l0) | (uint32_t)__half_as_ushort(l1) << 16;
}

/* e such that a row of largest magnitude mx times 2^-e has its largest magnitude in [2^13, 2^14): hi well
 * within f16 range, lo normal for the row's large values. 0 for rows of zeros, infinities or NaNs; at least -64
 * (2^64 and scale * 2^-64 stay normal floats). */
static AM_HD int am_row_exponent(float mx)
{
    if (!(mx > 0.0f && mx <= 3.0e38f))
        return 0;
    const int e = ilogbf(mx) - 13;
    return e < -64 ? -64 : e;
}

/* The largest |q| of this lane's part of rows q0 (fragment row g) and q1 (row g+8), each pointing at the
 * row's element 2t; the quad's four lanes together cover the rows. */
template <int HD>
static AM_HD void am_q_absmax(const float *q0, const float *q1, bool ok0, bool ok1, float *mx0, float *mx1)
{
    float a = 0.0f, b = 0.0f;
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++)
#pragma unroll
        for (int c = 0; c < 16; c += 8) {
            if (ok0) {
                const float2 x = *(const float2 *)(q0 + 16 * kk + c);
                a = fmaxf(a, fmaxf(fabsf(x.x), fabsf(x.y)));
            }
            if (ok1) {
                const float2 x = *(const float2 *)(q1 + 16 * kk + c);
                b = fmaxf(b, fmaxf(fabsf(x.x), fabsf(x.y)));
            }
        }
    *mx0 = a;
    *mx1 = b;
}

/* The split A fragments of Q for the HD / 16 k-steps: rows q0 (g) and q1 (g+8) as in am_q_absmax, times f0
 * and f1 (powers of two); rows that are not ok are zeros. */
template <int HD>
static AM_HD void am_q_frags(const float *q0, const float *q1, bool ok0, bool ok1, float f0, float f1,
                             uint32_t qh[][4], uint32_t ql[][4])
{
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++)
#pragma unroll
        for (int c = 0; c < 2; c++) {
            float a0 = 0.0f, a1 = 0.0f, b0 = 0.0f, b1 = 0.0f;
            if (ok0) {
                const float2 a = *(const float2 *)(q0 + 16 * kk + 8 * c);
                a0 = a.x * f0;
                a1 = a.y * f0;
            }
            if (ok1) {
                const float2 b = *(const float2 *)(q1 + 16 * kk + 8 * c);
                b0 = b.x * f1;
                b1 = b.y * f1;
            }
            am_split_f16x2(a0, a1, &qh[kk][2 * c], &ql[kk][2 * c]);
            am_split_f16x2(b0, b1, &qh[kk][2 * c + 1], &ql[kk][2 * c + 1]);
        }
}

/* The probabilities of score tiles s0 = S[2kk], s1 = S[2kk+1] (row maxima m0, m1) as the split A fragment of
 * P V (times AM_PSCALE); their unscaled sums are added to l0 (row g) and l1 (row g+8). */
static AM_HD void am_p_frags(const float s0[4], const float s1[4], float m0, float m1, uint32_t ph[4],
                             uint32_t pl[4], float *l0, float *l1)
{
    const float p00 = expf(s0[0] - m0), p01 = expf(s0[1] - m0), p02 = expf(s0[2] - m1), p03 = expf(s0[3] - m1);
    const float p10 = expf(s1[0] - m0), p11 = expf(s1[1] - m0), p12 = expf(s1[2] - m1), p13 = expf(s1[3] - m1);
    *l0 = *l0 + p00 + p01 + p10 + p11;
    *l1 = *l1 + p02 + p03 + p12 + p13;
    am_split_f16x2(p00 * AM_PSCALE, p01 * AM_PSCALE, &ph[0], &pl[0]);
    am_split_f16x2(p02 * AM_PSCALE, p03 * AM_PSCALE, &ph[1], &pl[1]);
    am_split_f16x2(p10 * AM_PSCALE, p11 * AM_PSCALE, &ph[2], &pl[2]);
    am_split_f16x2(p12 * AM_PSCALE, p13 * AM_PSCALE, &ph[3], &pl[3]);
}

/* ldmatrix.x4 row addresses, in halves from the start of a tile of rows ld halves apart. Lanes 8i .. 8i+7 give
 * the rows of 8x8 matrix i.
 * K (scores, untransposed): matrices (keys 16np + 0..7, dims 16kk + 0..7), (same keys, dims + 8), (keys + 8,
 * dims), (keys + 8, dims + 8): registers b0, b1 of score tile 2np, then b0, b1 of tile 2np+1. */
static AM_HD int am_k_ldsm_offset(int lane, int np, int kk, int ld)
{
    return (16 * np + (lane & 7) + ((lane >> 4) << 3)) * ld + 16 * kk + ((lane >> 3) & 1) * 8;
}

/* V (P V, transposed): matrices (keys 16kk + 0..7, dims 16dp + 0..7), (keys + 8, dims), (keys, dims + 8),
 * (keys + 8, dims + 8): registers b0, b1 of output tile 2dp, then b0, b1 of tile 2dp+1. */
static AM_HD int am_v_ldsm_offset(int lane, int kk, int dp, int ld)
{
    return (16 * kk + (lane & 7) + ((lane >> 3) & 1) * 8) * ld + 16 * dp + (lane >> 4) * 8;
}

#undef AM_HD

#endif
