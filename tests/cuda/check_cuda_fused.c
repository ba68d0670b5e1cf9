/* The decode step's fused launches against the separate launches they replace, bit for bit: the fused block norm
 * (cuda_rmsnorm_fused: residual update + RMSNorm + quantization for the next product), several products of one
 * activation (cuda_matmul_multi: a step's Q, K and V; cuda_matmul_multi_types: of two types), the router's product,
 * top-k and routing counts (cuda_router_fused, launched several times: its counter of finished blocks resets
 * itself; ties, NaN logits, wide rows, many experts; 1 to 16 tokens, every token's bits also those of its own
 * launch of 1, and the scalar reference's choice; in each of its forms: a counter of blocks, clusters of 16 and of
 * 8 blocks), the FFN norm in that launch (cuda_router_fused_norm: against cuda_add + cuda_rmsnorm_checked +
 * cuda_router_fused, with the non-finite check's finds, and each token alone), a few tokens' routed experts without
 * a route (cuda_expert_pairs: against cuda_quantize + cuda_expert_route + cuda_expert_matmul, a 16-token step's
 * tokens against each token alone, and their time at the Qwen3-30B-A3B shape, printed), the decode attention with
 * its splits merged in its launch (in each of its launch forms, cuda_set_attn_form); and the CUDA backend with its
 * layer program fused and programmatic dependent launch (the defaults) against the same backend with
 * cuda_config_t.no_fuse and no_pdl, bit for bit.
 *
 * Kernel cases: every residual update (none, the residual addition, the MoE combine alone, with an ungated and with
 * a sigmoid-gated shared expert) by every quantization (none, Q8_0, Q8_1, Q8_K, F32) by row width (256 and 96
 * (three warps): one block; 640, 1024 and 2048: a cluster of 3, 4 and 8 blocks, and one block with the cluster form
 * off; 4096: the separate launches it falls back to), over 1 and 5 rows, with a NaN planted in some cases so that
 * the non-finite check's word is compared too. The residual stream x, the normed rows, the quantized bytes and the
 * check's word must all equal the separate launches'; a combine's fused launch also reads its rows in place, from
 * mapped host memory through a device word (cuda_norm_pre_t.y_at, the MoE exchange's slot), with the same bits
 * (with 4096: cuda_moe_combine_at's).
 *
 * Backend cases: tiny models of the architectures whose layer program the fusion changes (qwen3moe Q4_K with
 * experts on the device and through the host executor, qwen2moe's gated shared expert, glm4moe's ungated one and
 * leading dense layer, gpt-oss Q8_0, llama (with experts, as the tiny models have them) in Q8_0 and F32): a prompt
 * in one batch, then greedy decode steps, with graphs and without, fused and programmatic launch each alone too;
 * every logit equal to the reference's (separate launches, each after the one before it has ended). Needs a CUDA
 * device: without one, exit 77 (SKIP). Check runs without fork: a CUDA context does not survive fork(). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "core/quant/fp16.h"
#include "core/quant/quant.h"
#include "core/sample/rng.h"
#include "gpu-worker/dense/backend.h"
#include "gpu-worker/dense/cpu/cpu_kernels.h"
#include "gpu-worker/dense/cuda/cuda_config.h"
#include "gpu-worker/dense/cuda/cuda_kernels.h"
#include "gpu-worker/dense/finite_check.h"
#include "gpu-worker/dense/gpu_plan.h"
#include "gpu-worker/dense/kv_format.h"
#include "tests/cuda/cuda_test_experts.h"
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
static const int64_t widths[] = {256, 2048, 4096, 96, 640, 1024}; /* 640, 1024, 2048: clusters of 3, 4, 8 */
#define N_W (int)(sizeof widths / sizeof widths[0])
#define N_FK (N_PRE * N_Q * N_W)
/* the combine's slots: fewer than the kernel's preloaded 8, 8, and more (its loop after them) */
static const int n_useds[] = {2, 8, 10};

static float *upload(const float *h, size_t n)
{
    float *d = NULL;
    CK_CUDA(cudaMalloc((void **)&d, n * sizeof *d));
    CK_CUDA(cudaMemcpy(d, h, n * sizeof *d, cudaMemcpyHostToDevice));
    return d;
}

START_TEST(test_fused_kernel)
{
    const int ii = _i % N_FK, one_block = _i / N_FK; /* the fused kernel in its cluster form, then one block a row */
    const int pre_kind = ii % N_PRE, qi = (ii / N_PRE) % N_Q, wi = ii / (N_PRE * N_Q);
    const int64_t n = widths[wi];
    const guild_type_t qt = q_types[qi];
    const bool quant = qt != GUILD_TYPE_COUNT;
    if (quant && qt == GUILD_TYPE_Q8_K && n % 256) /* not a whole number of Q8_K blocks: refused by both */
        return;
    cuda_set_norm_cluster(!one_block); /* back on at the end */
    const int rows = 1 + 4 * (ii % 2), n_used = n_useds[ii % 3];
    const bool nan = ii % 7 == 3; /* a planted NaN: the non-finite check's word is compared too */
    rng_t r;
    rng_seed(&r, 7 + (uint64_t)ii);
    const size_t nx = (size_t)rows * (size_t)n, ny = nx * n_used;
    float *x = malloc(nx * sizeof *x), *p = malloc(nx * sizeof *p), *w = malloc((size_t)n * sizeof *w);
    float *y = malloc(ny * sizeof *y), *rw = malloc((size_t)rows * n_used * sizeof *rw);
    float *lg = malloc((size_t)rows * sizeof *lg);
    cuda_test_fill(&r, x, nx, 2.0f);
    cuda_test_fill(&r, p, nx, 1.0f);
    cuda_test_fill(&r, w, (size_t)n, 1.5f);
    cuda_test_fill(&r, y, ny, 1.0f);
    cuda_test_fill(&r, rw, (size_t)rows * n_used, 0.5f);
    cuda_test_fill(&r, lg, (size_t)rows, 3.0f);
    if (nan)
        (pre_kind == PRE_ADD ? p : x)[nx - 3] = NAN;

    cuda_norm_pre_t pre = {CUDA_PRE_NONE};
    float *dp = upload(p, nx), *dy = upload(y, ny), *drw = upload(rw, (size_t)rows * n_used);
    float *dlg = upload(lg, (size_t)rows), *dw = upload(w, (size_t)n);
    if (pre_kind == PRE_ADD)
        pre = (cuda_norm_pre_t){.kind = CUDA_PRE_ADD, .p = dp};
    else if (pre_kind >= PRE_COMBINE)
        pre = (cuda_norm_pre_t){.kind = CUDA_PRE_COMBINE, .y = dy, .w = drw,
                                .sh = pre_kind >= PRE_COMBINE_SH ? dp : NULL,
                                .sh_logit = pre_kind == PRE_COMBINE_GATED ? dlg : NULL, .n_used = n_used};

    uint64_t qrow = 0;
    guild_err_t err = {{0}};
    if (quant)
        ck_assert(quant_row_bytes(qt, (uint64_t)n, &qrow, &err) == 0);
    const size_t qstride = (size_t)qrow + 16, qbytes = quant ? (size_t)rows * qstride : 1;
    /* [0]: the separate launches, [1]: the fused one, [2] (a combine): the fused one reading y where a device word
     * says, in mapped host memory (the MoE exchange's slot: cuda_norm_pre_t.y_at) */
    const int runs = pre.kind == CUDA_PRE_COMBINE ? 3 : 2;
    float *dx[3], *dout[3];
    void *dq[3];
    uint64_t *dfound[3];
    float *hy = NULL, *hy_dev = NULL;
    const float **dy_at = NULL;
    if (runs == 3) {
        CK_CUDA(cudaHostAlloc((void **)&hy, ny * sizeof *hy, cudaHostAllocMapped));
        memcpy(hy, y, ny * sizeof *hy);
        CK_CUDA(cudaHostGetDevicePointer((void **)&hy_dev, hy, 0));
        CK_CUDA(cudaMalloc((void **)&dy_at, sizeof *dy_at));
        CK_CUDA(cudaMemcpy(dy_at, &hy_dev, sizeof hy_dev, cudaMemcpyHostToDevice));
    }
    for (int k = 0; k < runs; k++) {
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
    if (pre.kind == CUDA_PRE_ADD) /* the separate launches */
        ck_assert_msg(cuda_add(dx[0], dp, (int64_t)nx, stream, &err) == 0, "%s", err.msg);
    else if (pre.kind == CUDA_PRE_COMBINE)
        ck_assert_msg(cuda_moe_combine(dx[0], dy, drw, pre.sh, pre.sh_logit, rows, n_used, n, stream, &err) == 0,
                      "%s", err.msg);
    ck_assert_msg(cuda_rmsnorm_checked(dout[0], n, dx[0], n, NULL, dw, n, rows, eps, dfound[0], site, stream, &err) ==
                      0, "%s", err.msg);
    if (quant)
        ck_assert_msg(cuda_quantize(qt, dout[0], n, dq[0], qstride, n, rows, stream, &err) == 0, "%s", err.msg);
    /* the fused one */
    ck_assert_msg(cuda_rmsnorm_fused(dout[1], dx[1], dw, n, rows, eps, dfound[1], site, &pre, qt, quant ? dq[1] : NULL,
                                     qstride, stream, &err) == 0, "%s", err.msg);
    if (runs == 3) {
        cuda_norm_pre_t at = pre;
        at.y = NULL;
        at.y_at = dy_at;
        ck_assert_msg(cuda_rmsnorm_fused(dout[2], dx[2], dw, n, rows, eps, dfound[2], site, &at, qt,
                                         quant ? dq[2] : NULL, qstride, stream, &err) == 0, "%s", err.msg);
    }
    CK_CUDA(cudaStreamSynchronize(stream));

    float *hx[3], *hout[3];
    unsigned char *hq[3];
    uint64_t found[3];
    for (int k = 0; k < runs; k++) {
        hx[k] = malloc(nx * sizeof(float));
        hout[k] = malloc(nx * sizeof(float));
        hq[k] = malloc(qbytes);
        CK_CUDA(cudaMemcpy(hx[k], dx[k], nx * sizeof(float), cudaMemcpyDeviceToHost));
        CK_CUDA(cudaMemcpy(hout[k], dout[k], nx * sizeof(float), cudaMemcpyDeviceToHost));
        CK_CUDA(cudaMemcpy(hq[k], dq[k], qbytes, cudaMemcpyDeviceToHost));
        CK_CUDA(cudaMemcpy(&found[k], dfound[k], sizeof(uint64_t), cudaMemcpyDeviceToHost));
    }
    const char *qname = quant ? quant_type_info(qt)->name : "none";
    for (int k = 2; k < runs; k++) { /* y read in place: the same bits as the fused launch's from device memory */
        ck_assert_msg(!memcmp(hx[1], hx[k], nx * sizeof(float)) && !memcmp(hout[1], hout[k], nx * sizeof(float)) &&
                          (!quant || !memcmp(hq[1], hq[k], qbytes)) && found[1] == found[k],
                      "%s, %s, n %lld: y read from host memory through y_at: other bits than from device memory",
                      pre_names[pre_kind], qname, (long long)n);
    }
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
    if (ii % 13 == 0 || nan)
        printf("fused norm (%s), %-20s, quantized %-4s, rows of %4lld x %d, %2d slots%s: bit-exact%s\n",
               one_block ? "one block" : "cluster", pre_names[pre_kind], qname, (long long)n, rows, n_used,
               nan ? " (a NaN, found by both)" : "", runs == 3 ? " (y in place too)" : "");
    if (runs == 3) {
        cudaFreeHost(hy);
        cudaFree(dy_at);
    }
    for (int k = 0; k < runs; k++) {
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
    cuda_set_norm_cluster(true);
}
END_TEST

/* ---- several products in one launch (cuda_matmul_multi) ------------------------------------------------------ */

static const guild_type_t mm_types[] = {GUILD_TYPE_Q4_K, GUILD_TYPE_Q6_K, GUILD_TYPE_Q8_0, GUILD_TYPE_F32};
#define N_MM_TYPES (int)(sizeof mm_types / sizeof mm_types[0])
static const int32_t mm_toks[] = {1, 2, 3, 5, 8, 40}; /* 40: past CUDA_MATMUL_MMA_MIN_TOK, product by product */
#define N_MM_TOKS (int)(sizeof mm_toks / sizeof mm_toks[0])

/* Three products of n columns (260 / 36 / 37 rows, ldo 263 / 36 / 41) of types[i] on one activation of ntok rows
 * (quantized to the types' dot type), from outputs poisoned alike: cuda_matmul product by product against one launch
 * of cuda_matmul_multi (types all types[0]) or, with two_types, cuda_matmul_multi_types; memcmp; `what` names them. */
static void mm_multi_check(const guild_type_t types[3], bool two_types, int64_t n, int32_t ntok, uint64_t seed,
                           const char *what)
{
    const int32_t count = 3;
    const int64_t nrows[3] = {260, 36, 37}, ldo[3] = {263, 36, 41};
    const guild_type_t at = quant_type_info(types[0])->dot_type;
    guild_err_t err = {{0}};
    uint64_t arow = 0;
    ck_assert(quant_row_bytes(at, (uint64_t)n, &arow, &err) == 0);
    rng_t r;
    rng_seed(&r, seed);
    float *f = malloc((size_t)n * sizeof *f), *x = malloc((size_t)ntok * (size_t)n * sizeof *x);
    void *dw[3];
    size_t ws[3];
    float *dout[2][3];
    for (int32_t i = 0; i < count; i++) {
        uint64_t rb = 0;
        ck_assert(quant_row_bytes(types[i], (uint64_t)n, &rb, &err) == 0);
        char *w = malloc((size_t)nrows[i] * rb);
        for (int64_t row = 0; row < nrows[i]; row++) {
            cuda_test_fill(&r, f, (size_t)n, 1.0f);
            ck_assert_msg(quant_quantize_row_ref(types[i], f, w + (size_t)row * rb, n, &err) == 0, "%s", err.msg);
        }
        dw[i] = cuda_test_dev_bytes(w, (size_t)nrows[i] * rb);
        ws[i] = (size_t)rb;
        free(w);
        for (int k = 0; k < 2; k++) {
            const size_t bytes = (size_t)ntok * (size_t)ldo[i] * sizeof(float);
            CK_CUDA(cudaMalloc((void **)&dout[k][i], bytes));
            CK_CUDA(cudaMemset(dout[k][i], 0x7e, bytes));
        }
    }
    cuda_test_fill(&r, x, (size_t)ntok * (size_t)n, 2.0f);
    float *dx = upload(x, (size_t)ntok * (size_t)n);
    void *dact = NULL;
    CK_CUDA(cudaMalloc(&dact, (size_t)ntok * arow));
    ck_assert_msg(cuda_quantize(at, dx, n, dact, arow, n, ntok, stream, &err) == 0, "%s", err.msg);
    for (int32_t i = 0; i < count; i++)
        ck_assert_msg(cuda_matmul(types[i], n, nrows[i], ntok, dw[i], ws[i], dact, arow, dout[0][i], ldo[i], stream,
                                  &err) == 0, "%s", err.msg);
    if (two_types)
        ck_assert_msg(cuda_matmul_multi_types(types, n, ntok, count, (const void *const *)dw, ws, nrows, dact, arow,
                                              dout[1], ldo, stream, &err) == 0, "%s", err.msg);
    else
        ck_assert_msg(cuda_matmul_multi(types[0], n, ntok, count, (const void *const *)dw, ws, nrows, dact, arow,
                                        dout[1], ldo, stream, &err) == 0, "%s", err.msg);
    CK_CUDA(cudaStreamSynchronize(stream));
    for (int32_t i = 0; i < count; i++) {
        const size_t bytes = (size_t)ntok * (size_t)ldo[i] * sizeof(float);
        unsigned char *h[2] = {malloc(bytes), malloc(bytes)};
        for (int k = 0; k < 2; k++) {
            CK_CUDA(cudaMemcpy(h[k], dout[k][i], bytes, cudaMemcpyDeviceToHost));
            cudaFree(dout[k][i]);
        }
        ck_assert_msg(!memcmp(h[0], h[1], bytes), "%s, %d tokens: product %d (%lld rows) differs from cuda_matmul's",
                      what, ntok, i, (long long)nrows[i]);
        free(h[0]);
        free(h[1]);
        cudaFree(dw[i]);
    }
    cudaFree(dx);
    cudaFree(dact);
    free(f);
    free(x);
}

START_TEST(test_matmul_multi)
{
    const guild_type_t type = mm_types[_i % N_MM_TYPES], types[3] = {type, type, type};
    const int32_t ntok = mm_toks[_i / N_MM_TYPES];
    mm_multi_check(types, false, 512, ntok, 301 + (uint64_t)_i, quant_type_info(type)->name);
    printf("matmul multi, %-4s, %2d tokens, products of 260/36/37 rows: = cuda_matmul, bit for bit\n",
           quant_type_info(type)->name, ntok);
}
END_TEST

/* Products of two K-quant types in one launch (cuda_matmul_multi_types: Q and K of one type, V of another) =
 * cuda_matmul product by product, for 1..8 tokens. */
static const guild_type_t mt_sets[][3] = {{GUILD_TYPE_Q4_K, GUILD_TYPE_Q4_K, GUILD_TYPE_Q6_K},
                                          {GUILD_TYPE_Q6_K, GUILD_TYPE_Q4_K, GUILD_TYPE_Q6_K},
                                          {GUILD_TYPE_Q5_K, GUILD_TYPE_Q6_K, GUILD_TYPE_Q5_K},
                                          {GUILD_TYPE_Q5_K, GUILD_TYPE_Q4_K, GUILD_TYPE_Q4_K}};
#define N_MT_SETS (int)(sizeof mt_sets / sizeof mt_sets[0])

START_TEST(test_matmul_multi_types)
{
    const guild_type_t *types = mt_sets[_i % N_MT_SETS];
    const int32_t ntok = mm_toks[_i / N_MT_SETS];
    char what[64];
    snprintf(what, sizeof what, "%s/%s/%s", quant_type_info(types[0])->name, quant_type_info(types[1])->name,
             quant_type_info(types[2])->name);
    mm_multi_check(types, true, 512, ntok, 331 + (uint64_t)_i, what);
    /* one token over 8 blocks a row: a split row's warps take several steps each (a step's Q/K/V, 2048 wide) */
    if (ntok == 1)
        mm_multi_check(types, true, 2048, ntok, 361 + (uint64_t)_i, what);
    printf("matmul multi, %s, %d tokens: = cuda_matmul, bit for bit\n", what, ntok);
}
END_TEST

/* ---- the router's product and choice in one launch (cuda_router_fused) -------------------------------------- */

/* odd: what the odd rows are: 0 their own, 1 the row before (equal logits in pairs: ties, the lower id first), 2 one
 * NaN element (those experts' logits NaN: every probability NaN, which the choice counts as -0.5); 3: every row
 * zero (every probability equal: every expert ties with every other, the lower id first); 4: a unit activation row,
 * logit e = W[e][0]: 0, 1, 2, then -200 + e / 2 rising with the id (with 128 experts their probabilities underflow
 * to 0: a choice by the logits would name the highest ids). Widths above the fused kernel's chunk of 2,048 (and not
 * a multiple of 32) and experts above its rank limit (256: the argmax passes) take its other paths. */
static const struct {
    int32_t n_expert, k, groups, used, n_embd;
    bool renorm;
    float scale;
    int odd;
} rf_cases[] = {{128, 8, 0, 0, 2048, true, 1.0f, 0},  {60, 4, 0, 0, 256, false, 0.0f, 0},
                {160, 6, 8, 3, 256, false, 16.0f, 0}, {64, 6, 8, 3, 512, true, 1.0f, 0},
                {256, 8, 0, 0, 1024, false, 2.5f, 0}, {128, 8, 0, 0, 2048, true, 1.0f, 1},
                {64, 6, 8, 3, 512, true, 1.0f, 1},    {128, 8, 0, 0, 2048, true, 1.0f, 2},
                {32, 4, 0, 0, 4100, true, 1.0f, 0},   {512, 10, 0, 0, 2048, true, 1.0f, 1},
                {257, 32, 0, 0, 300, false, 1.0f, 0}, {128, 8, 0, 0, 2048, true, 1.0f, 3},
                {256, 8, 0, 0, 1024, false, 2.5f, 3}, {64, 6, 8, 3, 512, true, 1.0f, 3},
                {128, 8, 0, 0, 2048, true, 1.0f, 4},  {256, 8, 0, 0, 1024, false, 2.5f, 4}};
#define N_RF (int)(sizeof rf_cases / sizeof rf_cases[0])
/* the fused router's forms (cuda_set_router_cluster): a counter of blocks, clusters of 16 and of 8 blocks a token */
static const int rf_forms[] = {0, 16, 8};
#define N_RF_FORMS (int)(sizeof rf_forms / sizeof rf_forms[0])
static const char *rf_form_name(int form)
{
    return form == 16 ? "clusters of 16" : form == 8 ? "clusters of 8" : "a counter of blocks";
}
/* a decode step's tokens: one session's (1), several sessions' (2-16: a row of blocks a token, a counter each) */
static const int32_t rf_toks[] = {1, 2, 3, 4, 5, 8, 13, 16};
#define N_RF_TOKS (int)(sizeof rf_toks / sizeof rf_toks[0])

/* Batch invariance: every token of a launch of n_tok again alone (one launch of 1 token each, through
 * cuda_router_fused_norm when nm, else cuda_router_fused on x's rows), into its rows of the *_1 outputs. */
static void rf_one_by_one(const cuda_router_norm_t *nm, const float *dW, size_t w_stride, const float *dx, int64_t ldx,
                          int32_t E, int32_t n_tok, int32_t ne, int32_t k, int32_t groups, int32_t used, bool renorm,
                          float scale, float *x_1, float *xn_1, float *lg_1, int32_t *ids_1, float *wt_1,
                          unsigned long long *cnt_1, unsigned int *done)
{
    guild_err_t err = {{0}};
    for (int32_t t = 0; t < n_tok; t++) {
        if (nm) {
            const cuda_router_norm_t n1 = {.x = x_1 + (size_t)t * (size_t)E,
                                           .p = nm->p ? nm->p + (size_t)t * (size_t)E : NULL,
                                           .w = nm->w,
                                           .eps = nm->eps,
                                           .xn = xn_1 + (size_t)t * (size_t)E,
                                           .found = NULL,
                                           .site = nm->site};
            ck_assert_msg(cuda_router_fused_norm(&n1, dW, w_stride, E, lg_1 + (size_t)t * (size_t)ne, 1, ne, k,
                                                 groups, used, renorm, scale, ids_1 + (size_t)t * (size_t)k,
                                                 wt_1 + (size_t)t * (size_t)k, cnt_1, done, stream, &err) == 0,
                          "%s", err.msg);
        } else {
            ck_assert_msg(cuda_router_fused(dW, w_stride, dx + (size_t)t * (size_t)ldx, ldx, E,
                                            lg_1 + (size_t)t * (size_t)ne, 1, ne, k, groups, used, renorm, scale,
                                            ids_1 + (size_t)t * (size_t)k, wt_1 + (size_t)t * (size_t)k, cnt_1, done,
                                            stream, &err) == 0, "%s", err.msg);
        }
    }
}

START_TEST(test_router_fused)
{
    const int c = _i % (N_RF * N_RF_TOKS) / N_RF_TOKS;
    const int form = cuda_set_router_cluster(rf_forms[_i / (N_RF * N_RF_TOKS)]); /* 0 where it cannot run */
    const int32_t n_tok = rf_toks[_i % N_RF_TOKS], ne = rf_cases[c].n_expert, k = rf_cases[c].k;
    const int32_t E = rf_cases[c].n_embd;
    const int64_t ldx = E + 4;
    const size_t w_stride = (size_t)E * sizeof(float) + 16, nl = (size_t)n_tok * (size_t)ne;
    const size_t np = (size_t)n_tok * (size_t)k, nc = (size_t)ne, reps = 3;
    guild_err_t err = {{0}};
    rng_t r;
    rng_seed(&r, 501 + (uint64_t)_i);
    float *W = calloc((size_t)ne, w_stride), *x = malloc((size_t)n_tok * (size_t)ldx * sizeof *x);
    for (int32_t e = 0; e < ne; e++) {
        float *row = (float *)((char *)W + (size_t)e * w_stride);
        cuda_test_fill(&r, row, (size_t)E, 0.2f);
        if (e % 2 && rf_cases[c].odd == 1)
            memcpy(row, (char *)row - w_stride, (size_t)E * sizeof(float));
        else if (e % 2 && rf_cases[c].odd == 2)
            row[E / 3] = NAN;
        else if (rf_cases[c].odd == 3)
            memset(row, 0, (size_t)E * sizeof(float));
        if (rf_cases[c].odd == 4)
            row[0] = e < 3 ? (float)e : -200.0f + 0.5f * (float)e;
    }
    cuda_test_fill(&r, x, (size_t)n_tok * (size_t)ldx, 1.0f);
    for (size_t i = 0; rf_cases[c].odd == 4 && i < (size_t)n_tok * (size_t)ldx; i++) /* logit e = W[e][0] exactly */
        x[i] = i % (size_t)ldx ? 0.0f : 1.0f;
    float *dW = cuda_test_dev_bytes(W, (size_t)ne * w_stride), *dx = upload(x, (size_t)n_tok * (size_t)ldx);
    /* [0]: cuda_matmul, cuda_router_topk, cuda_route_count; [1]: cuda_router_fused, reps times; [2]: each token
     * alone (rf_one_by_one), reps times */
    float *dlg[3], *dwt[3];
    int32_t *dids[3];
    unsigned long long *dcnt[3];
    for (int q = 0; q < 3; q++) {
        CK_CUDA(cudaMalloc((void **)&dlg[q], nl * sizeof(float)));
        CK_CUDA(cudaMalloc((void **)&dwt[q], np * sizeof(float)));
        CK_CUDA(cudaMalloc((void **)&dids[q], np * sizeof(int32_t)));
        CK_CUDA(cudaMalloc((void **)&dcnt[q], nc * sizeof(unsigned long long)));
        CK_CUDA(cudaMemset(dcnt[q], 0, nc * sizeof(unsigned long long)));
    }
    unsigned int *ddone = NULL; /* the launch's counters, one a token */
    CK_CUDA(cudaMalloc((void **)&ddone, CUDA_ROUTER_FUSED_MAX * sizeof *ddone));
    CK_CUDA(cudaMemset(ddone, 0, CUDA_ROUTER_FUSED_MAX * sizeof *ddone));
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
                                        dcnt[1], ddone, stream, &err) == 0, "%s", err.msg);
        rf_one_by_one(NULL, dW, w_stride, dx, ldx, E, n_tok, ne, k, rf_cases[c].groups, rf_cases[c].used,
                      rf_cases[c].renorm, rf_cases[c].scale, NULL, NULL, dlg[2], dids[2], dwt[2], dcnt[2], ddone);
    }
    CK_CUDA(cudaStreamSynchronize(stream));
    float *lg[3], *wt[3];
    int32_t *ids[3];
    unsigned long long *cnt[3];
    for (int q = 0; q < 3; q++) {
        lg[q] = malloc(nl * sizeof(float));
        wt[q] = malloc(np * sizeof(float));
        ids[q] = malloc(np * sizeof(int32_t));
        cnt[q] = malloc(nc * sizeof(unsigned long long));
        CK_CUDA(cudaMemcpy(lg[q], dlg[q], nl * sizeof(float), cudaMemcpyDeviceToHost));
        CK_CUDA(cudaMemcpy(wt[q], dwt[q], np * sizeof(float), cudaMemcpyDeviceToHost));
        CK_CUDA(cudaMemcpy(ids[q], dids[q], np * sizeof(int32_t), cudaMemcpyDeviceToHost));
        CK_CUDA(cudaMemcpy(cnt[q], dcnt[q], nc * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
    }
    unsigned int done[CUDA_ROUTER_FUSED_MAX];
    CK_CUDA(cudaMemcpy(done, ddone, sizeof done, cudaMemcpyDeviceToHost));
    for (int j = 0; j < CUDA_ROUTER_FUSED_MAX; j++)
        ck_assert_msg(done[j] == 0, "the fused router's counter %d is %u after its launches, not 0", j, done[j]);
    ck_assert_msg(!memcmp(lg[0], lg[1], nl * sizeof(float)), "case %d, %d tokens: the logits differ", c, n_tok);
    ck_assert_msg(!memcmp(ids[0], ids[1], np * sizeof(int32_t)), "case %d, %d tokens: the experts differ", c, n_tok);
    ck_assert_msg(!memcmp(wt[0], wt[1], np * sizeof(float)), "case %d, %d tokens: the weights differ", c, n_tok);
    ck_assert_msg(!memcmp(cnt[0], cnt[1], nc * sizeof(unsigned long long)), "case %d, %d tokens: the counts differ",
                  c, n_tok);
    ck_assert_msg(!memcmp(lg[2], lg[1], nl * sizeof(float)) && !memcmp(ids[2], ids[1], np * sizeof(int32_t)) &&
                      !memcmp(wt[2], wt[1], np * sizeof(float)) &&
                      !memcmp(cnt[2], cnt[1], nc * sizeof(unsigned long long)),
                  "case %d, %d tokens: a token's logits, experts, weights or counts differ from its own launch", c,
                  n_tok);
    /* the scalar reference's choice from the same logits (check_cuda_kernels' router case: the same experts, the
     * weights within its tolerance; not with NaN logits, which the device counts as -0.5) */
    if (rf_cases[c].odd != 2) {
        int32_t rids[32];
        float rw[32], *probs = malloc((size_t)cpu_router_sigmoid_scratch(ne, rf_cases[c].groups) * sizeof *probs);
        for (int32_t t = 0; t < n_tok; t++) {
            cpu_router_softmax_grouped(lg[1] + (size_t)t * (size_t)ne, ne, k, rf_cases[c].groups, rf_cases[c].used,
                                       rf_cases[c].renorm, rf_cases[c].scale, rids, rw, probs);
            for (int32_t sl = 0; sl < k; sl++) {
                const size_t at = (size_t)t * (size_t)k + (size_t)sl;
                ck_assert_msg(ids[1][at] == rids[sl], "case %d, %d tokens, token %d slot %d: expert %d, reference %d",
                              c, n_tok, t, sl, ids[1][at], rids[sl]);
                ck_assert_msg(fabs((double)wt[1][at] - rw[sl]) <= 2e-6 * fabs(rw[sl]) + 1e-7,
                              "case %d, %d tokens, token %d slot %d: weight %.9g, reference %.9g", c, n_tok, t, sl,
                              (double)wt[1][at], (double)rw[sl]);
            }
        }
        free(probs);
    }
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
    printf("router fused, %3d experts, top-%d, groups %d, %4d wide, %d tokens%s, %s: = product + top-k + count, bit "
           "for bit, %zu launches, = each token alone\n", ne, k, rf_cases[c].groups, E, n_tok,
           rf_cases[c].odd == 1   ? " (equal pairs)"
           : rf_cases[c].odd == 2 ? " (NaN rows)"
           : rf_cases[c].odd == 3 ? " (zero rows)"
                                  : "",
           rf_form_name(form),
           reps);
    cuda_set_router_cluster(CUDA_ROUTER_CLUSTER_DEFAULT);
    for (int q = 0; q < 3; q++) {
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
    cuda_test_fill(&r, x, (size_t)n_rows * (size_t)ldx, 2.0f);
    int32_t *ids = malloc((size_t)n_pairs * sizeof *ids);
    for (int32_t p = 0; p < n_pairs; p++)
        ids[p] = (int32_t)(rng_uniform(&r) * n_expert) % n_expert;
    float *dx = upload(x, (size_t)n_rows * (size_t)ldx);
    int32_t *dids = cuda_test_dev_bytes(ids, (size_t)n_pairs * sizeof *ids);
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

/* ---- the FFN norm in the router's launch (cuda_router_fused_norm) ------------------------------------------- */

/* plant: 0 none, 1 an infinity in p (the row's scale 0: the residual reported), 2 a NaN norm weight (normed
 * elements reported). Widths: 2,048 (the norm's 256 threads, two rounds of the router's 128), 1,000 and 300 (not
 * a multiple of them), 96 and 64 (fewer than 128 norm threads); 512 experts take the argmax passes. */
static const struct {
    int32_t n_expert, k, groups, used, n_embd;
    bool renorm;
    float scale;
    bool add;
    int plant;
} rn_cases[] = {{128, 8, 0, 0, 2048, true, 1.0f, true, 0}, {128, 8, 0, 0, 2048, true, 1.0f, false, 0},
                {64, 6, 8, 3, 1000, true, 1.0f, true, 0},  {60, 4, 0, 0, 96, false, 0.0f, true, 1},
                {160, 6, 8, 3, 64, false, 16.0f, false, 2}, {512, 10, 0, 0, 300, true, 1.0f, true, 0},
                {128, 8, 0, 0, 2048, true, 1.0f, true, 1}};
#define N_RN (int)(sizeof rn_cases / sizeof rn_cases[0])

START_TEST(test_router_fused_norm)
{
    const int c = _i % (N_RN * N_RF_TOKS) / N_RF_TOKS;
    const int form = cuda_set_router_cluster(rf_forms[_i / (N_RN * N_RF_TOKS)]); /* 0 where it cannot run */
    const int32_t n_tok = rf_toks[_i % N_RF_TOKS], ne = rn_cases[c].n_expert, k = rn_cases[c].k;
    const int32_t E = rn_cases[c].n_embd;
    const size_t w_stride = (size_t)E * sizeof(float), nx = (size_t)n_tok * (size_t)E, nl = (size_t)n_tok * ne;
    const size_t np = (size_t)n_tok * (size_t)k, nc = (size_t)ne;
    const uint32_t site = 9;
    const float eps = 1e-6f;
    guild_err_t err = {{0}};
    rng_t r;
    rng_seed(&r, 901 + (uint64_t)_i);
    float *W = malloc((size_t)ne * w_stride), *x = malloc(nx * sizeof *x), *p = malloc(nx * sizeof *p);
    float *nw = malloc((size_t)E * sizeof *nw);
    cuda_test_fill(&r, W, (size_t)ne * (size_t)E, 0.2f);
    cuda_test_fill(&r, x, nx, 2.0f);
    cuda_test_fill(&r, p, nx, 1.0f);
    cuda_test_fill(&r, nw, (size_t)E, 1.5f);
    if (rn_cases[c].plant == 1)
        p[nx - 5] = INFINITY;
    else if (rn_cases[c].plant == 2)
        nw[E / 2] = NAN;
    float *dW = upload(W, (size_t)ne * (size_t)E), *dp = upload(p, nx), *dnw = upload(nw, (size_t)E);
    /* [0]: cuda_add, cuda_rmsnorm_checked, cuda_router_fused; [1]: cuda_router_fused_norm; [2]: each token alone
     * (rf_one_by_one; no non-finite check: its finds name the row of the launch) */
    float *dx[3], *dxn[3], *dlg[3], *dwt[3];
    int32_t *dids[3];
    unsigned long long *dcnt[3];
    uint64_t *dfound[3];
    unsigned int *ddone[3];
    for (int q = 0; q < 3; q++) {
        dx[q] = upload(x, nx);
        CK_CUDA(cudaMalloc((void **)&dxn[q], nx * sizeof(float)));
        CK_CUDA(cudaMemset(dxn[q], 0xff, nx * sizeof(float)));
        CK_CUDA(cudaMalloc((void **)&dlg[q], nl * sizeof(float)));
        CK_CUDA(cudaMalloc((void **)&dwt[q], np * sizeof(float)));
        CK_CUDA(cudaMalloc((void **)&dids[q], np * sizeof(int32_t)));
        CK_CUDA(cudaMalloc((void **)&dcnt[q], nc * sizeof(unsigned long long)));
        CK_CUDA(cudaMemset(dcnt[q], 0, nc * sizeof(unsigned long long)));
        CK_CUDA(cudaMalloc((void **)&dfound[q], sizeof(uint64_t)));
        CK_CUDA(cudaMemset(dfound[q], 0xff, sizeof(uint64_t)));
        CK_CUDA(cudaMalloc((void **)&ddone[q], CUDA_ROUTER_FUSED_MAX * sizeof(unsigned int)));
        CK_CUDA(cudaMemset(ddone[q], 0, CUDA_ROUTER_FUSED_MAX * sizeof(unsigned int)));
    }
    const bool add = rn_cases[c].add;
    ck_assert_msg((!add || cuda_add(dx[0], dp, (int64_t)nx, stream, &err) == 0) &&
                      cuda_rmsnorm_checked(dxn[0], E, dx[0], E, NULL, dnw, E, n_tok, eps, dfound[0], site, stream,
                                           &err) == 0 &&
                      cuda_router_fused(dW, w_stride, dxn[0], E, E, dlg[0], n_tok, ne, k, rn_cases[c].groups,
                                        rn_cases[c].used, rn_cases[c].renorm, rn_cases[c].scale, dids[0], dwt[0],
                                        dcnt[0], ddone[0], stream, &err) == 0,
                  "%s", err.msg);
    const cuda_router_norm_t nm = {
        .x = dx[1], .p = add ? dp : NULL, .w = dnw, .eps = eps, .xn = dxn[1], .found = dfound[1], .site = site};
    ck_assert_msg(cuda_router_fused_norm(&nm, dW, w_stride, E, dlg[1], n_tok, ne, k, rn_cases[c].groups,
                                         rn_cases[c].used, rn_cases[c].renorm, rn_cases[c].scale, dids[1], dwt[1],
                                         dcnt[1], ddone[1], stream, &err) == 0,
                  "%s", err.msg);
    rf_one_by_one(&nm, dW, w_stride, NULL, 0, E, n_tok, ne, k, rn_cases[c].groups, rn_cases[c].used,
                  rn_cases[c].renorm, rn_cases[c].scale, dx[2], dxn[2], dlg[2], dids[2], dwt[2], dcnt[2], ddone[2]);
    CK_CUDA(cudaStreamSynchronize(stream));
    float *hx[3], *hxn[3], *hlg[3], *hwt[3];
    int32_t *hids[3];
    unsigned long long *hcnt[3];
    uint64_t found[3];
    unsigned int done[3][CUDA_ROUTER_FUSED_MAX];
    for (int q = 0; q < 3; q++) {
        hx[q] = malloc(nx * sizeof(float));
        hxn[q] = malloc(nx * sizeof(float));
        hlg[q] = malloc(nl * sizeof(float));
        hwt[q] = malloc(np * sizeof(float));
        hids[q] = malloc(np * sizeof(int32_t));
        hcnt[q] = malloc(nc * sizeof(unsigned long long));
        CK_CUDA(cudaMemcpy(hx[q], dx[q], nx * sizeof(float), cudaMemcpyDeviceToHost));
        CK_CUDA(cudaMemcpy(hxn[q], dxn[q], nx * sizeof(float), cudaMemcpyDeviceToHost));
        CK_CUDA(cudaMemcpy(hlg[q], dlg[q], nl * sizeof(float), cudaMemcpyDeviceToHost));
        CK_CUDA(cudaMemcpy(hwt[q], dwt[q], np * sizeof(float), cudaMemcpyDeviceToHost));
        CK_CUDA(cudaMemcpy(hids[q], dids[q], np * sizeof(int32_t), cudaMemcpyDeviceToHost));
        CK_CUDA(cudaMemcpy(hcnt[q], dcnt[q], nc * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
        CK_CUDA(cudaMemcpy(&found[q], dfound[q], sizeof(uint64_t), cudaMemcpyDeviceToHost));
        CK_CUDA(cudaMemcpy(done[q], ddone[q], sizeof done[q], cudaMemcpyDeviceToHost));
    }
    for (int j = 0; j < CUDA_ROUTER_FUSED_MAX; j++)
        ck_assert_msg(done[1][j] == 0 && done[2][j] == 0, "counter %d is %u (%u) after the launch, not 0", j,
                      done[1][j], done[2][j]);
    ck_assert_msg(!memcmp(hx[0], hx[1], nx * sizeof(float)), "case %d, %d tokens: x written back differs", c, n_tok);
    ck_assert_msg(!memcmp(hxn[0], hxn[1], nx * sizeof(float)), "case %d, %d tokens: the normed rows differ", c,
                  n_tok);
    ck_assert_msg(!memcmp(hlg[0], hlg[1], nl * sizeof(float)), "case %d, %d tokens: the logits differ", c, n_tok);
    ck_assert_msg(!memcmp(hids[0], hids[1], np * sizeof(int32_t)), "case %d, %d tokens: the experts differ", c,
                  n_tok);
    ck_assert_msg(!memcmp(hwt[0], hwt[1], np * sizeof(float)), "case %d, %d tokens: the weights differ", c, n_tok);
    ck_assert_msg(!memcmp(hcnt[0], hcnt[1], nc * sizeof(unsigned long long)), "case %d, %d tokens: the counts differ",
                  c, n_tok);
    ck_assert_msg(!memcmp(hx[2], hx[1], nx * sizeof(float)) &&
                      !memcmp(hxn[2], hxn[1], nx * sizeof(float)) && !memcmp(hlg[2], hlg[1], nl * sizeof(float)) &&
                      !memcmp(hids[2], hids[1], np * sizeof(int32_t)) && !memcmp(hwt[2], hwt[1], np * sizeof(float)) &&
                      !memcmp(hcnt[2], hcnt[1], nc * sizeof(unsigned long long)),
                  "case %d, %d tokens: a token's x, normed row, logits, experts, weights or counts differ from its own "
                  "launch", c, n_tok);
    ck_assert_msg(found[0] == found[1], "case %d, %d tokens: non-finite check %#llx, separate launches %#llx", c,
                  n_tok, (unsigned long long)found[1], (unsigned long long)found[0]);
    ck_assert_msg((found[0] != FINITE_NONE) == (rn_cases[c].plant != 0 && (add || rn_cases[c].plant == 2)),
                  "case %d: the planted value %s", c, found[0] != FINITE_NONE ? "is not planted" : "was not found");
    printf("router fused with its norm, %3d experts, top-%d, groups %d, %4d wide, %d tokens%s%s, %s: = add + rmsnorm "
           "+ fused router, bit for bit, = each token alone\n", ne, k, rn_cases[c].groups, E, n_tok,
           add ? ", add" : "",
           rn_cases[c].plant == 1 ? ", an infinity" : rn_cases[c].plant == 2 ? ", a NaN weight" : "",
           rf_form_name(form));
    cuda_set_router_cluster(CUDA_ROUTER_CLUSTER_DEFAULT);
    for (int q = 0; q < 3; q++) {
        cudaFree(dx[q]);
        cudaFree(dxn[q]);
        cudaFree(dlg[q]);
        cudaFree(dwt[q]);
        cudaFree(dids[q]);
        cudaFree(dcnt[q]);
        cudaFree(dfound[q]);
        cudaFree(ddone[q]);
        free(hx[q]);
        free(hxn[q]);
        free(hlg[q]);
        free(hwt[q]);
        free(hids[q]);
        free(hcnt[q]);
    }
    cudaFree(dW);
    cudaFree(dp);
    cudaFree(dnw);
    free(W);
    free(x);
    free(p);
    free(nw);
}
END_TEST

/* ---- a few tokens' routed experts without a route (cuda_expert_pairs) ---------------------------------------- */

static const guild_type_t ep_types[] = {GUILD_TYPE_Q4_K, GUILD_TYPE_Q6_K, GUILD_TYPE_Q8_0, GUILD_TYPE_Q4_1,
                                        GUILD_TYPE_IQ4_XS};
#define N_EP_TYPES (int)(sizeof ep_types / sizeof ep_types[0])
static const int32_t ep_toks[] = {1, 2, 3, 4, 8, 13, 16}; /* a decode step's tokens, several sessions' or a verify's */
#define N_EP_TOKS (int)(sizeof ep_toks / sizeof ep_toks[0])
#define EP_TOKS_MAX 16
/* the rows a warp each test takes */
static const struct {
    int32_t rpw;
    const char *name;
} ep_variants[] = {{0, "auto rows a warp"}, {1, "1 row a warp"}, {2, "2 rows a warp"}, {4, "4 rows a warp"}};
#define N_EP_VARIANTS (int)(sizeof ep_variants / sizeof ep_variants[0])

/* cuda_expert_pairs = cuda_quantize + cuda_expert_route + cuda_expert_matmul (tiles of one pair), gate and up
 * with SiLU and the down product, for 1..16 tokens of 6 slots over 11 experts, skipped slots (-1) and another
 * part's experts (>= n_local) among them, every row count of a warp; rows the products skip keep their bytes. */
START_TEST(test_expert_pairs)
{
    const guild_type_t type = ep_types[_i % N_EP_TYPES];
    const int32_t ntok = ep_toks[_i / N_EP_TYPES], n_used = 6, n_exp = 11, n_local = 9, P = ntok * n_used;
    const int64_t n = 512, nrows = 264, ldx = n + 8, ldo = nrows + 3, nrd = 100; /* 8 warps of 1, 2, 4 rows */
    const guild_type_t at = quant_type_info(type)->dot_type;
    guild_err_t err = {{0}};
    rng_t r;
    rng_seed(&r, 801 + (uint64_t)_i);
    uint64_t rb = 0, arow = 0;
    ck_assert(quant_row_bytes(at, (uint64_t)n, &arow, &err) == 0);
    void *dg = cuda_test_expert_weights(type, n, nrows, n_exp, &r, &rb);
    void *du = cuda_test_expert_weights(type, n, nrows, n_exp, &r, &rb);
    const size_t es = (size_t)nrows * rb;
    float *x = malloc((size_t)ntok * (size_t)ldx * sizeof *x);
    cuda_test_fill(&r, x, (size_t)ntok * (size_t)ldx, 2.0f);
    int32_t ids[EP_TOKS_MAX * 6];
    for (int32_t p = 0; p < P; p++)
        ids[p] = p % 5 == 3 ? -1 : (int32_t)(rng_uniform(&r) * n_exp) % n_exp; /* 9, 10: another part's */
    float *dx = upload(x, (size_t)ntok * (size_t)ldx);
    int32_t *dids = cuda_test_dev_bytes(ids, (size_t)P * sizeof *ids);
    const int32_t tile = 1, mt = cuda_expert_max_tiles(P, n_local, tile);
    void *dact = NULL;
    int32_t *dorder = NULL, *dtiles = NULL, *dnt = NULL;
    CK_CUDA(cudaMalloc(&dact, (size_t)ntok * arow));
    CK_CUDA(cudaMalloc((void **)&dorder, (size_t)P * sizeof(int32_t)));
    CK_CUDA(cudaMalloc((void **)&dtiles, (size_t)mt * 4 * sizeof(int32_t)));
    CK_CUDA(cudaMalloc((void **)&dnt, sizeof(int32_t)));
    const size_t obytes = (size_t)P * (size_t)ldo * sizeof(float);
    float *dref[2], *dgot[2];
    for (int k = 0; k < 2; k++) {
        CK_CUDA(cudaMalloc((void **)&dref[k], obytes));
        CK_CUDA(cudaMalloc((void **)&dgot[k], obytes));
        CK_CUDA(cudaMemset(dref[k], 0x7e, obytes));
    }
    /* the reference: gate and up with SiLU, then the down product over the first nd of those rows' elements */
    const int64_t nd = quant_type_info(type)->block_elems == 256 ? 256 : 160;
    ck_assert_msg(cuda_quantize(at, dx, ldx, dact, arow, n, ntok, stream, &err) == 0 &&
                      cuda_expert_route(dids, P, n_local, tile, dorder, dtiles, dnt, stream, &err) == 0 &&
                      cuda_expert_matmul(type, n, nrows, dg, du, es, rb, dact, arow, n_used, dorder, dtiles, dnt, mt,
                                         tile, dref[0], ldo, stream, &err) == 0,
                  "%s", err.msg);
    uint64_t rbd = 0, ahrow = 0;
    void *dah = NULL;
    void *dd = cuda_test_expert_weights(type, nd, nrd, n_exp, &r, &rbd);
    ck_assert(quant_row_bytes(at, (uint64_t)nd, &ahrow, &err) == 0);
    CK_CUDA(cudaMalloc(&dah, (size_t)P * ahrow));
    ck_assert_msg(cuda_quantize_rows(at, dref[0], ldo, dah, ahrow, nd, P, dids, 0, n_local, stream, &err) == 0 &&
                      cuda_expert_matmul(type, nd, nrd, dd, NULL, (size_t)nrd * rbd, rbd, dah, ahrow, 1, dorder,
                                         dtiles, dnt, mt, tile, dref[1], ldo, stream, &err) == 0,
                  "%s", err.msg);
    CK_CUDA(cudaStreamSynchronize(stream));
    unsigned char *h[2] = {malloc(obytes), malloc(obytes)};
    for (int vi = 0; vi < N_EP_VARIANTS; vi++) {
        const int32_t rpw = ep_variants[vi].rpw;
        for (int k = 0; k < 2; k++)
            CK_CUDA(cudaMemset(dgot[k], 0x7e, obytes));
        ck_assert_msg(cuda_expert_pairs(type, n, nrows, dg, du, es, rb, dx, ldx, n_used, dids, n_local, P, dgot[0],
                                        ldo, rpw, false, stream, &err) == 0,
                      "%s", err.msg);
        ck_assert_msg(cuda_expert_pairs(type, nd, nrd, dd, NULL, (size_t)nrd * rbd, rbd, dref[0], ldo, 1, dids,
                                        n_local, P, dgot[1], ldo, rpw, true, stream, &err) == 0,
                      "%s", err.msg);
        CK_CUDA(cudaStreamSynchronize(stream));
        for (int k = 0; k < 2; k++) {
            CK_CUDA(cudaMemcpy(h[0], dref[k], obytes, cudaMemcpyDeviceToHost));
            CK_CUDA(cudaMemcpy(h[1], dgot[k], obytes, cudaMemcpyDeviceToHost));
            for (int32_t p = 0; p < P; p++)
                ck_assert_msg(!memcmp(h[0] + (size_t)p * (size_t)ldo * 4, h[1] + (size_t)p * (size_t)ldo * 4,
                                      (size_t)ldo * 4),
                              "%s, %d tokens, %s: %s of pair %d (expert %d) differs from the routed launches'",
                              quant_type_info(type)->name, ntok, ep_variants[vi].name,
                              k ? "the down product" : "silu(g) u", p, ids[p]);
        }
    }
    printf("expert pairs, %-6s, %d tokens x %d slots: = quantize + route + expert matmul, bit for bit (gate/up with "
           "SiLU, down; rows a warp: auto, 1, 2, 4)\n",
           quant_type_info(type)->name, ntok, n_used);
    for (int k = 0; k < 2; k++) {
        cudaFree(dref[k]);
        cudaFree(dgot[k]);
    }
    free(h[0]);
    free(h[1]);
    cudaFree(dd);
    cudaFree(dah);
    cudaFree(dg);
    cudaFree(du);
    cudaFree(dx);
    cudaFree(dids);
    cudaFree(dact);
    cudaFree(dorder);
    cudaFree(dtiles);
    cudaFree(dnt);
    free(x);
}
END_TEST

/* Batch invariance: a step of 16 tokens x 8 slots through cuda_expert_pairs (gate/up with SiLU, down, then
 * cuda_moe_combine), each token's experts distinct as a router's, the tokens sharing them (8 of 12 experts each,
 * skipped slots and another part's experts among them), every rows-a-warp choice: each token's rows = the bits of
 * that token run alone (8 pairs), for Q4_K, Q6_K, Q8_0 at small sizes and the Qwen3-30B-A3B shape's types (gate/up
 * Q4_K 768 x 2048, down Q6_K 2048 x 768). */
static const struct {
    guild_type_t gt, dt;
    int64_t n, nrows; /* gate/up rows of n; down rows of nrows, n of them */
} ea_cases[] = {
    {GUILD_TYPE_Q4_K, GUILD_TYPE_Q4_K, 512, 256},
    {GUILD_TYPE_Q6_K, GUILD_TYPE_Q6_K, 768, 512},
    {GUILD_TYPE_Q8_0, GUILD_TYPE_Q8_0, 544, 224},
    {GUILD_TYPE_Q4_K, GUILD_TYPE_Q6_K, 2048, 768},
};
#define N_EA (int)(sizeof ea_cases / sizeof ea_cases[0])

START_TEST(test_expert_pairs_alone)
{
    const guild_type_t gt = ea_cases[_i].gt, dt = ea_cases[_i].dt;
    const int64_t n = ea_cases[_i].n, nrows = ea_cases[_i].nrows;
    enum { T = 16, K = 8, NE = 14, NL = 12 }; /* experts 12, 13: another part's */
    const int32_t P = T * K;
    guild_err_t err = {{0}};
    rng_t r;
    rng_seed(&r, 1601 + (uint64_t)_i);
    uint64_t rg = 0, rd = 0;
    void *dg = cuda_test_expert_weights(gt, n, nrows, NE, &r, &rg);
    void *du = cuda_test_expert_weights(gt, n, nrows, NE, &r, &rg);
    void *dd = cuda_test_expert_weights(dt, nrows, n, NE, &r, &rd);
    const size_t gm = (size_t)nrows * rg, dm = (size_t)n * rd;
    const int64_t ldx = n + 4, ldh = nrows + 4;
    float *x = malloc((size_t)T * (size_t)ldx * sizeof *x), *wts = malloc((size_t)P * sizeof *wts);
    cuda_test_fill(&r, x, (size_t)T * (size_t)ldx, 2.0f);
    cuda_test_fill(&r, wts, (size_t)P, 1.0f);
    int32_t ids[T * K];
    for (int32_t t = 0; t < T; t++) { /* 8 distinct of experts 0..NE-1, mostly the first NE - 2 */
        int32_t pool[NE];
        for (int32_t e = 0; e < NE; e++)
            pool[e] = e;
        const int32_t np = rng_uniform(&r) < 0.25 ? NE : NL;
        for (int32_t k = 0; k < K; k++) {
            const int32_t c = k + (int32_t)(rng_uniform(&r) * (np - k)) % (np - k);
            const int32_t e = pool[c];
            pool[c] = pool[k];
            pool[k] = e;
            ids[t * K + k] = (t * K + k) % 11 == 5 ? -1 : e;
        }
    }
    float *dx = upload(x, (size_t)T * (size_t)ldx), *dw = upload(wts, (size_t)P);
    int32_t *dids = cuda_test_dev_bytes(ids, sizeof ids);
    const size_t hbytes = (size_t)P * (size_t)ldh * sizeof(float), ybytes = (size_t)P * (size_t)n * sizeof(float);
    const size_t rbytes = (size_t)T * (size_t)n * sizeof(float);
    float *dh[2], *dy[2], *dres[2];
    for (int k = 0; k < 2; k++) {
        CK_CUDA(cudaMalloc((void **)&dh[k], hbytes));
        CK_CUDA(cudaMalloc((void **)&dy[k], ybytes));
        CK_CUDA(cudaMalloc((void **)&dres[k], rbytes));
    }
    unsigned char *h0 = malloc(hbytes), *h1 = malloc(hbytes), *y0 = malloc(ybytes), *y1 = malloc(ybytes);
    unsigned char *r0 = malloc(rbytes), *r1 = malloc(rbytes);
    /* one step of all tokens (k = 0) or each token alone (k = 1): gate/up, down, combine into the residual rows */
    for (int vi = 0; vi < N_EP_VARIANTS; vi++) {
        const int32_t rpw = ep_variants[vi].rpw;
        for (int k = 0; k < 2; k++) {
            CK_CUDA(cudaMemset(dh[k], 0x7e, hbytes));
            CK_CUDA(cudaMemset(dy[k], 0x7e, ybytes));
            for (int32_t t = 0; t < T; t++)
                CK_CUDA(cudaMemcpy(dres[k] + t * n, x + t * ldx, (size_t)n * sizeof(float), cudaMemcpyHostToDevice));
        }
        ck_assert_msg(cuda_expert_pairs(gt, n, nrows, dg, du, gm, rg, dx, ldx, K, dids, NL, P, dh[0], ldh, rpw, false,
                                        stream, &err) == 0 &&
                          cuda_expert_pairs(dt, nrows, n, dd, NULL, dm, rd, dh[0], ldh, 1, dids, NL, P, dy[0], n, rpw,
                                            true, stream, &err) == 0,
                      "%s: %s", ep_variants[vi].name, err.msg);
        for (int32_t t = 0; t < T; t++) {
            float *ht = dh[1] + (size_t)t * K * (size_t)ldh, *yt = dy[1] + (size_t)t * K * (size_t)n;
            ck_assert_msg(cuda_expert_pairs(gt, n, nrows, dg, du, gm, rg, dx + t * ldx, ldx, K, dids + t * K, NL, K,
                                            ht, ldh, 0, false, stream, &err) == 0 &&
                              cuda_expert_pairs(dt, nrows, n, dd, NULL, dm, rd, ht, ldh, 1, dids + t * K, NL, K, yt, n,
                                                0, true, stream, &err) == 0,
                          "%s", err.msg);
        }
        /* the combine over slots whose outputs were written (the skipped slots' weight 0 and rows 0) */
        for (int k = 0; k < 2; k++) {
            float *hy = (float *)(k ? y1 : y0);
            CK_CUDA(cudaMemcpy(hy, dy[k], ybytes, cudaMemcpyDeviceToHost));
            for (int32_t p = 0; p < P; p++)
                if (ids[p] < 0 || ids[p] >= NL)
                    memset(hy + (size_t)p * (size_t)n, 0, (size_t)n * sizeof(float));
            CK_CUDA(cudaMemcpy(dy[k], hy, ybytes, cudaMemcpyHostToDevice));
        }
        ck_assert_msg(cuda_moe_combine(dres[0], dy[0], dw, NULL, NULL, T, K, n, stream, &err) == 0, "%s", err.msg);
        for (int32_t t = 0; t < T; t++)
            ck_assert_msg(cuda_moe_combine(dres[1] + t * n, dy[1] + (size_t)t * K * (size_t)n, dw + t * K, NULL, NULL,
                                           1, K, n, stream, &err) == 0,
                          "%s", err.msg);
        CK_CUDA(cudaMemcpy(h0, dh[0], hbytes, cudaMemcpyDeviceToHost));
        CK_CUDA(cudaMemcpy(h1, dh[1], hbytes, cudaMemcpyDeviceToHost));
        CK_CUDA(cudaMemcpy(y0, dy[0], ybytes, cudaMemcpyDeviceToHost));
        CK_CUDA(cudaMemcpy(y1, dy[1], ybytes, cudaMemcpyDeviceToHost));
        CK_CUDA(cudaMemcpy(r0, dres[0], rbytes, cudaMemcpyDeviceToHost));
        CK_CUDA(cudaMemcpy(r1, dres[1], rbytes, cudaMemcpyDeviceToHost));
        for (int32_t p = 0; p < P; p++) {
            ck_assert_msg(!memcmp(h0 + (size_t)p * (size_t)ldh * 4, h1 + (size_t)p * (size_t)ldh * 4, (size_t)ldh * 4),
                          "%s/%s %lld, %s: silu(g) u of token %d slot %d (expert %d) differs from the token alone's",
                          quant_type_info(gt)->name, quant_type_info(dt)->name, (long long)n, ep_variants[vi].name,
                          p / K, p % K, ids[p]);
            ck_assert_msg(!memcmp(y0 + (size_t)p * (size_t)n * 4, y1 + (size_t)p * (size_t)n * 4, (size_t)n * 4),
                          "%s/%s %lld, %s: the down product of token %d slot %d (expert %d) differs from the token "
                          "alone's",
                          quant_type_info(gt)->name, quant_type_info(dt)->name, (long long)n, ep_variants[vi].name,
                          p / K, p % K, ids[p]);
        }
        ck_assert_msg(!memcmp(r0, r1, rbytes), "%s/%s %lld, %s: the combined rows differ from the tokens alone's",
                      quant_type_info(gt)->name, quant_type_info(dt)->name, (long long)n, ep_variants[vi].name);
    }
    int32_t distinct = 0;
    for (int32_t e = 0; e < NL; e++)
        for (int32_t p = 0; p < P; p++)
            if (ids[p] == e) {
                distinct++;
                break;
            }
    printf("expert pairs, %s gate/up %lld x %lld, %s down: %d tokens x %d slots over %d experts at once = each token "
           "alone, bit for bit (gate/up with SiLU, down, combine; rows a warp: auto, 1, 2, 4)\n",
           quant_type_info(gt)->name, (long long)nrows, (long long)n, quant_type_info(dt)->name, T, K, distinct);
    for (int k = 0; k < 2; k++) {
        cudaFree(dh[k]);
        cudaFree(dy[k]);
        cudaFree(dres[k]);
    }
    free(h0);
    free(h1);
    free(y0);
    free(y1);
    free(r0);
    free(r1);
    cudaFree(dg);
    cudaFree(du);
    cudaFree(dd);
    cudaFree(dx);
    cudaFree(dw);
    cudaFree(dids);
    free(x);
    free(wts);
}
END_TEST

/* A decode step's routed experts at the Qwen3-30B-A3B shape (128 experts of 768 x 2048, gate and up Q4_K, down
 * Q4_K or Q6_K, 8 pairs a token, 1, 2, 4, 8 or 16 tokens, each token's 8 experts drawn at random as a router's
 * spread would, the tokens sharing some): the routed launches (route + quantize, gate/up, quantize, down) against
 * cuda_expert_pairs at each row count of a warp, as graphs of 64 steps over 8 layers' worth of experts (most reads
 * from HBM, as in a step); the time a step, printed (no assertion: a measurement). */
static const int32_t et_toks[] = {1, 2, 4, 8, 16};
#define N_ET_TOKS (int)(sizeof et_toks / sizeof et_toks[0])

/* A timing step on layer st % L's experts and routing: routed, the routed launches (route + quantize, the tiles'
 * products; with their buffers), else cuda_expert_pairs at rpw rows a warp. */
typedef struct et_ctx {
    const cuda_test_step_t *t;
    int32_t rpw;
    bool routed;
    int32_t mt;
    void *dax, *dah;
    uint64_t ax, ah;
    int32_t *dorder, *dtiles, *dnt;
} et_ctx_t;

static int et_step(void *ctx, int32_t st, cudaStream_t s, guild_err_t *err)
{
    const et_ctx_t *c = ctx;
    const cuda_test_step_t *t = c->t;
    const int64_t E = t->E, F = t->F;
    const int32_t l = st % t->L, k = t->k, n_exp = t->n_exp;
    const size_t eo = (size_t)l * (size_t)n_exp;
    const int32_t *li = t->dids + l * k;
    const char *g0 = t->dg + eo * t->gm, *u0 = t->du + eo * t->gm, *d0 = t->dd + eo * t->dm;
    if (c->routed)
        return cuda_expert_route_quantize(li, k, n_exp, 1, c->dorder, c->dtiles, c->dnt, GUILD_TYPE_Q8_K, t->dx, E,
                                          c->dax, c->ax, E, t->ntok, s, err) < 0 ||
                       cuda_expert_matmul(GUILD_TYPE_Q4_K, E, F, g0, u0, t->gm, t->rg, c->dax, c->ax, 8, c->dorder,
                                          c->dtiles, c->dnt, c->mt, 1, t->dh, F, s, err) < 0 ||
                       cuda_quantize_rows(GUILD_TYPE_Q8_K, t->dh, F, c->dah, c->ah, F, k, li, 0, INT32_MAX, s,
                                          err) < 0 ||
                       cuda_expert_matmul(t->dt, F, E, d0, NULL, t->dm, t->rd, c->dah, c->ah, 1, c->dorder, c->dtiles,
                                          c->dnt, c->mt, 1, t->dy, E, s, err) < 0
                   ? -1
                   : 0;
    return cuda_expert_pairs(GUILD_TYPE_Q4_K, E, F, g0, u0, t->gm, t->rg, t->dx, E, 8, li, n_exp, k, t->dh, F, c->rpw,
                             false, s, err) < 0 ||
                   cuda_expert_pairs(t->dt, F, E, d0, NULL, t->dm, t->rd, t->dh, F, 1, li, n_exp, k, t->dy, E, c->rpw,
                                     true, s, err) < 0
               ? -1
               : 0;
}

START_TEST(test_expert_pairs_time)
{
    cuda_test_step_t t;
    cuda_test_step_open(&t, _i % 2 ? GUILD_TYPE_Q6_K : GUILD_TYPE_Q4_K, et_toks[_i / 2]);
    guild_err_t err = {{0}};
    et_ctx_t c = {.t = &t, .mt = cuda_expert_max_tiles(t.k, t.n_exp, 1)};
    ck_assert(quant_row_bytes(GUILD_TYPE_Q8_K, (uint64_t)t.E, &c.ax, &err) == 0 &&
              quant_row_bytes(GUILD_TYPE_Q8_K, (uint64_t)t.F, &c.ah, &err) == 0);
    CK_CUDA(cudaMalloc(&c.dax, (size_t)t.ntok * c.ax));
    CK_CUDA(cudaMalloc(&c.dah, (size_t)t.k * c.ah));
    CK_CUDA(cudaMalloc((void **)&c.dorder, (size_t)t.k * sizeof(int32_t)));
    CK_CUDA(cudaMalloc((void **)&c.dtiles, (size_t)c.mt * 16));
    CK_CUDA(cudaMalloc((void **)&c.dnt, sizeof(int32_t)));
    enum { NV = N_EP_VARIANTS + 1 }; /* routed; then each variant of cuda_expert_pairs */
    double us[NV] = {0};
    for (int v = 0; v < NV; v++) {
        c.routed = v == 0;
        c.rpw = v ? ep_variants[v - 1].rpw : 0;
        us[v] = cuda_test_graph_us(et_step, &c, 64, stream);
    }
    printf("time: a decode step's routed experts (128 x 768 x 2048, gate/up q4_K, down %s, %d tokens, %d pairs, "
           "%.1f distinct experts a layer; graphs of 64 steps over 8 layers): routed launches %.2f us",
           quant_type_info(t.dt)->name, t.ntok, t.k, (double)t.distinct / t.L, us[0]);
    for (int v = 1; v < NV; v++)
        printf("; %s %.2f", ep_variants[v - 1].name, us[v]);
    printf(" us\n");
    cudaFree(c.dax);
    cudaFree(c.dah);
    cudaFree(c.dorder);
    cudaFree(c.dtiles);
    cudaFree(c.dnt);
    cuda_test_step_close(&t);
}
END_TEST

/* ---- decode attention with its splits merged in its launch (cuda_attn_fuse_t) ---------------------------------- */

static const struct {
    int32_t n_head, n_head_kv, head_dim, kv0, n_tok, window;
    bool sinks;
} ad_cases[] = {
    {32, 4, 128, 511, 1, 0, false},  {32, 4, 128, 100, 3, 0, false}, {32, 4, 128, 3000, 2, 0, true},
    {8, 8, 64, 700, 1, 0, false},    {32, 2, 64, 1500, 4, 0, false}, {16, 4, 128, 900, 1, 256, true},
    {4, 2, 256, 400, 2, 0, false},   {32, 4, 128, 40, 1, 0, false}, /* one split: no merge either way */
    {16, 1, 128, 4500, 1, 0, true}, /* 16 heads a block (4 outputs a thread in the merge), the 64 splits' cap */
    {32, 4, 128, 600, 16, 0, false}, /* 16 rows of 10 splits: the default form's grid cut (an H200's 8 blocks) */
    {32, 4, 128, 2100, 32, 256, true}, /* 32 rows of a window's 4 splits */
    {32, 4, 128, 60, 8, 0, false},   /* rows of 1 split (written in place) beside rows of 2 (merged) */
};
#define N_AD (int)(sizeof ad_cases / sizeof ad_cases[0])

/* The launch forms of the fused launches (cuda_set_attn_form); the reference (the merge kernel) never takes one. */
static const struct {
    const char *name;
    cuda_attn_form_t form;
} ad_forms[] = {
    {"default form", {CUDA_ATTN_WAVES_DEFAULT, true, CUDA_ATTN_PREFETCH_ROWS_DEFAULT, 0}},
    {"a block a split, lengths after the wait", {0, false, 0, 0}},
    {"3 blocks a row, early, prefetch at every size", {0, true, CUDA_DECODE_ROWS, 3}},
    {"1 block a row computing every split, lengths after the wait", {0, false, CUDA_DECODE_ROWS, 1}},
    {"2 blocks a row, early, no prefetch", {CUDA_ATTN_WAVES_DEFAULT, true, 0, 2}},
    {"grid cut to two waves, early, prefetch at every size", {2, true, CUDA_DECODE_ROWS, 0}},
};
#define N_AD_FORMS (int)(sizeof ad_forms / sizeof ad_forms[0])

/* The GQA decode kernel with the merge in its launch = with the merge kernel, every output bit, twice in a row (its
 * counters back at 0), over an F16 cache with sliding windows and sinks among the cases; with the output also
 * quantized (Q8_K, Q8_0, Q8_1 by case; in the launch, and after the merge kernel without counters) = cuda_quantize's
 * bytes; the fused launches in each launch form (ad_forms: several splits a block, one block computing a row's
 * every split, the lengths read before or after the wait, the L2 prefetch at every size). */
START_TEST(test_attn_merge_fused)
{
    const int ci = _i % N_AD, fi = _i / N_AD;
    const int32_t nh = ad_cases[ci].n_head, nkv = ad_cases[ci].n_head_kv, HD = ad_cases[ci].head_dim;
    const int32_t kv0 = ad_cases[ci].kv0, n_tok = ad_cases[ci].n_tok;
    const int64_t KV = (int64_t)nkv * HD, Q = (int64_t)nh * HD, n_ctx = kv0 + n_tok + 5;
    guild_err_t err = {{0}};
    rng_t r;
    rng_seed(&r, 901 + (uint64_t)ci);
    const size_t ncache = (size_t)(n_ctx * KV), nq = (size_t)(n_tok * Q);
    quant_half_t *kh = malloc(ncache * 2), *vh = malloc(ncache * 2);
    float *f = malloc(ncache * sizeof *f);
    cuda_test_fill(&r, f, ncache, 1.0f);
    for (size_t i = 0; i < ncache; i++)
        kh[i] = quant_f32_to_f16(f[i]);
    cuda_test_fill(&r, f, ncache, 1.0f);
    for (size_t i = 0; i < ncache; i++)
        vh[i] = quant_f32_to_f16(f[i]);
    float *q = malloc(nq * sizeof *q), sinks[64];
    cuda_test_fill(&r, q, nq, 3.0f);
    for (int32_t h = 0; h < nh; h++)
        sinks[h] = (float)(6 * rng_uniform(&r) - 2);
    void *dk = cuda_test_dev_bytes(kh, ncache * 2), *dv = cuda_test_dev_bytes(vh, ncache * 2);
    /* the cache length from the device, as in a captured graph */
    int32_t *dkv0 = cuda_test_dev_bytes(&kv0, sizeof kv0);
    float *dq = upload(q, nq), *dsinks = upload(sinks, (size_t)nh);
    const size_t sb = cuda_attention_decode_scratch(n_tok, nh, HD, (int32_t)n_ctx);
    void *scratch = NULL;
    unsigned int *done = NULL;
    CK_CUDA(cudaMalloc(&scratch, sb));
    CK_CUDA(cudaMalloc((void **)&done, (size_t)nkv * CUDA_DECODE_ROWS * sizeof *done));
    CK_CUDA(cudaMemset(done, 0, (size_t)nkv * CUDA_DECODE_ROWS * sizeof *done));
    static const guild_type_t qts[] = {GUILD_TYPE_Q8_K, GUILD_TYPE_Q8_0, GUILD_TYPE_Q8_1};
    const guild_type_t qt = Q % 256 ? qts[1 + ci % 2] : qts[ci % 3];
    uint64_t arow = 0;
    ck_assert(quant_row_bytes(qt, (uint64_t)Q, &arow, &err) == 0);
    const size_t qstride = (size_t)arow + 8, qbytes = (size_t)n_tok * qstride;
    float *dout[4];
    unsigned char *h[4], *hq[4];
    void *dqo[4];
    const float scale = 1.0f / sqrtf((float)HD);
    cuda_set_attn_form(&ad_forms[fi].form);
    cuda_set_attn_mma(false); /* the FMA forms (the tensor-core form has test_attn_mma) */
    for (int k = 0; k < 4; k++) { /* the merge kernel; the fused merge, twice, quantizing; the merge kernel, too */
        CK_CUDA(cudaMalloc((void **)&dout[k], nq * sizeof(float)));
        CK_CUDA(cudaMemset(dout[k], 0x7e, nq * sizeof(float)));
        CK_CUDA(cudaMalloc(&dqo[k], qbytes));
        CK_CUDA(cudaMemset(dqo[k], 0x5a, qbytes));
        const cuda_attn_ext_t ext = {ad_cases[ci].window, ad_cases[ci].sinks ? dsinks : NULL};
        const cuda_attn_fuse_t fuse = {k == 1 || k == 2 ? done : NULL, qt, dqo[k], qstride};
        const int32_t kv0_max = (int32_t)n_ctx - n_tok;
        ck_assert_msg(cuda_attention_decode_dyn(dout[k], dq, GUILD_TYPE_F16, dk, dv, n_tok, dkv0, kv0_max, nh, nkv, HD,
                                                scale, &ext, scratch, sb, k ? &fuse : NULL, stream, &err) == 0,
                      "%s", err.msg);
        if (!k) /* the reference's quantization */
            ck_assert_msg(cuda_quantize(qt, dout[0], Q, dqo[0], qstride, Q, n_tok, stream, &err) == 0, "%s", err.msg);
        CK_CUDA(cudaStreamSynchronize(stream));
        h[k] = malloc(nq * sizeof(float));
        hq[k] = malloc(qbytes);
        CK_CUDA(cudaMemcpy(h[k], dout[k], nq * sizeof(float), cudaMemcpyDeviceToHost));
        CK_CUDA(cudaMemcpy(hq[k], dqo[k], qbytes, cudaMemcpyDeviceToHost));
    }
    cuda_set_attn_form(NULL);
    cuda_set_attn_mma(true);
    unsigned int *hd = malloc((size_t)nkv * CUDA_DECODE_ROWS * sizeof *hd);
    CK_CUDA(cudaMemcpy(hd, done, (size_t)nkv * CUDA_DECODE_ROWS * sizeof *hd, cudaMemcpyDeviceToHost));
    for (int32_t i = 0; i < nkv * CUDA_DECODE_ROWS; i++)
        ck_assert_msg(hd[i] == 0, "counter %d left at %u", i, hd[i]);
    for (int k = 1; k < 4; k++) {
        for (size_t i = 0; i < nq; i++)
            ck_assert_msg(!memcmp(h[0] + 4 * i, h[k] + 4 * i, 4),
                          "%d/%d heads of %d, %d keys, %d rows (launch %d, %s): output %zu differs from the merge "
                          "kernel's", nh, nkv, HD, kv0, n_tok, k, ad_forms[fi].name, i);
        for (int32_t t = 0; t < n_tok; t++)
            ck_assert_msg(!memcmp(hq[0] + (size_t)t * qstride, hq[k] + (size_t)t * qstride, (size_t)arow),
                          "%d/%d heads of %d, %d keys, %d rows (launch %d, %s): row %d quantized to %s differs "
                          "from cuda_quantize's", nh, nkv, HD, kv0, n_tok, k, ad_forms[fi].name, t,
                          quant_type_info(qt)->name);
    }
    printf("attention, merge in the launch, %2d/%d heads of %3d, %4d keys, %2d rows%s%s, %s: = merge kernel, bit for "
           "bit; its rows quantized to %s = cuda_quantize\n", nh, nkv, HD, kv0, n_tok,
           ad_cases[ci].window ? ", window" : "", ad_cases[ci].sinks ? ", sinks" : "", ad_forms[fi].name,
           quant_type_info(qt)->name);
    for (int k = 0; k < 4; k++) {
        cudaFree(dout[k]);
        cudaFree(dqo[k]);
        free(h[k]);
        free(hq[k]);
    }
    free(hd);
    cudaFree(done);
    cudaFree(scratch);
    cudaFree(dkv0);
    cudaFree(dk);
    cudaFree(dv);
    cudaFree(dq);
    cudaFree(dsinks);
    free(kh);
    free(vh);
    free(f);
    free(q);
}
END_TEST

/* The decode attention on tensor cores (cuda_set_attn_mma) against the FMA form, for the cases of ad_cases it
 * takes (F16, heads of 64 or 128, up to 16 query heads a KV head): every output within 2e-4 (absolute, the outputs
 * are O(1)) of the FMA form's; its rows quantized in the launch = cuda_quantize of its output; each row of a batch
 * the bits of its own one-row launch (batch invariance); the counters back at 0. */
START_TEST(test_attn_mma)
{
    const int ci = _i;
    const int32_t nh = ad_cases[ci].n_head, nkv = ad_cases[ci].n_head_kv, HD = ad_cases[ci].head_dim;
    const int32_t kv0 = ad_cases[ci].kv0, n_tok = ad_cases[ci].n_tok;
    if ((HD != 64 && HD != 128) || nh / nkv > 16) {
        printf("attention on tensor cores, %2d/%d heads of %3d: not taken\n", nh, nkv, HD);
        return;
    }
    const int64_t KV = (int64_t)nkv * HD, Q = (int64_t)nh * HD, n_ctx = kv0 + n_tok + 5;
    guild_err_t err = {{0}};
    rng_t r;
    rng_seed(&r, 2901 + (uint64_t)ci);
    const size_t ncache = (size_t)(n_ctx * KV), nq = (size_t)(n_tok * Q);
    quant_half_t *kh = malloc(ncache * 2), *vh = malloc(ncache * 2);
    float *f = malloc(ncache * sizeof *f), *q = malloc(nq * sizeof *q), sinks[64];
    cuda_test_fill(&r, f, ncache, 1.0f);
    for (size_t i = 0; i < ncache; i++)
        kh[i] = quant_f32_to_f16(f[i]);
    cuda_test_fill(&r, f, ncache, 1.0f);
    for (size_t i = 0; i < ncache; i++)
        vh[i] = quant_f32_to_f16(f[i]);
    cuda_test_fill(&r, q, nq, 3.0f);
    for (int32_t h = 0; h < nh; h++)
        sinks[h] = (float)(6 * rng_uniform(&r) - 2);
    void *dk = cuda_test_dev_bytes(kh, ncache * 2), *dv = cuda_test_dev_bytes(vh, ncache * 2);
    float *dq = upload(q, nq), *dsinks = upload(sinks, (size_t)nh);
    const size_t sb = cuda_attention_decode_scratch(n_tok, nh, HD, (int32_t)n_ctx);
    void *scratch = NULL;
    unsigned int *done = NULL;
    CK_CUDA(cudaMalloc(&scratch, sb));
    CK_CUDA(cudaMalloc((void **)&done, (size_t)nkv * CUDA_DECODE_ROWS * sizeof *done));
    CK_CUDA(cudaMemset(done, 0, (size_t)nkv * CUDA_DECODE_ROWS * sizeof *done));
    const guild_type_t qt = Q % 256 ? GUILD_TYPE_Q8_0 : GUILD_TYPE_Q8_K;
    uint64_t arow = 0;
    ck_assert(quant_row_bytes(qt, (uint64_t)Q, &arow, &err) == 0);
    const size_t qbytes = (size_t)n_tok * arow;
    const float scale = 1.0f / sqrtf((float)HD);
    const cuda_attn_ext_t ext = {ad_cases[ci].window, ad_cases[ci].sinks ? dsinks : NULL};
    float *dout = NULL, *dref = NULL, *done_row = NULL;
    void *dqo = NULL, *dqr = NULL;
    CK_CUDA(cudaMalloc((void **)&dout, nq * sizeof(float)));
    CK_CUDA(cudaMalloc((void **)&dref, nq * sizeof(float)));
    CK_CUDA(cudaMalloc((void **)&done_row, (size_t)Q * sizeof(float)));
    CK_CUDA(cudaMalloc(&dqo, qbytes));
    CK_CUDA(cudaMalloc(&dqr, qbytes));
    int32_t *dkv0 = cuda_test_dev_bytes(&kv0, sizeof kv0);
    const int32_t kv0_max = (int32_t)n_ctx - n_tok;
    const cuda_attn_fuse_t fref = {done, GUILD_TYPE_F32, NULL, 0}, fmma = {done, qt, dqo, arow};
    cuda_set_attn_mma(false);
    ck_assert_msg(cuda_attention_decode_dyn(dref, dq, GUILD_TYPE_F16, dk, dv, n_tok, dkv0, kv0_max, nh, nkv, HD, scale,
                                            &ext, scratch, sb, &fref, stream, &err) == 0, "%s", err.msg);
    cuda_set_attn_mma(true);
    ck_assert_msg(cuda_attention_decode_dyn(dout, dq, GUILD_TYPE_F16, dk, dv, n_tok, dkv0, kv0_max, nh, nkv, HD, scale,
                                            &ext, scratch, sb, &fmma, stream, &err) == 0, "%s", err.msg);
    ck_assert_msg(cuda_quantize(qt, dout, Q, dqr, arow, Q, n_tok, stream, &err) == 0, "%s", err.msg);
    float *ho = malloc(nq * sizeof *ho), *hr = malloc(nq * sizeof *hr), *h1 = malloc((size_t)Q * sizeof *h1);
    unsigned char *hq = malloc(qbytes), *hqr = malloc(qbytes);
    CK_CUDA(cudaStreamSynchronize(stream));
    CK_CUDA(cudaMemcpy(ho, dout, nq * sizeof(float), cudaMemcpyDeviceToHost));
    CK_CUDA(cudaMemcpy(hr, dref, nq * sizeof(float), cudaMemcpyDeviceToHost));
    CK_CUDA(cudaMemcpy(hq, dqo, qbytes, cudaMemcpyDeviceToHost));
    CK_CUDA(cudaMemcpy(hqr, dqr, qbytes, cudaMemcpyDeviceToHost));
    double worst = 0;
    for (size_t i = 0; i < nq; i++) {
        const double d = fabs((double)ho[i] - (double)hr[i]);
        worst = d > worst ? d : worst;
        ck_assert_msg(d <= 2e-4, "%d/%d heads of %d, %d keys, %d rows: output %zu %.9g on tensor cores, %.9g FMA",
                      nh, nkv, HD, kv0, n_tok, i, (double)ho[i], (double)hr[i]);
    }
    ck_assert_msg(!memcmp(hq, hqr, qbytes), "%d/%d heads of %d, %d keys, %d rows: the rows quantized in the launch "
                  "differ from cuda_quantize's", nh, nkv, HD, kv0, n_tok);
    /* each row alone at its position: the same bits */
    for (int32_t t = 0; t < n_tok; t++) {
        const int32_t kv0t = kv0 + t;
        int32_t *dk1 = cuda_test_dev_bytes(&kv0t, sizeof kv0t);
        const cuda_attn_fuse_t f1 = {done, GUILD_TYPE_F32, NULL, 0};
        ck_assert_msg(cuda_attention_decode_dyn(done_row, dq + (size_t)t * (size_t)Q, GUILD_TYPE_F16, dk, dv, 1, dk1,
                                                (int32_t)n_ctx - 1, nh, nkv, HD, scale, &ext, scratch, sb, &f1, stream,
                                                &err) == 0, "%s", err.msg);
        CK_CUDA(cudaMemcpy(h1, done_row, (size_t)Q * sizeof(float), cudaMemcpyDeviceToHost));
        ck_assert_msg(!memcmp(h1, ho + (size_t)t * (size_t)Q, (size_t)Q * sizeof(float)),
                      "%d/%d heads of %d, %d keys: row %d of %d differs from its own launch", nh, nkv, HD, kv0, t,
                      n_tok);
        cudaFree(dk1);
    }
    unsigned int *hd = malloc((size_t)nkv * CUDA_DECODE_ROWS * sizeof *hd);
    CK_CUDA(cudaMemcpy(hd, done, (size_t)nkv * CUDA_DECODE_ROWS * sizeof *hd, cudaMemcpyDeviceToHost));
    for (int32_t i = 0; i < nkv * CUDA_DECODE_ROWS; i++)
        ck_assert_msg(hd[i] == 0, "counter %d left at %u", i, hd[i]);
    printf("attention on tensor cores, %2d/%d heads of %3d, %4d keys, %2d rows%s%s: within %.2e of the FMA form, "
           "each row its own launch's bits, its %s rows = cuda_quantize\n", nh, nkv, HD, kv0, n_tok,
           ad_cases[ci].window ? ", window" : "", ad_cases[ci].sinks ? ", sinks" : "", worst,
           quant_type_info(qt)->name);
    free(hd);
    free(ho);
    free(hr);
    free(h1);
    free(hq);
    free(hqr);
    cudaFree(dout);
    cudaFree(dref);
    cudaFree(done_row);
    cudaFree(dqo);
    cudaFree(dqr);
    cudaFree(dkv0);
    cudaFree(done);
    cudaFree(scratch);
    cudaFree(dk);
    cudaFree(dv);
    cudaFree(dq);
    cudaFree(dsinks);
    free(kh);
    free(vh);
    free(f);
    free(q);
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
    if (!cuda_test_device(0))
        return 77;
    Suite *s = suite_create("cuda_fused");
    TCase *tk = tcase_create("kernel");
    tcase_add_loop_test(tk, test_fused_kernel, 0, 2 * N_FK);
    tcase_add_loop_test(tk, test_matmul_multi, 0, N_MM_TYPES * N_MM_TOKS);
    tcase_add_loop_test(tk, test_matmul_multi_types, 0, N_MT_SETS * (N_MM_TOKS - 1));
    tcase_add_loop_test(tk, test_router_fused, 0, N_RF_FORMS * N_RF * N_RF_TOKS);
    tcase_add_loop_test(tk, test_router_fused_norm, 0, N_RF_FORMS * N_RN * N_RF_TOKS);
    tcase_add_loop_test(tk, test_route_quantize, 0, 3 * 4);
    tcase_add_loop_test(tk, test_expert_pairs, 0, N_EP_TYPES * N_EP_TOKS);
    tcase_add_loop_test(tk, test_expert_pairs_alone, 0, N_EA);
    tcase_add_loop_test(tk, test_attn_merge_fused, 0, N_AD * N_AD_FORMS);
    tcase_add_loop_test(tk, test_attn_mma, 0, N_AD);
    suite_add_tcase(s, tk);
    TCase *tt = tcase_create("expert_time"); /* alone: CK_RUN_CASE=expert_time */
    tcase_add_loop_test(tt, test_expert_pairs_time, 0, 2 * N_ET_TOKS);
    suite_add_tcase(s, tt);
    TCase *tb = tcase_create("backend");
    tcase_set_timeout(tb, 120);
    tcase_add_loop_test(tb, test_fused_backend, 0, N_CASES);
    suite_add_tcase(s, tb);
    return cuda_test_run(s, &stream);
}
