/* core/kern/amx.h — internal: the AMX-INT8 kernels for large token groups (prefill), outside the dispatch
 * table, for amx_table.c and the tests.
 *
 * The amx level's table (kern_fill_amx) runs these kernels for ntok >= KERN_AMX_MIN_TOKENS and the
 * avx512-vnni level's kernel below that (decode, verification windows: there the tiles would only add the cost
 * of laying the weights out). Results are bit-identical to the scalar references (core/kern/kern.h), as for
 * every level.
 *
 * Packed rows (core/kern/pack.h): for Q2_K-Q6_K and IQ4_XS the tiles also take their weights straight
 * from a packed matrix's records (kern_amx_matmul_packed): a record already holds each row's 4-byte groups in
 * row lanes, so the B tiles are formed without the transposition or any unpacking; kern_matmul_packed_at runs
 * it on the amx level from KERN_AMX_MIN_TOKENS tokens, at any count above.
 *
 * Domain: exact for any activation quant bytes (-128 included); for Q4_K/Q5_K the Q8_K bsums must be the
 * quantizers' (|bsums[2s] + bsums[2s+1]| < 2^15, as for any sum of 32 int8), as the other levels' kernels
 * assume.
 */
#ifndef GUILD_KERN_AMX_H
#define GUILD_KERN_AMX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/quant/types.h"

/* Token count from which the amx level uses the tiles (one full tile of tokens: below it the weights' tile
 * layout is paid for fewer than 16 tokens, and the VNNI kernels are tuned for those counts). */
#define KERN_AMX_MIN_TOKENS 16

/* The 256-element types (Q2_K-Q6_K, IQ4_XS; plain and packed rows) run in the work order for many tokens
 * (amx_kernels.h's matmul_sb_big: per range of at most KERN_AMX_BIG_ROWS rows and block column, the activations
 * gathered into aligned tile rows once, the weights of KERN_AMX_BIG_ROW_GROUPS groups of 16 rows laid out once
 * and every token pair run over them) from KERN_AMX_BIG_MIN_TOKENS tokens and KERN_AMX_BIG_MIN_ROWS rows a
 * call; below either, the token-pair order over chunks of blocks. Both give the same bits. The tuning is the
 * device machine's measurement (bench/results/amxbig-h200-2026-12-02-s26.md). */
#define KERN_AMX_BIG_MIN_TOKENS 64
#define KERN_AMX_BIG_MIN_ROWS 64
#define KERN_AMX_BIG_ROWS 128
#define KERN_AMX_BIG_ROW_GROUPS 2
#define KERN_AMX_BIG_PREFETCH 1
#define KERN_AMX_BIG_DEPTH 1

/* The many-token order's tuning (tests, benchmarks: kern_amx_sb_matmul). */
typedef struct kern_amx_big {
    int row_groups; /* groups of 16 rows per pass over the token pairs: 1..4 */
    int prefetch;   /* 1: the next token pair's activation tiles are prefetched into L1 */
    int depth;      /* steps (token pair, row group) between a step's tile products and its float stage: 0..2 */
} kern_amx_big_t;

/* True when `type` has an AMX kernel: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
 * IQ4_XS (every computable type but F32/F16/BF16 and the lattice IQ types IQ1-IQ3). */
bool kern_amx_covers(guild_type_t type);

/* kern_matmul's contract for a covered type and any ntok >= 1 (no threshold), on the tile unit; needs
 * kern_level_supported(KERN_LEVEL_AMX) (asserted). */
void kern_amx_matmul(guild_type_t type, int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                     const void *act, size_t act_stride, float *out, size_t ldo);

/* True when `type` has an AMX kernel on packed rows: Q2_K-Q6_K, IQ4_XS (every type with a packed
 * layout, kern_pack_has). */
bool kern_amx_packed_covers(guild_type_t type);

/* kern_matmul_packed's contract (same bytes as kern_matmul on the plain rows) for a type kern_amx_packed_covers
 * and any ntok >= 1, on the tile unit: w at the start of a group, nrows a multiple of KERN_PACK_ROWS (asserted);
 * needs kern_level_supported(KERN_LEVEL_AMX) (asserted). */
void kern_amx_matmul_packed(guild_type_t type, int64_t n, int64_t nrows, int64_t ntok, const void *w,
                            size_t w_stride, const void *act, size_t act_stride, float *out, size_t ldo);

/* The same kernel code with the tile instructions replaced by the C model of core/kern/x86/amx_tile.h (tests
 * only: much slower); needs kern_level_supported(KERN_LEVEL_AVX512_VNNI) (asserted). */
void kern_amx_emu_matmul(guild_type_t type, int64_t n, int64_t nrows, int64_t ntok, const void *w,
                         size_t w_stride, const void *act, size_t act_stride, float *out, size_t ldo);

/* kern_amx_matmul_packed on the C model (tests only); needs kern_level_supported(KERN_LEVEL_AVX512_VNNI)
 * (asserted). */
void kern_amx_emu_matmul_packed(guild_type_t type, int64_t n, int64_t nrows, int64_t ntok, const void *w,
                                size_t w_stride, const void *act, size_t act_stride, float *out, size_t ldo);

/* A 256-element type's AMX kernel (Q2_K-Q6_K, IQ4_XS; asserted) in a chosen work order at any ntok >= 1, plain
 * (packed false: kern_amx_matmul's contract) or packed rows (kern_amx_matmul_packed's): big NULL is the
 * token-pair order, else the many-token order with that tuning. Same bits either way. Needs
 * kern_level_supported(KERN_LEVEL_AMX) (asserted). */
void kern_amx_sb_matmul(const kern_amx_big_t *big, bool packed, guild_type_t type, int64_t n, int64_t nrows,
                        int64_t ntok, const void *w, size_t w_stride, const void *act, size_t act_stride, float *out,
                        size_t ldo);

/* kern_amx_sb_matmul on the C model (tests only); needs kern_level_supported(KERN_LEVEL_AVX512_VNNI) (asserted). */
void kern_amx_emu_sb_matmul(const kern_amx_big_t *big, bool packed, guild_type_t type, int64_t n, int64_t nrows,
                            int64_t ntok, const void *w, size_t w_stride, const void *act, size_t act_stride,
                            float *out, size_t ldo);

#endif
