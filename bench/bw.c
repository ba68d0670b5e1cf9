#include "config.h"

#include "bench/bw.h"

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/topo/topo.h"

typedef struct bw_thread {
    struct bw_shared *sh;
    int index;
    int cpu;
    const uint64_t *data; /* [words] this thread's slice */
    size_t words;
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
        t->sink ^= bench_read(t->data, t->words * sizeof(uint64_t));
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
    size_t slice;     /* bytes of each thread's slice (a multiple of 4096) */
    int *cpus;        /* [n_cpus] CPU of each thread (-1: any) */
    uint64_t **data;  /* [n_cpus] each thread's slice, in its node's memory */
};

int bench_bw_probe_new(bench_bw_probe_t **out, const int *cpus, const int *nodes, int n_cpus, size_t bytes,
                       guild_err_t *err)
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
    p->cpus = calloc((size_t)n_cpus, sizeof *p->cpus);
    p->data = calloc((size_t)n_cpus, sizeof *p->data);
    if (!p->cpus || !p->data) {
        guild_err_set(err, "bandwidth probe: out of memory");
        goto fail;
    }
    for (int i = 0; i < n_cpus; i++) {
        p->cpus[i] = cpus ? cpus[i] : -1;
        p->data[i] = topo_alloc(slice, nodes ? nodes[i] : -1, err);
        if (!p->data[i]) {
            guild_err_prefix(err, "bandwidth probe: ");
            goto fail;
        }
        /* every byte written once, so that each page exists (on its node) before the timed passes */
        memset(p->data[i], (int)(0x11 * (i + 1)), slice);
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
    for (int i = 0; p->data && i < p->n_cpus; i++)
        topo_free(p->data[i], p->data[i] ? p->slice : 0);
    free(p->data);
    free(p->cpus);
    free(p);
    *pp = NULL;
}

size_t bench_bw_probe_bytes(const bench_bw_probe_t *p)
{
    return p->slice * (size_t)p->n_cpus;
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
    for (int i = 0; i < n_cpus; i++)
        th[i] = (bw_thread_t){.sh = &sh, .index = i, .cpu = p->cpus[i], .data = p->data[i],
                              .words = p->slice / sizeof(uint64_t)};
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
        gbps[k - 1] = (double)p->slice * n_cpus / (sh.t1[k] - sh.t0[k]) / 1e9;
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
