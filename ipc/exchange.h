/* ipc/exchange.h — the MoE layer exchange between the dense side (GPU worker) and the CPU expert workers.
 *
 * One exchange = one MoE layer of one step: the dense side writes the routed tokens' normed activations and
 * expert ids into a slot, rings `step`; every CPU worker computes the (token, slot j) pairs whose expert it
 * owns, writes each one's unweighted expert output into its own row of the slot's output, rings its
 * `done[worker]`; the dense side waits for every done counter, then sums the rows in j order with the routing
 * weights it kept (out[t] = sum_j w[t][j] * y[t][j]), so the result is bit-identical whatever the number of
 * workers and however the experts are split between them. Where everything lies: ipc/exchange_layout.h, the
 * one definition that the host code and the CUDA kernels driving the exchange from the device both use.
 *
 * Exchanges are numbered 1, 2, 3, ... across layers and steps (seq); exchange seq uses slot (seq-1) % n_slots.
 * Why a small ring of slots rather than one slot per layer: layer L+1's input depends on layer L's output,
 * so within one batch only one exchange is ever in flight; a slot per layer would multiply the largest
 * buffer, y = max_tokens * n_used * n_embd floats (256 MiB for a 2048-token prefill chunk of an 8-of-128,
 * n_embd 4096 model), by the layer count (94 for Qwen3-235B) for nothing. n_slots = 2 lets a later
 * two-micro-batch overlap keep two exchanges in flight with no protocol change; n_slots = n_layers gives
 * one slot per layer where memory allows (keeps every layer's inputs around for debugging).
 * Flow control: the dense side reuses a slot only when every worker has completed the exchange that last
 * used it (guild_exchange_begin waits for that), so a slot's inputs stay intact until all its outputs are
 * done — a respawned worker can redo the exchange it died in (it reads done[its index] and step).
 *
 * Writers: the coordinator lays out the region (guild_exchange_init) before publishing the arena; the dense
 * side writes slot inputs and rings step; worker k writes only the y rows of experts it owns and done[k].
 * Activations are float32 in this layout version; a quantized activation format (Q8_K blocks) is a new
 * layout version.
 */
#ifndef GUILD_IPC_EXCHANGE_H
#define GUILD_IPC_EXCHANGE_H

#include "core/util/err.h"
#include "ipc/doorbell.h"
#include "ipc/exchange_layout.h"

#include <stddef.h>
#include <stdint.h>

/* Shared layout at the start of the region (its offsets: exchange_layout.h); geometry fields written once by the
 * coordinator. */
typedef struct guild_exchange_shared {
    uint64_t magic;        /* GUILD_EXCHANGE_MAGIC */
    uint32_t max_tokens;   /* guild_exchange_shape_t, as given to guild_exchange_init */
    uint32_t n_embd;
    uint32_t n_used;
    uint32_t n_slots;
    uint32_t n_workers;
    uint32_t n_prefetch;   /* guild_exchange_shape_t.n_prefetch (0: no prefetch hints) */
    uint64_t slot_offset;  /* bytes from the region start to slot 0 */
    uint64_t slot_stride;  /* bytes from one slot to the next */
    uint64_t x_offset;     /* bytes from a slot's start to x; y_offset etc. likewise */
    uint64_t ids_offset;
    uint64_t y_offset;
    uint64_t reserved[7];    /* 0; puts step on its own cache lines */
    guild_doorbell_t step;   /* last exchange seq published; rung by the dense side */
    guild_doorbell_t done[]; /* [n_workers]: last exchange seq completed by worker k; rung by worker k */
} guild_exchange_shared_t;
_Static_assert(sizeof(guild_exchange_shared_t) == GUILD_EXCHANGE_HEADER_BYTES + sizeof(guild_doorbell_t) &&
               offsetof(guild_exchange_shared_t, step) == GUILD_EXCHANGE_HEADER_BYTES &&
               sizeof(guild_doorbell_t) == GUILD_EXCHANGE_DOORBELL_BYTES &&
               offsetof(guild_doorbell_t, seq) == 0,
               "guild_exchange_shared_t is the shared layout exchange_layout.h describes");
_Static_assert(sizeof(guild_exchange_slot_header_t) == GUILD_EXCHANGE_SLOT_HEADER_BYTES,
               "guild_exchange_slot_header_t is a shared layout");

/* A process's view of one slot. */
typedef struct guild_exchange_slot {
    uint64_t seq;
    int n_tokens;
    int layer;
    float *x;     /* [n_tokens][n_embd] */
    int32_t *ids; /* [n_tokens][n_used] */
    float *y;     /* [n_tokens][n_used][n_embd] */
} guild_exchange_slot_t;

typedef struct guild_exchange guild_exchange_t; /* per-process handle */

/* Bytes of region the shape needs, or 0 if the shape is invalid (a zero or over-limit dimension). */
size_t guild_exchange_memsize(const guild_exchange_shape_t *shape);

/* Coordinator: lays the exchange into addr (64-byte aligned, size >= memsize), zeroing the doorbells.
 * Returns -1 with err if the shape is invalid or size too small. */
int guild_exchange_init(void *addr, size_t size, const guild_exchange_shape_t *shape, guild_err_t *err);

/* Every process: validates the layout at addr (magic, geometry against size) and returns a handle (caller
 * destroys it; the memory stays the arena's). NULL with err on failure. */
guild_exchange_t *guild_exchange_attach(void *addr, size_t size, guild_err_t *err);
void guild_exchange_destroy(guild_exchange_t **px);

/* The geometry, as validated at attach, and the layout it gives (exchange_layout.h). */
const guild_exchange_shape_t *guild_exchange_shape(const guild_exchange_t *x);
const guild_exchange_layout_t *guild_exchange_layout(const guild_exchange_t *x);

/* The region's start, where the layout's offsets count from (for a process that maps it elsewhere too: the
 * device, through a registration of the arena). */
void *guild_exchange_base(const guild_exchange_t *x);

/* Dense side: waits until slot (seq-1) % n_slots is free (every worker done with seq - n_slots), then
 * fills *slot with it for writing (n_tokens = max_tokens). seq must follow the last published one. */
guild_wait_result_t guild_exchange_begin(guild_exchange_t *x, uint64_t seq, const guild_wait_policy_t *policy,
                                         guild_exchange_slot_t *slot, guild_wait_stats_t *stats,
                                         guild_err_t *err);

/* Dense side: records n_tokens and layer in the slot of seq and rings step = seq (release: the inputs
 * written before are visible to workers that see it). -1 with err if n_tokens is out of range. */
int guild_exchange_publish(guild_exchange_t *x, uint64_t seq, int n_tokens, int layer, guild_err_t *err);

/* Dense side: waits until every worker completed seq; then the slot's y rows are readable. */
guild_wait_result_t guild_exchange_wait_done(guild_exchange_t *x, uint64_t seq, const guild_wait_policy_t *policy,
                                             guild_wait_stats_t *stats, guild_err_t *err);

/* Dense side: the view of exchange seq it published (to read the y rows after guild_exchange_wait_done). */
void guild_exchange_view(const guild_exchange_t *x, uint64_t seq, guild_exchange_slot_t *slot);

/* Worker: waits until step >= seq, then fills *slot with exchange seq. GUILD_WAIT_ERROR with err if the slot
 * does not hold seq (the dense side overran the ring) or its header is out of range. */
guild_wait_result_t guild_exchange_wait_step(guild_exchange_t *x, uint64_t seq, const guild_wait_policy_t *policy,
                                             guild_exchange_slot_t *slot, guild_wait_stats_t *stats,
                                             guild_err_t *err);

/* Worker k: rings done[k] = seq (release: its y rows written before are visible to the dense side). */
void guild_exchange_complete(guild_exchange_t *x, int worker, uint64_t seq);

/* Prefetch hints (shape.n_prefetch > 0). While the CPU workers compute exchange seq, the dense side can predict
 * the experts of the next exchange's layer (layer l+1's router applied to what layer l's FFN saw: "pre-gating")
 * and hang them on seq's slot; a worker that finished seq reads them (before it rings done, so the slot cannot be
 * reused under it) and pulls those experts' bytes toward its cores while it waits for seq + 1. A hint only moves
 * bytes into caches: the results never depend on it, or on whether it came in time.
 * Dense side: the hint of exchange seq (published; n ids, at most GUILD_EXCHANGE_HINT_MAX, rank-major; more are
 * cut). Worker: the hint of seq into ids[GUILD_EXCHANGE_HINT_MAX] and *layer; returns its count, 0 when seq's slot
 * carries none (yet). */
void guild_exchange_hint(guild_exchange_t *x, uint64_t seq, int32_t layer, int32_t n, const int32_t *ids);
int32_t guild_exchange_take_hint(const guild_exchange_t *x, uint64_t seq, int32_t *layer, int32_t *ids);

/* Current values (acquire), e.g. for a respawned worker to find where to resume. */
uint64_t guild_exchange_step(const guild_exchange_t *x);
uint64_t guild_exchange_done(const guild_exchange_t *x, int worker);

/* The doorbells themselves (for benchmarks and supervision). */
guild_doorbell_t *guild_exchange_step_doorbell(guild_exchange_t *x);
guild_doorbell_t *guild_exchange_done_doorbell(guild_exchange_t *x, int worker);

#endif
