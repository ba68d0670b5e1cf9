/* Tests for the CPU backend (gpu-worker/cpu) and the in-process expert executor (cpu-expert-worker):
 * determinism across thread counts and batch splits, the executor against a naive per-element computation,
 * KV truncation, and errors. Correctness against the float64 reference is tests/ref's job. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/model/activation.h"
#include "core/quant/quant.h"
#include "core/sample/rng.h"
#include "cpu-expert-worker/experts/expert_exec.h"
#include "cpu-expert-worker/experts/moe_local.h"
#include "gpu-worker/dense/backend.h"
#include "gpu-worker/dense/cpu/cpu_resident.h"
#include "tests/check_run.h"
#include "tests/tiny_model.h"

typedef struct rig {
    void *image;
    model_t *model;
    guild_pool_t *pool;
    moe_exec_t *moe;
    backend_t *be;
} rig_t;

static bool rig_all_rows; /* backend_options_t.all_rows of the rigs opened next */
static int32_t rig_mla_form; /* backend_options_t.mla_form of the rigs opened next */
static uint64_t *rig_progress; /* backend_options_t.progress of the rigs opened next */

static void rig_open(rig_t *r, const tiny_spec_t *s, int threads, int n_batch, int n_ctx)
{
    guild_err_t err = {{0}};
    size_t size;
    memset(r, 0, sizeof *r);
    tiny_model_image(s, &r->image, &size);
    ck_assert_msg(tiny_model_open(r->image, size, &r->model, &err) == 0, "%s", err.msg);
    ck_assert_msg(guild_pool_new(&r->pool, threads, NULL, &err) == 0, "%s", err.msg);
    ck_assert_msg(moe_local_new(&r->moe, r->model, r->pool, &err) == 0, "%s", err.msg);
    backend_options_t o = {.n_ctx = n_ctx, .n_batch = n_batch, .pool = r->pool, .moe = r->moe,
                           .all_rows = rig_all_rows, .mla_form = rig_mla_form, .progress = rig_progress};
    ck_assert_msg(backend_new(&r->be, "cpu", r->model, &o, NULL, &err) == 0, "%s", err.msg);
}

static void rig_close(rig_t *r)
{
    backend_destroy(&r->be);
    ck_assert_ptr_null(r->be);
    moe_exec_destroy(&r->moe);
    guild_pool_destroy(&r->pool);
    model_destroy(&r->model);
    free(r->image);
}

enum { N_PROMPT = 9, N_STEPS = 4 };
static const int32_t prompt[N_PROMPT] = {5, 17, 42, 3, 88, 1, 60, 33, 95};
static const int32_t cont[N_STEPS] = {7, 70, 2, 51};

/* Feeds the prompt in chunks of `chunk`, asking every row's logits, then cont[] one at a time.
 * out: [(N_PROMPT + N_STEPS)][n_vocab]. */
static void run_all(rig_t *r, int chunk, float *out)
{
    guild_err_t err = {{0}};
    const int32_t V = model_config(r->model)->n_vocab;
    int32_t rows[N_PROMPT], pos[N_PROMPT];
    for (int s = 0; s < N_PROMPT; s += chunk) {
        int n = N_PROMPT - s < chunk ? N_PROMPT - s : chunk;
        for (int i = 0; i < n; i++) {
            rows[i] = i;
            pos[i] = s + i;
        }
        ck_assert_msg(backend_forward(r->be, n, prompt + s, pos, n, rows, out + (size_t)s * V, &err) == 0, "%s",
                      err.msg);
    }
    for (int i = 0; i < N_STEPS; i++) {
        int32_t p = N_PROMPT + i, row = 0;
        ck_assert_int_eq(backend_kv_len(r->be), p);
        ck_assert_msg(backend_forward(r->be, 1, &cont[i], &p, 1, &row, out + (size_t)(N_PROMPT + i) * V, &err) == 0,
                      "%s", err.msg);
    }
}

static const char *archs[] = {"qwen3moe", "qwen2moe",  "llama",     "olmoe",    "gpt-oss",
                              "glm4moe",  "deepseek2", "qwen3next", "qwen35moe"};
#define N_ARCHS ((int)(sizeof archs / sizeof archs[0]))

static tiny_spec_t spec_of(int i)
{
    tiny_spec_t s = tiny_spec(archs[i % N_ARCHS]);
    if (i >= N_ARCHS) { /* quantized variants; glm4moe with expert groups, a dense layer of 64, no q/k norms */
        s.wtype = i % 2 ? GUILD_TYPE_Q8_0 : GUILD_TYPE_Q4_1;
        s.n_ff_shexp = 64;
        s.n_ff = 64;
        s.n_groups = 4;
        s.n_group_used = 2;
        s.no_maybe = true;
    }
    s.n_mtp = 1; /* where the architecture has them: loaded, never run */
    if (!strcmp(s.arch, "glm4moe"))
        s.n_rot = 8; /* half of each head, as GLM's converter writes it */
    s.seed = 10 + (uint64_t)i;
    return s;
}

START_TEST(test_threads_and_batches_give_the_same_bits)
{
    tiny_spec_t s = spec_of(_i);
    if (!strcmp(s.arch, "qwen3next") || !strcmp(s.arch, "qwen35moe"))
        s.n_layer = 3; /* gdn, attention, gdn: the last layer narrows a recurrent one's rows */
    const size_t V = 96, rows = N_PROMPT + N_STEPS;
    float *a = malloc(rows * V * sizeof *a), *b = malloc(rows * V * sizeof *b);
    rig_t r;
    rig_open(&r, &s, 1, 16, 32);
    run_all(&r, N_PROMPT, a);
    rig_close(&r);
    for (size_t i = 0; i < rows * V; i++)
        ck_assert_msg(isfinite(a[i]) && fabsf(a[i]) < 1e4f, "logit %zu = %g", i, (double)a[i]);
    /* not all the same token: the model computes something */
    ck_assert(memcmp(a, a + V, V * sizeof *a) != 0);

    static const int threads[] = {2, 3, 1, 2};
    static const int chunks[] = {1, 4, 2, 3};
    for (int k = 0; k < 4; k++) {
        rig_all_rows = k == 3; /* no narrowing of the last layer: same bits */
        rig_open(&r, &s, threads[k], 8, 32);
        rig_all_rows = false;
        /* once into the backend's own kind of logits memory (backend_logits_alloc): the same bits */
        float *out = k == 1 ? backend_logits_alloc(r.be, rows * V) : b;
        ck_assert(out);
        run_all(&r, chunks[k], out);
        if (out != b) {
            memcpy(b, out, rows * V * sizeof *b);
            backend_logits_free(r.be, out);
        }
        rig_close(&r);
        ck_assert_msg(!memcmp(a, b, rows * V * sizeof *a), "%s: %d threads, chunks of %d differ",
                      archs[_i % N_ARCHS], threads[k], chunks[k]);
    }
    free(a);
    free(b);
}
END_TEST

START_TEST(test_truncate_and_replay)
{
    tiny_spec_t s = spec_of(0);
    const size_t V = 96, rows = N_PROMPT + N_STEPS;
    float *a = malloc(rows * V * sizeof *a), *b = malloc(3 * V * sizeof *b);
    rig_t r;
    rig_all_rows = _i == 1;
    rig_open(&r, &s, 2, 16, 32);
    rig_all_rows = false;
    run_all(&r, N_PROMPT, a);
    backend_kv_truncate(r.be, 100); /* beyond the end: nothing */
    ck_assert_int_eq(backend_kv_len(r.be), rows);
    backend_kv_truncate(r.be, 5);
    ck_assert_int_eq(backend_kv_len(r.be), 5);
    guild_err_t err = {{0}};
    int32_t pos[4] = {5, 6, 7, 8}, row = 3;
    ck_assert_msg(backend_forward(r.be, 4, prompt + 5, pos, 1, &row, b, &err) == 0, "%s", err.msg);
    ck_assert(!memcmp(b, a + 8 * V, V * sizeof *b));
    /* several rows, in any order, repeated: the last layer narrows the batch to them */
    backend_kv_truncate(r.be, 5);
    int32_t some[3] = {3, 0, 3};
    ck_assert_msg(backend_forward(r.be, 4, prompt + 5, pos, 3, some, b, &err) == 0, "%s", err.msg);
    ck_assert(!memcmp(b, a + 8 * V, V * sizeof *b));
    ck_assert(!memcmp(b + V, a + 5 * V, V * sizeof *b));
    ck_assert(!memcmp(b + 2 * V, a + 8 * V, V * sizeof *b));
    /* no rows at all: the cache still fills */
    backend_kv_truncate(r.be, 5);
    ck_assert(backend_forward(r.be, 3, prompt + 5, pos, 0, NULL, b, &err) == 0);
    int32_t p8 = 8, r8 = 0;
    ck_assert(backend_forward(r.be, 1, prompt + 8, &p8, 1, &r8, b, &err) == 0);
    ck_assert(!memcmp(b, a + 8 * V, V * sizeof *b));
    backend_kv_clear(r.be);
    ck_assert_int_eq(backend_kv_len(r.be), 0);
    int32_t p0 = 0, r0 = 0;
    ck_assert(backend_forward(r.be, 1, prompt, &p0, 1, &r0, b, &err) == 0);
    ck_assert(!memcmp(b, a, V * sizeof *b));
    rig_close(&r);
    free(a);
    free(b);
}
END_TEST

/* ---- multi-head latent attention's two forms ----------------------------------------------------------- */

enum { N_LONG = 150 }; /* positions: the expanded form's blocks of 64 and a partial one */

/* The long prompt in chunks of `chunk`, every row's logits. out: [N_LONG][n_vocab]. */
static void run_long(rig_t *r, int chunk, float *out)
{
    guild_err_t err = {{0}};
    const int32_t V = model_config(r->model)->n_vocab;
    int32_t tok[N_LONG], rows[N_LONG], pos[N_LONG];
    uint32_t x = 12345;
    for (int i = 0; i < N_LONG; i++) {
        x = x * 1103515245u + 12345u;
        tok[i] = (int32_t)((x >> 16) % (uint32_t)V);
    }
    for (int s = 0; s < N_LONG; s += chunk) {
        int n = N_LONG - s < chunk ? N_LONG - s : chunk;
        for (int i = 0; i < n; i++) {
            rows[i] = i;
            pos[i] = s + i;
        }
        ck_assert_msg(backend_forward(r->be, n, tok + s, pos, n, rows, out + (size_t)s * V, &err) == 0, "%s",
                      err.msg);
    }
}

/* backend_options_t.progress: one more per layer of every forward call (the prompt in chunks of 4: 3 calls, then
 * 4 single steps), whatever the architecture's layer kinds. */
START_TEST(test_progress_counts_layers)
{
    static const char *archs[] = {"qwen3moe", "deepseek2", "qwen3next"};
    tiny_spec_t s = tiny_spec(archs[_i]);
    uint64_t progress = 5;
    rig_progress = &progress;
    rig_t r;
    rig_open(&r, &s, 2, 4, 32);
    rig_progress = NULL;
    const int32_t V = model_config(r.model)->n_vocab;
    float *out = malloc((size_t)(N_PROMPT + N_STEPS) * (size_t)V * sizeof *out);
    run_all(&r, 4, out);
    ck_assert_uint_eq(progress, 5 + 7 * (uint64_t)model_config(r.model)->n_layer);
    free(out);
    rig_close(&r);
}
END_TEST

/* The absorbed form (queries into the latent space) and the expanded one (keys and values up-projected from the
 * cached latents) agree within float rounding; each gives the same bits for every batch split; auto takes the
 * expanded form for a batch of 150 rows (float up-projections; the absorbed one for Q8_0's) and the absorbed one
 * for few rows. Variants: attn_k_b/attn_v_b with a q
 * LoRA, attn_kv_b without, Q8_0 weights, YaRN. */
START_TEST(test_mla_absorbed_and_expanded_agree)
{
    tiny_spec_t s = tiny_spec("deepseek2");
    s.seed = 40 + (uint64_t)_i;
    if (_i == 1) {
        s.mla_kv_b = true;
        s.n_lora_q = 0;
        s.gating = 1;
    } else if (_i == 2) {
        s.wtype = GUILD_TYPE_Q8_0;
        s.n_ff = 64;
    } else if (_i == 3) {
        s.yarn_factor = 4.0f;
    }
    const size_t V = 96, n = (size_t)N_LONG * V;
    float *ab = malloc(n * sizeof *ab), *ex = malloc(n * sizeof *ex), *o = malloc(n * sizeof *o);
    rig_t r;
    static const int32_t forms[] = {BACKEND_MLA_ABSORBED, BACKEND_MLA_EXPANDED};
    float *outs[] = {ab, ex};
    for (int f = 0; f < 2; f++) {
        rig_mla_form = forms[f];
        rig_open(&r, &s, 2, N_LONG, N_LONG);
        run_long(&r, N_LONG, outs[f]);
        rig_close(&r);
        rig_open(&r, &s, 3, 32, N_LONG);
        run_long(&r, f ? 7 : 13, o);
        rig_close(&r);
        ck_assert_msg(!memcmp(o, outs[f], n * sizeof *o), "form %d: batch splits differ", forms[f]);
    }
    rig_mla_form = BACKEND_MLA_AUTO;
    rig_open(&r, &s, 2, N_LONG, N_LONG);
    run_long(&r, N_LONG, o);
    rig_close(&r);
    /* auto: the expanded form for long batches when the up-projections are floats, else the absorbed one */
    ck_assert_msg(!memcmp(o, s.wtype == GUILD_TYPE_Q8_0 ? ab : ex, n * sizeof *o), "auto: a batch of %d rows is not "
                  "the %s form", N_LONG, s.wtype == GUILD_TYPE_Q8_0 ? "absorbed" : "expanded");
    rig_open(&r, &s, 2, 8, N_LONG);
    run_long(&r, 5, o);
    rig_close(&r);
    ck_assert_msg(!memcmp(o, ab, n * sizeof *o), "auto: batches of 5 rows are not the absorbed form");
    double max_diff = 0, max_abs = 0;
    for (size_t i = 0; i < n; i++) {
        ck_assert(isfinite(ab[i]) && isfinite(ex[i]));
        max_diff = fmax(max_diff, fabs((double)ab[i] - ex[i]));
        max_abs = fmax(max_abs, fabs((double)ab[i]));
    }
    ck_assert(memcmp(ab, ab + V, V * sizeof *ab) != 0);
    int same_top = 0, close_rows = 0;
    for (int t = 0; t < N_LONG; t++) {
        const float *x = ab + (size_t)t * V, *y = ex + (size_t)t * V;
        int ax = 0, ay = 0;
        double d = 0;
        for (size_t v = 1; v < V; v++) {
            ax = x[v] > x[ax] ? (int)v : ax;
            ay = y[v] > y[ay] ? (int)v : ay;
        }
        for (size_t v = 0; v < V; v++)
            d = fmax(d, fabs((double)x[v] - y[v]));
        same_top += ax == ay;
        close_rows += d <= 0.05 * max_abs;
    }
    printf("mla variant %d: absorbed - expanded max |diff| %.3g, max |logit| %.3g, same top token %d/%d, rows "
           "within 5%% %d\n", _i, max_diff, max_abs, same_top, N_LONG, close_rows);
    fflush(stdout);
    if (s.wtype == GUILD_TYPE_F32) {
        ck_assert_msg(max_diff <= 2e-5 * max_abs, "variant %d: absorbed and expanded differ by %g (max |logit| %g)",
                      _i, max_diff, max_abs);
    } else {
        /* the forms quantize different activations (the queries and the latent outputs, or the cached latents)
         * to the weights' dot type, and a router choice flipped by that changes a row's logits much: most rows
         * agree closely */
        ck_assert_msg(same_top >= N_LONG * 95 / 100 && close_rows >= N_LONG * 9 / 10,
                      "variant %d: absorbed and expanded agree on %d top tokens, %d rows of %d", _i, same_top,
                      close_rows, N_LONG);
    }
    free(ab);
    free(ex);
    free(o);
}
END_TEST

/* A recurrent state holds no earlier position: a truncation below the length empties the cache (the caller sees
 * backend_kv_len 0 and recomputes), and the sequence run again from 0 gives the same bits. */
START_TEST(test_recurrent_truncate_empties)
{
    tiny_spec_t s = spec_of(7);
    ck_assert_str_eq(s.arch, "qwen3next");
    const size_t V = 96, rows = N_PROMPT + N_STEPS;
    float *a = malloc(rows * V * sizeof *a), *b = malloc(rows * V * sizeof *b);
    rig_t r;
    rig_open(&r, &s, 2, 16, 32);
    run_all(&r, N_PROMPT, a);
    backend_kv_truncate(r.be, 100); /* beyond the end: nothing */
    ck_assert_int_eq(backend_kv_len(r.be), rows);
    backend_kv_truncate(r.be, (int32_t)rows); /* the length itself: nothing */
    ck_assert_int_eq(backend_kv_len(r.be), rows);
    backend_kv_truncate(r.be, 5);
    ck_assert_int_eq(backend_kv_len(r.be), 0);
    run_all(&r, 3, b);
    ck_assert(!memcmp(a, b, rows * V * sizeof *a));
    rig_close(&r);
    free(a);
    free(b);
}
END_TEST

/* ---- the expert executor ------------------------------------------------------------------------------ */

/* y[t][k] computed the obvious way, one dot product at a time with the quant references (and the biases and the
 * clamped SwiGLU of gpt-oss where the model has them). */
static void naive_experts(const model_t *m, int layer, int n, const float *x, const int32_t *ids, float *y)
{
    const model_config_t *c = model_config(m);
    const model_layer_t *L = &model_weights(m)->layers[layer];
    const bool oai = c->ffn.opts & MODEL_FFN_SWIGLU_OAI;
    const int E = c->n_embd, F = c->n_ff_exp, K = c->n_expert_used;
    guild_type_t ga = quant_type_info(L->gate_exps.type)->dot_type;
    guild_type_t da = quant_type_info(L->down_exps.type)->dot_type;
    char *xq = malloc((size_t)E * 4), *hq = malloc((size_t)F * 4);
    float *h = malloc((size_t)F * sizeof *h);
    for (int t = 0; t < n; t++) {
        ck_assert(quant_quantize_row_ref(ga, x + t * E, xq, E, NULL) == 0);
        for (int k = 0; k < K; k++) {
            int e = ids[t * K + k];
            for (int r = 0; r < F; r++) {
                float g = quant_vec_dot_ref(L->gate_exps.type, E, model_tensor_row(&L->gate_exps, e, r), xq);
                float u = quant_vec_dot_ref(L->up_exps.type, E, model_tensor_row(&L->up_exps, e, r), xq);
                if (oai) {
                    g += ((const float *)L->gate_exps_b.data)[e * F + r];
                    u += ((const float *)L->up_exps_b.data)[e * F + r];
                }
                h[r] = oai ? model_swiglu_oai(g, u, 1.702f, 7.0f) : model_silu(g) * u;
            }
            ck_assert(quant_quantize_row_ref(da, h, hq, F, NULL) == 0);
            for (int r = 0; r < E; r++) {
                float d = quant_vec_dot_ref(L->down_exps.type, F, model_tensor_row(&L->down_exps, e, r), hq);
                y[((size_t)t * K + k) * E + r] = oai ? d + ((const float *)L->down_exps_b.data)[e * E + r] : d;
            }
        }
    }
    free(xq);
    free(hq);
    free(h);
}

START_TEST(test_executor_matches_naive_and_shards_split_exactly)
{
    tiny_spec_t s = spec_of(_i);
    rig_t r;
    rig_open(&r, &s, 2, 8, 16);
    const model_config_t *c = model_config(r.model);
    enum { N = 11 };
    const int E = c->n_embd, K = c->n_expert_used;
    float *x = malloc((size_t)N * E * sizeof *x);
    int32_t ids[N * 2];
    rng_t g;
    rng_seed(&g, 77);
    for (int i = 0; i < N * E; i++)
        x[i] = (float)(2 * rng_uniform(&g) - 1);
    for (int t = 0; t < N; t++) {
        ids[t * K] = (int32_t)(rng_next(&g) % 8);
        ids[t * K + 1] = (ids[t * K] + 1 + (int32_t)(rng_next(&g) % 7)) % 8;
    }
    ids[3 * K] = ids[4 * K] = ids[5 * K] = 2; /* several tokens on one expert */
    size_t ybytes = (size_t)N * K * E * sizeof(float);
    float *y1 = malloc(ybytes), *y2 = malloc(ybytes), *y3 = malloc(ybytes);
    guild_err_t err = {{0}};
    const float *ye = NULL;
    ck_assert_msg(moe_exec_run(r.moe, 1, N, x, ids, &ye, &err) == 0, "%s", err.msg);
    memcpy(y1, ye, ybytes);
    naive_experts(r.model, 1, N, x, ids, y2);
    ck_assert(!memcmp(y1, y2, ybytes));

    /* two shards (even / odd experts of the layers with experts), each writes only its own pairs; together they
     * give the same bits */
    uint8_t own[2][2 * 8];
    int per_shard = 0;
    for (int l = 0; l < 2; l++) {
        const bool moe = model_layer_has_experts(&model_weights(r.model)->layers[l]);
        per_shard += moe ? 4 : 0;
        for (int e = 0; e < 8; e++) {
            own[0][l * 8 + e] = moe && e % 2 == 0;
            own[1][l * 8 + e] = moe && e % 2 == 1;
        }
    }
    memset(y3, 0xff, ybytes); /* NaN sentinel */
    int64_t done = 0;
    for (int sh = 0; sh < 2; sh++) {
        expert_shard_t *shard = NULL;
        expert_exec_t *ex = NULL;
        ck_assert(expert_shard_new(&shard, r.model, own[sh], &err) == 0);
        ck_assert_int_eq(expert_shard_count(shard), per_shard);
        ck_assert_ptr_null(expert_shard_get(shard, 1, 1 - sh));
        ck_assert(expert_exec_new(&ex, shard, r.pool, &err) == 0);
        int64_t n = expert_exec_run(ex, 1, N, x, ids, y3, &err);
        ck_assert_int_ge(n, 1);
        done += n;
        expert_exec_destroy(&ex);
        expert_shard_destroy(&shard);
    }
    ck_assert_int_eq(done, N * K);
    ck_assert(!memcmp(y1, y3, ybytes));

    /* bad input is an error, not a crash */
    ids[7] = 8;
    ck_assert_int_eq(moe_exec_run(r.moe, 1, N, x, ids, &ye, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "expert id 8 is out of range"));
    rig_close(&r);
    free(x);
    free(y1);
    free(y2);
    free(y3);
}
END_TEST

/* Skip slots (moe_exec.h): a pair whose id is < 0 is not computed (the executor counts only the others; a
 * shard leaves its row as the caller had it); the other pairs are the full batch's bits, through the in-process
 * executor and through shards. */
START_TEST(test_executor_skips_slots)
{
    tiny_spec_t s = spec_of(_i);
    rig_t r;
    rig_open(&r, &s, 2, 8, 16);
    const model_config_t *c = model_config(r.model);
    enum { N = 9 };
    const int E = c->n_embd, K = c->n_expert_used;
    ck_assert_int_eq(K, 2);
    float *x = malloc((size_t)N * E * sizeof *x);
    int32_t ids[N * 2], skip[N * 2];
    rng_t g;
    rng_seed(&g, 91 + (uint64_t)_i);
    for (int i = 0; i < N * E; i++)
        x[i] = (float)(2 * rng_uniform(&g) - 1);
    for (int t = 0; t < N; t++) {
        ids[t * K] = (int32_t)(rng_next(&g) % 8);
        ids[t * K + 1] = (ids[t * K] + 1 + (int32_t)(rng_next(&g) % 7)) % 8;
    }
    /* skipped: every pair of experts 1 and 6 (a GPU-side split by expert), both slots of token 4, slot 1 of
     * token 7 */
    int n_skip = 0;
    for (int p = 0; p < N * K; p++) {
        const bool sk = ids[p] == 1 || ids[p] == 6 || p / K == 4 || p == 7 * K + 1;
        skip[p] = sk ? -1 - (p % 3) : ids[p]; /* any negative id skips */
        n_skip += sk;
    }
    ck_assert_int_gt(n_skip, 2);
    ck_assert_int_lt(n_skip, N * K);
    const size_t row = (size_t)E * sizeof(float), ybytes = (size_t)N * K * row;
    float *full = malloc(ybytes), *got = malloc(ybytes);
    guild_err_t err = {{0}};
    const float *ye = NULL;
    moe_exec_stats_t st0, st1;
    moe_exec_stats(r.moe, &st0);
    ck_assert_msg(moe_exec_run(r.moe, 1, N, x, ids, &ye, &err) == 0, "%s", err.msg);
    memcpy(full, ye, ybytes);
    moe_exec_stats(r.moe, &st1);
    ck_assert_uint_eq(st1.pairs - st0.pairs, N * K);
    ck_assert_msg(moe_exec_run(r.moe, 1, N, x, skip, &ye, &err) == 0, "%s", err.msg);
    moe_exec_stats(r.moe, &st0);
    ck_assert_uint_eq(st0.pairs - st1.pairs, N * K - n_skip); /* no work for a skipped pair */
    for (int p = 0; p < N * K; p++)
        ck_assert_msg(skip[p] < 0 || !memcmp((const char *)ye + p * row, (char *)full + p * row, row),
                      "pair %d (id %d) differs", p, skip[p]);
    uint8_t poison[512];
    ck_assert_uint_le(row, sizeof poison);
    memset(poison, 0x5a, row);
    /* the pipeline moe_local runs, on a poisoned buffer: the skipped rows stay the caller's */
    expert_shard_t *all = NULL;
    expert_pipe_t *pipe = NULL;
    expert_pipe_src_t src;
    ck_assert(expert_shard_new(&all, r.model, NULL, &err) == 0);
    expert_pipe_src_from_shard(&src, all);
    ck_assert(expert_pipe_new(&pipe, &src, r.pool, NULL, &err) == 0);
    memset(got, 0x5a, ybytes);
    ck_assert_int_eq(expert_pipe_run(pipe, 1, N, x, skip, got, &err), N * K - n_skip);
    for (int p = 0; p < N * K; p++)
        ck_assert_msg(!memcmp((char *)got + p * row, skip[p] < 0 ? (void *)poison : (char *)full + p * row, row),
                      "pipeline, pair %d (id %d): %s", p, skip[p], skip[p] < 0 ? "skipped row written" : "differs");
    expert_pipe_destroy(&pipe);
    expert_shard_destroy(&all);

    /* shards (even / odd experts) with the same skips: only their own computed pairs, counted */
    uint8_t own[2][2 * 8];
    for (int l = 0; l < 2; l++) {
        const bool moe = model_layer_has_experts(&model_weights(r.model)->layers[l]);
        for (int e = 0; e < 8; e++) {
            own[0][l * 8 + e] = moe && e % 2 == 0;
            own[1][l * 8 + e] = moe && e % 2 == 1;
        }
    }
    memset(got, 0x5a, ybytes);
    int64_t done = 0;
    for (int sh = 0; sh < 2; sh++) {
        expert_shard_t *shard = NULL;
        expert_exec_t *ex = NULL;
        ck_assert(expert_shard_new(&shard, r.model, own[sh], &err) == 0);
        ck_assert(expert_exec_new(&ex, shard, r.pool, &err) == 0);
        int64_t n = expert_exec_run(ex, 1, N, x, skip, got, &err);
        ck_assert_int_ge(n, 0);
        done += n;
        expert_exec_destroy(&ex);
        expert_shard_destroy(&shard);
    }
    ck_assert_int_eq(done, N * K - n_skip);
    for (int p = 0; p < N * K; p++)
        ck_assert_msg(!memcmp((char *)got + p * row, skip[p] < 0 ? (void *)poison : (char *)full + p * row, row),
                      "shards, pair %d (id %d) wrong", p, skip[p]);

    /* every slot skipped: nothing computed, no error */
    for (int p = 0; p < N * K; p++)
        skip[p] = -1;
    ck_assert_msg(moe_exec_run(r.moe, 1, N, x, skip, &ye, &err) == 0, "%s", err.msg);
    moe_exec_stats(r.moe, &st1);
    ck_assert_uint_eq(st1.pairs, st0.pairs);
    rig_close(&r);
    free(x);
    free(full);
    free(got);
}
END_TEST

/* An executor that runs the rig's and records the prefetch hints given to it. */
typedef struct hint_rec {
    moe_exec_t base;
    moe_exec_t *inner;
    int32_t per;                /* hint_experts */
    int calls, layer, n;
    int32_t ids[16];
} hint_rec_t;

static int rec_submit(moe_exec_t *e, int32_t layer, int32_t n, const float *x, const int32_t *ids, void *queue,
                      guild_err_t *err)
{
    return moe_exec_submit(((hint_rec_t *)e)->inner, layer, n, x, ids, queue, err);
}

static int rec_collect(moe_exec_t *e, const float **y, void *queue, guild_err_t *err)
{
    return moe_exec_collect(((hint_rec_t *)e)->inner, y, queue, err);
}

static void rec_destroy(moe_exec_t *e)
{
    (void)e;
}

static int32_t rec_hint_experts(const moe_exec_t *e)
{
    return ((const hint_rec_t *)e)->per;
}

static int rec_hint(moe_exec_t *e, int32_t layer, int32_t n, const int32_t *ids, void *queue, guild_err_t *err)
{
    hint_rec_t *h = (hint_rec_t *)e;
    (void)queue;
    (void)err;
    ck_assert_int_le(n * 2, 16);
    h->calls++;
    h->layer = layer;
    h->n = n;
    memcpy(h->ids, ids, (size_t)n * 2 * sizeof *ids);
    return 0;
}

static const moe_exec_ops_t rec_ops = {.name = "rec", .submit = rec_submit, .collect = rec_collect,
                                       .destroy = rec_destroy, .hint_experts = rec_hint_experts, .hint = rec_hint};

/* The cpu backend's stand-in for resident experts (cpu_resident.h) passes prefetch hints on naming only the
 * experts the CPU workers compute: its resident ones masked (skip slots), no hint at all for a layer resident
 * whole, the prediction unchanged for a layer with none resident; the computed pairs are the executor's bits. */
START_TEST(test_resident_passes_hints)
{
    tiny_spec_t s = spec_of(0);
    rig_t r;
    rig_open(&r, &s, 2, 8, 16);
    const model_config_t *c = model_config(r.model);
    ck_assert_int_eq(c->n_expert, 8);
    ck_assert_int_eq(c->n_expert_used, 2);
    ck_assert_int_ge(c->n_layer, 2);
    const int32_t NL = c->n_layer, NE = 8;
    uint8_t *res = calloc((size_t)NL * NE, 1);
    res[1] = res[6] = 1; /* layer 0: experts 1 and 6 resident */
    for (int32_t e = 0; e < NE; e++)
        res[NE + e] = 1; /* layer 1: all */
    hint_rec_t rec = {.base = {&rec_ops}, .inner = r.moe, .per = 2};
    guild_err_t err = {{0}};
    moe_exec_t *w = NULL, *plain = NULL;
    ck_assert_msg(cpu_resident_new(&w, &rec.base, r.model, r.pool, res, &err) == 0, "%s", err.msg);
    ck_assert_msg(cpu_resident_new(&plain, &rec.base, r.model, r.pool, NULL, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(moe_exec_hint_experts(w), 2);
    ck_assert(moe_exec_hint_wanted(w, 0));
    ck_assert(!moe_exec_hint_wanted(w, 1));
    ck_assert(moe_exec_hint_wanted(plain, 1));
    const int32_t pred[6] = {1, 3, 6, 1, 2, 5};
    ck_assert_msg(moe_exec_hint(w, 0, 3, pred, NULL, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(rec.calls, 1);
    ck_assert(rec.layer == 0 && rec.n == 3);
    const int32_t masked[6] = {-1, 3, -1, -1, 2, 5};
    for (int i = 0; i < 6; i++)
        ck_assert_int_eq(rec.ids[i], masked[i]);
    ck_assert_msg(moe_exec_hint(w, 1, 3, pred, NULL, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(rec.calls, 1); /* layer 1 is the device's whole: nothing passed on */
    ck_assert_msg(moe_exec_hint(plain, 1, 3, pred, NULL, &err) == 0, "%s", err.msg);
    ck_assert(rec.calls == 2 && rec.layer == 1 && !memcmp(rec.ids, pred, sizeof pred));
    /* an executor that takes no hints: none wanted through the wrapper either */
    rec.per = 0;
    ck_assert_int_eq(moe_exec_hint_experts(w), 0);
    ck_assert(!moe_exec_hint_wanted(w, 0));

    /* the bits: a batch through the wrapper (pairs of experts 1 and 6 computed by it) equals the executor's */
    enum { N = 5 };
    const int32_t E = c->n_embd;
    float *x = malloc((size_t)N * E * sizeof *x), *full = malloc((size_t)N * 2 * E * sizeof *full);
    rng_t g;
    rng_seed(&g, 7);
    for (int i = 0; i < N * E; i++)
        x[i] = (float)(2 * rng_uniform(&g) - 1);
    const int32_t ids[N * 2] = {1, 6, 0, 3, 6, 2, 7, 1, 4, 5};
    const float *y = NULL;
    ck_assert_msg(moe_exec_run(r.moe, 0, N, x, ids, &y, &err) == 0, "%s", err.msg);
    memcpy(full, y, (size_t)N * 2 * E * sizeof *full);
    ck_assert_msg(moe_exec_run(w, 0, N, x, ids, &y, &err) == 0, "%s", err.msg);
    ck_assert(!memcmp(full, y, (size_t)N * 2 * E * sizeof *full));
    uint64_t routed = 0, served = 0;
    cpu_resident_counts(w, NULL, &routed, &served);
    ck_assert(routed == N * 2 && served == 4);
    moe_exec_destroy(&w);
    moe_exec_destroy(&plain);
    free(x);
    free(full);
    free(res);
    rig_close(&r);
}
END_TEST

/* ---- errors ------------------------------------------------------------------------------------------- */

typedef struct failing_exec {
    moe_exec_t base;
} failing_exec_t;

static int failing_submit(moe_exec_t *e, int32_t layer, int32_t n, const float *x, const int32_t *ids, void *queue,
                          guild_err_t *err)
{
    return 0;
}

static int failing_collect(moe_exec_t *e, const float **y, void *queue, guild_err_t *err)
{
    return guild_err_set(err, "worker 3 did not answer");
}

static void failing_destroy(moe_exec_t *e)
{
}

static const moe_exec_ops_t failing_ops = {
    .name = "failing", .submit = failing_submit, .collect = failing_collect, .destroy = failing_destroy};
static const moe_exec_ops_t device_ops = {
    .name = "device", .mem = MOE_EXEC_DEVICE, .submit = failing_submit, .collect = failing_collect,
    .destroy = failing_destroy};

START_TEST(test_errors)
{
    tiny_spec_t s = spec_of(1);
    rig_t r;
    rig_open(&r, &s, 2, 4, 6);
    guild_err_t err = {{0}};
    float logits[96 * 4];
    int32_t tok[5] = {1, 2, 3, 4, 5}, pos[5] = {0, 1, 2, 3, 4}, row = 0;

    tok[1] = 96;
    ck_assert_int_eq(backend_forward(r.be, 2, tok, pos, 1, &row, logits, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "token id 96 is out of range"));
    tok[1] = -1;
    ck_assert_int_eq(backend_forward(r.be, 2, tok, pos, 1, &row, logits, &err), -1);
    tok[1] = 2;
    ck_assert_int_eq(backend_forward(r.be, 5, tok, pos, 1, &row, logits, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "5 tokens in a batch (1..4)"));
    pos[1] = 7;
    ck_assert_int_eq(backend_forward(r.be, 2, tok, pos, 1, &row, logits, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "position 7, expected 1"));
    pos[1] = 1;
    row = 2;
    ck_assert_int_eq(backend_forward(r.be, 2, tok, pos, 1, &row, logits, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "output row 2"));
    ck_assert_int_eq(backend_kv_len(r.be), 0);

    row = 0;
    ck_assert(backend_forward(r.be, 4, tok, pos, 1, &row, logits, &err) == 0);
    int32_t more[3] = {4, 5, 6};
    ck_assert_int_eq(backend_forward(r.be, 3, tok, more, 1, &row, logits, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "context is full"));
    ck_assert_int_eq(backend_kv_len(r.be), 4);
    rig_close(&r);

    /* an executor failure comes back with the layer named, and the cache does not grow */
    failing_exec_t fe = {{&failing_ops}};
    size_t size;
    rig_t q;
    memset(&q, 0, sizeof q);
    tiny_model_image(&s, &q.image, &size);
    ck_assert(tiny_model_open(q.image, size, &q.model, &err) == 0);
    ck_assert(guild_pool_new(&q.pool, 1, NULL, &err) == 0);
    backend_options_t o = {.n_ctx = 8, .n_batch = 4, .pool = q.pool, .moe = &fe.base};
    ck_assert(backend_new(&q.be, "cpu", q.model, &o, NULL, &err) == 0);
    ck_assert_int_eq(backend_forward(q.be, 2, tok, pos, 1, &row, logits, &err), -1);
    ck_assert_str_eq(err.msg, "layer 0: routed experts: worker 3 did not answer");
    ck_assert_int_eq(backend_kv_len(q.be), 0);
    backend_destroy(&q.be);

    backend_t *none = NULL;
    /* the CPU backend takes host executors only */
    failing_exec_t de = {{&device_ops}};
    o.moe = &de.base;
    ck_assert_int_eq(backend_new(&none, "cpu", q.model, &o, NULL, &err), -1);
    ck_assert_msg(strstr(err.msg, "\"device\" works on device memory"), "%s", err.msg);
    o.moe = &fe.base;
    ck_assert_int_eq(backend_new(&none, "vulkan", q.model, &o, NULL, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "backend \"vulkan\" is not built in"));
    o.n_batch = 0;
    ck_assert_int_eq(backend_new(&none, "cpu", q.model, &o, NULL, &err), -1);
    /* a settings record is for the backend it belongs to: "cpu" takes none (the GPU worker's check refuses
     * layers left to the device alone with a backend that keeps no experts there: tests/check_options.c) */
    o.n_batch = 4;
    const int not_cpu_settings = 1;
    ck_assert_int_eq(backend_new(&none, "cpu", q.model, &o, &not_cpu_settings, &err), -1);
    ck_assert_ptr_null(none);
    ck_assert_msg(strstr(err.msg, "cpu backend: takes no settings record"), "%s", err.msg);
    ck_assert(backend_new(&none, "cpu", q.model, &o, NULL, &err) == 0);
    backend_destroy(&none);
    guild_pool_destroy(&q.pool);
    model_destroy(&q.model);
    free(q.image);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("backend");
    TCase *tc = tcase_create("determinism");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_threads_and_batches_give_the_same_bits, 0, 2 * N_ARCHS);
    tcase_add_test(tc, test_recurrent_truncate_empties);
    tcase_add_loop_test(tc, test_truncate_and_replay, 0, 2);
    tcase_add_loop_test(tc, test_mla_absorbed_and_expanded_agree, 0, 4);
    tcase_add_loop_test(tc, test_progress_counts_layers, 0, 3);
    suite_add_tcase(su, tc);
    tc = tcase_create("experts");
    tcase_add_loop_test(tc, test_executor_matches_naive_and_shards_split_exactly, 0, 2 * N_ARCHS);
    tcase_add_loop_test(tc, test_executor_skips_slots, 0, 2 * N_ARCHS);
    tcase_add_test(tc, test_resident_passes_hints);
    suite_add_tcase(su, tc);
    tc = tcase_create("errors");
    tcase_add_test(tc, test_errors);
    suite_add_tcase(su, tc);
    return check_run(su);
}
