/* The CUDA backend's batch invariance (gpu-worker/dense/backend.h): rows appended in a batch of K rows, for every
 * K from 1 to CUDA_DECODE_ROWS, give the bits of the same rows run one at a time, logits and the cache they
 * leave. This is what makes a speculative verify step of K drafts equal K + 1 decode steps (coordinator/spec.h).
 *
 * Per model and cache precision: a reference backend takes a prompt (one prefill batch), then STEPS greedy
 * tokens one at a time, every step's logits kept. A second backend with the same settings takes the same prompt
 * batch, then for each K the same tokens in batches of K (every row's logits asked for), and must give every
 * row the reference's bits; between two K its cache is truncated back to the prompt. The prompt is long enough
 * for the decode attention to split the keys, and the steps cross a split boundary (128 keys: 2 -> 3 splits), so
 * a batch's rows have different split counts. Graphs (K <= CUDA_GRAPH_ROWS) and the direct path (K above, and a
 * second run with graphs off) both count; experts on the device, and through the host executor for qwen3moe.
 * Needs a CUDA device: without one, exit 77 (SKIP). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/quant/quant.h"
#include "gpu-worker/dense/backend.h"
#include "gpu-worker/dense/cuda/cuda_config.h"
#include "gpu-worker/dense/cuda/cuda_kernels.h"
#include "gpu-worker/dense/cuda/cuda_state.h" /* CUDA_GRAPH_ROWS */
#include "gpu-worker/dense/cuda/cuda_util.h"
#include "gpu-worker/dense/gpu_plan.h"
#include "gpu-worker/dense/kv_format.h"
#include "tests/cuda/cuda_test_model.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/tiny_model.h"

#define N_PROMPT 100 /* prompt rows: the steps sit at positions 100 .. 100 + STEPS - 1 */
#define STEPS 48
#define N_CTX 256

typedef struct batch_case {
    const char *arch;
    guild_type_t type;
    bool host_experts; /* the routed experts through the host executor (no resident expert, no graphs) */
} batch_case_t;

static const batch_case_t cases[] = {
    {"qwen3moe", GUILD_TYPE_Q4_K, false}, {"gpt-oss", GUILD_TYPE_Q8_0, false}, {"glm4moe", GUILD_TYPE_Q4_K, false},
    {"deepseek2", GUILD_TYPE_Q8_0, false}, {"llama", GUILD_TYPE_F32, false}, {"qwen3moe", GUILD_TYPE_Q4_K, true},
};
#define N_CASES (int)(sizeof cases / sizeof cases[0])

/* check_cuda_backend's shapes (cuda_test_spec). */
static tiny_spec_t batch_spec(const char *arch, guild_type_t type, uint64_t seed)
{
    tiny_spec_t s = tiny_spec(arch);
    cuda_test_spec(&s, type, seed);
    return s;
}

static backend_t *open_cuda(const cuda_test_model_t *tm, const cuda_config_t *cc, int32_t kv_type)
{
    guild_err_t err = {{0}};
    backend_t *be = NULL;
    const backend_options_t o = {.n_ctx = N_CTX, .n_batch = CUDA_DECODE_ROWS > N_PROMPT ? CUDA_DECODE_ROWS : N_PROMPT,
                                 .pool = tm->pool, .moe = tm->moe, .kv_type = kv_type};
    ck_assert_msg(backend_new(&be, "cuda", tm->model, &o, cc, &err) == 0, "%s", err.msg);
    return be;
}

/* Every K from 1 to CUDA_DECODE_ROWS on `be` (the prompt in its cache): the steps' tokens in batches of K, each
 * row's logits the reference's ref[step][V]. Returns the batches run. */
static int batches_equal(backend_t *be, const int32_t *toks, const float *ref, int32_t V, const char *what)
{
    float *lg = malloc((size_t)CUDA_DECODE_ROWS * (size_t)V * sizeof *lg);
    int32_t rows[CUDA_DECODE_ROWS];
    for (int32_t i = 0; i < CUDA_DECODE_ROWS; i++)
        rows[i] = i;
    int calls = 0;
    for (int32_t K = 1; K <= CUDA_DECODE_ROWS; K++) {
        backend_kv_truncate(be, N_PROMPT);
        ck_assert_int_eq(backend_kv_len(be), N_PROMPT);
        for (int32_t s0 = 0; s0 < STEPS; s0 += K) {
            const int32_t k = STEPS - s0 < K ? STEPS - s0 : K;
            cuda_test_forward(be, k, toks + s0, k, rows, lg);
            calls++;
            for (int32_t t = 0; t < k; t++) {
                const float *a = ref + (size_t)(s0 + t) * (size_t)V, *b = lg + (size_t)t * (size_t)V;
                for (int32_t i = 0; i < V; i++)
                    ck_assert_msg(a[i] == b[i] || (a[i] != a[i] && b[i] != b[i]),
                                  "%s: K = %d, position %d (row %d of its batch), logit %d: %.9g alone, %.9g in the "
                                  "batch", what, K, N_PROMPT + s0 + t, t, i, (double)a[i], (double)b[i]);
            }
        }
    }
    free(lg);
    return calls;
}

START_TEST(test_batch_invariant)
{
    const batch_case_t *bc = &cases[_i / 2];
    const bool kv_f32 = _i % 2;
    tiny_spec_t s = batch_spec(bc->arch, bc->type, 31 + (uint64_t)_i);
    cuda_test_model_t tm;
    cuda_test_model_open(&tm, &s);
    const int32_t V = model_config(tm.model)->n_vocab;
    cuda_config_t cc = {.gpu_expert_layers = bc->host_experts ? GPU_EXPERTS_NONE : 0};
    const int32_t kv_type = kv_f32 ? KV_TYPE_F32 : KV_TYPE_F16;
    backend_t *ref = open_cuda(&tm, &cc, kv_type);

    /* the reference: the prompt in one batch, then STEPS greedy tokens one at a time */
    int32_t prompt[N_PROMPT], toks[STEPS];
    for (int32_t i = 0; i < N_PROMPT; i++)
        prompt[i] = (int32_t)((i * 37 + 11) % V);
    float *lr = malloc((size_t)(STEPS + 1) * (size_t)V * sizeof *lr);
    const int32_t last = N_PROMPT - 1, row0 = 0;
    cuda_test_forward(ref, N_PROMPT, prompt, 1, &last, lr);
    int32_t tok = cuda_test_argmax(lr, V);
    for (int32_t st = 0; st < STEPS; st++) {
        toks[st] = tok;
        cuda_test_forward(ref, 1, &tok, 1, &row0, lr + (size_t)st * (size_t)V);
        tok = cuda_test_argmax(lr + (size_t)st * (size_t)V, V);
    }

    char what[96];
    int calls = 0;
    for (int graphs = 1; graphs >= 0; graphs--) {
        cuda_config_t c2 = cc;
        c2.no_graph = !graphs;
        backend_t *be = open_cuda(&tm, &c2, kv_type);
        float *lp = malloc((size_t)V * sizeof *lp);
        cuda_test_forward(be, N_PROMPT, prompt, 1, &last, lp);
        snprintf(what, sizeof what, "%s %s, %s cache%s, graphs %s", bc->arch, quant_type_info(bc->type)->name,
                 kv_f32 ? "f32" : "f16", bc->host_experts ? ", host experts" : "", graphs ? "on" : "off");
        calls += batches_equal(be, toks, lr, V, what);
        backend_stats_t bs; /* glm4moe and deepseek2 are not captured (their executors); the rest from 1 to 16 rows */
        ck_assert_int_eq(backend_stats(be, &bs), 0);
        if (graphs && !bc->host_experts && bs.graphs)
            ck_assert_msg(bs.graphs >= CUDA_GRAPH_ROWS, "%s: %u graphs captured", what, bs.graphs);
        free(lp);
        backend_destroy(&be);
    }
    printf("%-10s %-5s %s cache%s: batches of 1..%d rows = single rows, bit for bit (%d batches over %d positions)\n",
           bc->arch, quant_type_info(bc->type)->name, kv_f32 ? "f32" : "f16", bc->host_experts ? ", host experts" : "",
           CUDA_DECODE_ROWS, calls, STEPS);
    free(lr);
    backend_destroy(&ref);
    cuda_test_model_close(&tm);
}
END_TEST

int main(void)
{
    if (!cuda_test_device(0))
        return 77;
    Suite *s = suite_create("cuda_batch");
    TCase *tc = tcase_create("invariance");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_batch_invariant, 0, 2 * N_CASES);
    suite_add_tcase(s, tc);
    return cuda_test_run(s, NULL);
}
