/* The decode step's fused launches against the separate launches they replace, bit for bit: the fused block norm
 * (cuda_rmsnorm_fused: residual update + RMSNorm + quantization for the next product), several products of one
 * activation (cuda_matmul_multi: a step's Q, K and V), the router's product, top-k and routing counts
 * (cuda_router_fused, launched several times: its counter of finished blocks resets itself); and the CUDA backend
 * with its layer program fused and programmatic dependent launch (the defaults) against the same backend with
 * cuda_config_t.no_fuse and no_pdl, bit for bit.
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
 * steps, with graphs and without, fused and programmatic launch each alone too; every logit equal to the
 * reference's (separate launches, each after the one before it has ended).
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
#include "gpu-worker/dense/backend.h"
#include "gpu-worker/dense/cuda/cuda_config.h"
#include "gpu-worker/dense/cuda/cuda_kernels.h"
#include "gpu-worker/dense/cuda/cuda_util.h"
#include "gpu-worker/dense/finite_check.h"
#include "gpu-worker/dense/gpu_plan.h"
#include "gpu-worker/dense/kv_format.h"
#include "tests/cuda/cuda_test_model.h"
#include "tests/cuda/cuda_test_util.h"
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

/* ---- several products in one launch (cuda_matmul_multi) ------------------------------------------------------ */

static const guild_type_t mm_types[] = {GUILD_TYPE_Q4_K, GUILD_TYPE_Q6_K, GUILD_TYPE_Q8_0, GUILD_TYPE_F32};
#define N_MM_TYPES (int)(sizeof mm_types / sizeof mm_types[0])
static const int32_t mm_toks[] = {1, 2, 3, 5, 8, 40}; /* 40: past CUDA_MATMUL_MMA_MIN_TOK, product by product */
#define N_MM_TOKS (int)(sizeof mm_toks / sizeof mm_toks[0])

static void *dev_bytes(const void *h, size_t n)
{
    void *d = NULL;
    CK_CUDA(cudaMalloc(&d, n));
    CK_CUDA(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    return d;
}

START_TEST(test_matmul_multi)
{
    const guild_type_t type = mm_types[_i % N_MM_TYPES];
    const int32_t ntok = mm_toks[_i / N_MM_TYPES], count = 3;
    const int64_t n = 512, nrows[3] = {260, 36, 37}, ldo[3] = {263, 36, 41};
    const guild_type_t at = quant_type_info(type)->dot_type;
    guild_err_t err = {{0}};
    uint64_t rb = 0, arow = 0;
    ck_assert(quant_row_bytes(type, (uint64_t)n, &rb, &err) == 0 && quant_row_bytes(at, (uint64_t)n, &arow, &err) == 0);
    rng_t r;
    rng_seed(&r, 301 + (uint64_t)_i);
    float *f = malloc((size_t)n * sizeof *f), *x = malloc((size_t)ntok * (size_t)n * sizeof *x);
    void *dw[3];
    size_t ws[3];
    float *dout[2][3];
    for (int32_t i = 0; i < count; i++) {
        char *w = malloc((size_t)nrows[i] * rb);
        for (int64_t row = 0; row < nrows[i]; row++) {
            fill(&r, f, (size_t)n, 1.0f);
            ck_assert_msg(quant_quantize_row_ref(type, f, w + (size_t)row * rb, n, &err) == 0, "%s", err.msg);
        }
        dw[i] = dev_bytes(w, (size_t)nrows[i] * rb);
        ws[i] = (size_t)rb;
        free(w);
        for (int k = 0; k < 2; k++) {
            const size_t bytes = (size_t)ntok * (size_t)ldo[i] * sizeof(float);
            CK_CUDA(cudaMalloc((void **)&dout[k][i], bytes));
            CK_CUDA(cudaMemset(dout[k][i], 0x7e, bytes));
        }
    }
    fill(&r, x, (size_t)ntok * (size_t)n, 2.0f);
    float *dx = upload(x, (size_t)ntok * (size_t)n);
    void *dact = NULL;
    CK_CUDA(cudaMalloc(&dact, (size_t)ntok * arow));
    ck_assert_msg(cuda_quantize(at, dx, n, dact, arow, n, ntok, stream, &err) == 0, "%s", err.msg);
    for (int32_t i = 0; i < count; i++)
        ck_assert_msg(cuda_matmul(type, n, nrows[i], ntok, dw[i], ws[i], dact, arow, dout[0][i], ldo[i], stream,
                                  &err) == 0, "%s", err.msg);
    ck_assert_msg(cuda_matmul_multi(type, n, ntok, count, (const void *const *)dw, ws, nrows, dact, arow, dout[1], ldo,
                                    stream, &err) == 0, "%s", err.msg);
    CK_CUDA(cudaStreamSynchronize(stream));
    for (int32_t i = 0; i < count; i++) {
        const size_t bytes = (size_t)ntok * (size_t)ldo[i] * sizeof(float);
        unsigned char *h[2] = {malloc(bytes), malloc(bytes)};
        for (int k = 0; k < 2; k++) {
            CK_CUDA(cudaMemcpy(h[k], dout[k][i], bytes, cudaMemcpyDeviceToHost));
            cudaFree(dout[k][i]);
        }
        ck_assert_msg(!memcmp(h[0], h[1], bytes), "%s, %d tokens: product %d (%lld rows) differs from cuda_matmul's",
                      quant_type_info(type)->name, ntok, i, (long long)nrows[i]);
        free(h[0]);
        free(h[1]);
        cudaFree(dw[i]);
    }
    printf("matmul multi, %-4s, %2d tokens, products of 260/36/37 rows: = cuda_matmul, bit for bit\n",
           quant_type_info(type)->name, ntok);
    cudaFree(dx);
    cudaFree(dact);
    free(f);
    free(x);
}
END_TEST

/* ---- the router's product and choice in one launch (cuda_router_fused) -------------------------------------- */

static const struct {
    int32_t n_expert, k, groups, used, n_embd;
    bool renorm;
    float scale;
} rf_cases[] = {{128, 8, 0, 0, 2048, true, 1.0f}, {60, 4, 0, 0, 256, false, 0.0f}, {160, 6, 8, 3, 256, false, 16.0f},
                {64, 6, 8, 3, 512, true, 1.0f},   {256, 8, 0, 0, 1024, false, 2.5f}};
#define N_RF (int)(sizeof rf_cases / sizeof rf_cases[0])

START_TEST(test_router_fused)
{
    const int c = _i / CUDA_ROUTER_FUSED_ROWS;
    const int32_t n_tok = 1 + _i % CUDA_ROUTER_FUSED_ROWS, ne = rf_cases[c].n_expert, k = rf_cases[c].k;
    const int32_t E = rf_cases[c].n_embd;
    const int64_t ldx = E + 4;
    const size_t w_stride = (size_t)E * sizeof(float) + 16, nl = (size_t)n_tok * (size_t)ne;
    const size_t np = (size_t)n_tok * (size_t)k, nc = (size_t)ne, reps = 3;
    guild_err_t err = {{0}};
    rng_t r;
    rng_seed(&r, 501 + (uint64_t)_i);
    float *W = calloc((size_t)ne, w_stride), *x = malloc((size_t)n_tok * (size_t)ldx * sizeof *x);
    for (int32_t e = 0; e < ne; e++)
        fill(&r, (float *)((char *)W + (size_t)e * w_stride), (size_t)E, 0.2f);
    fill(&r, x, (size_t)n_tok * (size_t)ldx, 1.0f);
    float *dW = dev_bytes(W, (size_t)ne * w_stride), *dx = upload(x, (size_t)n_tok * (size_t)ldx);
    /* [0]: cuda_matmul, cuda_router_topk, cuda_route_count; [1]: cuda_router_fused, reps times */
    float *dlg[2], *dwt[2];
    int32_t *dids[2];
    unsigned long long *dcnt[2];
    for (int q = 0; q < 2; q++) {
        CK_CUDA(cudaMalloc((void **)&dlg[q], nl * sizeof(float)));
        CK_CUDA(cudaMalloc((void **)&dwt[q], np * sizeof(float)));
        CK_CUDA(cudaMalloc((void **)&dids[q], np * sizeof(int32_t)));
        CK_CUDA(cudaMalloc((void **)&dcnt[q], nc * sizeof(unsigned long long)));
        CK_CUDA(cudaMemset(dcnt[q], 0, nc * sizeof(unsigned long long)));
    }
    unsigned int *ddone = NULL;
    CK_CUDA(cudaMalloc((void **)&ddone, sizeof *ddone));
    CK_CUDA(cudaMemset(ddone, 0, sizeof *ddone));
    for (size_t rep = 0; rep < reps; rep++) {
        ck_assert_msg(cuda_matmul(GUILD_TYPE_F32, E, ne, n_tok, dW, w_stride, dx, (size_t)ldx * sizeof(float), dlg[0],
                                  ne, stream, &err) == 0 &&
                          cuda_router_topk(dlg[0], n_tok, ne, k, rf_cases[c].groups, rf_cases[c].used,
                                           rf_cases[c].renorm, rf_cases[c].scale, dids[0], dwt[0], NULL, stream,
                                           &err) == 0 &&
                          cuda_route_count(dids[0], (int32_t)np, ne, dcnt[0], stream, &err) == 0,
                      "%s", err.msg);
        ck_assert_msg(cuda_router_fused(dW, w_stride, dx, ldx, E, dlg[1], n_tok, ne, k, rf_cases[c].groups,
                                        rf_cases[c].used, rf_cases[c].renorm, rf_cases[c].scale, dids[1], dwt[1],
                                        dcnt[1], ddone, stream, &err) == 0,
                      "%s", err.msg);
    }
    CK_CUDA(cudaStreamSynchronize(stream));
    float *lg[2] = {malloc(nl * sizeof(float)), malloc(nl * sizeof(float))};
    float *wt[2] = {malloc(np * sizeof(float)), malloc(np * sizeof(float))};
    int32_t *ids[2] = {malloc(np * sizeof(int32_t)), malloc(np * sizeof(int32_t))};
    unsigned long long *cnt[2] = {malloc(nc * sizeof(unsigned long long)), malloc(nc * sizeof(unsigned long long))};
    for (int q = 0; q < 2; q++) {
        CK_CUDA(cudaMemcpy(lg[q], dlg[q], nl * sizeof(float), cudaMemcpyDeviceToHost));
        CK_CUDA(cudaMemcpy(wt[q], dwt[q], np * sizeof(float), cudaMemcpyDeviceToHost));
        CK_CUDA(cudaMemcpy(ids[q], dids[q], np * sizeof(int32_t), cudaMemcpyDeviceToHost));
        CK_CUDA(cudaMemcpy(cnt[q], dcnt[q], nc * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
    }
    unsigned int done = 1;
    CK_CUDA(cudaMemcpy(&done, ddone, sizeof done, cudaMemcpyDeviceToHost));
    ck_assert_msg(done == 0, "the fused router's counter is %u after its launches, not 0", done);
    ck_assert_msg(!memcmp(lg[0], lg[1], nl * sizeof(float)), "case %d, %d tokens: the logits differ", c, n_tok);
    ck_assert_msg(!memcmp(ids[0], ids[1], np * sizeof(int32_t)), "case %d, %d tokens: the experts differ", c, n_tok);
    ck_assert_msg(!memcmp(wt[0], wt[1], np * sizeof(float)), "case %d, %d tokens: the weights differ", c, n_tok);
    ck_assert_msg(!memcmp(cnt[0], cnt[1], nc * sizeof(unsigned long long)), "case %d, %d tokens: the counts differ",
                  c, n_tok);
    unsigned long long total = 0;
    for (size_t e = 0; e < nc; e++)
        total += cnt[1][e];
    ck_assert_msg(total == reps * np, "%llu pairs counted of %zu", total, reps * np);
    /* cuda_router_topk's own counting = cuda_route_count's */
    CK_CUDA(cudaMemset(dcnt[1], 0, nc * sizeof(unsigned long long)));
    for (size_t rep = 0; rep < reps; rep++)
        ck_assert_msg(cuda_router_topk(dlg[0], n_tok, ne, k, rf_cases[c].groups, rf_cases[c].used, rf_cases[c].renorm,
                                       rf_cases[c].scale, dids[1], dwt[1], dcnt[1], stream, &err) == 0,
                      "%s", err.msg);
    CK_CUDA(cudaMemcpy(cnt[1], dcnt[1], nc * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
    ck_assert_msg(!memcmp(cnt[0], cnt[1], nc * sizeof(unsigned long long)),
                  "case %d, %d tokens: cuda_router_topk's counts differ from cuda_route_count's", c, n_tok);
    printf("router fused, %3d experts, top-%d, groups %d, %4d wide, %d tokens: = product + top-k + count, bit for "
           "bit, %zu launches\n", ne, k, rf_cases[c].groups, E, n_tok, reps);
    for (int q = 0; q < 2; q++) {
        cudaFree(dlg[q]);
        cudaFree(dwt[q]);
        cudaFree(dids[q]);
        cudaFree(dcnt[q]);
        free(lg[q]);
        free(wt[q]);
        free(ids[q]);
        free(cnt[q]);
    }
    cudaFree(ddone);
    cudaFree(dW);
    cudaFree(dx);
    free(W);
    free(x);
}
END_TEST

/* ---- the experts' route with their rows' quantization in its launch (cuda_expert_route_quantize) ------------ */

static const guild_type_t rq_types[] = {GUILD_TYPE_Q8_0, GUILD_TYPE_Q8_1, GUILD_TYPE_Q8_K};
static const int32_t rq_rows[] = {1, 2, 4, 40}; /* 40 x 8 Q8_K blocks: past the fold, the two launches */

START_TEST(test_route_quantize)
{
    const guild_type_t at = rq_types[_i % 3];
    const int32_t n_rows = rq_rows[_i / 3], n_expert = 128, k = 8, n_pairs = n_rows * k, tile = 1;
    const int64_t n = 2048, ldx = n + 32;
    guild_err_t err = {{0}};
    uint64_t arow = 0;
    ck_assert(quant_row_bytes(at, (uint64_t)n, &arow, &err) == 0);
    const size_t stride = (size_t)arow + 16, qbytes = (size_t)n_rows * stride;
    rng_t r;
    rng_seed(&r, 701 + (uint64_t)_i);
    float *x = malloc((size_t)n_rows * (size_t)ldx * sizeof *x);
    fill(&r, x, (size_t)n_rows * (size_t)ldx, 2.0f);
    int32_t *ids = malloc((size_t)n_pairs * sizeof *ids);
    for (int32_t p = 0; p < n_pairs; p++)
        ids[p] = (int32_t)(rng_uniform(&r) * n_expert) % n_expert;
    float *dx = upload(x, (size_t)n_rows * (size_t)ldx);
    int32_t *dids = dev_bytes(ids, (size_t)n_pairs * sizeof *ids);
    const int32_t mt = cuda_expert_max_tiles(n_pairs, n_expert, tile);
    void *dq[2];
    int32_t *dorder[2], *dtiles[2], *dnt[2];
    for (int q = 0; q < 2; q++) {
        CK_CUDA(cudaMalloc(&dq[q], qbytes));
        CK_CUDA(cudaMemset(dq[q], 0x5a, qbytes));
        CK_CUDA(cudaMalloc((void **)&dorder[q], (size_t)n_pairs * sizeof(int32_t)));
        CK_CUDA(cudaMalloc((void **)&dtiles[q], (size_t)mt * 4 * sizeof(int32_t)));
        CK_CUDA(cudaMemset(dtiles[q], 0, (size_t)mt * 4 * sizeof(int32_t)));
        CK_CUDA(cudaMalloc((void **)&dnt[q], sizeof(int32_t)));
    }
    ck_assert_msg(cuda_quantize(at, dx, ldx, dq[0], stride, n, n_rows, stream, &err) == 0 &&
                      cuda_expert_route(dids, n_pairs, n_expert, tile, dorder[0], dtiles[0], dnt[0], stream, &err) == 0,
                  "%s", err.msg);
    ck_assert_msg(cuda_expert_route_quantize(dids, n_pairs, n_expert, tile, dorder[1], dtiles[1], dnt[1], at, dx, ldx,
                                             dq[1], stride, n, n_rows, stream, &err) == 0,
                  "%s", err.msg);
    CK_CUDA(cudaStreamSynchronize(stream));
    unsigned char *hq[2] = {malloc(qbytes), malloc(qbytes)};
    int32_t *ht[2] = {malloc((size_t)mt * 16), malloc((size_t)mt * 16)}, nt[2];
    for (int q = 0; q < 2; q++) {
        CK_CUDA(cudaMemcpy(hq[q], dq[q], qbytes, cudaMemcpyDeviceToHost));
        CK_CUDA(cudaMemcpy(ht[q], dtiles[q], (size_t)mt * 16, cudaMemcpyDeviceToHost));
        CK_CUDA(cudaMemcpy(&nt[q], dnt[q], sizeof(int32_t), cudaMemcpyDeviceToHost));
    }
    for (int32_t t = 0; t < n_rows; t++)
        ck_assert_msg(!memcmp(hq[0] + (size_t)t * stride, hq[1] + (size_t)t * stride, (size_t)arow),
                      "%s, %d rows: row %d's quantized bytes differ", quant_type_info(at)->name, n_rows, t);
    ck_assert_int_eq(nt[0], nt[1]);
    ck_assert_msg(!memcmp(ht[0], ht[1], (size_t)nt[0] * 16), "%s, %d rows: the tiles differ",
                  quant_type_info(at)->name, n_rows);
    printf("route + quantize, %-4s, %2d rows: = cuda_quantize + cuda_expert_route, bit for bit\n",
           quant_type_info(at)->name, n_rows);
    for (int q = 0; q < 2; q++) {
        cudaFree(dq[q]);
        cudaFree(dorder[q]);
        cudaFree(dtiles[q]);
        cudaFree(dnt[q]);
        free(hq[q]);
        free(ht[q]);
    }
    cudaFree(dx);
    cudaFree(dids);
    free(x);
    free(ids);
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
    {"llama", GUILD_TYPE_F32, false},     {"qwen3moe", GUILD_TYPE_F32, false}, /* F32 router: cuda_router_fused */
};
#define N_CASES (int)(sizeof cases / sizeof cases[0])

/* The prompt's last row, then STEPS greedy steps: (STEPS + 1) rows of logits. */
static void generate(const cuda_test_model_t *tm, const cuda_config_t *cc, float *lg)
{
    guild_err_t err = {{0}};
    backend_t *be = NULL;
    const backend_options_t o = {.n_ctx = N_CTX, .n_batch = N_PROMPT, .pool = tm->pool, .moe = tm->moe};
    ck_assert_msg(backend_new(&be, "cuda", tm->model, &o, cc, &err) == 0, "%s", err.msg);
    const int32_t V = model_config(tm->model)->n_vocab;
    int32_t prompt[N_PROMPT];
    for (int32_t i = 0; i < N_PROMPT; i++)
        prompt[i] = (int32_t)((i * 37 + 11) % V);
    const int32_t last = N_PROMPT - 1, row0 = 0;
    cuda_test_forward(be, N_PROMPT, prompt, 1, &last, lg);
    for (int32_t st = 0; st < STEPS; st++) {
        int32_t tok = cuda_test_argmax(lg + (size_t)st * (size_t)V, V);
        cuda_test_forward(be, 1, &tok, 1, &row0, lg + (size_t)(st + 1) * (size_t)V);
    }
    backend_destroy(&be);
}

START_TEST(test_fused_backend)
{
    const fused_case_t *fc = &cases[_i];
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
    cuda_test_model_t tm;
    cuda_test_model_open(&tm, &s);
    const int32_t V = model_config(tm.model)->n_vocab;
    const size_t nl = (size_t)(STEPS + 1) * (size_t)V;
    float *ref = malloc(nl * sizeof *ref), *got = malloc(nl * sizeof *got);
    cuda_config_t cc = {.gpu_expert_layers = fc->host_experts ? GPU_EXPERTS_NONE : 0};
    cc.no_fuse = true; /* the reference: separate launches, each after the one before it has ended */
    cc.no_pdl = true;
    generate(&tm, &cc, ref);
    /* fused with programmatic dependent launch, graphs on and off; each of the two alone */
    static const struct {
        bool no_fuse, no_pdl, no_graph;
    } v[] = {{false, false, false}, {false, false, true}, {false, true, false}, {true, false, false}};
    for (size_t k = 0; k < sizeof v / sizeof v[0]; k++) {
        cuda_config_t c2 = cc;
        c2.no_fuse = v[k].no_fuse;
        c2.no_pdl = v[k].no_pdl;
        c2.no_graph = v[k].no_graph;
        generate(&tm, &c2, got);
        for (size_t i = 0; i < nl; i++)
            ck_assert_msg(!memcmp(&ref[i], &got[i], sizeof(float)),
                          "%s %s%s, fuse %s, pdl %s, graphs %s: step %zu logit %zu: %.9g separate, %.9g", fc->arch,
                          quant_type_info(fc->type)->name, fc->host_experts ? ", host experts" : "",
                          v[k].no_fuse ? "off" : "on", v[k].no_pdl ? "off" : "on", v[k].no_graph ? "off" : "on",
                          i / (size_t)V, i % (size_t)V, (double)ref[i], (double)got[i]);
    }
    cuda_set_pdl(true);
    printf("%-9s %-5s%s: fused and/or programmatic dependent launch = separate launches, bit for bit (prompt of "
           "%d, %d decode steps, graphs on and off)\n",
           fc->arch, quant_type_info(fc->type)->name, fc->host_experts ? ", host experts" : "", N_PROMPT, STEPS);
    free(ref);
    free(got);
    cuda_test_model_close(&tm);
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
    tcase_add_loop_test(tk, test_matmul_multi, 0, N_MM_TYPES * N_MM_TOKS);
    tcase_add_loop_test(tk, test_router_fused, 0, N_RF * CUDA_ROUTER_FUSED_ROWS);
    tcase_add_loop_test(tk, test_route_quantize, 0, 3 * 4);
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
