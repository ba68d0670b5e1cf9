/* core/gguf/gguf_value.c — reading metadata values of a validated GGUF file: lookups, typed getters with
 * conversions, array elements. Nothing here re-checks bounds the validation (gguf.c) already proved. */
#include "core/gguf/gguf_internal.h"

#include <float.h>
#include <math.h>
#include <string.h>

static const struct {
    const char *name;
    size_t size; /* 0: variable */
} value_types[GGUF_VALUE_TYPE_COUNT] = {
    [GGUF_VALUE_UINT8] = {"uint8", 1},    [GGUF_VALUE_INT8] = {"int8", 1},
    [GGUF_VALUE_UINT16] = {"uint16", 2},  [GGUF_VALUE_INT16] = {"int16", 2},
    [GGUF_VALUE_UINT32] = {"uint32", 4},  [GGUF_VALUE_INT32] = {"int32", 4},
    [GGUF_VALUE_FLOAT32] = {"float32", 4}, [GGUF_VALUE_BOOL] = {"bool", 1},
    [GGUF_VALUE_STRING] = {"string", 0},  [GGUF_VALUE_ARRAY] = {"array", 0},
    [GGUF_VALUE_UINT64] = {"uint64", 8},  [GGUF_VALUE_INT64] = {"int64", 8},
    [GGUF_VALUE_FLOAT64] = {"float64", 8},
};

const char *gguf_value_type_name(gguf_value_type_t type)
{
    return (unsigned)type < GGUF_VALUE_TYPE_COUNT ? value_types[type].name : "?";
}

size_t gguf_value_type_size(gguf_value_type_t type)
{
    return (unsigned)type < GGUF_VALUE_TYPE_COUNT ? value_types[type].size : 0;
}

/* --- conversions ---------------------------------------------------------------------------------------- */

/* Integer types (bool included) as a sign and a magnitude, so that no conversion can overflow. */
static int int_parts(const gguf_value_t *v, bool *neg, uint64_t *mag)
{
    const uint8_t *p = v->data;
    int64_t s;
    *neg = false;
    switch (v->type) {
    case GGUF_VALUE_BOOL:
    case GGUF_VALUE_UINT8: *mag = p[0]; return 0;
    case GGUF_VALUE_UINT16: *mag = gguf_rd_u16(p); return 0;
    case GGUF_VALUE_UINT32: *mag = gguf_rd_u32(p); return 0;
    case GGUF_VALUE_UINT64: *mag = gguf_rd_u64(p); return 0;
    case GGUF_VALUE_INT8: s = (int8_t)p[0]; break;
    case GGUF_VALUE_INT16: s = (int16_t)gguf_rd_u16(p); break;
    case GGUF_VALUE_INT32: s = (int32_t)gguf_rd_u32(p); break;
    case GGUF_VALUE_INT64: s = (int64_t)gguf_rd_u64(p); break;
    default: return -1;
    }
    *neg = s < 0;
    *mag = s < 0 ? (uint64_t)0 - (uint64_t)s : (uint64_t)s;
    return 0;
}

int gguf_value_to_int(const gguf_value_t *v, int64_t *out)
{
    bool neg;
    uint64_t mag;
    if (int_parts(v, &neg, &mag) < 0)
        return -1;
    if (neg) {
        *out = mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag;
        return 0;
    }
    if (mag > INT64_MAX)
        return -1;
    *out = (int64_t)mag;
    return 0;
}

int gguf_value_to_uint(const gguf_value_t *v, uint64_t *out)
{
    bool neg;
    uint64_t mag;
    if (int_parts(v, &neg, &mag) < 0 || neg)
        return -1;
    *out = mag;
    return 0;
}

int gguf_value_to_float(const gguf_value_t *v, double *out)
{
    if (v->type == GGUF_VALUE_FLOAT32) {
        uint32_t bits = gguf_rd_u32(v->data);
        float f;
        memcpy(&f, &bits, sizeof f);
        *out = f;
        return 0;
    }
    if (v->type == GGUF_VALUE_FLOAT64) {
        uint64_t bits = gguf_rd_u64(v->data);
        memcpy(out, &bits, sizeof *out);
        return 0;
    }
    bool neg;
    uint64_t mag;
    if (v->type == GGUF_VALUE_BOOL || int_parts(v, &neg, &mag) < 0)
        return -1;
    *out = neg ? -(double)mag : (double)mag;
    return 0;
}

int gguf_value_to_bool(const gguf_value_t *v, bool *out)
{
    if (v->type != GGUF_VALUE_BOOL)
        return -1;
    *out = v->data[0] != 0;
    return 0;
}

void gguf_value_str(const gguf_value_t *v, const char **s, size_t *len)
{
    GUILD_ASSERT(v->type == GGUF_VALUE_STRING);
    *s = (const char *)v->data;
    *len = (size_t)v->n;
}

gguf_value_t gguf_value_at(const gguf_value_t *arr, uint64_t i)
{
    GUILD_ASSERT(arr->type == GGUF_VALUE_ARRAY && i < arr->n);
    size_t esize = gguf_value_type_size(arr->elem_type);
    if (esize)
        return (gguf_value_t){.type = arr->elem_type, .data = arr->data + i * esize};
    if (arr->elem_type == GGUF_VALUE_STRING) {
        const uint8_t *p = ((const uint8_t *const *)arr->index_)[i];
        return (gguf_value_t){.type = GGUF_VALUE_STRING, .n = gguf_rd_u64(p), .data = p + 8};
    }
    return ((const gguf_value_t *)arr->index_)[i];
}

/* --- keys ----------------------------------------------------------------------------------------------- */

int64_t gguf_n_kv(const gguf_t *g)
{
    return g->n_kv;
}

int64_t gguf_find_key(const gguf_t *g, const char *key)
{
    return gguf_name_index_find(&g->keys, key, strlen(key));
}

const char *gguf_kv_key(const gguf_t *g, int64_t i)
{
    GUILD_ASSERT(i >= 0 && i < g->n_kv);
    return g->kv[i].key;
}

gguf_value_type_t gguf_kv_type(const gguf_t *g, int64_t i)
{
    GUILD_ASSERT(i >= 0 && i < g->n_kv);
    return g->kv[i].value.type;
}

const gguf_value_t *gguf_kv_value(const gguf_t *g, int64_t i)
{
    GUILD_ASSERT(i >= 0 && i < g->n_kv);
    return &g->kv[i].value;
}

const gguf_value_t *gguf_find_value(const gguf_t *g, const char *key)
{
    int64_t i = gguf_find_key(g, key);
    return i < 0 ? NULL : &g->kv[i].value;
}

/* The value of `key`, or NULL with "file: key 'k' not found" in err. */
static const gguf_value_t *lookup(const gguf_t *g, const char *key, guild_err_t *err)
{
    const gguf_value_t *v = gguf_find_value(g, key);
    if (!v)
        guild_err_set(err, "%s: key '%s' not found", g->name, key);
    return v;
}

static int wrong_type(const gguf_t *g, const char *key, const gguf_value_t *v, const char *expected,
                      guild_err_t *err)
{
    return guild_err_set(err, "%s: key '%s': a %s, expected %s", g->name, key, gguf_value_type_name(v->type),
                         expected);
}

static bool is_integer(gguf_value_type_t t)
{
    return t == GGUF_VALUE_BOOL || (gguf_value_type_size(t) && t != GGUF_VALUE_FLOAT32 && t != GGUF_VALUE_FLOAT64);
}

int gguf_get_int(const gguf_t *g, const char *key, int64_t *out, guild_err_t *err)
{
    const gguf_value_t *v = lookup(g, key, err);
    if (!v)
        return -1;
    if (!is_integer(v->type))
        return wrong_type(g, key, v, "an integer", err);
    if (gguf_value_to_int(v, out) < 0)
        return guild_err_set(err, "%s: key '%s': %llu does not fit in int64", g->name, key,
                             (unsigned long long)gguf_rd_u64(v->data));
    return 0;
}

int gguf_get_uint(const gguf_t *g, const char *key, uint64_t *out, guild_err_t *err)
{
    const gguf_value_t *v = lookup(g, key, err);
    if (!v)
        return -1;
    if (!is_integer(v->type))
        return wrong_type(g, key, v, "an unsigned integer", err);
    if (gguf_value_to_uint(v, out) < 0) {
        int64_t s = 0;
        gguf_value_to_int(v, &s);
        return guild_err_set(err, "%s: key '%s': %lld is negative, expected an unsigned integer", g->name, key,
                             (long long)s);
    }
    return 0;
}

int gguf_get_float(const gguf_t *g, const char *key, double *out, guild_err_t *err)
{
    const gguf_value_t *v = lookup(g, key, err);
    if (!v)
        return -1;
    if (gguf_value_to_float(v, out) < 0)
        return wrong_type(g, key, v, "a number", err);
    return 0;
}

int gguf_get_bool(const gguf_t *g, const char *key, bool *out, guild_err_t *err)
{
    const gguf_value_t *v = lookup(g, key, err);
    if (!v)
        return -1;
    if (gguf_value_to_bool(v, out) < 0)
        return wrong_type(g, key, v, "a bool", err);
    return 0;
}

int gguf_get_str(const gguf_t *g, const char *key, const char **s, size_t *len, guild_err_t *err)
{
    const gguf_value_t *v = lookup(g, key, err);
    if (!v)
        return -1;
    if (v->type != GGUF_VALUE_STRING)
        return wrong_type(g, key, v, "a string", err);
    gguf_value_str(v, s, len);
    return 0;
}

/* --- arrays --------------------------------------------------------------------------------------------- */

int gguf_get_arr(const gguf_t *g, const char *key, gguf_value_type_t *elem_type, uint64_t *n, guild_err_t *err)
{
    const gguf_value_t *v = lookup(g, key, err);
    if (!v)
        return -1;
    if (v->type != GGUF_VALUE_ARRAY)
        return wrong_type(g, key, v, "an array", err);
    *elem_type = v->elem_type;
    *n = v->n;
    return 0;
}

void gguf_arr_str(const gguf_t *g, const char *key, uint64_t i, const char **s, size_t *len)
{
    const gguf_value_t *v = gguf_find_value(g, key);
    GUILD_ASSERT(v && v->type == GGUF_VALUE_ARRAY && v->elem_type == GGUF_VALUE_STRING && i < v->n);
    gguf_value_t e = gguf_value_at(v, i);
    gguf_value_str(&e, s, len);
}

/* The numeric array at `key` with exactly n elements, or NULL with a message. */
static const gguf_value_t *numeric_array(const gguf_t *g, const char *key, uint64_t n, guild_err_t *err)
{
    const gguf_value_t *v = lookup(g, key, err);
    if (!v)
        return NULL;
    if (v->type != GGUF_VALUE_ARRAY) {
        wrong_type(g, key, v, "an array of numbers", err);
        return NULL;
    }
    if (!gguf_value_type_size(v->elem_type)) {
        guild_err_set(err, "%s: key '%s': an array of %s, expected an array of numbers", g->name, key,
                      gguf_value_type_name(v->elem_type));
        return NULL;
    }
    if (v->n != n) {
        guild_err_set(err, "%s: key '%s': %llu elements, expected %llu", g->name, key, (unsigned long long)v->n,
                      (unsigned long long)n);
        return NULL;
    }
    return v;
}

int gguf_arr_copy_i64(const gguf_t *g, const char *key, int64_t *dst, uint64_t n, guild_err_t *err)
{
    const gguf_value_t *v = numeric_array(g, key, n, err);
    if (!v)
        return -1;
    for (uint64_t i = 0; i < n; i++) {
        gguf_value_t e = gguf_value_at(v, i);
        if (gguf_value_to_int(&e, &dst[i]) == 0)
            continue;
        /* A float element converts when it holds an integer in range; 2^63 itself is out of range. */
        double x;
        if (gguf_value_to_float(&e, &x) == 0 && x == trunc(x) && x >= -0x1p63 && x < 0x1p63) {
            dst[i] = (int64_t)x;
            continue;
        }
        return guild_err_set(err, "%s: key '%s': element %llu (a %s) is not an int64 value", g->name, key,
                             (unsigned long long)i, gguf_value_type_name(e.type));
    }
    return 0;
}

int gguf_arr_copy_f32(const gguf_t *g, const char *key, float *dst, uint64_t n, guild_err_t *err)
{
    const gguf_value_t *v = numeric_array(g, key, n, err);
    if (!v)
        return -1;
    for (uint64_t i = 0; i < n; i++) {
        gguf_value_t e = gguf_value_at(v, i);
        double x;
        if (gguf_value_to_float(&e, &x) < 0)
            return guild_err_set(err, "%s: key '%s': an array of %s, expected an array of numbers", g->name, key,
                                 gguf_value_type_name(e.type));
        if (isfinite(x) && fabs(x) > FLT_MAX)
            return guild_err_set(err, "%s: key '%s': element %llu (%g) is out of the range of float32", g->name,
                                 key, (unsigned long long)i, x);
        dst[i] = (float)x;
    }
    return 0;
}
