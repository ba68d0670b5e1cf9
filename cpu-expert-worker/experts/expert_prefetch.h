/* cpu-expert-worker/experts/expert_prefetch.h — pulls the weight bytes of a layer's predicted experts toward the
 * cores while the CPU worker would otherwise wait for that layer's exchange (issue 17: with every expert in RAM,
 * the worker idles during the dense side's step of each layer, and computes against DRAM after it).
 *
 * expert_prefetch_run takes the experts in the order given (the dense side's ranking: the likeliest first), each
 * one's gate, up and down matrices split into slices of rows, one per pool thread, so that every thread streams a
 * slice of every expert with its own memory parallelism into its own core's cache: thread k's slice of gate and up
 * is what thread k computes first when the exchange comes, and its slice of down the rows of that expert's down
 * matrix it computes (expert_pipe_prefer, expert_pipe_slice); it issues cache-line prefetches chunk by chunk and
 * asks stop() between chunks, returning as soon as stop() is true (the real exchange has arrived: the computation
 * starts at once, the rest of the prefetch is abandoned). Only caches change: results never depend on it.
 */
#ifndef GUILD_CPU_EXPERT_WORKER_EXPERT_PREFETCH_H
#define GUILD_CPU_EXPERT_WORKER_EXPERT_PREFETCH_H

#include <stdbool.h>
#include <stdint.h>

#include "core/util/err.h"
#include "core/util/pool.h"
#include "cpu-expert-worker/experts/expert_pipe.h"

/* The most experts one run takes. */
#define EXPERT_PREFETCH_MAX 32

/* Bytes between two stop() checks, per thread. */
#define EXPERT_PREFETCH_CHUNK 4096u

typedef struct expert_prefetch expert_prefetch_t;

/* Over src (copied; its ctx borrowed: the pipeline's source) and pool (borrowed). -1 with err on out of memory. */
int expert_prefetch_new(expert_prefetch_t **out, const expert_pipe_src_t *src, guild_pool_t *pool,
                        guild_err_t *err);
void expert_prefetch_destroy(expert_prefetch_t **p);

/* Prefetches experts ids[0..n) of layer (duplicates, ids < 0 or out of range, and experts the source does not hold
 * are left out; at most EXPERT_PREFETCH_MAX), until done or stop(ctx). Returns the bytes prefetched. */
uint64_t expert_prefetch_run(expert_prefetch_t *p, int32_t layer, int32_t n, const int32_t *ids,
                             bool (*stop)(void *ctx), void *ctx);

/* The bytes expert_prefetch_run would prefetch for these experts if never stopped. */
uint64_t expert_prefetch_bytes(const expert_prefetch_t *p, int32_t layer, int32_t n, const int32_t *ids);

#endif
