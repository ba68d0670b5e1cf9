/* bench/harness/experts-vm-2026-11-30-harness.c — provenance of experts-vm-2026-11-30.md: the throw-away A/B
 * harness those numbers came from (not built by make). Build in a build directory (build-kern2/exp/):
 *   old kernels: for f in $(git archive ed00e34 | core/kern/*.c core/kern/x86/*.c): gcc -O2 -std=gnu11
 *     -ffp-contract=off -include oldren.h (#define kern_X old_kern_X for every exported kern_ symbol) -c
 *   gcc -O2 -std=gnu11 -ffp-contract=off -mavx2 -mfma -mf16c -mbmi2 -mavx512f -mavx512bw -mavx512vl -mavx512dq
 *     -mavx512vnni -I.. -I../.. -o exp exp.c oldobj/*.o var_*.o ../bench/guild-bw.o ../bench/guild-bw_read.o
 *     ../cpu-expert-worker/experts/libguild-experts.a ../core/libguild-core.a -lnuma -lpcre2-8 -lm -lpthread
 *   (var_*.o: avx512_kquants.h + avx512_iq4xs.h instantiated with other KQ_PF / KQ_PF_HINT values.)
 * Run: WTYPE=q4_K ./exp THREADS GB REPS WINDOW_GB probe,sum,okern,kern[,...] [hot [ROWS]] */
/* experiment harness: q4_K decode kernel variants vs probe vs sum-bytes, interleaved, one process */
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "core/kern/kern.h"
#include "core/quant/quant.h"
#include "core/quant/blocks.h"
#include "core/topo/topo.h"
#include "bench/bw.h"
#include "core/util/pool.h"
#include "cpu-expert-worker/experts/expert_pipe.h"
#include "core/kern/x86/avx512_util.h"



typedef struct vparams { int mode; int dist; int hint; int stride; } vparams_t;
/* mode 0: like production (3 lines per block at blk+dist, T0 hint...); 1: one prefetch per line; 2: none */

static inline void pf(const char *p, int hint)
{
    switch (hint) {
    case 0: __asm__ volatile("prefetcht0 %0" :: "m"(*p)); break;
    case 1: __asm__ volatile("prefetcht1 %0" :: "m"(*p)); break;
    case 2: __asm__ volatile("prefetcht2 %0" :: "m"(*p)); break;
    case 4: { int x; __asm__ volatile("movzbl %1, %0" : "=r"(x) : "m"(*p)); (void)x; } break;
    default: __asm__ volatile("prefetchnta %0" :: "m"(*p)); break;
    }
}

#define KQ_ROWS 16
#define K4_SCALE_IDX(A, B) _mm512_set_epi16(B, B, B, B, B, B, B, B, B, B, B, B, B, B, B, B, A, A, A, A, A, A, A, A, A, A, A, A, A, A, A, A)
typedef struct prep { __m512i q[4]; __m256i bs; float d; } prep_t;

static void prep_k4(const quant_block_q8_K *a, int64_t nb, prep_t *p)
{
    for (int64_t b = 0; b < nb; b++) {
        const int8_t *q = a[b].qs;
        for (int l = 0; l < 2; l++) {
            const int8_t *c = q + 128 * l;
            p[b].q[2 * l] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)c)), _mm256_loadu_si256((const __m256i *)(c + 64)), 1);
            p[b].q[2 * l + 1] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(c + 32))), _mm256_loadu_si256((const __m256i *)(c + 96)), 1);
        }
        __m256i bs16 = _mm256_loadu_si256((const __m256i *)a[b].bsums);
        __m256i pairs = _mm256_madd_epi16(bs16, _mm256_set1_epi16(1));
        __m128i packed = _mm_packs_epi32(_mm256_castsi256_si128(pairs), _mm256_extracti128_si256(pairs, 1));
        p[b].bs = _mm256_castsi128_si256(packed);
        p[b].d = a[b].d;
    }
}

/* single token q4_K, prefetch variants */
static void q4k_var(vparams_t vp, int64_t n, int64_t nrows, const void *w, size_t w_stride, const void *act, float *out)
{
    const int64_t nb = n / 256;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i sidx0 = K4_SCALE_IDX(0, 2), sidx1 = K4_SCALE_IDX(1, 3);
    const __m512i sidx2 = K4_SCALE_IDX(4, 6), sidx3 = K4_SCALE_IDX(5, 7);
    prep_t prep[nb];
    __m512i st[nb * KQ_ROWS];
    uint16_t wd[nb * KQ_ROWS], wm[nb * KQ_ROWS];
    memset(wd, 0, sizeof wd); memset(wm, 0, sizeof wm);
    const uintptr_t end = (uintptr_t)w + (size_t)nrows * w_stride;
    const quant_block_q8_K *at = act;
    prep_k4(at, nb, prep);
    uintptr_t next = (uintptr_t)w & ~(uintptr_t)63, next2 = next;
    if (vp.mode != 2) {
        uintptr_t lim = (uintptr_t)w + vp.dist; if (lim > end) lim = end;
        for (; next < lim; next += 64) pf((const char *)next, vp.hint);
    }
    for (int64_t r0 = 0; r0 < nrows; r0 += KQ_ROWS) {
        const int nr = (int)(nrows - r0 < KQ_ROWS ? nrows - r0 : KQ_ROWS);
        for (int i = 0; i < nr; i++) {
            const char *row = (const char *)w + (size_t)(r0 + i) * w_stride;
            for (int64_t b = 0; b < nb; b++) {
                const char *blk = row + (size_t)b * 144;
                if (vp.mode == 0) {
                    uintptr_t a = (uintptr_t)blk + vp.dist;
                    if (a < end) for (int l = 0; l < 3; l++) pf((const char *)(a + 64 * l), vp.hint);
                } else if (vp.mode == 1) {
                    uintptr_t want = (uintptr_t)blk + 144 + vp.dist; if (want > end) want = end;
                    for (; next < want; next += 64) pf((const char *)next, vp.hint);
                } else if (vp.mode == 4) {
                    uintptr_t want = (uintptr_t)blk + 144 + vp.dist; if (want > end) want = end;
                    for (; next < want; next += 64) pf((const char *)next, vp.hint);
                    uintptr_t want2 = (uintptr_t)blk + 144 + vp.stride; if (want2 > end) want2 = end;
                    for (; next2 < want2; next2 += 64) pf((const char *)next2, 0);
                } else if (vp.mode == 3) {
                    uintptr_t want = (uintptr_t)blk + 144 + vp.dist; if (want > end) want = end;
                    for (; next < want; next += vp.stride) pf((const char *)next, vp.hint);
                }
                const quant_block_q4_K *x = (const quant_block_q4_K *)blk;
                memcpy(&wd[b * KQ_ROWS + i], blk, 2);
                memcpy(&wm[b * KQ_ROWS + i], blk + 2, 2);
                const __m512i q0 = _mm512_loadu_si512(x->qs), q1 = _mm512_loadu_si512(x->qs + 64);
                __m512i v0 = _mm512_and_si512(q0, m4);
                __m512i v1 = _mm512_and_si512(_mm512_srli_epi16(q0, 4), m4);
                __m512i v2 = _mm512_and_si512(q1, m4);
                __m512i v3 = _mm512_and_si512(_mm512_srli_epi16(q1, 4), m4);
                const __m256i scm = _mm256_cvtepu8_epi16(k512_k4_scales(x->scales));
                const __m512i z = _mm512_castsi256_si512(scm);
                const __m512i sc0 = _mm512_permutexvar_epi16(sidx0, z), sc1 = _mm512_permutexvar_epi16(sidx1, z);
                const __m512i sc2 = _mm512_permutexvar_epi16(sidx2, z), sc3 = _mm512_permutexvar_epi16(sidx3, z);
                const __m128i m8 = _mm256_extracti128_si256(scm, 1);
                const prep_t *a = &prep[b];
                __m512i acc0 = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_maddubs_epi16(v0, a->q[0]), sc0);
                __m512i acc1 = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_maddubs_epi16(v1, a->q[1]), sc1);
                acc0 = _mm512_dpwssd_epi32(acc0, _mm512_maddubs_epi16(v2, a->q[2]), sc2);
                acc1 = _mm512_dpwssd_epi32(acc1, _mm512_maddubs_epi16(v3, a->q[3]), sc3);
                const __m128i imin = _mm_madd_epi16(m8, _mm256_castsi256_si128(a->bs));
                st[b * KQ_ROWS + i] = k512_pack2(k512_fold8_epi32(_mm512_add_epi32(acc0, acc1)), _mm256_castsi128_si256(imin));
            }
        }
        if (nr < KQ_ROWS) for (int64_t b = 0; b < nb; b++) for (int i = nr; i < KQ_ROWS; i++) st[b*KQ_ROWS+i] = _mm512_setzero_si512();
        const __mmask16 keep = (__mmask16)((1u << nr) - 1);
        __m512 sumf = _mm512_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            __m512i isum, imin;
            k512_tree16(&st[b * KQ_ROWS], &isum, &imin);
            const __m512 ad = _mm512_set1_ps(at[b].d);
            const __m512 d = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)&wd[b * KQ_ROWS])), ad);
            const __m512 dmin = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)&wm[b * KQ_ROWS])), ad);
            const __m512 t1 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(isum));
            const __m512 t2 = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(imin));
            sumf = _mm512_add_ps(sumf, _mm512_sub_ps(t1, t2));
        }
        _mm512_mask_storeu_ps(out + r0, keep, sumf);
    }
}

static uint64_t sum_bytes(const void *p, size_t n)
{
    const char *c = p; __m512i a = _mm512_setzero_si512(), b = a; const __m512i z = a;
    for (size_t i = 0; i + 128 <= n; i += 128) {
        a = _mm512_add_epi64(a, _mm512_sad_epu8(_mm512_loadu_si512(c + i), z));
        b = _mm512_add_epi64(b, _mm512_sad_epu8(_mm512_loadu_si512(c + i + 64), z));
    }
    return (uint64_t)_mm512_reduce_add_epi64(_mm512_add_epi64(a, b));
}

static uint64_t synth(const void *p, size_t n, int work, int pfd, int pfh)
{
    const char *c = p; __m512i acc[4] = {0}; const __m512i k = _mm512_set1_epi8(3);
    uintptr_t next = (uintptr_t)c, end = (uintptr_t)c + n;
    for (size_t i = 0; i + 256 <= n; i += 256) {
        if (pfd) { uintptr_t want = (uintptr_t)c + i + 256 + pfd; if (want > end) want = end; for (; next < want; next += 64) pf((const char *)next, pfh); }
        for (int l = 0; l < 4; l++) {
            __m512i v = _mm512_loadu_si512(c + i + 64 * l);
            for (int w = 0; w < work; w++) { v = _mm512_maddubs_epi16(v, k); }
            acc[l] = _mm512_add_epi32(acc[l], v);
        }
    }
    return (uint64_t)_mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(acc[0], acc[1]), _mm512_add_epi64(acc[2], acc[3])));
}
static uint64_t sum4(const void *p, size_t n, int sad)
{
    const char *c = p; __m512i a = _mm512_setzero_si512(), b = a, d = a, e = a; const __m512i z = a;
    if (sad) for (size_t i = 0; i + 256 <= n; i += 256) {
        a = _mm512_add_epi64(a, _mm512_sad_epu8(_mm512_load_si512(c + i), z));
        b = _mm512_add_epi64(b, _mm512_sad_epu8(_mm512_load_si512(c + i + 64), z));
        d = _mm512_add_epi64(d, _mm512_sad_epu8(_mm512_load_si512(c + i + 128), z));
        e = _mm512_add_epi64(e, _mm512_sad_epu8(_mm512_load_si512(c + i + 192), z));
    } else for (size_t i = 0; i + 256 <= n; i += 256) {
        a = _mm512_add_epi64(a, _mm512_load_si512(c + i));
        b = _mm512_add_epi64(b, _mm512_load_si512(c + i + 64));
        d = _mm512_add_epi64(d, _mm512_load_si512(c + i + 128));
        e = _mm512_add_epi64(e, _mm512_load_si512(c + i + 192));
    }
    return (uint64_t)_mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(a, b), _mm512_add_epi64(d, e)));
}

/* new design: VNNI dpbusd per 4 elements, packs to int16, dpwssd with per-sub-block scales; mins at group end */
static void q4k_new(vparams_t vp, int64_t n, int64_t nrows, const void *w, size_t w_stride, const void *act, float *out)
{
    const int64_t nb = n / 256, np = (nb + 1) / 2;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i z80 = _mm512_set1_epi8((char)0x80);
    (void)z80;
    /* vpshufb indices: int16 lanes [s_a x4, s_b x4] per 128-bit lane, (a,b) = (0,1) in lanes 0-1, (2,3) in 2-3 */
#define IDX16(a, b) (char)0x80, b, (char)0x80, b, (char)0x80, b, (char)0x80, b, (char)0x80, a, (char)0x80, a, (char)0x80, a, (char)0x80, a
    const __m512i sh0 = _mm512_set_epi8(IDX16(2, 3), IDX16(2, 3), IDX16(0, 1), IDX16(0, 1));
    const __m512i sh1 = _mm512_set_epi8(IDX16(6, 7), IDX16(6, 7), IDX16(4, 5), IDX16(4, 5));
    prep_t prep[nb];
    __m512i lo7[nb], hi7[nb]; /* per block: bsp split as 128 hi + lo, bytes [s0..s7] per qword */
    __m512i st[np * KQ_ROWS];
    uint16_t wd[nb * KQ_ROWS], wm[nb * KQ_ROWS];
    uint64_t mins[nb * KQ_ROWS];
    memset(wd, 0, sizeof wd); memset(wm, 0, sizeof wm); memset(mins, 0, sizeof mins); memset(st, 0, sizeof st);
    const uintptr_t end = (uintptr_t)w + (size_t)nrows * w_stride;
    const quant_block_q8_K *at = act;
    prep_k4(at, nb, prep);
    for (int64_t b = 0; b < nb; b++) {
        uint8_t l8[8], h8[8];
        for (int s = 0; s < 8; s++) {
            int v = at[b].bsums[2 * s] + at[b].bsums[2 * s + 1];
            int h = v >> 7; /* floor */
            l8[s] = (uint8_t)(v - 128 * h); h8[s] = (uint8_t)(int8_t)h;
        }
        uint64_t L, H; memcpy(&L, l8, 8); memcpy(&H, h8, 8);
        lo7[b] = _mm512_set1_epi64((long long)L); hi7[b] = _mm512_set1_epi64((long long)H);
    }
    uintptr_t next2 = (uintptr_t)w & ~(uintptr_t)63;
    uintptr_t next = (uintptr_t)w & ~(uintptr_t)63;
    if (vp.mode != 2) {
        uintptr_t lim = (uintptr_t)w + vp.dist; if (lim > end) lim = end;
        for (; next < lim; next += 64) pf((const char *)next, vp.hint);
    }
    const __m512i ev = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i od = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    for (int64_t r0 = 0; r0 < nrows; r0 += KQ_ROWS) {
        const int nr = (int)(nrows - r0 < KQ_ROWS ? nrows - r0 : KQ_ROWS);
        const int S = vp.mode == 9 ? vp.stride : 1; /* concurrent streams */
        for (int ii = 0; ii < nr; ii++) {
            const int per = (nr + S - 1) / S;
            /* stream order: S rows at a time, blocks interleaved */
            const int i = S == 1 ? ii : ((ii % S) * per + ii / S);
            if (i >= nr) continue;
            const char *row = (const char *)w + (size_t)(r0 + i) * w_stride;
            for (int64_t b = 0; b < nb; b++) {
                const char *blk = row + (size_t)b * 144;
                if (vp.mode == 9) {
                    uintptr_t a = (uintptr_t)blk + vp.dist;
                    if (a + 143 < end) { pf((const char *)a, vp.hint); pf((const char *)(a + 64), vp.hint); pf((const char *)(a + 143), vp.hint); }
                }
                if (vp.mode == 7) {
                    uintptr_t want = (uintptr_t)blk + 144 + vp.dist; if (want > end) want = end;
                    for (; next < want; next += 64) pf((const char *)next, vp.hint);
                    uintptr_t want2 = (uintptr_t)blk + 144 + vp.stride; if (want2 > end) want2 = end;
                    for (; next2 < want2; next2 += 64) pf((const char *)next2, 0);
                }
                if (vp.mode == 6 && !(b & 1)) {
                    uintptr_t want = (uintptr_t)blk + 288 + vp.dist; if (want > end) want = end;
                    for (; next < want; next += 64) pf((const char *)next, vp.hint);
                }
                if (vp.mode == 1) {
                    uintptr_t want = (uintptr_t)blk + 144 + vp.dist; if (want > end) want = end;
                    for (; next < want; next += 64) pf((const char *)next, vp.hint);
                }
                if (vp.stride != 9) { memcpy(&wd[b * KQ_ROWS + i], blk, 2);
                memcpy(&wm[b * KQ_ROWS + i], blk + 2, 2); }
                uint64_t w01 = 0; uint32_t w2 = 0;
                if (vp.stride != 7) { memcpy(&w01, blk + 4, 8); memcpy(&w2, blk + 12, 4); }
                const uint64_t lo = w01 & 0x3f3f3f3f3f3f3f3full;
                const uint64_t hi = ((w01 >> 2) & 0x3030303030303030ull) | (((uint64_t)w2 | ((uint64_t)w2 << 28)) & 0x0f0f0f0f0f0f0f0full);
                uint64_t sc = (lo & 0xffffffffull) | (hi << 32);
                if (vp.stride == 7) sc = 0x0102030405060708ull; else
                mins[b * KQ_ROWS + i] = (lo >> 32) | (hi & 0xffffffff00000000ull);
                const __m512i scv = _mm512_set1_epi64((long long)sc);
                const __m512i t0 = _mm512_shuffle_epi8(scv, sh0), t1 = _mm512_shuffle_epi8(scv, sh1);
                const __m512i q0 = _mm512_loadu_si512(blk + 16), q1 = _mm512_loadu_si512(blk + 80);
                const __m512i v0 = _mm512_and_si512(q0, m4), v1 = _mm512_and_si512(_mm512_srli_epi16(q0, 4), m4);
                const __m512i v2 = _mm512_and_si512(q1, m4), v3 = _mm512_and_si512(_mm512_srli_epi16(q1, 4), m4);
                const prep_t *a = &prep[b];
                const __m512i z = _mm512_setzero_si512();
                const __m512i p0 = _mm512_dpbusd_epi32(z, v0, a->q[0]), p1 = _mm512_dpbusd_epi32(z, v1, a->q[1]);
                const __m512i p2 = _mm512_dpbusd_epi32(z, v2, a->q[2]), p3 = _mm512_dpbusd_epi32(z, v3, a->q[3]);
                __m512i s;
                if (vp.stride == 8) s = _mm512_add_epi32(_mm512_add_epi32(p0, p1), _mm512_add_epi32(p2, _mm512_add_epi32(p3, _mm512_add_epi32(t0, t1))));
                else s = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(z, _mm512_packs_epi32(p0, p1), t0), _mm512_packs_epi32(p2, p3), t1);
                _mm256_storeu_si256((__m256i *)&st[(b / 2) * KQ_ROWS + i] + (b & 1), k512_fold8_epi32(s));
            }
        }
        if (nr < KQ_ROWS) for (int64_t p = 0; p < np; p++) for (int i = nr; i < KQ_ROWS; i++) st[p*KQ_ROWS+i] = _mm512_setzero_si512();
        const __mmask16 keep = (__mmask16)((1u << nr) - 1);
        __m512 sumf = _mm512_setzero_ps();
        for (int64_t p = 0; p < np; p++) {
            __m512i is[2];
            k512_tree16(&st[p * KQ_ROWS], &is[0], &is[1]);
            for (int h = 0; h < 2 && 2 * p + h < nb; h++) {
                const int64_t b = 2 * p + h;
                const __m512i M0 = _mm512_loadu_si512(&mins[b * KQ_ROWS]), M1 = _mm512_loadu_si512(&mins[b * KQ_ROWS + 8]);
                const __m512i z = _mm512_setzero_si512();
                const __m512i T0 = _mm512_add_epi32(_mm512_dpbusd_epi32(z, M0, lo7[b]), _mm512_slli_epi32(_mm512_dpbusd_epi32(z, M0, hi7[b]), 7));
                const __m512i T1 = _mm512_add_epi32(_mm512_dpbusd_epi32(z, M1, lo7[b]), _mm512_slli_epi32(_mm512_dpbusd_epi32(z, M1, hi7[b]), 7));
                const __m512i imin = _mm512_add_epi32(_mm512_permutex2var_epi32(T0, ev, T1), _mm512_permutex2var_epi32(T0, od, T1));
                const __m512 ad = _mm512_set1_ps(at[b].d);
                const __m512 d = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)&wd[b * KQ_ROWS])), ad);
                const __m512 dmin = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)&wm[b * KQ_ROWS])), ad);
                const __m512 t1 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(is[h]));
                const __m512 t2 = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(imin));
                sumf = _mm512_add_ps(sumf, _mm512_sub_ps(t1, t2));
            }
        }
        _mm512_mask_storeu_ps(out + r0, keep, sumf);
    }
}
/* ---- harness */
#define NV 32
typedef struct variant { const char *name; int kind; vparams_t vp; } variant_t; /* kind 0 probe 1 sum 2 kern 3 var */
static variant_t vars[NV]; static int nvars;
static char *mem; static size_t mem_bytes, rb; static int64_t total_rows;
static int nthreads; static guild_type_t wtype = GUILD_TYPE_Q4_K;
void old_kern_matmul(guild_type_t type, int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride, const void *act, size_t act_stride, float *out, size_t ldo); static int E = 2048; static int64_t mat_rows = 768;
static size_t window; static int64_t win_rows;
static quant_block_q8_K *actq;
static pthread_barrier_t bar;
static double t_start, t_end[8];
static int cur_var; static int64_t cur_row0; static volatile uint64_t sink;
static double now(void){struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec+t.tv_nsec*1e-9;}


/* expert bank */
static char *emem; static size_t ebytes, gu_bytes, d_rb; static int32_t n_layer; static int steps_per_win;
static int32_t *perm, *pnext; static uint64_t rs = 12345;
static expert_mats_t *emats; static expert_pipe_t *pipe_, *pipefix_; static guild_pool_t *pool;
static quant_block_q8_K *actd; static int32_t cur_ids[8]; static int32_t cur_layer;
static float *px, *py;
static uint64_t rnd(void){ rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return rs; }
static void pick(int32_t layer, int32_t *ids)
{
    int32_t *p = perm + (size_t)layer * 128;
    if (getenv("SEQ")) { static int32_t nx; for (int k = 0; k < 8; k++) ids[k] = (nx + k) % 128; nx = (nx + 8) % 128; return; }
    if (pnext[layer] + 8 > 128) { for (int i = 127; i > 0; i--) { int j = (int)(rnd() % (uint64_t)(i + 1)); int32_t t = p[i]; p[i] = p[j]; p[j] = t; } pnext[layer] = 0; }
    memcpy(ids, p + pnext[layer], 8 * sizeof *ids); pnext[layer] += 8;
}
static const expert_mats_t *eget(const void *ctx, int32_t layer, int32_t e) { (void)ctx; return &emats[(size_t)layer * 128 + e]; }
static pthread_barrier_t bar2;
static _Atomic int sb_count, sb_gen;
static void spin_barrier(void)
{
    int g = __atomic_load_n(&sb_gen, __ATOMIC_ACQUIRE);
    if (__atomic_add_fetch(&sb_count, 1, __ATOMIC_ACQ_REL) == nthreads) { __atomic_store_n(&sb_count, 0, __ATOMIC_RELAXED); __atomic_store_n(&sb_gen, g + 1, __ATOMIC_RELEASE); }
    else while (__atomic_load_n(&sb_gen, __ATOMIC_ACQUIRE) == g) __builtin_ia32_pause();
}

typedef void (*varfn)(int64_t, int64_t, const void *, size_t, const void *, float *);
#define VDECL(h, d) void var_q4k_##h##_##d(int64_t, int64_t, const void *, size_t, const void *, float *); void var_iq4xs_##h##_##d(int64_t, int64_t, const void *, size_t, const void *, float *); void var_q6k_##h##_##d(int64_t, int64_t, const void *, size_t, const void *, float *);
VDECL(T0, 4096) VDECL(T0, 8192) VDECL(T1, 4096) VDECL(T1, 8192)
static varfn pick_var(int h, int d)
{
#define VP(H, D) if (h == (H == T0 ? 0 : 1) && d == D) return wtype == GUILD_TYPE_Q4_K ? var_q4k_##H##_##D : wtype == GUILD_TYPE_IQ4_XS ? var_iq4xs_##H##_##D : var_q6k_##H##_##D;
    enum { T0, T1 };
    VP(T0, 4096) VP(T0, 8192) VP(T1, 4096) VP(T1, 8192)
    return NULL;
}
static int reps, hot;
static void run_part(int tid)
{
    const variant_t *v = &vars[cur_var];
    int64_t per = win_rows / nthreads;
    int64_t r_begin = cur_row0 + tid * per, r_end = r_begin + per;
    const char *base = mem + (size_t)r_begin * rb; size_t bytes = (size_t)per * rb;
    float out[2048];
    if (v->kind >= 10) {
        for (int st = 0; st < steps_per_win; st++) {
            if (v->kind == 12) {
                if (tid == 0) { guild_err_t e; pick(cur_layer, cur_ids); if (expert_pipe_run(v->vp.stride ? pipefix_ : pipe_, cur_layer, 1, px, cur_ids, py, &e) < 0) abort(); cur_layer = (cur_layer + 1) % n_layer; }
                continue;
            }
            if (tid == 0) { pick(cur_layer, cur_ids); cur_layer = (cur_layer + 1) % n_layer; }
            spin_barrier();
            for (int kk = 0; kk < 8; kk++) {
                int k = kk;
                if (v->vp.stride == 1 && tid == 1) k = 7 - kk;
                if (v->vp.stride == 2 && (kk % 2) != tid) continue;
                const expert_mats_t *m = &emats[(size_t)((cur_layer + n_layer - 1) % n_layer) * 128 + cur_ids[k]];
                const void *mats[3] = {m->gate, m->up, m->down}; int64_t rows[3] = {768, 768, 2048}, cols[3] = {2048, 2048, 768};
                size_t rbs[3] = {rb, rb, d_rb}; const void *acts[3] = {actq, actq, actd};
                for (int q = 0; q < 3; q++) {
                    int64_t h = rows[q] / nthreads, r0 = h * tid;
                    if (v->vp.stride == 2) { h = rows[q]; r0 = 0; }
                    const char *wp = (const char *)mats[q] + (size_t)r0 * rbs[q];
                    if (v->kind == 10) kern_matmul(wtype, cols[q], h, 1, wp, rbs[q], acts[q], 0, out, 0);
                    else if (v->kind == 11) q4k_new(v->vp, cols[q], h, wp, rbs[q], acts[q], out);
                    else if (v->kind == 13) sink += bench_read(wp, (size_t)h * rbs[q] & ~(size_t)255);
                    else if (v->kind == 14) sink += sum_bytes(wp, (size_t)h * rbs[q]);
                    sink += (uint64_t)out[0];
                }
            }
            spin_barrier();
        }
        return;
    }
    if (v->kind == 15) { sink += bench_read(emem + (base - mem), bytes & ~(size_t)255); return; }
    if (v->kind == 0) sink += bench_read(base, bytes & ~(size_t)255);
    else if (v->kind == 1) sink += sum_bytes(base, bytes);
    else if (v->kind == 5) sink += sum4(base, bytes, 0);
    else if (v->kind == 6) sink += sum4(base, bytes, 1);
    else if (v->kind == 4) sink += synth(base, bytes, v->vp.mode, v->vp.dist, v->vp.hint);
    else {
        for (int64_t r = r_begin; r < r_end; r += mat_rows) {
            int64_t nr = r_end - r < mat_rows ? r_end - r : mat_rows;
            const char *w = mem + (size_t)r * rb;
            if (v->kind == 2) kern_matmul(wtype, E, nr, 1, w, rb, actq, 0, out, 0);
            else if (v->kind == 8) pick_var(v->vp.hint, v->vp.dist)(E, nr, w, rb, actq, out);
            else if (v->kind == 9) old_kern_matmul(wtype, E, nr, 1, w, rb, actq, 0, out, 0);
            else if (v->kind == 7) q4k_new(v->vp, E, nr, w, rb, actq, out);
            else q4k_var(v->vp, E, nr, w, rb, actq, out);
            sink += (uint64_t)out[0];
        }
    }
}


static double *res; /* [reps][nvars] */
static void *thr(void *arg)
{
    int tid = (int)(intptr_t)arg;
    cpu_set_t s; CPU_ZERO(&s); CPU_SET(tid, &s); pthread_setaffinity_np(pthread_self(), sizeof s, &s);
    int64_t nwin = total_rows / win_rows;
    int w = 0;
    for (int rep = 0; rep < reps; rep++)
        for (int v = 0; v < nvars; v++) {
            pthread_barrier_wait(&bar);
            if (tid == 0) { cur_var = v; cur_row0 = hot ? 0 : (w % nwin) * win_rows; w++; }
            if (hot) for (int k = 0; k < 200; k++) { if (k == 100 && tid == 0) t_start = now(); run_part(tid); }
            pthread_barrier_wait(&bar);
            if (tid == 0 && !hot) t_start = now();
            if (!hot) run_part(tid);
            t_end[tid] = now();
            pthread_barrier_wait(&bar);
            if (tid == 0) {
                double te = 0; for (int i = 0; i < nthreads; i++) if (t_end[i] > te) te = t_end[i];
                res[rep * nvars + v] = vars[v].kind >= 10 ? (double)steps_per_win * 8 * ebytes / (te - t_start) / 1e9 : (hot ? 100.0 : 1.0) * (double)(win_rows / nthreads * nthreads) * rb / (te - t_start) / 1e9;
            }
        }
    return NULL;
}
static int cmpd(const void *a, const void *b){double x=*(const double*)a,y=*(const double*)b; return (x>y)-(x<y);}

int main(int argc, char **argv)
{
    nthreads = argc > 1 ? atoi(argv[1]) : 2;
    double gb = argc > 2 ? atof(argv[2]) : 3;
    reps = argc > 3 ? atoi(argv[3]) : 7;
    double wgb = argc > 4 ? atof(argv[4]) : 0.6;
    const char *spec = argc > 5 ? argv[5] : "probe,sum,kern,v0:4096:0,v1:4096:0,v2";
    hot = argc > 6 && !strcmp(argv[6], "hot");
    if (argc > 7) mat_rows = atoi(argv[7]);
    guild_err_t err;
    if (getenv("WTYPE")) wtype = (guild_type_t)quant_type_from_name(getenv("WTYPE"));
    uint64_t rbb; quant_row_bytes(wtype, E, &rbb, NULL); rb = rbb;
    total_rows = (int64_t)(gb * 1e9 / rb) / mat_rows * mat_rows;
    mem_bytes = (size_t)total_rows * rb;
    win_rows = (int64_t)(wgb * 1e9 / rb) / (mat_rows * nthreads) * (mat_rows * nthreads);
    window = win_rows * rb;
    mem = topo_alloc(mem_bytes, -1, &err);
    char *tmpl = malloc(rb * 64); float *f = malloc(E * sizeof *f);
    srand(1);
    for (int r = 0; r < 64; r++) { for (int i = 0; i < E; i++) f[i] = (rand() / (float)RAND_MAX - 0.5f) * 0.1f; quant_quantize_row_ref(wtype, f, tmpl + r * rb, E, NULL); }
    for (int64_t r = 0; r < total_rows; r++) memcpy(mem + r * rb, tmpl + (r % 64) * rb, rb);
    actq = aligned_alloc(64, 4 * E + 64);
    for (int i = 0; i < E; i++) f[i] = rand() / (float)RAND_MAX - 0.5f;
    kern_quantize(quant_type_info(wtype)->dot_type, f, actq, E);
    /* check variants equal kern */
    if (wtype == GUILD_TYPE_Q4_K) { float o1[768], o2[768]; kern_matmul(GUILD_TYPE_Q4_K, E, 768, 1, mem, rb, actq, 0, o1, 0);
      vparams_t vp = {1, 4096, 0, 64}; q4k_var(vp, E, 768, mem, rb, actq, o2);
      printf("# variant equal: %s\n", memcmp(o1, o2, sizeof o1) ? "NO" : "yes");
      q4k_new(vp, E, 768, mem, rb, actq, o2);
      printf("# new equal: %s\n", memcmp(o1, o2, sizeof o1) ? "NO" : "yes");
      q4k_new(vp, E, 37, mem + 5 * rb, rb, actq, o2); kern_matmul(GUILD_TYPE_Q4_K, E, 37, 1, mem + 5 * rb, rb, actq, 0, o1, 0);
      printf("# new equal (37 rows): %s\n", memcmp(o1, o2, 37 * 4) ? "NO" : "yes"); }
    char *s = strdup(spec), *sv = NULL;
    for (char *t = strtok_r(s, ",", &sv); t; t = strtok_r(NULL, ",", &sv)) {
        variant_t v = {strdup(t), 3, {0, 4096, 0, 0}};
        if (!strcmp(t, "probe")) v.kind = 0; else if (!strcmp(t, "sum")) v.kind = 1; else if (!strcmp(t, "kern")) v.kind = 2; else if (!strcmp(t, "okern")) v.kind = 9; else if (!strcmp(t, "add4")) v.kind = 5; else if (!strcmp(t, "sad4")) v.kind = 6;
        else if (t[0] == 'h' && t[1] == ':') { int h = 1, d = 4096; sscanf(t, "h:%d:%d", &h, &d); v.kind = 8; v.vp = (vparams_t){0, d, h, 0}; }
        else if (t[0] == 'n') { int m = 1, d = 4096, h = 1; sscanf(t, "n%d:%d:%d", &m, &d, &h); v.kind = 7; v.vp = (vparams_t){m, d, h, 64}; }
        else if (t[0] == 's' && t[1] == 'y') { int m = 0, d = 0; int h = 0; sscanf(t, "sy%d:%d:%d", &m, &d, &h); v.kind = 4; v.vp = (vparams_t){m, d, h}; }
        else { int m = 0, d = 4096, h = 0, st = 64; sscanf(t, "v%d:%d:%d:%d", &m, &d, &h, &st); v.vp = (vparams_t){m, d, h, st}; }
        vars[nvars++] = v;
    }
    res = calloc((size_t)reps * nvars, sizeof *res);
    /* expert bank over the same bytes layout (every 144-byte block is a valid q4_K block) */
    {
        uint64_t x; quant_row_bytes(wtype, 768, &x, NULL); d_rb = x;
        gu_bytes = 768 * rb; ebytes = 2 * gu_bytes + 2048 * d_rb;
        n_layer = (int32_t)(gb * 1e9 / (ebytes * 128.0)); if (n_layer < 2) n_layer = 2;
        emem = getenv("EMEM_SEP") ? topo_alloc((size_t)n_layer * 128 * ebytes, -1, &err) : mem;
        for (size_t o = 0; o < (size_t)n_layer * 128 * ebytes; o += rb) memcpy(emem + o, tmpl + ((o / rb) % 64) * rb, rb);
        emats = calloc((size_t)n_layer * 128, sizeof *emats);
        for (size_t i = 0; i < (size_t)n_layer * 128; i++) { char *m = emem + i * ebytes; emats[i] = (expert_mats_t){m, m + gu_bytes, m + 2 * gu_bytes, wtype, wtype, wtype, rb, rb, d_rb}; }
        perm = malloc((size_t)n_layer * 128 * sizeof *perm); pnext = malloc((size_t)n_layer * sizeof *pnext);
        for (int32_t l = 0; l < n_layer; l++) { pnext[l] = 128; for (int e = 0; e < 128; e++) perm[l * 128 + e] = e; }
        steps_per_win = (int)(wgb * 1e9 / (8.0 * ebytes)); if (steps_per_win < 1) steps_per_win = 1;
        actd = aligned_alloc(64, 4 * 768 + 64); kern_quantize(quant_type_info(wtype)->dot_type, f, actd, 768);
        int cpus[2] = {0, 1};
        if (guild_pool_new(&pool, nthreads, cpus, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
        expert_pipe_src_t src = {n_layer, 128, 8, 2048, 768, eget, NULL};
        if (expert_pipe_new(&pipe_, &src, pool, NULL, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
        expert_pipe_tuning_t fx = {768, 2048};
        if (expert_pipe_new(&pipefix_, &src, pool, &fx, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
        px = malloc(2048 * sizeof *px); py = malloc(8 * 2048 * sizeof *py);
        for (int i = 0; i < 2048; i++) px[i] = rand() / (float)RAND_MAX - 0.5f;
        float o1[2048], o2[2048]; vparams_t vp = {1, 4096, 1, 64};
        kern_matmul(wtype, 768, 2048, 1, emem + 2 * gu_bytes, d_rb, actd, 0, o1, 0);
        old_kern_matmul(wtype, 768, 2048, 1, emem + 2 * gu_bytes, d_rb, actd, 0, o2, 0);
        printf("# %s kern == old kern (768 wide): %s; %d layers, %d steps per window\n", quant_type_info(wtype)->name, memcmp(o1, o2, sizeof o1) ? "NO" : "yes", n_layer, steps_per_win);
    }
    pthread_barrier_init(&bar, NULL, nthreads);
    pthread_t th[8];
    printf("# threads=%d mem=%.2f GB window=%.2f GB reps=%d\n", nthreads, mem_bytes/1e9, window/1e9, reps);
    for (int i = 1; i < nthreads; i++) pthread_create(&th[i], NULL, thr, (void *)(intptr_t)i);
    thr((void *)0);
    for (int i = 1; i < nthreads; i++) pthread_join(th[i], NULL);
    { char cmd[128]; snprintf(cmd, sizeof cmd, "grep -E 'AnonHugePages' /proc/%d/smaps_rollup", getpid()); if (system(cmd)) {} }
    for (int v = 0; v < nvars; v++) {
        double x[256]; for (int r = 0; r < reps; r++) x[r] = res[r * nvars + v];
        qsort(x, reps, sizeof *x, cmpd);
        printf("%-14s median %6.2f  min %6.2f max %6.2f GB/s\n", vars[v].name, x[reps / 2], x[0], x[reps - 1]);
    }
    return 0;
}
