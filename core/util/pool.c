#include "config.h"

#include "core/util/pool.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

/* Workers spin this many rounds on the generation counter before sleeping: a decode step runs hundreds of
 * short jobs back to back, and a futex wake-up per job would cost more than the jobs themselves. Short enough
 * that idle workers do not steal a shared machine's cores. */
#define POOL_SPIN_ROUNDS 4000
/* The rounds when the pool's threads share cores (guild_pool_shared): a waiter that spins then holds the core the
 * thread it waits for needs, so it gives the core up almost at once. */
#define POOL_SPIN_ROUNDS_SHARED 64

struct guild_pool {
    int n_threads;               /* the caller's thread included */
    pthread_t *threads;          /* [n_threads - 1] */
    struct pool_arg *args;       /* [n_threads - 1] */
    int n_started;               /* workers actually running (for unwinding) */
    bool shared;                 /* more threads than the cores they may run on */
    int spin_rounds;             /* POOL_SPIN_ROUNDS, or POOL_SPIN_ROUNDS_SHARED when shared */
    _Atomic uint64_t spin_ns;    /* guild_pool_set_spin_ns: waits spin this long instead (0: spin_rounds) */
    _Atomic bool lock_wake;      /* guild_pool_set_lock_wake: the hand-offs through the mutex, as before */
    _Atomic bool runner_asleep;  /* the runner waits on `idle` (set under mu before its last check of busy) */
    pthread_mutex_t mu;
    pthread_cond_t wake;         /* workers wait here for a new generation */
    pthread_cond_t idle;         /* the runner waits here for the last worker */
    _Atomic uint64_t generation; /* bumped (under mu) for each job */
    bool stop;                   /* under mu */
    /* the current job, written under mu before the generation is bumped */
    guild_pool_fn fn;
    void *ctx;
    int64_t n_tasks;
    _Atomic int64_t next; /* next task to hand out */
    _Atomic int busy;     /* workers that have not finished the current job */
    _Atomic uint64_t sleeps; /* waits that went past their spins to the condition variable (guild_pool_sleeps) */
};

struct pool_arg {
    guild_pool_t *pool;
    int thread;
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Spins until done(arg) or the pool's spin budget is spent; returns done(arg). */
static bool spin_until(const guild_pool_t *p, bool (*done)(const guild_pool_t *, const void *), const void *arg)
{
    const uint64_t ns = atomic_load_explicit(&p->spin_ns, memory_order_relaxed);
    if (!ns) {
        for (int i = 0; i < p->spin_rounds; i++) {
            if (done(p, arg))
                return true;
            cpu_relax();
        }
        return done(p, arg);
    }
    const uint64_t t0 = now_ns();
    for (;;) {
        for (int i = 0; i < 64; i++) { /* the clock every 64 rounds: a pause is tens of cycles, a clock read more */
            if (done(p, arg))
                return true;
            cpu_relax();
        }
        /* the budget read again: a new one (guild_pool_set_spin_ns, or destroy's 0) ends a long spin now */
        if (now_ns() - t0 >= atomic_load_explicit(&p->spin_ns, memory_order_relaxed))
            return done(p, arg);
    }
}

static bool new_generation(const guild_pool_t *p, const void *seen)
{
    return atomic_load_explicit(&p->generation, memory_order_acquire) != *(const uint64_t *)seen;
}

static bool all_idle(const guild_pool_t *p, const void *unused)
{
    (void)unused;
    return atomic_load_explicit(&p->busy, memory_order_acquire) == 0;
}

static void run_tasks(guild_pool_t *p, int thread)
{
    for (;;) {
        int64_t task = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (task >= p->n_tasks)
            break;
        p->fn(p->ctx, task, thread);
    }
}

static void *worker_main(void *argp)
{
    struct pool_arg *arg = argp;
    guild_pool_t *p = arg->pool;
    uint64_t seen = 0;
    for (;;) {
        if (spin_until(p, new_generation, &seen) && !atomic_load_explicit(&p->lock_wake, memory_order_relaxed)) {
            /* the job's fields were written before the generation's release increment, which the acquire load
             * saw: no need for the mutex. Taking it here, every spinning worker wanted it in the same instant,
             * and those that lost went to sleep in the kernel and were woken one unlock at a time. (stop is
             * set without a new generation: a stopping pool is seen on the path below.) */
            seen = atomic_load_explicit(&p->generation, memory_order_acquire);
        } else {
            pthread_mutex_lock(&p->mu);
            while (atomic_load_explicit(&p->generation, memory_order_relaxed) == seen && !p->stop) {
                atomic_fetch_add_explicit(&p->sleeps, 1, memory_order_relaxed);
                pthread_cond_wait(&p->wake, &p->mu);
            }
            if (p->stop) {
                pthread_mutex_unlock(&p->mu);
                return NULL;
            }
            seen = atomic_load_explicit(&p->generation, memory_order_relaxed);
            pthread_mutex_unlock(&p->mu);
        }

        run_tasks(p, arg->thread);

        /* the last one out wakes the runner if it sleeps. Only then: a runner that spins sees busy reach 0 by
         * itself, and returns to publish its next job at once (its next pool pass, or the caller's); taking the
         * mutex here would make that publication wait for it, through the kernel when it comes at the same
         * instant. busy and runner_asleep are both sequentially consistent: either the runner sees busy at 0
         * before it sleeps, or this sees runner_asleep and signals under the mutex, which the runner releases
         * only inside its wait. */
        if (atomic_fetch_sub(&p->busy, 1) == 1 &&
            (atomic_load(&p->runner_asleep) || atomic_load_explicit(&p->lock_wake, memory_order_relaxed))) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->idle);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

static int pin_thread(pthread_t t, int cpu, guild_err_t *err)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (cpu < 0 || cpu >= CPU_SETSIZE)
        return guild_err_set(err, "thread pool: CPU %d is out of range", cpu);
    CPU_SET(cpu, &set);
    int rc = pthread_setaffinity_np(t, sizeof set, &set);
    if (rc)
        return guild_err_errno(err, rc, "thread pool: cannot pin a thread to CPU %d", cpu);
    return 0;
}

/* True when n_threads threads (pinned to cpus[0..n_threads), or free to run on this process's CPUs when cpus is
 * NULL) outnumber the cores they may run on. */
static bool threads_share_cores(int n_threads, const int *cpus)
{
    if (cpus) {
        for (int i = 1; i < n_threads; i++)
            for (int j = 0; j < i; j++)
                if (cpus[i] == cpus[j])
                    return true;
        return false;
    }
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set))
        return false; /* unknown: the dedicated case's waits, as before */
    return n_threads > CPU_COUNT(&set);
}

int guild_pool_new(guild_pool_t **out, int n_threads, const int *cpus, guild_err_t *err)
{
    *out = NULL;
    if (n_threads < 1)
        return guild_err_set(err, "thread pool: %d threads requested (at least 1)", n_threads);
    guild_pool_t *p = calloc(1, sizeof *p);
    if (!p)
        return guild_err_set(err, "thread pool: out of memory");
    p->n_threads = n_threads;
    p->shared = threads_share_cores(n_threads, cpus);
    p->spin_rounds = p->shared ? POOL_SPIN_ROUNDS_SHARED : POOL_SPIN_ROUNDS;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->idle, NULL);
    if (n_threads > 1) {
        p->threads = calloc((size_t)n_threads - 1, sizeof *p->threads);
        p->args = calloc((size_t)n_threads - 1, sizeof *p->args);
        if (!p->threads || !p->args) {
            guild_err_set(err, "thread pool: out of memory");
            goto fail;
        }
    }
    if (cpus && pin_thread(pthread_self(), cpus[0], err))
        goto fail;
    for (int i = 1; i < n_threads; i++) {
        p->args[i - 1] = (struct pool_arg){p, i};
        int rc = pthread_create(&p->threads[i - 1], NULL, worker_main, &p->args[i - 1]);
        if (rc) {
            guild_err_errno(err, rc, "thread pool: cannot start thread %d of %d", i, n_threads);
            goto fail;
        }
        p->n_started++;
        if (cpus && pin_thread(p->threads[i - 1], cpus[i], err))
            goto fail;
    }
    *out = p;
    return 0;
fail:
    guild_pool_destroy(&p);
    return -1;
}

void guild_pool_destroy(guild_pool_t **pp)
{
    guild_pool_t *p = *pp;
    if (!p)
        return;
    atomic_store_explicit(&p->spin_ns, 0, memory_order_relaxed); /* a worker spinning on a long budget stops now */
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_started; i++)
        pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->idle);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mu);
    free(p->args);
    free(p->threads);
    free(p);
    *pp = NULL;
}

int guild_pool_threads(const guild_pool_t *p)
{
    return p->n_threads;
}

bool guild_pool_shared(const guild_pool_t *p)
{
    return p->shared;
}

void guild_pool_set_lock_wake(guild_pool_t *p, bool on)
{
    atomic_store_explicit(&p->lock_wake, on, memory_order_relaxed);
}

uint64_t guild_pool_sleeps(const guild_pool_t *p)
{
    return atomic_load_explicit(&p->sleeps, memory_order_relaxed);
}

void guild_pool_set_spin_ns(guild_pool_t *p, uint64_t ns)
{
    atomic_store_explicit(&p->spin_ns, ns, memory_order_relaxed);
}

void guild_pool_run(guild_pool_t *p, int64_t n_tasks, guild_pool_fn fn, void *ctx)
{
    if (n_tasks <= 0)
        return;
    if (p->n_threads == 1 || n_tasks == 1) {
        for (int64_t t = 0; t < n_tasks; t++)
            fn(ctx, t, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    atomic_store_explicit(&p->busy, p->n_threads - 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);

    run_tasks(p, 0);

    if (spin_until(p, all_idle, NULL))
        return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->runner_asleep, true);
    while (atomic_load(&p->busy) != 0) {
        atomic_fetch_add_explicit(&p->sleeps, 1, memory_order_relaxed);
        pthread_cond_wait(&p->idle, &p->mu);
    }
    atomic_store(&p->runner_asleep, false);
    pthread_mutex_unlock(&p->mu);
}
