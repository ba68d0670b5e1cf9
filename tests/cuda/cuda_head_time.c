/* cuda_head_time: the time of a decode step's small latency-bound launches at 1 to 16 tokens (several sessions'
 * rows), the Qwen3-30B-A3B shape, 48 layers (not a test; run by hand or by a device script): the FFN head (its
 * norm, the router's product and choice) as the layer program runs it, the attention's block norm after the MoE
 * combine, and qk_prepare. Linked against another build's libraries (the same interface), it times that build's
 * kernels: the A/B of a kernel change in one program.
 * With --forms LIST (e.g. 0,16,8: cuda_set_router_cluster's forms of the fused router), the FFN head in each of
 * them instead of the default form, a "head:" line each (the last line's head: the last form's). Then a "dense:" line
 * a token count: the layer's dense products
 * over 48 layers' own weights (from the device's memory, as in a step): Q/K/V in one launch
 * (cuda_matmul_multi_types, 4096 + 512 + 512 rows of 2048, Q4_K, V Q6_K in odd layers as the Q4_K_M recipe) and
 * the attention's output product (cuda_matmul, Q4_K 2048 x 4096), and that one in the few-token kernel's shapes.
 * --timeline: instead, where the fused router's time goes in its cluster form (cuda_set_router_timeline): each
 * block's stamps in a replayed graph of the FFN head, the phases of token 0's first block (the one that chooses) and
 * the hand-over from the launch before, medians over the layers.
 * --cold: each layer's launches after a launch of cold code (cuda_time_set_cold: the kernels' code out of the SM's
 * instruction caches, as in a step); --cold-l2: that after a read of twice L2's size (code and data out of L2 too, as
 * after the weights of a layer); --warm: after a launch of the same FMAs in a loop, which leaves the caches as
 * they were.
 * usage: cuda_head_time [--forms LIST] [--timeline] [--cold | --cold-l2 | --warm] [TOKENS...]   (default 1 2 4 8 16) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "core/quant/quant.h"
#include "core/sample/rng.h"
#include "core/util/clock.h" /* guild_median */
#include "gpu-worker/dense/cuda/cuda_kernels.h"
#include "tests/cuda/cuda_time.h"

static cudaStream_t stream;
static int forms[8], n_forms; /* --forms */
static bool timeline;         /* --timeline */

/* Linked against a library from before the setter (the A/B's baseline), Q/K/V's shapes and 16 warps along K are
 * skipped. */
#pragma weak cuda_set_matmul_few_shape


static float *upload(const float *h, size_t n)
{
    float *d = NULL;
    CUDA_TIME_CU(cudaMalloc((void **)&d, n * sizeof *d));
    CUDA_TIME_CU(cudaMemcpy(d, h, n * sizeof *d, cudaMemcpyHostToDevice));
    return d;
}

static void *dev_bytes(const void *h, size_t n)
{
    void *d = NULL;
    CUDA_TIME_CU(cudaMalloc(&d, n));
    CUDA_TIME_CU(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    return d;
}

static void fill(rng_t *r, float *x, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(scale * (2 * rng_uniform(r) - 1));
}

typedef cuda_time_layer_fn rt_layer_fn;

/* us[0]: a graph of L layers' launches replayed, us[1]: the same launched from the host one by one (what a step
 * without graphs pays), in us a layer; 8 replays after a warm one each. */
static void rt_time(rt_layer_fn fn, void *ctx, int32_t L, double us[2])
{
    us[0] = cuda_time_graph(fn, ctx, L, 1, 8, stream);
    us[1] = cuda_time_host(fn, ctx, L, 8, stream);
}

/* A decode step's FFN head at the Qwen3-30B-A3B shape (2,048 wide, 128 experts top-8, renormalised, the norm with
 * the attention's pending addition, counted), over 48 layers' router weights (48 MB: from the device's memory as in
 * a step, not from L2), as the layer program runs it: cuda_router_fused_norm where the library takes the tokens,
 * else cuda_rmsnorm_fused (with the addition) + cuda_matmul + cuda_router_topk. Built against a library without
 * the grouped router, it times that library's path. */
typedef struct rt_head {
    const float *W;
    cuda_router_norm_t nm;
    cuda_norm_pre_t add;
    float *lg, *wt;
    int32_t *ids;
    unsigned long long *cnt;
    unsigned int *done;
    int32_t n, E, ne, k;
    bool fused;
    unsigned long long *tl; /* --timeline: [48 layers][16 blocks x n tokens][CUDA_ROUTER_TL_STAMPS], NULL: none */
} rt_head_t;

#define RT_TL_LAYER(n) ((size_t)16 * (size_t)(n) * CUDA_ROUTER_TL_STAMPS)

static int rt_head(void *ctx, int32_t l, guild_err_t *err)
{
    const rt_head_t *h = ctx;
    const size_t ws = (size_t)h->E * sizeof(float);
    const float *Wl = h->W + (size_t)l * (size_t)h->ne * (size_t)h->E;
    unsigned long long *cl = h->cnt + (size_t)l * (size_t)h->ne;
    cuda_set_router_timeline(h->tl ? h->tl + (size_t)l * RT_TL_LAYER(h->n) : NULL);
    if (h->fused)
        return cuda_router_fused_norm(&h->nm, Wl, ws, h->E, h->lg, h->n, h->ne, h->k, 0, 0, true, 1.0f, h->ids, h->wt,
                                      cl, h->done, stream, err);
    if (cuda_rmsnorm_fused(h->nm.xn, h->nm.x, h->nm.w, h->E, h->n, h->nm.eps, h->nm.found, h->nm.site, &h->add,
                           GUILD_TYPE_F32, NULL, 0, stream, err) < 0 ||
        cuda_matmul(GUILD_TYPE_F32, h->E, h->ne, h->n, Wl, ws, h->nm.xn, ws, h->lg, h->ne, stream, err) < 0 ||
        cuda_router_topk(h->lg, h->n, h->ne, h->k, 0, 0, true, 1.0f, h->ids, h->wt, cl, stream, err) < 0)
        return -1;
    return 0;
}

/* The attention's block norm after the MoE combine of 8 slots, quantized to Q8_K (cuda_rmsnorm_fused), and the
 * Q/K norms + RoPE + K/V store of n sessions' rows (cuda_qk_prepare_seqs: 32 + 4 heads of 128, F16 caches). */
typedef struct rt_attn {
    float *x, *xn, *nw, *y, *rw, *q, *k, *v, *qn, *kn, *cs;
    void *q8, *kc, *vc;
    size_t q8_row;
    uint64_t *found;
    cuda_seq_rows_t rows;
    int32_t n, E;
    bool qk; /* qk_prepare, else the block norm */
} rt_attn_t;

static int rt_attn(void *ctx, int32_t l, guild_err_t *err)
{
    const rt_attn_t *a = ctx;
    (void)l;
    if (a->qk)
        return cuda_qk_prepare_seqs(a->q, a->k, a->v, 32, 4, 128, a->qn, a->kn, 1e-6f, 128, true, a->cs, &a->rows,
                                    GUILD_TYPE_F16, a->kc, a->vc, stream, err);
    const cuda_norm_pre_t comb = {.kind = CUDA_PRE_COMBINE, .y = a->y, .w = a->rw, .n_used = 8};
    return cuda_rmsnorm_fused(a->xn, a->x, a->nw, a->E, a->n, 1e-6f, a->found, 2, &comb, GUILD_TYPE_Q8_K, a->q8,
                              a->q8_row, stream, err);
}

/* The phases of the fused router's cluster form (--timeline), us, medians over layers 1 .. L - 1 of a replayed graph:
 * the hand-over (the launch before's last block ends -> this launch's first block past its wait), then token 0's
 * first block: wait -> its row normed, -> every logit in (the cluster's barrier), -> the softmax, -> the ranks,
 * -> the choice written; end -> end. */
static void head_timeline(rt_head_t *h, int32_t L, int cb)
{
    if (!cb || !h->fused) {
        printf("timeline: %2d tokens: the router's cluster form does not run here\n", h->n);
        return;
    }
    const size_t nst = (size_t)L * RT_TL_LAYER(h->n);
    CUDA_TIME_CU(cudaMalloc((void **)&h->tl, nst * sizeof(unsigned long long)));
    CUDA_TIME_CU(cudaMemset(h->tl, 0, nst * sizeof(unsigned long long)));
    const double us = cuda_time_graph(rt_head, h, L, 1, 8, stream);
    unsigned long long *st = malloc(nst * sizeof *st);
    cuda_time_need(st != NULL, "out of memory");
    CUDA_TIME_CU(cudaMemcpy(st, h->tl, nst * sizeof *st, cudaMemcpyDeviceToHost));
    enum { HAND, ROW, LOGITS, PROBS, RANKS, END, STEP, NQ };
    static const char *const names[NQ] = {"hand-over", "wait->row", "row->logits", "logits->probs",
                                          "probs->ranks", "ranks->end", "end->end"};
    double v[NQ][48];
    int nl = 0;
    unsigned long long prev_end = 0;
    for (int32_t l = 0; l < L && l < 48; l++) {
        const unsigned long long *Ls = st + (size_t)l * RT_TL_LAYER(h->n);
        unsigned long long end = 0, wait0 = ~0ull;
        for (int32_t b = 0; b < cb * h->n; b++) {
            const unsigned long long *s = Ls + (size_t)b * CUDA_ROUTER_TL_STAMPS;
            end = s[CUDA_ROUTER_TL_END] > end ? s[CUDA_ROUTER_TL_END] : end;
            if (s[CUDA_ROUTER_TL_WAIT] && s[CUDA_ROUTER_TL_WAIT] < wait0)
                wait0 = s[CUDA_ROUTER_TL_WAIT];
        }
        const unsigned long long *b0 = Ls; /* token 0's first block */
        if (l > 0 && prev_end && b0[CUDA_ROUTER_TL_END]) {
            const double ns = 1e-3;
            v[HAND][nl] = ((double)wait0 - (double)prev_end) * ns;
            v[ROW][nl] = (double)(b0[CUDA_ROUTER_TL_ROW] - b0[CUDA_ROUTER_TL_WAIT]) * ns;
            v[LOGITS][nl] = (double)(b0[CUDA_ROUTER_TL_LOGITS] - b0[CUDA_ROUTER_TL_ROW]) * ns;
            v[PROBS][nl] = (double)(b0[CUDA_ROUTER_TL_PROBS] - b0[CUDA_ROUTER_TL_LOGITS]) * ns;
            v[RANKS][nl] = (double)(b0[CUDA_ROUTER_TL_RANKS] - b0[CUDA_ROUTER_TL_PROBS]) * ns;
            v[END][nl] = (double)(b0[CUDA_ROUTER_TL_END] - b0[CUDA_ROUTER_TL_RANKS]) * ns;
            v[STEP][nl] = (double)(end - prev_end) * ns;
            nl++;
        }
        prev_end = end;
    }
    printf("timeline: %2d tokens, clusters of %d blocks: %.2f us a layer (graph); medians over %d layers, us:", h->n,
           cb, us, nl);
    for (int q = 0; q < NQ; q++)
        printf(" %s %.2f;", names[q], nl ? guild_median(v[q], nl) : 0.0);
    printf("\n");
    fflush(stdout);
    free(st);
    cudaFree(h->tl);
    h->tl = NULL;
}

static void head_time(int32_t n)
{
    const int32_t E = 2048, ne = 128, k = 8, L = 48, P = 256, HD = 128;
    const size_t ws = (size_t)E * sizeof(float);
    guild_err_t err = {{0}};
    rng_t r;
    rng_seed(&r, 1301);
    float *W = malloc((size_t)L * ne * ws), *x = malloc((size_t)n * ws), *nw = malloc(ws);
    fill(&r, W, (size_t)L * ne * E, 0.02f);
    fill(&r, x, (size_t)n * E, 1.0f);
    fill(&r, nw, (size_t)E, 1.0f);
    float *zero = calloc((size_t)n * 8 * E, sizeof(float)); /* x + 0, combine of 0: the rows stay step after step */
    float *qkv = malloc((size_t)n * 40 * HD * sizeof(float)), *cs = malloc((size_t)P * HD * sizeof(float));
    fill(&r, qkv, (size_t)n * 40 * HD, 1.0f);
    for (int32_t pp = 0; pp < P; pp++)
        for (int32_t i = 0; i < HD / 2; i++) {
            const float th = (float)pp * powf(1e6f, -2.0f * (float)i / (float)HD);
            cs[(size_t)pp * HD + 2 * i] = cosf(th);
            cs[(size_t)pp * HD + 2 * i + 1] = sinf(th);
        }
    int32_t len[CUDA_SEQ_ROWS];
    for (int32_t t = 0; t < n; t++)
        len[t] = 128 + t;
    float rw[8 * 16];
    for (int i = 0; i < 8 * 16; i++)
        rw[i] = 0.125f;
    uint64_t rq = 0;
    cuda_time_need(quant_row_bytes(GUILD_TYPE_Q8_K, (uint64_t)E, &rq, &err) == 0, "%s", err.msg);
    const size_t kv_seq = (size_t)P * 4 * HD * 2; /* a session's F16 cache of one layer */
    rt_head_t h = {.W = upload(W, (size_t)L * ne * E), .n = n, .E = E, .ne = ne, .k = k};
    h.nm = (cuda_router_norm_t){.x = upload(x, (size_t)n * E), .p = upload(zero, (size_t)n * E),
                                .w = upload(nw, (size_t)E), .eps = 1e-6f, .site = 3};
    h.add = (cuda_norm_pre_t){.kind = CUDA_PRE_ADD, .p = h.nm.p};
    CUDA_TIME_CU(cudaMalloc((void **)&h.nm.xn, (size_t)n * ws));
    CUDA_TIME_CU(cudaMalloc((void **)&h.nm.found, sizeof(uint64_t)));
    CUDA_TIME_CU(cudaMemset(h.nm.found, 0xff, sizeof(uint64_t)));
    CUDA_TIME_CU(cudaMalloc((void **)&h.lg, (size_t)n * ne * sizeof(float)));
    CUDA_TIME_CU(cudaMalloc((void **)&h.wt, (size_t)n * k * sizeof(float)));
    CUDA_TIME_CU(cudaMalloc((void **)&h.ids, (size_t)n * k * sizeof(int32_t)));
    CUDA_TIME_CU(cudaMalloc((void **)&h.cnt, (size_t)L * ne * sizeof(unsigned long long)));
    CUDA_TIME_CU(cudaMemset(h.cnt, 0, (size_t)L * ne * sizeof(unsigned long long)));
    CUDA_TIME_CU(cudaMalloc((void **)&h.done, CUDA_ROUTER_FUSED_MAX * sizeof(unsigned int)));
    CUDA_TIME_CU(cudaMemset(h.done, 0, CUDA_ROUTER_FUSED_MAX * sizeof(unsigned int)));
    /* the library's fused path, if it takes n tokens (this launch is also a warm-up) */
    h.fused = cuda_router_fused_norm(&h.nm, h.W, ws, E, h.lg, n, ne, k, 0, 0, true, 1.0f, h.ids, h.wt, h.cnt, h.done,
                                     stream, &err) == 0;
    double t_head[2] = {0, 0}, t_norm[2], t_qk[2];
    const int form = cuda_router_cluster();
    for (int f = 0; f < n_forms; f++) {
        const int got = cuda_set_router_cluster(forms[f]);
        cuda_time_need(cuda_router_fused_norm(&h.nm, h.W, ws, E, h.lg, n, ne, k, 0, 0, true, 1.0f, h.ids, h.wt, h.cnt,
                                              h.done, stream, &err) == 0,
                       "%s", err.msg);
        rt_time(rt_head, &h, L, t_head);
        printf("head: %2d tokens, us a layer (a graph of 48 layers; launched one by one): FFN head, %s: %.2f; %.2f\n",
               n, got ? (got == 16 ? "clusters of 16 blocks of 8 warps" : "clusters of 8 blocks of 16 warps")
                      : "no cluster (a counter of blocks)", t_head[0], t_head[1]);
    }
    if (!n_forms) /* else the last line's head is the last form's */
        rt_time(rt_head, &h, L, t_head);
    cuda_set_router_cluster(form);
    if (timeline) {
        head_timeline(&h, L, form);
        cuda_set_router_timeline(NULL);
    }
    unsigned int done[CUDA_ROUTER_FUSED_MAX];
    CUDA_TIME_CU(cudaMemcpy(done, h.done, sizeof done, cudaMemcpyDeviceToHost));
    for (int j = 0; j < CUDA_ROUTER_FUSED_MAX; j++)
        cuda_time_need(done[j] == 0, "counter %d is %u after the launches", j, done[j]);
    rt_attn_t a = {.x = h.nm.x, .xn = h.nm.xn, .nw = (float *)h.nm.w, .found = h.nm.found,
                   .n = n, .E = E, .q8_row = (size_t)rq, .cs = upload(cs, (size_t)P * HD), .rw = upload(rw, 8 * 16)};
    CUDA_TIME_CU(cudaFree((void *)h.nm.p));
    a.y = upload(zero, (size_t)n * 8 * E);
    CUDA_TIME_CU(cudaMalloc(&a.q8, (size_t)n * rq));
    a.q = upload(qkv, (size_t)n * 40 * HD);
    a.k = a.q + (size_t)n * 32 * HD;
    a.v = a.k + (size_t)n * 4 * HD;
    a.qn = upload(nw, HD);
    a.kn = upload(nw + HD, HD);
    CUDA_TIME_CU(cudaMalloc(&a.kc, (size_t)n * kv_seq));
    CUDA_TIME_CU(cudaMalloc(&a.vc, (size_t)n * kv_seq));
    a.rows = (cuda_seq_rows_t){.len = dev_bytes(len, (size_t)n * sizeof(int32_t)), .k_seq = (int64_t)kv_seq,
                               .v_seq = (int64_t)kv_seq, .n = n};
    for (int32_t t = 0; t < n; t++) { /* n sessions of one row each */
        a.rows.seq[t] = t;
        a.rows.grp[t] = (uint8_t)t;
        a.rows.idx[t] = 0;
    }
    rt_time(rt_attn, &a, L, t_norm);
    a.qk = true;
    rt_time(rt_attn, &a, L, t_qk);
    printf("time: %2d tokens, us a layer (a graph of 48 layers; launched one by one): FFN head (norm with the "
           "addition, router 128 x 2048 F32, top-8, counts) %s %.2f; %.2f, block norm (combine of 8, Q8_K) %.2f; %.2f, "
           "qk_prepare (32 + 4 heads of 128, F16 caches) %.2f; %.2f\n", n,
           h.fused ? "in one launch" : "in three launches", t_head[0], t_head[1], t_norm[0], t_norm[1], t_qk[0],
           t_qk[1]);
    cudaFree((void *)h.W);
    cudaFree(h.nm.x);
    cudaFree((void *)h.nm.w);
    cudaFree(h.nm.xn);
    cudaFree(h.nm.found);
    cudaFree(h.lg);
    cudaFree(h.wt);
    cudaFree(h.ids);
    cudaFree(h.cnt);
    cudaFree(h.done);
    cudaFree(a.cs);
    cudaFree(a.rw);
    cudaFree(a.y);
    cudaFree(a.q8);
    cudaFree(a.q);
    cudaFree(a.qn);
    cudaFree(a.kn);
    cudaFree(a.kc);
    cudaFree(a.vc);
    cudaFree((void *)a.rows.len);
    free(W);
    free(x);
    free(nw);
    free(zero);
    free(qkv);
    free(cs);
}

/* A layer's dense products of n tokens (dense_time): Q/K/V (one launch) or the output product, over L layers' own
 * weights; shape: the output product's few-token kernel shape (tile x warps), 0 for cuda_matmul's choice. */
typedef struct rt_dense {
    char *wq, *wk, *wv, *wo;  /* [L] layers' weights, a layer's rows contiguous */
    size_t rq, rv, ro;        /* row bytes: Q/K (Q4_K, 2048), V Q6_K (2048), wo (Q4_K, 4096) */
    size_t lq, lk, lv, lo;    /* a layer's bytes */
    void *act2, *act4;        /* Q8_K rows of 2048 and 4096, n of them */
    size_t as2, as4;
    float *out;               /* [n][4096 + 512 + 512] */
    int32_t n, tile, kw;
    bool qkv;
} rt_dense_t;

static int rt_dense(void *ctx, int32_t l, guild_err_t *err)
{
    const rt_dense_t *d = ctx;
    if (d->qkv) {
        const bool v6 = l % 2; /* the Q4_K_M recipe's V: Q6_K in some layers */
        const guild_type_t ty[3] = {GUILD_TYPE_Q4_K, GUILD_TYPE_Q4_K, v6 ? GUILD_TYPE_Q6_K : GUILD_TYPE_Q4_K};
        const void *w[3] = {d->wq + (size_t)l * d->lq, d->wk + (size_t)l * d->lk, d->wv + (size_t)l * d->lv};
        const size_t ws[3] = {d->rq, d->rq, v6 ? d->rv : d->rq};
        const int64_t nr[3] = {4096, 512, 512}, ldo[3] = {4096, 512, 512};
        float *out[3] = {d->out, d->out + (size_t)d->n * 4096, d->out + (size_t)d->n * 4608};
        return cuda_matmul_multi_types(ty, 2048, d->n, 3, w, ws, nr, d->act2, d->as2, out, ldo, stream, err);
    }
    const void *w = d->wo + (size_t)l * d->lo;
    if (d->tile)
        return cuda_matmul_few(GUILD_TYPE_Q4_K, 4096, 2048, d->n, w, d->ro, d->act4, d->as4, d->out, 2048, d->tile,
                               d->kw, stream, err);
    return cuda_matmul(GUILD_TYPE_Q4_K, 4096, 2048, d->n, w, d->ro, d->act4, d->as4, d->out, 2048, stream, err);
}

static size_t row_bytes(guild_type_t t, int64_t n)
{
    uint64_t b = 0;
    guild_err_t err = {{0}};
    cuda_time_need(quant_row_bytes(t, (uint64_t)n, &b, &err) == 0, "%s", err.msg);
    return (size_t)b;
}

/* The activations: n rows of E random floats quantized to Q8_K on the device. */
static void *q8k_rows(rng_t *r, int32_t n, int32_t E, size_t *stride)
{
    guild_err_t err = {{0}};
    *stride = row_bytes(GUILD_TYPE_Q8_K, E);
    float *h = malloc((size_t)n * (size_t)E * sizeof *h);
    fill(r, h, (size_t)n * (size_t)E, 1.0f);
    float *df = upload(h, (size_t)n * (size_t)E);
    void *q = NULL;
    CUDA_TIME_CU(cudaMalloc(&q, (size_t)n * *stride));
    cuda_time_need(cuda_quantize(GUILD_TYPE_Q8_K, df, E, q, *stride, E, n, stream, &err) == 0, "%s", err.msg);
    CUDA_TIME_CU(cudaStreamSynchronize(stream));
    cudaFree(df);
    free(h);
    return q;
}

/* The weights' bytes: 0x11 everywhere (small positive scales, any quants): the products' time, not their values. */
static char *weights(size_t bytes)
{
    char *d = NULL;
    CUDA_TIME_CU(cudaMalloc((void **)&d, bytes));
    CUDA_TIME_CU(cudaMemset(d, 0x11, bytes));
    return d;
}

static void dense_time(int32_t n)
{
    const int32_t L = 48;
    rng_t r;
    rng_seed(&r, 1401);
    rt_dense_t d = {.n = n};
    d.rq = row_bytes(GUILD_TYPE_Q4_K, 2048), d.rv = row_bytes(GUILD_TYPE_Q6_K, 2048);
    d.ro = row_bytes(GUILD_TYPE_Q4_K, 4096);
    d.lq = 4096 * d.rq, d.lk = 512 * d.rq, d.lv = 512 * (d.rv > d.rq ? d.rv : d.rq), d.lo = 2048 * d.ro;
    d.wq = weights((size_t)L * d.lq), d.wk = weights((size_t)L * d.lk), d.wv = weights((size_t)L * d.lv);
    d.wo = weights((size_t)L * d.lo);
    d.act2 = q8k_rows(&r, n, 2048, &d.as2);
    d.act4 = q8k_rows(&r, n, 4096, &d.as4);
    CUDA_TIME_CU(cudaMalloc((void **)&d.out, (size_t)n * 5120 * sizeof(float)));
    double t_qkv[2], t_wo[2];
    d.qkv = true;
    rt_time(rt_dense, &d, L, t_qkv);
    d.qkv = false;
    rt_time(rt_dense, &d, L, t_wo);
    printf("dense: %2d tokens, us a layer (a graph of 48 layers; launched one by one): Q/K/V (one launch) %.2f; %.2f, "
           "output product %.2f; %.2f", n, t_qkv[0], t_qkv[1], t_wo[0], t_wo[1]);
    /* the few-token kernel's shapes (tokens a tile x warps along K; graphs): the output product's through
     * cuda_matmul_few, Q/K/V's through cuda_set_matmul_few_shape */
    static const int shapes[][2] = {{8, 8}, {16, 8}, {8, 4}, {16, 4}, {8, 16}, {16, 16}};
    const bool wide = cuda_set_matmul_few_shape != NULL; /* 16 warps: a library with the setter */
    if (n >= 2) {
        printf(" | wo shapes:");
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            if ((shapes[i][0] == 16 && n <= 8) || (shapes[i][1] == 16 && !wide))
                continue;
            d.tile = shapes[i][0], d.kw = shapes[i][1];
            printf(" %dx%d %.2f", d.tile, d.kw, cuda_time_graph(rt_dense, &d, L, 1, 8, stream));
        }
        d.tile = d.kw = 0;
    }
    if (n >= 2 && wide) {
        guild_err_t err = {{0}};
        d.qkv = true;
        printf(" | qkv shapes:");
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            if (shapes[i][0] == 16 && n <= 8)
                continue;
            cuda_time_need(cuda_set_matmul_few_shape(shapes[i][0], shapes[i][1], &err) == 0, "%s", err.msg);
            printf(" %dx%d %.2f", shapes[i][0], shapes[i][1], cuda_time_graph(rt_dense, &d, L, 1, 8, stream));
        }
        cuda_time_need(cuda_set_matmul_few_shape(0, 0, &err) == 0, "%s", err.msg);
    }
    printf("\n");
    cudaFree(d.wq);
    cudaFree(d.wk);
    cudaFree(d.wv);
    cudaFree(d.wo);
    cudaFree(d.act2);
    cudaFree(d.act4);
    cudaFree(d.out);
}

/* "A,B,C" into v (at most 8). */
static int parse_list(const char *f, int *v)
{
    int k = 0;
    for (; *f && k < 8; f += strcspn(f, ","), f += *f == ',')
        v[k++] = atoi(f);
    return k;
}

int main(int argc, char **argv)
{
    cuda_time_init("cuda_head_time");
    CUDA_TIME_CU(cudaStreamCreate(&stream));
    static const int32_t toks[] = {1, 2, 4, 8, 16};
    int a = 1;
    for (; a < argc; a++) {
        if (!strcmp(argv[a], "--forms") && a + 1 < argc)
            n_forms = parse_list(argv[++a], forms);
        else if (!strcmp(argv[a], "--timeline"))
            timeline = true;
        else if (!cuda_time_cold_arg(argv[a]))
            break;
    }
    if (argc > a) {
        for (int i = a; i < argc; i++) {
            const int32_t n = (int32_t)atoi(argv[i]);
            cuda_time_need(n >= 1 && n <= CUDA_ROUTER_FUSED_MAX, "%s tokens: 1 to %d", argv[i], CUDA_ROUTER_FUSED_MAX);
            head_time(n);
            dense_time(n);
        }
    } else {
        for (size_t i = 0; i < sizeof toks / sizeof toks[0]; i++) {
            head_time(toks[i]);
            dense_time(toks[i]);
        }
    }
    cudaStreamDestroy(stream);
    return 0;
}
