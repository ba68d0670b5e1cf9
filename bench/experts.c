/* guild bench experts: the routed-expert pipeline (cpu-expert-worker/experts/expert_pipe) alone, on real expert shapes,
 * against the machine's measured DRAM read bandwidth.
 *
 * Decode: one token per step, K experts per layer drawn from a per-layer random permutation that is used up
 * before any expert repeats, over enough layers that the working set (--gb) is many times the last-level
 * cache: every step reads its experts' weights from DRAM. weight_GBps = bytes of the experts' weights read per
 * second; read_GBps = the STREAM-like probe (bench/bw.c) on the same pinned threads, measured right before;
 * fraction = weight_GBps / read_GBps. layout_GBps: the same kind of steps (same bank, same routing) read by
 * the simplest loop that touches every byte (bench_sum_bytes), split between the threads as the pipeline
 * splits its work, measured in turns with the decode runs: the ceiling of any kernel on this access pattern;
 * layout_fraction = weight_GBps / layout_GBps. turn_read_GBps: the probe's loop over the experts' own memory,
 * in turns with the decode runs; turn_fraction = the median over runs of the run's weight GB/s over the probe
 * measured right after it (robust to the drift of a shared machine). --routing random: each token's top-k drawn
 * on its own (several tokens share experts, as in batched decode). --profile: where the pipeline's time went
 * (expert_pipe_prof.h). --gap-us: the caller busy between steps as the engine's dense step keeps it, the pool
 * idle meanwhile. --variant: other settings (threads, row blocks, claims, pool spin, preferred slices) measured
 * in turns with the command line's within every run, each as a ratio to it in the same run (the machine's read
 * rate drifts between runs by far more than these settings change it). Prefill: --prefill tokens per layer
 * routed uniformly at random, reported as GFLOP/s (2 flops per weight element per token) and tokens/s per layer.
 * Warm-up excluded, medians of --runs runs. */
#include "config.h"

#include <getopt.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "bench/bw.h"
#include "core/kern/kern.h"
#include "core/kern/pack.h"
#include "core/quant/fp16.h"
#include "core/quant/quant.h"
#include "core/topo/topo.h"
#include "core/util/clock.h"
#include "core/util/pool.h"
#include "cpu-expert-worker/experts/expert_pipe.h"
#include "cpu-expert-worker/experts/expert_prefetch.h"
#include "ipc/exchange_layout.h"

#define MAX_CPUS 1024
#define MAX_TYPES 16
#define TEMPLATE_ROWS 64 /* distinct quantized rows, repeated through the working set */
#define MAX_VARIANTS 8

typedef struct shape {
    const char *name;
    int64_t n_embd, n_ff;
    int32_t n_expert, n_used;
} shape_t;

static const shape_t shapes[] = {
    {"qwen3-30b-a3b", 2048, 768, 128, 8},
    {"qwen3-235b-a22b", 4096, 1536, 128, 8},
    {"qwen3-coder-480b-a35b", 6144, 2560, 160, 8},
    {"mixtral-8x7b", 4096, 14336, 8, 2},
    {"olmoe-1b-7b", 2048, 1024, 64, 8},
    {"gpt-oss-120b", 2880, 2880, 128, 4},
    {"deepseek-v3", 7168, 2048, 256, 8},
};

typedef struct opts {
    const shape_t *shape;
    guild_type_t types[MAX_TYPES];
    int n_types;
    int down_type; /* -1: same as the type */
    int tokens, prefill, threads, runs, steps, node;
    int interleave; /* gate and up rows alternating (expert_shard_new_copy's interleave_gate_up) */
    expert_layout_t layout; /* packed or plain matrices (expert_shard_new_copy's layout) */
    double gb;
    expert_pipe_tuning_t tune;
    int random_routing; /* --routing random: each token's top-k drawn independently (tokens share experts) */
    int profile;        /* --profile: expert_pipe_prof over the timed decode runs */
    int gap_us;         /* --gap-us: the caller busy for this long between steps (the engine's dense step) */
    int pool_spin_us;   /* --pool-spin-us: the pool's waits spin this long before they sleep (0: its default) */
    const char *variants[MAX_VARIANTS]; /* --variant: other arms measured in turns with the command line's */
    int n_variants;
} opts_t;

/* Synthetic experts of one type: [n_layer][n_expert] matrices in one node-local allocation. */
typedef struct bank {
    expert_pipe_src_t src;
    expert_mats_t *mats;
    char *mem;
    size_t mem_bytes, expert_bytes;
    bool gu_packed, down_packed; /* the layout packed gate and up / down */
} bank_t;

static const expert_mats_t *bank_get(const void *ctx, int32_t layer, int32_t expert)
{
    const bank_t *b = ctx;
    return &b->mats[(size_t)layer * (size_t)b->src.n_expert + (size_t)expert];
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float rng_float(void)
{
    return (float)((double)(rng_next() >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

static size_t row_bytes(guild_type_t t, int64_t n)
{
    uint64_t b = 0;
    if (quant_row_bytes((uint32_t)t, (uint64_t)n, &b, NULL))
        return 0;
    return (size_t)b;
}

/* TEMPLATE_ROWS rows of n elements of `type`: quantized from random floats where the type has a quantizer,
 * else random bytes with a finite scale in each block's leading fp16 (every such IQ type keeps d there). */
static char *template_rows(guild_type_t type, int64_t n)
{
    const size_t rb = row_bytes(type, n);
    char *rows = malloc(rb * TEMPLATE_ROWS);
    float *f = malloc((size_t)n * sizeof *f);
    if (!rows || !f) {
        free(rows);
        free(f);
        return NULL;
    }
    const quant_type_info_t *info = quant_type_info((uint32_t)type);
    for (int r = 0; r < TEMPLATE_ROWS; r++) {
        char *row = rows + (size_t)r * rb;
        if (quant_can_quantize(type)) {
            for (int64_t i = 0; i < n; i++)
                f[i] = rng_float() * 0.05f;
            if (quant_quantize_row_ref(type, f, row, n, NULL)) {
                free(rows);
                free(f);
                return NULL;
            }
        } else {
            for (size_t i = 0; i < rb; i++)
                row[i] = (char)rng_next();
            for (size_t b = 0; b < rb; b += info->block_bytes) {
                uint16_t d = quant_f32_to_f16(0.001f + 0.002f * (float)(rng_next() % 100) / 100.0f);
                memcpy(row + b, &d, 2);
            }
        }
    }
    free(f);
    return rows;
}

static void fill_matrix(char *dst, const char *tmpl, size_t rb, int64_t rows)
{
    for (int64_t r = 0; r < rows; r++)
        memcpy(dst + (size_t)r * rb, tmpl + (size_t)(r % TEMPLATE_ROWS) * rb, rb);
}

/* The packed form of fill_matrix's rows first .. first + rows - 1 (first and rows multiples of KERN_PACK_ROWS),
 * from the template packed whole (TEMPLATE_ROWS is a multiple of 16, so each 16-row group of the matrix is one
 * of the template's groups): the bytes kern_pack would make of the plain matrix. */
static void fill_packed(char *dst, const char *packed_tmpl, size_t rb, int64_t first, int64_t rows)
{
    const size_t group = KERN_PACK_ROWS * rb;
    for (int64_t r = 0; r < rows; r += KERN_PACK_ROWS)
        memcpy(dst + (size_t)r * rb, packed_tmpl + (size_t)((first + r) % TEMPLATE_ROWS) * rb, group);
}

/* tmpl (TEMPLATE_ROWS rows of n elements) packed into a new buffer, or NULL with err. */
static char *pack_template(guild_type_t type, int64_t n, const char *tmpl, size_t rb, guild_err_t *err)
{
    _Static_assert(TEMPLATE_ROWS % KERN_PACK_ROWS == 0, "the template is whole packed groups");
    char *p = malloc(rb * TEMPLATE_ROWS);
    if (!p) {
        guild_err_set(err, "out of memory");
        return NULL;
    }
    if (kern_pack(type, n, TEMPLATE_ROWS, tmpl, rb, p, err) < 0) {
        free(p);
        return NULL;
    }
    return p;
}

static int bank_new(bank_t *b, const opts_t *o, guild_type_t type, guild_err_t *err)
{
    const shape_t *s = o->shape;
    const guild_type_t dtype = o->down_type >= 0 ? (guild_type_t)o->down_type : type;
    const size_t gu_row = row_bytes(type, s->n_embd), d_row = row_bytes(dtype, s->n_ff);
    if (!gu_row || !d_row)
        return guild_err_set(err, "%s: the shape %s (%lld x %lld) is not a whole number of its blocks",
                             quant_type_info(type)->name, s->name, (long long)s->n_embd, (long long)s->n_ff);
    memset(b, 0, sizeof *b);
    b->expert_bytes = 2 * gu_row * (size_t)s->n_ff + d_row * (size_t)s->n_embd;
    const double layer_bytes = (double)b->expert_bytes * s->n_expert;
    int32_t n_layer = (int32_t)(o->gb * 1e9 / layer_bytes + 0.999);
    if (n_layer < 2)
        n_layer = 2;
    b->src = (expert_pipe_src_t){n_layer, s->n_expert, s->n_used, s->n_embd, s->n_ff, bank_get, b, {false, 0.0f, 0.0f}};
    const size_t n = (size_t)n_layer * (size_t)s->n_expert;
    b->mem_bytes = n * b->expert_bytes;
    b->mats = calloc(n, sizeof *b->mats);
    b->mem = topo_alloc(b->mem_bytes, o->node, err);
    char *tg = template_rows(type, s->n_embd), *td = template_rows(dtype, s->n_ff), *pg = NULL, *pd = NULL;
    /* the layout as a shard copy lays it out: packing wins over interleaving */
    b->gu_packed = expert_layout_packs(o->layout, type, s->n_ff);
    b->down_packed = expert_layout_packs(o->layout, dtype, s->n_embd);
    if (!b->mats || !b->mem || !tg || !td) {
        free(tg);
        free(td);
        free(b->mats);
        topo_free(b->mem, b->mem_bytes);
        return b->mem ? guild_err_set(err, "out of memory for the experts") : -1;
    }
    if ((b->gu_packed && !(pg = pack_template(type, s->n_embd, tg, gu_row, err))) ||
        (b->down_packed && !(pd = pack_template(dtype, s->n_ff, td, d_row, err)))) {
        free(pg);
        free(tg);
        free(td);
        free(b->mats);
        topo_free(b->mem, b->mem_bytes);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        char *m = b->mem + i * b->expert_bytes;
        b->mats[i] = (expert_mats_t){m, m + gu_row * (size_t)s->n_ff, m + 2 * gu_row * (size_t)s->n_ff,
                                     type, type, dtype, gu_row, gu_row, d_row, b->gu_packed, b->gu_packed,
                                     b->down_packed, NULL, NULL, NULL};
        if (o->interleave && !b->gu_packed) { /* the same 2 n_ff rows, read as gate row r = 2 r, up row 2 r + 1 */
            b->mats[i].up = m + gu_row;
            b->mats[i].gate_row = b->mats[i].up_row = 2 * gu_row;
        }
        if (b->gu_packed) { /* the rows fill_matrix lays out, packed matrix by matrix */
            fill_packed(m, pg, gu_row, 0, s->n_ff);
            fill_packed(m + gu_row * (size_t)s->n_ff, pg, gu_row, s->n_ff, s->n_ff);
        } else {
            fill_matrix(m, tg, gu_row, 2 * s->n_ff); /* gate and up back to back */
        }
        if (b->down_packed)
            fill_packed(m + 2 * gu_row * (size_t)s->n_ff, pd, d_row, 0, s->n_embd);
        else
            fill_matrix(m + 2 * gu_row * (size_t)s->n_ff, td, d_row, s->n_embd);
    }
    free(pg);
    free(pd);
    free(tg);
    free(td);
    return 0;
}

/* "packed", "plain", or "gate/up packed, down plain" (the bank's layout, for the detail lines). */
static const char *bank_layout(const bank_t *b)
{
    if (b->gu_packed == b->down_packed)
        return b->gu_packed ? "packed" : "plain";
    return b->gu_packed ? "gate/up packed, down plain" : "gate/up plain, down packed";
}

static void bank_free(bank_t *b)
{
    free(b->mats);
    topo_free(b->mem, b->mem_bytes);
}

/* Per layer, a random permutation of the experts, consumed n_used at a time: an expert comes back only after
 * every other expert of its layer was read, i.e. after the whole working set went through the caches. */
typedef struct router {
    int32_t n_layer, n_expert, n_used;
    int32_t *perm; /* [n_layer][n_expert] */
    int32_t *next; /* [n_layer] position in perm */
} router_t;

static int router_new(router_t *r, const bank_t *b)
{
    r->n_layer = b->src.n_layer;
    r->n_expert = b->src.n_expert;
    r->n_used = b->src.n_expert_used;
    r->perm = malloc((size_t)r->n_layer * (size_t)r->n_expert * sizeof *r->perm);
    r->next = calloc((size_t)r->n_layer, sizeof *r->next);
    if (!r->perm || !r->next)
        return -1;
    for (int32_t l = 0; l < r->n_layer; l++) {
        r->next[l] = r->n_expert; /* shuffle on first use */
        for (int32_t e = 0; e < r->n_expert; e++)
            r->perm[(size_t)l * (size_t)r->n_expert + (size_t)e] = e;
    }
    return 0;
}

static void router_free(router_t *r)
{
    free(r->perm);
    free(r->next);
}

/* n_used distinct experts of `layer` for one token */
static void router_pick(router_t *r, int32_t layer, int32_t *ids)
{
    int32_t *p = r->perm + (size_t)layer * (size_t)r->n_expert;
    if (r->next[layer] + r->n_used > r->n_expert) {
        for (int32_t i = r->n_expert - 1; i > 0; i--) {
            int32_t j = (int32_t)(rng_next() % (uint64_t)(i + 1)), t = p[i];
            p[i] = p[j];
            p[j] = t;
        }
        r->next[layer] = 0;
    }
    memcpy(ids, p + r->next[layer], (size_t)r->n_used * sizeof *ids);
    r->next[layer] += r->n_used;
}

/* uniformly random distinct experts (prefill routing) */
static void random_pick(int32_t n_expert, int32_t n_used, int32_t *ids)
{
    for (int32_t k = 0; k < n_used; k++) {
        int32_t e, dup;
        do {
            e = (int32_t)(rng_next() % (uint64_t)n_expert);
            dup = 0;
            for (int32_t q = 0; q < k; q++)
                dup |= ids[q] == e;
        } while (dup);
        ids[k] = e;
    }
}

typedef struct result {
    double weight_gbps, read_gbps, step_us, layout_gbps;
    double bank_read_gbps, turn_fraction; /* the probe over the experts' memory in turns with decode */
    double prefill_gflops, prefill_tok_s, prefill_gbps;
    double distinct;                  /* distinct experts a step, mean over the timed runs */
    double pool_sleeps;               /* the pool's sleeps a step over the timed runs (guild_pool_sleeps) */
    expert_pipe_prof_summary_t prof;  /* --profile: the timed runs' */
} result_t;

#define LAYOUT_MAX 512 /* the most distinct experts of a step the layout read follows (every preset's count) */

/* One decode step's experts read by bench_sum_bytes, claimed like the pipeline claims its work
 * (cpu-expert-worker/experts/expert_pipe.c): segments gate+up of each expert, then down of each, in guided claims of
 * 1/(2 threads) of the remaining bytes, 16 rows to a whole matrix. */
typedef struct layout_job {
    const bank_t *b;
    const expert_mats_t *m[LAYOUT_MAX]; /* the step's distinct experts */
    int n;
    int n_threads;
    int64_t cost[2 * LAYOUT_MAX + 1]; /* bytes before segment k */
    _Atomic uint64_t cursor;  /* segment << 32 | row */
    _Atomic uint64_t sink;
} layout_job_t;

static void layout_task(void *ctx, int64_t task, int thread)
{
    layout_job_t *j = ctx;
    const int64_t E = j->b->src.n_embd, F = j->b->src.n_ff;
    uint64_t sum = 0, c = atomic_load_explicit(&j->cursor, memory_order_relaxed);
    (void)task;
    (void)thread;
    for (;;) {
        const int64_t s = (int64_t)(c >> 32), r = (int64_t)(c & 0xffffffffu);
        if (s >= 2 * j->n)
            break;
        const int64_t rows = s < j->n ? F : E, per_row = (j->cost[s + 1] - j->cost[s]) / rows;
        int64_t take = (j->cost[2 * j->n] - j->cost[s] - r * per_row) / (2 * j->n_threads * per_row);
        take = (take + 15) / 16 * 16;
        take = take < 16 ? 16 : take;
        if (take > rows - r)
            take = rows - r;
        const uint64_t next = r + take == rows ? (uint64_t)(s + 1) << 32 : ((uint64_t)s << 32) | (uint64_t)(r + take);
        if (!atomic_compare_exchange_weak_explicit(&j->cursor, &c, next, memory_order_relaxed, memory_order_relaxed))
            continue;
        const expert_mats_t *m = j->m[s < j->n ? s : s - j->n];
        if (s < j->n && expert_mats_interleaved(m)) { /* gate and up rows alternate: one range holds both */
            sum += bench_sum_bytes((const char *)m->gate + (size_t)r * m->gate_row, (size_t)take * m->gate_row);
        } else if (s < j->n) {
            sum += bench_sum_bytes((const char *)m->gate + (size_t)r * m->gate_row, (size_t)take * m->gate_row);
            sum += bench_sum_bytes((const char *)m->up + (size_t)r * m->up_row, (size_t)take * m->up_row);
        } else {
            sum += bench_sum_bytes((const char *)m->down + (size_t)r * m->down_row, (size_t)take * m->down_row);
        }
        c = atomic_load_explicit(&j->cursor, memory_order_relaxed);
    }
    atomic_fetch_add_explicit(&j->sink, sum, memory_order_relaxed);
}

/* Reads the distinct experts of ids[0 .. n_ids) of `layer` as layout_task describes; returns their bytes. */
static double layout_step(const bank_t *b, guild_pool_t *pool, int32_t layer, const int32_t *ids, int n_ids,
                          layout_job_t *j)
{
    j->b = b;
    j->n = 0;
    j->n_threads = guild_pool_threads(pool);
    for (int q = 0; q < n_ids; q++) {
        const expert_mats_t *m = bank_get(b, layer, ids[q]);
        int dup = 0;
        for (int k = 0; k < j->n; k++)
            dup |= j->m[k] == m;
        if (!dup && j->n < LAYOUT_MAX)
            j->m[j->n++] = m;
    }
    const int64_t E = b->src.n_embd, F = b->src.n_ff;
    j->cost[0] = 0;
    for (int k = 0; k < j->n; k++)
        j->cost[k + 1] = j->cost[k] + (int64_t)(j->m[k]->gate_row + j->m[k]->up_row) * F;
    for (int k = 0; k < j->n; k++)
        j->cost[j->n + k + 1] = j->cost[j->n + k] + (int64_t)j->m[k]->down_row * E;
    atomic_store_explicit(&j->cursor, 0, memory_order_relaxed);
    guild_pool_run(pool, j->n_threads, layout_task, j);
    return (double)j->n * (double)b->expert_bytes;
}

/* The probe's loop (bench_read) over the experts' own memory: each thread one contiguous slice of `bytes` bytes
 * starting at *off (advanced, wrapping), in one pool pass. Measured in turns with the decode runs, it is the
 * read bandwidth of the same memory at the same moment (a shared machine's bandwidth drifts by tens of
 * percent within a minute). */
typedef struct bank_probe {
    const char *base;
    size_t slice;
    _Atomic uint64_t sink;
} bank_probe_t;

static void bank_probe_task(void *ctx, int64_t task, int thread)
{
    bank_probe_t *p = ctx;
    (void)thread;
    atomic_fetch_add_explicit(&p->sink, bench_read(p->base + (size_t)task * p->slice, p->slice), memory_order_relaxed);
}

static double bank_probe_run(const bank_t *b, guild_pool_t *pool, size_t bytes, size_t *off)
{
    const int n = guild_pool_threads(pool);
    if (bytes > b->mem_bytes) /* a small --gb: the bank is smaller than a decode run's reads */
        bytes = b->mem_bytes;
    bank_probe_t p = {.slice = (bytes / (size_t)n) & ~(size_t)4095};
    if (*off + p.slice * (size_t)n > b->mem_bytes)
        *off = 0;
    p.base = b->mem + *off;
    *off += p.slice * (size_t)n;
    const double t0 = guild_clock_s();
    guild_pool_run(pool, n, bank_probe_task, &p);
    return (double)p.slice * n / (guild_clock_s() - t0) / 1e9;
}

/* One way of running the pipeline, measured in turns with the others in every run (--variant): its own pipeline
 * (tuning), on a pool of its thread count, with its pool spin. Arm 0 is the command line's. */
typedef struct arm {
    char name[96];
    int threads;
    expert_pipe_tuning_t tune;
    int spin_us;            /* 0: the pool's default */
    int prefer;             /* every step's experts given to expert_pipe_prefer: each thread a slice of each */
    int lock_wake;          /* guild_pool_set_lock_wake: the pool's workers wake through its mutex, as before */
    int hint;               /* the engine's prefetch hint with a perfect prediction: the step's experts that
                               guild_exchange_hint_pick takes (this many: a token's at up to 4 tokens, else by
                               rows), prefetched during the gap (expert_prefetch_run), then preferred */
    int pin_down;           /* expert_pipe_set_pin_down (-1: the pipeline's default) */
    expert_prefetch_t *prefetch; /* hint > 0 */
    guild_pool_t *pool;     /* shared by the arms of one thread count */
    expert_pipe_t *pipe;
    expert_pipe_prof_t *prof; /* --profile */
    double *gbps, *us, *ratio; /* [runs]; ratio: this arm's GB/s over arm 0's in the same run */
    double distinct, sleeps;
    uint64_t sleeps_n;
    expert_pipe_prof_summary_t sum;
} arm_t;

/* The gap between two steps (--gap-us): over at `end` (guild_clock_s); an expert_prefetch_run stop function. */
typedef struct gap {
    double end;
} gap_t;

static bool gap_over(void *ctx)
{
    return guild_clock_s() >= ((const gap_t *)ctx)->end;
}

/* The ids of one step of T tokens (the routing's rule: see run_decode). */
static void pick_step(const opts_t *o, const bank_t *b, router_t *rt, int32_t layer, int32_t *ids)
{
    const int32_t K = b->src.n_expert_used;
    for (int32_t t = 0; t < o->tokens; t++)
        if (o->random_routing)
            random_pick(b->src.n_expert, K, ids + (size_t)t * (size_t)K);
        else
            router_pick(rt, layer, ids + (size_t)t * (size_t)K);
}

/* Decode: `steps` steps of `tokens` tokens, each on the next layer; weight bytes counted per distinct expert
 * of a step. Each run: every arm's steps in turn, then the layout read and the probe (arm 0's pool). Medians
 * over the runs, after one warm-up run. */
static int run_decode(const opts_t *o, bank_t *b, arm_t *arms, int n_arms, router_t *rt, result_t *res,
                      guild_err_t *err)
{
    const int32_t K = b->src.n_expert_used, T = o->tokens;
    const int64_t E = b->src.n_embd;
    guild_pool_t *pool = arms[0].pool;
    float *x = malloc((size_t)T * (size_t)E * sizeof *x);
    float *y = malloc((size_t)T * (size_t)K * (size_t)E * sizeof *y);
    int32_t *ids = malloc((size_t)T * (size_t)K * sizeof *ids);
    double *lay = malloc((size_t)o->runs * sizeof *lay), *bp = malloc((size_t)o->runs * sizeof *bp);
    double *fr = malloc((size_t)o->runs * sizeof *fr);
    size_t probe_off = 0;
    uint8_t *seen = calloc((size_t)b->src.n_expert, 1);
    int32_t *prefer_ids = malloc((size_t)b->src.n_expert * sizeof *prefer_ids);
    int32_t hint_ids[GUILD_EXCHANGE_HINT_MAX];
    layout_job_t *lj = calloc(1, sizeof *lj);
    int rc = -1;
    bool ok = x && y && ids && lay && bp && fr && seen && lj && prefer_ids;
    for (int a = 0; a < n_arms && ok; a++) {
        arm_t *m = &arms[a];
        m->gbps = malloc((size_t)o->runs * sizeof *m->gbps);
        m->us = malloc((size_t)o->runs * sizeof *m->us);
        m->ratio = malloc((size_t)o->runs * sizeof *m->ratio);
        m->prof = o->profile ? calloc(1, sizeof *m->prof) : NULL;
        ok = m->gbps && m->us && m->ratio && (!o->profile || m->prof);
    }
    if (!ok) {
        guild_err_set(err, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < (size_t)T * (size_t)E; i++)
        x[i] = rng_float();
    int32_t layer = 0;
    double max_bytes = 0;
    for (int run = -1; run < o->runs; run++) {
        for (int i = 0; i < n_arms; i++) {
            /* the arms' order turns from run to run: none always comes first after the probe's pass */
            arm_t *m = &arms[(i + run + 1) % n_arms];
            if (run == 0 && m->prof) { /* the timed runs: profile them (the warm-up's first touches aside) */
                expert_pipe_prof_reset(m->prof);
                expert_pipe_set_prof(m->pipe, m->prof);
            }
            guild_pool_set_spin_ns(m->pool, (uint64_t)m->spin_us * 1000u);
            guild_pool_set_lock_wake(m->pool, m->lock_wake);
            const uint64_t sl0 = guild_pool_sleeps(m->pool);
            double bytes = 0, t_pipe = 0, t0 = guild_clock_s();
            for (int s = 0; s < o->steps; s++) {
                /* the tokens of a step: by default distinct experts from the permutation (several tokens: a
                 * verification window, whose tokens share some experts in real models; here they do not, the
                 * worst case); --routing random: each token's own draw, tokens sharing experts as in batched
                 * decode */
                pick_step(o, b, rt, layer, ids);
                memset(seen, 0, (size_t)b->src.n_expert);
                for (int32_t q = 0; q < T * K; q++)
                    if (!seen[ids[q]]) {
                        seen[ids[q]] = 1;
                        bytes += (double)b->expert_bytes;
                        m->distinct += run >= 0;
                    }
                int32_t n_hint = 0;
                if (o->gap_us) { /* the engine's dense step between layers: the caller busy, the pool idle */
                    gap_t g = {guild_clock_s() + o->gap_us * 1e-6};
                    if (m->hint) { /* ... or prefetching the hinted experts, as a CPU worker does then */
                        n_hint = guild_exchange_hint_pick(T, K, m->hint, ids, hint_ids);
                        expert_prefetch_run(m->prefetch, layer, n_hint, hint_ids, gap_over, &g);
                    }
                    while (!gap_over(&g))
                        ;
                }
                const double p0 = guild_clock_s();
                if (n_hint)
                    expert_pipe_prefer(m->pipe, n_hint, hint_ids);
                if (m->prefer) { /* the step's experts, in order of first appearance (seen[] marks them) */
                    int32_t n = 0;
                    for (int32_t q = 0; q < T * K; q++)
                        if (seen[ids[q]] == 1) {
                            seen[ids[q]] = 2;
                            prefer_ids[n++] = ids[q];
                        }
                    expert_pipe_prefer(m->pipe, n, prefer_ids);
                }
                if (expert_pipe_run(m->pipe, layer, T, x, ids, y, err) < 0)
                    goto done;
                t_pipe += guild_clock_s() - p0;
                layer = (layer + 1) % b->src.n_layer;
            }
            /* with gaps the pipeline's own time; without, the whole loop's (as before the gaps existed) */
            const double dt = o->gap_us ? t_pipe : guild_clock_s() - t0;
            if (run >= 0) {
                m->gbps[run] = bytes / dt / 1e9;
                m->us[run] = dt / o->steps * 1e6;
                m->sleeps_n += guild_pool_sleeps(m->pool) - sl0;
            }
            max_bytes = bytes > max_bytes ? bytes : max_bytes;
            guild_pool_set_spin_ns(m->pool, 0);
            guild_pool_set_lock_wake(m->pool, false);
        }
        for (int a = 0; a < n_arms && run >= 0; a++)
            arms[a].ratio[run] = arms[a].gbps[run] / arms[0].gbps[run];
        /* in turns with the decode runs: the same kind of steps, read by the plain byte sum */
        double lbytes = 0, t0 = guild_clock_s();
        for (int s = 0; s < o->steps; s++) {
            pick_step(o, b, rt, layer, ids);
            lbytes += layout_step(b, pool, layer, ids, T * K, lj);
            layer = (layer + 1) % b->src.n_layer;
        }
        if (run >= 0)
            lay[run] = lbytes / (guild_clock_s() - t0) / 1e9;
        /* and the probe over the same memory, as many bytes as a decode turn read (at least 256 MB) */
        const double pb = bank_probe_run(b, pool, max_bytes > 256e6 ? (size_t)max_bytes : (size_t)256e6, &probe_off);
        if (run >= 0) {
            bp[run] = pb;
            fr[run] = arms[0].gbps[run] / pb;
        }
    }
    for (int a = 0; a < n_arms; a++) {
        arm_t *m = &arms[a];
        m->distinct /= (double)o->runs * o->steps;
        /* an arm's sleeps: in its own turns (the layout and probe passes' are arm 0's pool's, not counted) */
        m->sleeps = (double)m->sleeps_n / ((double)o->runs * o->steps);
        if (m->prof)
            expert_pipe_prof_summarize(m->prof, &m->sum);
    }
    res->bank_read_gbps = guild_median(bp, o->runs);
    res->turn_fraction = guild_median(fr, o->runs);
    res->weight_gbps = guild_median(arms[0].gbps, o->runs);
    res->step_us = guild_median(arms[0].us, o->runs);
    res->layout_gbps = guild_median(lay, o->runs);
    res->distinct = arms[0].distinct;
    res->pool_sleeps = arms[0].sleeps;
    res->prof = arms[0].sum;
    rc = 0;
done:
    for (int a = 0; a < n_arms; a++)
        if (arms[a].pipe)
            expert_pipe_set_prof(arms[a].pipe, NULL);
    free(lay);
    free(bp);
    free(fr);
    free(lj);
    free(x);
    free(y);
    free(ids);
    free(seen);
    free(prefer_ids);
    return rc;
}

/* Prefill: o->prefill tokens per layer, a few layers per run. */
static int run_prefill(const opts_t *o, bank_t *b, expert_pipe_t *pipe, result_t *res, guild_err_t *err)
{
    const int32_t K = b->src.n_expert_used, T = o->prefill;
    const int64_t E = b->src.n_embd, F = b->src.n_ff;
    const int layers = 2;
    float *x = malloc((size_t)T * (size_t)E * sizeof *x);
    float *y = malloc((size_t)T * (size_t)K * (size_t)E * sizeof *y);
    int32_t *ids = malloc((size_t)T * (size_t)K * sizeof *ids);
    double *gf = malloc((size_t)o->runs * sizeof *gf), *ts = malloc((size_t)o->runs * sizeof *ts);
    double *gb = malloc((size_t)o->runs * sizeof *gb);
    uint8_t *seen = calloc((size_t)b->src.n_expert, 1);
    int rc = -1;
    if (!x || !y || !ids || !gf || !ts || !gb || !seen) {
        guild_err_set(err, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < (size_t)T * (size_t)E; i++)
        x[i] = rng_float();
    int32_t layer = 0;
    for (int run = -1; run < o->runs; run++) {
        double t_all = 0, bytes = 0;
        for (int l = 0; l < layers; l++) {
            for (int32_t t = 0; t < T; t++)
                random_pick(b->src.n_expert, K, ids + (size_t)t * (size_t)K);
            memset(seen, 0, (size_t)b->src.n_expert);
            for (int32_t q = 0; q < T * K; q++)
                if (!seen[ids[q]]) {
                    seen[ids[q]] = 1;
                    bytes += (double)b->expert_bytes;
                }
            double t0 = guild_clock_s();
            if (expert_pipe_run(pipe, layer, T, x, ids, y, err) < 0)
                goto done;
            t_all += guild_clock_s() - t0;
            layer = (layer + 1) % b->src.n_layer;
        }
        if (run >= 0) {
            const double flops = 2.0 * 3.0 * (double)E * (double)F * (double)T * K * layers;
            gf[run] = flops / t_all / 1e9;
            ts[run] = (double)T * layers / t_all;
            gb[run] = bytes / t_all / 1e9;
        }
    }
    res->prefill_gflops = guild_median(gf, o->runs);
    res->prefill_tok_s = guild_median(ts, o->runs);
    res->prefill_gbps = guild_median(gb, o->runs);
    rc = 0;
done:
    free(x);
    free(y);
    free(ids);
    free(gf);
    free(ts);
    free(gb);
    free(seen);
    return rc;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: guild bench experts [--type T[,T...]] [--tokens N] [--shape NAME|EMBDxFF:EXPERTS:USED]\n"
            "                           [--threads K] [options]\n"
            "  --type T        weight types of gate/up/down (default q4_K,iq4_xs); --down-type T for down alone\n"
            "  --tokens N      tokens per decode step (default 1)\n"
            "  --shape S       expert shape (default qwen3-30b-a3b):");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        fprintf(out, " %s", shapes[i].name);
    fprintf(out,
            "\n"
            "  --threads K     threads, pinned to node --node's CPUs (default: all of them)\n"
            "  --node N        NUMA node of the threads and the weights (default 0)\n"
            "  --gb G          working set in GB (default 4; many times the last-level cache)\n"
            "  --runs R        timed runs after one warm-up, median reported (default 7)\n"
            "  --steps S       decode steps per run (default 96)\n"
            "  --prefill P     tokens per layer of the prefill measurement (default 256; 0: skip)\n"
            "  --gate-up-rows N, --down-rows N   pipeline row blocks (multiples of 16; default 0: automatic)\n"
            "  --guide G, --min-rows N   the automatic claims: 1/(G threads) of the remaining work, at least N rows\n"
            "                  (defaults 0: the pipeline's, 2 and 16)\n"
            "  --kernels L     force a kernel level (scalar, avx2, avx512, avx512-vnni, amx)\n"
            "  --interleave    gate and up rows alternating in memory (the tuning file's interleave_gate_up;\n"
            "                  not where the matrices are packed)\n"
            "  --routing R     distinct (default: a step's tokens on distinct experts, the worst case) or random\n"
            "                  (each token's top-k drawn independently: tokens share experts as in batched decode)\n"
            "  --profile       where the pipeline's time goes (expert_pipe_prof.h), per thread, over the timed runs\n"
            "  --gap-us U      the caller busy U us between steps, the pool idle (the engine's dense step); the\n"
            "                  pipeline's own time is then timed\n"
            "  --pool-spin-us N   the pool's waits spin N us before they sleep (default: the pool's rounds)\n"
            "  --variant SPEC  another arm, measured in turns with the command line's in every run (up to 8):\n"
            "                  the command line's settings changed by SPEC, key=value[,...] of threads, gu, down,\n"
            "                  guide, min (min rows), spin (pool spin us), prefer (1: every step's experts\n"
            "                  preferred, each thread a fixed slice of each, expert_pipe_prefer), lockwake (1: the\n"
            "                  pool's workers wake through its mutex, guild_pool_set_lock_wake), hint (N: the\n"
            "                  engine's prefetch hint of N experts, from the step's own ids, prefetched during\n"
            "                  --gap-us and preferred), pindown (T: runs of up to T tokens pin the preferred\n"
            "                  experts' down rows, expert_pipe_set_pin_down); reported as its\n"
            "                  GB/s and the median of its runs' ratios to the command line's arm in the same run\n"
            "  --layout L      packed (rows interleaved 16 at a time, core/kern/pack.h, for the types that have\n"
            "                  a packed layout), plain, or auto (default: packed where this CPU has packed\n"
            "                  kernels for the type)\n");
}

/* --variant SPEC: arm a starts as the command line's arm 0 (a copy), then SPEC's comma-separated key=value pairs:
 * threads, gu (gate/up rows), down (down rows), guide, min (min rows), spin (pool spin, us). -1 on a bad SPEC. */
static int parse_variant(const char *spec, arm_t *a)
{
    snprintf(a->name, sizeof a->name, "%s", spec);
    char *copy = strdup(spec), *save = NULL;
    int rc = copy ? 0 : -1;
    for (char *kv = copy ? strtok_r(copy, ",", &save) : NULL; kv && rc == 0; kv = strtok_r(NULL, ",", &save)) {
        char key[16];
        int v;
        if (sscanf(kv, "%15[a-z]=%d", key, &v) != 2 || v < 0)
            rc = -1;
        else if (!strcmp(key, "threads") && v > 0)
            a->threads = v;
        else if (!strcmp(key, "gu"))
            a->tune.gate_up_rows = v;
        else if (!strcmp(key, "down"))
            a->tune.down_rows = v;
        else if (!strcmp(key, "guide"))
            a->tune.guide = v;
        else if (!strcmp(key, "min"))
            a->tune.min_rows = v;
        else if (!strcmp(key, "spin"))
            a->spin_us = v;
        else if (!strcmp(key, "prefer"))
            a->prefer = v != 0;
        else if (!strcmp(key, "lockwake"))
            a->lock_wake = v != 0;
        else if (!strcmp(key, "hint") && v <= (int)GUILD_EXCHANGE_HINT_MAX)
            a->hint = v;
        else if (!strcmp(key, "pindown"))
            a->pin_down = v;
        else
            rc = -1;
    }
    free(copy);
    return rc;
}

static int parse_shape(const char *arg, shape_t *custom, const shape_t **out)
{
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (!strcmp(arg, shapes[i].name)) {
            *out = &shapes[i];
            return 0;
        }
    long long e, f;
    int ne, nu;
    if (sscanf(arg, "%lldx%lld:%d:%d", &e, &f, &ne, &nu) == 4 && e > 0 && f > 0 && ne > 0 && nu > 0 && nu <= ne) {
        *custom = (shape_t){"custom", e, f, ne, nu};
        *out = custom;
        return 0;
    }
    return -1;
}

int bench_experts_main(int argc, char **argv)
{
    static const struct option lopts[] = {
        {"type", required_argument, NULL, 't'},      {"down-type", required_argument, NULL, 'D'},
        {"tokens", required_argument, NULL, 'n'},    {"shape", required_argument, NULL, 's'},
        {"threads", required_argument, NULL, 'j'},   {"node", required_argument, NULL, 'N'},
        {"gb", required_argument, NULL, 'g'},        {"runs", required_argument, NULL, 'r'},
        {"steps", required_argument, NULL, 'S'},     {"prefill", required_argument, NULL, 'p'},
        {"gate-up-rows", required_argument, NULL, 'G'}, {"down-rows", required_argument, NULL, 'R'},
        {"kernels", required_argument, NULL, 'k'},   {"help", no_argument, NULL, 'h'},
        {"interleave", no_argument, NULL, 'I'},      {"layout", required_argument, NULL, 'L'},
        {"routing", required_argument, NULL, 'o'},   {"profile", no_argument, NULL, 'P'},
        {"gap-us", required_argument, NULL, 'w'},    {"pool-spin-us", required_argument, NULL, 'W'},
        {"guide", required_argument, NULL, 'u'},     {"min-rows", required_argument, NULL, 'm'},
        {"variant", required_argument, NULL, 'V'},
        {0, 0, 0, 0},
    };
    static shape_t custom;
    opts_t o = {.shape = &shapes[0], .down_type = -1, .tokens = 1, .prefill = 256, .runs = 7, .steps = 96,
                .node = 0, .gb = 4, .tune = {0, 0, 0, 0}};
    const char *types = "q4_K,iq4_xs";
    guild_err_t err;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", lopts, NULL)) != -1) {
        switch (c) {
        case 't': types = optarg; break;
        case 'D':
            o.down_type = quant_type_from_name(optarg);
            if (o.down_type < 0 || !kern_can_matmul((guild_type_t)o.down_type)) {
                fprintf(stderr, "guild bench experts: --down-type %s: not a weight type Guild computes\n", optarg);
                return 2;
            }
            break;
        case 'n': o.tokens = atoi(optarg); break;
        case 's':
            if (parse_shape(optarg, &custom, &o.shape)) {
                fprintf(stderr, "guild bench experts: --shape %s: neither a preset (see --help) nor EMBDxFF:EXPERTS:USED "
                                "with positive numbers and USED <= EXPERTS\n", optarg);
                return 2;
            }
            break;
        case 'j': o.threads = atoi(optarg); break;
        case 'N': o.node = atoi(optarg); break;
        case 'g': o.gb = atof(optarg); break;
        case 'r': o.runs = atoi(optarg); break;
        case 'S': o.steps = atoi(optarg); break;
        case 'p': o.prefill = atoi(optarg); break;
        case 'G': o.tune.gate_up_rows = atoi(optarg); break;
        case 'R': o.tune.down_rows = atoi(optarg); break;
        case 'k': {
            int l = kern_level_from_name(optarg);
            if (l < 0 || kern_set_level((kern_level_t)l, &err)) {
                fprintf(stderr, "guild bench experts: --kernels %s: %s\n", optarg,
                        l < 0 ? "unknown level" : err.msg);
                return 2;
            }
            break;
        }
        case 'I': o.interleave = 1; break;
        case 'o':
            if (strcmp(optarg, "distinct") && strcmp(optarg, "random")) {
                fprintf(stderr, "guild bench experts: --routing %s: expected distinct or random\n", optarg);
                return 2;
            }
            o.random_routing = !strcmp(optarg, "random");
            break;
        case 'P': o.profile = 1; break;
        case 'u': o.tune.guide = atoi(optarg); break;
        case 'V':
            if (o.n_variants == MAX_VARIANTS) {
                fprintf(stderr, "guild bench experts: at most %d --variant\n", MAX_VARIANTS);
                return 2;
            }
            o.variants[o.n_variants++] = optarg;
            break;
        case 'm': o.tune.min_rows = atoi(optarg); break;
        case 'w': o.gap_us = atoi(optarg); break;
        case 'W': o.pool_spin_us = atoi(optarg); break;
        case 'L':
            if (expert_layout_from_name(optarg, &o.layout) < 0) {
                fprintf(stderr, "guild bench experts: --layout %s: expected auto, plain or packed\n", optarg);
                return 2;
            }
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc || o.tokens < 1 || o.gap_us < 0 || o.pool_spin_us < 0 || o.prefill < 0 || o.threads < 0 ||
        o.runs < 1 || o.steps < 1 || o.gb <= 0 ||
        o.node < 0 || o.node >= topo_node_count()) {
        usage(stderr);
        return 2;
    }
    char *list = strdup(types), *save = NULL;
    for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int t = quant_type_from_name(tok);
        if (t < 0 || !kern_can_matmul((guild_type_t)t) || o.n_types == MAX_TYPES) {
            fprintf(stderr, "guild bench experts: --type %s: not a weight type Guild computes\n", tok);
            free(list);
            return 2;
        }
        o.types[o.n_types++] = (guild_type_t)t;
    }
    free(list);

    static int cpus[MAX_CPUS], nodes[MAX_CPUS];
    int n_cpus = topo_node_cpus(o.node, cpus, MAX_CPUS);
    if (o.threads > 0 && o.threads < n_cpus)
        n_cpus = o.threads;
    if (n_cpus == 0) {
        fprintf(stderr, "guild bench experts: node %d has no CPU this process may use\n", o.node);
        return 1;
    }
    for (int i = 0; i < n_cpus; i++)
        nodes[i] = o.node;

    bench_print_provenance(stdout, argc, argv);
    printf("# shape %s: n_embd=%lld n_ff=%lld experts=%d used=%d; threads=%d on node %d; working set %.1f GB;"
           " gate_up_rows=%d down_rows=%d guide=%d min_rows=%d%s; layout %s; kernels %s; routing %s; gap %d us;"
           " pool spin %d%s\n",
           o.shape->name, (long long)o.shape->n_embd, (long long)o.shape->n_ff, o.shape->n_expert, o.shape->n_used,
           n_cpus, o.node, o.gb, o.tune.gate_up_rows, o.tune.down_rows, o.tune.guide, o.tune.min_rows,
           o.interleave ? "; gate/up interleaved" : "",
           expert_layout_name(o.layout), kern_level_name(kern_level()), o.random_routing ? "random" : "distinct",
           o.gap_us, o.pool_spin_us, o.pool_spin_us ? " us" : " (default rounds)");
    fflush(stdout);

    /* the arms: the command line's, then each --variant's; one pool per thread count */
    static arm_t arms[MAX_VARIANTS + 1];
    const int n_arms = 1 + o.n_variants;
    arms[0] = (arm_t){.name = "0", .threads = n_cpus, .tune = o.tune, .spin_us = o.pool_spin_us, .pin_down = -1};
    for (int a = 1; a < n_arms; a++) {
        arms[a] = arms[0];
        if (parse_variant(o.variants[a - 1], &arms[a]) < 0) {
            fprintf(stderr, "guild bench experts: --variant %s: expected key=value[,...] of threads, gu, down, guide, "
                            "min, spin, prefer, lockwake, hint (<= %u), pindown (non-negative)\n", o.variants[a - 1],
                    GUILD_EXCHANGE_HINT_MAX);
            return 2;
        }
        if (arms[a].hint && !o.gap_us) {
            fprintf(stderr, "guild bench experts: --variant %s: a hint is prefetched between steps: give --gap-us\n",
                    o.variants[a - 1]);
            return 2;
        }
        if (arms[a].threads > topo_node_cpus(o.node, cpus, MAX_CPUS)) {
            fprintf(stderr, "guild bench experts: --variant %s: more threads than node %d's CPUs\n",
                    o.variants[a - 1], o.node);
            return 2;
        }
    }
    int status = 0;
    for (int a = 0; a < n_arms && !status; a++) {
        for (int b = 0; b < a && !arms[a].pool; b++)
            if (arms[b].threads == arms[a].threads)
                arms[a].pool = arms[b].pool;
        if (!arms[a].pool && guild_pool_new(&arms[a].pool, arms[a].threads, cpus, &err)) {
            fprintf(stderr, "guild bench experts: %s\n", err.msg);
            status = 1;
        }
    }
    guild_pool_t *pool = arms[0].pool;
    for (int ti = 0; ti < o.n_types && status == 0; ti++) {
        const guild_type_t type = o.types[ti];
        const char *tn = quant_type_info((uint32_t)type)->name;
        bank_t bank;
        router_t rt = {0};
        result_t res = {0};
        bench_bw_t bw;
        if (bank_new(&bank, &o, type, &err)) {
            fprintf(stderr, "guild bench experts: %s: %s\n", tn, err.msg);
            status = 1;
            break;
        }
        if (router_new(&rt, &bank)) {
            fprintf(stderr, "guild bench experts: %s: out of memory\n", tn);
            status = 1;
        }
        for (int a = 0; a < n_arms && !status; a++)
            if (expert_pipe_new(&arms[a].pipe, &bank.src, arms[a].pool, &arms[a].tune, &err) ||
                (arms[a].hint && expert_prefetch_new(&arms[a].prefetch, &bank.src, arms[a].pool, &err))) {
                fprintf(stderr, "guild bench experts: %s: arm %s: %s\n", tn, arms[a].name, err.msg);
                status = 1;
            } else if (arms[a].pin_down >= 0) {
                expert_pipe_set_pin_down(arms[a].pipe, arms[a].pin_down);
            }
        expert_pipe_t *pipe = arms[0].pipe;
        /* bandwidth right before the pipeline, same threads: a shared machine's bandwidth drifts */
        if (!status && bench_read_bw(cpus, nodes, n_cpus, (size_t)(o.gb * 0.5e9), 5, &bw, &err)) {
            fprintf(stderr, "guild bench experts: %s\n", err.msg);
            status = 1;
        }
        if (!status && run_decode(&o, &bank, arms, n_arms, &rt, &res, &err)) {
            fprintf(stderr, "guild bench experts: %s: %s\n", tn, err.msg);
            status = 1;
        }
        if (!status && o.prefill > 0 && run_prefill(&o, &bank, pipe, &res, &err)) {
            fprintf(stderr, "guild bench experts: %s: %s\n", tn, err.msg);
            status = 1;
        }
        if (!status) {
            res.read_gbps = bw.median_gbps;
            const double active = (double)bank.expert_bytes * o.shape->n_used;
            printf("# %s: %d layers x %d experts x %.2f MB = %.2f GB; %.2f MB of expert weights per token per layer; "
                   "layout %s%s\n",
                   tn, bank.src.n_layer, bank.src.n_expert, bank.expert_bytes / 1e6, bank.mem_bytes / 1e9,
                   active / 1e6, bank_layout(&bank),
                   o.interleave && !bank.gu_packed ? ", gate/up interleaved" : "");
            printf("# %s: read probe median %.2f GB/s (best %.2f); decode %.1f us per layer step (%d tokens)\n", tn,
                   bw.median_gbps, bw.best_gbps, res.step_us, o.tokens);
            if (o.prefill > 0)
                printf("# %s: prefill %d tokens/layer: %.1f GFLOP/s, %.0f tokens/s per layer, %.2f GB/s of weights\n",
                       tn, o.prefill, res.prefill_gflops, res.prefill_tok_s, res.prefill_gbps);
            printf("# %s: the same steps read by a plain byte sum, same threads and split: %.2f GB/s (%.2f of the "
                   "probe)\n", tn, res.layout_gbps, res.layout_gbps / res.read_gbps);
            printf("# %s: the probe over the experts' memory in turns with the decode runs: %.2f GB/s; median of the "
                   "runs' weight/probe %.3f\n", tn, res.bank_read_gbps, res.turn_fraction);
            printf("%s tokens=%d weight_GBps=%.2f read_GBps=%.2f fraction=%.3f layout_GBps=%.2f layout_fraction=%.3f "
                   "turn_read_GBps=%.2f turn_fraction=%.3f",
                   tn, o.tokens, res.weight_gbps, res.read_gbps, res.weight_gbps / res.read_gbps, res.layout_gbps,
                   res.weight_gbps / res.layout_gbps, res.bank_read_gbps, res.turn_fraction);
            if (o.prefill > 0)
                printf(" prefill_tokens=%d prefill_GFLOPs=%.1f", o.prefill, res.prefill_gflops);
            /* layout= stays the line's last key (bench/bench_experts_cli.sh) */
            printf(" routing=%s distinct=%.1f step_us=%.1f pool_sleeps=%.2f layout=%s\n",
                   o.random_routing ? "random" : "distinct", res.distinct, res.step_us, res.pool_sleeps,
                   bank.gu_packed && bank.down_packed   ? "packed"
                   : bank.gu_packed || bank.down_packed ? "mixed"
                                                        : "plain");
            if (o.profile) {
                char line[512];
                expert_pipe_prof_format(&res.prof, line, sizeof line);
                printf("profile %s tokens=%d %s\n", tn, o.tokens, line);
            }
            for (int a = 1; a < n_arms; a++) {
                const arm_t *m = &arms[a];
                printf("variant %s %s tokens=%d weight_GBps=%.2f ratio=%.4f step_us=%.1f distinct=%.1f pool_sleeps=%.2f"
                       "\n", m->name, tn, o.tokens, guild_median(m->gbps, o.runs), guild_median(m->ratio, o.runs),
                       guild_median(m->us, o.runs), m->distinct, m->sleeps);
                if (o.profile) {
                    char line[512];
                    expert_pipe_prof_format(&m->sum, line, sizeof line);
                    printf("profile-variant %s %s tokens=%d %s\n", m->name, tn, o.tokens, line);
                }
            }
            fflush(stdout);
        }
        for (int a = 0; a < n_arms; a++) {
            free(arms[a].gbps);
            free(arms[a].us);
            free(arms[a].ratio);
            free(arms[a].prof);
            expert_pipe_destroy(&arms[a].pipe);
            expert_prefetch_destroy(&arms[a].prefetch);
            arms[a].gbps = arms[a].us = arms[a].ratio = NULL;
            arms[a].prof = NULL;
            arms[a].distinct = arms[a].sleeps = 0;
            arms[a].sleeps_n = 0;
        }
        router_free(&rt);
        bank_free(&bank);
    }
    for (int a = 0; a < n_arms; a++) {
        for (int b = a + 1; b < n_arms; b++)
            if (arms[b].pool == arms[a].pool)
                arms[b].pool = NULL;
        guild_pool_destroy(&arms[a].pool);
    }
    (void)pool;
    return status;
}
