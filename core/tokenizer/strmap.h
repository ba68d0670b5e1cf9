/* core/tokenizer/strmap.h — token text -> id, an open-addressing hash table over texts the caller stores
 * (internal). Keys are not copied: slot i refers to key `id`, whose bytes are base + off[id], len[id]. */
#ifndef GUILD_TOK_STRMAP_H
#define GUILD_TOK_STRMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct tok_strmap_slot {
    uint32_t hash; /* hash of the key */
    int32_t id;    /* key id, -1 for an empty slot */
} tok_strmap_slot_t;

typedef struct tok_strmap {
    uint32_t mask;            /* capacity - 1; the capacity is a power of two, at least twice the key count */
    tok_strmap_slot_t *slot;  /* [capacity]; hash and id side by side: one cache miss per probe */
    const char *base;    /* the key bytes (not owned) */
    const uint32_t *off; /* [n_keys] offset of each key in base (not owned) */
    const uint32_t *len; /* [n_keys] length of each key (not owned) */
} tok_strmap_t;

uint32_t tok_strmap_hash(const char *s, size_t len);
/* The hash of the concatenation a + b, without building it. */
uint32_t tok_strmap_hash2(const char *a, size_t la, const char *b, size_t lb);

/* Starts loading the slot a hash maps to: bulk loaders hash a batch, prefetch, then probe, so that the
 * cache misses of the batch overlap. */
static inline void tok_strmap_prefetch(const tok_strmap_t *m, uint32_t h)
{
    __builtin_prefetch(&m->slot[h & m->mask]);
}

/* Allocates room for n_keys keys stored at base/off/len. Returns 0, or -1 when out of memory. */
int tok_strmap_init(tok_strmap_t *m, size_t n_keys, const char *base, const uint32_t *off, const uint32_t *len);
void tok_strmap_fini(tok_strmap_t *m);

/* Inserts key id, whose hash is h. Returns -1, or the id already holding the same text (then nothing is
 * inserted). */
int32_t tok_strmap_insert(tok_strmap_t *m, int32_t id, uint32_t h);

/* The id whose text is s[0..len), or -1. */
int32_t tok_strmap_find(const tok_strmap_t *m, const char *s, size_t len);
/* The id whose text is a + b (h its hash, from tok_strmap_hash2), or -1. */
int32_t tok_strmap_find2(const tok_strmap_t *m, const char *a, size_t la, const char *b, size_t lb, uint32_t h);

#endif
