/* core/kern/x86/avx512_b32.h — AVX-512 kernels of the 32-element block types: Q8_0, Q4_0, Q5_0, IQ4_NL, MXFP4
 * against Q8_0 activations, Q4_1, Q5_1 against Q8_1. A template, included by avx512.c and avx512_vnni.c after
 * avx512_kquants.h (for KQ_ROWS, KQ_PF, kq_pf_t), which define
 *   KERN_NAME(x)                  the level's name for x
 *   KERN_DPBUSD(acc, u, a)        acc + sums of 4 products of unsigned bytes u (<= 127) and signed bytes a
 *   KERN_SIGNED_DOT(acc, w, a)    the same for signed weight bytes w, computed as sum (w + BIAS) a
 *   KERN_SIGNED_BIAS              that BIAS (VNNI: 128, exact for any activation; AVX-512BW: 0, magnitudes
 *                                 and flipped signs, exact for activations in [-127, 127])
 *
 * Numerics (core/quant/dot_ref.c): per block isum = sum level * a exactly (int32); a level biased to unsigned
 * (level + bias) gives sum (level + bias) a, and the bias comes back out exactly as bias * sum(a). Float stage
 * per block, lane-wise over 16 rows, blocks added in order:
 *   Q8_0, Q4_0, Q5_0, IQ4_NL:  d = fp16(w.d) * fp16(a.d);       sumf = sumf + d * (float)isum
 *   MXFP4:                     d = e8m0_half(w.e) * fp16(a.d);  sumf = sumf + d * (float)isum
 *   Q4_1, Q5_1:                d = fp16(w.d) * fp16(a.d);  m = fp16(w.m) * fp16(a.s);
 *                              t = d * (float)isum;  sumf = sumf + (t + m)
 * Four blocks share a row's sum vector (4 lanes each) and are reduced for 16 rows at once (k512_tree16x4). */

enum { B32_Q8_0, B32_Q4_0, B32_Q5_0, B32_IQ4_NL, B32_MXFP4, B32_Q4_1, B32_Q5_1 };

/* 16 rows' sum vectors (4 blocks x 4 lanes each) -> 4 vectors, one per block, row i in lane i. */
static inline void KERN_NAME(tree16x4)(const __m512i *st, __m512i *out)
{
    __m512i u[8], v[4];
    for (int i = 0; i < 8; i++)
        u[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(st[2 * i], st[2 * i + 1]),
                                _mm512_unpackhi_epi32(st[2 * i], st[2 * i + 1]));
    /* chunk g, lane l of v[j]: block g of row 4 j + l */
    for (int j = 0; j < 4; j++)
        v[j] = _mm512_add_epi32(_mm512_unpacklo_epi64(u[2 * j], u[2 * j + 1]),
                                _mm512_unpackhi_epi64(u[2 * j], u[2 * j + 1]));
    const __m512i t0 = _mm512_shuffle_i64x2(v[0], v[1], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512i t1 = _mm512_shuffle_i64x2(v[0], v[1], _MM_SHUFFLE(3, 2, 3, 2));
    const __m512i t2 = _mm512_shuffle_i64x2(v[2], v[3], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512i t3 = _mm512_shuffle_i64x2(v[2], v[3], _MM_SHUFFLE(3, 2, 3, 2));
    out[0] = _mm512_shuffle_i64x2(t0, t2, _MM_SHUFFLE(2, 0, 2, 0));
    out[1] = _mm512_shuffle_i64x2(t0, t2, _MM_SHUFFLE(3, 1, 3, 1));
    out[2] = _mm512_shuffle_i64x2(t1, t3, _MM_SHUFFLE(2, 0, 2, 0));
    out[3] = _mm512_shuffle_i64x2(t1, t3, _MM_SHUFFLE(3, 1, 3, 1));
}

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

/* The bias added to the levels so that they are unsigned bytes; signed kinds use KERN_SIGNED_BIAS. */
static inline int b32_bias(int kind)
{
    switch (kind) {
    case B32_Q4_0: return 8;
    case B32_Q5_0: return 16;
    case B32_MXFP4: return 12;
    case B32_Q4_1:
    case B32_Q5_1: return 0;
    default: return KERN_SIGNED_BIAS;
    }
}

static inline int b32_signed(int kind)
{
    return kind == B32_Q8_0 || kind == B32_IQ4_NL;
}

/* The 64 levels of blocks x[0] and, when cnt == 2, x[1] (else zeros), in element order: unsigned (level + bias)
 * bytes, or the signed levels for the signed kinds. */
static inline __m512i KERN_NAME(b32_levels)(int kind, const char *x, int cnt)
{
    const size_t bb = b32_block_bytes(kind);
    if (kind == B32_Q8_0) {
        const __m256i lo = _mm256_loadu_si256((const __m256i *)(x + 2));
        const __m256i hi = cnt == 2 ? _mm256_loadu_si256((const __m256i *)(x + bb + 2)) : _mm256_setzero_si256();
        return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    }
    size_t qs = 2; /* offset of the 16 nibble bytes */
    if (kind == B32_MXFP4)
        qs = 1;
    else if (kind == B32_Q4_1)
        qs = 4;
    else if (kind == B32_Q5_0)
        qs = 6;
    else if (kind == B32_Q5_1)
        qs = 8;
    const __m128i b0 = _mm_loadu_si128((const __m128i *)(x + qs));
    const __m128i b1 = cnt == 2 ? _mm_loadu_si128((const __m128i *)(x + bb + qs)) : _mm_setzero_si128();
    /* chunks [b0, b0, b1, b1]; low nibbles of the first copy, high of the second: elements 0-15, 16-31 */
    const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_broadcastsi128_si256(b0)),
                                         _mm256_broadcastsi128_si256(b1), 1);
    const __m512i shifts = _mm512_set_epi64(0x0004000400040004ll, 0x0004000400040004ll, 0, 0,
                                            0x0004000400040004ll, 0x0004000400040004ll, 0, 0);
    __m512i q = _mm512_and_si512(_mm512_srlv_epi16(z, shifts), _mm512_set1_epi8(0x0f));
    if (kind == B32_IQ4_NL)
        return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)quant_kvalues_iq4nl)), q);
    if (kind == B32_MXFP4)
        return _mm512_shuffle_epi8(
            _mm512_broadcast_i32x4(_mm_add_epi8(_mm_loadu_si128((const __m128i *)quant_kvalues_mxfp4), _mm_set1_epi8(12))),
            q);
    if (kind == B32_Q5_0 || kind == B32_Q5_1) {
        const size_t qh = kind == B32_Q5_0 ? 2 : 4;
        uint32_t h0, h1 = 0;
        memcpy(&h0, x + qh, 4);
        if (cnt == 2)
            memcpy(&h1, x + bb + qh, 4);
        q = _mm512_mask_add_epi8(q, (__mmask64)h0 | (__mmask64)h1 << 32, q, _mm512_set1_epi8(16));
    }
    return q;
}

static inline __m512i KERN_NAME(b32_dot)(int kind, __m512i acc, __m512i lev, __m512i a)
{
    return b32_signed(kind) ? KERN_SIGNED_DOT(acc, lev, a) : KERN_DPBUSD(acc, lev, a);
}

/* 2^(e - 128) for E8M0 exponents in int32 lanes, as quant_e8m0_to_f32_half. */
static inline __m512 KERN_NAME(e8m0_half)(__m512i e)
{
    const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    const __m512i tiny = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
    const __mmask16 small = _mm512_cmplt_epi32_mask(e, _mm512_set1_epi32(2));
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(small, normal, tiny));
}

#define B32_TILE 8
#define B32_SCRATCH_BUDGET (96 * 1024)

static inline __attribute__((always_inline)) void
KERN_NAME(matmul_b32)(int kind, int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                      const void *act, size_t act_stride, float *out, size_t ldo)
{
    const int64_t nb = n / 32, n2 = (nb + 1) / 2, ng = (nb + 3) / 4;
    const size_t bb = b32_block_bytes(kind);
    const int q81 = kind == B32_Q4_1 || kind == B32_Q5_1; /* activations are Q8_1 */
    const size_t ab = q81 ? sizeof(quant_block_q8_1) : sizeof(quant_block_q8_0), aq = q81 ? 4 : 2;
    const int bias = b32_bias(kind);
    const int64_t per_tok = 2 * (2 * n2 + 1) * 64 + 8 * nb + ng * KQ_ROWS * 64;
    int64_t tile = B32_SCRATCH_BUDGET / per_tok;
    tile = tile < 1 ? 1 : tile > B32_TILE ? B32_TILE : tile;
    if (tile > ntok)
        tile = ntok;
    /* per token: activation pairs of blocks, the bias terms (lanes 0 and 8), scales (fp16 -> float) */
    __m512i qv[tile * (n2 + 1)], cv[tile * (n2 + 1)];
    float ad[tile * nb], as[tile * nb];
    __m512i st[tile * ng * KQ_ROWS]; /* [token][group of 4 blocks][row] */
    uint16_t wd[nb * KQ_ROWS], wm[nb * KQ_ROWS];
    memset(wd, 0, sizeof wd);
    memset(wm, 0, sizeof wm);
    const char *pf_end = (const char *)w + (size_t)nrows * w_stride;
    kq_pf_t pf = kq_pf_start(w, pf_end);
    for (int64_t t0 = 0; t0 < ntok; t0 += tile) {
        const int tt = (int)(ntok - t0 < tile ? ntok - t0 : tile);
        for (int t = 0; t < tt; t++) {
            const char *a = (const char *)act + (size_t)(t0 + t) * act_stride;
            for (int64_t p = 0; p <= n2; p++) {
                __m512i q = _mm512_setzero_si512(), c = _mm512_setzero_si512();
                for (int h = 0; h < 2; h++) {
                    const int64_t b = 2 * p + h;
                    if (b >= nb)
                        break;
                    const int8_t *qs = (const int8_t *)(a + (size_t)b * ab + aq);
                    int sum = 0;
                    for (int k = 0; k < 32; k++)
                        sum += qs[k];
                    const __m256i q32 = _mm256_loadu_si256((const __m256i *)qs);
                    q = h ? _mm512_inserti64x4(q, q32, 1) : _mm512_castsi256_si512(q32);
                    c = _mm512_mask_set1_epi32(c, (__mmask16)(1u << (8 * h)), -bias * sum);
                    uint16_t d16, s16;
                    memcpy(&d16, a + (size_t)b * ab, 2);
                    ad[t * nb + b] = k512_f16(d16);
                    if (q81) {
                        memcpy(&s16, a + (size_t)b * ab + 2, 2);
                        as[t * nb + b] = k512_f16(s16);
                    }
                }
                qv[t * (n2 + 1) + p] = q;
                cv[t * (n2 + 1) + p] = c;
            }
        }
        for (int64_t r0 = 0; r0 < nrows; r0 += KQ_ROWS) {
            const int nr = (int)(nrows - r0 < KQ_ROWS ? nrows - r0 : KQ_ROWS);
            if (nr < KQ_ROWS)
                KERN_NAME(kq_clear_tail)(st, tt * ng, nr);
            for (int i = 0; i < nr; i++) {
                const char *row = (const char *)w + (size_t)(r0 + i) * w_stride;
                for (int64_t j = 0; j < ng; j++) {
                    const int64_t b0 = 4 * j;
                    const char *x = row + (size_t)b0 * bb;
                    kq_pf_advance(&pf, x);
                    /* the blocks' scales, read with the blocks (a separate pass over the row would run ahead of
                     * the prefetches and stall on every line) */
                    for (int64_t b = b0; b < b0 + 4 && b < nb; b++) {
                        const char *xb = row + (size_t)b * bb;
                        uint16_t d16;
                        if (kind == B32_MXFP4) {
                            d16 = (uint8_t)xb[0];
                        } else {
                            memcpy(&d16, xb, 2);
                            if (q81)
                                memcpy(&wm[b * KQ_ROWS + i], xb + 2, 2);
                        }
                        wd[b * KQ_ROWS + i] = d16;
                    }
                    const int cnt_a = nb - b0 >= 2 ? 2 : 1, cnt_b = nb - b0 - 2 >= 2 ? 2 : (int)(nb - b0 - 2);
                    const __m512i la = KERN_NAME(b32_levels)(kind, x, cnt_a);
                    const __m512i lb = cnt_b > 0 ? KERN_NAME(b32_levels)(kind, x + 2 * bb, cnt_b) : _mm512_setzero_si512();
                    for (int t = 0; t < tt; t++) {
                        const __m512i *q = &qv[t * (n2 + 1) + 2 * j], *c = &cv[t * (n2 + 1) + 2 * j];
                        const __m512i sa = KERN_NAME(b32_dot)(kind, c[0], la, q[0]);
                        const __m512i sb = cnt_b > 0 ? KERN_NAME(b32_dot)(kind, c[1], lb, q[1]) : _mm512_setzero_si512();
                        /* [block b0 | b0 + 1 | b0 + 2 | b0 + 3], 4 lanes each */
                        st[((size_t)t * ng + j) * KQ_ROWS + i] =
                            _mm512_add_epi32(_mm512_shuffle_i64x2(sa, sb, _MM_SHUFFLE(2, 0, 2, 0)),
                                             _mm512_shuffle_i64x2(sa, sb, _MM_SHUFFLE(3, 1, 3, 1)));
                    }
                }
            }
            const __mmask16 keep = (__mmask16)((1u << nr) - 1);
            for (int t = 0; t < tt; t++) {
                __m512 sumf = _mm512_setzero_ps();
                for (int64_t j = 0; j < ng; j++) {
                    __m512i is[4];
                    KERN_NAME(tree16x4)(&st[((size_t)t * ng + j) * KQ_ROWS], is);
                    for (int g = 0; g < 4 && 4 * j + g < nb; g++) {
                        const int64_t b = 4 * j + g;
                        const __m256i w16 = _mm256_loadu_si256((const __m256i *)&wd[b * KQ_ROWS]);
                        const __m512 wf = kind == B32_MXFP4 ? KERN_NAME(e8m0_half)(_mm512_cvtepu16_epi32(w16))
                                                            : _mm512_cvtph_ps(w16);
                        const __m512 d = _mm512_mul_ps(wf, _mm512_set1_ps(ad[t * nb + b]));
                        const __m512 tv = _mm512_mul_ps(d, _mm512_cvtepi32_ps(is[g]));
                        if (q81) {
                            const __m512 m = _mm512_mul_ps(
                                _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)&wm[b * KQ_ROWS])),
                                _mm512_set1_ps(as[t * nb + b]));
                            sumf = _mm512_add_ps(sumf, _mm512_add_ps(tv, m));
                        } else {
                            sumf = _mm512_add_ps(sumf, tv);
                        }
                    }
                }
                _mm512_mask_storeu_ps(out + (size_t)(t0 + t) * ldo + (size_t)r0, keep, sumf);
            }
        }
    }
}

#define B32_KERNEL(T, KIND)                                                                                 \
    static void KERN_NAME(matmul_##T)(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride, \
                                      const void *act, size_t act_stride, float *out, size_t ldo)          \
    {                                                                                                      \
        KERN_NAME(matmul_b32)(KIND, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);               \
    }
B32_KERNEL(q8_0, B32_Q8_0)
B32_KERNEL(q4_0, B32_Q4_0)
B32_KERNEL(q5_0, B32_Q5_0)
B32_KERNEL(iq4_nl, B32_IQ4_NL)
B32_KERNEL(mxfp4, B32_MXFP4)
B32_KERNEL(q4_1, B32_Q4_1)
B32_KERNEL(q5_1, B32_Q5_1)
#undef B32_KERNEL

static void KERN_NAME(fill_b32)(kern_table_t *t)
{
    t->matmul[GUILD_TYPE_Q8_0] = KERN_NAME(matmul_q8_0);
    t->matmul[GUILD_TYPE_Q4_0] = KERN_NAME(matmul_q4_0);
    t->matmul[GUILD_TYPE_Q5_0] = KERN_NAME(matmul_q5_0);
    t->matmul[GUILD_TYPE_IQ4_NL] = KERN_NAME(matmul_iq4_nl);
    t->matmul[GUILD_TYPE_MXFP4] = KERN_NAME(matmul_mxfp4);
    t->matmul[GUILD_TYPE_Q4_1] = KERN_NAME(matmul_q4_1);
    t->matmul[GUILD_TYPE_Q5_1] = KERN_NAME(matmul_q5_1);
}
