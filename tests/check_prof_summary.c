/* bench/prof_summary: guild-cuda-prof's arithmetic on hand-made traces (no GPU, no CUPTI); bench_argmax (the
 * benchmarks' greedy pick) against the plain loop. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "bench/prof_summary.h"
#include "bench/prof_timeline.h"
#include "gpu-worker/dense/cuda/cuda_timeline.h"
#include "tests/check_run.h"

static const char *const names[] = {"kern_a", "kern_b", "kern_unused"};

#define K(s, e, w, g) {.start = (s), .end = (e), .what = (w), .kind = PROF_KERNEL, .graph = (g)}

/* Two steps [1000, 2000) and [3000, 4000) (ns):
 *   step 0: a [1100,1300], b [1350,1450], a [1400,1500] (overlaps b), a DtoH copy [1600,1700] of 64 bytes
 *   step 1: a [3100,3200], b [3300,3400], a memset [3500,3550] of 32 bytes
 * and a kernel before the first step and one between the steps (both outside). Records given out of order. */
static prof_rec_t trace[] = {
    K(3300, 3400, 1, 1),
    K(1400, 1500, 0, 1),
    {.start = 1600, .end = 1700, .bytes = 64, .what = PROF_COPY_DTOH, .kind = PROF_MEMCPY},
    K(500, 600, 0, 0),
    K(1100, 1300, 0, 1),
    K(2500, 2600, 1, 0),
    {.start = 3500, .end = 3550, .bytes = 32, .kind = PROF_MEMSET},
    K(1350, 1450, 1, 0),
    K(3100, 3200, 0, 1),
};
static const uint64_t t0[] = {1000, 3000}, t1[] = {2000, 4000};

START_TEST(test_step_figures)
{
    prof_summary_t s;
    guild_err_t err = {{0}};
    ck_assert_int_eq(prof_summarize(&s, trace, sizeof trace / sizeof trace[0], names, 3, t0, t1, 2, &err), 0);
    ck_assert_double_eq_tol(s.wall_median_ns, 1000, 1e-9);
    ck_assert_uint_eq(s.kernels, 5);
    ck_assert_uint_eq(s.graph_kernels, 4);
    ck_assert_uint_eq(s.outside, 2);
    /* busy: step 0 union 200 + 150 = 350; step 1 200: median 0.275; with the copy 0.45 and the memset 0.25 */
    ck_assert_double_eq_tol(s.busy_kernels, 0.275, 1e-12);
    ck_assert_double_eq_tol(s.busy_step_ns, 275, 1e-12);
    ck_assert_double_eq_tol(s.busy_all, 0.35, 1e-12);
    /* gaps: step 0: 50 then 0 (overlap); step 1: 100 -> per gap median 50, p90 100; per step 50, 100 -> 75 */
    ck_assert_double_eq_tol(s.gap_median_ns, 50, 1e-12);
    ck_assert_double_eq_tol(s.gap_p90_ns, 100, 1e-12);
    ck_assert_double_eq_tol(s.gap_step_ns, 75, 1e-12);
    /* head 100 and 100; tail 2000 - 1500 = 500 and 4000 - 3400 = 600 */
    ck_assert_double_eq_tol(s.head_ns, 100, 1e-12);
    ck_assert_double_eq_tol(s.tail_ns, 550, 1e-12);
    prof_summary_fini(&s);
    ck_assert_ptr_null(s.kernels_by_name);
}
END_TEST

START_TEST(test_by_name_and_copies)
{
    prof_summary_t s;
    guild_err_t err = {{0}};
    ck_assert_int_eq(prof_summarize(&s, trace, sizeof trace / sizeof trace[0], names, 3, t0, t1, 2, &err), 0);
    ck_assert_int_eq(s.n_names, 2);
    ck_assert_str_eq(s.kernels_by_name[0].name, "kern_a"); /* 200 + 100 + 100 = 400 ns */
    ck_assert_uint_eq(s.kernels_by_name[0].count, 3);
    ck_assert_uint_eq(s.kernels_by_name[0].ns, 400);
    ck_assert_uint_eq(s.kernels_by_name[0].graph, 3);
    ck_assert_str_eq(s.kernels_by_name[1].name, "kern_b"); /* the one between the steps is not counted */
    ck_assert_uint_eq(s.kernels_by_name[1].count, 2);
    ck_assert_uint_eq(s.kernels_by_name[1].ns, 200);
    ck_assert_uint_eq(s.kernels_by_name[1].graph, 1);
    /* idle before: a starts each step or overlaps b; b waits 50 (step 0) and 100 (step 1) */
    ck_assert_uint_eq(s.kernels_by_name[0].idle_ns, 0);
    ck_assert_uint_eq(s.kernels_by_name[1].idle_ns, 150);
    /* what each launch adds to the busy time: step 0 a 200, b 100, then a [1400,1500] only past b's end 1450: 50;
     * step 1 a 100, b 100. a 350 over 3 launches, b 200 over 2: together the unions 350 + 200, where the durations
     * sum to 600 (b's overlap counted twice) */
    ck_assert_uint_eq(s.kernels_by_name[0].busy_ns, 350);
    ck_assert_uint_eq(s.kernels_by_name[1].busy_ns, 200);
    ck_assert_uint_eq(s.kernels_by_name[0].busy_ns + s.kernels_by_name[1].busy_ns, 350 + 200);
    ck_assert_uint_eq(s.copies[PROF_COPY_DTOH].count, 1);
    ck_assert_uint_eq(s.copies[PROF_COPY_DTOH].bytes, 64);
    ck_assert_uint_eq(s.copies[PROF_COPY_DTOH].ns, 100);
    ck_assert_uint_eq(s.copies[PROF_COPY_HTOD].count, 0);
    ck_assert_uint_eq(s.memsets.count, 1);
    ck_assert_uint_eq(s.memsets.bytes, 32);

    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert_ptr_nonnull(f);
    prof_summary_print(&s, f);
    fclose(f);
    ck_assert_ptr_nonnull(strstr(buf, "step wall (host, around the forward call): median 1.0 us"));
    ck_assert_ptr_nonnull(strstr(buf, "kernels per step 2.5 (2.0 from graphs)"));
    ck_assert_ptr_nonnull(strstr(buf, "memcpy DtoH"));
    ck_assert_ptr_null(strstr(buf, "kern_unused"));
    /* kern_a: 1.5 launches and 0.2 us per step, mean 0.13 us, 20% of the 1 us step, all from graphs */
    const char *a = strstr(buf, "kern_a");
    ck_assert_ptr_nonnull(a);
    double n_step, us_step, mean, share, graph;
    ck_assert_int_eq(sscanf(a + 6, "%lf %lf %lf %lf%% %lf%%", &n_step, &us_step, &mean, &share, &graph), 5);
    ck_assert_double_eq_tol(n_step, 1.5, 1e-9);
    ck_assert_double_eq_tol(us_step, 0.2, 1e-9);
    ck_assert_double_eq_tol(mean, 0.13, 1e-9);
    ck_assert_double_eq_tol(share, 20.0, 1e-9);
    ck_assert_double_eq_tol(graph, 100, 1e-9);
    const char *b = strstr(buf, "kern_b");
    ck_assert_ptr_nonnull(b);
    double idle;
    ck_assert_int_eq(sscanf(b + 6, "%lf %lf %lf %lf%% %lf%% %lf", &n_step, &us_step, &mean, &share, &graph, &idle),
                     6);
    ck_assert_double_eq_tol(idle, 0.1, 1e-9); /* 150 ns over 2 steps = 0.075 us, printed to one decimal */
    double busy;
    ck_assert_int_eq(sscanf(a + 6, "%lf %lf %lf %lf%% %lf%% %lf %lf", &n_step, &us_step, &mean, &share, &graph, &idle,
                            &busy),
                     7);
    ck_assert_double_eq_tol(busy, 0.12, 1e-9); /* kern_a adds 350 ns over 3 launches: 0.117 us */
    ck_assert_ptr_nonnull(strstr(buf, "of the wall (0.3 us)"));
    free(buf);
    prof_summary_fini(&s);
}
END_TEST

START_TEST(test_step_without_kernels)
{
    prof_rec_t none[] = {{.start = 10, .end = 20, .bytes = 8, .what = PROF_COPY_HTOD, .kind = PROF_MEMCPY}};
    const uint64_t a[] = {0}, b[] = {100};
    prof_summary_t s;
    guild_err_t err = {{0}};
    ck_assert_int_eq(prof_summarize(&s, none, 1, names, 3, a, b, 1, &err), 0);
    ck_assert_uint_eq(s.kernels, 0);
    ck_assert_int_eq(s.n_names, 0);
    ck_assert_double_eq_tol(s.busy_kernels, 0, 1e-12);
    ck_assert_double_eq_tol(s.busy_all, 0.1, 1e-12);
    ck_assert_double_eq_tol(s.head_ns, 100, 1e-12); /* the whole step before a kernel that never came */
    ck_assert_double_eq_tol(s.gap_median_ns, 0, 1e-12);
    prof_summary_fini(&s);
}
END_TEST

/* prof_summary_print_layer's report as a string (free it). */
static char *layer_report(const prof_summary_t *s, int32_t n_layer)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert_ptr_nonnull(f);
    prof_summary_print_layer(s, n_layer, f);
    fclose(f);
    return buf;
}

/* Issue 17's busy time a layer: two steps of 8 layers, each layer a norm [0, 100] and a product in one of two forms
 * on alternate layers (a: [90, 300], overlapping the norm, so it adds 200; b: [100, 260], 160), then a one-off
 * head [9000, 9500] and an edge kernel launched twice a step (8 / 4: counted) at [9600, 9610], [9700, 9710]. */
START_TEST(test_layer_busy)
{
    static const char *const ln[] = {"norm", "prod_a", "prod_b", "head", "edge"};
    enum { L = 8, PER = 2 * L + 3 };
    prof_rec_t r[2 * PER];
    size_t n = 0;
    const uint64_t a[] = {0, 10000}, b[] = {10000, 20000};
    for (int st = 0; st < 2; st++) {
        const uint64_t base = a[st];
        for (int l = 0; l < L; l++) {
            const uint64_t o = base + (uint64_t)l * 1000;
            r[n++] = (prof_rec_t)K(o, o + 100, 0, 1);
            r[n++] = l % 2 ? (prof_rec_t)K(o + 100, o + 260, 2, 1) : (prof_rec_t)K(o + 90, o + 300, 1, 1);
        }
        r[n++] = (prof_rec_t)K(base + 9000, base + 9500, 3, 1);
        r[n++] = (prof_rec_t)K(base + 9600, base + 9610, 4, 1);
        r[n++] = (prof_rec_t)K(base + 9700, base + 9710, 4, 1);
    }
    prof_summary_t s;
    guild_err_t err = {{0}};
    ck_assert_int_eq(prof_summarize(&s, r, n, ln, 5, a, b, 2, &err), 0);
    int nk = -1;
    /* a step: norms 800, products 4 x 200 + 4 x 160, edge 20 (the head's 500 not counted): 2260 over 8 layers */
    ck_assert_double_eq_tol(prof_summary_layer_ns(&s, L, &nk), 282.5, 1e-9);
    ck_assert_int_eq(nk, 4);
    /* one layer more: the threshold 9 / 4 a step leaves the edge kernel out */
    ck_assert_double_eq_tol(prof_summary_layer_ns(&s, L + 1, &nk), 2240.0 / 9, 1e-9);
    ck_assert_int_eq(nk, 3);
    ck_assert_double_eq(prof_summary_layer_ns(&s, 0, &nk), 0);
    ck_assert_int_eq(nk, 0);
    char *buf = layer_report(&s, L);
    ck_assert_msg(strstr(buf, "busy a layer: 0.28 us (the busy us of the 4 kernel name(s) launched at least 8/4 times"),
                  "%s", buf);
    free(buf);
    prof_summary_fini(&s);
}
END_TEST

/* The dense part of a layer: two steps of 4 layers, each a norm [0, 100] and a product [350, 450], and between
 * them, [100, 400], what is not the dense step's: a routed experts' kernel (every expert on the GPU), or the
 * pipeline's wait for the CPU workers' experts with the exchange's taking of their rows after the product
 * [450, 460] (which is the dense step's). The product overlaps that [100, 400] and adds 50. With the experts'
 * kernel: 450 a layer, without it (prof_summary_dense_layer_ns) 150; with the wait: 460, and 160 without it; each
 * with the second line of the report. Without either (the host-driven step), no second line. */
START_TEST(test_layer_busy_dense)
{
    static const char *const ln[] = {"norm", "expert_pair_kernel<dot_q4_K, 2, true>", "prod", "xchg_wait_kernel",
                                     "xchg_take_y_kernel"};
    enum { L = 4, NONE = 0, EXPERTS, XCHG };
    const uint64_t a[] = {0, 10000}, b[] = {10000, 20000};
    for (int v = NONE; v <= XCHG; v++) {
        prof_rec_t r[2 * 4 * L];
        size_t n = 0;
        for (int st = 0; st < 2; st++)
            for (int l = 0; l < L; l++) {
                const uint64_t o = a[st] + (uint64_t)l * 1000;
                r[n++] = (prof_rec_t)K(o, o + 100, 0, 1);
                if (v != NONE)
                    r[n++] = (prof_rec_t)K(o + 100, o + 400, v == EXPERTS ? 1 : 3, 1);
                r[n++] = (prof_rec_t)K(o + 350, o + 450, 2, 1);
                if (v == XCHG)
                    r[n++] = (prof_rec_t)K(o + 450, o + 460, 4, 1);
            }
        prof_summary_t s;
        guild_err_t err = {{0}};
        ck_assert_int_eq(prof_summarize(&s, r, n, ln, 5, a, b, 2, &err), 0);
        int nk = -1, nd = -1;
        const double all = prof_summary_layer_ns(&s, L, &nk), dense = prof_summary_dense_layer_ns(&s, L, &nd);
        char *buf = layer_report(&s, L);
        if (v == NONE) { /* the experts on the CPU, the host waiting: one line */
            ck_assert_double_eq_tol(dense, all, 1e-9);
            ck_assert_int_eq(nd, nk);
            ck_assert_msg(!strstr(buf, "dense busy"), "%s", buf);
        } else {
            const char *want = v == EXPERTS ? "busy a layer: 0.45 us" : "busy a layer: 0.46 us";
            const char *want_dense = v == EXPERTS ? "dense busy a layer: 0.15 us (the same without 1 kernel name(s)"
                                                  : "dense busy a layer: 0.16 us (the same without 1 kernel name(s)";
            ck_assert_double_eq_tol(all, v == EXPERTS ? 450 : 460, 1e-9);
            ck_assert_int_eq(nk, v == EXPERTS ? 3 : 4);
            ck_assert_double_eq_tol(dense, v == EXPERTS ? 150 : 160, 1e-9);
            ck_assert_int_eq(nd, nk - 1);
            ck_assert_msg(strstr(buf, want) && strstr(buf, want_dense) &&
                              strstr(buf, "\"expert...\", and the exchange's wait, \"xchg_wait...\")"),
                          "%s", buf);
        }
        free(buf);
        prof_summary_fini(&s);
    }
}
END_TEST

/* The exchange's shadow: two steps of 4 layers, each a norm [0, 100], the exchange's publish [100, 120], the next
 * layer's prediction [110, 150] (launched early: it adds 30 from the publish's end), the hint [150, 160], the wait
 * [160, 400] and the taking of the rows [170, 410] (launched early, after the wait's start: on the path, adding 10).
 * Busy a layer 410; dense 170 (without the wait's 240); on the step's path 130 (without the prediction's 30 and the
 * hint's 10, which start in the shadow). A second turn swaps the publish for another name: no shadow, no third
 * line. */
START_TEST(test_layer_busy_shadow)
{
    static const char *const with[] = {"norm", "xchg_publish_kernel", "router_cluster_kernel", "xchg_hint_kernel",
                                       "xchg_wait_kernel", "xchg_take_y_kernel"};
    static const char *const without[] = {"norm", "publish_elsewhere", "router_cluster_kernel", "xchg_hint_kernel",
                                          "xchg_wait_kernel", "xchg_take_y_kernel"};
    /* the router's launch publishing the token itself (router_publish_kernel): the same shadow */
    static const char *const routed[] = {"norm", "router_publish_kernel<16, 8, true>", "router_cluster_kernel",
                                         "xchg_hint_kernel", "xchg_wait_kernel", "xchg_take_y_kernel"};
    static const char *const *const turns[] = {with, without, routed};
    enum { L = 4 };
    const uint64_t a[] = {0, 10000}, b[] = {10000, 20000};
    static const uint64_t iv[6][2] = {{0, 100}, {100, 120}, {110, 150}, {150, 160}, {160, 400}, {170, 410}};
    for (int turn = 0; turn < 3; turn++) {
        prof_rec_t r[2 * 6 * L];
        size_t n = 0;
        for (int st = 0; st < 2; st++)
            for (int l = 0; l < L; l++)
                for (int k = 0; k < 6; k++) {
                    const uint64_t o = a[st] + (uint64_t)l * 1000;
                    r[n++] = (prof_rec_t)K(o + iv[k][0], o + iv[k][1], k, 1);
                }
        prof_summary_t s;
        guild_err_t err = {{0}};
        ck_assert_int_eq(prof_summarize(&s, r, n, turns[turn], 6, a, b, 2, &err), 0);
        ck_assert_double_eq_tol(prof_summary_layer_ns(&s, L, NULL), 410, 1e-9);
        ck_assert_double_eq_tol(prof_summary_dense_layer_ns(&s, L, NULL), 170, 1e-9);
        ck_assert_double_eq_tol(prof_summary_path_layer_ns(&s, L), turn == 1 ? 170 : 130, 1e-9);
        char *buf = layer_report(&s, L);
        if (turn == 1)
            ck_assert_msg(!strstr(buf, "on the step's path"), "%s", buf);
        else
            ck_assert_msg(strstr(buf, "dense busy a layer: 0.17 us") &&
                              strstr(buf, "dense busy a layer on the step's path: 0.13 us (less 0.04 us a layer in "
                                          "the exchange's shadow: kernels that start after \"xchg_publish...\" or "
                                          "\"router_publish...\", up to its wait"),
                          "%s", buf);
        free(buf);
        prof_summary_fini(&s);
    }
}
END_TEST

/* The router's phases: three blocks of a cluster (slots 0, 1, 2; slot 3 empty), slot 0 the chooser with every
 * stamp; the waits 1010, 1030, 1020 (spread 0.02 us), the last end 1900 (span 0.89 us). Without slot 0's
 * stamps, no timeline. */
START_TEST(test_timeline_router)
{
    uint64_t st[4 * CUDA_ROUTER_TL_STAMPS] = {0};
    const uint64_t b0[CUDA_ROUTER_TL_STAMPS] = {1000, 1010, 1310, 1510, 1600, 1700, 1800};
    memcpy(st, b0, sizeof b0);
    uint64_t *b1 = st + CUDA_ROUTER_TL_STAMPS, *b2 = st + 2 * CUDA_ROUTER_TL_STAMPS;
    b1[CUDA_ROUTER_TL_ENTRY] = 1001;
    b1[CUDA_ROUTER_TL_WAIT] = 1030;
    b1[CUDA_ROUTER_TL_END] = 1900;
    b2[CUDA_ROUTER_TL_ENTRY] = 1002;
    b2[CUDA_ROUTER_TL_WAIT] = 1020;
    b2[CUDA_ROUTER_TL_END] = 1400;
    double v[PROF_TL_R_N];
    ck_assert_int_eq(prof_timeline_router(st, 4, v), 0);
    const double want[PROF_TL_R_N] = {0.01, 0.30, 0.20, 0.09, 0.10, 0.10, 0.02, 0.89, 3};
    for (int q = 0; q < PROF_TL_R_N; q++)
        ck_assert_msg(fabs(v[q] - want[q]) < 1e-9, "phase %d: %g, expected %g", q, v[q], want[q]);
    int n = 0;
    ck_assert_str_eq(prof_timeline_router_names(&n)[PROF_TL_R_LOGITS], "row->logits");
    ck_assert_int_eq(n, PROF_TL_R_N);
    st[CUDA_ROUTER_TL_PROBS] = 0; /* the chooser did not get that far */
    ck_assert_int_eq(prof_timeline_router(st, 4, v), -1);
    ck_assert_int_eq(prof_timeline_router(st, 0, v), -1);
}
END_TEST

/* The attention's phases: a block without a split (entry and end only, 5000: the span's end), two working blocks
 * (waits 1100 and 1150); the one that ends last merged the splits. Then the same without its merge: ticket and
 * merge 0, its end counted from its partial. No working block: no timeline. */
START_TEST(test_timeline_attn)
{
    uint64_t st[4 * CUDA_ATTN_TL_STAMPS] = {0};
    uint64_t *nos = st, *a = st + CUDA_ATTN_TL_STAMPS, *b = st + 3 * CUDA_ATTN_TL_STAMPS;
    nos[CUDA_ATTN_TL_ENTRY] = 900;
    nos[CUDA_ATTN_TL_END] = 5000;
    const uint64_t sa[CUDA_ATTN_TL_STAMPS] = {1000, 1100, 1300, 2000, 2100, 2150, 0, 2200};
    const uint64_t sb[CUDA_ATTN_TL_STAMPS] = {1050, 1150, 1400, 2500, 2600, 2700, 3000, 3100};
    memcpy(a, sa, sizeof sa);
    memcpy(b, sb, sizeof sb);
    double v[PROF_TL_A_N];
    ck_assert_int_eq(prof_timeline_attn(st, 4, v), 0);
    const double want[PROF_TL_A_N] = {0.10, 0.25, 1.10, 0.10, 0.10, 0.30, 0.10, 0.05, 3.90, 2};
    for (int q = 0; q < PROF_TL_A_N; q++)
        ck_assert_msg(fabs(v[q] - want[q]) < 1e-9, "phase %d: %g, expected %g", q, v[q], want[q]);
    b[CUDA_ATTN_TL_MERGE] = 0;
    ck_assert_int_eq(prof_timeline_attn(st, 4, v), 0);
    ck_assert(v[PROF_TL_A_TICKET] == 0 && v[PROF_TL_A_MERGE] == 0);
    ck_assert_msg(fabs(v[PROF_TL_A_END] - 0.50) < 1e-9, "%g", v[PROF_TL_A_END]);
    memset(a, 0, sizeof sa);
    memset(b, 0, sizeof sb);
    ck_assert_int_eq(prof_timeline_attn(st, 4, v), -1);
}
END_TEST

/* The first index of the largest, NaN as -infinity (the sampler's greedy rule): what bench_argmax must give. */
static int32_t argmax_ref(const float *x, int32_t n)
{
    int32_t best = 0;
    float m = isnan(x[0]) ? -INFINITY : x[0];
    for (int32_t i = 1; i < n; i++)
        if (x[i] > m) {
            m = x[i];
            best = i;
        }
    return best;
}

START_TEST(test_argmax)
{
    enum { V = 151936 };
    float *x = malloc(V * sizeof *x);
    ck_assert_ptr_nonnull(x);
    uint64_t lcg = 12345;
    for (int r = 0; r < 24; r++) {
        for (int32_t i = 0; i < V; i++) {
            lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
            x[i] = r % 4 == 3 ? (float)((lcg >> 40) % 7) : (float)(lcg >> 40) / (float)(1 << 24) * 20.0f - 10.0f;
        }
        if (r % 3 == 1) /* NaNs never win, wherever they are (x[0] one too: it counts as -infinity) */
            for (int32_t i = r; i < V; i += V / 5)
                x[i] = NAN;
        if (r == 5)
            x[0] = NAN;
        if (r == 7) /* the largest in the last, partial chunk */
            x[V - 1] = 100.0f;
        if (r == 9)
            for (int32_t i = 0; i < V; i++)
                x[i] = -INFINITY;
        ck_assert_int_eq(bench_argmax(x, V), argmax_ref(x, V));
        for (int32_t n = 1; n <= 100; n++) /* every length around the chunks' */
            ck_assert_int_eq(bench_argmax(x + r, n), argmax_ref(x + r, n));
    }
    free(x);
}
END_TEST

static Suite *prof_suite(void)
{
    Suite *s = suite_create("prof_summary");
    TCase *tc = tcase_create("steps");
    tcase_add_test(tc, test_step_figures);
    tcase_add_test(tc, test_step_without_kernels);
    suite_add_tcase(s, tc);
    tc = tcase_create("names");
    tcase_add_test(tc, test_by_name_and_copies);
    tcase_add_test(tc, test_layer_busy);
    tcase_add_test(tc, test_layer_busy_dense);
    tcase_add_test(tc, test_layer_busy_shadow);
    suite_add_tcase(s, tc);
    tc = tcase_create("timeline");
    tcase_add_test(tc, test_timeline_router);
    tcase_add_test(tc, test_timeline_attn);
    suite_add_tcase(s, tc);
    tc = tcase_create("argmax");
    tcase_add_test(tc, test_argmax);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(prof_suite());
}
