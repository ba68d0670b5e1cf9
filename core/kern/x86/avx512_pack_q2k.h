/* core/kern/x86/avx512_pack_q2k.h — the packed Q2_K kernel (core/kern/pack.h; record layout in pack.c) for
 * 1 .. KERN_PACK_MAX_TOKENS tokens, AVX-512 VNNI, on the shared driver (avx512_pack_drive.h). Included by
 * avx512_vnni.c.
 *
 * Row r of a group is lane r of every vector, so nothing is reduced across lanes. qs chunk 8 h + c8 (c8 < 8)
 * holds bytes 4 c8 .. 4 c8 + 3 of half h of each row; bit pair k of its bytes holds the levels (0..3) of elements
 * 128 h + 32 k + 4 c8 + i, i < 4, of sub-block s = 8 h + 2 k + c8 / 4. A level is taken in place, times 4^k (one
 * AND, no shift: at most 192, still an unsigned byte for vpdpbusd). Per sub-block s, token and row:
 *   D'(s) = sum over its 4 chunks of vpdpbusd(level * 4^k, a) = 4^k D(s)      (|D| <= 16 * 3 * 127 = 6096)
 * and the pair (D(2 m), D(2 m + 1)) = (D' >> 2k, D' << 16 - 2k: exact) goes into the int16 halves of a dword,
 * against the pair of 4-bit scales: isum = sum_m vpdpwssd(pair, scales pair), exact (|isum| < 2^21).
 *   imin = sum_s min(s) bsums[s]: each bsum split as 128 hi + lo into bytes (pkq2_prep), vpdpbusd of the mins'
 * bytes against them (|imin| <= 16 * 15 * 2048 < 2^19). The float finish is the reference's
 * (quant_dot_q2_K_ref): d = fp16(w.d) * a.d, dmin = fp16(w.dmin) * a.d, sumf = sumf + (d * isum - dmin * imin),
 * block after block. */

#define PKQ2_RECORD 1344
/* Record offsets of the regions (pack.c) */
#define PKQ2_D 256
#define PKQ2_DMIN 288
#define PKQ2_QS 320

/* One token's block: its 16 bsums split as 128 hi + lo (lo in 0..127, hi = floor(bsum / 128) in -16..15),
 * lo[s] in bytes 0-15, hi[s] in bytes 16-31: the record function's aux. */
static inline __attribute__((always_inline)) void pkq2_prep(const quant_block_q8_K *a, void *aux)
{
    uint8_t *lh = aux;
    for (int s = 0; s < 16; s++)
        k512_split128(a->bsums[s], &lh[s], &lh[16 + s]);
}

/* Chunk c8's level vector (rows in lanes, 4 elements from `elem` on) into the sub-block sums D of each of tt
 * tokens: D[t] += vpdpbusd(lev, token t's activations elem .. elem + 3). */
static inline __attribute__((always_inline)) void pkq2_chunk(__m512i lev, int tt, const quant_block_q8_K *const *at,
                                                             int64_t b, int elem, __m512i *D)
{
#pragma GCC unroll 4
    for (int t = 0; t < tt; t++)
        D[t] = pkd_dpbusd_bcst(D[t], lev, at[t][b].qs + elem);
}

/* A sub-block pair's sums D0 = 4^e D(2 m), D1 = 4^e D(2 m + 1) (levels taken times 4^e), |D| < 2^15, into the int16
 * halves of a dword, (D0 >> 2e, D1 << 16 - 2e: exact), then isum[t] += vpdpwssd(pair, S): S holds the pair's
 * scales in the same halves. */
static inline __attribute__((always_inline)) void pkq2_pairs(int tt, const __m512i *D0, const __m512i *D1, int e,
                                                             __m512i S, __m512i *isum)
{
    const __mmask32 odd = 0xaaaaaaaau;
#pragma GCC unroll 4
    for (int t = 0; t < tt; t++) {
        const __m512i pair =
            _mm512_mask_blend_epi16(odd, _mm512_srai_epi32(D0[t], 2 * e), _mm512_slli_epi32(D1[t], 16 - 2 * e));
        isum[t] = _mm512_dpwssd_epi32(isum[t], pair, S);
    }
}

/* One record (o) for tt tokens: sumf[t] = sumf[t] + (d * isum - dmin * imin) (see above); a pkd_record_fn.
 * aux[t]: pkq2_prep's split bsums. */
static inline __attribute__((always_inline)) void pkq2_record(const char *o, int tt, const quant_block_q8_K *const *at,
                                                              int64_t b, const void *const *aux, __m512 *sumf,
                                                              uintptr_t pf)
{
    const __m512i m0f = _mm512_set1_epi8(0x0f), zero = _mm512_setzero_si512();
    /* the scale pairs (sc(2 m), sc(2 m + 1)) as int16 halves: chunk m / 2, bytes 2 (m % 2), 2 (m % 2) + 1 */
    __m512i S[8];
#pragma GCC unroll 8
    for (int m = 0; m < 8; m++) {
        const int b0 = 2 * (m % 2);
        /* vpshufb: bytes 0 and 2 of each dword from bytes b0, b0 + 1 of the row's dword, 1 and 3 zero */
        const __m512i idx = _mm512_set4_epi32((int)(0x80008000u | (12 + b0) | (13 + b0) << 16),
                                              (int)(0x80008000u | (8 + b0) | (9 + b0) << 16),
                                              (int)(0x80008000u | (4 + b0) | (5 + b0) << 16),
                                              (int)(0x80008000u | (0 + b0) | (1 + b0) << 16));
        S[m] = _mm512_and_si512(_mm512_shuffle_epi8(_mm512_loadu_si512(o + 64 * (m / 2)), idx), m0f);
    }
    __m512i isum[PKD_TILE];
#pragma GCC unroll 4
    for (int t = 0; t < tt; t++)
        isum[t] = zero;
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            pkd_prefetch(pf, (PKQ2_RECORD + 63) / 64, 4 * h + k, 8);
            const __m512i mk = _mm512_set1_epi8((char)(3 << (2 * k)));
            __m512i D0[PKD_TILE], D1[PKD_TILE];
#pragma GCC unroll 4
            for (int t = 0; t < tt; t++)
                D0[t] = D1[t] = zero;
#pragma GCC unroll 8
            for (int c8 = 0; c8 < 8; c8++) {
                const __m512i lev = _mm512_and_si512(_mm512_loadu_si512(o + PKQ2_QS + 64 * (8 * h + c8)), mk);
                if (c8 < 4)
                    pkq2_chunk(lev, tt, at, b, 128 * h + 32 * k + 4 * c8, D0);
                else
                    pkq2_chunk(lev, tt, at, b, 128 * h + 32 * k + 4 * c8, D1);
            }
            pkq2_pairs(tt, D0, D1, k, S[4 * h + k], isum);
        }
    }
    /* the mins: bytes 4 i .. 4 i + 3 of each row's dword in chunk i, high nibbles */
    __m512i M[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        M[i] = _mm512_and_si512(_mm512_srli_epi32(_mm512_loadu_si512(o + 64 * i), 4), m0f);
    const __m512 d16 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(o + PKQ2_D)));
    const __m512 dm16 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(o + PKQ2_DMIN)));
#pragma GCC unroll 4
    for (int t = 0; t < tt; t++) {
        const uint8_t *lh = aux[t];
        __m512i lo = zero, hi = zero;
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            lo = pkd_dpbusd_bcst(lo, M[i], lh + 4 * i);
            hi = pkd_dpbusd_bcst(hi, M[i], lh + 16 + 4 * i);
        }
        const __m512i imin = _mm512_add_epi32(lo, _mm512_slli_epi32(hi, 7));
        const __m512 ad = _mm512_set1_ps(at[t][b].d);
        const __m512 d = _mm512_mul_ps(d16, ad), dmin = _mm512_mul_ps(dm16, ad);
        const __m512 t1 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(isum[t]));
        const __m512 t2 = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(imin));
        sumf[t] = _mm512_add_ps(sumf[t], _mm512_sub_ps(t1, t2));
    }
}

static void matmul_q2_K_packed_avx512vnni(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                                          const void *act, size_t act_stride, float *out, size_t ldo)
{
    pkd_matmul(n, nrows, ntok, w, w_stride, act, act_stride, out, ldo, PKQ2_RECORD, 32, pkq2_prep, pkq2_record);
}
