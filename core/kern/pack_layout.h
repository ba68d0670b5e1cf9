/* core/kern/pack_layout.h — the packed layouts of core/kern/pack.h as data, shared by C and CUDA: the GPU
 * reads packed expert copies (the CPU workers' own) and restores the plain rows on the device with the same
 * table and the same arithmetic as kern_unpack (gpu-worker/dense/cuda/expert_stream.cu).
 *
 * A record (one 256-element block column of a group of 16 rows) is cut into regions; region g holds `count`
 * chunks of `size` bytes of each of the 16 rows' blocks: chunk c of row r comes from block offset
 * from + size * c and sits at record offset at + 16 * size * c + size * r. The regions cover each block once.
 * Only plain C that is also valid C++ (nvcc), as core/quant/blocks.h. */
#ifndef GUILD_KERN_PACK_LAYOUT_H
#define GUILD_KERN_PACK_LAYOUT_H

#ifdef __cplusplus
#include <cstddef>
#include <cstdint>
#else
#include <stddef.h>
#include <stdint.h>
#endif

#ifdef __CUDACC__
#define KERN_PACK_FN __host__ __device__ static inline
#else
#define KERN_PACK_FN static inline
#endif

#define KERN_PACK_GROUP_ROWS 16 /* KERN_PACK_ROWS */
#define KERN_PACK_MAX_REGIONS 7

typedef struct kern_pack_region {
    uint16_t at, from, size, count;
} kern_pack_region_t;

typedef struct kern_pack_layout {
    uint32_t type;          /* guild_type_t */
    uint16_t block_bytes, nregion;
    kern_pack_region_t region[KERN_PACK_MAX_REGIONS];
} kern_pack_layout_t;

/* Where byte `off` of a 16-row group in the plain layout (rows of row_bytes, a whole number of blocks; off <
 * 16 * row_bytes) lies in the packed group: the inverse of the record's placement. */
KERN_PACK_FN size_t kern_pack_packed_offset(const kern_pack_layout_t *l, size_t row_bytes, size_t off)
{
    const size_t bb = l->block_bytes;
    const size_t r = off / row_bytes, in_row = off - r * row_bytes;
    const size_t b = in_row / bb, o = in_row - b * bb;
    size_t at = 0;
    for (int g = 0; g < l->nregion; g++) {
        const kern_pack_region_t *R = &l->region[g];
        if (o >= R->from && o < (size_t)R->from + (size_t)R->size * R->count) {
            const size_t c = (o - R->from) / R->size, k = (o - R->from) - c * R->size;
            at = R->at + (KERN_PACK_GROUP_ROWS * c + r) * R->size + k;
            break;
        }
    }
    return b * KERN_PACK_GROUP_ROWS * bb + at;
}

#endif
