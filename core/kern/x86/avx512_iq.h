/* core/kern/x86/avx512_iq.h — AVX-512 kernels of the lattice IQ types against Q8_K: IQ2_XXS, IQ2_XS, IQ2_S,
 * IQ3_XXS, IQ3_S, IQ1_S, IQ1_M. A template included by avx512.c and avx512_vnni.c after avx512_kquants.h (KERN_NAME,
 * KERN_DPWSSD, the prepared activations, tiling, prefetch and k512_tree16).
 *
 * Per 64 elements, the grid entries are gathered (vpgatherdq / vpgatherdd from the ggml tables) and the signs
 * applied ((g ^ s) - s with s = 0x00/0xff bytes from ksigns64 or the explicit sign bits); the signed levels
 * (|level| <= 62) are biased by +64 into unsigned bytes <= 126, so vpmaddubsw with any activation byte is exact,
 * and the bias returns as 64 * sum_s scale_s * (sum of a over s). Scales are per 16 elements (the formats'
 * per-32 scales duplicated), integer, odd (2 s + 1).
 *
 * IQ1_S / IQ1_M: the reference's 8 * sum grid * a + dsign * sum a is sum (8 grid + dsign) * a, so their levels
 * are 8 g + dsign in -9..9 (dsign per 32 elements for IQ1_S, per 8 for IQ1_M) and they run the same code.
 *
 * Numerics (core/quant/dot_iq.c): isum = sum_g ls_g * sum_j level_j * a_j per block; float stage
 * d = fp16(w.d) * a.d (IQ1_M: its scale spread over the scales' top nibbles);  sumf = sumf + d * (float)isum;
 * result = k * sumf (k = 1/8 for IQ2_* and IQ1_*, 1/4 for IQ3_XXS, none for IQ3_S). */

#include "core/quant/iq_tables.h"
#include "core/quant/ref_kernels.h"

enum { IQ_IQ2_XXS, IQ_IQ2_XS, IQ_IQ2_S, IQ_IQ3_XXS, IQ_IQ3_S, IQ_IQ1_S, IQ_IQ1_M };

/* 8 int32 scales (one per 32 elements) -> 16 int16, one per 16 elements */
static inline __m256i k512_dup_scales32(__m256i ls32)
{
    const __m128i s = _mm256_cvtepi32_epi16(ls32);
    return _mm256_set_m128i(_mm_unpackhi_epi16(s, s), _mm_unpacklo_epi16(s, s));
}

/* two 4-bit scales per byte (low nibble first) x 8 bytes -> 16 int16 values 2 s + 1 */
static inline __m256i k512_nibble_scales(const uint8_t *p8)
{
    const __m128i b = _mm_loadl_epi64((const __m128i *)p8);
    const __m128i m = _mm_set1_epi8(0x0f);
    const __m128i nib = _mm_unpacklo_epi8(_mm_and_si128(b, m), _mm_and_si128(_mm_srli_epi16(b, 4), m));
    const __m256i s = _mm256_cvtepu8_epi16(nib);
    return _mm256_add_epi16(_mm256_add_epi16(s, s), _mm256_set1_epi16(1));
}

/* signed levels (g ^ s) - s, biased by 64 */
static inline __m512i k512_signed_bias64(__m512i g, __m512i s)
{
    return _mm512_add_epi8(_mm512_sub_epi8(_mm512_xor_si512(g, s), s), _mm512_set1_epi8(64));
}

/* IQ1 levels + 64 of 8 grid entries (64 elements): 8 g + (dsign + 64), dsign -1 where `neg` has the byte's bit
 * (the grid bytes are -1/0/+1: shifted by 3 within their byte). */
static inline __m512i k512_iq1_levels(__m256i idx, uint64_t neg)
{
    const __m512i g = _mm512_i32gather_epi64(idx, (const void *)quant_iq1s_grid, 8);
    const __m512i g8 = _mm512_and_si512(_mm512_slli_epi16(g, 3), _mm512_set1_epi8((char)0xf8));
    return _mm512_add_epi8(g8, _mm512_mask_blend_epi8((__mmask64)neg, _mm512_set1_epi8(65), _mm512_set1_epi8(63)));
}

/* One block's levels + 64 in element order (4 x 64 bytes) and its 16 per-16 scales. */
static inline __attribute__((always_inline)) void KERN_NAME(iq_unpack)(int kind, const char *blk, __m512i *u,
                                                                       __m256i *sc16)
{
    const __m512i k127 = _mm512_set1_epi32(127);
    if (kind == IQ_IQ2_XXS || kind == IQ_IQ3_XXS) {
        /* per 32 elements a uint32 aux: four 7-bit sign indices (per 8 elements) and the scale in bits 28-31 */
        const uint8_t *aux = kind == IQ_IQ2_XXS ? (const uint8_t *)blk + 2 : (const uint8_t *)blk + 2 + 64;
        const __m256i A = kind == IQ_IQ2_XXS
                              ? _mm512_castsi512_si256(_mm512_permutexvar_epi32(
                                    _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 15, 13, 11, 9, 7, 5, 3, 1),
                                    _mm512_loadu_si512(aux)))
                              : _mm256_loadu_si256((const __m256i *)aux);
        const __m256i ls = _mm256_add_epi32(_mm256_slli_epi32(_mm256_srli_epi32(A, 28), 1), _mm256_set1_epi32(1));
        *sc16 = k512_dup_scales32(ls);
        const __m512i Az = _mm512_castsi256_si512(A);
        const __m512i shifts = _mm512_set_epi32(21, 14, 7, 0, 21, 14, 7, 0, 21, 14, 7, 0, 21, 14, 7, 0);
        for (int k = 0; k < 4; k++) {
            /* groups 2k, 2k+1: sign indices of their 8 entries of 8 elements */
            const __m512i sel = _mm512_set_epi32(2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k, 2 * k, 2 * k, 2 * k,
                                                 2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k, 2 * k, 2 * k, 2 * k);
            const __m512i sidx = _mm512_and_si512(_mm512_srlv_epi32(_mm512_permutexvar_epi32(sel, Az), shifts), k127);
            const __m512i s = _mm512_i32gather_epi64(_mm512_castsi512_si256(sidx), (const void *)quant_ksigns64, 8);
            __m512i g;
            if (kind == IQ_IQ2_XXS) {
                /* grid indices: bytes 0-3 of group 2k's pair of uint32, then group 2k+1's */
                uint32_t i0, i1;
                memcpy(&i0, blk + 2 + 16 * k, 4);
                memcpy(&i1, blk + 2 + 16 * k + 8, 4);
                const __m256i gidx = _mm256_cvtepu8_epi32(_mm_set_epi32(0, 0, (int)i1, (int)i0));
                g = _mm512_i32gather_epi64(gidx, (const void *)quant_iq2xxs_grid, 8);
            } else {
                const __m512i gidx = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(blk + 2 + 16 * k)));
                g = _mm512_i32gather_epi32(gidx, (const void *)quant_iq3xxs_grid, 4);
            }
            u[k] = k512_signed_bias64(g, s);
        }
        return;
    }
    if (kind == IQ_IQ2_XS) {
        const quant_block_iq2_xs *x = (const quant_block_iq2_xs *)blk;
        *sc16 = k512_nibble_scales(x->scales);
        const __m512i q = _mm512_loadu_si512(x->qs);
        for (int h = 0; h < 2; h++) {
            const __m512i e = _mm512_cvtepu16_epi32(h ? _mm512_extracti64x4_epi64(q, 1) : _mm512_castsi512_si256(q));
            const __m512i gi = _mm512_and_si512(e, _mm512_set1_epi32(511)), si = _mm512_srli_epi32(e, 9);
            for (int p = 0; p < 2; p++) {
                const __m256i g8 = p ? _mm512_extracti64x4_epi64(gi, 1) : _mm512_castsi512_si256(gi);
                const __m256i s8 = p ? _mm512_extracti64x4_epi64(si, 1) : _mm512_castsi512_si256(si);
                u[2 * h + p] = k512_signed_bias64(_mm512_i32gather_epi64(g8, (const void *)quant_iq2xs_grid, 8),
                                                  _mm512_i32gather_epi64(s8, (const void *)quant_ksigns64, 8));
            }
        }
        return;
    }
    if (kind == IQ_IQ2_S) {
        const quant_block_iq2_s *x = (const quant_block_iq2_s *)blk;
        *sc16 = k512_nibble_scales(x->scales);
        /* entry e (8 elements): index qs[e] | ((qh[e / 4] >> 2 (e % 4)) & 3) << 8; signs: bytes qs[32 + e] */
        const __m512i qh = _mm512_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)x->qh));
        const __m512i sh = _mm512_set_epi32(6, 4, 2, 0, 6, 4, 2, 0, 6, 4, 2, 0, 6, 4, 2, 0);
        for (int h = 0; h < 2; h++) {
            const __m512i lo = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(x->qs + 16 * h)));
            const __m512i sel = _mm512_set_epi32(4 * h + 3, 4 * h + 3, 4 * h + 3, 4 * h + 3, 4 * h + 2, 4 * h + 2,
                                                 4 * h + 2, 4 * h + 2, 4 * h + 1, 4 * h + 1, 4 * h + 1, 4 * h + 1,
                                                 4 * h, 4 * h, 4 * h, 4 * h);
            const __m512i hi = _mm512_and_si512(_mm512_srlv_epi32(_mm512_permutexvar_epi32(sel, qh), sh), _mm512_set1_epi32(3));
            const __m512i gi = _mm512_or_si512(lo, _mm512_slli_epi32(hi, 8));
            for (int p = 0; p < 2; p++) {
                const int k = 2 * h + p;
                const __m256i g8 = p ? _mm512_extracti64x4_epi64(gi, 1) : _mm512_castsi512_si256(gi);
                uint64_t sb;
                memcpy(&sb, x->qs + 32 + 8 * k, 8);
                u[k] = k512_signed_bias64(_mm512_i32gather_epi64(g8, (const void *)quant_iq2s_grid, 8),
                                          _mm512_movm_epi8((__mmask64)sb));
            }
        }
        return;
    }
    if (kind == IQ_IQ1_S) {
        /* entry e = 4 ib + l (8 elements): index qs[e] | ((qh[ib] >> 3 l) & 7) << 8; per 32 elements (ib) the
         * scale 2 ((qh >> 12) & 7) + 1 and the delta sign (bit 15) */
        const quant_block_iq1_s *x = (const quant_block_iq1_s *)blk;
        const __m128i qh = _mm_loadu_si128((const __m128i *)x->qh);
        const __m256i qh32 = _mm256_cvtepu16_epi32(qh);
        const __m256i ls = _mm256_add_epi32(
            _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(qh32, 12), _mm256_set1_epi32(7)), 1),
            _mm256_set1_epi32(1));
        *sc16 = k512_dup_scales32(ls);
        const uint32_t sgn = _pext_u32((uint32_t)_mm_movemask_epi8(qh), 0xaaaau); /* bit ib: sub-block ib */
        const __m256i sh = _mm256_set_epi32(9, 6, 3, 0, 9, 6, 3, 0);
        for (int k = 0; k < 4; k++) {
            const __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(x->qs + 8 * k)));
            const __m256i hq = _mm256_permutevar8x32_epi32(
                qh32, _mm256_set_epi32(2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k, 2 * k, 2 * k, 2 * k));
            const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(hq, sh), _mm256_set1_epi32(7));
            const uint64_t neg = ((sgn >> (2 * k)) & 1 ? 0x00000000ffffffffull : 0) |
                                 ((sgn >> (2 * k + 1)) & 1 ? 0xffffffff00000000ull : 0);
            u[k] = k512_iq1_levels(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 8)), neg);
        }
        return;
    }
    if (kind == IQ_IQ1_M) {
        /* entry e: nibble e % 2 of qh[e / 2] holds 3 index bits and the delta sign (bit 3); per 16 elements a
         * 3-bit scale: field i % 4 (3 bits each) of the uint16 i / 4 of scales */
        const quant_block_iq1_m *x = (const quant_block_iq1_m *)blk;
        uint64_t sc64;
        memcpy(&sc64, x->scales, 8);
        const __m256i words = _mm256_shuffle_epi8(
            _mm256_set1_epi64x((long long)sc64),
            _mm256_set_epi8(7, 6, 7, 6, 7, 6, 7, 6, 5, 4, 5, 4, 5, 4, 5, 4, 3, 2, 3, 2, 3, 2, 3, 2, 1, 0, 1, 0, 1, 0, 1, 0));
        const __m256i f = _mm256_and_si256(
            _mm256_srlv_epi16(words, _mm256_set_epi16(9, 6, 3, 0, 9, 6, 3, 0, 9, 6, 3, 0, 9, 6, 3, 0)), _mm256_set1_epi16(7));
        *sc16 = _mm256_add_epi16(_mm256_add_epi16(f, f), _mm256_set1_epi16(1));
        const __m256i sh = _mm256_set_epi32(28, 24, 20, 16, 12, 8, 4, 0);
        for (int k = 0; k < 4; k++) {
            uint32_t q4;
            memcpy(&q4, x->qh + 4 * k, 4);
            const __m256i nib = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)q4), sh), _mm256_set1_epi32(15));
            const __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(x->qs + 8 * k)));
            const __m256i idx = _mm256_or_si256(lo, _mm256_slli_epi32(_mm256_and_si256(nib, _mm256_set1_epi32(7)), 8));
            const uint32_t s8 = (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_slli_epi32(nib, 28)));
            u[k] = k512_iq1_levels(idx, _pdep_u64(s8, 0x0101010101010101ull) * 0xff);
        }
        return;
    }
    /* IQ3_S: 4-element entries, index qs[e] | (bit e % 8 of qh[e / 8]) << 8; explicit sign bits; a 4-bit scale
     * per 32 elements (low nibble first) */
    const quant_block_iq3_s *x = (const quant_block_iq3_s *)blk;
    {
        uint32_t s4;
        memcpy(&s4, x->scales, 4);
        const __m128i b = _mm_cvtsi32_si128((int)s4);
        const __m128i m = _mm_set1_epi8(0x0f);
        const __m128i nib = _mm_unpacklo_epi8(_mm_and_si128(b, m), _mm_and_si128(_mm_srli_epi16(b, 4), m));
        const __m256i ls = _mm256_add_epi32(_mm256_slli_epi32(_mm256_cvtepu8_epi32(nib), 1), _mm256_set1_epi32(1));
        *sc16 = k512_dup_scales32(ls);
    }
    const __m512i bit = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    for (int k = 0; k < 4; k++) {
        const __m512i lo = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(x->qs + 16 * k)));
        const int qh16 = x->qh[2 * k] | x->qh[2 * k + 1] << 8;
        const __m512i hi = _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32(qh16), bit), _mm512_set1_epi32(1));
        const __m512i g = _mm512_i32gather_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 8)),
                                                 (const void *)quant_iq3s_grid, 4);
        uint64_t sb;
        memcpy(&sb, x->signs + 8 * k, 8);
        u[k] = k512_signed_bias64(g, _mm512_movm_epi8((__mmask64)sb));
    }
}

static inline size_t iq_block_bytes(int kind)
{
    switch (kind) {
    case IQ_IQ2_XXS: return sizeof(quant_block_iq2_xxs);
    case IQ_IQ2_XS: return sizeof(quant_block_iq2_xs);
    case IQ_IQ2_S: return sizeof(quant_block_iq2_s);
    case IQ_IQ3_XXS: return sizeof(quant_block_iq3_xxs);
    case IQ_IQ1_S: return sizeof(quant_block_iq1_s);
    case IQ_IQ1_M: return sizeof(quant_block_iq1_m);
    default: return sizeof(quant_block_iq3_s);
    }
}

static inline float iq_factor(int kind)
{
    return kind == IQ_IQ3_XXS ? 0.25f : kind == IQ_IQ3_S ? 1.0f : 0.125f;
}

static inline __attribute__((always_inline)) void
KERN_NAME(matmul_iq)(int kind, int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                     const void *act, size_t act_stride, float *out, size_t ldo)
{
    const int64_t nb = n / QUANT_QK_K, np = (nb + 1) / 2;
    const size_t bb = iq_block_bytes(kind);
    const int tile = KERN_NAME(kq_tile)(nb, ntok);
    const __m512i sidx0 = Q6_SCALE_IDX(0), sidx1 = Q6_SCALE_IDX(4), sidx2 = Q6_SCALE_IDX(8), sidx3 = Q6_SCALE_IDX(12);
    KERN_NAME(kq_prep_t) prep[tile * nb];
    __m512i st[tile * np * KQ_ROWS];
    uint16_t wd[nb * KQ_ROWS];
    memset(wd, 0, sizeof wd);
    memset(st, 0, sizeof st);
    const char *pf_end = (const char *)w + (size_t)nrows * w_stride;
    kq_pf_t pf = kq_pf_start(w, pf_end);
    for (int64_t t0 = 0; t0 < ntok; t0 += tile) {
        const int tt = (int)(ntok - t0 < tile ? ntok - t0 : tile);
        const quant_block_q8_K *at[KQ_TILE];
        for (int t = 0; t < tt; t++) {
            at[t] = (const quant_block_q8_K *)((const char *)act + (size_t)(t0 + t) * act_stride);
            KERN_NAME(prep_q6)(at[t], nb, prep + t * nb); /* natural order, sums of 16 from qs */
        }
        for (int64_t r0 = 0; r0 < nrows; r0 += KQ_ROWS) {
            const int nr = (int)(nrows - r0 < KQ_ROWS ? nrows - r0 : KQ_ROWS);
            if (nr < KQ_ROWS)
                KERN_NAME(kq_clear_tail)(st, tt * np, nr);
            for (int i = 0; i < nr; i++) {
                const char *row = (const char *)w + (size_t)(r0 + i) * w_stride;
                for (int64_t b = 0; b < nb; b++) {
                    const char *blk = row + (size_t)b * bb;
                    kq_pf_advance(&pf, blk);
                    if (kind == IQ_IQ1_M)
                        wd[b * KQ_ROWS + i] = quant_iq1_m_d((const quant_block_iq1_m *)blk);
                    else /* every other lattice type starts with its fp16 d */
                        memcpy(&wd[b * KQ_ROWS + i], blk, 2);
                    __m512i u[4];
                    __m256i sc16;
                    KERN_NAME(iq_unpack)(kind, blk, u, &sc16);
                    const __m512i scz = _mm512_castsi256_si512(sc16);
                    const __m512i sc0 = _mm512_permutexvar_epi16(sidx0, scz), sc1 = _mm512_permutexvar_epi16(sidx1, scz);
                    const __m512i sc2 = _mm512_permutexvar_epi16(sidx2, scz), sc3 = _mm512_permutexvar_epi16(sidx3, scz);
                    for (int t = 0; t < tt; t++) {
                        const KERN_NAME(kq_prep_t) *a = &prep[t * nb + b];
                        __m512i acc0 = KERN_DPWSSD(_mm512_setzero_si512(), _mm512_maddubs_epi16(u[0], a->q[0]), sc0);
                        __m512i acc1 = KERN_DPWSSD(_mm512_setzero_si512(), _mm512_maddubs_epi16(u[1], a->q[1]), sc1);
                        acc0 = KERN_DPWSSD(acc0, _mm512_maddubs_epi16(u[2], a->q[2]), sc2);
                        acc1 = KERN_DPWSSD(acc1, _mm512_maddubs_epi16(u[3], a->q[3]), sc3);
                        const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(sc16, a->bs), 6);
                        const __m256i y = _mm256_sub_epi32(k512_fold8_epi32(_mm512_add_epi32(acc0, acc1)), corr);
                        _mm256_storeu_si256((__m256i *)&st[((size_t)t * np + b / 2) * KQ_ROWS + i] + (b & 1), y);
                    }
                }
            }
            const __mmask16 keep = (__mmask16)((1u << nr) - 1);
            for (int t = 0; t < tt; t++) {
                __m512 sumf = _mm512_setzero_ps();
                for (int64_t p = 0; p < np; p++) {
                    __m512i is[2];
                    k512_tree16(&st[((size_t)t * np + p) * KQ_ROWS], &is[0], &is[1]);
                    for (int h = 0; h < 2 && 2 * p + h < nb; h++) {
                        const int64_t b = 2 * p + h;
                        const __m512 d = _mm512_mul_ps(
                            _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)&wd[b * KQ_ROWS])),
                            _mm512_set1_ps(at[t][b].d));
                        sumf = _mm512_add_ps(sumf, _mm512_mul_ps(d, _mm512_cvtepi32_ps(is[h])));
                    }
                }
                if (kind != IQ_IQ3_S)
                    sumf = _mm512_mul_ps(_mm512_set1_ps(iq_factor(kind)), sumf);
                _mm512_mask_storeu_ps(out + (size_t)(t0 + t) * ldo + (size_t)r0, keep, sumf);
            }
        }
    }
}

#define IQ_KERNEL(T, KIND)                                                                                  \
    static void KERN_NAME(matmul_##T)(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride, \
                                      const void *act, size_t act_stride, float *out, size_t ldo)          \
    {                                                                                                      \
        KERN_NAME(matmul_iq)(KIND, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);                \
    }
IQ_KERNEL(iq2_xxs, IQ_IQ2_XXS)
IQ_KERNEL(iq2_xs, IQ_IQ2_XS)
IQ_KERNEL(iq2_s, IQ_IQ2_S)
IQ_KERNEL(iq3_xxs, IQ_IQ3_XXS)
IQ_KERNEL(iq3_s, IQ_IQ3_S)
IQ_KERNEL(iq1_s, IQ_IQ1_S)
IQ_KERNEL(iq1_m, IQ_IQ1_M)
#undef IQ_KERNEL

static void KERN_NAME(fill_iq)(kern_table_t *t)
{
    t->matmul[GUILD_TYPE_IQ2_XXS] = KERN_NAME(matmul_iq2_xxs);
    t->matmul[GUILD_TYPE_IQ2_XS] = KERN_NAME(matmul_iq2_xs);
    t->matmul[GUILD_TYPE_IQ2_S] = KERN_NAME(matmul_iq2_s);
    t->matmul[GUILD_TYPE_IQ3_XXS] = KERN_NAME(matmul_iq3_xxs);
    t->matmul[GUILD_TYPE_IQ3_S] = KERN_NAME(matmul_iq3_s);
    t->matmul[GUILD_TYPE_IQ1_S] = KERN_NAME(matmul_iq1_s);
    t->matmul[GUILD_TYPE_IQ1_M] = KERN_NAME(matmul_iq1_m);
}
