/* core/kern/x86/avx512_pack_q5k.h — the packed Q5_K kernel (core/kern/pack.h; record layout in pack.c) for
 * 1 .. KERN_PACK_MAX_TOKENS tokens, AVX-512 VNNI. Included by avx512_vnni.c after avx512_pack_q4k.h, whose
 * header decoding (PK4_BYTE_IDX) and float finish it shares: a q5_K record is a q4_K one plus the 5th bits.
 *
 * Row r of a group is lane r of every vector, so nothing is reduced across lanes. For the sub-block pair
 * (2 j, 2 j + 1) and chunk g, qs chunk x holds the low 4 bits (low nibbles: sub-block 2 j; high: 2 j + 1) and
 * qh chunk H the 5th bits at bits 2 j and 2 j + 1. One 32-bit shift of H by 4 - 2 j puts them at bits 4 and 5
 * (Hj); then
 *   level(2 j)         = (x & 0x0f)          | (Hj & 0x10)        one AND, one select
 *   2 level(2 j + 1)   = ((x >> 3) & 0x1e)   | (Hj & 0x20)        a shift, an AND, a select
 * (with the high nibble taken as it stands, 16 level would need a 9th bit). Per token, vpdpbusd of each against
 * its activations:
 *   2 isum = sum_j 2 sc(2 j) D(2 j) + sc(2 j + 1) 2 D(2 j + 1),  isum by an exact shift.
 * Bounds: |D| <= 32 * 31 * 128 < 2^17, scales <= 63, so |2 isum| <= 8 * 63 * 2^18 < 2^27. imin and the float
 * finish are the q4_K kernel's (the reference's k4_contribution): sumf = sumf + (d * isum - dmin * imin). About
 * 8 vector instructions per 8 elements and row for one token where q4_K needs 5. */

/* Record offsets (pack.c) */
#define PK5_RECORD 2816
#define PK5_QH 256
#define PK5_QS 768

/* One record (o) for tt tokens: sumf[t] = sumf[t] + (d * isum - dmin * imin); a pkd_record_fn. aux[t]: the
 * token's pair sums of the block (pk4_prep). */
static inline __attribute__((always_inline)) void pk5_record(const char *o, int tt, const quant_block_q8_K *const *at,
                                                             int64_t b, const void *const *aux, __m512 *sumf,
                                                             uintptr_t pf)
{
    const __m512i m4 = _mm512_set1_epi8(0x0f), m1e = _mm512_set1_epi8(0x1e);
    const __m512i m10 = _mm512_set1_epi8(0x10), m20 = _mm512_set1_epi8(0x20);
    const __m512i zero = _mm512_setzero_si512();
    __m512i s03, s47, m03, m47;
    pk4_header(o, &s03, &s47, &m03, &m47);
    __m512i isum[4];
#pragma GCC unroll 4
    for (int t = 0; t < tt; t++)
        isum[t] = zero;
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        __m512i lo[4], hi[4];
        pkd_prefetch(pf, PK5_RECORD / 64, j, 4);
#pragma GCC unroll 4
        for (int t = 0; t < tt; t++)
            lo[t] = hi[t] = zero;
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            const __m512i x = _mm512_loadu_si512(o + PK5_QS + 64 * (8 * j + g));
            const __m512i H = _mm512_loadu_si512(o + PK5_QH + 64 * g);
            const __m512i Hj = j == 0 ? _mm512_slli_epi32(H, 4) : j == 1 ? _mm512_slli_epi32(H, 2)
                               : j == 2 ? H : _mm512_srli_epi32(H, 2);
            /* a | (b & c) (0xf8), the overwritten first operand a temporary */
            const __m512i vl = _mm512_ternarylogic_epi32(_mm512_and_si512(x, m4), Hj, m10, 0xf8);
            const __m512i vh = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi32(x, 3), m1e), Hj, m20, 0xf8);
#pragma GCC unroll 4
            for (int t = 0; t < tt; t++) {
                const int32_t *q = (const int32_t *)at[t][b].qs;
                lo[t] = pkd_dpbusd_bcst(lo[t], vl, q + 16 * j + g);
                hi[t] = pkd_dpbusd_bcst(hi[t], vh, q + 16 * j + 8 + g);
            }
        }
        const __m512i S = j < 2 ? s03 : s47;
        const __m512i sl = _mm512_slli_epi32(_mm512_shuffle_epi8(S, PK4_BYTE_IDX(2 * (j & 1))), 1);
        const __m512i sh = _mm512_shuffle_epi8(S, PK4_BYTE_IDX(2 * (j & 1) + 1));
#pragma GCC unroll 4
        for (int t = 0; t < tt; t++) {
            isum[t] = _mm512_add_epi32(isum[t], _mm512_add_epi32(_mm512_mullo_epi32(lo[t], sl),
                                                                 _mm512_mullo_epi32(hi[t], sh)));
            /* the sum as it stands, here: GCC would otherwise sink the vpmulld to the record's end, every
             * accumulator live (spilled) until then (avx512_pack_q6k.h) */
            __asm__("" : "+v"(isum[t]));
        }
    }
    pk4_finish(o, tt, at, b, aux, m03, m47, isum, 1, sumf);
}

static void matmul_q5_K_packed_avx512vnni(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                                          const void *act, size_t act_stride, float *out, size_t ldo)
{
    pkd_matmul(n, nrows, ntok, w, w_stride, act, act_stride, out, ldo, PK5_RECORD, 2 * sizeof(uint64_t), pk4_prep,
               pk5_record);
}
