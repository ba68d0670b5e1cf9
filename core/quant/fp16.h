/* core/quant/fp16.h — bit-exact scalar conversions between float and the small float formats of GGUF blocks:
 * IEEE binary16 (F16, the d/m fields of most blocks), bfloat16 (BF16) and E8M0 (the MXFP4 block exponent).
 *
 * Header-inline so that C, C++ and CUDA code (host and device) share one definition; integer arithmetic
 * only, so the result never depends on the FPU's rounding mode, flush-to-zero setting or F16C availability.
 *   - f16 -> f32 and bf16 -> f32 are exact (every value, subnormals, infinities); an f16 NaN keeps its
 *     payload and comes out quiet, as F16C's vcvtph2ps does.
 *   - f32 -> f16 rounds to nearest, ties to even, as F16C's vcvtps2ph with imm8 = 0 (and ggml's reference)
 *     does: overflow gives infinity, subnormal results are produced, a NaN stays a NaN (quiet bit set, top 9
 *     payload bits kept, as vcvtps2ph does; ggml's portable fallback returns 0x7e00 instead).
 *   - f32 -> bf16 rounds to nearest even as ggml does; a NaN stays a NaN (quiet bit forced).
 *   - E8M0: ggml's decoding, including its choice that e = 0 is 2^-127 (a subnormal) and e = 255 is 2^128
 *     in the "full" form (not NaN).
 */
#ifndef GUILD_QUANT_FP16_H
#define GUILD_QUANT_FP16_H

#ifdef __cplusplus
#include <cstdint>
#include <cstring>
#else
#include <stdint.h>
#include <string.h>
#endif

#if defined(__CUDACC__)
#define QUANT_FP_FN static inline __host__ __device__
#else
#define QUANT_FP_FN static inline
#endif

QUANT_FP_FN float quant_bits_to_f32(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

QUANT_FP_FN uint32_t quant_f32_to_bits(float f)
{
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return bits;
}

/* IEEE binary16 bits -> float, exact. */
QUANT_FP_FN float quant_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1f) {
        /* infinity, or NaN with its payload, quieted as vcvtph2ps does */
        bits = sign | 0x7f800000u | (mant << 13) | (mant ? 0x00400000u : 0u);
    } else if (exp != 0) {
        bits = sign | ((exp + 112u) << 23) | (mant << 13); /* rebias 15 -> 127 */
    } else if (mant == 0) {
        bits = sign;
    } else {
        /* Subnormal mant * 2^-24: normalise so that the leading one becomes the implicit bit. */
        uint32_t e = 113;
        while (!(mant & 0x400u)) {
            mant <<= 1;
            e--;
        }
        bits = sign | (e << 23) | ((mant & 0x3ffu) << 13);
    }
    return quant_bits_to_f32(bits);
}

/* float -> IEEE binary16 bits, round to nearest even (see the header comment for NaN and overflow). */
QUANT_FP_FN uint16_t quant_f32_to_f16(float f)
{
    uint32_t x = quant_f32_to_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u) /* >= 65520: rounds past 65504 (ties go to the even infinity) */
        return (uint16_t)(sign | 0x7c00u);
    if (ax >= 0x38800000u) { /* >= 2^-14: normal result; a mantissa carry bumps the exponent correctly */
        ax += 0xfffu + ((ax >> 13) & 1u);
        ax -= 112u << 23;
        return (uint16_t)(sign | (ax >> 13));
    }
    if (ax <= 0x33000000u) /* <= 2^-25: rounds to zero (2^-25 itself is a tie, zero is even) */
        return sign;
    /* Subnormal result in units of 2^-24: value = m * 2^(e - 150), so q = m >> (126 - e), rounded. */
    uint32_t e = ax >> 23;
    uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e; /* 14..24 */
    uint32_t q = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u)))
        q++;
    return (uint16_t)(sign | q);
}

/* bfloat16 bits -> float, exact. */
QUANT_FP_FN float quant_bf16_to_f32(uint16_t h)
{
    return quant_bits_to_f32((uint32_t)h << 16);
}

/* float -> bfloat16 bits, round to nearest even; NaN stays NaN (quiet bit forced), as ggml. */
QUANT_FP_FN uint16_t quant_f32_to_bf16(float f)
{
    uint32_t x = quant_f32_to_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 64u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* E8M0 exponent -> 2^(e - 127); e = 0 gives the subnormal 2^-127 (ggml_e8m0_to_fp32). */
QUANT_FP_FN float quant_e8m0_to_f32(uint8_t e)
{
    return quant_bits_to_f32(e == 0 ? 0x00400000u : (uint32_t)e << 23);
}

/* E8M0 exponent -> 2^(e - 128), the MXFP4 block scale: kvalues_mxfp4 holds E2M1 values doubled so that they
 * are integers (ggml_e8m0_to_fp32_half). */
QUANT_FP_FN float quant_e8m0_to_f32_half(uint8_t e)
{
    return quant_bits_to_f32(e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23);
}

#undef QUANT_FP_FN

#endif
