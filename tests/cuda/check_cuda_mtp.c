/* The multi-token-prediction layer on the CUDA backend (backend_mtp_step, gpu-worker/dense/cuda/cuda_mtp.c) on the
 * tiny models of the architectures that ship one (glm4moe, deepseek2, qwen35moe; tests/tiny_model.c). Needs a
 * CUDA device: without one, exit 77 (SKIP).
 *   - against the CPU backend's layer (the float64-checked reference, tests/ref/check_mtp.sh), teacher-forced:
 *     both backends take the same prompt, then chained steps from the CPU's greedy tokens and drafts; after
 *     decode steps, step 0 takes in the positions the layer has not seen; after a truncation (not the hybrid's:
 *     its cache empties), step 0 again. Both with an F32 cache; per step e = max |cuda - cpu| / max(1, |cpu|) must be
 *     within FLOOR_F32 with F32 weights (reduction order only) and FLOOR_Q8 with Q8_0 ones (both backends round
 *     every matrix input to Q8, and an input within rounding of a boundary rounds the other way on one side; the
 *     MTP layer adds its norms and block after the model's), and the draft (the argmax) must be the CPU's unless
 *     the CPU's gap to it is within that floor times max(1, |top logit|) (a near-tie). Every figure is printed
 *     (bench/results/mtp-cuda-h200-2026-12-02.md: at most 5e-7 and 0.03, every draft the CPU's).
 *   - the catch-up's bookkeeping, bit for bit (glm4moe, deepseek2): the prompt forwarded in one batch or in three,
 *     with a step between them, gives the same bits at the last step 0 (rows of up to CUDA_DECODE_ROWS are
 *     batch-invariant);
 *   - an oracle (the glm4moe model with every block's output zeroed, its MTP layer passing the normed embedding
 *     through to the model's head: its drafts are the model's next tokens): chained drafts agree with the
 *     model's greedy tokens on the device (the acceptance a verify step would give, printed);
 *   - errors: a step out of order, a token out of range, a backend without the layer. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/gguf/gguf.h"
#include "core/util/pool.h"
#include "cpu-expert-worker/experts/moe_local.h"
#include "gpu-worker/dense/backend.h"
#include "gpu-worker/dense/kv_format.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/tiny_model.h"

#define FLOOR_F32 1e-3
#define FLOOR_Q8 0.1
#define CHAIN 4 /* chained steps per draft */

typedef struct rig {
    void *image;
    model_t *model;
    guild_pool_t *pool;
    moe_exec_t *moe;
    backend_t *cpu, *gpu;
    int32_t V;
} rig_t;

/* Opens the model of `image` (owned from here) with both backends, the MTP layer on (cpu: unless no_cpu). */
static void rig_open_image(rig_t *r, void *image, size_t size, bool no_cpu)
{
    guild_err_t err = {{0}};
    memset(r, 0, sizeof *r);
    r->image = image;
    ck_assert_msg(tiny_model_open(image, size, &r->model, &err) == 0, "%s", err.msg);
    ck_assert_msg(guild_pool_new(&r->pool, 2, NULL, &err) == 0, "%s", err.msg);
    ck_assert_msg(moe_local_new(&r->moe, r->model, r->pool, &err) == 0, "%s", err.msg);
    backend_options_t o = {.n_ctx = 64, .n_batch = 16, .pool = r->pool, .moe = r->moe, .kv_type = KV_TYPE_F32,
                           .mtp = true, .check_finite = true};
    if (!no_cpu)
        ck_assert_msg(backend_new(&r->cpu, "cpu", r->model, &o, NULL, &err) == 0, "cpu: %s", err.msg);
    ck_assert_msg(backend_new(&r->gpu, "cuda", r->model, &o, NULL, &err) == 0, "cuda: %s", err.msg);
    r->V = model_config(r->model)->n_vocab;
}

static void rig_open(rig_t *r, const char *arch, guild_type_t type, uint64_t seed)
{
    tiny_spec_t s = tiny_spec(arch);
    cuda_test_spec(&s, type, seed);
    void *image;
    size_t size;
    tiny_model_image(&s, &image, &size);
    rig_open_image(r, image, size, false);
}

static void rig_close(rig_t *r)
{
    backend_destroy(&r->gpu);
    backend_destroy(&r->cpu);
    moe_exec_destroy(&r->moe);
    guild_pool_destroy(&r->pool);
    model_destroy(&r->model);
    free(r->image);
}

typedef struct tally {
    double floor, worst;
    int steps, agree, near_ties;
} tally_t;

/* One step's logits, cuda g against cpu c; asserts the tolerances above. */
static void compare(tally_t *t, const float *g, const float *c, int32_t V, const char *what)
{
    double e = 0;
    int32_t at = 0;
    float lo = c[0], hi = c[0];
    for (int32_t i = 0; i < V; i++) {
        lo = c[i] < lo ? c[i] : lo;
        hi = c[i] > hi ? c[i] : hi;
        const double d = fabs((double)g[i] - c[i]) / fmax(1.0, fabs(c[i]));
        if (d > e) {
            e = d;
            at = i;
        }
    }
    ck_assert_msg(hi > lo, "%s: the cpu's logits are all %g", what, (double)lo);
    t->steps++;
    t->worst = e > t->worst ? e : t->worst;
    ck_assert_msg(e <= t->floor, "%s: logit %d: cuda %.6g, cpu %.6g (over %.2g)", what, at, (double)g[at],
                  (double)c[at], t->floor);
    const int32_t tg = cuda_test_argmax(g, V), tc = cuda_test_argmax(c, V);
    if (tg == tc) {
        t->agree++;
        return;
    }
    const double gap = c[tc] - c[tg], allowed = t->floor * fmax(1.0, fabs(c[tc]));
    ck_assert_msg(gap <= allowed, "%s: cuda drafts %d, cpu %d with a gap of %.4g (allowed %.3g)", what, tg, tc, gap,
                  allowed);
    t->near_ties++;
}

static void step_both(rig_t *r, int32_t step, int32_t token, float *lc, float *lg)
{
    guild_err_t err = {{0}};
    ck_assert_msg(backend_mtp_step(r->cpu, step, token, lc, &err) == 0, "cpu step %d: %s", step, err.msg);
    ck_assert_msg(backend_mtp_step(r->gpu, step, token, lg, &err) == 0, "cuda step %d: %s", step, err.msg);
}

/* A draft of CHAIN chained steps from `token` on both backends, compared step by step (the CPU's drafts feed
 * both). */
static void draft_both(rig_t *r, tally_t *t, int32_t token, float *lc, float *lg, const char *when)
{
    char what[96];
    for (int32_t k = 0; k < CHAIN; k++) {
        step_both(r, k, token, lc, lg);
        snprintf(what, sizeof what, "%s, step %d", when, k);
        compare(t, lg, lc, r->V, what);
        token = cuda_test_argmax(lc, r->V);
    }
}

/* One token forwarded on both; returns the CPU's greedy next token. */
static int32_t decode_both(rig_t *r, int32_t tok, float *lc, float *lg)
{
    const int32_t row = 0;
    cuda_test_forward(r->cpu, 1, &tok, 1, &row, lc);
    cuda_test_forward(r->gpu, 1, &tok, 1, &row, lg);
    return cuda_test_argmax(lc, r->V);
}

static const int32_t prompt[] = {5, 17, 42, 3, 88, 1, 60, 33, 95, 200, 7};
#define N_PROMPT (int32_t)(sizeof prompt / sizeof prompt[0])

typedef struct mtp_case {
    const char *arch;
    guild_type_t type;
} mtp_case_t;

static const mtp_case_t cases[] = {
    {"glm4moe", GUILD_TYPE_F32},   {"glm4moe", GUILD_TYPE_Q8_0},   {"deepseek2", GUILD_TYPE_F32},
    {"deepseek2", GUILD_TYPE_Q8_0}, {"qwen35moe", GUILD_TYPE_F32}, {"qwen35moe", GUILD_TYPE_Q8_0},
};
#define N_CASES (int)(sizeof cases / sizeof cases[0])

START_TEST(test_logits_match_cpu)
{
    const mtp_case_t mc = cases[_i];
    rig_t r;
    rig_open(&r, mc.arch, mc.type, 1 + (uint64_t)_i);
    const int32_t V = r.V;
    const bool recurrent = !strcmp(mc.arch, "qwen35moe");
    float *lc = malloc((size_t)V * sizeof *lc), *lg = malloc((size_t)V * sizeof *lg);
    ck_assert(lc && lg);
    tally_t t = {.floor = mc.type == GUILD_TYPE_F32 ? FLOOR_F32 : FLOOR_Q8};
    int32_t toks[N_PROMPT];
    for (int32_t i = 0; i < N_PROMPT; i++)
        toks[i] = prompt[i] % V;
    const int32_t last = N_PROMPT - 1;
    cuda_test_forward(r.cpu, N_PROMPT, toks, 1, &last, lc);
    cuda_test_forward(r.gpu, N_PROMPT, toks, 1, &last, lg);
    int32_t tok = cuda_test_argmax(lc, V);
    draft_both(&r, &t, tok, lc, lg, "after the prompt");
    /* three decode steps, then a draft whose step 0 takes in the three positions before it */
    for (int i = 0; i < 3; i++)
        tok = decode_both(&r, tok, lc, lg);
    draft_both(&r, &t, tok, lc, lg, "after 3 decode steps");
    if (!recurrent) { /* two positions cut (the layer's cache with them), one decoded, a draft */
        const int32_t kv = backend_kv_len(r.gpu) - 2;
        backend_kv_truncate(r.cpu, kv);
        backend_kv_truncate(r.gpu, kv);
        tok = decode_both(&r, toks[3], lc, lg);
        draft_both(&r, &t, tok, lc, lg, "after a truncation");
    }
    printf("%-10s %-4s MTP steps: %2d/%d same draft, %d near-tie%s; max rel |dlogit| %.3g (floor %.0e)\n", mc.arch,
           mc.type == GUILD_TYPE_F32 ? "F32" : "Q8_0", t.agree, t.steps, t.near_ties, t.near_ties == 1 ? "" : "s",
           t.worst, t.floor);
    free(lc);
    free(lg);
    rig_close(&r);
}
END_TEST

/* The last step 0's logits after the prompt went through in `parts` batches with a draft step after each. */
static void catch_up(backend_t *be, int parts, int32_t V, float *out)
{
    guild_err_t err = {{0}};
    int32_t toks[N_PROMPT];
    for (int32_t i = 0; i < N_PROMPT; i++)
        toks[i] = prompt[i] % V;
    backend_kv_clear(be);
    float *l = malloc((size_t)V * sizeof *l);
    ck_assert_ptr_nonnull(l);
    for (int p = 0, from = 0; p < parts; p++) {
        const int32_t to = N_PROMPT * (p + 1) / parts, row = to - from - 1;
        cuda_test_forward(be, to - from, toks + from, 1, &row, l);
        ck_assert_msg(backend_mtp_step(be, 0, cuda_test_argmax(l, V), out, &err) == 0, "%s", err.msg);
        from = to;
    }
    free(l);
}

START_TEST(test_catch_up_bits)
{
    const mtp_case_t mc = cases[_i];
    tiny_spec_t s = tiny_spec(mc.arch);
    cuda_test_spec(&s, mc.type, 7);
    void *image;
    size_t size;
    tiny_model_image(&s, &image, &size);
    rig_t r;
    rig_open_image(&r, image, size, true);
    float *a = malloc((size_t)r.V * sizeof *a), *b = malloc((size_t)r.V * sizeof *b);
    ck_assert(a && b);
    catch_up(r.gpu, 1, r.V, a);
    catch_up(r.gpu, 3, r.V, b);
    ck_assert_msg(!memcmp(a, b, (size_t)r.V * sizeof *a), "%s: the prompt in 1 batch and in 3 give other bits",
                  mc.arch);
    catch_up(r.gpu, 1, r.V, b);
    ck_assert_msg(!memcmp(a, b, (size_t)r.V * sizeof *a), "%s: a run again gives other bits", mc.arch);
    free(a);
    free(b);
    rig_close(&r);
}
END_TEST

/* Writes n floats of src (NULL: zeros; with `one`, ones) over F32 tensor `name` of the image g reads. */
static void poke(void *image, const gguf_t *g, const char *name, const float *src, bool one)
{
    const gguf_tensor_t *t = gguf_find_tensor(g, name);
    ck_assert_msg(t && t->type == GUILD_TYPE_F32, "no F32 tensor %s", name);
    float *dst = (float *)((char *)image + ((const char *)t->data - (const char *)gguf_mapping(g)));
    const size_t n = (size_t)t->size / sizeof(float);
    for (size_t i = 0; i < n; i++)
        dst[i] = src ? src[i] : one ? 1.0f : 0.0f;
}

/* The glm4moe oracle described at the top, in memory. */
static void oracle_image(void **image, size_t *size)
{
    tiny_spec_t s = tiny_spec("glm4moe");
    cuda_test_spec(&s, GUILD_TYPE_F32, 3);
    tiny_model_image(&s, image, size);
    guild_err_t err = {{0}};
    gguf_t *g = NULL;
    ck_assert_msg(gguf_new_from_memory(&g, *image, *size, "oracle.gguf", &err) == 0, "%s", err.msg);
    char name[96];
    const char *zero[] = {"attn_output.weight", "ffn_down_exps.weight", "ffn_down_shexp.weight", "ffn_down.weight"};
    for (int il = 0; il <= s.n_layer; il++)
        for (size_t z = 0; z < sizeof zero / sizeof zero[0]; z++) {
            snprintf(name, sizeof name, "blk.%d.%s", il, zero[z]);
            if (gguf_find_tensor(g, name))
                poke(*image, g, name, NULL, false);
        }
    const int E = s.n_embd;
    float *eye = calloc((size_t)2 * E * E, sizeof *eye);
    ck_assert_ptr_nonnull(eye);
    for (int i = 0; i < E; i++)
        eye[(size_t)i * 2 * E + i] = 1; /* row i of [2E, E]: x[i] = the normed embedding's element i */
    snprintf(name, sizeof name, "blk.%d.nextn.eh_proj.weight", s.n_layer);
    poke(*image, g, name, eye, false);
    snprintf(name, sizeof name, "blk.%d.nextn.enorm.weight", s.n_layer);
    poke(*image, g, name, NULL, true);
    snprintf(name, sizeof name, "blk.%d.nextn.shared_head_norm.weight", s.n_layer);
    poke(*image, g, name, gguf_find_tensor(g, "output_norm.weight")->data, false);
    free(eye);
    gguf_destroy(&g);
}

START_TEST(test_oracle_drafts)
{
    void *image;
    size_t size;
    oracle_image(&image, &size);
    rig_t r;
    rig_open_image(&r, image, size, true);
    enum { STEPS = 24 };
    const int32_t V = r.V, row = 0;
    float *l = malloc((size_t)V * sizeof *l);
    ck_assert_ptr_nonnull(l);
    int32_t toks[N_PROMPT], greedy[STEPS + CHAIN + 1], draft[STEPS][CHAIN];
    for (int32_t i = 0; i < N_PROMPT; i++)
        toks[i] = prompt[i] % V;
    const int32_t last = N_PROMPT - 1;
    guild_err_t err = {{0}};
    cuda_test_forward(r.gpu, N_PROMPT, toks, 1, &last, l);
    greedy[0] = cuda_test_argmax(l, V);
    for (int32_t i = 0; i < STEPS + CHAIN; i++) {
        if (i < STEPS) /* the drafts of the tokens after greedy[i], before it is fed */
            for (int32_t k = 0, t = greedy[i]; k < CHAIN; k++) {
                ck_assert_msg(backend_mtp_step(r.gpu, k, t, l, &err) == 0, "%s", err.msg);
                draft[i][k] = t = cuda_test_argmax(l, V);
            }
        cuda_test_forward(r.gpu, 1, &greedy[i], 1, &row, l);
        greedy[i + 1] = cuda_test_argmax(l, V);
    }
    int right = 0, accepted = 0;
    for (int32_t i = 0; i < STEPS; i++) {
        bool run = true;
        for (int32_t k = 0; k < CHAIN; k++) {
            const bool ok = draft[i][k] == greedy[i + 1 + k];
            right += ok;
            run = run && ok;
            accepted += run;
        }
    }
    printf("oracle: %d of %d chained drafts right, %d accepted by verify steps of K = %d (greedy cycle from %d)\n",
           right, STEPS * CHAIN, accepted, CHAIN, greedy[0]);
    ck_assert_msg(accepted * 10 >= STEPS * CHAIN * 9, "the oracle's drafts: %d of %d accepted", accepted,
                  STEPS * CHAIN);
    free(l);
    rig_close(&r);
}
END_TEST

START_TEST(test_errors)
{
    rig_t r;
    rig_open(&r, "glm4moe", GUILD_TYPE_Q8_0, 5);
    guild_err_t err = {{0}};
    float *l = malloc((size_t)r.V * sizeof *l);
    ck_assert_ptr_nonnull(l);
    ck_assert_int_eq(backend_mtp_step(r.gpu, 0, 1, l, &err), -1);
    ck_assert_msg(strstr(err.msg, "cache is empty"), "%s", err.msg);
    const int32_t tok = 3, row = 0;
    cuda_test_forward(r.gpu, 1, &tok, 1, &row, l);
    ck_assert_int_eq(backend_mtp_step(r.gpu, 1, 1, l, &err), -1);
    ck_assert_msg(strstr(err.msg, "step 0 comes next"), "%s", err.msg);
    ck_assert_int_eq(backend_mtp_step(r.gpu, 0, r.V, l, &err), -1);
    ck_assert_msg(strstr(err.msg, "out of range"), "%s", err.msg);
    ck_assert_int_eq(backend_mtp_step(r.gpu, 0, 1, l, &err), 0);
    ck_assert_int_eq(backend_mtp_step(r.gpu, 1, 1, l, &err), 0);
    void *blob = NULL;
    size_t bytes = 0;
    ck_assert_int_eq(backend_seq_save(r.gpu, 0, 1, &blob, &bytes, &err), -1);
    ck_assert_msg(strstr(err.msg, "multi-token-prediction"), "%s", err.msg);
    /* a backend created without the layer */
    backend_t *plain = NULL;
    backend_options_t o = {.n_ctx = 64, .n_batch = 16, .pool = r.pool, .moe = r.moe};
    ck_assert_msg(backend_new(&plain, "cuda", r.model, &o, NULL, &err) == 0, "%s", err.msg);
    cuda_test_forward(plain, 1, &tok, 1, &row, l);
    ck_assert_int_eq(backend_mtp_step(plain, 0, 1, l, &err), -1);
    ck_assert_msg(strstr(err.msg, "without the multi-token-prediction layer"), "%s", err.msg);
    backend_destroy(&plain);
    free(l);
    rig_close(&r);
}
END_TEST

int main(void)
{
    if (!cuda_test_device(0))
        return 77;
    Suite *s = suite_create("cuda_mtp");
    TCase *tc = tcase_create("mtp");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_logits_match_cpu, 0, N_CASES);
    tcase_add_loop_test(tc, test_catch_up_bits, 0, 4); /* glm4moe, deepseek2 */
    tcase_add_test(tc, test_oracle_drafts);
    tcase_add_test(tc, test_errors);
    suite_add_tcase(s, tc);
    return cuda_test_run(s, NULL);
}
