/* coordinator/remote_backend.h — a backend_t whose forward passes run in the GPU worker process.
 *
 * Each backend_forward becomes step requests in the arena's step region (ipc/step.h); the caller
 * (gen_run) cannot tell it from a local backend. It keeps the one thing a dead GPU worker takes with it: the
 * tokens in the KV cache. When the supervisor replaces the GPU worker (a new epoch), the next request first
 * replays them (prefill in chunks of n_batch, no logits), then runs; because a position's logits are the same
 * bits whatever the batch split (backend.h), the output does not change. A request survives at most
 * max_retries GPU worker losses; a CPU worker's loss does not reach it at all (the supervisor restarts the
 * worker, which redoes the pending exchange).
 *
 * With several sequences (n_seq), each has its own tokens and replay; a request carries the rows of each sequence
 * from where the coordinator's view of its cache ends.
 *
 * A forward with more than max_out logits rows is split into consecutive requests that each need at most
 * max_out rows (same bits, again by the batch-split contract).
 */
#ifndef GUILD_COORDINATOR_REMOTE_BACKEND_H
#define GUILD_COORDINATOR_REMOTE_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "coordinator/supervisor.h"
#include "gpu-worker/dense/backend.h"

typedef struct remote_options {
    int32_t n_ctx;      /* as given to the supervisor */
    int32_t n_seq;      /* sequences of the GPU worker's backend (backend_forward_seq; step requests of several
                           sequences carry each row's sequence and position); 0: 1 */
    int32_t n_batch;
    int32_t n_vocab;
    int max_retries;    /* GPU worker losses one forward call survives */
    uint32_t ready_ms;  /* how long to wait for the workers to be (back) up */
    uint64_t spin_ns;   /* doorbell spin before sleeping */
    bool recurrent;     /* the model has recurrent layers (model_recurrent): its cache keeps no shorter prefix, so
                           a truncation below the length empties it, as the GPU worker's backend does; except
                           back into the last request of at most `rollback` rows of the sequence */
    int32_t rollback;   /* the GPU worker's backend_options_t.rollback (gpu_worker_options_t.rollback) */
} remote_options_t;

/* Counters since creation. */
typedef struct remote_stats {
    uint64_t requests;   /* step requests answered */
    uint64_t replays;    /* cache refills after a GPU worker loss */
    uint64_t replayed;   /* tokens replayed */
    uint64_t exchanges;  /* MoE exchanges the GPU worker made */
    uint64_t forward_ns; /* GPU worker time in forward passes */
    uint64_t moe_ns;     /* of which waiting for the CPU workers */
    uint64_t wall_ns;    /* coordinator time from ringing a request to reading its answer */
    uint64_t decode_requests; /* single-token requests, and their share of the times above */
    uint64_t decode_forward_ns, decode_moe_ns, decode_wall_ns, decode_exchanges;
} remote_stats_t;

/* sup is borrowed and must outlive the backend. -1 with err on out of memory. */
int remote_backend_new(backend_t **out, sup_t *sup, const remote_options_t *opt, guild_err_t *err);

void remote_backend_stats(const backend_t *b, remote_stats_t *out);

struct Guild__Stats;

/* A worker's Stats message (proto/guild.proto) into the backend counters it carries: a GPU worker's streaming and
 * routing counters, a CPU worker's prefetch counters (the fields it does not send are 0); the others of out stay. */
void remote_stats_take(backend_stats_t *out, const struct Guild__Stats *st);

#endif
