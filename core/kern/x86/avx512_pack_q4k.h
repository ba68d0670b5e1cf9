/* core/kern/x86/avx512_pack_q4k.h — the packed Q4_K kernel (core/kern/pack.h; record layout in pack.c) for
 * 1 .. KERN_PACK_MAX_TOKENS tokens, AVX-512 VNNI. Included by avx512_vnni.c.
 *
 * Row r of a group is lane r of every vector, so nothing is reduced across lanes. Per record and token:
 *   D_lo(j) = sum over chunk g of vpdpbusd(qs & 0x0f, a[64 j + 4 g ..])          (sub-block 2 j)
 *   E_hi(j) = sum over chunk g of vpdpbusd(qs & 0xf0, a[64 j + 32 + 4 g ..])     (= 16 * D of sub-block 2 j + 1)
 *   isum = (sum_j 16 sc(2 j) D_lo(j) + sc(2 j + 1) E_hi(j)) >> 4
 * The high nibble stays in place (one AND instead of a shift or an affine transform, and both nibbles' ANDs run
 * on two ports); every term is a multiple of 16, so the shift is exact. Bounds: |D| <= 32 * 15 * 127 = 60960,
 * scales <= 63, so |16 * isum| <= 8 * 16 * 63 * 60960 < 2^29. imin and the float finish are the plain kernel's
 * (avx512_k4.h), in the reference's order: sumf = sumf + (d * (float)isum - dmin * (float)imin) per block.
 * About 10 vector instructions per 256 elements and row where the plain kernel needs ~23, so in cache it computes
 * weights several times as fast as the plain kernel. */

/* int32 lanes of byte k (0..3) of each dword of v */
#define PK4_BYTE_IDX(k) \
    _mm512_set4_epi32((int)0x8080800c + (k), (int)0x80808008 + (k), (int)0x80808004 + (k), (int)0x80808000 + (k))

#define PK4_RECORD 2304

/* One token's block: its pair sums as bytes, 128 * hi + lo (k512_pair_split), the record function's aux. */
static inline __attribute__((always_inline)) void pk4_prep(const quant_block_q8_K *a, void *aux)
{
    k512_pair_split(a, (uint64_t *)aux);
}

/* The 6-bit scales 0-3 / 4-7 and mins 0-3 / 4-7 of a q4_K or q5_K record's header (the 12 scale bytes at 0, 64,
 * 128) as the bytes of each row's dword (quant_k4_scale_min lane-wise). */
static inline __attribute__((always_inline)) void pk4_header(const char *o, __m512i *s03, __m512i *s47, __m512i *m03,
                                                             __m512i *m47)
{
    const __m512i m4 = _mm512_set1_epi8(0x0f), m3f = _mm512_set1_epi8(0x3f), m30 = _mm512_set1_epi8(0x30);
    const __m512i A = _mm512_loadu_si512(o), B = _mm512_loadu_si512(o + 64), C = _mm512_loadu_si512(o + 128);
    *s03 = _mm512_and_si512(A, m3f);
    *s47 = _mm512_ternarylogic_epi32(m4, C, _mm512_and_si512(_mm512_srli_epi32(A, 2), m30), 0xea);
    *m03 = _mm512_and_si512(B, m3f);
    *m47 = _mm512_ternarylogic_epi32(m4, _mm512_srli_epi32(C, 4), _mm512_and_si512(_mm512_srli_epi32(B, 2), m30),
                                     0xea);
}

/* The end of a q4_K or q5_K record (the header's d and dmin at 192 and 224): for each token, imin from the mins'
 * bytes m03 / m47 against the pair sums (aux), then sumf[t] = sumf[t] + (d * (isum[t] >> shift) - dmin * imin),
 * the reference's k4_contribution lane-wise; isum[t] carries 2^shift times the integer sum. */
static inline __attribute__((always_inline)) void pk4_finish(const char *o, int tt, const quant_block_q8_K *const *at,
                                                             int64_t b, const void *const *aux, __m512i m03,
                                                             __m512i m47, const __m512i *isum, int shift,
                                                             __m512 *sumf)
{
    const __m512i zero = _mm512_setzero_si512();
    const __m512 d16 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(o + 192)));
    const __m512 dm16 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(o + 224)));
#pragma GCC unroll 4
    for (int t = 0; t < tt; t++) {
        const uint64_t l = ((const uint64_t *)aux[t])[0], h = ((const uint64_t *)aux[t])[1];
        const __m512i xl = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, m03, _mm512_set1_epi32((int)(uint32_t)l)), m47,
                                               _mm512_set1_epi32((int)(uint32_t)(l >> 32)));
        const __m512i xh = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, m03, _mm512_set1_epi32((int)(uint32_t)h)), m47,
                                               _mm512_set1_epi32((int)(uint32_t)(h >> 32)));
        const __m512i imin = _mm512_add_epi32(xl, _mm512_slli_epi32(xh, 7));
        const __m512 ad = _mm512_set1_ps(at[t][b].d);
        const __m512 d = _mm512_mul_ps(d16, ad), dmin = _mm512_mul_ps(dm16, ad);
        const __m512 t1 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_srai_epi32(isum[t], shift)));
        const __m512 t2 = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(imin));
        sumf[t] = _mm512_add_ps(sumf[t], _mm512_sub_ps(t1, t2));
    }
}

/* One record (o) for tt tokens: sumf[t] = sumf[t] + (d * isum - dmin * imin) (see above); a pkd_record_fn.
 * aux[t]: pk4_prep's pair sums. */
static inline __attribute__((always_inline)) void pk4_record(const char *o, int tt, const quant_block_q8_K *const *at,
                                                             int64_t b, const void *const *aux, __m512 *sumf,
                                                             uintptr_t pf)
{
    const __m512i m4 = _mm512_set1_epi8(0x0f), mf0 = _mm512_set1_epi8((char)0xf0), zero = _mm512_setzero_si512();
    __m512i s03, s47, m03, m47;
    pk4_header(o, &s03, &s47, &m03, &m47);
    __m512i isum[4];
#pragma GCC unroll 4
    for (int t = 0; t < tt; t++)
        isum[t] = zero;
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        __m512i lo[4], hi[4];
        pkd_prefetch(pf, PK4_RECORD / 64, j, 4);
#pragma GCC unroll 4
        for (int t = 0; t < tt; t++)
            lo[t] = hi[t] = zero;
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            const __m512i x = _mm512_loadu_si512(o + 256 + 64 * (8 * j + g));
            const __m512i xl = _mm512_and_si512(x, m4), xh = _mm512_and_si512(x, mf0);
#pragma GCC unroll 4
            for (int t = 0; t < tt; t++) {
                const int32_t *q = (const int32_t *)at[t][b].qs;
                lo[t] = pkd_dpbusd_bcst(lo[t], xl, q + 16 * j + g);
                hi[t] = pkd_dpbusd_bcst(hi[t], xh, q + 16 * j + 8 + g);
            }
        }
        const __m512i S = j < 2 ? s03 : s47;
        const __m512i sl = _mm512_slli_epi32(_mm512_shuffle_epi8(S, PK4_BYTE_IDX(2 * (j & 1))), 4);
        const __m512i sh = _mm512_shuffle_epi8(S, PK4_BYTE_IDX(2 * (j & 1) + 1));
#pragma GCC unroll 4
        for (int t = 0; t < tt; t++)
            isum[t] = _mm512_add_epi32(isum[t], _mm512_add_epi32(_mm512_mullo_epi32(lo[t], sl),
                                                                 _mm512_mullo_epi32(hi[t], sh)));
    }
    pk4_finish(o, tt, at, b, aux, m03, m47, isum, 4, sumf);
}

static void matmul_q4_K_packed_avx512vnni(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                                          const void *act, size_t act_stride, float *out, size_t ldo)
{
    pkd_matmul(n, nrows, ntok, w, w_stride, act, act_stride, out, ldo, PK4_RECORD, 2 * sizeof(uint64_t), pk4_prep,
               pk4_record);
}
