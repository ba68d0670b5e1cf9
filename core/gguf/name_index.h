/* core/gguf/name_index.h — a hash map from byte strings to indices: O(1) lookup of GGUF keys and tensor names,
 * and duplicate detection while a file is read or written (a file may hold tens of thousands of tensors).
 *
 * The strings are not copied: each must stay valid, unchanged, as long as the index. Open addressing with
 * linear probing; the table grows by doubling, so inserting n names costs O(n) on average.
 */
#ifndef GUILD_GGUF_NAME_INDEX_H
#define GUILD_GGUF_NAME_INDEX_H

#include <stddef.h>
#include <stdint.h>

typedef struct gguf_name_slot {
    const char *s;  /* NULL: empty slot */
    size_t len;     /* bytes of s */
    uint64_t hash;  /* of the len bytes of s */
    int64_t value;  /* what the name maps to (an index) */
} gguf_name_slot_t;

typedef struct gguf_name_index {
    gguf_name_slot_t *slots; /* [cap] */
    size_t cap;              /* a power of two, or 0 before the first insertion */
    size_t count;            /* occupied slots, kept <= cap/2 */
} gguf_name_index_t;

/* An empty index; reserves room for `expected` names (0 is fine). Returns -1 on out of memory. */
int gguf_name_index_init(gguf_name_index_t *idx, size_t expected);

/* Frees the table; the index is left empty and may be reused after gguf_name_index_init. */
void gguf_name_index_fini(gguf_name_index_t *idx);

/* Inserts (s, len) -> value unless the name is already there. Returns the value already stored for that name
 * (the insertion is not made), -1 after a successful insertion, or -2 on out of memory. Values must be >= 0. */
int64_t gguf_name_index_insert(gguf_name_index_t *idx, const char *s, size_t len, int64_t value);

/* The value stored for (s, len), or -1. */
int64_t gguf_name_index_find(const gguf_name_index_t *idx, const char *s, size_t len);

#endif
