/* cuda_pairs_time: the time of a decode step's GPU-resident routed experts (cuda_expert_pairs_mma and the dp4a
 * cuda_expert_pairs) at the Qwen3-30B-A3B shape (128 experts, gate/up Q4_K 768 x 2048, down Q4_K or Q6_K 2048 x 768,
 * each token's 8 experts drawn at random), 1, 4, 8 and 16 tokens, each launch alone (gate/up; the down product,
 * with its expert ids known two launches back as in a step) and the layer's two, in CUDA graphs over 8 layers'
 * experts (from the device's memory, not from L2), for the dp4a kernel and block shapes of the tensor-core kernel
 * (direct loads, and the rows staged in shared memory). The rate is the distinct experts' bytes over the time, and
 * that against a device-to-device copy of 1 GiB measured in the same run (read + written bytes: the device's
 * memory rate). Each variant's outputs are compared with the dp4a kernel's (bits). Not a test; run by hand or by a
 * device script.
 * usage: cuda_pairs_time [TOKENS...]   (default 1 4 8 16) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "core/quant/quant.h"
#include "core/sample/rng.h"
#include "core/util/clock.h" /* guild_median */
#include "gpu-worker/dense/cuda/cuda_kernels.h"
#include "tests/cuda/cuda_time.h"

#define PT_L 8      /* layers of experts a graph goes over */
#define PT_NE 128   /* experts a layer */
#define PT_K 8      /* experts a token */
#define PT_E 2048   /* embedding */
#define PT_F 768    /* expert FFN */
#define PT_TOK 16   /* tokens at most */

static cudaStream_t stream;

/* variants: dp4a (shape NULL), then block shapes {warps, pairs, unroll, stages, l2} of gate/up (sh) and of the down
 * product (shd; {0}: sh's) */
typedef struct pt_variant {
    const char *name;
    bool dp4a;
    cuda_pairs_mma_shape_t sh, shd;
} pt_variant_t;

static const pt_variant_t variants[] = {
    {"dp4a", true, {0}, {0}},
    {"default", false, {0}, {0}},
    {"direct 8w", false, {8, 8, 1, 1, 2}, {0}},
    {"direct 4w", false, {4, 8, 1, 1, 2}, {0}},
    {"staged 8w s2", false, {8, 8, 1, 2, 1}, {0}},
    {"staged 8w s3", false, {8, 8, 1, 3, 1}, {0}},
    {"staged 8w s4", false, {8, 8, 1, 4, 1}, {0}},
    {"staged 4w s2", false, {4, 8, 1, 2, 1}, {0}},
    {"staged 4w s3", false, {4, 8, 1, 3, 1}, {0}},
    {"staged 4w s4", false, {4, 8, 1, 4, 1}, {0}},
    {"staged 2w s4", false, {2, 8, 1, 4, 1}, {0}},
    {"staged 8w s3 l2", false, {8, 8, 1, 3, 2}, {0}},
    {"staged 4w s4 l2", false, {4, 8, 1, 4, 2}, {0}},
    {"8w s2 / 4w s2", false, {8, 8, 1, 2, 1}, {4, 8, 1, 2, 1}},
};
#define PT_NV (int)(sizeof variants / sizeof variants[0])

typedef struct pt_ctx {
    guild_type_t dt;             /* the down projection's type */
    uint64_t rg, rd;             /* row bytes: gate/up, down */
    size_t gm, dm;               /* an expert's bytes: gate (or up), down */
    char *dg, *du, *dd;          /* [PT_L][PT_NE] experts each */
    float *x;                    /* [ntok][PT_E] */
    int32_t *ids;                /* [PT_L][ntok * PT_K] */
    float *h, *y;                /* [pairs][PT_F], [pairs][PT_E] */
    int32_t ntok;
    const pt_variant_t *v;
    int part;                    /* 0: gate/up, 1: down, 2: both */
} pt_ctx_t;

static int pt_layer(void *ctx, int32_t l, guild_err_t *err)
{
    const pt_ctx_t *c = ctx;
    const int32_t k = c->ntok * PT_K;
    const size_t eo = (size_t)l * PT_NE;
    const int32_t *li = c->ids + (size_t)l * PT_TOK * PT_K;
    const char *g = c->dg + eo * c->gm, *u = c->du + eo * c->gm, *d = c->dd + eo * c->dm;
    const cuda_pairs_mma_shape_t *sh = &c->v->sh, *shd = c->v->shd.warps ? &c->v->shd : sh;
    if (c->part != 1 && (c->v->dp4a ? cuda_expert_pairs(GUILD_TYPE_Q4_K, PT_E, PT_F, g, u, c->gm, c->rg, c->x, PT_E,
                                                         PT_K, li, PT_NE, k, c->h, PT_F, 0, false, stream, err)
                                    : cuda_expert_pairs_mma(GUILD_TYPE_Q4_K, PT_E, PT_F, g, u, c->gm, c->rg, c->x,
                                                            PT_E, PT_K, li, PT_NE, k, c->h, PT_F, sh, false, stream,
                                                            err)) < 0)
        return -1;
    if (c->part != 0 && (c->v->dp4a ? cuda_expert_pairs(c->dt, PT_F, PT_E, d, NULL, c->dm, c->rd, c->h, PT_F, 1, li,
                                                         PT_NE, k, c->y, PT_E, 0, true, stream, err)
                                    : cuda_expert_pairs_mma(c->dt, PT_F, PT_E, d, NULL, c->dm, c->rd, c->h, PT_F, 1,
                                                            li, PT_NE, k, c->y, PT_E, shd, true, stream, err)) < 0)
        return -1;
    return 0;
}

/* One expert's matrix of random rows (quantized by the reference) copied to every expert of the L layers. */
static char *pt_weights(guild_type_t type, int64_t n, int64_t nrows, rng_t *r, uint64_t *rb)
{
    guild_err_t err = {{0}};
    cuda_time_need(quant_row_bytes(type, (uint64_t)n, rb, &err) == 0, "%s", err.msg);
    const size_t m = (size_t)nrows * *rb;
    char *w = malloc(m), *d = NULL;
    float *f = malloc((size_t)n * sizeof *f);
    cuda_time_need(w && f, "out of memory");
    for (int64_t row = 0; row < nrows; row++) {
        for (int64_t i = 0; i < n; i++)
            f[i] = (float)(rng_uniform(r) * 2.0 - 1.0);
        cuda_time_need(quant_quantize_row_ref(type, f, w + (size_t)row * *rb, n, &err) == 0, "%s", err.msg);
    }
    CUDA_TIME_CU(cudaMalloc((void **)&d, (size_t)PT_L * PT_NE * m));
    for (int e = 0; e < PT_L * PT_NE; e++)
        CUDA_TIME_CU(cudaMemcpy(d + (size_t)e * m, w, m, cudaMemcpyHostToDevice));
    free(w);
    free(f);
    return d;
}

/* The device's memory rate: GB/s read + written by a device-to-device copy of 1 GiB (the median of 5). */
static double pt_copy_gbs(void)
{
    const size_t bytes = (size_t)1 << 30;
    void *a = NULL, *b = NULL;
    CUDA_TIME_CU(cudaMalloc(&a, bytes));
    CUDA_TIME_CU(cudaMalloc(&b, bytes));
    CUDA_TIME_CU(cudaMemset(a, 1, bytes));
    cudaEvent_t e0, e1;
    CUDA_TIME_CU(cudaEventCreate(&e0));
    CUDA_TIME_CU(cudaEventCreate(&e1));
    double gbs[5];
    CUDA_TIME_CU(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream)); /* warm */
    for (int k = 0; k < 5; k++) {
        float ms = 0;
        CUDA_TIME_CU(cudaEventRecord(e0, stream));
        CUDA_TIME_CU(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream));
        CUDA_TIME_CU(cudaEventRecord(e1, stream));
        CUDA_TIME_CU(cudaEventSynchronize(e1));
        CUDA_TIME_CU(cudaEventElapsedTime(&ms, e0, e1));
        gbs[k] = 2.0 * (double)bytes / ((double)ms * 1e6);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
    return guild_median(gbs, 5);
}

/* Layer 0's step (gate/up, then down) of variant v, its outputs to the host (h, y). */
static void pt_outputs(pt_ctx_t *c, const pt_variant_t *v, float *h, float *y)
{
    guild_err_t err = {{0}};
    const size_t k = (size_t)c->ntok * PT_K;
    CUDA_TIME_CU(cudaMemset(c->h, 0x7e, k * PT_F * sizeof(float)));
    CUDA_TIME_CU(cudaMemset(c->y, 0x7e, k * PT_E * sizeof(float)));
    c->v = v;
    c->part = 2;
    cuda_time_need(pt_layer(c, 0, &err) == 0, "%s: %s", v->name, err.msg);
    CUDA_TIME_CU(cudaStreamSynchronize(stream));
    CUDA_TIME_CU(cudaMemcpy(h, c->h, k * PT_F * sizeof(float), cudaMemcpyDeviceToHost));
    CUDA_TIME_CU(cudaMemcpy(y, c->y, k * PT_E * sizeof(float), cudaMemcpyDeviceToHost));
}

int main(int argc, char **argv)
{
    cuda_time_init("cuda_pairs_time");
    CUDA_TIME_CU(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    int32_t toks[8] = {1, 4, 8, 16}, nt = 4;
    if (argc > 1) {
        nt = 0;
        for (int i = 1; i < argc && nt < 8; i++) {
            toks[nt] = atoi(argv[i]);
            cuda_time_need(toks[nt] >= 1 && toks[nt] <= PT_TOK, "%s: tokens are 1-%d", argv[i], PT_TOK);
            nt++;
        }
    }
    const double copy = pt_copy_gbs();
    printf("device copy: %.1f GB/s (read + written, 1 GiB, median of 5)\n", copy);
    rng_t r;
    rng_seed(&r, 3501);
    pt_ctx_t c = {0};
    c.dg = pt_weights(GUILD_TYPE_Q4_K, PT_E, PT_F, &r, &c.rg);
    c.du = pt_weights(GUILD_TYPE_Q4_K, PT_E, PT_F, &r, &c.rg);
    c.gm = (size_t)PT_F * c.rg;
    float *x = malloc((size_t)PT_TOK * PT_E * sizeof *x);
    for (int i = 0; i < PT_TOK * PT_E; i++)
        x[i] = (float)(rng_uniform(&r) * 4.0 - 2.0);
    CUDA_TIME_CU(cudaMalloc((void **)&c.x, (size_t)PT_TOK * PT_E * sizeof(float)));
    CUDA_TIME_CU(cudaMemcpy(c.x, x, (size_t)PT_TOK * PT_E * sizeof(float), cudaMemcpyHostToDevice));
    free(x);
    CUDA_TIME_CU(cudaMalloc((void **)&c.h, (size_t)PT_TOK * PT_K * PT_F * sizeof(float)));
    CUDA_TIME_CU(cudaMalloc((void **)&c.y, (size_t)PT_TOK * PT_K * PT_E * sizeof(float)));
    CUDA_TIME_CU(cudaMalloc((void **)&c.ids, (size_t)PT_L * PT_TOK * PT_K * sizeof(int32_t)));
    const size_t hb = (size_t)PT_TOK * PT_K * PT_F, yb = (size_t)PT_TOK * PT_K * PT_E;
    float *h0 = malloc(hb * sizeof *h0), *y0 = malloc(yb * sizeof *y0), *h1 = malloc(hb * sizeof *h1),
          *y1 = malloc(yb * sizeof *y1);
    for (int di = 0; di < 2; di++) {
        c.dt = di ? GUILD_TYPE_Q6_K : GUILD_TYPE_Q4_K;
        c.dd = pt_weights(c.dt, PT_F, PT_E, &r, &c.rd);
        c.dm = (size_t)PT_E * c.rd;
        for (int ti = 0; ti < nt; ti++) {
            c.ntok = toks[ti];
            /* each token's 8 distinct experts at random, each layer */
            int32_t ids[PT_L * PT_TOK * PT_K];
            int distinct = 0;
            for (int l = 0; l < PT_L; l++) {
                bool seen[PT_NE] = {false};
                for (int t = 0; t < c.ntok; t++) {
                    int32_t pool[PT_NE];
                    for (int e = 0; e < PT_NE; e++)
                        pool[e] = e;
                    for (int j = 0; j < PT_K; j++) {
                        const int ch = j + (int)(rng_uniform(&r) * (PT_NE - j)) % (PT_NE - j), e = pool[ch];
                        pool[ch] = pool[j];
                        pool[j] = e;
                        ids[l * PT_TOK * PT_K + t * PT_K + j] = e;
                        distinct += !seen[e];
                        seen[e] = true;
                    }
                }
            }
            CUDA_TIME_CU(cudaMemcpy(c.ids, ids, sizeof ids, cudaMemcpyHostToDevice));
            const double dexp = (double)distinct / PT_L;
            const double gbytes = dexp * 2.0 * (double)c.gm, dbytes = dexp * (double)c.dm;
            printf("\n%d tokens, down %s: %.1f distinct experts a layer (gate/up %.1f MB, down %.1f MB a layer); "
                   "us a layer (GB/s of the distinct bytes, %% of the copy rate)\n",
                   c.ntok, quant_type_info(c.dt)->name, dexp, gbytes / 1e6, dbytes / 1e6);
            printf("%-17s %26s %26s %26s  bits\n", "variant", "gate/up", "down", "layer");
            pt_outputs(&c, &variants[0], h0, y0);
            for (int vi = 0; vi < PT_NV; vi++) {
                const pt_variant_t *v = &variants[vi];
                pt_outputs(&c, v, h1, y1); /* also the first launches, outside a graph */
                const size_t k = (size_t)c.ntok * PT_K;
                const bool same = !memcmp(h0, h1, k * PT_F * sizeof *h0) && !memcmp(y0, y1, k * PT_E * sizeof *y0);
                double us[3];
                c.v = v;
                for (int part = 0; part < 3; part++) {
                    c.part = part;
                    us[part] = cuda_time_graph(pt_layer, &c, PT_L, 5, 4, stream);
                }
                const double by[3] = {gbytes, dbytes, gbytes + dbytes};
                printf("%-17s", v->name);
                for (int part = 0; part < 3; part++) {
                    const double gbs = by[part] / (us[part] * 1e3);
                    printf(" %8.2f us %6.0f GB/s %4.1f%%", us[part], gbs, 100.0 * gbs / copy);
                }
                printf("  %s\n", same ? "same" : "DIFFER");
                fflush(stdout);
            }
        }
        cudaFree(c.dd);
    }
    free(h0);
    free(y0);
    free(h1);
    free(y1);
    cudaFree(c.dg);
    cudaFree(c.du);
    cudaFree(c.x);
    cudaFree(c.h);
    cudaFree(c.y);
    cudaFree(c.ids);
    cudaStreamDestroy(stream);
    return 0;
}
