#include "cpu-expert-worker/experts/expert_pipe.h"

#include <sched.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/kern/pack.h"
#include "core/model/activation.h"
#include "core/quant/types.h"
#include "cpu-expert-worker/experts/expert_matmul.h"
#include "cpu-expert-worker/experts/expert_pipe_prof.h"

/* Automatic row blocks (guided self-scheduling): a thread claims rows worth about 1 / (GUIDE * threads) of the
 * run's remaining work, at most a whole matrix and at least MIN_ROWS rows. Early claims are whole matrices (one
 * long stream each: a task's start costs a memory latency before its prefetches run ahead), the last ones are
 * small, so that the threads finish the layer together: on a shared or virtualised machine the threads' speeds
 * differ by tens of percent from moment to moment, and with fixed whole-matrix tasks the layer's end waited on
 * the slowest (bench/results/experts-vm-2026-11-30.md, "Scheduling"). */
#define GUIDE 2
#define MIN_ROWS 16
_Static_assert(MIN_ROWS % KERN_PACK_ROWS == 0, "claims start on a packed matrix's 16-row group");

/* Per-expert progress, one cache line each: written by the tasks of that expert only. */
typedef struct expert_state {
    _Atomic int64_t gu_rows_done; /* gate/up rows finished */
    _Atomic int32_t ready;        /* 1 once the expert's hidden vectors are quantized (release) */
    char pad[64 - sizeof(int64_t) - sizeof(int32_t)];
} __attribute__((aligned(64))) expert_state_t;

struct expert_pipe {
    expert_pipe_src_t src;
    guild_pool_t *pool;
    int32_t gu_rows, down_rows; /* from the tuning; 0 = automatic, per run */
    int32_t guide, min_rows;    /* the automatic claims' rule (GUIDE and MIN_ROWS unless tuned) */
    int32_t pin_down_tokens;    /* runs of more tokens leave the preferred experts' down rows to the claims */

    /* scratch, grown to the largest batch seen; p = a pair's index in expert order */
    int64_t cap_pairs, cap_tokens;
    int32_t *pair;     /* [cap_pairs] t * n_used + k of pair p */
    int32_t *pos;      /* [cap_pairs] by t * n_used + k: its p, or -1 when not owned */
    int32_t *xrow;     /* [cap_pairs] the p whose xg/xu rows hold pair p's activations: p itself when its expert
                        * has several pairs (its kernel calls read the expert's pairs' rows one after another),
                        * else its token's first owned pair (no copy: quantize_x writes that row only) */
    int32_t *count;    /* [n_expert] pairs per expert, then a cursor */
    int32_t *used;     /* [n_expert] experts with pairs, ascending */
    int32_t *start;    /* [n_expert + 1] first p of used[i] */
    expert_state_t *state; /* [n_expert] by used index */
    char *xg, *xu;     /* [cap_pairs][act row] x of the pair's token, in gate's / up's activation type */
    float *h;          /* [cap_pairs][n_ff] gate projection, then silu(gate) * up */
    float *u;          /* [cap_pairs][n_ff] up projection */
    char *hq;          /* [cap_pairs][down act row] the hidden vector in down's activation type */
    float *tmp;        /* [pool threads][tmp_per_thread] down outputs of several tokens before the scatter, or
                        * [tokens][2 rows] outputs of interleaved gate/up rows (expert_mats_interleaved) */
    size_t tmp_per_thread; /* floats */
    int64_t *seg_cost;     /* [2 n_expert + 1] work before segment k (see run_job_t), cost units */
    int32_t *first;        /* [n_expert] experts the next run takes first (expert_pipe_prefer) */
    int32_t n_first;
    _Atomic int32_t x_done; /* tokens quantized */
    _Atomic int32_t x_next; /* next token to quantize */
    _Atomic uint64_t cursor; /* next work: segment << 32 | first row */
    int32_t n_pinned;        /* the run's first experts (preferred) whose gate/up rows go in slices by thread */
    int32_t n_pinned_down;   /* the first of those whose down rows go in slices too (claims skip their segments) */
    _Atomic int32_t *slice_taken; /* [pool threads] slice k of those rows started by a task (1) */
    expert_pipe_prof_t *prof;     /* borrowed; NULL: no profile (expert_pipe_set_prof) */
};

typedef struct run_job {
    expert_pipe_t *p;
    int32_t layer, n_tokens, n_used_experts;
    const float *x;
    float *y;
    guild_type_t gate_act, up_act, down_act;
    size_t xg_row, xu_row, hq_row; /* bytes */
    /* The work of a run as 2 * n_used_experts segments in the order they are claimed: segment i < n_used is
     * the gate and up rows of expert used[i], segment n_used + i its down rows. A row costs its bytes times
     * the expert's tokens (memory-bound decode: bytes; compute-bound batches: bytes * tokens). */
    int64_t gu_max, down_max;      /* most rows per claim (the tuning's blocks, or a whole matrix) */
    int fixed;                     /* the tuning fixed the blocks: every claim takes gu_max / down_max rows */
    int interleaved;               /* the layer's gate/up rows alternate: per-thread buffers sized for them */
    int n_threads;
    int max_spins;                 /* a hand-off wait's spins before it yields (wait_at_least) */
} run_job_t;

static const expert_mats_t *shard_get(const void *ctx, int32_t layer, int32_t expert)
{
    return expert_shard_get(ctx, layer, expert);
}

void expert_pipe_src_from_shard(expert_pipe_src_t *src, const expert_shard_t *shard)
{
    const model_config_t *c = expert_shard_config(shard);
    *src = (expert_pipe_src_t){
        .n_layer = c->n_layer,
        .n_expert = c->n_expert,
        .n_expert_used = c->n_expert_used,
        .n_embd = c->n_embd,
        .n_ff = c->n_ff_exp,
        .get = shard_get,
        .ctx = shard,
        .act = model_expert_act_of(c),
    };
}

static void free_scratch(expert_pipe_t *p)
{
    free(p->pair);
    free(p->pos);
    free(p->xrow);
    free(p->xg);
    free(p->xu);
    free(p->h);
    free(p->u);
    free(p->hq);
    free(p->tmp);
    p->pair = p->pos = p->xrow = NULL;
    p->xg = p->xu = p->hq = NULL;
    p->h = p->u = p->tmp = NULL;
    p->cap_pairs = p->cap_tokens = 0;
    p->tmp_per_thread = 0;
}

int expert_pipe_new(expert_pipe_t **out, const expert_pipe_src_t *src, guild_pool_t *pool,
                    const expert_pipe_tuning_t *tuning, guild_err_t *err)
{
    *out = NULL;
    expert_pipe_tuning_t t = {0, 0, 0, 0};
    if (tuning)
        t = *tuning;
    if (t.gate_up_rows < 0 || t.gate_up_rows % 16 || t.down_rows < 0 || t.down_rows % 16)
        return guild_err_set(err, "expert pipeline: row blocks %d (gate/up) and %d (down) must be multiples of 16 "
                                  "(0: automatic)", t.gate_up_rows, t.down_rows);
    if (t.guide < 0 || t.min_rows < 0 || t.min_rows % MIN_ROWS)
        return guild_err_set(err, "expert pipeline: guided claims of 1/(%d threads), at least %d rows: the guide must "
                                  "be positive and the rows a multiple of %d (0: defaults)",
                             t.guide, t.min_rows, MIN_ROWS);
    expert_pipe_t *p = calloc(1, sizeof *p);
    if (!p)
        return guild_err_set(err, "expert pipeline: out of memory");
    p->src = *src;
    p->pool = pool;
    p->gu_rows = t.gate_up_rows;
    p->down_rows = t.down_rows;
    p->guide = t.guide ? t.guide : GUIDE;
    p->min_rows = t.min_rows ? t.min_rows : MIN_ROWS;
    p->pin_down_tokens = EXPERT_PIPE_PIN_DOWN_TOKENS;
    p->count = calloc((size_t)src->n_expert, sizeof *p->count);
    p->used = calloc((size_t)src->n_expert, sizeof *p->used);
    p->start = calloc((size_t)src->n_expert + 1, sizeof *p->start);
    p->state = aligned_alloc(64, (size_t)src->n_expert * sizeof *p->state);
    p->seg_cost = calloc(2 * (size_t)src->n_expert + 1, sizeof *p->seg_cost);
    p->first = calloc((size_t)src->n_expert, sizeof *p->first);
    p->slice_taken = calloc((size_t)guild_pool_threads(pool), sizeof *p->slice_taken);
    if (!p->count || !p->used || !p->start || !p->state || !p->seg_cost || !p->first || !p->slice_taken) {
        expert_pipe_destroy(&p);
        return guild_err_set(err, "expert pipeline: out of memory");
    }
    *out = p;
    return 0;
}

void expert_pipe_destroy(expert_pipe_t **pp)
{
    expert_pipe_t *p = *pp;
    if (!p)
        return;
    free_scratch(p);
    free(p->count);
    free(p->used);
    free(p->start);
    free(p->state);
    free(p->seg_cost);
    free(p->first);
    free(p->slice_taken);
    free(p);
    *pp = NULL;
}

/* Room for n_pairs pairs of n_tokens tokens; activation rows sized for the widest type (F32), so one
 * allocation fits every layer. */
static int reserve(expert_pipe_t *p, int64_t n_pairs, guild_err_t *err)
{
    if (n_pairs <= p->cap_pairs)
        return 0;
    free_scratch(p);
    const size_t P = (size_t)n_pairs, E = (size_t)p->src.n_embd, F = (size_t)p->src.n_ff;
    p->pair = malloc(P * sizeof *p->pair);
    p->pos = malloc(P * sizeof *p->pos);
    p->xrow = malloc(P * sizeof *p->xrow);
    p->xg = malloc(P * E * sizeof(float));
    p->xu = malloc(P * E * sizeof(float));
    p->h = malloc(P * F * sizeof(float));
    p->u = malloc(P * F * sizeof(float));
    p->hq = malloc(P * F * sizeof(float));
    if (!p->pair || !p->pos || !p->xrow || !p->xg || !p->xu || !p->h || !p->u || !p->hq) {
        free_scratch(p);
        return guild_err_set(err, "expert pipeline: out of memory for %lld (token, expert) pairs",
                             (long long)n_pairs);
    }
    p->cap_pairs = n_pairs;
    return 0;
}

/* Grows the per-thread buffers to `need` floats each (their contents are not kept). */
static int reserve_tmp(expert_pipe_t *p, size_t need, guild_err_t *err)
{
    if (need <= p->tmp_per_thread)
        return 0;
    float *t = realloc(p->tmp, need * (size_t)guild_pool_threads(p->pool) * sizeof(float));
    if (!t)
        return guild_err_set(err, "expert pipeline: out of memory for %zu floats a thread", need);
    p->tmp = t;
    p->tmp_per_thread = need;
    return 0;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Spins on *flag until it reaches `want` (acquire). A wait normally lasts a fraction of a task (microseconds);
 * past that the producer was probably preempted, and yielding lets it run. When the pool's threads share cores
 * (guild_pool_shared) that is the likely case from the start, so the spin is short. */
#define PIPE_SPINS 20000
#define PIPE_SPINS_SHARED 64

static void wait_at_least(_Atomic int32_t *flag, int32_t want, int max_spins)
{
    for (int spins = 0; atomic_load_explicit(flag, memory_order_acquire) < want; spins++) {
        if (spins < max_spins)
            cpu_relax();
        else
            sched_yield();
    }
}

/* wait_at_least, its time added to *ns when profiling (prof set) and the flag is not there yet. */
static void wait_timed(_Atomic int32_t *flag, int32_t want, int max_spins, const expert_pipe_prof_t *prof,
                       uint64_t *ns)
{
    if (!prof || atomic_load_explicit(flag, memory_order_acquire) >= want) {
        wait_at_least(flag, want, max_spins);
        return;
    }
    const uint64_t t0 = expert_pipe_prof_now();
    wait_at_least(flag, want, max_spins);
    *ns += expert_pipe_prof_now() - t0;
}

/* The profile's slot of pool thread `thread`, or NULL (no profile, or a thread past the profile's slots). */
static inline expert_pipe_prof_thread_t *prof_slot(const expert_pipe_t *p, int thread)
{
    return p->prof && thread < EXPERT_PIPE_PROF_THREADS ? &p->prof->t[thread] : NULL;
}

static size_t act_row(guild_type_t weight_type, int64_t n)
{
    uint64_t bytes = 0;
    int rc = quant_row_bytes(quant_type_info(weight_type)->dot_type, (uint64_t)n, &bytes, NULL);
    GUILD_ASSERT(rc == 0);
    return (size_t)bytes;
}

/* Token t: x[t] quantized once per activation type into its first owned pair's rows, and copied to those of its
 * other pairs whose expert has several pairs (xrow: a single pair's kernel calls read the first pair's rows). */
static void quantize_x(run_job_t *j, int32_t t)
{
    expert_pipe_t *p = j->p;
    const int32_t K = p->src.n_expert_used;
    const float *x = j->x + (size_t)t * (size_t)p->src.n_embd;
    int32_t first = -1;
    for (int32_t k = 0; k < K; k++) {
        const int32_t q = p->pos[(size_t)t * (size_t)K + (size_t)k];
        if (q < 0)
            continue;
        char *xg = p->xg + (size_t)q * j->xg_row, *xu = p->xu + (size_t)q * j->xu_row;
        if (first < 0) {
            expert_quantize(j->gate_act, x, xg, p->src.n_embd);
            if (j->up_act != j->gate_act)
                expert_quantize(j->up_act, x, xu, p->src.n_embd);
            first = q;
        } else if (p->xrow[q] == q) {
            memcpy(xg, p->xg + (size_t)first * j->xg_row, j->xg_row);
            if (j->up_act != j->gate_act)
                memcpy(xu, p->xu + (size_t)first * j->xu_row, j->xu_row);
        }
    }
    atomic_fetch_add_explicit(&p->x_done, 1, memory_order_release);
}

/* h[r] = act(g[r] + gate_b[r], u[r] + up_b[r]) for r in [r0, r0 + nr): g and u at stride gs and us floats (the
 * interleaved layout's 2 and 2), without biases when the expert has none. */
static void activate(const model_expert_act_t *a, const expert_mats_t *m, float *h, const float *g, const float *u,
                     size_t gs, size_t us, int64_t r0, int64_t nr)
{
    if (m->gate_b) {
        for (int64_t r = 0; r < nr; r++)
            h[r] = model_expert_act(a, g[(size_t)r * gs] + m->gate_b[r0 + r], u[(size_t)r * us] + m->up_b[r0 + r]);
        return;
    }
    for (int64_t r = 0; r < nr; r++)
        h[r] = model_expert_act(a, g[(size_t)r * gs], u[(size_t)r * us]);
}

/* y[r] += down_b[r0 + r] for r < nr, when the expert has the bias. */
static void add_down_bias(const expert_mats_t *m, float *y, int64_t r0, int64_t nr)
{
    if (m->down_b)
        for (int64_t r = 0; r < nr; r++)
            y[r] += m->down_b[r0 + r];
}

/* Gate and up rows [r0, r0 + nr) of expert used[i] for all its pairs, then silu(gate) * up (the model's
 * activation); the task that finishes the expert's last rows quantizes its hidden vectors and publishes them. */
static void gate_up_rows(run_job_t *j, int32_t i, int64_t r0, int64_t nr, int thread)
{
    expert_pipe_t *p = j->p;
    const int64_t F = p->src.n_ff, E = p->src.n_embd;
    const int32_t p0 = p->start[i], np = p->start[i + 1] - p0;
    const expert_mats_t *m = p->src.get(p->src.ctx, j->layer, p->used[i]);
    const char *xu = j->up_act != j->gate_act ? p->xu : p->xg;
    const size_t xu_row = j->up_act != j->gate_act ? j->xu_row : j->xg_row;
    const int32_t a0 = p->xrow[p0]; /* the first of np activation rows, one after another (np == 1: any row) */
    expert_pipe_prof_thread_t *pt = prof_slot(p, thread);
    wait_timed(&p->x_done, j->n_tokens, j->max_spins, pt ? p->prof : NULL, pt ? &pt->x_wait_ns : NULL);
    if (j->interleaved && expert_mats_interleaved(m)) {
        /* gate and up rows alternate: one call reads them as one matrix of 2 nr rows (one stream); output
         * column 2 k is gate row r0 + k, 2 k + 1 up row r0 + k (the same kernel per row: the same bits) */
        float *tmp = p->tmp + (size_t)thread * p->tmp_per_thread;
        const size_t rb = m->gate_row / 2;
        expert_matmul(m->gate_type, false, E, 2 * nr, np, (const char *)m->gate + (size_t)r0 * m->gate_row, rb,
                      p->xg + (size_t)a0 * j->xg_row, j->xg_row, tmp, (size_t)(2 * nr));
        for (int32_t q = 0; q < np; q++) {
            const float *gu = tmp + (size_t)q * (size_t)(2 * nr);
            activate(&p->src.act, m, p->h + (size_t)(p0 + q) * (size_t)F + (size_t)r0, gu, gu + 1, 2, 2, r0, nr);
        }
    } else {
        /* claims start on 16-row groups (MIN_ROWS and the tuning's blocks are multiples of 16; a packed matrix
         * has a multiple of 16 rows) */
        GUILD_ASSERT(!(m->gate_packed || m->up_packed) || r0 % KERN_PACK_ROWS == 0);
        expert_matmul(m->gate_type, m->gate_packed, E, nr, np, (const char *)m->gate + (size_t)r0 * m->gate_row,
                      m->gate_row, p->xg + (size_t)a0 * j->xg_row, j->xg_row,
                      p->h + (size_t)p0 * (size_t)F + (size_t)r0, (size_t)F);
        expert_matmul(m->up_type, m->up_packed, E, nr, np, (const char *)m->up + (size_t)r0 * m->up_row, m->up_row,
                      xu + (size_t)a0 * xu_row, xu_row, p->u + (size_t)p0 * (size_t)F + (size_t)r0, (size_t)F);
        for (int32_t q = p0; q < p0 + np; q++) {
            float *h = p->h + (size_t)q * (size_t)F + (size_t)r0;
            activate(&p->src.act, m, h, h, p->u + (size_t)q * (size_t)F + (size_t)r0, 1, 1, r0, nr);
        }
    }
    expert_state_t *s = &p->state[i];
    if (atomic_fetch_add_explicit(&s->gu_rows_done, nr, memory_order_acq_rel) + nr == F) {
        for (int32_t q = p0; q < p0 + np; q++)
            expert_quantize(j->down_act, p->h + (size_t)q * (size_t)F, p->hq + (size_t)q * j->hq_row, F);
        atomic_store_explicit(&s->ready, 1, memory_order_release);
    }
}

/* Down rows [r0, r0 + nr) of expert used[i] for all its pairs, straight into y. */
static void down_rows(run_job_t *j, int32_t i, int64_t r0, int64_t nr, int thread)
{
    expert_pipe_t *p = j->p;
    const int64_t F = p->src.n_ff, E = p->src.n_embd;
    const int32_t p0 = p->start[i], np = p->start[i + 1] - p0;
    const expert_mats_t *m = p->src.get(p->src.ctx, j->layer, p->used[i]);
    expert_pipe_prof_thread_t *pt = prof_slot(p, thread);
    wait_timed(&p->state[i].ready, 1, j->max_spins, pt ? p->prof : NULL, pt ? &pt->h_wait_ns : NULL);
    const char *w = (const char *)m->down + (size_t)r0 * m->down_row;
    GUILD_ASSERT(!m->down_packed || r0 % KERN_PACK_ROWS == 0);
    if (np == 1) {
        float *y = j->y + (size_t)p->pair[p0] * (size_t)E + (size_t)r0;
        expert_matmul(m->down_type, m->down_packed, F, nr, 1, w, m->down_row, p->hq + (size_t)p0 * j->hq_row, j->hq_row,
                      y, (size_t)nr);
        add_down_bias(m, y, r0, nr);
        return;
    }
    /* several tokens: one kernel call reads each row once for all of them, then the rows go to their pairs */
    float *tmp = p->tmp + (size_t)thread * p->tmp_per_thread;
    expert_matmul(m->down_type, m->down_packed, F, nr, np, w, m->down_row, p->hq + (size_t)p0 * j->hq_row, j->hq_row, tmp,
                  (size_t)nr);
    for (int32_t q = 0; q < np; q++) {
        float *y = j->y + (size_t)p->pair[p0 + q] * (size_t)E + (size_t)r0;
        memcpy(y, tmp + (size_t)q * (size_t)nr, (size_t)nr * sizeof(float));
        add_down_bias(m, y, r0, nr);
    }
}

/* gate_up_rows or down_rows (down: true), timed into the thread's profile slot when there is one. */
static void run_rows(run_job_t *j, bool down, int32_t i, int64_t r0, int64_t nr, int thread)
{
    expert_pipe_prof_thread_t *pt = prof_slot(j->p, thread);
    const uint64_t t0 = pt ? expert_pipe_prof_now() : 0;
    if (down)
        down_rows(j, i, r0, nr, thread);
    else
        gate_up_rows(j, i, r0, nr, thread);
    if (pt) {
        const uint64_t t1 = expert_pipe_prof_now();
        pt->task_ns += t1 - t0;
        pt->tasks++;
        pt->run_end = t1;
    }
}

static int64_t seg_rows(const run_job_t *j, int64_t seg)
{
    return seg < j->n_used_experts ? j->p->src.n_ff : j->p->src.n_embd;
}

/* Claims the next rows: segment *seg, rows [*r0, *r0 + *nr). False when the run's work is all claimed. */
static bool claim(run_job_t *j, int64_t *seg, int64_t *r0, int64_t *nr)
{
    expert_pipe_t *p = j->p;
    const int64_t n_seg = 2 * (int64_t)j->n_used_experts;
    const int64_t pd_lo = j->n_used_experts, pd_hi = pd_lo + p->n_pinned_down; /* the slices' down segments */
    uint64_t c = atomic_load_explicit(&p->cursor, memory_order_relaxed);
    for (;;) {
        const int64_t s = (int64_t)(c >> 32), r = (int64_t)(c & 0xffffffffu);
        if (s >= n_seg)
            return false;
        if (s >= pd_lo && s < pd_hi) { /* computed in slices (pinned_down): the claims go on after them */
            if (atomic_compare_exchange_weak_explicit(&p->cursor, &c, (uint64_t)pd_hi << 32, memory_order_relaxed,
                                                      memory_order_relaxed))
                c = (uint64_t)pd_hi << 32;
            continue;
        }
        const int64_t rows = seg_rows(j, s), left = rows - r;
        const int64_t max = s < j->n_used_experts ? j->gu_max : j->down_max;
        int64_t take = max;
        if (!j->fixed) {
            /* cost of one row of this segment, and of everything not yet claimed */
            const int64_t per_row = (p->seg_cost[s + 1] - p->seg_cost[s]) / rows;
            const int64_t remaining = p->seg_cost[n_seg] - p->seg_cost[s] - r * per_row;
            const int64_t min_rows = p->min_rows;
            take = remaining / ((int64_t)p->guide * j->n_threads * (per_row > 0 ? per_row : 1));
            take = (take + min_rows - 1) / min_rows * min_rows;
            take = take < min_rows ? min_rows : take > max ? max : take;
        }
        if (take > left)
            take = left;
        const uint64_t next = r + take == rows ? (uint64_t)(s + 1) << 32 : ((uint64_t)s << 32) | (uint64_t)(r + take);
        if (atomic_compare_exchange_weak_explicit(&p->cursor, &c, next, memory_order_relaxed, memory_order_relaxed)) {
            *seg = s;
            *r0 = r;
            *nr = take;
            return true;
        }
    }
}

/* Slice k of the pinned experts' gate/up rows (expert_pipe_prefer). */
static void pinned_slice(run_job_t *j, int k, int thread)
{
    for (int32_t i = 0; i < j->p->n_pinned; i++) {
        int64_t r0, nr;
        expert_pipe_slice(j->p->src.n_ff, j->n_threads, k, &r0, &nr);
        for (int64_t r = r0; r < r0 + nr; r += j->gu_max) /* a claim's most rows: the per-thread buffers' size */
            run_rows(j, false, i, r, r0 + nr - r < j->gu_max ? r0 + nr - r : j->gu_max, thread);
    }
}

/* Slice k of the down rows of pinned expert i: the rows thread k prefetched (expert_prefetch slices every matrix
 * alike), from its own core's cache rather than another's. */
static void pinned_down_slice(run_job_t *j, int32_t i, int k, int thread)
{
    int64_t r0, nr;
    expert_pipe_slice(j->p->src.n_embd, j->n_threads, k, &r0, &nr);
    for (int64_t r = r0; r < r0 + nr; r += j->down_max) /* the per-thread buffer's size */
        run_rows(j, true, i, r, r0 + nr - r < j->down_max ? r0 + nr - r : j->down_max, thread);
}

/* The pinned experts' down slices k whose hidden vectors are ready now (bit i of *left set: still to do), or,
 * with `wait`, all the others (the tasks of the other slices finish their gate/up rows before anything else, so
 * the wait ends). */
static void pinned_down(run_job_t *j, int k, int thread, uint64_t *left, bool wait)
{
    for (int32_t i = 0; i < j->p->n_pinned_down; i++)
        if ((*left >> i & 1) && (wait || atomic_load_explicit(&j->p->state[i].ready, memory_order_acquire))) {
            pinned_down_slice(j, i, k, thread);
            *left &= ~(1ull << i);
        }
}

/* One per thread: quantize tokens while some are left; with pinned experts, its own slice of their gate/up rows
 * (that of the thread whose cache holds them; another's when a thread ran two tasks and left one untaken); then
 * claim and compute rows until none are left. */
static void pipe_worker(void *ctx, int64_t task_index, int thread)
{
    run_job_t *j = ctx;
    expert_pipe_t *p = j->p;
    (void)task_index;
    expert_pipe_prof_thread_t *pt = prof_slot(p, thread);
    if (pt && !pt->run_start)
        pt->run_start = pt->run_end = expert_pipe_prof_now();
    for (;;) {
        const int32_t t = atomic_fetch_add_explicit(&p->x_next, 1, memory_order_relaxed);
        if (t >= j->n_tokens)
            break;
        const uint64_t t0 = pt ? expert_pipe_prof_now() : 0;
        quantize_x(j, t);
        if (pt)
            pt->x_ns += (pt->run_end = expert_pipe_prof_now()) - t0;
    }
    int k = j->n_threads;
    uint64_t left = 0; /* pinned experts whose down slice k is still to do */
    if (p->n_pinned) {
        k = thread;
        int32_t no = 0;
        if (!atomic_compare_exchange_strong(&p->slice_taken[k], &no, 1))
            for (k = 0; k < j->n_threads; k++) {
                no = 0;
                if (atomic_compare_exchange_strong(&p->slice_taken[k], &no, 1))
                    break;
            }
        if (k < j->n_threads) {
            pinned_slice(j, k, thread);
            left = p->n_pinned_down == 64 ? ~0ull : (1ull << p->n_pinned_down) - 1;
            pinned_down(j, k, thread, &left, false);
        }
    }
    int64_t seg, r0, nr;
    while (claim(j, &seg, &r0, &nr)) {
        if (seg < j->n_used_experts)
            run_rows(j, false, (int32_t)seg, r0, nr, thread);
        else
            run_rows(j, true, (int32_t)(seg - j->n_used_experts), r0, nr, thread);
        if (left) /* the pinned experts' down slices as soon as their hidden vectors are in */
            pinned_down(j, k, thread, &left, false);
    }
    if (left)
        pinned_down(j, k, thread, &left, true);
}

void expert_pipe_prefer(expert_pipe_t *p, int32_t n, const int32_t *ids)
{
    p->n_first = 0;
    for (int32_t i = 0; i < n && p->n_first < p->src.n_expert; i++)
        if (ids[i] >= 0 && ids[i] < p->src.n_expert)
            p->first[p->n_first++] = ids[i];
}

void expert_pipe_set_pin_down(expert_pipe_t *p, int32_t max_tokens)
{
    p->pin_down_tokens = max_tokens;
}

void expert_pipe_set_prof(expert_pipe_t *p, expert_pipe_prof_t *prof)
{
    p->prof = prof;
}

int64_t expert_pipe_run(expert_pipe_t *p, int32_t layer, int32_t n_tokens, const float *x, const int32_t *ids,
                        float *y, guild_err_t *err)
{
    const uint64_t entry = p->prof ? expert_pipe_prof_now() : 0;
    const expert_pipe_src_t *s = &p->src;
    const int32_t K = s->n_expert_used;
    if (layer < 0 || layer >= s->n_layer)
        return guild_err_set(err, "expert pipeline: layer %d is out of range (%d layers)", layer, s->n_layer);
    if (n_tokens <= 0)
        return 0;
    const int64_t n_all = (int64_t)n_tokens * K;
    for (int64_t q = 0; q < n_all; q++)
        if (ids[q] >= s->n_expert)
            return guild_err_set(err, "expert pipeline: layer %d token %lld slot %lld: expert id %d is out of range",
                                 layer, (long long)(q / K), (long long)(q % K), ids[q]);
    if (reserve(p, n_all, err) < 0)
        return -1;

    /* group owned pairs by expert (counting sort: stable, so tokens stay in order within an expert); a skipped
     * pair (id < 0, moe_exec.h) is owned by nobody here */
    memset(p->count, 0, (size_t)s->n_expert * sizeof *p->count);
    for (int64_t q = 0; q < n_all; q++)
        if (ids[q] >= 0 && s->get(s->ctx, layer, ids[q]))
            p->count[ids[q]]++;
    /* the preferred experts first (their bytes were prefetched: read them before the stream evicts them), then
     * the others ascending; the order changes only which rows are computed when, never a result */
    int32_t n_used = 0, total = 0;
    const int32_t n_first = p->n_first;
    p->n_first = 0;
    for (int32_t i = 0; i < n_first + s->n_expert; i++) {
        const int32_t ex = i < n_first ? p->first[i] : i - n_first;
        bool first = false;
        for (int32_t f = 0; f < n_first && i >= n_first && !first; f++)
            first = p->first[f] == ex;
        if (first || ex < 0 || ex >= s->n_expert || p->count[ex] <= 0)
            continue;
        p->used[n_used] = ex;
        p->start[n_used] = total;
        total += p->count[ex];
        p->count[ex] = -p->start[n_used] - 1; /* now the cursor, negative (-1 - p): taken */
        n_used++;
    }
    for (int32_t i = 0; i < n_used; i++)
        p->count[p->used[i]] = p->start[i];
    p->n_pinned = 0; /* the preferred experts among them, first in used[] */
    for (int32_t i = 0; i < n_used && n_first; i++) {
        bool pref = false;
        for (int32_t f = 0; f < n_first && !pref; f++)
            pref = p->first[f] == p->used[i];
        if (!pref)
            break;
        p->n_pinned = i + 1;
    }
    p->start[n_used] = total;
    if (total == 0)
        return 0;
    for (int64_t q = 0; q < n_all; q++) {
        p->pos[q] = -1;
        if (ids[q] >= 0 && s->get(s->ctx, layer, ids[q])) {
            p->pos[q] = p->count[ids[q]];
            p->pair[p->count[ids[q]]++] = (int32_t)q;
        }
    }
    /* each pair's activation rows (xrow): its own where its expert has several pairs, else its token's first */
    for (int32_t i = 0; i < n_used; i++)
        for (int32_t q = p->start[i]; q < p->start[i + 1]; q++)
            p->xrow[q] = p->start[i + 1] - p->start[i] > 1 ? q : -1;
    for (int32_t t = 0; t < n_tokens; t++) {
        int32_t first = -1;
        for (int32_t k = 0; k < K; k++) {
            const int32_t q = p->pos[(size_t)t * (size_t)K + (size_t)k];
            if (q < 0)
                continue;
            if (first < 0)
                first = q;
            if (p->xrow[q] < 0)
                p->xrow[q] = first;
        }
    }
    for (int32_t i = 0; i < n_used; i++) {
        atomic_store_explicit(&p->state[i].gu_rows_done, 0, memory_order_relaxed);
        atomic_store_explicit(&p->state[i].ready, 0, memory_order_relaxed);
    }
    atomic_store_explicit(&p->x_done, 0, memory_order_relaxed);

    const expert_mats_t *any = s->get(s->ctx, layer, p->used[0]);
    run_job_t j = {
        .p = p,
        .layer = layer,
        .n_tokens = n_tokens,
        .n_used_experts = n_used,
        .x = x,
        .y = y,
        .gate_act = quant_type_info(any->gate_type)->dot_type,
        .up_act = quant_type_info(any->up_type)->dot_type,
        .down_act = quant_type_info(any->down_type)->dot_type,
        .xg_row = act_row(any->gate_type, s->n_embd),
        .xu_row = act_row(any->up_type, s->n_embd),
        .hq_row = act_row(any->down_type, s->n_ff),
    };
    /* claims: the tuning's fixed blocks, or guided (see GUIDE) up to whole matrices */
    int32_t max_np = 0;
    for (int32_t i = 0; i < n_used; i++)
        if (p->start[i + 1] - p->start[i] > max_np)
            max_np = p->start[i + 1] - p->start[i];
    j.n_threads = guild_pool_threads(p->pool);
    j.max_spins = guild_pool_shared(p->pool) ? PIPE_SPINS_SHARED : PIPE_SPINS;
    j.fixed = p->gu_rows != 0 || p->down_rows != 0; /* a stage left at 0 then takes whole matrices */
    j.gu_max = p->gu_rows ? p->gu_rows : s->n_ff;
    j.down_max = p->down_rows ? p->down_rows : s->n_embd;
    const size_t gu_bytes = any->gate_row + any->up_row, d_bytes = any->down_row;
    p->seg_cost[0] = 0;
    for (int32_t i = 0; i < n_used; i++)
        p->seg_cost[i + 1] = p->seg_cost[i] + (int64_t)gu_bytes * s->n_ff * (p->start[i + 1] - p->start[i]);
    for (int32_t i = 0; i < n_used; i++)
        p->seg_cost[n_used + i + 1] =
            p->seg_cost[n_used + i] + (int64_t)d_bytes * s->n_embd * (p->start[i + 1] - p->start[i]);
    /* several tokens on an expert: its down rows go through a per-thread buffer; so do interleaved gate/up rows */
    j.interleaved = expert_mats_interleaved(any);
    size_t need = max_np > 1 ? (size_t)max_np * (size_t)j.down_max : 0;
    if (j.interleaved && (size_t)max_np * 2 * (size_t)j.gu_max > need)
        need = (size_t)max_np * 2 * (size_t)j.gu_max;
    if (reserve_tmp(p, need, err) < 0)
        return guild_err_prefix(err, "%d tokens on one expert: ", max_np);
    atomic_store_explicit(&p->x_next, 0, memory_order_relaxed);
    /* the pinned experts' gate/up segments are the slices' (pipe_worker); claims start after them */
    if (p->n_pinned && p->src.n_ff % 16 && j.n_threads > 1)
        p->n_pinned = 0; /* rows not in 16-row groups: no slices, claims as usual */
    /* their down rows in slices too (up to 64: a task's mask), where those rows come in 16-row groups, in runs of
     * a few tokens (EXPERT_PIPE_PIN_DOWN_TOKENS) */
    p->n_pinned_down = (p->src.n_embd % 16 && j.n_threads > 1) || n_tokens > p->pin_down_tokens ? 0
                       : p->n_pinned < 64                                                  ? p->n_pinned
                                                                                           : 64;
    for (int k = 0; k < j.n_threads; k++)
        atomic_store_explicit(&p->slice_taken[k], 0, memory_order_relaxed);
    atomic_store_explicit(&p->cursor, (uint64_t)p->n_pinned << 32, memory_order_relaxed);
    /* the pool's release/acquire hand-off publishes the stores above to the workers */
    const uint64_t handoff = p->prof ? expert_pipe_prof_now() : 0;
    guild_pool_run(p->pool, j.n_threads, pipe_worker, &j);
    if (p->prof)
        expert_pipe_prof_end_run(p->prof, j.n_threads, entry, handoff, expert_pipe_prof_now());
    return total;
}

/* expert_pipe_warm's writes: buffer b's bytes [0, len[b]) in tasks of WARM_CHUNK bytes. */
#define WARM_CHUNK ((size_t)1 << 21)
#define WARM_BUFS 12

typedef struct warm_job {
    char *buf[WARM_BUFS];
    size_t len[WARM_BUFS];
    int64_t first[WARM_BUFS + 1]; /* the first task of each buffer */
    int n;
} warm_job_t;

static void warm_add(warm_job_t *w, void *buf, size_t len)
{
    GUILD_ASSERT(w->n < WARM_BUFS);
    w->buf[w->n] = buf;
    w->len[w->n] = len;
    w->first[w->n + 1] = w->first[w->n] + (int64_t)((len + WARM_CHUNK - 1) / WARM_CHUNK);
    w->n++;
}

static void warm_task(void *ctx, int64_t task, int thread)
{
    const warm_job_t *w = ctx;
    (void)thread;
    int b = 0;
    while (task >= w->first[b + 1])
        b++;
    const size_t off = (size_t)(task - w->first[b]) * WARM_CHUNK;
    const size_t n = w->len[b] - off < WARM_CHUNK ? w->len[b] - off : WARM_CHUNK;
    memset(w->buf[b] + off, 0, n); /* scratch: nothing in it is kept between runs */
}

int expert_pipe_warm(expert_pipe_t *p, int32_t n_tokens, guild_type_t gate_type, guild_type_t up_type,
                     guild_type_t down_type, guild_err_t *err)
{
    const expert_pipe_src_t *s = &p->src;
    if (n_tokens <= 0)
        return 0;
    const int64_t P = (int64_t)n_tokens * s->n_expert_used;
    if (reserve(p, P, err) < 0)
        return -1;
    /* a batch's busiest expert: about twice the fair share of its pairs, for the per-thread down buffers */
    const int64_t np = 2 * ((P + s->n_expert - 1) / s->n_expert);
    const int64_t down_max = p->down_rows ? p->down_rows : s->n_embd, gu_max = p->gu_rows ? p->gu_rows : s->n_ff;
    const size_t need = np > 1 ? (size_t)np * (size_t)(down_max > 2 * gu_max ? down_max : 2 * gu_max) : 0;
    if (reserve_tmp(p, need, err) < 0)
        return guild_err_prefix(err, "%lld tokens on one expert: ", (long long)np);
    const guild_type_t ga = quant_type_info(gate_type)->dot_type, ua = quant_type_info(up_type)->dot_type;
    const size_t F = (size_t)s->n_ff;
    warm_job_t w = {.n = 0};
    warm_add(&w, p->pair, (size_t)P * sizeof *p->pair);
    warm_add(&w, p->pos, (size_t)P * sizeof *p->pos);
    warm_add(&w, p->xrow, (size_t)P * sizeof *p->xrow);
    warm_add(&w, p->xg, (size_t)P * act_row(gate_type, s->n_embd));
    if (ua != ga)
        warm_add(&w, p->xu, (size_t)P * act_row(up_type, s->n_embd));
    warm_add(&w, p->h, (size_t)P * F * sizeof(float));
    warm_add(&w, p->u, (size_t)P * F * sizeof(float));
    warm_add(&w, p->hq, (size_t)P * act_row(down_type, s->n_ff));
    warm_add(&w, p->tmp, p->tmp_per_thread * (size_t)guild_pool_threads(p->pool) * sizeof(float));
    guild_pool_run(p->pool, w.first[w.n], warm_task, &w);
    return 0;
}
