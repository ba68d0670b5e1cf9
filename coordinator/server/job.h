/* coordinator/server/job.h — one generation request, shared by the HTTP connection that made it and the engine
 * thread that runs it.
 *
 * The engine appends the released text as it is produced and finally records how it ended; the connection
 * waits for text or the end (with a timeout, so that it can look at its socket) and reads what is new. Either
 * side may let go first: a job is reference-counted. The connection cancels the job when its client goes away;
 * the engine looks at that flag after every token. */
#ifndef GUILD_SERVER_JOB_H
#define GUILD_SERVER_JOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "coordinator/server/logprobs.h"
#include "coordinator/server/strbuf.h"
#include "core/sample/sampler.h"
#include "core/util/err.h"

typedef enum job_end {
    JOB_RUNNING = 0, /* not ended yet (queued or generating) */
    JOB_STOP,        /* end of text or a stop string: finish_reason "stop" */
    JOB_LENGTH,      /* max_tokens or the context: finish_reason "length" */
    JOB_CANCELLED,   /* the client went away */
    JOB_FAILED,      /* the backend failed (message in the status) */
    JOB_SHUTDOWN,    /* the server stopped before the job ended */
} job_end_t;

/* What to generate. The job takes the arrays (malloc'ed; freed with the job). */
typedef struct job_spec {
    int32_t *prompt;   /* [n_prompt] token ids, n_prompt >= 1 */
    int32_t n_prompt;
    int32_t max_tokens; /* < 0: until the end of text or the context */
    sample_params_t sample;
    char **stops;       /* [n_stops] non-empty strings */
    size_t n_stops;
    bool ignore_eos;
    bool logprobs;      /* record each generated token's log probabilities (job_add_logprob) */
    int32_t top_logprobs; /* with the most likely tokens', 0..LOGPROBS_MAX_TOP */
} job_spec_t;

/* How a job ended (or stands). */
typedef struct job_status {
    job_end_t end;
    int32_t n_prompt;      /* prompt tokens */
    int32_t n_cached;      /* of which reused from the KV cache of the previous request */
    int32_t n_generated;   /* tokens sampled, the end-of-text one not counted */
    double prefill_s, decode_s;
    char error[GUILD_ERR_MAX]; /* JOB_FAILED */
} job_status_t;

typedef struct job job_t;

/* A job holding spec's arrays (spec is zeroed), with one reference (the caller's). -1 on out of memory; the
 * arrays are freed then too. */
int job_new(job_t **out, job_spec_t *spec, guild_err_t *err);

job_t *job_ref(job_t *j);
/* Drops a reference; the last one frees the job. Nulls *j. NULL-safe. */
void job_unref(job_t **j);

const job_spec_t *job_spec(const job_t *j);
uint64_t job_id(const job_t *j); /* a process-wide serial number, for logs */

/* --- the connection's side --- */

/* Asks the engine to stop the job (or not to start it). */
void job_cancel(job_t *j);

/* Waits until the text is longer than `seen` bytes or the job has ended, at most timeout_ms. true if either. */
bool job_wait(job_t *j, size_t seen, int timeout_ms);

/* Appends the text from byte `from` on to out and returns the text's length; st (may be NULL) gets the status
 * as of the same moment. */
size_t job_read(job_t *j, size_t from, strbuf_t *out, job_status_t *st);

/* The log probabilities of the generated tokens from entry `from` on (job_spec_t.logprobs): *out (malloc'ed,
 * caller frees; NULL when none) gets *n of them. Read after job_read, they cover at least the tokens of the text
 * it returned (the engine adds a token's entry before its text). -1 on out of memory. */
int job_read_logprobs(job_t *j, size_t from, logprob_entry_t **out, size_t *n);

/* --- the engine's side --- */

/* Appends a generated token's log probabilities, before its text. -1 on out of memory. */
int job_add_logprob(job_t *j, const logprob_entry_t *e);

bool job_cancelled(const job_t *j);
/* Appends released text (valid UTF-8). -1 on out of memory. */
int job_append(job_t *j, const char *s, size_t n);
/* Records the end (st->end != JOB_RUNNING) and wakes the waiter. */
void job_finish(job_t *j, const job_status_t *st);

#endif
