/* ipc/doorbell.h — a sequence number in shared memory that one process rings and others wait on.
 *
 * A doorbell is a 64-bit counter alone on its 64-byte cache line (pollers see only the ringer's stores),
 * followed by a line holding the count of sleeping waiters. Contract: ONE process rings a given doorbell
 * (single writer), with nondecreasing values; any number of processes wait for `seq >= target`.
 *   ring:  store of seq (release, made seq_cst for the check that follows), then a futex wake only if a
 *          waiter announced itself in `waiters`.
 *   wait:  acquire loads for a bounded spin, then a shared (not FUTEX_PRIVATE) futex sleep on the low 32 bits
 *          of seq, always with a deadline: a dead or hung peer becomes GUILD_WAIT_TIMEOUT, never a hang.
 * What the ringer wrote before guild_doorbell_ring is visible to a waiter after its wait returns OK.
 * Completion counters (`done[worker] = step`) are doorbells too, one per worker, each rung by its worker;
 * guild_doorbell_wait_all waits for a set of them under one deadline.
 */
#ifndef GUILD_IPC_DOORBELL_H
#define GUILD_IPC_DOORBELL_H

#include "core/util/err.h"

#include <stdatomic.h>
#include <stdint.h>

#define GUILD_CACHE_LINE 64

/* Shared layout: 128 bytes, 64-byte aligned; zero-filled memory is a valid doorbell at seq 0. */
typedef struct guild_doorbell {
    _Alignas(GUILD_CACHE_LINE) _Atomic uint64_t seq; /* last value rung; written by the ringer only */
    uint8_t pad0[GUILD_CACHE_LINE - sizeof(uint64_t)];
    _Alignas(GUILD_CACHE_LINE) _Atomic uint32_t waiters; /* processes in (or entering) a futex sleep on seq;
                                                              incremented and decremented by the waiters */
    uint8_t pad1[GUILD_CACHE_LINE - sizeof(uint32_t)];
} guild_doorbell_t;
_Static_assert(sizeof(guild_doorbell_t) == 2 * GUILD_CACHE_LINE, "guild_doorbell_t is a shared layout");
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2 && ATOMIC_INT_LOCK_FREE == 2,
               "shared-memory atomics must be lock-free");

/* How a waiter waits. */
typedef struct guild_wait_policy {
    uint64_t spin_ns;    /* spin this long before sleeping; 0: sleep at once; >= timeout_ns: never sleep */
    uint64_t timeout_ns; /* give up after this long in total */
} guild_wait_policy_t;

/* Per-process counters a waiter may pass to the wait calls (may be NULL); plain fields, one thread each. */
typedef struct guild_wait_stats {
    uint64_t waits;   /* calls */
    uint64_t sleeps;  /* futex sleeps entered */
    uint64_t timeouts;
} guild_wait_stats_t;

typedef enum guild_wait_result {
    GUILD_WAIT_OK = 0,       /* seq >= target */
    GUILD_WAIT_TIMEOUT = -1, /* deadline passed first; err says what was awaited and what was seen */
    GUILD_WAIT_ERROR = -2,   /* the futex call failed (err says why) */
} guild_wait_result_t;

/* Sets seq to 0 with no waiters; only before the doorbell is shared. */
void guild_doorbell_init(guild_doorbell_t *db);

/* Publishes seq (release) and wakes sleeping waiters. Single ringer; seq must not decrease. */
void guild_doorbell_ring(guild_doorbell_t *db, uint64_t seq);

/* Current value (acquire). */
uint64_t guild_doorbell_load(const guild_doorbell_t *db);

/* Wakes the sleeping waiters of a doorbell that was rung without guild_doorbell_ring: a GPU kernel's
 * system-scope store cannot make the futex call, so a host thread that saw the new value calls this. Cheap (one
 * load) when nobody sleeps. */
void guild_doorbell_wake(guild_doorbell_t *db);

/* Waits until seq >= target; stores the last value seen in *seen (may be NULL). `what` names the doorbell in
 * the timeout message ("exchange step", "done[2]"). */
guild_wait_result_t guild_doorbell_wait(guild_doorbell_t *db, uint64_t target, const guild_wait_policy_t *policy,
                                        uint64_t *seen, guild_wait_stats_t *stats, const char *what,
                                        guild_err_t *err);

/* Waits until every dbs[0..n-1] has seq >= target, under one deadline (and one spin budget) for the whole
 * set. On timeout err names the first one still short as what[i]. */
guild_wait_result_t guild_doorbell_wait_all(guild_doorbell_t *dbs, int n, uint64_t target,
                                            const guild_wait_policy_t *policy, guild_wait_stats_t *stats,
                                            const char *what, guild_err_t *err);

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t guild_now_ns(void);

#endif
