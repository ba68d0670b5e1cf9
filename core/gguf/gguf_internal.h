/* core/gguf/gguf_internal.h — the reader's private state, shared by gguf.c (validation) and gguf_value.c
 * (getters). Not for use outside core/gguf. */
#ifndef GUILD_GGUF_INTERNAL_H
#define GUILD_GGUF_INTERNAL_H

#include "core/gguf/gguf.h"
#include "core/gguf/name_index.h"

typedef struct gguf_kv {
    const char *key;    /* NUL-terminated copy (in gguf.strings) */
    size_t key_len;
    gguf_value_t value; /* views into the mapping */
} gguf_kv_t;

/* Every allocation the element indexes of arrays need, in one list freed by gguf_destroy. */
typedef struct gguf_block {
    struct gguf_block *next;
    _Alignas(16) unsigned char payload[];
} gguf_block_t;

struct gguf {
    char *name;              /* path (or the name given for a memory image), for messages */
    const uint8_t *base;     /* [size] the file */
    uint64_t size;
    bool mapped;             /* base was mmap'ed by gguf_new */
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;
    int64_t n_kv;
    gguf_kv_t *kv;           /* [n_kv] in file order */
    int64_t n_tensors;
    gguf_tensor_t *tensors;  /* [n_tensors] in file order */
    char *strings;           /* keys and tensor names, each NUL-terminated */
    gguf_name_index_t keys;  /* key (in the mapping) -> kv index */
    gguf_name_index_t names; /* tensor name (in the mapping) -> tensor index */
    gguf_block_t *blocks;
    /* a split model (core/gguf/split.c): base/size the range all parts are mapped into; this gguf_t is part 0,
     * parts[1..n_parts) the others (their tables hold the names of their tensors in tensors[]) */
    struct gguf **parts;     /* [n_parts], parts[0] NULL; NULL for a single file */
    char **part_paths;       /* [n_parts] */
    int n_parts;             /* 0 for a single file */
};

/* Validates the image data[size] into a new gguf_t (mapped: it owns the mapping and unmaps it). */
int gguf_open_image(gguf_t **out, const void *data, uint64_t size, bool mapped, const char *name,
                    guild_err_t *err);

/* split.count and split.no of g (1 and 0 when absent), checked. -1 with a message. */
int gguf_split_count(const gguf_t *g, int *count, int *no, guild_err_t *err);

/* Opens the split model whose first part is path (of count parts) as one gguf_t (core/gguf/split.c). */
int gguf_split_open(gguf_t **out, const char *path, int count, guild_err_t *err);

/* Little-endian loads from possibly unaligned bytes (GGUF v2/v3 is little-endian whatever the host). */
static inline uint16_t gguf_rd_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (uint16_t)p[1] << 8);
}

static inline uint32_t gguf_rd_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t gguf_rd_u64(const uint8_t *p)
{
    return (uint64_t)gguf_rd_u32(p) | (uint64_t)gguf_rd_u32(p + 4) << 32;
}

/* gguf_value.index_ of an array whose elements have variable sizes: for arrays of strings, a
 * `const uint8_t *[n]` (where each element's length prefix is); for arrays of arrays, a `gguf_value_t [n]`. */

#endif
