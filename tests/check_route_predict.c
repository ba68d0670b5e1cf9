/* Tests for the routing-prediction observer (bench/route_predict.h) on tiny models through the cpu backend:
 * a layer whose router ignores its input (zero weights: every token the lowest ids) is predicted exactly by
 * pre-gating and by the previous token, and only there; one token repeated is predicted exactly by the previous
 * token at every layer; a layer whose residual stream did not move since the layer before (that layer's FFN and
 * this one's attention zeroed) is predicted exactly by pre-gating renormed with its own norm weights; the counts are the tokens the predictors could score; the results are unchanged. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "bench/route_predict.h"
#include "cpu-expert-worker/experts/moe_local.h"
#include "gpu-worker/dense/backend.h"
#include "tests/check_run.h"
#include "tests/tiny_model.h"

typedef struct rig {
    void *image;
    model_t *model;
    guild_pool_t *pool;
    moe_exec_t *local;
    route_predict_t *rp;
    backend_t *be;
} rig_t;

enum { NB = 8, N_CTX = 32 };

static void zero(const model_tensor_t *w)
{
    if (w->data) {
        ck_assert_int_eq(w->type, GUILD_TYPE_F32);
        memset((void *)w->data, 0, w->row_bytes * (size_t)(w->ne[1] * w->ne[2] * w->ne[3]));
    }
}

/* zero_layer >= 0: that layer's router weights set to 0. still: layer 0's FFN and layer 1's attention add
 * nothing to the residual stream (their output weights 0), so layer 1's FFN sees the residual layer 0's FFN saw */
static void rig_open_still(rig_t *r, bool observe, int zero_layer, bool still)
{
    guild_err_t err = {{0}};
    size_t size;
    memset(r, 0, sizeof *r);
    tiny_spec_t s = tiny_spec("qwen3moe");
    s.n_layer = 3;
    tiny_model_image(&s, &r->image, &size);
    ck_assert_msg(tiny_model_open(r->image, size, &r->model, &err) == 0, "%s", err.msg);
    const model_weights_t *mw = model_weights(r->model);
    if (zero_layer >= 0)
        zero(&model_block(mw, zero_layer)->router);
    if (still) {
        zero(&model_block(mw, 0)->down_exps);
        zero(&model_block(mw, 0)->shexp_down);
        zero(&model_block(mw, 1)->wo);
        zero(&model_block(mw, 1)->bo);
        /* layer 1's FFN norm weights unlike layer 0's (the tiny models' are alike) */
        const model_tensor_t *g = &model_block(mw, 1)->ffn_norm;
        float *gd = (float *)g->data;
        for (int64_t i = 0; i < g->ne[0]; i++)
            gd[i] *= i % 3 ? 0.25f : 3.0f;
    }
    ck_assert_msg(guild_pool_new(&r->pool, 2, NULL, &err) == 0, "%s", err.msg);
    ck_assert_msg(moe_local_new(&r->local, r->model, r->pool, &err) == 0, "%s", err.msg);
    moe_exec_t *ex = r->local;
    if (observe) {
        ck_assert_msg(route_predict_new(&r->rp, r->model, r->local, r->pool, NB, &err) == 0, "%s", err.msg);
        ex = route_predict_exec(r->rp);
    }
    backend_options_t o = {.n_ctx = N_CTX, .n_batch = NB, .pool = r->pool, .moe = ex, .all_rows = true};
    ck_assert_msg(backend_new(&r->be, "cpu", r->model, &o, NULL, &err) == 0, "%s", err.msg);
}

static void rig_open(rig_t *r, bool observe, int zero_layer)
{
    rig_open_still(r, observe, zero_layer, false);
}

static void rig_close(rig_t *r)
{
    backend_destroy(&r->be);
    route_predict_destroy(&r->rp);
    ck_assert_ptr_null(r->rp);
    moe_exec_destroy(&r->local);
    guild_pool_destroy(&r->pool);
    model_destroy(&r->model);
    free(r->image);
}

/* n_prompt tokens in one batch, then n_gen one at a time; the logits of every step into out[(1 + n_gen)][V] */
static void run(rig_t *r, const int32_t *toks, int32_t n_prompt, int32_t n_gen, bool count_prompt, float *out)
{
    guild_err_t err = {{0}};
    const int32_t V = model_config(r->model)->n_vocab, last = n_prompt - 1, zero = 0;
    int32_t pos[NB];
    for (int32_t i = 0; i < n_prompt; i++)
        pos[i] = i;
    if (r->rp)
        route_predict_counting(r->rp, count_prompt);
    ck_assert_msg(backend_forward(r->be, n_prompt, toks, pos, 1, &last, out, &err) == 0, "%s", err.msg);
    if (r->rp)
        route_predict_counting(r->rp, true);
    for (int32_t g = 0; g < n_gen; g++) {
        const int32_t p = n_prompt + g;
        ck_assert_msg(backend_forward(r->be, 1, toks + p, &p, 1, &zero, out + (size_t)(g + 1) * V, &err) == 0,
                      "%s", err.msg);
    }
}

static const int32_t toks[] = {5, 17, 42, 3, 88, 1, 60, 33, 95, 7, 70, 2, 51, 9};
enum { N_PROMPT = 6, N_GEN = 8 };

START_TEST(zero_router_exact)
{
    rig_t r;
    rig_open(&r, true, 1);
    const int32_t V = model_config(r.model)->n_vocab, K = model_config(r.model)->n_expert_used;
    float *out = malloc((size_t)(1 + N_GEN) * V * sizeof *out);
    run(&r, toks, N_PROMPT, N_GEN, false, out);
    for (int kind = 0; kind < ROUTE_PREDICT_KINDS; kind++) {
        /* layer 1's routing is every token's lowest ids: each predictor has it, at every m */
        ck_assert_uint_eq(route_predict_tokens(r.rp, 1, kind), N_GEN);
        for (int32_t m = 1; m <= K; m++)
            ck_assert_uint_eq(route_predict_hits(r.rp, 1, kind, m), (uint64_t)m * N_GEN);
    }
    /* layer 0 has no layer before it to pre-gate from; prev there is scored on every decoded token */
    ck_assert_uint_eq(route_predict_tokens(r.rp, 0, ROUTE_PREDICT_PREGATE), 0);
    ck_assert_uint_eq(route_predict_tokens(r.rp, 0, ROUTE_PREDICT_PREV), N_GEN);
    /* layer 2 (random router) is predicted from layer 1's input by layer 2's router: not exactly, since the
     * tokens' hidden states differ (that the prediction is made from another state than the truth's) */
    ck_assert_uint_eq(route_predict_tokens(r.rp, 2, ROUTE_PREDICT_PREGATE), N_GEN);
    ck_assert_uint_lt(route_predict_hits(r.rp, 2, ROUTE_PREDICT_PREGATE, K), (uint64_t)K * N_GEN);
    for (int kind = 0; kind < ROUTE_PREDICT_KINDS; kind++)
        for (int32_t m = 1; m < K; m++) /* hits among the first m grow with m by at most one a token */
            ck_assert_uint_le(route_predict_hits(r.rp, 2, kind, m), route_predict_hits(r.rp, 2, kind, m + 1));

    /* the same logits without the observer */
    rig_t q;
    rig_open(&q, false, 1);
    float *ref = malloc((size_t)(1 + N_GEN) * V * sizeof *ref);
    run(&q, toks, N_PROMPT, N_GEN, false, ref);
    ck_assert(memcmp(out, ref, (size_t)(1 + N_GEN) * V * sizeof *out) == 0);
    rig_close(&q);
    free(ref);
    free(out);
    rig_close(&r);
}
END_TEST

START_TEST(repeated_token_prev_exact)
{
    rig_t r;
    rig_open(&r, true, -1);
    const int32_t V = model_config(r.model)->n_vocab, K = model_config(r.model)->n_expert_used;
    int32_t same[N_PROMPT + N_GEN];
    for (int i = 0; i < N_PROMPT + N_GEN; i++)
        same[i] = 42;
    float *out = malloc((size_t)(1 + N_GEN) * V * sizeof *out);
    run(&r, same, N_PROMPT, N_GEN, true, out);
    for (int32_t il = 0; il < 3; il++) {
        /* every row but the very first has a previous token: within the prompt's batch, and across batches */
        ck_assert_uint_eq(route_predict_tokens(r.rp, il, ROUTE_PREDICT_PREV), N_PROMPT + N_GEN - 1);
        ck_assert_uint_eq(route_predict_hits(r.rp, il, ROUTE_PREDICT_PREV, K), (uint64_t)K * (N_PROMPT + N_GEN - 1));
        ck_assert_uint_eq(route_predict_tokens(r.rp, il, ROUTE_PREDICT_PREGATE), il ? N_PROMPT + N_GEN : 0);
    }
    free(out);
    rig_close(&r);

    /* distinct tokens: the previous token's experts are not all the same as this one's somewhere */
    rig_open(&r, true, -1);
    out = malloc((size_t)(1 + N_GEN) * V * sizeof *out);
    run(&r, toks, N_PROMPT, N_GEN, true, out);
    uint64_t hits = 0, want = 0;
    for (int32_t il = 0; il < 3; il++) {
        hits += route_predict_hits(r.rp, il, ROUTE_PREDICT_PREV, K);
        want += (uint64_t)K * route_predict_tokens(r.rp, il, ROUTE_PREDICT_PREV);
    }
    ck_assert_uint_lt(hits, want);
    free(out);
    rig_close(&r);
}
END_TEST

START_TEST(still_residual_pregate_exact)
{
    rig_t r;
    rig_open_still(&r, true, -1, true);
    const int32_t V = model_config(r.model)->n_vocab, K = model_config(r.model)->n_expert_used;
    float *out = malloc((size_t)(1 + N_GEN) * V * sizeof *out);
    run(&r, toks, N_PROMPT, N_GEN, true, out);
    /* layer 1's router on layer 0's FFN input renormed with layer 1's ffn_norm is layer 1's routing; the same
     * input with layer 0's norm weights is not (the two layers' norm weights differ) */
    ck_assert_uint_eq(route_predict_tokens(r.rp, 1, ROUTE_PREDICT_PREGATE), N_PROMPT + N_GEN);
    ck_assert_uint_eq(route_predict_hits(r.rp, 1, ROUTE_PREDICT_PREGATE, K), (uint64_t)K * (N_PROMPT + N_GEN));
    ck_assert_uint_lt(route_predict_hits(r.rp, 1, ROUTE_PREDICT_PREGATE_RAW, K), (uint64_t)K * (N_PROMPT + N_GEN));
    /* layer 2's residual moved on (layer 1's FFN and layer 2's attention): not exact there */
    ck_assert_uint_lt(route_predict_hits(r.rp, 2, ROUTE_PREDICT_PREGATE, K), (uint64_t)K * (N_PROMPT + N_GEN));
    free(out);
    rig_close(&r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("route_predict");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, zero_router_exact);
    tcase_add_test(tc, repeated_token_prev_exact);
    tcase_add_test(tc, still_residual_pregate_exact);
    suite_add_tcase(s, tc);
    return check_run(s);
}
