/* gpu-worker/dense/cuda/cuda_stage.c — expert-weight copies to the device, pageable or through a staging ring
 * (contract in cuda_stage.h). */
#include "config.h"

#include "gpu-worker/dense/cuda/cuda_stage.h"

#include "gpu-worker/dense/cuda/cuda_util.h"
#include "core/util/log.h"
#include "ipc/doorbell.h"
#include "ipc/stage_plan.h"
#include "ipc/stage_ring.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

typedef enum { STAGE_KIND_PAGEABLE, STAGE_KIND_RING, STAGE_KIND_PINNED, STAGE_KIND_REGISTERED } stage_kind_t;

struct cuda_stage {
    stage_kind_t kind;
    uint64_t bytes;        /* copied (enqueued) */
    uint64_t fill_wait_ns; /* host time in stage_ring_wait */
    int failed;            /* an error left the ring in an unknown state: refuse further copies */

    /* pinned kind: the ranges (sorted by host address) and their page-locked copies */
    cuda_stage_range_t *pin;
    int32_t n_pin;
    char *pin_mem;

    /* registered kind: the page-aligned ranges registered in place (sorted, disjoint; pin[i].copy = host) */
    int32_t n_reg;        /* of pin[] that are registered (all or none) */
    uint64_t reg_bytes;

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

static int range_cmp(const void *a, const void *b)
{
    const cuda_stage_range_t *x = a, *y = b;
    return (uintptr_t)x->host < (uintptr_t)y->host ? -1 : (uintptr_t)x->host > (uintptr_t)y->host;
}

int cuda_stage_new_pinned(cuda_stage_t **out, const cuda_stage_range_t *ranges, int32_t n, guild_err_t *err)
{
    *out = NULL;
    cuda_stage_t *st = calloc(1, sizeof *st);
    if (!st || !(st->pin = calloc(n > 0 ? (size_t)n : 1, sizeof *st->pin)))
        goto oom;
    st->kind = STAGE_KIND_PINNED;
    memcpy(st->pin, ranges, (size_t)n * sizeof *ranges);
    qsort(st->pin, (size_t)n, sizeof *st->pin, range_cmp);
    /* overlapping or touching ranges (a fused gate/up tensor given twice) become one */
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        const char *h = st->pin[i].host, *end = h + st->pin[i].bytes;
        if (m > 0 && h <= (const char *)st->pin[m - 1].host + st->pin[m - 1].bytes) {
            const char *pend = (const char *)st->pin[m - 1].host + st->pin[m - 1].bytes;
            if (end > pend)
                st->pin[m - 1].bytes = (size_t)(end - (const char *)st->pin[m - 1].host);
        } else {
            st->pin[m++] = st->pin[i];
        }
    }
    n = m;
    size_t total = 0;
    for (int32_t i = 0; i < n; i++)
        total += st->pin[i].bytes;
    const uint64_t t0 = guild_now_ns();
    const cudaError_t e = cudaMallocHost((void **)&st->pin_mem, total ? total : 1);
    if (e != cudaSuccess) {
        st->pin_mem = NULL;
        (void)cudaGetLastError();
        cuda_stage_destroy(&st);
        return guild_err_set(err, "cuda stage: cannot allocate %.2f GiB of page-locked memory for the streamed experts "
                             "(%s); --stager process or thread copy through small pinned slots instead",
                             (double)total / (1u << 30), cudaGetErrorString(e));
    }
    st->n_pin = n;
    size_t off = 0;
    for (int32_t i = 0; i < n; i++) {
        memcpy(st->pin_mem + off, st->pin[i].host, st->pin[i].bytes);
        st->pin[i].copy = st->pin_mem + off;
        off += st->pin[i].bytes;
    }
    guild_log(GUILD_LOG_INFO, "cuda stage: %.2f GiB of streamed experts (%d ranges) copied into page-locked memory "
              "in %.2f s: the device copies them by DMA, with no CPU copy per batch", (double)total / (1u << 30),
              (int)n, (double)(guild_now_ns() - t0) / 1e9);
    *out = st;
    return 0;
oom:
    if (st)
        free(st);
    return guild_err_set(err, "cuda stage: out of memory");
}

/* The page-locked copy of [h, h + bytes), or NULL when no pinned range holds all of it. */
static const char *pinned_at(const cuda_stage_t *st, const char *h, size_t bytes)
{
    int32_t lo = 0, hi = st->n_pin - 1;
    while (lo <= hi) {
        const int32_t mid = lo + (hi - lo) / 2;
        const cuda_stage_range_t *r = &st->pin[mid];
        if (h < (const char *)r->host)
            hi = mid - 1;
        else if (h >= (const char *)r->host + r->bytes && !(bytes == 0 && h == (const char *)r->host + r->bytes))
            lo = mid + 1;
        else
            return bytes <= r->bytes - (size_t)(h - (const char *)r->host) ? r->copy + (h - (const char *)r->host)
                                                                         : NULL;
    }
    return NULL;
}

int cuda_stage_new_registered(cuda_stage_t **out, const cuda_stage_range_t *ranges, int32_t n, guild_err_t *err)
{
    *out = NULL;
    cuda_stage_t *st = calloc(1, sizeof *st);
    if (!st || !(st->pin = calloc(n > 0 ? (size_t)n : 1, sizeof *st->pin))) {
        free(st);
        return guild_err_set(err, "cuda stage: out of memory");
    }
    st->kind = STAGE_KIND_REGISTERED;
    const uintptr_t page = 4096;
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        if (!ranges[i].bytes)
            continue;
        const uintptr_t a = (uintptr_t)ranges[i].host & ~(page - 1);
        const uintptr_t b = ((uintptr_t)ranges[i].host + ranges[i].bytes + page - 1) & ~(page - 1);
        st->pin[m++] = (cuda_stage_range_t){(const void *)a, (size_t)(b - a), NULL};
    }
    qsort(st->pin, (size_t)m, sizeof *st->pin, range_cmp);
    int32_t k = 0; /* merged: a page registered twice is refused */
    for (int32_t i = 0; i < m; i++) {
        const char *h = st->pin[i].host, *end = h + st->pin[i].bytes;
        if (k > 0 && h <= (const char *)st->pin[k - 1].host + st->pin[k - 1].bytes) {
            const char *pend = (const char *)st->pin[k - 1].host + st->pin[k - 1].bytes;
            if (end > pend)
                st->pin[k - 1].bytes = (size_t)(end - (const char *)st->pin[k - 1].host);
        } else {
            st->pin[k++] = st->pin[i];
        }
    }
    st->n_pin = k;
    int dev = 0, ro = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&ro, cudaDevAttrHostRegisterReadOnlySupported, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        ro = 0;
    }
    /* read-only: the memory may be a read-only mapping (the model file, another process's shared copies), and
     * the device never writes it */
    const unsigned flags = cudaHostRegisterPortable | (ro ? cudaHostRegisterReadOnly : 0u);
    const uint64_t t0 = guild_now_ns();
    cudaError_t e = cudaSuccess;
    for (int32_t i = 0; i < k && e == cudaSuccess; i++) {
        e = cudaHostRegister((void *)st->pin[i].host, st->pin[i].bytes, flags);
        if (e == cudaSuccess) {
            st->pin[i].copy = (char *)st->pin[i].host;
            st->n_reg = i + 1;
            st->reg_bytes += st->pin[i].bytes;
        }
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        guild_log(GUILD_LOG_WARN, "cuda stage: the experts' memory cannot be registered for the device (%s, after "
                  "%.2f of %d ranges' GiB): they are copied as pageable memory", cudaGetErrorString(e),
                  (double)st->reg_bytes / (1u << 30), (int)k);
        for (int32_t i = 0; i < st->n_reg; i++)
            cudaHostUnregister((void *)st->pin[i].host);
        st->n_reg = 0;
        st->reg_bytes = 0;
    } else {
        guild_log(GUILD_LOG_INFO, "cuda stage: %.2f GiB of the CPU side's experts (%d ranges) registered for the "
                  "device%s in %.2f s: streamed by DMA from them, no second copy", (double)st->reg_bytes / (1u << 30),
                  (int)k, ro ? " read-only" : "", (double)(guild_now_ns() - t0) / 1e9);
    }
    *out = st;
    return 0;
}

uint64_t cuda_stage_registered_bytes(const cuda_stage_t *st)
{
    return st->kind == STAGE_KIND_REGISTERED ? st->reg_bytes : 0;
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

/* One cudaMemcpyAsync per piece: from the host memory itself (pageable kind), or from its page-locked copy
 * (pinned kind). */
static int direct_copy(cuda_stage_t *st, char *dst, const cuda_stage_piece_t *p, int32_t n, cudaStream_t copy,
                       guild_err_t *err)
{
    for (int32_t i = 0; i < n; i++) {
        const char *src = p[i].host; /* registered kind: the memory itself (a pageable copy outside its ranges) */
        if (st->kind == STAGE_KIND_PINNED && !(src = pinned_at(st, p[i].host, p[i].bytes)))
            return guild_err_set(err, "cuda stage: piece %d (%zu bytes at %p) is not inside the pinned ranges",
                                 (int)i, p[i].bytes, p[i].host);
        if (cuda_check(cudaMemcpyAsync(dst + p[i].dst_off, src, p[i].bytes, cudaMemcpyHostToDevice, copy),
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
    if (st->kind != STAGE_KIND_RING)
        return direct_copy(st, dst, p, n, copy, err);
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
    if (st->kind == STAGE_KIND_REGISTERED && st->n_reg) {
        cudaDeviceSynchronize(); /* copies out of it may still be in flight */
        for (int32_t i = 0; i < st->n_reg; i++)
            cudaHostUnregister((void *)st->pin[i].host);
    }
    if (st->pin_mem) {
        /* copies out of it may still be in flight on any stream */
        cudaDeviceSynchronize();
        cudaFreeHost(st->pin_mem);
    }
    free(st->pin);
    free(st->events);
    free(st->pieces);
    free(st->dst_offs);
    free(st->counts);
    free(st->copies);
    free(st);
    *pst = NULL;
}
