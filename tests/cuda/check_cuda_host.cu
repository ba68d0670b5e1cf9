/* The CUDA kernels' block arithmetic, run on the host (no GPU needed, so it runs in CI): for every weight type
 * of cuda_matmul, the split of each block over TPB threads (quant_dot.cuh), summed and finished as the kernel
 * does and accumulated in block order, must give quant_vec_dot_ref's bits; dequant.cuh's elements must be
 * quant_dequantize_row_ref's. The host emulations of the SIMD-in-a-word intrinsics are checked against scalar
 * definitions too. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu-worker/dense/cuda/dequant.cuh"
#include "gpu-worker/dense/cuda/iq_grids.cuh"
#include "gpu-worker/dense/cuda/expert_mma_traits.cuh"
#include "tests/check_run.h"

#define _Noreturn [[noreturn]]
extern "C" {
#include "core/quant/iq_tables.h"
#include "core/quant/quant.h"
#include "core/sample/rng.h"
#include "tests/cuda/cuda_test_rows.h"
}
#undef _Noreturn

/* Random floats of mixed scales (so blocks get different d/dmin and the 6-bit scales vary). */
static void fill(rng_t *r, float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        const double scale = (i / 32) % 3 == 0 ? 0.05 : (i / 32) % 3 == 1 ? 1.0 : 7.0;
        x[i] = (float)(scale * (2 * rng_uniform(r) - 1) + 0.01 * scale);
    }
}

/* The kernel's computation of one row, serialised: per block the TPB shares, their exact integer sums, the
 * float finish, and the block-ordered float sum. */
template <typename TR>
static float emulate_row(const void *w, const void *a, int nb)
{
    const typename TR::wblock *wb = (const typename TR::wblock *)w;
    const typename TR::ablock *ab = (const typename TR::ablock *)a;
    float sumf = 0.0f;
    for (int b = 0; b < nb; b++) {
        int isum = 0, imin = 0;
        for (int j = 0; j < TR::TPB; j++) {
            int s = 0, m = 0;
            TR::partial(wb + b, ab + b, j, s, m);
            isum += s;
            imin += m;
        }
        if (!TR::HAS_MIN)
            imin = 0;
        sumf = sumf + TR::finish(wb + b, ab + b, isum, imin);
    }
    return qd_row<TR>(sumf);
}

static float emulate(guild_type_t type, const void *w, const void *a, int64_t n)
{
    switch (type) {
    case GUILD_TYPE_Q8_0: return emulate_row<dot_q8_0>(w, a, (int)(n / 32));
    case GUILD_TYPE_Q4_0: return emulate_row<dot_q4_0>(w, a, (int)(n / 32));
    case GUILD_TYPE_Q4_1: return emulate_row<dot_q4_1>(w, a, (int)(n / 32));
    case GUILD_TYPE_Q5_0: return emulate_row<dot_q5_0>(w, a, (int)(n / 32));
    case GUILD_TYPE_Q5_1: return emulate_row<dot_q5_1>(w, a, (int)(n / 32));
    case GUILD_TYPE_IQ4_NL: return emulate_row<dot_iq4_nl>(w, a, (int)(n / 32));
    case GUILD_TYPE_Q4_K: return emulate_row<dot_q4_K>(w, a, (int)(n / 256));
    case GUILD_TYPE_Q5_K: return emulate_row<dot_q5_K>(w, a, (int)(n / 256));
    case GUILD_TYPE_Q6_K: return emulate_row<dot_q6_K>(w, a, (int)(n / 256));
    case GUILD_TYPE_IQ4_XS: return emulate_row<dot_iq4_xs>(w, a, (int)(n / 256));
    case GUILD_TYPE_MXFP4: return emulate_row<dot_mxfp4>(w, a, (int)(n / 32));
    case GUILD_TYPE_Q2_K: return emulate_row<dot_q2_K>(w, a, (int)(n / 256));
    case GUILD_TYPE_Q3_K: return emulate_row<dot_q3_K>(w, a, (int)(n / 256));
    case GUILD_TYPE_IQ2_XXS: return emulate_row<dot_iq2_xxs>(w, a, (int)(n / 256));
    case GUILD_TYPE_IQ2_XS: return emulate_row<dot_iq2_xs>(w, a, (int)(n / 256));
    case GUILD_TYPE_IQ2_S: return emulate_row<dot_iq2_s>(w, a, (int)(n / 256));
    case GUILD_TYPE_IQ3_XXS: return emulate_row<dot_iq3_xxs>(w, a, (int)(n / 256));
    case GUILD_TYPE_IQ3_S: return emulate_row<dot_iq3_s>(w, a, (int)(n / 256));
    case GUILD_TYPE_IQ1_S: return emulate_row<dot_iq1_s>(w, a, (int)(n / 256));
    case GUILD_TYPE_IQ1_M: return emulate_row<dot_iq1_m>(w, a, (int)(n / 256));
    default: ck_abort_msg("no emulation for type %d", (int)type);
    }
    return 0.0f;
}

static const guild_type_t quant_types[] = {GUILD_TYPE_Q8_0, GUILD_TYPE_Q4_0, GUILD_TYPE_Q4_1, GUILD_TYPE_Q5_0,
                                           GUILD_TYPE_Q5_1, GUILD_TYPE_IQ4_NL, GUILD_TYPE_Q4_K, GUILD_TYPE_Q5_K,
                                           GUILD_TYPE_Q6_K, GUILD_TYPE_IQ4_XS, GUILD_TYPE_MXFP4, GUILD_TYPE_Q2_K,
                                           GUILD_TYPE_Q3_K, GUILD_TYPE_IQ2_XXS, GUILD_TYPE_IQ2_XS, GUILD_TYPE_IQ2_S,
                                           GUILD_TYPE_IQ3_XXS, GUILD_TYPE_IQ3_S, GUILD_TYPE_IQ1_S, GUILD_TYPE_IQ1_M};
#define N_QUANT_TYPES (int)(sizeof quant_types / sizeof quant_types[0])

static size_t row_bytes(guild_type_t t, int64_t n)
{
    uint64_t b = 0;
    ck_assert(quant_row_bytes(t, (uint64_t)n, &b, NULL) == 0);
    return (size_t)b;
}

START_TEST(test_block_dot_matches_reference)
{
    const guild_type_t type = quant_types[_i];
    const guild_type_t at = quant_type_info(type)->dot_type;
    const int64_t n = 1024;
    const int rows = 24;
    rng_t r;
    rng_seed(&r, 100 + (uint64_t)_i);
    float *x = (float *)malloc((size_t)n * sizeof(float));
    char *w = (char *)malloc(row_bytes(type, n));
    char *a = (char *)malloc(row_bytes(at, n));
    ck_assert(x && w && a);
    guild_err_t err;
    int mismatches = 0;
    for (int row = 0; row < rows; row++) {
        fill(&r, x, n);
        cuda_test_make_row(&r, type, x, w, n);
        fill(&r, x, n);
        ck_assert(quant_quantize_row_ref(at, x, a, n, &err) == 0);
        const float ref = quant_vec_dot_ref(type, n, w, a), got = emulate(type, w, a, n);
        if (memcmp(&ref, &got, sizeof ref)) {
            if (mismatches++ < 3)
                fprintf(stderr, "%s row %d: kernel split %.9g, reference %.9g\n", quant_type_info(type)->name, row,
                        (double)got, (double)ref);
        }
    }
    ck_assert_msg(mismatches == 0, "%s: %d of %d rows differ from quant_vec_dot_ref", quant_type_info(type)->name,
                  mismatches, rows);
    free(x);
    free(w);
    free(a);
}
END_TEST

START_TEST(test_dequant_matches_reference)
{
    static const guild_type_t types[] = {GUILD_TYPE_F32, GUILD_TYPE_F16, GUILD_TYPE_BF16, GUILD_TYPE_Q8_0,
                                         GUILD_TYPE_Q4_0, GUILD_TYPE_Q4_1, GUILD_TYPE_Q5_0, GUILD_TYPE_Q5_1,
                                         GUILD_TYPE_IQ4_NL, GUILD_TYPE_Q4_K, GUILD_TYPE_Q5_K, GUILD_TYPE_Q6_K,
                                         GUILD_TYPE_IQ4_XS, GUILD_TYPE_MXFP4, GUILD_TYPE_Q2_K, GUILD_TYPE_Q3_K,
                                         GUILD_TYPE_IQ2_XXS, GUILD_TYPE_IQ2_XS, GUILD_TYPE_IQ2_S, GUILD_TYPE_IQ3_XXS, GUILD_TYPE_IQ3_S, GUILD_TYPE_IQ1_S, GUILD_TYPE_IQ1_M};
    const int64_t n = 1024;
    rng_t r;
    rng_seed(&r, 7);
    float *x = (float *)malloc((size_t)n * sizeof(float)), *ref = (float *)malloc((size_t)n * sizeof(float));
    char *w = (char *)malloc((size_t)n * 4);
    ck_assert(x && ref && w);
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        const guild_type_t type = types[k];
        ck_assert(cuda_type_supported(type));
        fill(&r, x, n);
        cuda_test_make_row(&r, type, x, w, n);
        quant_dequantize_row_ref(type, w, ref, n);
        for (int64_t e = 0; e < n; e++) {
            const float got = dequant_elem(type, w, e);
            ck_assert_msg(!memcmp(&got, &ref[e], sizeof got), "%s element %lld: %.9g, reference %.9g",
                          quant_type_info(type)->name, (long long)e, (double)got, (double)ref[e]);
        }
    }
    free(x);
    free(ref);
    free(w);
}
END_TEST

START_TEST(test_intrinsic_emulations)
{
    rng_t r;
    rng_seed(&r, 3);
    for (int it = 0; it < 10000; it++) {
        const uint32_t a = (uint32_t)rng_next(&r), b = (uint32_t)rng_next(&r), s = (uint32_t)rng_next(&r);
        int dp = 5;
        for (int i = 0; i < 4; i++)
            dp += (int8_t)(a >> 8 * i) * (int8_t)(b >> 8 * i);
        ck_assert_int_eq(qd_dp4a((int)a, (int)b, 5), dp);
        const uint32_t sub = (uint32_t)qd_vsub4((int)a, (int)b);
        for (int i = 0; i < 4; i++)
            ck_assert_uint_eq((uint8_t)(sub >> 8 * i), (uint8_t)((uint8_t)(a >> 8 * i) - (uint8_t)(b >> 8 * i)));
        const uint32_t sel = s & 0x7777u;
        const uint32_t p = qd_byte_perm(a, b, sel);
        const uint8_t bytes[8] = {(uint8_t)a, (uint8_t)(a >> 8), (uint8_t)(a >> 16), (uint8_t)(a >> 24),
                                  (uint8_t)b, (uint8_t)(b >> 8), (uint8_t)(b >> 16), (uint8_t)(b >> 24)};
        for (int i = 0; i < 4; i++)
            ck_assert_uint_eq((uint8_t)(p >> 8 * i), bytes[(sel >> 4 * i) & 7]);
        /* four nibbles through the packed iq4_nl table */
        const uint32_t nib = a & 0x0f0f0f0fu;
        const uint32_t lv = (uint32_t)iq4nl_lookup4(nib);
        for (int i = 0; i < 4; i++)
            ck_assert_int_eq((int8_t)(lv >> 8 * i), iq4nl_value((int)(nib >> 8 * i) & 15));
        /* and through the packed mxfp4 table */
        const uint32_t mv = (uint32_t)mxfp4_lookup4(nib);
        for (int i = 0; i < 4; i++)
            ck_assert_int_eq((int8_t)(mv >> 8 * i), quant_kvalues_mxfp4[(nib >> 8 * i) & 15]);
        ck_assert_int_eq(qd_load_a1(bytes + (a & 3)), (int)u32_le(bytes + (a & 3)));
    }
    for (int i = 0; i < 16; i++)
        ck_assert_int_eq(iq4nl_value(i), quant_kvalues_iq4nl[i]);
}
END_TEST

/* The int8 mma expert kernel's computation of one (row, pair), serialised (expert_mma.cu): per block and chunk
 * the four threads' fragments (chunk/bchunk) give each sub-block's exact dot (an mma column: the products of
 * the fragments of equal k), times the sub-block's scale; the mins through the second mma (minb against the
 * same activation fragments); the float finish; the block-ordered float sum. */
template <typename TR>
static float emulate_mma_row(const void *w, const void *a, int nb)
{
    const typename TR::wblock *wb = (const typename TR::wblock *)w;
    const typename TR::ablock *ab = (const typename TR::ablock *)a;
    float sumf = 0.0f;
    for (int b = 0; b < nb; b++) {
        typename TR::whead h;
        TR::head(wb + b, h);
        int isum = 0, imin = 0;
        for (int c = 0; c < TR::NCH; c++)
            for (int t = 0; t < 4; t++) {
                int q[TR::SPC][TR::KR], v[TR::SPC][TR::KR];
                TR::chunk(wb + b, t, c, q);
                TR::bchunk(ab + b, t, c, v);
                for (int i = 0; i < TR::SPC; i++) {
                    const int s = TR::sub(c, i);
                    int d = 0;
                    for (int k = 0; k < TR::KR; k++) {
                        d = qd_dp4a(q[i][k], v[i][k], d);
                        if (TR::HAS_MIN)
                            imin = qd_dp4a(TR::minb(h, s), v[i][k], imin);
                    }
                    isum += TR::scale(h, s) * d;
                }
            }
        sumf = sumf + TR::finish(h, TR::act_d(ab + b), isum, imin);
    }
    return qd_row<TR>(sumf);
}

/* Where a type's float16 block scales are (random bytes there would be NaN or infinite). */
static int block_scale_offsets(guild_type_t type, size_t *bs, size_t off[2])
{
    switch (type) {
    case GUILD_TYPE_Q4_K: *bs = sizeof(quant_block_q4_K), off[0] = 0, off[1] = 2; return 2;
    case GUILD_TYPE_Q5_K: *bs = sizeof(quant_block_q5_K), off[0] = 0, off[1] = 2; return 2;
    case GUILD_TYPE_Q6_K: *bs = sizeof(quant_block_q6_K), off[0] = 208; return 1;
    case GUILD_TYPE_IQ4_XS: *bs = sizeof(quant_block_iq4_xs), off[0] = 0; return 1;
    case GUILD_TYPE_Q8_0: *bs = sizeof(quant_block_q8_0), off[0] = 0; return 1;
    case GUILD_TYPE_MXFP4: *bs = sizeof(quant_block_mxfp4); return 0; /* every E8M0 byte is a finite scale */
    case GUILD_TYPE_Q2_K: *bs = sizeof(quant_block_q2_K), off[0] = 80, off[1] = 82; return 2;
    case GUILD_TYPE_Q3_K: *bs = sizeof(quant_block_q3_K), off[0] = 108; return 1;
    case GUILD_TYPE_IQ2_XXS: *bs = sizeof(quant_block_iq2_xxs), off[0] = 0; return 1;
    case GUILD_TYPE_IQ2_XS: *bs = sizeof(quant_block_iq2_xs), off[0] = 0; return 1;
    case GUILD_TYPE_IQ2_S: *bs = sizeof(quant_block_iq2_s), off[0] = 0; return 1;
    case GUILD_TYPE_IQ3_XXS: *bs = sizeof(quant_block_iq3_xxs), off[0] = 0; return 1;
    case GUILD_TYPE_IQ3_S: *bs = sizeof(quant_block_iq3_s), off[0] = 0; return 1;
    case GUILD_TYPE_IQ1_S: *bs = sizeof(quant_block_iq1_s), off[0] = 0; return 1;
    case GUILD_TYPE_IQ1_M: *bs = sizeof(quant_block_iq1_m); return -1; /* spread over the scales' top nibbles */
    case GUILD_TYPE_Q4_0: *bs = sizeof(quant_block_q4_0), off[0] = 0; return 1;
    case GUILD_TYPE_Q5_0: *bs = sizeof(quant_block_q5_0), off[0] = 0; return 1;
    case GUILD_TYPE_IQ4_NL: *bs = sizeof(quant_block_iq4_nl), off[0] = 0; return 1;
    default: ck_abort_msg("no block scales for type %d", (int)type);
    }
    return 0;
}

static float emulate_mma(guild_type_t type, const void *w, const void *a, int64_t n)
{
    switch (type) {
#define EMULATE_CASE(T, TR) \
    case T: return emulate_mma_row<TR>(w, a, (int)(n / TR::QK));
    MMA_TYPES(EMULATE_CASE)
#undef EMULATE_CASE
    default: ck_abort_msg("no mma emulation for type %d", (int)type);
    }
    return 0.0f;
}

/* The types of the mma kernel (cuda_expert_mma_supported). */
static const guild_type_t mma_types[] = {GUILD_TYPE_Q4_K, GUILD_TYPE_Q6_K, GUILD_TYPE_Q5_K, GUILD_TYPE_IQ4_XS,
                                         GUILD_TYPE_Q8_0, GUILD_TYPE_MXFP4, GUILD_TYPE_Q2_K, GUILD_TYPE_Q3_K,
                                         GUILD_TYPE_IQ2_XXS, GUILD_TYPE_IQ2_XS, GUILD_TYPE_IQ2_S, GUILD_TYPE_IQ3_XXS,
                                         GUILD_TYPE_IQ3_S, GUILD_TYPE_IQ1_S, GUILD_TYPE_IQ1_M, GUILD_TYPE_Q4_0,
                                         GUILD_TYPE_Q5_0, GUILD_TYPE_IQ4_NL};
#define N_MMA_TYPES (int)(sizeof mma_types / sizeof mma_types[0])

/* fp16 block scales at the ends of the range: the smallest subnormal, the smallest normal, 1, the largest
 * finite, and their negatives. */
static quant_half_t extreme_half(rng_t *r)
{
    static const uint16_t v[] = {0x0001, 0x0400, 0x3c00, 0x7bff};
    return (quant_half_t)(v[rng_next(r) % 4] | (rng_next(r) & 1 ? 0x8000 : 0));
}

/* The mma kernel's fragments cover each sub-block once (every element, every sub-block index), decode the scales
 * and mins, and finish as the dp4a kernel: quant_vec_dot_ref's bits and the dp4a split's on quantized rows (for
 * the types with a quantizer), on rows of random bytes (every scale and quant pattern; block scales made finite)
 * and on random bytes with extreme block scales. */
START_TEST(test_mma_fragments_match_reference)
{
    const guild_type_t type = mma_types[_i], at = quant_type_info(type)->dot_type;
    ck_assert(cuda_expert_mma_supported(type));
    const int64_t n = 1024;
    const int rows = 24;
    rng_t r;
    rng_seed(&r, 300 + (uint64_t)_i);
    const size_t wrb = row_bytes(type, n);
    float *x = (float *)malloc((size_t)n * sizeof(float));
    char *w = (char *)aligned_alloc(16, (wrb + 15) / 16 * 16), *a = (char *)malloc(row_bytes(at, n));
    ck_assert(x && w && a);
    guild_err_t err;
    int mismatches = 0, checked = 0;
    for (int row = 0; row < 3 * rows; row++) {
        const int kind = row / rows; /* 0 quantized, 1 random bytes, 2 random bytes with extreme scales */
        if (kind == 0 && !quant_can_quantize(type))
            continue; /* the IQ types without a quantizer */
        checked++;
        if (kind > 0) {
            for (size_t i = 0; i < wrb; i++)
                w[i] = (char)rng_next(&r);
            size_t bs, off[2];
            const int nd = block_scale_offsets(type, &bs, off);
            for (size_t b = 0; b < wrb / bs; b++)
                for (int k = 0; k < (nd < 0 ? 1 : nd); k++) {
                    const quant_half_t d =
                        kind == 2 ? extreme_half(&r) : quant_f32_to_f16((float)(1e-3 * (1 + rng_uniform(&r))));
                    if (nd < 0) { /* IQ1_M: the top nibbles of the four uint16 scales at 48 */
                        uint8_t *sc = (uint8_t *)w + b * bs + 48;
                        for (int q = 0; q < 4; q++)
                            sc[2 * q + 1] = (uint8_t)((sc[2 * q + 1] & 0x0f) | ((d >> 4 * q) & 0xf) << 4);
                    } else {
                        memcpy(w + b * bs + off[k], &d, 2);
                    }
                }
        } else {
            fill(&r, x, n);
            ck_assert(quant_quantize_row_ref(type, x, w, n, &err) == 0);
        }
        fill(&r, x, n);
        ck_assert(quant_quantize_row_ref(at, x, a, n, &err) == 0);
        const float ref = quant_vec_dot_ref(type, n, w, a), split = emulate(type, w, a, n);
        const float got = emulate_mma(type, w, a, n);
        static const char *kinds[] = {"quantized", "random bytes", "extreme scales"};
        if ((memcmp(&ref, &got, sizeof ref) || memcmp(&split, &got, sizeof ref)) && mismatches++ < 3)
            fprintf(stderr, "%s row %d (%s): mma fragments %.9g, reference %.9g, dp4a split %.9g\n",
                    quant_type_info(type)->name, row, kinds[kind], (double)got, (double)ref, (double)split);
    }
    ck_assert_msg(mismatches == 0, "%s: %d of %d rows of the mma fragments differ", quant_type_info(type)->name,
                  mismatches, checked);
    free(x);
    free(w);
    free(a);
}
END_TEST

/* iq_grids.cuh's initializers (the device copies) are core/quant/iq_tables.c's tables. */
START_TEST(test_iq_grids_match_core)
{
    static const uint8_t ks[] = IQD_KSIGNS_IQ2XS;
    static const uint64_t g2xxs[] = IQD_IQ2XXS_GRID, g2xs[] = IQD_IQ2XS_GRID, g2s[] = IQD_IQ2S_GRID,
                          g1s[] = IQD_IQ1S_GRID;
    static const uint32_t g3xxs[] = IQD_IQ3XXS_GRID, g3s[] = IQD_IQ3S_GRID;
    ck_assert(sizeof ks == sizeof quant_ksigns_iq2xs && !memcmp(ks, quant_ksigns_iq2xs, sizeof ks));
    ck_assert(sizeof g2xxs == sizeof quant_iq2xxs_grid && !memcmp(g2xxs, quant_iq2xxs_grid, sizeof g2xxs));
    ck_assert(sizeof g2xs == sizeof quant_iq2xs_grid && !memcmp(g2xs, quant_iq2xs_grid, sizeof g2xs));
    ck_assert(sizeof g2s == sizeof quant_iq2s_grid && !memcmp(g2s, quant_iq2s_grid, sizeof g2s));
    ck_assert(sizeof g1s == sizeof quant_iq1s_grid && !memcmp(g1s, quant_iq1s_grid, sizeof g1s));
    ck_assert(sizeof g3xxs == sizeof quant_iq3xxs_grid && !memcmp(g3xxs, quant_iq3xxs_grid, sizeof g3xxs));
    ck_assert(sizeof g3s == sizeof quant_iq3s_grid && !memcmp(g3s, quant_iq3s_grid, sizeof g3s));
}
END_TEST

static Suite *host_suite(void)
{
    Suite *s = suite_create("cuda_host");
    TCase *tc = tcase_create("block_dot");
    tcase_add_loop_test(tc, test_block_dot_matches_reference, 0, N_QUANT_TYPES);
    suite_add_tcase(s, tc);
    tc = tcase_create("dequant");
    tcase_add_test(tc, test_dequant_matches_reference);
    suite_add_tcase(s, tc);
    tc = tcase_create("mma_fragments");
    tcase_add_loop_test(tc, test_mma_fragments_match_reference, 0, N_MMA_TYPES);
    suite_add_tcase(s, tc);
    tc = tcase_create("iq_grids");
    tcase_add_test(tc, test_iq_grids_match_core);
    suite_add_tcase(s, tc);
    tc = tcase_create("intrinsics");
    tcase_add_test(tc, test_intrinsic_emulations);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(host_suite());
}
