/* The CUDA backend's non-finite check (gpu-worker/dense/finite_check.h, cuda_rmsnorm_checked) against the CPU
 * backend's on the same tiny models with planted NaNs and infinities: the same find (so the same message, word
 * for word) in prefill batches (the direct path) and in decode steps (captured graphs), the cache length kept
 * on a find, the backend usable after it (the device word is reset every step), nothing found with the check
 * off, and on a finite model the same logits bits with the check on and off (graphs and the direct path).
 * Needs a CUDA device: without one, exit 77 (SKIP). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu-expert-worker/experts/moe_local.h"
#include "gpu-worker/dense/backend.h"
#include "gpu-worker/dense/cuda/cuda_config.h"
#include "gpu-worker/dense/cuda/cuda_util.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/tiny_model.h"

typedef struct rig {
    void *image;
    model_t *model;
    guild_pool_t *pool;
    moe_exec_t *moe;
    int32_t V;
    int64_t E;
} rig_t;

static void rig_open(rig_t *r, const char *arch, guild_type_t type)
{
    guild_err_t err = {{0}};
    size_t size;
    memset(r, 0, sizeof *r);
    tiny_spec_t s = tiny_spec(arch);
    cuda_test_shape(&s, type, 21);
    tiny_model_image(&s, &r->image, &size);
    ck_assert_msg(tiny_model_open(r->image, size, &r->model, &err) == 0, "%s", err.msg);
    ck_assert(guild_pool_new(&r->pool, 2, NULL, &err) == 0);
    ck_assert(moe_local_new(&r->moe, r->model, r->pool, &err) == 0);
    r->V = model_config(r->model)->n_vocab;
    r->E = model_config(r->model)->n_embd;
}

/* A backend over the rig's model as it is now (the cuda backend uploads its weights here). */
static backend_t *open_backend(rig_t *r, const char *name, bool check, bool graphs)
{
    guild_err_t err = {{0}};
    backend_t *be = NULL;
    const backend_options_t o = {.n_ctx = 64, .n_batch = 16, .pool = r->pool, .moe = r->moe, .check_finite = check};
    const cuda_config_t cc = {.no_graph = !graphs};
    ck_assert_msg(backend_new(&be, name, r->model, &o, strcmp(name, "cuda") ? NULL : &cc, &err) == 0, "%s: %s", name,
                  err.msg);
    return be;
}

static void rig_close(rig_t *r)
{
    moe_exec_destroy(&r->moe);
    guild_pool_destroy(&r->pool);
    model_destroy(&r->model);
    free(r->image);
}

static float *poke(const model_tensor_t *t, int64_t i)
{
    return (float *)t->data + i;
}

/* The n tokens at the cache's end, the last row's logits: 0, or -1 with err. */
static int run(backend_t *be, const int32_t *tok, int32_t n, float *logits, guild_err_t *err)
{
    int32_t pos[16], last = n - 1;
    for (int32_t i = 0; i < n; i++)
        pos[i] = backend_kv_len(be) + i;
    return backend_forward(be, n, tok, pos, 1, &last, logits, err);
}

static const int32_t prompt[] = {5, 9, 2, 40, 17, 3, 88, 1};
#define N_PROMPT 8

/* The prompt then one decode step of token `next` on the cpu backend and the cuda one (graphs or not): the same
 * outcome, and the same message word for word when both fail; returns 1 when they failed, 0 when both ran. */
static int same_find(rig_t *r, bool graphs, int32_t next, const char *want)
{
    backend_t *c = open_backend(r, "cpu", true, false), *g = open_backend(r, "cuda", true, graphs);
    float *l = malloc((size_t)r->V * sizeof *l);
    guild_err_t ec = {{0}}, eg = {{0}};
    int failed = 0;
    for (int step = 0; step < 2 && !failed; step++) {
        const int32_t *tok = step == 0 ? prompt : &next;
        const int32_t n = step == 0 ? N_PROMPT : 1;
        const int32_t kv = backend_kv_len(g);
        const int rc = run(c, tok, n, l, &ec), rg = run(g, tok, n, l, &eg);
        ck_assert_msg(rc == rg, "step %d: cpu %d (%s), cuda %d (%s)", step, rc, ec.msg, rg, eg.msg);
        if (rc < 0) {
            ck_assert_msg(!strcmp(ec.msg, eg.msg), "step %d:\n  cpu:  %s\n  cuda: %s", step, ec.msg, eg.msg);
            ck_assert_msg(strstr(eg.msg, want), "step %d: %s\n  lacks: %s", step, eg.msg, want);
            ck_assert_int_eq(backend_kv_len(g), kv);
            failed = 1;
        }
    }
    free(l);
    backend_destroy(&c);
    backend_destroy(&g);
    return failed;
}

START_TEST(test_same_finds)
{
    const bool graphs = _i == 1;
    rig_t r;
    rig_open(&r, "qwen2moe", GUILD_TYPE_Q8_0);
    const model_weights_t *w = model_weights(r.model);
    ck_assert_int_eq(same_find(&r, graphs, 7, ""), 0);

    /* a norm weight: the quantized products downstream would hide it from the stream */
    *poke(&w->layers[1].attn_norm, 17) = NAN;
    ck_assert(same_find(&r, graphs, 7, "layer 1: blk.1.attn_norm.weight makes the normed residual stream not finite "
                                       "at position 0 (row 0 of the batch), element 17"));
    *poke(&w->layers[1].attn_norm, 17) = 1.0f;
    *poke(&w->layers[0].ffn_norm, 200) = INFINITY;
    ck_assert(same_find(&r, graphs, 7, "layer 0: blk.0.ffn_norm.weight makes"));
    *poke(&w->layers[0].ffn_norm, 200) = 1.0f;
    /* the output norm reads the logits rows through the output-row map: the last row of the prompt */
    *poke(&w->output_norm, 3) = NAN;
    ck_assert(same_find(&r, graphs, 7, "layer 1: output_norm.weight makes the normed residual stream not finite at "
                                       "position 7 (row 7 of the batch), element 3"));
    *poke(&w->output_norm, 3) = 1.0f;
    ck_assert_int_eq(same_find(&r, graphs, 7, ""), 0);
    rig_close(&r);

    /* F32: a poisoned embedding row reaches only the batches with its token (here the decode step: a graph), and
     * a product's infinity reaches the stream */
    rig_open(&r, "qwen3moe", GUILD_TYPE_F32);
    w = model_weights(r.model);
    *poke(&w->token_embd, 99 * r.E + 6) = NAN;
    ck_assert(same_find(&r, graphs, 99, "layer 0: its input, the token embedding (token_embd.weight), is not finite "
                                        "at position 8 (row 0 of the batch), element 6"));
    *poke(&w->token_embd, 99 * r.E + 6) = 0.5f;
    *poke(&w->layers[0].wo, 5) = -INFINITY;
    ck_assert(same_find(&r, graphs, 7, "layer 0: the residual stream after its attention part (blk.0.attn_*) is not "
                                       "finite at position 0 (row 0 of the batch), element 0"));
    rig_close(&r);
}
END_TEST

/* After a find the backend serves the next step (the word is reset every step), and with the check off the same
 * model runs; a finite model gives the same bits with the check on and off, graphs or not. */
START_TEST(test_after_a_find_and_off)
{
    const bool graphs = _i == 1;
    rig_t r;
    rig_open(&r, "qwen3moe", GUILD_TYPE_F32);
    const model_weights_t *w = model_weights(r.model);
    float *la = malloc((size_t)r.V * sizeof *la), *lb = malloc((size_t)r.V * sizeof *lb);
    guild_err_t err = {{0}};

    backend_t *on = open_backend(&r, "cuda", true, graphs), *off = open_backend(&r, "cuda", false, graphs);
    ck_assert_msg(run(on, prompt, N_PROMPT, la, &err) == 0, "%s", err.msg);
    ck_assert(run(off, prompt, N_PROMPT, lb, &err) == 0);
    ck_assert(!memcmp(la, lb, (size_t)r.V * sizeof *la));
    for (int step = 0; step < 6; step++) {
        const int32_t t = (int32_t)(step * 37 % r.V);
        ck_assert_msg(run(on, &t, 1, la, &err) == 0, "%s", err.msg);
        ck_assert(run(off, &t, 1, lb, &err) == 0);
        ck_assert_msg(!memcmp(la, lb, (size_t)r.V * sizeof *la), "step %d: the check changed the logits", step);
    }
    backend_destroy(&on);
    backend_destroy(&off);

    *poke(&w->token_embd, 99 * r.E) = INFINITY; /* uploaded by the backends opened now */
    on = open_backend(&r, "cuda", true, graphs);
    off = open_backend(&r, "cuda", false, graphs);
    ck_assert(run(on, prompt, N_PROMPT, la, &err) == 0);
    const int32_t bad = 99, good = 5;
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(run(on, &bad, 1, la, &err), -1);
        ck_assert_int_eq(backend_kv_len(on), N_PROMPT + k);
        ck_assert_msg(run(on, &good, 1, la, &err) == 0, "after a find: %s", err.msg);
    }
    ck_assert(run(off, prompt, N_PROMPT, lb, &err) == 0);
    ck_assert_msg(run(off, &bad, 1, lb, &err) == 0, "check off: %s", err.msg);
    backend_destroy(&on);
    backend_destroy(&off);
    free(la);
    free(lb);
    rig_close(&r);
}
END_TEST

int main(void)
{
    if (!cuda_test_device(0))
        return 77;
    Suite *s = suite_create("cuda_finite");
    TCase *tc = tcase_create("finite");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_same_finds, 0, 2);
    tcase_add_loop_test(tc, test_after_a_find_and_off, 0, 2);
    suite_add_tcase(s, tc);
    return cuda_test_run(s, NULL);
}
