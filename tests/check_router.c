/* Tests for the routers' kernels of the CPU backend (gpu-worker/dense/cpu/cpu_kernels.h): the grouped sigmoid
 * router against a computation written another way (sort by score, groups by sorting their scores), by hand on
 * a small case, and with NaNs (valid, distinct ids). */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/sample/rng.h"
#include "gpu-worker/dense/cpu/cpu_kernels.h"
#include "tests/check_run.h"

/* Index order by v descending, lower index first on ties (a stable insertion sort). */
static void order_desc(const float *v, int n, int *idx)
{
    for (int i = 0; i < n; i++) {
        int j = i;
        while (j > 0 && v[idx[j - 1]] < v[i]) {
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = i;
    }
}

/* The expert groups ordered by their score (the two best of each summed), the experts of all but the `used` first
 * set to -INFINITY in sel[0..n). */
static void naive_groups(float *sel, int n, int groups, int used)
{
    float gs[64];
    int idx[256], gidx[64];
    ck_assert(n <= 256 && groups <= 64);
    const int per = n / groups;
    for (int g = 0; g < groups; g++) {
        order_desc(sel + g * per, per, idx);
        gs[g] = sel[g * per + idx[0]] + sel[g * per + idx[1]];
    }
    order_desc(gs, groups, gidx);
    for (int r = used; r < groups; r++)
        for (int e = 0; e < per; e++)
            sel[gidx[r] * per + e] = -INFINITY;
}

/* llama.cpp's build_moe_ffn with sigmoid gating, another way round: the expert groups ordered by their score,
 * the candidates' scores sorted. */
static void naive(const float *logits, const float *bias, int n, int k, int groups, int used, bool renorm,
                  float scale, int32_t *ids, float *w)
{
    float s[256], sel[256];
    int idx[256];
    ck_assert(n <= 256);
    for (int e = 0; e < n; e++) {
        s[e] = 1.0f / (1.0f + expf(-logits[e]));
        sel[e] = bias ? s[e] + bias[e] : s[e];
    }
    if (groups > 1)
        naive_groups(sel, n, groups, used);
    order_desc(sel, n, idx);
    float sum = 0;
    for (int j = 0; j < k; j++) {
        ids[j] = idx[j];
        w[j] = s[idx[j]];
        sum += w[j];
    }
    for (int j = 0; renorm && j < k; j++)
        w[j] /= sum < 6.103515625e-5f ? 6.103515625e-5f : sum;
    for (int j = 0; scale != 0 && scale != 1 && j < k; j++)
        w[j] *= scale;
}

START_TEST(test_sigmoid_grouped_against_naive)
{
    static const struct {
        int n, k, groups, used;
        bool bias, renorm;
        float scale;
    } cases[] = {
        {8, 2, 0, 0, true, true, 2.5f},    {128, 8, 0, 0, true, true, 1.0f}, {160, 8, 1, 1, true, false, 0.0f},
        {256, 8, 8, 4, true, true, 2.5f},  {64, 6, 8, 3, false, true, 16.f}, {16, 4, 4, 2, true, false, 1.5f},
        {32, 8, 4, 4, true, true, 0.0f},
    };
    rng_t r;
    rng_seed(&r, 1234);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int n = cases[c].n, k = cases[c].k;
        float logits[256], bias[256], scratch[3 * 256 + 128], w[16], wr[16];
        int32_t ids[16], idr[16];
        for (int rep = 0; rep < 50; rep++) {
            for (int e = 0; e < n; e++) {
                logits[e] = (float)(4 * rng_uniform(&r) - 2);
                bias[e] = (float)(0.2 * rng_uniform(&r) - 0.1);
            }
            if (rep % 5 == 0) /* exact ties: the lower id first */
                logits[3] = logits[1];
            const float *b = cases[c].bias ? bias : NULL;
            ck_assert_int_le(cpu_router_sigmoid_scratch(n, cases[c].groups), (int64_t)(sizeof scratch / 4));
            cpu_router_sigmoid_grouped(logits, b, n, k, cases[c].groups, cases[c].used, cases[c].renorm,
                                       cases[c].scale, ids, w, scratch);
            naive(logits, b, n, k, cases[c].groups, cases[c].used, cases[c].renorm, cases[c].scale, idr, wr);
            for (int j = 0; j < k; j++) {
                ck_assert_msg(ids[j] == idr[j], "case %zu rep %d slot %d: id %d, expected %d", c, rep, j, ids[j],
                              idr[j]);
                ck_assert_msg(w[j] == wr[j], "case %zu rep %d slot %d: weight %g, expected %g", c, rep, j,
                              (double)w[j], (double)wr[j]);
            }
        }
    }
}
END_TEST

/* The softmax router with expert groups (DeepSeek-V2): the probabilities as cpu_router_topk leaves them in its
 * scratch, then the groups and the choice by sorting, as naive does with the sigmoid gates; without groups the
 * same bits as cpu_router_topk. */
START_TEST(test_softmax_grouped_against_naive)
{
    static const struct {
        int n, k, groups, used;
        bool renorm;
        float scale;
    } cases[] = {
        {160, 6, 8, 3, false, 16.f}, {64, 6, 8, 3, true, 1.0f}, {16, 4, 4, 2, false, 0.0f},
        {32, 8, 4, 4, true, 2.5f},   {64, 4, 0, 0, false, 1.0f}, {64, 4, 1, 1, true, 0.0f},
    };
    rng_t r;
    rng_seed(&r, 99);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int n = cases[c].n, k = cases[c].k, G = cases[c].groups;
        float logits[256], scratch[3 * 256 + 128], probs[256], w[16], wr[16], all_w[256];
        int32_t ids[16], idr[16], all_ids[256];
        int idx[256];
        for (int rep = 0; rep < 50; rep++) {
            for (int e = 0; e < n; e++)
                logits[e] = (float)(6 * rng_uniform(&r) - 3);
            if (rep % 5 == 0) /* exact ties: the lower id first */
                logits[3] = logits[1];
            ck_assert_int_le(cpu_router_sigmoid_scratch(n, G), (int64_t)(sizeof scratch / 4));
            cpu_router_softmax_grouped(logits, n, k, G, cases[c].used, cases[c].renorm, cases[c].scale, ids, w,
                                       scratch);
            cpu_router_topk(logits, n, n, false, 0.0f, all_ids, all_w, probs);
            if (G <= 1) {
                cpu_router_topk(logits, n, k, cases[c].renorm, cases[c].scale, idr, wr, probs);
            } else {
                float sel[256];
                memcpy(sel, probs, (size_t)n * sizeof *sel);
                naive_groups(sel, n, G, cases[c].used);
                order_desc(sel, n, idx);
                float sum = 0;
                for (int j = 0; j < k; j++) {
                    idr[j] = idx[j];
                    wr[j] = probs[idx[j]];
                    sum += wr[j];
                }
                for (int j = 0; cases[c].renorm && j < k; j++)
                    wr[j] /= sum < 6.103515625e-5f ? 6.103515625e-5f : sum;
                for (int j = 0; cases[c].scale != 0 && cases[c].scale != 1 && j < k; j++)
                    wr[j] *= cases[c].scale;
            }
            for (int j = 0; j < k; j++) {
                ck_assert_msg(ids[j] == idr[j], "case %zu rep %d slot %d: id %d, expected %d", c, rep, j, ids[j],
                              idr[j]);
                ck_assert_msg(w[j] == wr[j], "case %zu rep %d slot %d: weight %g, expected %g", c, rep, j,
                              (double)w[j], (double)wr[j]);
            }
            if (G > 1) { /* the chosen lie in at most `used` groups */
                int in_group[64] = {0}, groups_hit = 0;
                for (int j = 0; j < k; j++)
                    if (!in_group[ids[j] / (n / G)]++)
                        groups_hit++;
                ck_assert_int_le(groups_hit, cases[c].used);
            }
        }
    }
}
END_TEST

/* 8 experts in 4 groups of 2, the best 2 groups compete: worked out by hand. */
START_TEST(test_sigmoid_grouped_by_hand)
{
    /* gates s = sigmoid(logit); the bias moves the choice, not the weights */
    const float logits[8] = {0, 0, 2, -2, 1, 1, -1, 3};
    const float bias[8] = {0, 0, 0, 0, 0, 0, 0.5f, -0.5f};
    float s[8];
    for (int e = 0; e < 8; e++)
        s[e] = 1.0f / (1.0f + expf(-logits[e]));
    /* sel: 0.5 0.5 | .881 .119 | .731 .731 | .769 .453 ; group sums: 1.0, 1.0, 1.462, 1.222: groups 2 and 3 */
    float scratch[32], w[3];
    int32_t ids[3];
    cpu_router_sigmoid_grouped(logits, bias, 8, 3, 4, 2, false, 0, ids, w, scratch);
    ck_assert_int_eq(ids[0], 6); /* 0.269 + 0.5 */
    ck_assert_int_eq(ids[1], 4); /* 0.731, lower id than 5 */
    ck_assert_int_eq(ids[2], 5);
    ck_assert(w[0] == s[6] && w[1] == s[4] && w[2] == s[5]);
    /* without groups expert 2 (0.881) wins; renorm and scale */
    cpu_router_sigmoid_grouped(logits, bias, 8, 3, 0, 0, true, 2.0f, ids, w, scratch);
    ck_assert_int_eq(ids[0], 2);
    ck_assert_int_eq(ids[1], 6);
    ck_assert_int_eq(ids[2], 4);
    const float sum = s[2] + s[6] + s[4];
    ck_assert(w[0] == s[2] / sum * 2.0f && w[1] == s[6] / sum * 2.0f && w[2] == s[4] / sum * 2.0f);
}
END_TEST

/* NaN logits or biases never give an id out of range or twice. */
START_TEST(test_sigmoid_grouped_nan)
{
    float logits[16], bias[16], scratch[64], w[4];
    int32_t ids[4];
    for (int e = 0; e < 16; e++) {
        logits[e] = (float)e / 8;
        bias[e] = 0;
    }
    for (int mode = 0; mode < 3; mode++) {
        if (mode == 0)
            logits[0] = NAN;
        if (mode == 1)
            for (int e = 0; e < 16; e++)
                logits[e] = NAN;
        if (mode == 2)
            bias[5] = NAN;
        for (int groups = 0; groups <= 4; groups += 4) {
            cpu_router_sigmoid_grouped(logits, bias, 16, 4, groups, groups ? 1 : 0, true, 1, ids, w, scratch);
            for (int j = 0; j < 4; j++) {
                ck_assert(ids[j] >= 0 && ids[j] < 16);
                for (int q = 0; q < j; q++)
                    ck_assert_int_ne(ids[q], ids[j]);
            }
        }
    }
}
END_TEST

int main(void)
{
    Suite *su = suite_create("router");
    TCase *tc = tcase_create("sigmoid_grouped");
    tcase_add_test(tc, test_sigmoid_grouped_against_naive);
    tcase_add_test(tc, test_sigmoid_grouped_by_hand);
    tcase_add_test(tc, test_sigmoid_grouped_nan);
    tcase_add_test(tc, test_softmax_grouped_against_naive);
    suite_add_tcase(su, tc);
    return check_run(su);
}
