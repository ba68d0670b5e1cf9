/* core/kern/x86/avx512_float.h — AVX-512 kernels of the plain weight types (F32, F16, BF16) against float
 * activations, included by avx512.c only (no integer part: the VNNI level inherits them).
 *
 * Numerics (core/quant/dot_ref.c, contract 1): 32 lanes acc[i % 32] = fmaf(w[i], x[i], acc[i % 32]) in
 * increasing i, here two 16-lane registers updated with vfmadd (the same single rounding as fmaf); the tail
 * updates only lanes 0 .. n % 32 - 1 (masked, so the other lanes keep their exact value, signed zeros
 * included); then the pairwise reduction acc[j] = acc[j] + acc[j + h] for h = 16, 8, 4, 2, 1. */

enum { PF_F32, PF_F16, PF_BF16 };

static inline __m512 kf_load(int kind, const void *w, int64_t i, __mmask16 m)
{
    if (kind == PF_F32)
        return _mm512_maskz_loadu_ps(m, (const float *)w + i);
    const __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)w + i);
    if (kind == PF_F16)
        return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

static inline float kf_reduce(__m512 a, __m512 b)
{
    const __m512 c = _mm512_add_ps(a, b);                                                           /* h = 16 */
    const __m256 d = _mm256_add_ps(_mm512_castps512_ps256(c), _mm512_extractf32x8_ps(c, 1));        /* h = 8 */
    const __m128 e = _mm_add_ps(_mm256_castps256_ps128(d), _mm256_extractf128_ps(d, 1));            /* h = 4 */
    const __m128 f = _mm_add_ps(e, _mm_movehl_ps(e, e));                                            /* h = 2 */
    return _mm_cvtss_f32(_mm_add_ss(f, _mm_movehdup_ps(f)));                                        /* h = 1 */
}

#define KF_ROWS 4

static inline __attribute__((always_inline)) void matmul_plain_avx512(int kind, int64_t n, int64_t nrows,
                                                                      int64_t ntok, const void *w, size_t w_stride,
                                                                      const void *act, size_t act_stride,
                                                                      float *out, size_t ldo)
{
    const int64_t n32 = n & ~(int64_t)31;
    const int r32 = (int)(n - n32);
    const __mmask16 m_lo = (__mmask16)(r32 >= 16 ? 0xffff : (1u << r32) - 1);
    const __mmask16 m_hi = (__mmask16)(r32 > 16 ? (1u << (r32 - 16)) - 1 : 0);
    const size_t esz = kind == PF_F32 ? 4 : 2;
    for (int64_t r0 = 0; r0 < nrows; r0 += KF_ROWS) {
        const int nr = (int)(nrows - r0 < KF_ROWS ? nrows - r0 : KF_ROWS);
        const char *wr[KF_ROWS];
        for (int i = 0; i < KF_ROWS; i++)
            wr[i] = (const char *)w + (size_t)(r0 + (i < nr ? i : 0)) * w_stride;
        for (int64_t t = 0; t < ntok; t++) {
            const float *x = (const float *)((const char *)act + (size_t)t * act_stride);
            __m512 a[KF_ROWS], b[KF_ROWS];
            for (int i = 0; i < KF_ROWS; i++)
                a[i] = b[i] = _mm512_setzero_ps();
            for (int64_t k = 0; k < n32; k += 32) {
                const __m512 x0 = _mm512_loadu_ps(x + k), x1 = _mm512_loadu_ps(x + k + 16);
                for (int i = 0; i < KF_ROWS; i++) {
                    if (t == 0)
                        _mm_prefetch(wr[i] + (size_t)k * esz + 2048, _MM_HINT_T0);
                    a[i] = _mm512_fmadd_ps(kf_load(kind, wr[i], k, 0xffff), x0, a[i]);
                    b[i] = _mm512_fmadd_ps(kf_load(kind, wr[i], k + 16, 0xffff), x1, b[i]);
                }
            }
            if (r32) {
                const __m512 x0 = _mm512_maskz_loadu_ps(m_lo, x + n32), x1 = _mm512_maskz_loadu_ps(m_hi, x + n32 + 16);
                for (int i = 0; i < KF_ROWS; i++) {
                    a[i] = _mm512_mask3_fmadd_ps(kf_load(kind, wr[i], n32, m_lo), x0, a[i], m_lo);
                    b[i] = _mm512_mask3_fmadd_ps(kf_load(kind, wr[i], n32 + 16, m_hi), x1, b[i], m_hi);
                }
            }
            for (int i = 0; i < nr; i++)
                out[(size_t)t * ldo + (size_t)(r0 + i)] = kf_reduce(a[i], b[i]);
        }
    }
}

static void matmul_f32_avx512(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                              const void *act, size_t act_stride, float *out, size_t ldo)
{
    matmul_plain_avx512(PF_F32, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);
}

static void matmul_f16_avx512(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                              const void *act, size_t act_stride, float *out, size_t ldo)
{
    matmul_plain_avx512(PF_F16, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);
}

static void matmul_bf16_avx512(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                               const void *act, size_t act_stride, float *out, size_t ldo)
{
    matmul_plain_avx512(PF_BF16, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);
}
