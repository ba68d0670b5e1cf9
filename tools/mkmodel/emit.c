#include "tools/mkmodel/emit.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "tools/mkmodel/fill.h"

#define JOB_BYTES ((uint64_t)4 << 20)

typedef struct job {
    int64_t tensor;
    uint64_t row0, n_rows;
    uint64_t bytes;
} job_t;

typedef struct emitter {
    const mkmodel_plan_t *plan;
    uint64_t seed;
    job_t *jobs; /* [n_jobs] in file order */
    int64_t n_jobs;
    int n_slots;
    uint8_t **slot;      /* [n_slots] buffers of slot_bytes; job j uses slot j % n_slots */
    int64_t *slot_done;  /* [n_slots] last job filled into the slot, -1 initially */
    uint64_t slot_bytes;
    int64_t scratch_floats;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t next_job;    /* next job to hand to a worker */
    int64_t written;     /* jobs written to the file */
    bool failed;
    guild_err_t fail_err;
} emitter_t;

static void fail(emitter_t *e, const guild_err_t *err)
{
    pthread_mutex_lock(&e->mu);
    if (!e->failed) {
        e->failed = true;
        e->fail_err = *err;
    }
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

static void *worker(void *arg)
{
    emitter_t *e = arg;
    guild_err_t err;
    float *scratch = malloc((size_t)e->scratch_floats * sizeof *scratch);
    if (!scratch) {
        guild_err_set(&err, "out of memory for a worker's scratch row");
        fail(e, &err);
        return NULL;
    }
    for (;;) {
        pthread_mutex_lock(&e->mu);
        /* Job j may reuse its slot once job j - n_slots has been written. */
        while (!e->failed && e->next_job < e->n_jobs && e->next_job - e->n_slots >= e->written)
            pthread_cond_wait(&e->cv, &e->mu);
        if (e->failed || e->next_job >= e->n_jobs) {
            pthread_mutex_unlock(&e->mu);
            break;
        }
        int64_t j = e->next_job++;
        pthread_mutex_unlock(&e->mu);

        const job_t *jb = &e->jobs[j];
        const mkmodel_tensor_t *t = mkmodel_plan_tensor(e->plan, jb->tensor);
        if (mkmodel_fill_rows(t, e->seed, jb->row0, jb->n_rows, e->slot[j % e->n_slots], scratch, &err) < 0) {
            fail(e, &err);
            break;
        }
        pthread_mutex_lock(&e->mu);
        e->slot_done[j % e->n_slots] = j;
        pthread_cond_broadcast(&e->cv);
        pthread_mutex_unlock(&e->mu);
    }
    free(scratch);
    return NULL;
}

static int make_jobs(emitter_t *e, guild_err_t *err)
{
    const mkmodel_plan_t *p = e->plan;
    int64_t n = 0;
    for (int pass = 0; pass < 2; pass++) {
        n = 0;
        for (int64_t i = 0; i < mkmodel_plan_n_tensors(p); i++) {
            const mkmodel_tensor_t *t = mkmodel_plan_tensor(p, i);
            uint64_t per_job = t->row_bytes >= JOB_BYTES ? 1 : JOB_BYTES / t->row_bytes;
            for (uint64_t r = 0; r < t->n_rows; r += per_job, n++) {
                if (pass == 0)
                    continue;
                job_t *jb = &e->jobs[n];
                jb->tensor = i;
                jb->row0 = r;
                jb->n_rows = t->n_rows - r < per_job ? t->n_rows - r : per_job;
                jb->bytes = jb->n_rows * t->row_bytes;
                if (jb->bytes > e->slot_bytes)
                    e->slot_bytes = jb->bytes;
                if (t->ne[0] > e->scratch_floats)
                    e->scratch_floats = t->ne[0];
            }
        }
        if (pass == 0 && !(e->jobs = calloc((size_t)n + 1, sizeof *e->jobs)))
            return guild_err_set(err, "out of memory for %lld jobs", (long long)n);
    }
    e->n_jobs = n;
    return 0;
}

int mkmodel_emit(gguf_writer_t *w, const mkmodel_plan_t *plan, uint64_t seed, int threads,
                 mkmodel_progress_fn progress, void *progress_arg, guild_err_t *err)
{
    emitter_t e;
    memset(&e, 0, sizeof e);
    e.plan = plan;
    e.seed = seed;
    e.n_slots = 2 * threads + 2;
    pthread_t *tid = NULL;
    int n_started = 0, rc = -1;
    bool sync_made = false;
    if (make_jobs(&e, err) < 0)
        goto out;
    e.slot = calloc((size_t)e.n_slots, sizeof *e.slot);
    e.slot_done = malloc((size_t)e.n_slots * sizeof *e.slot_done);
    tid = calloc((size_t)threads, sizeof *tid);
    if (!e.slot || !e.slot_done || !tid) {
        guild_err_set(err, "out of memory");
        goto out;
    }
    for (int s = 0; s < e.n_slots; s++) {
        e.slot_done[s] = -1;
        if (!(e.slot[s] = malloc(e.slot_bytes ? e.slot_bytes : 1))) {
            guild_err_set(err, "out of memory for %d buffers of %llu bytes", e.n_slots,
                          (unsigned long long)e.slot_bytes);
            goto out;
        }
    }
    pthread_mutex_init(&e.mu, NULL);
    pthread_cond_init(&e.cv, NULL);
    sync_made = true;
    for (; n_started < threads; n_started++)
        if (pthread_create(&tid[n_started], NULL, worker, &e) != 0) {
            guild_err_set(err, "cannot start worker thread %d", n_started);
            fail(&e, err);
            break;
        }

    uint64_t total = mkmodel_plan_data_bytes(plan), done = 0;
    for (int64_t j = 0; j < e.n_jobs && n_started > 0; j++) {
        pthread_mutex_lock(&e.mu);
        while (!e.failed && e.slot_done[j % e.n_slots] != j)
            pthread_cond_wait(&e.cv, &e.mu);
        bool failed = e.failed;
        pthread_mutex_unlock(&e.mu);
        if (failed)
            break;
        guild_err_t werr;
        if (gguf_writer_write(w, e.slot[j % e.n_slots], e.jobs[j].bytes, &werr) < 0) {
            fail(&e, &werr);
            break;
        }
        done += e.jobs[j].bytes;
        pthread_mutex_lock(&e.mu);
        e.written = j + 1;
        pthread_cond_broadcast(&e.cv);
        pthread_mutex_unlock(&e.mu);
        if (progress)
            progress(done, total, progress_arg);
    }
    for (int i = 0; i < n_started; i++)
        pthread_join(tid[i], NULL);
    if (e.failed) {
        *err = e.fail_err;
        goto out;
    }
    rc = n_started == threads ? 0 : -1;
out:
    if (sync_made) {
        pthread_mutex_destroy(&e.mu);
        pthread_cond_destroy(&e.cv);
    }
    if (e.slot)
        for (int s = 0; s < e.n_slots; s++)
            free(e.slot[s]);
    free(e.slot);
    free(e.slot_done);
    free(e.jobs);
    free(tid);
    return rc;
}
