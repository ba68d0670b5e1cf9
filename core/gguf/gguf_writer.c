/* core/gguf/gguf_writer.c — GGUF v3 output: metadata serialized as it is set, tensor infos laid out at
 * begin, tensor data streamed through one buffer (or appended to a memory image). */
#include "core/gguf/gguf_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/gguf/name_index.h"
#include "core/quant/types.h"

#define STAGING_BYTES (1u << 20) /* file output buffer; larger writes bypass it */
#define MAX_NAME_BYTES 63        /* ggml's GGML_MAX_NAME (64) minus the NUL */

/* --- a growable byte buffer, little-endian encoders ----------------------------------------------------- */

typedef struct bytes {
    uint8_t *p;
    size_t len, cap;
} bytes_t;

static int bytes_reserve(bytes_t *b, size_t extra)
{
    if (extra <= b->cap - b->len)
        return 0;
    if (extra > SIZE_MAX / 2 - b->len)
        return -1;
    size_t cap = b->cap ? b->cap : 64;
    while (cap - b->len < extra)
        cap *= 2;
    uint8_t *p = realloc(b->p, cap);
    if (!p)
        return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

static int bytes_put(bytes_t *b, const void *src, size_t n)
{
    if (bytes_reserve(b, n) < 0)
        return -1;
    if (n)
        memcpy(b->p + b->len, src, n);
    b->len += n;
    return 0;
}

static int bytes_zeros(bytes_t *b, size_t n)
{
    if (bytes_reserve(b, n) < 0)
        return -1;
    memset(b->p + b->len, 0, n);
    b->len += n;
    return 0;
}

static int bytes_u32(bytes_t *b, uint32_t v)
{
    uint8_t e[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    return bytes_put(b, e, sizeof e);
}

static int bytes_u64(bytes_t *b, uint64_t v)
{
    return bytes_u32(b, (uint32_t)v) < 0 ? -1 : bytes_u32(b, (uint32_t)(v >> 32));
}

static int bytes_str(bytes_t *b, const char *s, size_t len)
{
    return bytes_u64(b, len) < 0 ? -1 : bytes_put(b, s, len);
}

/* n elements of a fixed-size type from their C representation (host order) to little-endian bytes. */
static int bytes_elems(bytes_t *b, gguf_value_type_t type, const void *elems, uint64_t n)
{
    size_t esize = gguf_value_type_size(type);
    if (n > SIZE_MAX / esize || bytes_reserve(b, (size_t)(n * esize)) < 0)
        return -1;
    const uint8_t *src = elems;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (n)
        memcpy(b->p + b->len, src, (size_t)(n * esize));
    if (type == GGUF_VALUE_BOOL) /* a C bool holding something else than 0/1 would be an invalid GGUF bool */
        for (uint64_t i = 0; i < n; i++)
            b->p[b->len + i] = src[i] != 0;
#else
    for (uint64_t i = 0; i < n; i++)
        for (size_t k = 0; k < esize; k++)
            b->p[b->len + i * esize + k] = src[i * esize + esize - 1 - k];
    if (type == GGUF_VALUE_BOOL)
        for (uint64_t i = 0; i < n; i++)
            b->p[b->len + i] = src[i] != 0;
#endif
    b->len += (size_t)(n * esize);
    return 0;
}

/* --- state ---------------------------------------------------------------------------------------------- */

typedef struct wkv {
    char *key;              /* NUL-terminated copy */
    gguf_value_type_t type;
    bytes_t value;          /* the value's encoding, without the type tag */
} wkv_t;

typedef struct wtensor {
    char *name;
    uint32_t type;
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS];
    uint64_t size;   /* bytes of data */
    uint64_t offset; /* relative to the data section (set at begin) */
} wtensor_t;

typedef enum { W_DECLARING, W_WRITING, W_FINISHED, W_BROKEN } wstate_t;

struct gguf_writer {
    wkv_t *kv;             /* [n_kv], in the order first set */
    int64_t n_kv, cap_kv;
    gguf_name_index_t keys; /* key -> kv index */
    wtensor_t *tensors;    /* [n_tensors] */
    int64_t n_tensors, cap_tensors;
    gguf_name_index_t names;
    bool failed;           /* a setter failed: begin refuses, with first_error */
    guild_err_t first_error;
    wstate_t state;
    uint32_t alignment;
    uint64_t data_offset;
    /* output */
    bool to_memory;
    int fd;
    char *path;
    bytes_t out;           /* memory image, or the staging buffer of a file */
    uint64_t emitted;      /* bytes of the file produced so far */
    int64_t cur;           /* tensor being written */
    uint64_t cur_done;     /* bytes of it written so far */
};

struct gguf_wvalue {
    gguf_value_type_t elem_type;
    uint64_t n;
    bytes_t elems;          /* encoding of the elements */
    bool failed;
    guild_err_t first_error;
};

/* Records the first failure of a setter; returns -1. */
__attribute__((format(printf, 2, 3))) static int setter_fail(gguf_writer_t *w, const char *fmt, ...)
{
    if (!w->failed) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(w->first_error.msg, sizeof w->first_error.msg, fmt, ap);
        va_end(ap);
        w->failed = true;
    }
    return -1;
}

int gguf_writer_new(gguf_writer_t **out, guild_err_t *err)
{
    gguf_writer_t *w = calloc(1, sizeof *w);
    *out = w;
    if (!w)
        return guild_err_set(err, "gguf writer: out of memory");
    w->fd = -1;
    w->alignment = GGUF_DEFAULT_ALIGNMENT;
    return 0;
}

void gguf_writer_destroy(gguf_writer_t **pw)
{
    gguf_writer_t *w = *pw;
    if (!w)
        return;
    if (w->fd >= 0) {
        close(w->fd);
        if (w->state != W_FINISHED)
            unlink(w->path);
    }
    for (int64_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].value.p);
    }
    for (int64_t i = 0; i < w->n_tensors; i++)
        free(w->tensors[i].name);
    gguf_name_index_fini(&w->keys);
    gguf_name_index_fini(&w->names);
    free(w->kv);
    free(w->tensors);
    free(w->path);
    free(w->out.p);
    free(w);
    *pw = NULL;
}

/* --- metadata ------------------------------------------------------------------------------------------- */

/* The slot of `key` (a new one at the end if it is not set yet) with its previous value emptied, or NULL. */
static wkv_t *kv_slot(gguf_writer_t *w, const char *key, gguf_value_type_t type)
{
    if (!key || !*key) {
        setter_fail(w, "gguf writer: an empty key");
        return NULL;
    }
    if (w->state != W_DECLARING) {
        setter_fail(w, "gguf writer: key '%s' set after gguf_writer_begin", key);
        return NULL;
    }
    size_t len = strlen(key);
    int64_t i = gguf_name_index_find(&w->keys, key, len);
    if (i >= 0) {
        wkv_t *kv = &w->kv[i];
        kv->type = type;
        kv->value.len = 0;
        return kv;
    }
    if (w->n_kv == w->cap_kv) {
        int64_t cap = w->cap_kv ? 2 * w->cap_kv : 16;
        wkv_t *kvs = realloc(w->kv, (size_t)cap * sizeof *kvs);
        if (!kvs)
            goto oom;
        w->kv = kvs;
        w->cap_kv = cap;
    }
    wkv_t *kv = &w->kv[w->n_kv];
    memset(kv, 0, sizeof *kv);
    if (!(kv->key = strdup(key)))
        goto oom;
    if (gguf_name_index_insert(&w->keys, kv->key, len, w->n_kv) == -2) {
        free(kv->key);
        goto oom;
    }
    kv->type = type;
    w->n_kv++;
    return kv;
oom:
    setter_fail(w, "gguf writer: out of memory setting key '%s'", key);
    return NULL;
}

/* Sets key to `type` with the encoding src[len]. */
static int set_encoded(gguf_writer_t *w, const char *key, gguf_value_type_t type, const void *src, size_t len)
{
    wkv_t *kv = kv_slot(w, key, type);
    if (!kv)
        return -1;
    if (bytes_put(&kv->value, src, len) < 0) {
        gguf_writer_remove(w, key);
        return setter_fail(w, "gguf writer: out of memory setting key '%s'", key);
    }
    return 0;
}

static int set_scalar(gguf_writer_t *w, const char *key, gguf_value_type_t type, const void *v)
{
    bytes_t b = {0};
    if (bytes_elems(&b, type, v, 1) < 0)
        return setter_fail(w, "gguf writer: out of memory setting key '%s'", key ? key : "");
    int rc = set_encoded(w, key, type, b.p, b.len);
    free(b.p);
    return rc;
}

int gguf_writer_set_u8(gguf_writer_t *w, const char *key, uint8_t v)
{
    return set_scalar(w, key, GGUF_VALUE_UINT8, &v);
}

int gguf_writer_set_i8(gguf_writer_t *w, const char *key, int8_t v)
{
    return set_scalar(w, key, GGUF_VALUE_INT8, &v);
}

int gguf_writer_set_u16(gguf_writer_t *w, const char *key, uint16_t v)
{
    return set_scalar(w, key, GGUF_VALUE_UINT16, &v);
}

int gguf_writer_set_i16(gguf_writer_t *w, const char *key, int16_t v)
{
    return set_scalar(w, key, GGUF_VALUE_INT16, &v);
}

int gguf_writer_set_u32(gguf_writer_t *w, const char *key, uint32_t v)
{
    return set_scalar(w, key, GGUF_VALUE_UINT32, &v);
}

int gguf_writer_set_i32(gguf_writer_t *w, const char *key, int32_t v)
{
    return set_scalar(w, key, GGUF_VALUE_INT32, &v);
}

int gguf_writer_set_u64(gguf_writer_t *w, const char *key, uint64_t v)
{
    return set_scalar(w, key, GGUF_VALUE_UINT64, &v);
}

int gguf_writer_set_i64(gguf_writer_t *w, const char *key, int64_t v)
{
    return set_scalar(w, key, GGUF_VALUE_INT64, &v);
}

int gguf_writer_set_f32(gguf_writer_t *w, const char *key, float v)
{
    return set_scalar(w, key, GGUF_VALUE_FLOAT32, &v);
}

int gguf_writer_set_f64(gguf_writer_t *w, const char *key, double v)
{
    return set_scalar(w, key, GGUF_VALUE_FLOAT64, &v);
}

int gguf_writer_set_bool(gguf_writer_t *w, const char *key, bool v)
{
    return set_scalar(w, key, GGUF_VALUE_BOOL, &v);
}

int gguf_writer_set_str(gguf_writer_t *w, const char *key, const char *s)
{
    return gguf_writer_set_strn(w, key, s, strlen(s));
}

int gguf_writer_set_strn(gguf_writer_t *w, const char *key, const char *s, size_t len)
{
    wkv_t *kv = kv_slot(w, key, GGUF_VALUE_STRING);
    if (!kv)
        return -1;
    if (bytes_str(&kv->value, s, len) < 0) {
        gguf_writer_remove(w, key);
        return setter_fail(w, "gguf writer: out of memory setting key '%s'", key);
    }
    return 0;
}

int gguf_writer_set_arr(gguf_writer_t *w, const char *key, gguf_value_type_t elem_type, const void *elems,
                        uint64_t n)
{
    if (!gguf_value_type_size(elem_type))
        return setter_fail(w, "gguf writer: key '%s': gguf_writer_set_arr takes fixed-size elements, not %s",
                           key ? key : "", gguf_value_type_name(elem_type));
    wkv_t *kv = kv_slot(w, key, GGUF_VALUE_ARRAY);
    if (!kv)
        return -1;
    if (bytes_u32(&kv->value, elem_type) < 0 || bytes_u64(&kv->value, n) < 0 ||
        bytes_elems(&kv->value, elem_type, elems, n) < 0) {
        gguf_writer_remove(w, key);
        return setter_fail(w, "gguf writer: out of memory setting key '%s'", key);
    }
    return 0;
}

int gguf_writer_set_arr_str(gguf_writer_t *w, const char *key, const char *const *strs, const size_t *lens,
                            uint64_t n)
{
    wkv_t *kv = kv_slot(w, key, GGUF_VALUE_ARRAY);
    if (!kv)
        return -1;
    int rc = bytes_u32(&kv->value, GGUF_VALUE_STRING) | bytes_u64(&kv->value, n);
    for (uint64_t i = 0; i < n && rc == 0; i++)
        rc = bytes_str(&kv->value, strs[i], lens ? lens[i] : strlen(strs[i]));
    if (rc < 0) {
        gguf_writer_remove(w, key);
        return setter_fail(w, "gguf writer: out of memory setting key '%s'", key);
    }
    return 0;
}

int gguf_writer_remove(gguf_writer_t *w, const char *key)
{
    if (!key)
        return 0;
    int64_t i = gguf_name_index_find(&w->keys, key, strlen(key));
    if (i < 0)
        return 0;
    free(w->kv[i].key);
    free(w->kv[i].value.p);
    memmove(&w->kv[i], &w->kv[i + 1], (size_t)(w->n_kv - i - 1) * sizeof *w->kv);
    w->n_kv--;
    /* Indices after i moved: rebuild (removal is rare). */
    gguf_name_index_fini(&w->keys);
    if (gguf_name_index_init(&w->keys, (size_t)w->n_kv) < 0)
        return setter_fail(w, "gguf writer: out of memory");
    for (int64_t k = 0; k < w->n_kv; k++)
        if (gguf_name_index_insert(&w->keys, w->kv[k].key, strlen(w->kv[k].key), k) == -2)
            return setter_fail(w, "gguf writer: out of memory");
    return 0;
}

/* --- built values --------------------------------------------------------------------------------------- */

__attribute__((format(printf, 2, 3))) static int wvalue_fail(gguf_wvalue_t *v, const char *fmt, ...)
{
    if (!v->failed) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(v->first_error.msg, sizeof v->first_error.msg, fmt, ap);
        va_end(ap);
        v->failed = true;
    }
    return -1;
}

gguf_wvalue_t *gguf_wvalue_arr_new(gguf_value_type_t elem_type)
{
    gguf_wvalue_t *v = calloc(1, sizeof *v);
    if (!v)
        return NULL;
    v->elem_type = elem_type;
    if ((unsigned)elem_type >= GGUF_VALUE_TYPE_COUNT)
        wvalue_fail(v, "array element type %u is not a GGUF value type", (unsigned)elem_type);
    return v;
}

void gguf_wvalue_destroy(gguf_wvalue_t **pv)
{
    if (!*pv)
        return;
    free((*pv)->elems.p);
    free(*pv);
    *pv = NULL;
}

int gguf_wvalue_push(gguf_wvalue_t *arr, const void *elems, uint64_t n)
{
    if (!gguf_value_type_size(arr->elem_type))
        return wvalue_fail(arr, "pushing fixed-size elements to an array of %s",
                           gguf_value_type_name(arr->elem_type));
    if (bytes_elems(&arr->elems, arr->elem_type, elems, n) < 0)
        return wvalue_fail(arr, "out of memory building an array");
    arr->n += n;
    return 0;
}

int gguf_wvalue_push_str(gguf_wvalue_t *arr, const char *s, size_t len)
{
    if (arr->elem_type != GGUF_VALUE_STRING)
        return wvalue_fail(arr, "pushing a string to an array of %s", gguf_value_type_name(arr->elem_type));
    if (bytes_str(&arr->elems, s, len) < 0)
        return wvalue_fail(arr, "out of memory building an array");
    arr->n++;
    return 0;
}

int gguf_wvalue_push_arr(gguf_wvalue_t *arr, gguf_wvalue_t **pinner)
{
    gguf_wvalue_t *inner = *pinner;
    *pinner = NULL;
    int rc = 0;
    if (!inner)
        rc = wvalue_fail(arr, "out of memory building an array");
    else if (inner->failed)
        rc = wvalue_fail(arr, "%s", inner->first_error.msg);
    else if (arr->elem_type != GGUF_VALUE_ARRAY)
        rc = wvalue_fail(arr, "pushing an array to an array of %s", gguf_value_type_name(arr->elem_type));
    else if (bytes_u32(&arr->elems, inner->elem_type) < 0 || bytes_u64(&arr->elems, inner->n) < 0 ||
             bytes_put(&arr->elems, inner->elems.p, inner->elems.len) < 0)
        rc = wvalue_fail(arr, "out of memory building an array");
    else
        arr->n++;
    gguf_wvalue_destroy(&inner);
    return rc;
}

int gguf_writer_set_value(gguf_writer_t *w, const char *key, gguf_wvalue_t **pv)
{
    gguf_wvalue_t *v = *pv;
    *pv = NULL;
    int rc;
    if (!v)
        rc = setter_fail(w, "gguf writer: key '%s': out of memory building its value", key ? key : "");
    else if (v->failed)
        rc = setter_fail(w, "gguf writer: key '%s': %s", key ? key : "", v->first_error.msg);
    else {
        wkv_t *kv = kv_slot(w, key, GGUF_VALUE_ARRAY);
        rc = kv ? 0 : -1;
        if (kv && (bytes_u32(&kv->value, v->elem_type) < 0 || bytes_u64(&kv->value, v->n) < 0 ||
                   bytes_put(&kv->value, v->elems.p, v->elems.len) < 0)) {
            gguf_writer_remove(w, key);
            rc = setter_fail(w, "gguf writer: out of memory setting key '%s'", key);
        }
    }
    gguf_wvalue_destroy(&v);
    return rc;
}

/* One past the last byte of a value read from a file (values are contiguous in their file). */
static const uint8_t *value_end(const gguf_value_t *v)
{
    size_t esize;
    switch (v->type) {
    case GGUF_VALUE_STRING: return v->data + v->n;
    case GGUF_VALUE_ARRAY:
        if (v->n == 0)
            return v->data;
        if ((esize = gguf_value_type_size(v->elem_type)))
            return v->data + v->n * esize;
        gguf_value_t last = gguf_value_at(v, v->n - 1);
        return value_end(&last);
    default: return v->data + gguf_value_type_size(v->type);
    }
}

int gguf_writer_set_copy(gguf_writer_t *w, const char *key, const gguf_value_t *v)
{
    /* The encoding starts before `data` by the string length or the array header. */
    const uint8_t *start = v->data - (v->type == GGUF_VALUE_STRING ? 8 : v->type == GGUF_VALUE_ARRAY ? 12 : 0);
    return set_encoded(w, key, v->type, start, (size_t)(value_end(v) - start));
}

/* --- tensors -------------------------------------------------------------------------------------------- */

int gguf_writer_add_tensor(gguf_writer_t *w, const char *name, uint32_t type, uint32_t n_dims, const uint64_t *ne,
                           guild_err_t *err)
{
    if (w->state != W_DECLARING)
        return guild_err_set(err, "gguf writer: tensor '%s' declared after gguf_writer_begin", name);
    size_t len = strlen(name);
    if (len == 0 || len > MAX_NAME_BYTES)
        return guild_err_set(err, "gguf writer: tensor '%s': a name must have 1 to %d bytes", name, MAX_NAME_BYTES);
    if (gguf_name_index_find(&w->names, name, len) >= 0)
        return guild_err_set(err, "gguf writer: tensor '%s' declared twice", name);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return guild_err_set(err, "gguf writer: tensor '%s': n_dims %u is out of range (1..%d)", name, n_dims,
                             GGUF_MAX_DIMS);
    wtensor_t t = {.type = type, .n_dims = n_dims, .ne = {1, 1, 1, 1}};
    uint64_t elems = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] == 0 || ne[d] > INT64_MAX)
            return guild_err_set(err, "gguf writer: tensor '%s': dimension %u (%llu) is out of range", name, d,
                                 (unsigned long long)ne[d]);
        if (__builtin_mul_overflow(elems, ne[d], &elems) || elems > INT64_MAX)
            return guild_err_set(err, "gguf writer: tensor '%s': the element count overflows", name);
        t.ne[d] = ne[d];
    }
    guild_err_t e;
    if (quant_row_bytes(type, t.ne[0], &t.size, &e) < 0)
        return guild_err_set(err, "gguf writer: tensor '%s': %s", name, e.msg);
    for (uint32_t d = 1; d < GGUF_MAX_DIMS; d++)
        if (__builtin_mul_overflow(t.size, t.ne[d], &t.size))
            return guild_err_set(err, "gguf writer: tensor '%s': the size overflows", name);
    if (w->n_tensors == w->cap_tensors) {
        int64_t cap = w->cap_tensors ? 2 * w->cap_tensors : 64;
        wtensor_t *ts = realloc(w->tensors, (size_t)cap * sizeof *ts);
        if (!ts)
            return guild_err_set(err, "gguf writer: out of memory");
        w->tensors = ts;
        w->cap_tensors = cap;
    }
    if (!(t.name = strdup(name)))
        return guild_err_set(err, "gguf writer: out of memory");
    if (gguf_name_index_insert(&w->names, t.name, len, w->n_tensors) == -2) {
        free(t.name);
        return guild_err_set(err, "gguf writer: out of memory");
    }
    w->tensors[w->n_tensors++] = t;
    return 0;
}

int64_t gguf_writer_n_tensors(const gguf_writer_t *w)
{
    return w->n_tensors;
}

uint64_t gguf_writer_tensor_size(const gguf_writer_t *w, int64_t i)
{
    GUILD_ASSERT(i >= 0 && i < w->n_tensors);
    return w->tensors[i].size;
}

/* --- output --------------------------------------------------------------------------------------------- */

static int write_all(gguf_writer_t *w, const uint8_t *p, uint64_t n, guild_err_t *err)
{
    while (n) {
        size_t chunk = n > (1u << 30) ? (1u << 30) : (size_t)n;
        ssize_t k = write(w->fd, p, chunk);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            w->state = W_BROKEN;
            return guild_err_errno(err, k < 0 ? errno : EIO, "%s: write failed at offset %llu", w->path,
                                   (unsigned long long)w->emitted);
        }
        p += k;
        n -= (uint64_t)k;
    }
    return 0;
}

static int flush(gguf_writer_t *w, guild_err_t *err)
{
    if (w->to_memory || w->out.len == 0)
        return 0;
    int rc = write_all(w, w->out.p, w->out.len, err);
    w->out.len = 0;
    return rc;
}

/* Appends n bytes to the output (src NULL: zeros). */
static int emit(gguf_writer_t *w, const void *src, uint64_t n, guild_err_t *err)
{
    const uint8_t *p = src;
    if (w->to_memory) {
        if (n > SIZE_MAX || (p ? bytes_put(&w->out, p, (size_t)n) : bytes_zeros(&w->out, (size_t)n)) < 0) {
            w->state = W_BROKEN;
            return guild_err_set(err, "gguf writer: out of memory at offset %llu", (unsigned long long)w->emitted);
        }
        w->emitted += n;
        return 0;
    }
    if (p && n >= STAGING_BYTES) { /* large tensor data goes straight to the file */
        if (flush(w, err) < 0 || write_all(w, p, n, err) < 0)
            return -1;
        w->emitted += n;
        return 0;
    }
    while (n) {
        size_t room = STAGING_BYTES - w->out.len; /* begin reserved STAGING_BYTES */
        if (room == 0) {
            if (flush(w, err) < 0)
                return -1;
            continue;
        }
        size_t take = n < room ? (size_t)n : room;
        if (p) {
            memcpy(w->out.p + w->out.len, p, take);
            p += take;
        } else {
            memset(w->out.p + w->out.len, 0, take);
        }
        w->out.len += take;
        w->emitted += take;
        n -= take;
    }
    return 0;
}

static uint64_t pad_to(uint64_t x, uint64_t a)
{
    return (a - x % a) % a;
}

/* Everything before the tensor data: header, metadata, tensor infos, padding. */
static int emit_head(gguf_writer_t *w, guild_err_t *err)
{
    bytes_t h = {0};
    int rc = bytes_put(&h, "GGUF", 4) | bytes_u32(&h, 3) | bytes_u64(&h, (uint64_t)w->n_tensors) |
             bytes_u64(&h, (uint64_t)w->n_kv);
    for (int64_t i = 0; i < w->n_kv && rc == 0; i++) {
        const wkv_t *kv = &w->kv[i];
        rc = bytes_str(&h, kv->key, strlen(kv->key)) | bytes_u32(&h, kv->type) |
             bytes_put(&h, kv->value.p, kv->value.len);
    }
    uint64_t off = 0;
    for (int64_t i = 0; i < w->n_tensors && rc == 0; i++) {
        wtensor_t *t = &w->tensors[i];
        t->offset = off;
        rc = bytes_str(&h, t->name, strlen(t->name)) | bytes_u32(&h, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++)
            rc |= bytes_u64(&h, t->ne[d]);
        rc |= bytes_u32(&h, t->type) | bytes_u64(&h, t->offset);
        if (__builtin_add_overflow(off, t->size + pad_to(t->size, w->alignment), &off))
            rc = -1;
    }
    if (rc == 0)
        rc = bytes_zeros(&h, (size_t)pad_to(h.len, w->alignment));
    if (rc < 0) {
        free(h.p);
        w->state = W_BROKEN;
        return guild_err_set(err, "gguf writer: out of memory (or tensor data over 2^64 bytes) writing the header");
    }
    w->data_offset = h.len;
    rc = emit(w, h.p, h.len, err);
    free(h.p);
    return rc;
}

/* Checks what begin needs before anything is created: no failed setter, a valid alignment. */
static int prepare(gguf_writer_t *w, guild_err_t *err)
{
    if (w->state != W_DECLARING)
        return guild_err_set(err, "gguf writer: begun twice");
    if (w->failed)
        return guild_err_set(err, "%s", w->first_error.msg);
    int64_t a = gguf_name_index_find(&w->keys, "general.alignment", strlen("general.alignment"));
    if (a >= 0) {
        const wkv_t *kv = &w->kv[a];
        uint32_t v = kv->value.len == 4 ? (uint32_t)kv->value.p[0] | (uint32_t)kv->value.p[1] << 8 |
                                              (uint32_t)kv->value.p[2] << 16 | (uint32_t)kv->value.p[3] << 24
                                        : 0;
        if (kv->type != GGUF_VALUE_UINT32 || v == 0 || (v & (v - 1)))
            return guild_err_set(err, "gguf writer: general.alignment must be a uint32 power of two");
        w->alignment = v;
    }
    return 0;
}

int gguf_writer_begin(gguf_writer_t *w, const char *path, guild_err_t *err)
{
    if (prepare(w, err) < 0)
        return -1;
    free(w->path);
    if (!(w->path = strdup(path)) || bytes_reserve(&w->out, STAGING_BYTES) < 0)
        return guild_err_set(err, "%s: out of memory", path);
    w->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0)
        return guild_err_errno(err, errno, "%s: cannot create", path);
    w->state = W_WRITING;
    return emit_head(w, err);
}

int gguf_writer_begin_memory(gguf_writer_t *w, guild_err_t *err)
{
    if (prepare(w, err) < 0)
        return -1;
    w->to_memory = true;
    w->state = W_WRITING;
    return emit_head(w, err);
}

uint64_t gguf_writer_data_offset(const gguf_writer_t *w)
{
    GUILD_ASSERT(w->state != W_DECLARING);
    return w->data_offset;
}

uint64_t gguf_writer_tensor_offset(const gguf_writer_t *w, int64_t i)
{
    GUILD_ASSERT(w->state != W_DECLARING && i >= 0 && i < w->n_tensors);
    return w->data_offset + w->tensors[i].offset;
}

int gguf_writer_write(gguf_writer_t *w, const void *data, uint64_t size, guild_err_t *err)
{
    if (w->state != W_WRITING)
        return guild_err_set(err, "gguf writer: tensor data written %s", w->state == W_DECLARING ? "before begin"
                                                                         : w->state == W_FINISHED ? "after finish"
                                                                                                  : "after a failure");
    const uint8_t *p = data;
    while (size) {
        if (w->cur >= w->n_tensors)
            return guild_err_set(err, "gguf writer: %llu bytes of tensor data more than declared",
                                 (unsigned long long)size);
        const wtensor_t *t = &w->tensors[w->cur];
        uint64_t take = t->size - w->cur_done < size ? t->size - w->cur_done : size;
        if (emit(w, p, take, err) < 0)
            return -1;
        p += take;
        size -= take;
        w->cur_done += take;
        if (w->cur_done == t->size) {
            if (emit(w, NULL, pad_to(t->size, w->alignment), err) < 0)
                return -1;
            w->cur++;
            w->cur_done = 0;
        }
    }
    return 0;
}

int gguf_writer_write_tensor(gguf_writer_t *w, int64_t idx, const void *data, uint64_t size, guild_err_t *err)
{
    if (w->state == W_WRITING && (idx != w->cur || w->cur_done != 0))
        return guild_err_set(err, "gguf writer: tensor #%lld written out of order (next is #%lld, %llu bytes in)",
                             (long long)idx, (long long)w->cur, (unsigned long long)w->cur_done);
    if (w->state == W_WRITING && size != w->tensors[idx].size)
        return guild_err_set(err, "gguf writer: tensor '%s': %llu bytes given, its size is %llu",
                             w->tensors[idx].name, (unsigned long long)size,
                             (unsigned long long)w->tensors[idx].size);
    return gguf_writer_write(w, data, size, err);
}

int gguf_writer_finish(gguf_writer_t *w, guild_err_t *err)
{
    if (w->state != W_WRITING)
        return guild_err_set(err, "gguf writer: finish without a successful begin");
    if (w->cur < w->n_tensors) {
        const wtensor_t *t = &w->tensors[w->cur];
        return guild_err_set(err, "gguf writer: tensor '%s' (#%lld) has %llu of its %llu bytes written", t->name,
                             (long long)w->cur, (unsigned long long)w->cur_done, (unsigned long long)t->size);
    }
    if (!w->to_memory) {
        if (flush(w, err) < 0)
            return -1;
        int rc = close(w->fd);
        w->fd = -1;
        if (rc < 0) {
            w->state = W_BROKEN;
            unlink(w->path);
            return guild_err_errno(err, errno, "%s: close failed", w->path);
        }
    }
    w->state = W_FINISHED;
    return 0;
}

void gguf_writer_take_memory(gguf_writer_t *w, void **data, size_t *size)
{
    GUILD_ASSERT(w->to_memory && w->state == W_FINISHED);
    *data = w->out.p;
    *size = w->out.len;
    w->out = (bytes_t){0};
}
