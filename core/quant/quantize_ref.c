/* core/quant/quantize_ref.c — quant_quantize_row_ref: dispatch, the plain float types, the 32-element
 * block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, MXFP4) and the Q8_K activation format.
 *
 * Each follows ggml's quantize_row_*_ref operation for operation, so the same floats give the same bytes
 * as ggml's reference (built without FMA contraction). All are deterministic and thread-free. */
#include "core/quant/quant.h"

#include <math.h>
#include <string.h>

#include "core/quant/fp16.h"
#include "core/quant/iq_tables.h"
#include "core/quant/quantize_util.h"
#include "core/quant/ref_kernels.h"

void quant_quant_f32_ref(const float *x, float *y, int64_t n)
{
    memcpy(y, x, (size_t)n * sizeof *y);
}

void quant_quant_f16_ref(const float *x, quant_half_t *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = quant_f32_to_f16(x[i]);
}

void quant_quant_bf16_ref(const float *x, quant_bf16_t *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = quant_f32_to_bf16(x[i]);
}

/* Largest |x| and the signed value that has it (the first one on ties). */
static float signed_absmax(const float *x, int n)
{
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

void quant_quant_q4_0_ref(const float *x, quant_block_q4_0 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QUANT_QK4_0) {
        /* The largest magnitude maps to -8 exactly, so the scale's sign follows it. */
        const float d = signed_absmax(x, QUANT_QK4_0) / -8;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = quant_f32_to_f16(d);
        for (int j = 0; j < QUANT_QK4_0 / 2; j++) {
            const float x0 = x[j] * id;
            const float x1 = x[QUANT_QK4_0 / 2 + j] * id;
            const int xi0 = QUANT_MIN(15, (int8_t)(x0 + 8.5f));
            const int xi1 = QUANT_MIN(15, (int8_t)(x1 + 8.5f));
            y[i].qs[j] = (uint8_t)(xi0 | xi1 << 4);
        }
    }
}

/* min/max of a block (q4_1, q5_1). */
static void block_min_max(const float *x, int n, float *min, float *max)
{
    *min = QUANT_FLT_MAX;
    *max = -QUANT_FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < *min)
            *min = x[j];
        if (x[j] > *max)
            *max = x[j];
    }
}

void quant_quant_q4_1_ref(const float *x, quant_block_q4_1 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QUANT_QK4_1) {
        float min, max;
        block_min_max(x, QUANT_QK4_1, &min, &max);
        const float d = (max - min) / ((1 << 4) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = quant_f32_to_f16(d);
        y[i].m = quant_f32_to_f16(min);
        for (int j = 0; j < QUANT_QK4_1 / 2; j++) {
            const float x0 = (x[j] - min) * id;
            const float x1 = (x[QUANT_QK4_1 / 2 + j] - min) * id;
            const int xi0 = QUANT_MIN(15, (int8_t)(x0 + 0.5f));
            const int xi1 = QUANT_MIN(15, (int8_t)(x1 + 0.5f));
            y[i].qs[j] = (uint8_t)(xi0 | xi1 << 4);
        }
    }
}

static void store_u32le(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

void quant_quant_q5_0_ref(const float *x, quant_block_q5_0 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QUANT_QK5_0) {
        const float d = signed_absmax(x, QUANT_QK5_0) / -16;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = quant_f32_to_f16(d);
        uint32_t qh = 0;
        for (int j = 0; j < QUANT_QK5_0 / 2; j++) {
            const float x0 = x[j] * id;
            const float x1 = x[QUANT_QK5_0 / 2 + j] * id;
            const uint32_t xi0 = (uint32_t)QUANT_MIN(31, (int8_t)(x0 + 16.5f));
            const uint32_t xi1 = (uint32_t)QUANT_MIN(31, (int8_t)(x1 + 16.5f));
            y[i].qs[j] = (uint8_t)((xi0 & 0x0F) | (xi1 & 0x0F) << 4);
            qh |= ((xi0 & 0x10u) >> 4) << j;
            qh |= ((xi1 & 0x10u) >> 4) << (j + QUANT_QK5_0 / 2);
        }
        store_u32le(y[i].qh, qh);
    }
}

void quant_quant_q5_1_ref(const float *x, quant_block_q5_1 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QUANT_QK5_1) {
        float min, max;
        block_min_max(x, QUANT_QK5_1, &min, &max);
        const float d = (max - min) / ((1 << 5) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = quant_f32_to_f16(d);
        y[i].m = quant_f32_to_f16(min);
        uint32_t qh = 0;
        for (int j = 0; j < QUANT_QK5_1 / 2; j++) {
            const float x0 = (x[j] - min) * id;
            const float x1 = (x[QUANT_QK5_1 / 2 + j] - min) * id;
            const uint32_t xi0 = (uint8_t)(x0 + 0.5f);
            const uint32_t xi1 = (uint8_t)(x1 + 0.5f);
            y[i].qs[j] = (uint8_t)((xi0 & 0x0F) | (xi1 & 0x0F) << 4);
            qh |= ((xi0 & 0x10u) >> 4) << j;
            qh |= ((xi1 & 0x10u) >> 4) << (j + QUANT_QK5_1 / 2);
        }
        store_u32le(y[i].qh, qh);
    }
}

static float absmax(const float *x, int n)
{
    float amax = 0.0f;
    for (int j = 0; j < n; j++)
        amax = QUANT_MAX(amax, fabsf(x[j]));
    return amax;
}

void quant_quant_q8_0_ref(const float *x, quant_block_q8_0 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QUANT_QK8_0) {
        const float d = absmax(x, QUANT_QK8_0) / ((1 << 7) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = quant_f32_to_f16(d);
        for (int j = 0; j < QUANT_QK8_0; j++)
            y[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

void quant_quant_q8_1_ref(const float *x, quant_block_q8_1 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QUANT_QK8_1) {
        const float d = absmax(x, QUANT_QK8_1) / ((1 << 7) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = quant_f32_to_f16(d);
        int sum = 0;
        for (int j = 0; j < QUANT_QK8_1; j++) {
            y[i].qs[j] = (int8_t)roundf(x[j] * id);
            sum += y[i].qs[j];
        }
        /* s is d * sum in fp16, computed from the unrounded float d as ggml does. */
        y[i].s = quant_f32_to_f16(sum * d);
    }
}

static int best_index_mxfp4(float x, float e)
{
    int best_index = 0;
    float best_err = fabsf(quant_kvalues_mxfp4[0] * e - x);
    for (int i = 1; i < 16; i++) {
        const float err = fabsf(quant_kvalues_mxfp4[i] * e - x);
        if (err < best_err) {
            best_index = i;
            best_err = err;
        }
    }
    return best_index;
}

void quant_quant_mxfp4_ref(const float *x, quant_block_mxfp4 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QUANT_QK_MXFP4) {
        const float amax = absmax(x, QUANT_QK_MXFP4);
        /* The largest E2M1 magnitude is 6 = 1.5 * 2^2: put amax's binade at the top of the code range. */
        const uint8_t e = amax > 0.0f ? (uint8_t)(floorf(log2f(amax)) - 2 + 127) : 0;
        const float d = quant_e8m0_to_f32_half(e);
        y[i].e = e;
        for (int j = 0; j < QUANT_QK_MXFP4 / 2; j++) {
            const int x0 = best_index_mxfp4(x[j], d);
            const int x1 = best_index_mxfp4(x[QUANT_QK_MXFP4 / 2 + j], d);
            y[i].qs[j] = (uint8_t)(x0 | x1 << 4);
        }
    }
}

void quant_quant_q8_K_ref(const float *x, quant_block_q8_K *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QUANT_QK_K) {
        float max = 0, amax = 0;
        for (int j = 0; j < QUANT_QK_K; j++) {
            const float ax = fabsf(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        if (!amax) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        /* -127 rather than -128 keeps every quant in [-127, 127] (IQ kernels negate them). */
        const float iscale = -127.f / max;
        for (int j = 0; j < QUANT_QK_K; j++)
            y[i].qs[j] = (int8_t)QUANT_MIN(127, quant_nearest_int(iscale * x[j]));
        for (int j = 0; j < QUANT_QK_K / 16; j++) {
            int sum = 0;
            for (int k = 0; k < 16; k++)
                sum += y[i].qs[j * 16 + k];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

bool quant_can_quantize(guild_type_t type)
{
    switch (type) {
    case GUILD_TYPE_F32: case GUILD_TYPE_F16: case GUILD_TYPE_BF16:
    case GUILD_TYPE_Q4_0: case GUILD_TYPE_Q4_1: case GUILD_TYPE_Q5_0: case GUILD_TYPE_Q5_1:
    case GUILD_TYPE_Q8_0: case GUILD_TYPE_Q8_1: case GUILD_TYPE_MXFP4: case GUILD_TYPE_IQ4_NL:
    case GUILD_TYPE_Q2_K: case GUILD_TYPE_Q3_K: case GUILD_TYPE_Q4_K: case GUILD_TYPE_Q5_K:
    case GUILD_TYPE_Q6_K: case GUILD_TYPE_Q8_K: case GUILD_TYPE_IQ4_XS:
        return true;
    default:
        return false;
    }
}

int quant_quantize_row_ref(guild_type_t type, const float *src, void *dst, int64_t n, guild_err_t *err)
{
    const quant_type_info_t *info = quant_type_info(type);
    if (!info)
        return guild_err_set(err, "quantize: unknown tensor type %d", (int)type);
    if (!quant_can_quantize(type))
        return guild_err_set(err, "quantize: type %s has no quantizer", info->name);
    if (n < 0 || n % info->block_elems)
        return guild_err_set(err, "quantize %s: a row of %lld elements is not a whole number of blocks "
                             "(%u elements each)", info->name, (long long)n, info->block_elems);
    const int64_t nb = n / info->block_elems;
    switch (type) {
    case GUILD_TYPE_F32: quant_quant_f32_ref(src, dst, n); break;
    case GUILD_TYPE_F16: quant_quant_f16_ref(src, dst, n); break;
    case GUILD_TYPE_BF16: quant_quant_bf16_ref(src, dst, n); break;
    case GUILD_TYPE_Q4_0: quant_quant_q4_0_ref(src, dst, nb); break;
    case GUILD_TYPE_Q4_1: quant_quant_q4_1_ref(src, dst, nb); break;
    case GUILD_TYPE_Q5_0: quant_quant_q5_0_ref(src, dst, nb); break;
    case GUILD_TYPE_Q5_1: quant_quant_q5_1_ref(src, dst, nb); break;
    case GUILD_TYPE_Q8_0: quant_quant_q8_0_ref(src, dst, nb); break;
    case GUILD_TYPE_Q8_1: quant_quant_q8_1_ref(src, dst, nb); break;
    case GUILD_TYPE_MXFP4: quant_quant_mxfp4_ref(src, dst, nb); break;
    case GUILD_TYPE_IQ4_NL: quant_quant_iq4_nl_ref(src, dst, nb); break;
    case GUILD_TYPE_Q2_K: quant_quant_q2_K_ref(src, dst, nb); break;
    case GUILD_TYPE_Q3_K: quant_quant_q3_K_ref(src, dst, nb); break;
    case GUILD_TYPE_Q4_K: quant_quant_q4_K_ref(src, dst, nb); break;
    case GUILD_TYPE_Q5_K: quant_quant_q5_K_ref(src, dst, nb); break;
    case GUILD_TYPE_Q6_K: quant_quant_q6_K_ref(src, dst, nb); break;
    case GUILD_TYPE_Q8_K: quant_quant_q8_K_ref(src, dst, nb); break;
    case GUILD_TYPE_IQ4_XS: quant_quant_iq4_xs_ref(src, dst, nb); break;
    default: GUILD_ASSERT(!"unreachable");
    }
    return 0;
}
