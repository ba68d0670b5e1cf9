/* core/kern/x86/avx512_util.h — small helpers of the AVX-512 kernel files. Included only by files compiled for
 * AVX-512 (after their #pragma GCC target), so every function here takes that file's ISA. */
#ifndef GUILD_KERN_X86_AVX512_UTIL_H
#define GUILD_KERN_X86_AVX512_UTIL_H

#include <immintrin.h>

#include "core/quant/blocks.h"
#include <stdint.h>
#include <string.h>

/* v = 128 hi + lo with lo = v & 127 (0..127) and hi = floor(v / 128), as bytes: both fit vpdpbusd's operands
 * (lo unsigned or signed, hi signed) for |v| <= 16383. */
static inline void k512_split128(int v, uint8_t *lo, uint8_t *hi)
{
    *lo = (uint8_t)(v & 127);
    *hi = (uint8_t)(int8_t)((v - (v & 127)) / 128);
}

/* A q8_K block's 8 pair sums v = bsums[2 s] + bsums[2 s + 1] split as v = 128 hi + lo (lo in 0..127, hi =
 * floor(v / 128) in -32..32), byte s of out[0] = lo, of out[1] = hi: both halves then fit vpdpbusd's operands,
 * which is how the Q4_K/Q5_K kernels form sum_s min_s * v_s for 16 rows at once. */
static inline void k512_pair_split(const quant_block_q8_K *a, uint64_t out[2])
{
    uint8_t lo[8], hi[8];
    for (int s = 0; s < 8; s++)
        k512_split128(a->bsums[2 * s] + a->bsums[2 * s + 1], &lo[s], &hi[s]);
    memcpy(&out[0], lo, 8);
    memcpy(&out[1], hi, 8);
}

/* Q3_K's 12 packed scale bytes of 16 rows in row lanes (A0, A1, A2: bytes 0-3, 4-7, 8-11 of each row's) -> the 16
 * scales minus 32 as signed bytes, 4 to a vector (out[j] byte i: scale 4 j + i): quant_q3_K_scales lane-wise, low
 * 4 bits from bytes 0-7 (low nibbles: scales 0-7, high: 8-15), high 2 bits from bytes 8-11. */
static inline void k512_q3_scales_lanes(__m512i A0, __m512i A1, __m512i A2, __m512i out[4])
{
    const __m512i m0f = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30), b32 = _mm512_set1_epi8(32);
    /* a | (b & c) (0xf8): low bits | high bits moved to bits 4-5 */
    out[0] = _mm512_ternarylogic_epi32(_mm512_and_si512(A0, m0f), _mm512_slli_epi32(A2, 4), m30, 0xf8);
    out[1] = _mm512_ternarylogic_epi32(_mm512_and_si512(A1, m0f), _mm512_slli_epi32(A2, 2), m30, 0xf8);
    out[2] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi32(A0, 4), m0f), A2, m30, 0xf8);
    out[3] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi32(A1, 4), m0f), _mm512_srli_epi32(A2, 2), m30,
                                       0xf8);
    for (int j = 0; j < 4; j++)
        out[j] = _mm512_sub_epi8(out[j], b32);
}

/* Exact fp16 -> fp32 (F16C), as quant_f16_to_f32 (same bits for every input, NaN payloads included). */
static inline float k512_f16(uint16_t h)
{
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

static inline uint32_t k512_load_u32(const void *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Sum of the 16 int32 lanes of v (exact: integer). */
static inline int32_t k512_hsum_epi32(__m512i v)
{
    __m256i y = _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
    __m128i x = _mm_add_epi32(_mm256_castsi256_si128(y), _mm256_extracti128_si256(y, 1));
    x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0x4e));
    x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0xb1));
    return _mm_cvtsi128_si32(x);
}

/* Folds 16 int32 lanes to 4 (lane i holds the sum of lanes i, i+4, i+8, i+12). */
static inline __m128i k512_fold4_epi32(__m512i v)
{
    __m256i y = _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
    return _mm_add_epi32(_mm256_castsi256_si128(y), _mm256_extracti128_si256(y, 1));
}

/* [sum(a4), sum(b4)] from two vectors of 4 int32, in lanes 0 and 1 (and again in 2, 3). */
static inline __m128i k512_hsum2_epi32(__m128i a4, __m128i b4)
{
    __m128i h = _mm_hadd_epi32(a4, b4);
    return _mm_hadd_epi32(h, h);
}

/* Q4_K / Q5_K packed 6-bit scales -> [sc0..sc7, m0..m7] as 16 uint8 (ggml's kmask unpacking, equal to
 * quant_k4_scale_min for every j). */
static inline __m128i k512_k4_scales(const uint8_t *scales)
{
    const uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
    uint32_t u[3];
    memcpy(u, scales, 12);
    const uint32_t u3 = ((u[2] >> 4) & kmask2) | (((u[1] >> 6) & kmask3) << 4);
    const uint32_t u2 = u[1] & kmask1;
    const uint32_t u1 = (u[2] & kmask2) | (((u[0] >> 6) & kmask3) << 4);
    const uint32_t u0 = u[0] & kmask1;
    return _mm_set_epi32((int)u3, (int)u2, (int)u1, (int)u0);
}

/* The 8 six-bit scales minus 32, as int8 in the low 8 bytes (pdep spreads the nibbles and the 2-bit highs). */
static inline __m128i k512_iq4xs_scales(const quant_block_iq4_xs *x)
{
    uint32_t lo;
    memcpy(&lo, x->scales_l, 4);
    const uint64_t ls = _pdep_u64(lo, 0x0f0f0f0f0f0f0f0full) | _pdep_u64(x->scales_h, 0x3030303030303030ull);
    return _mm_sub_epi8(_mm_cvtsi64_si128((long long)ls), _mm_set1_epi8(32));
}

/* ---- 16 rows' integer block sums -> one vector per sum, lanes = rows ------------------------------------ *
 *
 * A kernel leaves, for one block of 16 rows (one token), 16 vectors st[i] of 16 int32 lanes: lanes 0-7 of
 * st[i] sum to row i's first integer (isum), lanes 8-15 to its second (imin, or the next block's isum for
 * types with one sum per block). k512_tree16 reduces all 16 at once with a transposition tree (~2.8 shuffles
 * and adds per row instead of a full horizontal sum each) and returns the two sums as vectors with row i in
 * lane i, so that the reference's float sequence then runs lane-wise over 16 rows and the serial sum over
 * blocks is one vector add per block. */
static inline void k512_tree16(const __m512i *st, __m512i *first, __m512i *second)
{
    __m512i u[8], v[4], w[2];
    /* pairs of rows -> [x.first, x.second, y.first, y.second], 4 partial lanes each */
    for (int i = 0; i < 8; i++) {
        const __m512i x = st[2 * i], y = st[2 * i + 1];
        u[i] = _mm512_add_epi32(_mm512_shuffle_i64x2(x, y, _MM_SHUFFLE(2, 0, 2, 0)),
                                _mm512_shuffle_i64x2(x, y, _MM_SHUFFLE(3, 1, 3, 1)));
    }
    /* within each 128-bit chunk: 4 lanes of two vectors -> 2 lanes each */
    for (int j = 0; j < 4; j++)
        v[j] = _mm512_add_epi32(_mm512_unpacklo_epi32(u[2 * j], u[2 * j + 1]),
                                _mm512_unpackhi_epi32(u[2 * j], u[2 * j + 1]));
    /* -> 1 lane each: chunk c, lane l of w[k] is the total of chunk c of u[4 k + l] */
    for (int k = 0; k < 2; k++)
        w[k] = _mm512_add_epi32(_mm512_unpacklo_epi64(v[2 * k], v[2 * k + 1]),
                                _mm512_unpackhi_epi64(v[2 * k], v[2 * k + 1]));
    /* row m = 8 k + 2 l + p sits in w[k], lane l of chunk 2 p (first) or 2 p + 1 (second) */
    const __m512i idx_first = _mm512_set_epi32(27, 19, 26, 18, 25, 17, 24, 16, 11, 3, 10, 2, 9, 1, 8, 0);
    const __m512i idx_second = _mm512_set_epi32(31, 23, 30, 22, 29, 21, 28, 20, 15, 7, 14, 6, 13, 5, 12, 4);
    *first = _mm512_permutex2var_epi32(w[0], idx_first, w[1]);
    *second = _mm512_permutex2var_epi32(w[0], idx_second, w[1]);
}

/* The sum vector of one row's block: 8 int32 partials of the first sum, 8 of the second. */
static inline __m512i k512_pack2(__m256i first8, __m256i second8)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(first8), second8, 1);
}

/* 16 int32 lanes folded to 8 (lane i + lane i + 8). */
static inline __m256i k512_fold8_epi32(__m512i v)
{
    return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

#endif
