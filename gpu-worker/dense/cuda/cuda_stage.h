/* gpu-worker/dense/cuda/cuda_stage.h — host-to-device copies of pieces of the model mapping, either straight from
 * the (pageable) mapping or through a stager's pinned staging ring (ipc/stage_ring.h). Host C.
 *
 * With a ring, each call cuts its pieces into slot-sized requests (ipc/stage_plan.h), keeps every slot of
 * the ring busy, waits (host side) for the stager to fill the oldest, enqueues its copies to the device on the
 * caller's stream and records an event per slot; a slot is handed back to the stager only once its event has
 * completed. One caller thread per cuda_stage_t.
 */
#ifndef GUILD_GPU_WORKER_CUDA_STAGE_H
#define GUILD_GPU_WORKER_CUDA_STAGE_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "core/util/err.h"

typedef struct cuda_stage cuda_stage_t;
struct stage_ring; /* ipc/stage_ring.h */
struct stage_wait;

/* One copy: bytes at host (inside the model mapping given to cuda_stage_new_ring; any host memory for the
 * pageable kind) to dst + dst_off. */
typedef struct cuda_stage_piece {
    const void *host;
    size_t bytes;
    size_t dst_off;
} cuda_stage_piece_t;

/* Enqueues on stream `copy` the copies of p[0..n-1] into dst (device memory); work enqueued on `copy` afterwards
 * sees them. May block the host until a pinned slot is filled (ring kind) or free again. -1 with err on a CUDA
 * error, a piece outside the model mapping, or a dead/slow stager (err names it); after such an error the
 * stage refuses further copies. */
int cuda_stage_copy(cuda_stage_t *st, char *dst, const cuda_stage_piece_t *p, int32_t n, cudaStream_t copy,
                    guild_err_t *err);

/* Today's path: one cudaMemcpyAsync per piece from the host memory itself. -1 with err (out of memory). */
int cuda_stage_new_pageable(cuda_stage_t **out, guild_err_t *err);

/* A range of host memory (of the model mapping) the pinned kind keeps a page-locked copy of; copy: set by it. */
typedef struct cuda_stage_range {
    const void *host;
    size_t bytes;
    char *copy;
} cuda_stage_range_t;

/* The pinned path: copies ranges[0..n-1] (the streamed layers' expert tensors; overlaps are merged) once into page-locked
 * memory (cudaMallocHost), then serves each piece, which must lie inside one range, by a cudaMemcpyAsync from that
 * copy: DMA at the bus's speed, no CPU copy and no host wait per batch, for the price of RAM for the ranges.
 * (Registering the file mapping itself is not used: a private file mapping cannot be pinned reliably.) -1 with
 * err naming the size and the alternatives when the memory cannot be had. */
int cuda_stage_new_pinned(cuda_stage_t **out, const cuda_stage_range_t *ranges, int32_t n, guild_err_t *err);

/* The shared path: registers ranges[0..n-1] in place (page-aligned and merged; cudaHostRegister, read-only where
 * the device supports it): the memory the CPU side computes the experts from (its node-bound copies, or the
 * model mapping), so that the device copies them by DMA with no second copy in RAM. A piece inside a registered
 * range is one cudaMemcpyAsync from the memory itself; one outside (or every piece, when the registration is
 * refused: logged, the stage then copies as the pageable kind) a pageable copy. -1 with err (out of memory). */
int cuda_stage_new_registered(cuda_stage_t **out, const cuda_stage_range_t *ranges, int32_t n, guild_err_t *err);

/* Bytes the shared kind registered (0 for the others). */
uint64_t cuda_stage_registered_bytes(const cuda_stage_t *st);

/* The ring path: registers ring's whole mapping with cudaHostRegister (portable), and serves copies of pieces of
 * map_base[0..map_bytes) (the model file's mapping: pieces become file offsets, so the stager must serve the same
 * file). wait: how to wait for fills (NULL: stage_wait_default()). The ring is not owned: it must outlive the
 * stage, and this stage must be its only client; requests a previous client left in flight are drained first.
 * -1 with err (registration, events, memory, a stager that does not drain them). */
int cuda_stage_new_ring(cuda_stage_t **out, struct stage_ring *ring, const void *map_base, size_t map_bytes,
                        const struct stage_wait *wait, guild_err_t *err);

/* Bytes copied so far; nanoseconds the host spent waiting for the stager to fill slots (0 for pageable). Either
 * pointer may be NULL. */
void cuda_stage_stats(const cuda_stage_t *st, uint64_t *bytes, uint64_t *fill_wait_ns);

/* 1 once an error made the stage refuse copies (a new stage on the same ring, after the stager is back, drains
 * what this one left in flight); 0 otherwise. */
int cuda_stage_failed(const cuda_stage_t *st);

/* Waits for the copies still in flight, unregisters the ring, frees, nulls *pst. NULL-safe. */
void cuda_stage_destroy(cuda_stage_t **pst);

#endif
