/* ipc/actor.h — the control side of a worker process (STYLE.md habit 10: workers are actors).
 *
 * A control thread owns the worker's DEALER socket: it registers with the coordinator, answers heartbeats
 * (with the counters in actor_stats_t) while the worker's own thread loads or computes, hands each Assign to
 * that thread, forwards its Ready and Error messages, answers a malformed message with an Error and carries
 * on, and decides when the worker must stop: a Shutdown, the coordinator silent for longer than its
 * silence limit (after the first contact; before it a worker started by hand waits as long as it takes),
 * a termination signal, a dead socket, or (over tcp) a handshake the coordinator refused or that cannot succeed
 * (a key not in its allow list, a wrong server key, CURVE on one side only). Why a thread: heartbeats then measure whether the process is
 * alive, not how long one exchange or one shard load takes, so the coordinator can call a worker silent for
 * 600 ms hung without ever mistaking a long prefill for a hang (slow progress is judged from the arena).
 *
 * Threads: actor_take_assign, actor_ready, actor_error and actor_set_silence belong to one worker thread;
 * actor_stopping, actor_assign_pending and the stats counters may be used from any thread.
 */
#ifndef GUILD_IPC_ACTOR_H
#define GUILD_IPC_ACTOR_H

#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/model/expert_digest.h"
#include "core/util/err.h"
#include "ipc/curve.h"
#include "ipc/msg.h"

typedef struct actor_config {
    Guild__Role role;   /* GUILD__ROLE__ROLE_CPU_WORKER or ..._GPU_WORKER */
    int node;           /* Register.node (-1: none) */
    const char *endpoint; /* the coordinator's ROUTER ("ipc://...", "tcp://...") */
    const char *name;   /* "cpu-worker", "gpu-worker": routing id prefix and log name */
    uint32_t silence_ms; /* coordinator silence that stops the worker, until an Assign says otherwise */
    const volatile sig_atomic_t *signalled; /* set by the program's SIGTERM/SIGINT handler; may be NULL */
    bool no_shared_memory; /* say it cannot map the arena (Capabilities.shared_memory false) */
    const guild_curve_t *curve; /* a tcp endpoint's security (ipc/curve.h; borrowed); NULL for others */
} actor_config_t;

/* Counters the worker thread updates and heartbeats report (Stats in proto/guild.proto). */
typedef struct actor_stats {
    _Atomic uint64_t exchanges;    /* exchanges (CPU worker) or step requests (GPU worker) served */
    _Atomic uint64_t tokens;       /* tokens computed */
    _Atomic uint64_t busy_ns;      /* time computing */
    _Atomic uint64_t wait_ns;      /* time waiting on doorbells */
    _Atomic uint64_t futex_sleeps; /* waits that slept */
    _Atomic uint64_t last_seq;     /* last exchange / request completed */
    _Atomic uint64_t resident_bytes; /* weights held */
    /* GPU worker: its backend's streaming counters since it was created (backend_stats_t) */
    _Atomic uint64_t streamed_layers, streamed_bytes;
    _Atomic uint64_t split_gpu_experts, split_cpu_experts, split_gpu_pairs, split_cpu_pairs;
    _Atomic uint64_t staged_bytes, stage_wait_ns;
    /* GPU worker counting the routing: routed pairs and those its resident experts served */
    _Atomic uint64_t routed_pairs, resident_pairs;
    _Atomic uint64_t stream_passes, stream_span_ns, copy_busy_ns, copy_wait_ns, cpu_wait_ns;
    /* CPU worker with prefetch hints: hinted experts and those the exchange then routed to, bytes prefetched and
     * the exchanges it prefetched for */
    _Atomic uint64_t hint_experts, hint_hits, prefetch_bytes, prefetch_layers;
    /* CPU worker: the dense side's turnaround between a decode step's exchanges, summed, and their count */
    _Atomic uint64_t turnaround_ns, turnarounds;
} actor_stats_t;

typedef struct actor actor_t;

/* Connects to cfg->endpoint, sends Register and starts the control thread. NULL-free result on success;
 * -1 with err when the socket or the thread cannot be made. */
int actor_new(actor_t **out, const actor_config_t *cfg, guild_err_t *err);

/* Stops the control thread, closes the socket (pending messages are dropped), frees; nulls *pa. NULL-safe. */
void actor_destroy(actor_t **pa);

/* Waits up to timeout_ms (-1: until stopping) for the next Assign. Returns the envelope holding it (caller
 * frees with guild_msg_free), or NULL on timeout or when the actor is stopping. */
Guild__Envelope *actor_take_assign(actor_t *a, int timeout_ms);

/* An Assign arrived that actor_take_assign has not returned yet: a serving loop should return for it. */
bool actor_assign_pending(const actor_t *a);

/* The worker must stop; *reason (may be NULL) says why ("shutdown: ...", "coordinator silent for 3000 ms"). */
bool actor_stopping(const actor_t *a, const char **reason);

/* The actor stopped because of an error (a refused or impossible handshake, a dead socket), not because it was
 * asked to: the worker should exit with a failure status. */
bool actor_failed(const actor_t *a);

/* Asks the control thread to stop (the worker thread decided to exit). */
void actor_stop(actor_t *a, const char *reason);

/* Sends Ready / Error (the message is printf-style; it is also logged). Failures are logged, not returned:
 * the coordinator notices a worker that never reports. */
void actor_ready(actor_t *a, uint64_t generation, uint64_t load_ns, uint64_t resident_bytes, uint64_t first_seq);
/* A CPU worker's Ready with the digests of its shard (d[n]) and where its bytes came from (source: its own
 * model file's path, or "received"; see Ready in proto/guild.proto). */
void actor_ready_shard(actor_t *a, uint64_t generation, uint64_t load_ns, uint64_t resident_bytes, uint64_t first_seq,
                       const char *source, const expert_digest_t *d, size_t n);
void actor_error(actor_t *a, Guild__ErrorCode code, bool fatal, uint64_t generation, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Replaces the silence limit (from Assign's Options; 0 keeps the current one). */
void actor_set_silence(actor_t *a, uint32_t silence_ms);

actor_stats_t *actor_stats(actor_t *a);

/* The worker's latest routing counts per (layer, expert) (counts[n], copied): answers to a StatsRequest carry them
 * (Stats.routing), heartbeats do not. Safe from any thread. */
void actor_set_routing(actor_t *a, const uint64_t *counts, size_t n);

/* Worker programs: SIGTERM/SIGINT set *flag; SIGPIPE ignored. Returns -1 with err on failure. */
int actor_install_signals(volatile sig_atomic_t *flag, guild_err_t *err);

#endif
