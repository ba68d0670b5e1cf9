/* core/kern/x86/avx512_pack_b32.h — the packed kernels of the 32-element types Q4_0, IQ4_NL, MXFP4 and Q8_0
 * (core/kern/pack.h; record layouts in pack.c) against Q8_0 activations, for any token count.
 * Included once by avx512_vnni.c (KERN_NAME x_avx512vnni) after avx512_pack_drive.h (pkd_dpbusd_bcst,
 * PKD_TILE) and avx512_b32.h (e8m0_half).
 *
 * Row r of a group is lane r of every vector. Per record (the 16 rows' block b) and token, with a the token's
 * block b:
 *   isum = -bias * A + sum_g vpdpbusd(lev(chunk g), a[4 g ..])      (+ vpdpbusd(lev(high nibbles), a[16 + 4 g ..]))
 * where lev is the weight's level plus bias as an unsigned byte (Q4_0: the nibble, bias 8; IQ4_NL: kvalue + 128;
 * MXFP4: kvalue + 12; Q8_0: qs ^ 0x80, bias 128) and A = sum of a's 32 quants, so isum = sum level * a exactly
 * (|isum| <= 32 * 127 * 128). The bias term rides in the accumulator's start value. The float finish is the
 * reference's per block (quant_dot_*_ref): d = fp16(w.d) * fp16(a.d) (MXFP4: e8m0_half(w.e) * fp16(a.d));
 * sumf = sumf + d * (float)isum, lane-wise, blocks in order.
 *
 * A record is small (272-544 bytes), so the weight stream is prefetched by distance in bytes (PKB_AHEAD), not
 * in records: the next lines up to PKB_AHEAD bytes past the record being read, one record's worth per record. */

#ifndef GUILD_KERN_X86_AVX512_PACK_B32_ONCE
#define GUILD_KERN_X86_AVX512_PACK_B32_ONCE

enum { PKB_Q4_0, PKB_IQ4_NL, PKB_MXFP4, PKB_Q8_0 };

/* bytes ahead of the record being read that the prefetch covers: about what the 256-element kernels' two
 * records ahead are */
#define PKB_AHEAD 4096

/* One token's block: the bias term and the activation scale. */
typedef struct pkb_aux {
    int32_t bias; /* -bias * sum of the block's quants */
    float d;      /* fp16(a.d) */
} pkb_aux_t;

static inline __attribute__((always_inline)) size_t pkb_record(int kind)
{
    return kind == PKB_Q8_0 ? 16 * sizeof(quant_block_q8_0)
           : kind == PKB_MXFP4 ? 16 * sizeof(quant_block_mxfp4)
                               : 16 * sizeof(quant_block_q4_0);
}

static inline __attribute__((always_inline)) int pkb_bias(int kind)
{
    return kind == PKB_Q4_0 ? 8 : kind == PKB_MXFP4 ? 12 : 128;
}
#endif

/* One record (o) of `kind` for tt tokens: sumf[t] = sumf[t] + d * (float)isum. a[t]: token t's block of this
 * column, x[t] its pkb_aux. */
static inline __attribute__((always_inline)) void KERN_NAME(pkb_rec)(int kind, const char *o, int tt,
                                                                    const quant_block_q8_0 *const *a,
                                                                    const pkb_aux_t *const *x, __m512 *sumf)
{
    const int hdr = kind == PKB_MXFP4 ? 16 : 32;
    __m512i acc[PKD_TILE], acc2[PKD_TILE];
#pragma GCC unroll 4
    for (int t = 0; t < tt; t++) {
        acc[t] = _mm512_set1_epi32(x[t]->bias);
        acc2[t] = _mm512_setzero_si512();
    }
    if (kind == PKB_Q8_0) {
        const __m512i flip = _mm512_set1_epi8((char)0x80);
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            const __m512i lev = _mm512_xor_si512(_mm512_loadu_si512(o + hdr + 64 * g), flip);
#pragma GCC unroll 4
            for (int t = 0; t < tt; t++) { /* two chains per token: half the dependent latency */
                if (g & 1)
                    acc2[t] = pkd_dpbusd_bcst(acc2[t], lev, a[t]->qs + 4 * g);
                else
                    acc[t] = pkd_dpbusd_bcst(acc[t], lev, a[t]->qs + 4 * g);
            }
        }
    } else {
        const __m512i m4 = _mm512_set1_epi8(0x0f);
        __m512i tbl = _mm512_setzero_si512();
        if (kind == PKB_IQ4_NL)
            tbl = _mm512_broadcast_i32x4(
                _mm_xor_si128(_mm_loadu_si128((const __m128i *)quant_kvalues_iq4nl), _mm_set1_epi8((char)0x80)));
        else if (kind == PKB_MXFP4)
            tbl = _mm512_broadcast_i32x4(
                _mm_add_epi8(_mm_loadu_si128((const __m128i *)quant_kvalues_mxfp4), _mm_set1_epi8(12)));
#pragma GCC unroll 4
        for (int g = 0; g < 4; g++) {
            const __m512i q = _mm512_loadu_si512(o + hdr + 64 * g);
            __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
            if (kind != PKB_Q4_0) {
                lo = _mm512_shuffle_epi8(tbl, lo);
                hi = _mm512_shuffle_epi8(tbl, hi);
            }
#pragma GCC unroll 4
            for (int t = 0; t < tt; t++) {
                acc[t] = pkd_dpbusd_bcst(acc[t], lo, a[t]->qs + 4 * g);
                acc2[t] = pkd_dpbusd_bcst(acc2[t], hi, a[t]->qs + 16 + 4 * g);
            }
        }
    }
    const __m512 wd = kind == PKB_MXFP4 ? KERN_NAME(e8m0_half)(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)o)))
                                        : _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)o));
#pragma GCC unroll 4
    for (int t = 0; t < tt; t++) {
        const __m512 d = _mm512_mul_ps(wd, _mm512_set1_ps(x[t]->d));
        sumf[t] = _mm512_add_ps(sumf[t], _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_add_epi32(acc[t], acc2[t]))));
    }
}

/* The records of one group for a tile of tt tokens (a constant after inlining). pf: the next line to prefetch
 * (0: none, for the tiles after the first, which find the group in cache), never at or past end. */
static inline __attribute__((always_inline)) void KERN_NAME(pkb_group)(int kind, const char *grp, int64_t nb, int tt,
                                                                      const quant_block_q8_0 *const *at,
                                                                      const pkb_aux_t *aux, size_t aux_tok,
                                                                      uintptr_t *pf, uintptr_t end, float *out,
                                                                      size_t ldo)
{
    const size_t record = pkb_record(kind);
    __m512 sumf[PKD_TILE];
#pragma GCC unroll 4
    for (int t = 0; t < tt; t++)
        sumf[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const char *o = grp + (size_t)b * record;
        if (pf) {
            uintptr_t to = (uintptr_t)o + record + PKB_AHEAD;
            to = to < end ? to : end;
            for (; *pf < to; *pf += 64)
                _mm_prefetch((const char *)*pf, _MM_HINT_T1);
        }
        const quant_block_q8_0 *a[PKD_TILE];
        const pkb_aux_t *x[PKD_TILE];
#pragma GCC unroll 4
        for (int t = 0; t < tt; t++) {
            a[t] = at[t] + b;
            x[t] = aux + (size_t)t * aux_tok + b;
        }
        KERN_NAME(pkb_rec)(kind, o, tt, a, x, sumf);
    }
#pragma GCC unroll 4
    for (int t = 0; t < tt; t++)
        _mm512_storeu_ps(out + (size_t)t * ldo, sumf[t]);
}

/* kern_matmul_packed's contract (1 .. KERN_PACK_MAX_TOKENS tokens) for `kind`. */
static inline __attribute__((always_inline)) void KERN_NAME(pkb_matmul)(int kind, int64_t n, int64_t nrows,
                                                                       int64_t ntok, const void *w, size_t w_stride,
                                                                       const void *act, size_t act_stride,
                                                                       float *out, size_t ldo)
{
    const int64_t nb = n / 32;
    const int bias = pkb_bias(kind);
    const quant_block_q8_0 *at[KERN_PACK_MAX_TOKENS];
    const size_t aux_tok = (size_t)(nb > 0 ? nb : 1); /* an empty VLA is not allowed; n = 0 gives zeros */
    pkb_aux_t aux[(size_t)ntok * aux_tok];
    for (int64_t t = 0; t < ntok; t++) {
        at[t] = (const quant_block_q8_0 *)((const char *)act + (size_t)t * act_stride);
        for (int64_t b = 0; b < nb; b++) {
            int32_t sum = 0;
            for (int i = 0; i < 32; i++)
                sum += at[t][b].qs[i];
            aux[(size_t)t * aux_tok + b] = (pkb_aux_t){-bias * sum, quant_f16_to_f32(at[t][b].d)};
        }
    }
    const uintptr_t end = (uintptr_t)w + (size_t)nrows * w_stride;
    uintptr_t pf = (uintptr_t)w & ~(uintptr_t)63; /* a call starts a new stream: its first lines now */
    for (int64_t r0 = 0; r0 < nrows; r0 += KERN_PACK_ROWS) {
        const char *grp = (const char *)w + (size_t)r0 * w_stride;
        for (int64_t t0 = 0; t0 < ntok; t0 += PKD_TILE) {
            const int tt = (int)(ntok - t0 < PKD_TILE ? ntok - t0 : PKD_TILE);
            uintptr_t *p = t0 == 0 ? &pf : NULL;
            const pkb_aux_t *ax = aux + (size_t)t0 * aux_tok;
            float *o = out + (size_t)t0 * ldo + (size_t)r0;
            switch (tt) {
            case 1: KERN_NAME(pkb_group)(kind, grp, nb, 1, at + t0, ax, aux_tok, p, end, o, ldo); break;
            case 2: KERN_NAME(pkb_group)(kind, grp, nb, 2, at + t0, ax, aux_tok, p, end, o, ldo); break;
            case 3: KERN_NAME(pkb_group)(kind, grp, nb, 3, at + t0, ax, aux_tok, p, end, o, ldo); break;
            default: KERN_NAME(pkb_group)(kind, grp, nb, 4, at + t0, ax, aux_tok, p, end, o, ldo); break;
            }
        }
    }
}

/* Any token count, KERN_PACK_MAX_TOKENS at a time (table.h's packed_any_tokens): each pass reads the rows again,
 * and still computes several times faster than unpacking them for the plain 32-element kernel, whose tiles of
 * tokens are small at these widths. */
static inline __attribute__((always_inline)) void KERN_NAME(pkb_tokens)(int kind, int64_t n, int64_t nrows,
                                                                       int64_t ntok, const void *w, size_t w_stride,
                                                                       const void *act, size_t act_stride,
                                                                       float *out, size_t ldo)
{
    for (int64_t t0 = 0; t0 < ntok; t0 += KERN_PACK_MAX_TOKENS)
        KERN_NAME(pkb_matmul)(kind, n, nrows, ntok - t0 < KERN_PACK_MAX_TOKENS ? ntok - t0 : KERN_PACK_MAX_TOKENS, w,
                              w_stride, (const char *)act + (size_t)t0 * act_stride, act_stride,
                              out + (size_t)t0 * ldo, ldo);
}

static void KERN_NAME(matmul_q4_0_packed)(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                                          const void *act, size_t act_stride, float *out, size_t ldo)
{
    KERN_NAME(pkb_tokens)(PKB_Q4_0, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);
}

static void KERN_NAME(matmul_iq4_nl_packed)(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                                            const void *act, size_t act_stride, float *out, size_t ldo)
{
    KERN_NAME(pkb_tokens)(PKB_IQ4_NL, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);
}

static void KERN_NAME(matmul_mxfp4_packed)(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                                           const void *act, size_t act_stride, float *out, size_t ldo)
{
    KERN_NAME(pkb_tokens)(PKB_MXFP4, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);
}

static void KERN_NAME(matmul_q8_0_packed)(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                                          const void *act, size_t act_stride, float *out, size_t ldo)
{
    KERN_NAME(pkb_tokens)(PKB_Q8_0, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);
}
