/* core/kern/x86/avx512_quant.h — the activation quantizer to Q8_K with AVX-512 (F, BW): the bytes of
 * quant_quant_q8_K_ref (core/quant/quantize_ref.c), 16 elements a step. Included by avx512.c (the VNNI and AMX
 * levels inherit it).
 *
 * Why it exists: the expert pipeline quantizes a token's activations (2,048 floats at the Qwen3-30B-A3B shape)
 * once per layer and its hidden vectors once per pair, and at one token every other thread waits for the
 * former; the scalar reference takes microseconds per row there.
 *
 * The same bytes, step by step: the block's largest |x| (a maximum: exact in any order; a NaN never replaces it,
 * as the reference's `ax > amax` never holds for one); its first element of that magnitude (the reference keeps
 * the first strict maximum); iscale and d as scalars, the same expressions; each quant the reference's
 * nearest_int(iscale * x) (one rounded product, one rounded sum with 1.5 * 2^23, the mantissa's low bits; no
 * fused multiply-add: the file is built with -ffp-contract=off and the intrinsics are separate operations),
 * capped at 127 and truncated to its low byte as the reference's conversion to int8_t does; each bsum the
 * exact integer sum of those bytes, truncated to int16. */
#ifndef GUILD_KERN_X86_AVX512_QUANT_H
#define GUILD_KERN_X86_AVX512_QUANT_H

#include <stdint.h>
#include <string.h>

#include "core/quant/blocks.h"

static void quantize_q8_K_avx512(const float *x, void *dst, int64_t n)
{
    quant_block_q8_K *y = dst;
    const int64_t nb = n / QUANT_QK_K;
    const __m512 magic = _mm512_set1_ps(12582912.f);
    const __m512i mant = _mm512_set1_epi32(0x007fffff), half = _mm512_set1_epi32(0x00400000);
    const __m512i cap = _mm512_set1_epi32(127);
    for (int64_t i = 0; i < nb; i++, x += QUANT_QK_K) {
        /* max(|x|, acc) keeps acc when |x| is NaN (vmaxps returns its second operand then) */
        __m512 acc = _mm512_setzero_ps();
        for (int c = 0; c < QUANT_QK_K / 16; c++)
            acc = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + 16 * c)), acc);
        const float amax = _mm512_reduce_max_ps(acc);
        if (!amax) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        int first = -1;
        for (int c = 0; c < QUANT_QK_K / 16 && first < 0; c++) {
            const __mmask16 m =
                _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + 16 * c)), _mm512_set1_ps(amax), _CMP_EQ_OQ);
            if (m)
                first = 16 * c + __builtin_ctz(m);
        }
        const float iscale = -127.f / x[first];
        const __m512 vs = _mm512_set1_ps(iscale);
        for (int c = 0; c < QUANT_QK_K / 16; c++) {
            const __m512 v = _mm512_add_ps(_mm512_mul_ps(vs, _mm512_loadu_ps(x + 16 * c)), magic);
            const __m512i q = _mm512_min_epi32(_mm512_sub_epi32(_mm512_and_si512(_mm512_castps_si512(v), mant), half),
                                               cap);
            const __m128i b = _mm512_cvtepi32_epi8(q); /* the low byte of each, as (int8_t) */
            _mm_storeu_si128((__m128i *)(y[i].qs + 16 * c), b);
            y[i].bsums[c] = (int16_t)_mm512_reduce_add_epi32(_mm512_cvtepi8_epi32(b));
        }
        y[i].d = 1 / iscale;
    }
}

#endif
