/* tools/mkmodel/pool.h — --fill pool: large quantized tensors assembled from a small pool of real blocks.
 *
 * What it is for: benchmarks of real-size models (a Qwen3-30B-A3B-shaped Q4_K_M file), where only the sizes,
 * the layout and realistic block statistics matter. Quantizing every row is the whole cost of writing such a
 * model (minutes); copying blocks makes it as fast as memory and the disk allow. Weights made this way are not
 * independent: every block of a pooled tensor is one of its pool's blocks, so a model written with --fill pool
 * must not stand in for one written exactly where the values themselves matter (reference comparisons).
 *
 * A tensor is pooled when its type is quantized (blocks of more than one element; F32, F16 and BF16 tensors are
 * always exact) and its data is at least MKMODEL_POOL_MIN_BYTES. Its pool is its own first mkmodel_pool_rows(t)
 * rows, made exactly as in exact mode (tools/mkmodel/fill.h): the first rows holding MKMODEL_POOL_BLOCKS blocks,
 * or all rows of a smaller tensor. Rows inside the pool are written as they are (the bytes of exact mode); block
 * b of a later row r is pool block i, with i drawn uniformly from the stream of (seed, tensor, r) (one draw per
 * block in order b = 0, 1, ...; a stream apart from the one that makes row r's values). The bytes therefore
 * depend on the seed, the tensor and the row only, never on --threads.
 */
#ifndef GUILD_MKMODEL_POOL_H
#define GUILD_MKMODEL_POOL_H

#include <stdint.h>

#include "tools/mkmodel/plan.h"

/* Blocks in a pool (fewer only when the tensor is smaller; more by up to one row's blocks when rows do not divide
 * it): about 0.6 MB of Q4_K, enough that blocks repeat rarely within a row or between neighbouring rows. */
#define MKMODEL_POOL_BLOCKS 4096

/* Tensors below this many bytes are written exactly in pool mode too: they cost little either way. */
#define MKMODEL_POOL_MIN_BYTES ((uint64_t)1 << 20)

/* Rows in t's pool: 0 when t is written exactly in pool mode too (not quantized, or smaller than
 * MKMODEL_POOL_MIN_BYTES); else min(n_rows, ceil(MKMODEL_POOL_BLOCKS / blocks per row)). */
uint64_t mkmodel_pool_rows(const mkmodel_tensor_t *t);

/* Writes rows [row0, row0 + n_rows) of t into dst (n_rows * t->row_bytes bytes) from pool, which holds t's first
 * mkmodel_pool_rows(t) rows (> 0) as mkmodel_fill_rows makes them. Thread-safe; pool is only read. */
void mkmodel_pool_copy_rows(const mkmodel_tensor_t *t, uint64_t seed, const void *pool, uint64_t row0,
                            uint64_t n_rows, void *dst);

#endif
