/* core/quant/dot_iq.c — reference dot products of the IQ weights against Q8_K activations, in the
 * exact-integer form of the contract in dot_ref.c. The levels are grid magnitudes times signs (IQ2/IQ3),
 * grid values in {-1, 0, 1} plus a +-1/8 delta carried as an extra integer term (IQ1), or kvalues_iq4nl
 * (IQ4_XS); the odd integer scales 2 s + 1 multiply whole groups, and the formats' constant factors
 * (1/8, 1/4) are applied once to the final sum. */
#include "core/quant/fp16.h"
#include "core/quant/iq_tables.h"
#include "core/quant/ref_kernels.h"

static uint32_t load_u32le(const void *p)
{
    const uint8_t *b = p;
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

/* sum_j grid_j * sign_j * a[j] over the 8 elements of a grid entry. */
static int32_t grid_dot8(uint64_t grid, uint8_t signs, const int8_t *a)
{
    int32_t s = 0;
    for (int j = 0; j < 8; j++) {
        const int g = (int)((grid >> (8 * j)) & 0xff);
        s += (signs >> j & 1 ? -g : g) * a[j];
    }
    return s;
}

/* The same for two 4-element iq3 grid entries (elements 0-3 and 4-7). */
static int32_t grid_dot4x2(uint32_t g1, uint32_t g2, uint8_t signs, const int8_t *a)
{
    return grid_dot8((uint64_t)g1 | (uint64_t)g2 << 32, signs, a);
}

float quant_dot_iq2_xxs_ref(const quant_block_iq2_xxs *w, const quant_block_q8_K *a, int64_t nb)
{
    float sumf = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        const int8_t *q8 = a[b].qs;
        int32_t isum = 0;
        for (int ib32 = 0; ib32 < QUANT_QK_K / 32; ib32++) {
            const uint32_t idx = load_u32le(w[b].qs + 4 * ib32);
            const uint32_t aux = load_u32le(w[b].qs + 4 * ib32 + 2);
            int32_t s = 0;
            for (int l = 0; l < 4; l++, q8 += 8)
                s += grid_dot8(quant_iq2xxs_grid[(idx >> (8 * l)) & 0xff],
                               quant_ksigns_iq2xs[(aux >> (7 * l)) & 127], q8);
            isum += (int32_t)(2 * (aux >> 28) + 1) * s;
        }
        const float d = quant_f16_to_f32(w[b].d) * a[b].d;
        sumf = sumf + d * (float)isum;
    }
    return 0.125f * sumf;
}

float quant_dot_iq2_xs_ref(const quant_block_iq2_xs *w, const quant_block_q8_K *a, int64_t nb)
{
    float sumf = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        const int8_t *q8 = a[b].qs;
        int32_t isum = 0;
        for (int ib32 = 0; ib32 < QUANT_QK_K / 32; ib32++) {
            int32_t s[2] = {0, 0};
            for (int l = 0; l < 4; l++, q8 += 8) {
                const uint16_t q = w[b].qs[4 * ib32 + l];
                s[l / 2] += grid_dot8(quant_iq2xs_grid[q & 511], quant_ksigns_iq2xs[q >> 9], q8);
            }
            isum += (2 * (w[b].scales[ib32] & 0xf) + 1) * s[0] + (2 * (w[b].scales[ib32] >> 4) + 1) * s[1];
        }
        const float d = quant_f16_to_f32(w[b].d) * a[b].d;
        sumf = sumf + d * (float)isum;
    }
    return 0.125f * sumf;
}

float quant_dot_iq2_s_ref(const quant_block_iq2_s *w, const quant_block_q8_K *a, int64_t nb)
{
    float sumf = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        const int8_t *q8 = a[b].qs;
        const uint8_t *qs = w[b].qs;
        const uint8_t *signs = w[b].qs + QUANT_QK_K / 8;
        int32_t isum = 0;
        for (int ib32 = 0; ib32 < QUANT_QK_K / 32; ib32++, qs += 4, signs += 4) {
            int32_t s[2] = {0, 0};
            for (int l = 0; l < 4; l++, q8 += 8) {
                const uint64_t grid = quant_iq2s_grid[qs[l] | ((w[b].qh[ib32] << (8 - 2 * l)) & 0x300)];
                s[l / 2] += grid_dot8(grid, signs[l], q8);
            }
            isum += (2 * (w[b].scales[ib32] & 0xf) + 1) * s[0] + (2 * (w[b].scales[ib32] >> 4) + 1) * s[1];
        }
        const float d = quant_f16_to_f32(w[b].d) * a[b].d;
        sumf = sumf + d * (float)isum;
    }
    return 0.125f * sumf;
}

float quant_dot_iq3_xxs_ref(const quant_block_iq3_xxs *w, const quant_block_q8_K *a, int64_t nb)
{
    float sumf = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        const int8_t *q8 = a[b].qs;
        const uint8_t *qs = w[b].qs;
        const uint8_t *scales_and_signs = w[b].qs + QUANT_QK_K / 4;
        int32_t isum = 0;
        for (int ib32 = 0; ib32 < QUANT_QK_K / 32; ib32++, qs += 8) {
            const uint32_t aux = load_u32le(scales_and_signs + 4 * ib32);
            int32_t s = 0;
            for (int l = 0; l < 4; l++, q8 += 8)
                s += grid_dot4x2(quant_iq3xxs_grid[qs[2 * l]], quant_iq3xxs_grid[qs[2 * l + 1]],
                                 quant_ksigns_iq2xs[(aux >> (7 * l)) & 127], q8);
            isum += (int32_t)(2 * (aux >> 28) + 1) * s;
        }
        const float d = quant_f16_to_f32(w[b].d) * a[b].d;
        sumf = sumf + d * (float)isum;
    }
    return 0.25f * sumf;
}

float quant_dot_iq3_s_ref(const quant_block_iq3_s *w, const quant_block_q8_K *a, int64_t nb)
{
    float sumf = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        const int8_t *q8 = a[b].qs;
        const uint8_t *qs = w[b].qs;
        const uint8_t *signs = w[b].signs;
        int32_t isum = 0;
        for (int ib32 = 0; ib32 < QUANT_QK_K / 32; ib32++, qs += 8, signs += 4) {
            const uint8_t qh = w[b].qh[ib32];
            int32_t s = 0;
            for (int l = 0; l < 4; l++, q8 += 8)
                s += grid_dot4x2(quant_iq3s_grid[qs[2 * l + 0] | ((qh << (8 - 2 * l)) & 256)],
                                 quant_iq3s_grid[qs[2 * l + 1] | ((qh << (7 - 2 * l)) & 256)], signs[l], q8);
            isum += (2 * ((w[b].scales[ib32 / 2] >> (4 * (ib32 % 2))) & 0xf) + 1) * s;
        }
        const float d = quant_f16_to_f32(w[b].d) * a[b].d;
        sumf = sumf + d * (float)isum;
    }
    return sumf;
}

/* 8 * sum_j grid_j * a[j] + dsign * sum_j a[j] over one iq1 grid entry (grid bytes are int8 -1/0/1). */
static int32_t iq1_dot8(uint64_t grid, int dsign, const int8_t *a)
{
    int32_t sg = 0, sa = 0;
    for (int j = 0; j < 8; j++) {
        sg += (int8_t)((grid >> (8 * j)) & 0xff) * a[j];
        sa += a[j];
    }
    return 8 * sg + dsign * sa;
}

float quant_dot_iq1_s_ref(const quant_block_iq1_s *w, const quant_block_q8_K *a, int64_t nb)
{
    float sumf = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        const int8_t *q8 = a[b].qs;
        const uint8_t *qs = w[b].qs;
        int32_t isum = 0;
        for (int ib = 0; ib < QUANT_QK_K / 32; ib++, qs += 4) {
            const uint16_t qh = w[b].qh[ib];
            const int dsign = qh & 0x8000 ? -1 : 1;
            int32_t s = 0;
            for (int l = 0; l < 4; l++, q8 += 8)
                s += iq1_dot8(quant_iq1s_grid[qs[l] | (((qh >> (3 * l)) & 7) << 8)], dsign, q8);
            isum += (2 * ((qh >> 12) & 7) + 1) * s;
        }
        const float d = quant_f16_to_f32(w[b].d) * a[b].d;
        sumf = sumf + d * (float)isum;
    }
    return 0.125f * sumf;
}

float quant_dot_iq1_m_ref(const quant_block_iq1_m *w, const quant_block_q8_K *a, int64_t nb)
{
    float sumf = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        uint16_t sc[4];
        for (int k = 0; k < 4; k++)
            sc[k] = (uint16_t)(w[b].scales[2 * k] | w[b].scales[2 * k + 1] << 8);
        const int8_t *q8 = a[b].qs;
        const uint8_t *qs = w[b].qs;
        const uint8_t *qh = w[b].qh;
        int32_t isum = 0;
        for (int ib = 0; ib < QUANT_QK_K / 32; ib++, qs += 4, qh += 2) {
            const int ls1 = 2 * ((sc[ib / 2] >> (6 * (ib % 2) + 0)) & 0x7) + 1;
            const int ls2 = 2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 0x7) + 1;
            for (int l = 0; l < 4; l++, q8 += 8) {
                /* Entry l: low index byte qs[l], 3 high bits and the delta sign in one nibble of qh. */
                const int nib = (qh[l / 2] >> (4 * (l % 2))) & 0xf;
                const uint64_t grid = quant_iq1s_grid[qs[l] | (nib & 7) << 8];
                isum += (l < 2 ? ls1 : ls2) * iq1_dot8(grid, nib & 8 ? -1 : 1, q8);
            }
        }
        const float d = quant_f16_to_f32(quant_iq1_m_d(&w[b])) * a[b].d;
        sumf = sumf + d * (float)isum;
    }
    return 0.125f * sumf;
}

float quant_dot_iq4_xs_ref(const quant_block_iq4_xs *w, const quant_block_q8_K *a, int64_t nb)
{
    float sumf = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        const int8_t *q8 = a[b].qs;
        const uint8_t *qs = w[b].qs;
        int32_t isum = 0;
        for (int ib = 0; ib < QUANT_QK_K / 32; ib++, qs += 16, q8 += 32) {
            const int ls = ((w[b].scales_l[ib / 2] >> 4 * (ib % 2)) & 0xf) | (((w[b].scales_h >> 2 * ib) & 3) << 4);
            int32_t s = 0;
            for (int j = 0; j < 16; j++)
                s += quant_kvalues_iq4nl[qs[j] & 0xf] * q8[j] + quant_kvalues_iq4nl[qs[j] >> 4] * q8[j + 16];
            isum += (ls - 32) * s;
        }
        const float d = quant_f16_to_f32(w[b].d) * a[b].d;
        sumf = sumf + d * (float)isum;
    }
    return sumf;
}
