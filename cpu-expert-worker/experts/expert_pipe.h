/* cpu-expert-worker/experts/expert_pipe.h — the fused routed-expert pipeline: for one MoE layer, every (token, slot)
 * pair whose expert the source owns, the unweighted expert output
 *     y[t][k] = down( silu(gate x[t]) * up x[t] )
 * (or the model's other activation, with the experts' biases: expert_mats_t, core/model/activation.h),
 * bit-identical to expert_exec (same kernels, same activation quantization, same silu), in ONE pass of the
 * thread pool per layer:
 *   - x[t] is quantized once per token (gate's and up's activation types) and copied to its pairs;
 *   - tasks (expert, block of gate/up rows) compute gate and up rows together for all the expert's tokens and
 *     silu(gate) * up; the task that completes an expert's last rows quantizes its hidden vectors;
 *   - tasks (expert, block of down rows) wait for their expert's hidden vectors, then write y directly.
 * Threads claim tasks in that order (every gate/up block, then every down block), so a waiting task only waits
 * for work already running, and every thread stays busy until the layer's last rows: one barrier per layer
 * instead of one per stage. Each output element is
 * computed by one kernel call in a fixed order: the bits do not depend on the thread count or the row blocks.
 */
#ifndef GUILD_CPU_EXPERT_WORKER_EXPERT_PIPE_H
#define GUILD_CPU_EXPERT_WORKER_EXPERT_PIPE_H

#include <stdint.h>

#include "core/model/activation.h"
#include "core/util/err.h"
#include "core/util/pool.h"
#include "cpu-expert-worker/experts/expert_pipe_prof.h"
#include "cpu-expert-worker/experts/expert_shard.h"

/* Where the experts are: an expert shard, or any memory (the benchmark's synthetic experts). */
typedef struct expert_pipe_src {
    int32_t n_layer, n_expert, n_expert_used;
    int64_t n_embd, n_ff; /* model width; expert hidden width */
    /* The matrices of (layer, expert), or NULL when the source does not own that expert. Every expert of a layer
     * has the same three types. */
    const expert_mats_t *(*get)(const void *ctx, int32_t layer, int32_t expert);
    const void *ctx;
    model_expert_act_t act; /* the hidden vector from gate and up (zero: silu(gate) * up) */
} expert_pipe_src_t;

/* Row blocks of the tasks (multiples of 16, the kernels' row group). 0 and 0: automatic (guided: each thread
 * claims about 1/(2 * threads) of the remaining work, from whole matrices down to 16 rows, so the threads finish
 * a layer together); otherwise every claim takes that many rows (a stage left at 0 takes whole matrices).
 * Results do not depend on them. */
typedef struct expert_pipe_tuning {
    int32_t gate_up_rows; /* rows of gate and of up per task */
    int32_t down_rows;    /* rows of down per task */
    /* the automatic claims' rule (0: the defaults, 2 and 16; benchmarks try others): a claim takes about
     * 1 / (guide * threads) of the remaining work, at least min_rows rows (a multiple of 16) */
    int32_t guide;
    int32_t min_rows;
} expert_pipe_tuning_t;

typedef struct expert_pipe expert_pipe_t;

/* The source as seen through a shard (shard borrowed). */
void expert_pipe_src_from_shard(expert_pipe_src_t *src, const expert_shard_t *shard);

/* A pipeline over src (copied; its ctx borrowed) on pool (borrowed). tuning NULL: automatic row blocks. Fails
 * (message in err) on out of memory or row blocks that are not multiples of 16. */
int expert_pipe_new(expert_pipe_t **out, const expert_pipe_src_t *src, guild_pool_t *pool,
                    const expert_pipe_tuning_t *tuning, guild_err_t *err);

/* Frees; sets *p to NULL. NULL-safe. */
void expert_pipe_destroy(expert_pipe_t **p);

/* Allocates the scratch for batches of up to n_tokens tokens and writes its pages now, on the pool's threads, as
 * far as a batch of layers with these weight types uses them (the activation rows of their types; the per-thread
 * down buffers for twice a fair share of tokens per expert). A batch that finds its scratch cold pays for every
 * page's first touch in its own time (hundreds of MiB at thousands of tokens: the rate the GPU worker measures on
 * its first streamed pass, and then plans with). Call it for each distinct (gate, up, down) type triple of the
 * source's layers; the bits of later runs do not change. -1 with a message on out of memory. */
int expert_pipe_warm(expert_pipe_t *p, int32_t n_tokens, guild_type_t gate_type, guild_type_t up_type,
                     guild_type_t down_type, guild_err_t *err);

/* The next run takes the experts ids[0..n) first (those it has pairs for), in that order, then the others
 * ascending (the default order), and their gate and up rows in fixed slices, pool thread k taking slice k
 * (expert_pipe_slice of the pool's thread count) before it claims any other work: the rows whose bytes thread k
 * prefetched into its own core's cache (expert_prefetch.h) are computed by thread k, before the rest of the
 * layer's stream can evict them. In a run of up to EXPERT_PIPE_PIN_DOWN_TOKENS tokens their down rows too (up to
 * 64 such experts): thread k computes slice k of an expert's down rows once its hidden vectors are in (between its
 * claims, or after them), never another core. In a larger run (several sessions' batched step) their down rows
 * are claimed as any others: a slice of down waits for every thread's gate/up slices of its expert, so one late
 * thread held up every other at the preferred experts (bench/results/cpu36-h200-2026-12-03-s36.md).
 * Speed only: the bits do not depend on the order or the slices. */
#define EXPERT_PIPE_PIN_DOWN_TOKENS 4
void expert_pipe_prefer(expert_pipe_t *p, int32_t n, const int32_t *ids);

/* Runs of up to max_tokens tokens (EXPERT_PIPE_PIN_DOWN_TOKENS unless set) take the preferred experts' down rows
 * in slices (expert_pipe_prefer); 0: never. Benchmarks try others; speed only. */
void expert_pipe_set_pin_down(expert_pipe_t *p, int32_t max_tokens);

/* Slice i of n of a matrix of `rows` rows (a multiple of 16, the packed kernels' row group, or any count when n is
 * 1): rows [*r0, *r0 + *nr), starting on a 16-row group; the n slices cover the rows once, some may be empty. */
static inline void expert_pipe_slice(int64_t rows, int n, int i, int64_t *r0, int64_t *nr)
{
    const int64_t a = i == 0 ? 0 : rows * i / n / 16 * 16, b = i + 1 >= n ? rows : rows * (i + 1) / n / 16 * 16;
    *r0 = a;
    *nr = b > a ? b - a : 0;
}

/* Profiles the runs from now on into prof (borrowed; sums added run after run, expert_pipe_prof.h), or stops
 * profiling (NULL). Speed only: the bits do not depend on it. */
void expert_pipe_set_prof(expert_pipe_t *p, expert_pipe_prof_t *prof);

/* x: [n_tokens][n_embd]; ids: [n_tokens][n_expert_used]; y: [n_tokens][n_expert_used][n_embd]. Writes y[t][k] for
 * every pair whose expert the source owns and leaves the others (and skipped pairs, id < 0) untouched. Returns
 * the number of pairs written, or -1 with a message (expert id >= n_expert or layer out of range, out of
 * memory for the scratch). */
int64_t expert_pipe_run(expert_pipe_t *p, int32_t layer, int32_t n_tokens, const float *x, const int32_t *ids,
                        float *y, guild_err_t *err);

#endif
