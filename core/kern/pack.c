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
 * The header comes first so that a record is read front to back, which the hardware prefetchers follow. */
#include "core/kern/pack.h"

#include <string.h>

#include "core/quant/blocks.h"

/* A field of a record: `size` bytes of each of the 16 rows' blocks at block offset `from`, stored row after
 * row at record offset `at` (pack) or back (unpack). */
typedef struct pack_field {
    uint16_t at, from, size;
} pack_field_t;

/* The layout of a type: its header fields, then the qs chunks (nchunk chunks of 4 bytes per row, chunk c
 * from block offset qs + 4 c). */
typedef struct pack_layout {
    guild_type_t type;
    uint16_t block_bytes, nfield, qs, chunks_at;
    pack_field_t field[5];
} pack_layout_t;

static const pack_layout_t layouts[] = {
    {GUILD_TYPE_Q4_K, sizeof(quant_block_q4_K), 5, offsetof(quant_block_q4_K, qs), 256,
     {{0, offsetof(quant_block_q4_K, scales), 4},
      {64, offsetof(quant_block_q4_K, scales) + 4, 4},
      {128, offsetof(quant_block_q4_K, scales) + 8, 4},
      {192, offsetof(quant_block_q4_K, d), 2},
      {224, offsetof(quant_block_q4_K, dmin), 2}}},
    {GUILD_TYPE_IQ4_XS, sizeof(quant_block_iq4_xs), 3, offsetof(quant_block_iq4_xs, qs), 128,
     {{0, offsetof(quant_block_iq4_xs, d), 2},
      {32, offsetof(quant_block_iq4_xs, scales_h), 2},
      {64, offsetof(quant_block_iq4_xs, scales_l), 4}}},
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
    for (int f = 0; f < l->nfield; f++)
        for (int r = 0; r < KERN_PACK_ROWS; r++)
            memcpy(rec + l->field[f].at + r * l->field[f].size, blk[r] + l->field[f].from, l->field[f].size);
    const int nchunk = QUANT_QK_K / 2 / 4;
    for (int c = 0; c < nchunk; c++)
        for (int r = 0; r < KERN_PACK_ROWS; r++)
            memcpy(rec + l->chunks_at + 64 * c + 4 * r, blk[r] + l->qs + 4 * c, 4);
}

static void record_unpack(const pack_layout_t *l, const char *rec, char *const blk[KERN_PACK_ROWS])
{
    for (int f = 0; f < l->nfield; f++)
        for (int r = 0; r < KERN_PACK_ROWS; r++)
            memcpy(blk[r] + l->field[f].from, rec + l->field[f].at + r * l->field[f].size, l->field[f].size);
    const int nchunk = QUANT_QK_K / 2 / 4;
    for (int c = 0; c < nchunk; c++)
        for (int r = 0; r < KERN_PACK_ROWS; r++)
            memcpy(blk[r] + l->qs + 4 * c, rec + l->chunks_at + 64 * c + 4 * r, 4);
}

int kern_pack(guild_type_t type, int64_t n, int64_t nrows, const void *w, size_t w_stride, void *dst,
              guild_err_t *err)
{
    const pack_layout_t *l = layout_of(type);
    if (!l) {
        const quant_type_info_t *info = quant_type_info((uint32_t)type);
        return guild_err_set(err, "type %s has no packed layout (q4_K and iq4_xs have)", info ? info->name : "?");
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
