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

int bench_read_bw(const int *cpus, const int *nodes, int n_cpus, size_t bytes, int passes, bench_bw_t *out,
                  guild_err_t *err)
{
    int rc = -1;
    int total = passes + 1;
    size_t slice = (bytes / (size_t)n_cpus) & ~(size_t)4095;
    bw_shared_t sh = {.passes = total, .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    bw_thread_t *th = calloc((size_t)n_cpus, sizeof *th);
    pthread_t *tid = calloc((size_t)n_cpus, sizeof *tid);
    sh.t0 = calloc((size_t)total, sizeof *sh.t0);
    sh.t1 = calloc((size_t)total, sizeof *sh.t1);
    double *gbps = calloc((size_t)total, sizeof *gbps);
    int started = 0;
    if (!th || !tid || !sh.t0 || !sh.t1 || !gbps || slice == 0) {
        guild_err_set(err, "bandwidth probe: out of memory");
        goto fail_alloc;
    }
    for (int i = 0; i < n_cpus; i++) {
        uint64_t *p = topo_alloc(slice, nodes ? nodes[i] : -1, err);
        if (!p) {
            guild_err_prefix(err, "bandwidth probe: ");
            goto fail_alloc;
        }
        /* every byte written once, so that each page exists (on its node) before the timed passes */
        memset(p, (int)(0x11 * (i + 1)), slice);
        th[i] = (bw_thread_t){.sh = &sh, .index = i, .cpu = cpus ? cpus[i] : -1, .data = p,
                              .words = slice / sizeof(uint64_t)};
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
    for (int p = 1; p < total; p++)
        gbps[p - 1] = (double)slice * n_cpus / (sh.t1[p] - sh.t0[p]) / 1e9;
    qsort(gbps, (size_t)passes, sizeof *gbps, cmp_double);
    out->passes = passes;
    out->median_gbps = passes % 2 ? gbps[passes / 2] : 0.5 * (gbps[passes / 2 - 1] + gbps[passes / 2]);
    out->best_gbps = gbps[passes - 1];
    rc = 0;
fail_threads:
    pthread_barrier_destroy(&sh.start);
    pthread_barrier_destroy(&sh.end);
fail_alloc:
    if (th)
        for (int i = 0; i < n_cpus; i++)
            topo_free((void *)th[i].data, th[i].data ? slice : 0);
    free(th);
    free(tid);
    free(sh.t0);
    free(sh.t1);
    free(gbps);
    return rc;
}

int bench_read_bw_machine(size_t bytes, int passes, bench_bw_t *out, guild_err_t *err)
{
    static int cpus[BENCH_BW_MAX_CPUS], nodes[BENCH_BW_MAX_CPUS];
    int n = 0;
    for (int nd = 0; nd < topo_node_count() && n < BENCH_BW_MAX_CPUS; nd++) {
        const int k = topo_node_cpus(nd, cpus + n, BENCH_BW_MAX_CPUS - n);
        for (int i = 0; i < k; i++)
            nodes[n + i] = nd;
        n += k;
    }
    if (n < 1)
        return guild_err_set(err, "DRAM read probe: no CPU found");
    return bench_read_bw(cpus, nodes, n, bytes, passes, out, err);
}
