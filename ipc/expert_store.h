/* ipc/expert_store.h — a CPU worker's copy of its routed experts in shared memory, with a table saying where each
 * expert's matrices are, so that the GPU worker streams the very same bytes to the device (it maps the store
 * read-only and registers it for DMA): one copy of each expert in RAM.
 *
 * The coordinator creates one store per local CPU worker in an arena of its own (ipc/arena.h, region kind
 * EXPERT_STORE_ARENA_KIND, pages allocated on first touch) sized for that worker's shard, and names it in the
 * worker's Assign; the worker binds the pages to its NUMA node, copies its experts into the data space (its
 * layout: packed or not, gate and up rows interleaved or not: cpu-expert-worker/experts/expert_shard.h), writes
 * the table and publishes. The GPU worker, named every store in its Assign, waits for each to be published
 * and reads the table. A restarted CPU worker writes the same bytes again into the same store (the GPU worker
 * may read meanwhile: it reads what it read before) and publishes again.
 *
 * Layout, in the region: the header below at offset 0, the table at table_off ([n_layer][n_expert] entries,
 * layer-major), the data space at data_off (data_bytes). */
#ifndef GUILD_IPC_EXPERT_STORE_H
#define GUILD_IPC_EXPERT_STORE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/util/err.h"

#define EXPERT_STORE_ARENA_KIND 0x4500u /* region kind in the store's own arena (beside ipc/arena.h's registry) */
#define EXPERT_STORE_VERSION 1u

/* expert_store_entry_t.flags */
#define EXPERT_STORE_GATE_PACKED 1u
#define EXPERT_STORE_UP_PACKED 2u
#define EXPERT_STORE_DOWN_PACKED 4u

typedef struct expert_store_header {
    _Atomic uint64_t published; /* 0 while the first fill runs; then the count of fills, stored with release
                                   by the CPU worker after its copies and the table: a reader that sees it
                                   (acquire) sees them */
    uint32_t version;           /* EXPERT_STORE_VERSION (coordinator) */
    uint32_t n_layer, n_expert; /* coordinator */
    uint32_t reserved0;
    uint64_t table_off;         /* coordinator: bytes from the region's start */
    uint64_t data_off, data_bytes; /* coordinator: the copies' space */
    uint64_t reserved[3];
} expert_store_header_t;
_Static_assert(sizeof(expert_store_header_t) == 72, "expert_store_header_t is a shared layout");

/* Written by the CPU worker before it publishes. */
typedef struct expert_store_entry {
    uint64_t gate, up, down;              /* bytes from the region's start; gate 0: the worker does not hold it */
    uint32_t gate_row, up_row, down_row;  /* bytes between rows */
    uint32_t flags;                       /* EXPERT_STORE_*_PACKED */
} expert_store_entry_t;
_Static_assert(sizeof(expert_store_entry_t) == 40, "expert_store_entry_t is a shared layout");

/* A per-process view of a store. */
typedef struct expert_store {
    expert_store_header_t *h;
    expert_store_entry_t *table;
    char *base;         /* the region */
    size_t size;
} expert_store_t;

/* Bytes of a store's region for data_bytes of copies. */
size_t expert_store_memsize(int32_t n_layer, int32_t n_expert, uint64_t data_bytes);

/* Coordinator: lays out an empty store in mem[0..size) (zeroed memory). -1 with err when it does not fit. */
int expert_store_init(void *mem, size_t size, int32_t n_layer, int32_t n_expert, uint64_t data_bytes,
                      guild_err_t *err);

/* Validates the header in mem[0..size) (version, table and data inside, the shape when n_layer > 0) and fills
 * *s. -1 with a message naming what is wrong. */
int expert_store_attach(expert_store_t *s, void *mem, size_t size, int32_t n_layer, int32_t n_expert,
                        guild_err_t *err);

/* The copies' space (CPU worker: writable; others: read only). */
void *expert_store_data(const expert_store_t *s);

/* The entry of (layer, expert). */
expert_store_entry_t *expert_store_entry(const expert_store_t *s, int32_t layer, int32_t expert);

/* CPU worker: the table and the copies are complete (release). */
void expert_store_publish(expert_store_t *s);

/* Whether a fill was published (acquire). */
bool expert_store_published(const expert_store_t *s);

/* Waits until a fill is published: polls every millisecond; gives up after timeout_ns or when interrupted(ctx,
 * err) returns nonzero (may be NULL). -1 with err then. */
int expert_store_wait(const expert_store_t *s, uint64_t timeout_ns, int (*interrupted)(void *ctx, guild_err_t *err),
                      void *ctx, guild_err_t *err);

/* An entry's matrices checked against the store: gate, up, down of len[0..2] bytes each inside the data space,
 * rows given. -1 with err. */
int expert_store_check_entry(const expert_store_t *s, const expert_store_entry_t *e, const uint64_t len[3],
                             guild_err_t *err);

#endif
