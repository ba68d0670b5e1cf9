/* The non-finite check of the layer programs (gpu-worker/dense/finite_check.h) on the CPU backend: the checked
 * norm gives cpu_rmsnorm's bits and classifies what it finds, the keys order finds as the header says, the
 * messages name the layer, the tensor and the position, and a backend over a model with a planted NaN or
 * infinity fails its forward call with them (and keeps serving the rows that are finite) while the same model
 * runs with the check off. tests/cuda/check_cuda_finite.c holds the CUDA backend to the same finds. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu-expert-worker/experts/moe_local.h"
#include "gpu-worker/dense/backend.h"
#include "gpu-worker/dense/cpu/cpu_kernels.h"
#include "gpu-worker/dense/finite_check.h"
#include "tests/check_run.h"
#include "tests/tiny_model.h"

START_TEST(test_norm_bits_and_classes)
{
    enum { N = 200 };
    float x[N], w[N], a[N], b[N];
    srand(7);
    for (int i = 0; i < N; i++) {
        x[i] = (float)rand() / RAND_MAX * 4.0f - 2.0f;
        w[i] = (float)rand() / RAND_MAX + 0.5f;
    }
    cpu_rmsnorm(a, x, w, N, 1e-6f);
    ck_assert_uint_eq(cpu_rmsnorm_checked(b, x, w, N, 1e-6f), FINITE_NONE);
    ck_assert(!memcmp(a, b, sizeof a));

    /* the residual row: a NaN, an infinity, values whose squares overflow */
    x[33] = NAN;
    ck_assert_uint_eq(cpu_rmsnorm_checked(b, x, w, N, 1e-6f), FINITE_KEY(0, FINITE_RESIDUAL, 0, 33));
    x[33] = 1.0f;
    x[150] = -INFINITY;
    ck_assert_uint_eq(cpu_rmsnorm_checked(b, x, w, N, 1e-6f), FINITE_KEY(0, FINITE_RESIDUAL, 0, 150));
    x[150] = 3e19f;
    ck_assert_uint_eq(cpu_rmsnorm_checked(b, x, w, N, 1e-6f), FINITE_KEY(0, FINITE_RESIDUAL, 0, FINITE_ELEM_NONE));
    x[150] = 1.0f;
    /* the weight: the output only */
    w[9] = NAN;
    ck_assert_uint_eq(cpu_rmsnorm_checked(b, x, w, N, 1e-6f), FINITE_KEY(0, FINITE_NORMED, 0, 9));
    w[9] = 1.0f;
    w[10] = 3e38f; /* finite, but x * scale * w overflows where |x * scale| > 1.13 */
    x[10] = 2.0f;
    ck_assert_uint_eq(cpu_rmsnorm_checked(b, x, w, N, 1e-6f), FINITE_KEY(0, FINITE_NORMED, 0, 10));
}
END_TEST

START_TEST(test_keys_and_messages)
{
    /* the earliest site first, then the residual before the norm's output, then the row, then the element */
    ck_assert(FINITE_KEY(3, FINITE_NORMED, 900, 900) < FINITE_KEY(4, FINITE_RESIDUAL, 0, 0));
    ck_assert(FINITE_KEY(3, FINITE_RESIDUAL, 900, FINITE_ELEM_NONE) < FINITE_KEY(3, FINITE_NORMED, 0, 0));
    ck_assert(FINITE_KEY(3, FINITE_RESIDUAL, 1, 0) < FINITE_KEY(3, FINITE_RESIDUAL, 1, FINITE_ELEM_NONE));
    ck_assert(FINITE_KEY(3, FINITE_RESIDUAL, 1, FINITE_ELEM_NONE) < FINITE_KEY(3, FINITE_RESIDUAL, 2, 0));
    ck_assert(FINITE_KEY(FINITE_MAX_SITES - 2, 1, FINITE_MAX_ROWS - 1, FINITE_ELEM_NONE) < FINITE_NONE);

    const model_config_t c = {.n_layer = 4, .n_embd = 64};
    guild_err_t err = {{0}};
    ck_assert_int_eq(finite_report(FINITE_KEY(0, FINITE_RESIDUAL, 2, 5), &c, 10, &err), -1);
    ck_assert_msg(strstr(err.msg, "layer 0: its input, the token embedding (token_embd.weight), is not finite at "
                                  "position 12 (row 2 of the batch), element 5"), "%s", err.msg);
    finite_report(FINITE_KEY(5, FINITE_RESIDUAL, 0, 7), &c, 0, &err);
    ck_assert_msg(strstr(err.msg, "layer 2: the residual stream after its attention part (blk.2.attn_*) is not "
                                  "finite at position 0 (row 0 of the batch), element 7"), "%s", err.msg);
    finite_report(FINITE_KEY(6, FINITE_RESIDUAL, 1, FINITE_ELEM_NONE), &c, 0, &err);
    ck_assert_msg(strstr(err.msg, "layer 2: its output, the residual stream after its FFN part (blk.2.ffn_*), is not "
                                  "finite at position 1 (row 1 of the batch), its values are so large"), "%s", err.msg);
    finite_report(FINITE_KEY(8, FINITE_RESIDUAL, 0, 1), &c, 0, &err);
    ck_assert_msg(strstr(err.msg, "layer 3: its output, the residual stream after its FFN part (blk.3.ffn_*)"), "%s",
                  err.msg);
    finite_report(FINITE_KEY(8, FINITE_NORMED, 0, 1), &c, 0, &err);
    ck_assert_msg(strstr(err.msg, "layer 3: output_norm.weight makes the normed residual stream not finite"), "%s",
                  err.msg);
    finite_report(FINITE_KEY(3, FINITE_NORMED, 0, 1), &c, 0, &err);
    ck_assert_msg(strstr(err.msg, "layer 1: blk.1.ffn_norm.weight makes"), "%s", err.msg);

    const model_config_t big = {.n_layer = 9000, .n_embd = 64};
    ck_assert_int_eq(finite_check_fits(&c, 4096, &err), 0);
    ck_assert_int_eq(finite_check_fits(&big, 4096, &err), -1);
    ck_assert_msg(strstr(err.msg, "--check-finite off"), "%s", err.msg);
}
END_TEST

/* A cpu backend over a tiny model whose weights the test may poke (they live in the image). */
typedef struct rig {
    void *image;
    model_t *model;
    guild_pool_t *pool;
    moe_exec_t *moe;
    backend_t *on, *off;
    int32_t V;
} rig_t;

static void rig_open(rig_t *r, guild_type_t type)
{
    guild_err_t err = {{0}};
    size_t size;
    memset(r, 0, sizeof *r);
    tiny_spec_t s = tiny_spec("qwen2moe");
    s.wtype = type;
    s.n_ff_shexp = 64; /* whole Q8_0 blocks */
    tiny_model_image(&s, &r->image, &size);
    ck_assert_msg(tiny_model_open(r->image, size, &r->model, &err) == 0, "%s", err.msg);
    ck_assert(guild_pool_new(&r->pool, 2, NULL, &err) == 0);
    ck_assert(moe_local_new(&r->moe, r->model, r->pool, &err) == 0);
    backend_options_t o = {.n_ctx = 32, .n_batch = 8, .pool = r->pool, .moe = r->moe, .check_finite = true};
    ck_assert_msg(backend_new(&r->on, "cpu", r->model, &o, NULL, &err) == 0, "%s", err.msg);
    o.check_finite = false;
    ck_assert_msg(backend_new(&r->off, "cpu", r->model, &o, NULL, &err) == 0, "%s", err.msg);
    r->V = model_config(r->model)->n_vocab;
}

static void rig_close(rig_t *r)
{
    backend_destroy(&r->on);
    backend_destroy(&r->off);
    moe_exec_destroy(&r->moe);
    guild_pool_destroy(&r->pool);
    model_destroy(&r->model);
    free(r->image);
}

static float *poke(const model_tensor_t *t, int64_t i)
{
    return (float *)t->data + i;
}

/* forward of tokens at the cache's end, one logits row (the last): 0, or -1 with err */
static int run(backend_t *be, const int32_t *tok, int32_t n, float *logits, guild_err_t *err)
{
    int32_t pos[8], last = n - 1;
    for (int32_t i = 0; i < n; i++)
        pos[i] = backend_kv_len(be) + i;
    return backend_forward(be, n, tok, pos, 1, &last, logits, err);
}

START_TEST(test_backend_finds)
{
    rig_t r;
    rig_open(&r, _i == 0 ? GUILD_TYPE_Q8_0 : GUILD_TYPE_F32);
    const model_weights_t *w = model_weights(r.model);
    const int64_t E = model_config(r.model)->n_embd;
    float *la = malloc((size_t)r.V * sizeof *la), *lb = malloc((size_t)r.V * sizeof *lb);
    guild_err_t err = {{0}};
    const int32_t toks[] = {5, 9, 2, 40};

    /* finite: the same bits with the check on and off */
    ck_assert_msg(run(r.on, toks, 4, la, &err) == 0, "%s", err.msg);
    ck_assert(run(r.off, toks, 4, lb, &err) == 0);
    ck_assert(!memcmp(la, lb, (size_t)r.V * sizeof *la));
    backend_kv_clear(r.on);
    backend_kv_clear(r.off);

    /* a norm weight (a quantized model's products would hide it from the stream) */
    *poke(&w->layers[1].attn_norm, 17) = NAN;
    ck_assert_int_eq(run(r.on, toks, 4, la, &err), -1);
    ck_assert_msg(strstr(err.msg, "layer 1: blk.1.attn_norm.weight makes the normed residual stream not finite at "
                                  "position 0 (row 0 of the batch), element 17"), "%s", err.msg);
    ck_assert_int_eq(backend_kv_len(r.on), 0);
    ck_assert_int_eq(run(r.off, toks, 4, lb, &err), 0);
    *poke(&w->layers[1].attn_norm, 17) = 1.0f;
    backend_kv_clear(r.off);

    /* the output norm of the logits rows (the last row of the batch) */
    *poke(&w->output_norm, 3) = INFINITY;
    ck_assert_int_eq(run(r.on, toks, 4, la, &err), -1);
    ck_assert_msg(strstr(err.msg, "layer 1: output_norm.weight makes the normed residual stream not finite at "
                                  "position 3 (row 3 of the batch), element 3"), "%s", err.msg);
    *poke(&w->output_norm, 3) = 1.0f;

    if (_i == 1) {
        /* an F32 embedding row: only the batches with that token fail, at its position, and the cache is as before */
        const float keep = *poke(&w->token_embd, 40 * E + 6);
        *poke(&w->token_embd, 40 * E + 6) = NAN;
        ck_assert_int_eq(run(r.on, toks, 3, la, &err), 0);
        ck_assert_int_eq(run(r.on, toks + 3, 1, la, &err), -1);
        ck_assert_msg(strstr(err.msg, "layer 0: its input, the token embedding (token_embd.weight), is not finite at "
                                      "position 3 (row 0 of the batch), element 6"), "%s", err.msg);
        ck_assert_int_eq(backend_kv_len(r.on), 3);
        ck_assert_int_eq(run(r.on, toks, 1, la, &err), 0);
        *poke(&w->token_embd, 40 * E + 6) = keep;
        backend_kv_clear(r.on);

        /* a product of the FFN: found in the stream after the layer, at the next norm */
        const float down = *poke(&w->layers[0].shexp_down, 0);
        *poke(&w->layers[0].shexp_down, 0) = INFINITY;
        ck_assert_int_eq(run(r.on, toks, 4, la, &err), -1);
        ck_assert_msg(strstr(err.msg, "layer 0: its output, the residual stream after its FFN part (blk.0.ffn_*), is "
                                      "not finite at position 0 (row 0 of the batch), element 0"), "%s", err.msg);
        *poke(&w->layers[0].shexp_down, 0) = down;
    }
    free(la);
    free(lb);
    rig_close(&r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("finite");
    TCase *tc = tcase_create("norm");
    tcase_add_test(tc, test_norm_bits_and_classes);
    tcase_add_test(tc, test_keys_and_messages);
    suite_add_tcase(s, tc);
    tc = tcase_create("backend");
    tcase_add_loop_test(tc, test_backend_finds, 0, 2);
    suite_add_tcase(s, tc);
    return check_run(s);
}
