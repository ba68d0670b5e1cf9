/* coordinator/server/engine.h — the one model's generation thread and its bounded queue.
 *
 * Requests run on one backend (the in-process stack or the multi-process pipeline, coordinator/backend_stack.h)
 * holding `parallel` sequences, in arrival order: a request waits in the queue while every sequence is busy, and
 * is refused (ENGINE_BUSY, HTTP 503) when queue_max are already waiting. With one sequence, requests run one at
 * a time (speculative decoding too); with more, continuous batching: each step is one forward call over the next
 * token of every decoding request and, as far as the batch goes, prompt tokens of those still prefilling (oldest
 * first), and new requests take free sequences between steps. A row's logits do not depend on what else is in its
 * batch (gpu-worker/dense/backend.h) and each request samples with its own sampler, so a reply is the same bits as
 * the request alone would get. Between requests a sequence's KV cache keeps the previous prompt and reply: a new
 * request goes to the free sequence whose cache starts with the longest part of its prompt and reuses it (the
 * logits do not depend on how the positions were batched either).
 *
 * Prefix snapshots (coordinator/server/prefix_cache.h): before a sequence's cache is cut by a request that reuses
 * less than it holds, it is saved as a snapshot (backend_seq_save), and a request whose prompt shares more with a
 * snapshot, or with the prompt a running session has prefilled, than with its sequence's own cache gets that
 * prefix copied into its sequence (backend_seq_load). A recurrent model's state exists at the cache's end only:
 * its prompt is prefilled up to the last token, snapshotted there, then finished, so that the same prompt again
 * reuses all but its last token. With a cache directory, the sequences' caches are saved at shutdown too.
 *
 * The thread opens the backend stack, drives it and closes it (the stack's one-thread rule). */
#ifndef GUILD_SERVER_ENGINE_H
#define GUILD_SERVER_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "coordinator/backend_stack.h"
#include "coordinator/server/job.h"
#include "coordinator/server/prefix_cache.h"
#include "coordinator/spec.h"
#include "core/model/model.h"
#include "core/tokenizer/tok.h"
#include "core/util/err.h"

typedef struct engine_config {
    const stack_options_t *stack; /* borrowed, must outlive the engine; n_ctx and n_batch: the context and prompt
                                     batch of every request */
    const model_t *model;         /* borrowed, as the tokenizer */
    const char *model_path;
    const tok_t *tok;
    int queue_max;                /* requests that may wait behind the running ones */
    int parallel;                 /* requests decoded together (--parallel); the stack's n_seq must be this; <= 1:
                                     one at a time */
    bool prefix_cache;            /* reuse the KV cache of the previous request */
    size_t cache_ram;             /* bytes of prefix snapshots kept in RAM (--cache-ram; coordinator/server/
                                     prefix_cache.h); 0 with no cache_dir: none, each sequence's own cache only */
    const char *cache_dir;        /* --cache-dir: snapshots kept as files there too, read again at start; NULL: none */
    size_t cache_disk;            /* bytes of snapshot files kept there (--cache-disk) */
    const spec_options_t *spec;   /* speculative decoding (checked; borrowed): the drafter is opened on the thread;
                                     NULL: none */
} engine_config_t;

typedef enum engine_submit {
    ENGINE_QUEUED,   /* the engine holds a reference now */
    ENGINE_BUSY,     /* the queue is full */
    ENGINE_STOPPING, /* shutting down */
} engine_submit_t;

typedef struct engine engine_t;

/* Starts the thread and waits until the backend stack is up. -1 with err (the stack's message) on failure. */
int engine_new(engine_t **out, const engine_config_t *c, guild_err_t *err);

engine_submit_t engine_submit(engine_t *e, job_t *j);

/* Requests running (at most parallel) and waiting, now. */
void engine_load(engine_t *e, int *running, int *waiting);

/* What GET /metrics shows of the engine (coordinator/server/metrics.h). */
typedef struct engine_stats {
    int running, waiting;        /* as engine_load */
    int64_t kv_used;             /* KV cache positions holding tokens (as of the last token generated or the last
                                    request's end) */
    int64_t kv_capacity;         /* the cache's positions (the context, times --parallel) */
    double busy_s;               /* time spent running requests */
    double expert_wait_s;        /* of the forward passes, time waiting for experts computed on the CPU
                                    (backend_stack_expert_wait_ns, as of the last request's end) */
    int gpu_restarts, cpu_restarts; /* worker restarts (backend_stack_restarts) */
    uint64_t prefix_hits[3];     /* requests that reused a prefix, from: their sequence's own cache, a snapshot, a
                                    running session's cache (copied) */
    uint64_t prefix_misses;      /* requests that reused none (prefix reuse on) */
    pcache_stats_t cache;        /* the snapshot store's (zero without one) */
} engine_stats_t;

/* The engine's counters and gauges now. From any thread. */
void engine_stats(engine_t *e, engine_stats_t *out);

/* Whether a request can succeed now (backend_stack_health): 0, 1 degraded (a worker backing off) or -1 failed
 * for good or shutting down, with the reason in why[n]. From any thread. */
int engine_health(engine_t *e, char *why, size_t n);

/* Refuses new jobs, ends the queued ones and the running one with JOB_SHUTDOWN, stops the thread (which
 * closes the stack). Idempotent. */
void engine_shutdown(engine_t *e);

/* Shuts down if needed and frees; nulls *e. NULL-safe. */
void engine_destroy(engine_t **e);

/* The prompt chunk the engine's stack works with (--batch auto resolved once the stack is open). */
int32_t engine_n_batch(const engine_t *e);

#endif
