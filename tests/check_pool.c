/* Tests for core/util/pool: every task runs exactly once, for any thread count, many jobs back to back; a pool
 * whose threads outnumber its cores says so (guild_pool_shared) and still runs every task once. */
#include "config.h"

#include "core/util/pool.h"
#include "tests/check_run.h"

#include <check.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct job {
    _Atomic int *hits;  /* [n] times each task ran */
    _Atomic int bad_thread;
    int n_threads;
    double *out;        /* [n] */
} job_t;

static void task_fn(void *ctx, int64_t task, int thread)
{
    job_t *j = ctx;
    atomic_fetch_add(&j->hits[task], 1);
    if (thread < 0 || thread >= j->n_threads)
        atomic_store(&j->bad_thread, 1);
    double acc = 0; /* a fixed-order computation per task */
    for (int i = 1; i <= 100; i++)
        acc += (double)task / i;
    j->out[task] = acc;
}

static void run_jobs(int n_threads, int n_jobs, double *first)
{
    guild_pool_t *p = NULL;
    guild_err_t err = {{0}};
    ck_assert_msg(guild_pool_new(&p, n_threads, NULL, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(guild_pool_threads(p), n_threads);
    enum { N = 257 };
    _Atomic int hits[N];
    double out[N];
    for (int r = 0; r < n_jobs; r++) {
        int n = 1 + r % N;
        for (int i = 0; i < N; i++)
            atomic_store(&hits[i], 0);
        job_t j = {hits, 0, n_threads, out};
        guild_pool_run(p, n, task_fn, &j);
        for (int i = 0; i < N; i++)
            ck_assert_int_eq(atomic_load(&hits[i]), i < n ? 1 : 0);
        ck_assert_int_eq(atomic_load(&j.bad_thread), 0);
        if (n == N)
            memcpy(first, out, sizeof out);
    }
    guild_pool_run(p, 0, task_fn, NULL); /* nothing to do: fn is not called */
    guild_pool_destroy(&p);
    ck_assert_ptr_null(p);
}

START_TEST(test_every_task_once)
{
    double a[257], b[257], c[257];
    run_jobs(1, 300, a);
    run_jobs(2, 300, b);
    run_jobs(4, 300, c);
    ck_assert(!memcmp(a, b, sizeof a));
    ck_assert(!memcmp(a, c, sizeof a));
}
END_TEST

/* The CPUs this process may run on, and the first of them. */
static int allowed_cpus(int *first)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    ck_assert_int_eq(sched_getaffinity(0, sizeof set, &set), 0);
    *first = -1;
    for (int c = 0; c < CPU_SETSIZE && *first < 0; c++)
        if (CPU_ISSET(c, &set))
            *first = c;
    return CPU_COUNT(&set);
}

static bool pool_shared(int n_threads, const int *cpus)
{
    guild_pool_t *p = NULL;
    guild_err_t err = {{0}};
    ck_assert_msg(guild_pool_new(&p, n_threads, cpus, &err) == 0, "%s", err.msg);
    const bool shared = guild_pool_shared(p);
    guild_pool_destroy(&p);
    return shared;
}

START_TEST(test_shared_cores)
{
    int c0;
    const int n = allowed_cpus(&c0);
    ck_assert(!pool_shared(1, NULL));
    ck_assert(!pool_shared(n, NULL));
    ck_assert(pool_shared(n + 1, NULL));
    ck_assert(!pool_shared(1, (int[]){c0}));
    ck_assert(pool_shared(2, (int[]){c0, c0}));
    /* oversubscribed: the short spins still run every task exactly once, with the same results */
    double a[257], b[257];
    run_jobs(1, 300, a);
    run_jobs(2 * n + 1, 300, b);
    ck_assert(!memcmp(a, b, sizeof a));
}
END_TEST

static void sleep_ms(int ms)
{
    struct timespec ts = {0, (long)ms * 1000000L};
    nanosleep(&ts, NULL);
}

/* Three rounds of: the pool idle for idle_ms, then a job of n tasks, each of which must run once. */
static void idle_then_run(guild_pool_t *p, job_t *j, _Atomic int *hits, int n, int idle_ms)
{
    for (int r = 0; r < 3; r++) {
        for (int i = 0; i < n; i++)
            atomic_store(&hits[i], 0);
        sleep_ms(idle_ms);
        guild_pool_run(p, n, task_fn, j);
        for (int i = 0; i < n; i++)
            ck_assert_int_eq(atomic_load(&hits[i]), 1);
    }
}

START_TEST(test_spin_time)
{
    guild_pool_t *p = NULL;
    guild_err_t err = {{0}};
    ck_assert_msg(guild_pool_new(&p, 2, NULL, &err) == 0, "%s", err.msg);
    enum { N = 64 };
    _Atomic int hits[N];
    double out[N];
    job_t j = {hits, 0, 2, out};
    /* a short spin: a worker idle for 20 ms sleeps, and wakes for the next job */
    guild_pool_set_spin_ns(p, 1000);
    const uint64_t s0 = guild_pool_sleeps(p);
    idle_then_run(p, &j, hits, N, 20);
    ck_assert_uint_ge(guild_pool_sleeps(p) - s0, 3);
    /* a long one (10 s): idle for 5 ms between jobs, the worker spins through, and every task still runs once */
    guild_pool_set_spin_ns(p, 10000000000ull);
    guild_pool_run(p, N, task_fn, &j); /* the worker's wait under the new budget starts after this job */
    const uint64_t s1 = guild_pool_sleeps(p);
    idle_then_run(p, &j, hits, N, 5);
    ck_assert_uint_eq(guild_pool_sleeps(p) - s1, 0);
    ck_assert_int_eq(atomic_load(&j.bad_thread), 0);
    guild_pool_set_spin_ns(p, 0); /* back to the rounds: destroy wakes a sleeping or a spinning worker alike */
    guild_pool_destroy(&p);
}
END_TEST

/* a task of a worker thread lasts 5 ms; the caller's (thread 0) none */
static void slow_worker_task(void *ctx, int64_t task, int thread)
{
    job_t *j = ctx;
    if (thread != 0)
        sleep_ms(5);
    task_fn(ctx, task, thread);
    (void)j;
}

START_TEST(test_runner_sleeps)
{
    /* the caller runs out of tasks long before a worker, past its 1 us spin: it sleeps until the last worker
     * wakes it (a lost wake-up hangs here), job after job, with and without the old hand-offs */
    for (int old = 0; old < 2; old++) {
        guild_pool_t *p = NULL;
        guild_err_t err = {{0}};
        ck_assert_msg(guild_pool_new(&p, 3, NULL, &err) == 0, "%s", err.msg);
        guild_pool_set_spin_ns(p, 1000);
        guild_pool_set_lock_wake(p, old);
        enum { N = 8 };
        _Atomic int hits[N];
        double out[N];
        job_t j = {hits, 0, 3, out};
        for (int r = 0; r < 10; r++) {
            for (int i = 0; i < N; i++)
                atomic_store(&hits[i], 0);
            guild_pool_run(p, N, slow_worker_task, &j);
            for (int i = 0; i < N; i++)
                ck_assert_int_eq(atomic_load(&hits[i]), 1);
        }
        ck_assert_uint_gt(guild_pool_sleeps(p), 0);
        guild_pool_destroy(&p);
    }
}
END_TEST

START_TEST(test_bad_arguments)
{
    guild_pool_t *p = (guild_pool_t *)1;
    guild_err_t err = {{0}};
    ck_assert_int_eq(guild_pool_new(&p, 0, NULL, &err), -1);
    ck_assert_ptr_null(p);
    ck_assert_int_eq(guild_pool_new(&p, 2, (int[]){0, 1 << 20}, &err), -1);
    ck_assert_ptr_null(p);
    ck_assert_ptr_nonnull(strstr(err.msg, "CPU"));
    guild_pool_destroy(&p);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("pool");
    TCase *tc = tcase_create("run");
    tcase_add_test(tc, test_every_task_once);
    tcase_add_test(tc, test_shared_cores);
    tcase_add_test(tc, test_spin_time);
    tcase_add_test(tc, test_runner_sleeps);
    suite_add_tcase(s, tc);
    tc = tcase_create("errors");
    tcase_add_test(tc, test_bad_arguments);
    suite_add_tcase(s, tc);
    return check_run(s);
}
