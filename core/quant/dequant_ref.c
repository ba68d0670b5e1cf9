/* core/quant/dequant_ref.c — quant_dequantize_row_ref: dispatch, the plain float types and the 32-element
 * block types. Arithmetic follows ggml's dequantize_row_* (same operations in the same order), so outputs
 * are bit-identical to ggml's reference on the same bytes. */
#include "core/quant/quant.h"

#include <string.h>

#include "core/quant/fp16.h"
#include "core/quant/iq_tables.h"
#include "core/quant/ref_kernels.h"

void quant_dequant_f32_ref(const float *x, float *y, int64_t n)
{
    memcpy(y, x, (size_t)n * sizeof *y);
}

void quant_dequant_f16_ref(const quant_half_t *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = quant_f16_to_f32(x[i]);
}

void quant_dequant_bf16_ref(const quant_bf16_t *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = quant_bf16_to_f32(x[i]);
}

void quant_dequant_q4_0_ref(const quant_block_q4_0 *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QUANT_QK4_0) {
        const float d = quant_f16_to_f32(x[i].d);
        for (int j = 0; j < QUANT_QK4_0 / 2; j++) {
            y[j] = ((x[i].qs[j] & 0x0F) - 8) * d;
            y[j + QUANT_QK4_0 / 2] = ((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

void quant_dequant_q4_1_ref(const quant_block_q4_1 *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QUANT_QK4_1) {
        const float d = quant_f16_to_f32(x[i].d);
        const float m = quant_f16_to_f32(x[i].m);
        for (int j = 0; j < QUANT_QK4_1 / 2; j++) {
            y[j] = (x[i].qs[j] & 0x0F) * d + m;
            y[j + QUANT_QK4_1 / 2] = (x[i].qs[j] >> 4) * d + m;
        }
    }
}

static uint32_t load_u32le(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void quant_dequant_q5_0_ref(const quant_block_q5_0 *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QUANT_QK5_0) {
        const float d = quant_f16_to_f32(x[i].d);
        const uint32_t qh = load_u32le(x[i].qh);
        for (int j = 0; j < QUANT_QK5_0 / 2; j++) {
            const int x0 = (int)((x[i].qs[j] & 0x0F) | ((qh >> j) << 4 & 0x10)) - 16;
            const int x1 = (int)((x[i].qs[j] >> 4) | ((qh >> (j + 12)) & 0x10)) - 16;
            y[j] = x0 * d;
            y[j + QUANT_QK5_0 / 2] = x1 * d;
        }
    }
}

void quant_dequant_q5_1_ref(const quant_block_q5_1 *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QUANT_QK5_1) {
        const float d = quant_f16_to_f32(x[i].d);
        const float m = quant_f16_to_f32(x[i].m);
        const uint32_t qh = load_u32le(x[i].qh);
        for (int j = 0; j < QUANT_QK5_1 / 2; j++) {
            const int x0 = (int)((x[i].qs[j] & 0x0F) | ((qh >> j) << 4 & 0x10));
            const int x1 = (int)((x[i].qs[j] >> 4) | ((qh >> (j + 12)) & 0x10));
            y[j] = x0 * d + m;
            y[j + QUANT_QK5_1 / 2] = x1 * d + m;
        }
    }
}

void quant_dequant_q8_0_ref(const quant_block_q8_0 *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QUANT_QK8_0) {
        const float d = quant_f16_to_f32(x[i].d);
        for (int j = 0; j < QUANT_QK8_0; j++)
            y[j] = x[i].qs[j] * d;
    }
}

void quant_dequant_q8_1_ref(const quant_block_q8_1 *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QUANT_QK8_1) {
        const float d = quant_f16_to_f32(x[i].d);
        for (int j = 0; j < QUANT_QK8_1; j++)
            y[j] = x[i].qs[j] * d;
    }
}

void quant_dequant_iq4_nl_ref(const quant_block_iq4_nl *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QUANT_QK4_NL) {
        const float d = quant_f16_to_f32(x[i].d);
        for (int j = 0; j < QUANT_QK4_NL / 2; j++) {
            y[j] = d * quant_kvalues_iq4nl[x[i].qs[j] & 0xf];
            y[j + QUANT_QK4_NL / 2] = d * quant_kvalues_iq4nl[x[i].qs[j] >> 4];
        }
    }
}

void quant_dequant_mxfp4_ref(const quant_block_mxfp4 *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QUANT_QK_MXFP4) {
        const float d = quant_e8m0_to_f32_half(x[i].e);
        for (int j = 0; j < QUANT_QK_MXFP4 / 2; j++) {
            y[j] = quant_kvalues_mxfp4[x[i].qs[j] & 0x0F] * d;
            y[j + QUANT_QK_MXFP4 / 2] = quant_kvalues_mxfp4[x[i].qs[j] >> 4] * d;
        }
    }
}

void quant_dequantize_row_ref(guild_type_t type, const void *src, float *dst, int64_t n)
{
    const quant_type_info_t *info = quant_type_info(type);
    GUILD_ASSERT(info && (info->computable || type == GUILD_TYPE_Q8_0 || type == GUILD_TYPE_Q8_1 ||
                          type == GUILD_TYPE_Q8_K));
    GUILD_ASSERT(n >= 0 && n % info->block_elems == 0);
    const int64_t nb = n / info->block_elems;
    switch (type) {
    case GUILD_TYPE_F32: quant_dequant_f32_ref(src, dst, n); break;
    case GUILD_TYPE_F16: quant_dequant_f16_ref(src, dst, n); break;
    case GUILD_TYPE_BF16: quant_dequant_bf16_ref(src, dst, n); break;
    case GUILD_TYPE_Q4_0: quant_dequant_q4_0_ref(src, dst, nb); break;
    case GUILD_TYPE_Q4_1: quant_dequant_q4_1_ref(src, dst, nb); break;
    case GUILD_TYPE_Q5_0: quant_dequant_q5_0_ref(src, dst, nb); break;
    case GUILD_TYPE_Q5_1: quant_dequant_q5_1_ref(src, dst, nb); break;
    case GUILD_TYPE_Q8_0: quant_dequant_q8_0_ref(src, dst, nb); break;
    case GUILD_TYPE_Q8_1: quant_dequant_q8_1_ref(src, dst, nb); break;
    case GUILD_TYPE_IQ4_NL: quant_dequant_iq4_nl_ref(src, dst, nb); break;
    case GUILD_TYPE_MXFP4: quant_dequant_mxfp4_ref(src, dst, nb); break;
    case GUILD_TYPE_Q2_K: quant_dequant_q2_K_ref(src, dst, nb); break;
    case GUILD_TYPE_Q3_K: quant_dequant_q3_K_ref(src, dst, nb); break;
    case GUILD_TYPE_Q4_K: quant_dequant_q4_K_ref(src, dst, nb); break;
    case GUILD_TYPE_Q5_K: quant_dequant_q5_K_ref(src, dst, nb); break;
    case GUILD_TYPE_Q6_K: quant_dequant_q6_K_ref(src, dst, nb); break;
    case GUILD_TYPE_Q8_K: quant_dequant_q8_K_ref(src, dst, nb); break;
    case GUILD_TYPE_IQ2_XXS: quant_dequant_iq2_xxs_ref(src, dst, nb); break;
    case GUILD_TYPE_IQ2_XS: quant_dequant_iq2_xs_ref(src, dst, nb); break;
    case GUILD_TYPE_IQ2_S: quant_dequant_iq2_s_ref(src, dst, nb); break;
    case GUILD_TYPE_IQ3_XXS: quant_dequant_iq3_xxs_ref(src, dst, nb); break;
    case GUILD_TYPE_IQ3_S: quant_dequant_iq3_s_ref(src, dst, nb); break;
    case GUILD_TYPE_IQ1_S: quant_dequant_iq1_s_ref(src, dst, nb); break;
    case GUILD_TYPE_IQ1_M: quant_dequant_iq1_m_ref(src, dst, nb); break;
    case GUILD_TYPE_IQ4_XS: quant_dequant_iq4_xs_ref(src, dst, nb); break;
    default: GUILD_ASSERT(!"type has no dequantizer");
    }
}
