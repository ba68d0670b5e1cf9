/* core/kern/x86/avx512_pack_iq4xs.h — the packed IQ4_XS kernel (core/kern/pack.h; record layout in pack.c) for
 * 1 .. KERN_PACK_MAX_TOKENS tokens. A template: avx512_vnni.c includes it in its VNNI part (KERN_NAME
 * x_avx512vnni) and again in its AVX512_VBMI part (x_avx512vbmi), where __AVX512VBMI__ is defined and the
 * levels are looked up by vpermb. Its non-templated parts are defined once.
 *
 * Row r of a group is lane r of every vector, so nothing is reduced across lanes. Per record, token and
 * sub-block s (chunks 4 s + g, g < 4: bytes qs[16 s + 4 g ..] of the 16 rows):
 *   P_s = -128 A_s + sum_g vpdpbusd(lev(qs & 15), a[32 s + 4 g ..]) + vpdpbusd(lev(qs >> 4), a[32 s + 16 + 4 g ..])
 * with lev = kvalue + 128 (unsigned, as vpdpbusd needs: the plain VNNI kernel's bias) and A_s the sum of a over
 * the sub-block, so P_s = sum kvalue * a exactly; then isum = sum_s (ls_s - 32) P_s, all in int32 lanes
 * (|P_s| <= 32 * 127 * 128, |isum| <= 8 * 32 * 520192 < 2^28). The float finish is the reference's per block:
 * d = fp16(w.d) * a.d;  sumf = sumf + d * (float)isum (quant_dot_iq4_xs_ref), lane-wise.
 * The bias rides in the accumulator's start value (a broadcast): no instruction per record. In cache this
 * computes weights about twice as fast as the plain kernel (a little less without VBMI). */

#ifndef GUILD_KERN_X86_AVX512_PACK_IQ4XS_ONCE
#define GUILD_KERN_X86_AVX512_PACK_IQ4XS_ONCE

#define PIQ_RECORD 2176

/* One token's block: -128 times the sums of a over its 8 sub-blocks, the record function's aux. */
static inline __attribute__((always_inline)) void piq_prep(const quant_block_q8_K *a, void *aux)
{
    int32_t *nA = aux;
    pkd_qs_sums(a, 32, nA);
    for (int s = 0; s < 8; s++)
        nA[s] *= -128;
}

/* vpshufb indices taking byte k of each dword into its top byte (the others zero), for a sign-extending
 * arithmetic shift */
#define PIQ_TOP1(i, k) (int)(0x00808080u | (uint32_t)(4 * (i) + (k)) << 24)
#define PIQ_TOP_IDX(k) _mm512_set4_epi32(PIQ_TOP1(3, k), PIQ_TOP1(2, k), PIQ_TOP1(1, k), PIQ_TOP1(0, k))
#endif

/* The 16 rows' scales ls_s - 32 of sub-blocks 0-3 (sc[0..3]) and 4-7 as int32 lanes, from the record header:
 * ls_s = ((scales_l >> 4 s) & 15) | ((scales_h >> 2 s) & 3) << 4 (quant_dot_iq4_xs_ref). */
static inline __attribute__((always_inline)) void KERN_NAME(piq_scales)(const char *o, __m512i sc[8])
{
    const __m512i L = _mm512_loadu_si512(o + 64); /* scales_l of row r in lane r */
    const __m512i H = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(o + 32)));
#ifdef __AVX512VBMI__
    /* Bytes k of row r's dword in E (F): nibble k (4 + k) of its scales_l and bits 2k, 2k + 1 (8 + 2k, ..) of
     * its scales_h, gathered by vpmultishiftqb (byte <- 8 bits from a bit offset of its qword, rotating), the
     * offsets placing the low bits at 0-3 and the high bits at 4-5; then ls - 32 as signed bytes, sign-extended
     * per sub-block. 21 instructions for the 8 scale vectors where the shifts and masks take 38. */
    const __m512i m0f = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30), b32 = _mm512_set1_epi8(32);
    const __m512i ctl_el = _mm512_set1_epi64(0x2c2824200c080400LL), ctl_fl = _mm512_set1_epi64(0x3c3834301c181410LL);
    const __m512i ctl_eh = _mm512_set1_epi64(0x22201e1c02003e3cLL), ctl_fh = _mm512_set1_epi64(0x2a2826240a080604LL);
    const __m512i E = _mm512_sub_epi8(
        _mm512_ternarylogic_epi32(_mm512_multishift_epi64_epi8(ctl_el, L),
                                  _mm512_and_si512(_mm512_multishift_epi64_epi8(ctl_eh, H), m30), m0f, 0xec),
        b32);
    const __m512i F = _mm512_sub_epi8(
        _mm512_ternarylogic_epi32(_mm512_multishift_epi64_epi8(ctl_fl, L),
                                  _mm512_and_si512(_mm512_multishift_epi64_epi8(ctl_fh, H), m30), m0f, 0xec),
        b32);
    for (int k = 0; k < 4; k++) {
        sc[k] = _mm512_srai_epi32(_mm512_shuffle_epi8(E, PIQ_TOP_IDX(k)), 24);
        sc[4 + k] = _mm512_srai_epi32(_mm512_shuffle_epi8(F, PIQ_TOP_IDX(k)), 24);
    }
#else
    const __m512i m0f = _mm512_set1_epi32(0x0f), m30 = _mm512_set1_epi32(0x30), c32 = _mm512_set1_epi32(32);
    const __m512i H4 = _mm512_slli_epi32(H, 4); /* the high bits of scale s at 2 s + 4 */
    for (int s = 0; s < 8; s++) {
        const __m512i lo = _mm512_srli_epi32(L, (unsigned)(4 * s));
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi32(H4, (unsigned)(2 * s)), m30);
        sc[s] = _mm512_sub_epi32(_mm512_ternarylogic_epi32(lo, hi, m0f, 0xec), c32); /* (lo & 15) | hi */
    }
#endif
}

/* The levels + 128 of a chunk's low (*lo) and high (*hi) nibbles; tbl: the 16 levels + 128 in every 128-bit
 * chunk. VBMI: vpermb reads 6 index bits, so with the table 4 times over the bits above the nibble pick a
 * copy; the high nibbles come down by vpmultishiftqb (byte k of a qword <- its bits 8 k + 4 ..), which runs
 * beside the vpermbs where a shift would compete with the vpdpbusds (faster in L2 than vpsrlw). */
static inline __attribute__((always_inline)) void KERN_NAME(piq_levels)(__m512i x, __m512i tbl, __m512i *lo,
                                                                       __m512i *hi)
{
#ifdef __AVX512VBMI__
    *lo = _mm512_permutexvar_epi8(x, tbl);
    *hi = _mm512_permutexvar_epi8(_mm512_multishift_epi64_epi8(_mm512_set1_epi64(0x3c342c241c140c04LL), x), tbl);
#else
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    *lo = _mm512_shuffle_epi8(tbl, _mm512_and_si512(x, m4));
    *hi = _mm512_shuffle_epi8(tbl, _mm512_and_si512(_mm512_srli_epi16(x, 4), m4));
#endif
}

/* One record (o) for tt tokens: sumf[t] = sumf[t] + d * (float)isum; a pkd_record_fn. aux[t]: the token's
 * -128 A_s of the block (piq_prep). */
static inline __attribute__((always_inline)) void KERN_NAME(piq_record)(const char *o, int tt,
                                                                       const quant_block_q8_K *const *at, int64_t b,
                                                                       const void *const *aux, __m512 *sumf,
                                                                       uintptr_t pf)
{
    const __m512i tbl = _mm512_broadcast_i32x4(
        _mm_xor_si128(_mm_loadu_si128((const __m128i *)quant_kvalues_iq4nl), _mm_set1_epi8((char)0x80)));
    __m512i sc[8], isum[PKD_TILE];
    KERN_NAME(piq_scales)(o, sc);
#pragma GCC unroll 4
    for (int t = 0; t < tt; t++)
        isum[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int s = 0; s < 8; s++) {
        /* two chains per token (low and high nibbles): half the dependent vpdpbusd latency of one (one chain
         * was slower in L2) */
        __m512i lo[PKD_TILE], hi[PKD_TILE];
        pkd_prefetch(pf, PIQ_RECORD / 64, s, 8);
#pragma GCC unroll 4
        for (int t = 0; t < tt; t++) {
            lo[t] = _mm512_set1_epi32(((const int32_t *)aux[t])[s]);
            hi[t] = _mm512_setzero_si512();
        }
#pragma GCC unroll 4
        for (int g = 0; g < 4; g++) {
            __m512i vl, vh;
            KERN_NAME(piq_levels)(_mm512_loadu_si512(o + 128 + 64 * (4 * s + g)), tbl, &vl, &vh);
#pragma GCC unroll 4
            for (int t = 0; t < tt; t++) {
                const int8_t *q = at[t][b].qs + 32 * s + 4 * g;
                lo[t] = pkd_dpbusd_bcst(lo[t], vl, q);
                hi[t] = pkd_dpbusd_bcst(hi[t], vh, q + 16);
            }
        }
#pragma GCC unroll 4
        for (int t = 0; t < tt; t++)
            isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(_mm512_add_epi32(lo[t], hi[t]), sc[s]));
    }
    const __m512 d16 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)o));
#pragma GCC unroll 4
    for (int t = 0; t < tt; t++) {
        const __m512 d = _mm512_mul_ps(d16, _mm512_set1_ps(at[t][b].d));
        sumf[t] = _mm512_add_ps(sumf[t], _mm512_mul_ps(d, _mm512_cvtepi32_ps(isum[t])));
    }
}

static void KERN_NAME(matmul_iq4_xs_packed)(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                                            const void *act, size_t act_stride, float *out, size_t ldo)
{
    pkd_matmul(n, nrows, ntok, w, w_stride, act, act_stride, out, ldo, PIQ_RECORD, 8 * sizeof(int32_t), piq_prep,
               KERN_NAME(piq_record));
}
