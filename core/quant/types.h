/* core/quant/types.h — the tensor types of GGUF/ggml: ids (as stored in GGUF files), block geometry, and which
 * ones Guild can compute with. The block layouts themselves are in core/quant/blocks.h. */
#ifndef GUILD_QUANT_TYPES_H
#define GUILD_QUANT_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/util/err.h"

/* Values are ggml's type ids, i.e. what a GGUF tensor info stores. Gaps are ids ggml retired. */
typedef enum guild_type {
    GUILD_TYPE_F32 = 0,
    GUILD_TYPE_F16 = 1,
    GUILD_TYPE_Q4_0 = 2,
    GUILD_TYPE_Q4_1 = 3,
    GUILD_TYPE_Q5_0 = 6,
    GUILD_TYPE_Q5_1 = 7,
    GUILD_TYPE_Q8_0 = 8,
    GUILD_TYPE_Q8_1 = 9,
    GUILD_TYPE_Q2_K = 10,
    GUILD_TYPE_Q3_K = 11,
    GUILD_TYPE_Q4_K = 12,
    GUILD_TYPE_Q5_K = 13,
    GUILD_TYPE_Q6_K = 14,
    GUILD_TYPE_Q8_K = 15,
    GUILD_TYPE_IQ2_XXS = 16,
    GUILD_TYPE_IQ2_XS = 17,
    GUILD_TYPE_IQ3_XXS = 18,
    GUILD_TYPE_IQ1_S = 19,
    GUILD_TYPE_IQ4_NL = 20,
    GUILD_TYPE_IQ3_S = 21,
    GUILD_TYPE_IQ2_S = 22,
    GUILD_TYPE_IQ4_XS = 23,
    GUILD_TYPE_I8 = 24,
    GUILD_TYPE_I16 = 25,
    GUILD_TYPE_I32 = 26,
    GUILD_TYPE_I64 = 27,
    GUILD_TYPE_F64 = 28,
    GUILD_TYPE_IQ1_M = 29,
    GUILD_TYPE_BF16 = 30,
    GUILD_TYPE_TQ1_0 = 34,
    GUILD_TYPE_TQ2_0 = 35,
    GUILD_TYPE_MXFP4 = 39,
    GUILD_TYPE_COUNT = 40, /* one past the largest id */
} guild_type_t;

typedef struct quant_type_info {
    const char *name;       /* ggml's name: "q4_K", "iq4_xs", "f16" ... */
    uint32_t block_elems;   /* elements per block (1 for plain types) */
    uint32_t block_bytes;   /* bytes per block */
    bool computable;        /* Guild can dequantize it and use it as a weight */
    guild_type_t dot_type;  /* activation format of this type's dot products (meaningful when computable) */
} quant_type_info_t;

/* Geometry and capabilities of a type id as found in a file; NULL for an id ggml never defined or retired. */
const quant_type_info_t *quant_type_info(uint32_t type);

/* The type whose name is `name` (ggml's spelling, case-insensitive: "Q4_K", "q4_k"); -1 if none. */
int quant_type_from_name(const char *name);

/* Bytes of a row of n elements of `type`. Fails (message in err) when the type is unknown, n is not a multiple
 * of the block size, or the size overflows. */
int quant_row_bytes(uint32_t type, uint64_t n, uint64_t *out, guild_err_t *err);

#endif
