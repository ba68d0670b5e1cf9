/* What the routed experts' device tests share (contract in cuda_test_experts.h). */
#include "tests/cuda/cuda_test_experts.h"

#include <check.h>
#include <stdbool.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "core/quant/quant.h"

#define CK_CUDA(call) ck_assert_msg((call) == cudaSuccess, "%s: %s", #call, cudaGetErrorString(cudaGetLastError()))

void cuda_test_fill(rng_t *r, float *x, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(scale * (2 * rng_uniform(r) - 1)) * ((i / 32) % 3 == 0 ? 0.05f : 1.0f);
}

void *cuda_test_dev_bytes(const void *h, size_t n)
{
    void *d = NULL;
    CK_CUDA(cudaMalloc(&d, n));
    CK_CUDA(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    return d;
}

void *cuda_test_expert_weights(guild_type_t type, int64_t n, int64_t nrows, int32_t n_exp, rng_t *r, uint64_t *rb)
{
    guild_err_t err = {{0}};
    ck_assert(quant_row_bytes(type, (uint64_t)n, rb, &err) == 0);
    const int64_t rows = nrows + n_exp;
    char *w = malloc((size_t)rows * *rb);
    float *f = malloc((size_t)n * sizeof *f);
    for (int64_t row = 0; row < rows; row++) {
        cuda_test_fill(r, f, (size_t)n, 1.0f);
        ck_assert_msg(quant_quantize_row_ref(type, f, w + (size_t)row * *rb, n, &err) == 0, "%s", err.msg);
    }
    char *d = NULL;
    CK_CUDA(cudaMalloc((void **)&d, (size_t)n_exp * (size_t)nrows * *rb));
    for (int32_t e = 0; e < n_exp; e++)
        CK_CUDA(cudaMemcpy(d + (size_t)e * (size_t)nrows * *rb, w + (size_t)e * *rb, (size_t)nrows * *rb,
                           cudaMemcpyHostToDevice));
    free(w);
    free(f);
    return d;
}

void cuda_test_expert_mats(int32_t L, int32_t n_exp, size_t gm, size_t dm, char **dg, char **du, char **dd)
{
    *dg = *du = *dd = NULL;
    CK_CUDA(cudaMalloc((void **)dg, (size_t)L * (size_t)n_exp * gm));
    CK_CUDA(cudaMalloc((void **)du, (size_t)L * (size_t)n_exp * gm));
    CK_CUDA(cudaMalloc((void **)dd, (size_t)L * (size_t)n_exp * dm));
    CK_CUDA(cudaMemset(*dg, 0x11, (size_t)L * (size_t)n_exp * gm));
    CK_CUDA(cudaMemset(*du, 0x11, (size_t)L * (size_t)n_exp * gm));
    CK_CUDA(cudaMemset(*dd, 0x11, (size_t)L * (size_t)n_exp * dm));
}

int32_t cuda_test_step_ids(rng_t *r, int32_t L, int32_t ntok, int32_t n_exp, int32_t *ids)
{
    ck_assert(n_exp >= 8 && n_exp <= 128);
    const int32_t k = 8 * ntok;
    int32_t distinct = 0;
    for (int32_t l = 0; l < L; l++) {
        bool seen[128] = {false};
        for (int32_t t = 0; t < ntok; t++) {
            int32_t pool[128];
            for (int32_t e = 0; e < n_exp; e++)
                pool[e] = e;
            for (int32_t j = 0; j < 8; j++) {
                const int32_t c = j + (int32_t)(rng_uniform(r) * (n_exp - j)) % (n_exp - j), e = pool[c];
                pool[c] = pool[j];
                pool[j] = e;
                ids[l * k + t * 8 + j] = e;
                distinct += !seen[e];
                seen[e] = true;
            }
        }
    }
    return distinct;
}

double cuda_test_graph_us(cuda_test_step_fn fn, void *ctx, int32_t steps, cudaStream_t s)
{
    guild_err_t err = {{0}};
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    CK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    int rc = 0;
    for (int32_t st = 0; st < steps && rc == 0; st++)
        rc = fn(ctx, st, s, &err);
    CK_CUDA(cudaStreamEndCapture(s, &g));
    ck_assert_msg(rc == 0, "%s", err.msg);
    CK_CUDA(cudaGraphInstantiate(&ge, g, 0));
    cudaEvent_t e0, e1;
    CK_CUDA(cudaEventCreate(&e0));
    CK_CUDA(cudaEventCreate(&e1));
    CK_CUDA(cudaGraphLaunch(ge, s)); /* warm */
    float ms[3] = {0, 0, 0};
    for (int rep = 0; rep < 3; rep++) { /* the median of 3 groups of 2 launches */
        CK_CUDA(cudaEventRecord(e0, s));
        CK_CUDA(cudaGraphLaunch(ge, s));
        CK_CUDA(cudaGraphLaunch(ge, s));
        CK_CUDA(cudaEventRecord(e1, s));
        CK_CUDA(cudaEventSynchronize(e1));
        CK_CUDA(cudaEventElapsedTime(&ms[rep], e0, e1));
    }
    const float lo = ms[0] < ms[1] ? ms[0] : ms[1], hi = ms[0] < ms[1] ? ms[1] : ms[0];
    const float med = ms[2] < lo ? lo : ms[2] > hi ? hi : ms[2];
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    return (double)med * 1e3 / (2.0 * steps);
}
