/* core/kern/x86/avx512_kquants.h — AVX-512 kernels of the K-quant weights (Q4_K, Q5_K, Q6_K) against Q8_K.
 *
 * A template: included by avx512.c and avx512_vnni.c, which set the ISA (#pragma) and define
 *   KERN_NAME(x)              the level's name for x (x_avx512, x_avx512vnni)
 *   KERN_DPWSSD(acc, a, b)    acc + sum of adjacent int16 products of a and b, in int32 lanes (vpdpwssd or
 *                             vpmaddwd + vpaddd: the same exact integers)
 *   KERN_DPBUSD(acc, u, a)    acc + sums of 4 products of unsigned bytes u (<= 127) and signed bytes a, in int32
 *                             lanes (vpdpbusd, or vpmaddubsw + vpmaddwd: exact while pairs stay below 2^15)
 * so that one source gives each level its own functions, each compiled for one ISA.
 *
 * Numerics (core/quant/dot_ref.c): per block the integer sums isum (and imin) are exact whatever the order, so
 * they are formed in SIMD lanes and reduced; the block's float terms are then computed with the reference's
 * operations in its order (lane-wise SIMD float ops are the same IEEE operations as scalar ones), and blocks
 * are added into one float in block order.
 *
 * Multi-token: the weights of a block are unpacked once and dotted with every token of a tile; activations
 * are rearranged once per call into the order the unpacked weights come in.
 */

/* One token's activation block, rearranged: q[i] are the 64 int8 that meet the i-th unpacked weight vector;
 * bs holds the sub-block sums the type needs; d the Q8_K scale. */
typedef struct KERN_NAME(kq_prep) {
    __m512i q[4];
    __m256i bs; /* Q4_K/Q5_K: 8 int16 sums over 32 (from a.bsums, as the reference); Q6_K: 16 over 16 (of qs) */
    float d;
} KERN_NAME(kq_prep_t);

/* Rows are processed in groups of 16 (the lanes of the float stage, k512_tree16); tokens in tiles whose
 * weights are unpacked once. Per (token, block, row of the group) one vector of integer sums waits for the
 * group to finish; the tile is sized so that these and the prepared activations stay within ~96 KiB. */
#define KQ_ROWS 16
#define KQ_TILE 8
#define KQ_SCRATCH_BUDGET (96 * 1024)
/* Software prefetch distance (bytes ahead in the weight stream): the hardware prefetchers alone leave a core
 * far below its share of DRAM bandwidth while it computes. */
#ifndef KQ_PF
#define KQ_PF 4096
#endif

static int KERN_NAME(kq_tile)(int64_t nb, int64_t ntok)
{
    int64_t per_tok = nb * (int64_t)(sizeof(KERN_NAME(kq_prep_t)) + KQ_ROWS * sizeof(__m512i));
    int64_t fit = KQ_SCRATCH_BUDGET / per_tok;
    int64_t tile = ntok < KQ_TILE ? ntok : KQ_TILE;
    if (fit < tile)
        tile = fit < 1 ? 1 : fit;
    return (int)tile;
}

/* Zeroes the sum vectors of rows nr..15 of a partial group, so that the tree sees defined values. */
static void KERN_NAME(kq_clear_tail)(__m512i *st, int64_t n_vec, int nr)
{
    for (int64_t v = 0; v < n_vec; v++)
        for (int i = nr; i < KQ_ROWS; i++)
            st[v * KQ_ROWS + i] = _mm512_setzero_si512();
}

/* The weight stream's software prefetch: a cursor that issues one prefetch per 64-byte line, KQ_PF bytes ahead
 * of the block being read, and never past `end`, the end of the call's rows (lines beyond belong to another
 * task, likely another core's, and would only cost bandwidth here). Into L2 (T1): the line then costs a fill
 * buffer only until L2 has it, and the L1 gets it from L2 in time; one T1 per line read DRAM faster than several
 * T0 prefetches per line. Addresses are integers: with a pointer formed past the rows' object
 * (undefined behaviour), GCC 12 dropped every prefetch of the loop. */
#ifndef KQ_PF_HINT
#define KQ_PF_HINT _MM_HINT_T1
#endif
typedef struct kq_pf {
    uintptr_t next, end;
} kq_pf_t;

/* Starts the stream at w: prefetches its first KQ_PF bytes (a call starts a new stream: a task of the expert
 * pipeline, on whichever core took it). */
static inline kq_pf_t kq_pf_start(const void *w, const char *end)
{
    kq_pf_t pf = {(uintptr_t)w & ~(uintptr_t)63, (uintptr_t)end};
    const uintptr_t want = (uintptr_t)w + KQ_PF < pf.end ? (uintptr_t)w + KQ_PF : pf.end;
    for (; pf.next < want; pf.next += 64)
        _mm_prefetch((const char *)pf.next, KQ_PF_HINT);
    return pf;
}

/* Before reading at p: every line up to p + KQ_PF requested. */
static inline void kq_pf_advance(kq_pf_t *pf, const void *p)
{
    const uintptr_t want = (uintptr_t)p + KQ_PF < pf->end ? (uintptr_t)p + KQ_PF : pf->end;
    for (; pf->next < want; pf->next += 64)
        _mm_prefetch((const char *)pf->next, KQ_PF_HINT);
}

/* Q4_K and Q5_K: 64-byte load l (0, 1) of qs holds chunks 2l and 2l+1 (32 bytes each); its low nibbles are
 * sub-blocks 4l and 4l+2, its high nibbles 4l+1 and 4l+3. */
static void KERN_NAME(prep_k4)(const quant_block_q8_K *a, int64_t nb, KERN_NAME(kq_prep_t) *p)
{
    for (int64_t b = 0; b < nb; b++) {
        const int8_t *q = a[b].qs;
        for (int l = 0; l < 2; l++) {
            const int8_t *c = q + 128 * l;
            p[b].q[2 * l] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)c)),
                                               _mm256_loadu_si256((const __m256i *)(c + 64)), 1);
            p[b].q[2 * l + 1] =
                _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(c + 32))),
                                   _mm256_loadu_si256((const __m256i *)(c + 96)), 1);
        }
        /* bsums[2s] + bsums[2s+1]: adjacent pairs of 16 int16, summed exactly in int16 (|sum| <= 32 * 128) */
        __m256i bs16 = _mm256_loadu_si256((const __m256i *)a[b].bsums);
        __m256i pairs = _mm256_madd_epi16(bs16, _mm256_set1_epi16(1));          /* 8 int32 */
        __m128i packed = _mm_packs_epi32(_mm256_castsi256_si128(pairs), _mm256_extracti128_si256(pairs, 1));
        p[b].bs = _mm256_castsi128_si256(packed);
        p[b].d = a[b].d;
    }
}

/* Q6_K: unpacked vectors are elements 0-63, 64-127, 128-191, 192-255 in order; bs are the 16 sums of 16 qs
 * (computed from qs, not taken from a.bsums: the reference never reads bsums for Q6_K). Once per token and
 * block, so plain C. */
static void KERN_NAME(prep_q6)(const quant_block_q8_K *a, int64_t nb, KERN_NAME(kq_prep_t) *p)
{
    for (int64_t b = 0; b < nb; b++) {
        int16_t g[16];
        for (int i = 0; i < 4; i++)
            p[b].q[i] = _mm512_loadu_si512(a[b].qs + 64 * i);
        for (int s = 0; s < 16; s++) {
            int sum = 0;
            for (int k = 0; k < 16; k++)
                sum += a[b].qs[16 * s + k];
            g[s] = (int16_t)sum;
        }
        p[b].bs = _mm256_loadu_si256((const __m256i *)g);
        p[b].d = a[b].d;
    }
}

/* ---- Q4_K, Q5_K -------------------------------------------------------------------------------------- */

/* The 5th bit of sub-blocks (A, B) in qh broadcast to both halves: a byte mask per lane. */
#define K5_BIT_MASK(A, B)                                                                                   \
    _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (A))), _mm256_set1_epi8((char)(1 << (B))), 1)

#include "core/kern/x86/avx512_k4.h"

/* ---- Q6_K ---------------------------------------------------------------------------------------------- */

/* maddubs output lanes (32 int16, 8 per 16-element sub-block) of unpacked vector i to scale index 4 i + k. */
#define Q6_SCALE_IDX(S)                                                                                     \
    _mm512_set_epi16(S + 3, S + 3, S + 3, S + 3, S + 3, S + 3, S + 3, S + 3, S + 2, S + 2, S + 2, S + 2, S + 2, \
                     S + 2, S + 2, S + 2, S + 1, S + 1, S + 1, S + 1, S + 1, S + 1, S + 1, S + 1, S, S, S, S, S, \
                     S, S, S)

/* One sum per block: blocks 2 j and 2 j + 1 share a sum vector (first and second half), so the tree runs once
 * per two blocks. Float stage: d = fp16(w.d) * a.d;  sumf = sumf + d * (float)isum. */
static void KERN_NAME(matmul_q6_K)(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                                   const void *act, size_t act_stride, float *out, size_t ldo)
{
    const int64_t nb = n / QUANT_QK_K, np = (nb + 1) / 2;
    const int tile = KERN_NAME(kq_tile)(nb, ntok);
    const __m512i m4 = _mm512_set1_epi8(0x0f), m2 = _mm512_set1_epi8(0x03);
    /* qh bits 2k..2k+1 for the quarter k: the low-nibble vector holds quarters 0 and 1, the high one 2 and 3 */
    const __m512i shift_lo = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
    const __m512i shift_hi = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1);
    const __m512i sidx0 = Q6_SCALE_IDX(0), sidx1 = Q6_SCALE_IDX(4), sidx2 = Q6_SCALE_IDX(8), sidx3 = Q6_SCALE_IDX(12);
    KERN_NAME(kq_prep_t) prep[tile * nb];
    __m512i st[tile * np * KQ_ROWS]; /* [token][block pair][row of the group] */
    uint16_t wd[nb * KQ_ROWS];       /* [block][row] */
    memset(wd, 0, sizeof wd);
    memset(st, 0, sizeof st); /* an odd block count leaves the last second halves zero */
    const char *pf_end = (const char *)w + (size_t)nrows * w_stride;
    kq_pf_t pf = kq_pf_start(w, pf_end);
    for (int64_t t0 = 0; t0 < ntok; t0 += tile) {
        const int tt = (int)(ntok - t0 < tile ? ntok - t0 : tile);
        const quant_block_q8_K *at[KQ_TILE];
        for (int t = 0; t < tt; t++) {
            at[t] = (const quant_block_q8_K *)((const char *)act + (size_t)(t0 + t) * act_stride);
            KERN_NAME(prep_q6)(at[t], nb, prep + t * nb);
        }
        for (int64_t r0 = 0; r0 < nrows; r0 += KQ_ROWS) {
            const int nr = (int)(nrows - r0 < KQ_ROWS ? nrows - r0 : KQ_ROWS);
            if (nr < KQ_ROWS)
                KERN_NAME(kq_clear_tail)(st, tt * np, nr);
            for (int i = 0; i < nr; i++) {
                const quant_block_q6_K *x = (const quant_block_q6_K *)((const char *)w + (size_t)(r0 + i) * w_stride);
                for (int64_t b = 0; b < nb; b++) {
                    kq_pf_advance(&pf, (const char *)&x[b]);
                    wd[b * KQ_ROWS + i] = x[b].d;
                    const __m512i ql0 = _mm512_loadu_si512(x[b].ql), ql1 = _mm512_loadu_si512(x[b].ql + 64);
                    const __m512i qh0 = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x[b].qh));
                    const __m512i qh1 = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x[b].qh + 32)));
                    const __m512i h0 = _mm512_and_si512(_mm512_srlv_epi16(qh0, shift_lo), m2);
                    const __m512i h1 = _mm512_and_si512(_mm512_srlv_epi16(qh0, shift_hi), m2);
                    const __m512i h2 = _mm512_and_si512(_mm512_srlv_epi16(qh1, shift_lo), m2);
                    const __m512i h3 = _mm512_and_si512(_mm512_srlv_epi16(qh1, shift_hi), m2);
                    const __m512i v0 = _mm512_or_si512(_mm512_and_si512(ql0, m4), _mm512_slli_epi16(h0, 4));
                    const __m512i v1 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql0, 4), m4),
                                                       _mm512_slli_epi16(h1, 4));
                    const __m512i v2 = _mm512_or_si512(_mm512_and_si512(ql1, m4), _mm512_slli_epi16(h2, 4));
                    const __m512i v3 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql1, 4), m4),
                                                       _mm512_slli_epi16(h3, 4));
                    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[b].scales));
                    const __m512i scz = _mm512_castsi256_si512(sc16);
                    const __m512i sc0 = _mm512_permutexvar_epi16(sidx0, scz);
                    const __m512i sc1 = _mm512_permutexvar_epi16(sidx1, scz);
                    const __m512i sc2 = _mm512_permutexvar_epi16(sidx2, scz);
                    const __m512i sc3 = _mm512_permutexvar_epi16(sidx3, scz);
                    for (int t = 0; t < tt; t++) {
                        const KERN_NAME(kq_prep_t) *a = &prep[t * nb + b];
                        __m512i acc0 = KERN_DPWSSD(_mm512_setzero_si512(), _mm512_maddubs_epi16(v0, a->q[0]), sc0);
                        __m512i acc1 = KERN_DPWSSD(_mm512_setzero_si512(), _mm512_maddubs_epi16(v1, a->q[1]), sc1);
                        acc0 = KERN_DPWSSD(acc0, _mm512_maddubs_epi16(v2, a->q[2]), sc2);
                        acc1 = KERN_DPWSSD(acc1, _mm512_maddubs_epi16(v3, a->q[3]), sc3);
                        /* levels are q6 - 32: subtract 32 * sum_s scale_s * (sum of the sub-block's a) */
                        const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(sc16, a->bs), 5);
                        const __m256i y = _mm256_sub_epi32(k512_fold8_epi32(_mm512_add_epi32(acc0, acc1)), corr);
                        __m256i *half = (__m256i *)&st[((size_t)t * np + b / 2) * KQ_ROWS + i] + (b & 1);
                        _mm256_storeu_si256(half, y);
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
                _mm512_mask_storeu_ps(out + (size_t)(t0 + t) * ldo + (size_t)r0, keep, sumf);
            }
        }
    }
}

/* ---- Q2_K, Q3_K ---------------------------------------------------------------------------------------- *
 * qs: byte 32 h + l holds the 2-bit fields of elements 128 h + 32 k + l, k = 0..3 (bits 2 k). Broadcasting the
 * 32 bytes of half h and shifting the two 256-bit halves by different amounts gives elements 128 h + 64 p ..
 * + 63 in order, so the activations need no rearranging. */

/* natural order, bs = a.bsums (the reference's imin uses them for Q2_K) */
static void KERN_NAME(prep_nat)(const quant_block_q8_K *a, int64_t nb, KERN_NAME(kq_prep_t) *p)
{
    for (int64_t b = 0; b < nb; b++) {
        for (int i = 0; i < 4; i++)
            p[b].q[i] = _mm512_loadu_si512(a[b].qs + 64 * i);
        p[b].bs = _mm256_loadu_si256((const __m256i *)a[b].bsums);
        p[b].d = a[b].d;
    }
}

/* The 2-bit fields of a Q2_K/Q3_K block as four 64-byte vectors in element order. */
static inline void KERN_NAME(k2bit_fields)(const uint8_t *qs, __m512i *v)
{
    const __m512i m2 = _mm512_set1_epi8(0x03);
    const __m512i sh0 = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
    const __m512i sh1 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1);
    for (int h = 0; h < 2; h++) {
        const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * h)));
        v[2 * h] = _mm512_and_si512(_mm512_srlv_epi16(q, sh0), m2);
        v[2 * h + 1] = _mm512_and_si512(_mm512_srlv_epi16(q, sh1), m2);
    }
}

/* Q2_K: isum = sum_s (sc[s] & 15) * sum_16 q a;  imin = sum_s (sc[s] >> 4) * a.bsums[s]; float stage as Q4_K
 * with w.d, w.dmin. */
static void KERN_NAME(matmul_q2_K)(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                                   const void *act, size_t act_stride, float *out, size_t ldo)
{
    const int64_t nb = n / QUANT_QK_K;
    const int tile = KERN_NAME(kq_tile)(nb, ntok);
    const __m512i sidx0 = Q6_SCALE_IDX(0), sidx1 = Q6_SCALE_IDX(4), sidx2 = Q6_SCALE_IDX(8), sidx3 = Q6_SCALE_IDX(12);
    KERN_NAME(kq_prep_t) prep[tile * nb];
    __m512i st[tile * nb * KQ_ROWS];
    uint16_t wd[nb * KQ_ROWS], wm[nb * KQ_ROWS];
    memset(wd, 0, sizeof wd);
    memset(wm, 0, sizeof wm);
    const char *pf_end = (const char *)w + (size_t)nrows * w_stride;
    kq_pf_t pf = kq_pf_start(w, pf_end);
    for (int64_t t0 = 0; t0 < ntok; t0 += tile) {
        const int tt = (int)(ntok - t0 < tile ? ntok - t0 : tile);
        const quant_block_q8_K *at[KQ_TILE];
        for (int t = 0; t < tt; t++) {
            at[t] = (const quant_block_q8_K *)((const char *)act + (size_t)(t0 + t) * act_stride);
            KERN_NAME(prep_nat)(at[t], nb, prep + t * nb);
        }
        for (int64_t r0 = 0; r0 < nrows; r0 += KQ_ROWS) {
            const int nr = (int)(nrows - r0 < KQ_ROWS ? nrows - r0 : KQ_ROWS);
            if (nr < KQ_ROWS)
                KERN_NAME(kq_clear_tail)(st, tt * nb, nr);
            for (int i = 0; i < nr; i++) {
                const quant_block_q2_K *x = (const quant_block_q2_K *)((const char *)w + (size_t)(r0 + i) * w_stride);
                for (int64_t b = 0; b < nb; b++) {
                    kq_pf_advance(&pf, (const char *)&x[b]);
                    wd[b * KQ_ROWS + i] = x[b].d;
                    wm[b * KQ_ROWS + i] = x[b].dmin;
                    __m512i v[4];
                    KERN_NAME(k2bit_fields)(x[b].qs, v);
                    const __m128i sc8 = _mm_loadu_si128((const __m128i *)x[b].scales);
                    const __m256i sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(sc8, _mm_set1_epi8(0x0f)));
                    const __m256i m16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc8, 4), _mm_set1_epi8(0x0f)));
                    const __m512i scz = _mm512_castsi256_si512(sc16);
                    const __m512i sc0 = _mm512_permutexvar_epi16(sidx0, scz), sc1 = _mm512_permutexvar_epi16(sidx1, scz);
                    const __m512i sc2 = _mm512_permutexvar_epi16(sidx2, scz), sc3 = _mm512_permutexvar_epi16(sidx3, scz);
                    for (int t = 0; t < tt; t++) {
                        const KERN_NAME(kq_prep_t) *a = &prep[t * nb + b];
                        __m512i acc0 = KERN_DPWSSD(_mm512_setzero_si512(), _mm512_maddubs_epi16(v[0], a->q[0]), sc0);
                        __m512i acc1 = KERN_DPWSSD(_mm512_setzero_si512(), _mm512_maddubs_epi16(v[1], a->q[1]), sc1);
                        acc0 = KERN_DPWSSD(acc0, _mm512_maddubs_epi16(v[2], a->q[2]), sc2);
                        acc1 = KERN_DPWSSD(acc1, _mm512_maddubs_epi16(v[3], a->q[3]), sc3);
                        st[((size_t)t * nb + b) * KQ_ROWS + i] =
                            k512_pack2(k512_fold8_epi32(_mm512_add_epi32(acc0, acc1)), _mm256_madd_epi16(m16, a->bs));
                    }
                }
            }
            const __mmask16 keep = (__mmask16)((1u << nr) - 1);
            for (int t = 0; t < tt; t++) {
                __m512 sumf = _mm512_setzero_ps();
                for (int64_t b = 0; b < nb; b++) {
                    __m512i isum, imin;
                    k512_tree16(&st[((size_t)t * nb + b) * KQ_ROWS], &isum, &imin);
                    const __m512 ad = _mm512_set1_ps(at[t][b].d);
                    const __m512 d = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)&wd[b * KQ_ROWS])), ad);
                    const __m512 dmin = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)&wm[b * KQ_ROWS])), ad);
                    const __m512 t1 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(isum));
                    const __m512 t2 = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(imin));
                    sumf = _mm512_add_ps(sumf, _mm512_sub_ps(t1, t2));
                }
                _mm512_mask_storeu_ps(out + (size_t)(t0 + t) * ldo + (size_t)r0, keep, sumf);
            }
        }
    }
}

/* Q3_K scales: 16 six-bit values - 32 (ggml's uint32 unpacking; equal to quant_q3_K_scales), as int16. */
static inline __m256i k512_q3_scales(const uint8_t *packed)
{
    const uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
    uint32_t a[3];
    memcpy(a, packed, 12);
    const uint32_t s2 = ((a[0] >> 4) & kmask2) | (((a[2] >> 4) & kmask1) << 4);
    const uint32_t s3 = ((a[1] >> 4) & kmask2) | (((a[2] >> 6) & kmask1) << 4);
    const uint32_t s0 = (a[0] & kmask2) | (((a[2] >> 0) & kmask1) << 4);
    const uint32_t s1 = (a[1] & kmask2) | (((a[2] >> 2) & kmask1) << 4);
    const __m128i s = _mm_sub_epi8(_mm_set_epi32((int)s3, (int)s2, (int)s1, (int)s0), _mm_set1_epi8(32));
    return _mm256_cvtepi8_epi16(s);
}

/* Q3_K: levels q3 = q2 - 4 (high bit clear) or q2; computed as u = q2 + 4 hbit in 0..7 with the 4 taken back
 * as 4 * sum_s scale_s * (sum of the sub-block's a). One sum per block: pairs of blocks share a vector. */
static void KERN_NAME(matmul_q3_K)(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                                   const void *act, size_t act_stride, float *out, size_t ldo)
{
    const int64_t nb = n / QUANT_QK_K, np = (nb + 1) / 2;
    const int tile = KERN_NAME(kq_tile)(nb, ntok);
    const __m512i sidx0 = Q6_SCALE_IDX(0), sidx1 = Q6_SCALE_IDX(4), sidx2 = Q6_SCALE_IDX(8), sidx3 = Q6_SCALE_IDX(12);
    const __m512i four = _mm512_set1_epi8(4);
    /* the high bit of vector i (elements 64 i ..): bit 2 i of hmask for lanes 0-31, bit 2 i + 1 for 32-63 */
    const __m512i hb0 = K5_BIT_MASK(0, 1), hb1 = K5_BIT_MASK(2, 3), hb2 = K5_BIT_MASK(4, 5), hb3 = K5_BIT_MASK(6, 7);
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
                const quant_block_q3_K *x = (const quant_block_q3_K *)((const char *)w + (size_t)(r0 + i) * w_stride);
                for (int64_t b = 0; b < nb; b++) {
                    kq_pf_advance(&pf, (const char *)&x[b]);
                    wd[b * KQ_ROWS + i] = x[b].d;
                    __m512i v[4];
                    KERN_NAME(k2bit_fields)(x[b].qs, v);
                    const __m512i hm = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x[b].hmask));
                    v[0] = _mm512_mask_add_epi8(v[0], _mm512_test_epi8_mask(hm, hb0), v[0], four);
                    v[1] = _mm512_mask_add_epi8(v[1], _mm512_test_epi8_mask(hm, hb1), v[1], four);
                    v[2] = _mm512_mask_add_epi8(v[2], _mm512_test_epi8_mask(hm, hb2), v[2], four);
                    v[3] = _mm512_mask_add_epi8(v[3], _mm512_test_epi8_mask(hm, hb3), v[3], four);
                    const __m256i sc16 = k512_q3_scales(x[b].scales);
                    const __m512i scz = _mm512_castsi256_si512(sc16);
                    const __m512i sc0 = _mm512_permutexvar_epi16(sidx0, scz), sc1 = _mm512_permutexvar_epi16(sidx1, scz);
                    const __m512i sc2 = _mm512_permutexvar_epi16(sidx2, scz), sc3 = _mm512_permutexvar_epi16(sidx3, scz);
                    for (int t = 0; t < tt; t++) {
                        const KERN_NAME(kq_prep_t) *a = &prep[t * nb + b];
                        __m512i acc0 = KERN_DPWSSD(_mm512_setzero_si512(), _mm512_maddubs_epi16(v[0], a->q[0]), sc0);
                        __m512i acc1 = KERN_DPWSSD(_mm512_setzero_si512(), _mm512_maddubs_epi16(v[1], a->q[1]), sc1);
                        acc0 = KERN_DPWSSD(acc0, _mm512_maddubs_epi16(v[2], a->q[2]), sc2);
                        acc1 = KERN_DPWSSD(acc1, _mm512_maddubs_epi16(v[3], a->q[3]), sc3);
                        const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(sc16, a->bs), 2);
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
                _mm512_mask_storeu_ps(out + (size_t)(t0 + t) * ldo + (size_t)r0, keep, sumf);
            }
        }
    }
}
