#include "tools/mkmodel/pool.h"

#include <string.h>

#include "core/quant/types.h"
#include "core/util/err.h"
#include "tools/mkmodel/rng.h"

/* Separates the block-choice streams from the value streams of the same tensor (fill.c uses the name's hash). */
#define POOL_STREAM_SALT 0x706f6f6c626c6b73ull /* "poolblks" */

uint64_t mkmodel_pool_rows(const mkmodel_tensor_t *t)
{
    const quant_type_info_t *info = quant_type_info(t->type);
    GUILD_ASSERT(info);
    if (info->block_elems <= 1 || t->n_rows * t->row_bytes < MKMODEL_POOL_MIN_BYTES)
        return 0;
    uint64_t per_row = (uint64_t)t->ne[0] / info->block_elems;
    uint64_t rows = (MKMODEL_POOL_BLOCKS + per_row - 1) / per_row;
    return rows < t->n_rows ? rows : t->n_rows;
}

void mkmodel_pool_copy_rows(const mkmodel_tensor_t *t, uint64_t seed, const void *pool, uint64_t row0,
                            uint64_t n_rows, void *dst)
{
    const quant_type_info_t *info = quant_type_info(t->type);
    const uint64_t pool_rows = mkmodel_pool_rows(t);
    GUILD_ASSERT(pool_rows > 0);
    const uint64_t per_row = (uint64_t)t->ne[0] / info->block_elems, size = info->block_bytes;
    const uint64_t n_pool = pool_rows * per_row;
    GUILD_ASSERT(n_pool <= UINT32_MAX);
    const uint64_t stream = mkmodel_rng_hash(t->name) ^ POOL_STREAM_SALT;
    const uint8_t *src = pool;
    uint8_t *out = dst;
    for (uint64_t r = row0; r < row0 + n_rows; r++, out += t->row_bytes) {
        if (r < pool_rows) {
            memcpy(out, src + r * t->row_bytes, t->row_bytes);
            continue;
        }
        mkmodel_rng_t rng;
        mkmodel_rng_init(&rng, seed, stream, r);
        for (uint64_t b = 0; b < per_row; b++)
            memcpy(out + b * size, src + (uint64_t)mkmodel_rng_below(&rng, (uint32_t)n_pool) * size, size);
    }
}
