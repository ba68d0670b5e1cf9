/* A CPU worker's experts in shared memory (contract in expert_store.h). */
#include "ipc/expert_store.h"

#include <string.h>
#include <time.h>

#include "ipc/doorbell.h" /* guild_now_ns */

#define TABLE_ALIGN 64u
#define DATA_ALIGN 4096u

static uint64_t round_up(uint64_t n, uint64_t a)
{
    return (n + a - 1) / a * a;
}

static uint64_t table_bytes(int32_t n_layer, int32_t n_expert)
{
    return (uint64_t)n_layer * (uint64_t)n_expert * sizeof(expert_store_entry_t);
}

size_t expert_store_memsize(int32_t n_layer, int32_t n_expert, uint64_t data_bytes)
{
    const uint64_t t = round_up(sizeof(expert_store_header_t), TABLE_ALIGN);
    return (size_t)(round_up(t + table_bytes(n_layer, n_expert), DATA_ALIGN) + round_up(data_bytes, DATA_ALIGN));
}

int expert_store_init(void *mem, size_t size, int32_t n_layer, int32_t n_expert, uint64_t data_bytes,
                      guild_err_t *err)
{
    if (n_layer < 0 || n_expert < 0 || size < expert_store_memsize(n_layer, n_expert, data_bytes))
        return guild_err_set(err, "expert store: %zu bytes for %d x %d experts and %llu bytes of copies", size,
                             n_layer, n_expert, (unsigned long long)data_bytes);
    expert_store_header_t *h = mem;
    h->version = EXPERT_STORE_VERSION;
    h->n_layer = (uint32_t)n_layer;
    h->n_expert = (uint32_t)n_expert;
    h->table_off = round_up(sizeof *h, TABLE_ALIGN);
    h->data_off = round_up(h->table_off + table_bytes(n_layer, n_expert), DATA_ALIGN);
    h->data_bytes = data_bytes;
    atomic_store_explicit(&h->published, 0, memory_order_release);
    return 0;
}

int expert_store_attach(expert_store_t *s, void *mem, size_t size, int32_t n_layer, int32_t n_expert,
                        guild_err_t *err)
{
    memset(s, 0, sizeof *s);
    if (size < sizeof(expert_store_header_t))
        return guild_err_set(err, "expert store: %zu bytes, too small for a header", size);
    expert_store_header_t *h = mem;
    if (h->version != EXPERT_STORE_VERSION)
        return guild_err_set(err, "expert store: version %u, this build reads %u", h->version, EXPERT_STORE_VERSION);
    if (n_layer > 0 && (h->n_layer != (uint32_t)n_layer || h->n_expert != (uint32_t)n_expert))
        return guild_err_set(err, "expert store: %u x %u experts, the model has %d x %d", h->n_layer, h->n_expert,
                             n_layer, n_expert);
    const uint64_t tb = table_bytes((int32_t)h->n_layer, (int32_t)h->n_expert);
    if (h->table_off < sizeof *h || h->table_off > size || tb > size - h->table_off || h->data_off < h->table_off + tb ||
        h->data_off > size || h->data_bytes > size - h->data_off)
        return guild_err_set(err, "expert store: table (%llu bytes at %llu) or copies (%llu bytes at %llu) outside "
                             "its %zu bytes", (unsigned long long)tb, (unsigned long long)h->table_off,
                             (unsigned long long)h->data_bytes, (unsigned long long)h->data_off, size);
    s->h = h;
    s->base = mem;
    s->size = size;
    s->table = (expert_store_entry_t *)(s->base + h->table_off);
    return 0;
}

void *expert_store_data(const expert_store_t *s)
{
    return s->base + s->h->data_off;
}

expert_store_entry_t *expert_store_entry(const expert_store_t *s, int32_t layer, int32_t expert)
{
    GUILD_ASSERT(layer >= 0 && (uint32_t)layer < s->h->n_layer && expert >= 0 && (uint32_t)expert < s->h->n_expert);
    return &s->table[(size_t)layer * s->h->n_expert + (size_t)expert];
}

void expert_store_publish(expert_store_t *s)
{
    atomic_fetch_add_explicit(&s->h->published, 1, memory_order_release);
}

bool expert_store_published(const expert_store_t *s)
{
    return atomic_load_explicit(&s->h->published, memory_order_acquire) != 0;
}

int expert_store_wait(const expert_store_t *s, uint64_t timeout_ns, int (*interrupted)(void *ctx, guild_err_t *err),
                      void *ctx, guild_err_t *err)
{
    const uint64_t t0 = guild_now_ns();
    while (!expert_store_published(s)) {
        if (interrupted && interrupted(ctx, err))
            return -1;
        if (guild_now_ns() - t0 > timeout_ns)
            return guild_err_set(err, "expert store: not filled after %.1f s", (double)timeout_ns / 1e9);
        const struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    return 0;
}

int expert_store_check_entry(const expert_store_t *s, const expert_store_entry_t *e, const uint64_t len[3],
                             guild_err_t *err)
{
    const uint64_t lo = s->h->data_off, hi = s->h->data_off + s->h->data_bytes;
    const uint64_t off[3] = {e->gate, e->up, e->down};
    for (int i = 0; i < 3; i++)
        if (off[i] < lo || off[i] > hi || len[i] > hi - off[i])
            return guild_err_set(err, "expert store: a matrix of %llu bytes at %llu is outside the copies [%llu, "
                                 "%llu)", (unsigned long long)len[i], (unsigned long long)off[i],
                                 (unsigned long long)lo, (unsigned long long)hi);
    if (!e->gate_row || !e->up_row || !e->down_row)
        return guild_err_set(err, "expert store: an entry without row sizes");
    return 0;
}
