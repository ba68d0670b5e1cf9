/* core/quant/blocks.h — the byte layout of every GGUF/ggml quantized block, shared by C and CUDA code.
 *
 * Each struct is byte-exact with ggml's definition (ggml/src/ggml-common.h): same fields, same order, same
 * size, no padding (every field is a byte array or a naturally aligned 16-/32-bit value). Half-precision
 * values are stored as raw IEEE binary16 bits (quant_half_t = uint16_t) so that this header needs neither
 * <cuda_fp16.h> nor compiler half support; core/quant/fp16.h converts them. ggml's unions of two halves with
 * a half2 (Q4_1 dm, Q8_1 ds, ...) are plain pairs of fields here: the bytes are the same.
 *
 * A row of n elements of a type is n / QUANT_QK_<type> consecutive blocks, no gaps, no alignment beyond the
 * struct's own (2 bytes for most, 4 for Q8_K, 1 for IQ1_M and MXFP4).
 *
 * Only plain C that is also valid C++ (nvcc): fixed-width types, no flexible arrays, no anonymous unions.
 */
#ifndef GUILD_QUANT_BLOCKS_H
#define GUILD_QUANT_BLOCKS_H

#ifdef __cplusplus
#include <cstdint>
#define GUILD_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#include <stdint.h>
#define GUILD_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

/* Element types of the plain formats. */
typedef uint16_t quant_half_t; /* IEEE binary16 bits (ggml_half / F16) */
typedef uint16_t quant_bf16_t; /* bfloat16 bits: the top 16 bits of an IEEE binary32 (BF16) */

GUILD_STATIC_ASSERT(sizeof(quant_half_t) == 2, "f16 element size");
GUILD_STATIC_ASSERT(sizeof(quant_bf16_t) == 2, "bf16 element size");

/* Elements per block. */
#define QUANT_QK_K 256 /* super-block of the K and IQ types */
#define QUANT_K_SCALE_SIZE 12
#define QUANT_QK4_0 32
#define QUANT_QK4_1 32
#define QUANT_QK5_0 32
#define QUANT_QK5_1 32
#define QUANT_QK8_0 32
#define QUANT_QK8_1 32
#define QUANT_QK4_NL 32
#define QUANT_QK_MXFP4 32

/* ---- 32-element blocks: x = d * q (+ m) ---------------------------------------------------------------- */

/* x[j] = d * ((qs[j] & 15) - 8), x[j + 16] = d * ((qs[j] >> 4) - 8), j < 16. */
typedef struct quant_block_q4_0 {
    quant_half_t d;                 /* scale */
    uint8_t qs[QUANT_QK4_0 / 2];    /* low nibble: element j, high nibble: element j + 16 */
} quant_block_q4_0;
GUILD_STATIC_ASSERT(sizeof(quant_block_q4_0) == 18, "q4_0 block size");

/* x[j] = d * (qs[j] & 15) + m, x[j + 16] = d * (qs[j] >> 4) + m. */
typedef struct quant_block_q4_1 {
    quant_half_t d;                 /* scale */
    quant_half_t m;                 /* min (offset) */
    uint8_t qs[QUANT_QK4_1 / 2];    /* nibbles as in q4_0 */
} quant_block_q4_1;
GUILD_STATIC_ASSERT(sizeof(quant_block_q4_1) == 20, "q4_1 block size");

/* x[j] = d * (((qs[j] & 15) | bit(qh, j) << 4) - 16), x[j + 16] likewise with qs[j] >> 4 and bit j + 16. */
typedef struct quant_block_q5_0 {
    quant_half_t d;                 /* scale */
    uint8_t qh[4];                  /* 5th bits, little-endian uint32: bit j is element j's */
    uint8_t qs[QUANT_QK5_0 / 2];    /* low 4 bits, nibbles as in q4_0 */
} quant_block_q5_0;
GUILD_STATIC_ASSERT(sizeof(quant_block_q5_0) == 22, "q5_0 block size");

/* x = d * q5 + m, q5 in 0..31 built as in q5_0. */
typedef struct quant_block_q5_1 {
    quant_half_t d;                 /* scale */
    quant_half_t m;                 /* min (offset) */
    uint8_t qh[4];                  /* 5th bits, little-endian uint32 */
    uint8_t qs[QUANT_QK5_1 / 2];    /* low 4 bits */
} quant_block_q5_1;
GUILD_STATIC_ASSERT(sizeof(quant_block_q5_1) == 24, "q5_1 block size");

/* x[j] = d * qs[j]. */
typedef struct quant_block_q8_0 {
    quant_half_t d;                 /* scale */
    int8_t qs[QUANT_QK8_0];         /* quants */
} quant_block_q8_0;
GUILD_STATIC_ASSERT(sizeof(quant_block_q8_0) == 34, "q8_0 block size");

/* x[j] = d * qs[j]; s caches d * sum(qs) for the min term of q4_1/q5_1 dot products. */
typedef struct quant_block_q8_1 {
    quant_half_t d;                 /* scale */
    quant_half_t s;                 /* fp16(d * sum of qs) */
    int8_t qs[QUANT_QK8_1];         /* quants */
} quant_block_q8_1;
GUILD_STATIC_ASSERT(sizeof(quant_block_q8_1) == 36, "q8_1 block size");

/* Non-linear 4-bit: x[j] = d * kvalues_iq4nl[qs[j] & 15], x[j + 16] = d * kvalues_iq4nl[qs[j] >> 4]. */
typedef struct quant_block_iq4_nl {
    quant_half_t d;                 /* scale */
    uint8_t qs[QUANT_QK4_NL / 2];   /* indices into kvalues_iq4nl, nibbles as in q4_0 */
} quant_block_iq4_nl;
GUILD_STATIC_ASSERT(sizeof(quant_block_iq4_nl) == 18, "iq4_nl block size");

/* OCP microscaling FP4: x[j] = e8m0_half(e) * kvalues_mxfp4[qs[j] & 15] (E2M1 values doubled), x[j + 16] with
 * the high nibble. */
typedef struct quant_block_mxfp4 {
    uint8_t e;                      /* shared E8M0 exponent */
    uint8_t qs[QUANT_QK_MXFP4 / 2]; /* E2M1 codes, nibbles as in q4_0 */
} quant_block_mxfp4;
GUILD_STATIC_ASSERT(sizeof(quant_block_mxfp4) == 17, "mxfp4 block size");

/* ---- K quants: 256-element super-blocks --------------------------------------------------------------- */

/* 16 sub-blocks of 16: x = d * (scales[s] & 15) * q - dmin * (scales[s] >> 4), q 2 bits. 2.625 bpw. */
typedef struct quant_block_q2_K {
    uint8_t scales[QUANT_QK_K / 16]; /* low nibble: scale, high nibble: min, per sub-block of 16 */
    uint8_t qs[QUANT_QK_K / 4];      /* 2-bit quants, 4 per byte (see dequant_k.c for the order) */
    quant_half_t d;                  /* super-block scale of the scales */
    quant_half_t dmin;               /* super-block scale of the mins */
} quant_block_q2_K;
GUILD_STATIC_ASSERT(sizeof(quant_block_q2_K) == 84, "q2_K block size");

/* 16 sub-blocks of 16: x = d * (scale6 - 32) * (q2 - (high bit ? 0 : 4)), q2 the low 2 bits. 3.4375 bpw. */
typedef struct quant_block_q3_K {
    uint8_t hmask[QUANT_QK_K / 8];   /* high bits: bit k of hmask[j] belongs to element 32 k + j */
    uint8_t qs[QUANT_QK_K / 4];      /* low 2 bits */
    uint8_t scales[12];              /* 16 6-bit scales, packed */
    quant_half_t d;                  /* super-block scale */
} quant_block_q3_K;
GUILD_STATIC_ASSERT(sizeof(quant_block_q3_K) == 110, "q3_K block size");

/* 8 sub-blocks of 32: x = d * sc * q - dmin * m, sc/m 6 bits packed in scales, q 4 bits. 4.5 bpw. */
typedef struct quant_block_q4_K {
    quant_half_t d;                        /* super-block scale of the scales */
    quant_half_t dmin;                     /* super-block scale of the mins */
    uint8_t scales[QUANT_K_SCALE_SIZE];    /* 8 scales + 8 mins, 6 bits each */
    uint8_t qs[QUANT_QK_K / 2];            /* 4-bit quants: 64-element chunks, low nibbles then high */
} quant_block_q4_K;
GUILD_STATIC_ASSERT(sizeof(quant_block_q4_K) == 144, "q4_K block size");

/* As q4_K with a 5th bit per quant. 5.5 bpw. */
typedef struct quant_block_q5_K {
    quant_half_t d;                        /* super-block scale of the scales */
    quant_half_t dmin;                     /* super-block scale of the mins */
    uint8_t scales[QUANT_K_SCALE_SIZE];    /* 8 scales + 8 mins, 6 bits each */
    uint8_t qh[QUANT_QK_K / 8];            /* 5th bits: bit k of qh[j] belongs to element 32 k + j */
    uint8_t qs[QUANT_QK_K / 2];            /* low 4 bits, as in q4_K */
} quant_block_q5_K;
GUILD_STATIC_ASSERT(sizeof(quant_block_q5_K) == 176, "q5_K block size");

/* 16 sub-blocks of 16: x = d * scales[s] * (q6 - 32). 6.5625 bpw. */
typedef struct quant_block_q6_K {
    uint8_t ql[QUANT_QK_K / 2];            /* low 4 bits */
    uint8_t qh[QUANT_QK_K / 4];            /* high 2 bits */
    int8_t scales[QUANT_QK_K / 16];        /* 8-bit signed sub-block scales */
    quant_half_t d;                        /* super-block scale */
} quant_block_q6_K;
GUILD_STATIC_ASSERT(sizeof(quant_block_q6_K) == 210, "q6_K block size");

/* Activation format of the K and IQ dot products: x[j] = d * qs[j]. */
typedef struct quant_block_q8_K {
    float d;                               /* scale (a full float, unlike the weight types) */
    int8_t qs[QUANT_QK_K];                 /* quants */
    int16_t bsums[QUANT_QK_K / 16];        /* sum of qs over each group of 16 */
} quant_block_q8_K;
GUILD_STATIC_ASSERT(sizeof(quant_block_q8_K) == 292, "q8_K block size");

/* ---- IQ (lattice / non-linear) quants: 256-element super-blocks --------------------------------------- */

/* 8 groups of 32; per group a uint32 of four 8-bit grid indices (iq2xxs_grid) and a uint32 of four 7-bit
 * sign indices (ksigns_iq2xs) + a 4-bit scale in the top bits. 2.0625 bpw. */
typedef struct quant_block_iq2_xxs {
    quant_half_t d;                        /* super-block scale */
    uint16_t qs[QUANT_QK_K / 8];           /* 8 x (2 uint32), little-endian */
} quant_block_iq2_xxs;
GUILD_STATIC_ASSERT(sizeof(quant_block_iq2_xxs) == 66, "iq2_xxs block size");

/* Per 8 elements a uint16: 9-bit iq2xs_grid index + 7-bit sign index; 4-bit scales per 16. 2.3125 bpw. */
typedef struct quant_block_iq2_xs {
    quant_half_t d;                        /* super-block scale */
    uint16_t qs[QUANT_QK_K / 8];           /* grid index (low 9 bits) | sign index << 9 */
    uint8_t scales[QUANT_QK_K / 32];       /* two 4-bit scales per 32 elements */
} quant_block_iq2_xs;
GUILD_STATIC_ASSERT(sizeof(quant_block_iq2_xs) == 74, "iq2_xs block size");

/* 10-bit iq2s_grid indices (8 low bits in qs, 2 high in qh), explicit sign bytes. 2.5625 bpw. */
typedef struct quant_block_iq2_s {
    quant_half_t d;                        /* super-block scale */
    uint8_t qs[QUANT_QK_K / 4];            /* [0, 32): low 8 bits of grid indices; [32, 64): sign bytes */
    uint8_t qh[QUANT_QK_K / 32];           /* high 2 bits of the 4 grid indices of each 32 elements */
    uint8_t scales[QUANT_QK_K / 32];       /* two 4-bit scales per 32 elements */
} quant_block_iq2_s;
GUILD_STATIC_ASSERT(sizeof(quant_block_iq2_s) == 82, "iq2_s block size");

/* 8-bit iq3xxs_grid indices (4 elements each), then per 32 elements a uint32 of four 7-bit sign indices and
 * a 4-bit scale. 3.0625 bpw. */
typedef struct quant_block_iq3_xxs {
    quant_half_t d;                        /* super-block scale */
    uint8_t qs[3 * QUANT_QK_K / 8];        /* [0, 64): grid indices; [64, 96): 8 little-endian uint32 */
} quant_block_iq3_xxs;
GUILD_STATIC_ASSERT(sizeof(quant_block_iq3_xxs) == 98, "iq3_xxs block size");

/* 9-bit iq3s_grid indices, explicit signs, 4-bit scales per 32 elements. 3.4375 bpw. */
typedef struct quant_block_iq3_s {
    quant_half_t d;                        /* super-block scale */
    uint8_t qs[QUANT_QK_K / 4];            /* low 8 bits of grid indices */
    uint8_t qh[QUANT_QK_K / 32];           /* 9th bits: bit k of qh[i] for index 8 i + k */
    uint8_t signs[QUANT_QK_K / 8];         /* one sign bit per element */
    uint8_t scales[QUANT_QK_K / 64];       /* two 4-bit scales per 64 elements */
} quant_block_iq3_s;
GUILD_STATIC_ASSERT(sizeof(quant_block_iq3_s) == 110, "iq3_s block size");

/* 11-bit iq1s_grid indices per 8 elements; per 32 elements a 3-bit scale, a delta sign and 3 index bits
 * packed in qh. 1.5625 bpw. */
typedef struct quant_block_iq1_s {
    quant_half_t d;                        /* super-block scale */
    uint8_t qs[QUANT_QK_K / 8];            /* low 8 bits of grid indices */
    uint16_t qh[QUANT_QK_K / 32];          /* bits 0-11: 4 x 3 index bits; 12-14: scale; 15: delta sign */
} quant_block_iq1_s;
GUILD_STATIC_ASSERT(sizeof(quant_block_iq1_s) == 50, "iq1_s block size");

/* As iq1_s with a delta sign per 8 elements and 3-bit scales per 16; the fp16 super-block scale is spread
 * over the top nibbles of the four uint16 in scales. 1.75 bpw. */
typedef struct quant_block_iq1_m {
    uint8_t qs[QUANT_QK_K / 8];            /* low 8 bits of grid indices */
    uint8_t qh[QUANT_QK_K / 16];           /* per index pair: 3 high bits + delta sign bit, two nibbles */
    uint8_t scales[QUANT_QK_K / 32];       /* 4 little-endian uint16: 3-bit scales + one nibble of d */
} quant_block_iq1_m;
GUILD_STATIC_ASSERT(sizeof(quant_block_iq1_m) == 56, "iq1_m block size");

/* Non-linear 4-bit with 6-bit scales per 32 elements. 4.25 bpw. */
typedef struct quant_block_iq4_xs {
    quant_half_t d;                        /* super-block scale */
    uint16_t scales_h;                     /* high 2 bits of the 8 scales */
    uint8_t scales_l[QUANT_QK_K / 64];     /* low 4 bits of the 8 scales, two per byte */
    uint8_t qs[QUANT_QK_K / 2];            /* kvalues_iq4nl indices, nibbles as in iq4_nl per 32 elements */
} quant_block_iq4_xs;
GUILD_STATIC_ASSERT(sizeof(quant_block_iq4_xs) == 136, "iq4_xs block size");

#endif
