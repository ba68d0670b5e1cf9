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
 * sequence alone. Errors name the sequence and leave every cache where it was. A step of up to CUDA_SEQ_ROWS rows of
 * several sequences runs its K/V stores and decode attention once over every sequence's rows (a row table,
 * cuda_seq_rows_t; --cuda-off fuse: group by group, one case here).
 *
 * The kernels of that path against the group-by-group launches they replace (test "kernels"), by memcmp: 16
 * sequences' caches of 8,192 positions in every format (f16, f32, q8_0, q4_0, k8v4), batches of several groups
 * (a group of 3 rows at 70 positions, of 2 at 4,090, single rows from 0 to 8,100 positions: 1 to 64 key splits),
 * query heads 4 a KV head (the KV-head kernels, the merge and the output's quantization in the attention's launch)
 * and 3 (the per-head kernels, the merge kernel, cuda_quantize), sliding windows and sinks: the output rows, their
 * quantized copies, the rotated q rows and every cache cell written are the same bytes; a scratch short of the
 * full split cap is refused.
 * Needs a CUDA device: without one, exit 77 (SKIP). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/quant/quant.h"
#include "core/sample/rng.h"
#include "cpu-expert-worker/experts/moe_local.h"
#include "gpu-worker/dense/backend.h"
#include "gpu-worker/dense/cuda/cuda_config.h"
#include "gpu-worker/dense/cuda/cuda_kernels.h" /* CUDA_DECODE_ROWS */
#include "gpu-worker/dense/cuda/cuda_util.h"
#include "gpu-worker/dense/gpu_plan.h"
#include "gpu-worker/dense/kv_format.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/dev_guard.h"
#include "tests/tiny_model.h"

enum { MAX_SEQ = 3, MAX_TOK = 128, N_CTX = 160, N_BATCH = 96 };

typedef struct seq_case {
    const char *arch;
    guild_type_t type;
    int32_t kv_type;
    bool host_experts; /* the routed experts through the host executor (no resident expert, no graphs) */
    bool no_graph;
    bool no_fuse;      /* --cuda-off fuse: every group's attention in launches of its own */
} seq_case_t;

static const seq_case_t cases[] = {
    {"qwen3moe", GUILD_TYPE_Q4_K, KV_TYPE_F16, false, false, false},
    {"qwen3moe", GUILD_TYPE_Q4_K, KV_TYPE_F16, false, true, false},
    {"qwen3moe", GUILD_TYPE_Q4_K, KV_TYPE_F16, true, false, false},
    {"qwen3moe", GUILD_TYPE_Q8_0, KV_TYPE_Q8_0, false, false, false},
    {"qwen3moe", GUILD_TYPE_Q8_0, KV_TYPE_K8V4, false, false, false},
    {"qwen3moe", GUILD_TYPE_Q4_K, KV_TYPE_Q4_0, false, false, false},
    {"qwen3moe", GUILD_TYPE_Q4_K, KV_TYPE_F16, false, false, true},
    {"gpt-oss", GUILD_TYPE_Q8_0, KV_TYPE_F16, false, false, false},
    {"glm4moe", GUILD_TYPE_Q4_K, KV_TYPE_F16, false, false, false},
    {"deepseek2", GUILD_TYPE_Q8_0, KV_TYPE_F16, false, false, false},
    {"llama", GUILD_TYPE_F32, KV_TYPE_F32, false, false, false},
    {"qwen3next", GUILD_TYPE_F32, KV_TYPE_F16, false, false, false},
    {"qwen35moe", GUILD_TYPE_Q8_0, KV_TYPE_F16, false, false, false},
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
    const cuda_config_t cc = {.gpu_expert_layers = sc->host_experts ? GPU_EXPERTS_NONE : 0, .no_graph = sc->no_graph,
                              .no_fuse = sc->no_fuse};
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
    snprintf(what, sizeof what, "%s %s, %s cache%s%s%s", sc->arch, quant_type_info(sc->type)->name,
             kv_type_name(sc->kv_type), sc->host_experts ? ", host experts" : "", sc->no_graph ? ", graphs off" : "",
             sc->no_fuse ? ", fuse off" : "");

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

/* ---- the row-table kernels against the group-by-group launches ---- */

enum { K_SEQ = 16, K_CTX = 8192 };

typedef struct kern_case {
    int32_t kv_format; /* KV_TYPE_* */
    int32_t head_dim, n_head, n_head_kv;
    int32_t window;    /* sliding window, 0: none */
    bool sinks, norms; /* a sink a head; per-head Q/K norms (f16/f32: the one-kernel prepare) */
    bool split_prep;   /* f16/f32: the prepare as rope + store launches (as without the one kernel) */
    guild_type_t qt;   /* f16/f32: the output also quantized to qt in the attention's launch (F32: no) */
} kern_case_t;

static const kern_case_t kcases[] = {
    {KV_TYPE_F16, 128, 16, 4, 0, false, true, false, GUILD_TYPE_Q8_0},
    {KV_TYPE_F16, 64, 16, 4, 0, false, true, false, GUILD_TYPE_Q8_K},
    {KV_TYPE_F16, 64, 8, 2, 1000, true, false, false, GUILD_TYPE_Q8_1},
    {KV_TYPE_F16, 64, 6, 2, 0, true, false, false, GUILD_TYPE_Q8_0}, /* 3 query heads a KV head: per head */
    {KV_TYPE_F16, 128, 8, 2, 0, false, false, true, GUILD_TYPE_F32},
    {KV_TYPE_F32, 128, 16, 4, 0, false, true, false, GUILD_TYPE_Q8_0},
    {KV_TYPE_F32, 64, 6, 2, 700, true, false, true, GUILD_TYPE_F32},
    {KV_TYPE_Q8_0, 128, 16, 4, 0, false, false, false, GUILD_TYPE_F32},
    {KV_TYPE_Q4_0, 64, 8, 2, 1000, true, false, false, GUILD_TYPE_F32},
    {KV_TYPE_K8V4, 128, 16, 4, 0, false, false, false, GUILD_TYPE_F32},
    {KV_TYPE_K8V4, 64, 6, 2, 0, true, false, false, GUILD_TYPE_F32}, /* the block per query head */
};
#define N_KCASES (int)(sizeof kcases / sizeof kcases[0])

/* The batches: each group's sequence, rows and cache length at the step's start. */
typedef struct kern_batch {
    int n_grp;
    int seq[K_SEQ], rows[K_SEQ], len[K_SEQ];
} kern_batch_t;

static const kern_batch_t kbatches[] = {
    {5, {3, 0, 4, 1, 2}, {1, 3, 1, 2, 1}, {5000, 70, 0, 4090, 8100}},
    {16, {15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0}, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
     {1, 63, 64, 65, 200, 511, 1024, 2047, 3000, 4095, 4096, 5555, 6000, 7001, 8000, 8191}},
};

static void *dev_rand(rng_t *r, size_t n, float scale)
{
    float *h = malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++)
        h[i] = (float)(scale * (2 * rng_uniform(r) - 1));
    void *d = dev_upload(h, n * sizeof *h);
    free(h);
    return d;
}

static void *dev_copy(const void *d, size_t bytes)
{
    void *c = dev_new(bytes);
    CK_CUDA(cudaMemcpy(c, d, bytes, cudaMemcpyDeviceToDevice));
    return c;
}

static void ck_same(const void *a, const void *b, size_t bytes, cudaStream_t st, const char *what, const char *part)
{
    unsigned char *ha = malloc(bytes), *hb = malloc(bytes);
    CK_CUDA(cudaStreamSynchronize(st));
    CK_CUDA(cudaMemcpy(ha, a, bytes, cudaMemcpyDeviceToHost));
    CK_CUDA(cudaMemcpy(hb, b, bytes, cudaMemcpyDeviceToHost));
    size_t i = 0;
    while (i < bytes && ha[i] == hb[i])
        i++;
    ck_assert_msg(i == bytes, "%s: %s differ at byte %zu of %zu (groups 0x%02x, table 0x%02x)", what, part, i, bytes,
                  ha[i < bytes ? i : 0], hb[i < bytes ? i : 0]);
    free(ha);
    free(hb);
}

START_TEST(test_seq_kernels_equal_groups)
{
    const kern_case_t *kc = &kcases[_i];
    guild_err_t err = {{0}};
    cudaStream_t st;
    CK_CUDA(cudaStreamCreate(&st));
    rng_t r;
    rng_seed(&r, 4242 + (uint64_t)_i);
    const int32_t HD = kc->head_dim, NH = kc->n_head, NKV = kc->n_head_kv;
    const int64_t Q = (int64_t)NH * HD, KV = (int64_t)NKV * HD;
    const bool blocks = kc->kv_format != KV_TYPE_F16 && kc->kv_format != KV_TYPE_F32;
    const guild_type_t kt = kv_type_k(kc->kv_format), vt = kv_type_v(kc->kv_format);
    const bool rot = kv_type_rotates_v(kc->kv_format);
    uint64_t k_row = 0, v_row = 0;
    ck_assert(quant_row_bytes(kt, (uint64_t)KV, &k_row, NULL) == 0 && quant_row_bytes(vt, (uint64_t)KV, &v_row, NULL) == 0);
    const size_t k_seq = (size_t)K_CTX * k_row, v_seq = (size_t)K_CTX * v_row;
    /* every sequence's cache filled at every position from random rows (the rows past a length are never read) */
    char *kA = dev_new(K_SEQ * k_seq), *vA = dev_new(K_SEQ * v_seq);
    float *fk = dev_rand(&r, (size_t)K_CTX * (size_t)KV, 1.0f), *fv = dev_rand(&r, (size_t)K_CTX * (size_t)KV, 1.0f);
    for (int s = 0; s < K_SEQ; s++) {
        /* a different cache for each sequence: the rows shifted by s */
        const int64_t off = (int64_t)s * 37 * KV, n = K_CTX - s * 37;
        ck_assert_msg((blocks ? cuda_kv_store_blocks(kt, vt, rot, kA + s * k_seq, vA + s * v_seq, fk + off, fv + off,
                                                     KV, HD, (int32_t)n, 0, NULL, st, &err)
                              : cuda_kv_store(kt, kA + s * k_seq, vA + s * v_seq, fk + off, fv + off, KV, (int32_t)n,
                                              0, st, &err)) == 0,
                      "%s", err.msg);
    }
    CK_CUDA(cudaStreamSynchronize(st));
    char *kB = dev_copy(kA, K_SEQ * k_seq), *vB = dev_copy(vA, K_SEQ * v_seq);
    const int32_t n_rot = HD;
    float *cs = dev_rand(&r, (size_t)K_CTX * (size_t)n_rot, 1.0f);
    float *qn = kc->norms ? dev_rand(&r, (size_t)HD, 1.0f) : NULL, *kn = kc->norms ? dev_rand(&r, (size_t)HD, 1.0f) : NULL;
    float *sinks = kc->sinks ? dev_rand(&r, (size_t)NH, 2.0f) : NULL;
    const cuda_attn_ext_t ext = {kc->window, sinks};
    const float scale = 1.0f / sqrtf((float)HD);
    const size_t scratch_bytes = cuda_attention_decode_scratch(CUDA_DECODE_ROWS, NH, HD, K_CTX);
    void *scratch = dev_new(scratch_bytes);
    unsigned int *done = dev_new((size_t)NKV * CUDA_DECODE_ROWS * sizeof *done);
    CK_CUDA(cudaMemset(done, 0, (size_t)NKV * CUDA_DECODE_ROWS * sizeof *done));
    uint64_t act_row = 0;
    if (kc->qt != GUILD_TYPE_F32)
        ck_assert(quant_row_bytes(kc->qt, (uint64_t)Q, &act_row, NULL) == 0);
    char what[160];
    for (size_t bi = 0; bi < sizeof kbatches / sizeof kbatches[0]; bi++) {
        const kern_batch_t *kb = &kbatches[bi];
        snprintf(what, sizeof what, "%s cache, head %d, %d/%d heads%s%s%s%s, batch %zu", kv_type_name(kc->kv_format),
                 HD, NH, NKV, kc->window ? ", window" : "", kc->sinks ? ", sinks" : "", kc->norms ? ", norms" : "",
                 kc->split_prep ? ", rope + store" : "", bi);
        cuda_seq_rows_t rows = {.k_seq = (int64_t)k_seq, .v_seq = (int64_t)v_seq};
        int row0[K_SEQ];
        for (int g = 0; g < kb->n_grp; g++) {
            row0[g] = rows.n;
            for (int i = 0; i < kb->rows[g]; i++, rows.n++) {
                rows.seq[rows.n] = kb->seq[g];
                rows.grp[rows.n] = (uint8_t)g;
                rows.idx[rows.n] = (uint8_t)i;
            }
        }
        const int n = rows.n;
        int32_t *dlen = dev_upload(kb->len, (size_t)kb->n_grp * sizeof(int32_t));
        rows.len = dlen;
        float *qA = dev_rand(&r, (size_t)n * (size_t)Q, 3.0f), *kin = dev_rand(&r, (size_t)n * (size_t)KV, 1.0f);
        float *vin = dev_rand(&r, (size_t)n * (size_t)KV, 1.0f);
        float *qB = dev_copy(qA, (size_t)n * (size_t)Q * sizeof(float)), *kinA = dev_copy(kin, (size_t)n * (size_t)KV * 4);
        float *kinB = dev_copy(kin, (size_t)n * (size_t)KV * 4);
        float *oA = dev_new((size_t)n * (size_t)Q * 4), *oB = dev_new((size_t)n * (size_t)Q * 4);
        CK_CUDA(cudaMemset(oB, 0xfe, (size_t)n * (size_t)Q * 4)); /* an element neither writes would differ */
        char *aA = act_row ? dev_new((size_t)n * act_row) : NULL, *aB = act_row ? dev_new((size_t)n * act_row) : NULL;
        if (aB)
            CK_CUDA(cudaMemset(aB, 0xfe, (size_t)n * act_row));
        /* A: group by group, as attn_gqa.c's group_attention */
        for (int g = 0; g < kb->n_grp; g++) {
            const int r0 = row0[g], ng = kb->rows[g];
            char *kc_ = kA + kb->seq[g] * k_seq, *vc_ = vA + kb->seq[g] * v_seq;
            float *q = qA + (size_t)r0 * (size_t)Q, *k = kinA + (size_t)r0 * (size_t)KV, *v = vin + (size_t)r0 * (size_t)KV;
            const int32_t *pos = dlen + g;
            int rc;
            if (!blocks && !kc->split_prep)
                rc = cuda_qk_prepare(q, k, v, ng, NH, NKV, HD, qn, kn, 1e-6f, n_rot, true, cs, pos, kt, kc_, vc_, st,
                                     &err);
            else
                rc = cuda_rope_dyn(q, Q, ng, NH, HD, n_rot, true, cs, pos, st, &err) < 0 ||
                             cuda_rope_dyn(k, KV, ng, NKV, HD, n_rot, true, cs, pos, st, &err) < 0 ||
                             (blocks ? cuda_kv_store_blocks(kt, vt, rot, kc_, vc_, k, v, KV, HD, ng, 0, pos, st, &err)
                                     : cuda_kv_store_dyn(kt, kc_, vc_, k, v, KV, ng, pos, st, &err)) < 0
                         ? -1
                         : 0;
            ck_assert_msg(rc == 0, "%s: %s", what, err.msg);
            const cuda_attn_fuse_t fuse = {done, kc->qt, act_row ? aA + (size_t)r0 * act_row : NULL, act_row};
            rc = blocks ? cuda_attention_blocks(oA + (size_t)r0 * (size_t)Q, q, kt, vt, rot, kc_, vc_, ng, K_CTX - ng,
                                                pos, NH, NKV, HD, scale, &ext, scratch, scratch_bytes, st, &err)
                        : cuda_attention_decode_dyn(oA + (size_t)r0 * (size_t)Q, q, kt, kc_, vc_, ng, pos, K_CTX - ng,
                                                    NH, NKV, HD, scale, &ext, scratch, scratch_bytes, &fuse, st, &err);
            ck_assert_msg(rc == 0, "%s: %s", what, err.msg);
        }
        /* B: every row in one launch each, through the table */
        int rc;
        if (!blocks && !kc->split_prep)
            rc = cuda_qk_prepare_seqs(qB, kinB, vin, NH, NKV, HD, qn, kn, 1e-6f, n_rot, true, cs, &rows, kt, kB, vB, st,
                                      &err);
        else
            rc = cuda_rope_seqs(qB, Q, NH, HD, n_rot, true, cs, &rows, st, &err) < 0 ||
                         cuda_rope_seqs(kinB, KV, NKV, HD, n_rot, true, cs, &rows, st, &err) < 0 ||
                         (blocks ? cuda_kv_store_blocks_seqs(kt, vt, rot, kB, vB, kinB, vin, KV, HD, &rows, st, &err)
                                 : cuda_kv_store_seqs(kt, kB, vB, kinB, vin, KV, &rows, st, &err)) < 0
                     ? -1
                     : 0;
        ck_assert_msg(rc == 0, "%s: %s", what, err.msg);
        const cuda_attn_fuse_t fuse = {done, kc->qt, aB, act_row};
        rc = blocks ? cuda_attention_blocks_seqs(oB, qB, kt, vt, rot, kB, vB, &rows, K_CTX, NH, NKV, HD, scale, &ext,
                                                 scratch, scratch_bytes, st, &err)
                    : cuda_attention_decode_seqs(oB, qB, kt, kB, vB, &rows, K_CTX, NH, NKV, HD, scale, &ext, scratch,
                                                 scratch_bytes, &fuse, st, &err);
        ck_assert_msg(rc == 0, "%s: %s", what, err.msg);
        ck_same(qA, qB, (size_t)n * (size_t)Q * 4, st, what, "the rotated q rows");
        ck_same(oA, oB, (size_t)n * (size_t)Q * 4, st, what, "the attention's output rows");
        if (act_row)
            ck_same(aA, aB, (size_t)n * act_row, st, what, "the output's quantized rows");
        for (int g = 0; g < kb->n_grp; g++) /* the cells written: each row's position in its sequence's caches */
            for (int i = 0; i < kb->rows[g]; i++) {
                const size_t pos = (size_t)kb->len[g] + (size_t)i, sq = (size_t)kb->seq[g];
                ck_same(kA + sq * k_seq + pos * k_row, kB + sq * k_seq + pos * k_row, k_row, st, what, "the K cells");
                ck_same(vA + sq * v_seq + pos * v_row, vB + sq * v_seq + pos * v_row, v_row, st, what, "the V cells");
            }
        /* a scratch short of the full split cap for the table's rows: refused (a group's own launch has it) */
        if (!blocks && n > 1) {
            const size_t short_bytes = cuda_attention_decode_scratch(1, NH, HD, K_CTX);
            ck_assert_int_eq(cuda_attention_decode_seqs(oB, qB, kt, kB, vB, &rows, K_CTX, NH, NKV, HD, scale, &ext,
                                                        scratch, short_bytes, NULL, st, &err),
                             -1);
            ck_assert_msg(strstr(err.msg, "scratch") != NULL, "%s", err.msg);
        }
        CK_CUDA(cudaStreamSynchronize(st));
        printf("%-64s: %d rows of %d sequences in one launch = their groups' launches, bit for bit\n", what, n,
               kb->n_grp);
        dev_free(dlen);
        dev_free(qA);
        dev_free(qB);
        dev_free(kin);
        dev_free(kinA);
        dev_free(kinB);
        dev_free(vin);
        dev_free(oA);
        dev_free(oB);
        dev_free(aA);
        dev_free(aB);
    }
    dev_free(kA);
    dev_free(vA);
    dev_free(kB);
    dev_free(vB);
    dev_free(fk);
    dev_free(fv);
    dev_free(cs);
    dev_free(qn);
    dev_free(kn);
    dev_free(sinks);
    dev_free(scratch);
    dev_free(done);
    CK_CUDA(cudaStreamDestroy(st));
}
END_TEST

int main(void)
{
    if (!cuda_test_device(0))
        return 77;
    Suite *s = suite_create("cuda_seq");
    TCase *tk = tcase_create("kernels");
    tcase_set_timeout(tk, 120);
    tcase_add_loop_test(tk, test_seq_kernels_equal_groups, 0, N_KCASES);
    suite_add_tcase(s, tk);
    TCase *tc = tcase_create("seq");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_sequences_together_equal_alone, 0, N_CASES);
    suite_add_tcase(s, tc);
    return cuda_test_run(s, NULL);
}
