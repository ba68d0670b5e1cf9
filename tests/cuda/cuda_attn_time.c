/* cuda_attn_time: the time of a decode step's attention (cuda_attention_decode_dyn, its splits merged and its output
 * quantized to Q8_K in its launch, as the layer program runs it) at the Qwen3-30B-A3B shape (32 query heads over 4 KV
 * heads of 128, F16 caches), 48 layers each over its own caches (from the device's memory as in a step, not from
 * L2), in a CUDA graph, with its variants: the FMA forms' launch forms (cuda_set_attn_form: a block a split, the grid
 * cut to 1, 2 or 4 waves, the lengths read before or after the wait, the L2 prefetch at up to 4 or 16 rows), the
 * merge kernel, one split, no programmatic dependent launch; the tensor-core form (cuda_set_attn_mma, the default).
 * Not a test; run by hand or by a device script. Linked against another build's libraries (the same interface), it
 * times that build's kernels: the A/B of a kernel change in one program. Each variant's output and quantized rows
 * are compared with the first variant's (the FMA form's fused launch; bits).
 * --timeline: instead, where the default launch's time goes (cuda_set_attn_timeline): each block's stamps in a
 * replayed graph, the phases of the block that ends last and the hand-over from the launch before, medians over
 * the layers.
 * --cold: each layer's launches after a launch of cold code (cuda_time_set_cold: the attention's code out of the
 * SM's instruction caches, as in a step); --cold-l2: that after a read of twice L2's size (its code and data out of
 * L2 too, as after the weights of a layer); --warm: after a launch of the same FMAs in a loop, which leaves the
 * caches as they were.
 * usage: cuda_attn_time [--cold | --cold-l2 | --warm] [--short | --timeline] [KEYS...]   (default 512 2048 8192;
 * 1, 4 and 16 rows each; --short: without "one split" and "no pdl") */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "core/quant/fp16.h"
#include "core/quant/quant.h"
#include "core/sample/rng.h"
#include "core/util/clock.h" /* guild_median */
#include "gpu-worker/dense/cuda/cuda_kernels.h"
#include "tests/cuda/cuda_time.h"


#define AT_L 48      /* layers */
#define AT_NH 32     /* query heads */
#define AT_NKV 4     /* KV heads */
#define AT_HD 128    /* head dimension */
#define AT_CTX 8224  /* cache rows a layer: the graph's grid is sized for it (64 splits), as a step's */
#define AT_ROWS 16   /* rows at most */
#define AT_ZMAX 64   /* blocks along the splits at most (the attention's split cap) */

static cudaStream_t stream;


typedef struct at_ctx {
    void *kc, *vc;          /* AT_L layers of [AT_CTX][AT_NKV * AT_HD] F16 each */
    size_t layer_bytes;     /* one layer's K (or V) cache */
    float *q, *out;         /* [AT_ROWS][AT_NH * AT_HD] */
    void *qo;               /* [AT_ROWS] rows of Q8_K, qrow bytes apart */
    size_t qrow;
    int32_t *kv0;           /* device: the cache length before the rows */
    void *scratch;
    size_t scratch_bytes;
    unsigned int *done;     /* [AT_NKV * CUDA_DECODE_ROWS] */
    int32_t n;              /* rows */
    bool fuse, split;       /* merge (and quantize) in the launch; splits (else no scratch: one block a KV head) */
    unsigned long long *tl; /* --timeline: [AT_L] layers' stamps (device), NULL: none */
} at_ctx_t;

/* One layer's share of the timeline buffer: every block a grid of AT_NKV x AT_ROWS x AT_ZMAX may have. */
#define AT_TL_LAYER ((size_t)AT_NKV * AT_ROWS * AT_ZMAX * CUDA_ATTN_TL_STAMPS)

static int at_layer(const at_ctx_t *c, int32_t l, guild_err_t *err)
{
    const cuda_attn_fuse_t fuse = {c->done, GUILD_TYPE_Q8_K, c->qo, c->qrow};
    const char *kc = (const char *)c->kc + (size_t)l * c->layer_bytes;
    const char *vc = (const char *)c->vc + (size_t)l * c->layer_bytes;
    const float scale = 1.0f / sqrtf((float)AT_HD);
    cuda_set_attn_timeline(c->tl ? c->tl + (size_t)l * AT_TL_LAYER : NULL);
    if (cuda_attention_decode_dyn(c->out, c->q, GUILD_TYPE_F16, kc, vc, c->n, c->kv0, AT_CTX - c->n, AT_NH, AT_NKV,
                                  AT_HD, scale, NULL, c->split ? c->scratch : NULL, c->split ? c->scratch_bytes : 0,
                                  c->fuse ? &fuse : NULL, stream, err) < 0)
        return -1;
    if (!c->fuse) /* the quantization the layer program asks for, after the merge kernel */
        return cuda_quantize(GUILD_TYPE_Q8_K, c->out, AT_NH * AT_HD, c->qo, c->qrow, AT_NH * AT_HD, c->n, stream,
                             err);
    return 0;
}

static int at_layer_fn(void *ctx, int32_t l, guild_err_t *err)
{
    return at_layer((const at_ctx_t *)ctx, l, err);
}

/* us a layer: a graph of AT_L layers replayed (median of 5 timings of 10 replays, after a warm one). */
static double at_time(const at_ctx_t *c)
{
    return cuda_time_graph(at_layer_fn, (void *)c, AT_L, 5, 10, stream);
}

/* One direct launch at layer 0: the output and the quantized rows into out, qo (host). */
static void at_bits(const at_ctx_t *c, float *out, unsigned char *qo)
{
    guild_err_t err = {{0}};
    CUDA_TIME_CU(cudaMemset(c->out, 0x7e, (size_t)AT_ROWS * AT_NH * AT_HD * sizeof(float)));
    CUDA_TIME_CU(cudaMemset(c->qo, 0x5a, (size_t)AT_ROWS * c->qrow));
    cuda_time_need(at_layer(c, 0, &err) == 0, "%s", err.msg);
    CUDA_TIME_CU(cudaStreamSynchronize(stream));
    CUDA_TIME_CU(cudaMemcpy(out, c->out, (size_t)c->n * AT_NH * AT_HD * sizeof(float), cudaMemcpyDeviceToHost));
    CUDA_TIME_CU(cudaMemcpy(qo, c->qo, (size_t)c->n * c->qrow, cudaMemcpyDeviceToHost));
}

typedef struct at_variant {
    const char *name;
    bool fuse, split, pdl;
    bool form_given;        /* else the default form */
    cuda_attn_form_t form;  /* the fused launch's form (cuda_set_attn_form) */
    bool long_only;         /* left out by --short */
    bool mma;               /* the tensor-core form (cuda_set_attn_mma): other bits, by design */
} at_variant_t;

#define AT_W CUDA_ATTN_WAVES_DEFAULT
#define AT_P CUDA_ATTN_PREFETCH_ROWS_DEFAULT
static const at_variant_t variants[] = {
    /* the FMA forms (--cuda-off attn-mma), the first of them the reference of the others' bits: the splits'
     * partials through the scratch, the last merges, in the default launch form */
    {"scratch", true, true, true, false, {0}, false, false},
    {"block a split", true, true, true, true, {0, false, 0, 0}, false, false}, /* the form before cuda_attn_form_t */
    {"grid, no early", true, true, true, true, {AT_W, false, 0, 0}, false, false},
    {"early, no prefetch", true, true, true, true, {AT_W, true, 0, 0}, false, false},
    {"early+prefetch, no grid", true, true, true, true, {0, true, AT_P, 0}, false, false},
    {"x2 waves", true, true, true, true, {2, true, AT_P, 0}, false, false},
    {"x4 waves", true, true, true, true, {4, true, AT_P, 0}, false, false},
    {"prefetch at 16 rows", true, true, true, true, {AT_W, true, 16, 0}, false, false},
    /* at 16 rows the grid of ceil(2 waves / (KV heads x rows)) on an H200 (2 x 264 / 64 -> 9, two waves' cut 8):
     * whether a few blocks past two waves cost a block's time */
    {"9 blocks a row", true, true, true, true, {0, true, AT_P, 9}, false, false},
    {"merge kernel", false, true, true, false, {0}, false, false}, /* + the merge kernel and cuda_quantize */
    {"one split", true, false, true, false, {0}, true, false},     /* no scratch: one block a KV head walks every key */
    {"scratch, no pdl", true, true, false, false, {0}, true, false},
    {"tensor cores", true, true, true, false, {0}, false, true}, /* the default where it applies */
};
#define N_VARIANTS (int)(sizeof variants / sizeof variants[0])
static bool at_short; /* --short */

/* n rows whose last sees `keys` keys: the cache length before them on the device, the row count in c. */
static void at_rows(at_ctx_t *c, int32_t keys, int32_t n)
{
    const int32_t kv0 = keys - n;
    cuda_time_need(kv0 >= 0 && keys <= AT_CTX, "%d keys, %d rows", keys, n);
    CUDA_TIME_CU(cudaMemcpy(c->kv0, &kv0, sizeof kv0, cudaMemcpyHostToDevice));
    c->n = n;
}

static void attn_time(at_ctx_t *c, int32_t keys, int32_t n)
{
    at_rows(c, keys, n);
    const size_t no = (size_t)n * AT_NH * AT_HD;
    float *ref = malloc(no * sizeof(float)), *got = malloc(no * sizeof(float));
    unsigned char *qref = malloc((size_t)n * c->qrow), *qgot = malloc((size_t)n * c->qrow);
    printf("time: %5d keys, %2d rows, us a layer (a graph of %d layers):", keys, n, AT_L);
    for (int v = 0; v < N_VARIANTS; v++) {
        const at_variant_t *va = &variants[v];
        if (at_short && va->long_only)
            continue;
        cuda_set_pdl(va->pdl);
        cuda_set_attn_form(va->form_given ? &va->form : NULL);
        cuda_set_attn_mma(va->mma);
        c->fuse = va->fuse;
        c->split = va->split;
        at_bits(c, v == 0 ? ref : got, v == 0 ? qref : qgot);
        printf(" %s %.2f", va->name, at_time(c));
        if (v > 0) {
            const bool same = !memcmp(got, ref, no * sizeof(float)) && !memcmp(qgot, qref, (size_t)n * c->qrow);
            printf(" [%s%s]", same ? "same bits" : "different bits",
                   va->split ? "" : ": one split"); /* one split sums in another order */
        }
        printf(";");
    }
    printf("\n");
    fflush(stdout);
    cuda_set_pdl(true);
    cuda_set_attn_form(NULL);
    cuda_set_attn_mma(true);
    free(ref);
    free(got);
    free(qref);
    free(qgot);
}

/* The quantities --timeline prints (us), each a median over layers 1..AT_L - 1. */
enum {
    TQ_HAND,    /* the launch before's last block ends -> this launch's first block past its wait */
    TQ_SPAN,    /* first block past the wait -> last block ends */
    TQ_WAITS,   /* the spread of the blocks' passing the wait */
    TQ_TILE,    /* the last block: wait -> first tile in shared memory */
    TQ_KEYS,    /* first tile -> keys done */
    TQ_PARTIAL, /* keys done -> partial written */
    TQ_TICKET,  /* partial -> its count added */
    TQ_MERGE,   /* ticket -> splits merged */
    TQ_END,     /* merged (or partial, one split) -> the block ends (the quantization) */
    TQ_STEP,    /* the launch before's last block ends -> this one's */
    TQ_BLOCKS,  /* blocks with a split */
    TQ_N
};
static const char *const tq_names[TQ_N] = {"hand-over", "span", "waits' spread", "wait->tile", "tile->keys",
                                           "keys->partial", "partial->ticket", "ticket->merged", "->end",
                                           "end->end", "blocks"};

/* The default launch's timeline at `keys` keys and n rows: a graph of AT_L layers replayed, the last replay's
 * stamps. */
static void attn_timeline(at_ctx_t *c, int32_t keys, int32_t n)
{
    at_rows(c, keys, n);
    c->fuse = c->split = true;
    const size_t nst = (size_t)AT_L * AT_TL_LAYER;
    CUDA_TIME_CU(cudaMemset(c->tl, 0, nst * sizeof(unsigned long long)));
    const double us = at_time(c);
    unsigned long long *st = malloc(nst * sizeof *st);
    cuda_time_need(st != NULL, "out of memory");
    CUDA_TIME_CU(cudaMemcpy(st, c->tl, nst * sizeof *st, cudaMemcpyDeviceToHost));
    double v[TQ_N][AT_L];
    int nl = 0;
    unsigned long long prev_end = 0;
    for (int32_t l = 0; l < AT_L; l++) {
        const unsigned long long *L = st + (size_t)l * AT_TL_LAYER;
        unsigned long long end = 0, wait0 = ~0ull, waitn = 0;
        const unsigned long long *last = NULL; /* the working block that ends last */
        int blocks = 0;
        /* the layout is the launch's grid (AT_NKV, n, z): blocks past its z never wrote */
        for (int z = 0; z < AT_ZMAX; z++)
            for (int y = 0; y < n; y++)
                for (int x = 0; x < AT_NKV; x++) {
                    const unsigned long long *b = L + ((size_t)(z * n + y) * AT_NKV + x) * CUDA_ATTN_TL_STAMPS;
                    if (!b[CUDA_ATTN_TL_ENTRY])
                        continue;
                    if (b[CUDA_ATTN_TL_END] > end)
                        end = b[CUDA_ATTN_TL_END];
                    if (!b[CUDA_ATTN_TL_WAIT])
                        continue; /* no split */
                    blocks++;
                    wait0 = b[CUDA_ATTN_TL_WAIT] < wait0 ? b[CUDA_ATTN_TL_WAIT] : wait0;
                    waitn = b[CUDA_ATTN_TL_WAIT] > waitn ? b[CUDA_ATTN_TL_WAIT] : waitn;
                    if (!last || b[CUDA_ATTN_TL_END] > last[CUDA_ATTN_TL_END])
                        last = b;
                }
        if (l > 0 && last && prev_end) {
            const double ns = 1e-3;
            const bool merged = last[CUDA_ATTN_TL_MERGE] != 0;
            v[TQ_HAND][nl] = ((double)wait0 - (double)prev_end) * ns;
            v[TQ_SPAN][nl] = (double)(end - wait0) * ns;
            v[TQ_WAITS][nl] = (double)(waitn - wait0) * ns;
            v[TQ_TILE][nl] = (double)(last[CUDA_ATTN_TL_TILE] - last[CUDA_ATTN_TL_WAIT]) * ns;
            v[TQ_KEYS][nl] = (double)(last[CUDA_ATTN_TL_KEYS] - last[CUDA_ATTN_TL_TILE]) * ns;
            v[TQ_PARTIAL][nl] = (double)(last[CUDA_ATTN_TL_PARTIAL] - last[CUDA_ATTN_TL_KEYS]) * ns;
            v[TQ_TICKET][nl] = merged ? (double)(last[CUDA_ATTN_TL_TICKET] - last[CUDA_ATTN_TL_PARTIAL]) * ns : 0;
            v[TQ_MERGE][nl] = merged ? (double)(last[CUDA_ATTN_TL_MERGE] - last[CUDA_ATTN_TL_TICKET]) * ns : 0;
            v[TQ_END][nl] = (double)(last[CUDA_ATTN_TL_END] -
                                     last[merged ? CUDA_ATTN_TL_MERGE : CUDA_ATTN_TL_PARTIAL]) * ns;
            v[TQ_STEP][nl] = (double)(end - prev_end) * ns;
            v[TQ_BLOCKS][nl] = blocks;
            nl++;
        }
        prev_end = end;
    }
    printf("timeline: %5d keys, %2d rows: %.2f us a layer (graph); medians over %d layers, us:", keys, n, us, nl);
    for (int q = 0; q < TQ_N; q++)
        printf(q == TQ_BLOCKS ? " %s %.0f" : " %s %.2f;", tq_names[q], guild_median(v[q], nl));
    printf("\n");
    fflush(stdout);
    free(st);
}

int main(int argc, char **argv)
{
    cuda_time_init("cuda_attn_time");
    CUDA_TIME_CU(cudaStreamCreate(&stream));
    guild_err_t err = {{0}};
    at_ctx_t c = {.layer_bytes = (size_t)AT_CTX * AT_NKV * AT_HD * 2};
    CUDA_TIME_CU(cudaMalloc(&c.kc, (size_t)AT_L * c.layer_bytes));
    CUDA_TIME_CU(cudaMalloc(&c.vc, (size_t)AT_L * c.layer_bytes));
    rng_t r;
    rng_seed(&r, 1733);
    const size_t ne = c.layer_bytes / 2;
    quant_half_t *h = malloc(c.layer_bytes);
    for (int kv = 0; kv < 2; kv++) {
        for (size_t i = 0; i < ne; i++)
            h[i] = quant_f32_to_f16((float)(2 * rng_uniform(&r) - 1));
        for (int32_t l = 0; l < AT_L; l++) /* the same values, each layer at its own addresses */
            CUDA_TIME_CU(cudaMemcpy((char *)(kv ? c.vc : c.kc) + (size_t)l * c.layer_bytes, h, c.layer_bytes,
                          cudaMemcpyHostToDevice));
    }
    free(h);
    const size_t nq = (size_t)AT_ROWS * AT_NH * AT_HD;
    float *q = malloc(nq * sizeof *q);
    for (size_t i = 0; i < nq; i++)
        q[i] = (float)(3 * (2 * rng_uniform(&r) - 1));
    CUDA_TIME_CU(cudaMalloc((void **)&c.q, nq * sizeof(float)));
    CUDA_TIME_CU(cudaMemcpy(c.q, q, nq * sizeof(float), cudaMemcpyHostToDevice));
    free(q);
    CUDA_TIME_CU(cudaMalloc((void **)&c.out, nq * sizeof(float)));
    uint64_t rq = 0;
    cuda_time_need(quant_row_bytes(GUILD_TYPE_Q8_K, (uint64_t)AT_NH * AT_HD, &rq, &err) == 0, "%s", err.msg);
    c.qrow = (size_t)rq;
    CUDA_TIME_CU(cudaMalloc(&c.qo, (size_t)AT_ROWS * c.qrow));
    CUDA_TIME_CU(cudaMalloc((void **)&c.kv0, sizeof(int32_t)));
    c.scratch_bytes = cuda_attention_decode_scratch(AT_ROWS, AT_NH, AT_HD, AT_CTX);
    CUDA_TIME_CU(cudaMalloc(&c.scratch, c.scratch_bytes));
    CUDA_TIME_CU(cudaMalloc((void **)&c.done, (size_t)AT_NKV * CUDA_DECODE_ROWS * sizeof(unsigned int)));
    CUDA_TIME_CU(cudaMemset(c.done, 0, (size_t)AT_NKV * CUDA_DECODE_ROWS * sizeof(unsigned int)));
    printf("cuda_attn_time: %d query heads over %d KV heads of %d, F16 caches of %d rows, %d layers\n", AT_NH, AT_NKV,
           AT_HD, AT_CTX, AT_L);
    static const int32_t keys_def[] = {512, 2048, 8192}, rows[] = {1, 4, 16};
    int a0 = 1;
    bool timeline = false;
    if (argc > a0 && cuda_time_cold_arg(argv[a0]))
        a0++;
    if (argc > a0 && !strcmp(argv[a0], "--short")) {
        at_short = true;
        a0++;
    } else if (argc > a0 && !strcmp(argv[a0], "--timeline")) {
        timeline = true;
        a0++;
        CUDA_TIME_CU(cudaMalloc((void **)&c.tl, (size_t)AT_L * AT_TL_LAYER * sizeof(unsigned long long)));
    }
    const int nk = argc > a0 ? argc - a0 : 3;
    for (int i = 0; i < nk; i++) {
        const int32_t keys = argc > a0 ? (int32_t)atoi(argv[a0 + i]) : keys_def[i];
        for (int j = 0; j < 3; j++)
            if (timeline)
                attn_timeline(&c, keys, rows[j]);
            else
                attn_time(&c, keys, rows[j]);
    }
    cuda_set_attn_timeline(NULL);
    cudaFree(c.tl);
    unsigned int done[AT_NKV * CUDA_DECODE_ROWS];
    CUDA_TIME_CU(cudaMemcpy(done, c.done, sizeof done, cudaMemcpyDeviceToHost));
    for (int j = 0; j < AT_NKV * CUDA_DECODE_ROWS; j++)
        cuda_time_need(done[j] == 0, "counter %d is %u after the launches", j, done[j]);
    cudaFree(c.kc);
    cudaFree(c.vc);
    cudaFree(c.q);
    cudaFree(c.out);
    cudaFree(c.qo);
    cudaFree(c.kv0);
    cudaFree(c.scratch);
    cudaFree(c.done);
    cudaStreamDestroy(stream);
    return 0;
}
