/* ipc/exchange_layout.h — where every part of the MoE layer exchange (ipc/exchange.h) lies in its region: the one
 * definition of the layout, as plain offsets and inline accessors, used by the host code (ipc/exchange.c) and by
 * the CUDA kernels that drive the exchange from the device (gpu-worker/dense/cuda/xchg.cu). Plain C that is also
 * valid C++ (nvcc includes it): fixed-width types, no atomics; ipc/exchange.c asserts that the shared structs of
 * exchange.h (the doorbells) sit where these offsets say.
 *
 * Region, from its start (every offset a multiple of 64; a slot's stride a multiple of 4096):
 *   [header: GUILD_EXCHANGE_HEADER_BYTES][step doorbell][done doorbell x n_workers]   (padded to 64)
 *   slot 0, slot 1, ... slot n_slots-1, each:
 *     [slot header: 64 bytes]
 *     x    float32 [max_tokens][n_embd]          normed activations        written by the dense side
 *     ids  int32   [max_tokens][n_used]          expert ids, top-k order   written by the dense side
 *     y    float32 [max_tokens][n_used][n_embd]  expert outputs, unweighted row (t, j): the owner of ids[t][j]
 * The slot header may also carry a prefetch hint: the experts the dense side predicts for the NEXT exchange's
 * layer (written after the slot's inputs, valid when its hint_seq equals the slot's seq; see ipc/exchange.h).
 * A doorbell is GUILD_EXCHANGE_DOORBELL_BYTES; its 64-bit counter is its first 8 bytes. Exchange seq (1, 2, ...)
 * uses slot (seq - 1) % n_slots. The routing weights do not travel: the dense side combines with its own copy.
 */
#ifndef GUILD_IPC_EXCHANGE_LAYOUT_H
#define GUILD_IPC_EXCHANGE_LAYOUT_H

#ifdef __cplusplus
#include <cstdint>
#else
#include <stdint.h>
#endif

#ifdef __CUDACC__
#define GUILD_EXCHANGE_FN static inline __host__ __device__
#else
#define GUILD_EXCHANGE_FN static inline
#endif

#define GUILD_EXCHANGE_MAGIC UINT64_C(0x32474843584C4447) /* "GDLXCHG2" in memory order (2: no weights) */
#define GUILD_EXCHANGE_MAX_WORKERS 256
#define GUILD_EXCHANGE_MAX_SLOTS 1024
#define GUILD_EXCHANGE_HEADER_BYTES 128u      /* the shared fields before the step doorbell */
#define GUILD_EXCHANGE_DOORBELL_BYTES 128u    /* sizeof(guild_doorbell_t), ipc/doorbell.h */
#define GUILD_EXCHANGE_SLOT_HEADER_BYTES 64u  /* sizeof(guild_exchange_slot_header_t) */
#define GUILD_EXCHANGE_HINT_MAX 16u           /* predicted expert ids a slot header holds */

/* Geometry, fixed for the life of the arena. */
typedef struct guild_exchange_shape {
    uint32_t max_tokens; /* tokens per exchange (decode batch, or prefill chunk) */
    uint32_t n_embd;     /* model width */
    uint32_t n_used;     /* experts per token (top-k) */
    uint32_t n_slots;    /* slots in the ring, 1..GUILD_EXCHANGE_MAX_SLOTS */
    uint32_t n_workers;  /* CPU expert workers (done counters), 1..GUILD_EXCHANGE_MAX_WORKERS */
    uint32_t n_prefetch; /* not geometry: predicted experts per token the dense side publishes as a prefetch hint
                            and the workers prefetch (0: none; --prefetch-experts) */
} guild_exchange_shape_t;

/* Shared layout at the start of every slot; written by the dense side before it rings step. */
typedef struct guild_exchange_slot_header {
    uint64_t seq;         /* exchange seq the slot holds */
    int32_t n_tokens;     /* tokens in it, 0..max_tokens */
    int32_t layer;        /* model layer index (blk.N) whose experts apply */
    /* The prefetch hint (ipc/exchange.h, guild_exchange_hint): written after the slot's inputs, by the dense side,
     * hint_seq last (release); the fields are valid while hint_seq == seq. */
    uint64_t hint_seq;
    int32_t hint_layer;   /* the layer the predicted experts are for (the next exchange's) */
    int32_t n_hint;       /* ids in hint_ids, 0..GUILD_EXCHANGE_HINT_MAX, rank-major: the best of every token,
                             then the second... */
    int16_t hint_ids[GUILD_EXCHANGE_HINT_MAX];
} guild_exchange_slot_header_t;

/* Byte offsets of a shape's layout (guild_exchange_layout_of). */
typedef struct guild_exchange_layout {
    uint64_t step_off;    /* from the region start: the step doorbell */
    uint64_t done_off;    /* done[0]; done[k] at done_off + k * GUILD_EXCHANGE_DOORBELL_BYTES */
    uint64_t slot_off;    /* slot 0 (the header and the doorbells, padded to 64) */
    uint64_t slot_stride; /* from one slot to the next */
    uint64_t x_off;       /* from a slot's start: x, ids, y */
    uint64_t ids_off;
    uint64_t y_off;
    uint64_t total;       /* bytes of region the shape needs */
    uint32_t n_slots;
    uint32_t reserved;
} guild_exchange_layout_t;

GUILD_EXCHANGE_FN uint64_t guild_exchange_align64(uint64_t n)
{
    return (n + 63) & ~(uint64_t)63;
}

/* Fills *l for shape s: 0, or -1 if the shape is invalid (a zero dimension, or one over its cap: the caps keep
 * every product within 64 bits and the region within 2^48 bytes). */
GUILD_EXCHANGE_FN int guild_exchange_layout_of(const guild_exchange_shape_t *s, guild_exchange_layout_t *l)
{
    if (!s->max_tokens || !s->n_embd || !s->n_used || !s->n_slots || !s->n_workers ||
        s->n_workers > GUILD_EXCHANGE_MAX_WORKERS || s->n_slots > GUILD_EXCHANGE_MAX_SLOTS ||
        s->max_tokens > (1u << 20) || s->n_embd > (1u << 20) || s->n_used > 1024)
        return -1;
    const uint64_t t = s->max_tokens, e = s->n_embd, k = s->n_used;
    l->step_off = GUILD_EXCHANGE_HEADER_BYTES;
    l->done_off = l->step_off + GUILD_EXCHANGE_DOORBELL_BYTES;
    l->slot_off = guild_exchange_align64(l->done_off + (uint64_t)s->n_workers * GUILD_EXCHANGE_DOORBELL_BYTES);
    l->x_off = GUILD_EXCHANGE_SLOT_HEADER_BYTES;
    l->ids_off = l->x_off + guild_exchange_align64(t * e * 4);
    l->y_off = l->ids_off + guild_exchange_align64(t * k * 4);
    l->slot_stride = (l->y_off + t * k * e * 4 + 4095) & ~(uint64_t)4095;
    l->total = l->slot_off + l->slot_stride * s->n_slots;
    l->n_slots = s->n_slots;
    l->reserved = 0;
    return l->total > ((uint64_t)1 << 48) ? -1 : 0;
}

/* From the region start: worker k's done doorbell. */
GUILD_EXCHANGE_FN uint64_t guild_exchange_done_at(const guild_exchange_layout_t *l, uint32_t worker)
{
    return l->done_off + (uint64_t)worker * GUILD_EXCHANGE_DOORBELL_BYTES;
}

/* From the region start: the slot of exchange seq (>= 1). */
GUILD_EXCHANGE_FN uint64_t guild_exchange_slot_at(const guild_exchange_layout_t *l, uint64_t seq)
{
    return l->slot_off + ((seq - 1) % l->n_slots) * l->slot_stride;
}

/* Steps of up to this many tokens hint each token's likeliest experts (rank-major); larger ones (several sessions'
 * batched step) the experts most of their tokens are predicted to route to, this many. 8: the CPU side's best of
 * 4, 8 and 16 at 8 and 16 tokens with a perfect prediction (bench/results/sess38-h200-2026-12-04-s38.md). */
#define GUILD_EXCHANGE_HINT_RANK_TOKENS 4
#define GUILD_EXCHANGE_HINT_BATCH 8

/* The count a step of n_tok tokens hints (guild_exchange_hint_pick's `per`) under --prefetch-experts n_prefetch:
 * n_prefetch a token up to GUILD_EXCHANGE_HINT_RANK_TOKENS tokens, else GUILD_EXCHANGE_HINT_BATCH in all; 0: none. */
GUILD_EXCHANGE_FN int32_t guild_exchange_hint_per(int32_t n_tok, int32_t n_prefetch)
{
    return n_prefetch <= 0 ? 0 : n_tok > (int32_t)GUILD_EXCHANGE_HINT_RANK_TOKENS ? (int32_t)GUILD_EXCHANGE_HINT_BATCH
                                                                                 : n_prefetch;
}

/* A batched step's pick, entry i of the prediction ids[n_tok][n_used] in rank-major order (rank i / n_tok of token
 * i % n_tok): the rows that hold its expert when i is that expert's first entry and the expert is >= 0, else 0. */
GUILD_EXCHANGE_FN int32_t guild_exchange_hint_rows(int32_t n_tok, int32_t n_used, const int32_t *ids, int32_t i)
{
    const int32_t e = ids[(i % n_tok) * n_used + i / n_tok];
    int32_t c = 0;
    for (int32_t j = 0; j < n_tok * n_used && e >= 0; j++)
        if (ids[(j % n_tok) * n_used + j / n_tok] == e) {
            if (j < i)
                return 0;
            c++;
        }
    return c;
}

/* A batched step's pick (guild_exchange_hint_pick, more than GUILD_EXCHANGE_HINT_RANK_TOKENS tokens): the entries
 * in rank-major order, each expert's rows (rows[i], or guild_exchange_hint_rows here when rows is NULL: the device
 * counts them in parallel first), kept in out[] as the `per` best by rows, the earlier first among equals. */
GUILD_EXCHANGE_FN int32_t guild_exchange_hint_pick_batch(int32_t n_tok, int32_t n_used, int32_t per, const int32_t *ids,
                                                         const int32_t *rows, int32_t *out)
{
    int32_t n = 0, count[GUILD_EXCHANGE_HINT_MAX];
    if (per > (int32_t)GUILD_EXCHANGE_HINT_MAX)
        per = (int32_t)GUILD_EXCHANGE_HINT_MAX;
    for (int32_t i = 0; i < n_tok * n_used; i++) {
        const int32_t c = rows ? rows[i] : guild_exchange_hint_rows(n_tok, n_used, ids, i);
        int32_t at = n; /* after every one with as many rows */
        while (c && at > 0 && count[at - 1] < c)
            at--;
        if (!c || at >= per)
            continue;
        if (n < per)
            n++;
        for (int32_t j = n - 1; j > at; j--)
            out[j] = out[j - 1], count[j] = count[j - 1];
        out[at] = ids[(i % n_tok) * n_used + i / n_tok], count[at] = c;
    }
    return n;
}

/* The prefetch hint's ids (hint_ids) from the dense side's prediction ids[n_tok][n_used], each row in router order
 * (ids < 0: experts no CPU worker computes, such as those resident on the GPU: skipped, the row's next ones take
 * their place), at most GUILD_EXCHANGE_HINT_MAX, each expert once.
 * - Up to GUILD_EXCHANGE_HINT_RANK_TOKENS tokens: each token's first `per` ids >= 0, rank-major (every token's
 *   best, then every token's second...).
 * - More tokens: the `per` experts (at most GUILD_EXCHANGE_HINT_MAX) that the most rows hold, ties to the one first
 *   in rank-major order. A batched step computes some 50-80 distinct experts a layer: every token's best would
 *   name experts of one token each and fill the cores' caches with more than they keep, where the experts shared
 *   by many tokens are both the likeliest to be routed and the most work (guild_exchange_hint_pick_batch).
 * The host's executor and the device's kernel both pick with this. Returns the count written to
 * out[GUILD_EXCHANGE_HINT_MAX]. */
GUILD_EXCHANGE_FN int32_t guild_exchange_hint_pick(int32_t n_tok, int32_t n_used, int32_t per, const int32_t *ids,
                                                   int32_t *out)
{
    int32_t n = 0;
    if (n_tok > (int32_t)GUILD_EXCHANGE_HINT_RANK_TOKENS)
        return guild_exchange_hint_pick_batch(n_tok, n_used, per, ids, NULL, out);
    if (per > n_used)
        per = n_used;
    for (int32_t r = 0; r < per; r++)
        for (int32_t t = 0; t < n_tok; t++) {
            int32_t seen = -1, e = -1; /* token t's r-th id >= 0 */
            for (int32_t k = 0; k < n_used && seen < r; k++)
                if (ids[t * n_used + k] >= 0) {
                    seen++;
                    e = ids[t * n_used + k];
                }
            int taken = seen < r;
            for (int32_t j = 0; j < n && !taken; j++)
                taken = out[j] == e;
            if (taken)
                continue;
            if (n == (int32_t)GUILD_EXCHANGE_HINT_MAX)
                return n;
            out[n++] = e;
        }
    return n;
}

#endif
