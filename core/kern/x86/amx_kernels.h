/* core/kern/x86/amx_kernels.h — the AMX-INT8 kernels: Q8_0, Q4_0, Q5_0, IQ4_NL, MXFP4 against Q8_0; Q4_1, Q5_1
 * against Q8_1; Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS against Q8_K. A template, included by amx.c (the tile
 * instructions) and amx_emu.c (the C model of amx_tile.h), after their #pragma GCC target (AVX-512 F/BW/VL/DQ
 * + VNNI, F16C, BMI2), which define
 *   AMX_NAME(x)            the instantiation's name for x
 *   AMX_CONFIG(cfg)        LDTILECFG of an amx_tilecfg_t
 *   AMX_RELEASE()          TILERELEASE
 *   AMX_ZERO(t)            TILEZERO
 *   AMX_LOAD(t, p, s)      TILELOADD of tile t from p, row stride s bytes
 *   AMX_STORE(t, p, s)     TILESTORED
 *   AMX_DPBSSD(c, a, b)    TDPBSSD: c += a . b, int8 x int8 -> int32
 * with t, c, a, b literal tile numbers (the intrinsics paste them into the instruction).
 *
 * Orientation: tokens are the tiles' rows (M), weight rows their columns (N), so that A, a token tile's
 * activations, is loaded straight from the activation rows (stride act_stride) and C's row for a token holds
 * 16 weight rows in its 16 int32 lanes: the order of `out` and of the AVX-512 kernels' float stage (rows in
 * lanes, the activation scale broadcast). Only the weights are laid out: per 16 rows, the 4-byte groups of
 * consecutive elements of each row side by side (B[k / 4][4 r + k % 4] = w[r][k]), by a 16 x 16 dword
 * transposition of the packed bytes followed by the unpacking, which keeps every 4-element group in its lane
 * (every format here packs 4 consecutive elements' bits in 4 consecutive bytes, or one byte's same bits).
 * Packed rows (core/kern/pack.h; the 256-element types): a record holds those 4-byte groups of its 16 rows
 * in row lanes already, 64-byte chunks, and its header fields 16 rows at a time, so their layout is the
 * unpacking alone. The weight source is a constant of each kernel (matmul_sb's `packed`, amx_sbsrc_t), folded
 * in at compile time as the type is: everything past the B tiles' preparation is the plain kernels' code.
 *
 * Numerics (core/quant/dot_ref.c): every integer sum is exact (int8 x int8 products, any activation byte), the
 * float stage is the reference's, lane-wise.
 *  32-element blocks: signed levels (q - 8, q5 - 16, kvalues, q8; Q4_1/Q5_1 the unsigned q) in the B tile, one
 *        K = 32 product per block: C = the block's isum exactly (separate products keep blocks apart).
 *        d = fp16(w.d) * fp16(a.d) (MXFP4: e8m0_half(w.e) * fp16(a.d));  sumf = sumf + d * (float)isum;
 *        Q4_1/Q5_1: m = fp16(w.m) * fp16(a.s);  t = d * (float)isum;  sumf = sumf + (t + m).
 *  256-element blocks: the integer sub-block scale is folded into the weights: w' = level * scale, an integer
 *        with |w'| <= 4096 (Q2_K 3 * 15, Q3_K 4 * 32, Q4_K 15 * 63, Q5_K 31 * 63, Q6_K 32 * 128, IQ4_XS
 *        127 * 32), split as w' = 128 H + L with L = w' & 127 in 0..127 and H = w' >> 7 (floor) in -32..32,
 *        both int8. Two products over the whole block (K = 64 each, four 64-element groups) give
 *        C_H = sum a H and C_L = sum a L, and
 *          isum = sum_s scale_s * sum_{j in s} level_j * a_j = sum_j w'_j a_j = 128 C_H + C_L   (exact int32:
 *          |isum| <= 256 * 4096 * 128 = 2^27).
 *        So a block costs 8 full-K tile products and no per-sub-block work on the vector units.
 *        Q2_K: imin = sum_{s<16} m_s * bsums[s];  Q4_K, Q5_K: imin = sum_{s<8} m_s * (bsums[2s] + bsums[2s+1]);
 *          both by vpdpwssd (pairs of int16 mins and sums);
 *          d = fp16(w.d) * a.d;  dmin = fp16(w.dmin) * a.d;  sumf = sumf + (d * (float)isum - dmin * (float)imin).
 *        Q3_K, Q6_K, IQ4_XS: d = fp16(w.d) * a.d;  sumf = sumf + d * (float)isum.
 *        w' is formed with vpmaddubsw from unsigned levels (Q3_K q2 + 4 hbit, Q6_K q6, IQ4_XS kvalue + 128), the
 *        bias taken back out exactly: w' = u * scale - bias * scale.
 *
 * Work order: tokens in groups of AMX_TG (their activation scales prepared once), the row split into chunks of
 * blocks whose laid-out weights (16 rows) fit in L1 and serve every token tile of the group; tiles of 16 tokens
 * go in pairs that share the B tiles. Sums run across chunks in `out` itself (a float stored and loaded back is
 * the same float), starting from 0.0f as the reference does.
 */

#define AMX_TG 256        /* tokens per group */
#define AMX_B32_CHUNK 16  /* 32-element blocks per chunk: 8 KiB of B tiles */
#define AMX_SB_CHUNK 2    /* 256-element blocks per chunk: 16 KiB of B tiles */
#define AMX_SB_SLOTS 4    /* slots of amx_sbw_t: AMX_SB_CHUNK blocks, or matmul_sb_big's row groups of one block */

/* tiles */
#define AMX_A0 0 /* activations, tokens 0-15 of a pair */
#define AMX_A1 1 /* tokens 16-31 */
#define AMX_B0 2 /* weights (H for the 256-element types) */
#define AMX_B1 3 /* L */
#define AMX_C0 4 /* A0 . B0 */
#define AMX_C1 5 /* A0 . B1 (Q8_0: A1 . B0) */
#define AMX_C2 6 /* A1 . B0 */
#define AMX_C3 7 /* A1 . B1 */

/* The configuration for a pair of token tiles of mt0 and mt1 (0: none) tokens; K = kbytes per product. */
static void amx_cfg_fill(amx_tilecfg_t *cfg, int mt0, int mt1, int kbytes)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->palette = 1;
    cfg->rows[AMX_A0] = (uint8_t)mt0;
    cfg->colsb[AMX_A0] = (uint16_t)kbytes;
    cfg->rows[AMX_B0] = (uint8_t)(kbytes / 4);
    cfg->colsb[AMX_B0] = 64;
    cfg->rows[AMX_C0] = (uint8_t)mt0;
    cfg->colsb[AMX_C0] = 64;
    if (kbytes == 32) { /* Q8_0: A0, A1, B0, C0 = A0 . B0, C1 = A1 . B0 */
        if (mt1) {
            cfg->rows[AMX_A1] = (uint8_t)mt1;
            cfg->colsb[AMX_A1] = (uint16_t)kbytes;
            cfg->rows[AMX_C1] = (uint8_t)mt1;
            cfg->colsb[AMX_C1] = 64;
        }
        return;
    }
    cfg->rows[AMX_B1] = (uint8_t)(kbytes / 4);
    cfg->colsb[AMX_B1] = 64;
    cfg->rows[AMX_C1] = (uint8_t)mt0;
    cfg->colsb[AMX_C1] = 64;
    if (mt1) {
        cfg->rows[AMX_A1] = (uint8_t)mt1;
        cfg->colsb[AMX_A1] = (uint16_t)kbytes;
        cfg->rows[AMX_C2] = (uint8_t)mt1;
        cfg->colsb[AMX_C2] = 64;
        cfg->rows[AMX_C3] = (uint8_t)mt1;
        cfg->colsb[AMX_C3] = 64;
    }
}

/* Exact fp16 -> fp32 (F16C), as quant_f16_to_f32 (the AVX-512 files' k512_f16). */
static inline float amx_f16(uint16_t h)
{
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

/* 16 x 16 dword transposition: out[j] lane r = in[r] lane j. */
static inline void amx_transpose16(const __m512i *in, __m512i *out)
{
    __m512i t[16], u[16];
    for (int i = 0; i < 8; i++) {
        /* per 128-bit lane: [r0 d0, r1 d0, r0 d1, r1 d1] and [.. d2 .., .. d3 ..] of rows 2i, 2i+1 */
        t[2 * i] = _mm512_unpacklo_epi32(in[2 * i], in[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(in[2 * i], in[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        /* u[4i + k], 128-bit lane L: rows 4i..4i+3, dword 4L + k */
        u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int k = 0; k < 4; k++) {
        /* out[4L + k] = lane L of u[k], u[4 + k], u[8 + k], u[12 + k] */
        const __m512i s0 = _mm512_shuffle_i32x4(u[k], u[4 + k], 0x44);
        const __m512i s1 = _mm512_shuffle_i32x4(u[k], u[4 + k], 0xee);
        const __m512i s2 = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], 0x44);
        const __m512i s3 = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], 0xee);
        out[k] = _mm512_shuffle_i32x4(s0, s2, 0x88);
        out[4 + k] = _mm512_shuffle_i32x4(s0, s2, 0xdd);
        out[8 + k] = _mm512_shuffle_i32x4(s1, s3, 0x88);
        out[12 + k] = _mm512_shuffle_i32x4(s1, s3, 0xdd);
    }
}

/* 64 bytes at blk[r] + off for each row (zeros for rows without a block), transposed. */
static inline void amx_rows64_t(const char *const *blk, size_t off, __m512i *out)
{
    __m512i in[16];
    for (int r = 0; r < 16; r++)
        in[r] = blk[r] ? _mm512_loadu_si512(blk[r] + off) : _mm512_setzero_si512();
    amx_transpose16(in, out);
}

/* The same for 32 bytes (out[0..7] meaningful, out[8..15] zero). */
static inline void amx_rows32_t(const char *const *blk, size_t off, __m512i *out)
{
    __m512i in[16];
    for (int r = 0; r < 16; r++)
        in[r] = blk[r] ? _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(blk[r] + off)))
                       : _mm512_setzero_si512();
    amx_transpose16(in, out);
}

/* Prefetches (into L2) the weight bytes the next layout will read: the same chunk (bytes [off, off + len) of
 * each unit) of the `step` units after units u0 .. u0 + step - 1, or after the last units the next chunk of the
 * first ones. Units are `stride` bytes apart and unit_bytes long: plain rows (16 a step), or packed groups (one
 * a step: 16 rows' records, contiguous). The layouts read 16 rows a chunk at a time, a pattern of short strided
 * pieces the hardware prefetchers do not follow; meanwhile the tiles work on the current rows for every token
 * of the group. */
static inline void amx_prefetch_next(const void *w, size_t stride, int64_t nunits, int64_t u0, int64_t step,
                                     int64_t off, int64_t len, int64_t unit_bytes)
{
    int64_t un = u0 + step;
    if (un >= nunits) {
        un = 0;
        off += len;
        if (off >= unit_bytes)
            return;
        len = unit_bytes - off < len ? unit_bytes - off : len;
    }
    const int64_t uend = un + step < nunits ? un + step : nunits;
    for (int64_t u = un; u < uend; u++) {
        /* addresses as integers: nothing is formed past the rows */
        const uintptr_t p = (uintptr_t)w + (uintptr_t)u * stride + (uintptr_t)off;
        for (uintptr_t l = p & ~(uintptr_t)63; l < p + (uintptr_t)len; l += 64)
            _mm_prefetch((const char *)l, _MM_HINT_T1);
    }
}

/* ---- 32-element blocks: Q8_0, Q4_0, Q5_0, IQ4_NL, MXFP4 against Q8_0; Q4_1, Q5_1 against Q8_1 ------------- */

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

/* Offset of the 16 nibble bytes (of the 32 quants for Q8_0). */
static inline size_t b32_qs(int kind)
{
    switch (kind) {
    case B32_Q8_0: return offsetof(quant_block_q8_0, qs);
    case B32_Q4_0: return offsetof(quant_block_q4_0, qs);
    case B32_Q5_0: return offsetof(quant_block_q5_0, qs);
    case B32_IQ4_NL: return offsetof(quant_block_iq4_nl, qs);
    case B32_MXFP4: return offsetof(quant_block_mxfp4, qs);
    case B32_Q4_1: return offsetof(quant_block_q4_1, qs);
    default: return offsetof(quant_block_q5_1, qs);
    }
}

/* Activations are Q8_1, and the float stage adds the min term. */
static inline int b32_q81(int kind)
{
    return kind == B32_Q4_1 || kind == B32_Q5_1;
}

typedef struct amx_b32w {
    int8_t b[AMX_B32_CHUNK][8][64]; /* [block][B row][16 rows x 4 elements]: the K = 32 B tile of each block */
    __m512 d[AMX_B32_CHUNK];        /* [block]: the weight scale of the 16 rows (fp16 d; MXFP4 e8m0_half(e)) */
    __m512 m[AMX_B32_CHUNK];        /* [block]: Q4_1/Q5_1 fp16(w.m) */
} amx_b32w_t;

/* Q5_0/Q5_1: the 5th bits of elements 4 j + i, i < 4 (hi: 16 + 4 j + i) from the row lanes of their blocks' qh
 * words, as a byte mask over a transposed level vector. */
static inline __mmask64 amx_q5_bits(__m512i qh, int j, int hi)
{
    /* the qh byte holding the 4 bits, copied to the 4 bytes of its dword (vpshufb indexes within 128 bits) */
    const __m512i idx = _mm512_add_epi8(_mm512_set4_epi32(0x0c0c0c0c, 0x08080808, 0x04040404, 0),
                                        _mm512_set1_epi8((char)(2 * hi + j / 2)));
    const __m512i rep = _mm512_shuffle_epi8(qh, idx);
    return _mm512_test_epi8_mask(rep, _mm512_set1_epi32((int)(0x08040201u << (4 * (j % 2)))));
}

/* Lays out blocks c0 .. c0 + cn - 1 of 16 rows (row r at w0 + r * w_stride, rows nr.. absent): signed levels,
 * B row j of a block = elements 4 j .. 4 j + 3. */
static inline __attribute__((always_inline)) void amx_prep_b32(int kind, const char *w0, size_t w_stride, int nr,
                                                               int64_t c0, int cn, amx_b32w_t *p)
{
    const size_t bb = b32_block_bytes(kind), qs = b32_qs(kind);
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    for (int b = 0; b < cn; b++) {
        uint16_t d16[16] = {0}, m16[16] = {0};
        float df[16] = {0};
        for (int r = 0; r < nr; r++) {
            const char *x = w0 + (size_t)r * w_stride + (size_t)(c0 + b) * bb;
            if (kind == B32_MXFP4)
                df[r] = quant_e8m0_to_f32_half((uint8_t)x[0]);
            else
                memcpy(&d16[r], x, 2);
            if (b32_q81(kind))
                memcpy(&m16[r], x + 2, 2);
        }
        p->d[b] = kind == B32_MXFP4 ? _mm512_loadu_ps(df) : _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)d16));
        if (b32_q81(kind))
            p->m[b] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)m16));
    }
    if (kind == B32_Q8_0) {
        /* two blocks per row: qs of block b in the low half, block b + 1 in the high one */
        for (int b = 0; b < cn; b += 2) {
            __m512i in[16], out[16];
            for (int r = 0; r < 16; r++) {
                in[r] = _mm512_setzero_si512();
                if (r >= nr)
                    continue;
                const char *x = w0 + (size_t)r * w_stride + (size_t)(c0 + b) * bb + qs;
                in[r] = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)x));
                if (b + 1 < cn)
                    in[r] = _mm512_inserti64x4(in[r], _mm256_loadu_si256((const __m256i *)(x + bb)), 1);
            }
            amx_transpose16(in, out);
            for (int j = 0; j < 16 && b + j / 8 < cn; j++)
                _mm512_store_si512(p->b[b + j / 8][j % 8], out[j]);
        }
        return;
    }
    __m512i table = _mm512_setzero_si512();
    if (kind == B32_IQ4_NL)
        table = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)quant_kvalues_iq4nl));
    else if (kind == B32_MXFP4)
        table = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)quant_kvalues_mxfp4));
    /* four blocks per row: the 16 nibble bytes of block b + q in 128-bit lane q; byte j of qs holds element j
     * (low nibble) and j + 16 (high) */
    for (int b = 0; b < cn; b += 4) {
        __m512i in[16], hin[16], x[16], h[16];
        for (int r = 0; r < 16; r++) {
            __m128i part[4] = {_mm_setzero_si128(), _mm_setzero_si128(), _mm_setzero_si128(), _mm_setzero_si128()};
            uint32_t qh[4] = {0};
            if (r < nr) {
                const char *x0 = w0 + (size_t)r * w_stride + (size_t)(c0 + b) * bb;
                for (int q = 0; q < 4 && b + q < cn; q++) {
                    part[q] = _mm_loadu_si128((const __m128i *)(x0 + (size_t)q * bb + qs));
                    if (kind == B32_Q5_0 || kind == B32_Q5_1)
                        memcpy(&qh[q], x0 + (size_t)q * bb + (kind == B32_Q5_0 ? offsetof(quant_block_q5_0, qh)
                                                                               : offsetof(quant_block_q5_1, qh)), 4);
                }
            }
            in[r] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(part[1], part[0])),
                                       _mm256_set_m128i(part[3], part[2]), 1);
            hin[r] = _mm512_zextsi128_si512(_mm_loadu_si128((const __m128i *)qh));
        }
        if (kind == B32_Q5_0 || kind == B32_Q5_1)
            amx_transpose16(hin, h); /* h[q]: qh of block b + q per row lane */
        amx_transpose16(in, x);    /* x[4 q + j]: bytes 4 j .. 4 j + 3 of block b + q's qs */
        for (int q = 0; q < 4 && b + q < cn; q++)
            for (int j = 0; j < 4; j++) {
                __m512i lo = _mm512_and_si512(x[4 * q + j], m4);
                __m512i hi = _mm512_and_si512(_mm512_srli_epi16(x[4 * q + j], 4), m4);
                switch (kind) {
                case B32_Q4_0:
                    lo = _mm512_sub_epi8(lo, _mm512_set1_epi8(8));
                    hi = _mm512_sub_epi8(hi, _mm512_set1_epi8(8));
                    break;
                case B32_IQ4_NL:
                case B32_MXFP4:
                    lo = _mm512_shuffle_epi8(table, lo);
                    hi = _mm512_shuffle_epi8(table, hi);
                    break;
                case B32_Q5_0:
                case B32_Q5_1: {
                    const __m512i sixteen = _mm512_set1_epi8(16);
                    lo = _mm512_mask_add_epi8(lo, amx_q5_bits(h[q], j, 0), lo, sixteen);
                    hi = _mm512_mask_add_epi8(hi, amx_q5_bits(h[q], j, 1), hi, sixteen);
                    if (kind == B32_Q5_0) {
                        lo = _mm512_sub_epi8(lo, sixteen);
                        hi = _mm512_sub_epi8(hi, sixteen);
                    }
                    break;
                }
                default: /* Q4_1: the nibbles themselves */
                    break;
                }
                _mm512_store_si512(p->b[b + q][j], lo);
                _mm512_store_si512(p->b[b + q][4 + j], hi);
            }
    }
}

static inline __attribute__((always_inline)) void AMX_NAME(matmul_b32)(int kind, int64_t n, int64_t nrows,
                                                                        int64_t ntok, const void *w,
                                                                        size_t w_stride, const void *act,
                                                                        size_t act_stride, float *out, size_t ldo)
{
    const int64_t nb = n / 32;
    const size_t bb = b32_block_bytes(kind);
    const int q81 = b32_q81(kind);
    const size_t ab = q81 ? sizeof(quant_block_q8_1) : sizeof(quant_block_q8_0);
    const size_t aqs = q81 ? offsetof(quant_block_q8_1, qs) : offsetof(quant_block_q8_0, qs);
    amx_b32w_t pw;
    float ad[AMX_TG][AMX_B32_CHUNK]; /* [token of the group][block of the chunk]: fp16(a.d) */
    float as[AMX_TG][AMX_B32_CHUNK]; /* Q8_1: fp16(a.s) */
    int32_t cbuf[2][2][16][16] __attribute__((aligned(64))); /* [block & 1][token tile][token][row]: isum */
    __m512 acc[32];                                           /* [token of the pair]: sumf, rows in lanes */
    amx_tilecfg_t cfg;
    int cfg_mt0 = -1, cfg_mt1 = -1;
    for (int64_t tg0 = 0; tg0 < ntok; tg0 += AMX_TG) {
        const int tgn = (int)(ntok - tg0 < AMX_TG ? ntok - tg0 : AMX_TG);
        for (int64_t c0 = 0; c0 < nb; c0 += AMX_B32_CHUNK) {
            const int cn = (int)(nb - c0 < AMX_B32_CHUNK ? nb - c0 : AMX_B32_CHUNK);
            for (int t = 0; t < tgn; t++) {
                const char *a = (const char *)act + (size_t)(tg0 + t) * act_stride + (size_t)c0 * ab;
                for (int b = 0; b < cn; b++) {
                    uint16_t h;
                    memcpy(&h, a + (size_t)b * ab, 2);
                    ad[t][b] = amx_f16(h);
                    if (q81) {
                        memcpy(&h, a + (size_t)b * ab + 2, 2);
                        as[t][b] = amx_f16(h);
                    }
                }
            }
            for (int64_t r0 = 0; r0 < nrows; r0 += 16) {
                const int nr = (int)(nrows - r0 < 16 ? nrows - r0 : 16);
                const __mmask16 keep = (__mmask16)((1u << nr) - 1);
                amx_prefetch_next(w, w_stride, nrows, r0, 16, c0 * (int64_t)bb, cn * (int64_t)bb,
                                  nb * (int64_t)bb);
                amx_prep_b32(kind, (const char *)w + (size_t)r0 * w_stride, w_stride, nr, c0, cn, &pw);
                for (int tp = 0; tp < tgn; tp += 32) {
                    const int mt0 = tgn - tp < 16 ? tgn - tp : 16;
                    const int mt1 = tgn - tp - 16 <= 0 ? 0 : tgn - tp - 16 < 16 ? tgn - tp - 16 : 16;
                    if (mt0 != cfg_mt0 || mt1 != cfg_mt1) {
                        amx_cfg_fill(&cfg, mt0, mt1, 32);
                        AMX_CONFIG(&cfg);
                        cfg_mt0 = mt0;
                        cfg_mt1 = mt1;
                    }
                    float *o = out + (size_t)(tg0 + tp) * ldo + (size_t)r0;
                    for (int t = 0; t < mt0 + mt1; t++)
                        acc[t] = c0 ? _mm512_maskz_loadu_ps(keep, o + (size_t)t * ldo) : _mm512_setzero_ps();
                    const char *a0 = (const char *)act + (size_t)(tg0 + tp) * act_stride + (size_t)c0 * ab + aqs;
                    /* the float stage runs one block behind the tile products, so that the tile unit works
                     * on block b while the vector units finish block b - 1 */
                    for (int bt = 0; bt <= cn; bt++) {
                        if (bt < cn) {
                            const char *a = a0 + (size_t)bt * ab;
                            AMX_LOAD(AMX_B0, pw.b[bt], 64);
                            AMX_LOAD(AMX_A0, a, act_stride);
                            AMX_ZERO(AMX_C0);
                            AMX_DPBSSD(AMX_C0, AMX_A0, AMX_B0);
                            AMX_STORE(AMX_C0, cbuf[bt & 1][0], 64);
                            if (mt1) {
                                AMX_LOAD(AMX_A1, a + 16 * act_stride, act_stride);
                                AMX_ZERO(AMX_C1);
                                AMX_DPBSSD(AMX_C1, AMX_A1, AMX_B0);
                                AMX_STORE(AMX_C1, cbuf[bt & 1][1], 64);
                            }
                        }
                        if (bt == 0)
                            continue;
                        const int b = bt - 1;
                        for (int t = 0; t < mt0 + mt1; t++) {
                            const __m512i isum = _mm512_load_si512(cbuf[b & 1][t >> 4][t & 15]);
                            const __m512 d = _mm512_mul_ps(pw.d[b], _mm512_set1_ps(ad[tp + t][b]));
                            const __m512 tv = _mm512_mul_ps(d, _mm512_cvtepi32_ps(isum));
                            if (q81) {
                                const __m512 m = _mm512_mul_ps(pw.m[b], _mm512_set1_ps(as[tp + t][b]));
                                acc[t] = _mm512_add_ps(acc[t], _mm512_add_ps(tv, m));
                            } else {
                                acc[t] = _mm512_add_ps(acc[t], tv);
                            }
                        }
                    }
                    for (int t = 0; t < mt0 + mt1; t++)
                        _mm512_mask_storeu_ps(o + (size_t)t * ldo, keep, acc[t]);
                }
            }
        }
    }
    if (cfg_mt0 >= 0)
        AMX_RELEASE();
}

/* ---- 256-element blocks: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS ------------------------------------------- */

enum { SB_Q2_K, SB_Q3_K, SB_Q4_K, SB_Q5_K, SB_Q6_K, SB_IQ4_XS };

static inline size_t sb_block_bytes(int kind)
{
    switch (kind) {
    case SB_Q2_K: return sizeof(quant_block_q2_K);
    case SB_Q3_K: return sizeof(quant_block_q3_K);
    case SB_Q4_K: return sizeof(quant_block_q4_K);
    case SB_Q5_K: return sizeof(quant_block_q5_K);
    case SB_Q6_K: return sizeof(quant_block_q6_K);
    default: return sizeof(quant_block_iq4_xs);
    }
}

/* The types with a min term (imin, dmin). */
static inline int sb_has_mins(int kind)
{
    return kind == SB_Q2_K || kind == SB_Q4_K || kind == SB_Q5_K;
}

typedef struct amx_sbw {
    int8_t b[AMX_SB_SLOTS][4][2][16][64]; /* [slot][64-element group][H, L][B row][16 rows x 4 elements] */
    __m512 d[AMX_SB_SLOTS], dmin[AMX_SB_SLOTS]; /* [slot]: fp16(w.d), fp16(w.dmin) of the 16 rows */
    __m512i mins[AMX_SB_SLOTS][8]; /* [slot][j]: mins m_2j | m_2j+1 << 16 per row lane (Q4_K/Q5_K: j < 4) */
} amx_sbw_t;

/* One sub-block's scale, per row lane, in the forms vpmaddubsw takes: bytes [s, 0, s, 0] (even elements),
 * [0, s, 0, s] (odd), and the bias to take back out (bias * s in both int16 halves). */
typedef struct amx_scale {
    __m512i even, odd, corr;
} amx_scale_t;

/* The scale in byte `byte` (0..3) of each row lane of v (a signed byte), for a type whose levels are biased by
 * 2^bias_shift (0: none). vpshufb indices are relative to the 128-bit lane: dword d's bytes start at 4 d. */
static inline amx_scale_t amx_scale(__m512i v, int byte, int bias_shift)
{
    const __m512i base = _mm512_set4_epi32(0x0c0c0c0c, 0x08080808, 0x04040404, 0);
    const __m512i ie = _mm512_or_si512(_mm512_add_epi8(base, _mm512_set1_epi32(byte * 0x00010001)),
                                       _mm512_set1_epi32((int)0x80008000u));
    const __m512i io = _mm512_or_si512(_mm512_add_epi8(base, _mm512_set1_epi32(byte * 0x01000100)),
                                       _mm512_set1_epi32(0x00800080));
    amx_scale_t s;
    s.even = _mm512_shuffle_epi8(v, ie);
    s.odd = _mm512_shuffle_epi8(v, io);
    /* odd holds s << 8 in each int16: an arithmetic shift gives bias * s */
    s.corr = bias_shift ? _mm512_srai_epi16(s.odd, 8 - bias_shift) : _mm512_setzero_si512();
    return s;
}

/* Bytes 2 h and 2 h + 1 of each row lane of v (unsigned) as the two int16 halves of the lane: a pair of mins
 * for vpdpwssd. */
static inline __m512i amx_pairs(__m512i v, int h)
{
    const __m512i base = _mm512_set4_epi32(0x0c0c0c0c, 0x08080808, 0x04040404, 0);
    const __m512i idx = _mm512_or_si512(_mm512_add_epi8(base, _mm512_set1_epi32((2 * h) | (2 * h + 1) << 16)),
                                        _mm512_set1_epi32((int)0x80008000u));
    return _mm512_shuffle_epi8(v, idx);
}

/* 64 levels (row r's 4 consecutive elements in dword r; unsigned, biased by 2^bias_shift when has_bias) times
 * their sub-block's scale, split into the H and L rows of the B tiles: w' = 128 H + L. */
static inline void amx_split_store(__m512i lev, const amx_scale_t *s, int has_bias, int8_t *dh, int8_t *dl)
{
    __m512i we = _mm512_maddubs_epi16(lev, s->even), wo = _mm512_maddubs_epi16(lev, s->odd);
    if (has_bias) {
        we = _mm512_sub_epi16(we, s->corr);
        wo = _mm512_sub_epi16(wo, s->corr);
    }
    /* even elements are the low bytes of we's words, odd ones the low bytes of wo's: shifted into place */
    const __mmask64 odd = 0xaaaaaaaaaaaaaaaaull;
    const __m512i h = _mm512_mask_blend_epi8(odd, _mm512_srli_epi16(we, 7), _mm512_slli_epi16(wo, 1));
    const __m512i l = _mm512_and_si512(_mm512_mask_blend_epi8(odd, we, _mm512_slli_epi16(wo, 8)),
                                       _mm512_set1_epi8(0x7f));
    _mm512_store_si512(dh, h);
    _mm512_store_si512(dl, l);
}

/* IQ4_XS block at p: the 8 six-bit scales minus 32 as int8 in the low 8 bytes (the AVX-512 files'
 * k512_iq4xs_scales). */
static inline __m128i amx_iq4xs_scales(const char *p)
{
    uint32_t lo;
    uint16_t hi;
    memcpy(&lo, p + offsetof(quant_block_iq4_xs, scales_l), 4);
    memcpy(&hi, p + offsetof(quant_block_iq4_xs, scales_h), 2);
    const uint64_t ls = _pdep_u64(lo, 0x0f0f0f0f0f0f0f0full) | _pdep_u64(hi, 0x3030303030303030ull);
    return _mm_sub_epi8(_mm_cvtsi64_si128((long long)ls), _mm_set1_epi8(32));
}

/* Q3_K packed scales (12 bytes at p): the 16 six-bit values minus 32 as int8 (the AVX-512 files'
 * k512_q3_scales: ggml's uint32 unpacking, equal to quant_q3_K_scales). */
static inline __m128i amx_q3_scales(const char *p)
{
    const uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
    uint32_t a[3];
    memcpy(a, p, 12);
    const uint32_t s2 = ((a[0] >> 4) & kmask2) | (((a[2] >> 4) & kmask1) << 4);
    const uint32_t s3 = ((a[1] >> 4) & kmask2) | (((a[2] >> 6) & kmask1) << 4);
    const uint32_t s0 = (a[0] & kmask2) | (((a[2] >> 0) & kmask1) << 4);
    const uint32_t s1 = (a[1] & kmask2) | (((a[2] >> 2) & kmask1) << 4);
    return _mm_sub_epi8(_mm_set_epi32((int)s3, (int)s2, (int)s1, (int)s0), _mm_set1_epi8(32));
}

/* Where the weights of 16 rows come from: plain rows (blk[r]: row r's block of the column, NULL for absent rows)
 * or a packed record (rec: the 16 rows' blocks of the column re-laid, core/kern/pack.h). Which one is a constant
 * of each kernel (`packed`), folded in at compile time as `kind` is. */
typedef struct amx_sbsrc {
    const char *blk[16];
    const char *rec;
} amx_sbsrc_t;

/* Record offsets of the packed layouts (core/kern/pack.c's layouts[]; check_amx builds its packed cases with
 * kern_pack, so a difference fails there). A region of 4-byte chunks that holds block bytes from `from` on at
 * record offset `at` has bytes off .. off + 3 of the 16 rows at at + 16 (off - from), row r's at + 4 r beyond. */
enum {
    PK_K4_SCALES = 0,        /* Q4_K, Q5_K: scales[4 i .. 4 i + 3] of row r at 64 i + 4 r, i < 3 */
    PK_K4_D = 192,           /* Q4_K, Q5_K: d of rows 0..15 (fp16) */
    PK_K4_DMIN = 224,        /* Q4_K, Q5_K: dmin of rows 0..15 (fp16) */
    PK_Q4_K_QS = 256,        /* qs from 0 */
    PK_Q5_K_QH = 256,        /* qh from 0 */
    PK_Q5_K_QS = 768,        /* qs from 0 */
    PK_Q6_K_D = 0,           /* d of rows 0..15 (fp16) */
    PK_Q6_K_SCALES = 32,     /* scales[s] of row r at 32 + 16 s + r */
    PK_Q6_K_QL = 288,        /* ql from 0 */
    PK_Q6_K_QH = 2336,       /* qh from 0 */
    PK_IQ4_XS_D = 0,         /* d of rows 0..15 (fp16) */
    PK_IQ4_XS_SCALES_H = 32, /* scales_h of rows 0..15 */
    PK_IQ4_XS_SCALES_L = 64, /* scales_l[0..3] of row r at 64 + 4 r */
    PK_IQ4_XS_QS = 128,      /* qs from 0 */
    PK_Q2_K_SCALES = 0,      /* scales[4 i .. 4 i + 3] of row r at 64 i + 4 r, i < 4 */
    PK_Q2_K_D = 256,         /* d of rows 0..15 (fp16) */
    PK_Q2_K_DMIN = 288,      /* dmin of rows 0..15 (fp16) */
    PK_Q2_K_QS = 320,        /* qs from 0 */
    PK_Q3_K_SCALES = 0,      /* scales[4 i .. 4 i + 3] of row r at 64 i + 4 r, i < 3 */
    PK_Q3_K_D = 192,         /* d of rows 0..15 (fp16) */
    PK_Q3_K_HMASK = 224,     /* hmask from 0 */
    PK_Q3_K_QS = 736,        /* qs from 0 */
};

/* The 4-byte groups of bytes [off, off + 4 nd) of the 16 rows' blocks in row lanes, nd = 16 or 8: out[j] lane r
 * = row r's bytes off + 4 j .. + 3. Plain rows are transposed (out[8..15] zero when nd = 8); a packed record holds
 * them in that form already, as the 64-byte chunks from record offset `at` on (out[nd..15] untouched). */
static inline __attribute__((always_inline)) void amx_sb_lanes(int packed, const amx_sbsrc_t *src, size_t off,
                                                               size_t at, int nd, __m512i *out)
{
    if (packed)
        for (int j = 0; j < nd; j++)
            out[j] = _mm512_loadu_si512(src->rec + at + 64 * (size_t)j);
    else if (nd == 16)
        amx_rows64_t(src->blk, off, out);
    else
        amx_rows32_t(src->blk, off, out);
}

/* amx_iq4xs_scales in row lanes: the scales (minus 32, int8) of sub-blocks 4 q .. 4 q + 3 in the 4 bytes of
 * each lane, from the rows' scales_l dwords (l) and scales_h words zero-extended (h). */
static inline __m512i amx_iq4xs_scales_lanes(__m512i l, __m512i h, int q)
{
    /* nibble i of the 16 bits of l to the low half of byte i; 2-bit field i of the 8 bits of h to bits 4-5 */
    l = _mm512_and_si512(_mm512_srli_epi32(l, 16 * q), _mm512_set1_epi32(0xffff));
    l = _mm512_and_si512(_mm512_or_si512(l, _mm512_slli_epi32(l, 8)), _mm512_set1_epi32(0x00ff00ff));
    l = _mm512_and_si512(_mm512_or_si512(l, _mm512_slli_epi32(l, 4)), _mm512_set1_epi32(0x0f0f0f0f));
    h = _mm512_and_si512(_mm512_srli_epi32(h, 8 * q), _mm512_set1_epi32(0xff));
    h = _mm512_and_si512(_mm512_or_si512(h, _mm512_slli_epi32(h, 12)), _mm512_set1_epi32(0x000f000f));
    h = _mm512_and_si512(_mm512_or_si512(h, _mm512_slli_epi32(h, 6)), _mm512_set1_epi32(0x03030303));
    return _mm512_sub_epi8(_mm512_or_si512(l, _mm512_slli_epi32(h, 4)), _mm512_set1_epi8(32));
}

/* The header of block column b of 16 plain rows: the integer scales' bytes in row lanes (st[k]: bytes 4k..4k+3
 * of the 16 below, by a transposition), and p's d (and dmin) of slot b. The 16 bytes: Q2_K scale | min << 4 per
 * sub-block; Q3_K, Q6_K the int8 scales (Q3_K unpacked, minus 32); IQ4_XS the 8 scales minus 32; Q4_K/Q5_K
 * d | dmin << 16 (st[0]) and the 12 packed scale bytes (st[1..3]). */
static inline __attribute__((always_inline)) void amx_sb_head_plain(int kind, const char *const *blk, int b,
                                                                    amx_sbw_t *p, __m512i *st)
{
    uint16_t d16[16] = {0}, m16[16] = {0};
    __m512i in[16];
    for (int r = 0; r < 16; r++) {
        __m128i v = _mm_setzero_si128();
        if (blk[r]) {
            switch (kind) {
            case SB_Q2_K: /* per sub-block of 16: scale in the low nibble, min in the high one */
                v = _mm_loadu_si128((const __m128i *)(blk[r] + offsetof(quant_block_q2_K, scales)));
                memcpy(&d16[r], blk[r] + offsetof(quant_block_q2_K, d), 2);
                memcpy(&m16[r], blk[r] + offsetof(quant_block_q2_K, dmin), 2);
                break;
            case SB_Q3_K:
                v = amx_q3_scales(blk[r] + offsetof(quant_block_q3_K, scales));
                memcpy(&d16[r], blk[r] + offsetof(quant_block_q3_K, d), 2);
                break;
            case SB_Q4_K:
            case SB_Q5_K: /* d, dmin and the 12 packed bytes: the first 16 bytes of both block types */
                v = _mm_loadu_si128((const __m128i *)blk[r]);
                break;
            case SB_Q6_K:
                v = _mm_loadu_si128((const __m128i *)(blk[r] + offsetof(quant_block_q6_K, scales)));
                memcpy(&d16[r], blk[r] + offsetof(quant_block_q6_K, d), 2);
                break;
            default: /* IQ4_XS */
                v = amx_iq4xs_scales(blk[r]);
                memcpy(&d16[r], blk[r], 2);
                break;
            }
        }
        in[r] = _mm512_zextsi128_si512(v);
    }
    amx_transpose16(in, st);
    if (kind == SB_Q4_K || kind == SB_Q5_K) { /* st[0]: d | dmin << 16 */
        p->d[b] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(st[0]));
        p->dmin[b] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(st[0], 16)));
        return;
    }
    p->d[b] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)d16));
    if (kind == SB_Q2_K)
        p->dmin[b] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)m16));
}

/* The same from a packed record (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS), with no transposition: the record keeps the
 * scale bytes in row lanes (Q2_K; Q4_K/Q5_K: st[0] is not set, d and dmin being 16 fp16 each) or 16 rows to a
 * chunk. */
static inline __attribute__((always_inline)) void amx_sb_head_packed(int kind, const char *rec, int b,
                                                                     amx_sbw_t *p, __m512i *st)
{
    if (kind == SB_Q3_K) {
        k512_q3_scales_lanes(_mm512_loadu_si512(rec + PK_Q3_K_SCALES), _mm512_loadu_si512(rec + PK_Q3_K_SCALES + 64),
                             _mm512_loadu_si512(rec + PK_Q3_K_SCALES + 128), st);
        p->d[b] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(rec + PK_Q3_K_D)));
    } else if (kind == SB_Q2_K) {
        for (int i = 0; i < 4; i++)
            st[i] = _mm512_loadu_si512(rec + PK_Q2_K_SCALES + 64 * i);
        p->d[b] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(rec + PK_Q2_K_D)));
        p->dmin[b] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(rec + PK_Q2_K_DMIN)));
    } else if (kind == SB_Q4_K || kind == SB_Q5_K) {
        for (int i = 0; i < 3; i++)
            st[1 + i] = _mm512_loadu_si512(rec + PK_K4_SCALES + 64 * i);
        p->d[b] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(rec + PK_K4_D)));
        p->dmin[b] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(rec + PK_K4_DMIN)));
    } else if (kind == SB_Q6_K) {
        /* chunk 4 k + i (scales[4 k + i] of the 16 rows, a byte each) into byte i of st[k]'s lanes */
        for (int k = 0; k < 4; k++) {
            __m512i v = _mm512_setzero_si512();
            for (int i = 0; i < 4; i++) {
                const __m128i c = _mm_loadu_si128((const __m128i *)(rec + PK_Q6_K_SCALES + 16 * (4 * k + i)));
                v = _mm512_or_si512(v, _mm512_slli_epi32(_mm512_cvtepu8_epi32(c), 8 * i));
            }
            st[k] = v;
        }
        p->d[b] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(rec + PK_Q6_K_D)));
    } else { /* IQ4_XS */
        const __m512i l = _mm512_loadu_si512(rec + PK_IQ4_XS_SCALES_L);
        const __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(rec + PK_IQ4_XS_SCALES_H)));
        st[0] = amx_iq4xs_scales_lanes(l, h, 0);
        st[1] = amx_iq4xs_scales_lanes(l, h, 1);
        p->d[b] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(rec + PK_IQ4_XS_D)));
    }
}

/* Lays out block column c0 + b of 16 rows (src: plain rows or a packed record) into p's slot b. */
static inline __attribute__((always_inline)) void amx_prep_sb(int kind, int packed, const amx_sbsrc_t *src, int b,
                                                              amx_sbw_t *p)
{
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    __m512i st[16], x[16], y[16];
    amx_scale_t sc[16];
    if (packed)
        amx_sb_head_packed(kind, src->rec, b, p, st);
    else
        amx_sb_head_plain(kind, src->blk, b, p, st);
    if (kind == SB_Q2_K) {
        const __m512i lo4 = _mm512_set1_epi8(0x0f);
        for (int s = 0; s < 16; s++)
            sc[s] = amx_scale(_mm512_and_si512(st[s / 4], lo4), s % 4, 0);
        for (int j = 0; j < 8; j++)
            p->mins[b][j] = amx_pairs(_mm512_and_si512(_mm512_srli_epi32(st[j / 2], 4), lo4), j % 2);
    } else if (kind == SB_Q4_K || kind == SB_Q5_K) {
        /* ggml's kmask unpacking of the 6-bit scales and mins, in row lanes (quant_k4_scale_min) */
        const __m512i km1 = _mm512_set1_epi32(0x3f3f3f3f), km2 = _mm512_set1_epi32(0x0f0f0f0f);
        const __m512i km3 = _mm512_set1_epi32(0x03030303);
        const __m512i u0 = st[1], u1 = st[2], u2 = st[3];
        const __m512i sc03 = _mm512_and_si512(u0, km1), mn03 = _mm512_and_si512(u1, km1);
        const __m512i sc47 = _mm512_or_si512(_mm512_and_si512(u2, km2),
                                             _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u0, 6), km3), 4));
        const __m512i mn47 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u2, 4), km2),
                                             _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u1, 6), km3), 4));
        for (int s = 0; s < 8; s++)
            sc[s] = amx_scale(s < 4 ? sc03 : sc47, s % 4, 0);
        for (int j = 0; j < 4; j++)
            p->mins[b][j] = amx_pairs(j < 2 ? mn03 : mn47, j % 2);
    } else {
        /* Q3_K levels q2 + 4 hbit - 4: bias 4; Q6_K q6 - 32: bias 32; IQ4_XS kvalue + 128 - 128: bias 128 */
        const int shift = kind == SB_Q3_K ? 2 : kind == SB_Q6_K ? 5 : 7;
        for (int s = 0; s < (kind == SB_IQ4_XS ? 8 : 16); s++)
            sc[s] = amx_scale(st[s / 4], s % 4, shift);
    }

    if (kind == SB_Q2_K || kind == SB_Q3_K) {
        if (kind == SB_Q3_K) /* y[j]: hmask bytes 4j..4j+3 */
            amx_sb_lanes(packed, src, offsetof(quant_block_q3_K, hmask), PK_Q3_K_HMASK, 8, y);
        /* qs byte 32 h + l: bits 2k, 2k+1 are element 128 h + 32 k + l (sub-block 8 h + 2 k + l / 16); Q3_K's
         * high bit of element e is bit e / 32 of hmask[e % 32] */
        amx_sb_lanes(packed, src, kind == SB_Q2_K ? offsetof(quant_block_q2_K, qs) : offsetof(quant_block_q3_K, qs),
                     kind == SB_Q2_K ? PK_Q2_K_QS : PK_Q3_K_QS, 16, x);
        for (int j = 0; j < 16; j++) {
            const int h = j / 8, j8 = j % 8;
            for (int k = 0; k < 4; k++) {
                __m512i lev = _mm512_and_si512(_mm512_srli_epi16(x[j], 2 * k), _mm512_set1_epi8(3));
                if (kind == SB_Q3_K)
                    lev = _mm512_mask_add_epi8(lev, _mm512_test_epi8_mask(y[j8], _mm512_set1_epi8((char)(1 << (4 * h + k)))),
                                               lev, _mm512_set1_epi8(4));
                const int g = 2 * h + k / 2, row = 8 * (k % 2) + j8;
                amx_split_store(lev, &sc[8 * h + 2 * k + j8 / 4], kind == SB_Q3_K, p->b[b][g][0][row], p->b[b][g][1][row]);
            }
        }
    } else if (kind == SB_Q4_K || kind == SB_Q5_K) {
        const size_t qs = kind == SB_Q5_K ? offsetof(quant_block_q5_K, qs) : offsetof(quant_block_q4_K, qs);
        const size_t qs_at = kind == SB_Q5_K ? PK_Q5_K_QS : PK_Q4_K_QS;
        if (kind == SB_Q5_K)
            amx_sb_lanes(packed, src, offsetof(quant_block_q5_K, qh), PK_Q5_K_QH, 8, y); /* y[j]: qh bytes 4j..4j+3 */
        /* qs byte 32 c + l: low nibble element 64 c + l (sub-block 2c), high 64 c + 32 + l (2c + 1) */
        for (int h = 0; h < 2; h++) {
            amx_sb_lanes(packed, src, qs + 64 * (size_t)h, qs_at + 1024 * (size_t)h, 16, x);
            for (int j = 0; j < 16; j++) {
                const int c = 2 * h + j / 8, jr = j % 8;
                __m512i lo = _mm512_and_si512(x[j], m4);
                __m512i hi = _mm512_and_si512(_mm512_srli_epi16(x[j], 4), m4);
                if (kind == SB_Q5_K) { /* bit s of qh[l]: the 5th bit of element 32 s + l */
                    const __m512i sixteen = _mm512_set1_epi8(16);
                    lo = _mm512_mask_add_epi8(lo, _mm512_test_epi8_mask(y[jr], _mm512_set1_epi8((char)(1 << (2 * c)))),
                                              lo, sixteen);
                    hi = _mm512_mask_add_epi8(
                        hi, _mm512_test_epi8_mask(y[jr], _mm512_set1_epi8((char)(1 << (2 * c + 1)))), hi, sixteen);
                }
                amx_split_store(lo, &sc[2 * c], 0, p->b[b][c][0][jr], p->b[b][c][1][jr]);
                amx_split_store(hi, &sc[2 * c + 1], 0, p->b[b][c][0][8 + jr], p->b[b][c][1][8 + jr]);
            }
        }
    } else if (kind == SB_Q6_K) {
        amx_sb_lanes(packed, src, offsetof(quant_block_q6_K, qh), PK_Q6_K_QH, 16, y); /* y[j]: qh bytes 4j..4j+3 */
        /* element 128 h + 32 k + l: low bits from ql[64 h + 32 (k % 2) + l] (nibble k / 2), high bits 2k of
         * qh[32 h + l]; sub-block (16 elements) 8 h + 2 k + l / 16 */
        for (int h = 0; h < 2; h++) {
            amx_sb_lanes(packed, src, offsetof(quant_block_q6_K, ql) + 64 * (size_t)h,
                         PK_Q6_K_QL + 1024 * (size_t)h, 16, x);
            for (int k = 0; k < 4; k++)
                for (int j8 = 0; j8 < 8; j8++) {
                    const __m512i q = x[8 * (k % 2) + j8];
                    const __m512i lo = _mm512_and_si512(k < 2 ? q : _mm512_srli_epi16(q, 4), m4);
                    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(y[8 * h + j8], 2 * k), _mm512_set1_epi8(3));
                    const __m512i q6 = _mm512_or_si512(lo, _mm512_slli_epi16(hi, 4));
                    const int g = 2 * h + k / 2, row = 8 * (k % 2) + j8;
                    amx_split_store(q6, &sc[8 * h + 2 * k + j8 / 4], 1, p->b[b][g][0][row], p->b[b][g][1][row]);
                }
        }
    } else { /* IQ4_XS */
        const __m512i table = _mm512_broadcast_i32x4(
            _mm_xor_si128(_mm_loadu_si128((const __m128i *)quant_kvalues_iq4nl), _mm_set1_epi8((char)0x80)));
        /* qs byte 16 s + j (j < 16): low nibble element 32 s + j, high 32 s + 16 + j */
        for (int h = 0; h < 2; h++) {
            amx_sb_lanes(packed, src, offsetof(quant_block_iq4_xs, qs) + 64 * (size_t)h,
                         PK_IQ4_XS_QS + 1024 * (size_t)h, 16, x);
            for (int jj = 0; jj < 16; jj++) {
                const int s = 4 * h + jj / 4, g = s / 2, row = 8 * (s % 2) + jj % 4;
                const __m512i lo = _mm512_shuffle_epi8(table, _mm512_and_si512(x[jj], m4));
                const __m512i hi = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(x[jj], 4), m4));
                amx_split_store(lo, &sc[s], 1, p->b[b][g][0][row], p->b[b][g][1][row]);
                amx_split_store(hi, &sc[s], 1, p->b[b][g][0][row + 4], p->b[b][g][1][row + 4]);
            }
        }
    }
}

/* packed: w holds packed rows (core/kern/pack.h; nrows a multiple of 16), else plain ones. */
static inline __attribute__((always_inline)) void AMX_NAME(matmul_sb)(int kind, int packed, int64_t n,
                                                                       int64_t nrows, int64_t ntok, const void *w,
                                                                       size_t w_stride, const void *act,
                                                                       size_t act_stride, float *out, size_t ldo)
{
    const int64_t nb = n / QUANT_QK_K;
    const size_t bb = sb_block_bytes(kind), ab = sizeof(quant_block_q8_K);
    const int has_mins = sb_has_mins(kind), nmins = kind == SB_Q2_K ? 8 : 4;
    amx_sbw_t pw;
    float ad[AMX_TG][AMX_SB_CHUNK];       /* [token of the group][block of the chunk]: a.d */
    /* the activation sums that meet the mins, two int16 per dword: Q2_K bsums[2j] | bsums[2j+1] << 16;
     * Q4_K/Q5_K bsums[4j] + bsums[4j+1] | (bsums[4j+2] + bsums[4j+3]) << 16 */
    uint32_t vs[AMX_TG][AMX_SB_CHUNK][8];
    int32_t cbuf[2][2][2][16][16] __attribute__((aligned(64))); /* [block & 1][token tile][H, L][token][row] */
    __m512 acc[32];
    amx_tilecfg_t cfg;
    int cfg_mt0 = -1, cfg_mt1 = -1;
    for (int64_t tg0 = 0; tg0 < ntok; tg0 += AMX_TG) {
        const int tgn = (int)(ntok - tg0 < AMX_TG ? ntok - tg0 : AMX_TG);
        for (int64_t c0 = 0; c0 < nb; c0 += AMX_SB_CHUNK) {
            const int cn = (int)(nb - c0 < AMX_SB_CHUNK ? nb - c0 : AMX_SB_CHUNK);
            for (int t = 0; t < tgn; t++) {
                const quant_block_q8_K *a =
                    (const quant_block_q8_K *)((const char *)act + (size_t)(tg0 + t) * act_stride) + c0;
                for (int b = 0; b < cn; b++) {
                    ad[t][b] = a[b].d;
                    if (kind == SB_Q2_K)
                        for (int j = 0; j < 8; j++)
                            vs[t][b][j] = (uint32_t)(uint16_t)a[b].bsums[2 * j] | (uint32_t)(uint16_t)a[b].bsums[2 * j + 1] << 16;
                    else if (has_mins)
                        for (int j = 0; j < 4; j++) {
                            const int v0 = a[b].bsums[4 * j] + a[b].bsums[4 * j + 1];
                            const int v1 = a[b].bsums[4 * j + 2] + a[b].bsums[4 * j + 3];
                            vs[t][b][j] = (uint32_t)(uint16_t)v0 | (uint32_t)(uint16_t)v1 << 16;
                        }
                }
            }
            for (int64_t r0 = 0; r0 < nrows; r0 += 16) {
                const int nr = (int)(nrows - r0 < 16 ? nrows - r0 : 16);
                const __mmask16 keep = (__mmask16)((1u << nr) - 1);
                /* packed: group r0 / 16 starts at w + r0 * w_stride, and the records of its block columns
                 * (16 blocks each) follow one another */
                const char *const w0 = (const char *)w + (size_t)r0 * w_stride;
                if (packed)
                    amx_prefetch_next(w, 16 * w_stride, nrows / 16, r0 / 16, 1, 16 * c0 * (int64_t)bb,
                                      16 * cn * (int64_t)bb, 16 * nb * (int64_t)bb);
                else
                    amx_prefetch_next(w, w_stride, nrows, r0, 16, c0 * (int64_t)bb, cn * (int64_t)bb,
                                      nb * (int64_t)bb);
                for (int b = 0; b < cn; b++) {
                    amx_sbsrc_t src;
                    if (packed)
                        src.rec = w0 + (size_t)(c0 + b) * 16 * bb;
                    else
                        for (int r = 0; r < 16; r++)
                            src.blk[r] = r < nr ? w0 + (size_t)r * w_stride + (size_t)(c0 + b) * bb : NULL;
                    amx_prep_sb(kind, packed, &src, b, &pw);
                }
                for (int tp = 0; tp < tgn; tp += 32) {
                    const int mt0 = tgn - tp < 16 ? tgn - tp : 16;
                    const int mt1 = tgn - tp - 16 <= 0 ? 0 : tgn - tp - 16 < 16 ? tgn - tp - 16 : 16;
                    if (mt0 != cfg_mt0 || mt1 != cfg_mt1) {
                        amx_cfg_fill(&cfg, mt0, mt1, 64);
                        AMX_CONFIG(&cfg);
                        cfg_mt0 = mt0;
                        cfg_mt1 = mt1;
                    }
                    float *o = out + (size_t)(tg0 + tp) * ldo + (size_t)r0;
                    for (int t = 0; t < mt0 + mt1; t++)
                        acc[t] = c0 ? _mm512_maskz_loadu_ps(keep, o + (size_t)t * ldo) : _mm512_setzero_ps();
                    const char *a0 = (const char *)act + (size_t)(tg0 + tp) * act_stride + (size_t)c0 * ab +
                                     offsetof(quant_block_q8_K, qs);
                    /* the float stage runs one block behind the tile products (see matmul_b32) */
                    for (int bt = 0; bt <= cn; bt++) {
                        if (bt < cn) {
                            AMX_ZERO(AMX_C0);
                            AMX_ZERO(AMX_C1);
                            if (mt1) {
                                AMX_ZERO(AMX_C2);
                                AMX_ZERO(AMX_C3);
                            }
                            for (int g = 0; g < 4; g++) {
                                const char *a = a0 + (size_t)bt * ab + 64 * (size_t)g;
                                AMX_LOAD(AMX_B0, pw.b[bt][g][0], 64);
                                AMX_LOAD(AMX_B1, pw.b[bt][g][1], 64);
                                AMX_LOAD(AMX_A0, a, act_stride);
                                AMX_DPBSSD(AMX_C0, AMX_A0, AMX_B0);
                                AMX_DPBSSD(AMX_C1, AMX_A0, AMX_B1);
                                if (mt1) {
                                    AMX_LOAD(AMX_A1, a + 16 * act_stride, act_stride);
                                    AMX_DPBSSD(AMX_C2, AMX_A1, AMX_B0);
                                    AMX_DPBSSD(AMX_C3, AMX_A1, AMX_B1);
                                }
                            }
                            AMX_STORE(AMX_C0, cbuf[bt & 1][0][0], 64);
                            AMX_STORE(AMX_C1, cbuf[bt & 1][0][1], 64);
                            if (mt1) {
                                AMX_STORE(AMX_C2, cbuf[bt & 1][1][0], 64);
                                AMX_STORE(AMX_C3, cbuf[bt & 1][1][1], 64);
                            }
                        }
                        if (bt == 0)
                            continue;
                        const int b = bt - 1;
                        for (int t = 0; t < mt0 + mt1; t++) {
                            const __m512i ch = _mm512_load_si512(cbuf[b & 1][t >> 4][0][t & 15]);
                            const __m512i cl = _mm512_load_si512(cbuf[b & 1][t >> 4][1][t & 15]);
                            const __m512i isum = _mm512_add_epi32(_mm512_slli_epi32(ch, 7), cl);
                            const __m512 a_d = _mm512_set1_ps(ad[tp + t][b]);
                            const __m512 d = _mm512_mul_ps(pw.d[b], a_d);
                            const __m512 t1 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(isum));
                            if (has_mins) {
                                const uint32_t *v = vs[tp + t][b];
                                __m512i imin = _mm512_setzero_si512();
                                for (int j = 0; j < nmins; j++)
                                    imin = _mm512_dpwssd_epi32(imin, pw.mins[b][j], _mm512_set1_epi32((int)v[j]));
                                const __m512 dmin = _mm512_mul_ps(pw.dmin[b], a_d);
                                const __m512 t2 = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(imin));
                                acc[t] = _mm512_add_ps(acc[t], _mm512_sub_ps(t1, t2));
                            } else {
                                acc[t] = _mm512_add_ps(acc[t], t1);
                            }
                        }
                    }
                    for (int t = 0; t < mt0 + mt1; t++)
                        _mm512_mask_storeu_ps(o + (size_t)t * ldo, keep, acc[t]);
                }
            }
        }
    }
    if (cfg_mt0 >= 0)
        AMX_RELEASE();
}

/* ---- 256-element blocks, large token counts: matmul_sb_big ----------------------------------------------- */

/* matmul_sb_big's tuning is core/kern/amx.h's kern_amx_big_t (row_groups clamped to 1..AMX_SB_SLOTS, depth to
 * 0..2). */
typedef kern_amx_big_t amx_big_cfg_t;

#define AMX_BIG_TG 256 /* tokens per group: their activations of one block are 64 KiB of tile rows */

/* The tuning the dispatch uses from KERN_AMX_BIG_MIN_TOKENS tokens (core/kern/amx.h). */
static const amx_big_cfg_t amx_big_default = {KERN_AMX_BIG_ROW_GROUPS, KERN_AMX_BIG_PREFETCH, KERN_AMX_BIG_DEPTH};

/* matmul_sb_big's float stage of one step: tokens 0 .. mt - 1 of cbuf's token pair (their a.d at ad, min sums at
 * vs), the row group of slot g, block column cb (0: the sums start at 0.0f), into out (token t at o + t * ldo;
 * rows_left rows from there, 16 at most). matmul_sb's expressions, lane for lane. */
static inline __attribute__((always_inline)) void amx_big_float(int kind, const amx_sbw_t *pw, int g,
                                                                int32_t (*cbuf)[2][16][16], const float *ad,
                                                                uint32_t (*vs)[8], int mt, int64_t cb, float *o,
                                                                size_t ldo, int rows_left)
{
    const int has_mins = sb_has_mins(kind), nmins = kind == SB_Q2_K ? 8 : 4;
    const int nr = rows_left < 16 ? rows_left : 16;
    const __mmask16 keep = (__mmask16)((1u << nr) - 1);
    for (int t = 0; t < mt; t++) {
        const __m512 acc = cb ? _mm512_maskz_loadu_ps(keep, o + (size_t)t * ldo) : _mm512_setzero_ps();
        const __m512i ch = _mm512_load_si512(cbuf[t >> 4][0][t & 15]);
        const __m512i cl = _mm512_load_si512(cbuf[t >> 4][1][t & 15]);
        const __m512i isum = _mm512_add_epi32(_mm512_slli_epi32(ch, 7), cl);
        const __m512 a_d = _mm512_set1_ps(ad[t]);
        const __m512 d = _mm512_mul_ps(pw->d[g], a_d);
        const __m512 t1 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(isum));
        __m512 sum;
        if (has_mins) {
            __m512i imin = _mm512_setzero_si512();
            for (int j = 0; j < nmins; j++)
                imin = _mm512_dpwssd_epi32(imin, pw->mins[g][j], _mm512_set1_epi32((int)vs[t][j]));
            const __m512 dmin = _mm512_mul_ps(pw->dmin[g], a_d);
            const __m512 t2 = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(imin));
            sum = _mm512_add_ps(acc, _mm512_sub_ps(t1, t2));
        } else {
            sum = _mm512_add_ps(acc, t1);
        }
        _mm512_mask_storeu_ps(o + (size_t)t * ldo, keep, sum);
    }
}

/* The same products as matmul_sb (the same integer sums, float stage and order: the same bits), in another work
 * order for many tokens. Per token group and block column: the group's activation bytes of the block are
 * gathered once into tile rows (256 bytes a token, 64-byte aligned: a tile row is one cache line, a token tile
 * of a 64-element group 1 KiB at stride 256) with their a.d and min sums; then per `row_groups` x 16 rows, their
 * B tiles are laid out once (8 KiB a group of 16, kept in L1) and every token pair of the group runs over them,
 * its A tiles loaded once from L2 (prefetched a pair ahead) and reused by each row group. The float stage of a
 * step (token pair, row group) runs `depth` steps later, while the tiles compute those (C stored in 3 slots); the
 * running sums live in `out` (a stored float loads back the same), starting from 0.0f at block 0. */
static inline __attribute__((always_inline)) void AMX_NAME(matmul_sb_big_rows)(int kind, int packed,
                                                                                amx_big_cfg_t bc, int64_t n,
                                                                                int64_t nrows, int64_t ntok,
                                                                                const void *w, size_t w_stride,
                                                                                const void *act, size_t act_stride,
                                                                                float *out, size_t ldo)
{
    const int64_t nb = n / QUANT_QK_K;
    const size_t bb = sb_block_bytes(kind);
    const int has_mins = sb_has_mins(kind);
    const int RG = bc.row_groups < 1 ? 1 : bc.row_groups > AMX_SB_SLOTS ? AMX_SB_SLOTS : bc.row_groups;
    amx_sbw_t pw;
    int8_t abuf[AMX_BIG_TG][QUANT_QK_K] __attribute__((aligned(64))); /* [token][element]: the block's qs */
    float ad[AMX_BIG_TG];                                               /* a.d */
    uint32_t vs[AMX_BIG_TG][8];                                         /* matmul_sb's vs, of one block */
    int32_t cbuf[3][2][2][16][16] __attribute__((aligned(64))); /* [step % 3][token tile][H, L][token][row] */
    const int depth = bc.depth < 0 ? 0 : bc.depth > 2 ? 2 : bc.depth;
    amx_tilecfg_t cfg;
    int cfg_mt0 = -1, cfg_mt1 = -1;
    for (int64_t tg0 = 0; tg0 < ntok; tg0 += AMX_BIG_TG) {
        const int tgn = (int)(ntok - tg0 < AMX_BIG_TG ? ntok - tg0 : AMX_BIG_TG);
        for (int64_t cb = 0; cb < nb; cb++) {
            for (int t = 0; t < tgn; t++) {
                const quant_block_q8_K *a =
                    (const quant_block_q8_K *)((const char *)act + (size_t)(tg0 + t) * act_stride) + cb;
                for (int q = 0; q < 4; q++)
                    _mm512_store_si512(abuf[t] + 64 * q, _mm512_loadu_si512(a->qs + 64 * q));
                ad[t] = a->d;
                if (kind == SB_Q2_K)
                    for (int j = 0; j < 8; j++)
                        vs[t][j] = (uint32_t)(uint16_t)a->bsums[2 * j] | (uint32_t)(uint16_t)a->bsums[2 * j + 1] << 16;
                else if (has_mins)
                    for (int j = 0; j < 4; j++) {
                        const int v0 = a->bsums[4 * j] + a->bsums[4 * j + 1];
                        const int v1 = a->bsums[4 * j + 2] + a->bsums[4 * j + 3];
                        vs[t][j] = (uint32_t)(uint16_t)v0 | (uint32_t)(uint16_t)v1 << 16;
                    }
            }
            for (int64_t rs0 = 0; rs0 < nrows; rs0 += 16 * (int64_t)RG) {
                const int ng = (int)((nrows - rs0 + 15) / 16 < RG ? (nrows - rs0 + 15) / 16 : RG);
                for (int g = 0; g < ng; g++) {
                    const int64_t r0 = rs0 + 16 * (int64_t)g;
                    const int nr = (int)(nrows - r0 < 16 ? nrows - r0 : 16);
                    const char *const w0 = (const char *)w + (size_t)r0 * w_stride;
                    amx_sbsrc_t src;
                    if (packed)
                        src.rec = w0 + (size_t)cb * 16 * bb;
                    else
                        for (int r = 0; r < 16; r++)
                            src.blk[r] = r < nr ? w0 + (size_t)r * w_stride + (size_t)cb * bb : NULL;
                    amx_prep_sb(kind, packed, &src, g, &pw);
                }
                /* the next row groups' weights of this block, or the first ones' of the next block, into L2 */
                if (packed)
                    amx_prefetch_next(w, 16 * w_stride, nrows / 16, rs0 / 16, RG, 16 * cb * (int64_t)bb,
                                      16 * (int64_t)bb, 16 * nb * (int64_t)bb);
                else
                    amx_prefetch_next(w, w_stride, nrows, rs0, 16 * RG, cb * (int64_t)bb, (int64_t)bb,
                                      nb * (int64_t)bb);
                /* steps s = (token pair, row group); step s's float stage runs after step s + depth's tile
                 * products were issued (C stored to cbuf[s % 3]) */
                int step = 0, done = 0;
                int s_tp[3], s_g[3], s_mt[3];
                for (int tp = 0; tp < tgn; tp += 32) {
                    const int mt0 = tgn - tp < 16 ? tgn - tp : 16;
                    const int mt1 = tgn - tp - 16 <= 0 ? 0 : tgn - tp - 16 < 16 ? tgn - tp - 16 : 16;
                    if (mt0 != cfg_mt0 || mt1 != cfg_mt1) {
                        amx_cfg_fill(&cfg, mt0, mt1, 64);
                        AMX_CONFIG(&cfg);
                        cfg_mt0 = mt0;
                        cfg_mt1 = mt1;
                    }
                    if (bc.prefetch && tp + 32 < tgn) {
                        const int pn = tgn - tp - 32 < 32 ? tgn - tp - 32 : 32;
                        for (int l = 0; l < 4 * pn; l++)
                            _mm_prefetch((const char *)abuf[tp + 32] + 64 * (size_t)l, _MM_HINT_T0);
                    }
                    for (int g = 0; g < ng; g++) {
                        const int cs = step % 3;
                        AMX_ZERO(AMX_C0);
                        AMX_ZERO(AMX_C1);
                        if (mt1) {
                            AMX_ZERO(AMX_C2);
                            AMX_ZERO(AMX_C3);
                        }
                        for (int q = 0; q < 4; q++) {
                            AMX_LOAD(AMX_B0, pw.b[g][q][0], 64);
                            AMX_LOAD(AMX_B1, pw.b[g][q][1], 64);
                            AMX_LOAD(AMX_A0, abuf[tp] + 64 * q, QUANT_QK_K);
                            AMX_DPBSSD(AMX_C0, AMX_A0, AMX_B0);
                            AMX_DPBSSD(AMX_C1, AMX_A0, AMX_B1);
                            if (mt1) {
                                AMX_LOAD(AMX_A1, abuf[tp + 16] + 64 * q, QUANT_QK_K);
                                AMX_DPBSSD(AMX_C2, AMX_A1, AMX_B0);
                                AMX_DPBSSD(AMX_C3, AMX_A1, AMX_B1);
                            }
                        }
                        AMX_STORE(AMX_C0, cbuf[cs][0][0], 64);
                        AMX_STORE(AMX_C1, cbuf[cs][0][1], 64);
                        if (mt1) {
                            AMX_STORE(AMX_C2, cbuf[cs][1][0], 64);
                            AMX_STORE(AMX_C3, cbuf[cs][1][1], 64);
                        }
                        s_tp[cs] = tp;
                        s_g[cs] = g;
                        s_mt[cs] = mt0 + mt1;
                        step++;
                        while (step - done > depth) {
                            const int ds = done % 3;
                            amx_big_float(kind, &pw, s_g[ds], cbuf[ds], ad + s_tp[ds], vs + s_tp[ds], s_mt[ds], cb,
                                          out + (size_t)(tg0 + s_tp[ds]) * ldo + (size_t)(rs0 + 16 * s_g[ds]),
                                          ldo, (int)(nrows - rs0 - 16 * s_g[ds]));
                            done++;
                        }
                    }
                }
                while (done < step) {
                    const int ds = done % 3;
                    amx_big_float(kind, &pw, s_g[ds], cbuf[ds], ad + s_tp[ds], vs + s_tp[ds], s_mt[ds], cb,
                                  out + (size_t)(tg0 + s_tp[ds]) * ldo + (size_t)(rs0 + 16 * s_g[ds]), ldo,
                                  (int)(nrows - rs0 - 16 * s_g[ds]));
                    done++;
                }
            }
        }
    }
    if (cfg_mt0 >= 0)
        AMX_RELEASE();
}

/* matmul_sb_big over at most KERN_AMX_BIG_ROWS rows at a time: its running sums in `out` (rows x tokens) then
 * stay in L2 through the block columns' passes, as they do in the calls of that many rows it was measured in
 * (bench/results/amxbig-h200-2026-12-02-s26.md: whole 1,536-row matrices in one pass were slower); the
 * activations are gathered again for each range of rows. */
static inline __attribute__((always_inline)) void AMX_NAME(matmul_sb_big)(int kind, int packed, amx_big_cfg_t bc,
                                                                           int64_t n, int64_t nrows, int64_t ntok,
                                                                           const void *w, size_t w_stride,
                                                                           const void *act, size_t act_stride,
                                                                           float *out, size_t ldo)
{
    GUILD_STATIC_ASSERT(KERN_AMX_BIG_ROWS % 16 == 0, "a range of rows starts on a packed group");
    for (int64_t r0 = 0; r0 < nrows; r0 += KERN_AMX_BIG_ROWS) {
        const int64_t nr = nrows - r0 < KERN_AMX_BIG_ROWS ? nrows - r0 : KERN_AMX_BIG_ROWS;
        AMX_NAME(matmul_sb_big_rows)(kind, packed, bc, n, nr, ntok, (const char *)w + (size_t)r0 * w_stride, w_stride,
                                     act, act_stride, out + r0, ldo);
    }
}

/* One function per type, each with its kind (and weight source) folded in. */
#define AMX_KERNEL(T, FN, ...)                                                                               \
    static void AMX_NAME(matmul_##T)(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,  \
                                     const void *act, size_t act_stride, float *out, size_t ldo)             \
    {                                                                                                        \
        AMX_NAME(FN)(__VA_ARGS__, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);                   \
    }
AMX_KERNEL(q8_0, matmul_b32, B32_Q8_0)
AMX_KERNEL(q4_0, matmul_b32, B32_Q4_0)
AMX_KERNEL(q5_0, matmul_b32, B32_Q5_0)
AMX_KERNEL(iq4_nl, matmul_b32, B32_IQ4_NL)
AMX_KERNEL(mxfp4, matmul_b32, B32_MXFP4)
AMX_KERNEL(q4_1, matmul_b32, B32_Q4_1)
AMX_KERNEL(q5_1, matmul_b32, B32_Q5_1)
AMX_KERNEL(q2_K, matmul_sb, SB_Q2_K, 0)
AMX_KERNEL(q3_K, matmul_sb, SB_Q3_K, 0)
AMX_KERNEL(q4_K, matmul_sb, SB_Q4_K, 0)
AMX_KERNEL(q5_K, matmul_sb, SB_Q5_K, 0)
AMX_KERNEL(q6_K, matmul_sb, SB_Q6_K, 0)
AMX_KERNEL(iq4_xs, matmul_sb, SB_IQ4_XS, 0)
AMX_KERNEL(packed_q2_K, matmul_sb, SB_Q2_K, 1)
AMX_KERNEL(packed_q3_K, matmul_sb, SB_Q3_K, 1)
AMX_KERNEL(packed_q4_K, matmul_sb, SB_Q4_K, 1)
AMX_KERNEL(packed_q5_K, matmul_sb, SB_Q5_K, 1)
AMX_KERNEL(packed_q6_K, matmul_sb, SB_Q6_K, 1)
AMX_KERNEL(packed_iq4_xs, matmul_sb, SB_IQ4_XS, 1)
#undef AMX_KERNEL

typedef void (*AMX_NAME(kernel_fn))(int64_t, int64_t, int64_t, const void *, size_t, const void *, size_t, float *,
                                   size_t);

/* n == 0 (no blocks) gives zeros, as the reference does; else the kernel. */
static void AMX_NAME(run)(AMX_NAME(kernel_fn) fn, int64_t n, int64_t nrows, int64_t ntok, const void *w,
                          size_t w_stride, const void *act, size_t act_stride, float *out, size_t ldo)
{
    if (n == 0) {
        for (int64_t t = 0; t < ntok; t++)
            for (int64_t r = 0; r < nrows; r++)
                out[(size_t)t * ldo + (size_t)r] = 0.0f;
        return;
    }
    fn(n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);
}

/* matmul_sb_big per type and weight source */
#define AMX_BIG_KERNEL(T, KIND, PACKED)                                                                        \
    static void AMX_NAME(big_##T)(amx_big_cfg_t bc, int64_t n, int64_t nrows, int64_t ntok, const void *w,     \
                                  size_t w_stride, const void *act, size_t act_stride, float *out, size_t ldo)  \
    {                                                                                                          \
        AMX_NAME(matmul_sb_big)(KIND, PACKED, bc, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);      \
    }
AMX_BIG_KERNEL(q2_K, SB_Q2_K, 0)
AMX_BIG_KERNEL(q3_K, SB_Q3_K, 0)
AMX_BIG_KERNEL(q4_K, SB_Q4_K, 0)
AMX_BIG_KERNEL(q5_K, SB_Q5_K, 0)
AMX_BIG_KERNEL(q6_K, SB_Q6_K, 0)
AMX_BIG_KERNEL(iq4_xs, SB_IQ4_XS, 0)
AMX_BIG_KERNEL(packed_q2_K, SB_Q2_K, 1)
AMX_BIG_KERNEL(packed_q3_K, SB_Q3_K, 1)
AMX_BIG_KERNEL(packed_q4_K, SB_Q4_K, 1)
AMX_BIG_KERNEL(packed_q5_K, SB_Q5_K, 1)
AMX_BIG_KERNEL(packed_q6_K, SB_Q6_K, 1)
AMX_BIG_KERNEL(packed_iq4_xs, SB_IQ4_XS, 1)
#undef AMX_BIG_KERNEL

/* The 256-element types' kernels in a chosen work order: bc NULL is matmul_sb's (token pairs over chunks of
 * blocks), else matmul_sb_big's with bc's tuning; false for the other types. n == 0 gives zeros. */
static bool AMX_NAME(matmul_sb_order)(const amx_big_cfg_t *bc, int packed, guild_type_t type, int64_t n,
                                      int64_t nrows, int64_t ntok, const void *w, size_t w_stride, const void *act,
                                      size_t act_stride, float *out, size_t ldo)
{
    void (*big)(amx_big_cfg_t, int64_t, int64_t, int64_t, const void *, size_t, const void *, size_t, float *,
                size_t);
    AMX_NAME(kernel_fn) pairs;
    switch (type) {
#define AMX_SB_CASE(TYPE, T)                                                                                   \
    case TYPE:                                                                                                 \
        big = packed ? AMX_NAME(big_packed_##T) : AMX_NAME(big_##T);                                           \
        pairs = packed ? AMX_NAME(matmul_packed_##T) : AMX_NAME(matmul_##T);                                   \
        break;
        AMX_SB_CASE(GUILD_TYPE_Q2_K, q2_K)
        AMX_SB_CASE(GUILD_TYPE_Q3_K, q3_K)
        AMX_SB_CASE(GUILD_TYPE_Q4_K, q4_K)
        AMX_SB_CASE(GUILD_TYPE_Q5_K, q5_K)
        AMX_SB_CASE(GUILD_TYPE_Q6_K, q6_K)
        AMX_SB_CASE(GUILD_TYPE_IQ4_XS, iq4_xs)
#undef AMX_SB_CASE
    default: return false;
    }
    if (n == 0 || !bc) {
        AMX_NAME(run)(pairs, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);
        return true;
    }
    big(*bc, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);
    return true;
}

/* The kernel of a covered type (kern_amx_covers); false for the others. */
static bool AMX_NAME(matmul)(guild_type_t type, int64_t n, int64_t nrows, int64_t ntok, const void *w,
                             size_t w_stride, const void *act, size_t act_stride, float *out, size_t ldo)
{
    if (ntok >= KERN_AMX_BIG_MIN_TOKENS && nrows >= KERN_AMX_BIG_MIN_ROWS &&
        AMX_NAME(matmul_sb_order)(&amx_big_default, 0, type, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo))
        return true;
    AMX_NAME(kernel_fn) fn;
    switch (type) {
    case GUILD_TYPE_Q8_0: fn = AMX_NAME(matmul_q8_0); break;
    case GUILD_TYPE_Q4_0: fn = AMX_NAME(matmul_q4_0); break;
    case GUILD_TYPE_Q5_0: fn = AMX_NAME(matmul_q5_0); break;
    case GUILD_TYPE_IQ4_NL: fn = AMX_NAME(matmul_iq4_nl); break;
    case GUILD_TYPE_MXFP4: fn = AMX_NAME(matmul_mxfp4); break;
    case GUILD_TYPE_Q4_1: fn = AMX_NAME(matmul_q4_1); break;
    case GUILD_TYPE_Q5_1: fn = AMX_NAME(matmul_q5_1); break;
    case GUILD_TYPE_Q2_K: fn = AMX_NAME(matmul_q2_K); break;
    case GUILD_TYPE_Q3_K: fn = AMX_NAME(matmul_q3_K); break;
    case GUILD_TYPE_Q4_K: fn = AMX_NAME(matmul_q4_K); break;
    case GUILD_TYPE_Q5_K: fn = AMX_NAME(matmul_q5_K); break;
    case GUILD_TYPE_Q6_K: fn = AMX_NAME(matmul_q6_K); break;
    case GUILD_TYPE_IQ4_XS: fn = AMX_NAME(matmul_iq4_xs); break;
    default: return false;
    }
    AMX_NAME(run)(fn, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);
    return true;
}

/* The same on packed rows (core/kern/pack.h: nrows a multiple of 16) for the types with a packed layout that
 * the tiles read directly (kern_amx_packed_covers); false for the others. */
static bool AMX_NAME(matmul_packed)(guild_type_t type, int64_t n, int64_t nrows, int64_t ntok, const void *w,
                                    size_t w_stride, const void *act, size_t act_stride, float *out, size_t ldo)
{
    if (ntok >= KERN_AMX_BIG_MIN_TOKENS && nrows >= KERN_AMX_BIG_MIN_ROWS)
        return AMX_NAME(matmul_sb_order)(&amx_big_default, 1, type, n, nrows, ntok, w, w_stride, act, act_stride, out,
                                         ldo);
    AMX_NAME(kernel_fn) fn;
    switch (type) {
    case GUILD_TYPE_Q2_K: fn = AMX_NAME(matmul_packed_q2_K); break;
    case GUILD_TYPE_Q3_K: fn = AMX_NAME(matmul_packed_q3_K); break;
    case GUILD_TYPE_Q4_K: fn = AMX_NAME(matmul_packed_q4_K); break;
    case GUILD_TYPE_Q5_K: fn = AMX_NAME(matmul_packed_q5_K); break;
    case GUILD_TYPE_Q6_K: fn = AMX_NAME(matmul_packed_q6_K); break;
    case GUILD_TYPE_IQ4_XS: fn = AMX_NAME(matmul_packed_iq4_xs); break;
    default: return false;
    }
    AMX_NAME(run)(fn, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);
    return true;
}
