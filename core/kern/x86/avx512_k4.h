/* core/kern/x86/avx512_k4.h — AVX-512 kernels of Q4_K and Q5_K against Q8_K: a template, included by
 * avx512_kquants.h (whose KERN_NAME, KERN_DPWSSD, KERN_DPBUSD, prepared activations, tiling and prefetch it
 * uses) and once more by avx512_vnni.c for CPUs with GFNI (KERN_K4_GFNI: the high nibbles by one affine
 * transform instead of a shift and a mask). Its non-templated parts are defined once per file. */

#ifndef GUILD_KERN_X86_AVX512_K4_ONCE
/* vpshufb indices over a block's first 16 bytes (d, dmin, scales[12]) broadcast to every 128-bit chunk:
 * int16 lanes [x_A x 4, x_B x 4] in each chunk, (A, B) for chunks 0-1 and (C, D) for chunks 2-3. K4_SC16:
 * x = byte A (0x80 zeroes the high byte); K4_PAIR16: x = byte LA | byte HA << 8. */
#define K4_SC16(A, B) (char)0x80, B, (char)0x80, B, (char)0x80, B, (char)0x80, B, (char)0x80, A, (char)0x80, A, \
                      (char)0x80, A, (char)0x80, A
#define K4_SCALE_SHUF(A, B, C, D) _mm512_set_epi8(K4_SC16(C, D), K4_SC16(C, D), K4_SC16(A, B), K4_SC16(A, B))
#define K4_PAIR16(LA, HA, LB, HB) HB, LB, HB, LB, HB, LB, HB, LB, HA, LA, HA, LA, HA, LA, HA, LA
#define K4_PAIR_SHUF(A, B, C, D) \
    _mm512_set_epi8(K4_PAIR16(C + 8, C, D + 8, D), K4_PAIR16(C + 8, C, D + 8, D), K4_PAIR16(A + 8, A, B + 8, B), \
                    K4_PAIR16(A + 8, A, B + 8, B))
#endif

/* A Q4_K/Q5_K block's token-independent form: levels v[i] in the order of kq_prep_t.q, the scales as int16
 * lanes for KERN_DPWSSD (sc[0]: sub-blocks 0-3, sc[1]: 4-7). */
typedef struct KERN_NAME(k4_unpacked) {
    __m512i v[4], sc[2];
} KERN_NAME(k4_unpacked_t);

/* Unpacks the block at blk (Q5_K when five_bits) into u and copies its first 16 bytes (d, dmin, the packed
 * scales and mins; the same in both types) to *hdr for the group's float stage (k4_hdr_decode16).
 * The 6-bit scales are decoded in vector lanes from the broadcast bytes (ggml's kmask unpacking,
 * quant_k4_scale_min): scale j < 4 is scales[j] & 63, scale 4 + j is (scales[8 + j] & 15) |
 * (scales[j] >> 6) << 4, formed in int16 lanes w = scales[8 + j] | scales[j] << 8 as (w & 15) | (w >> 10),
 * whose bits above 5 are zero. No scalar work per block: the scalar unpacking took ~20 instructions of the
 * ~55 per block and row. */
static inline __attribute__((always_inline)) void KERN_NAME(k4_unpack)(int five_bits, const char *blk,
                                                                      __m128i *hdr,
                                                                      KERN_NAME(k4_unpacked_t) *u)
{
    const __m512i m4 = _mm512_set1_epi8(0x0f), sixteen = _mm512_set1_epi8(16);
    const __m512i shuf0 = K4_SCALE_SHUF(4, 5, 6, 7), shuf1 = K4_PAIR_SHUF(4, 5, 6, 7);
    const uint8_t *qs = five_bits ? ((const quant_block_q5_K *)blk)->qs : ((const quant_block_q4_K *)blk)->qs;
    const __m128i h = _mm_loadu_si128((const __m128i *)blk);
    _mm_storeu_si128(hdr, h);
    const __m512i hb = _mm512_broadcast_i32x4(h);
    u->sc[0] = _mm512_and_si512(_mm512_shuffle_epi8(hb, shuf0), _mm512_set1_epi16(0x3f));
    const __m512i w = _mm512_shuffle_epi8(hb, shuf1);
    u->sc[1] = _mm512_ternarylogic_epi32(_mm512_set1_epi16(0x0f), w, _mm512_srli_epi16(w, 10), 0xca);
    const __m512i q0 = _mm512_loadu_si512(qs), q1 = _mm512_loadu_si512(qs + 64);
    u->v[0] = _mm512_and_si512(q0, m4);
#ifdef KERN_K4_GFNI
    /* the high nibble of each byte by an affine bit transform (rows of the matrix: output bit i <- bit i + 4) */
    const __m512i hi4 = _mm512_set1_epi64(0x1020408000000000LL);
    u->v[1] = _mm512_gf2p8affine_epi64_epi8(q0, hi4, 0);
    u->v[2] = _mm512_and_si512(q1, m4);
    u->v[3] = _mm512_gf2p8affine_epi64_epi8(q1, hi4, 0);
#else
    u->v[1] = _mm512_and_si512(_mm512_srli_epi16(q0, 4), m4);
    u->v[2] = _mm512_and_si512(q1, m4);
    u->v[3] = _mm512_and_si512(_mm512_srli_epi16(q1, 4), m4);
#endif
    if (five_bits) {
        const __m512i hm0 = K5_BIT_MASK(0, 2), hm1 = K5_BIT_MASK(1, 3), hm2 = K5_BIT_MASK(4, 6),
                      hm3 = K5_BIT_MASK(5, 7);
        const __m512i qh =
            _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)((const quant_block_q5_K *)blk)->qh));
        u->v[0] = _mm512_mask_add_epi8(u->v[0], _mm512_test_epi8_mask(qh, hm0), u->v[0], sixteen);
        u->v[1] = _mm512_mask_add_epi8(u->v[1], _mm512_test_epi8_mask(qh, hm1), u->v[1], sixteen);
        u->v[2] = _mm512_mask_add_epi8(u->v[2], _mm512_test_epi8_mask(qh, hm2), u->v[2], sixteen);
        u->v[3] = _mm512_mask_add_epi8(u->v[3], _mm512_test_epi8_mask(qh, hm3), u->v[3], sixteen);
    }
}

#ifndef GUILD_KERN_X86_AVX512_K4_ONCE
/* The float stage's per-block inputs of 16 rows from their headers h[0..15] (k4_unpack): fp16 d and dmin of
 * row i at wd[i], wm[i]; its mins 0-3 as the bytes of mlo[i], 4-7 of mhi[i] (decoded as k4_unpack's scales:
 * min j < 4 is scales[4 + j] & 63, min 4 + j is (scales[8 + j] >> 4) | (scales[4 + j] >> 6) << 4). */
static inline void k4_hdr_decode16(const __m128i *h, uint16_t *wd, uint16_t *wm, uint32_t *mlo, uint32_t *mhi)
{
    /* dword 0 (d, dmin) of rows 0-7 in lanes 0-7, dword 2 (scales 4-7) in lanes 8-15; dword 3 (8-11) */
    const __m512i idx02 = _mm512_set_epi32(30, 26, 22, 18, 14, 10, 6, 2, 28, 24, 20, 16, 12, 8, 4, 0);
    const __m512i idx3 = _mm512_set_epi32(31, 27, 23, 19, 15, 11, 7, 3, 31, 27, 23, 19, 15, 11, 7, 3);
    const __m512i h0 = _mm512_loadu_si512(h), h1 = _mm512_loadu_si512(h + 4);
    const __m512i h2 = _mm512_loadu_si512(h + 8), h3 = _mm512_loadu_si512(h + 12);
    const __m512i a01 = _mm512_permutex2var_epi32(h0, idx02, h1), a23 = _mm512_permutex2var_epi32(h2, idx02, h3);
    const __m512i b01 = _mm512_permutex2var_epi32(h0, idx3, h1), b23 = _mm512_permutex2var_epi32(h2, idx3, h3);
    const __m512i dd = _mm512_shuffle_i64x2(a01, a23, _MM_SHUFFLE(1, 0, 1, 0));
    const __m512i x = _mm512_shuffle_i64x2(a01, a23, _MM_SHUFFLE(3, 2, 3, 2));
    const __m512i y = _mm512_shuffle_i64x2(b01, b23, _MM_SHUFFLE(1, 0, 1, 0));
    _mm256_storeu_si256((__m256i *)wd, _mm512_cvtepi32_epi16(dd));
    _mm256_storeu_si256((__m256i *)wm, _mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16)));
    _mm512_storeu_si512(mlo, _mm512_and_si512(x, _mm512_set1_epi8(0x3f)));
    const __m512i top = _mm512_and_si512(_mm512_srli_epi32(x, 2), _mm512_set1_epi8(0x30));
    _mm512_storeu_si512(mhi, _mm512_ternarylogic_epi32(_mm512_set1_epi8(0x0f), _mm512_srli_epi32(y, 4), top, 0xca));
}
#endif
#define GUILD_KERN_X86_AVX512_K4_ONCE

/* The 8 int32 partials of isum for one token. 4-element sums: lanes 0-7 / 8-15 of p0 are sub-blocks 0 / 2, of
 * p1 1 / 3, p2 4 / 6, p3 5 / 7; packing p0 with p1 puts sub-blocks (0, 1) in chunks 0-1 and (2, 3) in 2-3. */
static inline __attribute__((always_inline)) __m256i KERN_NAME(k4_dot)(const KERN_NAME(k4_unpacked_t) *u,
                                                                      const KERN_NAME(kq_prep_t) *a)
{
    const __m512i zero = _mm512_setzero_si512();
    const __m512i p0 = KERN_DPBUSD(zero, u->v[0], a->q[0]), p1 = KERN_DPBUSD(zero, u->v[1], a->q[1]);
    const __m512i p2 = KERN_DPBUSD(zero, u->v[2], a->q[2]), p3 = KERN_DPBUSD(zero, u->v[3], a->q[3]);
    const __m512i acc =
        KERN_DPWSSD(_mm512_madd_epi16(_mm512_packs_epi32(p0, p1), u->sc[0]), _mm512_packs_epi32(p2, p3), u->sc[1]);
    return k512_fold8_epi32(acc);
}

/* Q4_K (five_bits = 0) and Q5_K (five_bits = 1): identical but for the 5th bit of each level.
 * Per block and token: isum = sum_s sc[s] * D_s with D_s = sum over sub-block s of level * a, formed as
 *   4-element sums (KERN_DPBUSD: |sum| <= 4 * 31 * 128, so int16 holds them), packed to int16 (exact), then
 *   KERN_DPWSSD against the scales;
 * imin = sum_s m[s] * (bsums[2s] + bsums[2s+1]), for 16 rows at once after the rows' integer sums, from the
 * block headers kept per (block, row) and decoded 16 rows at a time (k4_hdr_decode16): the activation pair
 * sums split as 128 * hi + lo (lo in 0..127, hi in -32..32) so that both halves are bytes for KERN_DPBUSD.
 * Float stage
 *   d = fp16(w.d) * a.d;  dmin = fp16(w.dmin) * a.d;  sumf = sumf + (d * (float)isum - dmin * (float)imin).
 * Per block this is 6 multiply instructions and 5 shuffles where the maddubs/vpermw form took 8 and 13: the
 * kernel runs faster in cache, which is what lets a core keep its memory stream busy. The scales are decoded
 * in vector lanes (k4_unpack), with no scalar work per block and row (faster in cache again; from DRAM the
 * same). */
static inline __attribute__((always_inline)) void KERN_NAME(matmul_k4)(int five_bits, int64_t n, int64_t nrows, int64_t ntok, const void *w,
                                        size_t w_stride, const void *act, size_t act_stride, float *out,
                                        size_t ldo)
{
    const int64_t nb = n / QUANT_QK_K, np = (nb + 1) / 2;
    const int tile = KERN_NAME(kq_tile)(nb, ntok);
    const __m512i zero = _mm512_setzero_si512();
    const size_t block_bytes = five_bits ? sizeof(quant_block_q5_K) : sizeof(quant_block_q4_K);
    KERN_NAME(kq_prep_t) prep[tile * nb];
    uint64_t split[tile * nb][2];        /* [token][block]: activation pair sums as bytes lo, hi (see above) */
    __m512i st[tile * np * KQ_ROWS];     /* [token][block pair][row of the group]: isum partials, 8 per block */
    __m128i hdr[nb * KQ_ROWS];                   /* [block][row]: the block's first 16 bytes (k4_unpack) */
    uint16_t wd[nb * KQ_ROWS], wm[nb * KQ_ROWS]; /* [block][row]: fp16 d, dmin (k4_hdr_decode16) */
    uint32_t mlo[nb * KQ_ROWS], mhi[nb * KQ_ROWS]; /* [block][row]: mins 0-3, 4-7 as bytes */
    memset(hdr, 0, sizeof hdr);
    const char *pf_end = (const char *)w + (size_t)nrows * w_stride;
    kq_pf_t pf = kq_pf_start(w, pf_end);
    for (int64_t t0 = 0; t0 < ntok; t0 += tile) {
        const int tt = (int)(ntok - t0 < tile ? ntok - t0 : tile);
        const quant_block_q8_K *at[KQ_TILE];
        for (int t = 0; t < tt; t++) {
            at[t] = (const quant_block_q8_K *)((const char *)act + (size_t)(t0 + t) * act_stride);
            KERN_NAME(prep_k4)(at[t], nb, prep + t * nb);
            for (int64_t b = 0; b < nb; b++)
                k512_pair_split(&at[t][b], split[t * nb + b]);
        }
        for (int64_t r0 = 0; r0 < nrows; r0 += KQ_ROWS) {
            const int nr = (int)(nrows - r0 < KQ_ROWS ? nrows - r0 : KQ_ROWS);
            if (nr < KQ_ROWS)
                KERN_NAME(kq_clear_tail)(st, tt * np, nr);
            int i = 0;
            /* One token: rows in pairs, so that two independent blocks are in flight per step (faster in
             * cache); the prefetch cursor follows the second row, which covers the first. */
            if (tt == 1) {
                for (; i + 1 < nr; i += 2) {
                    const char *row = (const char *)w + (size_t)(r0 + i) * w_stride;
                    /* blocks in pairs, which share the rows' sum vectors: plain pointer steps */
                    __m256i *half = (__m256i *)&st[i];
                    for (int64_t b = 0; b < nb; b += 2, half += 2 * KQ_ROWS) {
                        for (int h = 0; h < 2 && b + h < nb; h++) {
                            const char *blk = row + (size_t)(b + h) * block_bytes;
                            kq_pf_advance(&pf, blk + w_stride);
                            KERN_NAME(k4_unpacked_t) u0, u1;
                            KERN_NAME(k4_unpack)(five_bits, blk, &hdr[(b + h) * KQ_ROWS + i], &u0);
                            KERN_NAME(k4_unpack)(five_bits, blk + w_stride, &hdr[(b + h) * KQ_ROWS + i + 1], &u1);
                            _mm256_storeu_si256(half + h, KERN_NAME(k4_dot)(&u0, &prep[b + h]));
                            _mm256_storeu_si256(half + h + 2, KERN_NAME(k4_dot)(&u1, &prep[b + h]));
                        }
                    }
                }
            }
            for (; i < nr; i++) {
                const char *row = (const char *)w + (size_t)(r0 + i) * w_stride;
                for (int64_t b = 0; b < nb; b++) {
                    const char *blk = row + (size_t)b * block_bytes;
                    kq_pf_advance(&pf, blk);
                    KERN_NAME(k4_unpacked_t) u;
                    KERN_NAME(k4_unpack)(five_bits, blk, &hdr[b * KQ_ROWS + i], &u);
                    for (int t = 0; t < tt; t++) {
                        __m256i *half = (__m256i *)&st[((size_t)t * np + b / 2) * KQ_ROWS + i] + (b & 1);
                        _mm256_storeu_si256(half, KERN_NAME(k4_dot)(&u, &prep[t * nb + b]));
                    }
                }
            }
            for (int64_t b = 0; b < nb; b++)
                k4_hdr_decode16(&hdr[b * KQ_ROWS], &wd[b * KQ_ROWS], &wm[b * KQ_ROWS], &mlo[b * KQ_ROWS],
                                &mhi[b * KQ_ROWS]);
            const __mmask16 keep = (__mmask16)((1u << nr) - 1);
            for (int t = 0; t < tt; t++) {
                __m512 sumf = _mm512_setzero_ps();
                for (int64_t p = 0; p < np; p++) {
                    __m512i is[2];
                    k512_tree16(&st[((size_t)t * np + p) * KQ_ROWS], &is[0], &is[1]);
                    for (int h = 0; h < 2 && 2 * p + h < nb; h++) {
                        const int64_t b = 2 * p + h;
                        const uint64_t lo = split[t * nb + b][0], hi = split[t * nb + b][1];
                        const __m512i ml = _mm512_loadu_si512(&mlo[b * KQ_ROWS]);
                        const __m512i mh = _mm512_loadu_si512(&mhi[b * KQ_ROWS]);
                        const __m512i xl = KERN_DPBUSD(KERN_DPBUSD(zero, ml, _mm512_set1_epi32((int)(uint32_t)lo)), mh,
                                                       _mm512_set1_epi32((int)(uint32_t)(lo >> 32)));
                        const __m512i xh = KERN_DPBUSD(KERN_DPBUSD(zero, ml, _mm512_set1_epi32((int)(uint32_t)hi)), mh,
                                                       _mm512_set1_epi32((int)(uint32_t)(hi >> 32)));
                        const __m512i imin = _mm512_add_epi32(xl, _mm512_slli_epi32(xh, 7));
                        const __m512 ad = _mm512_set1_ps(at[t][b].d);
                        const __m512 d = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)&wd[b * KQ_ROWS])), ad);
                        const __m512 dmin = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)&wm[b * KQ_ROWS])), ad);
                        const __m512 t1 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(is[h]));
                        const __m512 t2 = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(imin));
                        sumf = _mm512_add_ps(sumf, _mm512_sub_ps(t1, t2));
                    }
                }
                _mm512_mask_storeu_ps(out + (size_t)(t0 + t) * ldo + (size_t)r0, keep, sumf);
            }
        }
    }
}

static void KERN_NAME(matmul_q4_K)(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                                   const void *act, size_t act_stride, float *out, size_t ldo)
{
    KERN_NAME(matmul_k4)(0, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);
}

static void KERN_NAME(matmul_q5_K)(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                                   const void *act, size_t act_stride, float *out, size_t ldo)
{
    KERN_NAME(matmul_k4)(1, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);
}
