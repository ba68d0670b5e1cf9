/* core/quant/quantize_iq4.c — reference quantizers of the non-linear 4-bit types IQ4_NL (blocks of 32)
 * and IQ4_XS (super-blocks of 256 with 6-bit sub-block scales), following ggml's quantize_row_iq4_nl_impl
 * as llama-quantize runs it without an importance matrix (weights x^2, 7 scale trials each way). */
#include <math.h>
#include <string.h>

#include "core/quant/fp16.h"
#include "core/quant/iq_tables.h"
#include "core/quant/quantize_util.h"
#include "core/quant/ref_kernels.h"

#define NTRY 7

/* Best scale for one block of 32 (levels in L), x^2-weighted, trying 2 * NTRY + 1 candidate scales
 * around the one that maps the largest magnitude to the first level. */
static float iq4_block_scale(const float *xb, uint8_t *Lb)
{
    const int8_t *values = quant_kvalues_iq4nl;
    float weight[32];
    float amax = 0, max = 0;
    for (int j = 0; j < 32; j++) {
        weight[j] = xb[j] * xb[j];
        const float ax = fabsf(xb[j]);
        if (ax > amax) {
            amax = ax;
            max = xb[j];
        }
    }
    if (amax < QUANT_GROUP_MAX_EPS) {
        memset(Lb, 0, 32);
        return 0;
    }
    float d = -max / values[0];
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < 32; j++) {
        const int l = quant_best_index_int8(16, values, id * xb[j]);
        Lb[j] = (uint8_t)l;
        const float q = values[l];
        sumqx += weight[j] * q * xb[j];
        sumq2 += weight[j] * q * q;
    }
    d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
    float best = d * sumqx;
    for (int itry = -NTRY; itry <= NTRY; itry++) {
        id = (itry + values[0]) / max;
        sumqx = sumq2 = 0;
        for (int j = 0; j < 32; j++) {
            const int l = quant_best_index_int8(16, values, id * xb[j]);
            const float q = values[l];
            sumqx += weight[j] * q * xb[j];
            sumq2 += weight[j] * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

/* Nibble packing shared by both types: byte j of each 16-byte group holds elements j and j + 16. */
static void pack_nibbles(const uint8_t *L, uint8_t *q4, int n)
{
    for (int i = 0; i < n / 32; i++)
        for (int j = 0; j < 16; j++)
            q4[16 * i + j] = (uint8_t)(L[32 * i + j] | L[32 * i + 16 + j] << 4);
}

void quant_quant_iq4_nl_ref(const float *x, quant_block_iq4_nl *y, int64_t nb)
{
    uint8_t L[32];
    for (int64_t i = 0; i < nb; i++, x += QUANT_QK4_NL) {
        const float d = iq4_block_scale(x, L);
        y[i].d = quant_f32_to_f16(d);
        /* Re-pick the levels for the scale finally chosen (the search only kept the scale). */
        const float id = d ? 1 / d : 0;
        for (int j = 0; j < 32; j++)
            L[j] = (uint8_t)quant_best_index_int8(16, quant_kvalues_iq4nl, id * x[j]);
        pack_nibbles(L, y[i].qs, QUANT_QK4_NL);
    }
}

void quant_quant_iq4_xs_ref(const float *x, quant_block_iq4_xs *y, int64_t nb)
{
    uint8_t L[QUANT_QK_K];
    float scales[QUANT_QK_K / 32];
    for (int64_t i = 0; i < nb; i++, x += QUANT_QK_K) {
        float max_scale = 0, amax_scale = 0;
        for (int ib = 0; ib < QUANT_QK_K / 32; ib++) {
            scales[ib] = iq4_block_scale(x + 32 * ib, L + 32 * ib);
            const float abs_d = fabsf(scales[ib]);
            if (abs_d > amax_scale) {
                amax_scale = abs_d;
                max_scale = scales[ib];
            }
        }
        y[i].scales_h = 0;
        const float d = -max_scale / 32;
        y[i].d = quant_f32_to_f16(d);
        const float id = d ? 1 / d : 0.f;
        for (int ib = 0; ib < QUANT_QK_K / 32; ib++) {
            int l = quant_nearest_int(id * scales[ib]);
            l = QUANT_MAX(-32, QUANT_MIN(31, l));
            /* Levels for the 6-bit scale actually stored (d here is the float before fp16 rounding, as
             * in ggml). */
            const float dl = d * l;
            const float idl = dl ? 1 / dl : 0.f;
            for (int j = 0; j < 32; j++)
                L[32 * ib + j] = (uint8_t)quant_best_index_int8(16, quant_kvalues_iq4nl, idl * x[32 * ib + j]);
            l += 32;
            const uint8_t l_l = (uint8_t)(l & 0xf);
            const uint8_t l_h = (uint8_t)(l >> 4);
            if (ib % 2 == 0)
                y[i].scales_l[ib / 2] = l_l;
            else
                y[i].scales_l[ib / 2] |= (uint8_t)(l_l << 4);
            y[i].scales_h |= (uint16_t)(l_h << 2 * (ib % 8));
        }
        pack_nibbles(L, y[i].qs, QUANT_QK_K);
    }
}
