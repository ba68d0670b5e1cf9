/* core/quant/dot_k.c — reference dot products of the K-quant weights against Q8_K activations, in the
 * exact-integer form of the contract in dot_ref.c: each block is unpacked to its integer levels (the values
 * its dequantizer multiplies by float scales), dotted with the activation quants in int32 per sub-block,
 * weighted by the integer sub-block scales, and only then scaled by floats. */
#include "core/quant/fp16.h"
#include "core/quant/ref_kernels.h"

/* sum_j q[j] * a[j] over n elements. */
static int32_t idot(const int8_t *q, const int8_t *a, int n)
{
    int32_t s = 0;
    for (int j = 0; j < n; j++)
        s += q[j] * a[j];
    return s;
}

/* Q2_K/Q3_K element e of a block: 128-element half e / 128, 2-bit field (e % 128) / 32 of byte
 * 32 (e / 128) + e % 32 of qs. */
static int q2_field(const uint8_t *qs, int e)
{
    return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

float quant_dot_q2_K_ref(const quant_block_q2_K *w, const quant_block_q8_K *a, int64_t nb)
{
    float sumf = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        int8_t q[QUANT_QK_K];
        for (int e = 0; e < QUANT_QK_K; e++)
            q[e] = (int8_t)q2_field(w[b].qs, e);
        int32_t isum = 0, imin = 0;
        for (int s = 0; s < 16; s++) {
            isum += (w[b].scales[s] & 15) * idot(q + 16 * s, a[b].qs + 16 * s, 16);
            imin += (w[b].scales[s] >> 4) * a[b].bsums[s];
        }
        const float d = quant_f16_to_f32(w[b].d) * a[b].d;
        const float dmin = quant_f16_to_f32(w[b].dmin) * a[b].d;
        const float t1 = d * (float)isum;
        const float t2 = dmin * (float)imin;
        sumf = sumf + (t1 - t2);
    }
    return sumf;
}

float quant_dot_q3_K_ref(const quant_block_q3_K *w, const quant_block_q8_K *a, int64_t nb)
{
    float sumf = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        int8_t q[QUANT_QK_K], sc[16];
        quant_q3_K_scales(w[b].scales, sc);
        for (int e = 0; e < QUANT_QK_K; e++) {
            /* The high bit of element e is bit e / 32 of hmask[e % 32]; clear means "subtract 4". */
            const int hbit = (w[b].hmask[e % 32] >> (e / 32)) & 1;
            q[e] = (int8_t)(q2_field(w[b].qs, e) - (hbit ? 0 : 4));
        }
        int32_t isum = 0;
        for (int s = 0; s < 16; s++)
            isum += sc[s] * idot(q + 16 * s, a[b].qs + 16 * s, 16);
        const float d = quant_f16_to_f32(w[b].d) * a[b].d;
        sumf = sumf + d * (float)isum;
    }
    return sumf;
}

/* Q4_K/Q5_K: the shared affine contribution from levels q (0..15 or 0..31) and the packed 6-bit scales. */
static float k4_contribution(const int8_t *q, const uint8_t *scales, quant_half_t wd, quant_half_t wdmin,
                             const quant_block_q8_K *a)
{
    int32_t isum = 0, imin = 0;
    for (int s = 0; s < 8; s++) {
        uint8_t sc, m;
        quant_k4_scale_min(s, scales, &sc, &m);
        isum += sc * idot(q + 32 * s, a->qs + 32 * s, 32);
        imin += m * (a->bsums[2 * s] + a->bsums[2 * s + 1]);
    }
    const float d = quant_f16_to_f32(wd) * a->d;
    const float dmin = quant_f16_to_f32(wdmin) * a->d;
    const float t1 = d * (float)isum;
    const float t2 = dmin * (float)imin;
    return t1 - t2;
}

float quant_dot_q4_K_ref(const quant_block_q4_K *w, const quant_block_q8_K *a, int64_t nb)
{
    float sumf = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        int8_t q[QUANT_QK_K];
        /* 64-element chunk c: low nibbles of qs[32 c ..] then high nibbles. */
        for (int e = 0; e < QUANT_QK_K; e++)
            q[e] = (int8_t)((w[b].qs[32 * (e / 64) + e % 32] >> (4 * ((e % 64) / 32))) & 0xF);
        sumf = sumf + k4_contribution(q, w[b].scales, w[b].d, w[b].dmin, &a[b]);
    }
    return sumf;
}

float quant_dot_q5_K_ref(const quant_block_q5_K *w, const quant_block_q8_K *a, int64_t nb)
{
    float sumf = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        int8_t q[QUANT_QK_K];
        for (int e = 0; e < QUANT_QK_K; e++) {
            const int lo = (w[b].qs[32 * (e / 64) + e % 32] >> (4 * ((e % 64) / 32))) & 0xF;
            const int hi = (w[b].qh[e % 32] >> (e / 32)) & 1; /* sub-block e / 32 uses bit e / 32 */
            q[e] = (int8_t)(lo | hi << 4);
        }
        sumf = sumf + k4_contribution(q, w[b].scales, w[b].d, w[b].dmin, &a[b]);
    }
    return sumf;
}

float quant_dot_q6_K_ref(const quant_block_q6_K *w, const quant_block_q8_K *a, int64_t nb)
{
    float sumf = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        int8_t q[QUANT_QK_K];
        for (int e = 0; e < QUANT_QK_K; e++) {
            /* 128-element half h; quarter k = (e % 128) / 32 takes the low (k < 2) or high nibble of
             * ql[64 h + 32 (k % 2) + l] and bits 2 k of qh[32 h + l]. */
            const int h = e / 128, k = (e % 128) / 32, l = e % 32;
            const int lo = (w[b].ql[64 * h + 32 * (k % 2) + l] >> (4 * (k / 2))) & 0xF;
            const int hi = (w[b].qh[32 * h + l] >> (2 * k)) & 3;
            q[e] = (int8_t)((lo | hi << 4) - 32);
        }
        int32_t isum = 0;
        for (int s = 0; s < 16; s++)
            isum += w[b].scales[s] * idot(q + 16 * s, a[b].qs + 16 * s, 16);
        const float d = quant_f16_to_f32(w[b].d) * a[b].d;
        sumf = sumf + d * (float)isum;
    }
    return sumf;
}
