/* Tests for core/quant: block sizes, fp16/bf16/e8m0 conversions, the IQ tables, hand-built blocks of every
 * type dequantizing to values computed here from the format description, quantize->dequantize error bounds,
 * ggml's own error metrics, and dot products against the float64 dot of the dequantized rows. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/quant/blocks.h"
#include "core/quant/fp16.h"
#include "core/quant/iq_tables.h"
#include "core/quant/quant.h"
#include "core/quant/types.h"
#include "tests/check_run.h"

/* ---- helpers --------------------------------------------------------------------------------------- */

/* splitmix64: a fixed stream so that a failure reproduces. */
static uint64_t rng_state;

static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double rng_uniform(void) /* (0, 1) */
{
    return ((double)(rng_next() >> 11) + 0.5) / 9007199254740992.0;
}

static float rng_gauss(void)
{
    return (float)(sqrt(-2.0 * log(rng_uniform())) * cos(2.0 * M_PI * rng_uniform()));
}

static uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint64_t fnv1a64(const void *data, size_t n)
{
    const uint8_t *p = data;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static const quant_type_info_t *info_of(guild_type_t t)
{
    const quant_type_info_t *info = quant_type_info(t);
    ck_assert_ptr_nonnull(info);
    return info;
}

static size_t row_bytes(guild_type_t t, int64_t n)
{
    uint64_t b;
    guild_err_t err;
    ck_assert_int_eq(quant_row_bytes(t, (uint64_t)n, &b, &err), 0);
    return (size_t)b;
}

/* Dequantizes one block of `t` and requires every value to equal expected[] bit for bit. */
static void expect_dequant(guild_type_t t, const void *blk, const float *expected)
{
    const int n = (int)info_of(t)->block_elems;
    float got[256];
    quant_dequantize_row_ref(t, blk, got, n);
    for (int i = 0; i < n; i++)
        if (f2u(got[i]) != f2u(expected[i]))
            ck_abort_msg("%s element %d: got %.9g, expected %.9g", info_of(t)->name, i, got[i], expected[i]);
}

static const guild_type_t COMPUTABLE[] = {
    GUILD_TYPE_F32,    GUILD_TYPE_F16,   GUILD_TYPE_BF16,    GUILD_TYPE_Q4_0,   GUILD_TYPE_Q4_1,  GUILD_TYPE_Q5_0,
    GUILD_TYPE_Q5_1,   GUILD_TYPE_Q8_0,  GUILD_TYPE_Q2_K,    GUILD_TYPE_Q3_K,   GUILD_TYPE_Q4_K,  GUILD_TYPE_Q5_K,
    GUILD_TYPE_Q6_K,   GUILD_TYPE_IQ2_XXS, GUILD_TYPE_IQ2_XS, GUILD_TYPE_IQ2_S, GUILD_TYPE_IQ3_XXS, GUILD_TYPE_IQ3_S,
    GUILD_TYPE_IQ1_S,  GUILD_TYPE_IQ1_M, GUILD_TYPE_IQ4_NL,  GUILD_TYPE_IQ4_XS, GUILD_TYPE_MXFP4,
};
#define N_COMPUTABLE (int)(sizeof COMPUTABLE / sizeof COMPUTABLE[0])

/* ---- block sizes ----------------------------------------------------------------------------------- */

START_TEST(test_block_sizes_match_type_table)
{
    static const struct {
        guild_type_t t;
        size_t size, elems;
    } blocks[] = {
        {GUILD_TYPE_F32, sizeof(float), 1},
        {GUILD_TYPE_F16, sizeof(quant_half_t), 1},
        {GUILD_TYPE_BF16, sizeof(quant_bf16_t), 1},
        {GUILD_TYPE_Q4_0, sizeof(quant_block_q4_0), QUANT_QK4_0},
        {GUILD_TYPE_Q4_1, sizeof(quant_block_q4_1), QUANT_QK4_1},
        {GUILD_TYPE_Q5_0, sizeof(quant_block_q5_0), QUANT_QK5_0},
        {GUILD_TYPE_Q5_1, sizeof(quant_block_q5_1), QUANT_QK5_1},
        {GUILD_TYPE_Q8_0, sizeof(quant_block_q8_0), QUANT_QK8_0},
        {GUILD_TYPE_Q8_1, sizeof(quant_block_q8_1), QUANT_QK8_1},
        {GUILD_TYPE_Q2_K, sizeof(quant_block_q2_K), QUANT_QK_K},
        {GUILD_TYPE_Q3_K, sizeof(quant_block_q3_K), QUANT_QK_K},
        {GUILD_TYPE_Q4_K, sizeof(quant_block_q4_K), QUANT_QK_K},
        {GUILD_TYPE_Q5_K, sizeof(quant_block_q5_K), QUANT_QK_K},
        {GUILD_TYPE_Q6_K, sizeof(quant_block_q6_K), QUANT_QK_K},
        {GUILD_TYPE_Q8_K, sizeof(quant_block_q8_K), QUANT_QK_K},
        {GUILD_TYPE_IQ2_XXS, sizeof(quant_block_iq2_xxs), QUANT_QK_K},
        {GUILD_TYPE_IQ2_XS, sizeof(quant_block_iq2_xs), QUANT_QK_K},
        {GUILD_TYPE_IQ2_S, sizeof(quant_block_iq2_s), QUANT_QK_K},
        {GUILD_TYPE_IQ3_XXS, sizeof(quant_block_iq3_xxs), QUANT_QK_K},
        {GUILD_TYPE_IQ3_S, sizeof(quant_block_iq3_s), QUANT_QK_K},
        {GUILD_TYPE_IQ1_S, sizeof(quant_block_iq1_s), QUANT_QK_K},
        {GUILD_TYPE_IQ1_M, sizeof(quant_block_iq1_m), QUANT_QK_K},
        {GUILD_TYPE_IQ4_NL, sizeof(quant_block_iq4_nl), QUANT_QK4_NL},
        {GUILD_TYPE_IQ4_XS, sizeof(quant_block_iq4_xs), QUANT_QK_K},
        {GUILD_TYPE_MXFP4, sizeof(quant_block_mxfp4), QUANT_QK_MXFP4},
    };
    for (size_t i = 0; i < sizeof blocks / sizeof blocks[0]; i++) {
        const quant_type_info_t *info = info_of(blocks[i].t);
        ck_assert_msg(info->block_bytes == blocks[i].size && info->block_elems == blocks[i].elems,
                      "%s: types.c says %u bytes / %u elements, blocks.h %zu / %zu", info->name, info->block_bytes,
                      info->block_elems, blocks[i].size, blocks[i].elems);
    }
    /* Every computable type has a dot type whose blocks line up with its own. */
    for (int i = 0; i < N_COMPUTABLE; i++) {
        const quant_type_info_t *info = info_of(COMPUTABLE[i]);
        ck_assert(info->computable);
        const quant_type_info_t *dot = info_of(info->dot_type);
        ck_assert_uint_eq(info->block_elems % dot->block_elems, 0);
    }
}
END_TEST

/* ---- fp16 / bf16 / e8m0 ---------------------------------------------------------------------------- */

/* The binary16 value of h, computed from the definition in double. */
static double f16_value(uint16_t h)
{
    const int e = (h >> 10) & 31, m = h & 1023;
    const double mag = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
    return h & 0x8000 ? -mag : mag;
}

START_TEST(test_f16_to_f32_matches_definition)
{
    /* Loops record the first mismatch and assert once: each Check assertion costs a pipe write. */
    long bad = -1;
    for (uint32_t h = 0; h < 65536 && bad < 0; h++) {
        const float f = quant_f16_to_f32((uint16_t)h);
        if (((h >> 10) & 31) == 31) {
            if (h & 1023) /* NaN: payload kept, quiet bit set */
                bad = !isnan(f) || (f2u(f) & 0x7fffff) != (((h & 1023) << 13) | 0x400000) ? (long)h : -1;
            else
                bad = !isinf(f) ? (long)h : -1;
            continue;
        }
        if ((double)f != f16_value((uint16_t)h) || !!signbit(f) != !!(h & 0x8000) ||
            quant_f32_to_f16(f) != h) /* exact, and round-trips */
            bad = (long)h;
    }
    ck_assert_msg(bad < 0, "f16 %04lx", (unsigned long)bad);
}
END_TEST

/* Round to nearest binary16, ties to even, computed by search in double (independent of the bit tricks). */
static uint16_t f16_nearest(float f)
{
    const double x = fabs((double)f);
    const uint16_t sign = signbit(f) ? 0x8000 : 0;
    if (x >= 65520.0)
        return sign | 0x7c00;
    uint16_t lo = 0, hi = 0x7bff; /* largest h with f16_value(h) <= x */
    while (lo < hi) {
        const uint16_t mid = (uint16_t)((lo + hi + 1) / 2);
        if (f16_value(mid) <= x)
            lo = mid;
        else
            hi = (uint16_t)(mid - 1);
    }
    if (lo == 0x7bff)
        return sign | lo;
    const double dlo = x - f16_value(lo), dhi = f16_value((uint16_t)(lo + 1)) - x;
    const uint16_t r = dlo < dhi ? lo : dhi < dlo ? (uint16_t)(lo + 1) : (lo & 1) ? (uint16_t)(lo + 1) : lo;
    return sign | r;
}

START_TEST(test_f32_to_f16_rounds_to_nearest_even)
{
    static const struct {
        float f;
        uint16_t h;
    } cases[] = {
        {0.0f, 0x0000},         {-0.0f, 0x8000},       {1.0f, 0x3c00},          {-2.0f, 0xc000},
        {65504.0f, 0x7bff},     {65519.99f, 0x7bff},   {65520.0f, 0x7c00},      {1e9f, 0x7c00},
        {-INFINITY, 0xfc00},    {0x1p-24f, 0x0001},    {0x1p-25f, 0x0000},      {0x1.000002p-25f, 0x0001},
        {0x1.8p-24f, 0x0002},   {0x1.4p-23f, 0x0002},  {0x1p-14f, 0x0400},      {0x1.ff8p-15f, 0x03ff},
        {0x1.ffcp-15f, 0x0400}, {0x1.ffep-15f, 0x0400}, {1.0f + 0x1p-11f, 0x3c00}, {1.0f + 0x3p-11f, 0x3c02},
        {0x1.002002p+0f, 0x3c01}, {-0x1p-26f, 0x8000},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ck_assert_msg(quant_f32_to_f16(cases[i].f) == cases[i].h, "%a -> %04x, expected %04x", (double)cases[i].f,
                      quant_f32_to_f16(cases[i].f), cases[i].h);
    /* NaN stays NaN, quiet, sign kept. */
    ck_assert_uint_eq(quant_f32_to_f16(u2f(0x7fc00000)), 0x7e00);
    ck_assert_uint_eq(quant_f32_to_f16(u2f(0xff800001)) & 0xfe00, 0xfe00);
    /* A spread of finite floats of every exponent against the search-based reference. */
    for (uint64_t u = 0; u < 0x7f800000ull; u += 0x3f3b3) {
        const float f = u2f((uint32_t)u);
        if (quant_f32_to_f16(f) != f16_nearest(f) || quant_f32_to_f16(-f) != f16_nearest(-f))
            ck_abort_msg("%a -> %04x, nearest even is %04x", (double)f, quant_f32_to_f16(f), f16_nearest(f));
    }
}
END_TEST

START_TEST(test_bf16_conversions)
{
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = quant_bf16_to_f32((uint16_t)h);
        if (f2u(f) != h << 16 || (!isnan(f) && quant_f32_to_bf16(f) != h))
            ck_abort_msg("bf16 %04x", h);
    }
    ck_assert_uint_eq(quant_f32_to_bf16(u2f(0x3f808000)), 0x3f80); /* tie, even below */
    ck_assert_uint_eq(quant_f32_to_bf16(u2f(0x3f818000)), 0x3f82); /* tie, even above */
    ck_assert_uint_eq(quant_f32_to_bf16(u2f(0x3f808001)), 0x3f81);
    ck_assert_uint_eq(quant_f32_to_bf16(u2f(0x7f7fffff)), 0x7f80); /* rounds up to infinity */
    ck_assert_uint_eq(quant_f32_to_bf16(u2f(0x7f800001)), 0x7fc0); /* signalling NaN stays NaN, quiet */
    ck_assert_uint_eq(quant_f32_to_bf16(u2f(0xffc00000)), 0xffc0);
}
END_TEST

START_TEST(test_e8m0)
{
    for (int e = 0; e < 255; e++) {
        ck_assert((double)quant_e8m0_to_f32((uint8_t)e) == ldexp(1.0, e - 127));
        ck_assert((double)quant_e8m0_to_f32_half((uint8_t)e) == ldexp(1.0, e - 128));
    }
}
END_TEST

/* ---- tables ---------------------------------------------------------------------------------------- */

START_TEST(test_iq_table_checksums)
{
    /* fnv1a64 of each table's little-endian bytes, as printed by core/quant/gen_iq_tables.py; the tables were
     * cross-checked entry for entry against an independent transcription (tests/quant_tables_check.py). */
    static const struct {
        const char *name;
        const void *p;
        size_t size;
        uint64_t sum;
    } t[] = {
        {"kmask_iq2xs", quant_kmask_iq2xs, sizeof quant_kmask_iq2xs, 0x0af7003a53c25e16ull},
        {"ksigns_iq2xs", quant_ksigns_iq2xs, sizeof quant_ksigns_iq2xs, 0xf19ba8f8c3292ba5ull},
        {"ksigns64", quant_ksigns64, sizeof quant_ksigns64, 0x0489efa5fce1baa5ull},
        {"iq2xxs_grid", quant_iq2xxs_grid, sizeof quant_iq2xxs_grid, 0xbb4ee025b5ac6e8eull},
        {"iq2xs_grid", quant_iq2xs_grid, sizeof quant_iq2xs_grid, 0xc9b1ee61e79909bdull},
        {"iq2s_grid", quant_iq2s_grid, sizeof quant_iq2s_grid, 0x123edd38a3b62b90ull},
        {"iq3xxs_grid", quant_iq3xxs_grid, sizeof quant_iq3xxs_grid, 0xdfa5dc83d6a155d5ull},
        {"iq3s_grid", quant_iq3s_grid, sizeof quant_iq3s_grid, 0xfa37020c25b44829ull},
        {"iq1s_grid", quant_iq1s_grid, sizeof quant_iq1s_grid, 0x6703ed863501ae2eull},
        {"iq1s_grid_gpu", quant_iq1s_grid_gpu, sizeof quant_iq1s_grid_gpu, 0xa66110dee694d927ull},
        {"kvalues_iq4nl", quant_kvalues_iq4nl, sizeof quant_kvalues_iq4nl, 0x055d06d2d8fa0f75ull},
        {"kvalues_mxfp4", quant_kvalues_mxfp4, sizeof quant_kvalues_mxfp4, 0x3f0e3c08af1e5eb5ull},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        ck_assert_msg(fnv1a64(t[i].p, t[i].size) == t[i].sum, "%s checksum %016llx", t[i].name,
                      (unsigned long long)fnv1a64(t[i].p, t[i].size));
    /* Entries ggml-common.h spells out, and the rules the small tables follow. */
    ck_assert_uint_eq(quant_iq2xxs_grid[1], 0x080808080808082bull);
    ck_assert_uint_eq(quant_iq2xs_grid[511], 0x2b2b2b2b2b2b2b2bull);
    ck_assert_uint_eq(quant_iq2s_grid[1023], 0x2b2b2b2b2b2b2b2bull);
    ck_assert_uint_eq(quant_iq3xxs_grid[255], 0x3e341c04u);
    ck_assert_uint_eq(quant_iq3s_grid[0], 0x01010101u);
    ck_assert_uint_eq(quant_iq1s_grid[2047], 0x0101010101010101ull);
    ck_assert_uint_eq(quant_iq1s_grid_gpu[2047], 0x22222222u);
    for (int i = 0; i < 128; i++) {
        const int parity = __builtin_popcount((unsigned)i) & 1;
        if (quant_ksigns_iq2xs[i] != (unsigned)(i | parity << 7))
            ck_abort_msg("ksigns_iq2xs[%d]", i);
        for (int j = 0; j < 8; j++)
            if (((quant_ksigns64[i] >> (8 * j)) & 0xff) != ((quant_ksigns_iq2xs[i] >> j & 1) ? 0xffu : 0u))
                ck_abort_msg("ksigns64[%d]", i);
    }
}
END_TEST

/* ---- hand-built blocks ------------------------------------------------------------------------------
 * Each test writes a block field by field from the format's description (ggml-common.h) and computes the
 * values it must decode to; all chosen numbers are small dyadic rationals, so the expected floats are exact
 * whatever the order of operations. */

#define H_0_0625 0x2c00
#define H_0_125 0x3000
#define H_0_25 0x3400
#define H_0_5 0x3800
#define H_1 0x3c00
#define H_2 0x4000
#define H_M1 0xbc00

START_TEST(test_dequant_32_element_blocks)
{
    float ex[32];
    { /* Q4_0: x = d (q - 8); element j in the low nibble of byte j, element j + 16 in its high nibble */
        quant_block_q4_0 b = {.d = H_0_5};
        for (int j = 0; j < 16; j++) {
            b.qs[j] = (uint8_t)(j | (15 - j) << 4);
            ex[j] = 0.5f * (j - 8);
            ex[j + 16] = 0.5f * ((15 - j) - 8);
        }
        expect_dequant(GUILD_TYPE_Q4_0, &b, ex);
    }
    { /* Q4_1: x = d q + m */
        quant_block_q4_1 b = {.d = H_0_25, .m = H_M1};
        for (int j = 0; j < 16; j++) {
            b.qs[j] = (uint8_t)(j | ((3 * j) % 16) << 4);
            ex[j] = 0.25f * j - 1;
            ex[j + 16] = 0.25f * ((3 * j) % 16) - 1;
        }
        expect_dequant(GUILD_TYPE_Q4_1, &b, ex);
    }
    { /* Q5_0: x = d (q5 - 16); the 5th bit of element k is bit k of the little-endian uint32 qh */
        quant_block_q5_0 b = {.d = H_2};
        const uint32_t qh = 0xA5C3F00Fu;
        memcpy(b.qh, &qh, 4);
        for (int j = 0; j < 16; j++)
            b.qs[j] = (uint8_t)((j * 5) % 16 | ((j * 7) % 16) << 4);
        for (int k = 0; k < 32; k++) {
            const int lo = k < 16 ? (k * 5) % 16 : ((k - 16) * 7) % 16;
            ex[k] = 2.0f * ((lo | (int)((qh >> k) & 1) << 4) - 16);
        }
        expect_dequant(GUILD_TYPE_Q5_0, &b, ex);
    }
    { /* Q5_1: x = d q5 + m */
        quant_block_q5_1 b = {.d = H_0_5, .m = H_0_125};
        const uint32_t qh = 0x0000FFFFu;
        memcpy(b.qh, &qh, 4);
        for (int j = 0; j < 16; j++)
            b.qs[j] = (uint8_t)(j | (15 - j) << 4);
        for (int k = 0; k < 32; k++) {
            const int lo = k < 16 ? k : 15 - (k - 16);
            ex[k] = 0.5f * (lo | (int)((qh >> k) & 1) << 4) + 0.125f;
        }
        expect_dequant(GUILD_TYPE_Q5_1, &b, ex);
    }
    { /* Q8_0 / Q8_1: x = d q */
        quant_block_q8_0 b = {.d = H_0_0625};
        quant_block_q8_1 b1 = {.d = H_0_0625, .s = H_1};
        for (int j = 0; j < 32; j++) {
            b.qs[j] = b1.qs[j] = (int8_t)(j * 8 - 128);
            ex[j] = 0.0625f * (j * 8 - 128);
        }
        expect_dequant(GUILD_TYPE_Q8_0, &b, ex);
        expect_dequant(GUILD_TYPE_Q8_1, &b1, ex);
    }
    { /* IQ4_NL: x = d kvalues[code] (the published non-linear levels) */
        static const int kv[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
        quant_block_iq4_nl b = {.d = H_0_5};
        for (int j = 0; j < 16; j++) {
            b.qs[j] = (uint8_t)(j | (15 - j) << 4);
            ex[j] = 0.5f * kv[j];
            ex[j + 16] = 0.5f * kv[15 - j];
        }
        expect_dequant(GUILD_TYPE_IQ4_NL, &b, ex);
    }
    { /* MXFP4: x = 2^(e - 127) * E2M1(code), E2M1 = sign bit 3, magnitudes 0 0.5 1 1.5 2 3 4 6 */
        static const float e2m1[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
        quant_block_mxfp4 b = {.e = 130};
        for (int j = 0; j < 16; j++) {
            b.qs[j] = (uint8_t)(j | ((j * 3 + 1) % 16) << 4);
            const int c0 = j, c1 = (j * 3 + 1) % 16;
            /* + 0.0f: code 8 (-0) decodes to +0, ggml's table has a plain 0 there */
            ex[j] = 8.0f * (c0 & 8 ? -e2m1[c0 & 7] : e2m1[c0 & 7]) + 0.0f;
            ex[j + 16] = 8.0f * (c1 & 8 ? -e2m1[c1 & 7] : e2m1[c1 & 7]) + 0.0f;
        }
        expect_dequant(GUILD_TYPE_MXFP4, &b, ex);
        b.e = 0; /* the smallest scale is 2^-127 (a subnormal), not zero */
        float got[32];
        quant_dequantize_row_ref(GUILD_TYPE_MXFP4, &b, got, 32);
        ck_assert((double)got[1] == ldexp(0.5, -127));
    }
}
END_TEST

/* Q2_K/Q3_K 2-bit field layout: element e sits in byte 32 (e / 128) + e % 32, bits 2 ((e % 128) / 32). */
static void put_2bit(uint8_t *qs, int e, int v)
{
    qs[32 * (e / 128) + e % 32] |= (uint8_t)((v & 3) << (2 * ((e % 128) / 32)));
}

START_TEST(test_dequant_q2_K_q3_K)
{
    float ex[256];
    { /* Q2_K: 16 sub-blocks of 16, scales byte = scale | min << 4, x = d sc q - dmin m */
        quant_block_q2_K b;
        memset(&b, 0, sizeof b);
        b.d = H_0_5;
        b.dmin = H_0_25;
        for (int s = 0; s < 16; s++)
            b.scales[s] = (uint8_t)(s | (15 - s) << 4);
        for (int e = 0; e < 256; e++) {
            const int q = (e * 5 + 1) % 4, s = e / 16;
            put_2bit(b.qs, e, q);
            ex[e] = 0.5f * s * q - 0.25f * (15 - s);
        }
        expect_dequant(GUILD_TYPE_Q2_K, &b, ex);
    }
    { /* Q3_K: x = d (scale6 - 32) q3, q3 = low 2 bits - (high bit ? 0 : 4); 6-bit scales packed as
         bytes 0-7 low nibbles (scale s < 8: low nibble of byte s, else high nibble of byte s - 8),
         bytes 8-11 the top 2 bits (scale s at bits 2 (s / 4) of byte 8 + s % 4) */
        quant_block_q3_K b;
        memset(&b, 0, sizeof b);
        b.d = H_0_25;
        int sc[16];
        for (int s = 0; s < 16; s++) {
            sc[s] = (s * 7) % 64 - 32;
            const int u = sc[s] + 32;
            b.scales[s % 8] |= (uint8_t)((u & 15) << (s < 8 ? 0 : 4));
            b.scales[8 + s % 4] |= (uint8_t)((u >> 4) << (2 * (s / 4)));
        }
        for (int e = 0; e < 256; e++) {
            const int q = (e * 3) % 8 - 4; /* -4..3 */
            put_2bit(b.qs, e, (q + 4) & 3);
            if (q >= 0)
                b.hmask[e % 32] |= (uint8_t)(1 << (e / 32));
            ex[e] = 0.25f * sc[e / 16] * q;
        }
        expect_dequant(GUILD_TYPE_Q3_K, &b, ex);
    }
}
END_TEST

/* Q4_K/Q5_K scale packing (ggml's get_scale_min_k4): bytes 0-3 scales 0-3 (6 bits) with the top 2 bits of
 * scales 4-7 in bits 6-7; bytes 4-7 mins 0-3 likewise with mins 4-7; bytes 8-11 low nibbles scales 4-7,
 * high nibbles mins 4-7. */
static void pack_k4_scales(uint8_t out[12], const int sc[8], const int mn[8])
{
    memset(out, 0, 12);
    for (int j = 0; j < 4; j++) {
        out[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
        out[j + 4] = (uint8_t)(mn[j] | (mn[j + 4] >> 4) << 6);
        out[j + 8] = (uint8_t)((sc[j + 4] & 15) | (mn[j + 4] & 15) << 4);
    }
}

START_TEST(test_dequant_q4_K_q5_K_q6_K_q8_K)
{
    float ex[256];
    const int sc[8] = {1, 63, 17, 32, 5, 48, 60, 33}, mn[8] = {0, 2, 63, 31, 16, 47, 8, 62};
    { /* Q4_K: 8 sub-blocks of 32; 64-element chunk c: low nibbles of qs[32 c ..] then high nibbles;
         x = d sc q - dmin m */
        quant_block_q4_K b;
        memset(&b, 0, sizeof b);
        b.d = H_0_5;
        b.dmin = H_0_25;
        pack_k4_scales(b.scales, sc, mn);
        for (int e = 0; e < 256; e++) {
            const int q = (e * 7) % 16, c = e / 64, hi = (e % 64) / 32;
            b.qs[32 * c + e % 32] |= (uint8_t)(q << (4 * hi));
            ex[e] = 0.5f * sc[e / 32] * q - 0.25f * mn[e / 32];
        }
        expect_dequant(GUILD_TYPE_Q4_K, &b, ex);
    }
    { /* Q5_K: as Q4_K plus bit e / 32 of qh[e % 32] as the 5th bit */
        quant_block_q5_K b;
        memset(&b, 0, sizeof b);
        b.d = H_0_125;
        b.dmin = H_1;
        pack_k4_scales(b.scales, sc, mn);
        for (int e = 0; e < 256; e++) {
            const int q = (e * 13) % 32, c = e / 64, hi = (e % 64) / 32;
            b.qs[32 * c + e % 32] |= (uint8_t)((q & 15) << (4 * hi));
            b.qh[e % 32] |= (uint8_t)((q >> 4) << (e / 32));
            ex[e] = 0.125f * sc[e / 32] * q - 1.0f * mn[e / 32];
        }
        expect_dequant(GUILD_TYPE_Q5_K, &b, ex);
    }
    { /* Q6_K: x = d scales[e / 16] (q6 - 32); 128-element half h, quarter k: low 4 bits in nibble k / 2 of
         ql[64 h + 32 (k % 2) + l], high 2 bits at bits 2 k of qh[32 h + l] */
        quant_block_q6_K b;
        memset(&b, 0, sizeof b);
        b.d = H_0_125;
        for (int s = 0; s < 16; s++)
            b.scales[s] = (int8_t)(s * 9 - 70);
        for (int e = 0; e < 256; e++) {
            const int q = (e * 11) % 64, h = e / 128, k = (e % 128) / 32, l = e % 32;
            b.ql[64 * h + 32 * (k % 2) + l] |= (uint8_t)((q & 15) << (4 * (k / 2)));
            b.qh[32 * h + l] |= (uint8_t)((q >> 4) << (2 * k));
            ex[e] = 0.125f * (e / 16 * 9 - 70) * (q - 32);
        }
        expect_dequant(GUILD_TYPE_Q6_K, &b, ex);
    }
    { /* Q8_K: x = d q with a float d */
        quant_block_q8_K b;
        memset(&b, 0, sizeof b);
        b.d = 0.5f;
        for (int e = 0; e < 256; e++) {
            b.qs[e] = (int8_t)(e - 128);
            ex[e] = 0.5f * (e - 128);
        }
        expect_dequant(GUILD_TYPE_Q8_K, &b, ex);
    }
}
END_TEST

/* Sign of element j under a 7-bit sign index: bits 0-6 as given, bit 7 makes the number of minus signs even. */
static float iq_sign(int sign_index, int j)
{
    const int bits = sign_index | (__builtin_popcount((unsigned)sign_index) & 1) << 7;
    return bits >> j & 1 ? -1.0f : 1.0f;
}

static int byte_of(uint64_t v, int j)
{
    return (int)((v >> (8 * j)) & 0xff);
}

START_TEST(test_dequant_iq2)
{
    float ex[256];
    { /* IQ2_XXS: per 32 elements two little-endian uint32: four 8-bit grid indices; four 7-bit sign indices
         and a 4-bit scale s in bits 28-31; x = d (2 s + 1) / 8 * grid byte * sign */
        quant_block_iq2_xxs b;
        memset(&b, 0, sizeof b);
        b.d = H_0_5;
        for (int g = 0; g < 8; g++) {
            uint32_t idx = 0, aux = (uint32_t)(g * 2 + 1) << 28;
            for (int l = 0; l < 4; l++) {
                const int gi = (g * 4 + l) * 37 % 256, si = (g * 3 + l * 5) % 128;
                idx |= (uint32_t)gi << (8 * l);
                aux |= (uint32_t)si << (7 * l);
                for (int j = 0; j < 8; j++)
                    ex[32 * g + 8 * l + j] =
                        0.5f * (2 * (g * 2 + 1) + 1) / 8 * byte_of(quant_iq2xxs_grid[gi], j) * iq_sign(si, j);
            }
            memcpy((uint8_t *)b.qs + 8 * g, &idx, 4);
            memcpy((uint8_t *)b.qs + 8 * g + 4, &aux, 4);
        }
        expect_dequant(GUILD_TYPE_IQ2_XXS, &b, ex);
    }
    { /* IQ2_XS: per 8 elements a uint16 = 9-bit grid index | sign index << 9; per 32 elements a byte of two
         4-bit scales, low for the first 16 elements */
        quant_block_iq2_xs b;
        memset(&b, 0, sizeof b);
        b.d = H_0_25;
        for (int k = 0; k < 32; k++) {
            const int gi = (k * 97 + 3) % 512, si = (k * 41) % 128;
            b.qs[k] = (uint16_t)(gi | si << 9);
            const int s = (k / 2) % 2 ? (k / 4 * 5) % 16 : (k / 4 * 3) % 16;
            for (int j = 0; j < 8; j++)
                ex[8 * k + j] = 0.25f * (2 * s + 1) / 8 * byte_of(quant_iq2xs_grid[gi], j) * iq_sign(si, j);
        }
        for (int g = 0; g < 8; g++)
            b.scales[g] = (uint8_t)((g * 3) % 16 | ((g * 5) % 16) << 4);
        expect_dequant(GUILD_TYPE_IQ2_XS, &b, ex);
    }
    { /* IQ2_S: 10-bit grid indices, low 8 bits in qs[k], top 2 bits at bits 2 (k % 4) of qh[k / 4]; explicit
         sign bytes qs[32 + k]; two 4-bit scales per 32 */
        quant_block_iq2_s b;
        memset(&b, 0, sizeof b);
        b.d = H_0_5;
        for (int k = 0; k < 32; k++) {
            const int gi = (k * 331 + 7) % 1024, sb = (k * 53 + 11) % 256;
            b.qs[k] = (uint8_t)(gi & 255);
            b.qh[k / 4] |= (uint8_t)((gi >> 8) << (2 * (k % 4)));
            b.qs[32 + k] = (uint8_t)sb;
            const int s = (k / 2) % 2 ? (k / 4 + 9) % 16 : (k / 4 * 7) % 16;
            for (int j = 0; j < 8; j++)
                ex[8 * k + j] = 0.5f * (2 * s + 1) / 8 * byte_of(quant_iq2s_grid[gi], j) * (sb >> j & 1 ? -1 : 1);
        }
        for (int g = 0; g < 8; g++)
            b.scales[g] = (uint8_t)((g * 7) % 16 | ((g + 9) % 16) << 4);
        expect_dequant(GUILD_TYPE_IQ2_S, &b, ex);
    }
}
END_TEST

START_TEST(test_dequant_iq3_iq1_iq4_xs)
{
    float ex[256];
    { /* IQ3_XXS: 64 bytes of 8-bit grid indices (4 elements each), then per 32 elements a uint32 of four
         7-bit sign indices and a 4-bit scale s; x = d (2 s + 1) / 4 * grid byte * sign */
        quant_block_iq3_xxs b;
        memset(&b, 0, sizeof b);
        b.d = H_0_5;
        for (int g = 0; g < 8; g++) {
            const int s = (g * 5 + 2) % 16;
            uint32_t aux = (uint32_t)s << 28;
            for (int l = 0; l < 4; l++) {
                const int si = (g * 29 + l * 7) % 128;
                aux |= (uint32_t)si << (7 * l);
                for (int half = 0; half < 2; half++) {
                    const int gi = (g * 8 + 2 * l + half) * 71 % 256;
                    b.qs[g * 8 + 2 * l + half] = (uint8_t)gi;
                    for (int j = 0; j < 4; j++)
                        ex[32 * g + 8 * l + 4 * half + j] =
                            0.5f * (2 * s + 1) / 4 * byte_of(quant_iq3xxs_grid[gi], j) * iq_sign(si, 4 * half + j);
                }
            }
            memcpy(b.qs + 64 + 4 * g, &aux, 4);
        }
        expect_dequant(GUILD_TYPE_IQ3_XXS, &b, ex);
    }
    { /* IQ3_S: 9-bit grid indices (low 8 in qs[k], 9th bit at bit k % 8 of qh[k / 8]), one sign bit per
         element (bit e % 8 of signs[e / 8]), 4-bit scales s per 32 (low nibble for even groups);
         x = d (2 s + 1) grid byte * sign */
        quant_block_iq3_s b;
        memset(&b, 0, sizeof b);
        b.d = H_0_25;
        for (int g = 0; g < 8; g++)
            b.scales[g / 2] |= (uint8_t)(((g * 3 + 1) % 16) << (4 * (g % 2)));
        for (int e = 0; e < 256; e++)
            if ((e * 7 + e / 9) % 3 == 0)
                b.signs[e / 8] |= (uint8_t)(1 << (e % 8));
        for (int k = 0; k < 64; k++) {
            const int gi = (k * 151 + 5) % 512;
            b.qs[k] = (uint8_t)(gi & 255);
            b.qh[k / 8] |= (uint8_t)((gi >> 8) << (k % 8));
            for (int j = 0; j < 4; j++) {
                const int e = 4 * k + j, s = ((e / 32) * 3 + 1) % 16;
                const int neg = b.signs[e / 8] >> (e % 8) & 1;
                ex[e] = 0.25f * (2 * s + 1) * byte_of(quant_iq3s_grid[gi], j) * (neg ? -1 : 1);
            }
        }
        expect_dequant(GUILD_TYPE_IQ3_S, &b, ex);
    }
    { /* IQ1_S: 11-bit indices into iq1s_grid (values -1, 0, 1): low 8 in qs[k], high 3 at bits 3 (k % 4)
         of qh[k / 4]; qh bits 12-14 the scale s, bit 15 the delta sign; x = d (2 s + 1) (grid +- 1/8) */
        quant_block_iq1_s b;
        memset(&b, 0, sizeof b);
        b.d = H_0_5;
        for (int g = 0; g < 8; g++)
            b.qh[g] = (uint16_t)(((g * 3) % 8) << 12 | (g % 3 == 1) << 15);
        for (int k = 0; k < 32; k++) {
            const int gi = (k * 613 + 29) % 2048, g = k / 4;
            b.qs[k] = (uint8_t)(gi & 255);
            b.qh[g] |= (uint16_t)((gi >> 8) << (3 * (k % 4)));
            const float delta = g % 3 == 1 ? -0.125f : 0.125f;
            for (int j = 0; j < 8; j++)
                ex[8 * k + j] = 0.5f * (2 * ((g * 3) % 8) + 1) * ((int8_t)byte_of(quant_iq1s_grid[gi], j) + delta);
        }
        expect_dequant(GUILD_TYPE_IQ1_S, &b, ex);
    }
    { /* IQ1_M: 11-bit indices: low 8 in qs[k], high 3 in the low 3 bits of nibble k % 2 of qh[k / 2], whose
         bit 3 is that entry's delta sign; scales: 4 little-endian uint16, each with two 3-bit scales per 32
         elements (bits 0-2, 3-5 for the even group, 6-8, 9-11 for the odd one) and one nibble (bits 12-15) of
         the fp16 super-block scale, least significant nibble in the first uint16 */
        quant_block_iq1_m b;
        memset(&b, 0, sizeof b);
        const uint16_t d16 = 0x3800; /* 0.5 */
        uint16_t sc[4] = {0, 0, 0, 0};
        int ls[16];
        for (int h = 0; h < 16; h++) {
            ls[h] = (h * 5 + 3) % 8;
            sc[h / 4] |= (uint16_t)(ls[h] << (3 * (h % 4)));
        }
        for (int i = 0; i < 4; i++)
            sc[i] |= (uint16_t)(((d16 >> (4 * i)) & 15) << 12);
        memcpy(b.scales, sc, 8);
        for (int k = 0; k < 32; k++) {
            const int gi = (k * 1019 + 3) % 2048, neg = (k * 7) % 3 == 0;
            b.qs[k] = (uint8_t)(gi & 255);
            b.qh[k / 2] |= (uint8_t)(((gi >> 8) | neg << 3) << (4 * (k % 2)));
            for (int j = 0; j < 8; j++)
                ex[8 * k + j] = 0.5f * (2 * ls[k / 2] + 1) *
                                ((int8_t)byte_of(quant_iq1s_grid[gi], j) + (neg ? -0.125f : 0.125f));
        }
        expect_dequant(GUILD_TYPE_IQ1_M, &b, ex);
    }
    { /* IQ4_XS: 6-bit scales per 32 (low 4 bits: nibble g % 2 of scales_l[g / 2], high 2 bits: bits 2 g of
         scales_h), x = d (scale - 32) kvalues[code]; codes as in IQ4_NL per 32 */
        static const int kv[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
        quant_block_iq4_xs b;
        memset(&b, 0, sizeof b);
        b.d = H_0_125;
        for (int g = 0; g < 8; g++) {
            const int s = (g * 23 + 4) % 64;
            b.scales_l[g / 2] |= (uint8_t)((s & 15) << (4 * (g % 2)));
            b.scales_h |= (uint16_t)((s >> 4) << (2 * g));
            for (int j = 0; j < 16; j++) {
                const int c0 = (j + g) % 16, c1 = (j * 3 + g) % 16;
                b.qs[16 * g + j] = (uint8_t)(c0 | c1 << 4);
                ex[32 * g + j] = 0.125f * (s - 32) * kv[c0];
                ex[32 * g + 16 + j] = 0.125f * (s - 32) * kv[c1];
            }
        }
        expect_dequant(GUILD_TYPE_IQ4_XS, &b, ex);
    }
    { /* F16 / BF16 / F32 elements */
        const quant_half_t h[4] = {H_0_5, H_M1, 0x7bff, 0x0001};
        const quant_bf16_t bf[4] = {0x3f80, 0xc040, 0x0001, 0x7f7f};
        float got[4];
        quant_dequantize_row_ref(GUILD_TYPE_F16, h, got, 4);
        ck_assert(got[0] == 0.5f && got[1] == -1.0f && got[2] == 65504.0f && (double)got[3] == ldexp(1, -24));
        quant_dequantize_row_ref(GUILD_TYPE_BF16, bf, got, 4);
        ck_assert(got[0] == 1.0f && got[1] == -3.0f && f2u(got[2]) == 0x00010000u && f2u(got[3]) == 0x7f7f0000u);
    }
}
END_TEST

/* ---- quantize -> dequantize error ---------------------------------------------------------------------
 * RMS error relative to the RMS of N(0, 1) data. The bounds sit 10-20% above what the ggml algorithms
 * reach on this data (measured: Q8_0 0.54%, Q8_K 0.69%, Q6_K 1.76%, Q5_K 3.6%, Q5_1 3.8%, Q5_0 4.3%,
 * Q4_K 7.2%, IQ4_NL 7.6%, IQ4_XS 7.7%, Q4_1 7.8%, Q4_0 8.6%, MXFP4 11.4%, Q3_K 15.0%, Q2_K 29.3%, F16 0.021%,
 * BF16 0.17%). For orientation, a uniform quantizer with step D has RMS error D / sqrt(12): Q8_0's step is
 * amax / 127 with amax ~ 2.1 sigma over 32 samples, giving ~0.48%; each bit fewer doubles the error, and the
 * K types gain from their fitted min/scale per sub-block. */
static const struct {
    guild_type_t t;
    double bound;
} ERROR_BOUNDS[] = {
    {GUILD_TYPE_F16, 0.0003},  {GUILD_TYPE_BF16, 0.002},  {GUILD_TYPE_Q8_0, 0.006},  {GUILD_TYPE_Q8_1, 0.006},
    {GUILD_TYPE_Q8_K, 0.008},  {GUILD_TYPE_Q6_K, 0.02},   {GUILD_TYPE_Q5_K, 0.04},   {GUILD_TYPE_Q5_1, 0.043},
    {GUILD_TYPE_Q5_0, 0.048},  {GUILD_TYPE_Q4_K, 0.08},   {GUILD_TYPE_IQ4_NL, 0.085}, {GUILD_TYPE_IQ4_XS, 0.085},
    {GUILD_TYPE_Q4_1, 0.088},  {GUILD_TYPE_Q4_0, 0.095},  {GUILD_TYPE_MXFP4, 0.125}, {GUILD_TYPE_Q3_K, 0.165},
    {GUILD_TYPE_Q2_K, 0.32},
};
#define N_ERROR_BOUNDS (int)(sizeof ERROR_BOUNDS / sizeof ERROR_BOUNDS[0])

enum { ERR_N = 16384 };

START_TEST(test_quantize_error_within_bounds)
{
    const guild_type_t t = ERROR_BOUNDS[_i].t;
    const char *name = info_of(t)->name;
    static float x[ERR_N], y[ERR_N];
    rng_state = 42;
    for (int i = 0; i < ERR_N; i++)
        x[i] = rng_gauss();
    uint8_t *q = malloc(row_bytes(t, ERR_N));
    uint8_t *q2 = malloc(row_bytes(t, ERR_N));
    guild_err_t err;
    ck_assert_msg(quant_can_quantize(t), "%s", name);
    ck_assert_msg(quant_quantize_row_ref(t, x, q, ERR_N, &err) == 0, "%s: %s", name, err.msg);
    quant_dequantize_row_ref(t, q, y, ERR_N);
    double se = 0, ss = 0;
    for (int i = 0; i < ERR_N; i++) {
        se += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
        ss += (double)x[i] * x[i];
    }
    const double rel = sqrt(se / ss);
    ck_assert_msg(rel < ERROR_BOUNDS[_i].bound, "%s: relative RMS error %.5f over the bound %.5f", name, rel,
                  ERROR_BOUNDS[_i].bound);
    /* Deterministic: the same floats give the same bytes. */
    ck_assert_int_eq(quant_quantize_row_ref(t, x, q2, ERR_N, &err), 0);
    ck_assert(!memcmp(q, q2, row_bytes(t, ERR_N)));
    /* An all-zero row quantizes to zeros. */
    memset(x, 0, sizeof x);
    ck_assert_int_eq(quant_quantize_row_ref(t, x, q, ERR_N, &err), 0);
    quant_dequantize_row_ref(t, q, y, ERR_N);
    for (int i = 0; i < ERR_N; i++)
        if (y[i] != 0.0f)
            ck_abort_msg("%s: zero row decodes to %g at %d", name, y[i], i);
    free(q);
    free(q2);
}
END_TEST

/* ggml's own acceptance test (tests/test-quantize-fns.cpp): data 0.1 + 2 cos(i + offset), error metric
 * sqrt(sum of squared errors) / n, bounds 0.002 (0.0075 for 2-bit, 0.004 for 3-bit types); dot products of
 * the quantized weights with the quantized second row against the float dot of the originals, error / n
 * under 0.02 (0.04 for 2-bit). Our quantizers meet ggml's bounds. */
START_TEST(test_ggml_quantize_fns_bounds)
{
    enum { N = 32 * 128 };
    static float x[N], x2[N], y[N];
    for (int i = 0; i < N; i++) {
        x[i] = 0.1f + 2.0f * cosf((float)i);
        x2[i] = 0.1f + 2.0f * cosf((float)i + 1.0f);
    }
    for (int k = 0; k < N_ERROR_BOUNDS; k++) {
        const guild_type_t t = ERROR_BOUNDS[k].t;
        const quant_type_info_t *info = info_of(t);
        if (!info->computable)
            continue;
        uint8_t *q = malloc(row_bytes(t, N)), *a = malloc(row_bytes(info->dot_type, N) + 4 * N);
        guild_err_t err;
        ck_assert_int_eq(quant_quantize_row_ref(t, x, q, N, &err), 0);
        quant_dequantize_row_ref(t, q, y, N);
        double se = 0;
        for (int i = 0; i < N; i++)
            se += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
        const double bound = t == GUILD_TYPE_Q2_K ? 0.0075 : t == GUILD_TYPE_Q3_K ? 0.004 : 0.002;
        ck_assert_msg(sqrt(se) / N < bound, "%s: ggml error %.6f >= %.4f", info->name, sqrt(se) / N, bound);
        ck_assert_int_eq(quant_quantize_row_ref(info->dot_type, x2, a, N, &err), 0);
        double ref = 0;
        for (int i = 0; i < N; i++)
            ref += (double)x[i] * x2[i];
        const double dot_err = fabs(quant_vec_dot_ref(t, N, q, a) - ref) / N;
        const double dot_bound = t == GUILD_TYPE_Q2_K ? 0.04 : 0.02;
        ck_assert_msg(dot_err < dot_bound, "%s: ggml dot error %.6f >= %.3f", info->name, dot_err, dot_bound);
        free(q);
        free(a);
    }
}
END_TEST

/* ---- dot products -------------------------------------------------------------------------------------- */

/* Fills nb blocks of `t` with random weights: quantized N(0, 1) data where a quantizer exists, else random
 * bytes (every bit pattern of the quants is valid) with the fp16 scales replaced by small positive ones. */
static void random_weights(guild_type_t t, void *dst, int64_t n)
{
    const quant_type_info_t *info = info_of(t);
    const size_t bytes = row_bytes(t, n);
    if (quant_can_quantize(t) && (rng_next() & 1)) {
        float *x = malloc((size_t)n * sizeof *x);
        for (int64_t i = 0; i < n; i++)
            x[i] = rng_gauss();
        guild_err_t err;
        ck_assert_int_eq(quant_quantize_row_ref(t, x, dst, n, &err), 0);
        free(x);
        return;
    }
    uint8_t *p = dst;
    for (size_t i = 0; i < bytes; i++)
        p[i] = (uint8_t)rng_next();
    const int64_t nb = n / info->block_elems;
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *blk = p + b * info->block_bytes;
        const quant_half_t d = quant_f32_to_f16((float)(0.001 + 0.05 * rng_uniform()));
        const quant_half_t m = quant_f32_to_f16((float)(0.1 * rng_uniform() - 0.05));
        switch (t) {
        case GUILD_TYPE_F32:
            ((float *)dst)[b] = rng_gauss();
            break;
        case GUILD_TYPE_F16:
            ((quant_half_t *)dst)[b] = quant_f32_to_f16(rng_gauss());
            break;
        case GUILD_TYPE_BF16:
            ((quant_bf16_t *)dst)[b] = quant_f32_to_bf16(rng_gauss());
            break;
        case GUILD_TYPE_MXFP4:
            blk[0] = (uint8_t)(100 + rng_next() % 40);
            break;
        case GUILD_TYPE_Q2_K: /* d, dmin at the end */
            memcpy(blk + 80, &d, 2);
            memcpy(blk + 82, &d, 2);
            break;
        case GUILD_TYPE_Q3_K:
        case GUILD_TYPE_Q6_K: /* d at the end */
            memcpy(blk + info->block_bytes - 2, &d, 2);
            break;
        case GUILD_TYPE_Q4_1:
        case GUILD_TYPE_Q5_1:
            memcpy(blk, &d, 2);
            memcpy(blk + 2, &m, 2);
            break;
        case GUILD_TYPE_Q4_K:
        case GUILD_TYPE_Q5_K: /* d, dmin first */
            memcpy(blk, &d, 2);
            memcpy(blk + 2, &d, 2);
            break;
        case GUILD_TYPE_IQ1_M: { /* the fp16 scale lives in the top nibbles of the 4 uint16 scales */
            quant_block_iq1_m *bm = (quant_block_iq1_m *)blk;
            for (int i = 0; i < 4; i++)
                bm->scales[2 * i + 1] = (uint8_t)((bm->scales[2 * i + 1] & 0x0f) | ((d >> (4 * i)) & 15) << 4);
            break;
        }
        default: /* d first */
            memcpy(blk, &d, 2);
            break;
        }
    }
}

START_TEST(test_dot_matches_float64_of_dequantized_rows)
{
    const guild_type_t t = COMPUTABLE[_i];
    const quant_type_info_t *info = info_of(t);
    const guild_type_t at = info->dot_type;
    rng_state = 1000 + (uint64_t)_i;
    const int64_t lengths[] = {256, 512, 768, 2816, 4096};
    for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
        const int64_t n = lengths[li] + (info->block_elems == 1 ? (int64_t)li * 7 % 32 : 0); /* odd tails */
        for (int rep = 0; rep < 3; rep++) {
            void *w = malloc(row_bytes(t, n));
            float *x = malloc((size_t)n * sizeof *x), *wd = malloc((size_t)n * sizeof *wd);
            float *ad = malloc((size_t)n * sizeof *ad);
            void *a = malloc(row_bytes(at, n));
            random_weights(t, w, n);
            for (int64_t i = 0; i < n; i++)
                x[i] = rng_gauss() * (rep == 2 ? 100.0f : 1.0f);
            guild_err_t err;
            ck_assert_int_eq(quant_quantize_row_ref(at, x, a, n, &err), 0);
            quant_dequantize_row_ref(t, w, wd, n);
            quant_dequantize_row_ref(at, a, ad, n);
            double ref = 0, mag = 0;
            for (int64_t i = 0; i < n; i++) {
                ref += (double)wd[i] * ad[i];
                mag += fabs((double)wd[i] * ad[i]);
            }
            /* Q8_1's s = fp16(d * sum q) enters Q4_1/Q5_1 dots rounded to fp16: allow that rounding. */
            double slack = 0;
            if (at == GUILD_TYPE_Q8_1) {
                const quant_block_q8_1 *ab = a;
                const uint8_t *wb = w;
                for (int64_t b = 0; b < n / 32; b++) {
                    quant_half_t m;
                    memcpy(&m, wb + b * info->block_bytes + 2, 2);
                    slack += fabs((double)quant_f16_to_f32(m) * quant_f16_to_f32(ab[b].s)) * 0x1p-10;
                }
            }
            const float got = quant_vec_dot_ref(t, n, w, a);
            ck_assert_msg(fabs(got - ref) <= 1e-5 * mag + slack + 1e-30,
                          "%s n=%lld: dot %.9g, float64 %.9g (sum|wa| %g)", info->name, (long long)n, got, ref, mag);
            free(w);
            free(x);
            free(wd);
            free(ad);
            free(a);
        }
    }
}
END_TEST

/* Contract 1 of dot_ref.c spelled out: 32 fmaf lanes, tail to lane i % 32, pairwise halving. */
START_TEST(test_plain_dot_follows_the_lane_contract)
{
    enum { N = 1000 };
    static float w[N], x[N];
    static quant_half_t wh[N];
    rng_state = 7;
    for (int i = 0; i < N; i++) {
        wh[i] = quant_f32_to_f16(rng_gauss());
        w[i] = quant_f16_to_f32(wh[i]);
        x[i] = rng_gauss();
    }
    float acc[32] = {0};
    for (int i = 0; i < N; i++)
        acc[i % 32] = fmaf(w[i], x[i], acc[i % 32]);
    for (int h = 16; h >= 1; h /= 2)
        for (int j = 0; j < h; j++)
            acc[j] += acc[j + h];
    ck_assert(f2u(quant_vec_dot_ref(GUILD_TYPE_F32, N, w, x)) == f2u(acc[0]));
    ck_assert(f2u(quant_vec_dot_ref(GUILD_TYPE_F16, N, wh, x)) == f2u(acc[0]));
}
END_TEST

/* ---- API errors ---------------------------------------------------------------------------------------- */

START_TEST(test_quantize_rejects_bad_requests)
{
    float x[512] = {0};
    uint8_t out[1024];
    guild_err_t err;
    ck_assert(!quant_can_quantize(GUILD_TYPE_IQ2_XXS));
    ck_assert_int_eq(quant_quantize_row_ref(GUILD_TYPE_IQ2_XXS, x, out, 256, &err), -1);
    ck_assert_msg(strstr(err.msg, "iq2_xxs") && strstr(err.msg, "no quantizer"), "%s", err.msg);
    ck_assert_int_eq(quant_quantize_row_ref(GUILD_TYPE_Q4_K, x, out, 300, &err), -1);
    ck_assert_msg(strstr(err.msg, "q4_K") && strstr(err.msg, "300"), "%s", err.msg);
    ck_assert_int_eq(quant_quantize_row_ref((guild_type_t)4, x, out, 32, &err), -1); /* retired id */
    ck_assert_int_eq(quant_quantize_row_ref(GUILD_TYPE_Q8_0, x, out, 0, &err), 0);   /* empty row */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("quant");
    TCase *tc;

    tc = tcase_create("layout");
    tcase_add_test(tc, test_block_sizes_match_type_table);
    tcase_add_test(tc, test_iq_table_checksums);
    suite_add_tcase(s, tc);

    tc = tcase_create("fp16");
    tcase_add_test(tc, test_f16_to_f32_matches_definition);
    tcase_add_test(tc, test_f32_to_f16_rounds_to_nearest_even);
    tcase_add_test(tc, test_bf16_conversions);
    tcase_add_test(tc, test_e8m0);
    suite_add_tcase(s, tc);

    tc = tcase_create("dequant");
    tcase_add_test(tc, test_dequant_32_element_blocks);
    tcase_add_test(tc, test_dequant_q2_K_q3_K);
    tcase_add_test(tc, test_dequant_q4_K_q5_K_q6_K_q8_K);
    tcase_add_test(tc, test_dequant_iq2);
    tcase_add_test(tc, test_dequant_iq3_iq1_iq4_xs);
    suite_add_tcase(s, tc);

    tc = tcase_create("quantize");
    tcase_add_loop_test(tc, test_quantize_error_within_bounds, 0, N_ERROR_BOUNDS);
    tcase_add_test(tc, test_ggml_quantize_fns_bounds);
    tcase_add_test(tc, test_quantize_rejects_bad_requests);
    suite_add_tcase(s, tc);

    tc = tcase_create("dot");
    tcase_add_loop_test(tc, test_dot_matches_float64_of_dequantized_rows, 0, N_COMPUTABLE);
    tcase_add_test(tc, test_plain_dot_follows_the_lane_contract);
    suite_add_tcase(s, tc);

    return check_run(s);
}
