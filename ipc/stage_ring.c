/* ipc/stage_ring.c — the staging ring's layout, attach checks and client side (contract in stage_ring.h). */
#include "config.h"

#include "ipc/stage_ring.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#define PAGE ((size_t)4096)
#define MS UINT64_C(1000000)

struct stage_ring {
    guild_arena_t *arena;
    stage_ring_header_t *hdr; /* the region */
    size_t region_size;
    uint64_t posted;   /* client: requests posted */
    uint64_t released; /* client: requests released */
};

static size_t round_up(size_t n, size_t to)
{
    return (n + to - 1) / to * to;
}

static size_t ctl_bytes(uint32_t n_slots)
{
    return round_up((size_t)n_slots * sizeof(stage_slot_ctl_t), PAGE);
}

size_t stage_ring_memsize(uint32_t n_slots, size_t slot_bytes)
{
    return STAGE_RING_HEADER_BYTES + ctl_bytes(n_slots) + (size_t)n_slots * round_up(slot_bytes, PAGE);
}

static void ring_init(stage_ring_header_t *h, uint32_t n_slots, size_t slot_bytes, size_t region_size)
{
    h->version = STAGE_RING_VERSION;
    h->header_size = sizeof *h;
    h->n_slots = n_slots;
    h->max_pieces = STAGE_RING_MAX_PIECES;
    h->slot_bytes = slot_bytes;
    h->slot_stride = round_up(slot_bytes, PAGE);
    h->ctl_offset = STAGE_RING_HEADER_BYTES;
    h->data_offset = STAGE_RING_HEADER_BYTES + ctl_bytes(n_slots);
    h->region_size = region_size;
    guild_doorbell_init(&h->posted);
    guild_doorbell_init(&h->filled);
    atomic_store_explicit(&h->magic, STAGE_RING_MAGIC, memory_order_release);
}

int stage_ring_create(stage_ring_t **out, uint32_t n_slots, size_t slot_bytes, const guild_arena_opts_t *opts,
                      guild_err_t *err)
{
    *out = NULL;
    if (n_slots < 2 || n_slots > STAGE_RING_MAX_SLOTS)
        return guild_err_set(err, "stage ring: %" PRIu32 " slots, need 2..%d", n_slots, STAGE_RING_MAX_SLOTS);
    if (slot_bytes == 0 || slot_bytes > ((size_t)1 << 40))
        return guild_err_set(err, "stage ring: slot size %zu bytes is out of range", slot_bytes);
    stage_ring_t *r = calloc(1, sizeof *r);
    if (!r)
        return guild_err_set(err, "stage ring: out of memory");
    size_t size = stage_ring_memsize(n_slots, slot_bytes);
    guild_arena_request_t req = {GUILD_ARENA_KIND_STAGE_RING, 0, size};
    r->arena = guild_arena_create(&req, 1, opts, err);
    if (!r->arena) {
        guild_err_prefix(err, "stage ring: ");
        free(r);
        return -1;
    }
    r->hdr = guild_arena_region(r->arena, GUILD_ARENA_KIND_STAGE_RING, 0, &r->region_size);
    GUILD_ASSERT(r->hdr && r->region_size >= size);
    ring_init(r->hdr, n_slots, slot_bytes, r->region_size);
    guild_arena_publish(r->arena);
    *out = r;
    return 0;
}

int stage_ring_validate(const stage_ring_header_t *h, size_t region_size, guild_err_t *err)
{
    if (region_size < STAGE_RING_HEADER_BYTES)
        return guild_err_set(err, "region of %zu bytes is too small for a ring header", region_size);
    uint64_t magic = atomic_load_explicit(&((stage_ring_header_t *)h)->magic, memory_order_acquire);
    if (magic != STAGE_RING_MAGIC)
        return guild_err_set(err, "bad magic 0x%016" PRIx64 ": not a staging ring", magic);
    if (h->version != STAGE_RING_VERSION)
        return guild_err_set(err, "ring version %" PRIu32 ", this build reads version %u", h->version,
                             STAGE_RING_VERSION);
    if (h->header_size != sizeof *h)
        return guild_err_set(err, "ring header size %" PRIu32 ", expected %zu", h->header_size, sizeof *h);
    if (h->n_slots < 2 || h->n_slots > STAGE_RING_MAX_SLOTS)
        return guild_err_set(err, "%" PRIu32 " slots, expected 2..%d", h->n_slots, STAGE_RING_MAX_SLOTS);
    if (h->max_pieces != STAGE_RING_MAX_PIECES)
        return guild_err_set(err, "%" PRIu32 " pieces per request, this build uses %d", h->max_pieces,
                             STAGE_RING_MAX_PIECES);
    if (h->region_size != region_size)
        return guild_err_set(err, "ring header says %" PRIu64 " bytes, its region has %zu", h->region_size,
                             region_size);
    if (h->slot_bytes == 0 || h->slot_stride < h->slot_bytes || h->slot_stride % PAGE ||
        h->slot_stride > ((uint64_t)1 << 41))
        return guild_err_set(err, "slot size %" PRIu64 " / stride %" PRIu64 " bytes is inconsistent",
                             h->slot_bytes, h->slot_stride);
    if (h->ctl_offset != STAGE_RING_HEADER_BYTES || h->data_offset != h->ctl_offset + ctl_bytes(h->n_slots))
        return guild_err_set(err, "control at %" PRIu64 ", data at %" PRIu64 ": out of place", h->ctl_offset,
                             h->data_offset);
    if (h->data_offset + h->n_slots * h->slot_stride > region_size)
        return guild_err_set(err, "%" PRIu32 " slots of %" PRIu64 " bytes reach past the region (%zu bytes)",
                             h->n_slots, h->slot_stride, region_size);
    return 0;
}

int stage_ring_attach(stage_ring_t **out, const char *name, guild_err_t *err)
{
    *out = NULL;
    stage_ring_t *r = calloc(1, sizeof *r);
    if (!r)
        return guild_err_set(err, "stage ring %s: out of memory", name);
    r->arena = guild_arena_attach(name, NULL, err);
    if (!r->arena)
        goto fail;
    r->hdr = guild_arena_region(r->arena, GUILD_ARENA_KIND_STAGE_RING, 0, &r->region_size);
    if (!r->hdr) {
        guild_err_set(err, "stage ring %s: the arena holds no staging ring", name);
        goto fail;
    }
    if (stage_ring_validate(r->hdr, r->region_size, err) < 0) {
        guild_err_prefix(err, "stage ring %s: ", name);
        goto fail;
    }
    /* requests a predecessor left in flight keep their slots until drained: a filled one may still have been
     * under its DMA, an unfilled one is being written by the server */
    r->posted = guild_doorbell_load(&r->hdr->posted);
    r->released = guild_doorbell_load(&r->hdr->filled);
    if (r->released > r->posted || r->posted - r->released > r->hdr->n_slots) {
        guild_err_set(err, "stage ring %s: %" PRIu64 " requests posted and %" PRIu64 " filled: inconsistent", name,
                      r->posted, r->released);
        goto fail;
    }
    *out = r;
    return 0;
fail:
    guild_arena_destroy(&r->arena);
    free(r);
    return -1;
}

void stage_ring_destroy(stage_ring_t **pr)
{
    if (!pr || !*pr)
        return;
    guild_arena_destroy(&(*pr)->arena);
    free(*pr);
    *pr = NULL;
}

const char *stage_ring_name(const stage_ring_t *r)
{
    return guild_arena_name(r->arena);
}

stage_ring_header_t *stage_ring_header(const stage_ring_t *r)
{
    return r->hdr;
}

uint32_t stage_ring_n_slots(const stage_ring_t *r)
{
    return r->hdr->n_slots;
}

size_t stage_ring_slot_bytes(const stage_ring_t *r)
{
    return (size_t)r->hdr->slot_bytes;
}

void *stage_ring_slot(const stage_ring_t *r, uint32_t slot)
{
    GUILD_ASSERT(slot < r->hdr->n_slots);
    return (char *)r->hdr + r->hdr->data_offset + slot * r->hdr->slot_stride;
}

stage_slot_ctl_t *stage_ring_ctl(const stage_ring_t *r, uint32_t slot)
{
    GUILD_ASSERT(slot < r->hdr->n_slots);
    return (stage_slot_ctl_t *)((char *)r->hdr + r->hdr->ctl_offset) + slot;
}

void *stage_ring_map_base(const stage_ring_t *r)
{
    return guild_arena_base(r->arena);
}

size_t stage_ring_map_size(const stage_ring_t *r)
{
    return guild_arena_size(r->arena);
}

stage_wait_t stage_wait_default(void)
{
    return (stage_wait_t){50000, 30000 * MS, 2000 * MS};
}

uint64_t stage_ring_posted(const stage_ring_t *r)
{
    return r->posted;
}

uint64_t stage_ring_released(const stage_ring_t *r)
{
    return r->released;
}

int stage_ring_post(stage_ring_t *r, const stage_piece_t *pieces, uint32_t n, uint64_t *seq, guild_err_t *err)
{
    stage_ring_header_t *h = r->hdr;
    if (r->posted - r->released >= h->n_slots)
        return guild_err_set(err, "stage ring %s: all %" PRIu32 " slots are in use", stage_ring_name(r),
                             h->n_slots);
    if (n > STAGE_RING_MAX_PIECES)
        return guild_err_set(err, "stage ring %s: %" PRIu32 " pieces in one request, at most %d",
                             stage_ring_name(r), n, STAGE_RING_MAX_PIECES);
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (pieces[i].slot_off > h->slot_bytes || pieces[i].bytes > h->slot_bytes - pieces[i].slot_off)
            return guild_err_set(err, "stage ring %s: piece %" PRIu32 " (%" PRIu64 " bytes at slot offset %" PRIu64
                                 ") does not fit a slot of %" PRIu64 " bytes", stage_ring_name(r), i,
                                 pieces[i].bytes, pieces[i].slot_off, h->slot_bytes);
        total += pieces[i].bytes;
    }
    uint64_t k = r->posted;
    stage_slot_ctl_t *c = stage_ring_ctl(r, (uint32_t)(k % h->n_slots));
    c->seq = k;
    c->n_pieces = n;
    c->bytes = total;
    if (n)
        memcpy(c->pieces, pieces, n * sizeof *pieces);
    r->posted = k + 1;
    guild_doorbell_ring(&h->posted, k + 1);
    *seq = k;
    return 0;
}

static const char *status_name(uint32_t s)
{
    switch (s) {
    case STAGE_BAD_COUNT: return "too many pieces";
    case STAGE_BAD_FILE_RANGE: return "past the end of the served file";
    case STAGE_BAD_SLOT_RANGE: return "past the end of the slot";
    }
    return "unknown status";
}

/* NULL while the server looks alive, else why not (in buf). `since` is when the wait began. */
static const char *server_dead(const stage_ring_t *r, uint64_t since, uint64_t liveness_ns, char *buf, size_t n)
{
    stage_ring_header_t *h = r->hdr;
    int32_t pid = atomic_load_explicit(&h->server_pid, memory_order_acquire);
    uint64_t beat = atomic_load_explicit(&h->beat_ns, memory_order_acquire);
    uint64_t now = guild_now_ns();
    if (pid == 0) {
        if (now - since < liveness_ns)
            return NULL;
        snprintf(buf, n, "no stager serves ring %s (none started within %" PRIu64 " ms)", stage_ring_name(r),
                 liveness_ns / MS);
        return buf;
    }
    if (kill(pid, 0) < 0 && errno == ESRCH) {
        snprintf(buf, n, "stager pid %d serving ring %s is gone", (int)pid, stage_ring_name(r));
        return buf;
    }
    if (beat < now && now - beat > liveness_ns) {
        snprintf(buf, n, "stager pid %d serving ring %s is dead or hung: no heartbeat for %" PRIu64 " ms",
                 (int)pid, stage_ring_name(r), (now - beat) / MS);
        return buf;
    }
    return NULL;
}

int stage_ring_wait(stage_ring_t *r, uint64_t seq, const stage_wait_t *w, void **data, guild_err_t *err)
{
    stage_ring_header_t *h = r->hdr;
    GUILD_ASSERT(seq < r->posted && seq >= r->released);
    stage_wait_t dflt = stage_wait_default();
    if (!w)
        w = &dflt;
    uint64_t start = guild_now_ns(), deadline = start + w->timeout_ns;
    /* wait in short rounds so that a dead server is noticed within a round of its heartbeat going stale */
    uint64_t round = w->liveness_ns / 4 < 10 * MS ? 10 * MS : w->liveness_ns / 4;
    int first = 1;
    for (;;) {
        uint64_t now = guild_now_ns();
        if (now >= deadline)
            return guild_err_set(err, "stage ring %s: request %" PRIu64 " not filled within %" PRIu64 " ms",
                                 stage_ring_name(r), seq, w->timeout_ns / MS);
        uint64_t left = deadline - now;
        guild_wait_policy_t pol = {first ? w->spin_ns : 0, left < round ? left : round};
        first = 0;
        guild_err_t werr;
        guild_wait_result_t res = guild_doorbell_wait(&h->filled, seq + 1, &pol, NULL, NULL, "stage filled", &werr);
        if (res == GUILD_WAIT_OK)
            break;
        if (res == GUILD_WAIT_ERROR)
            return guild_err_set(err, "stage ring %s: %s", stage_ring_name(r), werr.msg);
        char why[512];
        if (server_dead(r, start, w->liveness_ns, why, sizeof why))
            return guild_err_set(err, "%s (waiting for request %" PRIu64 ")", why, seq);
    }
    uint32_t slot = (uint32_t)(seq % h->n_slots);
    stage_slot_ctl_t *c = stage_ring_ctl(r, slot);
    if (c->done_seq != seq)
        return guild_err_set(err, "stage ring %s: slot %" PRIu32 " holds request %" PRIu64 ", expected %" PRIu64,
                             stage_ring_name(r), slot, c->done_seq, seq);
    if (c->status != STAGE_OK) {
        const stage_piece_t *p = c->bad_piece < c->n_pieces ? &c->pieces[c->bad_piece] : NULL;
        return guild_err_set(err, "stage ring %s: the stager refused request %" PRIu64 ": piece %" PRIu32
                             " (%" PRIu64 " bytes at file offset %" PRIu64 "): %s", stage_ring_name(r), seq,
                             c->bad_piece, p ? p->bytes : 0, p ? p->file_off : 0, status_name(c->status));
    }
    if (data)
        *data = stage_ring_slot(r, slot);
    return 0;
}

void stage_ring_release(stage_ring_t *r, uint64_t seq)
{
    GUILD_ASSERT(seq == r->released && seq < r->posted);
    r->released = seq + 1;
}

int stage_ring_drain(stage_ring_t *r, const stage_wait_t *w, guild_err_t *err)
{
    while (r->released < r->posted) {
        uint64_t seq = r->released;
        /* only whether the server is done with the slot matters here, not what it answered */
        if (stage_ring_wait(r, seq, w, NULL, err) < 0 && guild_doorbell_load(&r->hdr->filled) <= seq)
            return -1;
        stage_ring_release(r, seq);
    }
    return 0;
}

void stage_ring_request_stop(stage_ring_t *r)
{
    atomic_store_explicit(&r->hdr->stop, 1, memory_order_release);
    guild_doorbell_wake(&r->hdr->posted);
}
