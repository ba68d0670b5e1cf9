/* Long contexts over the block-format KV caches (q8_0, q4_0, k8v4; gpu-worker/dense/kv_format.h) on the device:
 * cuda_attention_blocks' splits run in parallel (scratch) give the bits of the one block that walks them in order
 * (no scratch), of a grid sized for a longer cache (the captured graphs' launch), of the batch's last row alone,
 * and of the same cache read from mapped host memory (the GPU plan's KV in host RAM); the CPU's
 * cpu_attention_head_cache within the attention tolerance (2e-5 + 1e-4 |ref|) up to 40,000 keys, the kernel of a
 * block per query head (cuda_attention_blocks_per_head) within twice it. Then, printed, the decode attention's time
 * per layer on Qwen3-30B-A3B's heads (32 over 4 KV heads of 128) at 4,096 to 131,072 positions for f16
 * (cuda_attention_decode) and each block format, unsplit against the splits, the cache in device memory and in
 * mapped host memory (read over PCIe), and the per-head kernel's splits beside them. The tensor-core prefill over
 * the blocks (cuda_attention_blocks_mma): the CPU within the same tolerance, the CUDA-core kernel within twice it, a
 * re-run and the cache in host memory bit for bit; printed, its time for a 2,048-row batch against the CUDA-core
 * kernel's and f16's at 16,384 and 65,536 positions. Needs a CUDA device: without one the program prints why and
 * exits 77 (SKIP). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "core/sample/rng.h"
#include "core/util/clock.h"
#include "gpu-worker/dense/cpu/cpu_kernels.h"
#include "gpu-worker/dense/cuda/cuda_kernels.h"
#include "gpu-worker/dense/cuda/cuda_util.h"
#include "gpu-worker/dense/kv_format.h"
#include "tests/cuda/cuda_test_kv.h"
#include "tests/cuda/dev_guard.h"

static cudaStream_t stream;

static void fill(rng_t *r, float *x, int64_t n, float scale)
{
    for (int64_t i = 0; i < n; i++) {
        const float s = (i / 32) % 3 == 0 ? 0.05f : (i / 32) % 3 == 1 ? 1.0f : 4.0f;
        x[i] = (float)(scale * s * (2 * rng_uniform(r) - 1)) + 0.001f * scale;
    }
}

typedef struct long_case {
    int32_t n_tok, kv0, n_head, n_head_kv, head_dim, window;
    bool sinks;
} long_case_t;

/* Around the split boundaries (255/256/257 keys: one split, two), many splits, the cap of 64 (16,384+ keys), a
 * window over a long cache, the largest batch the scratch is sized for, head dims 32 to 256. */
static const long_case_t long_cases[] = {
    {1, 254, 8, 2, 128, 0, false},   {1, 255, 8, 2, 128, 0, false},    {2, 255, 8, 2, 128, 0, true},
    {1, 3000, 8, 2, 128, 0, false},  {3, 20000, 32, 4, 128, 0, false}, {32, 5000, 8, 1, 64, 0, true},
    {2, 9000, 16, 2, 256, 0, false}, {1, 40000, 8, 2, 128, 4096, true}, {5, 300, 4, 4, 32, 0, false},
    {17, 16383, 8, 2, 128, 0, false},
};
#define N_LONG_CASES (int)(sizeof long_cases / sizeof long_cases[0])

/* n cache rows of format fmt written by cuda_kv_store_blocks from floats (KV a row). */
static void store_rows(int32_t fmt, void *dk, void *dv, const float *kf, const float *vf, int64_t KV, int32_t HD,
                       int32_t n)
{
    guild_err_t err;
    float *dkf = dev_upload(kf, (size_t)n * (size_t)KV * sizeof *kf);
    float *dvf = dev_upload(vf, (size_t)n * (size_t)KV * sizeof *vf);
    ck_assert_msg(cuda_kv_store_blocks(kv_type_k(fmt), kv_type_v(fmt), kv_type_rotates_v(fmt), dk, dv, dkf, dvf, KV,
                                       HD, n, 0, NULL, stream, &err) == 0, "%s", err.msg);
    CK_CUDA(cudaStreamSynchronize(stream));
    dev_free(dkf);
    dev_free(dvf);
}

/* A case's cache and batch: n_kv = kv0 + n_tok rows of format fmt stored on the device from random floats, the
 * batch's queries and the heads' sinks on the host and the device. */
typedef struct long_data {
    int32_t fmt;
    guild_type_t kt, vt;
    bool rot;
    int32_t HD, Q, KV, n_kv;           /* head dim, a row's query and cache widths, cached positions */
    size_t krow, vrow;                 /* a cache row's key and value bytes */
    size_t kbytes, vbytes, obytes;     /* the caches', the batch's output */
    void *dk, *dv;                     /* device [n_kv] rows */
    float *q, *sinks;                  /* host [n_tok][Q], [n_head] */
    float *dq, *dsinks;                /* their device copies */
    cuda_attn_ext_t ext;               /* c's window, its sinks (dsinks) or none */
    float scale;
} long_data_t;

static void long_data_make(long_data_t *d, const long_case_t *c, int32_t fmt, uint64_t seed)
{
    d->fmt = fmt;
    d->kt = kv_type_k(fmt);
    d->vt = kv_type_v(fmt);
    d->rot = kv_type_rotates_v(fmt);
    d->HD = c->head_dim;
    d->Q = c->n_head * d->HD;
    d->KV = c->n_head_kv * d->HD;
    d->n_kv = c->kv0 + c->n_tok;
    d->krow = kv_elem_bytes(d->kt, d->KV);
    d->vrow = kv_elem_bytes(d->vt, d->KV);
    d->kbytes = (size_t)d->n_kv * d->krow;
    d->vbytes = (size_t)d->n_kv * d->vrow;
    d->obytes = (size_t)c->n_tok * d->Q * 4;
    rng_t r;
    rng_seed(&r, seed);
    const size_t n = (size_t)d->n_kv * (size_t)d->KV;
    float *kf = malloc(n * sizeof *kf), *vf = malloc(n * sizeof *vf);
    fill(&r, kf, (int64_t)n, 1.0f);
    fill(&r, vf, (int64_t)n, 1.0f);
    d->dk = dev_new(d->kbytes);
    d->dv = dev_new(d->vbytes);
    store_rows(fmt, d->dk, d->dv, kf, vf, d->KV, d->HD, d->n_kv);
    free(kf);
    free(vf);
    d->q = malloc(d->obytes);
    d->sinks = malloc((size_t)c->n_head * sizeof *d->sinks);
    fill(&r, d->q, (int64_t)c->n_tok * d->Q, 1.5f);
    fill(&r, d->sinks, c->n_head, 3.0f);
    d->dq = dev_upload(d->q, d->obytes);
    d->dsinks = dev_upload(d->sinks, (size_t)c->n_head * sizeof *d->sinks);
    d->ext = (cuda_attn_ext_t){c->window, c->sinks ? d->dsinks : NULL};
    d->scale = 1.0f / sqrtf((float)d->HD);
}

static void long_data_free(long_data_t *d)
{
    dev_free(d->dk);
    dev_free(d->dv);
    dev_free(d->dq);
    dev_free(d->dsinks);
    free(d->q);
    free(d->sinks);
}

/* The case's cache copied to mapped host memory: the host's bytes in *kc, *vc (for the CPU), their device
 * addresses in *hk, *hv (the GPU plan's KV in host RAM). Freed with cudaFreeHost(*kc), (*vc). */
static void long_data_host(const long_data_t *d, uint8_t **kc, uint8_t **vc, void **hk, void **hv)
{
    *kc = *vc = NULL;
    CK_CUDA(cudaHostAlloc((void **)kc, d->kbytes, cudaHostAllocMapped));
    CK_CUDA(cudaHostAlloc((void **)vc, d->vbytes, cudaHostAllocMapped));
    CK_CUDA(cudaMemcpy(*kc, d->dk, d->kbytes, cudaMemcpyDeviceToHost));
    CK_CUDA(cudaMemcpy(*vc, d->dv, d->vbytes, cudaMemcpyDeviceToHost));
    *hk = *hv = NULL;
    CK_CUDA(cudaHostGetDevicePointer(hk, *kc, 0));
    CK_CUDA(cudaHostGetDevicePointer(hv, *vc, 0));
}

/* The CPU's reference of case c over the host copy of its cache (cuda_test_kv.h). */
static cuda_test_kv_attn_t long_data_cpu(const long_data_t *d, const long_case_t *c, const uint8_t *kc,
                                         const uint8_t *vc)
{
    return (cuda_test_kv_attn_t){.kt = d->kt, .vt = d->vt, .rot = d->rot, .k = kc, .v = vc, .krow = d->krow,
                                 .vrow = d->vrow, .n_head = c->n_head, .n_head_kv = c->n_head_kv, .head_dim = d->HD,
                                 .kv0 = c->kv0, .window = c->window, .sinks = c->sinks ? d->sinks : NULL,
                                 .scale = d->scale, .q = d->q};
}

/* _i: case _i / 3 of long_cases, format q8_0, q4_0, k8v4. */
START_TEST(test_split_bits)
{
    const long_case_t c = long_cases[_i / 3];
    long_data_t d;
    long_data_make(&d, &c, KV_TYPE_Q8_0 + _i % 3, 41 + (uint64_t)_i);
    const guild_type_t kt = d.kt, vt = d.vt;
    const bool rot = d.rot;
    const int32_t HD = d.HD, Q = d.Q;
    const size_t obytes = d.obytes;
    const size_t sb = cuda_attention_decode_scratch(c.n_tok, c.n_head, HD, d.n_kv);
    void *dsc = dev_new(sb);
    float *dout = dev_new(obytes);
    float *walk = malloc(obytes), *split = malloc(obytes), *got = malloc(obytes);
    guild_err_t err;
    /* the reference order: one block per (head, row) walking the splits */
    ck_assert_msg(cuda_attention_blocks(dout, d.dq, kt, vt, rot, d.dk, d.dv, c.n_tok, c.kv0, NULL, c.n_head,
                                        c.n_head_kv, HD, d.scale, &d.ext, NULL, 0, stream, &err) == 0, "%s", err.msg);
    dev_download(walk, dout, obytes, stream);
    /* the splits in parallel, then merged */
    ck_assert_msg(cuda_attention_blocks(dout, d.dq, kt, vt, rot, d.dk, d.dv, c.n_tok, c.kv0, NULL, c.n_head,
                                        c.n_head_kv, HD, d.scale, &d.ext, dsc, sb, stream, &err) == 0, "%s", err.msg);
    dev_download(split, dout, obytes, stream);
    ck_assert_msg(!memcmp(walk, split, obytes), "%s case %d: the parallel splits are not the walking block's bits",
                  kv_type_name(d.fmt), _i / 3);
    /* kv0 from the device, the grid sized for 5,000 more positions (a captured graph's launch) */
    int32_t *dkv0 = dev_upload(&c.kv0, sizeof c.kv0);
    ck_assert_msg(cuda_attention_blocks(dout, d.dq, kt, vt, rot, d.dk, d.dv, c.n_tok, c.kv0 + 5000, dkv0, c.n_head,
                                        c.n_head_kv, HD, d.scale, &d.ext, dsc, sb, stream, &err) == 0, "%s", err.msg);
    dev_download(got, dout, obytes, stream);
    ck_assert_msg(!memcmp(walk, got, obytes), "%s case %d: a grid for a longer cache changes the bits",
                  kv_type_name(d.fmt), _i / 3);
    /* the last row alone at its position */
    const size_t row = (size_t)Q * 4;
    ck_assert_msg(cuda_attention_blocks(dout, d.dq + (int64_t)(c.n_tok - 1) * Q, kt, vt, rot, d.dk, d.dv, 1,
                                        c.kv0 + c.n_tok - 1, NULL, c.n_head, c.n_head_kv, HD, d.scale, &d.ext, dsc,
                                        sb, stream, &err) == 0, "%s", err.msg);
    CK_CUDA(cudaStreamSynchronize(stream));
    CK_CUDA(cudaMemcpy(got, dout, row, cudaMemcpyDeviceToHost));
    ck_assert_msg(!memcmp(walk + (size_t)(c.n_tok - 1) * Q, got, row), "%s case %d: the last row alone differs",
                  kv_type_name(d.fmt), _i / 3);
    /* the same cache in mapped host memory */
    uint8_t *kc, *vc;
    void *hk, *hv;
    long_data_host(&d, &kc, &vc, &hk, &hv);
    ck_assert_msg(cuda_attention_blocks(dout, d.dq, kt, vt, rot, hk, hv, c.n_tok, c.kv0, NULL, c.n_head, c.n_head_kv,
                                        HD, d.scale, &d.ext, dsc, sb, stream, &err) == 0, "%s", err.msg);
    dev_download(got, dout, obytes, stream);
    ck_assert_msg(!memcmp(walk, got, obytes), "%s case %d: the cache in host memory gives other bits",
                  kv_type_name(d.fmt), _i / 3);
    /* the kernel of a block per query head (where the tile kernel takes the shape: other sums' orders) */
    ck_assert_msg(cuda_attention_blocks_per_head(dout, d.dq, kt, vt, rot, d.dk, d.dv, c.n_tok, c.kv0, NULL, c.n_head,
                                                 c.n_head_kv, HD, d.scale, &d.ext, dsc, sb, stream, &err) == 0,
                  "%s", err.msg);
    dev_download(got, dout, obytes, stream);
    double worst_head = 0;
    for (int64_t i = 0; i < (int64_t)c.n_tok * Q; i++) {
        const double e = fabs((double)got[i] - walk[i]);
        ck_assert_msg(e <= 4e-5 + 2e-4 * fabs(walk[i]), "%s case %d element %lld: %.9g vs the per-head kernel's %.9g",
                      kv_type_name(d.fmt), _i / 3, (long long)i, (double)walk[i], (double)got[i]);
        worst_head = e > worst_head ? e : worst_head;
    }
    /* the CPU on the same bytes, the first and the last row */
    const cuda_test_kv_attn_t cpu = long_data_cpu(&d, &c, kc, vc);
    char what[64];
    snprintf(what, sizeof what, "%s case %d", kv_type_name(d.fmt), _i / 3);
    double worst = 0;
    for (int32_t t = 0; t < c.n_tok; t += c.n_tok > 1 ? c.n_tok - 1 : 1)
        worst = fmax(worst, cuda_test_kv_attn_check_row(&cpu, walk, t, what));
    printf("kv %-4s %2d rows after %5d keys, %2d/%d heads of %3d, window %4d%s: splits in parallel = walked = "
           "longer grid = last row alone = host memory, bit for bit; CPU max abs err %.3g, per-head kernel %.3g\n",
           kv_type_name(d.fmt), c.n_tok, c.kv0, c.n_head, c.n_head_kv, HD, c.window, c.sinks ? ", sinks" : "", worst,
           worst_head);
    CK_CUDA(cudaFreeHost(kc));
    CK_CUDA(cudaFreeHost(vc));
    long_data_free(&d);
    dev_free(dsc);
    dev_free(dout);
    dev_free(dkv0);
    free(walk);
    free(split);
    free(got);
}
END_TEST

/* Prefill batches on tensor cores over the blocks (cuda_attention_blocks_mma): each head dimension it takes, GQA
 * groups, windows and sinks, rows across several query tiles, a batch after a long cache. */
static const long_case_t mma_cases[] = {
    {33, 0, 8, 2, 128, 0, false},    {100, 250, 8, 2, 128, 0, true}, {64, 4000, 32, 4, 128, 0, false},
    {130, 17, 4, 1, 64, 0, false},   {97, 700, 8, 8, 64, 128, true},  {200, 3000, 16, 2, 128, 1000, false},
    {300, 9000, 32, 4, 128, 0, false},
};
#define N_MMA_CASES (int)(sizeof mma_cases / sizeof mma_cases[0])

/* _i: case _i / 3 of mma_cases, format q8_0, q4_0, k8v4. The CPU's cpu_attention_head_cache on the same bytes within
 * the attention tolerance for a sample of rows (every head), the blocks kernel's output within it for every row;
 * a re-run and the cache in mapped host memory give the same bits. */
START_TEST(test_mma)
{
    const long_case_t c = mma_cases[_i / 3];
    long_data_t d;
    long_data_make(&d, &c, KV_TYPE_Q8_0 + _i % 3, 4100 + (uint64_t)_i);
    const guild_type_t kt = d.kt, vt = d.vt;
    const bool rot = d.rot;
    const int32_t HD = d.HD, Q = d.Q;
    const size_t obytes = d.obytes;
    float *dout = dev_new(obytes);
    float *mma = malloc(obytes), *walk = malloc(obytes), *got = malloc(obytes);
    guild_err_t err;
    ck_assert(cuda_attention_blocks_mma_takes(kt, vt, rot, HD, dout, d.dq, d.dk, d.dv));
    ck_assert_msg(cuda_attention_blocks_mma(dout, d.dq, kt, vt, rot, d.dk, d.dv, c.n_tok, c.kv0, c.n_head,
                                            c.n_head_kv, HD, d.scale, &d.ext, stream, &err) == 0, "%s", err.msg);
    dev_download(mma, dout, obytes, stream);
    CK_CUDA(cudaMemset(dout, 0xff, obytes));
    ck_assert_msg(cuda_attention_blocks_mma(dout, d.dq, kt, vt, rot, d.dk, d.dv, c.n_tok, c.kv0, c.n_head,
                                            c.n_head_kv, HD, d.scale, &d.ext, stream, &err) == 0, "%s", err.msg);
    dev_download(got, dout, obytes, stream);
    ck_assert_msg(!memcmp(mma, got, obytes), "%s mma case %d: a re-run is not bit-identical", kv_type_name(d.fmt),
                  _i / 3);
    ck_assert_msg(cuda_attention_blocks(dout, d.dq, kt, vt, rot, d.dk, d.dv, c.n_tok, c.kv0, NULL, c.n_head,
                                        c.n_head_kv, HD, d.scale, &d.ext, NULL, 0, stream, &err) == 0, "%s", err.msg);
    dev_download(walk, dout, obytes, stream);
    uint8_t *kc, *vc;
    void *hk, *hv;
    long_data_host(&d, &kc, &vc, &hk, &hv);
    ck_assert_msg(cuda_attention_blocks_mma(dout, d.dq, kt, vt, rot, hk, hv, c.n_tok, c.kv0, c.n_head, c.n_head_kv,
                                            HD, d.scale, &d.ext, stream, &err) == 0, "%s", err.msg);
    dev_download(got, dout, obytes, stream);
    ck_assert_msg(!memcmp(mma, got, obytes), "%s mma case %d: the cache in host memory gives other bits",
                  kv_type_name(d.fmt), _i / 3);
    double worst_walk = 0;
    for (int64_t i = 0; i < (int64_t)c.n_tok * Q; i++) {
        const double e = fabs((double)mma[i] - walk[i]);
        ck_assert_msg(e <= 4e-5 + 2e-4 * fabs(walk[i]), "%s mma case %d element %lld: %.9g vs the blocks kernel's %.9g",
                      kv_type_name(d.fmt), _i / 3, (long long)i, (double)mma[i], (double)walk[i]);
        worst_walk = e > worst_walk ? e : worst_walk;
    }
    const cuda_test_kv_attn_t cpu = long_data_cpu(&d, &c, kc, vc);
    char what[64];
    snprintf(what, sizeof what, "%s mma case %d", kv_type_name(d.fmt), _i / 3);
    double worst = 0;
    for (int32_t t = 0; t < c.n_tok; t = t + 7 < c.n_tok || t == c.n_tok - 1 ? t + 7 : c.n_tok - 1)
        worst = fmax(worst, cuda_test_kv_attn_check_row(&cpu, mma, t, what));
    printf("mma %-4s %3d rows after %5d keys, %2d/%d heads of %3d, window %4d%s: re-run = host memory, bit for bit; "
           "CPU max abs err %.3g, blocks kernel %.3g\n", kv_type_name(d.fmt), c.n_tok, c.kv0, c.n_head, c.n_head_kv,
           HD, c.window, c.sinks ? ", sinks" : "", worst, worst_walk);
    CK_CUDA(cudaFreeHost(kc));
    CK_CUDA(cudaFreeHost(vc));
    long_data_free(&d);
    dev_free(dout);
    free(mma);
    free(walk);
    free(got);
}
END_TEST

/* The median of 5 timed calls of one attention launch (ms), after one untimed. */
typedef struct attn_call {
    int32_t fmt, n_kv;
    const void *k, *v;
    const float *q;
    float *out;
    void *scratch;
    size_t scratch_bytes;
    bool per_head; /* block formats: the kernel of a block per query head */
} attn_call_t;

static int attn_once(const attn_call_t *a, guild_err_t *err)
{
    const int32_t H = 32, HKV = 4, HD = 128;
    const float scale = 1.0f / sqrtf((float)HD);
    if (a->fmt == KV_TYPE_F16)
        return cuda_attention_decode(a->out, a->q, GUILD_TYPE_F16, a->k, a->v, 1, a->n_kv - 1, H, HKV, HD, scale,
                                     NULL, a->scratch, a->scratch_bytes, stream, err);
    return (a->per_head ? cuda_attention_blocks_per_head : cuda_attention_blocks)(
        a->out, a->q, kv_type_k(a->fmt), kv_type_v(a->fmt), kv_type_rotates_v(a->fmt), a->k, a->v, 1, a->n_kv - 1, NULL,
        H, HKV, HD, scale, NULL, a->scratch, a->scratch_bytes, stream, err);
}

static double attn_ms(const attn_call_t *a)
{
    guild_err_t err;
    cudaEvent_t e0, e1;
    CK_CUDA(cudaEventCreate(&e0));
    CK_CUDA(cudaEventCreate(&e1));
    ck_assert_msg(attn_once(a, &err) == 0, "%s", err.msg);
    double t[5];
    for (int i = 0; i < 5; i++) {
        CK_CUDA(cudaEventRecord(e0, stream));
        ck_assert_msg(attn_once(a, &err) == 0, "%s", err.msg);
        CK_CUDA(cudaEventRecord(e1, stream));
        CK_CUDA(cudaEventSynchronize(e1));
        float ms = 0;
        CK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
        t[i] = ms;
    }
    CK_CUDA(cudaEventDestroy(e0));
    CK_CUDA(cudaEventDestroy(e1));
    return guild_median(t, 5);
}

/* The timing cases' heads: Qwen3-30B-A3B's, 4 KV heads of 128. */
#define TIMING_HD 128

/* A timing case's cache: N positions of format fmt, the same 4,096 rows of r's draws stored over and over (the
 * timing needs no more), on the device in *dk, *dv of *kbytes, *vbytes. */
static void timing_cache(int32_t fmt, int32_t N, rng_t *r, void **dk, void **dv, size_t *kbytes, size_t *vbytes)
{
    const int32_t HD = TIMING_HD, KV = 4 * HD, piece = 4096;
    const guild_type_t kt = kv_type_k(fmt), vt = kv_type_v(fmt);
    *kbytes = (size_t)N * kv_elem_bytes(kt, KV);
    *vbytes = (size_t)N * kv_elem_bytes(vt, KV);
    float *kf = malloc((size_t)piece * KV * sizeof *kf), *vf = malloc((size_t)piece * KV * sizeof *vf);
    fill(r, kf, (int64_t)piece * KV, 1.0f);
    fill(r, vf, (int64_t)piece * KV, 1.0f);
    float *dkf = dev_upload(kf, (size_t)piece * KV * sizeof *kf);
    float *dvf = dev_upload(vf, (size_t)piece * KV * sizeof *vf);
    *dk = dev_new(*kbytes);
    *dv = dev_new(*vbytes);
    guild_err_t err;
    for (int32_t p = 0; p < N; p += piece)
        ck_assert_msg((fmt == KV_TYPE_F16 ? cuda_kv_store(kt, *dk, *dv, dkf, dvf, KV, piece, p, stream, &err)
                                          : cuda_kv_store_blocks(kt, vt, kv_type_rotates_v(fmt), *dk, *dv, dkf, dvf,
                                                                 KV, HD, piece, p, NULL, stream, &err)) == 0,
                      "%s", err.msg);
    CK_CUDA(cudaStreamSynchronize(stream));
    dev_free(dkf);
    dev_free(dvf);
    free(kf);
    free(vf);
}

/* Printed, not asserted: one decode row's attention over one layer of Qwen3-30B-A3B's heads (x48 layers for a
 * token), f16 and each block format, in device memory and in mapped host memory. _i: the format (f16, q8_0,
 * q4_0, k8v4). */
START_TEST(test_decode_timing)
{
    static const int32_t fmts[] = {KV_TYPE_F16, KV_TYPE_Q8_0, KV_TYPE_Q4_0, KV_TYPE_K8V4};
    static const int32_t ctxs[] = {4096, 16384, 65536, 131072};
    const int32_t fmt = fmts[_i], N = 131072, H = 32, HD = TIMING_HD;
    rng_t r;
    rng_seed(&r, 7);
    void *dk, *dv;
    size_t kbytes, vbytes;
    timing_cache(fmt, N, &r, &dk, &dv, &kbytes, &vbytes);
    void *hk = NULL, *hv = NULL, *mk = NULL, *mv = NULL;
    CK_CUDA(cudaHostAlloc(&hk, kbytes, cudaHostAllocMapped));
    CK_CUDA(cudaHostAlloc(&hv, vbytes, cudaHostAllocMapped));
    CK_CUDA(cudaMemcpy(hk, dk, kbytes, cudaMemcpyDeviceToHost));
    CK_CUDA(cudaMemcpy(hv, dv, vbytes, cudaMemcpyDeviceToHost));
    CK_CUDA(cudaHostGetDevicePointer(&mk, hk, 0));
    CK_CUDA(cudaHostGetDevicePointer(&mv, hv, 0));
    float *q = malloc((size_t)H * HD * sizeof *q);
    fill(&r, q, (int64_t)H * HD, 1.5f);
    float *dq = dev_upload(q, (size_t)H * HD * sizeof *q), *dout = dev_new((size_t)H * HD * sizeof *q);
    const size_t sb = cuda_attention_decode_scratch(1, H, HD, N);
    void *dsc = dev_new(sb);
    for (size_t i = 0; i < sizeof ctxs / sizeof *ctxs; i++) {
        const double bytes = (double)ctxs[i] * (double)(kbytes + vbytes) / N;
        attn_call_t a = {fmt, ctxs[i], dk, dv, dq, dout, NULL, 0, false};
        const double one = fmt == KV_TYPE_F16 ? 0 : attn_ms(&a);
        a.scratch = dsc;
        a.scratch_bytes = sb;
        const double split = attn_ms(&a);
        a.k = mk;
        a.v = mv;
        const double host = attn_ms(&a);
        char one_s[64] = "", old_s[160] = "";
        if (fmt != KV_TYPE_F16) {
            snprintf(one_s, sizeof one_s, "unsplit %8.3f ms, ", one);
            a.per_head = true; /* the kernel of a block per query head, from host RAM and in GPU memory */
            const double old_host = attn_ms(&a);
            a.k = dk;
            a.v = dv;
            const double old_split = attn_ms(&a);
            snprintf(old_s, sizeof old_s, "; per-head kernel: split %7.3f ms (%5.0f GB/s), from host RAM %8.3f ms "
                     "(%5.1f GB/s)", old_split, bytes / old_split / 1e6, old_host, bytes / old_host / 1e6);
        }
        printf("timing %-4s %6d positions (%6.1f MB a layer): %ssplit %7.3f ms (%6.0f GB/s), from host RAM %8.3f ms "
               "(%5.1f GB/s); x48 layers: %7.2f / %8.2f ms a token%s\n", kv_type_name(fmt), ctxs[i], bytes / 1e6,
               one_s, split, bytes / split / 1e6, host, bytes / host / 1e6, 48 * split, 48 * host, old_s);
    }
    CK_CUDA(cudaFreeHost(hk));
    CK_CUDA(cudaFreeHost(hv));
    dev_free(dk);
    dev_free(dv);
    dev_free(dq);
    dev_free(dout);
    dev_free(dsc);
    free(q);
}
END_TEST

/* Printed, not asserted: a prefill batch of 2,048 rows (one layer of Qwen3-30B-A3B's heads, 32 over 4 of 128) ending
 * at 16,384 and 65,536 positions: f16 on tensor cores (cuda_attention_prefill), each block format read by the
 * CUDA-core kernel (cuda_attention_blocks, one block per head and row as the backend's prefill ran it: one timed
 * call, seconds long at 65,536) and on tensor cores (cuda_attention_blocks_mma; medians of 3 after one untimed
 * call). _i: the format. */
static double prefill_ms(int32_t fmt, bool mma, const void *k, const void *v, const float *q, float *out, int32_t n,
                         int32_t kv0)
{
    const int32_t H = 32, HKV = 4, HD = 128;
    const float scale = 1.0f / sqrtf((float)HD);
    const guild_type_t kt = kv_type_k(fmt), vt = kv_type_v(fmt);
    const bool rot = kv_type_rotates_v(fmt);
    cudaEvent_t e0, e1;
    CK_CUDA(cudaEventCreate(&e0));
    CK_CUDA(cudaEventCreate(&e1));
    const bool slow = fmt != KV_TYPE_F16 && !mma; /* seconds a call at 65,536: timed once, not warmed up */
    const int reps = slow ? 1 : 3;
    double t[3];
    for (int i = slow ? 0 : -1; i < reps; i++) {
        guild_err_t err;
        CK_CUDA(cudaEventRecord(e0, stream));
        const int rc = fmt == KV_TYPE_F16
                           ? cuda_attention_prefill(out, q, GUILD_TYPE_F16, k, v, n, kv0, H, HKV, HD, scale, NULL, stream,
                                                    &err)
                       : mma ? cuda_attention_blocks_mma(out, q, kt, vt, rot, k, v, n, kv0, H, HKV, HD, scale, NULL,
                                                         stream, &err)
                             : cuda_attention_blocks(out, q, kt, vt, rot, k, v, n, kv0, NULL, H, HKV, HD, scale, NULL,
                                                     NULL, 0, stream, &err);
        ck_assert_msg(rc == 0, "%s", err.msg);
        CK_CUDA(cudaEventRecord(e1, stream));
        CK_CUDA(cudaEventSynchronize(e1));
        float ms = 0;
        CK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
        if (i >= 0)
            t[i] = ms;
    }
    CK_CUDA(cudaEventDestroy(e0));
    CK_CUDA(cudaEventDestroy(e1));
    return guild_median(t, reps);
}

START_TEST(test_prefill_timing)
{
    static const int32_t fmts[] = {KV_TYPE_F16, KV_TYPE_Q8_0, KV_TYPE_Q4_0, KV_TYPE_K8V4};
    static const int32_t ctxs[] = {16384, 65536};
    const int32_t fmt = fmts[_i], N = 65536, H = 32, HD = TIMING_HD, ROWS = 2048;
    rng_t r;
    rng_seed(&r, 9);
    void *dk, *dv;
    size_t kbytes, vbytes;
    timing_cache(fmt, N, &r, &dk, &dv, &kbytes, &vbytes);
    float *q = malloc((size_t)ROWS * H * HD * sizeof *q);
    fill(&r, q, (int64_t)ROWS * H * HD, 1.5f);
    float *dq = dev_upload(q, (size_t)ROWS * H * HD * sizeof *q), *dout = dev_new((size_t)ROWS * H * HD * sizeof *q);
    for (size_t i = 0; i < sizeof ctxs / sizeof *ctxs; i++) {
        const int32_t kv0 = ctxs[i] - ROWS;
        /* the causal products of the batch: 2 (QK and PV) x 2 flops x rows x keys seen x HD x heads */
        const double flop = 4.0 * HD * H * ((double)ROWS * kv0 + (double)ROWS * (ROWS + 1) / 2);
        if (fmt == KV_TYPE_F16) {
            const double t = prefill_ms(fmt, true, dk, dv, dq, dout, ROWS, kv0);
            printf("prefill %-4s %4d rows ending at %6d: tensor cores %8.3f ms (%5.1f TFLOP/s)\n", kv_type_name(fmt),
                   ROWS, ctxs[i], t, flop / t / 1e9);
            continue;
        }
        const double tc = prefill_ms(fmt, false, dk, dv, dq, dout, ROWS, kv0);
        const double tm = prefill_ms(fmt, true, dk, dv, dq, dout, ROWS, kv0);
        printf("prefill %-4s %4d rows ending at %6d: CUDA cores %8.3f ms (%5.1f TFLOP/s), tensor cores %8.3f ms "
               "(%5.1f TFLOP/s), %.1fx\n", kv_type_name(fmt), ROWS, ctxs[i], tc, flop / tc / 1e9, tm,
               flop / tm / 1e9, tc / tm);
    }
    dev_free(dk);
    dev_free(dv);
    dev_free(dq);
    dev_free(dout);
    free(q);
}
END_TEST

static Suite *kv_long_suite(void)
{
    Suite *s = suite_create("cuda_kv_long");
    TCase *tc = tcase_create("split_bits");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_split_bits, 0, 3 * N_LONG_CASES);
    suite_add_tcase(s, tc);
    tc = tcase_create("mma");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_mma, 0, 3 * N_MMA_CASES);
    suite_add_tcase(s, tc);
    tc = tcase_create("prefill_timing");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_prefill_timing, 0, 4);
    suite_add_tcase(s, tc);
    tc = tcase_create("decode_timing");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_decode_timing, 0, 4);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    char why[256];
    if (cuda_device_count(why, sizeof why) < 1) {
        printf("SKIP: no CUDA device (%s)\n", why);
        return 77;
    }
    (void)cudaSetDeviceFlags(cudaDeviceMapHost); /* the default with unified addressing; refused once a context is up */
    (void)cudaGetLastError();
    if (cudaStreamCreate(&stream) != cudaSuccess) {
        printf("cannot create a CUDA stream: %s\n", cudaGetErrorString(cudaGetLastError()));
        return 1;
    }
    SRunner *sr = srunner_create(kv_long_suite());
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    cudaStreamDestroy(stream);
    return failed ? 1 : 0;
}
