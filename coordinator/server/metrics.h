/* coordinator/server/metrics.h — what `guild serve` counts, rendered for GET /metrics in Prometheus's text
 * exposition format (version 0.0.4: "# HELP" and "# TYPE" before each family, counters named *_total,
 * histograms as cumulative *_bucket{le=...} with *_sum and *_count).
 *
 * The connections count their requests as they end (metrics_request, from any thread); the engine's gauges
 * (queue, sessions, KV cache, the CPU experts' wait, worker restarts) are read when the page is rendered. */
#ifndef GUILD_SERVER_METRICS_H
#define GUILD_SERVER_METRICS_H

#include <stdint.h>

#include "coordinator/server/api_request.h"
#include "coordinator/server/engine.h"
#include "coordinator/server/job.h"
#include "coordinator/server/strbuf.h"

/* How a generation request ended, as counted. */
typedef enum metrics_outcome {
    METRICS_STOP,        /* finish_reason "stop" */
    METRICS_LENGTH,      /* finish_reason "length" */
    METRICS_CANCELLED,   /* the client went away */
    METRICS_FAILED,      /* generation failed (500) */
    METRICS_SHUTDOWN,    /* the server stopped first */
    METRICS_INVALID,     /* refused before generation: a bad request (400) */
    METRICS_UNAVAILABLE, /* refused before generation: busy, loading, degraded, shutting down (503) */
    METRICS_N_OUTCOMES
} metrics_outcome_t;

typedef struct metrics metrics_t;

/* -1 on out of memory. */
int metrics_new(metrics_t **out);
/* Nulls *m. NULL-safe. */
void metrics_destroy(metrics_t **m);

/* Counts one request of endpoint kind that ended with outcome; st (NULL for requests refused before
 * generation) gives its tokens and times. Any thread. */
void metrics_request(metrics_t *m, api_kind_t kind, metrics_outcome_t outcome, const job_status_t *st);

/* The outcome a job's end is counted as. */
metrics_outcome_t metrics_outcome_of(job_end_t end);

/* Appends the exposition (every family, HELP and TYPE first) to out: the requests counted here, then the
 * engine's gauges and counters g (engine_stats). */
void metrics_render(metrics_t *m, const engine_stats_t *g, strbuf_t *out);

/* The Content-Type of the exposition. */
#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

#endif
