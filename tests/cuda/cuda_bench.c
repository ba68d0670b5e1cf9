/* cuda_bench: rough timings of the CUDA backend's kernels on the device (not a test; run by hand).
 *   device-to-device copy bandwidth (the ceiling), matmul for decode (1 token) per weight type on weights far
 *   larger than L2 (GB/s of weight bytes), matmul at 8..512 tokens (prefill), attention decode and prefill,
 *   and the small per-layer ops. Times are CUDA-event medians of several launches after a warm-up.
 *   --gdn: only the gated delta net's recurrence at Qwen3-Next-80B-A3B's shape (16 key and 32 value heads of
 *   128), the one-row form (cuda_gdn_delta) against the chunked form (cuda_gdn_chunk) at 1 to 4096 rows.
 *   --unpack: only the unpacking of streamed experts (cuda_expert_unpack) over one Qwen3-30B-A3B layer's packed
 *   experts (128 of gate and up Q4_K 768 x 2048, down Q6_K 2048 x 768), places computed per byte against the
 *   gather table.
 * usage: cuda_bench [--quick | --gdn | --unpack] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "core/kern/pack.h"
#include "core/quant/quant.h"
#include "core/sample/rng.h"
#include "gpu-worker/dense/cuda/cuda_kernels.h"
#include "gpu-worker/dense/cuda/cuda_util.h"

static cudaStream_t st;
static guild_err_t err;

#define CHECK(call)                                                                    \
    do {                                                                               \
        if ((call) != 0) {                                                             \
            fprintf(stderr, "%s:%d: %s failed: %s %s\n", __FILE__, __LINE__, #call,   \
                    err.msg, cudaGetErrorString(cudaGetLastError()));                  \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

static int cmp_float(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* Median milliseconds of `reps` runs of fn(ctx, i) (each timed alone with events) after 3 warm-ups. */
static float time_ms(void (*fn)(void *, int), void *ctx, int reps)
{
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    for (int i = 0; i < 3; i++)
        fn(ctx, i);
    float t[64];
    if (reps > 64)
        reps = 64;
    for (int i = 0; i < reps; i++) {
        cudaEventRecord(a, st);
        fn(ctx, i);
        cudaEventRecord(b, st);
        cudaEventSynchronize(b);
        cudaEventElapsedTime(&t[i], a, b);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    if (cudaGetLastError() != cudaSuccess) {
        fprintf(stderr, "a timed launch failed\n");
        exit(1);
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp_float);
    return t[reps / 2];
}

static void *dev(size_t bytes)
{
    void *p = NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
        fprintf(stderr, "cudaMalloc(%zu) failed\n", bytes);
        exit(1);
    }
    return p;
}

/* Device buffer of random bytes of valid blocks: one random quantized row repeated (contents do not change
 * the kernels' speed; building gigabytes of distinct rows on the host would). */
static void *dev_weights(guild_type_t type, int64_t n, int64_t rows, size_t *row_bytes)
{
    uint64_t rb = 0;
    quant_row_bytes(type, (uint64_t)n, &rb, NULL);
    *row_bytes = (size_t)rb;
    const int64_t block_rows = 64;
    char *h = malloc(rb * (size_t)block_rows);
    float *f = malloc((size_t)n * sizeof *f);
    rng_t r;
    rng_seed(&r, 5);
    for (int64_t k = 0; k < block_rows; k++) {
        for (int64_t i = 0; i < n; i++)
            f[i] = (float)(2 * rng_uniform(&r) - 1);
        quant_quantize_row_ref(type, f, h + (size_t)k * rb, n, &err);
    }
    char *d = dev(rb * (size_t)rows);
    for (int64_t k = 0; k < rows; k += block_rows) {
        const int64_t m = rows - k < block_rows ? rows - k : block_rows;
        cudaMemcpy(d + (size_t)k * rb, h, rb * (size_t)m, cudaMemcpyHostToDevice);
    }
    free(h);
    free(f);
    return d;
}

static void *dev_act(guild_type_t wtype, int64_t n, int32_t ntok, size_t *stride)
{
    const guild_type_t at = quant_type_info(wtype)->dot_type;
    uint64_t rb = 0;
    quant_row_bytes(at, (uint64_t)n, &rb, NULL);
    *stride = ((size_t)rb + 15) / 16 * 16;
    float *f = malloc((size_t)n * (size_t)ntok * sizeof *f);
    rng_t r;
    rng_seed(&r, 6);
    for (int64_t i = 0; i < n * ntok; i++)
        f[i] = (float)(2 * rng_uniform(&r) - 1);
    float *df = dev((size_t)n * (size_t)ntok * sizeof *f);
    cudaMemcpy(df, f, (size_t)n * (size_t)ntok * sizeof *f, cudaMemcpyHostToDevice);
    void *da = dev(*stride * (size_t)ntok);
    CHECK(cuda_quantize(at, df, n, da, *stride, n, ntok, st, &err));
    cudaStreamSynchronize(st);
    cudaFree(df);
    free(f);
    return da;
}

typedef struct mm_job {
    guild_type_t type;
    int64_t n, rows;
    int32_t ntok;
    const char *w;
    size_t wrb;
    int n_mats;          /* cycle through this many row ranges (distinct weights per call) */
    const void *act;
    size_t astride;
    float *out;
} mm_job_t;

static void mm_run(void *ctx, int i)
{
    mm_job_t *j = ctx;
    const char *w = j->w + (size_t)(i % j->n_mats) * (size_t)j->rows * j->wrb;
    CHECK(cuda_matmul(j->type, j->n, j->rows, j->ntok, w, j->wrb, j->act, j->astride, j->out, j->rows, st, &err));
}

typedef struct copy_job {
    void *dst;
    const void *src;
    size_t bytes;
} copy_job_t;

static void copy_run(void *ctx, int i)
{
    copy_job_t *c = ctx;
    (void)i;
    cudaMemcpyAsync(c->dst, c->src, c->bytes, cudaMemcpyDeviceToDevice, st);
}

typedef struct attn_job {
    float *out, *q;
    quant_half_t *k, *v;
    int32_t n_tok, kv0, n_head, n_kv_head, hd;
    void *scratch;
    size_t scratch_bytes;
    int prefill, per_head;
} attn_job_t;

static void attn_run(void *ctx, int i)
{
    attn_job_t *a = ctx;
    (void)i;
    const float scale = 1.0f / sqrtf((float)a->hd);
    if (a->prefill)
        CHECK(cuda_attention_prefill(a->out, a->q, GUILD_TYPE_F16, a->k, a->v, a->n_tok, a->kv0, a->n_head, a->n_kv_head, a->hd,
                                     scale, NULL, st, &err));
    else if (a->per_head)
        CHECK(cuda_attention_decode_per_head(a->out, a->q, GUILD_TYPE_F16, a->k, a->v, a->n_tok, a->kv0, a->n_head,
                                             a->n_kv_head, a->hd, scale, NULL, a->scratch, a->scratch_bytes, st, &err));
    else
        CHECK(cuda_attention_decode(a->out, a->q, GUILD_TYPE_F16, a->k, a->v, a->n_tok, a->kv0, a->n_head, a->n_kv_head, a->hd,
                                    scale, NULL, a->scratch, a->scratch_bytes, st, &err));
}

typedef struct small_job {
    int op;
    float *x, *y, *w;
    void *act;
    int32_t *ids;
    int64_t n;
} small_job_t;

static void small_run(void *ctx, int i)
{
    small_job_t *s = ctx;
    (void)i;
    switch (s->op) {
    case 0: CHECK(cuda_quantize(GUILD_TYPE_Q8_K, s->x, s->n, s->act, 4096, s->n, 1, st, &err)); break;
    case 1: CHECK(cuda_rmsnorm(s->y, s->n, s->x, s->n, NULL, s->w, s->n, 1, 1e-6f, st, &err)); break;
    case 2: CHECK(cuda_router_topk(s->x, 1, 128, 8, 0, 0, true, 1.0f, s->ids, s->y, NULL, st, &err)); break;
    default: CHECK(cuda_moe_combine(s->x, s->y, s->w, NULL, NULL, 1, 8, s->n, st, &err)); break;
    }
}

typedef struct gdn_job {
    int chunked;
    int32_t n, DK, NK, NV;
    float *qkv, *beta, *g, *state, *z, *norm_w, *o, *scratch;
} gdn_job_t;

static void gdn_run(void *ctx, int i)
{
    gdn_job_t *j = ctx;
    const int64_t CH = 2 * (int64_t)j->NK * j->DK + (int64_t)j->NV * j->DK, IN = (int64_t)j->NV * j->DK;
    (void)i;
    if (j->chunked)
        CHECK(cuda_gdn_chunk(j->qkv, CH, j->beta, j->g, j->state, j->z, j->norm_w, j->o, IN, j->n, j->DK, j->NK,
                             j->NV, false, 1e-6f, j->scratch, st, &err));
    else
        CHECK(cuda_gdn_delta(j->qkv, CH, j->beta, j->g, j->state, j->z, j->norm_w, j->o, IN, j->n, j->DK, j->NK,
                             j->NV, false, 1e-6f, NULL, 0, st, &err));
}

/* Contents do not change these kernels' speed (no data-dependent branch): small constant values. */
static float *dev_const(size_t n, float v)
{
    float *h = malloc(n * sizeof *h), *d = dev(n * sizeof *d);
    for (size_t i = 0; i < n; i++)
        h[i] = v;
    cudaMemcpy(d, h, n * sizeof *h, cudaMemcpyHostToDevice);
    free(h);
    return d;
}

static void bench_gdn(void)
{
    const int32_t DK = 128, NK = 16, NV = 32, N = 4096;
    const size_t CH = 2 * (size_t)NK * DK + (size_t)NV * DK, IN = (size_t)NV * DK;
    gdn_job_t j = {.DK = DK, .NK = NK, .NV = NV};
    j.qkv = dev_const((size_t)N * CH, 0.05f);
    j.beta = dev_const((size_t)N * NV, 0.5f);
    j.g = dev_const((size_t)N * NV, -0.1f);
    j.state = dev_const((size_t)NV * DK * DK, 0.0f);
    j.z = dev_const((size_t)N * IN, 0.5f);
    j.norm_w = dev_const((size_t)DK, 1.0f);
    j.o = dev((size_t)N * IN * sizeof(float));
    j.scratch = dev(cuda_gdn_chunk_scratch(N, DK, NV));
    static const int32_t rows[] = {1, 8, 64, 512, 4096};
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
        j.n = rows[k];
        float ms[2];
        for (j.chunked = 0; j.chunked < 2; j.chunked++)
            ms[j.chunked] = time_ms(gdn_run, &j, rows[k] >= 4096 ? 3 : 8);
        printf("gated delta net, 32 heads of 128, %4d rows: one row at a time %9.3f ms, chunked %8.3f ms "
               "(%.1fx), chunked %8.0f rows/ms\n", rows[k], ms[0], ms[1], ms[0] / ms[1], rows[k] / ms[1]);
    }
    float *bufs[] = {j.qkv, j.beta, j.g, j.state, j.z, j.norm_w, j.o, j.scratch};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++)
        cudaFree(bufs[k]);
}

typedef struct unpack_job {
    const kern_pack_layout_t *layout;
    const uint32_t *table;
    void *base;
    size_t stride, rb;
    int32_t n;
    int64_t rows;
} unpack_job_t;

static void unpack_run(void *ctx, int i)
{
    (void)i;
    const unpack_job_t *j = ctx;
    CHECK(cuda_expert_unpack(j->layout, j->table, j->base, j->stride, j->n, j->rows, j->rb, st, &err));
}

/* One Qwen3-30B-A3B layer's packed experts (the bytes need not be a real packing: a permutation's cost does not
 * depend on them): per matrix kind, places per byte against the gather table. */
static void bench_unpack(void)
{
    const struct {
        const char *name;
        guild_type_t type;
        int64_t n, rows;
        int mats;
    } kinds[] = {{"gate+up q4_K 768 x 2048", GUILD_TYPE_Q4_K, 2048, 768, 2},
                 {"down q6_K 2048 x 768", GUILD_TYPE_Q6_K, 768, 2048, 1}};
    const int32_t ne = 128;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        uint64_t rb = 0;
        quant_row_bytes(kinds[k].type, (uint64_t)kinds[k].n, &rb, NULL);
        const size_t stride = (size_t)rb * (size_t)kinds[k].rows; /* one matrix */
        const int32_t n_mats = ne * kinds[k].mats;
        unpack_job_t j = {kern_pack_layout(kinds[k].type), NULL, dev(stride * (size_t)n_mats), stride, (size_t)rb,
                          n_mats, kinds[k].rows};
        uint32_t *tab = NULL;
        CHECK(cuda_expert_unpack_table(j.layout, j.rb, &tab, NULL, &err));
        const double gb = (double)stride * n_mats / 1e9;
        const float per_byte = time_ms(unpack_run, &j, 5);
        j.table = tab;
        const float table = time_ms(unpack_run, &j, 10);
        printf("unpack %-30s %6.3f GB: places per byte %8.3f ms (%6.0f GB/s), gather table %7.3f ms (%6.0f GB/s)\n",
               kinds[k].name, gb, per_byte, gb / per_byte * 1e3, table, gb / table * 1e3);
        cudaFree(tab);
        cudaFree(j.base);
    }
}

int main(int argc, char **argv)
{
    const int quick = argc > 1 && !strcmp(argv[1], "--quick");
    const int gdn_only = argc > 1 && !strcmp(argv[1], "--gdn");
    const int unpack_only = argc > 1 && !strcmp(argv[1], "--unpack");
    char why[256];
    if (cuda_device_count(why, sizeof why) < 1) {
        printf("SKIP: no CUDA device (%s)\n", why);
        return 77;
    }
    struct cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    printf("device: %s, %d SMs, L2 %.0f MiB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize / 1048576.0);
    cudaStreamCreate(&st);
    if (gdn_only || unpack_only) {
        if (gdn_only)
            bench_gdn();
        else
            bench_unpack();
        cudaStreamDestroy(st);
        return 0;
    }

    /* ceiling: device-to-device copy, bytes read + written */
    {
        const size_t bytes = (size_t)2 << 30;
        copy_job_t c = {dev(bytes), dev(bytes), bytes};
        const float ms = time_ms(copy_run, &c, 10);
        printf("%-44s %8.3f ms  %7.0f GB/s (read + write)\n", "d2d copy 2 GiB", ms, 2.0 * bytes / ms / 1e6);
        cudaFree(c.dst);
        cudaFree((void *)c.src);
    }

    /* decode matmul: 1 token against ~1 GiB of weights (8 distinct matrices cycled) */
    static const guild_type_t types[] = {GUILD_TYPE_Q4_K, GUILD_TYPE_Q5_K, GUILD_TYPE_Q6_K, GUILD_TYPE_Q8_0,
                                         GUILD_TYPE_IQ4_XS, GUILD_TYPE_Q4_0, GUILD_TYPE_F16, GUILD_TYPE_BF16,
                                         GUILD_TYPE_F32};
    const int64_t n = 4096;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const guild_type_t type = types[ti];
        uint64_t rb = 0;
        quant_row_bytes(type, (uint64_t)n, &rb, NULL);
        const int n_mats = 8;
        const int64_t rows = (int64_t)(((size_t)(quick ? 256 : 1024) << 20) / n_mats / rb);
        mm_job_t j = {.type = type, .n = n, .rows = rows, .ntok = 1, .n_mats = n_mats};
        j.w = dev_weights(type, n, rows * n_mats, &j.wrb);
        j.act = dev_act(type, n, 512, &j.astride);
        j.out = dev((size_t)rows * 512 * sizeof(float));
        const double bytes = (double)rows * (double)j.wrb;
        const float ms = time_ms(mm_run, &j, 16);
        printf("matmul %-6s %6lld x %lld, 1 token %15s %8.3f ms  %7.0f GB/s of weights\n",
               quant_type_info(type)->name, (long long)rows, (long long)n, "", ms, bytes / ms / 1e6);
        if (type == GUILD_TYPE_Q4_K || type == GUILD_TYPE_Q8_0 || type == GUILD_TYPE_Q6_K) {
            static const int32_t toks[] = {2, 4, 8, 64, 512};
            for (size_t k = 0; k < sizeof toks / sizeof toks[0]; k++) {
                j.ntok = toks[k];
                j.n_mats = 1;
                if (toks[k] >= 64)
                    j.rows = 4096; /* a layer-sized matrix, L2-resident: the compute rate */
                const float ms2 = time_ms(mm_run, &j, 8);
                printf("matmul %-6s %6lld x %lld, %3d tokens %11s %8.3f ms  %7.0f GB/s  %6.1f TOP/s\n",
                       quant_type_info(type)->name, (long long)j.rows, (long long)n, toks[k], "", ms2,
                       (double)j.rows * (double)j.wrb / ms2 / 1e6, 2.0 * (double)j.rows * n * toks[k] / ms2 / 1e9);
            }
        }
        cudaFree((void *)j.w);
        cudaFree((void *)j.act);
        cudaFree(j.out);
    }

    /* Qwen3-30B-A3B's decode shapes (2048 wide): attn_q 2048 -> 4096 (Q4_K), the LM head 2048 -> 151936
     * (Q6_K); 48 distinct copies of attn_q cycled so that L2 (60 MiB) does not hold them */
    {
        static const struct { guild_type_t type; int64_t rows; int n_mats; const char *what; } shapes[] = {
            {GUILD_TYPE_Q4_K, 4096, 48, "attn_q q4_K 4096 x 2048"},
            {GUILD_TYPE_Q6_K, 151936, 1, "output q6_K 151936 x 2048"},
            {GUILD_TYPE_Q8_0, 512, 48, "attn_k q8_0 512 x 2048"}};
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
            mm_job_t j = {.type = shapes[k].type, .n = 2048, .rows = shapes[k].rows, .ntok = 1,
                          .n_mats = shapes[k].n_mats};
            j.w = dev_weights(j.type, j.n, j.rows * j.n_mats, &j.wrb);
            j.act = dev_act(j.type, j.n, 1, &j.astride);
            j.out = dev((size_t)j.rows * sizeof(float));
            const float ms = time_ms(mm_run, &j, 32);
            printf("%-44s %8.3f ms  %7.0f GB/s of weights\n", shapes[k].what, ms,
                   (double)j.rows * (double)j.wrb / ms / 1e6);
            cudaFree((void *)j.w);
            cudaFree((void *)j.act);
            cudaFree(j.out);
        }
    }

    /* attention: 32 query heads over 4 KV heads of 128 (Qwen3-30B-A3B) */
    {
        const int32_t H = 32, HKV = 4, HD = 128, max_ctx = 32768 + 512;
        const size_t kv_bytes = (size_t)max_ctx * HKV * HD * 2;
        attn_job_t a = {.n_head = H, .n_kv_head = HKV, .hd = HD};
        a.k = dev(kv_bytes);
        a.v = dev(kv_bytes);
        cudaMemset(a.k, 0x2a, kv_bytes); /* 0x2a2a: a small positive half */
        cudaMemset(a.v, 0x2b, kv_bytes);
        a.q = dev((size_t)512 * H * HD * sizeof(float));
        cudaMemset(a.q, 0, (size_t)512 * H * HD * sizeof(float));
        a.out = dev((size_t)512 * H * HD * sizeof(float));
        a.scratch_bytes = cuda_attention_decode_scratch(4, H, HD, max_ctx);
        a.scratch = dev(a.scratch_bytes);
        static const int32_t ctxs[] = {512, 4096, 16384, 32768};
        const size_t scratch_full = a.scratch_bytes, per_split = (size_t)H * (HD + 2) * sizeof(float);
        static const int caps[] = {64, 32, 16};
        for (size_t i = 0; i < sizeof ctxs / sizeof ctxs[0]; i++)
            for (int path = 0; path < 2; path++)
                for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++) {
                    /* the split cap follows from the scratch's size */
                    a.scratch_bytes = per_split * (size_t)caps[c] < scratch_full ? per_split * (size_t)caps[c]
                                                                                 : scratch_full;
                    a.prefill = 0;
                    a.per_head = path;
                    a.n_tok = 1;
                    a.kv0 = ctxs[i] - 1;
                    const float ms = time_ms(attn_run, &a, 16);
                    printf("attention decode, 1 row over %5d keys, %-8s <= %2d splits %8.3f ms  %7.0f GB/s of K/V\n",
                           ctxs[i], path ? "per-head" : "gqa", caps[c], ms, 2.0 * ctxs[i] * HKV * HD * 2 / ms / 1e6);
                }
        a.scratch_bytes = scratch_full;
        a.per_head = 0;
        static const int32_t pctx[] = {0, 4096, 16384};
        for (size_t i = 0; i < sizeof pctx / sizeof pctx[0]; i++) {
            a.prefill = 1;
            a.n_tok = 512;
            a.kv0 = pctx[i];
            const float ms = time_ms(attn_run, &a, 8);
            const double keys = (double)a.kv0 * 512 + 512.0 * 513 / 2; /* (query, key) pairs */
            printf("attention prefill, 512 rows after %5d keys %8s %8.3f ms  %7.1f TFLOP/s\n", pctx[i], "", ms,
                   4.0 * keys * H * HD / ms / 1e9);
        }
        cudaFree(a.k);
        cudaFree(a.v);
        cudaFree(a.q);
        cudaFree(a.out);
        cudaFree(a.scratch);
    }

    /* small ops of one decode step (launch-bound) */
    {
        small_job_t s = {.n = 2048};
        s.x = dev(1 << 20);
        s.y = dev(1 << 20);
        s.w = dev(1 << 20);
        s.act = dev(1 << 20);
        s.ids = dev(4096);
        cudaMemset(s.x, 0, 1 << 20);
        cudaMemset(s.y, 0, 1 << 20);
        cudaMemset(s.w, 0, 1 << 20);
        static const char *names[] = {"quantize q8_K, 2048", "rmsnorm, 2048", "router top-8 of 128",
                                      "combine 8 slots, 2048"};
        for (int op = 0; op < 4; op++) {
            s.op = op;
            const float ms = time_ms(small_run, &s, 32);
            printf("%-44s %8.2f us\n", names[op], ms * 1000);
        }
    }
    cudaStreamDestroy(st);
    return 0;
}
