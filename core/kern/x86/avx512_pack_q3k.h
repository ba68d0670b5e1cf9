/* core/kern/x86/avx512_pack_q3k.h — the packed Q3_K kernel (core/kern/pack.h; record layout in pack.c) for
 * 1 .. KERN_PACK_MAX_TOKENS tokens, AVX-512 VNNI, on the shared driver (avx512_pack_drive.h). Included by
 * avx512_vnni.c after avx512_pack_q2k.h (the same qs order).
 *
 * Row r of a group is lane r of every vector. The level of element e = 128 h + 32 k + l is q2 - 4 + 4 hbit with
 * q2 in bit pair k of qs byte 32 h + l and hbit bit 4 h + k of hmask byte l (quant_dot_q3_K_ref). qs chunk
 * 8 h + c8 and hmask chunk c8 hold bytes 4 c8 .. 4 c8 + 3 (l) of the 16 rows, so u = q2 + 4 hbit (0..7, unsigned
 * for vpdpbusd) is formed in place, times f = 4^min(k, 2) (at most 112): the q2 bits by an AND (k = 3: a shift
 * first), hbit moved to bit 2 + 2 log2 f by one shift (the bits a shift brings in from a neighbour byte are
 * masked off). Per sub-block s = 8 h + 2 k + c8 / 4, token and row:
 *   D'(s) = f * (-4 A(s)) + sum over its 4 chunks of vpdpbusd(f u, a) = f D(s)     (A(s): the sum of its 16 a)
 * |D| <= 16 * 7 * 128 + 4 * 16 * 128 < 2^15, so the pair (D(2 m), D(2 m + 1)) = (D' >> log2 f, D' << 16 - log2 f)
 * goes into the int16 halves of a dword against the pair of signed 6-bit scales: isum = sum_m vpdpwssd, exact.
 * The float finish is the reference's: d = fp16(w.d) * a.d, sumf = sumf + d * (float)isum, block after block. */

#define PKQ3_RECORD 1760
/* Record offsets of the regions (pack.c) */
#define PKQ3_D 192
#define PKQ3_HMASK 224
#define PKQ3_QS 736

/* One token's block: -4 times the sum of each sub-block's 16 a (the reference's "- 4"), 16 int32: the record
 * function's aux. */
static inline __attribute__((always_inline)) void pkq3_prep(const quant_block_q8_K *a, void *aux)
{
    int32_t *nA = aux;
    pkd_qs_sums(a, 16, nA);
    for (int s = 0; s < 16; s++)
        nA[s] *= -4;
}

/* One record (o) for tt tokens: sumf[t] = sumf[t] + d * (float)isum (see above); a pkd_record_fn. aux[t]:
 * pkq3_prep's sums of the token's block. */
static inline __attribute__((always_inline)) void pkq3_record(const char *o, int tt, const quant_block_q8_K *const *at,
                                                              int64_t b, const void *const *aux, __m512 *sumf,
                                                              uintptr_t pf)
{
    const __m512i zero = _mm512_setzero_si512();
    /* the 16 scales minus 32 as signed bytes in row lanes, 4 to a vector (quant_q3_K_scales): low nibbles from
     * scale bytes 0-7, high 2 bits from bytes 8-11 */
    __m512i SC[4];
    k512_q3_scales_lanes(_mm512_loadu_si512(o), _mm512_loadu_si512(o + 64), _mm512_loadu_si512(o + 128), SC);
    /* the scale pairs (sc(2 m), sc(2 m + 1)) as int16 halves, sign-extended: bytes into the high byte of each
     * half, then an arithmetic shift */
    __m512i S[8];
#pragma GCC unroll 8
    for (int m = 0; m < 8; m++) {
        const int b0 = 2 * (m % 2);
        const __m512i idx = _mm512_set4_epi32((int)(0x00800080u | (12 + b0) << 8 | (13 + b0) << 24),
                                              (int)(0x00800080u | (8 + b0) << 8 | (9 + b0) << 24),
                                              (int)(0x00800080u | (4 + b0) << 8 | (5 + b0) << 24),
                                              (int)(0x00800080u | (0 + b0) << 8 | (1 + b0) << 24));
        S[m] = _mm512_srai_epi16(_mm512_shuffle_epi8(SC[m / 2], idx), 8);
    }
    __m512i isum[PKD_TILE];
#pragma GCC unroll 4
    for (int t = 0; t < tt; t++)
        isum[t] = zero;
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            pkd_prefetch(pf, (PKQ3_RECORD + 63) / 64, 4 * h + k, 8);
            const int e = k < 2 ? k : 2;                           /* f = 4^e */
            const int hs = (2 + 2 * e) - (4 * h + k);              /* hbit's move */
            const __m512i mq = _mm512_set1_epi8((char)(3 << (2 * e)));
            const __m512i mh = _mm512_set1_epi8((char)(4 << (2 * e)));
            __m512i D0[PKD_TILE], D1[PKD_TILE];
#pragma GCC unroll 4
            for (int t = 0; t < tt; t++) {
                const int32_t *nA = aux[t];
                D0[t] = _mm512_set1_epi32(nA[8 * h + 2 * k] * (1 << (2 * e)));
                D1[t] = _mm512_set1_epi32(nA[8 * h + 2 * k + 1] * (1 << (2 * e)));
            }
#pragma GCC unroll 8
            for (int c8 = 0; c8 < 8; c8++) {
                const __m512i x = _mm512_loadu_si512(o + PKQ3_QS + 64 * (8 * h + c8));
                const __m512i hm = _mm512_loadu_si512(o + PKQ3_HMASK + 64 * c8);
                const __m512i q = k == 3 ? _mm512_srli_epi32(x, 2) : x;
                const __m512i hb = hs > 0 ? _mm512_slli_epi32(hm, hs) : hs < 0 ? _mm512_srli_epi32(hm, -hs) : hm;
                /* (q & mq) | (hb & mh) */
                const __m512i u = _mm512_ternarylogic_epi32(_mm512_and_si512(q, mq), hb, mh, 0xf8);
                if (c8 < 4)
                    pkq2_chunk(u, tt, at, b, 128 * h + 32 * k + 4 * c8, D0);
                else
                    pkq2_chunk(u, tt, at, b, 128 * h + 32 * k + 4 * c8, D1);
            }
            pkq2_pairs(tt, D0, D1, e, S[4 * h + k], isum);
        }
    }
    const __m512 d16 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(o + PKQ3_D)));
#pragma GCC unroll 4
    for (int t = 0; t < tt; t++) {
        const __m512 d = _mm512_mul_ps(d16, _mm512_set1_ps(at[t][b].d));
        sumf[t] = _mm512_add_ps(sumf[t], _mm512_mul_ps(d, _mm512_cvtepi32_ps(isum[t])));
    }
}

static void matmul_q3_K_packed_avx512vnni(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                                          const void *act, size_t act_stride, float *out, size_t ldo)
{
    pkd_matmul(n, nrows, ntok, w, w_stride, act, act_stride, out, ldo, PKQ3_RECORD, 16 * sizeof(int32_t), pkq3_prep,
               pkq3_record);
}
