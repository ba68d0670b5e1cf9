/* Tests for core/sample: the PRNG's fixed sequence and each stage of the sampling chain. */
#include "core/sample/logits_pick.h"
#include "core/sample/rng.h"
#include "core/sample/sampler.h"
#include "tests/check_run.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- rng ---------------------------------------------------------------------------------------------- */

START_TEST(test_rng_sequence_is_pinned)
{
    /* xoshiro256** seeded by splitmix64; values computed independently (Python, big integers) */
    rng_t r;
    rng_seed(&r, 0);
    ck_assert_uint_eq(rng_next(&r), 0x99ec5f36cb75f2b4ull);
    ck_assert_uint_eq(rng_next(&r), 0xbf6e1f784956452aull);
    ck_assert_uint_eq(rng_next(&r), 0x1a5f849d4933e6e0ull);
    rng_seed(&r, 42);
    ck_assert_uint_eq(rng_next(&r), 0x15780b2e0c2ec716ull);
    ck_assert_uint_eq(rng_next(&r), 0x6104d9866d113a7eull);
    ck_assert_uint_eq(rng_next(&r), 0xae17533239e499a1ull);
    rng_seed(&r, 7);
    ck_assert(rng_uniform(&r) == 0.7005764821796896);
    ck_assert(rng_uniform(&r) == 0.2787512294737843);
    ck_assert(rng_uniform(&r) == 0.8396274618764198);
}
END_TEST

START_TEST(test_rng_uniform_range)
{
    rng_t r;
    rng_seed(&r, 123);
    double lo = 1, hi = 0;
    for (int i = 0; i < 100000; i++) {
        double u = rng_uniform(&r);
        ck_assert(u >= 0 && u < 1);
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
    }
    ck_assert(lo < 0.001 && hi > 0.999);
}
END_TEST

/* ---- sampler ------------------------------------------------------------------------------------------ */

static sampler_t *make(sample_params_t p, int32_t n_vocab)
{
    sampler_t *s = NULL;
    guild_err_t err = {{0}};
    ck_assert_msg(sampler_new(&s, &p, n_vocab, &err) == 0, "%s", err.msg);
    return s;
}

static sample_params_t plain(float temp, uint64_t seed)
{
    sample_params_t p;
    sample_params_default(&p);
    p.temp = temp;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = seed;
    return p;
}

START_TEST(test_greedy_lowest_id_on_ties_and_nan)
{
    float logits[] = {1.0f, 3.0f, NAN, 3.0f, 2.0f};
    sampler_t *s = make(plain(0.0f, 0), 5);
    ck_assert_int_eq(sampler_sample(s, logits), 1);
    logits[0] = 5.0f;
    ck_assert_int_eq(sampler_sample(s, logits), 0);
    sampler_destroy(&s);
    ck_assert_ptr_null(s);
}
END_TEST

/* logits_pick (the device pick's scalar reference): the sampler's greedy id and its non-finite note, on hand-made
 * rows (ties, NaN first, -infinity only, +infinity, signed zeros) and on random rows of every length around its
 * chunks, against sampler_sample at temperature 0 and sampler_nonfinite. */
START_TEST(test_pick_is_the_greedy_choice)
{
    static const struct {
        float x[6];
        int32_t id, nonfinite;
    } cases[] = {
        {{1, 3, 0, 3, 2, 0}, 1, -1},              /* ties: the lowest id */
        {{0, 0, 0, 0, 0, 0}, 0, -1},
        {{NAN, 1, 2, 2, 0, 0}, 2, 0},             /* a NaN first counts as -infinity */
        {{-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY}, 0, 0},
        {{NAN, NAN, NAN, NAN, NAN, NAN}, 0, 0},
        {{NAN, -INFINITY, NAN, -INFINITY, -5, NAN}, 4, 0},
        {{1, INFINITY, 2, INFINITY, NAN, 0}, 1, 1},
        {{-0.0f, 0.0f, -0.0f, 0, 0, 0}, 0, -1},  /* -0 == +0: the first */
        {{-1, -2, -3, -4, -5, 7}, 5, -1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const logits_pick_t p = logits_pick(cases[c].x, 6);
        ck_assert_msg(p.id == cases[c].id && p.nonfinite == cases[c].nonfinite, "case %zu: %d %d", c, p.id,
                      p.nonfinite);
        if (p.nonfinite >= 0)
            ck_assert(!memcmp(&p.bad, &cases[c].x[p.nonfinite], sizeof p.bad));
        else
            ck_assert(p.bad == 0.0f);
    }
    enum { V = 3000 };
    float *x = malloc(V * sizeof *x);
    ck_assert_ptr_nonnull(x);
    uint64_t lcg = 99;
    for (int r = 0; r < 40; r++) {
        for (int32_t i = 0; i < V; i++) {
            lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
            x[i] = r % 4 == 1 ? (float)((lcg >> 40) % 5) : (float)(lcg >> 40) / (float)(1 << 24) * 20.0f - 10.0f;
        }
        if (r % 5 == 2)
            for (int32_t i = r; i < V; i += 301)
                x[i] = (r / 5) % 2 ? NAN : -INFINITY;
        if (r % 7 == 3)
            x[0] = NAN;
        if (r % 11 == 4)
            x[V - 1 - r] = INFINITY;
        for (int32_t n = 1; n <= 101; n++) { /* every length around the chunks', then the whole row */
            const float *row = n <= 100 ? x + r : x;
            const int32_t len = n <= 100 ? n : V;
            sampler_t *s = make(plain(0.0f, 0), len);
            const logits_pick_t p = logits_pick(row, len);
            ck_assert_int_eq(p.id, sampler_sample(s, row));
            ck_assert_int_eq(p.nonfinite, sampler_nonfinite(s));
            sampler_destroy(&s);
        }
    }
    free(x);
}
END_TEST

/* logits_pick_better, the order the device's reduction (gpu-worker/dense/cuda/logits_pick.cu) merges its threads'
 * bests by: a host model of that reduction (NaN as -infinity, each of `threads` strided slices scanned, then the
 * slices' bests merged pairwise in a tree of any shape) gives logits_pick's id on rows of ties, signed zeros,
 * -infinity runs and NaNs, for several thread counts (the kernel's answer must not depend on its shape). */
static int32_t pick_by_reduction(const float *x, int32_t n, int threads, int stride_merge)
{
    float bv[64];
    int32_t bid[64];
    for (int t = 0; t < threads; t++) {
        bv[t] = -INFINITY;
        bid[t] = INT32_MAX;
        for (int32_t i = t; i < n; i += threads) {
            const float v = isnan(x[i]) ? -INFINITY : x[i];
            if (logits_pick_better(v, i, bv[t], bid[t])) {
                bv[t] = v;
                bid[t] = i;
            }
        }
    }
    /* a tree: at each level, slot t takes slot t + d (d halving, as __shfl_down_sync's reduction), or neighbours
     * first (d doubling) */
    for (int d = stride_merge ? threads / 2 : 1; stride_merge ? d > 0 : d < threads; d = stride_merge ? d / 2 : d * 2)
        for (int t = 0; t + d < threads; t += stride_merge ? 1 : 2 * d)
            if (logits_pick_better(bv[t + d], bid[t + d], bv[t], bid[t])) {
                bv[t] = bv[t + d];
                bid[t] = bid[t + d];
            }
    return bid[0];
}

START_TEST(test_pick_reduction_order)
{
    ck_assert(!logits_pick_better(NAN, 0, 1.0f, 5));             /* NaN never wins (the kernel makes it -inf) */
    ck_assert(logits_pick_better(0.0f, 2, -0.0f, 3));            /* -0 == +0: the lower id */
    ck_assert(!logits_pick_better(-0.0f, 3, 0.0f, 2));
    ck_assert(logits_pick_better(-INFINITY, 7, -INFINITY, INT32_MAX)); /* a thread with no element loses */
    enum { V = 700 };
    float x[V];
    uint64_t lcg = 5;
    for (int r = 0; r < 24; r++) {
        for (int32_t i = 0; i < V; i++) {
            lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
            const uint32_t u = (uint32_t)(lcg >> 33);
            x[i] = r % 3 == 0 ? (float)(u % 4) : r % 3 == 1 ? (u % 2 ? 0.0f : -0.0f) : (float)(u % 1000) - 500.0f;
            if (r % 4 == 1 && u % 7 == 0)
                x[i] = NAN;
            if (r % 4 == 2 && u % 5 == 0)
                x[i] = -INFINITY;
        }
        if (r % 6 == 5)
            for (int32_t i = 0; i < V; i++)
                x[i] = i % 2 ? NAN : -INFINITY;
        for (int32_t n = 1; n <= V; n += n < 70 ? 1 : 63) {
            const int32_t want = logits_pick(x, n).id;
            for (int threads = 1; threads <= 64; threads *= 2)
                for (int sm = 0; sm < 2; sm++)
                    ck_assert_msg(pick_by_reduction(x, n, threads, sm) == want,
                                  "row %d, %d elements, %d threads (%s): %d, the scan's %d", r, n, threads,
                                  sm ? "halving" : "doubling", pick_by_reduction(x, n, threads, sm), want);
        }
    }
}
END_TEST

START_TEST(test_repetition_penalty)
{
    sample_params_t p = plain(0.0f, 0);
    p.repeat_penalty = 2.0f;
    p.repeat_last_n = 2;
    sampler_t *s = make(p, 4);
    float pos[] = {1.0f, 3.0f, 2.5f, -1.0f};
    ck_assert_int_eq(sampler_sample(s, pos), 1);
    sampler_accept(s, 1);
    sampler_accept(s, 1); /* a token seen twice is penalised once */
    ck_assert_int_eq(sampler_sample(s, pos), 2); /* 3.0 / 2 = 1.5 < 2.5 */
    float neg[] = {-1.0f, -0.5f, -0.6f, -3.0f};
    ck_assert_int_eq(sampler_sample(s, neg), 2); /* -0.5 * 2 = -1.0 < -0.6 */
    sampler_accept(s, 3);
    sampler_accept(s, 0); /* the window is 2: token 1 has left it */
    ck_assert_int_eq(sampler_sample(s, pos), 1);
    ck_assert_int_eq(sampler_sample(s, (float[]){3.0f, 1.0f, 2.0f, 2.9f}), 2); /* 3/2=1.5, 2.9/2=1.45 */
    sampler_reset(s);
    ck_assert_int_eq(sampler_sample(s, pos), 1);
    sampler_destroy(&s);
}
END_TEST

/* logits whose softmax at temperature 1 is {0.5, 0.3, 0.2} */
static void probs_532(float *l)
{
    l[0] = logf(0.5f);
    l[1] = logf(0.3f);
    l[2] = logf(0.2f);
}

START_TEST(test_draws_follow_the_pinned_sequence)
{
    /* seed 7 draws u = 0.7006, 0.2788, 0.8396: cumulative {0.5, 0.8, 1.0} gives 1, 0, 2 */
    float l[3];
    probs_532(l);
    sampler_t *s = make(plain(1.0f, 7), 3);
    ck_assert_int_eq(sampler_sample(s, l), 1);
    ck_assert_int_eq(sampler_sample(s, l), 0);
    ck_assert_int_eq(sampler_sample(s, l), 2);
    sampler_reset(s); /* reseeds: same sequence again */
    ck_assert_int_eq(sampler_sample(s, l), 1);
    ck_assert_int_eq(sampler_sample(s, l), 0);
    sampler_destroy(&s);
}
END_TEST

static void count_draws(sample_params_t p, const float *l, int n_vocab, int n, int *counts)
{
    sampler_t *s = make(p, n_vocab);
    memset(counts, 0, sizeof(int) * (size_t)n_vocab);
    for (int i = 0; i < n; i++)
        counts[sampler_sample(s, l)]++;
    sampler_destroy(&s);
}

START_TEST(test_top_p_and_min_p)
{
    float l[3];
    int c[3];
    probs_532(l);
    sample_params_t p = plain(1.0f, 1);
    p.top_p = 0.5f; /* 0.5 alone reaches it */
    count_draws(p, l, 3, 500, c);
    ck_assert_int_eq(c[0], 500);
    p.top_p = 0.75f; /* needs 0 and 1 */
    count_draws(p, l, 3, 2000, c);
    ck_assert(c[0] > 0 && c[1] > 0 && c[2] == 0);
    ck_assert(c[0] > c[1]); /* 0.625 vs 0.375 after renormalisation */
    p = plain(1.0f, 2);
    p.min_p = 0.5f; /* keeps p >= 0.25: tokens 0 and 1 */
    count_draws(p, l, 3, 2000, c);
    ck_assert(c[0] > 0 && c[1] > 0 && c[2] == 0);
    p.min_p = 0.39f; /* 0.2 >= 0.195: all three */
    count_draws(p, l, 3, 2000, c);
    ck_assert(c[0] > 0 && c[1] > 0 && c[2] > 0);
}
END_TEST

START_TEST(test_top_k_on_a_large_vocabulary)
{
    enum { N = 5000, K = 7 };
    static float l[N];
    static int c[N];
    rng_t r;
    rng_seed(&r, 99);
    for (int i = 0; i < N; i++)
        l[i] = (float)(rng_uniform(&r) * 10.0);
    l[123] = l[4000] = 20.0f; /* a tie among the best */
    /* the K best by brute force */
    int best[K];
    for (int j = 0; j < K; j++) {
        int b = -1;
        for (int i = 0; i < N; i++) {
            int taken = 0;
            for (int q = 0; q < j; q++)
                taken |= best[q] == i;
            if (!taken && (b < 0 || l[i] > l[b]))
                b = i;
        }
        best[j] = b;
    }
    sample_params_t p = plain(1000.0f, 5); /* near-uniform over the survivors */
    p.top_k = K;
    count_draws(p, l, N, 3000, c);
    int total = 0;
    for (int j = 0; j < K; j++) {
        ck_assert_msg(c[best[j]] > 0, "top-%d token %d never drawn", j, best[j]);
        total += c[best[j]];
    }
    ck_assert_int_eq(total, 3000);
    p.top_k = 1;
    count_draws(p, l, N, 50, c);
    ck_assert_int_eq(c[123], 50); /* tie at the top: the lower id */
}
END_TEST

START_TEST(test_temperature_sharpens)
{
    float l[3];
    int hot[3], cold[3];
    probs_532(l);
    count_draws(plain(2.0f, 3), l, 3, 4000, hot);
    count_draws(plain(0.25f, 3), l, 3, 4000, cold);
    ck_assert(cold[0] > hot[0]);
    ck_assert(cold[2] < hot[2]);
}
END_TEST

START_TEST(test_same_seed_same_tokens)
{
    enum { N = 64 };
    float l[N];
    for (int i = 0; i < N; i++)
        l[i] = sinf((float)i);
    sample_params_t p;
    sample_params_default(&p);
    p.seed = 1234;
    sampler_t *a = make(p, N), *b = make(p, N);
    p.seed = 1235;
    sampler_t *c = make(p, N);
    int differ = 0;
    for (int i = 0; i < 200; i++) {
        int32_t ta = sampler_sample(a, l), tb = sampler_sample(b, l), tc = sampler_sample(c, l);
        ck_assert_int_eq(ta, tb);
        differ |= ta != tc;
    }
    ck_assert(differ);
    sampler_destroy(&a);
    sampler_destroy(&b);
    sampler_destroy(&c);
}
END_TEST

START_TEST(test_bad_parameters)
{
    sampler_t *s = NULL;
    guild_err_t err = {{0}};
    sample_params_t p = plain(1.0f, 0);
    p.top_p = 0.0f;
    ck_assert_int_eq(sampler_new(&s, &p, 10, &err), -1);
    ck_assert_ptr_null(s);
    ck_assert_ptr_nonnull(strstr(err.msg, "top-p"));
    p.top_p = 1.5f;
    ck_assert_int_eq(sampler_new(&s, &p, 10, &err), -1);
    p = plain(1.0f, 0);
    p.repeat_penalty = -1.0f;
    ck_assert_int_eq(sampler_new(&s, &p, 10, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "repeat penalty"));
    p = plain(NAN, 0);
    ck_assert_int_eq(sampler_new(&s, &p, 10, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "temperature"));
    p = plain(1.0f, 0);
    ck_assert_int_eq(sampler_new(&s, &p, 0, &err), -1);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("sample");
    TCase *tc = tcase_create("rng");
    tcase_add_test(tc, test_rng_sequence_is_pinned);
    tcase_add_test(tc, test_rng_uniform_range);
    suite_add_tcase(su, tc);
    tc = tcase_create("greedy");
    tcase_add_test(tc, test_greedy_lowest_id_on_ties_and_nan);
    tcase_add_test(tc, test_pick_is_the_greedy_choice);
    tcase_add_test(tc, test_pick_reduction_order);
    suite_add_tcase(su, tc);
    tc = tcase_create("penalty");
    tcase_add_test(tc, test_repetition_penalty);
    suite_add_tcase(su, tc);
    tc = tcase_create("draw");
    tcase_add_test(tc, test_draws_follow_the_pinned_sequence);
    tcase_add_test(tc, test_same_seed_same_tokens);
    tcase_add_test(tc, test_temperature_sharpens);
    suite_add_tcase(su, tc);
    tc = tcase_create("filters");
    tcase_add_test(tc, test_top_p_and_min_p);
    tcase_add_test(tc, test_top_k_on_a_large_vocabulary);
    suite_add_tcase(su, tc);
    tc = tcase_create("params");
    tcase_add_test(tc, test_bad_parameters);
    suite_add_tcase(su, tc);
    return check_run(su);
}
