/* A greedy step's pick on the device (cuda_logits_pick, gpu-worker/dense/cuda/logits_pick.cu; backend_forward_pick):
 * the kernel's ids, non-finite ids and their values equal the scalar reference's (logits_pick,
 * core/sample/logits_pick.h) bit for bit, on rows of random values, of few distinct values (ties), of -infinity
 * only, with NaNs (one at id 0), infinities, signed zeros and the maximum in the last element, at lengths around
 * the block's and the Qwen3 vocabulary; and the CUDA backend's pick steps (graphs and the direct path, several
 * sequences in a batch): each row's pick is logits_pick of the row backend_forward_seq gives, the rows asked for in
 * full are those bytes, also in a step of more rows than the device's logits buffer (picked on the host). Needs a
 * CUDA device: without one, exit 77 (SKIP). */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/sample/logits_pick.h"
#include "cpu-expert-worker/experts/moe_local.h"
#include "gpu-worker/dense/backend.h"
#include "gpu-worker/dense/cuda/cuda_config.h"
#include "gpu-worker/dense/cuda/cuda_kernels.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/tiny_model.h"

static cudaStream_t stream;

static uint64_t next(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* Row r of a case: kind k of values (see the file's comment). */
static void fill(float *x, int32_t n, int kind, uint64_t *s)
{
    for (int32_t i = 0; i < n; i++)
        x[i] = kind == 1 ? (float)(next(s) % 5) - 2.0f : (float)next(s) / (float)(1u << 31) * 40.0f - 20.0f;
    switch (kind) {
    case 2:
        for (int32_t i = 0; i < n; i++)
            x[i] = -INFINITY;
        break;
    case 3:
        x[0] = NAN;
        for (int32_t i = 1; i < n; i += 97)
            x[i] = NAN;
        break;
    case 4:
        x[n / 2] = INFINITY;
        x[n - 1] = INFINITY;
        x[n / 3] = -INFINITY;
        break;
    case 5: /* every value a zero of either sign: the first wins */
        for (int32_t i = 0; i < n; i++)
            x[i] = next(s) % 2 ? 0.0f : -0.0f;
        break;
    case 6:
        x[n - 1] = 1000.0f;
        break;
    case 7:
        for (int32_t i = 0; i < n; i++)
            x[i] = NAN;
        break;
    case 8: /* -NAN (sign bit set) at the first non-finite place, its bits kept */
        x[n - 1] = -NAN;
        break;
    default:
        break;
    }
}

START_TEST(test_kernel)
{
    guild_err_t err = {{0}};
    static const int32_t lengths[] = {1, 2, 31, 33, 1023, 1024, 1025, 4097, 151936};
    enum { ROWS = 9, PAD = 5 };
    uint64_t s = 77;
    for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
        const int32_t n = lengths[li];
        const size_t ld = (size_t)n + PAD;
        float *h = malloc((size_t)ROWS * ld * sizeof *h), *d = NULL;
        logits_pick_t got[ROWS], *dp = NULL;
        ck_assert_ptr_nonnull(h);
        for (int r = 0; r < ROWS; r++)
            fill(h + (size_t)r * ld, n, r, &s);
        ck_assert(cudaMalloc((void **)&d, (size_t)ROWS * ld * sizeof *d) == cudaSuccess);
        ck_assert(cudaMalloc((void **)&dp, sizeof got) == cudaSuccess);
        ck_assert(cudaMemcpy(d, h, (size_t)ROWS * ld * sizeof *d, cudaMemcpyHostToDevice) == cudaSuccess);
        ck_assert_msg(cuda_logits_pick(d, ROWS, n, ld, dp, stream, &err) == 0, "%s", err.msg);
        ck_assert(cudaStreamSynchronize(stream) == cudaSuccess);
        ck_assert(cudaMemcpy(got, dp, sizeof got, cudaMemcpyDeviceToHost) == cudaSuccess);
        for (int r = 0; r < ROWS; r++) {
            const logits_pick_t want = logits_pick(h + (size_t)r * ld, n);
            ck_assert_msg(got[r].id == want.id && got[r].nonfinite == want.nonfinite,
                          "n %d, kind %d: id %d / %d, non-finite %d / %d", n, r, got[r].id, want.id,
                          got[r].nonfinite, want.nonfinite);
            ck_assert_msg(!memcmp(&got[r].bad, &want.bad, sizeof want.bad), "n %d, kind %d: the non-finite value's bits",
                          n, r);
        }
        cudaFree(d);
        cudaFree(dp);
        free(h);
    }
    /* the kinds' answers themselves, at one length */
    float x[64];
    fill(x, 64, 2, &s);
    ck_assert_int_eq(logits_pick(x, 64).id, 0);
    ck_assert_int_eq(logits_pick(x, 64).nonfinite, 0);
    fill(x, 64, 6, &s);
    ck_assert_int_eq(logits_pick(x, 64).id, 63);
    ck_assert_int_eq(logits_pick(x, 64).nonfinite, -1);
    ck_assert_int_eq(cuda_logits_pick(NULL, 1, 0, 0, NULL, stream, &err), -1);
}
END_TEST

/* Two CUDA backends of one tiny model: a runs forward_seq (the rows), b forward_pick (the picks). */
typedef struct pick_pair {
    void *image;
    model_t *m;
    guild_pool_t *pool;
    moe_exec_t *moe;
    backend_t *a, *b;
    float *la, *lb; /* [n_batch x V]: a's rows, b's rows asked for in full */
    int32_t V;
} pick_pair_t;

static backend_t *open_cuda(const pick_pair_t *p, bool graphs, int32_t n_batch)
{
    guild_err_t err = {{0}};
    backend_t *be = NULL;
    const backend_options_t o = {.n_ctx = 64, .n_batch = n_batch, .pool = p->pool, .moe = p->moe, .n_seq = 3};
    const cuda_config_t cc = {.no_graph = !graphs};
    ck_assert_msg(backend_new(&be, "cuda", p->m, &o, &cc, &err) == 0, "%s", err.msg);
    return be;
}

static void pair_open(pick_pair_t *p, bool graphs, int32_t n_batch)
{
    guild_err_t err = {{0}};
    *p = (pick_pair_t){0};
    tiny_spec_t sp = tiny_spec("qwen3moe");
    cuda_test_shape(&sp, GUILD_TYPE_Q8_0, 29);
    p->m = tiny_model_load(&sp, &p->image);
    ck_assert(guild_pool_new(&p->pool, 2, NULL, &err) == 0);
    ck_assert(moe_local_new(&p->moe, p->m, p->pool, &err) == 0);
    p->V = model_config(p->m)->n_vocab;
    p->a = open_cuda(p, graphs, n_batch);
    p->b = open_cuda(p, graphs, n_batch);
    p->la = malloc((size_t)n_batch * (size_t)p->V * sizeof *p->la);
    p->lb = backend_logits_alloc(p->b, (size_t)n_batch * (size_t)p->V);
    ck_assert(p->la && p->lb);
}

static void pair_close(pick_pair_t *p)
{
    backend_logits_free(p->b, p->lb);
    free(p->la);
    backend_destroy(&p->a);
    backend_destroy(&p->b);
    moe_exec_destroy(&p->moe);
    guild_pool_destroy(&p->pool);
    model_destroy(&p->m);
    free(p->image);
}

/* One step on both: each pick is logits_pick of a's row, the rows asked for in full are a's bytes. */
static void pair_step(pick_pair_t *p, int step, int32_t n, const int32_t *tok, const int32_t *seq,
                      const int32_t *pos, int32_t n_out, const int32_t *rows, const uint8_t *full)
{
    guild_err_t err = {{0}};
    const int32_t V = p->V;
    logits_pick_t *picks = malloc((size_t)n_out * sizeof *picks);
    ck_assert(picks);
    memset(picks, 0xff, (size_t)n_out * sizeof *picks);
    ck_assert_msg(backend_forward_seq(p->a, n, tok, seq, pos, n_out, rows, p->la, &err) == 0, "%s", err.msg);
    memset(p->lb, 0xff, (size_t)n_out * (size_t)V * sizeof *p->lb);
    ck_assert_msg(backend_forward_pick(p->b, n, tok, seq, pos, n_out, rows, V, full, p->lb, picks, &err) == 0, "%s",
                  err.msg);
    for (int32_t j = 0; j < n_out; j++) {
        const float *row = p->la + (size_t)j * (size_t)V;
        const logits_pick_t want = logits_pick(row, V);
        ck_assert_msg(picks[j].id == want.id && picks[j].nonfinite == want.nonfinite,
                      "step %d, row %d of %d: pick %d, the row's %d", step, j, n_out, picks[j].id, want.id);
        if (full[j])
            ck_assert_msg(!memcmp(p->lb + (size_t)j * (size_t)V, row, (size_t)V * sizeof *row),
                          "step %d, row %d of %d: the row asked in full differs", step, j, n_out);
    }
    free(picks);
    for (int32_t q = 0; q < 3; q++)
        ck_assert_int_eq(backend_seq_kv_len(p->a, q), backend_seq_kv_len(p->b, q));
}

START_TEST(test_backend)
{
    pick_pair_t p;
    pair_open(&p, _i == 1, 16);
    int32_t tok[16], seq[16], pos[16], rows[16];
    uint8_t full[16];
    uint64_t s = 5;
    /* prompts of 6, 3 and 7 tokens (one batch of 16), then 6 steps of a row each (sequence 1 sits out every other
     * step) */
    const int32_t plen[3] = {6, 3, 7};
    for (int step = 0; step < 7; step++) {
        int32_t n = 0, n_out = 0;
        for (int32_t q = 0; q < 3; q++) {
            if (step > 0 && q == 1 && step % 2)
                continue;
            const int32_t k = step == 0 ? plen[q] : 1;
            for (int32_t i = 0; i < k; i++) {
                tok[n] = (int32_t)(next(&s) % (uint64_t)p.V);
                seq[n] = q;
                pos[n] = backend_seq_kv_len(p.a, q) + i;
                n++;
            }
            full[n_out] = (uint8_t)((step + q) % 3 == 0);
            rows[n_out++] = n - 1;
        }
        pair_step(&p, step, n, tok, seq, pos, n_out, rows, full);
    }
    pair_close(&p);
}
END_TEST

/* More output rows than the backend's logits buffer holds (LOGIT_ROWS, 32): a pick step of a 44-token prompt asking
 * for every row takes the rows to the host and picks there; each pick is still logits_pick of its row, the rows
 * asked for in full those bytes, and the next step (3 rows, on the device, the first two in full) follows from the
 * same cache. */
START_TEST(test_backend_many_rows)
{
    pick_pair_t p;
    pair_open(&p, false, 48);
    int32_t tok[44], seq[44], pos[44], rows[44];
    uint8_t full[44];
    uint64_t s = 11;
    for (int step = 0; step < 2; step++) {
        const int32_t n = step == 0 ? 44 : 3; /* the prompt of sequence 0, then a row of each of 3 sequences */
        for (int32_t i = 0; i < n; i++) {
            tok[i] = (int32_t)(next(&s) % (uint64_t)p.V);
            seq[i] = step == 0 ? 0 : i;
            pos[i] = step == 0 ? i : backend_seq_kv_len(p.a, i);
            rows[i] = i;
            full[i] = (uint8_t)(step == 0 ? i % 5 == 0 : i < 2); /* then two adjacent rows: one copy */
        }
        pair_step(&p, step, n, tok, seq, pos, n, rows, full);
    }
    pair_close(&p);
}
END_TEST

int main(void)
{
    if (!cuda_test_device(0))
        return 77;
    Suite *s = suite_create("cuda_pick");
    TCase *tc = tcase_create("pick");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_kernel);
    tcase_add_loop_test(tc, test_backend, 0, 2);
    tcase_add_test(tc, test_backend_many_rows);
    suite_add_tcase(s, tc);
    return cuda_test_run(s, &stream);
}
