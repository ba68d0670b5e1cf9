/* core/gguf/gguf.c — opening a GGUF file: mapping it and validating all of it before anyone reads it.
 *
 * The file is untrusted. Every read goes through a cursor that checks the bytes left first, every count is
 * bounded by the bytes left (times the smallest encoding of one element) before anything is allocated from
 * it, and sizes are computed with overflow checks. After gguf_new succeeds, the getters (gguf_value.c) can
 * trust what they read.
 */
#include "core/gguf/gguf_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/quant/types.h"

/* Smallest encodings, used to bound counts by the bytes left before anything is sized by them. */
#define MIN_KV_BYTES 13     /* key length (8) + value type (4) + the smallest value (1) */
#define MIN_TENSOR_BYTES 32 /* name length (8) + n_dims (4) + one dimension (8) + type (4) + offset (8) */
#define STR_HEADER_BYTES 8  /* uint64 length */
#define ARR_HEADER_BYTES 12 /* uint32 element type + uint64 count */
#define HEADER_BYTES 24     /* magic, version, tensor count, metadata count */

typedef struct reader {
    gguf_t *g;
    uint64_t pos;     /* next byte to read */
    guild_err_t *err;
    /* What is being read, for messages ("key 'general.name': "); formatted only when a message is. */
    const char *what_kind;       /* "key", "tensor" or NULL */
    const uint8_t *what_name;    /* its name in the mapping */
    uint64_t what_len;
} reader_t;

/* Writes a name from the file for a message: at most 80 bytes, non-printable bytes as \xNN, quoted. */
static void quote_name(char *buf, size_t cap, const uint8_t *s, uint64_t len)
{
    size_t o = 0;
    buf[o++] = '\'';
    for (uint64_t i = 0; i < len && o + 8 < cap; i++) {
        if (i == 80) {
            o += (size_t)snprintf(buf + o, cap - o, "...");
            break;
        }
        unsigned char c = s[i];
        if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\')
            buf[o++] = (char)c;
        else
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
    }
    buf[o++] = '\'';
    buf[o] = '\0';
}

/* Records "<file>: offset <off>: [key|tensor '<name>': ]<message>" and returns -1. */
__attribute__((format(printf, 3, 4))) static int fail(reader_t *r, uint64_t off, const char *fmt, ...)
{
    char msg[GUILD_ERR_MAX], what[512] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (r->what_kind) {
        char q[400];
        quote_name(q, sizeof q, r->what_name, r->what_len);
        snprintf(what, sizeof what, "%s %s: ", r->what_kind, q);
    }
    return guild_err_set(r->err, "%s: offset %llu: %s%s", r->g->name, (unsigned long long)off, what, msg);
}

static void reading(reader_t *r, const char *kind, const uint8_t *name, uint64_t len)
{
    r->what_kind = kind;
    r->what_name = name;
    r->what_len = len;
}

static uint64_t remaining(const reader_t *r)
{
    return r->g->size - r->pos;
}

/* Fails unless n more bytes can be read. */
static int need(reader_t *r, uint64_t n, const char *thing)
{
    if (remaining(r) < n)
        return fail(r, r->pos, "truncated: %s needs %llu bytes, only %llu remain", thing, (unsigned long long)n,
                    (unsigned long long)remaining(r));
    return 0;
}

static void *block_alloc(gguf_t *g, size_t bytes)
{
    gguf_block_t *b = malloc(sizeof *b + bytes);
    if (!b)
        return NULL;
    b->next = g->blocks;
    g->blocks = b;
    return b->payload;
}

/* A string (uint64 length + bytes); on success *s points at the bytes in the mapping. */
static int read_string(reader_t *r, const uint8_t **s, uint64_t *len, const char *thing)
{
    uint64_t at = r->pos;
    if (remaining(r) < STR_HEADER_BYTES)
        return fail(r, at, "truncated: the length of %s needs 8 bytes, only %llu remain", thing,
                    (unsigned long long)remaining(r));
    uint64_t n = gguf_rd_u64(r->g->base + at);
    r->pos += STR_HEADER_BYTES;
    if (n > remaining(r))
        return fail(r, at, "%s of %llu bytes goes past the end of the file (%llu bytes remain)", thing,
                    (unsigned long long)n, (unsigned long long)remaining(r));
    *s = r->g->base + r->pos;
    *len = n;
    r->pos += n;
    return 0;
}

static int check_bools(reader_t *r, const uint8_t *p, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        if (p[i] > 1)
            return fail(r, (uint64_t)(p + i - r->g->base), "bool value %u is neither 0 nor 1", p[i]);
    return 0;
}

static int read_value(reader_t *r, gguf_value_type_t type, int depth, gguf_value_t *v);

static int read_array(reader_t *r, int depth, gguf_value_t *v)
{
    gguf_t *g = r->g;
    uint64_t at = r->pos;
    if (depth >= GGUF_MAX_ARRAY_DEPTH)
        return fail(r, at, "arrays nested more than %d deep", GGUF_MAX_ARRAY_DEPTH);
    if (need(r, ARR_HEADER_BYTES, "an array header") < 0)
        return -1;
    uint32_t et = gguf_rd_u32(g->base + at);
    uint64_t n = gguf_rd_u64(g->base + at + 4);
    if (et >= GGUF_VALUE_TYPE_COUNT)
        return fail(r, at, "unknown array element type %u", et);
    r->pos += ARR_HEADER_BYTES;
    v->elem_type = (gguf_value_type_t)et;
    v->n = n;
    v->data = g->base + r->pos;
    uint64_t left = remaining(r);
    size_t esize = gguf_value_type_size(v->elem_type);
    /* Each element takes at least `min` bytes: a count that cannot fit is rejected before any allocation. */
    uint64_t min = esize ? esize : et == GGUF_VALUE_STRING ? STR_HEADER_BYTES : ARR_HEADER_BYTES;
    if (n > left / min)
        return fail(r, at, "array of %llu %s elements goes past the end of the file (%llu bytes remain, each "
                           "element needs at least %llu)",
                    (unsigned long long)n, gguf_value_type_name(v->elem_type), (unsigned long long)left,
                    (unsigned long long)min);
    if (esize) {
        if (et == GGUF_VALUE_BOOL && check_bools(r, v->data, n) < 0)
            return -1;
        r->pos += n * esize;
        return 0;
    }
    if (n == 0)
        return 0;
    if (et == GGUF_VALUE_STRING) {
        const uint8_t **elem = block_alloc(g, (size_t)n * sizeof *elem);
        if (!elem)
            return fail(r, at, "out of memory for an array of %llu strings", (unsigned long long)n);
        v->index_ = elem;
        for (uint64_t i = 0; i < n; i++) {
            /* Inline rather than read_string: vocabularies hold 10^5 strings, and the message is built only on
             * failure. */
            uint64_t e = r->pos;
            if (remaining(r) < STR_HEADER_BYTES)
                return fail(r, e, "truncated: the length of string element %llu needs 8 bytes, only %llu remain",
                            (unsigned long long)i, (unsigned long long)remaining(r));
            uint64_t len = gguf_rd_u64(g->base + e);
            if (len > remaining(r) - STR_HEADER_BYTES)
                return fail(r, e, "string element %llu of %llu bytes goes past the end of the file (%llu bytes "
                                  "remain)",
                            (unsigned long long)i, (unsigned long long)len,
                            (unsigned long long)(remaining(r) - STR_HEADER_BYTES));
            elem[i] = g->base + e;
            r->pos += STR_HEADER_BYTES + len;
        }
        return 0;
    }
    gguf_value_t *elem = block_alloc(g, (size_t)n * sizeof *elem);
    if (!elem)
        return fail(r, at, "out of memory for an array of %llu arrays", (unsigned long long)n);
    v->index_ = elem;
    for (uint64_t i = 0; i < n; i++) {
        memset(&elem[i], 0, sizeof elem[i]);
        elem[i].type = GGUF_VALUE_ARRAY;
        if (read_array(r, depth + 1, &elem[i]) < 0)
            return -1;
    }
    return 0;
}

static int read_value(reader_t *r, gguf_value_type_t type, int depth, gguf_value_t *v)
{
    memset(v, 0, sizeof *v);
    v->type = type;
    if (type == GGUF_VALUE_ARRAY)
        return read_array(r, depth, v);
    if (type == GGUF_VALUE_STRING)
        return read_string(r, &v->data, &v->n, "a string");
    size_t size = gguf_value_type_size(type);
    GUILD_ASSERT(size > 0);
    if (need(r, size, gguf_value_type_name(type)) < 0)
        return -1;
    v->data = r->g->base + r->pos;
    if (type == GGUF_VALUE_BOOL && check_bools(r, v->data, 1) < 0)
        return -1;
    r->pos += size;
    return 0;
}

static int read_header(reader_t *r, uint64_t *n_tensors, uint64_t *n_kv)
{
    gguf_t *g = r->g;
    const uint8_t *p = g->base;
    if (g->size < 4 || memcmp(p, "GGUF", 4)) {
        if (g->size >= 4 && (!memcmp(p, "lmgg", 4) || !memcmp(p, "fmgg", 4) || !memcmp(p, "tjgg", 4)))
            return fail(r, 0, "a legacy GGML/GGMF/GGJT file (from before GGUF): convert it to GGUF");
        if (g->size < 4)
            return fail(r, 0, "not a GGUF file: %llu bytes, too short for the magic", (unsigned long long)g->size);
        return fail(r, 0, "not a GGUF file: bad magic %02x %02x %02x %02x (expected \"GGUF\")", p[0], p[1], p[2],
                    p[3]);
    }
    r->pos = 4;
    if (need(r, 4, "the version") < 0)
        return -1;
    uint32_t version = gguf_rd_u32(p + 4);
    uint32_t swapped = __builtin_bswap32(version);
    if (version == 1)
        return fail(r, 4, "GGUF version 1 is not supported (only versions 2 and 3): re-convert the file");
    if (version != 2 && version != 3) {
        if (swapped >= 1 && swapped <= 3)
            return fail(r, 4, "byte-swapped version 0x%08x: a big-endian GGUF file, which Guild cannot read "
                              "(convert it to little-endian)",
                        version);
        return fail(r, 4, "unknown GGUF version %u (supported: 2, 3)", version);
    }
    g->version = version;
    r->pos = 8;
    if (need(r, 16, "the tensor and metadata counts") < 0)
        return -1;
    *n_tensors = gguf_rd_u64(p + 8);
    *n_kv = gguf_rd_u64(p + 16);
    r->pos = HEADER_BYTES;
    uint64_t left = remaining(r);
    if (*n_kv > left / MIN_KV_BYTES)
        return fail(r, 16, "metadata count %llu is impossible: %llu bytes remain and each key/value needs at "
                           "least %d",
                    (unsigned long long)*n_kv, (unsigned long long)left, MIN_KV_BYTES);
    if (*n_tensors > left / MIN_TENSOR_BYTES || *n_kv * MIN_KV_BYTES + *n_tensors * MIN_TENSOR_BYTES > left)
        return fail(r, 8, "tensor count %llu is impossible: %llu bytes remain and each tensor info needs at "
                          "least %d",
                    (unsigned long long)*n_tensors, (unsigned long long)left, MIN_TENSOR_BYTES);
    return 0;
}

static int read_kvs(reader_t *r)
{
    gguf_t *g = r->g;
    for (int64_t i = 0; i < g->n_kv; i++) {
        gguf_kv_t *kv = &g->kv[i];
        uint64_t at = r->pos;
        const uint8_t *key;
        uint64_t len;
        if (read_string(r, &key, &len, "a key") < 0)
            return -1;
        reading(r, "key", key, len);
        if (memchr(key, 0, len))
            return fail(r, at, "contains a NUL byte");
        int64_t dup = gguf_name_index_insert(&g->keys, (const char *)key, len, i);
        if (dup == -2)
            return fail(r, at, "out of memory");
        if (dup >= 0)
            return fail(r, at, "duplicate key (key #%lld and #%lld)", (long long)dup, (long long)i);
        kv->key = (const char *)key; /* for now the bytes in the mapping; NUL-terminated copies come at the end */
        kv->key_len = len;
        uint64_t tat = r->pos;
        if (need(r, 4, "the value type") < 0)
            return -1;
        uint32_t type = gguf_rd_u32(g->base + tat);
        if (type >= GGUF_VALUE_TYPE_COUNT)
            return fail(r, tat, "unknown value type %u", type);
        r->pos += 4;
        if (read_value(r, (gguf_value_type_t)type, 0, &kv->value) < 0)
            return -1;
        reading(r, NULL, NULL, 0);
    }
    return 0;
}

static int read_alignment(reader_t *r)
{
    gguf_t *g = r->g;
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    int64_t i = gguf_name_index_find(&g->keys, "general.alignment", strlen("general.alignment"));
    if (i < 0)
        return 0;
    const gguf_value_t *v = &g->kv[i].value;
    uint64_t a;
    if (gguf_value_to_uint(v, &a) < 0 || v->type == GGUF_VALUE_BOOL)
        return guild_err_set(r->err, "%s: key 'general.alignment': a %s, expected an unsigned integer", g->name,
                             gguf_value_type_name(v->type));
    if (a == 0 || a > UINT32_MAX || (a & (a - 1)))
        return guild_err_set(r->err, "%s: key 'general.alignment': %llu is not a valid alignment (must be a "
                                     "nonzero power of two)",
                             g->name, (unsigned long long)a);
    g->alignment = (uint32_t)a;
    return 0;
}

/* Checked a*b; false on overflow. */
static bool mul_ok(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

static int read_tensor_info(reader_t *r, int64_t i)
{
    gguf_t *g = r->g;
    gguf_tensor_t *t = &g->tensors[i];
    uint64_t at = r->pos;
    const uint8_t *name;
    uint64_t len;
    if (read_string(r, &name, &len, "a tensor name") < 0)
        return -1;
    reading(r, "tensor", name, len);
    if (memchr(name, 0, len))
        return fail(r, at, "the name contains a NUL byte");
    int64_t dup = gguf_name_index_insert(&g->names, (const char *)name, len, i);
    if (dup == -2)
        return fail(r, at, "out of memory");
    if (dup >= 0)
        return fail(r, at, "duplicate tensor name (tensors #%lld and #%lld)", (long long)dup, (long long)i);
    t->name = (const char *)name; /* the bytes in the mapping until the copies are made */

    uint64_t dat = r->pos;
    if (need(r, 4, "n_dims") < 0)
        return -1;
    t->n_dims = gguf_rd_u32(g->base + dat);
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return fail(r, dat, "n_dims %u is out of range (1..%d)", t->n_dims, GGUF_MAX_DIMS);
    r->pos += 4;
    if (need(r, 8ull * t->n_dims, "the dimensions") < 0)
        return -1;
    uint64_t elems = 1;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        if (d >= t->n_dims) {
            t->ne[d] = 1;
            continue;
        }
        uint64_t ne = gguf_rd_u64(g->base + r->pos);
        if (ne == 0)
            return fail(r, r->pos, "dimension %u is zero", d);
        if (ne > INT64_MAX)
            return fail(r, r->pos, "dimension %u (%llu) is larger than INT64_MAX", d, (unsigned long long)ne);
        if (!mul_ok(elems, ne, &elems) || elems > INT64_MAX)
            return fail(r, r->pos, "the element count overflows 63 bits");
        t->ne[d] = ne;
        r->pos += 8;
    }

    uint64_t tat = r->pos;
    if (need(r, 4, "the tensor type") < 0)
        return -1;
    t->type = gguf_rd_u32(g->base + tat);
    if (!quant_type_info(t->type))
        return fail(r, tat, "unknown tensor type %u", t->type);
    uint64_t row;
    guild_err_t e;
    if (quant_row_bytes(t->type, t->ne[0], &row, &e) < 0)
        return fail(r, tat, "%s", e.msg);
    uint64_t size = row;
    for (uint32_t d = 1; d < GGUF_MAX_DIMS; d++)
        if (!mul_ok(size, t->ne[d], &size))
            return fail(r, tat, "the data size overflows 64 bits");
    t->size = size;
    r->pos += 4;

    if (need(r, 8, "the data offset") < 0)
        return -1;
    t->offset = gguf_rd_u64(g->base + r->pos); /* relative to the data section until it is known */
    r->pos += 8;
    reading(r, NULL, NULL, 0);
    return 0;
}

typedef struct span {
    uint64_t start, end; /* [start, end) in the file */
    int64_t tensor;
} span_t;

static int by_start(const void *a, const void *b)
{
    const span_t *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* No two tensors may share bytes: writers lay tensors out one after the other, and a file whose tensors
 * overlap is corrupt (or crafted so that a reader touching every tensor does quadratic work). */
static int check_overlaps(reader_t *r)
{
    gguf_t *g = r->g;
    if (g->n_tensors < 2)
        return 0;
    span_t *s = malloc((size_t)g->n_tensors * sizeof *s);
    if (!s)
        return guild_err_set(r->err, "%s: out of memory", g->name);
    bool sorted = true;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor_t *t = &g->tensors[i];
        s[i] = (span_t){t->offset, t->offset + t->size, i};
        sorted = sorted && (i == 0 || s[i].start >= s[i - 1].start);
    }
    if (!sorted)
        qsort(s, (size_t)g->n_tensors, sizeof *s, by_start);
    int rc = 0;
    for (int64_t k = 1; k < g->n_tensors && rc == 0; k++) {
        if (s[k].start >= s[k - 1].end)
            continue;
        const gguf_tensor_t *a = &g->tensors[s[k - 1].tensor], *b = &g->tensors[s[k].tensor];
        char qa[400], qb[400];
        quote_name(qa, sizeof qa, (const uint8_t *)a->name, strlen(a->name));
        quote_name(qb, sizeof qb, (const uint8_t *)b->name, strlen(b->name));
        rc = guild_err_set(r->err, "%s: tensor %s: data at offset %llu overlaps tensor %s (%llu bytes at offset %llu)",
                           g->name, qb, (unsigned long long)b->offset, qa, (unsigned long long)a->size,
                           (unsigned long long)a->offset);
    }
    free(s);
    return rc;
}

/* With the tensor infos read, places the data section and checks each tensor's data range. */
static int place_tensor_data(reader_t *r)
{
    gguf_t *g = r->g;
    uint64_t a = g->alignment;
    if (r->pos > UINT64_MAX - (a - 1))
        return fail(r, r->pos, "the data section offset overflows");
    g->data_offset = (r->pos + a - 1) & ~(a - 1);
    for (int64_t i = 0; i < g->n_tensors; i++) {
        gguf_tensor_t *t = &g->tensors[i];
        char q[400];
        uint64_t rel = t->offset, start, end;
        if (rel % a || __builtin_add_overflow(g->data_offset, rel, &start) ||
            __builtin_add_overflow(start, t->size, &end) || end > g->size)
            quote_name(q, sizeof q, (const uint8_t *)t->name, strlen(t->name));
        if (rel % a)
            return guild_err_set(r->err, "%s: tensor %s: data offset %llu is not a multiple of the alignment (%llu)",
                                 g->name, q, (unsigned long long)rel, (unsigned long long)a);
        if (__builtin_add_overflow(g->data_offset, rel, &start) || __builtin_add_overflow(start, t->size, &end) ||
            end > g->size)
            return guild_err_set(r->err, "%s: tensor %s: data (%llu bytes at offset %llu of the data section, "
                                         "which starts at %llu) goes past the end of the file (%llu bytes)",
                                 g->name, q, (unsigned long long)t->size, (unsigned long long)rel,
                                 (unsigned long long)g->data_offset, (unsigned long long)g->size);
        t->offset = start;
        t->data = g->base + start;
    }
    return check_overlaps(r);
}

/* Replaces the key and name pointers into the mapping by NUL-terminated copies, all in one allocation. (The
 * indexes keep pointing into the mapping.) A tensor name's length is the uint64 just before its bytes. */
static int copy_names(reader_t *r)
{
    gguf_t *g = r->g;
    /* Every length was checked against the file size, so the sum cannot overflow. */
    size_t total = 1;
    for (int64_t i = 0; i < g->n_kv; i++)
        total += g->kv[i].key_len + 1;
    for (int64_t i = 0; i < g->n_tensors; i++)
        total += (size_t)gguf_rd_u64((const uint8_t *)g->tensors[i].name - STR_HEADER_BYTES) + 1;
    char *p = g->strings = malloc(total);
    if (!p)
        return guild_err_set(r->err, "%s: out of memory for the key and tensor names", g->name);
    for (int64_t i = 0; i < g->n_kv; i++) {
        gguf_kv_t *kv = &g->kv[i];
        memcpy(p, kv->key, kv->key_len);
        p[kv->key_len] = '\0';
        kv->key = p;
        p += kv->key_len + 1;
    }
    for (int64_t i = 0; i < g->n_tensors; i++) {
        gguf_tensor_t *t = &g->tensors[i];
        size_t len = (size_t)gguf_rd_u64((const uint8_t *)t->name - STR_HEADER_BYTES);
        memcpy(p, t->name, len);
        p[len] = '\0';
        t->name = p;
        p += len + 1;
    }
    return 0;
}

static int parse(gguf_t *g, guild_err_t *err)
{
    reader_t r = {.g = g, .err = err};
    uint64_t n_tensors = 0, n_kv = 0;
    if (read_header(&r, &n_tensors, &n_kv) < 0)
        return -1;
    if (n_kv) {
        g->kv = calloc((size_t)n_kv, sizeof *g->kv);
        if (!g->kv)
            return fail(&r, 16, "out of memory for %llu keys", (unsigned long long)n_kv);
    }
    if (gguf_name_index_init(&g->keys, (size_t)n_kv) < 0)
        return fail(&r, 16, "out of memory for %llu keys", (unsigned long long)n_kv);
    g->n_kv = (int64_t)n_kv;
    if (read_kvs(&r) < 0 || read_alignment(&r) < 0)
        return -1;

    if (n_tensors) {
        g->tensors = calloc((size_t)n_tensors, sizeof *g->tensors);
        if (!g->tensors)
            return fail(&r, 8, "out of memory for %llu tensors", (unsigned long long)n_tensors);
    }
    if (gguf_name_index_init(&g->names, (size_t)n_tensors) < 0)
        return fail(&r, 8, "out of memory for %llu tensors", (unsigned long long)n_tensors);
    g->n_tensors = (int64_t)n_tensors;
    for (int64_t i = 0; i < g->n_tensors; i++)
        if (read_tensor_info(&r, i) < 0)
            return -1;
    if (copy_names(&r) < 0)
        return -1;
    return place_tensor_data(&r);
}

int gguf_open_image(gguf_t **out, const void *data, uint64_t size, bool mapped, const char *name,
                    guild_err_t *err)
{
    *out = NULL;
    gguf_t *g = calloc(1, sizeof *g);
    if (!g || !(g->name = strdup(name))) {
        free(g);
        if (mapped)
            munmap((void *)data, (size_t)size);
        return guild_err_set(err, "%s: out of memory", name);
    }
    g->base = data;
    g->size = size;
    g->mapped = mapped;
    if (parse(g, err) < 0) {
        gguf_destroy(&g);
        return -1;
    }
    *out = g;
    return 0;
}

int gguf_new_from_memory(gguf_t **out, const void *data, size_t size, const char *name, guild_err_t *err)
{
    return gguf_open_image(out, data, size, false, name ? name : "<memory>", err);
}

int gguf_new(gguf_t **out, const char *path, guild_err_t *err)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return guild_err_errno(err, errno, "%s: cannot open", path);
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int e = errno;
        close(fd);
        return guild_err_errno(err, e, "%s: cannot stat", path);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return guild_err_set(err, "%s: not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return guild_err_set(err, "%s: offset 0: not a GGUF file: the file is empty", path);
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd); /* the mapping keeps the file */
    if (p == MAP_FAILED)
        return guild_err_errno(err, e, "%s: cannot map %lld bytes", path, (long long)st.st_size);
    if (gguf_open_image(out, p, (uint64_t)st.st_size, true, path, err) < 0)
        return -1;
    int count, no;
    if (gguf_split_count(*out, &count, &no, err) < 0) {
        gguf_destroy(out);
        return -1;
    }
    if (count == 1)
        return 0;
    gguf_destroy(out);
    if (no != 0) {
        char prefix[4096], first[4096 + 32];
        if (gguf_split_prefix(prefix, sizeof prefix, path, no, count) == 0 &&
            gguf_split_path(first, sizeof first, prefix, 0, count) == 0)
            return guild_err_set(err, "%s: part %d of %d of a split model: open its first part, %s", path, no + 1,
                                 count, first);
        return guild_err_set(err, "%s: part %d of %d of a split model: open its first part", path, no + 1, count);
    }
    return gguf_split_open(out, path, count, err);
}

void gguf_destroy(gguf_t **pg)
{
    gguf_t *g = *pg;
    if (!g)
        return;
    for (int i = 1; i < g->n_parts; i++)
        gguf_destroy(&g->parts[i]);
    for (int i = 0; i < g->n_parts; i++)
        free(g->part_paths[i]);
    free(g->parts);
    free(g->part_paths);
    if (g->mapped)
        munmap((void *)g->base, (size_t)g->size);
    while (g->blocks) {
        gguf_block_t *next = g->blocks->next;
        free(g->blocks);
        g->blocks = next;
    }
    gguf_name_index_fini(&g->keys);
    gguf_name_index_fini(&g->names);
    free(g->kv);
    free(g->tensors);
    free(g->strings);
    free(g->name);
    free(g);
    *pg = NULL;
}

const char *gguf_path(const gguf_t *g)
{
    return g->name;
}

uint32_t gguf_version(const gguf_t *g)
{
    return g->version;
}

uint32_t gguf_alignment(const gguf_t *g)
{
    return g->alignment;
}

uint64_t gguf_data_offset(const gguf_t *g)
{
    return g->data_offset;
}

uint64_t gguf_file_size(const gguf_t *g)
{
    return g->size;
}

const void *gguf_mapping(const gguf_t *g)
{
    return g->base;
}

int gguf_n_parts(const gguf_t *g)
{
    return g->n_parts ? g->n_parts : 1;
}

const char *gguf_part_path(const gguf_t *g, int i)
{
    GUILD_ASSERT(i >= 0 && i < gguf_n_parts(g));
    return g->n_parts ? g->part_paths[i] : g->name;
}

int64_t gguf_n_tensors(const gguf_t *g)
{
    return g->n_tensors;
}

const gguf_tensor_t *gguf_tensor(const gguf_t *g, int64_t i)
{
    GUILD_ASSERT(i >= 0 && i < g->n_tensors);
    return &g->tensors[i];
}

const gguf_tensor_t *gguf_find_tensor(const gguf_t *g, const char *name)
{
    int64_t i = gguf_name_index_find(&g->names, name, strlen(name));
    return i < 0 ? NULL : &g->tensors[i];
}
