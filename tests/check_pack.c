/* Tests for core/kern/pack: packing restores byte for byte, and kern_matmul_packed gives the same bytes as the
 * scalar reference on the plain rows at every level this CPU has (the native packed kernels and the unpack
 * fallback), for token counts 1..8, the fallback's 9 and a large batch, row counts of one and several groups,
 * the 32-element types also at gpt-oss's width (2880: no multiple of 256) and rows of one and three blocks,
 * random quant bytes with finite scales, random activations and activations at the domain's edge (every
 * quant +-127: the largest integer sums the kernels can meet); on AMX CPUs the amx level's prefill path (the
 * packed AMX kernels from KERN_AMX_MIN_TOKENS tokens: past a 256-token group, 512 tokens); and the kernels the
 * dispatch passes over on this CPU for a faster variant (kern_avx512_vnni_variants), on their own rows. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/kern/amx.h"
#include "core/kern/kern.h"
#include "core/kern/pack.h"
#include "core/kern/pack_layout.h"
#include "core/kern/table.h"
#include "core/quant/blocks.h"
#include "core/quant/fp16.h"
#include "core/quant/quant.h"
#include "tests/check_run.h"
#include "tests/kern_test_rows.h"

static const guild_type_t packed_types[] = {GUILD_TYPE_Q4_K,  GUILD_TYPE_IQ4_XS, GUILD_TYPE_Q6_K,
                                              GUILD_TYPE_Q5_K,  GUILD_TYPE_Q2_K,   GUILD_TYPE_Q3_K,
                                              GUILD_TYPE_Q4_0,  GUILD_TYPE_IQ4_NL, GUILD_TYPE_MXFP4,
                                              GUILD_TYPE_Q8_0};
#define N_TYPES (int)(sizeof packed_types / sizeof packed_types[0])

static size_t row_bytes(guild_type_t type, int64_t n)
{
    const quant_type_info_t *info = quant_type_info((uint32_t)type);
    return (size_t)(n / info->block_elems) * info->block_bytes;
}

/* The activation type of `type` (q8_K for the 256-element types, q8_0 for the 32-element ones). */
static guild_type_t act_type(guild_type_t type)
{
    return (guild_type_t)quant_type_info((uint32_t)type)->dot_type;
}

/* nrows random plain rows: random bytes, then finite fp16 scales (d, and dmin for q4_K and q5_K; q6_K's d is
 * last; mxfp4's E8M0 exponent of 2^-10 .. 2^9) */
static uint8_t *random_rows(guild_type_t type, int64_t n, int64_t nrows)
{
    const size_t rb = row_bytes(type, n), bb = quant_type_info((uint32_t)type)->block_bytes;
    uint8_t *w = malloc(rb * (size_t)nrows);
    ck_assert_ptr_nonnull(w);
    for (size_t i = 0; i < rb * (size_t)nrows; i++)
        w[i] = (uint8_t)kern_test_rng_next();
    for (size_t b = 0; b < rb * (size_t)nrows; b += bb) {
        uint16_t d = kern_test_scale_f16(), m = kern_test_scale_f16();
        memcpy(w + b + (type == GUILD_TYPE_Q6_K ? offsetof(quant_block_q6_K, d) : 0), &d, 2);
        if (type == GUILD_TYPE_Q4_K || type == GUILD_TYPE_Q5_K) /* the same offset in both */
            memcpy(w + b + offsetof(quant_block_q4_K, dmin), &m, 2);
        if (type == GUILD_TYPE_Q3_K) /* d last */
            memcpy(w + b + offsetof(quant_block_q3_K, d), &d, 2);
        if (type == GUILD_TYPE_Q2_K) { /* d and dmin last */
            memcpy(w + b + offsetof(quant_block_q2_K, d), &d, 2);
            memcpy(w + b + offsetof(quant_block_q2_K, dmin), &m, 2);
        }
        if (type == GUILD_TYPE_MXFP4)
            w[b] = (uint8_t)(118 + kern_test_rng_next() % 20);
    }
    return w;
}

/* ntok activation rows of `type`'s activation type (q8_K or q8_0): quantized random floats, or (edge) every
 * quant +-127 at random */
static void *random_acts(guild_type_t type, int64_t n, int64_t ntok, bool edge)
{
    const guild_type_t at = act_type(type);
    const size_t as = row_bytes(at, n);
    uint8_t *a = malloc(as * (size_t)ntok);
    float *x = malloc(sizeof *x * (size_t)n);
    ck_assert(a && x);
    for (int64_t t = 0; t < ntok; t++) {
        for (int64_t i = 0; i < n; i++)
            x[i] = kern_test_rng_float() * 3.0f;
        kern_quantize_at(KERN_LEVEL_SCALAR, at, x, a + (size_t)t * as, n);
        if (!edge)
            continue;
        if (at == GUILD_TYPE_Q8_0) {
            quant_block_q8_0 *q = (quant_block_q8_0 *)(a + (size_t)t * as);
            for (int64_t b = 0; b < n / QUANT_QK8_0; b++)
                for (int i = 0; i < QUANT_QK8_0; i++)
                    q[b].qs[i] = (kern_test_rng_next() & 1) ? 127 : -127;
            continue;
        }
        quant_block_q8_K *qk = (quant_block_q8_K *)(a + (size_t)t * as);
        for (int64_t b = 0; b < n / QUANT_QK_K; b++) {
            quant_block_q8_K *q = &qk[b];
            for (int i = 0; i < QUANT_QK_K; i++)
                q->qs[i] = (kern_test_rng_next() & 1) ? 127 : -127;
            for (int s = 0; s < QUANT_QK_K / 16; s++) {
                int sum = 0;
                for (int i = 0; i < 16; i++)
                    sum += q->qs[16 * s + i];
                q->bsums[s] = (int16_t)sum;
            }
        }
    }
    free(x);
    return a;
}

START_TEST(test_roundtrip)
{
    kern_test_seed(11);
    for (int ti = 0; ti < N_TYPES; ti++) {
        const guild_type_t type = packed_types[ti];
        const int64_t n = quant_type_info((uint32_t)type)->block_elems == 32 ? 2880 : 3 * QUANT_QK_K, nrows = 48;
        const size_t rb = row_bytes(type, n);
        uint8_t *w = random_rows(type, n, nrows), *p = malloc(rb * nrows), *back = malloc(rb * nrows);
        guild_err_t err;
        ck_assert_int_eq(kern_pack(type, n, nrows, w, rb, p, &err), 0);
        ck_assert(memcmp(p, w, rb * nrows) != 0); /* it is a different layout */
        /* a group is 16 rows' bytes and nothing else: every byte of the rows is somewhere in the group */
        kern_unpack(type, n, nrows, p, rb, back, rb);
        ck_assert_int_eq(memcmp(back, w, rb * nrows), 0);
        free(w);
        free(p);
        free(back);
    }
}
END_TEST

/* The layout as data (core/kern/pack_layout.h, what the device's unpack reads): for every byte of a group's plain
 * rows, kern_pack_packed_offset names the packed byte holding it, and the map is a permutation of the group. */
START_TEST(test_layout_map)
{
    kern_test_seed(12);
    for (int ti = 0; ti < N_TYPES; ti++) {
        const guild_type_t type = packed_types[ti];
        const kern_pack_layout_t *l = kern_pack_layout(type);
        ck_assert_ptr_nonnull(l);
        ck_assert_uint_eq(l->type, (uint32_t)type);
        const int64_t n = 2 * QUANT_QK_K, nrows = 32;
        const size_t rb = row_bytes(type, n), group = KERN_PACK_ROWS * rb;
        uint8_t *w = random_rows(type, n, nrows), *p = malloc(rb * nrows), *seen = calloc(group, 1);
        guild_err_t err;
        ck_assert_int_eq(kern_pack(type, n, nrows, w, rb, p, &err), 0);
        for (int64_t g = 0; g < nrows / KERN_PACK_ROWS; g++)
            for (size_t off = 0; off < group; off++) {
                const size_t at = kern_pack_packed_offset(l, rb, off);
                ck_assert_uint_lt(at, group);
                ck_assert_uint_eq(p[g * group + at], w[g * group + off]);
                seen[at] = 1;
            }
        for (size_t i = 0; i < group; i++)
            ck_assert(seen[i]);
        free(w);
        free(p);
        free(seen);
    }
    ck_assert_ptr_null(kern_pack_layout(GUILD_TYPE_F16)); /* no packed layout */
}
END_TEST

START_TEST(test_refusals)
{
    guild_err_t err;
    uint8_t buf[16 * 272 * 2];
    ck_assert(!kern_pack_has(GUILD_TYPE_Q5_0));
    ck_assert(!kern_pack_native(GUILD_TYPE_Q5_0));
    ck_assert_int_eq(kern_pack(GUILD_TYPE_Q5_0, QUANT_QK_K, 16, buf, 176, buf + 16 * 176, &err), -1);
    ck_assert(strstr(err.msg, "q5_0") != NULL);
    ck_assert_int_eq(kern_pack(GUILD_TYPE_Q4_K, QUANT_QK_K, 15, buf, 144, buf + 16 * 144, &err), -1);
    ck_assert(strstr(err.msg, "multiple of 16") != NULL);
    ck_assert_int_eq(kern_pack(GUILD_TYPE_Q4_K, 100, 16, buf, 144, buf + 16 * 144, &err), -1);
    ck_assert_int_eq(kern_pack(GUILD_TYPE_Q4_K, 2880, 16, buf, 144, buf + 16 * 144, &err), -1);
    ck_assert(strstr(err.msg, "256-element") != NULL);
    ck_assert_int_eq(kern_pack(GUILD_TYPE_MXFP4, 48, 16, buf, 17, buf + 16 * 17, &err), -1);
    ck_assert(strstr(err.msg, "32-element") != NULL);
}
END_TEST

/* kern_matmul_packed at `level` (or, v set, the variant kernel v on packed or plain rows as it takes them)
 * against the scalar reference on the plain rows, every output byte; outputs are written with a stride larger
 * than nrows so that writes past a row's group show up */
static void check_with(kern_level_t level, const kern_variant_t *v, guild_type_t type, int64_t n, int64_t nrows,
                       int64_t ntok, bool edge)
{
    const size_t rb = row_bytes(type, n), ldo = (size_t)nrows + 5;
    uint8_t *w = random_rows(type, n, nrows), *p = malloc(rb * (size_t)nrows);
    void *a = random_acts(type, n, ntok, edge);
    float *want = malloc(sizeof(float) * ldo * (size_t)ntok), *got = malloc(sizeof(float) * ldo * (size_t)ntok);
    guild_err_t err;
    ck_assert(p && want && got);
    if (!v || v->packed) /* a plain variant may take any row count */
        ck_assert_int_eq(kern_pack(type, n, nrows, w, rb, p, &err), 0);
    memset(want, 0x7f, sizeof(float) * ldo * (size_t)ntok);
    memset(got, 0x7f, sizeof(float) * ldo * (size_t)ntok);
    const size_t as = row_bytes(act_type(type), n);
    kern_matmul_at(KERN_LEVEL_SCALAR, type, n, nrows, ntok, w, rb, a, as, want, ldo);
    if (!v)
        kern_matmul_packed_at(level, type, n, nrows, ntok, p, rb, a, as, got, ldo);
    else
        v->fn(n, nrows, ntok, v->packed ? p : w, rb, a, as, got, ldo);
    if (memcmp(want, got, sizeof(float) * ldo * (size_t)ntok) != 0) {
        for (size_t i = 0; i < ldo * (size_t)ntok; i++)
            if (memcmp(&want[i], &got[i], sizeof(float)) != 0) {
                ck_abort_msg("%s %s n=%lld rows=%lld tokens=%lld%s: token %zu row %zu: %.9g, reference %.9g",
                             v ? v->name : kern_level_name(level), quant_type_info((uint32_t)type)->name, (long long)n,
                             (long long)nrows, (long long)ntok, edge ? " (edge activations)" : "", i / ldo,
                             i % ldo, got[i], want[i]);
            }
    }
    free(w);
    free(p);
    free(a);
    free(want);
    free(got);
}

static void check_level(kern_level_t level, guild_type_t type, int64_t n, int64_t nrows, int64_t ntok, bool edge)
{
    check_with(level, NULL, type, n, nrows, ntok, edge);
}

/* The kernels the dispatch passes over on this CPU for a faster variant (without VBMI or GFNI where the CPU has
 * them): CPUs without those features run them, so they are held to the reference here too. */
START_TEST(test_matmul_variants)
{
    kern_variant_t v[8];
    const int nv = kern_avx512_vnni_variants(v, 8);
    kern_test_seed(31);
    if (nv == 0)
        printf("check_pack: no passed-over kernel variants on this CPU\n");
    for (int i = 0; i < nv; i++) {
        static const int64_t toks[] = {1, 2, 3, 4, 5, 8, 9, 16};
        for (int k = 0; k < (int)(sizeof toks / sizeof toks[0]); k++) {
            check_with(KERN_LEVEL_SCALAR, &v[i], v[i].type, 3 * QUANT_QK_K, 48, toks[k], false);
            check_with(KERN_LEVEL_SCALAR, &v[i], v[i].type, 2 * QUANT_QK_K, 16, toks[k], true);
        }
        if (!v[i].packed) { /* the plain contract: any row count, any token count */
            check_with(KERN_LEVEL_SCALAR, &v[i], v[i].type, 2048, 21, 1, false);
            check_with(KERN_LEVEL_SCALAR, &v[i], v[i].type, 768, 37, 40, true);
        }
    }
}
END_TEST

START_TEST(test_matmul_levels)
{
    kern_test_seed(29);
    static const int64_t toks[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 33, 40};
    for (int l = 0; l < KERN_LEVEL_COUNT; l++) {
        if (!kern_level_supported((kern_level_t)l)) {
            printf("check_pack: level %s not on this CPU, skipped\n", kern_level_name((kern_level_t)l));
            continue;
        }
        for (int ti = 0; ti < N_TYPES; ti++)
            for (size_t k = 0; k < sizeof toks / sizeof toks[0]; k++) {
                check_level((kern_level_t)l, packed_types[ti], 2 * QUANT_QK_K, 16, toks[k], false);
                check_level((kern_level_t)l, packed_types[ti], 3 * QUANT_QK_K, 48, toks[k], false);
            }
    }
}
END_TEST

/* the shapes of real experts (Qwen3-30B-A3B: 2048 x 768 and 768 x 2048) and the largest integer sums */
START_TEST(test_matmul_shapes_edge)
{
    kern_test_seed(41);
    const kern_level_t best = kern_level_best();
    for (int ti = 0; ti < N_TYPES; ti++) {
        check_level(best, packed_types[ti], 2048, 64, 1, false);
        check_level(best, packed_types[ti], 768, 128, 3, false);
        for (int64_t t = 1; t <= 4; t++)
            check_level(best, packed_types[ti], 4 * QUANT_QK_K, 32, t, true);
        check_level(best, packed_types[ti], 4 * QUANT_QK_K, 32, KERN_AMX_MIN_TOKENS, true);
        check_level(best, packed_types[ti], 4 * QUANT_QK_K, 32, 33, true);
        check_level(KERN_LEVEL_SCALAR, packed_types[ti], 4 * QUANT_QK_K, 32, 2, true);
        if (quant_type_info((uint32_t)packed_types[ti])->block_elems != 32)
            continue;
        /* gpt-oss's experts (2880 x 2880: 90 blocks a row) and rows of one and three blocks */
        check_level(best, packed_types[ti], 2880, 48, 1, false);
        check_level(best, packed_types[ti], 2880, 32, 4, true);
        check_level(best, packed_types[ti], 2880, 16, 7, false);
        for (int64_t t = 1; t <= 5; t++) {
            check_level(best, packed_types[ti], 32, 16, t, t % 2 == 0);
            check_level(best, packed_types[ti], 96, 32, t, t % 2 == 1);
        }
        check_level(best, packed_types[ti], 96, 32, 40, false);
    }
}
END_TEST

/* The amx level from KERN_AMX_MIN_TOKENS tokens: the packed AMX kernels on real expert shapes, past a token
 * group of the tiles (256) and at a 512-token prefill, with the largest sums too. */
START_TEST(test_matmul_amx_prefill)
{
    if (!kern_level_supported(KERN_LEVEL_AMX)) {
        printf("check_pack: level amx not on this CPU, its prefill path skipped\n");
        return;
    }
    kern_test_seed(53);
    for (int ti = 0; ti < N_TYPES; ti++) {
        check_level(KERN_LEVEL_AMX, packed_types[ti], 2048, 64, 257, false);
        check_level(KERN_LEVEL_AMX, packed_types[ti], 768, 128, 512, ti % 2 == 0);
        check_level(KERN_LEVEL_AMX, packed_types[ti], 2048, 48, 100, ti % 2 == 1);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("pack");
    TCase *tc = tcase_create("layout");
    tcase_add_test(tc, test_roundtrip);
    tcase_add_test(tc, test_layout_map);
    tcase_add_test(tc, test_refusals);
    suite_add_tcase(s, tc);
    tc = tcase_create("matmul");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_matmul_levels);
    tcase_add_test(tc, test_matmul_variants);
    tcase_add_test(tc, test_matmul_shapes_edge);
    tcase_add_test(tc, test_matmul_amx_prefill);
    suite_add_tcase(s, tc);
    return check_run(s);
}
