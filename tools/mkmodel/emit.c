#include "tools/mkmodel/emit.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/quant/types.h"
#include "tools/mkmodel/fill.h"
#include "tools/mkmodel/pool.h"

#define JOB_BYTES ((uint64_t)4 << 20)

/* Blocks per chunk of a pool: a pool is made by every worker that needs it, a chunk at a time, so that a tensor's
 * first jobs wait ~1/threads of its making, not all of it. */
#define POOL_CHUNK_BLOCKS 256

typedef struct job {
    int64_t tensor;
    uint64_t row0, n_rows;
    uint64_t bytes;
} job_t;

/* The pool of a pooled tensor (tools/mkmodel/pool.h), made when its first job is taken and freed when its last
 * job is filled, so only the tensors in the ring hold one. Fields under the emitter's mutex; bytes is written by
 * the chunks' makers before chunks_done counts them, and read by everyone once chunks_done == n_chunks. */
typedef struct pool {
    uint64_t rows;        /* mkmodel_pool_rows(t); 0: the tensor is filled exactly */
    uint64_t chunk_rows;  /* rows per chunk */
    int64_t n_chunks, next_chunk, chunks_done;
    int64_t jobs_left;    /* jobs of the tensor not yet filled */
    uint8_t *bytes;       /* [rows * row_bytes], NULL before the first job and after the last */
} pool_t;

typedef struct emitter {
    const mkmodel_plan_t *plan;
    uint64_t seed;
    pool_t *pools;       /* [n_tensors] with --fill pool, else NULL */
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

/* Returns once tensor ti's pool is complete, having made chunks of it while any were left. -1 when a chunk
 * failed, memory ran out or another worker failed (err set; fail() keeps the first error). */
static int pool_ready(emitter_t *e, int64_t ti, float *scratch, guild_err_t *err)
{
    const mkmodel_tensor_t *t = mkmodel_plan_tensor(e->plan, ti);
    pool_t *p = &e->pools[ti];
    pthread_mutex_lock(&e->mu);
    if (!p->bytes && !(p->bytes = malloc(p->rows * t->row_bytes))) {
        pthread_mutex_unlock(&e->mu);
        return guild_err_set(err, "tensor %s: out of memory for a pool of %llu bytes", t->name,
                             (unsigned long long)(p->rows * t->row_bytes));
    }
    while (!e->failed && p->chunks_done < p->n_chunks) {
        if (p->next_chunk == p->n_chunks) {
            pthread_cond_wait(&e->cv, &e->mu);
            continue;
        }
        uint64_t r0 = (uint64_t)p->next_chunk++ * p->chunk_rows;
        uint64_t n = p->rows - r0 < p->chunk_rows ? p->rows - r0 : p->chunk_rows;
        pthread_mutex_unlock(&e->mu);
        if (mkmodel_fill_rows(t, e->seed, r0, n, p->bytes + r0 * t->row_bytes, scratch, err) < 0)
            return -1;
        pthread_mutex_lock(&e->mu);
        if (++p->chunks_done == p->n_chunks)
            pthread_cond_broadcast(&e->cv);
    }
    bool failed = e->failed;
    pthread_mutex_unlock(&e->mu);
    return failed ? guild_err_set(err, "stopped after another failure") : 0;
}

/* Fills job jb into dst: exactly, or from its tensor's pool. */
static int fill_job(emitter_t *e, const job_t *jb, uint8_t *dst, float *scratch, guild_err_t *err)
{
    const mkmodel_tensor_t *t = mkmodel_plan_tensor(e->plan, jb->tensor);
    pool_t *p = e->pools ? &e->pools[jb->tensor] : NULL;
    if (!p || p->rows == 0)
        return mkmodel_fill_rows(t, e->seed, jb->row0, jb->n_rows, dst, scratch, err);
    if (pool_ready(e, jb->tensor, scratch, err) < 0)
        return -1;
    mkmodel_pool_copy_rows(t, e->seed, p->bytes, jb->row0, jb->n_rows, dst);
    pthread_mutex_lock(&e->mu);
    if (--p->jobs_left == 0) {
        free(p->bytes);
        p->bytes = NULL;
    }
    pthread_mutex_unlock(&e->mu);
    return 0;
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

        if (fill_job(e, &e->jobs[j], e->slot[j % e->n_slots], scratch, &err) < 0) {
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
                if (e->pools)
                    e->pools[i].jobs_left++;
            }
        }
        if (pass == 0 && !(e->jobs = calloc((size_t)n + 1, sizeof *e->jobs)))
            return guild_err_set(err, "out of memory for %lld jobs", (long long)n);
    }
    e->n_jobs = n;
    return 0;
}

/* The pools' sizes and chunks (their bytes come later, in pool_ready). */
static int make_pools(emitter_t *e, guild_err_t *err)
{
    int64_t n = mkmodel_plan_n_tensors(e->plan);
    if (!(e->pools = calloc((size_t)n + 1, sizeof *e->pools)))
        return guild_err_set(err, "out of memory for %lld pools", (long long)n);
    for (int64_t i = 0; i < n; i++) {
        const mkmodel_tensor_t *t = mkmodel_plan_tensor(e->plan, i);
        pool_t *p = &e->pools[i];
        if (!(p->rows = mkmodel_pool_rows(t)))
            continue;
        uint64_t per_row = (uint64_t)t->ne[0] / quant_type_info(t->type)->block_elems;
        p->chunk_rows = per_row >= POOL_CHUNK_BLOCKS ? 1 : POOL_CHUNK_BLOCKS / per_row;
        p->n_chunks = (int64_t)((p->rows + p->chunk_rows - 1) / p->chunk_rows);
    }
    return 0;
}

int mkmodel_emit(gguf_writer_t *const *w, const int64_t *first, int n_w, const mkmodel_plan_t *plan, uint64_t seed,
                 mkmodel_fill_t fill, int threads, mkmodel_progress_fn progress, void *progress_arg, guild_err_t *err)
{
    emitter_t e;
    memset(&e, 0, sizeof e);
    e.plan = plan;
    e.seed = seed;
    e.n_slots = 2 * threads + 2;
    pthread_t *tid = NULL;
    int n_started = 0, rc = -1;
    bool sync_made = false;
    if ((fill == MKMODEL_FILL_POOL && make_pools(&e, err) < 0) || make_jobs(&e, err) < 0)
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
    int part = 0; /* the writer of job j's tensor */
    for (int64_t j = 0; j < e.n_jobs && n_started > 0; j++) {
        while (part + 1 < n_w && e.jobs[j].tensor >= first[part + 1])
            part++;
        pthread_mutex_lock(&e.mu);
        while (!e.failed && e.slot_done[j % e.n_slots] != j)
            pthread_cond_wait(&e.cv, &e.mu);
        bool failed = e.failed;
        pthread_mutex_unlock(&e.mu);
        if (failed)
            break;
        guild_err_t werr;
        if (gguf_writer_write(w[part], e.slot[j % e.n_slots], e.jobs[j].bytes, &werr) < 0) {
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
    if (e.pools)
        for (int64_t i = 0; i < mkmodel_plan_n_tensors(plan); i++)
            free(e.pools[i].bytes);
    free(e.pools);
    free(tid);
    return rc;
}
