/* core/util/pool.h — a small fork-join thread pool for compute kernels.
 *
 * guild_pool_run(p, n_tasks, fn, ctx) calls fn(ctx, task, thread) exactly once for every task in [0, n_tasks)
 * and returns when all calls have finished (the caller's thread takes part as thread 0). Tasks are handed out
 * dynamically, so which thread runs which task is unspecified: a kernel in which every output element belongs
 * to exactly one task, and is computed in a fixed order inside it, gives the same bits for any thread count.
 * `thread` (0 .. n_threads-1) is only for indexing per-thread scratch memory.
 *
 * One guild_pool_run at a time per pool (the owner's thread); fn must not call guild_pool_run on the same pool.
 */
#ifndef GUILD_UTIL_POOL_H
#define GUILD_UTIL_POOL_H

#include <stdbool.h>
#include <stdint.h>

#include "core/util/err.h"

typedef struct guild_pool guild_pool_t;

typedef void (*guild_pool_fn)(void *ctx, int64_t task, int thread);

/* Starts n_threads - 1 worker threads (n_threads >= 1). When `cpus` is not NULL, thread i is pinned to CPU
 * cpus[i] (cpus holds n_threads entries; thread 0, the caller, is pinned too). Fails (message in err) when a
 * thread cannot be created or pinned; nothing is left running then. */
int guild_pool_new(guild_pool_t **out, int n_threads, const int *cpus, guild_err_t *err);

/* Stops and joins the workers, frees the pool, sets *p to NULL. NULL-safe. */
void guild_pool_destroy(guild_pool_t **p);

/* Number of threads, the caller's included. */
int guild_pool_threads(const guild_pool_t *p);

/* True when the pool's threads outnumber the cores they may run on: pinned threads sharing a CPU, or, unpinned,
 * more threads than the CPUs this process may use. Its waits then spin only briefly before they sleep (the
 * pool's) or yield (the kernels' hand-offs that ask, expert_pipe.c): a spinning waiter would hold the core that
 * the thread it waits for needs. Otherwise (a dedicated core per thread) they spin longer, for latency. */
bool guild_pool_shared(const guild_pool_t *p);

/* Waits of the pool's threads (workers for a job, the runner for the last worker) that outlasted their spins and
 * slept on a condition variable, since the pool began: each one a wake-up through the kernel. */
uint64_t guild_pool_sleeps(const guild_pool_t *p);

/* From now on the pool's waits spin for ns nanoseconds before they sleep (0: the default, a number of spin rounds
 * that depends on guild_pool_shared). For an owner whose jobs come at known short intervals on dedicated cores
 * (a layer's experts after each dense step): the threads spin through the gap instead of being woken through the
 * kernel one after another. Call it between jobs; the threads read it at their next wait, and a thread spinning
 * on a longer budget stops at its next clock reading (destroy sets 0 first, so a long spin never delays it). */
void guild_pool_set_spin_ns(guild_pool_t *p, uint64_t ns);

/* Measurements only (guild bench experts --variant lockwake=1): the pool's hand-offs as they were before they
 * skipped its mutex (workers that spot a job while spinning take the mutex before they run it; the last worker of
 * a job signals the runner through it even when the runner spins), so that a benchmark can weigh what skipping it
 * saves on a machine. Same tasks, same results either way. */
void guild_pool_set_lock_wake(guild_pool_t *p, bool on);

/* Runs fn for every task in [0, n_tasks) as described above; n_tasks <= 0 does nothing. */
void guild_pool_run(guild_pool_t *p, int64_t n_tasks, guild_pool_fn fn, void *ctx);

#endif
