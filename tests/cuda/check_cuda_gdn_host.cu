/* The gated delta net's chunkwise parallel form (gpu-worker/dense/cuda/gdn_chunk.cuh), its block bodies run on the
 * host with one thread (no GPU needed, so it runs in CI), against the sequential form (the CPU backend's delta rule,
 * gpu-worker/dense/cpu/attn_gdn.c, in float): random L2-normalised keys and queries, betas in (0, 1), decays from
 * e^-3 to 1, batches of 1 to 200 rows (a part chunk, several chunks), heads of 16 and 128, the key heads tiled or
 * grouped, and a batch in two parts carrying the state. Tolerance: max |chunked - sequential| <= 2e-5 max(1,
 * max |sequential|) on the outputs and the state (float rounding of sums over other orders). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu-worker/dense/cuda/gdn_chunk.cuh"
#include "tests/check_run.h"

#define _Noreturn [[noreturn]]
extern "C" {
#include "core/sample/rng.h"
}
#undef _Noreturn

#define TOL 2e-5

typedef struct shape {
    int32_t DK, NK, NV;
    bool tiled;
} shape_t;

/* qkv rows [n][CH] as prep leaves them (q heads, k heads, v heads; q and k L2-normalised, q over sqrt(DK)), beta
 * and the decay's log per (row, value head) */
typedef struct batch {
    int32_t n;
    int64_t CH, IN;
    float *qkv, *beta, *g;
} batch_t;

static void normalise(float *x, int32_t n, float scale)
{
    double s = 0;
    for (int32_t i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    const float f = scale / (float)sqrt(s);
    for (int32_t i = 0; i < n; i++)
        x[i] *= f;
}

static batch_t batch_new(const shape_t *sh, int32_t n, rng_t *r)
{
    batch_t b;
    b.n = n;
    b.CH = 2 * (int64_t)sh->NK * sh->DK + (int64_t)sh->NV * sh->DK;
    b.IN = (int64_t)sh->NV * sh->DK;
    b.qkv = (float *)malloc((size_t)(n * b.CH) * sizeof(float));
    b.beta = (float *)malloc((size_t)n * (size_t)sh->NV * sizeof(float));
    b.g = (float *)malloc((size_t)n * (size_t)sh->NV * sizeof(float));
    for (int64_t i = 0; i < n * b.CH; i++)
        b.qkv[i] = (float)(2 * rng_uniform(r) - 1);
    for (int32_t t = 0; t < n; t++)
        for (int32_t h = 0; h < 2 * sh->NK; h++)
            normalise(b.qkv + t * b.CH + (int64_t)h * sh->DK, sh->DK, h < sh->NK ? 1.0f / sqrtf((float)sh->DK) : 1);
    for (int64_t i = 0; i < (int64_t)n * sh->NV; i++) {
        b.beta[i] = (float)rng_uniform(r);
        b.g[i] = (float)(-3 * rng_uniform(r) * rng_uniform(r)); /* mostly slow decays, some fast */
    }
    return b;
}

static void batch_free(batch_t *b)
{
    free(b->qkv);
    free(b->beta);
    free(b->g);
}

/* the CPU backend's delta_task without the output norm: rows t0 .. t0+n-1 */
static void sequential(const shape_t *sh, const batch_t *b, int32_t t0, int32_t n, float *state, float *o)
{
    const int32_t DK = sh->DK, NK = sh->NK, NV = sh->NV;
    for (int32_t h = 0; h < NV; h++) {
        const int32_t kh = gdn_key_head(h, NK, NV, sh->tiled);
        float *S = state + (int64_t)h * DK * DK;
        for (int32_t t = t0; t < t0 + n; t++) {
            const float *row = b->qkv + t * b->CH;
            const float *q = row + kh * DK, *k = row + NK * DK + kh * DK, *v = row + 2 * NK * DK + h * DK;
            const float decay = expf(b->g[t * NV + h]), beta = b->beta[t * NV + h];
            for (int32_t r = 0; r < DK; r++) {
                float *s = S + r * DK, sk = 0, sq = 0;
                for (int32_t i = 0; i < DK; i++) {
                    s[i] *= decay;
                    sk += s[i] * k[i];
                }
                const float d = (v[r] - sk) * beta;
                for (int32_t i = 0; i < DK; i++) {
                    s[i] += k[i] * d;
                    sq += s[i] * q[i];
                }
                o[t * b->IN + h * DK + r] = sq;
            }
        }
    }
}

/* the chunked form's two passes over rows t0 .. t0+n-1, every block run by one host thread */
static void chunked(const shape_t *sh, const batch_t *b, int32_t t0, int32_t n, float *state, float *o)
{
    const int32_t DK = sh->DK, NV = sh->NV;
    float *scratch = (float *)malloc((size_t)NV * (size_t)gdn_chunk_rows(n) * (2 * (size_t)DK + GDN_CHUNK + 1) *
                                     sizeof(float));
    const size_t shf = (size_t)(gdn_chunk_wy_shared(DK) > gdn_chunk_state_shared(DK) ? gdn_chunk_wy_shared(DK)
                                                                                      : gdn_chunk_state_shared(DK));
    float *shm = (float *)malloc(shf * sizeof(float)), Gs[GDN_CHUNK], aux[GDN_CHUNK];
    const gdn_chunk_scratch_t sc = gdn_chunk_scratch_at(scratch, n, DK, NV);
    const float *qkv = b->qkv + t0 * b->CH;
    const int32_t nc = (int32_t)(gdn_chunk_rows(n) / GDN_CHUNK);
    for (int32_t h = 0; h < NV; h++)
        for (int32_t c = 0; c < nc; c++)
            gdn_chunk_wy(qkv, b->CH, b->beta + t0 * NV, b->g + t0 * NV, n, DK, sh->NK, NV, sh->tiled, sc, h, c, 0, 1,
                         shm, Gs, aux);
    for (int32_t h = 0; h < NV; h++)
        for (int32_t y = 0; y < DK / gdn_state_rows(DK); y++)
            gdn_chunk_state(qkv, b->CH, state, sc, o + t0 * b->IN, b->IN, n, DK, sh->NK, NV, sh->tiled, h, y, 0, 1,
                            shm, Gs, aux);
    free(shm);
    free(scratch);
}

static double max_abs(const float *x, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)x[i]));
    return m;
}

static double max_diff(const float *a, const float *b, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

static const shape_t shapes[] = {{16, 2, 4, false}, {16, 2, 4, true}, {128, 1, 2, false}, {32, 2, 2, true}};
static const int32_t lengths[] = {1, 5, 63, 64, 65, 200};

/* _i: a shape and a batch length; the state starts random (a batch after others) */
START_TEST(test_chunked_equals_sequential)
{
    const shape_t sh = shapes[_i / 6];
    const int32_t n = lengths[_i % 6];
    if (sh.DK == 128 && n > 65)
        return; /* one thread on the host: keep the suite fast */
    rng_t r;
    rng_seed(&r, 1000 + (uint64_t)_i);
    batch_t b = batch_new(&sh, n, &r);
    const int64_t SN = (int64_t)sh.NV * sh.DK * sh.DK, ON = (int64_t)n * b.IN;
    float *s1 = (float *)malloc((size_t)SN * sizeof(float)), *s2 = (float *)malloc((size_t)SN * sizeof(float));
    float *o1 = (float *)calloc((size_t)ON, sizeof(float)), *o2 = (float *)calloc((size_t)ON, sizeof(float));
    for (int64_t i = 0; i < SN; i++)
        s1[i] = s2[i] = (float)(0.5 * (2 * rng_uniform(&r) - 1));
    sequential(&sh, &b, 0, n, s1, o1);
    chunked(&sh, &b, 0, n, s2, o2);
    const double eo = max_diff(o1, o2, ON) / fmax(1.0, max_abs(o1, ON));
    const double es = max_diff(s1, s2, SN) / fmax(1.0, max_abs(s1, SN));
    printf("gdn chunked vs sequential: heads of %3d (%d/%d%s), %3d rows: outputs %.2e, state %.2e\n", sh.DK, sh.NK,
           sh.NV, sh.tiled ? " tiled" : "", n, eo, es);
    ck_assert_msg(eo <= TOL && es <= TOL, "DK %d, %d rows: outputs %.3g, state %.3g (tolerance %.1g)", sh.DK, n, eo,
                  es, TOL);
    free(s1);
    free(s2);
    free(o1);
    free(o2);
    batch_free(&b);
}
END_TEST

/* 200 rows in one batch vs in batches of 70, 1, 129 (the state carried between them): the same within rounding */
START_TEST(test_one_batch_vs_parts)
{
    const shape_t sh = {16, 2, 4, false};
    rng_t r;
    rng_seed(&r, 77);
    batch_t b = batch_new(&sh, 200, &r);
    const int64_t SN = (int64_t)sh.NV * sh.DK * sh.DK, ON = 200 * b.IN;
    float *s1 = (float *)calloc((size_t)SN, sizeof(float)), *s2 = (float *)calloc((size_t)SN, sizeof(float));
    float *o1 = (float *)calloc((size_t)ON, sizeof(float)), *o2 = (float *)calloc((size_t)ON, sizeof(float));
    chunked(&sh, &b, 0, 200, s1, o1);
    chunked(&sh, &b, 0, 70, s2, o2);
    chunked(&sh, &b, 70, 1, s2, o2);
    chunked(&sh, &b, 71, 129, s2, o2);
    const double eo = max_diff(o1, o2, ON) / fmax(1.0, max_abs(o1, ON));
    const double es = max_diff(s1, s2, SN) / fmax(1.0, max_abs(s1, SN));
    printf("gdn chunked, one batch vs 70+1+129: outputs %.2e, state %.2e\n", eo, es);
    ck_assert_msg(eo <= TOL && es <= TOL, "outputs %.3g, state %.3g", eo, es);
    free(s1);
    free(s2);
    free(o1);
    free(o2);
    batch_free(&b);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cuda_gdn_host");
    TCase *tc = tcase_create("chunked");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_chunked_equals_sequential, 0, 24);
    tcase_add_test(tc, test_one_batch_vs_parts);
    suite_add_tcase(s, tc);
    return check_run(s);
}
