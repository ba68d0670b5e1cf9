/* gpu-worker/cuda/cuda_stage.c — expert-weight copies to the device, pageable or through a staging ring
 * (contract in cuda_stage.h). */
#include "config.h"

#include "gpu-worker/cuda/cuda_stage.h"

#include "gpu-worker/cuda/cuda_util.h"
#include "core/util/log.h"
#include "ipc/doorbell.h"
#include "stager/stage_plan.h"
#include "stager/stage_ring.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef enum { STAGE_KIND_PAGEABLE, STAGE_KIND_RING, STAGE_KIND_PINNED } stage_kind_t;

struct cuda_stage {
    stage_kind_t kind;
    uint64_t bytes;        /* copied (enqueued) */
    uint64_t fill_wait_ns; /* host time in stage_ring_wait */
    int failed;            /* an error left the ring in an unknown state: refuse further copies */

    /* pinned kind: the registered range (page-aligned) */
    void *pin_base;
    size_t pin_bytes;

    /* ring kind */
    stage_ring_t *ring;  /* not owned */
    const char *map;     /* [map_bytes] the model mapping the stager serves as a file */
    size_t map_bytes;
    stage_wait_t wait;
    uint32_t n_slots;
    int registered;           /* the ring's mapping is registered with CUDA */
    cudaEvent_t *events;      /* [n_slots] the last device copy out of each slot */
    stage_piece_t *pieces;    /* [n_slots][STAGE_RING_MAX_PIECES] each slot's request */
    uint64_t *dst_offs;       /* [n_slots][STAGE_RING_MAX_PIECES] destination offset of each piece */
    uint32_t *counts;         /* [n_slots] pieces in each slot's request */
    uint64_t enqueued;        /* requests whose device copies are enqueued (released <= enqueued <= posted) */
    stage_copy_t *copies;     /* [copies_cap] the current call's pieces as file ranges */
    int32_t copies_cap;
};

int cuda_stage_new_pageable(cuda_stage_t **out, guild_err_t *err)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return guild_err_set(err, "cuda stage: out of memory");
    (*out)->kind = STAGE_KIND_PAGEABLE;
    return 0;
}

int cuda_stage_new_pinned(cuda_stage_t **out, const void *map_base, size_t map_bytes, guild_err_t *err)
{
    *out = NULL;
    const long pg = sysconf(_SC_PAGESIZE);
    const uintptr_t page = pg > 0 ? (uintptr_t)pg : 4096u;
    const uintptr_t b0 = (uintptr_t)map_base / page * page;
    const uintptr_t b1 = ((uintptr_t)map_base + map_bytes + page - 1) / page * page;
    int ro = 0;
    if (cuda_check(cudaDeviceGetAttribute(&ro, cudaDevAttrHostRegisterReadOnlySupported, 0), "device attribute",
                   err) < 0)
        return -1;
    cuda_stage_t *st = calloc(1, sizeof *st);
    if (!st)
        return guild_err_set(err, "cuda stage: out of memory");
    st->kind = STAGE_KIND_PINNED;
    /* the mapping is read-only (the model file): the device may only read it, and must be told so */
    const unsigned flags = cudaHostRegisterPortable | (ro ? cudaHostRegisterReadOnly : 0u);
    const uint64_t t0 = guild_now_ns();
    const cudaError_t e = cudaHostRegister((void *)b0, (size_t)(b1 - b0), flags);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        free(st);
        return guild_err_set(err, "cuda stage: cannot lock and register the model mapping (%.2f GiB) with the device "
                             "(%s%s); --stager process or thread copy through pinned slots instead",
                             (double)(b1 - b0) / (1u << 30), cudaGetErrorString(e),
                             ro ? "" : "; this device cannot register read-only memory");
    }
    st->pin_base = (void *)b0;
    st->pin_bytes = (size_t)(b1 - b0);
    guild_log(GUILD_LOG_INFO, "cuda stage: the model mapping (%.2f GiB) is locked and registered with the device "
              "(%.2f s): streamed experts are copied from it directly", (double)st->pin_bytes / (1u << 30),
              (double)(guild_now_ns() - t0) / 1e9);
    *out = st;
    return 0;
}

int cuda_stage_new_ring(cuda_stage_t **out, struct stage_ring *ring, const void *map_base, size_t map_bytes,
                        const struct stage_wait *wait, guild_err_t *err)
{
    *out = NULL;
    cuda_stage_t *st = calloc(1, sizeof *st);
    if (!st)
        return guild_err_set(err, "cuda stage: out of memory");
    st->kind = STAGE_KIND_RING;
    st->ring = ring;
    st->map = map_base;
    st->map_bytes = map_bytes;
    st->wait = wait ? *wait : stage_wait_default();
    st->n_slots = stage_ring_n_slots(ring);
    /* a predecessor's requests (this process restarted, the ring attached again) finish first */
    if (stage_ring_drain(ring, &st->wait, err) < 0)
        goto fail;
    st->enqueued = stage_ring_released(ring);
    st->events = calloc(st->n_slots, sizeof *st->events);
    st->pieces = calloc((size_t)st->n_slots * STAGE_RING_MAX_PIECES, sizeof *st->pieces);
    st->dst_offs = calloc((size_t)st->n_slots * STAGE_RING_MAX_PIECES, sizeof *st->dst_offs);
    st->counts = calloc(st->n_slots, sizeof *st->counts);
    if (!st->events || !st->pieces || !st->dst_offs || !st->counts) {
        guild_err_set(err, "cuda stage: out of memory");
        goto fail;
    }
    /* portable: whichever device or context copies out of it sees it as pinned */
    if (cuda_check(cudaHostRegister(stage_ring_map_base(ring), stage_ring_map_size(ring), cudaHostRegisterPortable),
                   "register the staging ring", err) < 0) {
        guild_err_prefix(err, "stage ring %s (%zu bytes): ", stage_ring_name(ring), stage_ring_map_size(ring));
        goto fail;
    }
    st->registered = 1;
    for (uint32_t i = 0; i < st->n_slots; i++)
        if (cuda_check(cudaEventCreateWithFlags(&st->events[i], cudaEventDisableTiming), "staging slot event",
                       err) < 0)
            goto fail;
    *out = st;
    return 0;
fail:
    cuda_stage_destroy(&st);
    return -1;
}

static int pageable_copy(cuda_stage_t *st, char *dst, const cuda_stage_piece_t *p, int32_t n, cudaStream_t copy,
                         guild_err_t *err)
{
    for (int32_t i = 0; i < n; i++) {
        if (cuda_check(cudaMemcpyAsync(dst + p[i].dst_off, p[i].host, p[i].bytes, cudaMemcpyHostToDevice, copy),
                       "stage experts", err) < 0)
            return -1;
        st->bytes += p[i].bytes;
    }
    return 0;
}

/* Waits for the oldest request still to be enqueued, then enqueues its copies to the device and records the
 * slot's event. */
static int enqueue_oldest(cuda_stage_t *st, char *dst, cudaStream_t copy, guild_err_t *err)
{
    uint64_t seq = st->enqueued;
    uint32_t s = (uint32_t)(seq % st->n_slots);
    void *data;
    uint64_t t0 = guild_now_ns();
    int rc = stage_ring_wait(st->ring, seq, &st->wait, &data, err);
    st->fill_wait_ns += guild_now_ns() - t0;
    if (rc < 0)
        return -1;
    const stage_piece_t *pc = st->pieces + (size_t)s * STAGE_RING_MAX_PIECES;
    const uint64_t *doff = st->dst_offs + (size_t)s * STAGE_RING_MAX_PIECES;
    for (uint32_t i = 0; i < st->counts[s]; i++) {
        if (cuda_check(cudaMemcpyAsync(dst + doff[i], (const char *)data + pc[i].slot_off, pc[i].bytes,
                                       cudaMemcpyHostToDevice, copy), "stage experts from the ring", err) < 0)
            return -1;
        st->bytes += pc[i].bytes;
    }
    if (cuda_check(cudaEventRecord(st->events[s], copy), "record a staging slot's event", err) < 0)
        return -1;
    st->enqueued = seq + 1;
    return 0;
}

/* Hands the oldest enqueued request's slot back once its device copies are done. */
static int release_oldest(cuda_stage_t *st, guild_err_t *err)
{
    uint64_t seq = stage_ring_released(st->ring);
    GUILD_ASSERT(seq < st->enqueued);
    if (cuda_check(cudaEventSynchronize(st->events[seq % st->n_slots]), "wait for a staging slot's copy", err) < 0)
        return -1;
    stage_ring_release(st->ring, seq);
    return 0;
}

static int ring_copy(cuda_stage_t *st, char *dst, const cuda_stage_piece_t *p, int32_t n, cudaStream_t copy,
                     guild_err_t *err)
{
    if (n > st->copies_cap) {
        stage_copy_t *c = realloc(st->copies, (size_t)n * sizeof *c);
        if (!c)
            return guild_err_set(err, "cuda stage: out of memory for %d pieces", (int)n);
        st->copies = c;
        st->copies_cap = n;
    }
    for (int32_t i = 0; i < n; i++) {
        const char *h = p[i].host;
        if (p[i].bytes && (h < st->map || (size_t)(h - st->map) > st->map_bytes ||
                           p[i].bytes > st->map_bytes - (size_t)(h - st->map)))
            return guild_err_set(err, "cuda stage: piece %d (%zu bytes at %p) is not inside the model mapping "
                                 "(%zu bytes at %p) that the stager serves", (int)i, p[i].bytes, (const void *)h,
                                 st->map_bytes, (const void *)st->map);
        st->copies[i] = (stage_copy_t){p[i].bytes ? (uint64_t)(h - st->map) : 0, p[i].bytes, p[i].dst_off};
    }
    stage_cursor_t cur;
    stage_cursor_init(&cur, st->copies, n);
    int more = 1;
    for (;;) {
        uint64_t posted = stage_ring_posted(st->ring), released = stage_ring_released(st->ring);
        if (more && posted - released < st->n_slots) {
            uint32_t s = (uint32_t)(posted % st->n_slots);
            stage_piece_t *pc = st->pieces + (size_t)s * STAGE_RING_MAX_PIECES;
            uint64_t *doff = st->dst_offs + (size_t)s * STAGE_RING_MAX_PIECES;
            st->counts[s] = stage_cursor_next(&cur, stage_ring_slot_bytes(st->ring), STAGE_RING_MAX_PIECES, pc, doff);
            if (st->counts[s] == 0) {
                more = 0;
                continue;
            }
            uint64_t seq;
            if (stage_ring_post(st->ring, pc, st->counts[s], &seq, err) < 0)
                return -1;
            continue;
        }
        if (st->enqueued < posted) {
            if (enqueue_oldest(st, dst, copy, err) < 0)
                return -1;
            continue;
        }
        if (!more)
            return 0; /* every request of this call is on the stream; slots are released by later calls */
        if (release_oldest(st, err) < 0)
            return -1;
    }
}

int cuda_stage_copy(cuda_stage_t *st, char *dst, const cuda_stage_piece_t *p, int32_t n, cudaStream_t copy,
                    guild_err_t *err)
{
    if (st->failed)
        return guild_err_set(err, "cuda stage: unusable after an earlier error");
    if (st->kind == STAGE_KIND_PAGEABLE || st->kind == STAGE_KIND_PINNED)
        return pageable_copy(st, dst, p, n, copy, err);
    if (ring_copy(st, dst, p, n, copy, err) < 0) {
        st->failed = 1;
        return -1;
    }
    return 0;
}

void cuda_stage_stats(const cuda_stage_t *st, uint64_t *bytes, uint64_t *fill_wait_ns)
{
    if (bytes)
        *bytes = st->bytes;
    if (fill_wait_ns)
        *fill_wait_ns = st->fill_wait_ns;
}

int cuda_stage_failed(const cuda_stage_t *st)
{
    return st->failed != 0;
}

void cuda_stage_destroy(cuda_stage_t **pst)
{
    if (!pst || !*pst)
        return;
    cuda_stage_t *st = *pst;
    if (st->kind == STAGE_KIND_RING) {
        /* the device may still read the slots: let the copies finish before the memory is unregistered */
        guild_err_t err;
        while (stage_ring_released(st->ring) < st->enqueued && release_oldest(st, &err) == 0) {
        }
        if (st->events)
            for (uint32_t i = 0; i < st->n_slots; i++)
                if (st->events[i])
                    cudaEventDestroy(st->events[i]);
        if (st->registered)
            cudaHostUnregister(stage_ring_map_base(st->ring));
    }
    if (st->pin_base) {
        /* copies out of the range may still be in flight on any stream */
        cudaDeviceSynchronize();
        cudaHostUnregister(st->pin_base);
    }
    free(st->events);
    free(st->pieces);
    free(st->dst_offs);
    free(st->counts);
    free(st->copies);
    free(st);
    *pst = NULL;
}
