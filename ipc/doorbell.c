/* ipc/doorbell.c — ring and wait (contract in doorbell.h). */
#include "config.h"

#include "ipc/doorbell.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Iterations between clock reads while spinning (a clock read costs about as much as 20 pause loops). */
#define SPIN_CHECK_EVERY 64

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

/* The futex word: the low 32 bits of seq. A ring changes them unless it advances seq by a multiple of 2^32
 * at once, which a stepping counter never does. */
static inline uint32_t *futex_word(guild_doorbell_t *db)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    return (uint32_t *)(void *)&db->seq;
#else
    return (uint32_t *)(void *)&db->seq + 1;
#endif
}

uint64_t guild_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void guild_doorbell_init(guild_doorbell_t *db)
{
    memset(db, 0, sizeof *db);
    atomic_init(&db->seq, 0);
    atomic_init(&db->waiters, 0);
}

void guild_doorbell_ring(guild_doorbell_t *db, uint64_t seq)
{
    /* Store seq, then read waiters; a waiter increments waiters, then reads seq. All four are seq_cst, so
     * they fall in one total order and at least one side sees the other's write: either we wake the waiter
     * or it does not sleep. The seq_cst store is the release the waiters' acquire loads pair with (on x86 an
     * xchg, the cost of the store + mfence it replaces; no fences, which ThreadSanitizer cannot model). */
    atomic_store_explicit(&db->seq, seq, memory_order_seq_cst);
    if (atomic_load_explicit(&db->waiters, memory_order_seq_cst))
        syscall(SYS_futex, futex_word(db), FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void guild_doorbell_wake(guild_doorbell_t *db)
{
    /* A waiter increments waiters before its last seq check (seq_cst), so one that read the old value is
     * counted here, or it reads the new value and does not sleep. */
    if (atomic_load_explicit(&db->waiters, memory_order_seq_cst))
        syscall(SYS_futex, futex_word(db), FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

uint64_t guild_doorbell_load(const guild_doorbell_t *db)
{
    return atomic_load_explicit(&((guild_doorbell_t *)db)->seq, memory_order_acquire);
}

static guild_wait_result_t wait_one(guild_doorbell_t *db, uint64_t target, uint64_t spin_until,
                                    uint64_t deadline, uint64_t start, uint64_t *seen,
                                    guild_wait_stats_t *stats, const char *what, int index, guild_err_t *err)
{
    uint64_t v = atomic_load_explicit(&db->seq, memory_order_acquire);
    if (v >= target)
        goto ok;
    uint64_t now = guild_now_ns();
    while (now < spin_until) {
        for (int i = 0; i < SPIN_CHECK_EVERY; i++) {
            cpu_relax();
            v = atomic_load_explicit(&db->seq, memory_order_acquire);
            if (v >= target)
                goto ok;
        }
        now = guild_now_ns();
    }
    while (now < deadline) {
        atomic_fetch_add_explicit(&db->waiters, 1, memory_order_seq_cst);
        v = atomic_load_explicit(&db->seq, memory_order_seq_cst);
        if (v >= target) {
            atomic_fetch_sub_explicit(&db->waiters, 1, memory_order_relaxed);
            goto ok;
        }
        struct timespec abs = {(time_t)(deadline / 1000000000u), (long)(deadline % 1000000000u)};
        if (stats)
            stats->sleeps++;
        /* sleeps only while the futex word still holds what we read; absolute CLOCK_MONOTONIC deadline */
        long rc = syscall(SYS_futex, futex_word(db), FUTEX_WAIT_BITSET, (uint32_t)v, &abs, NULL,
                          FUTEX_BITSET_MATCH_ANY);
        int e = errno;
        atomic_fetch_sub_explicit(&db->waiters, 1, memory_order_relaxed);
        if (rc < 0 && e != EAGAIN && e != EINTR && e != ETIMEDOUT) {
            guild_err_errno(err, e, "%s: futex wait", what);
            return GUILD_WAIT_ERROR;
        }
        v = atomic_load_explicit(&db->seq, memory_order_acquire);
        if (v >= target)
            goto ok;
        now = guild_now_ns();
    }
    if (seen)
        *seen = v;
    if (stats)
        stats->timeouts++;
    char name[96];
    if (index >= 0)
        snprintf(name, sizeof name, "%s[%d]", what, index);
    else
        snprintf(name, sizeof name, "%s", what);
    guild_err_set(err, "%s: timed out after %.3f ms waiting for seq >= %llu (last seen %llu)", name,
                  (double)(now - start) / 1e6, (unsigned long long)target, (unsigned long long)v);
    return GUILD_WAIT_TIMEOUT;
ok:
    if (seen)
        *seen = v;
    return GUILD_WAIT_OK;
}

static void deadlines(const guild_wait_policy_t *p, uint64_t start, uint64_t *spin_until, uint64_t *deadline)
{
    *deadline = p->timeout_ns > UINT64_MAX - start ? UINT64_MAX : start + p->timeout_ns;
    *spin_until = p->spin_ns >= p->timeout_ns ? *deadline : start + p->spin_ns;
}

guild_wait_result_t guild_doorbell_wait(guild_doorbell_t *db, uint64_t target, const guild_wait_policy_t *policy,
                                        uint64_t *seen, guild_wait_stats_t *stats, const char *what,
                                        guild_err_t *err)
{
    if (stats)
        stats->waits++;
    /* fast path without a clock read: the common case in a pipeline that keeps up */
    uint64_t v = atomic_load_explicit(&db->seq, memory_order_acquire);
    if (v >= target) {
        if (seen)
            *seen = v;
        return GUILD_WAIT_OK;
    }
    uint64_t start = guild_now_ns(), spin_until, deadline;
    deadlines(policy, start, &spin_until, &deadline);
    return wait_one(db, target, spin_until, deadline, start, seen, stats, what, -1, err);
}

guild_wait_result_t guild_doorbell_wait_all(guild_doorbell_t *dbs, int n, uint64_t target,
                                            const guild_wait_policy_t *policy, guild_wait_stats_t *stats,
                                            const char *what, guild_err_t *err)
{
    if (stats)
        stats->waits++;
    uint64_t start = 0, spin_until = 0, deadline = 0;
    for (int i = 0; i < n; i++) {
        if (atomic_load_explicit(&dbs[i].seq, memory_order_acquire) >= target)
            continue;
        if (!start) {
            start = guild_now_ns();
            deadlines(policy, start, &spin_until, &deadline);
        }
        guild_wait_result_t r = wait_one(&dbs[i], target, spin_until, deadline, start, NULL, stats, what, i, err);
        if (r != GUILD_WAIT_OK)
            return r;
    }
    return GUILD_WAIT_OK;
}
