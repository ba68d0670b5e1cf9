/* core/tokenizer/strmap.c — token text -> id. */
#include "core/tokenizer/strmap.h"

#include <stdlib.h>
#include <string.h>

/* FNV-1a, then a final avalanche so that the low bits used as the slot index are well mixed. */
static uint32_t fnv(uint32_t h, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

static uint32_t finish(uint32_t h)
{
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    return h;
}

uint32_t tok_strmap_hash(const char *s, size_t len)
{
    return finish(fnv(2166136261u, s, len));
}

uint32_t tok_strmap_hash2(const char *a, size_t la, const char *b, size_t lb)
{
    return finish(fnv(fnv(2166136261u, a, la), b, lb));
}

int tok_strmap_init(tok_strmap_t *m, size_t n_keys, const char *base, const uint32_t *off, const uint32_t *len)
{
    size_t cap = 16;
    while (cap < 2 * n_keys)
        cap *= 2;
    m->mask = (uint32_t)(cap - 1);
    m->slot = malloc(cap * sizeof *m->slot);
    m->base = base;
    m->off = off;
    m->len = len;
    if (!m->slot)
        return -1;
    memset(m->slot, 0xFF, cap * sizeof *m->slot);
    return 0;
}

void tok_strmap_fini(tok_strmap_t *m)
{
    free(m->slot);
    m->slot = NULL;
}

/* Linear probing from the hash's slot to the key a + b or the first empty slot. */
static int32_t probe(const tok_strmap_t *m, const char *a, size_t la, const char *b, size_t lb, uint32_t h,
                     uint32_t *slot)
{
    uint32_t i = h & m->mask;
    for (;;) {
        int32_t id = m->slot[i].id;
        if (id < 0) {
            *slot = i;
            return -1;
        }
        if (m->slot[i].hash == h && m->len[id] == la + lb) {
            const char *k = m->base + m->off[id];
            if (!memcmp(k, a, la) && !memcmp(k + la, b, lb)) {
                *slot = i;
                return id;
            }
        }
        i = (i + 1) & m->mask;
    }
}

int32_t tok_strmap_insert(tok_strmap_t *m, int32_t id, uint32_t h)
{
    uint32_t slot;
    int32_t found = probe(m, m->base + m->off[id], m->len[id], "", 0, h, &slot);
    if (found >= 0)
        return found;
    m->slot[slot] = (tok_strmap_slot_t){h, id};
    return -1;
}

int32_t tok_strmap_find(const tok_strmap_t *m, const char *s, size_t len)
{
    uint32_t slot;
    return probe(m, s, len, "", 0, tok_strmap_hash(s, len), &slot);
}

int32_t tok_strmap_find2(const tok_strmap_t *m, const char *a, size_t la, const char *b, size_t lb, uint32_t h)
{
    uint32_t slot;
    return probe(m, a, la, b, lb, h, &slot);
}
