/* The supervisor's private records, shared by its files (supervisor.c: the workers' lives; supervisor_stats.c:
 * their counters as the callers read them). Not for other modules: they go through supervisor.h. */
#ifndef GUILD_COORDINATOR_SUPERVISOR_SLOTS_H
#define GUILD_COORDINATOR_SUPERVISOR_SLOTS_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "coordinator/bridge.h"
#include "coordinator/shard_verify.h"
#include "coordinator/supervisor.h"
#include "gpu-worker/dense/backend.h"
#include "ipc/arena.h"
#include "ipc/curve.h"
#include "ipc/exchange.h"
#include "ipc/msg.h"
#include "ipc/proc_stat.h"
#include "ipc/stage_ring.h"
#include "ipc/zap.h"
#include "stager/stager_options.h"

#define MAX_DEATHS 16 /* remembered per worker */

typedef enum wstate {
    W_EMPTY,   /* no process (a worker started by hand has not registered yet) */
    W_SPAWNED, /* our child, not registered yet */
    W_LOADING, /* Assign sent, Ready awaited */
    W_READY,
    W_KILLING, /* SIGKILL sent, waiting to reap */
} wstate_t;

typedef struct wslot {
    Guild__Role role;
    int index;           /* CPU: done counter / plan worker; GPU: -1 */
    char name[32];       /* "cpu-worker[1]", "gpu-worker" */
    int node;
    bool by_hand;        /* started by an operator (listen mode): not our child */
    bool remote;         /* cannot map the arena: exchanges through the bridge (coordinator/bridge.h) */
    wstate_t state;
    pid_t pid;           /* 0: none */
    guild_msg_peer_t peer; /* len 0: not registered */
    uint64_t generation; /* of the last Assign sent */
    uint64_t since_ns;   /* entered the current state */
    uint64_t last_heard_ns;
    uint64_t deaths[MAX_DEATHS];
    int n_deaths;
    int restarts;
    /* Given up on after more than max_restarts deaths within a minute (our own children): started again after a
     * back-off that doubles with each give-up (opts.backoff_ms .. BACKOFF_MAX_MS); the pipeline is degraded, and
     * requests fail at once, until it is ready again. */
    uint64_t backoff_until_ns; /* when it is started again; 0: not waiting */
    uint32_t backoff_ms;       /* the last back-off */
    uint64_t gave_up_ns;       /* the last give-up */
    bool down;                 /* given up on and not ready since */
    char down_why[512];        /* why, for sup_health and the requests that fail */
    char why[256];       /* what the kill was for */
    uint64_t stall_mark, stall_since_ns;
    proc_watch_t exit_watch; /* at shutdown, past the grace: whether the child still works at exiting */
    /* the worker's counters, from its last heartbeat */
    uint64_t exchanges, tokens, busy_ns, wait_ns, sleeps, resident, rtt_ns, load_ns;
    backend_stats_t streaming; /* GPU worker: its backend's streaming counters (the fields Stats carries) */
    uint64_t *routing;   /* GPU worker counting the routing: its last answer's counts per (layer, expert) */
    size_t n_routing;
    bool stats_pending;  /* a StatsRequest awaits its answer */
    /* a CPU worker whose shard is not read from our file (its own copy, or bytes it received): its Ready waits
       for the comparison of its digests with ours (coordinator/shard_verify.h) */
    bool verifying;
    expert_digest_t *digests; /* [n_digests], its Ready's */
    size_t n_digests;
    char source[256];    /* where its shard came from ("received", or its --model path) */
    char hostname[64];   /* its host, for messages */
    int lost_pid;        /* started by hand and lost (dead, silent, its link down): its pid; 0: not lost */
    char lost_why[300];
    uint64_t ready_first_seq;
} wslot_t;

struct sup {
    stack_options_t opts; /* a copy of the caller's */
    sup_setup_t setup;
    int32_t max_out;      /* logits rows per step request: opts.gpu.max_out or opts.n_seq if more, at most
                             opts.n_batch */
    stager_options_t stager; /* guild-stager's (when ring) */
    model_config_t mc;
    char rundir[PATH_MAX];
    char endpoint[PATH_MAX + 16];
    char host[256];
    guild_arena_t *arena;
    guild_exchange_t *x;
    guild_step_t step;
    void *zctx;
    void *router; /* supervisor thread only, once it runs */
    guild_curve_t *curve; /* a tcp --listen's keys (or its --insecure); NULL: no tcp endpoint */
    guild_zap_t *zap;     /* the judge of the CURVE clients of the tcp endpoints; NULL: none */
    bridge_t *bridge;                    /* listen mode: exchanges of workers without the arena */
    shard_verify_t *verify;              /* listen mode: our digests of each worker's shard */
    char data_public[PATH_MAX + 32];     /* the data endpoint as workers are told it */
    bool router_bound, bridge_bound;     /* opts.listen (and its data socket) bound: ours to remove */
    int n_cpu;
    int n_w;      /* slots: n_cpu + 1, and + 1 with a stager */
    wslot_t *w;   /* [n_w]: the CPU workers, then the GPU worker, then guild-stager (with a ring) */
    stage_ring_t *ring; /* the staging ring guild-stager serves to the GPU worker; NULL: none */
    guild_arena_t **stores; /* [n_cpu] each CPU worker's expert store (ipc/expert_store.h); NULL: none */
    pthread_t thread;
    bool started;
    _Atomic int stop;
    uint64_t hb_seq, last_hb_ns, msg_id;

    pthread_mutex_t mu; /* guards everything below and the slots against the readers of sup_check & co */
    pthread_cond_t cond;
    bool failed;
    char fail_msg[GUILD_ERR_MAX];
    uint64_t generation; /* last Assign.generation given */
    bool stats_wanted;   /* sup_print_stats waits for fresh counters */
};

static inline wslot_t *gpu_slot(sup_t *s)
{
    return &s->w[s->n_cpu];
}

/* A worker's counters from its heartbeat or its answer to a stats request (under mu). */
void sup_take_stats(wslot_t *w, const Guild__Stats *st);

#endif
