/* core/tokenizer/strmap.c — token text -> id. */
#include "core/tokenizer/strmap.h"

#include <stdlib.h>
#include <string.h>

uint32_t tok_strmap_hash(const char *s, size_t len)
{
    /* FNV-1a, then a final avalanche so that the low bits used as the slot index are well mixed. */
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (uint8_t)s[i]) * 16777619u;
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    return h;
}

int tok_strmap_init(tok_strmap_t *m, size_t n_keys, const char *base, const uint32_t *off, const uint32_t *len)
{
    size_t cap = 16;
    while (cap < 2 * n_keys)
        cap *= 2;
    m->mask = (uint32_t)(cap - 1);
    m->hash = malloc(cap * sizeof *m->hash);
    m->id = malloc(cap * sizeof *m->id);
    m->base = base;
    m->off = off;
    m->len = len;
    if (!m->hash || !m->id) {
        tok_strmap_fini(m);
        return -1;
    }
    memset(m->id, 0xFF, cap * sizeof *m->id);
    return 0;
}

void tok_strmap_fini(tok_strmap_t *m)
{
    free(m->hash);
    free(m->id);
    m->hash = NULL;
    m->id = NULL;
}

static int32_t probe(const tok_strmap_t *m, const char *s, size_t len, uint32_t h, uint32_t *slot)
{
    uint32_t i = h & m->mask;
    for (;;) {
        int32_t id = m->id[i];
        if (id < 0 || (m->hash[i] == h && m->len[id] == len && !memcmp(m->base + m->off[id], s, len))) {
            *slot = i;
            return id;
        }
        i = (i + 1) & m->mask;
    }
}

int32_t tok_strmap_insert(tok_strmap_t *m, int32_t id)
{
    const char *s = m->base + m->off[id];
    uint32_t h = tok_strmap_hash(s, m->len[id]), slot;
    int32_t found = probe(m, s, m->len[id], h, &slot);
    if (found >= 0)
        return found;
    m->hash[slot] = h;
    m->id[slot] = id;
    return -1;
}

int32_t tok_strmap_find(const tok_strmap_t *m, const char *s, size_t len)
{
    uint32_t slot;
    return probe(m, s, len, tok_strmap_hash(s, len), &slot);
}
