/* ipc/stage_server.c — the dispatcher and copy threads that fill a staging ring (contract in
 * stage_server.h). */
#include "config.h"

#include "ipc/stage_server.h"

#include "core/util/log.h"
#include "ipc/stage_copy.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define MS UINT64_C(1000000)
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif
#define MAX_THREADS 256

typedef struct stage_worker {
    stage_server_t *s;
    int index;
    pthread_t thread;
} stage_worker_t;

struct stage_server {
    stage_ring_t *ring;
    const char *src; /* [src_bytes] the served memory */
    size_t src_bytes;
    int n_threads;
    stage_worker_t *workers; /* [n_threads] */
    pthread_t dispatcher;
    int dispatcher_started;
    _Atomic int quit;    /* stage_server_stop: every thread ends */
    _Atomic int running; /* the dispatcher serves */

    /* the current job, guarded by mu: pieces[0..n_pieces) into slot, total bytes */
    pthread_mutex_t mu;
    pthread_cond_t job_cv, done_cv;
    uint64_t generation; /* bumped per job */
    int remaining;       /* copy threads still working on the current job */
    stage_piece_t pieces[STAGE_RING_MAX_PIECES];
    uint32_t n_pieces;
    uint64_t total;
    char *slot;

    stage_server_stats_t stats; /* written by the dispatcher, read under mu */
};

/* Copies the t-th of T even shares of the job's bytes (the pieces laid end to end). */
static void copy_share(const stage_server_t *s, int t, int n)
{
    uint64_t lo = s->total * (uint64_t)t / (uint64_t)n, hi = s->total * (uint64_t)(t + 1) / (uint64_t)n;
    uint64_t pos = 0;
    for (uint32_t i = 0; i < s->n_pieces && pos < hi; i++) {
        const stage_piece_t *p = &s->pieces[i];
        uint64_t a = pos > lo ? pos : lo, end = pos + p->bytes, b = end < hi ? end : hi;
        if (a < b)
            stage_copy_stream(s->slot + p->slot_off + (a - pos), s->src + p->file_off + (a - pos), (size_t)(b - a));
        pos = end;
    }
}

static void *worker_main(void *arg)
{
    stage_worker_t *w = arg;
    stage_server_t *s = w->s;
    uint64_t seen = 0;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (s->generation == seen && !atomic_load(&s->quit))
            pthread_cond_wait(&s->job_cv, &s->mu);
        if (atomic_load(&s->quit))
            break;
        seen = s->generation;
        pthread_mutex_unlock(&s->mu);
        copy_share(s, w->index, s->n_threads);
        pthread_mutex_lock(&s->mu);
        if (--s->remaining == 0)
            pthread_cond_signal(&s->done_cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static void beat(stage_ring_header_t *h)
{
    atomic_store_explicit(&h->beat_ns, guild_now_ns(), memory_order_release);
}

/* Checks the request in ctl against the served memory and the slot and copies it into s->pieces. Returns
 * STAGE_OK or the status to answer, with the offending piece in *bad. */
static stage_status_t take_request(stage_server_t *s, const stage_slot_ctl_t *c, uint64_t slot_bytes,
                                   uint32_t *bad)
{
    uint32_t n = c->n_pieces;
    *bad = 0;
    if (n > STAGE_RING_MAX_PIECES)
        return STAGE_BAD_COUNT;
    /* one copy out of the shared page, then checks on the copy: the client cannot change it under us */
    memcpy(s->pieces, c->pieces, n * sizeof *s->pieces);
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        const stage_piece_t *p = &s->pieces[i];
        *bad = i;
        if (p->file_off > s->src_bytes || p->bytes > s->src_bytes - p->file_off)
            return STAGE_BAD_FILE_RANGE;
        if (p->slot_off > slot_bytes || p->bytes > slot_bytes - p->slot_off)
            return STAGE_BAD_SLOT_RANGE;
        total += p->bytes;
    }
    *bad = 0;
    s->n_pieces = n;
    s->total = total;
    return STAGE_OK;
}

/* Runs the current job on the copy threads; beats while it waits. */
static void run_job(stage_server_t *s, stage_ring_header_t *h)
{
    pthread_mutex_lock(&s->mu);
    s->remaining = s->n_threads;
    s->generation++;
    pthread_cond_broadcast(&s->job_cv);
    while (s->remaining > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 10 * (long)MS;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&s->done_cv, &s->mu, &ts);
        beat(h);
    }
    pthread_mutex_unlock(&s->mu);
}

static void *dispatcher_main(void *arg)
{
    stage_server_t *s = arg;
    stage_ring_header_t *h = stage_ring_header(s->ring);
    uint32_t n_slots = h->n_slots;
    uint64_t next = guild_doorbell_load(&h->filled);
    guild_wait_policy_t pol = {50000, STAGE_RING_BEAT_NS / 2};
    while (!atomic_load(&s->quit)) {
        beat(h);
        if (atomic_load_explicit(&h->stop, memory_order_acquire))
            break;
        guild_err_t err;
        guild_wait_result_t res = guild_doorbell_wait(&h->posted, next + 1, &pol, NULL, NULL, "stage posted", &err);
        if (res == GUILD_WAIT_TIMEOUT)
            continue;
        if (res == GUILD_WAIT_ERROR) {
            guild_log(GUILD_LOG_ERROR, "stager: ring %s: %s", stage_ring_name(s->ring), err.msg);
            usleep(1000);
            continue;
        }
        uint32_t slot = (uint32_t)(next % n_slots);
        stage_slot_ctl_t *c = stage_ring_ctl(s->ring, slot);
        uint64_t t0 = guild_now_ns();
        uint32_t bad = 0;
        stage_status_t st = take_request(s, c, h->slot_bytes, &bad);
        if (st == STAGE_OK && s->total > 0) {
            s->slot = stage_ring_slot(s->ring, slot);
            run_job(s, h);
        }
        uint64_t dt = guild_now_ns() - t0;
        c->status = st;
        c->bad_piece = bad;
        c->fill_ns = dt;
        c->done_seq = next;
        pthread_mutex_lock(&s->mu);
        s->stats.requests++;
        if (st != STAGE_OK)
            s->stats.refused++;
        else
            s->stats.bytes += s->total;
        s->stats.copy_ns += dt;
        pthread_mutex_unlock(&s->mu);
        if (st != STAGE_OK)
            guild_log(GUILD_LOG_WARN, "stager: ring %s: request %" PRIu64 " refused (status %d, piece %" PRIu32 ")",
                      stage_ring_name(s->ring), next, (int)st, bad);
        next++;
        guild_doorbell_ring(&h->filled, next);
    }
    atomic_store(&s->running, 0);
    return NULL;
}

static void join_all(stage_server_t *s, int n_workers)
{
    pthread_mutex_lock(&s->mu);
    atomic_store(&s->quit, 1);
    pthread_cond_broadcast(&s->job_cv);
    pthread_mutex_unlock(&s->mu);
    if (s->dispatcher_started)
        pthread_join(s->dispatcher, NULL);
    for (int i = 0; i < n_workers; i++)
        pthread_join(s->workers[i].thread, NULL);
}

int stage_server_start(stage_server_t **out, stage_ring_t *ring, const void *src, size_t src_bytes, int threads,
                       guild_err_t *err)
{
    *out = NULL;
    if (threads < 1 || threads > MAX_THREADS)
        return guild_err_set(err, "stager: %d copy threads, need 1..%d", threads, MAX_THREADS);
    stage_server_t *s = calloc(1, sizeof *s);
    stage_worker_t *workers = calloc((size_t)threads, sizeof *workers);
    if (!s || !workers) {
        free(s);
        free(workers);
        return guild_err_set(err, "stager: out of memory");
    }
    s->ring = ring;
    s->src = src;
    s->src_bytes = src_bytes;
    s->n_threads = threads;
    s->workers = workers;
    /* map every page of the ring in this process now: first-touch faults (16384 per 64 MiB of 4 KiB pages)
     * would otherwise slow the first requests into each slot. Older kernels lack the call (EINVAL) and fault
     * lazily. */
    if (madvise(stage_ring_map_base(ring), stage_ring_map_size(ring), MADV_POPULATE_WRITE) < 0 && errno != EINVAL)
        guild_log(GUILD_LOG_WARN, "stager: ring %s: madvise(MADV_POPULATE_WRITE): %s", stage_ring_name(ring),
                  strerror(errno));
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->job_cv, NULL);
    pthread_cond_init(&s->done_cv, NULL);
    int started = 0, rc = 0;
    for (; started < threads; started++) {
        workers[started] = (stage_worker_t){s, started, 0};
        if ((rc = pthread_create(&workers[started].thread, NULL, worker_main, &workers[started])) != 0)
            goto fail;
    }
    stage_ring_header_t *h = stage_ring_header(ring);
    atomic_store(&h->server_threads, (uint32_t)threads);
    beat(h);
    atomic_store_explicit(&h->server_pid, (int32_t)getpid(), memory_order_release);
    atomic_store(&s->running, 1);
    if ((rc = pthread_create(&s->dispatcher, NULL, dispatcher_main, s)) != 0) {
        atomic_store(&h->server_pid, 0);
        goto fail;
    }
    s->dispatcher_started = 1;
    *out = s;
    return 0;
fail:
    join_all(s, started);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->job_cv);
    pthread_cond_destroy(&s->done_cv);
    free(workers);
    free(s);
    return guild_err_errno(err, rc, "stager: pthread_create");
}

int stage_server_running(const stage_server_t *s)
{
    return atomic_load(&((stage_server_t *)s)->running);
}

void stage_server_stats(const stage_server_t *s, stage_server_stats_t *out)
{
    stage_server_t *m = (stage_server_t *)s;
    pthread_mutex_lock(&m->mu);
    *out = m->stats;
    pthread_mutex_unlock(&m->mu);
}

void stage_server_stop(stage_server_t **ps)
{
    if (!ps || !*ps)
        return;
    stage_server_t *s = *ps;
    guild_doorbell_wake(&stage_ring_header(s->ring)->posted);
    join_all(s, s->n_threads);
    atomic_store_explicit(&stage_ring_header(s->ring)->server_pid, 0, memory_order_release);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->job_cv);
    pthread_cond_destroy(&s->done_cv);
    free(s->workers);
    free(s);
    *ps = NULL;
}
