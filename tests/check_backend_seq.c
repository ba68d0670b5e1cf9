/* Tests for the CPU backend's sequences (backend_options_t.n_seq, backend_forward_seq): rows of several sequences
 * in one batch give each row the same logits, bit for bit, as its sequence run alone in a backend of one sequence
 * (the contract in gpu-worker/dense/backend.h), for every architecture of the test models (GQA, MLA in each form,
 * the recurrent hybrids); truncating one sequence leaves the others; errors name the sequence. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu-expert-worker/experts/moe_local.h"
#include "gpu-worker/dense/backend.h"
#include "gpu-worker/dense/kv_format.h"
#include "tests/check_run.h"
#include "tests/tiny_model.h"

typedef struct rig {
    void *image;
    model_t *model;
    guild_pool_t *pool;
    moe_exec_t *moe;
    backend_t *be;
} rig_t;

static void rig_open(rig_t *r, const tiny_spec_t *s, int threads, int n_batch, int n_ctx, int n_seq, int mla_form)
{
    guild_err_t err = {{0}};
    size_t size;
    memset(r, 0, sizeof *r);
    tiny_model_image(s, &r->image, &size);
    ck_assert_msg(tiny_model_open(r->image, size, &r->model, &err) == 0, "%s", err.msg);
    ck_assert_msg(guild_pool_new(&r->pool, threads, NULL, &err) == 0, "%s", err.msg);
    ck_assert_msg(moe_local_new(&r->moe, r->model, r->pool, &err) == 0, "%s", err.msg);
    backend_options_t o = {.n_ctx = n_ctx, .n_batch = n_batch, .pool = r->pool, .moe = r->moe, .n_seq = n_seq,
                           .mla_form = mla_form, .check_finite = true};
    ck_assert_msg(backend_new(&r->be, "cpu", r->model, &o, NULL, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(backend_n_seq(r->be), n_seq > 1 ? n_seq : 1);
}

static void rig_close(rig_t *r)
{
    backend_destroy(&r->be);
    moe_exec_destroy(&r->moe);
    guild_pool_destroy(&r->pool);
    model_destroy(&r->model);
    free(r->image);
}

/* A sequence of a schedule: n tokens, the first `prefill` of them in pieces of `chunk`, then one a step; it
 * starts at step `start` of the mixed run. */
typedef struct seq_plan {
    int n, prefill, chunk, start;
} seq_plan_t;

enum { MAX_SEQ = 4, MAX_TOK = 160, V = 96 };

typedef struct run {
    const seq_plan_t *plan;
    int n_seq;
    int32_t tok[MAX_SEQ][MAX_TOK];
    int done[MAX_SEQ]; /* tokens fed so far */
} run_t;

/* The next piece of sequence s: its size (0 when done). */
static int piece(const run_t *r, int s)
{
    const seq_plan_t *p = &r->plan[s];
    int left = p->n - r->done[s];
    if (left <= 0)
        return 0;
    if (r->done[s] < p->prefill) {
        int c = p->prefill - r->done[s] < p->chunk ? p->prefill - r->done[s] : p->chunk;
        return c;
    }
    return 1;
}

static void run_init(run_t *r, const seq_plan_t *plan, int n_seq, uint32_t seed)
{
    memset(r, 0, sizeof *r);
    r->plan = plan;
    r->n_seq = n_seq;
    uint32_t x = seed;
    for (int s = 0; s < n_seq; s++)
        for (int i = 0; i < plan[s].n; i++) {
            x = x * 1103515245u + 12345u;
            r->tok[s][i] = (int32_t)((x >> 16) % V);
        }
}

/* Each sequence alone (sequence 0 of a backend of one), its pieces in order, every row's logits into
 * ref[s][pos][V]. */
static void run_alone(const tiny_spec_t *spec, int mla_form, run_t *r, float *ref, int n_batch)
{
    guild_err_t err = {{0}};
    rig_t g;
    rig_open(&g, spec, 2, n_batch, MAX_TOK, 1, mla_form);
    for (int s = 0; s < r->n_seq; s++) {
        backend_kv_clear(g.be);
        int n;
        while ((n = piece(r, s)) > 0) {
            int32_t pos[MAX_TOK], rows[MAX_TOK];
            for (int i = 0; i < n; i++) {
                pos[i] = r->done[s] + i;
                rows[i] = i;
            }
            float *out = ref + ((size_t)s * MAX_TOK + (size_t)r->done[s]) * V;
            ck_assert_msg(backend_forward(g.be, n, r->tok[s] + r->done[s], pos, n, rows, out, &err) == 0, "%s",
                          err.msg);
            r->done[s] += n;
        }
    }
    rig_close(&g);
    memset(r->done, 0, sizeof r->done);
}

/* The sequences together in a backend of n_seq >= r->n_seq: at each step every started sequence's next piece,
 * the pieces' rows interleaved one at a time (a sequence's rows are not adjacent), every row's logits asked in
 * reverse order; each compared with ref. Sequence s runs as sequence map[s] of the backend. */
static void run_mixed(rig_t *g, run_t *r, const float *ref, const int *map, const char *what)
{
    guild_err_t err = {{0}};
    int32_t tok[MAX_SEQ * MAX_TOK], seq[MAX_SEQ * MAX_TOK], pos[MAX_SEQ * MAX_TOK], rows[MAX_SEQ * MAX_TOK];
    int32_t from[MAX_SEQ * MAX_TOK];
    float *out = malloc((size_t)MAX_SEQ * MAX_TOK * V * sizeof *out);
    for (int step = 0;; step++) {
        int left[MAX_SEQ], n = 0, any = 0;
        for (int s = 0; s < r->n_seq; s++) {
            left[s] = step >= r->plan[s].start ? piece(r, s) : 0;
            any |= r->done[s] < r->plan[s].n;
        }
        if (!any)
            break;
        int taken[MAX_SEQ] = {0};
        for (bool more = true; more;) {
            more = false;
            for (int s = 0; s < r->n_seq; s++) {
                if (taken[s] == left[s])
                    continue;
                const int i = r->done[s] + taken[s]++;
                tok[n] = r->tok[s][i];
                seq[n] = map[s];
                pos[n] = i;
                from[n] = s;
                n++;
                more = true;
            }
        }
        if (n == 0)
            continue;
        for (int i = 0; i < n; i++)
            rows[i] = n - 1 - i;
        ck_assert_msg(backend_forward_seq(g->be, n, tok, seq, pos, n, rows, out, &err) == 0, "%s: step %d: %s", what,
                      step, err.msg);
        for (int i = 0; i < n; i++) {
            const int b = rows[i], s = from[b];
            const float *want = ref + ((size_t)s * MAX_TOK + (size_t)pos[b]) * V;
            ck_assert_msg(!memcmp(out + (size_t)i * V, want, V * sizeof *out),
                          "%s: step %d: sequence %d position %d differs from the sequence alone", what, step, s,
                          pos[b]);
        }
        for (int s = 0; s < r->n_seq; s++) {
            r->done[s] += left[s];
            ck_assert_int_eq(backend_seq_kv_len(g->be, map[s]), r->done[s]);
        }
    }
    free(out);
}

static const char *archs[] = {"qwen3moe", "qwen2moe",  "llama",     "olmoe",    "gpt-oss",
                              "glm4moe",  "deepseek2", "qwen3next", "qwen35moe"};
#define N_ARCHS ((int)(sizeof archs / sizeof archs[0]))

static tiny_spec_t spec_of(int i)
{
    tiny_spec_t s = tiny_spec(archs[i % N_ARCHS]);
    if (i >= N_ARCHS) { /* quantized weights */
        s.wtype = i % 2 ? GUILD_TYPE_Q8_0 : GUILD_TYPE_Q4_1;
        s.n_ff_shexp = 64;
        s.n_ff = 64;
        s.n_groups = 4;
        s.n_group_used = 2;
        s.no_maybe = true;
    }
    if (!strcmp(s.arch, "qwen3next") || !strcmp(s.arch, "qwen35moe"))
        s.n_layer = 3; /* gdn, attention, gdn */
    if (!strcmp(s.arch, "glm4moe"))
        s.n_rot = 8;
    s.seed = 40 + (uint64_t)i;
    return s;
}

/* three sequences of different lengths, chunks and starts (sliding windows, gpt-oss: longer than its window) */
static const seq_plan_t plan3[] = {{.n = 21, .prefill = 12, .chunk = 5, .start = 0},
                                   {.n = 14, .prefill = 7, .chunk = 7, .start = 1},
                                   {.n = 17, .prefill = 3, .chunk = 2, .start = 3}};

START_TEST(test_mixed_batches_give_each_row_its_bits_alone)
{
    const tiny_spec_t spec = spec_of(_i);
    static const int forms[] = {BACKEND_MLA_AUTO, BACKEND_MLA_ABSORBED, BACKEND_MLA_EXPANDED};
    const int n_forms = !strcmp(spec.arch, "deepseek2") ? 3 : 1;
    float *ref = malloc((size_t)MAX_SEQ * MAX_TOK * V * sizeof *ref);
    for (int f = 0; f < n_forms; f++) {
        run_t r;
        run_init(&r, plan3, 3, 77u + (uint32_t)_i);
        run_alone(&spec, forms[f], &r, ref, 16);
        rig_t g;
        rig_open(&g, &spec, 3, 32, MAX_TOK, 4, forms[f]);
        static const int map[] = {2, 0, 3}; /* backend sequence 1 stays empty */
        char what[64];
        snprintf(what, sizeof what, "%s (form %d)", spec.arch, forms[f]);
        run_mixed(&g, &r, ref, map, what);
        ck_assert_int_eq(backend_seq_kv_len(g.be, 1), 0);
        ck_assert_int_eq(backend_kv_len(g.be), backend_seq_kv_len(g.be, 0));

        /* sequence 0 (backend 2) back to 9 positions (a recurrent model's: emptied) and fed again, one token
         * a step, beside the others' caches, which stay */
        backend_seq_kv_truncate(g.be, 2, 9);
        const bool recurrent = model_recurrent(model_config(g.model));
        const int kept = backend_seq_kv_len(g.be, 2);
        ck_assert_int_eq(kept, recurrent ? 0 : 9);
        ck_assert_int_eq(backend_seq_kv_len(g.be, 0), plan3[1].n);
        ck_assert_int_eq(backend_seq_kv_len(g.be, 3), plan3[2].n);
        guild_err_t err = {{0}};
        float out[V];
        for (int p = kept; p < plan3[0].n; p++) {
            int32_t s2 = 2, row = 0;
            ck_assert_msg(backend_forward_seq(g.be, 1, &r.tok[0][p], &s2, &p, 1, &row, out, &err) == 0, "%s",
                          err.msg);
            ck_assert_msg(!memcmp(out, ref + (size_t)p * V, sizeof out), "%s: position %d after truncation", what,
                          p);
        }
        rig_close(&g);
    }
    free(ref);
}
END_TEST

/* MLA in auto form: a sequence with enough rows in the batch for the expanded form (and over a block of 64
 * positions) beside sequences decoding one row each in the absorbed form. */
START_TEST(test_mla_forms_mixed_in_one_batch)
{
    tiny_spec_t spec = tiny_spec("deepseek2");
    spec.seed = 5;
    static const seq_plan_t plan[] = {{.n = 8, .prefill = 4, .chunk = 4, .start = 0},
                                      {.n = 150, .prefill = 140, .chunk = 70, .start = 2},
                                      {.n = 9, .prefill = 2, .chunk = 2, .start = 1}};
    float *ref = malloc((size_t)MAX_SEQ * MAX_TOK * V * sizeof *ref);
    run_t r;
    run_init(&r, plan, 3, 9u);
    run_alone(&spec, BACKEND_MLA_AUTO, &r, ref, 80);
    rig_t g;
    rig_open(&g, &spec, 2, 80, MAX_TOK, 3, BACKEND_MLA_AUTO);
    static const int map[] = {1, 2, 0};
    run_mixed(&g, &r, ref, map, "deepseek2 auto, forms mixed");
    rig_close(&g);
    free(ref);
}
END_TEST

START_TEST(test_errors_name_the_sequence)
{
    tiny_spec_t spec = tiny_spec("qwen3moe");
    rig_t g;
    rig_open(&g, &spec, 1, 8, 4, 2, BACKEND_MLA_AUTO);
    guild_err_t err = {{0}};
    float out[2 * V];
    int32_t tok[3] = {1, 2, 3}, pos[3] = {0, 0, 1}, seq[3] = {0, 1, 1}, rows[2] = {0, 2};
    int32_t bad = 2;
    ck_assert_int_eq(backend_forward_seq(g.be, 1, tok, &bad, pos, 0, NULL, out, &err), -1);
    ck_assert_msg(strstr(err.msg, "sequence 2") != NULL, "%s", err.msg);
    int32_t wrong[3] = {0, 1, 2}; /* sequence 1's first row is its position 0 */
    ck_assert_int_eq(backend_forward_seq(g.be, 3, tok, seq, wrong, 0, NULL, out, &err), -1);
    ck_assert_msg(strstr(err.msg, "expected 0") != NULL, "%s", err.msg);
    ck_assert_int_eq(backend_seq_kv_len(g.be, 0), 0);
    ck_assert_int_eq(backend_seq_kv_len(g.be, 1), 0);
    ck_assert_msg(backend_forward_seq(g.be, 3, tok, seq, pos, 2, rows, out, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(backend_seq_kv_len(g.be, 0), 1);
    ck_assert_int_eq(backend_seq_kv_len(g.be, 1), 2);
    /* sequence 1 holds 2 of 4: three more do not fit, while sequence 0 has room */
    int32_t p3[3] = {2, 3, 4}, s3[3] = {1, 1, 1};
    ck_assert_int_eq(backend_forward_seq(g.be, 3, tok, s3, p3, 0, NULL, out, &err), -1);
    ck_assert_msg(strstr(err.msg, "context is full") && strstr(err.msg, "sequence 1"), "%s", err.msg);
    ck_assert_int_eq(backend_seq_kv_len(g.be, 1), 2);
    /* the one-sequence calls are sequence 0's */
    int32_t p1 = 1, r0 = 0;
    ck_assert_msg(backend_forward(g.be, 1, tok, &p1, 1, &r0, out, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(backend_seq_kv_len(g.be, 0), 2);
    backend_kv_clear(g.be);
    ck_assert_int_eq(backend_seq_kv_len(g.be, 0), 0);
    ck_assert_int_eq(backend_seq_kv_len(g.be, 1), 2);
    rig_close(&g);
}
END_TEST


/* Snapshots (backend_seq_save / backend_seq_load): positions restored into another sequence, or into another
 * backend of the same model, then continued, give the same logits bit for bit as the whole run in one cold
 * sequence; a prefix of a snapshot restores as well (not for a recurrent model, whose state is at the end); a
 * blob of another format or a damaged one is refused and changes nothing. */
START_TEST(test_snapshots_restore_bit_for_bit)
{
    const tiny_spec_t spec = spec_of(_i);
    enum { N = 20, CUT = 12 };
    int32_t tok[N];
    for (int i = 0; i < N; i++)
        tok[i] = (int32_t)((i * 37 + 11 + _i) % V);
    int32_t rows[N], pos[N], seq1[N];
    for (int i = 0; i < N; i++)
        rows[i] = i;
    float *ref = malloc((size_t)N * V * sizeof *ref), *got = malloc((size_t)N * V * sizeof *got);
    guild_err_t err = {{0}};
    rig_t a, b;
    rig_open(&a, &spec, 2, 32, 64, 2, BACKEND_MLA_ABSORBED);
    rig_open(&b, &spec, 1, 32, 64, 1, BACKEND_MLA_ABSORBED);
    const bool rec = model_recurrent(model_config(a.model));
    for (int i = 0; i < N; i++)
        pos[i] = i;
    ck_assert_msg(backend_forward(a.be, N, tok, pos, N, rows, ref, &err) == 0, "%s", err.msg); /* cold, seq 0 */
    void *blob;
    size_t size;
    if (rec) {
        ck_assert_int_ne(backend_seq_save(a.be, 0, CUT, &blob, &size, &err), 0); /* not at the end */
        ck_assert_msg(strstr(err.msg, "end"), "%s", err.msg);
        backend_kv_truncate(a.be, 0);
        ck_assert_msg(backend_forward(a.be, CUT, tok, pos, 0, rows, NULL, &err) == 0, "%s", err.msg);
    }
    ck_assert_msg(backend_seq_save(a.be, 0, CUT, &blob, &size, &err) == 0, "%s", err.msg);
    /* into sequence 1 of the same backend, and into another backend */
    for (int k = 0; k < 2; k++) {
        backend_t *be = k ? b.be : a.be;
        const int32_t q = k ? 0 : 1;
        ck_assert_msg(backend_seq_load(be, q, tok, CUT, blob, size, &err) == 0, "%s", err.msg);
        ck_assert_int_eq(backend_seq_kv_len(be, q), CUT);
        for (int i = 0; i < N - CUT; i++) {
            seq1[i] = q;
            pos[i] = CUT + i;
        }
        ck_assert_msg(backend_forward_seq(be, N - CUT, tok + CUT, seq1, pos, N - CUT, rows, got, &err) == 0, "%s",
                      err.msg);
        ck_assert_msg(!memcmp(got, ref + (size_t)CUT * V, (size_t)(N - CUT) * V * sizeof *got),
                      "%s: restored into %s: logits differ from the cold run", spec.arch,
                      k ? "another backend" : "sequence 1");
    }
    /* a prefix of the snapshot (attention only) */
    if (!rec) {
        const int P = CUT - 5;
        ck_assert_msg(backend_seq_load(b.be, 0, tok, P, blob, size, &err) == 0, "%s", err.msg);
        for (int i = 0; i < N - P; i++)
            pos[i] = P + i;
        ck_assert_msg(backend_forward(b.be, N - P, tok + P, pos, N - P, rows, got, &err) == 0, "%s", err.msg);
        ck_assert_msg(!memcmp(got, ref + (size_t)P * V, (size_t)(N - P) * V * sizeof *got), "%s: a prefix",
                      spec.arch);
    } else {
        ck_assert_int_ne(backend_seq_load(b.be, 0, tok, CUT - 1, blob, size, &err), 0);
    }
    /* refusals leave the sequence as it was */
    const int32_t held = backend_seq_kv_len(a.be, 1);
    backend_state_header_t *h = blob;
    h->kv_type = KV_TYPE_Q8_0;
    ck_assert_int_ne(backend_seq_load(a.be, 1, tok, CUT, blob, size, &err), 0);
    ck_assert_msg(strstr(err.msg, "format"), "%s", err.msg);
    h->kv_type = KV_TYPE_F32;
    h->model_hash ^= 1;
    ck_assert_int_ne(backend_seq_load(a.be, 1, tok, CUT, blob, size, &err), 0);
    ck_assert_msg(strstr(err.msg, "another shape"), "%s", err.msg);
    h->model_hash ^= 1;
    ck_assert_int_ne(backend_seq_load(a.be, 1, tok, CUT, blob, size - 4, &err), 0);
    ck_assert_int_ne(backend_seq_load(a.be, 1, tok, CUT + 1, blob, size, &err), 0);
    h->magic ^= 0xff;
    ck_assert_int_ne(backend_seq_load(a.be, 1, tok, CUT, blob, size, &err), 0);
    ck_assert_int_eq(backend_seq_kv_len(a.be, 1), held);
    ck_assert_int_ne(backend_seq_save(a.be, 1, held + 1, &blob, &size, &err), 0);
    free(h);
    rig_close(&a);
    rig_close(&b);
    free(ref);
    free(got);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("backend_seq");
    TCase *tc = tcase_create("seq");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_mixed_batches_give_each_row_its_bits_alone, 0, N_ARCHS + 2);
    tcase_add_test(tc, test_mla_forms_mixed_in_one_batch);
    tcase_add_test(tc, test_errors_name_the_sequence);
    tcase_add_loop_test(tc, test_snapshots_restore_bit_for_bit, 0, N_ARCHS);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(suite());
}
