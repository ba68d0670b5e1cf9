/* core/kern/x86/avx512_iq4xs.h — the AVX-512 IQ4_XS kernel against Q8_K: a template over the level's block
 * arithmetic. The including file (after avx512_kquants.h, whose prepared activations and tiling it shares)
 * defines
 *   KERN_NAME(iq4xs_w_t)                   a block's token-independent unpacked form
 *   KERN_NAME(iq4xs_unpack)(blk, &u)       fills it
 *   KERN_NAME(iq4xs_sum8)(&u, prep)        8 int32 lanes that sum to the block's isum for one token
 * so that each level keeps its own exact integer method (VNNI: biased levels with vpdpbusd; AVX-512BW:
 * magnitudes with the activation's sign flipped, vpmaddubsw). A level that defines KERN_IQ4XS_GROUP_BIAS leaves
 * a bias in its sums and takes it out per group of 16 rows; it also defines
 *   KERN_NAME(iq4xs_w_t).raw                 a uint64_t the unpack fills (the block's part of the bias)
 *   KERN_NAME(iq4xs_abias_t)                 a token's block part of the bias
 *   KERN_NAME(iq4xs_abias)(prep, &ab)        fills it from the prepared activations
 *   KERN_NAME(iq4xs_bias16)(raw, &ab)        the bias of 16 rows (row i in lane i) from their raw values
 *
 * IQ4_XS (dot_iq.c): isum = sum_{s<8} (scale6[s] - 32) * sum_{32 j} kvalues_iq4nl[code] * a;
 * float stage d = fp16(w.d) * a.d;  sumf = sumf + d * (float)isum (no final factor).
 * Sub-block s is the 16 bytes qs[16 s ..]: low nibbles elements 0-15, high nibbles 16-31. A 64-byte load
 * holds sub-blocks 4 l .. 4 l + 3, one per 128-bit lane. */

/* Activations in the order of the unpacked weights: q[2 l] = low halves of sub-blocks 4 l .. 4 l + 3 (16 int8
 * each), q[2 l + 1] the high halves; bs = the 8 sums of a over each sub-block (int16, computed from qs). */
static void KERN_NAME(prep_iq4xs)(const quant_block_q8_K *a, int64_t nb, KERN_NAME(kq_prep_t) *p)
{
    /* 16-byte pieces of qs: piece 2 s is elements 32 s .. 32 s + 15, piece 2 s + 1 the next 16 */
    const __m512i lo_idx = _mm512_set_epi64(13, 12, 9, 8, 5, 4, 1, 0);
    const __m512i hi_idx = _mm512_set_epi64(15, 14, 11, 10, 7, 6, 3, 2);
    for (int64_t b = 0; b < nb; b++) {
        for (int l = 0; l < 2; l++) {
            const __m512i x0 = _mm512_loadu_si512(a[b].qs + 128 * l);      /* sub-blocks 4l, 4l+1 */
            const __m512i x1 = _mm512_loadu_si512(a[b].qs + 128 * l + 64); /* sub-blocks 4l+2, 4l+3 */
            p[b].q[2 * l] = _mm512_permutex2var_epi64(x0, lo_idx, x1);
            p[b].q[2 * l + 1] = _mm512_permutex2var_epi64(x0, hi_idx, x1);
        }
        int16_t s[16] = {0};
        for (int sb = 0; sb < 8; sb++) {
            int sum = 0;
            for (int k = 0; k < 32; k++)
                sum += a[b].qs[32 * sb + k];
            s[sb] = (int16_t)sum;
        }
        p[b].bs = _mm256_loadu_si256((const __m256i *)s);
        p[b].d = a[b].d;
    }
}

/* One sum per block: blocks 2 j and 2 j + 1 share a sum vector (see matmul_q6_K). */
static void KERN_NAME(matmul_iq4_xs)(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                                     const void *act, size_t act_stride, float *out, size_t ldo)
{
    const int64_t nb = n / QUANT_QK_K, np = (nb + 1) / 2;
    const int tile = KERN_NAME(kq_tile)(nb, ntok);
    KERN_NAME(kq_prep_t) prep[tile * nb];
    __m512i st[tile * np * KQ_ROWS]; /* [token][block pair][row of the group] */
    uint16_t wd[nb * KQ_ROWS];       /* [block][row] */
    memset(wd, 0, sizeof wd);
    memset(st, 0, sizeof st);
#ifdef KERN_IQ4XS_GROUP_BIAS
    uint64_t raw[nb * KQ_ROWS];               /* [block][row] */
    KERN_NAME(iq4xs_abias_t) ab[tile * nb];   /* [token][block] */
    memset(raw, 0, sizeof raw);
#endif
    const char *pf_end = (const char *)w + (size_t)nrows * w_stride;
    kq_pf_t pf = kq_pf_start(w, pf_end);
    for (int64_t t0 = 0; t0 < ntok; t0 += tile) {
        const int tt = (int)(ntok - t0 < tile ? ntok - t0 : tile);
        const quant_block_q8_K *at[KQ_TILE];
        for (int t = 0; t < tt; t++) {
            at[t] = (const quant_block_q8_K *)((const char *)act + (size_t)(t0 + t) * act_stride);
            KERN_NAME(prep_iq4xs)(at[t], nb, prep + t * nb);
#ifdef KERN_IQ4XS_GROUP_BIAS
            for (int64_t b = 0; b < nb; b++)
                KERN_NAME(iq4xs_abias)(&prep[t * nb + b], &ab[t * nb + b]);
#endif
        }
        for (int64_t r0 = 0; r0 < nrows; r0 += KQ_ROWS) {
            const int nr = (int)(nrows - r0 < KQ_ROWS ? nrows - r0 : KQ_ROWS);
            if (nr < KQ_ROWS)
                KERN_NAME(kq_clear_tail)(st, tt * np, nr);
            /* One token: a loop of its own, without the token loop and its indexing (faster in cache). */
            for (int i = 0; i < nr && tt == 1; i++) {
                const quant_block_iq4_xs *x =
                    (const quant_block_iq4_xs *)((const char *)w + (size_t)(r0 + i) * w_stride);
                for (int64_t b = 0; b < nb; b++) {
                    kq_pf_advance(&pf, (const char *)&x[b]);
                    wd[b * KQ_ROWS + i] = x[b].d;
                    KERN_NAME(iq4xs_w_t) u;
                    KERN_NAME(iq4xs_unpack)(&x[b], &u);
#ifdef KERN_IQ4XS_GROUP_BIAS
                    raw[b * KQ_ROWS + i] = u.raw;
#endif
                    __m256i *half = (__m256i *)&st[(size_t)(b / 2) * KQ_ROWS + i] + (b & 1);
                    _mm256_storeu_si256(half, KERN_NAME(iq4xs_sum8)(&u, &prep[b]));
                }
            }
            for (int i = 0; i < nr && tt > 1; i++) {
                const quant_block_iq4_xs *x =
                    (const quant_block_iq4_xs *)((const char *)w + (size_t)(r0 + i) * w_stride);
                for (int64_t b = 0; b < nb; b++) {
                    kq_pf_advance(&pf, (const char *)&x[b]);
                    wd[b * KQ_ROWS + i] = x[b].d;
                    KERN_NAME(iq4xs_w_t) u;
                    KERN_NAME(iq4xs_unpack)(&x[b], &u);
#ifdef KERN_IQ4XS_GROUP_BIAS
                    raw[b * KQ_ROWS + i] = u.raw;
#endif
                    for (int t = 0; t < tt; t++) {
                        const __m256i y = KERN_NAME(iq4xs_sum8)(&u, &prep[t * nb + b]);
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
#ifdef KERN_IQ4XS_GROUP_BIAS
                        is[h] = _mm512_sub_epi32(is[h], KERN_NAME(iq4xs_bias16)(&raw[b * KQ_ROWS], &ab[t * nb + b]));
#endif
                        sumf = _mm512_add_ps(sumf, _mm512_mul_ps(d, _mm512_cvtepi32_ps(is[h])));
                    }
                }
                _mm512_mask_storeu_ps(out + (size_t)(t0 + t) * ldo + (size_t)r0, keep, sumf);
            }
        }
    }
}
