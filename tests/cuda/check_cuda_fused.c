/* The fused block norm (cuda_rmsnorm_fused: residual update + RMSNorm + quantization for the next product in one
 * launch) against the separate launches it replaces, bit for bit, and the CUDA backend with its layer program
 * fused (the default) against the same backend with cuda_config_t.no_fuse, bit for bit.
 *
 * Kernel cases: every residual update (none, the residual addition, the MoE combine alone, with an ungated and
 * with a sigmoid-gated shared expert) by every quantization (none, Q8_0, Q8_1, Q8_K, F32) by row width (256, 2048
 * and 96 (three warps): one kernel; 4096: the separate launches it falls back to), over 1 and 5 rows, with a NaN
 * planted in some cases so that the non-finite check's word is compared too. The residual stream x, the normed
 * rows, the quantized bytes and the check's word must all equal the separate launches'.
 *
 * Backend cases: tiny models of the architectures whose layer program the fusion changes (qwen3moe Q4_K with
 * experts on the device and through the host executor, qwen2moe's gated shared expert, glm4moe's ungated one and
 * leading dense layer, gpt-oss Q8_0, llama's dense FFN in Q8_0 and F32): a prompt in one batch, then greedy decode
 * steps, with graphs and without; every logit equal to the unfused backend's.
 * Needs a CUDA device: without one, exit 77 (SKIP). Check runs without fork: a CUDA context does not survive
 * fork(). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "core/quant/quant.h"
#include "core/sample/rng.h"
#include "cpu-expert-worker/experts/moe_local.h"
#include "gpu-worker/dense/backend.h"
#include "gpu-worker/dense/cuda/cuda_config.h"
#include "gpu-worker/dense/cuda/cuda_kernels.h"
#include "gpu-worker/dense/cuda/cuda_util.h"
#include "gpu-worker/dense/finite_check.h"
#include "gpu-worker/dense/gpu_plan.h"
#include "gpu-worker/dense/kv_format.h"
#include "tests/tiny_model.h"

#define CK_CUDA(call) ck_assert_msg((call) == cudaSuccess, "%s: %s", #call, cudaGetErrorString(cudaGetLastError()))

static cudaStream_t stream;

/* ---- the kernel -------------------------------------------------------------------------------------------- */

enum { PRE_NONE, PRE_ADD, PRE_COMBINE, PRE_COMBINE_SH, PRE_COMBINE_GATED, N_PRE };
static const char *const pre_names[N_PRE] = {"none", "add", "combine", "combine+shared", "combine+gated shared"};
static const guild_type_t q_types[] = {GUILD_TYPE_COUNT, GUILD_TYPE_Q8_0, GUILD_TYPE_Q8_1, GUILD_TYPE_Q8_K,
                                       GUILD_TYPE_F32}; /* GUILD_TYPE_COUNT: no quantization */
#define N_Q (int)(sizeof q_types / sizeof q_types[0])
static const int64_t widths[] = {256, 2048, 4096, 96};
#define N_W (int)(sizeof widths / sizeof widths[0])
#define N_USED 8

static float *upload(const float *h, size_t n)
{
    float *d = NULL;
    CK_CUDA(cudaMalloc((void **)&d, n * sizeof *d));
    CK_CUDA(cudaMemcpy(d, h, n * sizeof *d, cudaMemcpyHostToDevice));
    return d;
}

static void fill(rng_t *r, float *x, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(scale * (2 * rng_uniform(r) - 1)) * ((i / 32) % 3 == 0 ? 0.05f : 1.0f);
}

START_TEST(test_fused_kernel)
{
    const int pre_kind = _i % N_PRE, qi = (_i / N_PRE) % N_Q, wi = _i / (N_PRE * N_Q);
    const int64_t n = widths[wi];
    const guild_type_t qt = q_types[qi];
    const bool quant = qt != GUILD_TYPE_COUNT;
    if (quant && qt == GUILD_TYPE_Q8_K && n % 256) /* not a whole number of Q8_K blocks: refused by both */
        return;
    const int rows = 1 + 4 * (_i % 2);
    const bool nan = _i % 7 == 3; /* a planted NaN: the non-finite check's word is compared too */
    rng_t r;
    rng_seed(&r, 7 + (uint64_t)_i);
    const size_t nx = (size_t)rows * (size_t)n, ny = nx * N_USED;
    float *x = malloc(nx * sizeof *x), *p = malloc(nx * sizeof *p), *w = malloc((size_t)n * sizeof *w);
    float *y = malloc(ny * sizeof *y), *rw = malloc((size_t)rows * N_USED * sizeof *rw);
    float *lg = malloc((size_t)rows * sizeof *lg);
    fill(&r, x, nx, 2.0f);
    fill(&r, p, nx, 1.0f);
    fill(&r, w, (size_t)n, 1.5f);
    fill(&r, y, ny, 1.0f);
    fill(&r, rw, (size_t)rows * N_USED, 0.5f);
    fill(&r, lg, (size_t)rows, 3.0f);
    if (nan)
        (pre_kind == PRE_ADD ? p : x)[nx - 3] = NAN;

    cuda_norm_pre_t pre = {CUDA_PRE_NONE};
    float *dp = upload(p, nx), *dy = upload(y, ny), *drw = upload(rw, (size_t)rows * N_USED);
    float *dlg = upload(lg, (size_t)rows), *dw = upload(w, (size_t)n);
    if (pre_kind == PRE_ADD)
        pre = (cuda_norm_pre_t){.kind = CUDA_PRE_ADD, .p = dp};
    else if (pre_kind >= PRE_COMBINE)
        pre = (cuda_norm_pre_t){.kind = CUDA_PRE_COMBINE, .y = dy, .w = drw,
                                .sh = pre_kind >= PRE_COMBINE_SH ? dp : NULL,
                                .sh_logit = pre_kind == PRE_COMBINE_GATED ? dlg : NULL, .n_used = N_USED};

    uint64_t qrow = 0;
    guild_err_t err = {{0}};
    if (quant)
        ck_assert(quant_row_bytes(qt, (uint64_t)n, &qrow, &err) == 0);
    const size_t qstride = (size_t)qrow + 16, qbytes = quant ? (size_t)rows * qstride : 1;
    /* [0]: the separate launches, [1]: the fused one */
    float *dx[2], *dout[2];
    void *dq[2];
    uint64_t *dfound[2];
    for (int k = 0; k < 2; k++) {
        dx[k] = upload(x, nx);
        CK_CUDA(cudaMalloc((void **)&dout[k], nx * sizeof(float)));
        CK_CUDA(cudaMemset(dout[k], 0xff, nx * sizeof(float)));
        CK_CUDA(cudaMalloc(&dq[k], qbytes));
        CK_CUDA(cudaMemset(dq[k], 0xa5, qbytes));
        CK_CUDA(cudaMalloc((void **)&dfound[k], sizeof(uint64_t)));
        CK_CUDA(cudaMemset(dfound[k], 0xff, sizeof(uint64_t)));
    }
    const uint32_t site = 5;
    const float eps = 1e-6f;
    /* the separate launches */
    if (pre.kind == CUDA_PRE_ADD)
        ck_assert_msg(cuda_add(dx[0], dp, (int64_t)nx, stream, &err) == 0, "%s", err.msg);
    else if (pre.kind == CUDA_PRE_COMBINE)
        ck_assert_msg(cuda_moe_combine(dx[0], dy, drw, pre.sh, pre.sh_logit, rows, N_USED, n, stream, &err) == 0,
                      "%s", err.msg);
    ck_assert_msg(cuda_rmsnorm_checked(dout[0], n, dx[0], n, NULL, dw, n, rows, eps, dfound[0], site, stream, &err) ==
                      0, "%s", err.msg);
    if (quant)
        ck_assert_msg(cuda_quantize(qt, dout[0], n, dq[0], qstride, n, rows, stream, &err) == 0, "%s", err.msg);
    /* the fused one */
    ck_assert_msg(cuda_rmsnorm_fused(dout[1], dx[1], dw, n, rows, eps, dfound[1], site, &pre, qt, quant ? dq[1] : NULL,
                                     qstride, stream, &err) == 0, "%s", err.msg);
    CK_CUDA(cudaStreamSynchronize(stream));

    float *hx[2], *hout[2];
    unsigned char *hq[2];
    uint64_t found[2];
    for (int k = 0; k < 2; k++) {
        hx[k] = malloc(nx * sizeof(float));
        hout[k] = malloc(nx * sizeof(float));
        hq[k] = malloc(qbytes);
        CK_CUDA(cudaMemcpy(hx[k], dx[k], nx * sizeof(float), cudaMemcpyDeviceToHost));
        CK_CUDA(cudaMemcpy(hout[k], dout[k], nx * sizeof(float), cudaMemcpyDeviceToHost));
        CK_CUDA(cudaMemcpy(hq[k], dq[k], qbytes, cudaMemcpyDeviceToHost));
        CK_CUDA(cudaMemcpy(&found[k], dfound[k], sizeof(uint64_t), cudaMemcpyDeviceToHost));
    }
    const char *qname = quant ? quant_type_info(qt)->name : "none";
    for (size_t i = 0; i < nx; i++) {
        ck_assert_msg(!memcmp(&hx[0][i], &hx[1][i], sizeof(float)), "%s, %s, n %lld: x[%zu] %.9g separate, %.9g fused",
                      pre_names[pre_kind], qname, (long long)n, i, (double)hx[0][i], (double)hx[1][i]);
        ck_assert_msg(!memcmp(&hout[0][i], &hout[1][i], sizeof(float)),
                      "%s, %s, n %lld: xn[%zu] %.9g separate, %.9g fused", pre_names[pre_kind], qname, (long long)n,
                      i, (double)hout[0][i], (double)hout[1][i]);
    }
    if (quant)
        for (int t = 0; t < rows; t++)
            ck_assert_msg(!memcmp(hq[0] + (size_t)t * qstride, hq[1] + (size_t)t * qstride, (size_t)qrow),
                          "%s, %s, n %lld: row %d's quantized bytes differ", pre_names[pre_kind], qname, (long long)n,
                          t);
    ck_assert_msg(found[0] == found[1], "%s, %s, n %lld: non-finite check %llx separate, %llx fused",
                  pre_names[pre_kind], qname, (long long)n, (unsigned long long)found[0],
                  (unsigned long long)found[1]);
    if (nan)
        ck_assert_msg(found[0] != FINITE_NONE, "%s: the planted NaN was not found", pre_names[pre_kind]);
    if (_i % 13 == 0 || nan)
        printf("fused norm, %-20s, quantized %-4s, rows of %4lld x %d%s: bit-exact\n", pre_names[pre_kind], qname,
               (long long)n, rows, nan ? " (a NaN, found by both)" : "");
    for (int k = 0; k < 2; k++) {
        cudaFree(dx[k]);
        cudaFree(dout[k]);
        cudaFree(dq[k]);
        cudaFree(dfound[k]);
        free(hx[k]);
        free(hout[k]);
        free(hq[k]);
    }
    cudaFree(dp);
    cudaFree(dy);
    cudaFree(drw);
    cudaFree(dlg);
    cudaFree(dw);
    free(x);
    free(p);
    free(w);
    free(y);
    free(rw);
    free(lg);
}
END_TEST

/* ---- the backend ------------------------------------------------------------------------------------------- */

#define N_PROMPT 40
#define STEPS 12
#define N_CTX 128

typedef struct fused_case {
    const char *arch;
    guild_type_t type;
    bool host_experts; /* the routed experts through the host executor */
} fused_case_t;

static const fused_case_t cases[] = {
    {"qwen3moe", GUILD_TYPE_Q4_K, false}, {"qwen3moe", GUILD_TYPE_Q4_K, true}, {"qwen2moe", GUILD_TYPE_Q8_0, false},
    {"glm4moe", GUILD_TYPE_Q4_K, false},  {"gpt-oss", GUILD_TYPE_Q8_0, false}, {"llama", GUILD_TYPE_Q8_0, false},
    {"llama", GUILD_TYPE_F32, false},
};
#define N_CASES (int)(sizeof cases / sizeof cases[0])

static void run(backend_t *be, int32_t n, const int32_t *tokens, int32_t n_out, const int32_t *rows, float *logits)
{
    guild_err_t err = {{0}};
    int32_t pos[N_CTX];
    for (int32_t i = 0; i < n; i++)
        pos[i] = backend_kv_len(be) + i;
    ck_assert_msg(backend_forward(be, n, tokens, pos, n_out, rows, logits, &err) == 0, "%s", err.msg);
}

static int32_t argmax(const float *x, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

/* The prompt's last row, then STEPS greedy steps: (STEPS + 1) rows of logits. */
static void generate(model_t *m, moe_exec_t *moe, guild_pool_t *pool, const cuda_config_t *cc, float *lg)
{
    guild_err_t err = {{0}};
    backend_t *be = NULL;
    const backend_options_t o = {.n_ctx = N_CTX, .n_batch = N_PROMPT, .pool = pool, .moe = moe};
    ck_assert_msg(backend_new(&be, "cuda", m, &o, cc, &err) == 0, "%s", err.msg);
    const int32_t V = model_config(m)->n_vocab;
    int32_t prompt[N_PROMPT];
    for (int32_t i = 0; i < N_PROMPT; i++)
        prompt[i] = (int32_t)((i * 37 + 11) % V);
    const int32_t last = N_PROMPT - 1, row0 = 0;
    run(be, N_PROMPT, prompt, 1, &last, lg);
    for (int32_t st = 0; st < STEPS; st++) {
        int32_t tok = argmax(lg + (size_t)st * (size_t)V, V);
        run(be, 1, &tok, 1, &row0, lg + (size_t)(st + 1) * (size_t)V);
    }
    backend_destroy(&be);
}

START_TEST(test_fused_backend)
{
    const fused_case_t *fc = &cases[_i];
    guild_err_t err = {{0}};
    tiny_spec_t s = tiny_spec(fc->arch);
    s.n_embd = 256; /* whole Q8_K blocks */
    s.n_head = 4;
    s.n_head_kv = 2;
    s.head_dim = 64;
    s.n_ff_exp = 256;
    s.n_ff_shexp = 256;
    s.n_ff = 512;
    s.n_vocab = 256;
    s.wtype = fc->type;
    s.seed = 91 + (uint64_t)_i;
    void *image;
    size_t size;
    model_t *m = NULL;
    guild_pool_t *pool = NULL;
    moe_exec_t *moe = NULL;
    tiny_model_image(&s, &image, &size);
    ck_assert_msg(tiny_model_open(image, size, &m, &err) == 0, "%s", err.msg);
    ck_assert_msg(guild_pool_new(&pool, 2, NULL, &err) == 0 && moe_local_new(&moe, m, pool, &err) == 0, "%s",
                  err.msg);
    const int32_t V = model_config(m)->n_vocab;
    const size_t nl = (size_t)(STEPS + 1) * (size_t)V;
    float *ref = malloc(nl * sizeof *ref), *got = malloc(nl * sizeof *got);
    cuda_config_t cc = {.gpu_expert_layers = fc->host_experts ? GPU_EXPERTS_NONE : 0};
    cc.no_fuse = true;
    generate(m, moe, pool, &cc, ref);
    for (int graphs = 1; graphs >= 0; graphs--) {
        cuda_config_t c2 = cc;
        c2.no_fuse = false;
        c2.no_graph = !graphs;
        generate(m, moe, pool, &c2, got);
        for (size_t i = 0; i < nl; i++)
            ck_assert_msg(!memcmp(&ref[i], &got[i], sizeof(float)),
                          "%s %s%s, graphs %s: step %zu logit %zu: %.9g separate, %.9g fused", fc->arch,
                          quant_type_info(fc->type)->name, fc->host_experts ? ", host experts" : "",
                          graphs ? "on" : "off", i / (size_t)V, i % (size_t)V, (double)ref[i], (double)got[i]);
    }
    printf("%-9s %-5s%s: fused = separate launches, bit for bit (prompt of %d, %d decode steps, graphs on and off)\n",
           fc->arch, quant_type_info(fc->type)->name, fc->host_experts ? ", host experts" : "", N_PROMPT, STEPS);
    free(ref);
    free(got);
    moe_exec_destroy(&moe);
    guild_pool_destroy(&pool);
    model_destroy(&m);
    free(image);
}
END_TEST

int main(void)
{
    char why[256];
    if (cuda_device_count(why, sizeof why) < 1) {
        printf("SKIP: no CUDA device (%s)\n", why);
        return 77;
    }
    if (cudaStreamCreate(&stream) != cudaSuccess) {
        printf("cannot create a stream\n");
        return 1;
    }
    Suite *s = suite_create("cuda_fused");
    TCase *tk = tcase_create("kernel");
    tcase_add_loop_test(tk, test_fused_kernel, 0, N_PRE * N_Q * N_W);
    suite_add_tcase(s, tk);
    TCase *tb = tcase_create("backend");
    tcase_set_timeout(tb, 120);
    tcase_add_loop_test(tb, test_fused_backend, 0, N_CASES);
    suite_add_tcase(s, tb);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
