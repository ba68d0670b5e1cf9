/* The AVX2 level (AVX2 + FMA + F16C: Haswell, Zen 1 and later): kernels compiled for exactly that ISA.
 *
 * Same structure and numerics as the AVX-512 kernels (avx512_kquants.h): per (row, block, token) the exact
 * integer sums in vector lanes, rows in groups of 8 whose sum vectors are reduced together by a transposition
 * tree (k2_tree8) into vectors with one row per lane, then the reference's float sequence lane-wise and one
 * vector add per block in block order.
 *
 * Signed-by-signed products use vpmaddubsw with the weight's magnitude and the activation with the weight's
 * sign (vpsignb), exact when activation quants are in [-127, 127], which Guild's quantizers guarantee (ggml's
 * AVX2 kernels rely on the same). Unsigned levels (Q4_K, Q5_K, Q6_K) are exact for any activation. */
#include "core/kern/table.h"

#if defined(__x86_64__)
#pragma GCC target("avx2,fma,f16c")

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "core/quant/blocks.h"
#include "core/quant/iq_tables.h"
#include "core/quant/ref_kernels.h"

#define K2_ROWS 8
#define K2_TILE 8
#define K2_SCRATCH_BUDGET (96 * 1024)
#define K2_PF 4096 /* software prefetch distance in the weight stream, bytes */

/* One token's activation block in the order of the unpacked weights, the sums the type needs, the scale. */
typedef struct k2_prep {
    __m256i q[8];
    __m256i bs;
    float d;
} k2_prep_t;

static int k2_tile(int64_t nb, int64_t ntok)
{
    int64_t per_tok = nb * (int64_t)(sizeof(k2_prep_t) + K2_ROWS * sizeof(__m256i));
    int64_t fit = K2_SCRATCH_BUDGET / per_tok;
    int64_t tile = ntok < K2_TILE ? ntok : K2_TILE;
    if (fit < tile)
        tile = fit < 1 ? 1 : fit;
    return (int)tile;
}

/* As kq_prefetch / kq_prefetch_start (avx512_kquants.h): nothing past the call's rows; their first K2_PF
 * bytes up front. */
static inline void k2_prefetch(const char *p, int lines, const char *end)
{
    const uintptr_t a = (uintptr_t)p + K2_PF; /* integers: see kq_prefetch */
    if (a >= (uintptr_t)end)
        return;
    for (int l = 0; l < lines; l++)
        _mm_prefetch((const char *)(a + 64 * (uintptr_t)l), _MM_HINT_T0);
}

static inline void k2_prefetch_start(const void *w, const char *end)
{
    const char *p = w;
    const int64_t n = (int64_t)((uintptr_t)end - (uintptr_t)p) < K2_PF ? (int64_t)((uintptr_t)end - (uintptr_t)p) : K2_PF;
    for (int64_t o = 0; o < n; o += 64)
        _mm_prefetch(p + o, _MM_HINT_T0);
}

/* 8 rows' sum vectors (lanes 0-3: partials of the first sum, 4-7: of the second) -> the two sums with row i in
 * lane i. Integer adds: exact in any order. */
static inline void k2_tree8(const __m256i *st, __m256i *first, __m256i *second)
{
    const __m256i u0 = _mm256_hadd_epi32(st[0], st[1]), u1 = _mm256_hadd_epi32(st[2], st[3]);
    const __m256i u2 = _mm256_hadd_epi32(st[4], st[5]), u3 = _mm256_hadd_epi32(st[6], st[7]);
    const __m256i a = _mm256_hadd_epi32(u0, u1), b = _mm256_hadd_epi32(u2, u3);
    *first = _mm256_permute2x128_si256(a, b, 0x20);
    *second = _mm256_permute2x128_si256(a, b, 0x31);
}

static inline __m128i k2_fold4(__m256i v)
{
    return _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
}

static inline __m256i k2_mask_rows(int nr)
{
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(nr), idx);
}

static void k2_clear_tail(__m256i *st, int64_t n_vec, int nr)
{
    for (int64_t v = 0; v < n_vec; v++)
        for (int i = nr; i < K2_ROWS; i++)
            st[v * K2_ROWS + i] = _mm256_setzero_si256();
}

/* fp16 of 8 rows -> float */
static inline __m256 k2_f16x8(const uint16_t *h)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h));
}

/* Dword j = int16 value j duplicated in both halves, for vpermd broadcasts of per-sub-block scales. */
static inline __m256i k2_dup16(__m128i v8_epi16)
{
    const __m256i x = _mm256_cvtepu16_epi32(v8_epi16);
    return _mm256_or_si256(x, _mm256_slli_epi32(x, 16));
}

/* [sc(a) x 8 int16 | sc(b) x 8 int16] from k2_dup16 output */
static inline __m256i k2_scale_pair(__m256i dup, int a, int b)
{
    return _mm256_permutevar8x32_epi32(dup, _mm256_setr_epi32(a, a, a, a, b, b, b, b));
}

/* Q4_K / Q5_K packed 6-bit scales -> [sc0..sc7, m0..m7] bytes (as quant_k4_scale_min). */
static inline __m128i k2_k4_scales(const uint8_t *scales)
{
    const uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
    uint32_t u[3];
    memcpy(u, scales, 12);
    const uint32_t u3 = ((u[2] >> 4) & kmask2) | (((u[1] >> 6) & kmask3) << 4);
    const uint32_t u2 = u[1] & kmask1;
    const uint32_t u1 = (u[2] & kmask2) | (((u[0] >> 6) & kmask3) << 4);
    const uint32_t u0 = u[0] & kmask1;
    return _mm_set_epi32((int)u3, (int)u2, (int)u1, (int)u0);
}

/* ---- Q4_K, Q5_K -------------------------------------------------------------------------------------- */

/* natural order: q[i] = elements 32 i .. 32 i + 31 (sub-block i); bs = 8 int16 sums over 32 from a.bsums */
static void prep_k4(const quant_block_q8_K *a, int64_t nb, k2_prep_t *p)
{
    for (int64_t b = 0; b < nb; b++) {
        for (int i = 0; i < 8; i++)
            p[b].q[i] = _mm256_loadu_si256((const __m256i *)(a[b].qs + 32 * i));
        const __m256i pairs = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a[b].bsums), _mm256_set1_epi16(1));
        p[b].bs = _mm256_castsi128_si256(_mm_packs_epi32(_mm256_castsi256_si128(pairs), _mm256_extracti128_si256(pairs, 1)));
        p[b].d = a[b].d;
    }
}

static inline void matmul_k4(int five_bits, int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                             const void *act, size_t act_stride, float *out, size_t ldo)
{
    const int64_t nb = n / QUANT_QK_K;
    const int tile = k2_tile(nb, ntok);
    const __m256i m4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    const size_t block_bytes = five_bits ? sizeof(quant_block_q5_K) : sizeof(quant_block_q4_K);
    k2_prep_t prep[tile * nb];
    __m256i st[tile * nb * K2_ROWS]; /* [token][block][row of the group] */
    uint16_t wd[nb * K2_ROWS], wm[nb * K2_ROWS];
    memset(wd, 0, sizeof wd);
    memset(wm, 0, sizeof wm);
    const char *pf_end = (const char *)w + (size_t)nrows * w_stride;
    k2_prefetch_start(w, pf_end);
    for (int64_t t0 = 0; t0 < ntok; t0 += tile) {
        const int tt = (int)(ntok - t0 < tile ? ntok - t0 : tile);
        const quant_block_q8_K *at[K2_TILE];
        for (int t = 0; t < tt; t++) {
            at[t] = (const quant_block_q8_K *)((const char *)act + (size_t)(t0 + t) * act_stride);
            prep_k4(at[t], nb, prep + t * nb);
        }
        for (int64_t r0 = 0; r0 < nrows; r0 += K2_ROWS) {
            const int nr = (int)(nrows - r0 < K2_ROWS ? nrows - r0 : K2_ROWS);
            if (nr < K2_ROWS)
                k2_clear_tail(st, tt * nb, nr);
            for (int i = 0; i < nr; i++) {
                const char *row = (const char *)w + (size_t)(r0 + i) * w_stride;
                for (int64_t b = 0; b < nb; b++) {
                    const char *blk = row + (size_t)b * block_bytes;
                    k2_prefetch(blk, 3, pf_end);
                    const uint8_t *scales, *qs;
                    if (five_bits) {
                        scales = ((const quant_block_q5_K *)blk)->scales;
                        qs = ((const quant_block_q5_K *)blk)->qs;
                    } else {
                        scales = ((const quant_block_q4_K *)blk)->scales;
                        qs = ((const quant_block_q4_K *)blk)->qs;
                    }
                    memcpy(&wd[b * K2_ROWS + i], blk, 2);
                    memcpy(&wm[b * K2_ROWS + i], blk + 2, 2);
                    __m256i v[8];
                    for (int l = 0; l < 4; l++) {
                        const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * l));
                        v[2 * l] = _mm256_and_si256(q, m4);
                        v[2 * l + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                    }
                    if (five_bits) {
                        /* bit j of qh[e] is the 5th bit of element 32 j + e */
                        const __m256i qh = _mm256_loadu_si256((const __m256i *)((const quant_block_q5_K *)blk)->qh);
                        for (int j = 0; j < 8; j++)
                            v[j] = _mm256_or_si256(v[j], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, j), one), 4));
                    }
                    const __m256i scm = _mm256_cvtepu8_epi16(k2_k4_scales(scales)); /* [sc0..7, m0..7] */
                    const __m256i scd = k2_dup16(_mm256_castsi256_si128(scm));
                    const __m128i m8 = _mm256_extracti128_si256(scm, 1);
                    for (int t = 0; t < tt; t++) {
                        const k2_prep_t *a = &prep[t * nb + b];
                        /* scale broadcasts made at their use: 16 ymm registers do not hold 8 levels + 8 scales */
                        __m256i acc0 = _mm256_madd_epi16(_mm256_maddubs_epi16(v[0], a->q[0]),
                                                         _mm256_permutevar8x32_epi32(scd, _mm256_set1_epi32(0)));
                        __m256i acc1 = _mm256_madd_epi16(_mm256_maddubs_epi16(v[1], a->q[1]),
                                                         _mm256_permutevar8x32_epi32(scd, _mm256_set1_epi32(1)));
                        for (int j = 2; j < 8; j += 2) {
                            acc0 = _mm256_add_epi32(acc0, _mm256_madd_epi16(_mm256_maddubs_epi16(v[j], a->q[j]),
                                                                            _mm256_permutevar8x32_epi32(scd, _mm256_set1_epi32(j))));
                            acc1 = _mm256_add_epi32(acc1, _mm256_madd_epi16(_mm256_maddubs_epi16(v[j + 1], a->q[j + 1]),
                                                                            _mm256_permutevar8x32_epi32(scd, _mm256_set1_epi32(j + 1))));
                        }
                        const __m128i imin = _mm_madd_epi16(m8, _mm256_castsi256_si128(a->bs));
                        st[((size_t)t * nb + b) * K2_ROWS + i] =
                            _mm256_set_m128i(imin, k2_fold4(_mm256_add_epi32(acc0, acc1)));
                    }
                }
            }
            const __m256i keep = k2_mask_rows(nr);
            for (int t = 0; t < tt; t++) {
                __m256 sumf = _mm256_setzero_ps();
                for (int64_t b = 0; b < nb; b++) {
                    __m256i isum, imin;
                    k2_tree8(&st[((size_t)t * nb + b) * K2_ROWS], &isum, &imin);
                    const __m256 ad = _mm256_set1_ps(at[t][b].d);
                    const __m256 d = _mm256_mul_ps(k2_f16x8(&wd[b * K2_ROWS]), ad);
                    const __m256 dmin = _mm256_mul_ps(k2_f16x8(&wm[b * K2_ROWS]), ad);
                    const __m256 t1 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(isum));
                    const __m256 t2 = _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(imin));
                    sumf = _mm256_add_ps(sumf, _mm256_sub_ps(t1, t2));
                }
                _mm256_maskstore_ps(out + (size_t)(t0 + t) * ldo + (size_t)r0, keep, sumf);
            }
        }
    }
}

static void matmul_q4_K_avx2(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                             const void *act, size_t act_stride, float *out, size_t ldo)
{
    matmul_k4(0, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);
}

static void matmul_q5_K_avx2(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                             const void *act, size_t act_stride, float *out, size_t ldo)
{
    matmul_k4(1, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);
}

/* ---- one-sum types: Q6_K, IQ4_XS ---------------------------------------------------------------------- *
 * Blocks 2 j and 2 j + 1 share a sum vector (lanes 0-3 and 4-7); float stage
 * d = fp16(w.d) * a.d;  sumf = sumf + d * (float)isum. */

typedef void (*k2_prep_fn)(const quant_block_q8_K *a, int64_t nb, k2_prep_t *p);
/* 4 int32 lanes that sum to the block's isum, for every token of the tile */
typedef void (*k2_block_fn)(const void *blk, const k2_prep_t *prep, int64_t nb, int tt, __m128i *sums);

#define K2_D_IQ1_M ((size_t)-1) /* d_offset of IQ1_M: see quant_iq1_m_d */

static inline __attribute__((always_inline)) void matmul_one_sum(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                                  const void *act, size_t act_stride, float *out, size_t ldo, size_t block_bytes,
                                  size_t d_offset, int pf_lines, k2_prep_fn prep_fn, k2_block_fn block_fn,
                                  float factor)
{
    const int64_t nb = n / QUANT_QK_K, np = (nb + 1) / 2;
    const int tile = k2_tile(nb, ntok);
    k2_prep_t prep[tile * nb];
    __m256i st[tile * np * K2_ROWS]; /* [token][block pair][row of the group] */
    uint16_t wd[nb * K2_ROWS];
    memset(wd, 0, sizeof wd);
    memset(st, 0, sizeof st);
    const char *pf_end = (const char *)w + (size_t)nrows * w_stride;
    k2_prefetch_start(w, pf_end);
    for (int64_t t0 = 0; t0 < ntok; t0 += tile) {
        const int tt = (int)(ntok - t0 < tile ? ntok - t0 : tile);
        const quant_block_q8_K *at[K2_TILE];
        for (int t = 0; t < tt; t++) {
            at[t] = (const quant_block_q8_K *)((const char *)act + (size_t)(t0 + t) * act_stride);
            prep_fn(at[t], nb, prep + t * nb);
        }
        for (int64_t r0 = 0; r0 < nrows; r0 += K2_ROWS) {
            const int nr = (int)(nrows - r0 < K2_ROWS ? nrows - r0 : K2_ROWS);
            if (nr < K2_ROWS)
                k2_clear_tail(st, tt * np, nr);
            for (int i = 0; i < nr; i++) {
                const char *row = (const char *)w + (size_t)(r0 + i) * w_stride;
                for (int64_t b = 0; b < nb; b++) {
                    const char *blk = row + (size_t)b * block_bytes;
                    k2_prefetch(blk, pf_lines, pf_end);
                    if (d_offset == K2_D_IQ1_M)
                        wd[b * K2_ROWS + i] = quant_iq1_m_d((const quant_block_iq1_m *)blk);
                    else
                        memcpy(&wd[b * K2_ROWS + i], blk + d_offset, 2);
                    __m128i sums[K2_TILE];
                    block_fn(blk, prep + b, nb, tt, sums);
                    for (int t = 0; t < tt; t++)
                        _mm_storeu_si128((__m128i *)&st[((size_t)t * np + b / 2) * K2_ROWS + i] + (b & 1), sums[t]);
                }
            }
            const __m256i keep = k2_mask_rows(nr);
            for (int t = 0; t < tt; t++) {
                __m256 sumf = _mm256_setzero_ps();
                for (int64_t p = 0; p < np; p++) {
                    __m256i is[2];
                    k2_tree8(&st[((size_t)t * np + p) * K2_ROWS], &is[0], &is[1]);
                    for (int h = 0; h < 2 && 2 * p + h < nb; h++) {
                        const int64_t b = 2 * p + h;
                        const __m256 d = _mm256_mul_ps(k2_f16x8(&wd[b * K2_ROWS]), _mm256_set1_ps(at[t][b].d));
                        sumf = _mm256_add_ps(sumf, _mm256_mul_ps(d, _mm256_cvtepi32_ps(is[h])));
                    }
                }
                if (factor != 1.0f) /* the IQ formats' final constant: result = k * sumf */
                    sumf = _mm256_mul_ps(_mm256_set1_ps(factor), sumf);
                _mm256_maskstore_ps(out + (size_t)(t0 + t) * ldo + (size_t)r0, keep, sumf);
            }
        }
    }
}

/* Q6_K: natural order (q[i] = elements 32 i ..); bs = 16 int16 sums over 16 of qs (the reference never reads
 * a.bsums for Q6_K) */
static void prep_q6(const quant_block_q8_K *a, int64_t nb, k2_prep_t *p)
{
    for (int64_t b = 0; b < nb; b++) {
        int16_t g[16];
        for (int i = 0; i < 8; i++)
            p[b].q[i] = _mm256_loadu_si256((const __m256i *)(a[b].qs + 32 * i));
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

static inline __attribute__((always_inline)) void block_q6(const void *blkp, const k2_prep_t *prep, int64_t nb, int tt, __m128i *sums)
{
    const quant_block_q6_K *x = blkp;
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(0x03);
    __m256i v[8];
    for (int h = 0; h < 2; h++) {
        const __m256i l0 = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h));
        const __m256i l1 = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h + 32));
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(x->qh + 32 * h));
        v[4 * h + 0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4));
        v[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
                                       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4));
        v[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4));
        v[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4));
    }
    const __m128i sc8 = _mm_loadu_si128((const __m128i *)x->scales);
    const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
    const __m256i dlo = k2_dup16(_mm256_castsi256_si128(sc16)), dhi = k2_dup16(_mm256_extracti128_si256(sc16, 1));
    __m256i sc[8];
    for (int i = 0; i < 8; i++) /* vector i covers sub-blocks 2 i (lanes 0-7 of the maddubs output) and 2 i + 1 */
        sc[i] = k2_scale_pair(i < 4 ? dlo : dhi, (2 * i) % 8, (2 * i + 1) % 8);
    for (int t = 0; t < tt; t++) {
        const k2_prep_t *a = &prep[(int64_t)t * nb];
        __m256i acc0 = _mm256_madd_epi16(_mm256_maddubs_epi16(v[0], a->q[0]), sc[0]);
        __m256i acc1 = _mm256_madd_epi16(_mm256_maddubs_epi16(v[1], a->q[1]), sc[1]);
        for (int j = 2; j < 8; j += 2) {
            acc0 = _mm256_add_epi32(acc0, _mm256_madd_epi16(_mm256_maddubs_epi16(v[j], a->q[j]), sc[j]));
            acc1 = _mm256_add_epi32(acc1, _mm256_madd_epi16(_mm256_maddubs_epi16(v[j + 1], a->q[j + 1]), sc[j + 1]));
        }
        /* levels are q6 - 32 */
        const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(sc16, a->bs), 5);
        sums[t] = k2_fold4(_mm256_sub_epi32(_mm256_add_epi32(acc0, acc1), corr));
    }
}

static void matmul_q6_K_avx2(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                             const void *act, size_t act_stride, float *out, size_t ldo)
{
    matmul_one_sum(n, nrows, ntok, w, w_stride, act, act_stride, out, ldo, sizeof(quant_block_q6_K),
                   offsetof(quant_block_q6_K, d), 4, prep_q6, block_q6, 1.0f);
}

/* IQ4_XS: a 32-byte load holds sub-blocks 2 m and 2 m + 1 (16 bytes each): low nibbles are their elements
 * 0-15, high nibbles 16-31. q[2 m] = [a 64 m + 0..15 | a 64 m + 32..47], q[2 m + 1] = the other halves. */
static void prep_iq4xs(const quant_block_q8_K *a, int64_t nb, k2_prep_t *p)
{
    for (int64_t b = 0; b < nb; b++) {
        for (int m = 0; m < 4; m++) {
            const __m256i x0 = _mm256_loadu_si256((const __m256i *)(a[b].qs + 64 * m));      /* sub-block 2m */
            const __m256i x1 = _mm256_loadu_si256((const __m256i *)(a[b].qs + 64 * m + 32)); /* 2m + 1 */
            p[b].q[2 * m] = _mm256_permute2x128_si256(x0, x1, 0x20);
            p[b].q[2 * m + 1] = _mm256_permute2x128_si256(x0, x1, 0x31);
        }
        p[b].bs = _mm256_setzero_si256();
        p[b].d = a[b].d;
    }
}

static inline __attribute__((always_inline)) void block_iq4xs(const void *blkp, const k2_prep_t *prep, int64_t nb, int tt, __m128i *sums)
{
    const quant_block_iq4_xs *x = blkp;
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)quant_kvalues_iq4nl));
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256i lev[8], mag[8];
    for (int m = 0; m < 4; m++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * m));
        lev[2 * m] = _mm256_shuffle_epi8(table, _mm256_and_si256(q, m4));
        lev[2 * m + 1] = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
        mag[2 * m] = _mm256_sign_epi8(lev[2 * m], lev[2 * m]);
        mag[2 * m + 1] = _mm256_sign_epi8(lev[2 * m + 1], lev[2 * m + 1]);
    }
    /* the 8 scales - 32: low nibbles of scales_l interleaved, 2-bit highs of scales_h by a variable shift */
    uint32_t sl;
    memcpy(&sl, x->scales_l, 4);
    const __m128i b = _mm_cvtsi32_si128((int)sl);
    const __m128i nib = _mm_unpacklo_epi8(_mm_and_si128(b, _mm_set1_epi8(0x0f)),
                                          _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(0x0f)));
    const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(x->scales_h),
                                                          _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)),
                                        _mm256_set1_epi32(3));
    const __m256i ls = _mm256_sub_epi32(_mm256_or_si256(_mm256_cvtepu8_epi32(nib), _mm256_slli_epi32(hi, 4)),
                                        _mm256_set1_epi32(32));
    const __m256i dup = _mm256_or_si256(_mm256_and_si256(ls, _mm256_set1_epi32(0xffff)), _mm256_slli_epi32(ls, 16));
    __m256i sc[4];
    for (int m = 0; m < 4; m++)
        sc[m] = k2_scale_pair(dup, 2 * m, 2 * m + 1);
    for (int t = 0; t < tt; t++) {
        const k2_prep_t *a = &prep[(int64_t)t * nb];
        __m256i acc = _mm256_setzero_si256();
        for (int i = 0; i < 8; i++) {
            const __m256i p16 = _mm256_maddubs_epi16(mag[i], _mm256_sign_epi8(a->q[i], lev[i]));
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p16, sc[i / 2]));
        }
        sums[t] = k2_fold4(acc);
    }
}

static void matmul_iq4_xs_avx2(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                               const void *act, size_t act_stride, float *out, size_t ldo)
{
    matmul_one_sum(n, nrows, ntok, w, w_stride, act, act_stride, out, ldo, sizeof(quant_block_iq4_xs),
                   offsetof(quant_block_iq4_xs, d), 3, prep_iq4xs, block_iq4xs, 1.0f);
}

/* ---- Q2_K, Q3_K ---------------------------------------------------------------------------------------- *
 * qs byte 32 h + l holds the 2-bit fields of elements 128 h + 32 k + l (bits 2 k): vector 4 h + k is elements
 * 32 (4 h + k) .., natural order. Q2_K has two sums (scale and min, as Q4_K); Q3_K one, its levels q2 + 4 hbit
 * - 4 computed unsigned with the 4 taken back as 4 * sum_s scale_s * (sum of a over s). */

static inline void k2_2bit_fields(const uint8_t *qs, __m256i *v)
{
    const __m256i m2 = _mm256_set1_epi8(0x03);
    for (int h = 0; h < 2; h++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * h));
        v[4 * h + 0] = _mm256_and_si256(q, m2);
        v[4 * h + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 2), m2);
        v[4 * h + 2] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m2);
        v[4 * h + 3] = _mm256_and_si256(_mm256_srli_epi16(q, 6), m2);
    }
}

/* natural order, bs = a.bsums (16 int16; the reference's Q2_K imin reads them) */
static void prep_nat_bsums(const quant_block_q8_K *a, int64_t nb, k2_prep_t *p)
{
    for (int64_t b = 0; b < nb; b++) {
        for (int i = 0; i < 8; i++)
            p[b].q[i] = _mm256_loadu_si256((const __m256i *)(a[b].qs + 32 * i));
        p[b].bs = _mm256_loadu_si256((const __m256i *)a[b].bsums);
        p[b].d = a[b].d;
    }
}

/* sum_i (maddubs(v[i], q[i]) . [sc 2i x 8 | sc 2i+1 x 8]) for 16 per-16 int16 scales */
static inline __m256i k2_scaled16(const __m256i *v, const __m256i *q, __m256i sc16)
{
    const __m256i dlo = k2_dup16(_mm256_castsi256_si128(sc16)), dhi = k2_dup16(_mm256_extracti128_si256(sc16, 1));
    __m256i acc0 = _mm256_setzero_si256(), acc1 = _mm256_setzero_si256();
    for (int i = 0; i < 8; i += 2) {
        acc0 = _mm256_add_epi32(acc0, _mm256_madd_epi16(_mm256_maddubs_epi16(v[i], q[i]),
                                                        k2_scale_pair(i < 4 ? dlo : dhi, (2 * i) % 8, (2 * i + 1) % 8)));
        acc1 = _mm256_add_epi32(acc1, _mm256_madd_epi16(_mm256_maddubs_epi16(v[i + 1], q[i + 1]),
                                                        k2_scale_pair(i + 1 < 4 ? dlo : dhi, (2 * i + 2) % 8, (2 * i + 3) % 8)));
    }
    return _mm256_add_epi32(acc0, acc1);
}

static void matmul_q2_K_avx2(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                             const void *act, size_t act_stride, float *out, size_t ldo)
{
    const int64_t nb = n / QUANT_QK_K;
    const int tile = k2_tile(nb, ntok);
    k2_prep_t prep[tile * nb];
    __m256i st[tile * nb * K2_ROWS];
    uint16_t wd[nb * K2_ROWS], wm[nb * K2_ROWS];
    memset(wd, 0, sizeof wd);
    memset(wm, 0, sizeof wm);
    const char *pf_end = (const char *)w + (size_t)nrows * w_stride;
    k2_prefetch_start(w, pf_end);
    for (int64_t t0 = 0; t0 < ntok; t0 += tile) {
        const int tt = (int)(ntok - t0 < tile ? ntok - t0 : tile);
        const quant_block_q8_K *at[K2_TILE];
        for (int t = 0; t < tt; t++) {
            at[t] = (const quant_block_q8_K *)((const char *)act + (size_t)(t0 + t) * act_stride);
            prep_nat_bsums(at[t], nb, prep + t * nb);
        }
        for (int64_t r0 = 0; r0 < nrows; r0 += K2_ROWS) {
            const int nr = (int)(nrows - r0 < K2_ROWS ? nrows - r0 : K2_ROWS);
            if (nr < K2_ROWS)
                k2_clear_tail(st, tt * nb, nr);
            for (int i = 0; i < nr; i++) {
                const quant_block_q2_K *x = (const quant_block_q2_K *)((const char *)w + (size_t)(r0 + i) * w_stride);
                for (int64_t b = 0; b < nb; b++) {
                    k2_prefetch((const char *)&x[b], 2, pf_end);
                    wd[b * K2_ROWS + i] = x[b].d;
                    wm[b * K2_ROWS + i] = x[b].dmin;
                    __m256i v[8];
                    k2_2bit_fields(x[b].qs, v);
                    const __m128i sc8 = _mm_loadu_si128((const __m128i *)x[b].scales);
                    const __m256i sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(sc8, _mm_set1_epi8(0x0f)));
                    const __m256i m16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc8, 4), _mm_set1_epi8(0x0f)));
                    for (int t = 0; t < tt; t++) {
                        const k2_prep_t *a = &prep[t * nb + b];
                        const __m128i isum = k2_fold4(k2_scaled16(v, a->q, sc16));
                        const __m128i imin = k2_fold4(_mm256_madd_epi16(m16, a->bs));
                        st[((size_t)t * nb + b) * K2_ROWS + i] = _mm256_set_m128i(imin, isum);
                    }
                }
            }
            const __m256i keep = k2_mask_rows(nr);
            for (int t = 0; t < tt; t++) {
                __m256 sumf = _mm256_setzero_ps();
                for (int64_t b = 0; b < nb; b++) {
                    __m256i isum, imin;
                    k2_tree8(&st[((size_t)t * nb + b) * K2_ROWS], &isum, &imin);
                    const __m256 ad = _mm256_set1_ps(at[t][b].d);
                    const __m256 d = _mm256_mul_ps(k2_f16x8(&wd[b * K2_ROWS]), ad);
                    const __m256 dmin = _mm256_mul_ps(k2_f16x8(&wm[b * K2_ROWS]), ad);
                    const __m256 t1 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(isum));
                    const __m256 t2 = _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(imin));
                    sumf = _mm256_add_ps(sumf, _mm256_sub_ps(t1, t2));
                }
                _mm256_maskstore_ps(out + (size_t)(t0 + t) * ldo + (size_t)r0, keep, sumf);
            }
        }
    }
}

/* Q3_K scales: 16 six-bit values - 32 as int16 (ggml's uint32 unpacking, equal to quant_q3_K_scales) */
static inline __m256i k2_q3_scales(const uint8_t *packed)
{
    const uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
    uint32_t a[3];
    memcpy(a, packed, 12);
    const uint32_t s2 = ((a[0] >> 4) & kmask2) | (((a[2] >> 4) & kmask1) << 4);
    const uint32_t s3 = ((a[1] >> 4) & kmask2) | (((a[2] >> 6) & kmask1) << 4);
    const uint32_t s0 = (a[0] & kmask2) | (((a[2] >> 0) & kmask1) << 4);
    const uint32_t s1 = (a[1] & kmask2) | (((a[2] >> 2) & kmask1) << 4);
    return _mm256_cvtepi8_epi16(_mm_sub_epi8(_mm_set_epi32((int)s3, (int)s2, (int)s1, (int)s0), _mm_set1_epi8(32)));
}

static inline __attribute__((always_inline)) void block_q3(const void *blkp, const k2_prep_t *prep, int64_t nb,
                                                            int tt, __m128i *sums)
{
    const quant_block_q3_K *x = blkp;
    __m256i v[8];
    k2_2bit_fields(x->qs, v);
    /* the high bit of element 32 i + l is bit i of hmask[l] */
    const __m256i hm = _mm256_loadu_si256((const __m256i *)x->hmask), one = _mm256_set1_epi8(1);
    for (int i = 0; i < 8; i++)
        v[i] = _mm256_or_si256(v[i], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hm, i), one), 2));
    const __m256i sc16 = k2_q3_scales(x->scales);
    for (int t = 0; t < tt; t++) {
        const k2_prep_t *a = &prep[(int64_t)t * nb];
        const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(sc16, a->bs), 2);
        sums[t] = k2_fold4(_mm256_sub_epi32(k2_scaled16(v, a->q, sc16), corr));
    }
}

static void matmul_q3_K_avx2(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                             const void *act, size_t act_stride, float *out, size_t ldo)
{
    matmul_one_sum(n, nrows, ntok, w, w_stride, act, act_stride, out, ldo, sizeof(quant_block_q3_K),
                   offsetof(quant_block_q3_K, d), 2, prep_q6, block_q3, 1.0f);
}

/* ---- lattice IQ types: IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M ------------------------------- *
 * As avx512_iq.h: grid entries gathered per 32 elements, signs applied, levels biased by +64 into bytes <= 126
 * (exact vpmaddubsw for any activation), per-16 odd scales, the bias returned as 64 * sum_s scale_s * sum(a over
 * s), the format's constant factor on the row's sum. IQ1 levels are 8 grid + delta sign (-9..9). */

enum { IQ_IQ2_XXS, IQ_IQ2_XS, IQ_IQ2_S, IQ_IQ3_XXS, IQ_IQ3_S, IQ_IQ1_S, IQ_IQ1_M };

/* IQ1 levels + 64 of 4 grid entries (32 elements): 8 g + (delta + 64); neg: 64-bit lanes of all ones where the
 * entry's delta is -1 (the grid bytes are -1/0/+1, shifted by 3 within their byte) */
static inline __m256i k2_iq1_levels(__m128i idx, __m256i neg)
{
    const __m256i g = _mm256_i32gather_epi64((const long long *)quant_iq1s_grid, idx, 8);
    const __m256i g8 = _mm256_and_si256(_mm256_slli_epi16(g, 3), _mm256_set1_epi8((char)0xf8));
    return _mm256_add_epi8(g8, _mm256_blendv_epi8(_mm256_set1_epi8(65), _mm256_set1_epi8(63), neg));
}

static inline __m256i k2_bias64(__m256i g, __m256i s)
{
    return _mm256_add_epi8(_mm256_sub_epi8(_mm256_xor_si256(g, s), s), _mm256_set1_epi8(64));
}

/* 32 explicit sign bits (element order) -> 0x00/0xff bytes */
static inline __m256i k2_sign_bytes(uint32_t bits)
{
    const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits),
                                              _mm256_setr_epi64x(0, 0x0101010101010101ll, 0x0202020202020202ll, 0x0303030303030303ll));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    return _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
}

/* levels + 64 of group g (32 elements) and the 16 per-16 scales of the block */
static inline __attribute__((always_inline)) void iq2_unpack(int kind, const char *blk, __m256i *u, int16_t *sc)
{
    const __m128i k127 = _mm_set1_epi32(127);
    for (int g = 0; g < 8; g++) {
        __m256i grid, sgn;
        int ls0, ls1;
        if (kind == IQ_IQ2_XXS || kind == IQ_IQ3_XXS) {
            uint32_t aux;
            memcpy(&aux, kind == IQ_IQ2_XXS ? blk + 2 + 8 * g + 4 : blk + 2 + 64 + 4 * g, 4);
            const __m128i si = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32((int)aux), _mm_setr_epi32(0, 7, 14, 21)), k127);
            sgn = _mm256_i32gather_epi64((const long long *)quant_ksigns64, si, 8);
            if (kind == IQ_IQ2_XXS) {
                uint32_t idx;
                memcpy(&idx, blk + 2 + 8 * g, 4);
                grid = _mm256_i32gather_epi64((const long long *)quant_iq2xxs_grid,
                                              _mm_cvtepu8_epi32(_mm_cvtsi32_si128((int)idx)), 8);
            } else {
                const __m256i gi = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(blk + 2 + 8 * g)));
                grid = _mm256_i32gather_epi32((const int *)quant_iq3xxs_grid, gi, 4);
            }
            ls0 = ls1 = (int)(2 * (aux >> 28) + 1);
        } else if (kind == IQ_IQ2_XS) {
            const quant_block_iq2_xs *x = (const quant_block_iq2_xs *)blk;
            const __m128i e = _mm_cvtepu16_epi32(_mm_loadl_epi64((const __m128i *)(x->qs + 4 * g)));
            grid = _mm256_i32gather_epi64((const long long *)quant_iq2xs_grid, _mm_and_si128(e, _mm_set1_epi32(511)), 8);
            sgn = _mm256_i32gather_epi64((const long long *)quant_ksigns64, _mm_srli_epi32(e, 9), 8);
            ls0 = 2 * (x->scales[g] & 0xf) + 1;
            ls1 = 2 * (x->scales[g] >> 4) + 1;
        } else if (kind == IQ_IQ2_S) {
            const quant_block_iq2_s *x = (const quant_block_iq2_s *)blk;
            uint32_t lo4, sb;
            memcpy(&lo4, x->qs + 4 * g, 4);
            memcpy(&sb, x->qs + 32 + 4 * g, 4);
            const __m128i hi = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32(x->qh[g]), _mm_setr_epi32(0, 2, 4, 6)),
                                             _mm_set1_epi32(3));
            const __m128i gi = _mm_or_si128(_mm_cvtepu8_epi32(_mm_cvtsi32_si128((int)lo4)), _mm_slli_epi32(hi, 8));
            grid = _mm256_i32gather_epi64((const long long *)quant_iq2s_grid, gi, 8);
            sgn = k2_sign_bytes(sb);
            ls0 = 2 * (x->scales[g] & 0xf) + 1;
            ls1 = 2 * (x->scales[g] >> 4) + 1;
        } else if (kind == IQ_IQ1_S) {
            /* entry l of group g: index qs[4 g + l] | ((qh[g] >> 3 l) & 7) << 8; scale and delta sign per group */
            const quant_block_iq1_s *x = (const quant_block_iq1_s *)blk;
            const int qh = x->qh[g];
            uint32_t lo4;
            memcpy(&lo4, x->qs + 4 * g, 4);
            const __m128i hi = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32(qh), _mm_setr_epi32(0, 3, 6, 9)), _mm_set1_epi32(7));
            const __m128i gi = _mm_or_si128(_mm_cvtepu8_epi32(_mm_cvtsi32_si128((int)lo4)), _mm_slli_epi32(hi, 8));
            u[g] = k2_iq1_levels(gi, _mm256_set1_epi8(qh & 0x8000 ? -1 : 0));
            ls0 = ls1 = 2 * ((qh >> 12) & 7) + 1;
            sc[2 * g] = (int16_t)ls0;
            sc[2 * g + 1] = (int16_t)ls1;
            continue;
        } else if (kind == IQ_IQ1_M) {
            /* entry l of group g: nibble l of qh[2 g] | qh[2 g + 1] << 8 holds 3 index bits and the delta sign
             * (bit 3); per 16 elements a 3-bit scale: bits 6 (g % 2) and + 3 of the uint16 g / 2 of scales */
            const quant_block_iq1_m *x = (const quant_block_iq1_m *)blk;
            const int q16 = x->qh[2 * g] | x->qh[2 * g + 1] << 8;
            const int sw = x->scales[2 * (g / 2)] | x->scales[2 * (g / 2) + 1] << 8;
            uint32_t lo4;
            memcpy(&lo4, x->qs + 4 * g, 4);
            const __m128i nib = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32(q16), _mm_setr_epi32(0, 4, 8, 12)),
                                              _mm_set1_epi32(15));
            const __m128i gi = _mm_or_si128(_mm_cvtepu8_epi32(_mm_cvtsi32_si128((int)lo4)),
                                            _mm_slli_epi32(_mm_and_si128(nib, _mm_set1_epi32(7)), 8));
            const __m256i neg = _mm256_cmpeq_epi64(_mm256_and_si256(_mm256_cvtepi32_epi64(nib), _mm256_set1_epi64x(8)),
                                                   _mm256_set1_epi64x(8));
            u[g] = k2_iq1_levels(gi, neg);
            ls0 = 2 * ((sw >> (6 * (g % 2))) & 7) + 1;
            ls1 = 2 * ((sw >> (6 * (g % 2) + 3)) & 7) + 1;
            sc[2 * g] = (int16_t)ls0;
            sc[2 * g + 1] = (int16_t)ls1;
            continue;
        } else {
            const quant_block_iq3_s *x = (const quant_block_iq3_s *)blk;
            const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(x->qh[g]),
                                                                  _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)),
                                                _mm256_set1_epi32(1));
            const __m256i gi = _mm256_or_si256(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(x->qs + 8 * g))),
                                               _mm256_slli_epi32(hi, 8));
            grid = _mm256_i32gather_epi32((const int *)quant_iq3s_grid, gi, 4);
            uint32_t sb;
            memcpy(&sb, x->signs + 4 * g, 4);
            sgn = k2_sign_bytes(sb);
            ls0 = ls1 = 2 * ((x->scales[g / 2] >> (4 * (g % 2))) & 0xf) + 1;
        }
        u[g] = k2_bias64(grid, sgn);
        sc[2 * g] = (int16_t)ls0;
        sc[2 * g + 1] = (int16_t)ls1;
    }
}

#define IQ2_BLOCK_FN(NAME, KIND)                                                                            \
    static inline __attribute__((always_inline)) void NAME(const void *blkp, const k2_prep_t *prep,          \
                                                           int64_t nb, int tt, __m128i *sums)              \
    {                                                                                                      \
        __m256i u[8];                                                                                      \
        int16_t sc[16];                                                                                    \
        iq2_unpack(KIND, blkp, u, sc);                                                                     \
        const __m256i sc16 = _mm256_loadu_si256((const __m256i *)sc);                                      \
        for (int t = 0; t < tt; t++) {                                                                     \
            const k2_prep_t *a = &prep[(int64_t)t * nb];                                                   \
            const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(sc16, a->bs), 6);                    \
            sums[t] = k2_fold4(_mm256_sub_epi32(k2_scaled16(u, a->q, sc16), corr));                        \
        }                                                                                                  \
    }
IQ2_BLOCK_FN(block_iq2_xxs, IQ_IQ2_XXS)
IQ2_BLOCK_FN(block_iq2_xs, IQ_IQ2_XS)
IQ2_BLOCK_FN(block_iq2_s, IQ_IQ2_S)
IQ2_BLOCK_FN(block_iq3_xxs, IQ_IQ3_XXS)
IQ2_BLOCK_FN(block_iq3_s, IQ_IQ3_S)
IQ2_BLOCK_FN(block_iq1_s, IQ_IQ1_S)
IQ2_BLOCK_FN(block_iq1_m, IQ_IQ1_M)
#undef IQ2_BLOCK_FN

#define IQ_KERNEL(T, BLOCK, FN, FACTOR)                                                                     \
    static void matmul_##T##_avx2(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,   \
                                  const void *act, size_t act_stride, float *out, size_t ldo)              \
    {                                                                                                      \
        matmul_one_sum(n, nrows, ntok, w, w_stride, act, act_stride, out, ldo, sizeof(BLOCK), 0, 2, prep_q6, \
                       FN, FACTOR);                                                                        \
    }
IQ_KERNEL(iq2_xxs, quant_block_iq2_xxs, block_iq2_xxs, 0.125f)
IQ_KERNEL(iq2_xs, quant_block_iq2_xs, block_iq2_xs, 0.125f)
IQ_KERNEL(iq2_s, quant_block_iq2_s, block_iq2_s, 0.125f)
IQ_KERNEL(iq3_xxs, quant_block_iq3_xxs, block_iq3_xxs, 0.25f)
IQ_KERNEL(iq3_s, quant_block_iq3_s, block_iq3_s, 1.0f)
IQ_KERNEL(iq1_s, quant_block_iq1_s, block_iq1_s, 0.125f)
#undef IQ_KERNEL

/* IQ1_M keeps its fp16 scale spread over its scales' top nibbles: K2_D_IQ1_M tells matmul_one_sum so */
static void matmul_iq1_m_avx2(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                              const void *act, size_t act_stride, float *out, size_t ldo)
{
    matmul_one_sum(n, nrows, ntok, w, w_stride, act, act_stride, out, ldo, sizeof(quant_block_iq1_m), K2_D_IQ1_M, 2,
                   prep_q6, block_iq1_m, 0.125f);
}

/* ---- 32-element blocks: Q8_0, Q4_0, Q5_0, IQ4_NL, MXFP4 (vs Q8_0), Q4_1, Q5_1 (vs Q8_1) ------------------ *
 * A block is one 32-byte vector of levels. Unsigned levels (Q4_1, Q5_1 as they are; Q4_0, Q5_0, MXFP4 biased by
 * 8, 16, 12) go through vpmaddubsw exactly for any activation, the bias returning as bias * sum(a); signed
 * Q8_0 and IQ4_NL levels as magnitudes with the activation's sign flipped (activations in [-127, 127]).
 * Per row, four blocks' sums fold into one 4-lane vector; 8 rows' vectors are transposed into one vector per
 * block (row i in lane i). Float stage as avx512_b32.h / core/quant/dot_ref.c. */

enum { B32_Q8_0, B32_Q4_0, B32_Q5_0, B32_IQ4_NL, B32_MXFP4, B32_Q4_1, B32_Q5_1 };

static inline size_t b32_block_bytes(int kind)
{
    switch (kind) {
    case B32_Q8_0: return sizeof(quant_block_q8_0);
    case B32_Q4_0: return sizeof(quant_block_q4_0);
    case B32_Q5_0: return sizeof(quant_block_q5_0);
    case B32_IQ4_NL: return sizeof(quant_block_iq4_nl);
    case B32_MXFP4: return sizeof(quant_block_mxfp4);
    case B32_Q4_1: return sizeof(quant_block_q4_1);
    default: return sizeof(quant_block_q5_1);
    }
}

static inline int b32_bias(int kind)
{
    return kind == B32_Q4_0 ? 8 : kind == B32_Q5_0 ? 16 : kind == B32_MXFP4 ? 12 : 0;
}

/* The block's 32 levels (unsigned + bias, or signed for Q8_0 / IQ4_NL), element order. */
static inline __m256i b32_levels(int kind, const char *x)
{
    if (kind == B32_Q8_0)
        return _mm256_loadu_si256((const __m256i *)(x + 2));
    size_t qs = kind == B32_MXFP4 ? 1 : kind == B32_Q4_1 ? 4 : kind == B32_Q5_0 ? 6 : kind == B32_Q5_1 ? 8 : 2;
    const __m128i b = _mm_loadu_si128((const __m128i *)(x + qs));
    const __m128i m4 = _mm_set1_epi8(0x0f);
    __m256i q = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), m4), _mm_and_si128(b, m4));
    if (kind == B32_IQ4_NL)
        return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)quant_kvalues_iq4nl)), q);
    if (kind == B32_MXFP4)
        return _mm256_shuffle_epi8(
            _mm256_broadcastsi128_si256(_mm_add_epi8(_mm_loadu_si128((const __m128i *)quant_kvalues_mxfp4), _mm_set1_epi8(12))), q);
    if (kind == B32_Q5_0 || kind == B32_Q5_1) {
        /* bit j of qh is the 5th bit of element j: spread the 32 bits to bytes */
        uint32_t qh;
        memcpy(&qh, x + (kind == B32_Q5_0 ? 2 : 4), 4);
        const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh),
                                                  _mm256_setr_epi64x(0, 0x0101010101010101ll, 0x0202020202020202ll, 0x0303030303030303ll));
        const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
        const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
        q = _mm256_or_si256(q, _mm256_and_si256(set, _mm256_set1_epi8(16)));
    }
    return q;
}

/* 8 int32 lanes summing to sum level * a (+ corr in lane 0) for one block */
static inline __m256i b32_dot(int kind, __m256i lev, __m256i a)
{
    const __m256i ones = _mm256_set1_epi16(1);
    if (kind == B32_Q8_0 || kind == B32_IQ4_NL)
        return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(lev, lev), _mm256_sign_epi8(a, lev)), ones);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(lev, a), ones);
}

#define B32_TILE 8

static inline __attribute__((always_inline)) void matmul_b32(int kind, int64_t n, int64_t nrows, int64_t ntok,
                                                             const void *w, size_t w_stride, const void *act,
                                                             size_t act_stride, float *out, size_t ldo)
{
    const int64_t nb = n / 32, ng = (nb + 3) / 4;
    const size_t bb = b32_block_bytes(kind);
    const int q81 = kind == B32_Q4_1 || kind == B32_Q5_1;
    const size_t ab = q81 ? sizeof(quant_block_q8_1) : sizeof(quant_block_q8_0), aq = q81 ? 4 : 2;
    const int bias = b32_bias(kind);
    const int64_t per_tok = 16 * nb + ng * K2_ROWS * 16;
    int64_t tile = K2_SCRATCH_BUDGET / per_tok;
    tile = tile < 1 ? 1 : tile > B32_TILE ? B32_TILE : tile;
    if (tile > ntok)
        tile = ntok;
    int32_t corr[tile * nb];
    float ad[tile * nb], as[tile * nb];
    __m128i st[tile * ng * K2_ROWS]; /* [token][group of 4 blocks][row]: the 4 blocks' sums */
    uint16_t wd[nb * K2_ROWS], wm[nb * K2_ROWS];
    memset(wd, 0, sizeof wd);
    memset(wm, 0, sizeof wm);
    const char *pf_end = (const char *)w + (size_t)nrows * w_stride;
    k2_prefetch_start(w, pf_end);
    for (int64_t t0 = 0; t0 < ntok; t0 += tile) {
        const int tt = (int)(ntok - t0 < tile ? ntok - t0 : tile);
        const char *at[B32_TILE];
        for (int t = 0; t < tt; t++) {
            at[t] = (const char *)act + (size_t)(t0 + t) * act_stride;
            for (int64_t b = 0; b < nb; b++) {
                const char *ablk = at[t] + (size_t)b * ab;
                int sum = 0;
                for (int k = 0; k < 32; k++)
                    sum += ((const int8_t *)ablk)[aq + (size_t)k];
                corr[t * nb + b] = -bias * sum;
                uint16_t h;
                memcpy(&h, ablk, 2);
                ad[t * nb + b] = _cvtsh_ss(h);
                if (q81) {
                    memcpy(&h, ablk + 2, 2);
                    as[t * nb + b] = _cvtsh_ss(h);
                }
            }
        }
        for (int64_t r0 = 0; r0 < nrows; r0 += K2_ROWS) {
            const int nr = (int)(nrows - r0 < K2_ROWS ? nrows - r0 : K2_ROWS);
            if (nr < K2_ROWS)
                for (int64_t v = 0; v < tt * ng; v++)
                    for (int i = nr; i < K2_ROWS; i++)
                        st[v * K2_ROWS + i] = _mm_setzero_si128();
            for (int i = 0; i < nr; i++) {
                const char *row = (const char *)w + (size_t)(r0 + i) * w_stride;
                for (int64_t j = 0; j < ng; j++) {
                    k2_prefetch(row + (size_t)(4 * j) * bb, (int)((4 * bb + 63) / 64), pf_end);
                    __m256i lev[4];
                    const int cnt = nb - 4 * j < 4 ? (int)(nb - 4 * j) : 4;
                    for (int g = 0; g < cnt; g++) {
                        const char *x = row + (size_t)(4 * j + g) * bb;
                        const int64_t b = 4 * j + g;
                        uint16_t d16;
                        if (kind == B32_MXFP4) {
                            d16 = (uint8_t)x[0];
                        } else {
                            memcpy(&d16, x, 2);
                            if (q81)
                                memcpy(&wm[b * K2_ROWS + i], x + 2, 2);
                        }
                        wd[b * K2_ROWS + i] = d16;
                        lev[g] = b32_levels(kind, x);
                    }
                    for (int t = 0; t < tt; t++) {
                        __m256i s[4];
                        for (int g = 0; g < 4; g++) {
                            if (g >= cnt) {
                                s[g] = _mm256_setzero_si256();
                                continue;
                            }
                            const int64_t b = 4 * j + g;
                            const __m256i a = _mm256_loadu_si256((const __m256i *)(at[t] + (size_t)b * ab + aq));
                            s[g] = _mm256_add_epi32(b32_dot(kind, lev[g], a),
                                                    _mm256_castsi128_si256(_mm_cvtsi32_si128(corr[t * nb + b])));
                        }
                        /* lanes b and b + 4 of h hold halves of block b's sum */
                        const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(s[0], s[1]), _mm256_hadd_epi32(s[2], s[3]));
                        st[((size_t)t * ng + j) * K2_ROWS + i] = k2_fold4(h);
                    }
                }
            }
            const __m256i keep = k2_mask_rows(nr);
            for (int t = 0; t < tt; t++) {
                __m256 sumf = _mm256_setzero_ps();
                for (int64_t j = 0; j < ng; j++) {
                    const __m128i *v = &st[((size_t)t * ng + j) * K2_ROWS];
                    /* 4x4 transposes of rows 0-3 and 4-7: blk[g] = block 4 j + g, lanes = rows */
                    __m128i lo[4], hi[4];
                    for (int half = 0; half < 2; half++) {
                        const __m128i *r = v + 4 * half;
                        const __m128i u0 = _mm_unpacklo_epi32(r[0], r[1]), u1 = _mm_unpacklo_epi32(r[2], r[3]);
                        const __m128i u2 = _mm_unpackhi_epi32(r[0], r[1]), u3 = _mm_unpackhi_epi32(r[2], r[3]);
                        __m128i *o = half ? hi : lo;
                        o[0] = _mm_unpacklo_epi64(u0, u1);
                        o[1] = _mm_unpackhi_epi64(u0, u1);
                        o[2] = _mm_unpacklo_epi64(u2, u3);
                        o[3] = _mm_unpackhi_epi64(u2, u3);
                    }
                    for (int g = 0; g < 4 && 4 * j + g < nb; g++) {
                        const int64_t b = 4 * j + g;
                        const __m256i isum = _mm256_set_m128i(hi[g], lo[g]);
                        const __m128i w16 = _mm_loadu_si128((const __m128i *)&wd[b * K2_ROWS]);
                        __m256 wf;
                        if (kind == B32_MXFP4) {
                            const __m256i e = _mm256_cvtepu16_epi32(w16);
                            const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
                            const __m256i tiny = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
                            const __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
                            wf = _mm256_castsi256_ps(_mm256_blendv_epi8(normal, tiny, small));
                        } else {
                            wf = _mm256_cvtph_ps(w16);
                        }
                        const __m256 d = _mm256_mul_ps(wf, _mm256_set1_ps(ad[t * nb + b]));
                        const __m256 tv = _mm256_mul_ps(d, _mm256_cvtepi32_ps(isum));
                        if (q81) {
                            const __m256 m = _mm256_mul_ps(k2_f16x8(&wm[b * K2_ROWS]), _mm256_set1_ps(as[t * nb + b]));
                            sumf = _mm256_add_ps(sumf, _mm256_add_ps(tv, m));
                        } else {
                            sumf = _mm256_add_ps(sumf, tv);
                        }
                    }
                }
                _mm256_maskstore_ps(out + (size_t)(t0 + t) * ldo + (size_t)r0, keep, sumf);
            }
        }
    }
}

#define B32_KERNEL(T, KIND)                                                                                 \
    static void matmul_##T##_avx2(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,   \
                                  const void *act, size_t act_stride, float *out, size_t ldo)              \
    {                                                                                                      \
        matmul_b32(KIND, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);                          \
    }
B32_KERNEL(q8_0, B32_Q8_0)
B32_KERNEL(q4_0, B32_Q4_0)
B32_KERNEL(q5_0, B32_Q5_0)
B32_KERNEL(iq4_nl, B32_IQ4_NL)
B32_KERNEL(mxfp4, B32_MXFP4)
B32_KERNEL(q4_1, B32_Q4_1)
B32_KERNEL(q5_1, B32_Q5_1)
#undef B32_KERNEL

/* ---- F32, F16, BF16 against float activations ------------------------------------------------------------ *
 * Contract 1 of core/quant/dot_ref.c: lanes acc[i % 32] (four 8-lane registers) updated with vfmadd (fmaf's
 * single rounding) in increasing i, the tail only in its lanes (blend keeps the others exact), then the pairwise
 * reduction for h = 16, 8, 4, 2, 1. */

enum { PF_F32, PF_F16, PF_BF16 };

static inline __m256 kf2_load(int kind, const void *w, int64_t i)
{
    if (kind == PF_F32)
        return _mm256_loadu_ps((const float *)w + i);
    const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + i));
    if (kind == PF_F16)
        return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static inline float kf2_reduce(const __m256 *a)
{
    const __m256 c0 = _mm256_add_ps(a[0], a[2]), c1 = _mm256_add_ps(a[1], a[3]); /* h = 16 */
    const __m256 d = _mm256_add_ps(c0, c1);                                       /* h = 8 */
    const __m128 e = _mm_add_ps(_mm256_castps256_ps128(d), _mm256_extractf128_ps(d, 1)); /* h = 4 */
    const __m128 f = _mm_add_ps(e, _mm_movehl_ps(e, e));                          /* h = 2 */
    return _mm_cvtss_f32(_mm_add_ss(f, _mm_movehdup_ps(f)));                      /* h = 1 */
}

#define KF2_ROWS 2

static inline __attribute__((always_inline)) void matmul_plain(int kind, int64_t n, int64_t nrows, int64_t ntok,
                                                               const void *w, size_t w_stride, const void *act,
                                                               size_t act_stride, float *out, size_t ldo)
{
    const int64_t n32 = n & ~(int64_t)31;
    const int r32 = (int)(n - n32);
    const size_t esz = kind == PF_F32 ? 4 : 2;
    for (int64_t r0 = 0; r0 < nrows; r0 += KF2_ROWS) {
        const int nr = (int)(nrows - r0 < KF2_ROWS ? nrows - r0 : KF2_ROWS);
        const char *wr[KF2_ROWS];
        for (int i = 0; i < KF2_ROWS; i++)
            wr[i] = (const char *)w + (size_t)(r0 + (i < nr ? i : 0)) * w_stride;
        for (int64_t t = 0; t < ntok; t++) {
            const float *x = (const float *)((const char *)act + (size_t)t * act_stride);
            __m256 a[KF2_ROWS][4];
            for (int i = 0; i < KF2_ROWS; i++)
                for (int q = 0; q < 4; q++)
                    a[i][q] = _mm256_setzero_ps();
            for (int64_t k = 0; k < n32; k += 32) {
                __m256 xv[4];
                for (int q = 0; q < 4; q++)
                    xv[q] = _mm256_loadu_ps(x + k + 8 * q);
                for (int i = 0; i < KF2_ROWS; i++) {
                    if (t == 0)
                        _mm_prefetch(wr[i] + (size_t)k * esz + 2048, _MM_HINT_T0);
                    for (int q = 0; q < 4; q++)
                        a[i][q] = _mm256_fmadd_ps(kf2_load(kind, wr[i], k + 8 * q), xv[q], a[i][q]);
                }
            }
            if (r32) {
                /* the tail through a zero-padded copy; only its lanes take the update */
                float xt[32] = {0}, wt[32] = {0};
                memcpy(xt, x + n32, (size_t)r32 * sizeof(float));
                for (int i = 0; i < KF2_ROWS; i++) {
                    uint16_t ht[32] = {0};
                    const void *src;
                    if (kind == PF_F32) {
                        memcpy(wt, (const float *)wr[i] + n32, (size_t)r32 * sizeof(float));
                        src = wt;
                    } else {
                        memcpy(ht, (const uint16_t *)wr[i] + n32, (size_t)r32 * sizeof(uint16_t));
                        src = ht;
                    }
                    for (int q = 0; q < 4 && 8 * q < r32; q++) {
                        const int left = r32 - 8 * q;
                        const __m256 m = _mm256_castsi256_ps(_mm256_cmpgt_epi32(
                            _mm256_set1_epi32(left), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
                        const __m256 upd = _mm256_fmadd_ps(kf2_load(kind, src, 8 * q), _mm256_loadu_ps(xt + 8 * q), a[i][q]);
                        a[i][q] = _mm256_blendv_ps(a[i][q], upd, m);
                    }
                }
            }
            for (int i = 0; i < nr; i++)
                out[(size_t)t * ldo + (size_t)(r0 + i)] = kf2_reduce(a[i]);
        }
    }
}

static void matmul_f32_avx2(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                            const void *act, size_t act_stride, float *out, size_t ldo)
{
    matmul_plain(PF_F32, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);
}

static void matmul_f16_avx2(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                            const void *act, size_t act_stride, float *out, size_t ldo)
{
    matmul_plain(PF_F16, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);
}

static void matmul_bf16_avx2(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                             const void *act, size_t act_stride, float *out, size_t ldo)
{
    matmul_plain(PF_BF16, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);
}

void kern_fill_avx2(kern_table_t *t)
{
    t->matmul[GUILD_TYPE_F32] = matmul_f32_avx2;
    t->matmul[GUILD_TYPE_F16] = matmul_f16_avx2;
    t->matmul[GUILD_TYPE_BF16] = matmul_bf16_avx2;
    t->matmul[GUILD_TYPE_Q8_0] = matmul_q8_0_avx2;
    t->matmul[GUILD_TYPE_Q4_0] = matmul_q4_0_avx2;
    t->matmul[GUILD_TYPE_Q5_0] = matmul_q5_0_avx2;
    t->matmul[GUILD_TYPE_IQ4_NL] = matmul_iq4_nl_avx2;
    t->matmul[GUILD_TYPE_MXFP4] = matmul_mxfp4_avx2;
    t->matmul[GUILD_TYPE_Q4_1] = matmul_q4_1_avx2;
    t->matmul[GUILD_TYPE_Q5_1] = matmul_q5_1_avx2;
    t->matmul[GUILD_TYPE_Q2_K] = matmul_q2_K_avx2;
    t->matmul[GUILD_TYPE_Q3_K] = matmul_q3_K_avx2;
    t->matmul[GUILD_TYPE_IQ2_XXS] = matmul_iq2_xxs_avx2;
    t->matmul[GUILD_TYPE_IQ2_XS] = matmul_iq2_xs_avx2;
    t->matmul[GUILD_TYPE_IQ2_S] = matmul_iq2_s_avx2;
    t->matmul[GUILD_TYPE_IQ3_XXS] = matmul_iq3_xxs_avx2;
    t->matmul[GUILD_TYPE_IQ3_S] = matmul_iq3_s_avx2;
    t->matmul[GUILD_TYPE_IQ1_S] = matmul_iq1_s_avx2;
    t->matmul[GUILD_TYPE_IQ1_M] = matmul_iq1_m_avx2;
    t->matmul[GUILD_TYPE_Q4_K] = matmul_q4_K_avx2;
    t->matmul[GUILD_TYPE_Q5_K] = matmul_q5_K_avx2;
    t->matmul[GUILD_TYPE_Q6_K] = matmul_q6_K_avx2;
    t->matmul[GUILD_TYPE_IQ4_XS] = matmul_iq4_xs_avx2;
}
#else
void kern_fill_avx2(kern_table_t *t)
{
    (void)t;
}
#endif
