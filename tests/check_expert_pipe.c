/* Tests for cpu-expert-worker/expert_pipe: the fused one-pass pipeline gives, for every owned (token, slot)
 * pair, exactly the bits of a naive computation with the scalar references (quantize x, gate/up dot products,
 * silu(gate) * up, quantize, down dot products), for any thread count, row blocks, token count and expert
 * types, with plain, interleaved or packed matrices; pairs it does not own stay untouched; bad ids and layers
 * are errors. Also expert_shard_new_copy's layouts (packed where the type has one, packing over interleaving)
 * with the same bits as the mapping, and the tuning file. */
#include <check.h>
#include <stdatomic.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/kern/pack.h"
#include "core/model/activation.h"
#include "core/quant/fp16.h"
#include "core/quant/quant.h"
#include "core/util/pool.h"
#include "cpu-expert-worker/experts/expert_exec.h"
#include "cpu-expert-worker/experts/expert_pipe.h"
#include "cpu-expert-worker/experts/expert_prefetch.h"
#include "cpu-expert-worker/experts/expert_tuning.h"
#include "tests/check_run.h"
#include "tests/tiny_model.h"

static uint64_t rng_state;

static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float rng_float(void)
{
    return (float)((double)(rng_next() >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

/* Synthetic experts: n_layer x n_expert sets of three matrices, owned where own[] says. */
typedef struct experts {
    expert_pipe_src_t src;
    expert_mats_t *mats; /* [n_layer][n_expert] */
    uint8_t *own;        /* [n_layer][n_expert] */
    void *mem;
} experts_t;

static const expert_mats_t *experts_get(const void *ctx, int32_t layer, int32_t expert)
{
    const experts_t *x = ctx;
    size_t i = (size_t)layer * (size_t)x->src.n_expert + (size_t)expert;
    return x->own[i] ? &x->mats[i] : NULL;
}

static size_t row_bytes(guild_type_t t, int64_t n)
{
    uint64_t b;
    ck_assert_int_eq(quant_row_bytes((uint32_t)t, (uint64_t)n, &b, NULL), 0);
    return (size_t)b;
}

/* rows of `type`, quantized from small random floats (every type used here has a quantizer) */
static void fill_matrix(guild_type_t type, char *w, int64_t rows, int64_t n)
{
    float *f = malloc((size_t)n * sizeof *f);
    size_t rb = row_bytes(type, n);
    guild_err_t err;
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < n; i++)
            f[i] = rng_float() * 0.1f;
        ck_assert_msg(quant_quantize_row_ref(type, f, w + (size_t)r * rb, n, &err) == 0, "%s", err.msg);
    }
    free(f);
}

/* lay gate and up rows out alternating, as expert_shard_new_copy's interleave_gate_up does (same types only) */
static bool interleave;

static void experts_new(experts_t *x, guild_type_t gt, guild_type_t ut, guild_type_t dt, int64_t E, int64_t F,
                        int32_t n_expert, int32_t K, int32_t n_layer, int own_mod)
{
    memset(x, 0, sizeof *x);
    x->src = (expert_pipe_src_t){n_layer, n_expert, K, E, F, experts_get, x, {false, 0.0f, 0.0f}};
    size_t n = (size_t)n_layer * (size_t)n_expert;
    size_t gb = row_bytes(gt, E) * (size_t)F, ub = row_bytes(ut, E) * (size_t)F, db = row_bytes(dt, F) * (size_t)E;
    x->mats = calloc(n, sizeof *x->mats);
    x->own = calloc(n, 1);
    x->mem = malloc(n * (gb + ub + db));
    ck_assert(x->mats && x->own && x->mem);
    char *m = x->mem;
    for (size_t i = 0; i < n; i++) {
        expert_mats_t *e = &x->mats[i];
        *e = (expert_mats_t){.gate = m, .up = m + gb, .down = m + gb + ub, .gate_type = gt, .up_type = ut, .down_type = dt,
                              .gate_row = row_bytes(gt, E), .up_row = row_bytes(ut, E), .down_row = row_bytes(dt, F)};
        fill_matrix(gt, (char *)e->gate, F, E);
        fill_matrix(ut, (char *)e->up, F, E);
        fill_matrix(dt, (char *)e->down, E, F);
        if (interleave && gt == ut) {
            const size_t rb = e->gate_row;
            char *pair = malloc(gb + ub);
            ck_assert(pair);
            for (int64_t r = 0; r < F; r++) {
                memcpy(pair + (size_t)(2 * r) * rb, (const char *)e->gate + (size_t)r * rb, rb);
                memcpy(pair + (size_t)(2 * r + 1) * rb, (const char *)e->up + (size_t)r * rb, rb);
            }
            memcpy(m, pair, gb + ub);
            free(pair);
            e->up = m + rb;
            e->gate_row = e->up_row = 2 * rb;
            ck_assert(expert_mats_interleaved(e));
        }
        m += gb + ub + db;
        x->own[i] = own_mod ? (i % (size_t)own_mod) != 1 : 1;
    }
}

/* Packs, in place, every matrix of x whose type has a packed layout (rows are multiples of 16 here), as
 * expert_shard_new_copy does; returns the number packed. */
static int experts_pack(experts_t *x)
{
    const size_t n = (size_t)x->src.n_layer * (size_t)x->src.n_expert;
    const int64_t E = x->src.n_embd, F = x->src.n_ff;
    int packed = 0;
    guild_err_t err;
    for (size_t i = 0; i < n; i++) {
        expert_mats_t *e = &x->mats[i];
        struct {
            const void *w;
            guild_type_t type;
            size_t row;
            int64_t n, rows;
            bool *flag;
        } m[3] = {{e->gate, e->gate_type, e->gate_row, E, F, &e->gate_packed},
                  {e->up, e->up_type, e->up_row, E, F, &e->up_packed},
                  {e->down, e->down_type, e->down_row, F, E, &e->down_packed}};
        for (int k = 0; k < 3; k++) {
            if (!kern_pack_has(m[k].type))
                continue;
            const size_t bytes = m[k].row * (size_t)m[k].rows;
            char *tmp = malloc(bytes);
            ck_assert_ptr_nonnull(tmp);
            ck_assert_msg(kern_pack(m[k].type, m[k].n, m[k].rows, m[k].w, m[k].row, tmp, &err) == 0, "%s", err.msg);
            memcpy((void *)m[k].w, tmp, bytes);
            free(tmp);
            *m[k].flag = true;
            packed++;
        }
    }
    return packed;
}

static void experts_free(experts_t *x)
{
    free(x->mats);
    free(x->own);
    free(x->mem);
}

/* y[t][k] by the references, for owned pairs */
static void naive(const experts_t *x, int32_t layer, int32_t T, const float *in, const int32_t *ids, float *y)
{
    const int64_t E = x->src.n_embd, F = x->src.n_ff;
    const int32_t K = x->src.n_expert_used;
    char *xq = malloc((size_t)E * 4 + 64), *hq = malloc((size_t)F * 4 + 64);
    float *g = malloc((size_t)F * sizeof *g);
    for (int32_t t = 0; t < T; t++)
        for (int32_t k = 0; k < K; k++) {
            const expert_mats_t *m = experts_get(x, layer, ids[t * K + k]);
            if (!m)
                continue;
            float *yo = y + ((size_t)t * K + (size_t)k) * (size_t)E;
            guild_type_t ga = quant_type_info(m->gate_type)->dot_type;
            guild_type_t ua = quant_type_info(m->up_type)->dot_type;
            guild_type_t da = quant_type_info(m->down_type)->dot_type;
            char *xu = malloc((size_t)E * 4 + 64);
            ck_assert(!quant_quantize_row_ref(ga, in + (size_t)t * E, xq, E, NULL));
            ck_assert(!quant_quantize_row_ref(ua, in + (size_t)t * E, xu, E, NULL));
            for (int64_t r = 0; r < F; r++) {
                float gv = quant_vec_dot_ref(m->gate_type, E, (const char *)m->gate + (size_t)r * m->gate_row, xq);
                float uv = quant_vec_dot_ref(m->up_type, E, (const char *)m->up + (size_t)r * m->up_row, xu);
                g[r] = model_silu(gv) * uv;
            }
            ck_assert(!quant_quantize_row_ref(da, g, hq, F, NULL));
            for (int64_t r = 0; r < E; r++)
                yo[r] = quant_vec_dot_ref(m->down_type, F, (const char *)m->down + (size_t)r * m->down_row, hq);
            free(xu);
        }
    free(xq);
    free(hq);
    free(g);
}

/* the experts of run_case packed after the reference and a run over the plain matrices: the pipeline over the
 * packed ones must give the same bits as both */
static bool pack_experts;
/* run_case's automatic claims' rule (0: the defaults), and a profile attached to its runs (expert_pipe_prof.h) */
static int tune_guide, tune_min_rows;
static bool profile_runs;

static void run_case(guild_type_t gt, guild_type_t ut, guild_type_t dt, int64_t E, int64_t F, int32_t T,
                     int threads, int gu_rows, int down_rows, int own_mod)
{
    experts_t x;
    const int32_t NE = 6, K = 3, L = 2;
    experts_new(&x, gt, ut, dt, E, F, NE, K, L, own_mod);
    float *in = malloc((size_t)T * (size_t)E * sizeof *in);
    int32_t *ids = malloc((size_t)T * K * sizeof *ids);
    size_t ny = (size_t)T * K * (size_t)E;
    float *want = malloc(ny * sizeof *want), *got = malloc(ny * sizeof *got);
    for (size_t i = 0; i < (size_t)T * (size_t)E; i++)
        in[i] = rng_float();
    for (int32_t t = 0; t < T; t++) /* K distinct experts per token, as a router picks them */
        for (int32_t k = 0; k < K; k++)
            ids[t * K + k] = (int32_t)((t * 5 + k * 2 + (int)(rng_next() % 2)) % NE);
    for (size_t i = 0; i < ny; i++)
        want[i] = got[i] = -12345.0f;
    naive(&x, 1, T, in, ids, want);

    guild_pool_t *pool = NULL;
    expert_pipe_t *p = NULL;
    guild_err_t err;
    ck_assert_int_eq(guild_pool_new(&pool, threads, NULL, &err), 0);
    expert_pipe_tuning_t tune = {gu_rows, down_rows, tune_guide, tune_min_rows};
    ck_assert_msg(expert_pipe_new(&p, &x.src, pool, &tune, &err) == 0, "%s", err.msg);
    expert_pipe_prof_t *prof = profile_runs ? calloc(1, sizeof *prof) : NULL;
    if (prof)
        expert_pipe_set_prof(p, prof);
    if (pack_experts) {
        ck_assert_msg(expert_pipe_run(p, 1, T, in, ids, got, &err) >= 0, "%s", err.msg);
        ck_assert_msg(!memcmp(want, got, ny * sizeof *got), "plain matrices differ from the reference");
        for (size_t i = 0; i < ny; i++)
            got[i] = -12345.0f;
        ck_assert_int_gt(experts_pack(&x), 0);
    }
    for (int rep = 0; rep < 6; rep++) { /* again, on scratch already grown; then some experts first (as after a
                                          * prefetch hint, duplicates and bad ids among them), then every expert
                                          * (each one's gate/up rows in the threads' slices, and its down rows
                                          * too in a run of up to EXPERT_PIPE_PIN_DOWN_TOKENS tokens), then every
                                          * expert with the down rows' slices never and always (no claims left):
                                          * the same bits */
        const int32_t first[] = {NE - 1, 2, NE - 1, -1, 99, 0}, all[] = {3, 1, 5, 0, 2, 4};
        if (rep == 2)
            expert_pipe_prefer(p, 6, first);
        if (rep >= 3)
            expert_pipe_prefer(p, NE, all);
        if (rep >= 4)
            expert_pipe_set_pin_down(p, rep == 4 ? 0 : T);
        for (size_t i = 0; i < ny; i++) /* every row written again by this run */
            got[i] = -12345.0f;
        int64_t n = expert_pipe_run(p, 1, T, in, ids, got, &err);
        ck_assert_msg(n >= 0, "%s", err.msg);
        ck_assert_msg(!memcmp(want, got, ny * sizeof *got),
                      "%s/%s/%s E=%lld F=%lld T=%d threads=%d rows=%d/%d%s: differs from the reference",
                      quant_type_info(gt)->name, quant_type_info(ut)->name, quant_type_info(dt)->name,
                      (long long)E, (long long)F, T, threads, gu_rows, down_rows, pack_experts ? " packed" : "");
    }
    if (prof) { /* every run with work seen, its time split into shares of the threads' windows */
        expert_pipe_prof_summary_t sum;
        expert_pipe_prof_summarize(prof, &sum);
        ck_assert_int_eq(prof->runs, pack_experts ? 7 : 6);
        ck_assert_int_eq(prof->n_threads, threads);
        ck_assert(sum.tasks >= 2); /* gate/up and down of one expert at least */
        ck_assert(sum.window_us > 0 && sum.lag_us <= sum.window_us && sum.tail_us <= sum.window_us);
        const double shares[] = {sum.work, sum.x, sum.x_wait, sum.h_wait, sum.lag, sum.tail};
        double total = sum.other;
        for (int i = 0; i < 6; i++) {
            ck_assert(shares[i] >= 0 && shares[i] <= 1);
            total += shares[i];
        }
        ck_assert(total > 0.999 && total < 1.001);
        ck_assert(sum.work > 0);
        char line[512];
        ck_assert_int_gt(expert_pipe_prof_format(&sum, line, sizeof line), 0);
        ck_assert_ptr_nonnull(strstr(line, "lag_us="));
        expert_pipe_set_prof(p, NULL);
        free(prof);
    }
    expert_pipe_destroy(&p);
    ck_assert_ptr_null(p);
    guild_pool_destroy(&pool);
    free(in);
    free(ids);
    free(want);
    free(got);
    experts_free(&x);
}

START_TEST(test_pipe_matches_reference)
{
    rng_state = 42;
    /* the Q4_K_M mix (Q4_K gate/up, Q6_K down), single-type files, 32-element types; tokens 1 (decode),
     * a few, and a prefill-sized batch; thread counts and row blocks that do and do not divide the rows */
    run_case(GUILD_TYPE_Q4_K, GUILD_TYPE_Q4_K, GUILD_TYPE_Q6_K, 512, 256, 1, 2, 32, 64, 0);
    run_case(GUILD_TYPE_Q4_K, GUILD_TYPE_Q4_K, GUILD_TYPE_Q6_K, 512, 256, 5, 3, 16, 48, 0);
    run_case(GUILD_TYPE_IQ4_XS, GUILD_TYPE_IQ4_XS, GUILD_TYPE_IQ4_XS, 256, 512, 3, 1, 48, 16, 0);
    run_case(GUILD_TYPE_Q8_0, GUILD_TYPE_Q5_K, GUILD_TYPE_Q4_0, 256, 96, 17, 4, 32, 32, 0);
    run_case(GUILD_TYPE_Q4_1, GUILD_TYPE_Q4_1, GUILD_TYPE_F16, 64, 64, 2, 2, 16, 16, 0);
    /* automatic row blocks (0): decode and a batch, on 1 and 3 threads */
    run_case(GUILD_TYPE_Q4_K, GUILD_TYPE_Q4_K, GUILD_TYPE_Q6_K, 512, 256, 1, 3, 0, 0, 0);
    run_case(GUILD_TYPE_IQ4_XS, GUILD_TYPE_IQ4_XS, GUILD_TYPE_Q8_0, 256, 512, 9, 1, 0, 0, 0);
}
END_TEST

START_TEST(test_pipe_interleaved)
{
    rng_state = 77;
    /* gate and up rows alternating (one stream per gate/up task): the same bits, decode and batches, automatic
     * and fixed blocks, 1-3 threads */
    interleave = true;
    run_case(GUILD_TYPE_Q4_K, GUILD_TYPE_Q4_K, GUILD_TYPE_Q6_K, 512, 256, 1, 2, 0, 0, 0);
    run_case(GUILD_TYPE_Q4_K, GUILD_TYPE_Q4_K, GUILD_TYPE_Q6_K, 512, 256, 5, 3, 32, 64, 0);
    run_case(GUILD_TYPE_IQ4_XS, GUILD_TYPE_IQ4_XS, GUILD_TYPE_IQ4_XS, 256, 512, 9, 1, 0, 0, 3);
    run_case(GUILD_TYPE_Q8_0, GUILD_TYPE_Q8_0, GUILD_TYPE_Q4_0, 256, 96, 17, 2, 16, 32, 0);
    interleave = false;
}
END_TEST

START_TEST(test_pipe_packed)
{
    rng_state = 101;
    /* packed gate/up/down (kern_matmul_packed: native kernels or the unpack fallback): the bits of the plain
     * matrices, for 1 token (decode), 3 and 40 (above KERN_PACK_MAX_TOKENS: the multi-token kernels), automatic
     * and fixed row blocks, 1-3 threads, a shard that owns some experts only; q4_K beside q6_K (packed where
     * it has a layout), iq4_xs beside q4_K */
    pack_experts = true;
    const int32_t tokens[] = {1, 3, 40};
    for (int i = 0; i < 3; i++) {
        run_case(GUILD_TYPE_Q4_K, GUILD_TYPE_Q4_K, GUILD_TYPE_Q4_K, 512, 256, tokens[i], 2, 0, 0, 0);
        run_case(GUILD_TYPE_IQ4_XS, GUILD_TYPE_IQ4_XS, GUILD_TYPE_IQ4_XS, 256, 512, tokens[i], 3, 32, 16, 0);
    }
    run_case(GUILD_TYPE_Q4_K, GUILD_TYPE_Q4_K, GUILD_TYPE_Q6_K, 512, 256, 1, 1, 48, 64, 3);
    run_case(GUILD_TYPE_IQ4_XS, GUILD_TYPE_IQ4_XS, GUILD_TYPE_Q4_K, 256, 256, 5, 2, 0, 0, 0);
    pack_experts = false;
}
END_TEST

START_TEST(test_pipe_profiled_and_guided)
{
    rng_state = 55;
    /* a profile attached, and other rules for the automatic claims (1/(1 x threads) or 1/(4 x threads) of the
     * remaining work, at least 32 or 64 rows): the same bits, decode and batches, plain and packed */
    profile_runs = true;
    run_case(GUILD_TYPE_Q4_K, GUILD_TYPE_Q4_K, GUILD_TYPE_Q6_K, 512, 256, 1, 3, 0, 0, 0);
    tune_guide = 1;
    tune_min_rows = 64;
    run_case(GUILD_TYPE_Q4_K, GUILD_TYPE_Q4_K, GUILD_TYPE_Q6_K, 512, 256, 5, 3, 0, 0, 0);
    tune_guide = 4;
    tune_min_rows = 32;
    run_case(GUILD_TYPE_IQ4_XS, GUILD_TYPE_IQ4_XS, GUILD_TYPE_Q8_0, 256, 512, 9, 2, 0, 0, 3);
    pack_experts = true;
    run_case(GUILD_TYPE_Q4_K, GUILD_TYPE_Q4_K, GUILD_TYPE_Q6_K, 512, 256, 3, 4, 0, 0, 0);
    pack_experts = false;
    tune_guide = tune_min_rows = 0;
    profile_runs = false;
}
END_TEST

START_TEST(test_pipe_owns_a_shard)
{
    rng_state = 7;
    /* every third expert is someone else's: its pairs must stay untouched (the reference skips them too) */
    run_case(GUILD_TYPE_Q4_K, GUILD_TYPE_Q4_K, GUILD_TYPE_Q4_K, 256, 256, 6, 2, 32, 64, 3);
}
END_TEST

START_TEST(test_pipe_errors)
{
    experts_t x;
    rng_state = 9;
    experts_new(&x, GUILD_TYPE_Q8_0, GUILD_TYPE_Q8_0, GUILD_TYPE_Q8_0, 64, 64, 4, 2, 2, 0);
    guild_pool_t *pool = NULL;
    expert_pipe_t *p = NULL;
    guild_err_t err;
    ck_assert_int_eq(guild_pool_new(&pool, 2, NULL, &err), 0);
    expert_pipe_tuning_t bad = {.gate_up_rows = 24, .down_rows = 64};
    ck_assert_int_eq(expert_pipe_new(&p, &x.src, pool, &bad, &err), -1);
    ck_assert(strstr(err.msg, "multiples of 16"));
    bad = (expert_pipe_tuning_t){.min_rows = 24};
    ck_assert_int_eq(expert_pipe_new(&p, &x.src, pool, &bad, &err), -1);
    ck_assert(strstr(err.msg, "a multiple of 16"));
    bad = (expert_pipe_tuning_t){.guide = -1};
    ck_assert_int_eq(expert_pipe_new(&p, &x.src, pool, &bad, &err), -1);
    ck_assert_ptr_null(p);
    ck_assert_int_eq(expert_pipe_new(&p, &x.src, pool, NULL, &err), 0);
    float in[64] = {0}, y[2 * 64];
    int32_t ids[2] = {1, 4};
    ck_assert_int_eq(expert_pipe_run(p, 0, 1, in, ids, y, &err), -1);
    ck_assert(strstr(err.msg, "expert id 4"));
    ids[1] = 2;
    ck_assert_int_eq(expert_pipe_run(p, 2, 1, in, ids, y, &err), -1);
    ck_assert(strstr(err.msg, "layer 2"));
    ck_assert_int_eq(expert_pipe_run(p, 1, 1, in, ids, y, &err), 2);
    expert_pipe_destroy(&p);
    guild_pool_destroy(&pool);
    experts_free(&x);
}
END_TEST

static uint64_t faults_now(void)
{
    struct rusage ru;
    ck_assert_int_eq(getrusage(RUSAGE_SELF, &ru), 0);
    return (uint64_t)ru.ru_minflt + (uint64_t)ru.ru_majflt;
}

/* expert_pipe_warm: runs after it give the bits of a pipeline without it (warmed for the batch, for a smaller
 * one, twice, for each type triple), and a batch of the warmed size finds its scratch's pages in place: it
 * faults (almost) nothing where a cold pipeline faults hundreds of pages. */
START_TEST(test_pipe_warm)
{
    experts_t x;
    rng_state = 31;
    const int32_t NE = 6, K = 3, T = 200;
    const int64_t E = 512, F = 256;
    experts_new(&x, GUILD_TYPE_Q4_K, GUILD_TYPE_Q4_K, GUILD_TYPE_Q6_K, E, F, NE, K, 2, 0);
    float *in = malloc((size_t)T * (size_t)E * sizeof *in);
    int32_t *ids = malloc((size_t)T * K * sizeof *ids);
    const size_t ny = (size_t)T * K * (size_t)E;
    float *want = malloc(ny * sizeof *want), *got = malloc(ny * sizeof *got);
    ck_assert(in && ids && want && got);
    for (size_t i = 0; i < (size_t)T * (size_t)E; i++)
        in[i] = rng_float();
    for (int32_t t = 0; t < T; t++)
        for (int32_t k = 0; k < K; k++)
            ids[t * K + k] = (int32_t)((t * 5 + k * 2 + (int)(rng_next() % 2)) % NE);
    guild_pool_t *pool = NULL;
    guild_err_t err;
    ck_assert_int_eq(guild_pool_new(&pool, 2, NULL, &err), 0);
    expert_pipe_t *cold = NULL;
    ck_assert_int_eq(expert_pipe_new(&cold, &x.src, pool, NULL, &err), 0);
    memset(want, 0, ny * sizeof *want);
    memset(got, 0, ny * sizeof *got);
    uint64_t f0 = faults_now();
    ck_assert_msg(expert_pipe_run(cold, 1, T, in, ids, want, &err) == (int64_t)T * K, "%s", err.msg);
    const uint64_t cold_faults = faults_now() - f0;
    /* h and u alone are 2 x 600 pairs x 1 KiB: 300 pages */
    ck_assert_msg(cold_faults >= 150, "a cold pipeline faulted only %llu pages", (unsigned long long)cold_faults);
    expert_pipe_destroy(&cold);

    const int32_t warm_tokens[] = {T, T / 2, 2 * T};
    for (int w = 0; w < 3; w++) {
        expert_pipe_t *p = NULL;
        ck_assert_int_eq(expert_pipe_new(&p, &x.src, pool, NULL, &err), 0);
        ck_assert_int_eq(expert_pipe_warm(p, 0, GUILD_TYPE_Q4_K, GUILD_TYPE_Q4_K, GUILD_TYPE_Q6_K, &err), 0);
        ck_assert_msg(expert_pipe_warm(p, warm_tokens[w], GUILD_TYPE_Q4_K, GUILD_TYPE_Q4_K, GUILD_TYPE_Q6_K, &err) == 0,
                      "%s", err.msg);
        /* another type triple (wider activation rows for up): warmed as well, the first kept */
        ck_assert_msg(expert_pipe_warm(p, warm_tokens[w], GUILD_TYPE_Q8_0, GUILD_TYPE_Q5_K, GUILD_TYPE_F16, &err) == 0,
                      "%s", err.msg);
        for (size_t i = 0; i < ny; i++)
            got[i] = -12345.0f;
        f0 = faults_now();
        ck_assert_msg(expert_pipe_run(p, 1, T, in, ids, got, &err) == (int64_t)T * K, "%s", err.msg);
        const uint64_t faults = faults_now() - f0;
        ck_assert_msg(!memcmp(want, got, ny * sizeof *got), "warmed for %d tokens: differs from a cold pipeline",
                      warm_tokens[w]);
        if (warm_tokens[w] >= T)
            ck_assert_msg(faults <= 16, "warmed for %d tokens, a batch of %d faulted %llu pages", warm_tokens[w], T,
                          (unsigned long long)faults);
        expert_pipe_destroy(&p);
    }
    guild_pool_destroy(&pool);
    free(in);
    free(ids);
    free(want);
    free(got);
    experts_free(&x);
}
END_TEST

/* A tiny qwen3moe model of weight type wt whose matrices are whole 256-element blocks and 16-row groups. */
static model_t *tiny_open(guild_type_t wt, void **img)
{
    tiny_spec_t spec = tiny_spec_blocks(wt);
    spec.seed = 3;
    return tiny_model_load(&spec, img);
}

/* y of layer 1 for T tokens of x and ids, by the pipeline over shard s (threads, tune), or by expert_exec */
static void shard_y(const expert_shard_t *s, bool exec, int threads, const expert_pipe_tuning_t *tune, int32_t T,
                    const float *x, const int32_t *ids, float *y, size_t ny)
{
    guild_pool_t *pool = NULL;
    guild_err_t err;
    for (size_t i = 0; i < ny; i++)
        y[i] = -777.0f;
    ck_assert_int_eq(guild_pool_new(&pool, threads, NULL, &err), 0);
    if (exec) {
        expert_exec_t *e = NULL;
        ck_assert_msg(expert_exec_new(&e, s, pool, &err) == 0, "%s", err.msg);
        ck_assert_msg(expert_exec_run(e, 1, T, x, ids, y, &err) >= 0, "%s", err.msg);
        expert_exec_destroy(&e);
    } else {
        expert_pipe_src_t src;
        expert_pipe_t *p = NULL;
        expert_pipe_src_from_shard(&src, s);
        ck_assert_msg(expert_pipe_new(&p, &src, pool, tune, &err) == 0, "%s", err.msg);
        ck_assert_msg(expert_pipe_run(p, 1, T, x, ids, y, &err) >= 0, "%s", err.msg);
        expert_pipe_destroy(&p);
    }
    guild_pool_destroy(&pool);
}

START_TEST(test_shard_packed_same_bits)
{
    /* a shard copied with packing computes, through the pipeline and the per-stage executor, the bits of the
     * shard that reads the file's plain rows: q4_K and iq4_xs experts, 1, 3 and 40 tokens */
    const guild_type_t types[] = {GUILD_TYPE_Q4_K, GUILD_TYPE_IQ4_XS};
    rng_state = 55;
    for (int ti = 0; ti < 2; ti++) {
        void *img;
        model_t *m = tiny_open(types[ti], &img);
        const model_config_t *c = model_config(m);
        expert_shard_t *plain = NULL, *packed = NULL;
        guild_err_t err;
        ck_assert_int_eq(expert_shard_new(&plain, m, NULL, &err), 0);
        ck_assert_msg(expert_shard_new_copy(&packed, m, NULL, -1, false, false, EXPERT_LAYOUT_PACKED, &err) == 0,
                      "%s", err.msg);
        ck_assert_int_eq(expert_shard_packed_count(packed), 3 * c->n_layer * c->n_expert);
        ck_assert_int_eq(expert_shard_packed_count(plain), 0);
        const expert_mats_t *e = expert_shard_get(packed, 1, 3);
        ck_assert(e->gate_packed && e->up_packed && e->down_packed && !expert_mats_interleaved(e));
        const int32_t tokens[] = {1, 3, 40}, K = c->n_expert_used;
        for (int k = 0; k < 3; k++) {
            const int32_t T = tokens[k];
            const size_t ny = (size_t)T * (size_t)K * (size_t)c->n_embd;
            float *x = malloc((size_t)T * (size_t)c->n_embd * sizeof *x);
            int32_t *ids = malloc((size_t)T * (size_t)K * sizeof *ids);
            float *want = malloc(ny * sizeof *want), *got = malloc(ny * sizeof *got);
            ck_assert(x && ids && want && got);
            for (size_t i = 0; i < (size_t)T * (size_t)c->n_embd; i++)
                x[i] = rng_float();
            for (int32_t t = 0; t < T; t++) {
                ids[t * K] = (int32_t)(rng_next() % (uint64_t)c->n_expert);
                for (int32_t q = 1; q < K; q++)
                    ids[t * K + q] = (ids[t * K] + q) % c->n_expert;
            }
            shard_y(plain, false, 2, NULL, T, x, ids, want, ny);
            shard_y(packed, false, 2, NULL, T, x, ids, got, ny);
            ck_assert_msg(!memcmp(want, got, ny * sizeof *got), "%s T=%d: packed shard differs",
                          quant_type_info(types[ti])->name, T);
            const expert_pipe_tuning_t tune = {.gate_up_rows = 16, .down_rows = 32};
            shard_y(packed, false, 3, &tune, T, x, ids, got, ny);
            ck_assert_msg(!memcmp(want, got, ny * sizeof *got), "%s T=%d: packed shard, 16/32-row blocks differ",
                          quant_type_info(types[ti])->name, T);
            shard_y(packed, true, 2, NULL, T, x, ids, got, ny);
            ck_assert_msg(!memcmp(want, got, ny * sizeof *got), "%s T=%d: packed shard, expert_exec differs",
                          quant_type_info(types[ti])->name, T);
            free(x);
            free(ids);
            free(want);
            free(got);
        }
        expert_shard_destroy(&plain);
        expert_shard_destroy(&packed);
        model_destroy(&m);
        free(img);
    }
}
END_TEST

START_TEST(test_shard_copy_layouts)
{
    guild_err_t err;
    void *img;
    /* a type without a packed layout stays plain, byte for byte, whatever the layout asks (the first such type
     * of a few: layouts are added type by type) */
    const guild_type_t cands[] = {GUILD_TYPE_Q8_0, GUILD_TYPE_Q5_0, GUILD_TYPE_Q4_0, GUILD_TYPE_F16};
    guild_type_t none = GUILD_TYPE_F32;
    for (int i = 3; i >= 0; i--)
        if (!kern_pack_has(cands[i]))
            none = cands[i];
    ck_assert(!kern_pack_has(none));
    model_t *m = tiny_open(none, &img);
    const model_config_t *c = model_config(m);
    expert_shard_t *map = NULL, *s = NULL;
    ck_assert_int_eq(expert_shard_new(&map, m, NULL, &err), 0);
    ck_assert_msg(expert_shard_new_copy(&s, m, NULL, -1, false, false, EXPERT_LAYOUT_PACKED, &err) == 0, "%s",
                  err.msg);
    ck_assert_int_eq(expert_shard_packed_count(s), 0);
    for (int32_t e = 0; e < c->n_expert; e++) {
        const expert_mats_t *a = expert_shard_get(map, 1, e), *b = expert_shard_get(s, 1, e);
        ck_assert(!b->gate_packed && !b->up_packed && !b->down_packed);
        ck_assert_ptr_ne(a->gate, b->gate);
        ck_assert(!memcmp(a->gate, b->gate, (size_t)c->n_ff_exp * a->gate_row));
        ck_assert(!memcmp(a->up, b->up, (size_t)c->n_ff_exp * a->up_row));
        ck_assert(!memcmp(a->down, b->down, (size_t)c->n_embd * a->down_row));
    }
    expert_shard_destroy(&s);
    expert_shard_destroy(&map);
    model_destroy(&m);
    free(img);

    m = tiny_open(GUILD_TYPE_Q4_K, &img);
    c = model_config(m);
    const int64_t all = 3 * c->n_layer * c->n_expert;
    ck_assert_int_eq(expert_shard_new(&map, m, NULL, &err), 0);
    /* packed bytes are kern_pack of the file's rows */
    ck_assert_msg(expert_shard_new_copy(&s, m, NULL, -1, false, false, EXPERT_LAYOUT_PACKED, &err) == 0, "%s",
                  err.msg);
    const expert_mats_t *a = expert_shard_get(map, 0, 5), *b = expert_shard_get(s, 0, 5);
    const size_t bytes = (size_t)c->n_embd * a->down_row;
    char *want = malloc(bytes), *back = malloc(bytes);
    ck_assert_int_eq(kern_pack(a->down_type, c->n_ff_exp, c->n_embd, a->down, a->down_row, want, &err), 0);
    ck_assert(!memcmp(want, b->down, bytes));
    kern_unpack(b->down_type, c->n_ff_exp, c->n_embd, b->down, b->down_row, back, b->down_row);
    ck_assert(!memcmp(back, a->down, bytes));
    free(want);
    free(back);
    expert_shard_destroy(&s);
    /* packing wins over interleaving where both apply; plain interleaves */
    ck_assert_int_eq(expert_shard_new_copy(&s, m, NULL, -1, false, true, EXPERT_LAYOUT_PACKED, &err), 0);
    ck_assert_int_eq(expert_shard_packed_count(s), all);
    b = expert_shard_get(s, 1, 2);
    ck_assert(b->gate_packed && b->up_packed && !expert_mats_interleaved(b));
    ck_assert_uint_eq(b->gate_row, a->gate_row);
    expert_shard_destroy(&s);
    ck_assert_int_eq(expert_shard_new_copy(&s, m, NULL, -1, false, true, EXPERT_LAYOUT_PLAIN, &err), 0);
    ck_assert_int_eq(expert_shard_packed_count(s), 0);
    ck_assert(expert_mats_interleaved(expert_shard_get(s, 1, 2)));
    expert_shard_destroy(&s);
    /* auto: packed exactly where this CPU's level has packed kernels */
    ck_assert_int_eq(expert_shard_new_copy(&s, m, NULL, -1, false, false, EXPERT_LAYOUT_AUTO, &err), 0);
    ck_assert_int_eq(expert_shard_packed_count(s), kern_pack_native(GUILD_TYPE_Q4_K) ? all : 0);
    expert_shard_destroy(&s);
    /* a shard of some experts packs only those */
    uint8_t *owned = calloc((size_t)c->n_layer * (size_t)c->n_expert, 1);
    owned[3] = owned[(size_t)c->n_expert + 6] = 1;
    ck_assert_int_eq(expert_shard_new_copy(&s, m, owned, -1, false, false, EXPERT_LAYOUT_PACKED, &err), 0);
    ck_assert_int_eq(expert_shard_packed_count(s), 6);
    ck_assert_ptr_null(expert_shard_get(s, 0, 4));
    ck_assert(expert_shard_get(s, 1, 6)->down_packed);
    free(owned);
    expert_shard_destroy(&s);
    expert_shard_destroy(&map);
    model_destroy(&m);
    free(img);

    /* which matrices a layout packs, and the names */
    ck_assert(expert_layout_packs(EXPERT_LAYOUT_PACKED, GUILD_TYPE_Q4_K, 32));
    ck_assert(expert_layout_packs(EXPERT_LAYOUT_PACKED, GUILD_TYPE_IQ4_XS, 16));
    ck_assert(!expert_layout_packs(EXPERT_LAYOUT_PACKED, GUILD_TYPE_Q4_K, 40)); /* not whole 16-row groups */
    ck_assert(!expert_layout_packs(EXPERT_LAYOUT_PACKED, none, 32));
    ck_assert(!expert_layout_packs(EXPERT_LAYOUT_PLAIN, GUILD_TYPE_Q4_K, 32));
    ck_assert(expert_layout_packs(EXPERT_LAYOUT_AUTO, GUILD_TYPE_Q4_K, 32) == kern_pack_native(GUILD_TYPE_Q4_K));
    const char *names[] = {"auto", "plain", "packed"};
    for (int i = 0; i < 3; i++) {
        expert_layout_t l;
        ck_assert_int_eq(expert_layout_from_name(names[i], &l), 0);
        ck_assert_str_eq(expert_layout_name(l), names[i]);
    }
    expert_layout_t l = EXPERT_LAYOUT_PLAIN;
    ck_assert_int_eq(expert_layout_from_name("interleaved", &l), -1);
    ck_assert_int_eq(l, EXPERT_LAYOUT_PLAIN);
}
END_TEST

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert(f);
    fputs(text, f);
    fclose(f);
}

START_TEST(test_tuning_file)
{
    char path[] = "/tmp/guild-tuning-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    guild_err_t err;
    expert_tuning_t t, r;
    expert_tuning_default(&t);
    ck_assert_int_eq(t.pipe.gate_up_rows, 0); /* automatic */
    snprintf(t.cpu, sizeof t.cpu, "Test CPU 9000");
    t.threads = 12;
    t.pipe.gate_up_rows = 48;
    t.pipe.down_rows = 128;
    t.interleave_gate_up = true;
    ck_assert_msg(expert_tuning_save(path, &t, &err) == 0, "%s", err.msg);
    ck_assert_msg(expert_tuning_load(path, &r, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(r.cpu, "Test CPU 9000");
    ck_assert_int_eq(r.threads, 12);
    ck_assert_int_eq(r.pipe.gate_up_rows, 48);
    ck_assert_int_eq(r.pipe.down_rows, 128);
    ck_assert(r.interleave_gate_up);
    ck_assert_int_eq(r.layout, EXPERT_LAYOUT_AUTO);
    t.layout = EXPERT_LAYOUT_PACKED;
    ck_assert_msg(expert_tuning_save(path, &t, &err) == 0, "%s", err.msg);
    ck_assert_msg(expert_tuning_load(path, &r, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(r.layout, EXPERT_LAYOUT_PACKED);
    write_file(path, "version = 1\nlayout = plain\n");
    ck_assert_msg(expert_tuning_load(path, &r, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(r.layout, EXPERT_LAYOUT_PLAIN);
    write_file(path, "version = 1\nlayout = fast\n");
    ck_assert_int_eq(expert_tuning_load(path, &r, &err), -1);
    ck_assert_msg(strstr(err.msg, ":2:") && strstr(err.msg, "auto, plain or packed"), "%s", err.msg);
    write_file(path, "version = 1\ninterleave_gate_up = 2\n");
    ck_assert_int_eq(expert_tuning_load(path, &r, &err), -1);
    ck_assert_msg(strstr(err.msg, ":2:") && strstr(err.msg, "0 or 1"), "%s", err.msg);

    write_file(path, "version = 1\ngate_up_rows = 40\n");
    ck_assert_int_eq(expert_tuning_load(path, &r, &err), -1);
    ck_assert_msg(strstr(err.msg, ":2:") && strstr(err.msg, "multiple of 16"), "%s", err.msg);
    ck_assert_int_eq(r.pipe.gate_up_rows, 0); /* defaults on failure */
    write_file(path, "version = 1\nspeed = 11\n");
    ck_assert_int_eq(expert_tuning_load(path, &r, &err), -1);
    ck_assert_msg(strstr(err.msg, "unknown key 'speed'"), "%s", err.msg);
    /* version 2: the GPU plan's costs round-trip; a version 1 file does not know their keys */
    t.cost.cpu_tflops = 2.125;
    t.cost.cpu_gbps = 88.5;
    t.cost.h2d_gbps = 54.25;
    ck_assert_msg(expert_tuning_save(path, &t, &err) == 0, "%s", err.msg);
    ck_assert_msg(expert_tuning_load(path, &r, &err) == 0, "%s", err.msg);
    ck_assert(r.cost.cpu_tflops == 2.125 && r.cost.cpu_gbps == 88.5 && r.cost.h2d_gbps == 54.25 &&
              r.cost.gpu_tflops == 0);
    write_file(path, "version = 1\ncpu_gbps = 80\n");
    ck_assert_int_eq(expert_tuning_load(path, &r, &err), -1);
    ck_assert_msg(strstr(err.msg, "unknown key 'cpu_gbps'"), "%s", err.msg);
    write_file(path, "version = 2\nh2d_gbps = fast\n");
    ck_assert_int_eq(expert_tuning_load(path, &r, &err), -1);
    ck_assert_msg(strstr(err.msg, ":2:") && strstr(err.msg, "h2d_gbps"), "%s", err.msg);
    write_file(path, "version = 7\n");
    ck_assert_int_eq(expert_tuning_load(path, &r, &err), -1);
    ck_assert_msg(strstr(err.msg, "version 7"), "%s", err.msg);
    write_file(path, "threads = 3\n");
    ck_assert_int_eq(expert_tuning_load(path, &r, &err), -1);
    ck_assert_msg(strstr(err.msg, "no `version`"), "%s", err.msg);
    remove(path);
    ck_assert_int_eq(expert_tuning_load(path, &r, &err), -1);
    ck_assert_msg(strstr(err.msg, path) != NULL, "%s", err.msg);
}
END_TEST

START_TEST(test_tuning_for_model)
{
    char dir[] = "/tmp/guild-tuning-model-XXXXXX", model[4200], path[4200];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(model, sizeof model, "%s/m.gguf", dir);
    guild_err_t err;
    expert_tuning_t t;
    bool found = true;
    /* no file: defaults, not an error */
    ck_assert_int_eq(expert_tuning_load_for_model(model, &t, &found, &err), 0);
    ck_assert(!found);
    ck_assert_int_eq(t.threads, 0);
    ck_assert_int_eq(expert_tuning_path(model, path, sizeof path, &err), 0);
    ck_assert(strstr(path, "/m.gguf.tuning") != NULL);
    write_file(path, "version = 1\ncpu = Test CPU\nthreads = 3\ngate_up_rows = 32\n");
    ck_assert_msg(expert_tuning_load_for_model(model, &t, &found, &err) == 0, "%s", err.msg);
    ck_assert(found);
    ck_assert_int_eq(t.threads, 3);
    ck_assert_int_eq(t.pipe.gate_up_rows, 32);
    ck_assert_int_eq(t.pipe.down_rows, 0);
    char d[256];
    expert_tuning_describe(&t, d, sizeof d);
    ck_assert_str_eq(d, "threads 3, gate_up_rows 32, down_rows automatic (measured on Test CPU)");
    t.layout = EXPERT_LAYOUT_PLAIN;
    expert_tuning_describe(&t, d, sizeof d);
    ck_assert_str_eq(d, "threads 3, gate_up_rows 32, down_rows automatic, layout plain (measured on Test CPU)");
    /* a bad file is an error naming it */
    write_file(path, "version = 1\nthreads = many\n");
    ck_assert_int_eq(expert_tuning_load_for_model(model, &t, &found, &err), -1);
    ck_assert_msg(strstr(err.msg, path) && strstr(err.msg, ":2:"), "%s", err.msg);
    remove(path);
    rmdir(dir);
}
END_TEST

static _Atomic int stop_calls;
static int stop_after;

static bool stop_when(void *ctx)
{
    (void)ctx;
    return ++stop_calls > stop_after;
}

START_TEST(test_prefetch)
{
    rng_state = 5;
    /* expert_prefetch: the hinted experts' three matrices (one range when gate/up interleave), owned ones only,
     * each once; all of them when never stopped, none when stopped from the start, part when stopped midway */
    for (int il = 0; il < 2; il++) {
        interleave = il;
        experts_t x;
        experts_new(&x, GUILD_TYPE_Q4_K, GUILD_TYPE_Q4_K, GUILD_TYPE_Q6_K, 512, 256, 6, 3, 2, 3);
        guild_pool_t *pool = NULL;
        expert_prefetch_t *pf = NULL;
        guild_err_t err;
        ck_assert_int_eq(guild_pool_new(&pool, 3, NULL, &err), 0);
        ck_assert_int_eq(expert_prefetch_new(&pf, &x.src, pool, &err), 0);
        const expert_mats_t *m = experts_get(&x, 1, 0);
        const uint64_t one = 256ull * m->gate_row + (il ? 0 : 256ull * m->up_row) + 512ull * m->down_row;
        /* experts 0, 3 and 5 (4 and 1 are not owned with own_mod 3: i % 3 == 1 for layer 1's 7 and 10), 0 again,
         * and ids out of range */
        const int32_t ids[] = {0, 3, 0, -1, 6, 5, 4};
        uint64_t want = 0;
        for (int i = 0; i < 7; i++) {
            bool dup = false;
            for (int j = 0; j < i; j++)
                dup |= ids[j] == ids[i];
            if (!dup && ids[i] >= 0 && ids[i] < 6 && experts_get(&x, 1, ids[i]))
                want += one;
        }
        ck_assert_uint_gt(want, 0);
        ck_assert_uint_eq(expert_prefetch_bytes(pf, 1, 7, ids), want);
        stop_calls = 0;
        stop_after = 1 << 30;
        ck_assert_uint_eq(expert_prefetch_run(pf, 1, 7, ids, stop_when, NULL), want);
        stop_calls = 0;
        stop_after = 0;
        ck_assert_uint_eq(expert_prefetch_run(pf, 1, 7, ids, stop_when, NULL), 0);
        stop_calls = 0;
        stop_after = 5;
        const uint64_t part = expert_prefetch_run(pf, 1, 7, ids, stop_when, NULL);
        ck_assert_uint_gt(part, 0);
        ck_assert_uint_lt(part, want);
        ck_assert_uint_eq(expert_prefetch_run(pf, 5, 7, ids, stop_when, NULL), 0); /* no such layer */
        expert_prefetch_destroy(&pf);
        ck_assert_ptr_null(pf);
        guild_pool_destroy(&pool);
        experts_free(&x);
    }
    interleave = false;
}
END_TEST

int main(void)
{
    Suite *s = suite_create("expert_pipe");
    TCase *tc = tcase_create("pipe");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_pipe_matches_reference);
    tcase_add_test(tc, test_pipe_owns_a_shard);
    tcase_add_test(tc, test_pipe_profiled_and_guided);
    tcase_add_test(tc, test_pipe_interleaved);
    tcase_add_test(tc, test_pipe_packed);
    tcase_add_test(tc, test_pipe_errors);
    tcase_add_test(tc, test_pipe_warm);
    tcase_add_test(tc, test_prefetch);
    suite_add_tcase(s, tc);
    tc = tcase_create("shard_layout");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_shard_packed_same_bits);
    tcase_add_test(tc, test_shard_copy_layouts);
    suite_add_tcase(s, tc);
    tc = tcase_create("tuning");
    tcase_add_test(tc, test_tuning_file);
    tcase_add_test(tc, test_tuning_for_model);
    suite_add_tcase(s, tc);
    return check_run(s);
}
