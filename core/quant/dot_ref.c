/* core/quant/dot_ref.c — quant_vec_dot_ref: dispatch, F32/F16/BF16 weights against F32 activations, and
 * the 32-element block types against Q8_0 / Q8_1.
 *
 * NUMERIC CONTRACT (every SIMD kernel reproduces these results bit for bit; compare with memcmp)
 * ------------------------------------------------------------------------------------------------
 * Built with -ffp-contract=off: no operation below is fused unless written as fmaf().
 * "fp16(h)" is the exact conversion of core/quant/fp16.h; (float)i converts an int32 with round-to-nearest-
 * even (what cvtdq2ps does under the default MXCSR).
 *
 * 1. F32, F16, BF16 weights w[n] (converted exactly to float) against float activations x[n]:
 *        float acc[32] = {0};
 *        for (i = 0; i < n; i++)  acc[i % 32] = fmaf(w[i], x[i], acc[i % 32]);   (in increasing i)
 *        for (h = 16; h >= 1; h /= 2)  for (j = 0; j < h; j++)  acc[j] = acc[j] + acc[j + h];
 *        result = acc[0];
 *    (32 lanes = 2 AVX-512 or 4 AVX2 registers of 8/16 floats; the tail elements land in lane i % 32.)
 *
 * 2. Quantized weights: per block b, an integer sum isum_b computed EXACTLY (int32; the order of integer
 *    additions is free), then a fixed float sequence; blocks are accumulated into one float, in block
 *    order, starting from sumf = 0.0f:
 *        sumf = sumf + contribution_b;       result = sumf   (or result = k * sumf, k below)
 *    "levels" are the integer values a block decodes to before its float scales (q - 8 for Q4_0, grid
 *    value times sign for IQ types...), exactly as the dequantizers use them; a[j] are the activation
 *    block's int8 quants.
 *
 *    Q4_0, Q5_0, Q8_0, IQ4_NL vs Q8_0:  isum = sum_j level[j] * a[j]
 *        d = fp16(w.d) * fp16(a.d);           contribution = d * (float)isum
 *    MXFP4 vs Q8_0:  isum = sum_j kvalues_mxfp4[code j] * a[j]
 *        d = e8m0_half(w.e) * fp16(a.d);      contribution = d * (float)isum
 *    Q4_1, Q5_1 vs Q8_1:  isum = sum_j q[j] * a[j]   (q unsigned, 0..15 / 0..31)
 *        d = fp16(w.d) * fp16(a.d);  m = fp16(w.m) * fp16(a.s);
 *        t = d * (float)isum;  contribution = t + m
 *    K types vs Q8_K (a.d is a float):
 *        Q2_K:  isum = sum_s (sc[s] & 15) * sum_{16 j} q * a;  imin = sum_s (sc[s] >> 4) * a.bsums[s]
 *        Q4_K, Q5_K:  isum = sum_{s<8} scale6[s] * sum_{32 j} q * a;  imin = sum_s min6[s] * (bsums[2s] + bsums[2s+1])
 *            d = fp16(w.d) * a.d;  dmin = fp16(w.dmin) * a.d;
 *            t1 = d * (float)isum;  t2 = dmin * (float)imin;  contribution = t1 - t2
 *        Q3_K:  isum = sum_{s<16} (scale6[s] - 32) * sum_{16 j} q3 * a   (q3 in -4..3)
 *        Q6_K:  isum = sum_{s<16} scales[s] * sum_{16 j} (q6 - 32) * a
 *            d = fp16(w.d) * a.d;  contribution = d * (float)isum
 *    IQ types vs Q8_K (dot_iq.c; integer scales ls are the odd numbers 2 s + 1 of the format):
 *        IQ2_XXS, IQ2_XS, IQ2_S:  isum = sum_g ls_g * sum_j grid*sign * a;   k = 0.125f
 *        IQ3_XXS:  same shape;                                                 k = 0.25f
 *        IQ3_S:    same shape;                                                 k = 1 (no final product)
 *        IQ1_S, IQ1_M:  isum = sum_g ls_g * (8 * sum_j grid * a + dsign_g * sum_j a)   (dsign = +-1,
 *                  the sign of the +-1/8 delta, per 32 for IQ1_S, per 8 for IQ1_M);  k = 0.125f
 *        IQ4_XS:   isum = sum_{s<8} (scale6[s] - 32) * sum_{32 j} kvalues_iq4nl[code] * a;  k = 1
 *            d = fp16(w.d) * a.d  (IQ1_M: its split fp16 scale);  contribution = d * (float)isum;
 *            result = k * sumf
 *    All these integer sums fit in int32 for any block contents.
 */
#include "core/quant/quant.h"

#include <math.h>

#include "core/quant/fp16.h"
#include "core/quant/iq_tables.h"
#include "core/quant/ref_kernels.h"

/* Contract 1, shared by the three plain weight types: w converted by `load`. */
#define PLAIN_DOT(load)                                                    \
    float acc[32] = {0};                                                   \
    for (int64_t i = 0; i < n; i++)                                        \
        acc[i % 32] = fmaf(load(w[i]), x[i], acc[i % 32]);                 \
    for (int h = 16; h >= 1; h /= 2)                                       \
        for (int j = 0; j < h; j++)                                        \
            acc[j] = acc[j] + acc[j + h];                                  \
    return acc[0]

static inline float load_f32(float v)
{
    return v;
}

float quant_dot_f32_ref(const float *w, const float *x, int64_t n)
{
    PLAIN_DOT(load_f32);
}

float quant_dot_f16_ref(const quant_half_t *w, const float *x, int64_t n)
{
    PLAIN_DOT(quant_f16_to_f32);
}

float quant_dot_bf16_ref(const quant_bf16_t *w, const float *x, int64_t n)
{
    PLAIN_DOT(quant_bf16_to_f32);
}

static uint32_t load_u32le(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

float quant_dot_q4_0_ref(const quant_block_q4_0 *w, const quant_block_q8_0 *a, int64_t nb)
{
    float sumf = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        int32_t isum = 0;
        for (int j = 0; j < 16; j++) {
            isum += ((w[b].qs[j] & 0x0F) - 8) * a[b].qs[j];
            isum += ((w[b].qs[j] >> 4) - 8) * a[b].qs[j + 16];
        }
        const float d = quant_f16_to_f32(w[b].d) * quant_f16_to_f32(a[b].d);
        sumf = sumf + d * (float)isum;
    }
    return sumf;
}

float quant_dot_q5_0_ref(const quant_block_q5_0 *w, const quant_block_q8_0 *a, int64_t nb)
{
    float sumf = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        const uint32_t qh = load_u32le(w[b].qh);
        int32_t isum = 0;
        for (int j = 0; j < 16; j++) {
            const int x0 = (int)((w[b].qs[j] & 0x0F) | ((qh >> j) << 4 & 0x10)) - 16;
            const int x1 = (int)((w[b].qs[j] >> 4) | ((qh >> (j + 12)) & 0x10)) - 16;
            isum += x0 * a[b].qs[j] + x1 * a[b].qs[j + 16];
        }
        const float d = quant_f16_to_f32(w[b].d) * quant_f16_to_f32(a[b].d);
        sumf = sumf + d * (float)isum;
    }
    return sumf;
}

float quant_dot_q8_0_ref(const quant_block_q8_0 *w, const quant_block_q8_0 *a, int64_t nb)
{
    float sumf = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        int32_t isum = 0;
        for (int j = 0; j < 32; j++)
            isum += w[b].qs[j] * a[b].qs[j];
        const float d = quant_f16_to_f32(w[b].d) * quant_f16_to_f32(a[b].d);
        sumf = sumf + d * (float)isum;
    }
    return sumf;
}

float quant_dot_iq4_nl_ref(const quant_block_iq4_nl *w, const quant_block_q8_0 *a, int64_t nb)
{
    float sumf = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        int32_t isum = 0;
        for (int j = 0; j < 16; j++) {
            isum += quant_kvalues_iq4nl[w[b].qs[j] & 0xf] * a[b].qs[j];
            isum += quant_kvalues_iq4nl[w[b].qs[j] >> 4] * a[b].qs[j + 16];
        }
        const float d = quant_f16_to_f32(w[b].d) * quant_f16_to_f32(a[b].d);
        sumf = sumf + d * (float)isum;
    }
    return sumf;
}

float quant_dot_mxfp4_ref(const quant_block_mxfp4 *w, const quant_block_q8_0 *a, int64_t nb)
{
    float sumf = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        int32_t isum = 0;
        for (int j = 0; j < 16; j++) {
            isum += quant_kvalues_mxfp4[w[b].qs[j] & 0xf] * a[b].qs[j];
            isum += quant_kvalues_mxfp4[w[b].qs[j] >> 4] * a[b].qs[j + 16];
        }
        const float d = quant_e8m0_to_f32_half(w[b].e) * quant_f16_to_f32(a[b].d);
        sumf = sumf + d * (float)isum;
    }
    return sumf;
}

float quant_dot_q4_1_ref(const quant_block_q4_1 *w, const quant_block_q8_1 *a, int64_t nb)
{
    float sumf = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        int32_t isum = 0;
        for (int j = 0; j < 16; j++)
            isum += (w[b].qs[j] & 0x0F) * a[b].qs[j] + (w[b].qs[j] >> 4) * a[b].qs[j + 16];
        const float d = quant_f16_to_f32(w[b].d) * quant_f16_to_f32(a[b].d);
        const float m = quant_f16_to_f32(w[b].m) * quant_f16_to_f32(a[b].s);
        const float t = d * (float)isum;
        sumf = sumf + (t + m);
    }
    return sumf;
}

float quant_dot_q5_1_ref(const quant_block_q5_1 *w, const quant_block_q8_1 *a, int64_t nb)
{
    float sumf = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        const uint32_t qh = load_u32le(w[b].qh);
        int32_t isum = 0;
        for (int j = 0; j < 16; j++) {
            const int x0 = (int)((w[b].qs[j] & 0x0F) | ((qh >> j) << 4 & 0x10));
            const int x1 = (int)((w[b].qs[j] >> 4) | ((qh >> (j + 12)) & 0x10));
            isum += x0 * a[b].qs[j] + x1 * a[b].qs[j + 16];
        }
        const float d = quant_f16_to_f32(w[b].d) * quant_f16_to_f32(a[b].d);
        const float m = quant_f16_to_f32(w[b].m) * quant_f16_to_f32(a[b].s);
        const float t = d * (float)isum;
        sumf = sumf + (t + m);
    }
    return sumf;
}

float quant_vec_dot_ref(guild_type_t type, int64_t n, const void *w, const void *act)
{
    const quant_type_info_t *info = quant_type_info(type);
    GUILD_ASSERT(info && info->computable);
    GUILD_ASSERT(n >= 0 && n % info->block_elems == 0);
    const int64_t nb = n / info->block_elems;
    switch (type) {
    case GUILD_TYPE_F32: return quant_dot_f32_ref(w, act, n);
    case GUILD_TYPE_F16: return quant_dot_f16_ref(w, act, n);
    case GUILD_TYPE_BF16: return quant_dot_bf16_ref(w, act, n);
    case GUILD_TYPE_Q4_0: return quant_dot_q4_0_ref(w, act, nb);
    case GUILD_TYPE_Q4_1: return quant_dot_q4_1_ref(w, act, nb);
    case GUILD_TYPE_Q5_0: return quant_dot_q5_0_ref(w, act, nb);
    case GUILD_TYPE_Q5_1: return quant_dot_q5_1_ref(w, act, nb);
    case GUILD_TYPE_Q8_0: return quant_dot_q8_0_ref(w, act, nb);
    case GUILD_TYPE_IQ4_NL: return quant_dot_iq4_nl_ref(w, act, nb);
    case GUILD_TYPE_MXFP4: return quant_dot_mxfp4_ref(w, act, nb);
    case GUILD_TYPE_Q2_K: return quant_dot_q2_K_ref(w, act, nb);
    case GUILD_TYPE_Q3_K: return quant_dot_q3_K_ref(w, act, nb);
    case GUILD_TYPE_Q4_K: return quant_dot_q4_K_ref(w, act, nb);
    case GUILD_TYPE_Q5_K: return quant_dot_q5_K_ref(w, act, nb);
    case GUILD_TYPE_Q6_K: return quant_dot_q6_K_ref(w, act, nb);
    case GUILD_TYPE_IQ2_XXS: return quant_dot_iq2_xxs_ref(w, act, nb);
    case GUILD_TYPE_IQ2_XS: return quant_dot_iq2_xs_ref(w, act, nb);
    case GUILD_TYPE_IQ2_S: return quant_dot_iq2_s_ref(w, act, nb);
    case GUILD_TYPE_IQ3_XXS: return quant_dot_iq3_xxs_ref(w, act, nb);
    case GUILD_TYPE_IQ3_S: return quant_dot_iq3_s_ref(w, act, nb);
    case GUILD_TYPE_IQ1_S: return quant_dot_iq1_s_ref(w, act, nb);
    case GUILD_TYPE_IQ1_M: return quant_dot_iq1_m_ref(w, act, nb);
    case GUILD_TYPE_IQ4_XS: return quant_dot_iq4_xs_ref(w, act, nb);
    default: GUILD_ASSERT(!"type has no dot product");
    }
    return 0.0f;
}
