/* bench/harness/pack-iq4xs-vm-2026-11-30-harness.c — provenance of pack-iq4xs-vm-2026-11-30.md: the throw-away
 * A/B harness of the packed IQ4_XS kernel (not built by make). In a build directory (build-piq/h/):
 *   var.c (4 translation units, one per prefix VN = v0..v3 and prefetch distance PIQ_PF):
 *     #define CAT2(a, b) a##b
 *     #define CAT(a, b) CAT2(a, b)
 *     #define kern_fill_avx512_vnni CAT(VN, _fill)
 *     #include "core/kern/x86/avx512_vnni.c"
 *     void CAT(VN, _packed_vnni)(ARGS) { matmul_iq4_xs_packed_avx512vnni(PASS); }   (and _packed_vbmi,
 *     _plain_vnni, _plain_vbmi = matmul_iq4_xs_avx512vbmi, _q4k_packed, _q4k_plain = matmul_q4_K_avx512gfni)
 *   gcc -O2 -std=gnu11 -ffp-contract=off -I../.. -I.. -DVN=v0 -c var.c -o v0.o   (v1..v3: -DPIQ_PF=K*2176)
 *   gcc -O2 -std=gnu11 -ffp-contract=off -I../.. -I.. -o piq piq.c v0.o v1.o v2.o v3.o ../bench/guild-bw_read.o
 *     ../core/libguild-core.a -lnuma -lm -lpthread
 * Run: ./piq check                      every variant against the scalar reference, 1..8 tokens, 4 shapes
 *      ./piq l2 T ROUNDS VARS [NTOK [N ROWS]]        one matrix per thread repeated (1 thread: CPU time)
 *      ./piq dram T BANK_GB WINDOW_GB ROUNDS VARS [NTOK [N ROWS]]   rotating windows of a plain and a packed bank
 * Variants run in rotating order within each round; medians over rounds; for dram also the median of each
 * round's variant/probe ratio. */
/* A/B harness of the packed IQ4_XS kernel (see bench/results/...-piq.md): check | l2 | dram */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "bench/bw.h"
#include "core/kern/kern.h"
#include "core/kern/pack.h"
#include "core/quant/blocks.h"
#include "core/quant/fp16.h"
#include "core/quant/quant.h"

typedef void (*mm_fn)(int64_t, int64_t, int64_t, const void *, size_t, const void *, size_t, float *, size_t);
#define DECL(v) void v##_packed_vnni(); void v##_packed_vbmi(); void v##_plain_vnni(); void v##_plain_vbmi(); void v##_q4k_packed(); void v##_q4k_plain();
DECL(v0) DECL(v1) DECL(v2) DECL(v3)

typedef struct variant { const char *name; mm_fn fn; int packed; int q4k; } variant_t;
static variant_t variants[] = {
    {"probe", NULL, 0},
    {"plain", (mm_fn)v0_plain_vbmi, 0},
    {"plainvnni", (mm_fn)v0_plain_vnni, 0},
    {"pvbmi", (mm_fn)v0_packed_vbmi, 1},
    {"pvnni", (mm_fn)v0_packed_vnni, 1},
    {"pvbmi1", (mm_fn)v1_packed_vbmi, 1},
    {"pvbmi2", (mm_fn)v2_packed_vbmi, 1},
    {"pvbmi3", (mm_fn)v3_packed_vbmi, 1},
    {"q4kplain", (mm_fn)v0_q4k_plain, 0, 1},
    {"q4kpacked", (mm_fn)v0_q4k_packed, 1, 1},
};
#define NV (int)(sizeof variants / sizeof variants[0])

static uint64_t rs = 1;
static uint64_t rnd(void) { uint64_t z = (rs += 0x9e3779b97f4a7c15ull); z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull; z = (z ^ (z >> 27)) * 0x94d049bb133111ebull; return z ^ (z >> 31); }
static float rf(void) { return (float)((double)(rnd() >> 11) * (2.0 / 9007199254740992.0) - 1.0); }
static int use_cpu_clock;
static double now(void) { struct timespec t; clock_gettime(use_cpu_clock ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

static void fill_rows(uint8_t *w, size_t bytes)
{
    for (size_t i = 0; i < bytes; i += 8) { uint64_t r = rnd(); memcpy(w + i, &r, 8); }
    for (size_t b = 0; b < bytes; b += 136) { uint16_t d = quant_f32_to_f16(ldexpf(1.0f + 0.5f * rf(), -6)); memcpy(w + b, &d, 2); }
}

static quant_block_q8_K *acts(int64_t n, int64_t ntok)
{
    int64_t nb = n / 256;
    quant_block_q8_K *a = malloc(sizeof *a * nb * ntok);
    float *x = malloc(sizeof *x * n);
    for (int64_t t = 0; t < ntok; t++) {
        for (int64_t i = 0; i < n; i++) x[i] = rf() * 3.0f;
        kern_quantize_at(KERN_LEVEL_SCALAR, GUILD_TYPE_Q8_K, x, a + t * nb, n);
    }
    free(x);
    return a;
}

static int check(void)
{
    int bad = 0;
    const int64_t shapes[][2] = {{2048, 64}, {768, 128}, {512, 16}, {4096, 32}};
    for (int si = 0; si < 4; si++)
        for (int64_t ntok = 1; ntok <= 8; ntok++) {
            int64_t n = shapes[si][0], nr = shapes[si][1], rb = n / 256 * 136;
            uint8_t *w = malloc(rb * nr), *p = malloc(rb * nr);
            fill_rows(w, rb * nr);
            guild_err_t err;
            kern_pack(GUILD_TYPE_IQ4_XS, n, nr, w, rb, p, &err);
            quant_block_q8_K *a = acts(n, ntok);
            float *want = calloc(nr * ntok, 4), *got = calloc(nr * ntok, 4);
            kern_matmul_at(KERN_LEVEL_SCALAR, GUILD_TYPE_IQ4_XS, n, nr, ntok, w, rb, a, n / 256 * sizeof *a, want, nr);
            for (int v = 1; v < NV; v++) {
                if (variants[v].q4k) continue;
                memset(got, 0x55, nr * ntok * 4);
                variants[v].fn(n, nr, ntok, variants[v].packed ? p : w, rb, a, n / 256 * sizeof *a, got, nr);
                if (memcmp(want, got, nr * ntok * 4)) { printf("MISMATCH %s n=%lld ntok=%lld\n", variants[v].name, (long long)n, (long long)ntok); bad++; }
            }
            free(w); free(p); free(a); free(want); free(got);
        }
    printf("check: %s\n", bad ? "FAILED" : "all variants bit-identical to the scalar reference");
    return bad;
}

/* ---- timed runs: threads pinned to CPUs 0..T-1, barrier start, time to the last thread's end ---- */
static int T;
static pthread_barrier_t bar;
static volatile int job_v, stop;
static const uint8_t *job_base[4]; /* plain, packed; q4_K plain, packed */
static size_t job_off, job_bytes, call_bytes;
static int64_t job_n, call_rows, job_ntok, job_reps;
static quant_block_q8_K *job_act;
static double t_end[8];
static uint64_t sink;

static void run_part(int id)
{
    const variant_t *v = &variants[job_v];
    float out[8 * 4096];
    size_t per = job_bytes / T / call_bytes * call_bytes;
    size_t off = job_off + per * id;
    for (int64_t r = 0; r < job_reps; r++) {
        if (!v->fn) { sink += bench_read(job_base[0] + off, per); continue; }
        const uint8_t *base = job_base[v->packed + 2 * v->q4k];
        const size_t rbytes = job_n / 256 * (v->q4k ? 144 : 136);
        const size_t cb = (size_t)call_rows * rbytes;
        for (size_t o = 0; o < per; o += call_bytes)
            v->fn(job_n, call_rows, job_ntok, base + (off + o) / call_bytes * cb, rbytes, job_act, job_n / 256 * sizeof(quant_block_q8_K), out, call_rows);
    }
}

static void *worker(void *arg)
{
    int id = (int)(intptr_t)arg;
    cpu_set_t cs; CPU_ZERO(&cs); CPU_SET(id, &cs); sched_setaffinity(0, sizeof cs, &cs);
    for (;;) {
        pthread_barrier_wait(&bar);
        if (stop) return NULL;
        run_part(id);
        t_end[id] = now();
        pthread_barrier_wait(&bar);
    }
}

static double timed(int v)
{
    job_v = v;
    double t0 = now();
    pthread_barrier_wait(&bar);
    run_part(0);
    t_end[0] = now();
    pthread_barrier_wait(&bar);
    double te = t_end[0];
    for (int i = 1; i < T; i++) if (t_end[i] > te) te = t_end[i];
    size_t per = job_bytes / T / call_bytes * call_bytes;
    return (double)per * T * job_reps / (te - t0) / 1e9;
}

static int cmpd(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }

int main(int argc, char **argv)
{
    if (argc < 2) { fprintf(stderr, "usage: piq check | l2 T ROUNDS VARS [NTOK] | dram T GB WINDOW_GB ROUNDS VARS [NTOK] [N ROWS]\n"); return 2; }
    guild_err_t err;
    if (kern_set_level(KERN_LEVEL_AVX512_VNNI, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    if (!strcmp(argv[1], "check")) return check() ? 1 : 0;
    int l2 = !strcmp(argv[1], "l2");
    T = atoi(argv[2]);
    use_cpu_clock = l2 && T == 1; /* one thread in cache: its CPU time, immune to the other tenants' preemption */
    int a = 3;
    double gb = l2 ? 0 : atof(argv[a++]), wgb = l2 ? 0 : atof(argv[a++]);
    int rounds = atoi(argv[a++]);
    char *vars = argv[a++];
    job_ntok = argc > a ? atoi(argv[a++]) : 1;
    job_n = argc > a ? atoll(argv[a++]) : 2048;
    call_rows = argc > a ? atoll(argv[a++]) : (l2 ? 512 : 768);
    int sel[NV], ns = 0;
    for (char *s = strtok(vars, ","); s; s = strtok(NULL, ","))
        for (int v = 0; v < NV; v++) if (!strcmp(variants[v].name, s)) sel[ns++] = v;
    call_bytes = (size_t)call_rows * (job_n / 256) * 136;
    size_t bank = l2 ? call_bytes * T : (size_t)(gb * 1e9) / call_bytes * call_bytes;
    uint8_t *plain = mmap(NULL, bank, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint8_t *packed = mmap(NULL, bank, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    madvise(plain, bank, MADV_HUGEPAGE); madvise(packed, bank, MADV_HUGEPAGE);
    fill_rows(plain, bank);
    for (size_t o = 0; o < bank; o += call_bytes)
        kern_pack(GUILD_TYPE_IQ4_XS, job_n, call_rows, plain + o, job_n / 256 * 136, packed + o, &err);
    job_base[0] = plain; job_base[1] = packed;
    if (l2) { /* q4_K rows for the lead's kernels, same row count */
        size_t qb = bank / 136 * 144;
        uint8_t *qp = malloc(qb), *qk = malloc(qb);
        for (size_t i = 0; i < qb; i++) qp[i] = (uint8_t)rnd();
        for (size_t b = 0; b < qb; b += 144) { uint16_t d = quant_f32_to_f16(ldexpf(1.0f + 0.5f * rf(), -6)); memcpy(qp + b, &d, 2); memcpy(qp + b + 2, &d, 2); }
        for (size_t o = 0; o < qb; o += (size_t)call_rows * (job_n / 256) * 144)
            kern_pack(GUILD_TYPE_Q4_K, job_n, call_rows, qp + o, job_n / 256 * 144, qk + o, &err);
        job_base[2] = qp; job_base[3] = qk;
    }
    job_act = acts(job_n, job_ntok);
    pthread_barrier_init(&bar, NULL, T);
    pthread_t th[8];
    for (int i = 1; i < T; i++) pthread_create(&th[i], NULL, worker, (void *)(intptr_t)i);
    cpu_set_t cs; CPU_ZERO(&cs); CPU_SET(0, &cs); sched_setaffinity(0, sizeof cs, &cs);
    size_t window = l2 ? bank : (size_t)(wgb * 1e9) / (call_bytes * T) * (call_bytes * T);
    double res[NV][64];
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < ns; k++) {
            int v = sel[(k + r) % ns];
            if (l2) { job_off = 0; job_bytes = bank; job_reps = 2; timed(v); job_reps = 300 * (512 / call_rows); }
            else { job_off = (size_t)((r * ns + k) * window) % (bank - window + 1) / call_bytes * call_bytes; job_bytes = window; job_reps = 1; }
            res[v][r] = timed(v);
        }
    }
    printf("%s T=%d ntok=%lld n=%lld rows/call=%lld %s rounds=%d:", argv[1], T, (long long)job_ntok, (long long)job_n, (long long)call_rows, l2 ? "" : "dram", rounds);
    double probe_med = 0;
    for (int k = 0; k < ns; k++) {
        int v = sel[k];
        double s[64]; memcpy(s, res[v], rounds * sizeof(double)); qsort(s, rounds, sizeof(double), cmpd);
        double med = s[rounds / 2];
        if (!variants[v].fn) probe_med = med;
        printf("  %s %.2f", variants[v].name, med);
    }
    if (probe_med > 0) {
        printf("  | fraction of probe, per-round ratio medians:");
        for (int k = 0; k < ns; k++) {
            int v = sel[k]; if (!variants[v].fn) continue;
            double s[64]; for (int r = 0; r < rounds; r++) s[r] = res[v][r] / res[0][r];
            qsort(s, rounds, sizeof(double), cmpd);
            printf("  %s %.3f", variants[v].name, s[rounds / 2]);
        }
    }
    printf("\n");
    stop = 1;
    pthread_barrier_wait(&bar);
    for (int i = 1; i < T; i++) pthread_join(th[i], NULL);
    return (int)(sink & 0);
}
