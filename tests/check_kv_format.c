/* Tests for the KV cache formats (gpu-worker/dense/kv_format.h) and the CPU backend over them: a row's store
 * against a scalar reference written here from the GGUF block definitions (byte for byte) and its error bounds,
 * the Walsh-Hadamard rotation against its matrix, attention reading each format against the f32 attention of the
 * dequantized rows (bit for bit), and whole models: each format's prefill in one chunk, in several chunks and on
 * other thread counts gives the same bits, its logits stay within a stated tolerance of the f32 cache's, its
 * teacher-forced greedy tokens agree with them; formats a model cannot take are refused. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/quant/fp16.h"
#include "core/sample/rng.h"
#include "cpu-expert-worker/experts/moe_local.h"
#include "gpu-worker/dense/backend.h"
#include "gpu-worker/dense/cpu/cpu_kernels.h"
#include "gpu-worker/dense/kv_format.h"
#include "tests/check_run.h"
#include "tests/tiny_model.h"

/* ---- the scalar reference: GGUF's Q8_0 and Q4_0 blocks, from their definitions ---- */

static void put_f16(uint8_t *p, float d)
{
    const uint16_t h = quant_f32_to_f16(d);
    p[0] = (uint8_t)(h & 0xff);
    p[1] = (uint8_t)(h >> 8);
}

static float get_f16(const uint8_t *p)
{
    return quant_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

/* Q8_0: d = max|x| / 127, q = round(x / d) (through the reciprocal), 34 bytes a block: d, then 32 int8. */
static void ref_q8_0(const float *x, uint8_t *out, int n)
{
    for (int b = 0; b < n / 32; b++, x += 32, out += 34) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++)
            amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
        const float d = amax / 127, id = d != 0.0f ? 1.0f / d : 0.0f;
        put_f16(out, d);
        for (int j = 0; j < 32; j++)
            out[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
    }
}

/* Q4_0: the first element of largest magnitude maps to -8: d = it / -8; q = min(15, trunc(x / d + 8.5)),
 * 18 bytes a block: d, then 16 bytes of element j in the low nibble and j + 16 in the high one. */
static void ref_q4_0(const float *x, uint8_t *out, int n)
{
    for (int b = 0; b < n / 32; b++, x += 32, out += 18) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 32; j++)
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        const float d = max / -8, id = d != 0.0f ? 1.0f / d : 0.0f;
        put_f16(out, d);
        for (int j = 0; j < 16; j++) {
            int lo = (int)(int8_t)(x[j] * id + 8.5f), hi = (int)(int8_t)(x[j + 16] * id + 8.5f);
            lo = lo > 15 ? 15 : lo;
            hi = hi > 15 ? 15 : hi;
            out[2 + j] = (uint8_t)(lo | hi << 4);
        }
    }
}

static void ref_load(guild_type_t et, const uint8_t *p, float *y, int n)
{
    for (int b = 0; b < n / 32; b++)
        for (int j = 0; j < 32; j++) {
            if (et == GUILD_TYPE_Q8_0) {
                const uint8_t *blk = p + b * 34;
                y[b * 32 + j] = (float)(int8_t)blk[2 + j] * get_f16(blk);
            } else {
                const uint8_t *blk = p + b * 18;
                const int q = j < 16 ? blk[2 + j] & 0x0f : blk[2 + j - 16] >> 4;
                y[b * 32 + j] = (float)(q - 8) * get_f16(blk);
            }
        }
}

/* n floats: blocks of different scales, an all-zero block, a block whose largest magnitudes tie with opposite
 * signs (Q4_0 takes the first) and exact half-steps. */
static void fill_row(float *x, int n, uint64_t seed)
{
    rng_t rng;
    rng_seed(&rng, seed);
    for (int i = 0; i < n; i++) {
        const float scale = (float)pow(10.0, (double)((i / 32) % 5) - 2.0);
        x[i] = (2.0f * (float)rng_uniform(&rng) - 1.0f) * scale;
    }
    if (n >= 96) {
        memset(x + 32, 0, 32 * sizeof *x);
        x[64] = -3.0f, x[70] = 3.0f, x[71] = 1.5f, x[72] = -0.1875f;
    }
}

START_TEST(test_store_matches_reference)
{
    enum { N = 256, HD = 64 };
    float x[N], y[N], yr[N], scratch[HD];
    uint8_t got[N * 4], want[N * 4];
    for (uint64_t seed = 1; seed <= 20; seed++) {
        fill_row(x, N, seed);
        /* q8_0 */
        kv_store_row(GUILD_TYPE_Q8_0, false, x, got, N, HD, scratch);
        ref_q8_0(x, want, N);
        ck_assert_uint_eq(kv_elem_bytes(GUILD_TYPE_Q8_0, N), N / 32 * 34);
        ck_assert_msg(!memcmp(got, want, N / 32 * 34), "q8_0 row %d differs from the reference", (int)seed);
        kv_load(GUILD_TYPE_Q8_0, got, y, N);
        ref_load(GUILD_TYPE_Q8_0, want, yr, N);
        ck_assert(!memcmp(y, yr, sizeof y));
        for (int i = 0; i < N; i++) {
            float amax = 0.0f;
            for (int j = i / 32 * 32; j < i / 32 * 32 + 32; j++)
                amax = fmaxf(amax, fabsf(x[j]));
            /* half a step of amax / 127, plus the f16 rounding of the scale over 127 steps */
            ck_assert_msg(fabsf(y[i] - x[i]) <= 0.57f * amax / 127 + 1e-30f, "q8_0 element %d: %g for %g", i,
                          (double)y[i], (double)x[i]);
        }
        /* q4_0 */
        kv_store_row(GUILD_TYPE_Q4_0, false, x, got, N, HD, scratch);
        ref_q4_0(x, want, N);
        ck_assert_uint_eq(kv_elem_bytes(GUILD_TYPE_Q4_0, N), N / 32 * 18);
        ck_assert_msg(!memcmp(got, want, N / 32 * 18), "q4_0 row %d differs from the reference", (int)seed);
        kv_load(GUILD_TYPE_Q4_0, got, y, N);
        ref_load(GUILD_TYPE_Q4_0, want, yr, N);
        ck_assert(!memcmp(y, yr, sizeof y));
        for (int i = 0; i < N; i++) {
            float amax = 0.0f;
            for (int j = i / 32 * 32; j < i / 32 * 32 + 32; j++)
                amax = fmaxf(amax, fabsf(x[j]));
            /* the far side of the range clamps at +7: a whole step of amax / 8 there, half a step elsewhere */
            ck_assert_msg(fabsf(y[i] - x[i]) <= 1.01f * amax / 8 + 1e-30f, "q4_0 element %d: %g for %g", i,
                          (double)y[i], (double)x[i]);
        }
        /* f16 and f32 */
        kv_store_row(GUILD_TYPE_F16, false, x, got, N, HD, scratch);
        for (int i = 0; i < N; i++)
            ck_assert_uint_eq((uint16_t)(got[2 * i] | got[2 * i + 1] << 8), quant_f32_to_f16(x[i]));
        kv_load(GUILD_TYPE_F16, got, y, N);
        for (int i = 0; i < N; i++)
            ck_assert(y[i] == quant_f16_to_f32(quant_f32_to_f16(x[i])));
        kv_store_row(GUILD_TYPE_F32, false, x, got, N, HD, scratch);
        ck_assert(!memcmp(got, x, sizeof x));
        /* rotated: each head through kv_hadamard, then the plain store; x left as it was */
        float xc[N], rot[N];
        memcpy(xc, x, sizeof x);
        memcpy(rot, x, sizeof x);
        for (int h = 0; h < N / HD; h++)
            kv_hadamard(rot + h * HD, HD);
        kv_store_row(GUILD_TYPE_Q4_0, true, x, got, N, HD, scratch);
        ref_q4_0(rot, want, N);
        ck_assert(!memcmp(got, want, N / 32 * 18));
        ck_assert(!memcmp(x, xc, sizeof x));
    }
}
END_TEST

/* The normalised Walsh-Hadamard transform against its matrix (-1)^popcount(i & j) / sqrt(n), and its own
 * inverse. */
START_TEST(test_hadamard)
{
    static const int sizes[] = {32, 64, 128, 256};
    float x[256], y[256];
    for (int k = 0; k < 4; k++) {
        const int n = sizes[k];
        fill_row(x, n, 99 + (uint64_t)k);
        memcpy(y, x, (size_t)n * sizeof *x);
        kv_hadamard(y, n);
        double norm = 0;
        for (int i = 0; i < n; i++)
            norm += (double)x[i] * x[i];
        for (int i = 0; i < n; i++) {
            double want = 0;
            for (int j = 0; j < n; j++)
                want += (__builtin_popcount((unsigned)(i & j)) & 1 ? -1.0 : 1.0) * x[j];
            want /= sqrt((double)n);
            ck_assert_msg(fabs(y[i] - want) <= 1e-6 * sqrt(norm), "n %d element %d: %g, want %g", n, i, (double)y[i],
                          want);
        }
        kv_hadamard(y, n);
        for (int i = 0; i < n; i++)
            ck_assert_msg(fabsf(y[i] - x[i]) <= 1e-6f * (float)sqrt(norm), "n %d: H H x != x at %d", n, i);
    }
}
END_TEST

/* Attention of a query head over each format equals the f32 attention over the dequantized rows, bit for bit
 * (k8v4: that attention's output rotated back); and stays near the attention over the original floats. */
START_TEST(test_attention_reads_the_format)
{
    enum { HD = 64, NKV = 2, KV = NKV * HD, NPOS = 37 };
    const int32_t fmt = KV_TYPE_F16 + _i; /* f16, q8_0, q4_0, k8v4 */
    const guild_type_t kt = kv_type_k(fmt), vt = kv_type_v(fmt);
    const bool rot = kv_type_rotates_v(fmt);
    float *k = malloc(NPOS * KV * sizeof *k), *v = malloc(NPOS * KV * sizeof *v);
    float *kd = malloc(NPOS * KV * sizeof *kd), *vd = malloc(NPOS * KV * sizeof *vd);
    const size_t krow = kv_elem_bytes(kt, KV), vrow = kv_elem_bytes(vt, KV);
    uint8_t *kc = malloc(NPOS * krow), *vc = malloc(NPOS * vrow);
    float q[HD], scratch[2 * HD], scores[NPOS], out[HD], want[HD], exact[HD];
    for (int p = 0; p < NPOS; p++) {
        fill_row(k + p * KV, KV, 1000 + (uint64_t)p);
        fill_row(v + p * KV, KV, 2000 + (uint64_t)p);
        kv_store_row(kt, false, k + p * KV, kc + p * krow, KV, HD, scratch);
        kv_store_row(vt, rot, v + p * KV, vc + p * vrow, KV, HD, scratch);
        kv_load(kt, kc + p * krow, kd + p * KV, KV);
        kv_load(vt, vc + p * vrow, vd + p * KV, KV);
    }
    fill_row(q, HD, 7);
    for (int d = 0; d < HD; d++)
        q[d] *= 30.0f; /* a peaked softmax */
    const float sink = 0.5f, scale = 0.125f;
    for (int hkv = 0; hkv < NKV; hkv++)
        for (int with_sink = 0; with_sink < 2; with_sink++) {
            const cpu_kv_head_t h = {kt, vt, kc + kv_elem_bytes(kt, hkv * HD), vc + kv_elem_bytes(vt, hkv * HD), krow,
                                     vrow, rot};
            const float *sk = with_sink ? &sink : NULL;
            cpu_attention_head_cache(out, q, &h, NPOS, HD, scale, sk, scores, scratch);
            cpu_attention_head(want, q, kd + hkv * HD, vd + hkv * HD, KV, NPOS, HD, scale, sk, scores);
            if (rot)
                kv_hadamard(want, HD);
            ck_assert_msg(!memcmp(out, want, sizeof out), "%s head %d: not the f32 attention of the dequantized rows",
                          kv_type_name(fmt), hkv);
            cpu_attention_head(exact, q, k + hkv * HD, v + hkv * HD, KV, NPOS, HD, scale, sk, scores);
            float vmax = 0.0f;
            for (int i = 0; i < NPOS * KV; i++)
                vmax = fmaxf(vmax, fabsf(v[i]));
            for (int d = 0; d < HD; d++)
                ck_assert_msg(fabsf(out[d] - exact[d]) <= 0.25f * vmax, "%s: dim %d %g vs %g", kv_type_name(fmt), d,
                              (double)out[d], (double)exact[d]);
        }
    free(k);
    free(v);
    free(kd);
    free(vd);
    free(kc);
    free(vc);
}
END_TEST

/* ---- whole models on the CPU backend ---- */

typedef struct rig {
    void *image;
    model_t *model;
    guild_pool_t *pool;
    moe_exec_t *moe;
    backend_t *be;
} rig_t;

static int rig_open(rig_t *r, const tiny_spec_t *s, int threads, int32_t kv_type, guild_err_t *err)
{
    size_t size;
    memset(r, 0, sizeof *r);
    tiny_model_image(s, &r->image, &size);
    ck_assert_msg(tiny_model_open(r->image, size, &r->model, err) == 0, "%s", err->msg);
    ck_assert_msg(guild_pool_new(&r->pool, threads, NULL, err) == 0, "%s", err->msg);
    ck_assert_msg(moe_local_new(&r->moe, r->model, r->pool, err) == 0, "%s", err->msg);
    const backend_options_t o = {.n_ctx = 64, .n_batch = 16, .pool = r->pool, .moe = r->moe, .kv_type = kv_type};
    return backend_new(&r->be, "cpu", r->model, &o, NULL, err);
}

static void rig_close(rig_t *r)
{
    backend_destroy(&r->be);
    moe_exec_destroy(&r->moe);
    guild_pool_destroy(&r->pool);
    model_destroy(&r->model);
    free(r->image);
}

enum { N_PROMPT = 12, N_GEN = 40, V = 96 };
static const int32_t prompt[N_PROMPT] = {5, 17, 42, 3, 88, 1, 60, 33, 95, 12, 7, 64};

/* The GQA architectures, heads of 32 (blocks never straddle heads): plain, q/k norms with biases, sliding window
 * and sinks, a hybrid whose gdn layers keep no K/V. */
static const char *archs[] = {"qwen3moe", "llama", "gpt-oss", "qwen3next"};
#define N_ARCHS ((int)(sizeof archs / sizeof archs[0]))

static tiny_spec_t spec_of(int a, guild_type_t wtype)
{
    tiny_spec_t s = tiny_spec(archs[a]);
    s.head_dim = 32;
    s.wtype = wtype;
    if (wtype != GUILD_TYPE_F32) /* rows of whole blocks */
        s.n_ff_shexp = s.n_ff = 64;
    s.seed = 40 + (uint64_t)a;
    return s;
}

/* The prompt in chunks of `chunk` (every row's logits), then the tokens teacher[0..N_GEN) one at a time: logits
 * into out[(N_PROMPT + N_GEN)][V]. */
static void run(rig_t *r, int chunk, const int32_t *teacher, float *out)
{
    guild_err_t err = {{0}};
    int32_t rows[N_PROMPT], pos[N_PROMPT];
    for (int s = 0; s < N_PROMPT; s += chunk) {
        const int n = N_PROMPT - s < chunk ? N_PROMPT - s : chunk;
        for (int i = 0; i < n; i++) {
            rows[i] = i;
            pos[i] = s + i;
        }
        ck_assert_msg(backend_forward(r->be, n, prompt + s, pos, n, rows, out + (size_t)s * V, &err) == 0, "%s",
                      err.msg);
    }
    for (int i = 0; i < N_GEN; i++) {
        const int32_t p = N_PROMPT + i, row = 0;
        ck_assert_msg(backend_forward(r->be, 1, &teacher[i], &p, 1, &row, out + (size_t)p * V, &err) == 0, "%s",
                      err.msg);
    }
}

static int32_t argmax(const float *l)
{
    int32_t best = 0;
    for (int32_t i = 1; i < V; i++)
        if (l[i] > l[best])
            best = i;
    return best;
}

/* The f32 cache's greedy continuation of the prompt (the teacher) and its logits. */
static void reference(int a, guild_type_t wtype, int32_t *teacher, float *out)
{
    tiny_spec_t s = spec_of(a, wtype);
    rig_t r;
    guild_err_t err = {{0}};
    ck_assert_msg(rig_open(&r, &s, 2, KV_TYPE_F32, &err) == 0, "%s", err.msg);
    int32_t rows[N_PROMPT], pos[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++)
        rows[i] = i, pos[i] = i;
    ck_assert_msg(backend_forward(r.be, N_PROMPT, prompt, pos, N_PROMPT, rows, out, &err) == 0, "%s", err.msg);
    for (int i = 0; i < N_GEN; i++) {
        const int32_t p = N_PROMPT + i, row = 0;
        teacher[i] = argmax(out + (size_t)(p - 1) * V);
        ck_assert_msg(backend_forward(r.be, 1, &teacher[i], &p, 1, &row, out + (size_t)p * V, &err) == 0, "%s",
                      err.msg);
    }
    rig_close(&r);
}

/* Tolerances against the f32 cache on these random 2-layer models (logits of magnitude ~1-5): the largest
 * |dlogit| / max(1, |logit|) over every row, and the teacher-forced steps whose argmax must agree. With Q8_0
 * weights every matrix input is quantized to Q8 too, and a cache rounding that moves an input across a Q8 level
 * moves the logits by more than the rounding itself: looser. Measured on 2026-12-01 (the test prints them): f16
 * 2.3e-4 (f32 weights) and 2.3e-2 (q8_0), q8_0 6.1e-3 and 6.1e-2, q4_0 and k8v4 up to 0.30; argmax 49 of 52 or
 * more. */
typedef struct tol {
    double max_rel;
    int min_agree; /* of N_PROMPT + N_GEN rows */
} tol_t;

static tol_t tolerance(int32_t fmt, guild_type_t wtype)
{
    const bool q8 = wtype != GUILD_TYPE_F32;
    switch (fmt) {
    case KV_TYPE_F16: return (tol_t){q8 ? 5e-2 : 1e-3, N_PROMPT + N_GEN - (q8 ? 2 : 1)};
    case KV_TYPE_Q8_0: return (tol_t){q8 ? 0.12 : 1.5e-2, N_PROMPT + N_GEN - 4};
    default: return (tol_t){0.45, (N_PROMPT + N_GEN) * 3 / 4}; /* q4_0, k8v4 */
    }
}

/* _i = arch * 4 * 2 + format * 2 + weights: formats f16, q8_0, q4_0, k8v4; F32 or Q8_0 weights. */
START_TEST(test_model_formats)
{
    const int a = _i / 8, f = (_i / 2) % 4;
    const guild_type_t wtype = _i % 2 ? GUILD_TYPE_Q8_0 : GUILD_TYPE_F32;
    const int32_t fmt = KV_TYPE_F16 + f;
    const size_t rows = N_PROMPT + N_GEN, bytes = rows * V * sizeof(float);
    int32_t teacher[N_GEN];
    float *ref = malloc(bytes), *one = malloc(bytes), *other = malloc(bytes);
    reference(a, wtype, teacher, ref);
    tiny_spec_t s = spec_of(a, wtype);
    guild_err_t err = {{0}};
    rig_t r;
    ck_assert_msg(rig_open(&r, &s, 1, fmt, &err) == 0, "%s", err.msg);
    run(&r, N_PROMPT, teacher, one);
    /* the same bits in chunks of 1, 5 and 4 positions, on 1, 2 and 3 threads, and after a truncation */
    static const int chunks[] = {1, 5, 4}, threads[] = {2, 1, 3};
    for (int c = 0; c < 3; c++) {
        rig_t o;
        ck_assert_msg(rig_open(&o, &s, threads[c], fmt, &err) == 0, "%s", err.msg);
        run(&o, chunks[c], teacher, other);
        ck_assert_msg(!memcmp(one, other, bytes), "%s %s: chunks of %d on %d threads differ from one batch",
                      archs[a], kv_type_name(fmt), chunks[c], threads[c]);
        rig_close(&o);
    }
    double worst = 0;
    int agree = 0;
    for (size_t t = 0; t < rows; t++) {
        for (int i = 0; i < V; i++) {
            const double lr = ref[t * V + (size_t)i], d = fabs(one[t * V + (size_t)i] - lr) / fmax(1.0, fabs(lr));
            worst = d > worst ? d : worst;
        }
        agree += argmax(one + t * V) == argmax(ref + t * V);
    }
    const tol_t tol = tolerance(fmt, wtype);
    printf("%-10s %-5s weights, %-4s KV (%4llu bytes a position): max rel |dlogit| vs f32 %.3g, argmax agrees "
           "%d/%d\n", archs[a], quant_type_info(wtype)->name, kv_type_name(fmt),
           (unsigned long long)kv_type_position_bytes(fmt, model_config(r.model)), worst, agree, (int)rows);
    ck_assert_msg(worst <= tol.max_rel, "%s %s: max rel |dlogit| %.3g over %.3g", archs[a], kv_type_name(fmt), worst,
                  tol.max_rel);
    ck_assert_msg(agree >= tol.min_agree, "%s %s: argmax agrees on %d of %d rows (at least %d)", archs[a],
                  kv_type_name(fmt), agree, (int)rows, tol.min_agree);
    rig_close(&r);
    free(ref);
    free(one);
    free(other);
}
END_TEST

/* Sequences (backend_options_t.n_seq): two sequences' rows interleaved in shared batches give each row the bits
 * of its sequence alone, in every format (each sequence's cache rows come from its own K/V). _i = arch * 4 +
 * format (f16, q8_0, q4_0, k8v4). */
START_TEST(test_sequences_per_format)
{
    const int a = _i / 4;
    const int32_t fmt = KV_TYPE_F16 + _i % 4;
    tiny_spec_t s = spec_of(a, GUILD_TYPE_F32);
    guild_err_t err = {{0}};
    enum { N = 10 };
    int32_t tok[2][N];
    for (int q = 0; q < 2; q++)
        for (int i = 0; i < N; i++)
            tok[q][i] = (int32_t)((i * 37 + q * 11 + 5) % V);
    float *alone = malloc(2 * N * V * sizeof *alone), *out = malloc(2 * N * V * sizeof *out);
    rig_t r;
    for (int q = 0; q < 2; q++) { /* alone: prefill 4, then one at a time */
        ck_assert_msg(rig_open(&r, &s, 1, fmt, &err) == 0, "%s", err.msg);
        for (int p0 = 0; p0 < N;) {
            const int n = p0 == 0 ? 4 : 1;
            int32_t pos[4], rows[4];
            for (int i = 0; i < n; i++)
                pos[i] = p0 + i, rows[i] = i;
            ck_assert_msg(backend_forward(r.be, n, tok[q] + p0, pos, n, rows, alone + ((size_t)q * N + (size_t)p0) * V,
                                          &err) == 0, "%s", err.msg);
            p0 += n;
        }
        rig_close(&r);
    }
    /* together: the two sequences' rows interleaved, sequence 1 two positions behind */
    size_t size;
    memset(&r, 0, sizeof r);
    tiny_model_image(&s, &r.image, &size);
    ck_assert_msg(tiny_model_open(r.image, size, &r.model, &err) == 0, "%s", err.msg);
    ck_assert_msg(guild_pool_new(&r.pool, 2, NULL, &err) == 0, "%s", err.msg);
    ck_assert_msg(moe_local_new(&r.moe, r.model, r.pool, &err) == 0, "%s", err.msg);
    const backend_options_t o = {.n_ctx = 64, .n_batch = 16, .pool = r.pool, .moe = r.moe, .kv_type = fmt, .n_seq = 2};
    ck_assert_msg(backend_new(&r.be, "cpu", r.model, &o, NULL, &err) == 0, "%s", err.msg);
    int done[2] = {0, 0};
    for (int step = 0; done[0] < N || done[1] < N; step++) {
        int32_t bt[8], bs[8], bp[8], rows[8];
        int n = 0;
        for (int k = 0; k < 3; k++)
            for (int q = 0; q < 2; q++)
                if ((q == 0 || step >= 1) && k < (step == 0 ? 3 : 1) && done[q] + k < N) {
                    bt[n] = tok[q][done[q] + k], bs[n] = q, bp[n] = done[q] + k;
                    n++;
                }
        for (int i = 0; i < n; i++)
            rows[i] = i;
        ck_assert_msg(backend_forward_seq(r.be, n, bt, bs, bp, n, rows, out, &err) == 0, "%s", err.msg);
        for (int i = 0; i < n; i++) {
            ck_assert_msg(!memcmp(out + (size_t)i * V, alone + ((size_t)bs[i] * N + (size_t)bp[i]) * V,
                                  V * sizeof *out),
                          "%s %s: sequence %d position %d differs from the sequence alone", archs[a],
                          kv_type_name(fmt), bs[i], bp[i]);
            done[bs[i]] = bp[i] + 1 > done[bs[i]] ? bp[i] + 1 : done[bs[i]];
        }
    }
    rig_close(&r);
    free(alone);
    free(out);
}
END_TEST

/* What a format costs per position, and the models and formats that do not go together. */
START_TEST(test_sizes_and_refusals)
{
    tiny_spec_t s = spec_of(0, GUILD_TYPE_F32); /* 2 layers, 2 KV heads of 32: rows of 64 keys and 64 values */
    rig_t r;
    guild_err_t err = {{0}};
    ck_assert_int_eq(rig_open(&r, &s, 1, KV_TYPE_DEFAULT, &err), 0);
    const model_config_t *c = model_config(r.model);
    ck_assert_uint_eq(kv_type_position_bytes(KV_TYPE_F32, c), 2 * (64 + 64) * 4);
    ck_assert_uint_eq(kv_type_position_bytes(KV_TYPE_F16, c), 2 * (64 + 64) * 2);
    ck_assert_uint_eq(kv_type_position_bytes(KV_TYPE_DEFAULT, c), 2 * (64 + 64) * 2);
    ck_assert_uint_eq(kv_type_position_bytes(KV_TYPE_Q8_0, c), 2 * (2 * 34 + 2 * 34));
    ck_assert_uint_eq(kv_type_position_bytes(KV_TYPE_Q4_0, c), 2 * (2 * 18 + 2 * 18));
    ck_assert_uint_eq(kv_type_position_bytes(KV_TYPE_K8V4, c), 2 * (2 * 34 + 2 * 18));
    rig_close(&r);

    int32_t t = -1;
    ck_assert_int_eq(kv_type_parse("k8v4", &t, &err), 0);
    ck_assert_int_eq(t, KV_TYPE_K8V4);
    ck_assert_int_eq(kv_type_parse("q4_0", &t, &err), 0);
    ck_assert_int_eq(t, KV_TYPE_Q4_0);
    ck_assert_int_eq(kv_type_parse("q5_0", &t, &err), -1);
    ck_assert_msg(strstr(err.msg, "--kv-type q5_0: expected f32, f16, q8_0, q4_0 or k8v4"), "%s", err.msg);
    ck_assert_int_eq(kv_type_parse("default", &t, &err), -1);
    for (int32_t f = 0; f <= KV_TYPE_LAST; f++) {
        const char *name = kv_type_name(f);
        ck_assert(f == KV_TYPE_DEFAULT || (kv_type_parse(name, &t, &err) == 0 && t == f));
    }

    /* heads of 16: no block format */
    s = tiny_spec("qwen3moe");
    ck_assert_int_eq(rig_open(&r, &s, 1, KV_TYPE_Q8_0, &err), -1);
    ck_assert_msg(strstr(err.msg, "cpu backend: --kv-type q8_0: head dimension 16 is not a multiple of 32"), "%s",
                  err.msg);
    rig_close(&r);
    ck_assert_int_eq(rig_open(&r, &s, 1, KV_TYPE_F16, &err), 0);
    rig_close(&r);
    /* heads of 96: blocks, but no Walsh-Hadamard rotation */
    s.head_dim = 96;
    ck_assert_int_eq(rig_open(&r, &s, 1, KV_TYPE_Q4_0, &err), 0);
    rig_close(&r);
    ck_assert_int_eq(rig_open(&r, &s, 1, KV_TYPE_K8V4, &err), -1);
    ck_assert_msg(strstr(err.msg, "head dimension 96 is not a power of two"), "%s", err.msg);
    rig_close(&r);
    /* latent attention keeps f32 on the cpu backend */
    s = tiny_spec("deepseek2");
    ck_assert_int_eq(rig_open(&r, &s, 1, KV_TYPE_Q8_0, &err), -1);
    ck_assert_msg(strstr(err.msg, "multi-head latent attention (layer 0) keeps its latent cache in f32 only"), "%s",
                  err.msg);
    rig_close(&r);
    ck_assert_int_eq(rig_open(&r, &s, 1, KV_TYPE_F32, &err), 0);
    rig_close(&r);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("kv_format");
    TCase *tc = tcase_create("rows");
    tcase_add_test(tc, test_store_matches_reference);
    tcase_add_test(tc, test_hadamard);
    tcase_add_loop_test(tc, test_attention_reads_the_format, 0, 4);
    suite_add_tcase(s, tc);
    tc = tcase_create("models");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_model_formats, 0, N_ARCHS * 8);
    tcase_add_loop_test(tc, test_sequences_per_format, 0, N_ARCHS * 4);
    tcase_add_test(tc, test_sizes_and_refusals);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(suite());
}
