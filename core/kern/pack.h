/* core/kern/pack.h — weight matrices "packed": rows re-laid 16 at a time for the decode kernels.
 *
 * In a packed matrix one 64-byte load holds the same 4 quant bytes of 16 rows, so a one-token kernel sums
 * every row in its own int32 lane (vpdpbusd against 4 activation bytes broadcast): no per-row reductions or
 * shuffles, and about half the instructions per weight byte of the plain kernels. From DRAM on few cores
 * that is what lets a kernel keep pace with memory: a plain kernel computes barely faster per core than the
 * core's share of DRAM delivers (measurements: bench/results/code-comment-measurements.md).
 *
 * Layout. A packed matrix has the plain one's size. The group of rows 16 g .. 16 g + 15 occupies
 * 16 * w_stride bytes at w + 16 g * w_stride (w_stride: bytes per row, at least the plain row size), so a row
 * range that starts on a multiple of 16 is addressed exactly as in the plain layout. A group is nb records,
 * one per block column (256 elements for the K quants and iq4_xs, 32 for q4_0, iq4_nl, mxfp4 and q8_0), each
 * the 16 rows' blocks of that column re-laid (pack.c describes the record of each type); a record is 16 plain
 * blocks long. The 32-element types' records let rows whose width is no multiple of 256 (gpt-oss's 2880) pack.
 *
 * Packing is a layout, not a quantization: kern_matmul_packed gives, bit for bit, what kern_matmul gives on
 * the plain rows, at every level (kern_unpack restores the plain bytes exactly). On the amx level the AMX
 * kernels read the records directly from KERN_AMX_MIN_TOKENS tokens on, at any count (core/kern/amx.h). Other
 * levels without a packed kernel for a type, and token counts above KERN_PACK_MAX_TOKENS there, unpack the rows
 * into scratch and run the plain kernel (below the amx level the 32-element types' packed kernels take any
 * count instead, KERN_PACK_MAX_TOKENS tokens per pass); kern_pack_native says whether packing pays on this CPU.
 */
#ifndef GUILD_KERN_PACK_H
#define GUILD_KERN_PACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/kern/kern.h"
#include "core/quant/types.h"
#include "core/util/err.h"

#define KERN_PACK_ROWS 16
/* Above this many tokens kern_matmul_packed unpacks and runs the plain multi-token kernels: the packed VNNI
 * kernels' work grows with the tokens (no weight reuse across tokens beyond the tiles of 4), while at 16 tokens
 * on one core they are still well ahead of the plain VNNI kernel. On the amx level the packed AMX kernels take
 * over from KERN_AMX_MIN_TOKENS tokens instead, with no upper limit and no unpacking (core/kern/amx.h). */
#define KERN_PACK_MAX_TOKENS 16

struct kern_pack_layout; /* core/kern/pack_layout.h */

/* The packed layout of `type` as data (core/kern/pack_layout.h), or NULL when it has none. */
const struct kern_pack_layout *kern_pack_layout(guild_type_t type);

/* True when `type` has a packed layout (q2_K, q3_K, q4_K, q5_K, q6_K, iq4_xs; q4_0, iq4_nl, mxfp4, q8_0). */
bool kern_pack_has(guild_type_t type);

/* True when the active level (kern_level()) has a packed kernel for `type`: packing then speeds up one-token
 * and few-token products. False for types without a layout. */
bool kern_pack_native(guild_type_t type);

/* Packs nrows plain rows of n elements (w, w_stride bytes apart) into dst (rows of exactly the plain row
 * size: nrows * row bytes in all; dst must not overlap w). Fails (message in err) when `type` has no packed
 * layout, nrows is not a multiple of KERN_PACK_ROWS or n not a whole number of the type's blocks. */
int kern_pack(guild_type_t type, int64_t n, int64_t nrows, const void *w, size_t w_stride, void *dst,
              guild_err_t *err);

/* The reverse of kern_pack: nrows packed rows (src, w_stride bytes apart) back to plain rows at dst, `stride`
 * bytes apart. type must have a layout and nrows be a multiple of KERN_PACK_ROWS (asserted). */
void kern_unpack(guild_type_t type, int64_t n, int64_t nrows, const void *src, size_t w_stride, void *dst,
                 size_t stride);

/* kern_matmul on a packed matrix: w at the start of a group, nrows a multiple of KERN_PACK_ROWS (asserted),
 * rows w_stride bytes apart as above; same results, bit for bit, as kern_matmul on the plain rows. */
void kern_matmul_packed(guild_type_t type, int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                        const void *act, size_t act_stride, float *out, size_t ldo);

/* At an explicit level (tests); `level` must be supported (asserted). */
void kern_matmul_packed_at(kern_level_t level, guild_type_t type, int64_t n, int64_t nrows, int64_t ntok,
                           const void *w, size_t w_stride, const void *act, size_t act_stride, float *out,
                           size_t ldo);

#endif
