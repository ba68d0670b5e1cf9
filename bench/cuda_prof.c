/* bench/guild-cuda-prof — per-kernel GPU times of the cuda backend's decode step, inside the replayed CUDA graphs,
 * with CUPTI's activity API (the device host has no nsys). Issue #6: decide what to fuse.
 *
 * One process (the stack `guild run --single-process --backend cuda` drives, coordinator/backend_stack.h): a
 * synthetic prompt of --populate tokens (the LCG of `guild bench run`) fills the KV cache, 8 decode steps warm
 * up (graph capture), then --steps greedy decode steps are traced. CUPTI is enabled before the backend exists
 * so that every graph is instantiated under tracing (graph kernels are then reported per node); records that
 * start before the traced window are dropped.
 *
 * Prints (stdout): the step wall time (host, around backend_forward; median); per kernel name (demangled, without
 * its parameter list, truncated): launches per step, us per step, mean us, share of the median step; the GPU busy
 * fraction (union of kernel intervals over the step's wall time, and with memcpy/memset); the idle time before
 * the first kernel, between consecutive kernels (median, p90, sum per step) and after the last; memcpy and memset
 * per step by direction.
 *
 * On the device (no registry there; libcupti travels in the ldd closure bench/device-pack.sh copies):
 *   here:   bash bench/device-repack.sh build-prof     (carry .carry)
 *   device: export LD_LIBRARY_PATH=$PWD/.carry/lib
 *           .carry/bin/bench/guild-cuda-prof -m MODEL.gguf [--populate 512] [--steps 32] [--gpu-mem 130G]
 * Exit status: 0; 1 on a runtime failure (no GPU, no model, a CUPTI error); 2 on a usage error. */
#include "config.h"

#include <cupti.h>
#include <cuda_runtime_api.h>
#include <getopt.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "coordinator/backend_stack.h"
#include "coordinator/stack_flags.h"
#include "core/model/model.h"
#include "core/util/cli.h"
#include "core/util/log.h"

#define WHO "guild-cuda-prof"
#define WARMUP_STEPS 8
#define CUPTI_BUFFER_BYTES (8u << 20)
#define NAME_WIDTH 72

/* libstdc++'s demangler (C linkage); the CUDA libraries bring libstdc++ into the link. */
char *__cxa_demangle(const char *mangled, char *out, size_t *len, int *status);

enum { PROF_FLAGS = STACK_FLAG_THREADS | STACK_FLAG_NO_TUNING | STACK_FLAG_GPU_MEM | STACK_FLAG_GPU_EXPERTS |
                    STACK_FLAG_NO_GRAPH | STACK_FLAG_STAGER | STACK_FLAG_STAGER_THREADS };

typedef struct prof_cfg {
    const char *model;
    int32_t populate, steps, batch;
    stack_flags_t flags; /* --threads, --gpu-mem, --no-cuda-graph, ...; always single process, backend cuda */
} prof_cfg_t;

/* One activity record, as kept. */
enum { REC_KERNEL, REC_MEMCPY, REC_MEMSET };
typedef struct prof_rec {
    uint64_t start, end; /* ns, CUPTI's clock (cuptiGetTimestamp) */
    uint64_t bytes;      /* memcpy, memset */
    int32_t what;        /* kernel: index into names; memcpy: CUpti_ActivityMemcpyKind; memset: 0 */
    uint8_t kind;        /* REC_* */
    uint8_t graph;       /* launched as a node of a graph */
} prof_rec_t;

/* What the CUPTI buffer callbacks fill. A global because CUPTI's buffer callbacks carry no context pointer; they
 * may run on CUPTI's own thread, hence the lock. */
static struct {
    pthread_mutex_t mu;
    uint64_t window_start; /* records starting before this are dropped (UINT64_MAX: all) */
    prof_rec_t *recs;      /* [n] */
    size_t n, cap;
    const char **name_key; /* [n_names] CUPTI's name pointers, for the lookup */
    char **names;          /* [n_names] copies, demangled and shortened */
    int n_names, cap_names;
    size_t dropped;        /* records CUPTI dropped (buffers full) */
    bool oom;
} g_prof = {.mu = PTHREAD_MUTEX_INITIALIZER, .window_start = UINT64_MAX};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: " WHO " -m FILE [options]\n"
            "Per-kernel GPU times of the cuda backend's decode step (CUPTI), in one process.\n"
            "  -m, --model FILE        GGUF model\n"
            "      --populate N        prompt tokens filling the KV cache first (default 512)\n"
            "      --steps S           decode steps traced, after %d warm-up steps (default 32)\n"
            "      --batch N           prompt tokens per forward pass (default 512)\n",
            WARMUP_STEPS);
    stack_flags_usage(out, PROF_FLAGS, "cuda");
    fprintf(out, "  -h, --help              this help\n");
}

static int parse_args(int argc, char **argv, prof_cfg_t *c)
{
    enum { O_POP = 256, O_STEPS, O_BATCH };
    static const struct option own[] = {
        {"model", required_argument, NULL, 'm'}, {"populate", required_argument, NULL, O_POP},
        {"steps", required_argument, NULL, O_STEPS}, {"batch", required_argument, NULL, O_BATCH},
        {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0},
    };
    struct option opts[32];
    stack_flags_options(opts, sizeof opts / sizeof opts[0], own, PROF_FLAGS);
    memset(c, 0, sizeof *c);
    c->populate = 512;
    c->steps = 32;
    c->batch = 512;
    stack_flags_init(&c->flags);
    c->flags.st.backend = "cuda";
    c->flags.st.single_process = true;
    guild_err_t e = {{0}};
    int o, sf;
    long v;
    optind = 1;
    opterr = 0;
    while ((o = getopt_long(argc, argv, "m:h", opts, NULL)) != -1) {
        if ((sf = stack_flags_parse(&c->flags, o, optarg, &e)) != 0) {
            if (sf < 0)
                goto bad;
            continue;
        }
        switch (o) {
        case 'm': c->model = optarg; break;
        case O_POP: if (cli_parse_long("--populate", optarg, 1, 1 << 22, &v, &e) < 0) goto bad; c->populate = (int32_t)v; break;
        case O_STEPS: if (cli_parse_long("--steps", optarg, 1, 1 << 16, &v, &e) < 0) goto bad; c->steps = (int32_t)v; break;
        case O_BATCH: if (cli_parse_long("--batch", optarg, 1, 1 << 16, &v, &e) < 0) goto bad; c->batch = (int32_t)v; break;
        case 'h': usage(stdout); return 1;
        default:
            fprintf(stderr, WHO ": unknown option or missing value: %s\n", argv[optind - 1]);
            usage(stderr);
            return -1;
        }
    }
    if (!c->model || optind < argc) {
        fprintf(stderr, WHO ": %s\n", c->model ? "unexpected argument" : "no model: give -m FILE.gguf");
        usage(stderr);
        return -1;
    }
    if (stack_flags_check(&c->flags, PROF_FLAGS, NULL, false, &e) < 0)
        goto bad;
    return 0;
bad:
    fprintf(stderr, WHO ": %s\n", e.msg);
    return -1;
}

/* ---- collection ---- */

static int cupti_check(CUptiResult r, const char *what, guild_err_t *err)
{
    if (r == CUPTI_SUCCESS)
        return 0;
    const char *s = NULL;
    if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || !s)
        s = "unknown CUPTI error";
    return guild_err_set(err, "CUPTI: %s: %s (%d)", what, s, (int)r);
}

/* "void ns::k<(int)64>(float const*, int)" -> "ns::k<(int)64>", at most NAME_WIDTH characters. */
static char *short_name(const char *mangled)
{
    int status = -1;
    char *d = __cxa_demangle(mangled, NULL, NULL, &status);
    char *s = status == 0 && d ? d : strdup(mangled);
    if (s != d)
        free(d);
    if (!s)
        return NULL;
    size_t n = strlen(s);
    if (n && s[n - 1] == ')') { /* drop the parameter list: back to its '(' */
        int depth = 0;
        for (size_t i = n; i-- > 0;) {
            depth += s[i] == ')' ? 1 : s[i] == '(' ? -1 : 0;
            if (depth == 0) {
                s[i] = '\0';
                break;
            }
        }
    }
    if (!strncmp(s, "void ", 5)) /* templates' return type */
        memmove(s, s + 5, strlen(s + 5) + 1);
    if (strlen(s) > NAME_WIDTH)
        strcpy(s + NAME_WIDTH - 3, "...");
    return s;
}

/* The name's index, added on first sight; -1 when out of memory. Called with the lock held. */
static int32_t name_index(const char *key)
{
    if (!key)
        key = "(unnamed)";
    for (int i = 0; i < g_prof.n_names; i++)
        if (g_prof.name_key[i] == key)
            return i;
    char *s = short_name(key);
    if (!s)
        return -1;
    for (int i = 0; i < g_prof.n_names; i++) /* the same kernel under another pointer (another module) */
        if (!strcmp(g_prof.names[i], s)) {
            free(s);
            return i;
        }
    if (g_prof.n_names == g_prof.cap_names) {
        const int cap = g_prof.cap_names ? 2 * g_prof.cap_names : 64;
        const char **k = realloc(g_prof.name_key, (size_t)cap * sizeof *k);
        if (k)
            g_prof.name_key = k;
        char **nm = realloc(g_prof.names, (size_t)cap * sizeof *nm);
        if (nm)
            g_prof.names = nm;
        if (!k || !nm) {
            free(s);
            return -1;
        }
        g_prof.cap_names = cap;
    }
    g_prof.name_key[g_prof.n_names] = key;
    g_prof.names[g_prof.n_names] = s;
    return g_prof.n_names++;
}

static void keep(const prof_rec_t *r)
{
    if (r->start < g_prof.window_start || g_prof.oom)
        return;
    if (g_prof.n == g_prof.cap) {
        const size_t cap = g_prof.cap ? 2 * g_prof.cap : 65536;
        prof_rec_t *p = realloc(g_prof.recs, cap * sizeof *p);
        if (!p) {
            g_prof.oom = true;
            return;
        }
        g_prof.recs = p;
        g_prof.cap = cap;
    }
    g_prof.recs[g_prof.n++] = *r;
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = aligned_alloc(8, CUPTI_BUFFER_BYTES); /* CUPTI wants 8-byte alignment */
    *size = *buffer ? CUPTI_BUFFER_BYTES : 0;
    *max_records = 0; /* as many as fit */
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid)
{
    pthread_mutex_lock(&g_prof.mu);
    CUpti_Activity *a = NULL;
    while (cuptiActivityGetNextRecord(buffer, valid, &a) == CUPTI_SUCCESS) {
        prof_rec_t r = {0};
        switch (a->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
            const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)a;
            if (k->start < g_prof.window_start)
                continue;
            r = (prof_rec_t){.start = k->start, .end = k->end, .kind = REC_KERNEL, .graph = k->graphId != 0,
                             .what = name_index(k->name)};
            if (r.what < 0)
                g_prof.oom = true;
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
            const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)a;
            r = (prof_rec_t){.start = m->start, .end = m->end, .bytes = m->bytes, .kind = REC_MEMCPY,
                             .graph = m->graphId != 0, .what = m->copyKind};
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
            const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)a;
            r = (prof_rec_t){.start = m->start, .end = m->end, .bytes = m->bytes, .kind = REC_MEMSET,
                             .graph = m->graphId != 0};
            break;
        }
        default: continue;
        }
        keep(&r);
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS)
        g_prof.dropped += dropped;
    pthread_mutex_unlock(&g_prof.mu);
    free(buffer);
}

static const CUpti_ActivityKind g_kinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                             CUPTI_ACTIVITY_KIND_MEMSET};

/* Registers the buffers and enables the kinds; before any CUDA context exists, so that every graph the backend
 * instantiates later is traced per node. */
static int prof_start(guild_err_t *err)
{
    uint32_t version = 0;
    if (cupti_check(cuptiGetVersion(&version), "cuptiGetVersion", err) < 0)
        return -1;
    if (version != CUPTI_API_VERSION)
        fprintf(stderr, WHO ": note: libcupti API version %u, built against %u\n", version, CUPTI_API_VERSION);
    if (cupti_check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed),
                    "cuptiActivityRegisterCallbacks", err) < 0)
        return -1;
    for (size_t i = 0; i < sizeof g_kinds / sizeof g_kinds[0]; i++)
        if (cupti_check(cuptiActivityEnable(g_kinds[i]), "cuptiActivityEnable", err) < 0)
            return -1;
    return 0;
}

static int prof_now(uint64_t *t, guild_err_t *err)
{
    return cupti_check(cuptiGetTimestamp(t), "cuptiGetTimestamp", err);
}

/* Delivers every record still buffered and stops tracing. */
static int prof_stop(guild_err_t *err)
{
    if (cupti_check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll", err) < 0)
        return -1;
    for (size_t i = 0; i < sizeof g_kinds / sizeof g_kinds[0]; i++)
        cuptiActivityDisable(g_kinds[i]);
    return 0;
}

static void prof_free(void)
{
    for (int i = 0; i < g_prof.n_names; i++)
        free(g_prof.names[i]);
    free(g_prof.names);
    free(g_prof.name_key);
    free(g_prof.recs);
}

/* ---- analysis ---- */

typedef struct kstat {
    uint64_t count, ns, graph;
} kstat_t;

static int cmp_rec_start(const void *a, const void *b)
{
    const prof_rec_t *x = a, *y = b;
    return (x->start > y->start) - (x->start < y->start);
}

static int cmp_u64(const void *a, const void *b)
{
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static double pct_u64(uint64_t *v, size_t n, double p)
{
    if (!n)
        return 0;
    qsort(v, n, sizeof *v, cmp_u64);
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return (double)v[i < n ? i : n - 1];
}

static const char *copy_kind(int32_t k)
{
    switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return "HtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "PtoP";
    default: return "other";
    }
}

/* The length of the union of the intervals r[0..n) (sorted by start); with gaps, appends the idle time before each
 * interval after the first (0 when it overlaps or touches what came before). */
static uint64_t union_ns(const prof_rec_t *r, size_t n, uint64_t *gaps, size_t *n_gaps)
{
    uint64_t busy = 0, cur_s = 0, cur_e = 0;
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || r[i].start > cur_e) {
            if (i > 0) {
                busy += cur_e - cur_s;
                if (gaps)
                    gaps[(*n_gaps)++] = r[i].start - cur_e;
            }
            cur_s = r[i].start;
            cur_e = r[i].end;
        } else {
            if (gaps)
                gaps[(*n_gaps)++] = 0; /* overlapping or back to back */
            if (r[i].end > cur_e)
                cur_e = r[i].end;
        }
    }
    return n ? busy + (cur_e - cur_s) : 0;
}

/* Prints the report of S traced steps [t0[s], t1[s]) from the kept records. */
static int report(const prof_cfg_t *c, const uint64_t *t0, const uint64_t *t1, guild_err_t *err)
{
    const int32_t S = c->steps;
    prof_rec_t *r = g_prof.recs;
    const size_t n = g_prof.n;
    qsort(r, n, sizeof *r, cmp_rec_start);
    kstat_t *ks = calloc((size_t)g_prof.n_names + 1, sizeof *ks);
    prof_rec_t *step_k = malloc((n + 1) * sizeof *step_k), *step_all = malloc((n + 1) * sizeof *step_all);
    uint64_t *gaps = malloc((n + 1) * sizeof *gaps);
    double *wall = malloc((size_t)S * sizeof *wall), *busy_k = malloc((size_t)S * sizeof *busy_k),
           *busy_all = malloc((size_t)S * sizeof *busy_all), *head = malloc((size_t)S * sizeof *head),
           *tail = malloc((size_t)S * sizeof *tail), *gap_sum = malloc((size_t)S * sizeof *gap_sum);
    int rc = -1;
    if (!ks || !step_k || !step_all || !gaps || !wall || !busy_k || !busy_all || !head || !tail || !gap_sum) {
        guild_err_set(err, "out of memory for the report");
        goto out;
    }
    struct { uint64_t count, bytes, ns; } cp[16] = {{0}}, ms = {0};
    size_t n_gaps = 0, outside = 0, graph_kernels = 0, kernels = 0;
    double wall_sum = 0;
    size_t i = 0;
    for (int32_t s = 0; s < S; s++) {
        size_t nk = 0, na = 0;
        for (; i < n && r[i].start < t0[s]; i++)
            outside++; /* between steps: the host's argmax, nothing of ours */
        for (; i < n && r[i].start < t1[s]; i++) {
            const prof_rec_t *x = &r[i];
            step_all[na++] = *x;
            if (x->kind == REC_KERNEL) {
                step_k[nk++] = *x;
                kstat_t *k = &ks[x->what];
                k->count++;
                k->ns += x->end - x->start;
                k->graph += x->graph;
                graph_kernels += x->graph;
                kernels++;
            } else if (x->kind == REC_MEMCPY) {
                const int32_t kk = x->what >= 0 && x->what < 16 ? x->what : 0;
                cp[kk].count++, cp[kk].bytes += x->bytes, cp[kk].ns += x->end - x->start;
            } else {
                ms.count++, ms.bytes += x->bytes, ms.ns += x->end - x->start;
            }
        }
        const double w = (double)(t1[s] - t0[s]);
        wall[s] = w;
        wall_sum += w;
        const size_t g0 = n_gaps;
        const uint64_t bk = union_ns(step_k, nk, gaps, &n_gaps);
        uint64_t gs = 0;
        for (size_t g = g0; g < n_gaps; g++)
            gs += gaps[g];
        gap_sum[s] = (double)gs;
        busy_k[s] = w > 0 ? (double)bk / w : 0;
        busy_all[s] = w > 0 ? (double)union_ns(step_all, na, NULL, NULL) / w : 0;
        uint64_t last_end = 0;
        for (size_t k = 0; k < nk; k++)
            last_end = step_k[k].end > last_end ? step_k[k].end : last_end;
        head[s] = nk ? (double)(step_k[0].start - t0[s]) : w;
        tail[s] = nk && last_end < t1[s] ? (double)(t1[s] - last_end) : 0;
    }
    outside += n - i;
    const double wall_med = bench_median(wall, S);

    printf("# " WHO ": %s; populate %d, %d traced decode steps after %d warm-up, threads %d, CUDA graphs %s\n",
           c->model, c->populate, S, WARMUP_STEPS, c->flags.st.n_threads, c->flags.st.pipe.no_graph ? "off" : "on");
    printf("step wall (host, around backend_forward): median %.1f us, mean %.1f us\n", wall_med / 1e3,
           wall_sum / S / 1e3);
    printf("kernels per step %.1f (%.1f from graphs); GPU busy: kernels %.1f%% of the wall (median), with "
           "memcpy/memset %.1f%%\n",
           (double)kernels / S, (double)graph_kernels / S, 100 * bench_median(busy_k, S),
           100 * bench_median(busy_all, S));
    const double gap_med = pct_u64(gaps, n_gaps, 0.5), gap_p90 = pct_u64(gaps, n_gaps, 0.9);
    printf("idle: before the first kernel %.1f us, between kernels %.1f us per step (each gap: median %.2f us, "
           "p90 %.2f us), after the last %.1f us (medians over steps)\n",
           bench_median(head, S) / 1e3, bench_median(gap_sum, S) / 1e3, gap_med / 1e3, gap_p90 / 1e3,
           bench_median(tail, S) / 1e3);
    if (g_prof.dropped || outside || g_prof.oom)
        printf("note: %zu records dropped by CUPTI, %zu outside the steps%s\n", g_prof.dropped, outside,
               g_prof.oom ? ", out of memory while keeping records (partial)" : "");

    /* kernels by total time, descending (selection: a few dozen names) */
    printf("\n%-*s %8s %10s %9s %7s %6s\n", NAME_WIDTH, "kernel", "n/step", "us/step", "mean us", "share", "graph");
    bool *done = calloc((size_t)g_prof.n_names + 1, 1);
    if (!done) {
        guild_err_set(err, "out of memory for the report");
        goto out;
    }
    for (;;) {
        int best = -1;
        for (int k = 0; k < g_prof.n_names; k++)
            if (!done[k] && ks[k].count && (best < 0 || ks[k].ns > ks[best].ns))
                best = k;
        if (best < 0)
            break;
        done[best] = true;
        const double per_step = (double)ks[best].ns / S;
        printf("%-*s %8.2f %10.1f %9.2f %6.1f%% %5.0f%%\n", NAME_WIDTH, g_prof.names[best],
               (double)ks[best].count / S, per_step / 1e3, (double)ks[best].ns / (double)ks[best].count / 1e3,
               wall_med > 0 ? 100 * per_step / wall_med : 0, 100.0 * (double)ks[best].graph / (double)ks[best].count);
    }
    free(done);

    printf("\n%-10s %8s %12s %10s\n", "copies", "n/step", "bytes/step", "us/step");
    for (int k = 0; k < 16; k++)
        if (cp[k].count)
            printf("memcpy %-4s %7.2f %12.0f %10.1f\n", copy_kind(k), (double)cp[k].count / S,
                   (double)cp[k].bytes / S, (double)cp[k].ns / S / 1e3);
    if (ms.count)
        printf("memset      %7.2f %12.0f %10.1f\n", (double)ms.count / S, (double)ms.bytes / S,
               (double)ms.ns / S / 1e3);
    rc = 0;
out:
    free(ks);
    free(step_k);
    free(step_all);
    free(gaps);
    free(wall);
    free(busy_k);
    free(busy_all);
    free(head);
    free(tail);
    free(gap_sum);
    return rc;
}

/* ---- driving the model ---- */

static int32_t argmax(const float *x, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

int main(int argc, char **argv)
{
    prof_cfg_t c;
    const int pr = parse_args(argc, argv, &c);
    if (pr)
        return pr > 0 ? 0 : 2;
    guild_log_init(WHO, GUILD_LOG_WARN);
    c.flags.st.pipe.log_level = guild_log_level();
    guild_err_t err = {{0}};
    model_t *m = NULL;
    backend_stack_t *stack = NULL;
    float *logits = NULL;
    int32_t *prompt = NULL, *pos = NULL;
    uint64_t *t0 = NULL, *t1 = NULL;
    int rc = 1;

    int n_dev = 0;
    const cudaError_t ce = cudaGetDeviceCount(&n_dev);
    if (ce != cudaSuccess || n_dev < 1) {
        guild_err_set(&err, "no CUDA device: %s", ce != cudaSuccess ? cudaGetErrorString(ce) : "none found");
        goto out;
    }
    if (prof_start(&err) < 0)
        goto out;
    if (model_new(&m, c.model, &err) < 0)
        goto out;
    if (stack_flags_tune(&c.flags, c.model, WHO, &err) < 0)
        goto out;
    const int32_t V = model_config(m)->n_vocab;
    c.flags.st.n_ctx = c.populate + WARMUP_STEPS + c.steps;
    c.flags.st.n_batch = c.batch < c.populate ? c.batch : c.populate;
    if (backend_stack_open(&stack, &c.flags.st, m, c.model, &err) < 0)
        goto out;
    backend_t *be = backend_stack_backend(stack);
    logits = malloc((size_t)V * sizeof *logits);
    prompt = malloc((size_t)c.populate * sizeof *prompt);
    pos = malloc((size_t)c.flags.st.n_batch * sizeof *pos);
    t0 = malloc((size_t)c.steps * sizeof *t0);
    t1 = malloc((size_t)c.steps * sizeof *t1);
    if (!logits || !prompt || !pos || !t0 || !t1) {
        guild_err_set(&err, "out of memory");
        goto out;
    }
    uint64_t lcg = 0x9e3779b97f4a7c15ull; /* guild bench run's prompt */
    for (int32_t i = 0; i < c.populate; i++) {
        lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
        prompt[i] = (int32_t)((lcg >> 33) % (uint64_t)V);
    }
    fprintf(stderr, WHO ": prefill %d tokens, %d warm-up steps, %d traced steps\n", c.populate, WARMUP_STEPS,
            c.steps);
    const double tp = bench_now();
    for (int32_t p = 0; p < c.populate; p += c.flags.st.n_batch) {
        const int32_t nb = c.populate - p < c.flags.st.n_batch ? c.populate - p : c.flags.st.n_batch, last = nb - 1;
        for (int32_t i = 0; i < nb; i++)
            pos[i] = p + i;
        if (backend_forward(be, nb, prompt + p, pos, p + nb == c.populate ? 1 : 0, &last, logits, &err) < 0) {
            guild_err_prefix(&err, "prefill at %d: ", p);
            goto out;
        }
    }
    fprintf(stderr, WHO ": prefill %.1f tok/s\n", c.populate / (bench_now() - tp));
    int32_t tok = argmax(logits, V), row = 0, p = c.populate;
    for (int32_t g = 0; g < WARMUP_STEPS; g++, p++) {
        if (backend_forward(be, 1, &tok, &p, 1, &row, logits, &err) < 0) {
            guild_err_prefix(&err, "warm-up step %d: ", g);
            goto out;
        }
        tok = argmax(logits, V);
    }
    backend_stats_t bs0 = {0}, bs1 = {0};
    const bool have_bs = backend_stats(be, &bs0) == 0;
    if (prof_now(&t0[0], &err) < 0)
        goto out;
    pthread_mutex_lock(&g_prof.mu);
    g_prof.window_start = t0[0];
    pthread_mutex_unlock(&g_prof.mu);
    for (int32_t g = 0; g < c.steps; g++, p++) {
        if (prof_now(&t0[g], &err) < 0)
            goto out;
        if (backend_forward(be, 1, &tok, &p, 1, &row, logits, &err) < 0) {
            guild_err_prefix(&err, "decode step %d: ", g);
            goto out;
        }
        if (prof_now(&t1[g], &err) < 0)
            goto out;
        tok = argmax(logits, V);
    }
    if (prof_stop(&err) < 0)
        goto out;
    bench_print_provenance(stdout, argc, argv);
    if (report(&c, t0, t1, &err) < 0)
        goto out;
    if (have_bs && backend_stats(be, &bs1) == 0)
        printf("\nbackend: %u graphs captured, %llu of %d traced steps replayed a graph; device wait for CPU "
               "experts %.1f us per step over %llu exchanges; %d layers' experts on the GPU\n",
               bs1.graphs, (unsigned long long)(bs1.graph_steps - bs0.graph_steps), c.steps,
               (double)(bs1.wait_ns - bs0.wait_ns) / c.steps / 1e3,
               (unsigned long long)(bs1.exchanges - bs0.exchanges), bs1.gpu_expert_layers);
    rc = 0;
out:
    if (rc)
        fprintf(stderr, WHO ": %s\n", err.msg);
    backend_stack_close(&stack);
    model_destroy(&m);
    free(logits);
    free(prompt);
    free(pos);
    free(t0);
    free(t1);
    prof_free();
    return rc;
}
