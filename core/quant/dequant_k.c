/* core/quant/dequant_k.c — dequantization of the K-quant super-blocks (Q2_K..Q6_K) and of Q8_K, in ggml's
 * element order and arithmetic (dequantize_row_q*_K). */
#include <string.h>

#include "core/quant/fp16.h"
#include "core/quant/ref_kernels.h"

void quant_q3_K_scales(const uint8_t packed[12], int8_t out[16])
{
    /* Low 4 bits: bytes 0-7 (low nibbles for scales 0-7, high nibbles for 8-15); high 2 bits: bytes 8-11,
     * scale j in bits 2 (j / 4) of byte 8 + j % 4. Stored with a +32 bias. */
    for (int j = 0; j < 16; j++) {
        const int lo = j < 8 ? packed[j] & 0xF : packed[j - 8] >> 4;
        const int hi = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
        out[j] = (int8_t)((lo | hi << 4) - 32);
    }
}

void quant_dequant_q2_K_ref(const quant_block_q2_K *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        const float d = quant_f16_to_f32(x[i].d);
        const float min = quant_f16_to_f32(x[i].dmin);
        const uint8_t *q = x[i].qs;
        int is = 0;
        /* Each 128-element half: 32 bytes of quants, 2-bit fields at shifts 0, 2, 4, 6 for the four
         * 32-element quarters; each quarter is two sub-blocks of 16 (bytes 0-15, 16-31). */
        for (int n = 0; n < QUANT_QK_K; n += 128) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int half = 0; half < 2; half++) {
                    const uint8_t sc = x[i].scales[is++];
                    const float dl = d * (sc & 0xF);
                    const float ml = min * (sc >> 4);
                    for (int l = 0; l < 16; l++)
                        *y++ = dl * ((q[l + 16 * half] >> shift) & 3) - ml;
                }
            }
            q += 32;
        }
    }
}

void quant_dequant_q3_K_ref(const quant_block_q3_K *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        const float d_all = quant_f16_to_f32(x[i].d);
        int8_t scales[16];
        quant_q3_K_scales(x[i].scales, scales);
        const uint8_t *q = x[i].qs;
        const uint8_t *hm = x[i].hmask;
        uint8_t m = 1;
        int is = 0;
        for (int n = 0; n < QUANT_QK_K; n += 128) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int half = 0; half < 2; half++) {
                    const float dl = d_all * scales[is++];
                    for (int l = 16 * half; l < 16 * half + 16; l++)
                        *y++ = dl * (((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
                }
                m <<= 1;
            }
            q += 32;
        }
    }
}

void quant_dequant_q4_K_ref(const quant_block_q4_K *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *q = x[i].qs;
        const float d = quant_f16_to_f32(x[i].d);
        const float min = quant_f16_to_f32(x[i].dmin);
        uint8_t sc, m;
        for (int is = 0; is < 8; is += 2, q += 32) {
            quant_k4_scale_min(is + 0, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            quant_k4_scale_min(is + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * (q[l] >> 4) - m2;
        }
    }
}

void quant_dequant_q5_K_ref(const quant_block_q5_K *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *ql = x[i].qs;
        const uint8_t *qh = x[i].qh;
        const float d = quant_f16_to_f32(x[i].d);
        const float min = quant_f16_to_f32(x[i].dmin);
        uint8_t sc, m;
        uint8_t u1 = 1, u2 = 2;
        for (int is = 0; is < 8; is += 2, ql += 32) {
            quant_k4_scale_min(is + 0, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            quant_k4_scale_min(is + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
            u1 <<= 2;
            u2 <<= 2;
        }
    }
}

void quant_dequant_q6_K_ref(const quant_block_q6_K *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        const float d = quant_f16_to_f32(x[i].d);
        const uint8_t *ql = x[i].ql;
        const uint8_t *qh = x[i].qh;
        const int8_t *sc = x[i].scales;
        for (int n = 0; n < QUANT_QK_K; n += 128) {
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = (int)((ql[l + 0] & 0xF) | ((qh[l] >> 0) & 3) << 4) - 32;
                const int q2 = (int)((ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4) - 32;
                const int q3 = (int)((ql[l + 0] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
                const int q4 = (int)((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
                y[l + 0] = d * sc[is + 0] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
            y += 128;
            ql += 64;
            qh += 32;
            sc += 8;
        }
    }
}

void quant_dequant_q8_K_ref(const quant_block_q8_K *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++)
        for (int j = 0; j < QUANT_QK_K; j++)
            *y++ = x[i].d * x[i].qs[j];
}
