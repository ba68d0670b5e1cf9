/* Tests for core/kern: every SIMD kernel level this CPU has gives the same bytes as the scalar references
 * (quant_vec_dot_ref per output element, quant_quantize_row_ref), for every computable weight type, token
 * counts 1..8 and a large batch, odd row counts, random weights (random bytes with finite scales, which covers
 * every bit pattern of the quants, and properly quantized rows) and random activations; outputs carry guard
 * values that a kernel must not touch. Levels the CPU lacks are reported and skipped. */
#include <check.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/kern/cpu.h"
#include "core/kern/kern.h"
#include "core/quant/blocks.h"
#include "core/quant/fp16.h"
#include "core/quant/quant.h"
#include "tests/check_run.h"
#include "tests/kern_test_rows.h"

static void fill_random_floats(float *x, int64_t n, float scale)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = kern_test_rng_float() * scale;
}

#define GUARD_BITS 0x7fc0dead /* a NaN no kernel writes */

static float guard_value(void)
{
    uint32_t u = GUARD_BITS;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

typedef struct mm_case {
    int64_t n, nrows, ntok;
    size_t ldo;
    uint8_t *w;   /* [nrows][w_stride] */
    size_t w_stride;
    uint8_t *act; /* [ntok][act_stride] */
    size_t act_stride;
} mm_case_t;

static const guild_type_t all_types[] = {
    GUILD_TYPE_F32,    GUILD_TYPE_F16,     GUILD_TYPE_BF16,   GUILD_TYPE_Q4_0,    GUILD_TYPE_Q4_1,
    GUILD_TYPE_Q5_0,   GUILD_TYPE_Q5_1,    GUILD_TYPE_Q8_0,   GUILD_TYPE_Q2_K,    GUILD_TYPE_Q3_K,
    GUILD_TYPE_Q4_K,   GUILD_TYPE_Q5_K,    GUILD_TYPE_Q6_K,   GUILD_TYPE_IQ2_XXS, GUILD_TYPE_IQ2_XS,
    GUILD_TYPE_IQ2_S,  GUILD_TYPE_IQ3_XXS, GUILD_TYPE_IQ3_S,  GUILD_TYPE_IQ1_S,   GUILD_TYPE_IQ1_M,
    GUILD_TYPE_IQ4_NL, GUILD_TYPE_IQ4_XS,  GUILD_TYPE_MXFP4,
};
#define N_TYPES (int)(sizeof all_types / sizeof all_types[0])

/* Builds a case: weights random (or quantized from random floats when `quantized` and the type has a
 * quantizer), activations quantized from random floats, with row strides a little larger than a row so that
 * kernels must honour them. */
static void case_new(mm_case_t *c, guild_type_t type, int64_t n, int64_t nrows, int64_t ntok, bool quantized)
{
    const quant_type_info_t *info = quant_type_info((uint32_t)type);
    guild_type_t at = info->dot_type;
    uint64_t wrow, arow;
    guild_err_t err;
    ck_assert_int_eq(quant_row_bytes((uint32_t)type, (uint64_t)n, &wrow, &err), 0);
    ck_assert_int_eq(quant_row_bytes((uint32_t)at, (uint64_t)n, &arow, &err), 0);
    c->n = n;
    c->nrows = nrows;
    c->ntok = ntok;
    c->ldo = (size_t)nrows + 3;
    c->w_stride = (size_t)wrow + 16;
    c->act_stride = (size_t)arow + 8;
    c->w = calloc((size_t)nrows, c->w_stride);
    c->act = calloc((size_t)ntok, c->act_stride);
    float *x = malloc((size_t)n * sizeof *x);
    ck_assert(c->w && c->act && x);
    for (int64_t r = 0; r < nrows; r++) {
        uint8_t *row = c->w + (size_t)r * c->w_stride;
        if (quantized && quant_can_quantize(type)) {
            fill_random_floats(x, n, 0.05f);
            ck_assert_msg(quant_quantize_row_ref(type, x, row, n, &err) == 0, "%s", err.msg);
        } else {
            kern_test_fill_blocks(type, row, n);
        }
    }
    for (int64_t t = 0; t < ntok; t++) {
        /* a few outliers per row, as real activations have, and now and then an all-zero row */
        fill_random_floats(x, n, 1.0f);
        for (int k = 0; k < 4; k++)
            x[kern_test_rng_next() % (uint64_t)n] *= 20.0f;
        if (kern_test_rng_next() % 16 == 0)
            memset(x, 0, (size_t)n * sizeof *x);
        kern_quantize_at(KERN_LEVEL_SCALAR, at, x, c->act + (size_t)t * c->act_stride, n);
    }
    free(x);
}

static void case_free(mm_case_t *c)
{
    free(c->w);
    free(c->act);
}

/* Output buffer of ntok rows of ldo floats plus 16 guard floats before and after, all guards. */
static float *out_new(const mm_case_t *c)
{
    size_t total = (size_t)c->ntok * c->ldo + 32;
    float *o = malloc(total * sizeof *o);
    ck_assert(o);
    float g = guard_value();
    for (size_t i = 0; i < total; i++)
        o[i] = g;
    return o;
}

/* Checks every element outside the written rectangle still holds the guard. */
static void check_guards(const mm_case_t *c, const float *o, const char *what)
{
    size_t total = (size_t)c->ntok * c->ldo + 32;
    uint32_t g = GUARD_BITS;
    for (size_t i = 0; i < total; i++) {
        bool inside = i >= 16 && i < total - 16 && (i - 16) % c->ldo < (size_t)c->nrows &&
                      (i - 16) / c->ldo < (size_t)c->ntok;
        if (!inside)
            ck_assert_msg(!memcmp(&o[i], &g, 4), "%s: guard float %zu overwritten", what, i);
    }
}

/* Runs the case at `level` and at the scalar level; fails with the first differing element. */
static void compare_levels(kern_level_t level, guild_type_t type, const mm_case_t *c)
{
    const char *tn = quant_type_info((uint32_t)type)->name;
    char what[160];
    snprintf(what, sizeof what, "%s %s n=%lld rows=%lld tokens=%lld", kern_level_name(level), tn, (long long)c->n,
             (long long)c->nrows, (long long)c->ntok);
    float *ref = out_new(c), *got = out_new(c);
    kern_matmul_at(KERN_LEVEL_SCALAR, type, c->n, c->nrows, c->ntok, c->w, c->w_stride, c->act, c->act_stride,
                   ref + 16, c->ldo);
    kern_matmul_at(level, type, c->n, c->nrows, c->ntok, c->w, c->w_stride, c->act, c->act_stride, got + 16,
                   c->ldo);
    check_guards(c, got, what);
    for (int64_t t = 0; t < c->ntok; t++)
        for (int64_t r = 0; r < c->nrows; r++) {
            size_t i = 16 + (size_t)t * c->ldo + (size_t)r;
            ck_assert_msg(!memcmp(&ref[i], &got[i], sizeof(float)), "%s: row %lld token %lld: %.9g, reference %.9g",
                          what, (long long)r, (long long)t, (double)got[i], (double)ref[i]);
        }
    free(ref);
    free(got);
}

static bool level_available(kern_level_t level)
{
    if (kern_level_supported(level))
        return true;
    fprintf(stderr, "check_kernels: level %s not supported by this CPU (%s): skipped\n", kern_level_name(level),
            kern_cpu()->model);
    return false;
}

/* Row lengths: a single block, the shapes of the Qwen3 MoE experts' rows (768, 2048, 1536) and odd ones. */
static int64_t row_length(guild_type_t type, int which)
{
    static const int64_t k_lengths[] = {256, 768, 2048, 1280};
    static const int64_t b32_lengths[] = {32, 96, 2048, 800};
    static const int64_t f_lengths[] = {32, 64, 2048, 37};
    uint32_t be = quant_type_info((uint32_t)type)->block_elems;
    if (be == 256)
        return k_lengths[which];
    if (be == 32)
        return b32_lengths[which];
    return f_lengths[which];
}

/* loop index `_i` is the level; one test run covers every type at that level */
START_TEST(test_matmul_tokens_1_to_8)
{
    kern_level_t level = (kern_level_t)_i;
    if (!level_available(level))
        return;
    kern_test_seed(0x1234 + (uint64_t)_i);
    for (int ti = 0; ti < N_TYPES; ti++)
        for (int64_t ntok = 1; ntok <= 8; ntok++) {
            mm_case_t c;
            int which = (int)((ntok - 1) % 4);
            int64_t nrows = 1 + (int64_t)(kern_test_rng_next() % 37);
            case_new(&c, all_types[ti], row_length(all_types[ti], which), nrows, ntok, ntok % 2 == 0);
            compare_levels(level, all_types[ti], &c);
            case_free(&c);
        }
}
END_TEST

START_TEST(test_matmul_large_batch)
{
    kern_level_t level = (kern_level_t)_i;
    if (!level_available(level))
        return;
    kern_test_seed(0x5678 + (uint64_t)_i);
    for (int ti = 0; ti < N_TYPES; ti++) {
        mm_case_t c;
        case_new(&c, all_types[ti], row_length(all_types[ti], 1), 67, 53, ti % 2 == 0);
        compare_levels(level, all_types[ti], &c);
        case_free(&c);
    }
}
END_TEST

START_TEST(test_matmul_many_rows_one_token)
{
    /* the decode shape: many rows, one token, full expert row lengths */
    kern_level_t level = (kern_level_t)_i;
    if (!level_available(level))
        return;
    kern_test_seed(0x9abc + (uint64_t)_i);
    for (int ti = 0; ti < N_TYPES; ti++) {
        mm_case_t c;
        case_new(&c, all_types[ti], row_length(all_types[ti], 2), 131, 1, false);
        compare_levels(level, all_types[ti], &c);
        case_free(&c);
    }
}
END_TEST

/* Activation quantizers: same bytes as the reference, including zero rows, tiny and huge values, ties. */
START_TEST(test_quantize)
{
    kern_level_t level = (kern_level_t)_i;
    if (!level_available(level))
        return;
    static const guild_type_t act_types[] = {GUILD_TYPE_Q8_K, GUILD_TYPE_Q8_0, GUILD_TYPE_Q8_1, GUILD_TYPE_F32};
    kern_test_seed(0xdef0 + (uint64_t)_i);
    for (size_t ai = 0; ai < sizeof act_types / sizeof act_types[0]; ai++) {
        guild_type_t at = act_types[ai];
        for (int trial = 0; trial < 40; trial++) {
            int64_t n = (int64_t)quant_type_info((uint32_t)at)->block_elems * (1 + (int64_t)(kern_test_rng_next() % 12));
            if (at == GUILD_TYPE_F32)
                n = 1 + (int64_t)(kern_test_rng_next() % 300);
            float *x = malloc((size_t)n * sizeof *x);
            uint64_t bytes;
            guild_err_t err;
            ck_assert_int_eq(quant_row_bytes((uint32_t)at, (uint64_t)n, &bytes, &err), 0);
            uint8_t *ref = malloc(bytes + 64), *got = malloc(bytes + 64);
            ck_assert(x && ref && got);
            float scale = ldexpf(1.0f, (int)(kern_test_rng_next() % 40) - 20);
            fill_random_floats(x, n, scale);
            if (trial % 5 == 1)
                memset(x, 0, (size_t)n * sizeof *x);
            if (trial % 5 == 2) /* exact multiples of a step: rounding ties */
                for (int64_t i = 0; i < n; i++)
                    x[i] = (float)((int)(kern_test_rng_next() % 255) - 127) * 0.5f;
            if (trial % 5 == 3) /* one element per block carries the maximum, others tiny */
                for (int64_t i = 0; i < n; i++)
                    x[i] = (i % 32 == 7) ? -3.0f : x[i] * 1e-6f;
            if (trial % 10 == 4) /* the largest magnitude with both signs: the first one sets the scale's sign */
                for (int64_t i = 0; i < n; i++)
                    x[i] = (i % 37 == 5 || i % 37 == 20) ? (i % 37 == 5 ? 2.5f : -2.5f) * (i % 2 ? 1 : -1) : x[i];
            if (trial == 39 && at != GUILD_TYPE_F32) { /* NaN (never the maximum) and infinities */
                x[n / 3] = nanf("");
                x[n - 1] = (n % 2) ? INFINITY : -INFINITY;
            }
            memset(ref, 0xa5, bytes + 64);
            memset(got, 0xa5, bytes + 64);
            kern_quantize_at(KERN_LEVEL_SCALAR, at, x, ref, n);
            kern_quantize_at(level, at, x, got, n);
            ck_assert_msg(!memcmp(ref, got, bytes + 64), "%s: quantize to %s, n=%lld, trial %d differs",
                          kern_level_name(level), quant_type_info((uint32_t)at)->name, (long long)n, trial);
            free(x);
            free(ref);
            free(got);
        }
    }
}
END_TEST

START_TEST(test_levels_and_dispatch)
{
    guild_err_t err;
    kern_level_t best = kern_level_best();
    ck_assert(kern_level_supported(KERN_LEVEL_SCALAR));
    for (int l = 0; l < KERN_LEVEL_COUNT; l++) {
        ck_assert_int_eq(kern_level_supported((kern_level_t)l), l <= (int)best);
        ck_assert_int_eq(kern_level_from_name(kern_level_name((kern_level_t)l)), l);
        if (l <= (int)best) {
            ck_assert_int_eq(kern_set_level((kern_level_t)l, &err), 0);
            ck_assert_int_eq(kern_level(), l);
        } else {
            ck_assert_int_eq(kern_set_level((kern_level_t)l, &err), -1);
            ck_assert_msg(strstr(err.msg, kern_level_name((kern_level_t)l)) != NULL, "%s", err.msg);
        }
    }
    ck_assert_int_eq(kern_set_level(best, &err), 0);
    ck_assert_int_eq(kern_level_from_name("nonsense"), -1);
    char desc[256];
    kern_cpu_describe(kern_cpu(), desc, sizeof desc);
    fprintf(stderr, "check_kernels: %s: %s; best level %s\n", kern_cpu()->model, desc, kern_level_name(best));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kernels");
    TCase *tc = tcase_create("dispatch");
    tcase_add_test(tc, test_levels_and_dispatch);
    suite_add_tcase(s, tc);
    tc = tcase_create("matmul");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_matmul_tokens_1_to_8, KERN_LEVEL_AVX2, KERN_LEVEL_COUNT);
    tcase_add_loop_test(tc, test_matmul_large_batch, KERN_LEVEL_AVX2, KERN_LEVEL_COUNT);
    tcase_add_loop_test(tc, test_matmul_many_rows_one_token, KERN_LEVEL_AVX2, KERN_LEVEL_COUNT);
    suite_add_tcase(s, tc);
    tc = tcase_create("quantize");
    tcase_add_loop_test(tc, test_quantize, KERN_LEVEL_AVX2, KERN_LEVEL_COUNT);
    suite_add_tcase(s, tc);
    return check_run(s);
}
