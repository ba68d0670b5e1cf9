#include "config.h"

#include "bench/bw.h"

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/topo/topo.h"
#include "ipc/arena.h"

typedef struct bw_thread {
    struct bw_shared *sh;
    int index;
    int cpu;
    const uint64_t *data; /* [words] this thread's slice (streamed) */
    size_t words;
    /* pieces (bench_bw_shape_t.piece): the node's memory from group, pieces of `piece` bytes visited in the order
     * k * stride % n_pieces, this thread reading `share` bytes at `offset` in each */
    const uint8_t *group;
    size_t piece, share, offset, n_pieces, stride;
    uint64_t (*read)(const void *p, size_t n); /* bench_read, or bench_read_ahead (bench_bw_shape_t.ahead) */
    uint64_t sink;
} bw_thread_t;

typedef struct bw_shared {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int state; /* under mu: 0 wait, 1 go, -1 abort (not every thread could be started) */
    pthread_barrier_t start, end;
    int passes; /* warm-up included */
    double *t0, *t1; /* [passes] */
} bw_shared_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *bw_main(void *argp)
{
    bw_thread_t *t = argp;
    bw_shared_t *sh = t->sh;
    if (t->cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(t->cpu, &set);
        pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    }
    pthread_mutex_lock(&sh->mu);
    while (sh->state == 0)
        pthread_cond_wait(&sh->cv, &sh->mu);
    int go = sh->state > 0;
    pthread_mutex_unlock(&sh->mu);
    if (!go)
        return NULL;
    for (int pass = 0; pass < sh->passes; pass++) {
        pthread_barrier_wait(&sh->start);
        if (t->index == 0)
            sh->t0[pass] = now_s();
        if (t->piece) {
            for (size_t k = 0, j = 0; k < t->n_pieces; k++, j = (j + t->stride) % t->n_pieces)
                t->sink ^= t->read(t->group + j * t->piece + t->offset, t->share);
        } else {
            t->sink ^= t->read(t->data, t->words * sizeof(uint64_t));
        }
        pthread_barrier_wait(&sh->end);
        if (t->index == 0)
            sh->t1[pass] = now_s();
    }
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

struct bench_bw_probe {
    int n_cpus;
    size_t slice;       /* bytes of each thread's slice (a multiple of 4096) */
    int *cpus;          /* [n_cpus] CPU of each thread (-1: any) */
    int *nodes;         /* [n_cpus] the node of each thread's slice (-1: any) */
    uint64_t **data;    /* [n_cpus] each thread's slice, in its node's memory */
    guild_arena_t *arena; /* shared: the slices, one after another; NULL: each slice mapped on its own */
    size_t piece;       /* bench_bw_shape_t.piece (a multiple of 256), 0: streamed slices */
    bool ahead;         /* bench_bw_shape_t.ahead */
    size_t pass_bytes;  /* bytes a pass reads */
};

/* gcd(a, b) */
static size_t gcd(size_t a, size_t b)
{
    while (b) {
        const size_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Thread i's part of a pass with pieces: its node's threads (the run of equal nodes around i) share their slices,
 * which lie one after another; the order strides through the pieces by about 0.62 of their count (coprime with
 * it, so that every piece is read once), away from both neighbours of the last piece read. */
static void piece_plan(const bench_bw_probe_t *p, int i, bw_thread_t *t)
{
    int lo = i, hi = i + 1;
    while (lo > 0 && p->nodes[lo - 1] == p->nodes[i])
        lo--;
    while (hi < p->n_cpus && p->nodes[hi] == p->nodes[i])
        hi++;
    const size_t g = (size_t)(hi - lo);
    t->group = (const uint8_t *)p->data[lo];
    t->piece = p->piece;
    t->n_pieces = p->slice * g / p->piece;
    t->share = (p->piece / g) & ~(size_t)255;
    t->offset = t->share * (size_t)(i - lo);
    t->stride = t->n_pieces > 2 ? (size_t)((double)t->n_pieces * 0.618) : 1;
    while (t->n_pieces > 1 && gcd(t->stride, t->n_pieces) != 1)
        t->stride++;
}

int bench_bw_probe_new(bench_bw_probe_t **out, const int *cpus, const int *nodes, int n_cpus, size_t bytes,
                       guild_err_t *err)
{
    return bench_bw_probe_new_as(out, cpus, nodes, n_cpus, bytes, &(bench_bw_shape_t){0}, err);
}

int bench_bw_probe_new_as(bench_bw_probe_t **out, const int *cpus, const int *nodes, int n_cpus, size_t bytes,
                          const bench_bw_shape_t *shape, guild_err_t *err)
{
    *out = NULL;
    bench_bw_probe_t *p = calloc(1, sizeof *p);
    const size_t slice = n_cpus > 0 ? (bytes / (size_t)n_cpus) & ~(size_t)4095 : 0;
    if (!p || n_cpus < 1 || slice == 0) {
        free(p);
        return guild_err_set(err, "bandwidth probe: %s", p ? "no CPU, or fewer bytes than a page a CPU" :
                                                               "out of memory");
    }
    p->n_cpus = n_cpus;
    p->slice = slice;
    p->piece = shape->piece & ~(size_t)255;
    p->ahead = shape->ahead;
    p->cpus = calloc((size_t)n_cpus, sizeof *p->cpus);
    p->nodes = calloc((size_t)n_cpus, sizeof *p->nodes);
    p->data = calloc((size_t)n_cpus, sizeof *p->data);
    if (!p->cpus || !p->nodes || !p->data) {
        guild_err_set(err, "bandwidth probe: out of memory");
        goto fail;
    }
    if (shape->piece && !shape->shared) { /* a node's slices lie one after another only in the arena */
        guild_err_set(err, "bandwidth probe: pieces read from separate mappings");
        goto fail;
    }
    if (shape->piece && (p->piece > slice || p->piece < 256 * (size_t)n_cpus)) {
        guild_err_set(err, "bandwidth probe: pieces of %zu bytes for %d threads of %zu bytes each (a piece must "
                      "hold 256 bytes a thread and fit a slice)", shape->piece, n_cpus, slice);
        goto fail;
    }
    uint8_t *all = NULL;
    if (shape->shared) {
        /* transparent huge pages first (a fallback to 4 KiB pages where shared memory gets none), lazily: each
         * slice's pages come from its node once bound below */
        const guild_arena_request_t req = {GUILD_ARENA_KIND_TEST, 0, (uint64_t)slice * (uint64_t)n_cpus};
        const guild_arena_opts_t ao = {.pages = GUILD_ARENA_PAGES_THP, .lazy = 1};
        if (!(p->arena = guild_arena_create(&req, 1, &ao, err)) ||
            !(all = guild_arena_region(p->arena, GUILD_ARENA_KIND_TEST, 0, NULL))) {
            if (p->arena)
                guild_err_set(err, "no region in the probe's arena");
            guild_err_prefix(err, "bandwidth probe: ");
            goto fail;
        }
    }
    for (int i = 0; i < n_cpus; i++) {
        p->cpus[i] = cpus ? cpus[i] : -1;
        p->nodes[i] = nodes ? nodes[i] : -1;
        if (all) {
            p->data[i] = (uint64_t *)(all + (size_t)i * slice);
            if (topo_bind(p->data[i], slice, p->nodes[i], err) < 0) {
                guild_err_prefix(err, "bandwidth probe: ");
                goto fail;
            }
        } else if (!(p->data[i] = topo_alloc(slice, p->nodes[i], err))) {
            guild_err_prefix(err, "bandwidth probe: ");
            goto fail;
        }
        /* every byte written once, so that each page exists (on its node) before the timed passes */
        memset(p->data[i], (int)(0x11 * (i + 1)), slice);
    }
    p->pass_bytes = 0;
    for (int i = 0; i < n_cpus; i++) {
        bw_thread_t t = {0};
        if (p->piece)
            piece_plan(p, i, &t);
        p->pass_bytes += p->piece ? t.n_pieces * t.share : slice;
    }
    *out = p;
    return 0;
fail:
    bench_bw_probe_destroy(&p);
    return -1;
}

void bench_bw_probe_destroy(bench_bw_probe_t **pp)
{
    bench_bw_probe_t *p = *pp;
    if (!p)
        return;
    for (int i = 0; !p->arena && p->data && i < p->n_cpus; i++)
        topo_free(p->data[i], p->data[i] ? p->slice : 0);
    guild_arena_destroy(&p->arena);
    free(p->data);
    free(p->nodes);
    free(p->cpus);
    free(p);
    *pp = NULL;
}

size_t bench_bw_probe_bytes(const bench_bw_probe_t *p)
{
    return p->pass_bytes;
}

int bench_bw_probe_threads(const bench_bw_probe_t *p)
{
    return p->n_cpus;
}

const char *bench_bw_probe_pages(const bench_bw_probe_t *p)
{
    return p->arena ? guild_arena_pages_name(guild_arena_pages(p->arena)) : "anon";
}

int bench_bw_probe_run(bench_bw_probe_t *p, int passes, bench_bw_t *out, guild_err_t *err)
{
    if (passes < 1)
        return guild_err_set(err, "bandwidth probe: %d passes", passes);
    const int n_cpus = p->n_cpus, total = passes + 1;
    int rc = -1, started = 0;
    bw_shared_t sh = {.passes = total, .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    bw_thread_t *th = calloc((size_t)n_cpus, sizeof *th);
    pthread_t *tid = calloc((size_t)n_cpus, sizeof *tid);
    sh.t0 = calloc((size_t)total, sizeof *sh.t0);
    sh.t1 = calloc((size_t)total, sizeof *sh.t1);
    double *gbps = calloc((size_t)total, sizeof *gbps);
    if (!th || !tid || !sh.t0 || !sh.t1 || !gbps) {
        guild_err_set(err, "bandwidth probe: out of memory");
        goto fail_alloc;
    }
    for (int i = 0; i < n_cpus; i++) {
        th[i] = (bw_thread_t){.sh = &sh, .index = i, .cpu = p->cpus[i], .data = p->data[i],
                              .words = p->slice / sizeof(uint64_t), .read = p->ahead ? bench_read_ahead : bench_read};
        if (p->piece)
            piece_plan(p, i, &th[i]);
    }
    pthread_barrier_init(&sh.start, NULL, (unsigned)n_cpus);
    pthread_barrier_init(&sh.end, NULL, (unsigned)n_cpus);
    for (; started < n_cpus; started++)
        if (pthread_create(&tid[started], NULL, bw_main, &th[started]) != 0) {
            guild_err_set(err, "bandwidth probe: cannot start thread %d", started);
            break;
        }
    pthread_mutex_lock(&sh.mu);
    sh.state = started == n_cpus ? 1 : -1;
    pthread_cond_broadcast(&sh.cv);
    pthread_mutex_unlock(&sh.mu);
    for (int i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    if (started < n_cpus)
        goto fail_threads;
    for (int k = 1; k < total; k++)
        gbps[k - 1] = (double)p->pass_bytes / (sh.t1[k] - sh.t0[k]) / 1e9;
    qsort(gbps, (size_t)passes, sizeof *gbps, cmp_double);
    out->passes = passes;
    out->median_gbps = passes % 2 ? gbps[passes / 2] : 0.5 * (gbps[passes / 2 - 1] + gbps[passes / 2]);
    out->best_gbps = gbps[passes - 1];
    rc = 0;
fail_threads:
    pthread_barrier_destroy(&sh.start);
    pthread_barrier_destroy(&sh.end);
fail_alloc:
    free(th);
    free(tid);
    free(sh.t0);
    free(sh.t1);
    free(gbps);
    return rc;
}

int bench_read_bw(const int *cpus, const int *nodes, int n_cpus, size_t bytes, int passes, bench_bw_t *out,
                  guild_err_t *err)
{
    bench_bw_probe_t *p;
    if (bench_bw_probe_new(&p, cpus, nodes, n_cpus, bytes, err) < 0)
        return -1;
    const int rc = bench_bw_probe_run(p, passes, out, err);
    bench_bw_probe_destroy(&p);
    return rc;
}

/* Every CPU of every NUMA node, each with its node (the machine-wide probe's threads). 0 when none is found. */
static int machine_cpus(int *cpus, int *nodes)
{
    int n = 0;
    for (int nd = 0; nd < topo_node_count() && n < BENCH_BW_MAX_CPUS; nd++) {
        const int k = topo_node_cpus(nd, cpus + n, BENCH_BW_MAX_CPUS - n);
        for (int i = 0; i < k; i++)
            nodes[n + i] = nd;
        n += k;
    }
    return n;
}

int bench_read_bw_machine(size_t bytes, int passes, bench_bw_t *out, guild_err_t *err)
{
    static int cpus[BENCH_BW_MAX_CPUS], nodes[BENCH_BW_MAX_CPUS];
    const int n = machine_cpus(cpus, nodes);
    if (n < 1)
        return guild_err_set(err, "DRAM read probe: no CPU found");
    return bench_read_bw(cpus, nodes, n, bytes, passes, out, err);
}

int bench_bw_probe_new_machine(bench_bw_probe_t **out, size_t bytes, guild_err_t *err)
{
    static int cpus[BENCH_BW_MAX_CPUS], nodes[BENCH_BW_MAX_CPUS];
    *out = NULL;
    const int n = machine_cpus(cpus, nodes);
    if (n < 1)
        return guild_err_set(err, "DRAM read probe: no CPU found");
    return bench_bw_probe_new(out, cpus, nodes, n, bytes, err);
}
