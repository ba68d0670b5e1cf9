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
#define PK5_PF (2 * PK5_RECORD)
#define PK5_QH 256
#define PK5_QS 768

/* One record (o) for tt tokens: sumf[t] = sumf[t] + (d * isum - dmin * imin). lohi[t]: the token's pair sums of
 * the block as bytes, 128 * hi + lo (pk4_record). */
static inline __attribute__((always_inline)) void pk5_record(const char *o, int tt, const quant_block_q8_K *const *at,
                                                             int64_t b, const uint64_t (*lohi)[2], __m512 *sumf)
{
    const __m512i m4 = _mm512_set1_epi8(0x0f), m1e = _mm512_set1_epi8(0x1e);
    const __m512i m10 = _mm512_set1_epi8(0x10), m20 = _mm512_set1_epi8(0x20);
    const __m512i m3f = _mm512_set1_epi8(0x3f), m30 = _mm512_set1_epi8(0x30), zero = _mm512_setzero_si512();
    const __m512i A = _mm512_loadu_si512(o), B = _mm512_loadu_si512(o + 64), C = _mm512_loadu_si512(o + 128);
    /* 6-bit scales 0-3 / 4-7 and mins 0-3 / 4-7 as the bytes of each row's dword (as pk4_record) */
    const __m512i s03 = _mm512_and_si512(A, m3f);
    const __m512i s47 = _mm512_ternarylogic_epi32(m4, C, _mm512_and_si512(_mm512_srli_epi32(A, 2), m30), 0xea);
    const __m512i m03 = _mm512_and_si512(B, m3f);
    const __m512i m47 = _mm512_ternarylogic_epi32(m4, _mm512_srli_epi32(C, 4),
                                                  _mm512_and_si512(_mm512_srli_epi32(B, 2), m30), 0xea);
    __m512i isum[4];
#pragma GCC unroll 4
    for (int t = 0; t < tt; t++)
        isum[t] = zero;
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        __m512i lo[4], hi[4];
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
                lo[t] = _mm512_dpbusd_epi32(lo[t], vl, _mm512_set1_epi32(q[16 * j + g]));
                hi[t] = _mm512_dpbusd_epi32(hi[t], vh, _mm512_set1_epi32(q[16 * j + 8 + g]));
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
    const __m512 d16 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(o + 192)));
    const __m512 dm16 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(o + 224)));
#pragma GCC unroll 4
    for (int t = 0; t < tt; t++) {
        const uint64_t l = lohi[t][0], h = lohi[t][1];
        const __m512i xl = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, m03, _mm512_set1_epi32((int)(uint32_t)l)), m47,
                                               _mm512_set1_epi32((int)(uint32_t)(l >> 32)));
        const __m512i xh = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, m03, _mm512_set1_epi32((int)(uint32_t)h)), m47,
                                               _mm512_set1_epi32((int)(uint32_t)(h >> 32)));
        const __m512i imin = _mm512_add_epi32(xl, _mm512_slli_epi32(xh, 7));
        const __m512 ad = _mm512_set1_ps(at[t][b].d);
        const __m512 d = _mm512_mul_ps(d16, ad), dmin = _mm512_mul_ps(dm16, ad);
        const __m512 t1 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_srai_epi32(isum[t], 1)));
        const __m512 t2 = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(imin));
        sumf[t] = _mm512_add_ps(sumf[t], _mm512_sub_ps(t1, t2));
    }
}

/* The records of one group for a tile of tt tokens (a constant after inlining), prefetching when pf_end. */
static inline __attribute__((always_inline)) void pk5_group(const char *grp, int64_t nb, int tt,
                                                            const quant_block_q8_K *const *at,
                                                            const uint64_t (*lohi)[2], const char *pf_end,
                                                            float *out, size_t ldo)
{
    __m512 sumf[4];
#pragma GCC unroll 4
    for (int t = 0; t < tt; t++)
        sumf[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const char *o = grp + (size_t)b * PK5_RECORD;
        /* a record's lines PK5_PF ahead, unrolled (pk4_group says why; a record is 44 lines) */
        if (pf_end && (uintptr_t)o + PK5_PF + PK5_RECORD <= (uintptr_t)pf_end) {
#pragma GCC unroll 44
            for (int k = 0; k < PK5_RECORD / 64; k++)
                _mm_prefetch((const char *)((uintptr_t)o + PK5_PF + 64 * (uintptr_t)k), _MM_HINT_T1);
        }
        const uint64_t(*lh)[2] = lohi + b;
        uint64_t tl[4][2];
#pragma GCC unroll 4
        for (int t = 0; t < tt; t++) {
            tl[t][0] = lh[(size_t)t * (size_t)nb][0];
            tl[t][1] = lh[(size_t)t * (size_t)nb][1];
        }
        pk5_record(o, tt, at, b, (const uint64_t(*)[2])tl, sumf);
    }
#pragma GCC unroll 4
    for (int t = 0; t < tt; t++)
        _mm512_storeu_ps(out + (size_t)t * ldo, sumf[t]);
}

static void matmul_q5_K_packed_avx512vnni(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                                          const void *act, size_t act_stride, float *out, size_t ldo)
{
    const int64_t nb = n / QUANT_QK_K;
    const quant_block_q8_K *at[KERN_PACK_MAX_TOKENS];
    uint64_t lohi[ntok * nb][2]; /* [token][block]: pair sums as bytes (pk4_record) */
    for (int64_t t = 0; t < ntok; t++) {
        at[t] = (const quant_block_q8_K *)((const char *)act + (size_t)t * act_stride);
        for (int64_t b = 0; b < nb; b++)
            k512_pair_split(&at[t][b], lohi[t * nb + b]);
    }
    const char *end = (const char *)w + (size_t)nrows * w_stride;
    /* a call starts a new stream (a pipeline task, on whichever core took it): its first PK5_PF bytes now */
    for (uintptr_t a = (uintptr_t)w & ~(uintptr_t)63; a < (uintptr_t)w + PK5_PF && a < (uintptr_t)end; a += 64)
        _mm_prefetch((const char *)a, _MM_HINT_T1);
    for (int64_t r0 = 0; r0 < nrows; r0 += KERN_PACK_ROWS) {
        const char *grp = (const char *)w + (size_t)r0 * w_stride;
        /* tiles of up to 4 tokens; the first streams the group from memory (and prefetches), the others find
         * it in L1/L2 */
        for (int64_t t0 = 0; t0 < ntok; t0 += 4) {
            const int tt = (int)(ntok - t0 < 4 ? ntok - t0 : 4);
            const char *p = t0 == 0 ? end : NULL;
            float *o = out + (size_t)t0 * ldo + (size_t)r0;
            const uint64_t(*lh)[2] = (const uint64_t(*)[2])lohi[t0 * nb];
            switch (tt) {
            case 1: pk5_group(grp, nb, 1, at + t0, lh, p, o, ldo); break;
            case 2: pk5_group(grp, nb, 2, at + t0, lh, p, o, ldo); break;
            case 3: pk5_group(grp, nb, 3, at + t0, lh, p, o, ldo); break;
            default: pk5_group(grp, nb, 4, at + t0, lh, p, o, ldo); break;
            }
        }
    }
}
