#include "cpu-expert-worker/experts/expert_prefetch.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>

typedef struct range {
    const char *p;
    int64_t rows; /* of `row` bytes */
    uint64_t row;
} range_t;

struct expert_prefetch {
    expert_pipe_src_t src;
    guild_pool_t *pool;
    range_t r[3 * EXPERT_PREFETCH_MAX];
    int n_r;
    int n_tasks;
    bool (*stop)(void *ctx);
    void *ctx;
    _Atomic int stopped;
    _Atomic uint64_t bytes;
    _Atomic int32_t *taken; /* [pool threads] slice k started */
};

int expert_prefetch_new(expert_prefetch_t **out, const expert_pipe_src_t *src, guild_pool_t *pool,
                        guild_err_t *err)
{
    expert_prefetch_t *p = calloc(1, sizeof *p);
    if (!p)
        return guild_err_set(err, "expert prefetch: out of memory");
    p->src = *src;
    p->pool = pool;
    if (!(p->taken = calloc((size_t)guild_pool_threads(pool), sizeof *p->taken))) {
        free(p);
        return guild_err_set(err, "expert prefetch: out of memory");
    }
    *out = p;
    return 0;
}

void expert_prefetch_destroy(expert_prefetch_t **pp)
{
    if (*pp)
        free((*pp)->taken);
    free(*pp);
    *pp = NULL;
}

/* The matrices of the experts, in order, as byte ranges (interleaved gate/up rows: one range). */
static int ranges(const expert_pipe_src_t *s, int32_t layer, int32_t n, const int32_t *ids, range_t *r)
{
    int nr = 0, taken = 0;
    if (layer < 0 || layer >= s->n_layer)
        return 0;
    for (int32_t i = 0; i < n && taken < EXPERT_PREFETCH_MAX; i++) {
        const int32_t e = ids[i];
        bool dup = e < 0 || e >= s->n_expert;
        for (int32_t j = 0; j < i && !dup; j++)
            dup = ids[j] == e;
        const expert_mats_t *m = dup ? NULL : s->get(s->ctx, layer, e);
        if (!m)
            continue;
        r[nr++] = (range_t){m->gate, s->n_ff, m->gate_row}; /* interleaved: gate and up rows alternate in it */
        if (!expert_mats_interleaved(m))
            r[nr++] = (range_t){m->up, s->n_ff, m->up_row};
        r[nr++] = (range_t){m->down, s->n_embd, m->down_row};
        taken++;
    }
    return nr;
}

static uint64_t ranges_bytes(const range_t *r, int nr)
{
    uint64_t b = 0;
    for (int i = 0; i < nr; i++)
        b += (uint64_t)r[i].rows * r[i].row;
    return b;
}

uint64_t expert_prefetch_bytes(const expert_prefetch_t *p, int32_t layer, int32_t n, const int32_t *ids)
{
    range_t r[3 * EXPERT_PREFETCH_MAX];
    return ranges_bytes(r, ranges(&p->src, layer, n, ids, r));
}

/* Thread k: slice k of every range (expert_pipe_slice: the rows thread k computes first of a preferred expert's
 * gate and up, expert_pipe_prefer), in order, a chunk at a time, until the ranges end or stop() says so. A thread
 * that runs two tasks takes, in the second, the slice no thread took. */
static void prefetch_task(void *ctx, int64_t task, int thread)
{
    expert_prefetch_t *p = ctx;
    (void)task;
    uint64_t done = 0;
    /* its own slice, or, in a second task of this thread, one no thread took */
    int k = thread;
    int32_t no = 0;
    if (!atomic_compare_exchange_strong(&p->taken[k], &no, 1))
        for (k = 0; k < p->n_tasks; k++) {
            no = 0;
            if (atomic_compare_exchange_strong(&p->taken[k], &no, 1))
                break;
        }
    if (k >= p->n_tasks)
        return;
    for (int i = 0; i < p->n_r; i++) {
        const range_t *r = &p->r[i];
        int64_t r0, nr;
        expert_pipe_slice(r->rows, p->n_tasks, k, &r0, &nr);
        const char *a = r->p + (uint64_t)r0 * r->row, *end = a + (uint64_t)nr * r->row;
        while (a < end) {
            if (atomic_load_explicit(&p->stopped, memory_order_relaxed))
                goto out;
            if (p->stop(p->ctx)) {
                atomic_store_explicit(&p->stopped, 1, memory_order_relaxed);
                goto out;
            }
            const char *ce = end - a > (ptrdiff_t)EXPERT_PREFETCH_CHUNK ? a + EXPERT_PREFETCH_CHUNK : end;
            done += (uint64_t)(ce - a);
            for (; a < ce; a += 64)
                __builtin_prefetch(a, 0, 2); /* into the core's L2 (prefetcht1 on x86) */
        }
    }
out:
    atomic_fetch_add_explicit(&p->bytes, done, memory_order_relaxed);
}

uint64_t expert_prefetch_run(expert_prefetch_t *p, int32_t layer, int32_t n, const int32_t *ids,
                             bool (*stop)(void *ctx), void *ctx)
{
    p->n_r = ranges(&p->src, layer, n, ids, p->r);
    if (!p->n_r || stop(ctx))
        return 0;
    p->stop = stop;
    p->ctx = ctx;
    p->n_tasks = guild_pool_threads(p->pool);
    atomic_store_explicit(&p->stopped, 0, memory_order_relaxed);
    atomic_store_explicit(&p->bytes, 0, memory_order_relaxed);
    for (int k = 0; k < p->n_tasks; k++)
        atomic_store_explicit(&p->taken[k], 0, memory_order_relaxed);
    guild_pool_run(p->pool, p->n_tasks, prefetch_task, p);
    const uint64_t all = ranges_bytes(p->r, p->n_r), b = atomic_load(&p->bytes);
    return b < all ? b : all;
}
