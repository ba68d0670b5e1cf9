#include "config.h"

#include "coordinator/server/job.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct job {
    job_spec_t spec;
    uint64_t id;
    int refs;         /* atomic */
    int cancelled;    /* atomic */
    pthread_mutex_t mu;
    pthread_cond_t cv;  /* text appended or the job ended */
    strbuf_t text;      /* under mu */
    job_status_t st;    /* under mu */
    logprob_entry_t *lp; /* [n_lp] under mu: job_add_logprob's entries */
    size_t n_lp, cap_lp;
};

static uint64_t next_id; /* atomic */

static void spec_free(job_spec_t *s)
{
    free(s->prompt);
    for (size_t i = 0; i < s->n_stops; i++)
        free(s->stops[i]);
    free(s->stops);
    memset(s, 0, sizeof *s);
}

int job_new(job_t **out, job_spec_t *spec, guild_err_t *err)
{
    *out = NULL;
    job_t *j = calloc(1, sizeof *j);
    if (!j) {
        spec_free(spec);
        return guild_err_set(err, "out of memory");
    }
    j->spec = *spec;
    memset(spec, 0, sizeof *spec);
    j->id = __atomic_add_fetch(&next_id, 1, __ATOMIC_RELAXED);
    j->refs = 1;
    pthread_mutex_init(&j->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&j->cv, &ca);
    pthread_condattr_destroy(&ca);
    j->st.n_prompt = j->spec.n_prompt;
    *out = j;
    return 0;
}

job_t *job_ref(job_t *j)
{
    __atomic_add_fetch(&j->refs, 1, __ATOMIC_RELAXED);
    return j;
}

void job_unref(job_t **jp)
{
    job_t *j = *jp;
    if (!j)
        return;
    *jp = NULL;
    if (__atomic_sub_fetch(&j->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    spec_free(&j->spec);
    strbuf_fini(&j->text);
    free(j->lp);
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

const job_spec_t *job_spec(const job_t *j)
{
    return &j->spec;
}

uint64_t job_id(const job_t *j)
{
    return j->id;
}

void job_cancel(job_t *j)
{
    __atomic_store_n(&j->cancelled, 1, __ATOMIC_RELEASE);
}

bool job_cancelled(const job_t *j)
{
    return __atomic_load_n(&j->cancelled, __ATOMIC_ACQUIRE) != 0;
}

bool job_wait(job_t *j, size_t seen, int timeout_ms)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&j->mu);
    int rc = 0;
    while (j->text.len <= seen && j->st.end == JOB_RUNNING && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&j->cv, &j->mu, &until);
    bool ready = j->text.len > seen || j->st.end != JOB_RUNNING;
    pthread_mutex_unlock(&j->mu);
    return ready;
}

size_t job_read(job_t *j, size_t from, strbuf_t *out, job_status_t *st)
{
    pthread_mutex_lock(&j->mu);
    size_t len = j->text.len;
    if (from < len)
        strbuf_put(out, j->text.p + from, len - from);
    if (st)
        *st = j->st;
    pthread_mutex_unlock(&j->mu);
    return len;
}

int job_append(job_t *j, const char *s, size_t n)
{
    if (!n)
        return 0;
    pthread_mutex_lock(&j->mu);
    strbuf_put(&j->text, s, n);
    bool ok = strbuf_ok(&j->text);
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return ok ? 0 : -1;
}

void job_finish(job_t *j, const job_status_t *st)
{
    pthread_mutex_lock(&j->mu);
    j->st = *st;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

int job_add_logprob(job_t *j, const logprob_entry_t *e)
{
    int rc = 0;
    pthread_mutex_lock(&j->mu);
    if (j->n_lp == j->cap_lp) {
        size_t cap = j->cap_lp ? j->cap_lp * 2 : 64;
        logprob_entry_t *v = realloc(j->lp, cap * sizeof *v);
        if (v) {
            j->lp = v;
            j->cap_lp = cap;
        }
    }
    if (j->n_lp < j->cap_lp)
        j->lp[j->n_lp++] = *e;
    else
        rc = -1;
    pthread_mutex_unlock(&j->mu);
    return rc;
}

int job_read_logprobs(job_t *j, size_t from, logprob_entry_t **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    int rc = 0;
    pthread_mutex_lock(&j->mu);
    if (from < j->n_lp) {
        *out = malloc((j->n_lp - from) * sizeof **out);
        if (*out) {
            memcpy(*out, j->lp + from, (j->n_lp - from) * sizeof **out);
            *n = j->n_lp - from;
        } else {
            rc = -1;
        }
    }
    pthread_mutex_unlock(&j->mu);
    return rc;
}
