/* bench/amx_experts_bench — the CPU workers' routed-expert products at prefill batch sizes on the AMX tiles, in
 * the two work orders of the 256-element kernels (core/kern/amx.h: the token-pair order, the many-token order and
 * its tunings), with the expert executor's task split (cpu-expert-worker/experts/expert_exec.c: tasks of R output
 * rows of one expert, gate and up in one task, then down).
 *
 *   bench/amx_experts_bench [--shape 235b|30b] [--tokens 64,256,512] [--experts N] [--threads T] [--runs R]
 *                           [--variants I,J,..] [--emu]
 *   bench/amx_experts_bench --tmul [--threads T]
 *
 * Per shape: N experts of packed Q4_K gate/up (n_ff x n_embd) and Q6_K down (n_embd x n_ff) with random blocks,
 * T tokens each (random Q8_K activations); a run computes every expert's gate, up and down for its tokens on a
 * pool of T threads. Prints per variant the median seconds of R runs, microseconds per (token, expert) pair, the
 * products' GFLOP/s, and whether its outputs equal the first variant's bit for bit (--variants: which, by index into
 * variants[], in that order). Needs AMX (else exits 77);
 * --emu runs the kernels on the C model of the tiles instead (AVX-512 VNNI: a slow smoke test of small runs).
 * --tmul: the tile unit's own int8 rate (2 x 2 blocked TDPBSSD on L1 tiles; then A tiles from L2) on 1, T/2 and T
 * threads.
 */
#include <getopt.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/kern/amx.h"
#include "core/kern/kern.h"
#include "core/kern/pack.h"
#include "core/quant/blocks.h"
#include "core/quant/fp16.h"
#include "core/util/clock.h"
#include "core/util/pool.h"

typedef struct variant {
    const char *name;
    int big;             /* 0: token-pair order */
    kern_amx_big_t tune; /* many-token order's tuning */
    int rows;            /* output rows per task */
} variant_t;

static const variant_t variants[] = {
    {"pairs-r32 (main)", 0, {0, 0, 0}, 32},   {"pairs-r128", 0, {0, 0, 0}, 128},
    {"big-g2-pf-d1-r32", 1, {2, 1, 1}, 32},   {"big-g2-pf-d1-r128", 1, {2, 1, 1}, 128},
    {"big-g1-pf-d1-r128", 1, {1, 1, 1}, 128}, {"big-g4-pf-d1-r128", 1, {4, 1, 1}, 128},
    {"big-g2-d1-r128", 1, {2, 0, 1}, 128},    {"big-g2-pf-d0-r128", 1, {2, 1, 0}, 128},
    {"big-g2-pf-d2-r128", 1, {2, 1, 2}, 128}, {"big-g2-pf-d1-r256", 1, {2, 1, 1}, 256},
    {"big-g2-pf-d1-r1536", 1, {2, 1, 1}, 1536}, {"pairs-r16", 0, {0, 0, 0}, 16},
    {"big-g2-pf-d1-r16", 1, {2, 1, 1}, 16},     {"pairs-r1536", 0, {0, 0, 0}, 1536},
};
#define N_VARIANTS (int)(sizeof variants / sizeof variants[0])

typedef struct bank {
    int64_t E, F, N, T;
    size_t gu_row, d_row, xa_row, ha_row; /* bytes: Q4_K row of E, Q6_K row of F, Q8_K rows of E and F */
    uint8_t **gate, **up, **down;         /* [N] packed */
    uint8_t **xa, **ha;                   /* [N] T activation rows */
    float **g, **u, **y;                  /* [N] outputs T x F, T x F, T x E */
    const variant_t *v;
    int emu; /* the kernels on the C model of the tiles (a smoke test where no AMX exists: slow) */
} bank_t;

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void *xmalloc(size_t n)
{
    void *p = aligned_alloc(64, (n + 63) / 64 * 64);
    if (!p) {
        fprintf(stderr, "amx_experts_bench: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

static void fill_bytes(uint8_t *p, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const uint64_t r = rnd();
        memcpy(p + i, &r, 8);
    }
    for (; i < n; i++)
        p[i] = (uint8_t)rnd();
}

/* nrows rows of n elements of type (Q4_K or Q6_K), random quants with small finite scales, packed */
static uint8_t *weights(guild_type_t type, int64_t n, int64_t nrows, size_t row)
{
    uint8_t *plain = xmalloc((size_t)nrows * row), *packed = xmalloc((size_t)nrows * row);
    fill_bytes(plain, (size_t)nrows * row);
    const uint16_t d = quant_f32_to_f16(0.0007f), dmin = quant_f32_to_f16(0.0003f);
    for (int64_t r = 0; r < nrows; r++)
        for (int64_t b = 0; b < n / QUANT_QK_K; b++) {
            uint8_t *blk = plain + (size_t)r * row;
            if (type == GUILD_TYPE_Q4_K) {
                quant_block_q4_K *q = (quant_block_q4_K *)blk + b;
                memcpy(&q->d, &d, 2);
                memcpy(&q->dmin, &dmin, 2);
            } else {
                quant_block_q6_K *q = (quant_block_q6_K *)blk + b;
                memcpy(&q->d, &d, 2);
            }
        }
    guild_err_t err;
    if (kern_pack(type, n, nrows, plain, row, packed, &err) < 0) {
        fprintf(stderr, "amx_experts_bench: %s\n", err.msg);
        exit(1);
    }
    free(plain);
    return packed;
}

static uint8_t *acts(int64_t n, int64_t ntok, size_t row)
{
    uint8_t *a = xmalloc((size_t)ntok * row);
    for (int64_t t = 0; t < ntok; t++)
        for (int64_t b = 0; b < n / QUANT_QK_K; b++) {
            quant_block_q8_K *q = (quant_block_q8_K *)(a + (size_t)t * row) + b;
            q->d = 0.01f + (float)(rnd() % 1000) * 1e-5f;
            for (int j = 0; j < QUANT_QK_K; j++)
                q->qs[j] = (int8_t)(rnd() % 255 - 127);
            for (int g = 0; g < QUANT_QK_K / 16; g++) {
                int s = 0;
                for (int j = 0; j < 16; j++)
                    s += q->qs[16 * g + j];
                q->bsums[g] = (int16_t)s;
            }
        }
    return a;
}

static void product(const bank_t *k, guild_type_t type, int64_t n, int64_t nrows, const uint8_t *w, size_t wrow,
                    const uint8_t *a, size_t arow, float *out, size_t ldo)
{
    if (k->emu)
        kern_amx_emu_sb_matmul(k->v->big ? &k->v->tune : NULL, true, type, n, nrows, k->T, w, wrow, a, arow, out, ldo);
    else
        kern_amx_sb_matmul(k->v->big ? &k->v->tune : NULL, true, type, n, nrows, k->T, w, wrow, a, arow, out, ldo);
}

static void gate_up_task(void *ctx, int64_t task, int thread)
{
    const bank_t *k = ctx;
    (void)thread;
    const int64_t chunks = (k->F + k->v->rows - 1) / k->v->rows;
    const int64_t e = task / chunks, r0 = (task % chunks) * k->v->rows;
    const int64_t nr = k->F - r0 < k->v->rows ? k->F - r0 : k->v->rows;
    product(k, GUILD_TYPE_Q4_K, k->E, nr, k->gate[e] + (size_t)r0 * k->gu_row, k->gu_row, k->xa[e], k->xa_row,
            k->g[e] + r0, (size_t)k->F);
    product(k, GUILD_TYPE_Q4_K, k->E, nr, k->up[e] + (size_t)r0 * k->gu_row, k->gu_row, k->xa[e], k->xa_row,
            k->u[e] + r0, (size_t)k->F);
}

static void down_task(void *ctx, int64_t task, int thread)
{
    const bank_t *k = ctx;
    (void)thread;
    const int64_t chunks = (k->E + k->v->rows - 1) / k->v->rows;
    const int64_t e = task / chunks, r0 = (task % chunks) * k->v->rows;
    const int64_t nr = k->E - r0 < k->v->rows ? k->E - r0 : k->v->rows;
    product(k, GUILD_TYPE_Q6_K, k->F, nr, k->down[e] + (size_t)r0 * k->d_row, k->d_row, k->ha[e], k->ha_row,
            k->y[e] + r0, (size_t)k->E);
}

#if defined(__x86_64__)
/* --tmul: the tile unit's own rate, one task per thread: 2 x 2 blocked TDPBSSD (A0, A1 x B0, B1 -> C0..C3) on tiles
 * loaded from L1, as many iterations as `tmul_iters`; the int8 multiply-adds a second over all threads. With
 * ctx non-NULL the A tiles come from a 128 KiB buffer (L2) at a 256-byte row stride, as the many-token kernel's
 * gathered activations, a new pair of tiles each iteration. */
static int64_t tmul_iters = 200000;
static _Atomic uint64_t tmul_sink;

__attribute__((target("amx-tile,amx-int8"))) static void tmul_task(void *ctx, int64_t task, int thread)
{
    (void)task, (void)thread;
    static _Thread_local int8_t buf[4][16][64] __attribute__((aligned(64)));
    static _Thread_local int8_t abig[512][256] __attribute__((aligned(64)));
    const int l2 = ctx != NULL;
    int32_t c[16][16] __attribute__((aligned(64)));
    struct {
        uint8_t palette, start_row, reserved[14];
        uint16_t colsb[16];
        uint8_t rows[16];
    } __attribute__((aligned(64))) cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++)
        cfg.rows[t] = 16, cfg.colsb[t] = 64;
    memset(buf, 1, sizeof buf);
    memset(abig, 1, sizeof abig);
    __asm__ volatile("" ::: "memory");
    _tile_loadconfig(&cfg);
    _tile_zero(4);
    _tile_zero(5);
    _tile_zero(6);
    _tile_zero(7);
    for (int64_t i = 0; i < tmul_iters; i++) {
        if (l2) { /* tokens 32 j .. 32 j + 31, 64-byte group q of the 256 */
            const int j = (int)(i % 16), q = (int)(i / 16 % 4);
            _tile_loadd(0, &abig[32 * j][64 * q], 256);
            _tile_loadd(1, &abig[32 * j + 16][64 * q], 256);
        } else {
            _tile_loadd(0, buf[0], 64);
            _tile_loadd(1, buf[1], 64);
        }
        _tile_loadd(2, buf[2], 64);
        _tile_loadd(3, buf[3], 64);
        _tile_dpbssd(4, 0, 2);
        _tile_dpbssd(5, 0, 3);
        _tile_dpbssd(6, 1, 2);
        _tile_dpbssd(7, 1, 3);
    }
    _tile_stored(4, c, 64);
    _tile_release();
    tmul_sink += (uint64_t)c[0][0];
}

static void tmul_rate(guild_pool_t *pool, int threads, int l2)
{
    static int mark;
    void *ctx = l2 ? &mark : NULL;
    guild_pool_run(pool, threads, tmul_task, ctx); /* warm-up: the tiles' first use, the clock's ramp */
    const double t0 = guild_clock_s();
    guild_pool_run(pool, threads, tmul_task, ctx);
    const double s = guild_clock_s() - t0;
    const double macs = (double)threads * (double)tmul_iters * 4.0 * 16 * 16 * 64;
    printf("tmul %s threads=%d s=%.4f int8_TMACs=%.2f TOPS=%.2f per_thread_MACs_per_ns=%.1f\n",
           l2 ? "A-from-L2" : "all-L1", threads, s,
           macs / s * 1e-12, 2 * macs / s * 1e-12, macs / s * 1e-9 / threads);
    fflush(stdout);
}
#else
static void tmul_rate(guild_pool_t *pool, int threads, int l2)
{
    (void)pool, (void)threads, (void)l2; /* unreachable: no AMX here (main exits 77 first) */
}
#endif

static double run_once(bank_t *k, guild_pool_t *pool)
{
    const double t0 = guild_clock_s();
    guild_pool_run(pool, k->N * ((k->F + k->v->rows - 1) / k->v->rows), gate_up_task, k);
    guild_pool_run(pool, k->N * ((k->E + k->v->rows - 1) / k->v->rows), down_task, k);
    return guild_clock_s() - t0;
}

static uint64_t digest(const bank_t *k)
{
    uint64_t h = 1469598103934665603ull;
    for (int64_t e = 0; e < k->N; e++) {
        const float *bufs[3] = {k->g[e], k->u[e], k->y[e]};
        const size_t lens[3] = {(size_t)(k->T * k->F), (size_t)(k->T * k->F), (size_t)(k->T * k->E)};
        for (int i = 0; i < 3; i++) /* 2 floats a step (every length here is even) */
            for (size_t j = 0; j + 2 <= lens[i]; j += 2) {
                uint64_t v;
                memcpy(&v, bufs[i] + j, 8);
                h = (h ^ v) * 1099511628211ull;
            }
    }
    return h;
}

int main(int argc, char **argv)
{
    const char *shape = "235b", *toks = "64,256,512";
    int n_experts = 0, threads = 16, runs = 3, emu = 0, tmul = 0;
    const char *pick = NULL; /* --variants: indices into variants[] (the first one is the bits' reference) */
    static const struct option lo[] = {{"shape", required_argument, NULL, 's'},   {"tokens", required_argument, NULL, 't'},
                                       {"experts", required_argument, NULL, 'n'}, {"threads", required_argument, NULL, 'j'},
                                       {"runs", required_argument, NULL, 'r'},    {"emu", no_argument, NULL, 'e'},
                                       {"tmul", no_argument, NULL, 'm'},          {"variants", required_argument, NULL, 'v'},
                                       {NULL, 0, NULL, 0}};
    for (int c; (c = getopt_long(argc, argv, "", lo, NULL)) != -1;) {
        switch (c) {
        case 's': shape = optarg; break;
        case 't': toks = optarg; break;
        case 'n': n_experts = atoi(optarg); break;
        case 'j': threads = atoi(optarg); break;
        case 'r': runs = atoi(optarg); break;
        case 'e': emu = 1; break;
        case 'm': tmul = 1; break;
        case 'v': pick = optarg; break;
        default: fprintf(stderr, "usage: %s [--shape 235b|30b] [--tokens LIST] [--experts N] [--threads T] [--runs R] [--variants LIST] [--emu] [--tmul]\n", argv[0]); return 2;
        }
    }
    if (emu ? !kern_level_supported(KERN_LEVEL_AVX512_VNNI) : !kern_level_supported(KERN_LEVEL_AMX)) {
        fprintf(stderr, "amx_experts_bench: this CPU lacks AMX: skipped\n");
        return 77;
    }
    if (tmul) { /* the tile unit's rate on 1 thread and on all */
        guild_pool_t *tp = NULL;
        guild_err_t terr;
        if (guild_pool_new(&tp, threads, NULL, &terr) < 0) {
            fprintf(stderr, "amx_experts_bench: %s\n", terr.msg);
            return 1;
        }
        for (int l2 = 0; l2 < 2; l2++) {
            tmul_rate(tp, 1, l2);
            tmul_rate(tp, threads / 2 > 0 ? threads / 2 : 1, l2);
            tmul_rate(tp, threads, l2);
        }
        guild_pool_destroy(&tp);
        return 0;
    }
    bank_t k = {.emu = emu};
    if (!strcmp(shape, "30b")) {
        k.E = 2048, k.F = 768, k.N = n_experts ? n_experts : 128;
    } else {
        k.E = 4096, k.F = 1536, k.N = n_experts ? n_experts : 32;
    }
    k.gu_row = (size_t)(k.E / QUANT_QK_K) * sizeof(quant_block_q4_K);
    k.d_row = (size_t)(k.F / QUANT_QK_K) * sizeof(quant_block_q6_K);
    k.xa_row = (size_t)(k.E / QUANT_QK_K) * sizeof(quant_block_q8_K);
    k.ha_row = (size_t)(k.F / QUANT_QK_K) * sizeof(quant_block_q8_K);
    k.gate = calloc((size_t)k.N, sizeof *k.gate), k.up = calloc((size_t)k.N, sizeof *k.up);
    k.down = calloc((size_t)k.N, sizeof *k.down);
    k.xa = calloc((size_t)k.N, sizeof *k.xa), k.ha = calloc((size_t)k.N, sizeof *k.ha);
    k.g = calloc((size_t)k.N, sizeof *k.g), k.u = calloc((size_t)k.N, sizeof *k.u), k.y = calloc((size_t)k.N, sizeof *k.y);
    for (int64_t e = 0; e < k.N; e++) {
        k.gate[e] = weights(GUILD_TYPE_Q4_K, k.E, k.F, k.gu_row);
        k.up[e] = weights(GUILD_TYPE_Q4_K, k.E, k.F, k.gu_row);
        k.down[e] = weights(GUILD_TYPE_Q6_K, k.F, k.E, k.d_row);
    }
    guild_pool_t *pool = NULL;
    guild_err_t err;
    int *cpus = malloc((size_t)threads * sizeof *cpus);
    for (int i = 0; i < threads; i++)
        cpus[i] = i;
    if (guild_pool_new(&pool, threads, cpus, &err) < 0 && guild_pool_new(&pool, threads, NULL, &err) < 0) {
        fprintf(stderr, "amx_experts_bench: %s\n", err.msg);
        return 1;
    }
    printf("# shape %s: n_embd %lld, n_ff %lld, %lld experts (Q4_K gate/up, Q6_K down, packed), %d threads, median of %d\n",
           shape, (long long)k.E, (long long)k.F, (long long)k.N, threads, runs);
    for (const char *p = toks; *p;) {
        const int64_t T = strtoll(p, NULL, 10);
        while (*p && *p != ',')
            p++;
        if (*p == ',')
            p++;
        if (T <= 0)
            continue;
        k.T = T;
        for (int64_t e = 0; e < k.N; e++) {
            k.xa[e] = acts(k.E, T, k.xa_row);
            k.ha[e] = acts(k.F, T, k.ha_row);
            k.g[e] = xmalloc((size_t)(T * k.F) * 4);
            k.u[e] = xmalloc((size_t)(T * k.F) * 4);
            k.y[e] = xmalloc((size_t)(T * k.E) * 4);
        }
        uint64_t ref = 0;
        double base_s = 0;
        int order[N_VARIANTS], nv = 0;
        for (const char *q = pick; q && *q && nv < N_VARIANTS;) {
            const int i = atoi(q);
            if (i >= 0 && i < N_VARIANTS)
                order[nv++] = i;
            while (*q && *q != ',')
                q++;
            if (*q == ',')
                q++;
        }
        if (!pick)
            for (nv = 0; nv < N_VARIANTS; nv++)
                order[nv] = nv;
        for (int oi = 0; oi < nv; oi++) {
            const int vi = order[oi];
            k.v = &variants[vi];
            for (int64_t e = 0; e < k.N; e++) { /* poison: a product that skips an output shows in the digest */
                memset(k.g[e], 0xff, (size_t)(T * k.F) * 4);
                memset(k.u[e], 0xff, (size_t)(T * k.F) * 4);
                memset(k.y[e], 0xff, (size_t)(T * k.E) * 4);
            }
            run_once(&k, pool); /* warm-up */
            double s[16];
            const int nr = runs < 16 ? runs : 16;
            for (int r = 0; r < nr; r++)
                s[r] = run_once(&k, pool);
            const double med = guild_median(s, nr);
            const uint64_t h = digest(&k);
            if (oi == 0)
                ref = h, base_s = med;
            const double pairs = (double)k.N * (double)T;
            printf("%s tokens=%lld variant=%s s=%.4f us_per_pair=%.3f GFLOPs=%.1f speedup=%.2f same_bits=%s\n", shape,
                   (long long)T, k.v->name, med, med / pairs * 1e6, 6.0 * (double)k.E * (double)k.F * pairs / med * 1e-9,
                   base_s / med, h == ref ? "yes" : "NO");
            fflush(stdout);
        }
        for (int64_t e = 0; e < k.N; e++) {
            free(k.xa[e]), free(k.ha[e]), free(k.g[e]), free(k.u[e]), free(k.y[e]);
        }
    }
    guild_pool_destroy(&pool);
    for (int64_t e = 0; e < k.N; e++)
        free(k.gate[e]), free(k.up[e]), free(k.down[e]);
    free(k.gate), free(k.up), free(k.down), free(k.xa), free(k.ha), free(k.g), free(k.u), free(k.y), free(cpus);
    return 0;
}
