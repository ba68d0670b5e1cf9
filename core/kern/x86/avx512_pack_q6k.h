/* core/kern/x86/avx512_pack_q6k.h — the packed Q6_K kernel (core/kern/pack.h; record layout in pack.c) for
 * 1 .. KERN_PACK_MAX_TOKENS tokens, AVX-512 VNNI. Included by avx512_vnni.c.
 *
 * Row r of a group is lane r of every vector, so nothing is reduced across lanes. A ql chunk X and the qh chunk
 * H of the same 4 positions give 16 elements per row: quarters k = p (low nibbles of X) and k = 2 + p (high
 * nibbles), p = 0 for the ql chunks of bytes 0-31 of a half, 1 for 32-63 (pack.c). With Hm = H & 0x33 (p = 0)
 * or H & 0xcc (p = 1), quarters 0-2 are each one 32-bit shift and one bit select from a level (0..63): the
 * nibble at bits 0-3, the high bits at 4-5, bits 6-7 clear. Quarter 3 is taken as 4 * level (nibble at bits
 * 2-5 by X >> 2, high bits in place at 6-7): one shift less. Per sub-block s, token and row
 *   D(s) = -32 A(s) + sum over its 4 chunks of vpdpbusd(level, a)      (A(s): sum of the 16 a of s, from qs;
 *                                                                        4 times both for quarter 3)
 *   4 isum = 4 sum_{s in quarters 0-2} scales[s] D(s) + sum_{s in quarter 3} scales[s] 4 D(s)
 * (vpmulld by the sign-extended scales), then isum by an exact shift: it is the reference's, D(s) being its idot
 * of (q - 32) and a. Bounds: |a| <= 127 (q8_K), so the partial sums of 4 D stay within 4 * (16 * 63 * 128 +
 * 32 * 16 * 128) < 2^20 and |isum| <= 16 * 128 * 16 * 32 * 128 = 2^27, 4 isum < 2^29. The float finish is the
 * reference's (core/quant/dot_k.c): d = fp16(d) * a.d, sumf = sumf + d * isum, block after block. About 15
 * vector instructions per 16 elements and row for one token (3 loads, 4 shifts, 2 ANDs, 4 selects, 4 vpdpbusd)
 * and one vpmulld per sub-block, well ahead of the plain kernel in L2.
 */

/* A record is 52.5 lines, so records start on 64- or 32-byte boundaries: PK6_LINES prefetches from the record's
 * first byte reach every line it touches. */
#define PK6_RECORD 3360
#define PK6_LINES ((PK6_RECORD + 63) / 64)
/* Record offsets of the regions (pack.c) */
#define PK6_SCALES 32
#define PK6_QL 288
#define PK6_QH 2336

/* One token's block: -32 times the sum of each sub-block's 16 a (the reference's q - 32), -128 times for the
 * sub-blocks of quarter 3 (s % 8 = 6, 7: 4 * level), as 16 int32, the record function's aux. */
static inline __attribute__((always_inline)) void pk6_prep(const quant_block_q8_K *a, void *aux)
{
    int32_t *ns = aux;
    pkd_qs_sums(a, 16, ns);
    for (int s = 0; s < 16; s++)
        ns[s] *= s % 8 >= 6 ? -128 : -32;
}

/* One record (o) for tt tokens: sumf[t] = sumf[t] + d * isum (see above); a pkd_record_fn. aux[t]: pk6_prep's
 * sums of the token's block. */
static inline __attribute__((always_inline)) void pk6_record(const char *o, int tt, const quant_block_q8_K *const *at,
                                                             int64_t b, const void *const *aux, __m512 *sumf,
                                                             uintptr_t pf)
{
    const __m512i m0f = _mm512_set1_epi8(0x0f), m3c = _mm512_set1_epi8(0x3c);
    const __m512i m33 = _mm512_set1_epi8(0x33), mcc = _mm512_set1_epi8((char)0xcc);
    __m512i isum[4], isum3[4]; /* quarters 0-2, and quarter 3 times 4 */
#pragma GCC unroll 4
    for (int t = 0; t < tt; t++)
        isum[t] = isum3[t] = _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
#pragma GCC unroll 2
        for (int half = 0; half < 2; half++) {
#pragma GCC unroll 2
            for (int p = 0; p < 2; p++) {
                const int s_lo = 8 * h + 2 * p + half, s_hi = s_lo + 4; /* sub-blocks of quarters p and 2 + p */
                __m512i lo[4], hi[4];
                pkd_prefetch(pf, PK6_LINES, 4 * h + 2 * half + p, 8);
            #pragma GCC unroll 4
                for (int t = 0; t < tt; t++) {
                    lo[t] = _mm512_set1_epi32(((const int32_t *)aux[t])[s_lo]);
                    hi[t] = _mm512_set1_epi32(((const int32_t *)aux[t])[s_hi]);
                }
#pragma GCC unroll 4
                for (int gg = 0; gg < 4; gg++) {
                    const int g = 4 * half + gg;
                    const __m512i X = _mm512_loadu_si512(o + PK6_QL + 64 * (16 * h + 8 * p + g));
                    const __m512i Hm =
                        _mm512_and_si512(_mm512_loadu_si512(o + PK6_QH + 64 * (8 * h + g)), p ? mcc : m33);
                    const __m512i ylo = p ? _mm512_slli_epi32(Hm, 2) : _mm512_slli_epi32(Hm, 4);
                    /* c ? b : a (0xd8) and c ? a : b (0xe4): the first operand, which the instruction
                     * overwrites, is a temporary (with the mask first, a copy per select). Quarter 3 is
                     * 4 * level: its high bits stay in place, its nibble goes to bits 2-5 (one shift less) */
                    const __m512i vlo = _mm512_ternarylogic_epi32(ylo, X, m0f, 0xd8);
                    const __m512i vhi = p ? _mm512_ternarylogic_epi32(_mm512_srli_epi32(X, 2), Hm, m3c, 0xe4)
                                          : _mm512_ternarylogic_epi32(_mm512_srli_epi32(X, 4), Hm, m0f, 0xe4);
#pragma GCC unroll 4
                    for (int t = 0; t < tt; t++) {
                        const int32_t *q = (const int32_t *)at[t][b].qs;
                        lo[t] = pkd_dpbusd_bcst(lo[t], vlo, q + 32 * h + 8 * p + g);
                        hi[t] = pkd_dpbusd_bcst(hi[t], vhi, q + 32 * h + 16 + 8 * p + g);
                    }
                }
                const char *sc = o + PK6_SCALES;
                const __m512i sc_lo = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(sc + 16 * s_lo)));
                const __m512i sc_hi = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(sc + 16 * s_hi)));
            #pragma GCC unroll 4
                for (int t = 0; t < tt; t++) {
                    isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(lo[t], sc_lo));
                    if (p)
                        isum3[t] = _mm512_add_epi32(isum3[t], _mm512_mullo_epi32(hi[t], sc_hi));
                    else
                        isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(hi[t], sc_hi));
                    /* the sums as they stand, here: otherwise GCC reassociates each token's chain of adds and
                     * sinks the vpmulld to the record's end, with every accumulator live (spilled) until then
                     * (2-4 tokens ran far slower) */
                    __asm__("" : "+v"(isum[t]), "+v"(isum3[t]));
                }
            }
        }
    }
    const __m512 d16 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)o));
#pragma GCC unroll 4
    for (int t = 0; t < tt; t++) {
        const __m512 d = _mm512_mul_ps(d16, _mm512_set1_ps(at[t][b].d));
        const __m512i is = _mm512_srai_epi32(_mm512_add_epi32(_mm512_slli_epi32(isum[t], 2), isum3[t]), 2);
        sumf[t] = _mm512_add_ps(sumf[t], _mm512_mul_ps(d, _mm512_cvtepi32_ps(is)));
    }
}

static void matmul_q6_K_packed_avx512vnni(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                                          const void *act, size_t act_stride, float *out, size_t ldo)
{
    pkd_matmul(n, nrows, ntok, w, w_stride, act, act_stride, out, ldo, PK6_RECORD, 16 * sizeof(int32_t), pk6_prep,
               pk6_record);
}
