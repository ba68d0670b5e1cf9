/* core/quant/ref_kernels.h — the per-type scalar reference kernels behind quant.h's dispatchers.
 *
 * Public to the quant module and to the SIMD/CUDA kernels that are tested against them (each such kernel
 * calls its type's reference directly). Every function works on `nb` whole blocks (elements for the plain
 * types: F32/F16/BF16 take element counts). Rows are little-endian block arrays as in core/quant/blocks.h.
 *
 * Dot products follow the numeric contract written at the top of core/quant/dot_ref.c; a SIMD kernel must
 * reproduce them bit for bit.
 */
#ifndef GUILD_QUANT_REF_KERNELS_H
#define GUILD_QUANT_REF_KERNELS_H

#include <stdint.h>

#include "core/quant/blocks.h"

/* ---- dequantization: nb blocks -> nb * block_elems floats ---- */
void quant_dequant_f32_ref(const float *x, float *y, int64_t n);
void quant_dequant_f16_ref(const quant_half_t *x, float *y, int64_t n);
void quant_dequant_bf16_ref(const quant_bf16_t *x, float *y, int64_t n);
void quant_dequant_q4_0_ref(const quant_block_q4_0 *x, float *y, int64_t nb);
void quant_dequant_q4_1_ref(const quant_block_q4_1 *x, float *y, int64_t nb);
void quant_dequant_q5_0_ref(const quant_block_q5_0 *x, float *y, int64_t nb);
void quant_dequant_q5_1_ref(const quant_block_q5_1 *x, float *y, int64_t nb);
void quant_dequant_q8_0_ref(const quant_block_q8_0 *x, float *y, int64_t nb);
void quant_dequant_q8_1_ref(const quant_block_q8_1 *x, float *y, int64_t nb);
void quant_dequant_iq4_nl_ref(const quant_block_iq4_nl *x, float *y, int64_t nb);
void quant_dequant_mxfp4_ref(const quant_block_mxfp4 *x, float *y, int64_t nb);
void quant_dequant_q2_K_ref(const quant_block_q2_K *x, float *y, int64_t nb);
void quant_dequant_q3_K_ref(const quant_block_q3_K *x, float *y, int64_t nb);
void quant_dequant_q4_K_ref(const quant_block_q4_K *x, float *y, int64_t nb);
void quant_dequant_q5_K_ref(const quant_block_q5_K *x, float *y, int64_t nb);
void quant_dequant_q6_K_ref(const quant_block_q6_K *x, float *y, int64_t nb);
void quant_dequant_q8_K_ref(const quant_block_q8_K *x, float *y, int64_t nb);
void quant_dequant_iq2_xxs_ref(const quant_block_iq2_xxs *x, float *y, int64_t nb);
void quant_dequant_iq2_xs_ref(const quant_block_iq2_xs *x, float *y, int64_t nb);
void quant_dequant_iq2_s_ref(const quant_block_iq2_s *x, float *y, int64_t nb);
void quant_dequant_iq3_xxs_ref(const quant_block_iq3_xxs *x, float *y, int64_t nb);
void quant_dequant_iq3_s_ref(const quant_block_iq3_s *x, float *y, int64_t nb);
void quant_dequant_iq1_s_ref(const quant_block_iq1_s *x, float *y, int64_t nb);
void quant_dequant_iq1_m_ref(const quant_block_iq1_m *x, float *y, int64_t nb);
void quant_dequant_iq4_xs_ref(const quant_block_iq4_xs *x, float *y, int64_t nb);

/* ---- quantization: nb blocks (elements for F32/F16/BF16) of floats -> blocks; inputs must be finite ---- */
void quant_quant_f32_ref(const float *x, float *y, int64_t n);
void quant_quant_f16_ref(const float *x, quant_half_t *y, int64_t n);
void quant_quant_bf16_ref(const float *x, quant_bf16_t *y, int64_t n);
void quant_quant_q4_0_ref(const float *x, quant_block_q4_0 *y, int64_t nb);
void quant_quant_q4_1_ref(const float *x, quant_block_q4_1 *y, int64_t nb);
void quant_quant_q5_0_ref(const float *x, quant_block_q5_0 *y, int64_t nb);
void quant_quant_q5_1_ref(const float *x, quant_block_q5_1 *y, int64_t nb);
void quant_quant_q8_0_ref(const float *x, quant_block_q8_0 *y, int64_t nb);
void quant_quant_q8_1_ref(const float *x, quant_block_q8_1 *y, int64_t nb);
void quant_quant_mxfp4_ref(const float *x, quant_block_mxfp4 *y, int64_t nb);
void quant_quant_iq4_nl_ref(const float *x, quant_block_iq4_nl *y, int64_t nb);
void quant_quant_q2_K_ref(const float *x, quant_block_q2_K *y, int64_t nb);
void quant_quant_q3_K_ref(const float *x, quant_block_q3_K *y, int64_t nb);
void quant_quant_q4_K_ref(const float *x, quant_block_q4_K *y, int64_t nb);
void quant_quant_q5_K_ref(const float *x, quant_block_q5_K *y, int64_t nb);
void quant_quant_q6_K_ref(const float *x, quant_block_q6_K *y, int64_t nb);
void quant_quant_q8_K_ref(const float *x, quant_block_q8_K *y, int64_t nb);
void quant_quant_iq4_xs_ref(const float *x, quant_block_iq4_xs *y, int64_t nb);

/* ---- dot products (contract: core/quant/dot_ref.c): weights x activations in the type's dot_type ---- */
float quant_dot_f32_ref(const float *w, const float *x, int64_t n);
float quant_dot_f16_ref(const quant_half_t *w, const float *x, int64_t n);
float quant_dot_bf16_ref(const quant_bf16_t *w, const float *x, int64_t n);
float quant_dot_q4_0_ref(const quant_block_q4_0 *w, const quant_block_q8_0 *a, int64_t nb);
float quant_dot_q4_1_ref(const quant_block_q4_1 *w, const quant_block_q8_1 *a, int64_t nb);
float quant_dot_q5_0_ref(const quant_block_q5_0 *w, const quant_block_q8_0 *a, int64_t nb);
float quant_dot_q5_1_ref(const quant_block_q5_1 *w, const quant_block_q8_1 *a, int64_t nb);
float quant_dot_q8_0_ref(const quant_block_q8_0 *w, const quant_block_q8_0 *a, int64_t nb);
float quant_dot_iq4_nl_ref(const quant_block_iq4_nl *w, const quant_block_q8_0 *a, int64_t nb);
float quant_dot_mxfp4_ref(const quant_block_mxfp4 *w, const quant_block_q8_0 *a, int64_t nb);
float quant_dot_q2_K_ref(const quant_block_q2_K *w, const quant_block_q8_K *a, int64_t nb);
float quant_dot_q3_K_ref(const quant_block_q3_K *w, const quant_block_q8_K *a, int64_t nb);
float quant_dot_q4_K_ref(const quant_block_q4_K *w, const quant_block_q8_K *a, int64_t nb);
float quant_dot_q5_K_ref(const quant_block_q5_K *w, const quant_block_q8_K *a, int64_t nb);
float quant_dot_q6_K_ref(const quant_block_q6_K *w, const quant_block_q8_K *a, int64_t nb);
float quant_dot_iq2_xxs_ref(const quant_block_iq2_xxs *w, const quant_block_q8_K *a, int64_t nb);
float quant_dot_iq2_xs_ref(const quant_block_iq2_xs *w, const quant_block_q8_K *a, int64_t nb);
float quant_dot_iq2_s_ref(const quant_block_iq2_s *w, const quant_block_q8_K *a, int64_t nb);
float quant_dot_iq3_xxs_ref(const quant_block_iq3_xxs *w, const quant_block_q8_K *a, int64_t nb);
float quant_dot_iq3_s_ref(const quant_block_iq3_s *w, const quant_block_q8_K *a, int64_t nb);
float quant_dot_iq1_s_ref(const quant_block_iq1_s *w, const quant_block_q8_K *a, int64_t nb);
float quant_dot_iq1_m_ref(const quant_block_iq1_m *w, const quant_block_q8_K *a, int64_t nb);
float quant_dot_iq4_xs_ref(const quant_block_iq4_xs *w, const quant_block_q8_K *a, int64_t nb);

/* The 6-bit scale j (0..7) and min of a Q4_K/Q5_K `scales` array (ggml's get_scale_min_k4). */
static inline void quant_k4_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
    }
}

/* The 16 signed 6-bit scales (-32..31) of a Q3_K block. */
void quant_q3_K_scales(const uint8_t packed[12], int8_t out[16]);

/* The fp16 super-block scale of an IQ1_M block, spread over the top nibbles of its scales. */
static inline uint16_t quant_iq1_m_d(const quant_block_iq1_m *b)
{
    uint16_t sc[4];
    for (int k = 0; k < 4; k++)
        sc[k] = (uint16_t)(b->scales[2 * k] | b->scales[2 * k + 1] << 8);
    return (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
}

#endif
