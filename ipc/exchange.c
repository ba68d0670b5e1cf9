/* ipc/exchange.c — layout and step protocol of the MoE layer exchange (contract in exchange.h). */
#include "config.h"

#include "ipc/exchange.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

struct guild_exchange {
    guild_exchange_shared_t *shared;
    char *base;                     /* the region's start */
    guild_exchange_shape_t shape;   /* validated copy: never re-read from shared memory */
    guild_exchange_layout_t layout; /* computed from shape */
};

size_t guild_exchange_memsize(const guild_exchange_shape_t *shape)
{
    guild_exchange_layout_t l;
    return guild_exchange_layout_of(shape, &l) < 0 ? 0 : (size_t)l.total;
}

static int shape_error(const guild_exchange_shape_t *s, guild_err_t *err)
{
    return guild_err_set(err, "exchange: invalid shape (max_tokens %" PRIu32 ", n_embd %" PRIu32 ", n_used %"
                         PRIu32 ", n_slots %" PRIu32 ", n_workers %" PRIu32 ")", s->max_tokens, s->n_embd,
                         s->n_used, s->n_slots, s->n_workers);
}

int guild_exchange_init(void *addr, size_t size, const guild_exchange_shape_t *shape, guild_err_t *err)
{
    GUILD_ASSERT(addr && ((uintptr_t)addr & 63) == 0);
    guild_exchange_layout_t l;
    if (guild_exchange_layout_of(shape, &l) < 0)
        return shape_error(shape, err);
    if (size < l.total)
        return guild_err_set(err, "exchange: region of %zu bytes, the shape needs %" PRIu64, size, l.total);
    guild_exchange_shared_t *sh = addr;
    memset(sh, 0, l.slot_off);
    sh->magic = GUILD_EXCHANGE_MAGIC;
    sh->max_tokens = shape->max_tokens;
    sh->n_embd = shape->n_embd;
    sh->n_used = shape->n_used;
    sh->n_slots = shape->n_slots;
    sh->n_workers = shape->n_workers;
    sh->n_prefetch = shape->n_prefetch;
    sh->slot_offset = l.slot_off;
    sh->slot_stride = l.slot_stride;
    sh->x_offset = l.x_off;
    sh->ids_offset = l.ids_off;
    sh->y_offset = l.y_off;
    guild_doorbell_init(&sh->step);
    for (uint32_t k = 0; k < shape->n_workers; k++)
        guild_doorbell_init(&sh->done[k]);
    for (uint32_t i = 0; i < shape->n_slots; i++)
        memset((char *)addr + guild_exchange_slot_at(&l, i + 1), 0, sizeof(guild_exchange_slot_header_t));
    return 0;
}

guild_exchange_t *guild_exchange_attach(void *addr, size_t size, guild_err_t *err)
{
    GUILD_ASSERT(addr && ((uintptr_t)addr & 63) == 0);
    guild_exchange_shared_t *sh = addr;
    if (size < sizeof *sh) {
        guild_err_set(err, "exchange: region of %zu bytes is too small", size);
        return NULL;
    }
    if (sh->magic != GUILD_EXCHANGE_MAGIC) {
        guild_err_set(err, "exchange: bad magic 0x%016" PRIx64, sh->magic);
        return NULL;
    }
    guild_exchange_shape_t shape = {sh->max_tokens, sh->n_embd, sh->n_used, sh->n_slots, sh->n_workers,
                                    sh->n_prefetch};
    guild_exchange_layout_t l;
    if (guild_exchange_layout_of(&shape, &l) < 0) {
        shape_error(&shape, err);
        return NULL;
    }
    if (sh->slot_offset != l.slot_off || sh->slot_stride != l.slot_stride || sh->x_offset != l.x_off ||
        sh->ids_offset != l.ids_off || sh->y_offset != l.y_off) {
        guild_err_set(err, "exchange: slot layout differs from this build's");
        return NULL;
    }
    if (size < l.total) {
        guild_err_set(err, "exchange: region of %zu bytes, the shape needs %" PRIu64, size, l.total);
        return NULL;
    }
    guild_exchange_t *x = calloc(1, sizeof *x);
    if (!x) {
        guild_err_set(err, "exchange: out of memory");
        return NULL;
    }
    x->shared = sh;
    x->base = addr;
    x->shape = shape;
    x->layout = l;
    return x;
}

void guild_exchange_destroy(guild_exchange_t **px)
{
    if (!px || !*px)
        return;
    free(*px);
    *px = NULL;
}

const guild_exchange_shape_t *guild_exchange_shape(const guild_exchange_t *x)
{
    return &x->shape;
}

const guild_exchange_layout_t *guild_exchange_layout(const guild_exchange_t *x)
{
    return &x->layout;
}

void *guild_exchange_base(const guild_exchange_t *x)
{
    return x->base;
}

static char *slot_base(const guild_exchange_t *x, uint64_t seq)
{
    return x->base + guild_exchange_slot_at(&x->layout, seq);
}

static void slot_view(const guild_exchange_t *x, uint64_t seq, int n_tokens, int layer, guild_exchange_slot_t *s)
{
    char *b = slot_base(x, seq);
    s->seq = seq;
    s->n_tokens = n_tokens;
    s->layer = layer;
    s->x = (float *)(void *)(b + x->layout.x_off);
    s->ids = (int32_t *)(void *)(b + x->layout.ids_off);
    s->y = (float *)(void *)(b + x->layout.y_off);
}

guild_wait_result_t guild_exchange_begin(guild_exchange_t *x, uint64_t seq, const guild_wait_policy_t *policy,
                                         guild_exchange_slot_t *slot, guild_wait_stats_t *stats,
                                         guild_err_t *err)
{
    GUILD_ASSERT(seq >= 1);
    if (seq > x->shape.n_slots) {
        guild_wait_result_t r = guild_doorbell_wait_all(x->shared->done, (int)x->shape.n_workers,
                                                        seq - x->shape.n_slots, policy, stats,
                                                        "exchange done", err);
        if (r != GUILD_WAIT_OK)
            return r;
    }
    slot_view(x, seq, (int)x->shape.max_tokens, -1, slot);
    return GUILD_WAIT_OK;
}

int guild_exchange_publish(guild_exchange_t *x, uint64_t seq, int n_tokens, int layer, guild_err_t *err)
{
    GUILD_ASSERT(seq >= 1);
    if (n_tokens < 0 || (uint32_t)n_tokens > x->shape.max_tokens)
        return guild_err_set(err, "exchange %" PRIu64 ": %d tokens, the slots hold %" PRIu32, seq, n_tokens,
                             x->shape.max_tokens);
    guild_exchange_slot_header_t *h = (guild_exchange_slot_header_t *)(void *)slot_base(x, seq);
    h->seq = seq;
    h->n_tokens = n_tokens;
    h->layer = layer;
    guild_doorbell_ring(&x->shared->step, seq);
    return 0;
}

guild_wait_result_t guild_exchange_wait_done(guild_exchange_t *x, uint64_t seq, const guild_wait_policy_t *policy,
                                             guild_wait_stats_t *stats, guild_err_t *err)
{
    return guild_doorbell_wait_all(x->shared->done, (int)x->shape.n_workers, seq, policy, stats,
                                   "exchange done", err);
}

void guild_exchange_view(const guild_exchange_t *x, uint64_t seq, guild_exchange_slot_t *slot)
{
    GUILD_ASSERT(seq >= 1);
    const guild_exchange_slot_header_t *h = (const guild_exchange_slot_header_t *)(void *)slot_base(x, seq);
    GUILD_ASSERT(h->seq == seq); /* the dense side's own write: a mismatch is a bug in the caller */
    slot_view(x, seq, h->n_tokens, h->layer, slot);
}

guild_wait_result_t guild_exchange_wait_step(guild_exchange_t *x, uint64_t seq, const guild_wait_policy_t *policy,
                                             guild_exchange_slot_t *slot, guild_wait_stats_t *stats,
                                             guild_err_t *err)
{
    GUILD_ASSERT(seq >= 1);
    guild_wait_result_t r = guild_doorbell_wait(&x->shared->step, seq, policy, NULL, stats, "exchange step", err);
    if (r != GUILD_WAIT_OK)
        return r;
    const guild_exchange_slot_header_t *h = (const guild_exchange_slot_header_t *)(void *)slot_base(x, seq);
    /* the header is the dense side's; read it once and check it before trusting it */
    uint64_t hseq = h->seq;
    int32_t n_tokens = h->n_tokens, layer = h->layer;
    if (hseq != seq) {
        guild_err_set(err, "exchange %" PRIu64 ": its slot holds exchange %" PRIu64 " (the dense side overran "
                      "the ring)", seq, hseq);
        return GUILD_WAIT_ERROR;
    }
    if (n_tokens < 0 || (uint32_t)n_tokens > x->shape.max_tokens) {
        guild_err_set(err, "exchange %" PRIu64 ": %" PRId32 " tokens, the slots hold %" PRIu32, seq, n_tokens,
                      x->shape.max_tokens);
        return GUILD_WAIT_ERROR;
    }
    slot_view(x, seq, n_tokens, layer, slot);
    return GUILD_WAIT_OK;
}

void guild_exchange_hint(guild_exchange_t *x, uint64_t seq, int32_t layer, int32_t n, const int32_t *ids)
{
    GUILD_ASSERT(seq >= 1);
    guild_exchange_slot_header_t *h = (guild_exchange_slot_header_t *)(void *)slot_base(x, seq);
    if (n < 0)
        n = 0;
    if (n > (int32_t)GUILD_EXCHANGE_HINT_MAX)
        n = (int32_t)GUILD_EXCHANGE_HINT_MAX;
    h->hint_layer = layer;
    h->n_hint = n;
    for (int32_t i = 0; i < n; i++)
        h->hint_ids[i] = (int16_t)(ids[i] < 0 || ids[i] > INT16_MAX ? -1 : ids[i]);
    __atomic_store_n(&h->hint_seq, seq, __ATOMIC_RELEASE); /* the fields above before it */
}

int32_t guild_exchange_take_hint(const guild_exchange_t *x, uint64_t seq, int32_t *layer, int32_t *ids)
{
    GUILD_ASSERT(seq >= 1);
    const guild_exchange_slot_header_t *h = (const guild_exchange_slot_header_t *)(void *)slot_base(x, seq);
    if (__atomic_load_n(&h->hint_seq, __ATOMIC_ACQUIRE) != seq)
        return 0;
    int32_t n = h->n_hint;
    if (n < 0 || n > (int32_t)GUILD_EXCHANGE_HINT_MAX) /* the dense side's bytes: checked, never trusted */
        return 0;
    *layer = h->hint_layer;
    for (int32_t i = 0; i < n; i++)
        ids[i] = h->hint_ids[i];
    return n;
}

void guild_exchange_complete(guild_exchange_t *x, int worker, uint64_t seq)
{
    GUILD_ASSERT(worker >= 0 && (uint32_t)worker < x->shape.n_workers);
    guild_doorbell_ring(&x->shared->done[worker], seq);
}

uint64_t guild_exchange_step(const guild_exchange_t *x)
{
    return guild_doorbell_load(&x->shared->step);
}

uint64_t guild_exchange_done(const guild_exchange_t *x, int worker)
{
    GUILD_ASSERT(worker >= 0 && (uint32_t)worker < x->shape.n_workers);
    return guild_doorbell_load(&x->shared->done[worker]);
}

guild_doorbell_t *guild_exchange_step_doorbell(guild_exchange_t *x)
{
    return &x->shared->step;
}

guild_doorbell_t *guild_exchange_done_doorbell(guild_exchange_t *x, int worker)
{
    GUILD_ASSERT(worker >= 0 && (uint32_t)worker < x->shape.n_workers);
    return &x->shared->done[worker];
}
