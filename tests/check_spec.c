/* Speculative decoding (coordinator/spec.h, the verify steps of coordinator/generate.c) on the CPU backend with
 * small models written by guild-mkmodel's library: every drafter's greedy ids and logits rows are --spec none's
 * byte for byte at K = 1, 2, 4, 8 (the verify rows are the plain decode's bits: the batch-invariance the loop
 * relies on); the target as its own draft model accepts every draft; a drafter that is always wrong and a draft
 * model with other weights change nothing; sampling with a seed is reproducible and speculative sampling keeps
 * the target's distribution; the options' and vocabularies' errors; the hybrids (qwen3next, qwen35moe) with every
 * drafter, their recurrent state rolled back by the backend (backend_options_t.rollback). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/cmd_model.h"
#include "coordinator/generate.h"
#include "coordinator/spec.h"
#include "core/util/pool.h"
#include "cpu-expert-worker/experts/moe_local.h"
#include "gpu-worker/dense/backend.h"
#include "tests/check_run.h"
#include "tests/mtp_oracle.h"
#include "tools/mkmodel/cli.h"
#include "tools/mkmodel/config.h"
#include "tools/mkmodel/model.h"

enum { N_PREDICT = 64, N_CTX = 256 };

static char tmpdir[64];
static char path_target[128], path_other[128], path_vocab[128], path_q4[128];

static void write_model(const char *path, const char *seed, const char *vocab, const char *type)
{
    const char *argv[] = {"guild-mkmodel", "-q", "-o", path, "--arch", "qwen3moe", "--layers", "2", "--embd", "64",
                          "--heads", "4", "--kv-heads", "2", "--head-dim", "16", "--experts", "4", "--experts-used",
                          "2", "--expert-ff", "32", "--ctx", "256", "--type", type, "--seed", seed, "--vocab",
                          vocab};
    mkmodel_config_t cfg;
    guild_err_t err = {{0}};
    bool quiet;
    ck_assert_msg(mkmodel_cli_parse((int)(sizeof argv / sizeof argv[0]), (char **)argv, &cfg, &quiet, &err) == 0,
                  "%s", err.msg);
    ck_assert_msg(mkmodel_config_validate(&cfg, &err) == 0, "%s", err.msg);
    ck_assert_msg(mkmodel_write(&cfg, NULL, NULL, NULL, &err) == 0, "%s", err.msg);
}

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/check_spec.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
    snprintf(path_target, sizeof path_target, "%s/t.gguf", tmpdir);
    snprintf(path_other, sizeof path_other, "%s/o.gguf", tmpdir);
    snprintf(path_vocab, sizeof path_vocab, "%s/v.gguf", tmpdir);
    snprintf(path_q4, sizeof path_q4, "%s/q.gguf", tmpdir);
    write_model(path_target, "11", "400", "Q8_0");
    write_model(path_other, "12", "400", "Q8_0");
    write_model(path_vocab, "11", "401", "Q8_0");
    write_model(path_q4, "11", "400", "Q4_K"); /* the target's weights, quantized coarser: agrees often */
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    ck_assert_int_eq(system(cmd), 0);
}

/* The target on the CPU backend in this process. */
typedef struct rig {
    cmd_model_t cm;
    guild_pool_t *pool;
    moe_exec_t *moe;
    backend_t *be;
} rig_t;

/* mtp: the backend runs the model's MTP layer (--spec mtp); rollback: backend_options_t.rollback (a recurrent
 * model's verify steps) */
static void rig_open_opts(rig_t *r, const char *path, bool mtp, int32_t rollback)
{
    guild_err_t err = {{0}};
    memset(r, 0, sizeof *r);
    ck_assert_msg(cmd_model_init(&r->cm, path, &err) == 0, "%s", err.msg);
    ck_assert_msg(guild_pool_new(&r->pool, 2, NULL, &err) == 0, "%s", err.msg);
    ck_assert_msg(moe_local_new(&r->moe, r->cm.model, r->pool, &err) == 0, "%s", err.msg);
    backend_options_t o = {.n_ctx = N_CTX, .n_batch = 16, .pool = r->pool, .moe = r->moe, .mtp = mtp,
                           .rollback = rollback};
    ck_assert_msg(backend_new(&r->be, "cpu", r->cm.model, &o, NULL, &err) == 0, "%s", err.msg);
}

static void rig_open_mtp(rig_t *r, const char *path, bool mtp)
{
    rig_open_opts(r, path, mtp, 0);
}

static void rig_open(rig_t *r, const char *path)
{
    rig_open_mtp(r, path, false);
}

static void rig_close(rig_t *r)
{
    backend_destroy(&r->be);
    moe_exec_destroy(&r->moe);
    guild_pool_destroy(&r->pool);
    cmd_model_fini(&r->cm);
}

/* A repetitive prompt: the ngram drafter finds matches in it. */
static const char *PROMPT = "one two three four, one two three four, one two three four, one two three";

typedef struct out {
    int32_t ids[N_PREDICT + 1];
    int32_t n;
    char *logits; /* the rows written (logits_out) */
    size_t logits_len;
    spec_stats_t spec;
} out_t;

/* One generation of N_PREDICT tokens on a cleared cache. */
static void generate(rig_t *r, spec_drafter_t *d, int32_t k, float temp, uint64_t seed, out_t *o)
{
    guild_err_t err = {{0}};
    tok_ids_t prompt;
    tok_ids_init(&prompt);
    ck_assert_msg(tok_encode(r->cm.tok, PROMPT, strlen(PROMPT), TOK_ADD_SPECIAL, &prompt, &err) == 0, "%s", err.msg);
    sample_params_t sp;
    sample_params_default(&sp);
    sp.temp = temp;
    sp.seed = seed;
    sampler_t *smp = NULL;
    ck_assert_msg(sampler_new(&smp, &sp, model_config(r->cm.model)->n_vocab, &err) == 0, "%s", err.msg);
    memset(o, 0, sizeof *o);
    FILE *lf = open_memstream(&o->logits, &o->logits_len);
    ck_assert_ptr_nonnull(lf);
    backend_kv_clear(r->be);
    gen_options_t go = {.n_predict = N_PREDICT, .n_batch = 16, .n_ctx = N_CTX,
                        .n_vocab = model_config(r->cm.model)->n_vocab, .logits_out = lf, .ignore_eog = true,
                        .check_finite = true, .drafter = d, .spec_max = k};
    gen_result_t res;
    ck_assert_msg(gen_run(r->be, smp, r->cm.tok, prompt.v, (int32_t)prompt.n, &go, &res, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(fclose(lf), 0);
    ck_assert_int_eq(res.n_sampled, N_PREDICT);
    ck_assert_int_eq(res.stop, GEN_STOP_LENGTH);
    /* the cache holds the prompt and the tokens fed back, as after plain decode */
    ck_assert_int_eq(res.n_decoded, N_PREDICT - 1);
    ck_assert_int_eq(backend_kv_len(r->be), (int32_t)prompt.n + N_PREDICT - 1);
    memcpy(o->ids, res.ids, (size_t)res.n_sampled * sizeof *o->ids);
    o->n = res.n_sampled;
    o->spec = res.spec;
    if (d)
        ck_assert_uint_eq(res.spec.tokens, (uint64_t)N_PREDICT - 1);
    free(res.ids);
    sampler_destroy(&smp);
    tok_ids_fini(&prompt);
}

static void same(const out_t *a, const out_t *b, const char *what, int32_t k)
{
    ck_assert_int_eq(a->n, b->n);
    for (int32_t i = 0; i < a->n; i++)
        ck_assert_msg(a->ids[i] == b->ids[i], "%s, K = %d: token %d is %d, %d without drafts", what, k, i, b->ids[i],
                      a->ids[i]);
    ck_assert_msg(a->logits_len == b->logits_len && !memcmp(a->logits, b->logits, a->logits_len),
                  "%s, K = %d: the logits rows differ from plain decode's", what, k);
}

static const int32_t ks[] = {1, 2, 4, 8};

START_TEST(test_ngram_greedy_is_plain_decode)
{
    rig_t r;
    rig_open(&r, path_target);
    out_t ref, o;
    generate(&r, NULL, 0, 0, 0, &ref);
    spec_drafter_t *d = NULL;
    guild_err_t err = {{0}};
    ck_assert(spec_ngram_new(&d, &err) == 0);
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        generate(&r, d, ks[i], 0, 0, &o);
        same(&ref, &o, "ngram", ks[i]);
        ck_assert_msg(o.spec.drafted > 0, "K = %d: nothing drafted", ks[i]);
        ck_assert(o.spec.accepted <= o.spec.drafted);
        free(o.logits);
    }
    spec_drafter_destroy(&d);
    ck_assert_ptr_null(d);
    free(ref.logits);
    rig_close(&r);
}
END_TEST

/* _i 0: the draft on the CPU backend in the test's process (spec_draft_new); 1: on a backend stack of its own
 * with a command's stack options (spec_draft_new_stack, as guild run opens it) */
START_TEST(test_self_draft_accepts_everything)
{
    rig_t r;
    rig_open(&r, path_target);
    out_t ref, o;
    generate(&r, NULL, 0, 0, 0, &ref);
    spec_setup_t s;
    spec_options_t so;
    spec_options_init(&so);
    so.kind = SPEC_DRAFT;
    so.draft_model = path_target;
    stack_options_t st;
    stack_options_init(&st);
    st.single_process = true;
    st.n_threads = 1;
    st.n_batch = 16;
    if (_i == 1) {
        so.draft_backend = "cpu";
        spec_stack_options(&so, &st);
        ck_assert_ptr_eq(so.stack, &st);
    }
    guild_err_t err = {{0}};
    ck_assert_msg(spec_options_check(&so, r.cm.model, &err) == 0, "%s", err.msg);
    ck_assert_msg(spec_setup_open(&s, &so, r.cm.model, r.cm.tok, N_CTX, 1, &err) == 0, "%s", err.msg);
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        generate(&r, s.drafter, ks[i], 0, 0, &o);
        same(&ref, &o, "the target as draft model", ks[i]);
        ck_assert(o.spec.drafted > 0);
        ck_assert_msg(o.spec.accepted == o.spec.drafted, "K = %d: %llu of %llu drafts accepted", ks[i],
                      (unsigned long long)o.spec.accepted, (unsigned long long)o.spec.drafted);
        /* every step but the last, cut short by n_predict, verifies K drafts */
        ck_assert_uint_eq(o.spec.steps, (uint64_t)((N_PREDICT - 1 + ks[i]) / (ks[i] + 1)));
        free(o.logits);
    }
    spec_setup_close(&s);
    free(ref.logits);
    rig_close(&r);
}
END_TEST

/* _i 0: other weights (nearly never right); 1: the target's weights in Q4_K (right now and then: steps that keep
 * some drafts) */
START_TEST(test_other_draft_model_changes_nothing)
{
    rig_t r;
    rig_open(&r, path_target);
    out_t ref, o;
    generate(&r, NULL, 0, 0, 0, &ref);
    spec_setup_t s;
    spec_options_t so;
    spec_options_init(&so);
    so.kind = SPEC_DRAFT;
    so.draft_model = _i ? path_q4 : path_other;
    guild_err_t err = {{0}};
    ck_assert_msg(spec_setup_open(&s, &so, r.cm.model, r.cm.tok, N_CTX, 1, &err) == 0, "%s", err.msg);
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        generate(&r, s.drafter, ks[i], 0, 0, &o);
        same(&ref, &o, "another draft model", ks[i]);
        ck_assert(o.spec.drafted > 0);
        ck_assert(o.spec.accepted < o.spec.drafted);
        if (_i)
            ck_assert_msg(o.spec.accepted > 0, "K = %d: the Q4_K draft: no draft accepted", ks[i]);
        free(o.logits);
    }
    spec_setup_close(&s);
    free(ref.logits);
    rig_close(&r);
}
END_TEST

/* A drafter that knows the right continuation (the plain run's ids): always wrong (right = false), or right for
 * the first 0..k_max drafts of a step (a hash of the context's length) and wrong after (steps that keep some
 * drafts and truncate the rest). */
typedef struct wrong {
    spec_drafter_t base;
    const int32_t *ids;
    int32_t n_prompt, n_vocab;
    bool right;
} wrong_t;

static int32_t wrong_draft(spec_drafter_t *d, const int32_t *ctx, int32_t n, int32_t k_max, int32_t *out, float *q,
                           guild_err_t *err)
{
    (void)ctx;
    (void)q;
    (void)err;
    const wrong_t *w = (const wrong_t *)d;
    const int32_t n_right = w->right ? (int32_t)(((uint32_t)n * 2654435761u >> 11) % (uint32_t)(k_max + 1)) : 0;
    int32_t k = 0;
    for (; k < k_max && n + k - w->n_prompt < N_PREDICT; k++) {
        const int32_t good = w->ids[n + k - w->n_prompt];
        out[k] = k < n_right ? good : (good + 1 + k) % w->n_vocab;
    }
    return k;
}

static void wrong_destroy(spec_drafter_t *d)
{
    (void)d;
}

static const spec_drafter_ops_t wrong_ops = {.name = "wrong", .draft = wrong_draft, .destroy = wrong_destroy};

START_TEST(test_wrong_drafts_change_nothing)
{
    rig_t r;
    rig_open(&r, path_target);
    out_t ref, o;
    generate(&r, NULL, 0, 0, 0, &ref);
    tok_ids_t prompt;
    tok_ids_init(&prompt);
    guild_err_t err = {{0}};
    ck_assert(tok_encode(r.cm.tok, PROMPT, strlen(PROMPT), TOK_ADD_SPECIAL, &prompt, &err) == 0);
    wrong_t w = {.base = {.ops = &wrong_ops}, .ids = ref.ids, .n_prompt = (int32_t)prompt.n,
                 .n_vocab = model_config(r.cm.model)->n_vocab};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        generate(&r, &w.base, ks[i], 0, 0, &o);
        same(&ref, &o, "an always wrong drafter", ks[i]);
        ck_assert_uint_eq(o.spec.accepted, 0);
        ck_assert_uint_eq(o.spec.steps, N_PREDICT - 1);
        ck_assert(o.spec.drafted >= (uint64_t)(N_PREDICT - 2));
        free(o.logits);
    }
    w.right = true;
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        generate(&r, &w.base, ks[i], 0, 0, &o);
        same(&ref, &o, "a drafter right for the first drafts of a step", ks[i]);
        ck_assert_msg(o.spec.accepted > 0 && o.spec.accepted < o.spec.drafted,
                      "K = %d: %llu of %llu drafts accepted", ks[i], (unsigned long long)o.spec.accepted,
                      (unsigned long long)o.spec.drafted);
        free(o.logits);
    }
    tok_ids_fini(&prompt);
    free(ref.logits);
    rig_close(&r);
}
END_TEST

START_TEST(test_sampling_is_reproducible)
{
    rig_t r;
    rig_open(&r, path_target);
    spec_setup_t s;
    spec_options_t so;
    spec_options_init(&so);
    so.kind = _i ? SPEC_DRAFT : SPEC_NGRAM;
    so.draft_model = _i ? path_other : NULL;
    guild_err_t err = {{0}};
    ck_assert_msg(spec_setup_open(&s, &so, r.cm.model, r.cm.tok, N_CTX, 1, &err) == 0, "%s", err.msg);
    out_t a, b, c;
    generate(&r, s.drafter, 4, 0.9f, 7, &a);
    generate(&r, s.drafter, 4, 0.9f, 7, &b);
    generate(&r, s.drafter, 4, 0.9f, 8, &c);
    same(&a, &b, "the same seed", 4);
    ck_assert(a.spec.drafted > 0);
    ck_assert(memcmp(a.ids, c.ids, sizeof a.ids) != 0); /* the seed matters */
    free(a.logits);
    free(b.logits);
    free(c.logits);
    spec_setup_close(&s);
    rig_close(&r);
}
END_TEST

/* Speculative sampling keeps the target's distribution: a one-token vocabulary toy, checked by frequencies. The
 * target's distribution p (the sampler's, at temperature 1) and a draft distribution q that differs from it;
 * tokens drawn by the accept/resample rule must follow p. */
START_TEST(test_speculative_sampling_keeps_the_distribution)
{
    enum { V = 5, N = 200000 };
    const float logits[V] = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f};
    const double qd[V] = {0.5, 0.3, 0.1, 0.05, 0.05};
    sample_params_t sp;
    sample_params_default(&sp);
    sp.temp = 1;
    sp.top_k = 0;
    sp.top_p = 1;
    sp.min_p = 0;
    sp.seed = 3;
    sampler_t *smp = NULL, *draw = NULL;
    guild_err_t err = {{0}};
    ck_assert(sampler_new(&smp, &sp, V, &err) == 0);
    sp.seed = 4;
    ck_assert(sampler_new(&draw, &sp, V, &err) == 0);
    double p[V], want[V], sum = 0;
    for (int v = 0; v < V; v++)
        sum += exp(logits[v]);
    for (int v = 0; v < V; v++)
        want[v] = exp(logits[v]) / sum;
    float q[V];
    for (int v = 0; v < V; v++)
        q[v] = (float)qd[v];
    long count[V] = {0}, kept = 0;
    for (int t = 0; t < N; t++) {
        const int32_t d = sampler_draw(draw, qd);
        int32_t tok;
        bool k = spec_accept_sampled(smp, logits, d, q, p, &tok);
        kept += k;
        count[tok]++;
    }
    for (int v = 0; v < V; v++) {
        const double f = (double)count[v] / N, sd = sqrt(want[v] * (1 - want[v]) / N);
        ck_assert_msg(fabs(f - want[v]) < 5 * sd, "token %d: frequency %.4f, p = %.4f", v, f, want[v]);
    }
    /* the acceptance rate is sum min(p, q) */
    double acc = 0;
    for (int v = 0; v < V; v++)
        acc += fmin(want[v], qd[v]);
    ck_assert_msg(fabs((double)kept / N - acc) < 0.01, "acceptance %.4f, expected %.4f", (double)kept / N, acc);
    sampler_destroy(&smp);
    sampler_destroy(&draw);
}
END_TEST

START_TEST(test_errors)
{
    guild_err_t err = {{0}};
    spec_options_t so;
    spec_kind_t k;
    ck_assert(spec_parse_kind("medusa", &k, &err) < 0);
    ck_assert(strstr(err.msg, "ngram"));
    spec_options_init(&so);
    ck_assert_int_eq(spec_flag(&so, "spec-max", "17", &err), -1);
    ck_assert_int_eq(spec_flag(&so, "spec-max", "8", &err), 1);
    ck_assert_int_eq(so.max, 8);
    ck_assert_int_eq(spec_flag(&so, "spec-min-p", "1.5", &err), -1);
    ck_assert_int_eq(spec_flag(&so, "temp", "1", &err), 0);
    so.kind = SPEC_MTP;
    ck_assert(spec_options_check(&so, NULL, &err) < 0);
    ck_assert_msg(strstr(err.msg, "mtp"), "%s", err.msg);
    so.kind = SPEC_DRAFT;
    ck_assert(spec_options_check(&so, NULL, &err) < 0);
    ck_assert_msg(strstr(err.msg, "--draft-model"), "%s", err.msg);
    so.kind = SPEC_NGRAM;
    so.min_p = 0.5f;
    ck_assert(spec_options_check(&so, NULL, &err) < 0);
    ck_assert_msg(strstr(err.msg, "--spec-min-p"), "%s", err.msg);
    so.min_p = 0;
    so.draft_model = path_other;
    ck_assert(spec_options_check(&so, NULL, &err) < 0);
    ck_assert_msg(strstr(err.msg, "--spec draft"), "%s", err.msg);

    /* a draft model with another vocabulary */
    rig_t r;
    rig_open(&r, path_target);
    so.kind = SPEC_DRAFT;
    so.draft_model = path_vocab;
    spec_setup_t s;
    ck_assert(spec_setup_open(&s, &so, r.cm.model, r.cm.tok, N_CTX, 1, &err) < 0);
    ck_assert_msg(strstr(err.msg, "vocabularies must be the same") && strstr(err.msg, path_vocab), "%s", err.msg);
    spec_setup_close(&s);
    so.draft_model = "/nonexistent.gguf";
    ck_assert(spec_setup_open(&s, &so, r.cm.model, r.cm.tok, N_CTX, 1, &err) < 0);
    ck_assert_msg(strstr(err.msg, "--draft-model") && strstr(err.msg, "nonexistent"), "%s", err.msg);
    spec_setup_close(&s);
    rig_close(&r);
}
END_TEST

/* ---- --spec mtp ------------------------------------------------------------------------------------------ */

/* A glm4moe file of 2 layers (a dense one, a MoE one) with an MTP layer, written by guild-mkmodel's library. */
static void write_glm_mtp(const char *path, const char *type)
{
    const char *argv[] = {"guild-mkmodel", "-q", "-o", path, "--arch", "glm4moe", "--layers", "2", "--embd", "64",
                          "--heads", "4", "--kv-heads", "2", "--head-dim", "16", "--experts", "4", "--experts-used",
                          "2", "--expert-ff", "32", "--ff", "64", "--ctx", "256", "--type", type, "--seed", "11",
                          "--vocab", "400", "--nextn", "1"};
    mkmodel_config_t cfg;
    guild_err_t err = {{0}};
    bool quiet;
    ck_assert_msg(mkmodel_cli_parse((int)(sizeof argv / sizeof argv[0]), (char **)argv, &cfg, &quiet, &err) == 0,
                  "%s", err.msg);
    ck_assert_msg(mkmodel_config_validate(&cfg, &err) == 0, "%s", err.msg);
    ck_assert_msg(mkmodel_write(&cfg, NULL, NULL, NULL, &err) == 0, "%s", err.msg);
}

/* _i 0: the MTP layer of a mkmodel file (drafts nearly never right), 1: the oracle (drafts right for most tokens:
 * steps that keep every draft, some or none, so that the layer's cache is cut back after accepted drafts) */
START_TEST(test_mtp_greedy_is_plain_decode)
{
    char path[160];
    snprintf(path, sizeof path, "%s/mtp%d.gguf", tmpdir, _i);
    write_glm_mtp(path, _i ? "F32" : "Q8_0");
    guild_err_t err = {{0}};
    /* the oracle: token 0 is the one the layer drafts wrong (in this seed's greedy cycle of 14 tokens, one is 0:
     * steps that keep some drafts and not the rest) */
    if (_i)
        ck_assert_msg(mtp_oracle_make(path, 0, &err) == 0, "%s", err.msg);
    rig_t r;
    rig_open_mtp(&r, path, true);
    out_t ref, o;
    generate(&r, NULL, 0, 0, 0, &ref);
    spec_options_t so;
    spec_options_init(&so);
    so.kind = SPEC_MTP;
    ck_assert_msg(spec_options_check(&so, r.cm.model, &err) == 0, "%s", err.msg);
    spec_setup_t s;
    ck_assert_msg(spec_setup_open(&s, &so, r.cm.model, r.cm.tok, N_CTX, 1, &err) == 0, "%s", err.msg);
    uint64_t partial = 0;
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        generate(&r, s.drafter, ks[i], 0, 0, &o);
        same(&ref, &o, "mtp", ks[i]);
        ck_assert(o.spec.drafted > 0);
        ck_assert(o.spec.accepted <= o.spec.drafted);
        if (_i)
            ck_assert_msg(o.spec.accepted * 2 > o.spec.drafted, "K = %d: the oracle: %llu of %llu drafts accepted",
                          ks[i], (unsigned long long)o.spec.accepted, (unsigned long long)o.spec.drafted);
        partial += o.spec.accepted > 0 && o.spec.accepted < o.spec.drafted;
        free(o.logits);
    }
    if (_i)
        ck_assert_msg(partial > 0, "the oracle: no K with some drafts accepted and some not");
    spec_setup_close(&s);
    free(ref.logits);
    rig_close(&r);
}
END_TEST

/* ---- hybrids: the recurrent state rolled back ------------------------------------------------------------- */

/* A qwen3next or qwen35moe file of 4 layers (gated delta net, gated attention, twice), with an MTP layer when
 * nextn (qwen35moe), written by guild-mkmodel's library. */
static void write_hybrid(const char *path, const char *arch, const char *type, bool nextn)
{
    const char *argv[] = {"guild-mkmodel", "-q", "-o", path, "--arch", arch, "--layers", "4", "--full-attn-interval",
                          "2", "--embd", "64", "--heads", "4", "--kv-heads", "2", "--head-dim", "16", "--experts",
                          "4", "--experts-used", "2", "--expert-ff", "32", "--ctx", "256", "--type", type, "--seed",
                          "11", "--vocab", "400", "--nextn", "1"};
    const int argc = (int)(sizeof argv / sizeof argv[0]) - (nextn ? 0 : 2);
    mkmodel_config_t cfg;
    guild_err_t err = {{0}};
    bool quiet;
    ck_assert_msg(mkmodel_cli_parse(argc, (char **)argv, &cfg, &quiet, &err) == 0, "%s", err.msg);
    ck_assert_msg(mkmodel_config_validate(&cfg, &err) == 0, "%s", err.msg);
    ck_assert_msg(mkmodel_write(&cfg, NULL, NULL, NULL, &err) == 0, "%s", err.msg);
}

static const char *const hybrids[] = {"qwen3next", "qwen35moe"};

/* The backend: a truncation back into a forward call of at most `rollback` rows restores the recurrent state of
 * that position (the next row's logits are the bits of a cache that never held the later rows); after a longer
 * call, or without rollback, the cache empties. */
START_TEST(test_rollback_backend)
{
    char path[160];
    snprintf(path, sizeof path, "%s/%s-rb.gguf", tmpdir, hybrids[_i]);
    write_hybrid(path, hybrids[_i], "Q8_0", false);
    rig_t r, plain;
    rig_open_opts(&r, path, false, 5);
    rig_open_opts(&plain, path, false, 0);
    const int32_t V = model_config(r.cm.model)->n_vocab, P = 7;
    int32_t tok[16], pos[16], last;
    for (int32_t i = 0; i < 16; i++) {
        tok[i] = (i * 37 + 5) % V;
        pos[i] = i;
    }
    float *a = malloc((size_t)V * sizeof *a), *b = malloc((size_t)V * sizeof *b);
    ck_assert(a && b);
    guild_err_t err = {{0}};
    for (int32_t keep = P + 1; keep <= P + 5; keep++) { /* a verify call of 5 rows at P, cut back to keep */
        backend_kv_clear(r.be);
        last = P - 1;
        ck_assert_msg(backend_forward(r.be, P, tok, pos, 1, &last, a, &err) == 0, "%s", err.msg);
        last = 0;
        ck_assert_msg(backend_forward(r.be, 5, tok + P, pos + P, 1, &last, a, &err) == 0, "%s", err.msg);
        backend_kv_truncate(r.be, keep);
        ck_assert_int_eq(backend_kv_len(r.be), keep);
        if (keep > P + 1) { /* and back again within the same call */
            backend_kv_truncate(r.be, keep - 1);
            ck_assert_int_eq(backend_kv_len(r.be), keep - 1);
            ck_assert_msg(backend_forward(r.be, 1, tok + keep - 1, pos + keep - 1, 1, &last, a, &err) == 0, "%s",
                          err.msg);
        }
        const int32_t next = 399 - keep; /* another token than the call's at keep */
        ck_assert_msg(backend_forward(r.be, 1, &next, pos + keep, 1, &last, a, &err) == 0, "%s", err.msg);
        /* the plain cache: the same tokens one call, then the other one */
        backend_kv_clear(plain.be);
        last = keep - 1;
        ck_assert_msg(backend_forward(plain.be, keep, tok, pos, 1, &last, b, &err) == 0, "%s", err.msg);
        last = 0;
        ck_assert_msg(backend_forward(plain.be, 1, &next, pos + keep, 1, &last, b, &err) == 0, "%s", err.msg);
        ck_assert_msg(!memcmp(a, b, (size_t)V * sizeof *a), "%s: cut back to %d: the logits differ",
                      hybrids[_i], keep);
    }
    /* a call of more rows than kept, and a backend without rollback: the cache empties */
    backend_kv_clear(r.be);
    last = 0;
    ck_assert_msg(backend_forward(r.be, 6, tok, pos, 1, &last, a, &err) == 0, "%s", err.msg);
    backend_kv_truncate(r.be, 5);
    ck_assert_int_eq(backend_kv_len(r.be), 0);
    backend_kv_clear(plain.be);
    ck_assert_msg(backend_forward(plain.be, 3, tok, pos, 1, &last, a, &err) == 0, "%s", err.msg);
    backend_kv_truncate(plain.be, 2);
    ck_assert_int_eq(backend_kv_len(plain.be), 0);
    free(a);
    free(b);
    rig_close(&plain);
    rig_close(&r);
}
END_TEST

/* Every drafter on the hybrids: ngram, a drafter always wrong and one right for the first drafts of a step, the
 * target as its own draft model (accepts everything; its recurrent draft is fed again from the start), a Q4_K copy
 * as the draft model, and (qwen35moe) the MTP layer: greedy ids and logits rows are --spec none's at every K. */
START_TEST(test_hybrid_greedy_is_plain_decode)
{
    const char *arch = hybrids[_i];
    char path[160], path4[160];
    snprintf(path, sizeof path, "%s/%s.gguf", tmpdir, arch);
    snprintf(path4, sizeof path4, "%s/%s-q4.gguf", tmpdir, arch);
    const bool mtp = _i == 1;
    write_hybrid(path, arch, "Q8_0", mtp);
    write_hybrid(path4, arch, "Q4_K", mtp);
    rig_t r;
    rig_open_opts(&r, path, mtp, SPEC_MAX_DRAFT + 1);
    out_t ref, o;
    generate(&r, NULL, 0, 0, 0, &ref);
    guild_err_t err = {{0}};
    tok_ids_t prompt;
    tok_ids_init(&prompt);
    ck_assert(tok_encode(r.cm.tok, PROMPT, strlen(PROMPT), TOK_ADD_SPECIAL, &prompt, &err) == 0);
    wrong_t w = {.base = {.ops = &wrong_ops}, .ids = ref.ids, .n_prompt = (int32_t)prompt.n,
                 .n_vocab = model_config(r.cm.model)->n_vocab};
    spec_setup_t self, q4, m = {0};
    spec_options_t so;
    spec_options_init(&so);
    so.kind = SPEC_DRAFT;
    so.draft_model = path;
    ck_assert_msg(spec_options_check(&so, r.cm.model, &err) == 0, "%s", err.msg);
    ck_assert_msg(spec_setup_open(&self, &so, r.cm.model, r.cm.tok, N_CTX, 1, &err) == 0, "%s", err.msg);
    so.draft_model = path4;
    ck_assert_msg(spec_setup_open(&q4, &so, r.cm.model, r.cm.tok, N_CTX, 1, &err) == 0, "%s", err.msg);
    spec_drafter_t *ng = NULL;
    ck_assert(spec_ngram_new(&ng, &err) == 0);
    if (mtp) {
        spec_options_init(&so);
        so.kind = SPEC_MTP;
        ck_assert_msg(spec_options_check(&so, r.cm.model, &err) == 0, "%s", err.msg);
        ck_assert_msg(spec_setup_open(&m, &so, r.cm.model, r.cm.tok, N_CTX, 1, &err) == 0, "%s", err.msg);
    }
    uint64_t partial = 0;
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        char what[64];
        snprintf(what, sizeof what, "%s: ngram", arch);
        generate(&r, ng, ks[i], 0, 0, &o);
        same(&ref, &o, what, ks[i]);
        ck_assert(o.spec.drafted > 0);
        free(o.logits);
        for (int right = 0; right < 2; right++) {
            w.right = right;
            snprintf(what, sizeof what, "%s: a drafter %s", arch, right ? "right at first" : "always wrong");
            generate(&r, &w.base, ks[i], 0, 0, &o);
            same(&ref, &o, what, ks[i]);
            if (!right)
                ck_assert_uint_eq(o.spec.accepted, 0);
            else
                ck_assert_msg(o.spec.accepted > 0 && o.spec.accepted < o.spec.drafted, "%s, K = %d: %llu of %llu",
                              what, ks[i], (unsigned long long)o.spec.accepted, (unsigned long long)o.spec.drafted);
            free(o.logits);
        }
        snprintf(what, sizeof what, "%s: the target as draft model", arch);
        generate(&r, self.drafter, ks[i], 0, 0, &o);
        same(&ref, &o, what, ks[i]);
        ck_assert_msg(o.spec.drafted > 0 && o.spec.accepted == o.spec.drafted, "%s, K = %d: %llu of %llu", what,
                      ks[i], (unsigned long long)o.spec.accepted, (unsigned long long)o.spec.drafted);
        free(o.logits);
        snprintf(what, sizeof what, "%s: a Q4_K draft model", arch);
        generate(&r, q4.drafter, ks[i], 0, 0, &o);
        same(&ref, &o, what, ks[i]);
        partial += o.spec.accepted > 0 && o.spec.accepted < o.spec.drafted;
        free(o.logits);
        if (mtp) {
            snprintf(what, sizeof what, "%s: mtp", arch);
            generate(&r, m.drafter, ks[i], 0, 0, &o);
            same(&ref, &o, what, ks[i]);
            ck_assert(o.spec.drafted > 0);
            free(o.logits);
        }
    }
    printf("%s: a Q4_K draft model kept some drafts and cut the rest at %llu of 4 K\n", arch,
           (unsigned long long)partial);
    spec_drafter_destroy(&ng);
    spec_setup_close(&m);
    spec_setup_close(&q4);
    spec_setup_close(&self);
    tok_ids_fini(&prompt);
    free(ref.logits);
    rig_close(&r);
}
END_TEST

/* Without the backend's rollback the verify loop stops with the reason, not with other tokens. */
START_TEST(test_hybrid_without_rollback_fails)
{
    char path[160];
    snprintf(path, sizeof path, "%s/qwen3next-nr.gguf", tmpdir);
    write_hybrid(path, "qwen3next", "Q8_0", false);
    rig_t r;
    rig_open(&r, path);
    guild_err_t err = {{0}};
    tok_ids_t prompt;
    tok_ids_init(&prompt);
    ck_assert(tok_encode(r.cm.tok, PROMPT, strlen(PROMPT), TOK_ADD_SPECIAL, &prompt, &err) == 0);
    static const int32_t zeros[N_PREDICT];
    wrong_t w = {.base = {.ops = &wrong_ops}, .ids = zeros, .n_prompt = (int32_t)prompt.n,
                 .n_vocab = model_config(r.cm.model)->n_vocab}; /* drafts 1, 2, ...: some are rejected */
    sample_params_t sp;
    sample_params_default(&sp);
    sp.temp = 0;
    sampler_t *smp = NULL;
    ck_assert(sampler_new(&smp, &sp, model_config(r.cm.model)->n_vocab, &err) == 0);
    gen_options_t go = {.n_predict = N_PREDICT, .n_batch = 16, .n_ctx = N_CTX,
                        .n_vocab = model_config(r.cm.model)->n_vocab, .ignore_eog = true, .drafter = &w.base,
                        .spec_max = 4};
    gen_result_t res;
    ck_assert(gen_run(r.be, smp, r.cm.tok, prompt.v, (int32_t)prompt.n, &go, &res, &err) < 0);
    ck_assert_msg(strstr(err.msg, "could not take its cache back"), "%s", err.msg);
    free(res.ids);
    sampler_destroy(&smp);
    tok_ids_fini(&prompt);
    rig_close(&r);
}
END_TEST

/* The ngram drafter: the newest match of the longest suffix. */
START_TEST(test_ngram_lookup)
{
    spec_drafter_t *d = NULL;
    guild_err_t err = {{0}};
    ck_assert(spec_ngram_new(&d, &err) == 0);
    const int32_t ctx[] = {1, 2, 3, 9, 9, 5, 2, 3, 7, 8, 6, 1, 2, 3};
    int32_t out[8];
    /* "1 2 3" (and longer "6 1 2 3" is not found): newest earlier match of the 3-gram is at 0, followed by 9 9 5 */
    ck_assert_int_eq(d->ops->draft(d, ctx, 14, 4, out, NULL, &err), 4);
    ck_assert_int_eq(out[0], 9);
    ck_assert_int_eq(out[1], 9);
    ck_assert_int_eq(out[2], 5);
    ck_assert_int_eq(out[3], 2);
    /* "2 3" alone: newest earlier occurrence at 6 (followed by 7 8) */
    const int32_t ctx2[] = {2, 3, 4, 0, 2, 3, 7, 8, 5, 2, 3};
    ck_assert_int_eq(d->ops->draft(d, ctx2, 11, 2, out, NULL, &err), 2);
    ck_assert_int_eq(out[0], 7);
    ck_assert_int_eq(out[1], 8);
    /* no match of two tokens */
    const int32_t ctx3[] = {1, 2, 3, 4, 1};
    ck_assert_int_eq(d->ops->draft(d, ctx3, 5, 4, out, NULL, &err), 0);
    spec_drafter_destroy(&d);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("spec");
    TCase *tc = tcase_create("spec");
    tcase_set_timeout(tc, 120);
    tcase_add_unchecked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_ngram_lookup);
    tcase_add_test(tc, test_ngram_greedy_is_plain_decode);
    tcase_add_loop_test(tc, test_self_draft_accepts_everything, 0, 2);
    tcase_add_loop_test(tc, test_other_draft_model_changes_nothing, 0, 2);
    tcase_add_test(tc, test_wrong_drafts_change_nothing);
    tcase_add_loop_test(tc, test_sampling_is_reproducible, 0, 2);
    tcase_add_test(tc, test_speculative_sampling_keeps_the_distribution);
    tcase_add_test(tc, test_errors);
    tcase_add_loop_test(tc, test_mtp_greedy_is_plain_decode, 0, 2);
    tcase_add_loop_test(tc, test_rollback_backend, 0, 2);
    tcase_add_loop_test(tc, test_hybrid_greedy_is_plain_decode, 0, 2);
    tcase_add_test(tc, test_hybrid_without_rollback_fails);
    suite_add_tcase(s, tc);
    return check_run(s);
}
