/* Tests for the per-layer split of routed experts between the GPU and the CPU side (gpu-worker/expert_split.h):
 * the plan's ends (all-CPU, all-GPU), balance in between, optimality against every subset when experts cost
 * the same bytes, whole experts, determinism, and the forced fractions the device tests use. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/sample/rng.h"
#include "gpu-worker/expert_split.h"

enum { NE = 16 };

/* Realistic magnitudes: a 2.6 MB expert over a 25 GB/s link (104 us), CPU 26 us a pair + 30 us an exchange. */
static expert_split_model_t model_of(double bpns, double cpu_b)
{
    return (expert_split_model_t){.copy_bpns = bpns, .gpu_ns_per_pair = 50, .cpu_a_ns = 30000, .cpu_b_ns = cpu_b,
                                  .force_gpu_fraction = -1};
}

static void fill_bytes(uint64_t *bytes, uint64_t b)
{
    for (int e = 0; e < NE; e++)
        bytes[e] = b;
}

/* Random counts, a few hot experts: tokens * 2 pairs over NE experts. */
static void random_counts(rng_t *g, int tokens, int32_t *count)
{
    memset(count, 0, NE * sizeof *count);
    for (int t = 0; t < tokens * 2; t++) {
        const uint64_t r = rng_next(g) % 100;
        count[r < 40 ? r % 3 : (int)(r % NE)]++;
    }
}

/* The invariants of any plan: whole experts, the counters add up, the predicted times are the model's. */
static void check_consistent(const int32_t *count, const uint64_t *bytes, const uint8_t *on_gpu,
                             const expert_split_result_t *r, const expert_split_model_t *m)
{
    int64_t gp = 0, cp = 0;
    uint64_t gb = 0;
    int32_t ge = 0, ce = 0;
    for (int e = 0; e < NE; e++) {
        ck_assert(on_gpu[e] == 0 || on_gpu[e] == 1);
        if (on_gpu[e]) {
            ck_assert_msg(count[e] > 0, "expert %d without pairs planned on the GPU", e);
            gp += count[e];
            gb += bytes[e];
            ge++;
        } else if (count[e] > 0) {
            cp += count[e];
            ce++;
        }
    }
    ck_assert_int_eq(r->gpu_pairs, gp);
    ck_assert_int_eq(r->cpu_pairs, cp);
    ck_assert_uint_eq(r->gpu_bytes, gb);
    ck_assert_int_eq(r->gpu_experts, ge);
    ck_assert_int_eq(r->cpu_experts, ce);
    const double tc = cp ? m->cpu_a_ns + m->cpu_b_ns * (double)cp : 0;
    ck_assert(fabs(r->t_cpu_ns - tc) <= 1e-9 * (1 + tc));
    if (!gp)
        ck_assert(r->t_gpu_ns == 0);
}

START_TEST(test_small_batch_or_slow_copy_stays_on_the_cpu)
{
    expert_split_t *s = NULL;
    guild_err_t err;
    ck_assert_int_eq(expert_split_new(&s, NE, &err), 0);
    int32_t count[NE] = {0};
    uint64_t bytes[NE];
    uint8_t on_gpu[NE];
    expert_split_result_t r;
    fill_bytes(bytes, 2600000);
    /* one token: its two experts' copies (104 us each) cost more than computing them on the CPU (20 us each) */
    count[3] = count[9] = 1;
    expert_split_model_t m = model_of(25.0, 20000);
    expert_split_plan(s, count, bytes, &m, on_gpu, &r);
    check_consistent(count, bytes, on_gpu, &r, &m);
    ck_assert_int_eq(r.gpu_experts, 0);
    ck_assert_int_eq(r.cpu_pairs, 2);
    ck_assert_uint_eq(r.gpu_bytes, 0);
    /* a big batch over a copy that crawls (0.01 GB/s) */
    rng_t g;
    rng_seed(&g, 5);
    random_counts(&g, 512, count);
    m = model_of(0.01, 26000);
    expert_split_plan(s, count, bytes, &m, on_gpu, &r);
    check_consistent(count, bytes, on_gpu, &r, &m);
    ck_assert_int_eq(r.gpu_experts, 0);
    ck_assert_int_eq(r.cpu_pairs, 1024);
    /* no copy possible at all */
    m.copy_bpns = 0;
    expert_split_plan(s, count, bytes, &m, on_gpu, &r);
    ck_assert_int_eq(r.gpu_experts, 0);
    expert_split_destroy(&s);
    ck_assert_ptr_null(s);
}
END_TEST

START_TEST(test_slow_cpu_goes_to_the_gpu)
{
    expert_split_t *s = NULL;
    guild_err_t err;
    ck_assert_int_eq(expert_split_new(&s, NE, &err), 0);
    int32_t count[NE];
    uint64_t bytes[NE];
    uint8_t on_gpu[NE];
    expert_split_result_t r;
    fill_bytes(bytes, 2600000);
    rng_t g;
    rng_seed(&g, 6);
    random_counts(&g, 256, count);
    count[NE - 1] = 1; /* even a cold expert: one pair costs the CPU more than the whole layer's copy */
    int64_t total = 0;
    for (int e = 0; e < NE; e++)
        total += count[e];
    expert_split_model_t m = model_of(25.0, 1e8);
    expert_split_plan(s, count, bytes, &m, on_gpu, &r);
    check_consistent(count, bytes, on_gpu, &r, &m);
    ck_assert_int_eq(r.cpu_experts, 0);
    ck_assert_int_eq(r.cpu_pairs, 0);
    ck_assert_int_eq(r.gpu_pairs, total);
    ck_assert(r.t_cpu_ns == 0);
    expert_split_destroy(&s);
}
END_TEST

/* In between: both sides busy, their predicted times within one expert's step of each other, the GPU's experts
 * the hottest, the plan optimal over every subset (equal bytes per expert). */
START_TEST(test_balanced_in_between)
{
    expert_split_t *s = NULL;
    guild_err_t err;
    ck_assert_int_eq(expert_split_new(&s, NE, &err), 0);
    int32_t count[NE];
    uint64_t bytes[NE];
    uint8_t on_gpu[NE];
    expert_split_result_t r;
    fill_bytes(bytes, 2600000);
    rng_t g;
    rng_seed(&g, 40 + (uint64_t)_i);
    random_counts(&g, 40 + 20 * _i, count);
    expert_split_model_t m = model_of(25.0, 26000);
    expert_split_plan(s, count, bytes, &m, on_gpu, &r);
    check_consistent(count, bytes, on_gpu, &r, &m);
    ck_assert_msg(r.gpu_experts > 0 && r.cpu_experts > 0, "all on one side: %d GPU, %d CPU experts", r.gpu_experts,
                  r.cpu_experts);
    /* hottest first: every GPU expert has at least the pairs of every CPU expert */
    int32_t min_gpu = INT32_MAX, max_cpu = 0, max_count = 0;
    for (int e = 0; e < NE; e++) {
        if (on_gpu[e] && count[e] < min_gpu)
            min_gpu = count[e];
        if (!on_gpu[e] && count[e] > max_cpu)
            max_cpu = count[e];
        max_count = count[e] > max_count ? count[e] : max_count;
    }
    ck_assert_int_ge(min_gpu, max_cpu);
    /* balance: moving one expert changes each side by at most its copy + products (GPU) or b * its pairs (CPU) */
    const double step = (double)bytes[0] / m.copy_bpns + (m.gpu_ns_per_pair + m.cpu_b_ns) * max_count;
    ck_assert_msg(fabs(r.t_gpu_ns - r.t_cpu_ns) <= step, "GPU %.0f ns, CPU %.0f ns, step %.0f ns", r.t_gpu_ns,
                  r.t_cpu_ns, step);
    /* optimal over all 2^NE assignments of whole experts, when only the copy counts on the GPU (with products
     * per pair there, a colder expert may balance better: the prefix is then a close heuristic) */
    m.gpu_ns_per_pair = 0;
    expert_split_plan(s, count, bytes, &m, on_gpu, &r);
    check_consistent(count, bytes, on_gpu, &r, &m);
    const double got = fmax(r.t_gpu_ns, r.t_cpu_ns);
    double best = INFINITY;
    for (uint32_t mask = 0; mask < (1u << NE); mask++) {
        int64_t gp = 0, cp = 0;
        uint64_t gb = 0;
        for (int e = 0; e < NE; e++)
            if (mask >> e & 1) {
                gp += count[e];
                gb += count[e] ? bytes[e] : 0;
            } else {
                cp += count[e];
            }
        const double tg = gp ? (double)gb / m.copy_bpns + m.gpu_ns_per_pair * (double)gp : 0;
        const double tc = cp ? m.cpu_a_ns + m.cpu_b_ns * (double)cp : 0;
        best = fmin(best, fmax(tg, tc));
    }
    ck_assert_msg(got <= best * (1 + 1e-12), "plan %.0f ns, best %.0f ns", got, best);
    expert_split_destroy(&s);
}
END_TEST

/* Experts already on the device cost no copy: they go first. The same inputs give the same plan. */
START_TEST(test_staged_first_and_deterministic)
{
    expert_split_t *s = NULL;
    guild_err_t err;
    ck_assert_int_eq(expert_split_new(&s, NE, &err), 0);
    int32_t count[NE];
    uint64_t bytes[NE];
    uint8_t on_gpu[NE], again[NE];
    expert_split_result_t r, r2;
    fill_bytes(bytes, 2600000);
    for (int e = 0; e < NE; e++)
        count[e] = 1 + e % 4;
    bytes[0] = 0; /* one pair, but staged */
    expert_split_model_t m = model_of(25.0, 26000);
    expert_split_plan(s, count, bytes, &m, on_gpu, &r);
    check_consistent(count, bytes, on_gpu, &r, &m);
    ck_assert_int_eq(on_gpu[0], 1);
    ck_assert_int_gt(r.cpu_experts, 0);
    for (int i = 0; i < 3; i++) {
        expert_split_plan(s, count, bytes, &m, again, &r2);
        ck_assert(!memcmp(on_gpu, again, sizeof again));
        ck_assert(!memcmp(&r, &r2, sizeof r));
    }
    /* ties (equal counts and bytes) go to the lower id */
    for (int e = 0; e < NE; e++) {
        count[e] = 3;
        bytes[e] = 2600000;
    }
    expert_split_plan(s, count, bytes, &m, on_gpu, &r);
    ck_assert(r.gpu_experts > 0 && r.cpu_experts > 0);
    for (int e = 0; e < NE; e++)
        ck_assert_int_eq(on_gpu[e], e < r.gpu_experts);
    expert_split_destroy(&s);
}
END_TEST

START_TEST(test_forced_fraction)
{
    expert_split_t *s = NULL;
    guild_err_t err;
    ck_assert_int_eq(expert_split_new(&s, NE, &err), 0);
    int32_t count[NE];
    uint64_t bytes[NE];
    uint8_t on_gpu[NE];
    expert_split_result_t r;
    fill_bytes(bytes, 2600000);
    rng_t g;
    rng_seed(&g, 77);
    random_counts(&g, 64, count);
    expert_split_model_t m = model_of(0.001, 1); /* the times would keep everything on the CPU */
    m.force_gpu_fraction = 0;
    expert_split_plan(s, count, bytes, &m, on_gpu, &r);
    ck_assert_int_eq(r.gpu_pairs, 0);
    m.force_gpu_fraction = 1;
    expert_split_plan(s, count, bytes, &m, on_gpu, &r);
    check_consistent(count, bytes, on_gpu, &r, &m);
    ck_assert_int_eq(r.cpu_pairs, 0);
    ck_assert_int_eq(r.gpu_pairs, 128);
    m.force_gpu_fraction = 0.5;
    expert_split_plan(s, count, bytes, &m, on_gpu, &r);
    check_consistent(count, bytes, on_gpu, &r, &m);
    ck_assert(r.gpu_pairs >= 64 && r.cpu_pairs > 0);
    expert_split_destroy(&s);
}
END_TEST

static Suite *split_suite(void)
{
    Suite *s = suite_create("expert_split");
    TCase *tc = tcase_create("ends");
    tcase_add_test(tc, test_small_batch_or_slow_copy_stays_on_the_cpu);
    tcase_add_test(tc, test_slow_cpu_goes_to_the_gpu);
    suite_add_tcase(s, tc);
    tc = tcase_create("balance");
    tcase_add_loop_test(tc, test_balanced_in_between, 0, 6);
    tcase_add_test(tc, test_staged_first_and_deterministic);
    tcase_add_test(tc, test_forced_fraction);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(split_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
