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

void cuda_test_step_open(cuda_test_step_t *t, guild_type_t dt, int32_t ntok)
{
    ck_assert(ntok >= 1 && ntok <= 16);
    guild_err_t err = {{0}};
    *t = (cuda_test_step_t){.dt = dt, .ntok = ntok, .k = 8 * ntok, .L = 8, .n_exp = 128, .E = 2048, .F = 768};
    ck_assert(quant_row_bytes(GUILD_TYPE_Q4_K, (uint64_t)t->E, &t->rg, &err) == 0 &&
              quant_row_bytes(dt, (uint64_t)t->F, &t->rd, &err) == 0);
    t->gm = (size_t)t->F * t->rg;
    t->dm = (size_t)t->E * t->rd;
    const size_t nm = (size_t)t->L * (size_t)t->n_exp;
    CK_CUDA(cudaMalloc((void **)&t->dg, nm * t->gm));
    CK_CUDA(cudaMalloc((void **)&t->du, nm * t->gm));
    CK_CUDA(cudaMalloc((void **)&t->dd, nm * t->dm));
    CK_CUDA(cudaMemset(t->dg, 0x11, nm * t->gm));
    CK_CUDA(cudaMemset(t->du, 0x11, nm * t->gm));
    CK_CUDA(cudaMemset(t->dd, 0x11, nm * t->dm));
    rng_t r;
    rng_seed(&r, 77);
    const size_t nx = (size_t)ntok * (size_t)t->E;
    float *x = malloc(nx * sizeof *x);
    cuda_test_fill(&r, x, nx, 2.0f);
    int32_t ids[8 * 8 * 16];
    for (int32_t l = 0; l < t->L; l++) {
        bool seen[128] = {false};
        for (int32_t tk = 0; tk < ntok; tk++) {
            int32_t pool[128];
            for (int32_t e = 0; e < t->n_exp; e++)
                pool[e] = e;
            for (int32_t j = 0; j < 8; j++) {
                const int32_t c = j + (int32_t)(rng_uniform(&r) * (t->n_exp - j)) % (t->n_exp - j), e = pool[c];
                pool[c] = pool[j];
                pool[j] = e;
                ids[l * t->k + tk * 8 + j] = e;
                t->distinct += !seen[e];
                seen[e] = true;
            }
        }
    }
    t->dx = cuda_test_dev_bytes(x, nx * sizeof *x);
    t->dids = cuda_test_dev_bytes(ids, (size_t)t->L * (size_t)t->k * sizeof *ids);
    free(x);
    CK_CUDA(cudaMalloc((void **)&t->dh, (size_t)t->k * (size_t)t->F * sizeof(float)));
    CK_CUDA(cudaMalloc((void **)&t->dy, (size_t)t->k * (size_t)t->E * sizeof(float)));
}

void cuda_test_step_close(cuda_test_step_t *t)
{
    cudaFree(t->dg);
    cudaFree(t->du);
    cudaFree(t->dd);
    cudaFree(t->dx);
    cudaFree(t->dids);
    cudaFree(t->dh);
    cudaFree(t->dy);
    *t = (cuda_test_step_t){0};
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
