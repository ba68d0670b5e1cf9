/* bench/harness/experts-vm-2026-11-29-kern5-harness.c — provenance of experts-vm-2026-11-29-kern5.md: the throw-away
 * in-cache A/B harness of the one-token q4_K / iq4_xs kernels (not built by make). Several files, concatenated;
 * split them at the '==== file' lines into one directory to rebuild:
 *   old/core/kern/...: the kernel files of the commit before (git show 2122040:core/kern/x86/<f> for avx512.c,
 *   avx512_vnni.c, avx512_kquants.h, avx512_iq4xs.h, avx512_iq.h, avx512_b32.h, avx512_float.h, avx512_util.h;
 *   git show 2122040:core/kern/table.h), compiled into old.o under the same static names, exported as old_q4/old_iq/old_q5;
 *   kb.c includes this tree's core/kern/x86/avx512_vnni.c (the 'new' kernels) and the variants.
 * Run: ./kb TYPE(q4_K|iq4_xs|q5_K) WS_MB REPS ROWS_PER_CALL SHAPE(mix|gate|down|small) [NTOK]; variants interleaved
 * (rotating order per repetition), medians [min-max] in GB/s of weights; 'dp' = 8 independent vpdpbusd chains
 * per 128 bytes (a compute-only calibration: 61-62 GB/s = 2 vpdpbusd per cycle at 2.94 GHz).
 * freq2.c: the port/throughput probe quoted in the results (16 independent chains per instruction). */

/* ==== file: build.sh ==== */
gcc -g -O2 -std=gnu11 -ffp-contract=off -Wall -Wextra -Wno-unused-function -I/tmp/kb/old -I/work/main -c -o old.o old.c && \
gcc -g -O2 -std=gnu11 -ffp-contract=off -Wall -Wextra -Wno-unused-function -I/work/main -I/work/main/build-kern5 -o kb kb.c old.o /work/main/build-kern5/core/libguild-core.a -lm -lpthread 2>&1 | grep -v "^$" | head -30

/* ==== file: old.c ==== */
#include <stddef.h>
#include <stdint.h>
#define kern_fill_avx512_vnni kb_fill_old
#include "core/kern/x86/avx512_vnni.c"
void old_q4(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride, const void *act, size_t act_stride, float *out, size_t ldo)
{ matmul_q4_K_avx512vnni(n, nrows, ntok, w, w_stride, act, act_stride, out, ldo); }
void old_iq(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride, const void *act, size_t act_stride, float *out, size_t ldo)
{ matmul_iq4_xs_avx512vnni(n, nrows, ntok, w, w_stride, act, act_stride, out, ldo); }
void old_q5(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride, const void *act, size_t act_stride, float *out, size_t ldo)
{ matmul_q5_K_avx512vnni(n, nrows, ntok, w, w_stride, act, act_stride, out, ldo); }

/* ==== file: kb.c ==== */
/* in-cache A/B microbenchmark of the one-token q4_K / iq4_xs VNNI kernels (variants interleaved, medians) */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "core/quant/quant.h"
#define kern_fill_avx512_vnni kb_fill_cur
#include "core/kern/x86/avx512_vnni.c"
#undef kern_fill_avx512_vnni

typedef void (*mm_fn)(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride, const void *act,
                      size_t act_stride, float *out, size_t ldo);

typedef struct { const char *name; mm_fn fn; } var_t;
#include "variants.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}
static uint64_t rng = 88172645463325252ull;
static uint64_t xr(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; }
static int cmpd(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }

int main(int argc, char **argv)
{
    const char *tn = argc > 1 ? argv[1] : "q4_K";
    double mb = argc > 2 ? atof(argv[2]) : 1.0;   /* working set MB */
    int reps = argc > 3 ? atoi(argv[3]) : 9;
    int rows_per_call = argc > 4 ? atoi(argv[4]) : 768;
    guild_type_t type = strcmp(tn, "iq4_xs") == 0 ? GUILD_TYPE_IQ4_XS : strcmp(tn, "q5_K") == 0 ? GUILD_TYPE_Q5_K : GUILD_TYPE_Q4_K;
    const var_t *vars = type == GUILD_TYPE_Q4_K ? q4_vars : type == GUILD_TYPE_Q5_K ? q5_vars : iq_vars;
    int nv = 0;
    while (vars[nv].name) nv++;
    const size_t bsz = type == GUILD_TYPE_Q4_K ? 144 : type == GUILD_TYPE_Q5_K ? 176 : 136;
    /* expert shape mix: gate/up 768 x 2048 (nb 8) and down 2048 x 768 (nb 3) */
    const int64_t ncol[2] = {2048, 768};
    size_t rowb[2] = {bsz * 8, bsz * 3};
    const char *shape = argc > 5 ? argv[5] : "mix";
    int kfirst = 0, klast = 3; /* matrices 0, 1: gate/up shape; 2: down */
    if (!strcmp(shape, "gate")) klast = 1;
    if (!strcmp(shape, "down")) kfirst = 2;
    int64_t gate_rows = 768, down_rows = 2048;
    if (!strcmp(shape, "small")) { gate_rows = 192; down_rows = 512; }
    size_t expert_bytes = 0;
    for (int k = kfirst; k < klast; k++) expert_bytes += k == 2 ? down_rows * rowb[1] : gate_rows * rowb[0];
    int nexp = (int)(mb * 1e6 / expert_bytes); if (nexp < 1) nexp = 1;
    size_t total = nexp * expert_bytes;
    uint8_t *w = aligned_alloc(64, total + 4096);
    for (size_t i = 0; i < total; i++) w[i] = (uint8_t)xr();
    for (size_t i = 0; i < total; i += bsz) { uint16_t d = 0x2000 + (xr() & 0xfff), dm = 0x1800 + (xr() & 0xfff); memcpy(w + i, &d, 2); if (type != GUILD_TYPE_IQ4_XS) memcpy(w + i + 2, &dm, 2); }
    float x[2048];
    uint8_t act[2][2048 / 256 * 292 + 64];
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 2048; i++) x[i] = (float)((int64_t)(xr() % 20001) - 10000) / 3000.0f;
        guild_err_t err;
        if (quant_quantize_row_ref(GUILD_TYPE_Q8_K, x, act[k], ncol[k], &err)) { fprintf(stderr, "quant\n"); return 1; }
    }
    int ntok = argc > 6 ? atoi(argv[6]) : 1;
    float *out0 = malloc(2048 * sizeof(float)), *out1 = malloc(2048 * 8 * sizeof(float));
    /* correctness: each variant vs the reference on the first expert, all rows per call and odd splits */
    int bad = 0;
    for (int v = 1; v < nv; v++) {
        const uint8_t *m = w;
        for (int k = 0; k < 3; k++) {
            int s = k == 2; int64_t nr = s ? 2048 : 768;
            for (int64_t r = 0; r < nr; r++) out0[r] = quant_vec_dot_ref(type, ncol[s], m + r * rowb[s], act[s]);
            memset(out1, 0xff, nr * 4);
            int64_t r0 = 0; int step[4] = {16, 37, 5, 300}; int si = 0;
            while (r0 < nr) { int64_t c = step[si++ % 4]; if (c > nr - r0) c = nr - r0; vars[v].fn(ncol[s], c, 1, m + r0 * rowb[s], rowb[s], act[s], 0, out1 + r0, 1); r0 += c; }
            if (memcmp(out0, out1, nr * 4)) { fprintf(stderr, "MISMATCH %s matrix %d\n", vars[v].name, k); bad = 1; }
            m += nr * rowb[s];
        }
    }
    if (bad) return 2;
    double *gbs = calloc((size_t)nv * reps, sizeof(double));
    const int inner = (int)(6e8 / total) + 1; /* ~0.3 GB per variant per rep */
    for (int rp = 0; rp < reps; rp++) {
        for (int vv = 0; vv < nv; vv++) {
            int v = (vv + rp) % nv;
            double t = now();
            for (int it = 0; it < inner; it++) {
                const uint8_t *m = w;
                for (int e = 0; e < nexp; e++)
                    for (int k = kfirst; k < klast; k++) {
                        int s = k == 2; int64_t nr = s ? down_rows : gate_rows;
                        for (int64_t r0 = 0; r0 < nr; r0 += rows_per_call) {
                            int64_t c = nr - r0 < rows_per_call ? nr - r0 : rows_per_call;
                            vars[v].fn(ncol[s], c, ntok, m + r0 * rowb[s], rowb[s], act[s], 0, out1 + r0, 2048);
                        }
                        m += nr * rowb[s];
                    }
            }
            gbs[v * reps + rp] = (double)total * inner * ntok / (now() - t) / 1e9;
        }
    }
    printf("%s %s ws=%.2fMB experts=%d rows/call=%d reps=%d:", tn, shape, total / 1e6, nexp, rows_per_call, reps);
    for (int v = 0; v < nv; v++) {
        qsort(gbs + v * reps, reps, sizeof(double), cmpd);
        printf("  %s %.2f [%.2f-%.2f]", vars[v].name, gbs[v * reps + reps / 2], gbs[v * reps], gbs[v * reps + reps - 1]);
    }
    printf("\n");
    return 0;
}

/* ==== file: variants.h ==== */
void old_q4(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride, const void *act, size_t act_stride, float *out, size_t ldo);
void old_iq(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride, const void *act, size_t act_stride, float *out, size_t ldo);
void old_q5(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride, const void *act, size_t act_stride, float *out, size_t ldo);
static void dp_calib(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride, const void *act,
                     size_t act_stride, float *out, size_t ldo)
{
    (void)n; (void)ntok; (void)act; (void)act_stride; (void)ldo;
    int64_t cnt = nrows * (int64_t)w_stride / 16 / 8;
    __m512i a0 = _mm512_set1_epi32(1), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    const __m512i u = _mm512_loadu_si512(w), v = _mm512_set1_epi8(3);
    for (int64_t i = 0; i < cnt; i++) {
        __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3));
        a0 = _mm512_dpbusd_epi32(a0, u, v); a1 = _mm512_dpbusd_epi32(a1, u, v);
        a2 = _mm512_dpbusd_epi32(a2, u, v); a3 = _mm512_dpbusd_epi32(a3, u, v);
        a4 = _mm512_dpbusd_epi32(a4, u, v); a5 = _mm512_dpbusd_epi32(a5, u, v);
        a6 = _mm512_dpbusd_epi32(a6, u, v); a7 = _mm512_dpbusd_epi32(a7, u, v);
    }
    out[0] = (float)k512_hsum_epi32(_mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
                                                     _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7))));
}
static void q4_k1(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride, const void *act,
                  size_t act_stride, float *out, size_t ldo)
{
    if (ntok == 1)
        matmul_k4_avx512vnni(0, n, nrows, 1, w, w_stride, act, act_stride, out, ldo);
    else
        matmul_k4_avx512vnni(0, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);
}
#define Q4_FN q4_p1
#define Q4_PAIR 1
#include "v_q4.h"
#undef Q4_FN
#undef Q4_PAIR
#define Q4_FN q4_p2
#define Q4_PAIR 2
#include "v_q4.h"
#undef Q4_FN
#undef Q4_FN
#undef Q4_PAIR
#define Q4_FN q4_p4
#define Q4_PAIR 4
#include "v_q4.h"
#define IQ_FN iq_p1
#define IQ_PAIR 1
#include "v_iq.h"
#undef IQ_FN
#undef IQ_PAIR
#define IQ_FN iq_p2
#define IQ_PAIR 2
#include "v_iq.h"
#undef IQ_FN
#undef IQ_PAIR
#define IQ_FN iq_p4
#define IQ_PAIR 4
#include "v_iq.h"
#define IQB_FN iq_b
#define IQB_PAIR 1
#include "v_iq_b.h"
#undef IQB_FN
#undef IQB_PAIR
#define IQB_FN iq_b2
#define IQB_PAIR 2
#include "v_iq_b.h"
static const var_t q4_vars[] = {{"dp", dp_calib}, {"old", old_q4}, {"new", matmul_q4_K_avx512vnni}, {"p2", q4_p2}, {0, 0}};
static const var_t iq_vars[] = {{"dp", dp_calib}, {"old", old_iq}, {"new", matmul_iq4_xs_avx512vnni}, {"b", iq_b}, {"b2", iq_b2}, {0, 0}};
static const var_t q5_vars[] = {{"dp", dp_calib}, {"old", old_q5}, {"new", matmul_q5_K_avx512vnni}, {0, 0}};

/* ==== file: v_q4.h ==== */
/* one-token Q4_K: rows in pairs, no token loop; the same integer and float operations as matmul_k4 */
#define Q4_CAT2(a, b) a##b
#define Q4_CAT(a, b) Q4_CAT2(a, b)
#undef Q4_BLK
#define Q4_BLK Q4_CAT(Q4_FN, _blk)
#ifndef Q4_PAIR
#define Q4_PAIR 2
#endif
static inline __attribute__((always_inline)) void Q4_BLK(const char *blk, const kq_prep_t_avx512vnni *a,
    uint16_t *wdp, uint16_t *wmp, uint64_t *minp, __m256i *dst, __m512i shuf0, __m512i shuf1, __m512i m4)
{
    const quant_block_q4_K *x = (const quant_block_q4_K *)blk;
    const __m512i zero = _mm512_setzero_si512();
    memcpy(wdp, blk, 2);
    memcpy(wmp, blk + 2, 2);
    uint64_t sc;
    k4_scales_mins(x->scales, &sc, minp);
    const __m512i scb = _mm512_set1_epi64((long long)sc);
    const __m512i sc0 = _mm512_shuffle_epi8(scb, shuf0), sc1 = _mm512_shuffle_epi8(scb, shuf1);
    const __m512i q0 = _mm512_loadu_si512(x->qs), q1 = _mm512_loadu_si512(x->qs + 64);
    const __m512i v0 = _mm512_and_si512(q0, m4), v1 = _mm512_and_si512(_mm512_srli_epi16(q0, 4), m4);
    const __m512i v2 = _mm512_and_si512(q1, m4), v3 = _mm512_and_si512(_mm512_srli_epi16(q1, 4), m4);
    const __m512i p0 = _mm512_dpbusd_epi32(zero, v0, a->q[0]), p1 = _mm512_dpbusd_epi32(zero, v1, a->q[1]);
    const __m512i p2 = _mm512_dpbusd_epi32(zero, v2, a->q[2]), p3 = _mm512_dpbusd_epi32(zero, v3, a->q[3]);
#ifdef Q4_SPLITACC
    const __m512i acc = _mm512_add_epi32(_mm512_dpwssd_epi32(zero, _mm512_packs_epi32(p0, p1), sc0),
                                         _mm512_dpwssd_epi32(zero, _mm512_packs_epi32(p2, p3), sc1));
#else
    const __m512i acc = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(zero, _mm512_packs_epi32(p0, p1), sc0),
                                            _mm512_packs_epi32(p2, p3), sc1);
#endif
    _mm256_storeu_si256(dst, k512_fold8_epi32(acc));
}

static void Q4_FN(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride, const void *act,
                  size_t act_stride, float *out, size_t ldo)
{
    if (ntok != 1) {
        matmul_q4_K_avx512vnni(n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);
        return;
    }
    const int64_t nb = n / QUANT_QK_K, np = (nb + 1) / 2;
    const __m512i m4 = _mm512_set1_epi8(0x0f), zero = _mm512_setzero_si512();
    const __m512i shuf0 = K4_SCALE_SHUF(0, 1, 2, 3), shuf1 = K4_SCALE_SHUF(4, 5, 6, 7);
    const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    kq_prep_t_avx512vnni prep[nb];
    uint64_t split[nb][2];
    __m512i st[np * KQ_ROWS];
    uint16_t wd[nb * KQ_ROWS], wm[nb * KQ_ROWS];
    uint64_t mins[nb * KQ_ROWS];
    memset(wd, 0, sizeof wd);
    memset(wm, 0, sizeof wm);
    memset(mins, 0, sizeof mins);
    const char *pf_end = (const char *)w + (size_t)nrows * w_stride;
    kq_pf_t pf = kq_pf_start(w, pf_end);
    const quant_block_q8_K *at = (const quant_block_q8_K *)act;
    prep_k4_avx512vnni(at, nb, prep);
    for (int64_t b = 0; b < nb; b++) {
        uint8_t lo[8], hi[8];
        for (int s = 0; s < 8; s++) {
            const int v = at[b].bsums[2 * s] + at[b].bsums[2 * s + 1];
            const int h = (v - (v & 127)) / 128;
            lo[s] = (uint8_t)(v & 127);
            hi[s] = (uint8_t)(int8_t)h;
        }
        memcpy(&split[b][0], lo, 8);
        memcpy(&split[b][1], hi, 8);
    }
    for (int64_t r0 = 0; r0 < nrows; r0 += KQ_ROWS) {
        const int nr = (int)(nrows - r0 < KQ_ROWS ? nrows - r0 : KQ_ROWS);
        if (nr < KQ_ROWS)
            kq_clear_tail_avx512vnni(st, np, nr);
        int i = 0;
#if Q4_PAIR == 4
        for (; i + 3 < nr; i += 4) {
            const char *row0 = (const char *)w + (size_t)(r0 + i) * w_stride;
            for (int64_t b = 0; b < nb; b++) {
                const char *blk0 = row0 + (size_t)b * sizeof(quant_block_q4_K);
                kq_pf_advance(&pf, blk0 + 3 * w_stride);
                __m256i *half = (__m256i *)&st[(b / 2) * KQ_ROWS + i] + (b & 1);
                for (int k = 0; k < 4; k++)
                    Q4_BLK(blk0 + k * w_stride, &prep[b], &wd[b * KQ_ROWS + i + k], &wm[b * KQ_ROWS + i + k], &mins[b * KQ_ROWS + i + k], half + 2 * k, shuf0, shuf1, m4);
            }
        }
#endif
#if Q4_PAIR >= 2
        for (; i + 1 < nr; i += 2) {
            const char *row0 = (const char *)w + (size_t)(r0 + i) * w_stride, *row1 = row0 + w_stride;
            for (int64_t b = 0; b < nb; b++) {
                const char *blk0 = row0 + (size_t)b * sizeof(quant_block_q4_K), *blk1 = row1 + (size_t)b * sizeof(quant_block_q4_K);
                kq_pf_advance(&pf, blk1);
                __m256i *half = (__m256i *)&st[(b / 2) * KQ_ROWS + i] + (b & 1);
                Q4_BLK(blk0, &prep[b], &wd[b * KQ_ROWS + i], &wm[b * KQ_ROWS + i], &mins[b * KQ_ROWS + i], half, shuf0, shuf1, m4);
                Q4_BLK(blk1, &prep[b], &wd[b * KQ_ROWS + i + 1], &wm[b * KQ_ROWS + i + 1], &mins[b * KQ_ROWS + i + 1], half + 2, shuf0, shuf1, m4);
            }
        }
#endif
        for (; i < nr; i++) {
            const char *row = (const char *)w + (size_t)(r0 + i) * w_stride;
            for (int64_t b = 0; b < nb; b++) {
                const char *blk = row + (size_t)b * sizeof(quant_block_q4_K);
                kq_pf_advance(&pf, blk);
                __m256i *half = (__m256i *)&st[(b / 2) * KQ_ROWS + i] + (b & 1);
                Q4_BLK(blk, &prep[b], &wd[b * KQ_ROWS + i], &wm[b * KQ_ROWS + i], &mins[b * KQ_ROWS + i], half, shuf0, shuf1, m4);
            }
        }
        const __mmask16 keep = (__mmask16)((1u << nr) - 1);
        __m512 sumf = _mm512_setzero_ps();
        for (int64_t p = 0; p < np; p++) {
            __m512i is[2];
            k512_tree16(&st[p * KQ_ROWS], &is[0], &is[1]);
            for (int h = 0; h < 2 && 2 * p + h < nb; h++) {
                const int64_t b = 2 * p + h;
                const __m512i lo = _mm512_set1_epi64((long long)split[b][0]);
                const __m512i hi = _mm512_set1_epi64((long long)split[b][1]);
                const __m512i mA = _mm512_loadu_si512(&mins[b * KQ_ROWS]);
                const __m512i mB = _mm512_loadu_si512(&mins[b * KQ_ROWS + 8]);
                const __m512i xA = _mm512_add_epi32(_mm512_dpbusd_epi32(zero, mA, lo), _mm512_slli_epi32(_mm512_dpbusd_epi32(zero, mA, hi), 7));
                const __m512i xB = _mm512_add_epi32(_mm512_dpbusd_epi32(zero, mB, lo), _mm512_slli_epi32(_mm512_dpbusd_epi32(zero, mB, hi), 7));
                const __m512i imin = _mm512_add_epi32(_mm512_permutex2var_epi32(xA, even, xB), _mm512_permutex2var_epi32(xA, odd, xB));
                const __m512 ad = _mm512_set1_ps(at[b].d);
                const __m512 d = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)&wd[b * KQ_ROWS])), ad);
                const __m512 dmin = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)&wm[b * KQ_ROWS])), ad);
                const __m512 t1 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(is[h]));
                const __m512 t2 = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(imin));
                sumf = _mm512_add_ps(sumf, _mm512_sub_ps(t1, t2));
            }
        }
        _mm512_mask_storeu_ps(out + (size_t)r0, keep, sumf);
    }
    (void)act_stride; (void)ldo;
}

/* ==== file: v_iq.h ==== */
/* one-token IQ4_XS: rows in pairs, no token loop; the same integer and float operations as matmul_iq4_xs */
static void IQ_FN(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride, const void *act,
                  size_t act_stride, float *out, size_t ldo)
{
    if (ntok != 1) {
        matmul_iq4_xs_avx512vnni(n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);
        return;
    }
    const int64_t nb = n / QUANT_QK_K, np = (nb + 1) / 2;
    kq_prep_t_avx512vnni prep[nb];
    __m512i st[np * KQ_ROWS];
    uint16_t wd[nb * KQ_ROWS];
    memset(wd, 0, sizeof wd);
    memset(st, 0, sizeof st);
    const char *pf_end = (const char *)w + (size_t)nrows * w_stride;
    kq_pf_t pf = kq_pf_start(w, pf_end);
    const quant_block_q8_K *at = (const quant_block_q8_K *)act;
    prep_iq4xs_avx512vnni(at, nb, prep);
    for (int64_t r0 = 0; r0 < nrows; r0 += KQ_ROWS) {
        const int nr = (int)(nrows - r0 < KQ_ROWS ? nrows - r0 : KQ_ROWS);
        if (nr < KQ_ROWS)
            kq_clear_tail_avx512vnni(st, np, nr);
        int i = 0;
        for (; i + IQ_PAIR - 1 < nr; i += IQ_PAIR) {
            const char *row0 = (const char *)w + (size_t)(r0 + i) * w_stride;
            for (int64_t b = 0; b < nb; b++) {
                const quant_block_iq4_xs *x0 = (const quant_block_iq4_xs *)row0 + b;
                kq_pf_advance(&pf, (const char *)x0 + (IQ_PAIR - 1) * w_stride);
                __m256i *half = (__m256i *)&st[(b / 2) * KQ_ROWS + i] + (b & 1);
                for (int k = 0; k < IQ_PAIR; k++) {
                    const quant_block_iq4_xs *x = (const quant_block_iq4_xs *)((const char *)x0 + k * w_stride);
                    wd[b * KQ_ROWS + i + k] = x->d;
                    iq4xs_w_t_avx512vnni u;
                    iq4xs_unpack_avx512vnni(x, &u);
                    _mm256_storeu_si256(half + 2 * k, iq4xs_sum8_avx512vnni(&u, &prep[b]));
                }
            }
        }
        for (; i < nr; i++) {
            const quant_block_iq4_xs *x = (const quant_block_iq4_xs *)((const char *)w + (size_t)(r0 + i) * w_stride);
            for (int64_t b = 0; b < nb; b++) {
                kq_pf_advance(&pf, (const char *)&x[b]);
                wd[b * KQ_ROWS + i] = x[b].d;
                iq4xs_w_t_avx512vnni u;
                iq4xs_unpack_avx512vnni(&x[b], &u);
                __m256i *half = (__m256i *)&st[(b / 2) * KQ_ROWS + i] + (b & 1);
                _mm256_storeu_si256(half, iq4xs_sum8_avx512vnni(&u, &prep[b]));
            }
        }
        const __mmask16 keep = (__mmask16)((1u << nr) - 1);
        __m512 sumf = _mm512_setzero_ps();
        for (int64_t p = 0; p < np; p++) {
            __m512i is[2];
            k512_tree16(&st[p * KQ_ROWS], &is[0], &is[1]);
            for (int h = 0; h < 2 && 2 * p + h < nb; h++) {
                const int64_t b = 2 * p + h;
                const __m512 d = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)&wd[b * KQ_ROWS])),
                                               _mm512_set1_ps(at[b].d));
                sumf = _mm512_add_ps(sumf, _mm512_mul_ps(d, _mm512_cvtepi32_ps(is[h])));
            }
        }
        _mm512_mask_storeu_ps(out + (size_t)r0, keep, sumf);
    }
    (void)act_stride; (void)ldo;
}

/* ==== file: v_iq_b.h ==== */
/* one-token IQ4_XS, bias in the group stage: per row-block only the scaled biased-level sums; the bias
 * 128 * sum_s (raw_s - 32) A_s = 128 * (sum_s raw_s A_s - 32 Atot) for 16 rows at once, raw_s in 0..63 as the
 * unsigned operand of dpbusd against A_s split as 128 hi + lo (as Q4_K's mins). */
static void IQB_FN(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride, const void *act,
                   size_t act_stride, float *out, size_t ldo)
{
    if (ntok != 1) {
        matmul_iq4_xs_avx512vnni(n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);
        return;
    }
    const int64_t nb = n / QUANT_QK_K, np = (nb + 1) / 2;
    const __m512i zero = _mm512_setzero_si512();
    const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    const __m512i table = _mm512_broadcast_i32x4(
        _mm_xor_si128(_mm_loadu_si128((const __m128i *)quant_kvalues_iq4nl), _mm_set1_epi8((char)0x80)));
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i idx0 = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    const __m512i idx1 = _mm512_set_epi32(7, 7, 7, 7, 6, 6, 6, 6, 5, 5, 5, 5, 4, 4, 4, 4);
    kq_prep_t_avx512vnni prep[nb];
    uint64_t split[nb][2];
    int32_t atot[nb];
    __m512i st[np * KQ_ROWS];
    uint16_t wd[nb * KQ_ROWS];
    uint64_t raw[nb * KQ_ROWS];
    memset(wd, 0, sizeof wd);
    memset(raw, 0, sizeof raw);
    memset(st, 0, sizeof st);
    const char *pf_end = (const char *)w + (size_t)nrows * w_stride;
    kq_pf_t pf = kq_pf_start(w, pf_end);
    const quant_block_q8_K *at = (const quant_block_q8_K *)act;
    prep_iq4xs_avx512vnni(at, nb, prep);
    for (int64_t b = 0; b < nb; b++) {
        int16_t A[16];
        _mm256_storeu_si256((__m256i *)A, prep[b].bs);
        uint8_t lo[8], hi[8];
        int tot = 0;
        for (int s = 0; s < 8; s++) {
            const int v = A[s];
            tot += v;
            lo[s] = (uint8_t)(v & 127);
            hi[s] = (uint8_t)(int8_t)((v - (v & 127)) / 128);
        }
        memcpy(&split[b][0], lo, 8);
        memcpy(&split[b][1], hi, 8);
        atot[b] = tot;
    }
    for (int64_t r0 = 0; r0 < nrows; r0 += KQ_ROWS) {
        const int nr = (int)(nrows - r0 < KQ_ROWS ? nrows - r0 : KQ_ROWS);
        if (nr < KQ_ROWS)
            kq_clear_tail_avx512vnni(st, np, nr);
        int i = 0;
#if IQB_PAIR == 2
        for (; i + 1 < nr; i += 2) {
            const quant_block_iq4_xs *x0 = (const quant_block_iq4_xs *)((const char *)w + (size_t)(r0 + i) * w_stride);
            const quant_block_iq4_xs *x1 = (const quant_block_iq4_xs *)((const char *)x0 + w_stride);
            for (int64_t b = 0; b < nb; b++) {
                kq_pf_advance(&pf, (const char *)&x1[b]);
                {
                    const quant_block_iq4_xs *x = x0; const int ii = i;
                                wd[b * KQ_ROWS + ii] = x[b].d;
                uint32_t l4;
                memcpy(&l4, x[b].scales_l, 4);
                const uint64_t rs = _pdep_u64(l4, 0x0f0f0f0f0f0f0f0full) | _pdep_u64(x[b].scales_h, 0x3030303030303030ull);
                raw[b * KQ_ROWS + ii] = rs;
                const __m512i s32 = _mm512_cvtepi8_epi32(_mm_sub_epi8(_mm_cvtsi64_si128((long long)rs), _mm_set1_epi8(32)));
                const __m512i sc0 = _mm512_permutexvar_epi32(idx0, s32), sc1 = _mm512_permutexvar_epi32(idx1, s32);
                const __m512i q0 = _mm512_loadu_si512(x[b].qs), q1 = _mm512_loadu_si512(x[b].qs + 64);
                const kq_prep_t_avx512vnni *a = &prep[b];
                const __m512i l0 = _mm512_shuffle_epi8(table, _mm512_and_si512(q0, m4));
                const __m512i l1 = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(q0, 4), m4));
                const __m512i l2 = _mm512_shuffle_epi8(table, _mm512_and_si512(q1, m4));
                const __m512i l3 = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(q1, 4), m4));
                const __m512i p0 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, l0, a->q[0]), l1, a->q[1]);
                const __m512i p1 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, l2, a->q[2]), l3, a->q[3]);
                const __m512i acc = _mm512_add_epi32(_mm512_mullo_epi32(p0, sc0), _mm512_mullo_epi32(p1, sc1));
                __m256i *half = (__m256i *)&st[(b / 2) * KQ_ROWS + ii] + (b & 1);
                _mm256_storeu_si256(half, k512_fold8_epi32(acc));
                }
                {
                    const quant_block_iq4_xs *x = x1; const int ii = i + 1;
                                wd[b * KQ_ROWS + ii] = x[b].d;
                uint32_t l4;
                memcpy(&l4, x[b].scales_l, 4);
                const uint64_t rs = _pdep_u64(l4, 0x0f0f0f0f0f0f0f0full) | _pdep_u64(x[b].scales_h, 0x3030303030303030ull);
                raw[b * KQ_ROWS + ii] = rs;
                const __m512i s32 = _mm512_cvtepi8_epi32(_mm_sub_epi8(_mm_cvtsi64_si128((long long)rs), _mm_set1_epi8(32)));
                const __m512i sc0 = _mm512_permutexvar_epi32(idx0, s32), sc1 = _mm512_permutexvar_epi32(idx1, s32);
                const __m512i q0 = _mm512_loadu_si512(x[b].qs), q1 = _mm512_loadu_si512(x[b].qs + 64);
                const kq_prep_t_avx512vnni *a = &prep[b];
                const __m512i l0 = _mm512_shuffle_epi8(table, _mm512_and_si512(q0, m4));
                const __m512i l1 = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(q0, 4), m4));
                const __m512i l2 = _mm512_shuffle_epi8(table, _mm512_and_si512(q1, m4));
                const __m512i l3 = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(q1, 4), m4));
                const __m512i p0 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, l0, a->q[0]), l1, a->q[1]);
                const __m512i p1 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, l2, a->q[2]), l3, a->q[3]);
                const __m512i acc = _mm512_add_epi32(_mm512_mullo_epi32(p0, sc0), _mm512_mullo_epi32(p1, sc1));
                __m256i *half = (__m256i *)&st[(b / 2) * KQ_ROWS + ii] + (b & 1);
                _mm256_storeu_si256(half, k512_fold8_epi32(acc));
                }
            }
        }
#endif
        for (; i < nr; i++) {
            const quant_block_iq4_xs *x = (const quant_block_iq4_xs *)((const char *)w + (size_t)(r0 + i) * w_stride);
            for (int64_t b = 0; b < nb; b++) {
                kq_pf_advance(&pf, (const char *)&x[b]);
                const int ii = i;
                                wd[b * KQ_ROWS + ii] = x[b].d;
                uint32_t l4;
                memcpy(&l4, x[b].scales_l, 4);
                const uint64_t rs = _pdep_u64(l4, 0x0f0f0f0f0f0f0f0full) | _pdep_u64(x[b].scales_h, 0x3030303030303030ull);
                raw[b * KQ_ROWS + ii] = rs;
                const __m512i s32 = _mm512_cvtepi8_epi32(_mm_sub_epi8(_mm_cvtsi64_si128((long long)rs), _mm_set1_epi8(32)));
                const __m512i sc0 = _mm512_permutexvar_epi32(idx0, s32), sc1 = _mm512_permutexvar_epi32(idx1, s32);
                const __m512i q0 = _mm512_loadu_si512(x[b].qs), q1 = _mm512_loadu_si512(x[b].qs + 64);
                const kq_prep_t_avx512vnni *a = &prep[b];
                const __m512i l0 = _mm512_shuffle_epi8(table, _mm512_and_si512(q0, m4));
                const __m512i l1 = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(q0, 4), m4));
                const __m512i l2 = _mm512_shuffle_epi8(table, _mm512_and_si512(q1, m4));
                const __m512i l3 = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(q1, 4), m4));
                const __m512i p0 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, l0, a->q[0]), l1, a->q[1]);
                const __m512i p1 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, l2, a->q[2]), l3, a->q[3]);
                const __m512i acc = _mm512_add_epi32(_mm512_mullo_epi32(p0, sc0), _mm512_mullo_epi32(p1, sc1));
                __m256i *half = (__m256i *)&st[(b / 2) * KQ_ROWS + ii] + (b & 1);
                _mm256_storeu_si256(half, k512_fold8_epi32(acc));
            }
        }
        const __mmask16 keep = (__mmask16)((1u << nr) - 1);
        __m512 sumf = _mm512_setzero_ps();
        for (int64_t p = 0; p < np; p++) {
            __m512i is[2];
            k512_tree16(&st[p * KQ_ROWS], &is[0], &is[1]);
            for (int h = 0; h < 2 && 2 * p + h < nb; h++) {
                const int64_t b = 2 * p + h;
                const __m512i lo = _mm512_set1_epi64((long long)split[b][0]);
                const __m512i hi = _mm512_set1_epi64((long long)split[b][1]);
                const __m512i mA = _mm512_loadu_si512(&raw[b * KQ_ROWS]);
                const __m512i mB = _mm512_loadu_si512(&raw[b * KQ_ROWS + 8]);
                const __m512i xA = _mm512_add_epi32(_mm512_dpbusd_epi32(zero, mA, lo), _mm512_slli_epi32(_mm512_dpbusd_epi32(zero, mA, hi), 7));
                const __m512i xB = _mm512_add_epi32(_mm512_dpbusd_epi32(zero, mB, lo), _mm512_slli_epi32(_mm512_dpbusd_epi32(zero, mB, hi), 7));
                const __m512i sra = _mm512_add_epi32(_mm512_permutex2var_epi32(xA, even, xB), _mm512_permutex2var_epi32(xA, odd, xB));
                /* isum = is - 128 (sum raw A - 32 Atot) */
                const __m512i bias = _mm512_slli_epi32(_mm512_sub_epi32(sra, _mm512_set1_epi32(32 * atot[b])), 7);
                const __m512i isum = _mm512_sub_epi32(is[h], bias);
                const __m512 d = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)&wd[b * KQ_ROWS])),
                                               _mm512_set1_ps(at[b].d));
                sumf = _mm512_add_ps(sumf, _mm512_mul_ps(d, _mm512_cvtepi32_ps(isum)));
            }
        }
        _mm512_mask_storeu_ps(out + (size_t)r0, keep, sumf);
    }
    (void)act_stride; (void)ldo;
}

/* ==== file: freq2.c ==== */
#include <stdio.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+1e-9*t.tv_nsec;}
#define I(op,k) op " %%zmm16,%%zmm16,%%zmm" #k "\n\t"
#define ALL(op) I(op,0) I(op,1) I(op,2) I(op,3) I(op,4) I(op,5) I(op,6) I(op,7) I(op,8) I(op,9) I(op,10) I(op,11) I(op,12) I(op,13) I(op,14) I(op,15)
#define MIX(o1,o2) I(o1,0) I(o2,1) I(o1,2) I(o2,3) I(o1,4) I(o2,5) I(o1,6) I(o2,7) I(o1,8) I(o2,9) I(o1,10) I(o2,11) I(o1,12) I(o2,13) I(o1,14) I(o2,15)
#define MIX3(o1,o2,o3) I(o1,0) I(o2,1) I(o3,2) I(o1,3) I(o2,4) I(o3,5) I(o1,6) I(o2,7) I(o3,8) I(o1,9) I(o2,10) I(o3,11) I(o1,12) I(o2,13) I(o3,14) I(o1,15)
#define CL "zmm0","zmm1","zmm2","zmm3","zmm4","zmm5","zmm6","zmm7","zmm8","zmm9","zmm10","zmm11","zmm12","zmm13","zmm14","zmm15","zmm16"
#define RUN(name, str) { long n=30000000; double t=now(); for(long i=0;i<n;i++){ __asm__ volatile(str ::: CL); } double dt=now()-t; printf("%-28s %.3f G/s\n", name, 16.0*n/dt/1e9); }
int main(void){
  __asm__ volatile("vpxord %%zmm16,%%zmm16,%%zmm16" ::: "zmm16");
  for (int r=0;r<1;r++){
  RUN("vpmulld", ALL("vpmulld")) RUN("vpmulld+pshufb", MIX("vpmulld","vpshufb")) RUN("vpmulld+dpbusd", MIX("vpmulld","vpdpbusd")) RUN("vpermd", ALL("vpermd"))
  RUN("dpbusd 16 chains", ALL("vpdpbusd"))
  RUN("dpwssd 16 chains", ALL("vpdpwssd"))
  RUN("maddubsw", ALL("vpmaddubsw"))
  RUN("maddwd", ALL("vpmaddwd"))
  RUN("pshufb", ALL("vpshufb"))
  RUN("vpandd", ALL("vpandd"))
  RUN("vpaddd", ALL("vpaddd"))
  RUN("packssdw", ALL("vpackssdw"))
  RUN("dpbusd+maddubsw", MIX("vpdpbusd","vpmaddubsw"))
  RUN("dpbusd+pshufb", MIX("vpdpbusd","vpshufb"))
  RUN("dpbusd+vpandd", MIX("vpdpbusd","vpandd"))
  RUN("maddubsw+pshufb", MIX("vpmaddubsw","vpshufb"))
  RUN("dpbusd+maddubsw+maddwd", MIX3("vpdpbusd","vpmaddubsw","vpmaddwd"))
  RUN("dpbusd+pshufb+vpandd", MIX3("vpdpbusd","vpshufb","vpandd"))
  }
  return 0;}

/* ==== file: variants.h (final state: memory-side variants probe/nopf/s*) ==== */
void old_q4(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride, const void *act, size_t act_stride, float *out, size_t ldo);
void old_iq(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride, const void *act, size_t act_stride, float *out, size_t ldo);
void old_q5(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride, const void *act, size_t act_stride, float *out, size_t ldo);
static void dp_calib(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride, const void *act,
                     size_t act_stride, float *out, size_t ldo)
{
    (void)n; (void)ntok; (void)act; (void)act_stride; (void)ldo;
    int64_t cnt = nrows * (int64_t)w_stride / 16 / 8;
    __m512i a0 = _mm512_set1_epi32(1), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    const __m512i u = _mm512_loadu_si512(w), v = _mm512_set1_epi8(3);
    for (int64_t i = 0; i < cnt; i++) {
        __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3));
        a0 = _mm512_dpbusd_epi32(a0, u, v); a1 = _mm512_dpbusd_epi32(a1, u, v);
        a2 = _mm512_dpbusd_epi32(a2, u, v); a3 = _mm512_dpbusd_epi32(a3, u, v);
        a4 = _mm512_dpbusd_epi32(a4, u, v); a5 = _mm512_dpbusd_epi32(a5, u, v);
        a6 = _mm512_dpbusd_epi32(a6, u, v); a7 = _mm512_dpbusd_epi32(a7, u, v);
    }
    out[0] = (float)k512_hsum_epi32(_mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
                                                     _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7))));
}
static void q4_k1(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride, const void *act,
                  size_t act_stride, float *out, size_t ldo)
{
    if (ntok == 1)
        matmul_k4_avx512vnni(0, n, nrows, 1, w, w_stride, act, act_stride, out, ldo);
    else
        matmul_k4_avx512vnni(0, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo);
}
static int g_pf = 4096, g_hint = 1;
static inline kq_pf_t kq_pf_start_rt(const void *w, const char *end)
{
    kq_pf_t pf = {(uintptr_t)w & ~(uintptr_t)63, (uintptr_t)end};
    const uintptr_t want = (uintptr_t)w + g_pf < pf.end ? (uintptr_t)w + g_pf : pf.end;
    for (; pf.next < want; pf.next += 64)
        if (g_hint == 1) _mm_prefetch((const char *)pf.next, _MM_HINT_T1); else _mm_prefetch((const char *)pf.next, _MM_HINT_T0);
    return pf;
}
static inline void kq_pf_advance_rt(kq_pf_t *pf, const void *p)
{
    const uintptr_t want = (uintptr_t)p + g_pf < pf->end ? (uintptr_t)p + g_pf : pf->end;
    for (; pf->next < want; pf->next += 64)
        if (g_hint == 1) _mm_prefetch((const char *)pf->next, _MM_HINT_T1); else _mm_prefetch((const char *)pf->next, _MM_HINT_T0);
}
#define KQ_ADV kq_pf_advance
#define KQ_START kq_pf_start
#define Q4_FN q4_p1
#define Q4_PAIR 1
#include "v_q4.h"
#undef Q4_FN
#undef Q4_PAIR
#define Q4_FN q4_p2
#define Q4_PAIR 2
#include "v_q4.h"
#undef Q4_FN
#undef Q4_FN
#undef Q4_PAIR
#define Q4_FN q4_p4
#define Q4_PAIR 4
#include "v_q4.h"
#undef Q4_FN
#undef Q4_PAIR
#undef KQ_ADV
#undef KQ_START
#define KQ_ADV kq_pf_advance_rt
#define KQ_START kq_pf_start_rt
#define Q4_FN q4_rt
#define Q4_PAIR 2
#include "v_q4.h"
#define RTV(name, pfd, h) static void name(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride, const void *act, size_t act_stride, float *out, size_t ldo) { g_pf = pfd; g_hint = h; q4_rt(n, nrows, ntok, w, w_stride, act, act_stride, out, ldo); }
RTV(q4_pf2k, 2048, 1) RTV(q4_pf4k, 4096, 1) RTV(q4_pf8k, 8192, 1) RTV(q4_pf12k, 12288, 1) RTV(q4_pf4k0, 4096, 0)
#define IQ_FN iq_p1
#define IQ_PAIR 1
#include "v_iq.h"
#undef IQ_FN
#undef IQ_PAIR
#define IQ_FN iq_p2
#define IQ_PAIR 2
#include "v_iq.h"
#undef IQ_FN
#undef IQ_PAIR
#define IQ_FN iq_p4
#define IQ_PAIR 4
#include "v_iq.h"
#define IQB_FN iq_b
#define IQB_PAIR 1
#include "v_iq_b.h"
#undef IQB_FN
#undef IQB_PAIR
#define IQB_FN iq_b2
#define IQB_PAIR 2
#include "v_iq_b.h"
static void probe_xor(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride, const void *act,
                      size_t act_stride, float *out, size_t ldo)
{
    (void)n; (void)ntok; (void)act; (void)act_stride; (void)ldo;
    const char *p = w, *e = p + (size_t)nrows * w_stride;
    __m512i x0 = _mm512_setzero_si512(), x1 = x0, x2 = x0, x3 = x0;
    for (; p + 256 <= e; p += 256) {
        x0 = _mm512_xor_si512(x0, _mm512_loadu_si512(p)); x1 = _mm512_xor_si512(x1, _mm512_loadu_si512(p + 64));
        x2 = _mm512_xor_si512(x2, _mm512_loadu_si512(p + 128)); x3 = _mm512_xor_si512(x3, _mm512_loadu_si512(p + 192));
    }
    out[0] = (float)k512_hsum_epi32(_mm512_xor_si512(_mm512_xor_si512(x0, x1), _mm512_xor_si512(x2, x3)));
}
/* rows of the call as S segments advanced in lockstep, 16-row calls */
static void seg_run(int S, int pfd, int64_t n, int64_t nrows, const void *w, size_t w_stride, const void *act, float *out)
{
    g_pf = pfd; g_hint = 1;
    int64_t groups = (nrows + 15) / 16, per = (groups + S - 1) / S;
    for (int64_t g = 0; g < per; g++)
        for (int s = 0; s < S; s++) {
            int64_t r = (s * per + g) * 16;
            if (r >= nrows) continue;
            int64_t c = nrows - r < 16 ? nrows - r : 16;
            q4_rt(n, c, 1, (const char *)w + r * w_stride, w_stride, act, 0, out + r, 1);
        }
}
#define SEGV(name, S, pfd) static void name(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride, const void *act, size_t act_stride, float *out, size_t ldo) { (void)ntok; (void)act_stride; (void)ldo; seg_run(S, pfd, n, nrows, w, w_stride, act, out); }
SEGV(s1pf, 1, 4096) SEGV(s1nopf, 1, 0) SEGV(s4pf, 4, 4096) SEGV(s4nopf, 4, 0) SEGV(s8nopf, 8, 0)
static void q4_nopf(int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride, const void *act, size_t act_stride, float *out, size_t ldo) { g_pf = 0; q4_rt(n, nrows, ntok, w, w_stride, act, act_stride, out, ldo); }
static const var_t q4_vars[] = {{"probe", probe_xor}, {"new", matmul_q4_K_avx512vnni}, {"pf4k", q4_pf4k}, {"nopf", q4_nopf}, {"s1pf", s1pf}, {"s1nopf", s1nopf}, {"s4pf", s4pf}, {"s4nopf", s4nopf}, {"s8nopf", s8nopf}, {0, 0}};
static const var_t iq_vars[] = {{"dp", dp_calib}, {"old", old_iq}, {"new", matmul_iq4_xs_avx512vnni}, {"b", iq_b}, {"b2", iq_b2}, {0, 0}};
static const var_t q5_vars[] = {{"dp", dp_calib}, {"old", old_q5}, {"new", matmul_q5_K_avx512vnni}, {0, 0}};
