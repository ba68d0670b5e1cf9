/* core/tokenizer/strmap.h — token text -> id, an open-addressing hash table over texts the caller stores
 * (internal). Keys are not copied: slot i refers to key `id`, whose bytes are base + off[id], len[id]. */
#ifndef GUILD_TOK_STRMAP_H
#define GUILD_TOK_STRMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct tok_strmap {
    uint32_t mask;       /* capacity - 1; the capacity is a power of two, at least twice the key count */
    uint32_t *hash;      /* [capacity] hash of the key in the slot */
    int32_t *id;         /* [capacity] key id, -1 for an empty slot */
    const char *base;    /* the key bytes (not owned) */
    const uint32_t *off; /* [n_keys] offset of each key in base (not owned) */
    const uint32_t *len; /* [n_keys] length of each key (not owned) */
} tok_strmap_t;

uint32_t tok_strmap_hash(const char *s, size_t len);

/* Allocates room for n_keys keys stored at base/off/len. Returns 0, or -1 when out of memory. */
int tok_strmap_init(tok_strmap_t *m, size_t n_keys, const char *base, const uint32_t *off, const uint32_t *len);
void tok_strmap_fini(tok_strmap_t *m);

/* Inserts key id. Returns -1, or the id already holding the same text (then nothing is inserted). */
int32_t tok_strmap_insert(tok_strmap_t *m, int32_t id);

/* The id whose text is s[0..len), or -1. */
int32_t tok_strmap_find(const tok_strmap_t *m, const char *s, size_t len);

#endif
