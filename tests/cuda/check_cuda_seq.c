/* The CUDA backend's sequences (backend_options_t.n_seq, backend_forward_seq; gpu-worker/dense/backend.h): rows of
 * several sequences in one batch give each row the same logits, bit for bit, as its sequence run alone in a CUDA
 * backend of one sequence with the same settings.
 *
 * Per case (architecture, weight type, cache format, experts on the device or through the host executor, graphs
 * on or off): three sequences of different lengths, each a prefill in pieces (one of them a piece of more than
 * CUDA_DECODE_ROWS rows, which takes the prefill kernels: the flash attention, the gated delta net's chunked form)
 * and then one token a step, starting at different steps; in the mixed run every step holds each started
 * sequence's next piece, the rows interleaved one at a time, every row's logits asked in reverse order, the
 * sequences in backend slots 2, 0 and 3 (slot 1 stays empty). Decode steps of three rows are captured as graphs.
 * Then one sequence is truncated back (a recurrent model's emptied) and fed again while another slot is emptied
 * and reused for a different sequence from position 0, both in the same batches: each row again the bits of its
 * sequence alone. Errors name the sequence and leave every cache where it was.
 * Needs a CUDA device: without one, exit 77 (SKIP). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/quant/quant.h"
#include "cpu-expert-worker/experts/moe_local.h"
#include "gpu-worker/dense/backend.h"
#include "gpu-worker/dense/cuda/cuda_config.h"
#include "gpu-worker/dense/cuda/cuda_kernels.h" /* CUDA_DECODE_ROWS */
#include "gpu-worker/dense/cuda/cuda_util.h"
#include "gpu-worker/dense/gpu_plan.h"
#include "gpu-worker/dense/kv_format.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/tiny_model.h"

enum { MAX_SEQ = 3, MAX_TOK = 128, N_CTX = 160, N_BATCH = 96 };

typedef struct seq_case {
    const char *arch;
    guild_type_t type;
    int32_t kv_type;
    bool host_experts; /* the routed experts through the host executor (no resident expert, no graphs) */
    bool no_graph;
} seq_case_t;

static const seq_case_t cases[] = {
    {"qwen3moe", GUILD_TYPE_Q4_K, KV_TYPE_F16, false, false},
    {"qwen3moe", GUILD_TYPE_Q4_K, KV_TYPE_F16, false, true},
    {"qwen3moe", GUILD_TYPE_Q4_K, KV_TYPE_F16, true, false},
    {"qwen3moe", GUILD_TYPE_Q8_0, KV_TYPE_Q8_0, false, false},
    {"qwen3moe", GUILD_TYPE_Q8_0, KV_TYPE_K8V4, false, false},
    {"gpt-oss", GUILD_TYPE_Q8_0, KV_TYPE_F16, false, false},
    {"glm4moe", GUILD_TYPE_Q4_K, KV_TYPE_F16, false, false},
    {"deepseek2", GUILD_TYPE_Q8_0, KV_TYPE_F16, false, false},
    {"llama", GUILD_TYPE_F32, KV_TYPE_F32, false, false},
    {"qwen3next", GUILD_TYPE_F32, KV_TYPE_F16, false, false},
    {"qwen35moe", GUILD_TYPE_Q8_0, KV_TYPE_F16, false, false},
};
#define N_CASES (int)(sizeof cases / sizeof cases[0])

/* check_cuda_backend's shapes (cuda_test_spec). */
static tiny_spec_t seq_spec(const seq_case_t *sc, uint64_t seed)
{
    tiny_spec_t s = tiny_spec(sc->arch);
    cuda_test_spec(&s, sc->type, seed);
    return s;
}

typedef struct rig {
    void *image;
    model_t *model;
    guild_pool_t *pool;
    moe_exec_t *moe;
} rig_t;

static backend_t *open_cuda(const rig_t *r, const seq_case_t *sc, int n_seq)
{
    guild_err_t err = {{0}};
    backend_t *be = NULL;
    const cuda_config_t cc = {.gpu_expert_layers = sc->host_experts ? GPU_EXPERTS_NONE : 0, .no_graph = sc->no_graph};
    const backend_options_t o = {.n_ctx = N_CTX, .n_batch = N_BATCH, .pool = r->pool, .moe = r->moe,
                                 .kv_type = sc->kv_type, .n_seq = n_seq, .check_finite = true};
    ck_assert_msg(backend_new(&be, "cuda", r->model, &o, &cc, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(backend_n_seq(be), n_seq);
    return be;
}

/* A sequence of a schedule: n tokens, the first `prefill` of them in pieces of `chunk`, then one a step; it
 * starts at step `start` of the mixed run. */
typedef struct seq_plan {
    int n, prefill, chunk, start;
} seq_plan_t;

static const seq_plan_t plan3[MAX_SEQ] = {{.n = 110, .prefill = 70, .chunk = 70, .start = 1},
                                          {.n = 60, .prefill = 21, .chunk = 7, .start = 0},
                                          {.n = 45, .prefill = 3, .chunk = 3, .start = 4}};

typedef struct run {
    int32_t tok[MAX_SEQ][MAX_TOK];
    int done[MAX_SEQ];
} run_t;

static int piece(const run_t *r, int s)
{
    const seq_plan_t *p = &plan3[s];
    const int left = p->n - r->done[s];
    if (left <= 0)
        return 0;
    if (r->done[s] < p->prefill)
        return p->prefill - r->done[s] < p->chunk ? p->prefill - r->done[s] : p->chunk;
    return 1;
}

/* Each sequence alone (sequence 0 of a backend of one), its pieces in order, every row's logits into
 * ref[s][pos][V]. */
static void run_alone(const rig_t *g, const seq_case_t *sc, run_t *r, float *ref, int32_t V)
{
    guild_err_t err = {{0}};
    backend_t *be = open_cuda(g, sc, 1);
    for (int s = 0; s < MAX_SEQ; s++) {
        backend_kv_clear(be);
        int n;
        while ((n = piece(r, s)) > 0) {
            int32_t pos[MAX_TOK], rows[MAX_TOK];
            for (int i = 0; i < n; i++) {
                pos[i] = r->done[s] + i;
                rows[i] = i;
            }
            float *out = ref + ((size_t)s * MAX_TOK + (size_t)r->done[s]) * (size_t)V;
            ck_assert_msg(backend_forward(be, n, r->tok[s] + r->done[s], pos, n, rows, out, &err) == 0, "%s",
                          err.msg);
            r->done[s] += n;
        }
    }
    backend_destroy(&be);
    memset(r->done, 0, sizeof r->done);
}

/* Steps until every sequence of `which` is done: each step every started one's next piece (seq_of[s] its backend
 * slot; sequence s starts at step start[s]), rows interleaved, outputs asked in reverse order, each compared with
 * ref. */
static void run_mixed(backend_t *be, run_t *r, const bool *which, const int *seq_of, const int *start,
                      const float *ref, int32_t V, const char *what)
{
    guild_err_t err = {{0}};
    enum { ROWS = MAX_SEQ * MAX_TOK };
    int32_t *tok = malloc(4 * ROWS * sizeof *tok), *seq = tok + ROWS, *pos = seq + ROWS, *rows = pos + ROWS;
    int from[ROWS];
    float *out = malloc((size_t)ROWS * (size_t)V * sizeof *out);
    for (int step = 0;; step++) {
        int left[MAX_SEQ] = {0}, n = 0;
        bool any = false;
        for (int s = 0; s < MAX_SEQ; s++) {
            if (!which[s])
                continue;
            left[s] = step >= start[s] ? piece(r, s) : 0;
            any |= r->done[s] < plan3[s].n;
        }
        if (!any)
            break;
        int taken[MAX_SEQ] = {0};
        for (bool more = true; more;) {
            more = false;
            for (int s = 0; s < MAX_SEQ; s++) {
                if (taken[s] == left[s])
                    continue;
                const int i = r->done[s] + taken[s]++;
                tok[n] = r->tok[s][i];
                seq[n] = seq_of[s];
                pos[n] = i;
                from[n] = s;
                n++;
                more = true;
            }
        }
        if (n == 0)
            continue;
        ck_assert(n <= N_BATCH);
        for (int i = 0; i < n; i++)
            rows[i] = n - 1 - i;
        ck_assert_msg(backend_forward_seq(be, n, tok, seq, pos, n, rows, out, &err) == 0, "%s: step %d: %s", what,
                      step, err.msg);
        for (int i = 0; i < n; i++) {
            const int b = rows[i], s = from[b];
            const float *want = ref + ((size_t)s * MAX_TOK + (size_t)pos[b]) * (size_t)V;
            const float *got = out + (size_t)i * (size_t)V;
            for (int32_t v = 0; v < V; v++)
                ck_assert_msg(!memcmp(&got[v], &want[v], sizeof *got), "%s: step %d (%d rows): sequence %d position "
                              "%d (row %d), logit %d: %.9g alone, %.9g together", what, step, n, s, pos[b], b, v,
                              (double)want[v], (double)got[v]);
        }
        for (int s = 0; s < MAX_SEQ; s++) {
            r->done[s] += left[s];
            if (which[s])
                ck_assert_int_eq(backend_seq_kv_len(be, seq_of[s]), r->done[s]);
        }
    }
    free(out);
    free(tok);
}

START_TEST(test_sequences_together_equal_alone)
{
    const seq_case_t *sc = &cases[_i];
    guild_err_t err = {{0}};
    tiny_spec_t s = seq_spec(sc, 61 + (uint64_t)_i);
    if (!strcmp(s.arch, "qwen3next") || !strcmp(s.arch, "qwen35moe"))
        s.n_layer = 3; /* gdn, attention, gdn */
    rig_t g = {0};
    size_t size;
    tiny_model_image(&s, &g.image, &size);
    ck_assert_msg(tiny_model_open(g.image, size, &g.model, &err) == 0, "%s", err.msg);
    ck_assert_msg(guild_pool_new(&g.pool, 2, NULL, &err) == 0 && moe_local_new(&g.moe, g.model, g.pool, &err) == 0,
                  "%s", err.msg);
    const int32_t V = model_config(g.model)->n_vocab;
    char what[128];
    snprintf(what, sizeof what, "%s %s, %s cache%s%s", sc->arch, quant_type_info(sc->type)->name,
             kv_type_name(sc->kv_type), sc->host_experts ? ", host experts" : "", sc->no_graph ? ", graphs off" : "");

    run_t r;
    memset(&r, 0, sizeof r);
    uint32_t x = 977u + (uint32_t)_i;
    for (int q = 0; q < MAX_SEQ; q++)
        for (int i = 0; i < plan3[q].n; i++) {
            x = x * 1103515245u + 12345u;
            r.tok[q][i] = (int32_t)((x >> 16) % (uint32_t)V);
        }
    float *ref = malloc((size_t)MAX_SEQ * MAX_TOK * (size_t)V * sizeof *ref);
    run_alone(&g, sc, &r, ref, V);

    backend_t *be = open_cuda(&g, sc, 4);
    static const int slot[MAX_SEQ] = {2, 0, 3}; /* backend sequence 1 stays empty */
    static const bool all[MAX_SEQ] = {true, true, true};
    const int start[MAX_SEQ] = {plan3[0].start, plan3[1].start, plan3[2].start};
    run_mixed(be, &r, all, slot, start, ref, V, what);
    ck_assert_int_eq(backend_seq_kv_len(be, 1), 0);
    ck_assert_int_eq(backend_kv_len(be), backend_seq_kv_len(be, 0));

    /* sequence 0 (slot 2) back to 85 positions, into its one-token steps (a recurrent model's: emptied, its
     * prefill again), and fed again, while slot 3 is emptied and reused for sequence 1's tokens from position 0
     * (the pieces as alone); sequence 1's own slot 0 stays */
    const bool recurrent = model_recurrent(model_config(g.model));
    backend_seq_kv_truncate(be, 2, 85);
    ck_assert_int_eq(backend_seq_kv_len(be, 2), recurrent ? 0 : 85);
    backend_seq_kv_truncate(be, 3, 0);
    ck_assert_int_eq(backend_seq_kv_len(be, 3), 0);
    ck_assert_int_eq(backend_seq_kv_len(be, 0), plan3[1].n);
    r.done[0] = backend_seq_kv_len(be, 2);
    r.done[1] = 0;
    static const int slot2[MAX_SEQ] = {2, 3, -1}, start2[MAX_SEQ] = {0, 0, 0};
    static const bool two[MAX_SEQ] = {true, true, false};
    char what2[160];
    snprintf(what2, sizeof what2, "%s, after truncation and reuse", what);
    run_mixed(be, &r, two, slot2, start2, ref, V, what2);
    ck_assert_int_eq(backend_seq_kv_len(be, 0), plan3[1].n);
    ck_assert_int_eq(backend_seq_kv_len(be, 3), plan3[1].n);

    /* errors name the sequence and leave every cache where it was */
    int32_t t2[2] = {1, 2}, q2[2] = {1, 4}, p2[2] = {0, 0}, row = 0;
    float *lg = malloc(2 * (size_t)V * sizeof *lg);
    ck_assert_int_eq(backend_forward_seq(be, 2, t2, q2, p2, 1, &row, lg, &err), -1);
    ck_assert_msg(strstr(err.msg, "sequence 4") != NULL, "%s", err.msg);
    int32_t q3[2] = {1, 0}, p3[2] = {0, 7};
    ck_assert_int_eq(backend_forward_seq(be, 2, t2, q3, p3, 1, &row, lg, &err), -1);
    ck_assert_msg(strstr(err.msg, "expected") != NULL, "%s", err.msg);
    ck_assert_int_eq(backend_seq_kv_len(be, 1), 0);
    ck_assert_int_eq(backend_seq_kv_len(be, 0), plan3[1].n);

    backend_stats_t bs;
    ck_assert_int_eq(backend_stats(be, &bs), 0);
    printf("%-40s: 3 sequences in 4 slots, mixed batches = each alone, bit for bit (graphs captured %u, steps "
           "replayed %llu)\n", what, bs.graphs, (unsigned long long)bs.graph_steps);
    /* qwen3moe's executor on the device is captured: its decode steps of three rows replayed from graphs */
    if (!strcmp(sc->arch, "qwen3moe") && !sc->host_experts && !sc->no_graph)
        ck_assert_msg(bs.graphs > 0 && bs.graph_steps > 0, "%s: %u graphs, %llu steps", what, bs.graphs,
                      (unsigned long long)bs.graph_steps);
    free(lg);
    free(ref);
    backend_destroy(&be);
    moe_exec_destroy(&g.moe);
    guild_pool_destroy(&g.pool);
    model_destroy(&g.model);
    free(g.image);
}
END_TEST

int main(void)
{
    if (!cuda_test_device(0))
        return 77;
    Suite *s = suite_create("cuda_seq");
    TCase *tc = tcase_create("seq");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_sequences_together_equal_alone, 0, N_CASES);
    suite_add_tcase(s, tc);
    return cuda_test_run(s, NULL);
}
