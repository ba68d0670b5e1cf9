/* Tests for the per-layer split of routed experts between the GPU and the CPU side (gpu-worker/dense/expert_split.h):
 * the plan's ends (all-CPU, all-GPU), balance in between, optimality against every subset when experts cost
 * the same bytes, whole experts, determinism, and the forced fractions the device tests use; and the running
 * cost estimates (gpu-worker/dense/expert_cost.h) the device feeds it: none before a sample, convergence, outliers. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/sample/rng.h"
#include "gpu-worker/dense/expert_cost.h"
#include "gpu-worker/dense/expert_split.h"
#include "tests/check_run.h"

enum { NE = 16 };

/* Realistic magnitudes: a 2.6 MB expert over a 25 GB/s link (104 us), CPU 26 us a pair + 30 us an exchange. */
static expert_split_model_t model_of(double bpns, double cpu_b)
{
    return (expert_split_model_t){.copy_bpns = bpns, .gpu_ns_per_pair = 50, .cpu_a_ns = 30000, .cpu_b_ns = cpu_b,
                                  .force_gpu_fraction = -1};
}

/* The split cases' fixture: the plan object, the experts' routed pairs and bytes (2.6 MB each unless a case
 * changes them) and the plan's choice, fresh for each case. */
static expert_split_t *split;
static int32_t count[NE];
static uint64_t bytes[NE];
static uint8_t on_gpu[NE];

static void split_setup(void)
{
    guild_err_t err;
    ck_assert_int_eq(expert_split_new(&split, NE, &err), 0);
    memset(count, 0, sizeof count);
    memset(on_gpu, 0, sizeof on_gpu);
    for (int e = 0; e < NE; e++)
        bytes[e] = 2600000;
}

static void split_teardown(void)
{
    expert_split_destroy(&split);
    ck_assert_ptr_null(split);
}

/* Random counts, a few hot experts: tokens * 2 pairs over NE experts. */
static void random_counts(rng_t *g, int tokens)
{
    memset(count, 0, NE * sizeof *count);
    for (int t = 0; t < tokens * 2; t++) {
        const uint64_t r = rng_next(g) % 100;
        count[r < 40 ? r % 3 : (int)(r % NE)]++;
    }
}

/* The invariants of any plan: whole experts, the counters add up, the predicted times are the model's. */
static void check_consistent(const expert_split_result_t *r, const expert_split_model_t *m)
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
    expert_split_result_t r;
    /* one token: its two experts' copies (104 us each) cost more than computing them on the CPU (20 us each) */
    count[3] = count[9] = 1;
    expert_split_model_t m = model_of(25.0, 20000);
    expert_split_plan(split, count, bytes, &m, on_gpu, &r);
    check_consistent(&r, &m);
    ck_assert_int_eq(r.gpu_experts, 0);
    ck_assert_int_eq(r.cpu_pairs, 2);
    ck_assert_uint_eq(r.gpu_bytes, 0);
    /* a big batch over a copy that crawls (0.01 GB/s) */
    rng_t g;
    rng_seed(&g, 5);
    random_counts(&g, 512);
    m = model_of(0.01, 26000);
    expert_split_plan(split, count, bytes, &m, on_gpu, &r);
    check_consistent(&r, &m);
    ck_assert_int_eq(r.gpu_experts, 0);
    ck_assert_int_eq(r.cpu_pairs, 1024);
    /* no copy possible at all */
    m.copy_bpns = 0;
    expert_split_plan(split, count, bytes, &m, on_gpu, &r);
    ck_assert_int_eq(r.gpu_experts, 0);
}
END_TEST

START_TEST(test_slow_cpu_goes_to_the_gpu)
{
    expert_split_result_t r;
    rng_t g;
    rng_seed(&g, 6);
    random_counts(&g, 256);
    count[NE - 1] = 1; /* even a cold expert: one pair costs the CPU more than the whole layer's copy */
    int64_t total = 0;
    for (int e = 0; e < NE; e++)
        total += count[e];
    expert_split_model_t m = model_of(25.0, 1e8);
    expert_split_plan(split, count, bytes, &m, on_gpu, &r);
    check_consistent(&r, &m);
    ck_assert_int_eq(r.cpu_experts, 0);
    ck_assert_int_eq(r.cpu_pairs, 0);
    ck_assert_int_eq(r.gpu_pairs, total);
    ck_assert(r.t_cpu_ns == 0);
}
END_TEST

/* In between: both sides busy, their predicted times within one expert's step of each other, the GPU's experts
 * the hottest, the plan optimal over every subset (equal bytes per expert). */
START_TEST(test_balanced_in_between)
{
    expert_split_result_t r;
    rng_t g;
    rng_seed(&g, 40 + (uint64_t)_i);
    random_counts(&g, 40 + 20 * _i);
    expert_split_model_t m = model_of(25.0, 26000);
    expert_split_plan(split, count, bytes, &m, on_gpu, &r);
    check_consistent(&r, &m);
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
    expert_split_plan(split, count, bytes, &m, on_gpu, &r);
    check_consistent(&r, &m);
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
}
END_TEST

/* Pipelined layers (copies run ahead of the products): the GPU side costs the slower of its copies and its
 * products, so with products as slow as the copies the GPU takes more than with their sum, and the predicted
 * time is the max. With expected (uniform) counts before the routing, the GPU takes the lowest ids. */
START_TEST(test_pipelined)
{
    expert_split_result_t r, rs;
    for (int e = 0; e < NE; e++)
        count[e] = 64;
    expert_split_model_t m = model_of(25.0, 4000); /* 104 us a copy, 1.6 us of products a pair (100 us) */
    m.gpu_ns_per_pair = 1600;
    expert_split_plan(split, count, bytes, &m, on_gpu, &rs);
    m.pipelined = true;
    expert_split_plan(split, count, bytes, &m, on_gpu, &r);
    check_consistent(&r, &m);
    ck_assert_int_gt(r.gpu_experts, rs.gpu_experts);
    ck_assert(r.cpu_experts > 0 && r.gpu_experts > 0);
    const double copy = (double)r.gpu_bytes / m.copy_bpns, run = m.gpu_ns_per_pair * (double)r.gpu_pairs;
    ck_assert(fabs(r.t_gpu_ns - fmax(copy, run)) <= 1e-6 * r.t_gpu_ns);
    for (int e = 0; e < NE; e++)
        ck_assert_int_eq(on_gpu[e], e < r.gpu_experts);
    /* copy-bound (fast products), copies partly hidden behind the dense part: only the exposed part counts, so
     * the GPU takes more */
    expert_split_result_t rc, rh;
    m.gpu_ns_per_pair = 100;
    expert_split_plan(split, count, bytes, &m, on_gpu, &rc);
    m.copy_hidden_ns = 300000;
    expert_split_plan(split, count, bytes, &m, on_gpu, &rh);
    check_consistent(&rh, &m);
    ck_assert_int_gt(rh.gpu_experts, rc.gpu_experts);
    const double ch = (double)rh.gpu_bytes / m.copy_bpns - m.copy_hidden_ns, rn = m.gpu_ns_per_pair * (double)rh.gpu_pairs;
    ck_assert(fabs(rh.t_gpu_ns - fmax(ch, rn)) <= 1e-6 * rh.t_gpu_ns);
}
END_TEST

/* Experts already on the device cost no copy: they go first. The same inputs give the same plan. */
START_TEST(test_staged_first_and_deterministic)
{
    uint8_t again[NE];
    expert_split_result_t r, r2;
    for (int e = 0; e < NE; e++)
        count[e] = 1 + e % 4;
    bytes[0] = 0; /* one pair, but staged */
    expert_split_model_t m = model_of(25.0, 26000);
    expert_split_plan(split, count, bytes, &m, on_gpu, &r);
    check_consistent(&r, &m);
    ck_assert_int_eq(on_gpu[0], 1);
    ck_assert_int_gt(r.cpu_experts, 0);
    for (int i = 0; i < 3; i++) {
        expert_split_plan(split, count, bytes, &m, again, &r2);
        ck_assert(!memcmp(on_gpu, again, sizeof again));
        ck_assert(!memcmp(&r, &r2, sizeof r));
    }
    /* ties (equal counts and bytes) go to the lower id */
    for (int e = 0; e < NE; e++) {
        count[e] = 3;
        bytes[e] = 2600000;
    }
    expert_split_plan(split, count, bytes, &m, on_gpu, &r);
    ck_assert(r.gpu_experts > 0 && r.cpu_experts > 0);
    for (int e = 0; e < NE; e++)
        ck_assert_int_eq(on_gpu[e], e < r.gpu_experts);
}
END_TEST

START_TEST(test_forced_fraction)
{
    expert_split_result_t r;
    rng_t g;
    rng_seed(&g, 77);
    random_counts(&g, 64);
    expert_split_model_t m = model_of(0.001, 1); /* the times would keep everything on the CPU */
    m.force_gpu_fraction = 0;
    expert_split_plan(split, count, bytes, &m, on_gpu, &r);
    ck_assert_int_eq(r.gpu_pairs, 0);
    m.force_gpu_fraction = 1;
    expert_split_plan(split, count, bytes, &m, on_gpu, &r);
    check_consistent(&r, &m);
    ck_assert_int_eq(r.cpu_pairs, 0);
    ck_assert_int_eq(r.gpu_pairs, 128);
    m.force_gpu_fraction = 0.5;
    expert_split_plan(split, count, bytes, &m, on_gpu, &r);
    check_consistent(&r, &m);
    ck_assert(r.gpu_pairs >= 64 && r.cpu_pairs > 0);
}
END_TEST

/* Plausible ranges as the device uses them: ns per pair, ns per byte. */
#define PAIR_LO 0.01
#define PAIR_HI 1e8

START_TEST(test_cost_nothing_before_a_sample)
{
    expert_cost_t c;
    expert_cost_init(&c, PAIR_LO, PAIR_HI);
    ck_assert(!expert_cost_known(&c));
    ck_assert(expert_cost_ns_per_unit(&c) == 0);
    /* zero, negative, not finite, outside the plausible range: ignored, still no estimate */
    const double bad[][2] = {{0, 1000}, {10, 0}, {-5, 1000}, {10, -1}, {NAN, 1}, {1, NAN}, {INFINITY, 1},
                             {1, INFINITY}, {1e9, 1}, {1, 1e9}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(!expert_cost_add(&c, bad[i][0], bad[i][1]), "sample %zu taken", i);
    ck_assert(!expert_cost_known(&c));
    ck_assert(expert_cost_ns_per_unit(&c) == 0);
    ck_assert_uint_eq(expert_cost_rejected(&c), sizeof bad / sizeof bad[0]);
    ck_assert_uint_eq(expert_cost_accepted(&c), 0);
    /* the first sample sets the estimate */
    ck_assert(expert_cost_add(&c, 16384, 100e6));
    ck_assert(expert_cost_known(&c));
    ck_assert_double_eq_tol(expert_cost_ns_per_unit(&c), 100e6 / 16384, 1e-9);
    ck_assert_uint_eq(expert_cost_accepted(&c), 1);
}
END_TEST

/* A new rate within the outlier factor is reached geometrically; noisy samples settle on their mean rate. */
START_TEST(test_cost_converges)
{
    expert_cost_t c;
    expert_cost_init(&c, PAIR_LO, PAIR_HI);
    ck_assert(expert_cost_add(&c, 1000, 10000)); /* 10 ns a unit */
    int k = 0;
    while (fabs(expert_cost_ns_per_unit(&c) - 30) > 0.3) { /* now 30 ns a unit, samples of varied sizes */
        const double units = 500 + 250 * (k % 5);
        ck_assert(expert_cost_add(&c, units, 30 * units));
        ck_assert_int_lt(++k, 40);
    }
    ck_assert_int_ge(k, 5); /* no sample jumps there at once */
    rng_t g;
    rng_seed(&g, 5);
    expert_cost_init(&c, PAIR_LO, PAIR_HI);
    double sum = 0;
    for (int i = 0; i < 200; i++) {
        const double r = 7.0 * (0.9 + 0.2 * (double)(rng_next(&g) % 1001) / 1000.0); /* 7 +- 10% */
        sum += r;
        ck_assert(expert_cost_add(&c, 1000, r * 1000));
    }
    ck_assert_double_eq_tol(sum / 200, 7.0, 0.1);
    ck_assert_double_eq_tol(expert_cost_ns_per_unit(&c), 7.0, 0.35);
    /* a small sample at another rate moves it less than a large one */
    expert_cost_t a = c, b = c;
    expert_cost_add(&a, 10, 10 * 14.0);
    expert_cost_add(&b, 10000, 10000 * 14.0);
    ck_assert(expert_cost_ns_per_unit(&a) < expert_cost_ns_per_unit(&b));
    ck_assert_double_eq_tol(expert_cost_ns_per_unit(&a), expert_cost_ns_per_unit(&c), 0.1);
}
END_TEST

/* One outlier (a stalled copy, a preempted host) is set aside; outliers on both sides never restart; three in a
 * row on one side are a new rate. */
START_TEST(test_cost_outliers)
{
    expert_cost_t c;
    expert_cost_init(&c, PAIR_LO, PAIR_HI);
    ck_assert(expert_cost_add(&c, 1000, 10000));
    ck_assert(!expert_cost_add(&c, 1000, 1000000)); /* 100x slower */
    ck_assert_double_eq_tol(expert_cost_ns_per_unit(&c), 10, 1e-12);
    ck_assert(!expert_cost_add(&c, 1000, 1000)); /* 10x faster */
    ck_assert_double_eq_tol(expert_cost_ns_per_unit(&c), 10, 1e-12);
    for (int i = 0; i < 10; i++) /* alternating sides: noise */
        ck_assert(!expert_cost_add(&c, 1000, i % 2 ? 100000 : 1000));
    ck_assert_double_eq_tol(expert_cost_ns_per_unit(&c), 10, 1e-12);
    ck_assert(expert_cost_add(&c, 1000, 11000)); /* an ordinary sample is taken, and ends any run */
    ck_assert(!expert_cost_add(&c, 1000, 100000));
    ck_assert(!expert_cost_add(&c, 1000, 100000));
    ck_assert(expert_cost_add(&c, 1000, 11000));
    ck_assert(!expert_cost_add(&c, 1000, 100000));
    ck_assert(!expert_cost_add(&c, 1000, 100000));
    ck_assert(expert_cost_ns_per_unit(&c) < 12);
    ck_assert(expert_cost_add(&c, 1000, 100000)); /* the third in a row: the rate changed */
    ck_assert_double_eq_tol(expert_cost_ns_per_unit(&c), 100, 1e-9);
    ck_assert(expert_cost_add(&c, 1000, 110000));
    ck_assert(expert_cost_ns_per_unit(&c) > 100 && expert_cost_ns_per_unit(&c) < 110);
}
END_TEST

/* The H200 case (bench/results/cuda3-stager-split-h200-2026-11-29.md): the device's products as slow per pair
 * as the CPU side and copies at the stager's 24 GB/s. Without those costs (no device time, the 55 GB/s probe)
 * the plan puts most pairs on the device; with the measured estimates, most stay on the CPU side and the
 * predicted times balance. */
START_TEST(test_cost_measured_moves_the_split)
{
    expert_split_result_t before, after;
    for (int e = 0; e < NE; e++)
        count[e] = 64 + 16 * (e % 4); /* 1472 pairs */
    expert_cost_t pair, copy;
    expert_cost_init(&pair, PAIR_LO, PAIR_HI);
    expert_cost_init(&copy, 1e-3, 100);
    for (int i = 0; i < 4; i++) {
        expert_cost_add(&pair, 1200, 1200 * 6100.0); /* 6.1 us a pair */
        expert_cost_add(&copy, 12 * 2600000.0, 12 * 2600000.0 / 24.0);
    }
    const double cpu_b = 6100; /* 100 ms for 16384 pairs */
    expert_split_model_t m = {.copy_bpns = 55, .gpu_ns_per_pair = 0, .cpu_a_ns = 30000, .cpu_b_ns = cpu_b,
                              .force_gpu_fraction = -1};
    expert_split_plan(split, count, bytes, &m, on_gpu, &before);
    ck_assert_int_gt(before.gpu_pairs, before.cpu_pairs);
    m.gpu_ns_per_pair = expert_cost_ns_per_unit(&pair);
    m.copy_bpns = 1.0 / expert_cost_ns_per_unit(&copy);
    ck_assert_double_eq_tol(m.copy_bpns, 24.0, 1e-9);
    expert_split_plan(split, count, bytes, &m, on_gpu, &after);
    check_consistent(&after, &m);
    ck_assert_int_lt(after.gpu_pairs, after.cpu_pairs);
    ck_assert_int_gt(after.gpu_pairs, 0);
    /* balanced within one expert's worth of time */
    ck_assert(fabs(after.t_gpu_ns - after.t_cpu_ns) < 112 * 6100.0 + 2600000 / 24.0);
}
END_TEST

/* A CPU part costs the device its exchange: a large batch whose CPU share saves less device time than posting
 * it costs goes wholly to the GPU (no exchange); a copy-bound small batch still splits; the plan is the best of
 * every prefix with the exchange counted. */
START_TEST(test_exchange_cost)
{
    expert_split_result_t free_x, paid;
    for (int e = 0; e < NE; e++)
        count[e] = 2048; /* a 4096-token batch's share */
    /* products 75 ns a pair (154 us an expert), copies hidden; the CPU 0.3 us a pair (614 us an expert) */
    expert_split_model_t m = model_of(55.0, 300);
    m.gpu_ns_per_pair = 75;
    m.pipelined = true;
    m.copy_hidden_ns = 8e6;
    expert_split_plan(split, count, bytes, &m, on_gpu, &free_x);
    check_consistent(&free_x, &m);
    ck_assert_int_gt(free_x.cpu_experts, 0); /* without its cost, the CPU side takes a share */
    ck_assert(free_x.t_xchg_ns == 0);
    m.xchg_ns = 600000;                      /* 32 MB of activations posted at ~55 GB/s */
    m.xchg_ns_per_pair = 8192 / 55.0;
    expert_split_plan(split, count, bytes, &m, on_gpu, &paid);
    check_consistent(&paid, &m);
    ck_assert_int_eq(paid.cpu_experts, 0);
    ck_assert_int_eq(paid.gpu_experts, NE);
    ck_assert(paid.t_xchg_ns == 0);
    /* every prefix of the order (equal experts: any k) is no better once its exchange is counted */
    for (int k = 0; k < NE; k++) {
        const int64_t gp = (int64_t)k * 2048, cp = (int64_t)(NE - k) * 2048;
        const double tg = k ? fmax((double)k * 2600000 / m.copy_bpns - m.copy_hidden_ns, m.gpu_ns_per_pair * (double)gp)
                            : 0;
        const double t = fmax(tg, m.cpu_a_ns + m.cpu_b_ns * (double)cp) + m.xchg_ns + m.xchg_ns_per_pair * (double)cp;
        ck_assert(t >= paid.t_gpu_ns);
    }
    /* a small, copy-bound batch: the exchange is small beside the copies the CPU side saves */
    for (int e = 0; e < NE; e++)
        count[e] = 16;
    m.copy_hidden_ns = 0;
    m.xchg_ns = 75000;
    expert_split_plan(split, count, bytes, &m, on_gpu, &paid);
    check_consistent(&paid, &m);
    ck_assert(paid.cpu_experts > 0 && paid.gpu_experts > 0);
    const double want = m.xchg_ns + m.xchg_ns_per_pair * (double)paid.cpu_pairs;
    ck_assert(fabs(paid.t_xchg_ns - want) <= 1e-6 * want);
}
END_TEST

static Suite *split_suite(void)
{
    Suite *s = suite_create("expert_split");
    TCase *tc = tcase_create("ends");
    tcase_add_checked_fixture(tc, split_setup, split_teardown);
    tcase_add_test(tc, test_small_batch_or_slow_copy_stays_on_the_cpu);
    tcase_add_test(tc, test_slow_cpu_goes_to_the_gpu);
    suite_add_tcase(s, tc);
    tc = tcase_create("balance");
    tcase_add_checked_fixture(tc, split_setup, split_teardown);
    tcase_add_loop_test(tc, test_balanced_in_between, 0, 6);
    tcase_add_test(tc, test_staged_first_and_deterministic);
    tcase_add_test(tc, test_pipelined);
    tcase_add_test(tc, test_forced_fraction);
    tcase_add_test(tc, test_exchange_cost);
    suite_add_tcase(s, tc);
    tc = tcase_create("cost");
    tcase_add_checked_fixture(tc, split_setup, split_teardown);
    tcase_add_test(tc, test_cost_nothing_before_a_sample);
    tcase_add_test(tc, test_cost_converges);
    tcase_add_test(tc, test_cost_outliers);
    tcase_add_test(tc, test_cost_measured_moves_the_split);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(split_suite());
}
