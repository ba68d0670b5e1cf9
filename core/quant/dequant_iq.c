/* core/quant/dequant_iq.c — dequantization of the IQ super-block types (lattice grids, signs, IQ1 deltas,
 * IQ4_XS), in ggml's element order and arithmetic (dequantize_row_iq*). */
#include <string.h>

#include "core/quant/fp16.h"
#include "core/quant/iq_tables.h"
#include "core/quant/ref_kernels.h"

static uint32_t load_u32le(const void *p)
{
    const uint8_t *b = p;
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

/* Byte j of a grid entry (grids hold one element per byte, little-endian). */
static int grid8(uint64_t entry, int j)
{
    return (int)((entry >> (8 * j)) & 0xff);
}

static float sign_of(uint8_t signs, int j)
{
    return signs & quant_kmask_iq2xs[j] ? -1.f : 1.f;
}

void quant_dequant_iq2_xxs_ref(const quant_block_iq2_xxs *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        const float d = quant_f16_to_f32(x[i].d);
        for (int ib32 = 0; ib32 < QUANT_QK_K / 32; ib32++) {
            /* qs[4 ib32 .. 4 ib32 + 3]: a uint32 of four grid indices, a uint32 of 4 x 7 sign bits + scale. */
            const uint32_t idx = load_u32le(x[i].qs + 4 * ib32);
            const uint32_t aux = load_u32le(x[i].qs + 4 * ib32 + 2);
            const float db = d * (0.5f + (aux >> 28)) * 0.25f;
            for (int l = 0; l < 4; l++, y += 8) {
                const uint64_t grid = quant_iq2xxs_grid[(idx >> (8 * l)) & 0xff];
                const uint8_t signs = quant_ksigns_iq2xs[(aux >> (7 * l)) & 127];
                for (int j = 0; j < 8; j++)
                    y[j] = db * grid8(grid, j) * sign_of(signs, j);
            }
        }
    }
}

void quant_dequant_iq2_xs_ref(const quant_block_iq2_xs *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        const float d = quant_f16_to_f32(x[i].d);
        for (int ib32 = 0; ib32 < QUANT_QK_K / 32; ib32++) {
            const float db[2] = {d * (0.5f + (x[i].scales[ib32] & 0xf)) * 0.25f,
                                 d * (0.5f + (x[i].scales[ib32] >> 4)) * 0.25f};
            for (int l = 0; l < 4; l++, y += 8) {
                const uint16_t q = x[i].qs[4 * ib32 + l];
                const uint64_t grid = quant_iq2xs_grid[q & 511];
                const uint8_t signs = quant_ksigns_iq2xs[q >> 9];
                for (int j = 0; j < 8; j++)
                    y[j] = db[l / 2] * grid8(grid, j) * sign_of(signs, j);
            }
        }
    }
}

void quant_dequant_iq2_s_ref(const quant_block_iq2_s *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        const float d = quant_f16_to_f32(x[i].d);
        const uint8_t *qs = x[i].qs;
        const uint8_t *signs = x[i].qs + QUANT_QK_K / 8;
        for (int ib32 = 0; ib32 < QUANT_QK_K / 32; ib32++, qs += 4, signs += 4) {
            const float db[2] = {d * (0.5f + (x[i].scales[ib32] & 0xf)) * 0.25f,
                                 d * (0.5f + (x[i].scales[ib32] >> 4)) * 0.25f};
            for (int l = 0; l < 4; l++, y += 8) {
                const uint64_t grid = quant_iq2s_grid[qs[l] | ((x[i].qh[ib32] << (8 - 2 * l)) & 0x300)];
                for (int j = 0; j < 8; j++)
                    y[j] = db[l / 2] * grid8(grid, j) * sign_of(signs[l], j);
            }
        }
    }
}

void quant_dequant_iq3_xxs_ref(const quant_block_iq3_xxs *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        const float d = quant_f16_to_f32(x[i].d);
        const uint8_t *qs = x[i].qs;
        const uint8_t *scales_and_signs = x[i].qs + QUANT_QK_K / 4;
        for (int ib32 = 0; ib32 < QUANT_QK_K / 32; ib32++, qs += 8) {
            const uint32_t aux = load_u32le(scales_and_signs + 4 * ib32);
            const float db = d * (0.5f + (aux >> 28)) * 0.5f;
            for (int l = 0; l < 4; l++, y += 8) {
                const uint8_t signs = quant_ksigns_iq2xs[(aux >> (7 * l)) & 127];
                const uint32_t g1 = quant_iq3xxs_grid[qs[2 * l + 0]];
                const uint32_t g2 = quant_iq3xxs_grid[qs[2 * l + 1]];
                for (int j = 0; j < 4; j++) {
                    y[j + 0] = db * grid8(g1, j) * sign_of(signs, j + 0);
                    y[j + 4] = db * grid8(g2, j) * sign_of(signs, j + 4);
                }
            }
        }
    }
}

void quant_dequant_iq3_s_ref(const quant_block_iq3_s *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        const float d = quant_f16_to_f32(x[i].d);
        const uint8_t *qs = x[i].qs;
        const uint8_t *qh = x[i].qh;
        const uint8_t *signs = x[i].signs;
        for (int ib32 = 0; ib32 < QUANT_QK_K / 32; ib32++, qs += 8, signs += 4) {
            /* Scales come in nibble pairs: low nibble for the even 32-group, high for the odd one. */
            const int ls = (x[i].scales[ib32 / 2] >> (4 * (ib32 % 2))) & 0xf;
            const float db = d * (1 + 2 * ls);
            for (int l = 0; l < 4; l++, y += 8) {
                const uint32_t g1 = quant_iq3s_grid[qs[2 * l + 0] | ((qh[ib32] << (8 - 2 * l)) & 256)];
                const uint32_t g2 = quant_iq3s_grid[qs[2 * l + 1] | ((qh[ib32] << (7 - 2 * l)) & 256)];
                for (int j = 0; j < 4; j++) {
                    y[j + 0] = db * grid8(g1, j) * sign_of(signs[l], j + 0);
                    y[j + 4] = db * grid8(g2, j) * sign_of(signs[l], j + 4);
                }
            }
        }
    }
}

void quant_dequant_iq1_s_ref(const quant_block_iq1_s *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        const float d = quant_f16_to_f32(x[i].d);
        const uint8_t *qs = x[i].qs;
        for (int ib = 0; ib < QUANT_QK_K / 32; ib++, qs += 4) {
            const uint16_t qh = x[i].qh[ib];
            const float dl = d * (2 * ((qh >> 12) & 7) + 1);
            const float delta = qh & 0x8000 ? -QUANT_IQ1S_DELTA : QUANT_IQ1S_DELTA;
            for (int l = 0; l < 4; l++, y += 8) {
                const uint64_t grid = quant_iq1s_grid[qs[l] | (((qh >> (3 * l)) & 7) << 8)];
                for (int j = 0; j < 8; j++)
                    y[j] = dl * ((int8_t)grid8(grid, j) + delta);
            }
        }
    }
}

void quant_dequant_iq1_m_ref(const quant_block_iq1_m *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        uint16_t sc[4];
        for (int k = 0; k < 4; k++)
            sc[k] = (uint16_t)(x[i].scales[2 * k] | x[i].scales[2 * k + 1] << 8);
        const float d = quant_f16_to_f32(quant_iq1_m_d(&x[i]));
        const uint8_t *qs = x[i].qs;
        const uint8_t *qh = x[i].qh;
        for (int ib = 0; ib < QUANT_QK_K / 32; ib++, qs += 4, qh += 2) {
            const float dl1 = d * (2 * ((sc[ib / 2] >> (6 * (ib % 2) + 0)) & 0x7) + 1);
            const float dl2 = d * (2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 0x7) + 1);
            const uint16_t idx[4] = {(uint16_t)(qs[0] | ((qh[0] << 8) & 0x700)),
                                     (uint16_t)(qs[1] | ((qh[0] << 4) & 0x700)),
                                     (uint16_t)(qs[2] | ((qh[1] << 8) & 0x700)),
                                     (uint16_t)(qs[3] | ((qh[1] << 4) & 0x700))};
            const float delta[4] = {qh[0] & 0x08 ? -QUANT_IQ1M_DELTA : QUANT_IQ1M_DELTA,
                                    qh[0] & 0x80 ? -QUANT_IQ1M_DELTA : QUANT_IQ1M_DELTA,
                                    qh[1] & 0x08 ? -QUANT_IQ1M_DELTA : QUANT_IQ1M_DELTA,
                                    qh[1] & 0x80 ? -QUANT_IQ1M_DELTA : QUANT_IQ1M_DELTA};
            for (int l = 0; l < 4; l++, y += 8) {
                const uint64_t grid = quant_iq1s_grid[idx[l]];
                const float dl = l < 2 ? dl1 : dl2;
                for (int j = 0; j < 8; j++)
                    y[j] = dl * ((int8_t)grid8(grid, j) + delta[l]);
            }
        }
    }
}

void quant_dequant_iq4_xs_ref(const quant_block_iq4_xs *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *qs = x[i].qs;
        const float d = quant_f16_to_f32(x[i].d);
        for (int ib = 0; ib < QUANT_QK_K / 32; ib++, y += 32, qs += 16) {
            const int ls = ((x[i].scales_l[ib / 2] >> 4 * (ib % 2)) & 0xf) | (((x[i].scales_h >> 2 * ib) & 3) << 4);
            const float dl = d * (ls - 32);
            for (int j = 0; j < 16; j++) {
                y[j + 0] = dl * quant_kvalues_iq4nl[qs[j] & 0xf];
                y[j + 16] = dl * quant_kvalues_iq4nl[qs[j] >> 4];
            }
        }
    }
}
