/* The packed layouts (core/kern/pack.h): one record per 256-element block column of a group of 16 rows.
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
 * q6_K record (3360 bytes = 16 blocks):
 *   [0, 32)      d of rows 0..15 (fp16)
 *   [32, 288)    16 chunks of 16 bytes, chunk s: scales[s] of rows 0..15 (int8; a vpmovsxbd gives the lanes)
 *   [288, 2336)  32 chunks of 64 bytes, chunk 16 h + 8 p + g (h, p < 2, g < 8): row r's ql[64 h + 32 p + 4 g
 *                .. + 3] at 4 r (low nibbles: elements 128 h + 32 p + 4 g .. + 3; high: the same + 64)
 *   [2336, 3360) 16 chunks of 64 bytes, chunk 8 h + g: row r's qh[32 h + 4 g .. + 3] at 4 r (bits 2 k: the
 *                high 2 bits of elements 128 h + 32 k + 4 g .. + 3, k < 4)
 * The header comes first so that a record is read front to back, which the hardware prefetchers follow. */
#include "core/kern/pack.h"

#include <string.h>

#include "core/quant/blocks.h"

/* A region of a record: `count` chunks of `size` bytes of each of the 16 rows' blocks, chunk c from block
 * offset from + size * c, stored at record offset at + 16 * size * c + size * r for row r (pack), or back
 * (unpack). A header field is a region of one chunk. */
typedef struct pack_region {
    uint16_t at, from, size, count;
} pack_region_t;

/* The layout of a type: regions that cover each block's bytes once (the record is 16 blocks long). */
typedef struct pack_layout {
    guild_type_t type;
    uint16_t block_bytes, nregion;
    pack_region_t region[6];
} pack_layout_t;

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
    {GUILD_TYPE_Q6_K, sizeof(quant_block_q6_K), 4,
     {{0, offsetof(quant_block_q6_K, d), 2, 1},
      {32, offsetof(quant_block_q6_K, scales), 1, QUANT_QK_K / 16},
      {288, offsetof(quant_block_q6_K, ql), 4, QUANT_QK_K / 2 / 4},
      {2336, offsetof(quant_block_q6_K, qh), 4, QUANT_QK_K / 4 / 4}}},
};

static const pack_layout_t *layout_of(guild_type_t type)
{
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++)
        if (layouts[i].type == type)
            return &layouts[i];
    return NULL;
}

bool kern_pack_has(guild_type_t type)
{
    return layout_of(type) != NULL;
}

/* One record: the 16 blocks at blk[r] (plain) <-> rec (packed). */
static void record_pack(const pack_layout_t *l, const char *const blk[KERN_PACK_ROWS], char *rec)
{
    for (int f = 0; f < l->nregion; f++) {
        const pack_region_t *g = &l->region[f];
        for (int c = 0; c < g->count; c++)
            for (int r = 0; r < KERN_PACK_ROWS; r++)
                memcpy(rec + g->at + (KERN_PACK_ROWS * c + r) * g->size, blk[r] + g->from + c * g->size, g->size);
    }
}

static void record_unpack(const pack_layout_t *l, const char *rec, char *const blk[KERN_PACK_ROWS])
{
    for (int f = 0; f < l->nregion; f++) {
        const pack_region_t *g = &l->region[f];
        for (int c = 0; c < g->count; c++)
            for (int r = 0; r < KERN_PACK_ROWS; r++)
                memcpy(blk[r] + g->from + c * g->size, rec + g->at + (KERN_PACK_ROWS * c + r) * g->size, g->size);
    }
}

int kern_pack(guild_type_t type, int64_t n, int64_t nrows, const void *w, size_t w_stride, void *dst,
              guild_err_t *err)
{
    const pack_layout_t *l = layout_of(type);
    if (!l) {
        const quant_type_info_t *info = quant_type_info((uint32_t)type);
        return guild_err_set(err, "type %s has no packed layout (q4_K, iq4_xs and q6_K have)", info ? info->name : "?");
    }
    if (nrows < 0 || nrows % KERN_PACK_ROWS)
        return guild_err_set(err, "packing %lld rows: a packed matrix has a multiple of %d rows", (long long)nrows,
                             KERN_PACK_ROWS);
    if (n < 0 || n % QUANT_QK_K)
        return guild_err_set(err, "packing rows of %lld elements: not a whole number of %d-element blocks",
                             (long long)n, QUANT_QK_K);
    const int64_t nb = n / QUANT_QK_K;
    const size_t rb = (size_t)nb * l->block_bytes;
    for (int64_t g = 0; g < nrows; g += KERN_PACK_ROWS) {
        const char *blk[KERN_PACK_ROWS];
        char *out = (char *)dst + (size_t)g * rb;
        for (int64_t b = 0; b < nb; b++) {
            for (int r = 0; r < KERN_PACK_ROWS; r++)
                blk[r] = (const char *)w + (size_t)(g + r) * w_stride + (size_t)b * l->block_bytes;
            record_pack(l, blk, out + (size_t)b * KERN_PACK_ROWS * l->block_bytes);
        }
    }
    return 0;
}

void kern_unpack(guild_type_t type, int64_t n, int64_t nrows, const void *src, size_t w_stride, void *dst,
                 size_t stride)
{
    const pack_layout_t *l = layout_of(type);
    GUILD_ASSERT(l && nrows % KERN_PACK_ROWS == 0 && n % QUANT_QK_K == 0);
    const int64_t nb = n / QUANT_QK_K;
    for (int64_t g = 0; g < nrows; g += KERN_PACK_ROWS) {
        char *blk[KERN_PACK_ROWS];
        const char *in = (const char *)src + (size_t)g * w_stride;
        for (int64_t b = 0; b < nb; b++) {
            for (int r = 0; r < KERN_PACK_ROWS; r++)
                blk[r] = (char *)dst + (size_t)(g + r) * stride + (size_t)b * l->block_bytes;
            record_unpack(l, in + (size_t)b * KERN_PACK_ROWS * l->block_bytes, blk);
        }
    }
}
