/* The packed layouts (core/kern/pack.h): one record per block column of a group of 16 rows (256 elements for
 * the K quants and iq4_xs, 32 for the 32-element types).
 *
 * q4_K record (2304 bytes = 16 blocks):
 *   [0, 64)      scales[0..3] of rows 0..15, 4 bytes per row     (the 6-bit scales 0-3 and the top bits of 4-7)
 *   [64, 128)    scales[4..7] of rows 0..15                      (the 6-bit mins 0-3 and the top bits of 4-7)
 *   [128, 192)   scales[8..11] of rows 0..15                     (the low 4 bits of scales / mins 4-7)
 *   [192, 224)   d of rows 0..15 (fp16)
 *   [224, 256)   dmin of rows 0..15 (fp16)
 *   [256, 2304)  32 chunks of 64 bytes, chunk 8 j + g (j < 4, g < 8): row r's qs[32 j + 4 g .. + 3] at 4 r
 *                (low nibbles: elements 64 j + 4 g .. + 3 of sub-block 2 j; high: the same of sub-block 2 j + 1)
 * iq4_xs record (2176 bytes = 16 blocks):
 *   [0, 32)      d of rows 0..15 (fp16)
 *   [32, 64)     scales_h of rows 0..15
 *   [64, 128)    scales_l[0..3] of rows 0..15
 *   [128, 2176)  32 chunks of 64 bytes, chunk 4 s + g (s < 8, g < 4): row r's qs[16 s + 4 g .. + 3] at 4 r
 *                (low nibbles: elements 32 s + 4 g .. + 3; high: 32 s + 16 + 4 g .. + 3)
 * q5_K record (2816 bytes = 16 blocks):
 *   [0, 256)     the q4_K header
 *   [256, 768)   8 chunks of 64 bytes, chunk g: row r's qh[4 g .. + 3] at 4 r (bit k: the 5th bit of elements
 *                32 k + 4 g .. + 3)
 *   [768, 2816)  the q4_K chunks of qs
 * q6_K record (3360 bytes = 16 blocks):
 *   [0, 32)      d of rows 0..15 (fp16)
 *   [32, 288)    16 chunks of 16 bytes, chunk s: scales[s] of rows 0..15 (int8; a vpmovsxbd gives the lanes)
 *   [288, 2336)  32 chunks of 64 bytes, chunk 16 h + 8 p + g (h, p < 2, g < 8): row r's ql[64 h + 32 p + 4 g
 *                .. + 3] at 4 r (low nibbles: elements 128 h + 32 p + 4 g .. + 3; high: the same + 64)
 *   [2336, 3360) 16 chunks of 64 bytes, chunk 8 h + g: row r's qh[32 h + 4 g .. + 3] at 4 r (bits 2 k: the
 *                high 2 bits of elements 128 h + 32 k + 4 g .. + 3, k < 4)
 * q2_K record (1344 bytes = 16 blocks):
 *   [0, 256)     4 chunks of 64 bytes, chunk i: row r's scales[4 i .. + 3] at 4 r (low nibbles: scales, high: mins)
 *   [256, 288)   d of rows 0..15 (fp16)
 *   [288, 320)   dmin of rows 0..15 (fp16)
 *   [320, 1344)  16 chunks of 64 bytes, chunk c: row r's qs[4 c .. + 3] at 4 r (bit pair k of byte 32 h + l: element
 *                128 h + 32 k + l)
 * q3_K record (1760 bytes = 16 blocks):
 *   [0, 192)     3 chunks of 64 bytes, chunk i: row r's scales[4 i .. + 3] at 4 r (the 12 packed scale bytes)
 *   [192, 224)   d of rows 0..15 (fp16)
 *   [224, 736)   8 chunks of 64 bytes, chunk g: row r's hmask[4 g .. + 3] at 4 r
 *   [736, 1760)  16 chunks of 64 bytes, chunk c: row r's qs[4 c .. + 3] at 4 r (as q2_K's)
 * q4_0, iq4_nl record (288 bytes = 16 blocks of 32 elements):
 *   [0, 32)      d of rows 0..15 (fp16)
 *   [32, 288)    4 chunks of 64 bytes, chunk g: row r's qs[4 g .. + 3] at 4 r (low nibbles: elements 4 g .. + 3;
 *                high: 16 + 4 g .. + 3)
 * mxfp4 record (272 bytes):
 *   [0, 16)      e of rows 0..15
 *   [16, 272)    the chunks of qs, as q4_0's
 * q8_0 record (544 bytes):
 *   [0, 32)      d of rows 0..15 (fp16)
 *   [32, 544)    8 chunks of 64 bytes, chunk g: row r's qs[4 g .. + 3] at 4 r (elements 4 g .. + 3)
 * The header comes first so that a record is read front to back, which the hardware prefetchers follow. */
#include "core/kern/pack.h"
#include "core/kern/pack_layout.h"

#include <string.h>

#include "core/kern/cpu.h"
#include "core/quant/blocks.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* The regions of each type (core/kern/pack_layout.h): they cover each block's bytes once; a header field is a
 * region of one chunk. */
typedef kern_pack_region_t pack_region_t;
typedef kern_pack_layout_t pack_layout_t;

static const pack_layout_t layouts[] = {
    {GUILD_TYPE_Q4_K, sizeof(quant_block_q4_K), 6,
     {{0, offsetof(quant_block_q4_K, scales), 4, 1},
      {64, offsetof(quant_block_q4_K, scales) + 4, 4, 1},
      {128, offsetof(quant_block_q4_K, scales) + 8, 4, 1},
      {192, offsetof(quant_block_q4_K, d), 2, 1},
      {224, offsetof(quant_block_q4_K, dmin), 2, 1},
      {256, offsetof(quant_block_q4_K, qs), 4, QUANT_QK_K / 2 / 4}}},
    {GUILD_TYPE_IQ4_XS, sizeof(quant_block_iq4_xs), 4,
     {{0, offsetof(quant_block_iq4_xs, d), 2, 1},
      {32, offsetof(quant_block_iq4_xs, scales_h), 2, 1},
      {64, offsetof(quant_block_iq4_xs, scales_l), 4, 1},
      {128, offsetof(quant_block_iq4_xs, qs), 4, QUANT_QK_K / 2 / 4}}},
    {GUILD_TYPE_Q5_K, sizeof(quant_block_q5_K), 7,
     {{0, offsetof(quant_block_q5_K, scales), 4, 1},
      {64, offsetof(quant_block_q5_K, scales) + 4, 4, 1},
      {128, offsetof(quant_block_q5_K, scales) + 8, 4, 1},
      {192, offsetof(quant_block_q5_K, d), 2, 1},
      {224, offsetof(quant_block_q5_K, dmin), 2, 1},
      {256, offsetof(quant_block_q5_K, qh), 4, QUANT_QK_K / 8 / 4},
      {768, offsetof(quant_block_q5_K, qs), 4, QUANT_QK_K / 2 / 4}}},
    {GUILD_TYPE_Q6_K, sizeof(quant_block_q6_K), 4,
     {{0, offsetof(quant_block_q6_K, d), 2, 1},
      {32, offsetof(quant_block_q6_K, scales), 1, QUANT_QK_K / 16},
      {288, offsetof(quant_block_q6_K, ql), 4, QUANT_QK_K / 2 / 4},
      {2336, offsetof(quant_block_q6_K, qh), 4, QUANT_QK_K / 4 / 4}}},
    {GUILD_TYPE_Q2_K, sizeof(quant_block_q2_K), 4,
     {{0, offsetof(quant_block_q2_K, scales), 4, QUANT_QK_K / 16 / 4},
      {256, offsetof(quant_block_q2_K, d), 2, 1},
      {288, offsetof(quant_block_q2_K, dmin), 2, 1},
      {320, offsetof(quant_block_q2_K, qs), 4, QUANT_QK_K / 4 / 4}}},
    {GUILD_TYPE_Q3_K, sizeof(quant_block_q3_K), 4,
     {{0, offsetof(quant_block_q3_K, scales), 4, 3},
      {192, offsetof(quant_block_q3_K, d), 2, 1},
      {224, offsetof(quant_block_q3_K, hmask), 4, QUANT_QK_K / 8 / 4},
      {736, offsetof(quant_block_q3_K, qs), 4, QUANT_QK_K / 4 / 4}}},
    {GUILD_TYPE_Q4_0, sizeof(quant_block_q4_0), 2,
     {{0, offsetof(quant_block_q4_0, d), 2, 1}, {32, offsetof(quant_block_q4_0, qs), 4, QUANT_QK4_0 / 2 / 4}}},
    {GUILD_TYPE_IQ4_NL, sizeof(quant_block_iq4_nl), 2,
     {{0, offsetof(quant_block_iq4_nl, d), 2, 1}, {32, offsetof(quant_block_iq4_nl, qs), 4, QUANT_QK4_NL / 2 / 4}}},
    {GUILD_TYPE_MXFP4, sizeof(quant_block_mxfp4), 2,
     {{0, offsetof(quant_block_mxfp4, e), 1, 1}, {16, offsetof(quant_block_mxfp4, qs), 4, QUANT_QK_MXFP4 / 2 / 4}}},
    {GUILD_TYPE_Q8_0, sizeof(quant_block_q8_0), 2,
     {{0, offsetof(quant_block_q8_0, d), 2, 1}, {32, offsetof(quant_block_q8_0, qs), 4, QUANT_QK8_0 / 4}}},
};

static const pack_layout_t *layout_of(guild_type_t type)
{
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++)
        if (layouts[i].type == (uint32_t)type)
            return &layouts[i];
    return NULL;
}

const kern_pack_layout_t *kern_pack_layout(guild_type_t type)
{
    return layout_of(type);
}

bool kern_pack_has(guild_type_t type)
{
    return layout_of(type) != NULL;
}

/* One region of one record: the 16 plain blocks (row r at plain + r * pstride) <-> rec (packed), scalar, with
 * copies of a constant size (a memcpy of a variable size is a call). */
#define PACK_REGION_COPY(SIZE, DIR)                                                                            \
    for (int r = 0; r < KERN_PACK_ROWS; r++)                                                                  \
        for (int c = 0; c < g->count; c++) {                                                                  \
            char *packed = rec + g->at + (KERN_PACK_ROWS * c + r) * (SIZE);                                   \
            char *row = plain + (size_t)r * pstride + g->from + c * (SIZE);                                   \
            if (DIR)                                                                                          \
                memcpy(packed, row, SIZE);                                                                    \
            else                                                                                              \
                memcpy(row, packed, SIZE);                                                                    \
        }

#if defined(__x86_64__)
/* The regions of 4-byte chunks (the quants: all but a few header bytes) 16 chunks at a time by AVX-512 gathers:
 * one 64-byte load or store per 16 dwords instead of 16 scalar copies (masked where a region has fewer than 16
 * chunks per row: the 32-element types' 4 or 8). The unpack fallback of kern_matmul_packed needs it: scalar, it
 * cost as much as the products it feeds, or more. */
__attribute__((target("avx512f"))) static void region4_avx512(const pack_region_t *g, char *plain, size_t pstride,
                                                             char *rec, bool to_packed)
{
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    if (to_packed) {
        const __m512i rows = _mm512_mullo_epi32(lane, _mm512_set1_epi32((int)pstride));
        for (int c = 0; c < g->count; c++)
            _mm512_storeu_si512(rec + g->at + 64 * c, _mm512_i32gather_epi32(rows, plain + g->from + 4 * c, 1));
        return;
    }
    const __m512i chunks = _mm512_slli_epi32(lane, 6); /* 64 c */
    for (int r = 0; r < KERN_PACK_ROWS; r++)
        for (int c = 0; c < g->count; c += 16) {
            const __mmask16 m = g->count - c >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (g->count - c)) - 1);
            _mm512_mask_storeu_epi32(plain + (size_t)r * pstride + g->from + 4 * c, m,
                                     _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, chunks,
                                                                 rec + g->at + 64 * c + 4 * r, 1));
        }
}
#endif

/* to_packed: plain -> packed; else packed -> plain. */
static void record_copy(const pack_layout_t *l, char *plain, size_t pstride, char *rec, bool to_packed)
{
#if defined(__x86_64__)
    const bool gather = kern_cpu()->avx512f && pstride < (1u << 26);
#endif
    for (int f = 0; f < l->nregion; f++) {
        const pack_region_t *g = &l->region[f];
#if defined(__x86_64__)
        if (gather && g->size == 4 && (g->count % 16 == 0 || g->count < 16)) {
            region4_avx512(g, plain, pstride, rec, to_packed);
            continue;
        }
#endif
        switch (g->size) {
        case 1: PACK_REGION_COPY(1, to_packed) break;
        case 2: PACK_REGION_COPY(2, to_packed) break;
        case 4: PACK_REGION_COPY(4, to_packed) break;
        default: GUILD_ASSERT(!"a region's chunks are 1, 2 or 4 bytes");
        }
    }
}

int kern_pack(guild_type_t type, int64_t n, int64_t nrows, const void *w, size_t w_stride, void *dst,
              guild_err_t *err)
{
    const pack_layout_t *l = layout_of(type);
    if (!l) {
        const quant_type_info_t *info = quant_type_info((uint32_t)type);
        return guild_err_set(err,
                             "type %s has no packed layout (q2_K, q3_K, q4_K, q5_K, q6_K, iq4_xs, q4_0, iq4_nl, "
                             "mxfp4 and q8_0 have)",
                             info ? info->name : "?");
    }
    if (nrows < 0 || nrows % KERN_PACK_ROWS)
        return guild_err_set(err, "packing %lld rows: a packed matrix has a multiple of %d rows", (long long)nrows,
                             KERN_PACK_ROWS);
    const int64_t be = quant_type_info((uint32_t)type)->block_elems;
    if (n < 0 || n % be)
        return guild_err_set(err, "packing rows of %lld elements: not a whole number of %lld-element blocks",
                             (long long)n, (long long)be);
    const int64_t nb = n / be;
    const size_t rb = (size_t)nb * l->block_bytes;
    for (int64_t g = 0; g < nrows; g += KERN_PACK_ROWS) {
        char *out = (char *)dst + (size_t)g * rb;
        for (int64_t b = 0; b < nb; b++) /* w is only read: record_copy writes the record when to_packed */
            record_copy(l, (char *)w + (size_t)g * w_stride + (size_t)b * l->block_bytes, w_stride,
                        out + (size_t)b * KERN_PACK_ROWS * l->block_bytes, true);
    }
    return 0;
}

void kern_unpack(guild_type_t type, int64_t n, int64_t nrows, const void *src, size_t w_stride, void *dst,
                 size_t stride)
{
    const pack_layout_t *l = layout_of(type);
    GUILD_ASSERT(l);
    const int64_t be = quant_type_info((uint32_t)type)->block_elems;
    GUILD_ASSERT(nrows % KERN_PACK_ROWS == 0 && n % be == 0);
    const int64_t nb = n / be;
    for (int64_t g = 0; g < nrows; g += KERN_PACK_ROWS) {
        const char *in = (const char *)src + (size_t)g * w_stride;
        for (int64_t b = 0; b < nb; b++)
            record_copy(l, (char *)dst + (size_t)g * stride + (size_t)b * l->block_bytes, stride,
                        (char *)in + (size_t)b * KERN_PACK_ROWS * l->block_bytes, false);
    }
}
