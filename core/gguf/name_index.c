#include "core/gguf/name_index.h"

#include <stdlib.h>
#include <string.h>

#include "core/util/err.h"

/* FNV-1a: short names (keys, tensor names) make anything fancier pointless. */
static uint64_t name_hash(const char *s, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ull;
    }
    /* Mix the high bits down: the table uses the low bits. */
    h ^= h >> 29;
    return h;
}

static int index_resize(gguf_name_index_t *idx, size_t cap)
{
    gguf_name_slot_t *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return -1;
    for (size_t i = 0; i < idx->cap; i++) {
        const gguf_name_slot_t *o = &idx->slots[i];
        if (!o->s)
            continue;
        size_t j = o->hash & (cap - 1);
        while (slots[j].s)
            j = (j + 1) & (cap - 1);
        slots[j] = *o;
    }
    free(idx->slots);
    idx->slots = slots;
    idx->cap = cap;
    return 0;
}

int gguf_name_index_init(gguf_name_index_t *idx, size_t expected)
{
    memset(idx, 0, sizeof *idx);
    if (expected == 0)
        return 0;
    size_t cap = 16;
    while (cap / 2 < expected) {
        if (cap > SIZE_MAX / 2 / sizeof(gguf_name_slot_t))
            return -1;
        cap *= 2;
    }
    return index_resize(idx, cap);
}

void gguf_name_index_fini(gguf_name_index_t *idx)
{
    free(idx->slots);
    memset(idx, 0, sizeof *idx);
}

int64_t gguf_name_index_insert(gguf_name_index_t *idx, const char *s, size_t len, int64_t value)
{
    GUILD_ASSERT(value >= 0);
    if (idx->count + 1 > idx->cap / 2) {
        size_t cap = idx->cap ? idx->cap * 2 : 16;
        if (cap < idx->cap || cap > SIZE_MAX / sizeof(gguf_name_slot_t) || index_resize(idx, cap) < 0)
            return -2;
    }
    uint64_t h = name_hash(s, len);
    size_t j = h & (idx->cap - 1);
    for (; idx->slots[j].s; j = (j + 1) & (idx->cap - 1)) {
        const gguf_name_slot_t *e = &idx->slots[j];
        if (e->hash == h && e->len == len && !memcmp(e->s, s, len))
            return e->value;
    }
    idx->slots[j] = (gguf_name_slot_t){.s = s, .len = len, .hash = h, .value = value};
    idx->count++;
    return -1;
}

int64_t gguf_name_index_find(const gguf_name_index_t *idx, const char *s, size_t len)
{
    if (idx->cap == 0)
        return -1;
    uint64_t h = name_hash(s, len);
    for (size_t j = h & (idx->cap - 1); idx->slots[j].s; j = (j + 1) & (idx->cap - 1)) {
        const gguf_name_slot_t *e = &idx->slots[j];
        if (e->hash == h && e->len == len && !memcmp(e->s, s, len))
            return e->value;
    }
    return -1;
}
