/* Tests for core/gguf: the writer's output reads back identically (every value type, string arrays, nested
 * arrays, tensors, alignment), malformed files fail with a message naming the problem, real vocabularies open,
 * large files open in milliseconds, and `guild inspect` prints a file.
 *
 * Built twice: check_gguf (everything but the shared fixtures) and check_gguf_fixtures
 * (-DCHECK_GGUF_FIXTURES_ONLY: the real GGUF vocabularies; exit 77, a visible SKIP, when they are absent). */
#include "core/gguf/gguf.h"
#include "core/gguf/gguf_writer.h"
#include "core/quant/types.h"
#include "tests/check_run.h"

#include <check.h>
#include <dirent.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NAME "test.gguf"

#ifndef CHECK_GGUF_FIXTURES_ONLY

/* --- helpers ---------------------------------------------------------------------------------------------- */

static gguf_writer_t *new_writer(void)
{
    gguf_writer_t *w;
    guild_err_t err;
    ck_assert_msg(gguf_writer_new(&w, &err) == 0, "%s", err.msg);
    return w;
}

static void add_tensor(gguf_writer_t *w, const char *name, uint32_t type, uint32_t n_dims, uint64_t ne0,
                       uint64_t ne1, uint64_t ne2, uint64_t ne3)
{
    guild_err_t err;
    uint64_t ne[4] = {ne0, ne1, ne2, ne3};
    ck_assert_msg(gguf_writer_add_tensor(w, name, type, n_dims, ne, &err) == 0, "%s", err.msg);
}

/* Deterministic bytes for tensor i. */
static uint8_t *tensor_bytes(int64_t i, uint64_t size)
{
    uint8_t *p = malloc(size ? size : 1);
    ck_assert_ptr_nonnull(p);
    for (uint64_t k = 0; k < size; k++)
        p[k] = (uint8_t)(k * 31 + (uint64_t)i * 7 + 1);
    return p;
}

/* Finishes a writer into a memory image, writing tensor_bytes() for every tensor; destroys the writer. */
static uint8_t *finish_memory(gguf_writer_t *w, size_t *size)
{
    guild_err_t err;
    ck_assert_msg(gguf_writer_begin_memory(w, &err) == 0, "%s", err.msg);
    for (int64_t i = 0; i < gguf_writer_n_tensors(w); i++) {
        uint64_t n = gguf_writer_tensor_size(w, i);
        uint8_t *d = tensor_bytes(i, n);
        ck_assert_msg(gguf_writer_write_tensor(w, i, d, n, &err) == 0, "%s", err.msg);
        free(d);
    }
    ck_assert_msg(gguf_writer_finish(w, &err) == 0, "%s", err.msg);
    void *buf;
    gguf_writer_take_memory(w, &buf, size);
    gguf_writer_destroy(&w);
    return buf;
}

static gguf_t *open_ok(const void *buf, size_t size)
{
    gguf_t *g;
    guild_err_t err;
    ck_assert_msg(gguf_new_from_memory(&g, buf, size, NAME, &err) == 0, "%s", err.msg);
    return g;
}

/* Opens a copy of buf[0..size) in an allocation of exactly that size (so that ASan sees any overread), and
 * checks that it fails with a message naming the file and containing `expect` (NULL: any message). */
static void expect_fail(const uint8_t *buf, size_t size, const char *expect)
{
    uint8_t *copy = malloc(size ? size : 1);
    ck_assert_ptr_nonnull(copy);
    if (size)
        memcpy(copy, buf, size);
    gguf_t *g = (gguf_t *)1;
    guild_err_t err = {{0}};
    int rc = gguf_new_from_memory(&g, copy, size, NAME, &err);
    free(copy);
    ck_assert_msg(rc == -1, "a malformed file (%zu bytes) opened; expected \"%s\"", size, expect ? expect : "");
    ck_assert_ptr_null(g);
    ck_assert_msg(!strncmp(err.msg, NAME ": ", strlen(NAME) + 2), "message does not name the file: %s", err.msg);
    if (expect)
        ck_assert_msg(strstr(err.msg, expect), "message \"%s\" lacks \"%s\"", err.msg, expect);
}

/* Offset of the first occurrence of needle (as bytes, without its NUL) in buf. */
static size_t find(const uint8_t *buf, size_t size, const char *needle)
{
    size_t n = strlen(needle);
    for (size_t i = 0; i + n <= size; i++)
        if (!memcmp(buf + i, needle, n))
            return i;
    ck_abort_msg("'%s' not found in the image", needle);
    return 0;
}

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* A small valid file with some of everything. The last tensor's size is a multiple of the alignment, so the
 * file has no trailing padding: every proper prefix of it is invalid. */
static uint8_t *small_file(size_t *size)
{
    gguf_writer_t *w = new_writer();
    gguf_writer_set_str(w, "general.architecture", "test");
    gguf_writer_set_u32(w, "test.u32", 7);
    gguf_writer_set_bool(w, "test.flag", true);
    uint32_t arr[3] = {1, 2, 3};
    gguf_writer_set_arr(w, "test.arr", GGUF_VALUE_UINT32, arr, 3);
    const char *strs[3] = {"a", "", "ccc"};
    gguf_writer_set_arr_str(w, "test.strs", strs, NULL, 3);
    gguf_wvalue_t *outer = gguf_wvalue_arr_new(GGUF_VALUE_ARRAY);
    gguf_wvalue_t *inner = gguf_wvalue_arr_new(GGUF_VALUE_INT16);
    int16_t s16[2] = {-1, 5};
    gguf_wvalue_push(inner, s16, 2);
    gguf_wvalue_push_arr(outer, &inner);
    ck_assert_int_eq(gguf_writer_set_value(w, "test.nested", &outer), 0);
    add_tensor(w, "t.q8", GUILD_TYPE_Q8_0, 2, 32, 2, 1, 1); /* 68 bytes, padded to 96 */
    add_tensor(w, "t.f32", GUILD_TYPE_F32, 1, 8, 1, 1, 1); /* 32 bytes */
    return finish_memory(w, size);
}

/* --- round trip -------------------------------------------------------------------------------------------- */

START_TEST(test_scalars_round_trip)
{
    gguf_writer_t *w = new_writer();
    ck_assert_int_eq(gguf_writer_set_u8(w, "u8", 250), 0);
    gguf_writer_set_i8(w, "i8", -128);
    gguf_writer_set_u16(w, "u16", 65535);
    gguf_writer_set_i16(w, "i16", -32768);
    gguf_writer_set_u32(w, "u32", 4000000000u);
    gguf_writer_set_i32(w, "i32", INT32_MIN);
    gguf_writer_set_f32(w, "f32", 0.1f);
    gguf_writer_set_bool(w, "bool", true);
    gguf_writer_set_str(w, "str", "hello");
    gguf_writer_set_u64(w, "u64", UINT64_MAX);
    gguf_writer_set_i64(w, "i64", INT64_MIN);
    gguf_writer_set_f64(w, "f64", -1e300);
    gguf_writer_set_strn(w, "str.nul", "a\0b", 3);
    gguf_writer_set_str(w, "str.empty", "");
    gguf_writer_set_u32(w, "replaced", 1);
    gguf_writer_set_str(w, "replaced", "now a string"); /* keeps its place */
    size_t size;
    uint8_t *buf = finish_memory(w, &size);
    gguf_t *g = open_ok(buf, size);

    ck_assert_uint_eq(gguf_version(g), 3);
    ck_assert_uint_eq(gguf_alignment(g), 32);
    ck_assert_int_eq(gguf_n_kv(g), 15);
    ck_assert_int_eq(gguf_n_tensors(g), 0);
    static const char *order[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool",
                                  "str", "u64", "i64", "f64", "str.nul", "str.empty", "replaced"};
    static const gguf_value_type_t types[] = {
        GGUF_VALUE_UINT8, GGUF_VALUE_INT8,  GGUF_VALUE_UINT16, GGUF_VALUE_INT16,   GGUF_VALUE_UINT32,
        GGUF_VALUE_INT32, GGUF_VALUE_FLOAT32, GGUF_VALUE_BOOL, GGUF_VALUE_STRING, GGUF_VALUE_UINT64,
        GGUF_VALUE_INT64, GGUF_VALUE_FLOAT64, GGUF_VALUE_STRING, GGUF_VALUE_STRING, GGUF_VALUE_STRING};
    for (int i = 0; i < 15; i++) {
        ck_assert_str_eq(gguf_kv_key(g, i), order[i]);
        ck_assert_int_eq(gguf_kv_type(g, i), types[i]);
        ck_assert_int_eq(gguf_find_key(g, order[i]), i);
    }
    ck_assert_int_eq(gguf_find_key(g, "absent"), -1);

    guild_err_t err;
    int64_t i64;
    uint64_t u64;
    double f;
    bool b;
    const char *s;
    size_t len;
    ck_assert_int_eq(gguf_get_uint(g, "u8", &u64, &err), 0);
    ck_assert_uint_eq(u64, 250);
    ck_assert_int_eq(gguf_get_int(g, "i8", &i64, &err), 0);
    ck_assert_int_eq(i64, -128);
    ck_assert_int_eq(gguf_get_uint(g, "u16", &u64, &err), 0);
    ck_assert_uint_eq(u64, 65535);
    ck_assert_int_eq(gguf_get_int(g, "i16", &i64, &err), 0);
    ck_assert_int_eq(i64, -32768);
    ck_assert_int_eq(gguf_get_uint(g, "u32", &u64, &err), 0);
    ck_assert_uint_eq(u64, 4000000000u);
    ck_assert_int_eq(gguf_get_int(g, "i32", &i64, &err), 0);
    ck_assert_int_eq(i64, INT32_MIN);
    ck_assert_int_eq(gguf_get_float(g, "f32", &f, &err), 0);
    ck_assert(f == (double)0.1f);
    ck_assert_int_eq(gguf_get_bool(g, "bool", &b, &err), 0);
    ck_assert(b);
    ck_assert_int_eq(gguf_get_str(g, "str", &s, &len, &err), 0);
    ck_assert_uint_eq(len, 5);
    ck_assert(!memcmp(s, "hello", 5));
    ck_assert_int_eq(gguf_get_uint(g, "u64", &u64, &err), 0);
    ck_assert_uint_eq(u64, UINT64_MAX);
    ck_assert_int_eq(gguf_get_int(g, "i64", &i64, &err), 0);
    ck_assert(i64 == INT64_MIN);
    ck_assert_int_eq(gguf_get_float(g, "f64", &f, &err), 0);
    ck_assert(f == -1e300);
    ck_assert_int_eq(gguf_get_str(g, "str.nul", &s, &len, &err), 0);
    ck_assert_uint_eq(len, 3);
    ck_assert(!memcmp(s, "a\0b", 3));
    ck_assert_int_eq(gguf_get_str(g, "str.empty", &s, &len, &err), 0);
    ck_assert_uint_eq(len, 0);
    ck_assert_int_eq(gguf_get_str(g, "replaced", &s, &len, &err), 0);
    ck_assert(len == 12 && !memcmp(s, "now a string", 12));
    gguf_destroy(&g);
    ck_assert_ptr_null(g);
    gguf_destroy(&g); /* NULL-safe */
    free(buf);
}
END_TEST

START_TEST(test_getter_conversions)
{
    gguf_writer_t *w = new_writer();
    gguf_writer_set_u64(w, "big", UINT64_MAX);
    gguf_writer_set_i32(w, "neg", -5);
    gguf_writer_set_u8(w, "small", 3);
    gguf_writer_set_bool(w, "flag", true);
    gguf_writer_set_str(w, "s", "x");
    gguf_writer_set_f32(w, "f", 2.5f);
    double d3[3] = {1, -2, 3.5};
    gguf_writer_set_arr(w, "f64s", GGUF_VALUE_FLOAT64, d3, 3);
    double dbig[1] = {1e300};
    gguf_writer_set_arr(w, "f64big", GGUF_VALUE_FLOAT64, dbig, 1);
    uint64_t ubig[2] = {1, UINT64_MAX};
    gguf_writer_set_arr(w, "u64s", GGUF_VALUE_UINT64, ubig, 2);
    int8_t i8s[3] = {-1, 0, 127};
    gguf_writer_set_arr(w, "i8s", GGUF_VALUE_INT8, i8s, 3);
    const char *strs[1] = {"a"};
    gguf_writer_set_arr_str(w, "strs", strs, NULL, 1);
    size_t size;
    uint8_t *buf = finish_memory(w, &size);
    gguf_t *g = open_ok(buf, size);
    guild_err_t err;
    int64_t i64;
    uint64_t u64;
    double f;
    bool b;
    const char *s;
    size_t len;

    ck_assert_int_eq(gguf_get_int(g, "big", &i64, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "does not fit in int64"));
    ck_assert_ptr_nonnull(strstr(err.msg, "key 'big'"));
    ck_assert_int_eq(gguf_get_uint(g, "neg", &u64, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "-5 is negative"));
    ck_assert_int_eq(gguf_get_int(g, "neg", &i64, &err), 0);
    ck_assert_int_eq(i64, -5);
    ck_assert_int_eq(gguf_get_float(g, "small", &f, &err), 0);
    ck_assert(f == 3.0);
    ck_assert_int_eq(gguf_get_int(g, "flag", &i64, &err), 0);
    ck_assert_int_eq(i64, 1);
    ck_assert_int_eq(gguf_get_bool(g, "small", &b, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "a uint8, expected a bool"));
    ck_assert_int_eq(gguf_get_str(g, "small", &s, &len, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "expected a string"));
    ck_assert_int_eq(gguf_get_int(g, "s", &i64, &err), -1);
    ck_assert_int_eq(gguf_get_int(g, "f", &i64, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "a float32, expected an integer"));
    ck_assert_int_eq(gguf_get_float(g, "missing", &f, &err), -1);
    ck_assert_str_eq(err.msg, NAME ": key 'missing' not found");

    gguf_value_type_t et;
    uint64_t n;
    ck_assert_int_eq(gguf_get_arr(g, "s", &et, &n, &err), -1);
    ck_assert_int_eq(gguf_get_arr(g, "f64s", &et, &n, &err), 0);
    ck_assert(et == GGUF_VALUE_FLOAT64 && n == 3);
    int64_t iv[3];
    float fv[3];
    ck_assert_int_eq(gguf_arr_copy_i64(g, "f64s", iv, 3, &err), -1); /* 3.5 is not an integer */
    ck_assert_ptr_nonnull(strstr(err.msg, "element 2"));
    ck_assert_int_eq(gguf_arr_copy_f32(g, "f64s", fv, 3, &err), 0);
    ck_assert(fv[0] == 1.0f && fv[1] == -2.0f && fv[2] == 3.5f);
    ck_assert_int_eq(gguf_arr_copy_f32(g, "f64s", fv, 2, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "3 elements, expected 2"));
    ck_assert_int_eq(gguf_arr_copy_f32(g, "f64big", fv, 1, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "out of the range of float32"));
    ck_assert_int_eq(gguf_arr_copy_i64(g, "u64s", iv, 2, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "element 1"));
    ck_assert_int_eq(gguf_arr_copy_i64(g, "i8s", iv, 3, &err), 0);
    ck_assert(iv[0] == -1 && iv[1] == 0 && iv[2] == 127);
    ck_assert_int_eq(gguf_arr_copy_i64(g, "strs", iv, 1, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "an array of string, expected an array of numbers"));
    ck_assert_int_eq(gguf_arr_copy_i64(g, "small", iv, 1, &err), -1);
    gguf_destroy(&g);
    free(buf);
}
END_TEST

START_TEST(test_arrays_round_trip)
{
    gguf_writer_t *w = new_writer();
    uint8_t u8[3] = {0, 128, 255};
    int8_t i8[2] = {-128, 127};
    uint16_t u16[2] = {0, 65535};
    int16_t i16[2] = {-32768, 32767};
    uint32_t u32[2] = {0, UINT32_MAX};
    int32_t i32[2] = {INT32_MIN, INT32_MAX};
    float f32[3] = {-0.0f, 1.5f, FLT_MAX};
    bool bl[3] = {true, false, true};
    uint64_t u64[2] = {0, UINT64_MAX};
    int64_t i64[2] = {INT64_MIN, INT64_MAX};
    double f64[2] = {DBL_MIN, -DBL_MAX};
    gguf_writer_set_arr(w, "a.u8", GGUF_VALUE_UINT8, u8, 3);
    gguf_writer_set_arr(w, "a.i8", GGUF_VALUE_INT8, i8, 2);
    gguf_writer_set_arr(w, "a.u16", GGUF_VALUE_UINT16, u16, 2);
    gguf_writer_set_arr(w, "a.i16", GGUF_VALUE_INT16, i16, 2);
    gguf_writer_set_arr(w, "a.u32", GGUF_VALUE_UINT32, u32, 2);
    gguf_writer_set_arr(w, "a.i32", GGUF_VALUE_INT32, i32, 2);
    gguf_writer_set_arr(w, "a.f32", GGUF_VALUE_FLOAT32, f32, 3);
    gguf_writer_set_arr(w, "a.bool", GGUF_VALUE_BOOL, bl, 3);
    gguf_writer_set_arr(w, "a.u64", GGUF_VALUE_UINT64, u64, 2);
    gguf_writer_set_arr(w, "a.i64", GGUF_VALUE_INT64, i64, 2);
    gguf_writer_set_arr(w, "a.f64", GGUF_VALUE_FLOAT64, f64, 2);
    gguf_writer_set_arr(w, "a.empty", GGUF_VALUE_UINT32, NULL, 0);
    const char *strs[4] = {"alpha", "", "\xe4\xb8\xad", "x\0y"};
    size_t lens[4] = {5, 0, 3, 3};
    gguf_writer_set_arr_str(w, "a.str", strs, lens, 4);
    gguf_writer_set_arr_str(w, "a.str.empty", NULL, NULL, 0);
    /* [[1, 2], [], [3]] of uint32; [["x"], ["y", "zz"]]; [[[-1.5]]] three deep; an empty array of arrays */
    gguf_wvalue_t *nu = gguf_wvalue_arr_new(GGUF_VALUE_ARRAY);
    gguf_wvalue_t *in = gguf_wvalue_arr_new(GGUF_VALUE_UINT32);
    uint32_t v12[2] = {1, 2}, v3 = 3;
    gguf_wvalue_push(in, v12, 2);
    gguf_wvalue_push_arr(nu, &in);
    ck_assert_ptr_null(in);
    in = gguf_wvalue_arr_new(GGUF_VALUE_UINT32);
    gguf_wvalue_push_arr(nu, &in);
    in = gguf_wvalue_arr_new(GGUF_VALUE_UINT32);
    gguf_wvalue_push(in, &v3, 1);
    gguf_wvalue_push_arr(nu, &in);
    ck_assert_int_eq(gguf_writer_set_value(w, "n.u32", &nu), 0);
    ck_assert_ptr_null(nu);
    gguf_wvalue_t *ns = gguf_wvalue_arr_new(GGUF_VALUE_ARRAY);
    in = gguf_wvalue_arr_new(GGUF_VALUE_STRING);
    gguf_wvalue_push_str(in, "x", 1);
    gguf_wvalue_push_arr(ns, &in);
    in = gguf_wvalue_arr_new(GGUF_VALUE_STRING);
    gguf_wvalue_push_str(in, "y", 1);
    gguf_wvalue_push_str(in, "zz", 2);
    gguf_wvalue_push_arr(ns, &in);
    gguf_writer_set_value(w, "n.str", &ns);
    gguf_wvalue_t *deep = gguf_wvalue_arr_new(GGUF_VALUE_ARRAY);
    gguf_wvalue_t *mid = gguf_wvalue_arr_new(GGUF_VALUE_ARRAY);
    gguf_wvalue_t *leaf = gguf_wvalue_arr_new(GGUF_VALUE_FLOAT32);
    float m15 = -1.5f;
    gguf_wvalue_push(leaf, &m15, 1);
    gguf_wvalue_push_arr(mid, &leaf);
    gguf_wvalue_push_arr(deep, &mid);
    gguf_writer_set_value(w, "n.deep", &deep);
    gguf_wvalue_t *none = gguf_wvalue_arr_new(GGUF_VALUE_ARRAY);
    gguf_writer_set_value(w, "n.empty", &none);
    size_t size;
    uint8_t *buf = finish_memory(w, &size);
    gguf_t *g = open_ok(buf, size);
    guild_err_t err;

    const void *expect[] = {u8, i8, u16, i16, u32, i32, f32, bl, u64, i64, f64};
    static const char *keys[] = {"a.u8", "a.i8", "a.u16", "a.i16", "a.u32", "a.i32",
                                 "a.f32", "a.bool", "a.u64", "a.i64", "a.f64"};
    for (int k = 0; k < 11; k++) {
        const gguf_value_t *v = gguf_find_value(g, keys[k]);
        ck_assert_ptr_nonnull(v);
        ck_assert_int_eq(v->type, GGUF_VALUE_ARRAY);
        ck_assert_int_eq(v->elem_type, (gguf_value_type_t)(k < 7 ? k : k == 7 ? 7 : k + 2));
        size_t es = gguf_value_type_size(v->elem_type);
        for (uint64_t i = 0; i < v->n; i++) {
            gguf_value_t e = gguf_value_at(v, i);
            ck_assert_int_eq(e.type, v->elem_type);
            ck_assert_msg(!memcmp(e.data, (const uint8_t *)expect[k] + i * es, es), "%s[%llu]", keys[k],
                          (unsigned long long)i);
        }
    }
    int64_t iv[3];
    ck_assert_int_eq(gguf_arr_copy_i64(g, "a.i64", iv, 2, &err), 0);
    ck_assert(iv[0] == INT64_MIN && iv[1] == INT64_MAX);
    ck_assert_int_eq(gguf_arr_copy_i64(g, "a.bool", iv, 3, &err), 0);
    ck_assert(iv[0] == 1 && iv[1] == 0 && iv[2] == 1);
    ck_assert_int_eq(gguf_arr_copy_i64(g, "a.u32", iv, 2, &err), 0);
    ck_assert(iv[1] == UINT32_MAX);
    float fv[3];
    ck_assert_int_eq(gguf_arr_copy_f32(g, "a.f32", fv, 3, &err), 0);
    ck_assert(!memcmp(fv, f32, sizeof fv));
    ck_assert_int_eq(gguf_arr_copy_i64(g, "a.empty", iv, 0, &err), 0);

    gguf_value_type_t et;
    uint64_t n;
    ck_assert_int_eq(gguf_get_arr(g, "a.str", &et, &n, &err), 0);
    ck_assert(et == GGUF_VALUE_STRING && n == 4);
    for (uint64_t i = 0; i < 4; i++) {
        const char *s;
        size_t len;
        gguf_arr_str(g, "a.str", i, &s, &len);
        ck_assert_uint_eq(len, lens[i]);
        ck_assert(!memcmp(s, strs[i], len));
    }
    ck_assert_int_eq(gguf_get_arr(g, "a.str.empty", &et, &n, &err), 0);
    ck_assert(et == GGUF_VALUE_STRING && n == 0);

    const gguf_value_t *v = gguf_find_value(g, "n.u32");
    ck_assert(v->type == GGUF_VALUE_ARRAY && v->elem_type == GGUF_VALUE_ARRAY && v->n == 3);
    gguf_value_t e0 = gguf_value_at(v, 0), e1 = gguf_value_at(v, 1), e2 = gguf_value_at(v, 2);
    ck_assert(e0.elem_type == GGUF_VALUE_UINT32 && e0.n == 2 && e1.n == 0 && e2.n == 1);
    uint64_t u;
    gguf_value_t x = gguf_value_at(&e0, 1);
    ck_assert(gguf_value_to_uint(&x, &u) == 0 && u == 2);
    x = gguf_value_at(&e2, 0);
    ck_assert(gguf_value_to_uint(&x, &u) == 0 && u == 3);

    v = gguf_find_value(g, "n.str");
    ck_assert_uint_eq(v->n, 2);
    e1 = gguf_value_at(v, 1);
    ck_assert(e1.elem_type == GGUF_VALUE_STRING && e1.n == 2);
    x = gguf_value_at(&e1, 1);
    const char *s;
    size_t len;
    gguf_value_str(&x, &s, &len);
    ck_assert(len == 2 && !memcmp(s, "zz", 2));

    v = gguf_find_value(g, "n.deep");
    gguf_value_t l1 = gguf_value_at(v, 0);
    gguf_value_t l2 = gguf_value_at(&l1, 0);
    gguf_value_t l3 = gguf_value_at(&l2, 0);
    double f;
    ck_assert(l1.elem_type == GGUF_VALUE_ARRAY && l2.elem_type == GGUF_VALUE_FLOAT32);
    ck_assert(gguf_value_to_float(&l3, &f) == 0 && f == -1.5);
    v = gguf_find_value(g, "n.empty");
    ck_assert(v->elem_type == GGUF_VALUE_ARRAY && v->n == 0);
    gguf_destroy(&g);
    free(buf);
}
END_TEST

START_TEST(test_tensors_round_trip)
{
    gguf_writer_t *w = new_writer();
    gguf_writer_set_u32(w, "general.alignment", 64);
    add_tensor(w, "tok_embd.weight", GUILD_TYPE_F16, 2, 16, 10, 1, 1);
    add_tensor(w, "blk.0.ffn_up_exps.weight", GUILD_TYPE_Q4_K, 3, 256, 3, 4, 1);
    add_tensor(w, "blk.0.attn_q.weight", GUILD_TYPE_Q8_0, 4, 64, 2, 3, 2);
    add_tensor(w, "blk.0.norm", GUILD_TYPE_F32, 1, 5, 1, 1, 1);
    add_tensor(w, "mx", GUILD_TYPE_MXFP4, 2, 32, 3, 1, 1);
    size_t size;
    uint8_t *buf = finish_memory(w, &size);
    gguf_t *g = open_ok(buf, size);
    ck_assert_uint_eq(gguf_alignment(g), 64);
    ck_assert_uint_eq(gguf_data_offset(g) % 64, 0);
    ck_assert_int_eq(gguf_n_tensors(g), 5);
    static const struct {
        const char *name;
        uint32_t type, n_dims;
        uint64_t ne[4], size;
    } want[] = {
        {"tok_embd.weight", GUILD_TYPE_F16, 2, {16, 10, 1, 1}, 320},
        {"blk.0.ffn_up_exps.weight", GUILD_TYPE_Q4_K, 3, {256, 3, 4, 1}, 144 * 12},
        {"blk.0.attn_q.weight", GUILD_TYPE_Q8_0, 4, {64, 2, 3, 2}, 68 * 12},
        {"blk.0.norm", GUILD_TYPE_F32, 1, {5, 1, 1, 1}, 20},
        {"mx", GUILD_TYPE_MXFP4, 2, {32, 3, 1, 1}, 51},
    };
    for (int64_t i = 0; i < 5; i++) {
        const gguf_tensor_t *t = gguf_tensor(g, i);
        ck_assert_str_eq(t->name, want[i].name);
        ck_assert_ptr_eq(gguf_find_tensor(g, want[i].name), t);
        ck_assert_uint_eq(t->type, want[i].type);
        ck_assert_uint_eq(t->n_dims, want[i].n_dims);
        for (int d = 0; d < 4; d++)
            ck_assert_uint_eq(t->ne[d], want[i].ne[d]);
        ck_assert_uint_eq(t->size, want[i].size);
        ck_assert_uint_eq((t->offset - gguf_data_offset(g)) % 64, 0);
        ck_assert_ptr_eq(t->data, buf + t->offset);
        uint8_t *d = tensor_bytes(i, t->size);
        ck_assert(!memcmp(t->data, d, t->size));
        free(d);
    }
    ck_assert_ptr_null(gguf_find_tensor(g, "blk.0"));
    /* The last tensor is padded too, as ggml writes it. */
    ck_assert_uint_eq(size, gguf_tensor(g, 4)->offset + 64);
    gguf_destroy(&g);
    free(buf);
}
END_TEST

START_TEST(test_file_round_trip_streaming)
{
    char path[] = "/tmp/check_gguf_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    gguf_writer_t *w = new_writer();
    gguf_writer_set_str(w, "general.name", "streamed");
    add_tensor(w, "small", GUILD_TYPE_F32, 1, 3, 1, 1, 1);
    add_tensor(w, "big", GUILD_TYPE_Q8_0, 2, 4096, 300, 1, 1);  /* 1.3 MB: bypasses the staging buffer */
    add_tensor(w, "tail", GUILD_TYPE_BF16, 2, 7, 9, 1, 1);
    guild_err_t err;
    ck_assert_msg(gguf_writer_begin(w, path, &err) == 0, "%s", err.msg);
    uint64_t total = 0;
    for (int64_t i = 0; i < 3; i++)
        total += gguf_writer_tensor_size(w, i);
    /* All data in uneven chunks that span tensor boundaries. */
    uint8_t *all = malloc(total);
    uint64_t o = 0;
    for (int64_t i = 0; i < 3; i++) {
        uint64_t n = gguf_writer_tensor_size(w, i);
        uint8_t *d = tensor_bytes(i, n);
        memcpy(all + o, d, n);
        o += n;
        free(d);
    }
    for (uint64_t at = 0, chunk = 5; at < total; at += chunk, chunk = chunk * 3 + 1) {
        uint64_t n = total - at < chunk ? total - at : chunk;
        ck_assert_msg(gguf_writer_write(w, all + at, n, &err) == 0, "%s", err.msg);
    }
    free(all);
    ck_assert_msg(gguf_writer_finish(w, &err) == 0, "%s", err.msg);
    uint64_t off_big = gguf_writer_tensor_offset(w, 1);
    gguf_writer_destroy(&w);
    ck_assert_ptr_null(w);

    gguf_t *g;
    ck_assert_msg(gguf_new(&g, path, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(gguf_path(g), path);
    ck_assert_uint_eq(gguf_tensor(g, 1)->offset, off_big);
    for (int64_t i = 0; i < 3; i++) {
        const gguf_tensor_t *t = gguf_tensor(g, i);
        uint8_t *d = tensor_bytes(i, t->size);
        ck_assert_msg(!memcmp(t->data, d, t->size), "tensor %s", t->name);
        free(d);
    }
    const char *s;
    size_t len;
    ck_assert_int_eq(gguf_get_str(g, "general.name", &s, &len, &err), 0);
    ck_assert(len == 8 && !memcmp(s, "streamed", 8));
    gguf_destroy(&g);
    unlink(path);
}
END_TEST

START_TEST(test_copy_values_between_files)
{
    size_t size;
    uint8_t *buf = small_file(&size);
    gguf_t *g = open_ok(buf, size);
    gguf_writer_t *w = new_writer();
    for (int64_t i = 0; i < gguf_n_kv(g); i++)
        ck_assert_int_eq(gguf_writer_set_copy(w, gguf_kv_key(g, i), gguf_kv_value(g, i)), 0);
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor_t *t = gguf_tensor(g, i);
        add_tensor(w, t->name, t->type, t->n_dims, t->ne[0], t->ne[1], t->ne[2], t->ne[3]);
    }
    size_t size2;
    uint8_t *buf2 = finish_memory(w, &size2);
    /* The same values and tensors with the same bytes: the same file. */
    ck_assert_uint_eq(size2, size);
    ck_assert(!memcmp(buf, buf2, size));
    gguf_destroy(&g);
    free(buf);
    free(buf2);
}
END_TEST

START_TEST(test_version_2_reads)
{
    size_t size;
    uint8_t *buf = small_file(&size);
    put_u32(buf + 4, 2);
    gguf_t *g = open_ok(buf, size);
    ck_assert_uint_eq(gguf_version(g), 2);
    ck_assert_int_eq(gguf_n_tensors(g), 2);
    gguf_destroy(&g);
    free(buf);
}
END_TEST

/* --- writer misuse ----------------------------------------------------------------------------------------- */

START_TEST(test_writer_rejects_misuse)
{
    gguf_writer_t *w = new_writer();
    guild_err_t err;
    uint64_t ne[4] = {33, 1, 1, 1};
    ck_assert_int_eq(gguf_writer_add_tensor(w, "q", GUILD_TYPE_Q4_0, 1, ne, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "not a whole number of q4_0 blocks"));
    ck_assert_int_eq(gguf_writer_add_tensor(w, "q", 4, 1, ne, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "unknown tensor type 4"));
    ck_assert_int_eq(gguf_writer_add_tensor(w, "q", GUILD_TYPE_F32, 5, ne, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "n_dims 5"));
    ne[1] = 0;
    ck_assert_int_eq(gguf_writer_add_tensor(w, "q", GUILD_TYPE_F32, 2, ne, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "dimension 1 (0)"));
    ne[1] = 1;
    char long_name[65];
    memset(long_name, 'n', 64);
    long_name[64] = '\0';
    ck_assert_int_eq(gguf_writer_add_tensor(w, long_name, GUILD_TYPE_F32, 1, ne, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "1 to 63 bytes"));
    ck_assert_int_eq(gguf_writer_add_tensor(w, "q", GUILD_TYPE_F32, 1, ne, &err), 0);
    ck_assert_int_eq(gguf_writer_add_tensor(w, "q", GUILD_TYPE_F32, 1, ne, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "declared twice"));
    add_tensor(w, "r", GUILD_TYPE_F32, 1, 2, 1, 1, 1);

    ck_assert_msg(gguf_writer_begin_memory(w, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(gguf_writer_set_u32(w, "late", 1), -1);
    ck_assert_int_eq(gguf_writer_add_tensor(w, "late", GUILD_TYPE_F32, 1, ne, &err), -1);
    float d[33] = {0};
    ck_assert_int_eq(gguf_writer_write_tensor(w, 1, d, 8, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "out of order"));
    ck_assert_int_eq(gguf_writer_write_tensor(w, 0, d, 8, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "its size is 132"));
    ck_assert_int_eq(gguf_writer_write(w, d, 100, &err), 0);
    ck_assert_int_eq(gguf_writer_finish(w, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "tensor 'q' (#0) has 100 of its 132 bytes written"));
    ck_assert_int_eq(gguf_writer_write(w, d, 32 + 8, &err), 0);
    ck_assert_int_eq(gguf_writer_write(w, d, 1, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "more than declared"));
    ck_assert_int_eq(gguf_writer_finish(w, &err), 0);
    gguf_writer_destroy(&w);

    /* A failed setter is reported by begin. */
    w = new_writer();
    ck_assert_int_eq(gguf_writer_set_arr(w, "bad", GGUF_VALUE_STRING, NULL, 0), -1);
    gguf_writer_set_u32(w, "fine", 1);
    ck_assert_int_eq(gguf_writer_begin_memory(w, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "key 'bad'"));
    gguf_writer_destroy(&w);

    w = new_writer();
    gguf_wvalue_t *a = gguf_wvalue_arr_new(GGUF_VALUE_UINT32);
    ck_assert_int_eq(gguf_wvalue_push_str(a, "x", 1), -1);
    ck_assert_int_eq(gguf_writer_set_value(w, "built", &a), -1);
    ck_assert_int_eq(gguf_writer_begin_memory(w, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "pushing a string to an array of uint32"));
    gguf_writer_destroy(&w);

    w = new_writer();
    gguf_writer_set_u32(w, "general.alignment", 48);
    ck_assert_int_eq(gguf_writer_begin_memory(w, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "power of two"));
    gguf_writer_destroy(&w);

    /* A file begun and not finished is removed. */
    char path[] = "/tmp/check_gguf_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    w = new_writer();
    add_tensor(w, "x", GUILD_TYPE_F32, 1, 4, 1, 1, 1);
    ck_assert_int_eq(gguf_writer_begin(w, path, &err), 0);
    gguf_writer_destroy(&w);
    ck_assert_int_eq(access(path, F_OK), -1);

    w = new_writer();
    ck_assert_int_eq(gguf_writer_begin(w, "/nonexistent-dir/x.gguf", &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "/nonexistent-dir/x.gguf: cannot create"));
    gguf_writer_destroy(&w);
}
END_TEST

/* --- malformed files ---------------------------------------------------------------------------------------- */

START_TEST(test_every_truncation_fails)
{
    size_t size;
    uint8_t *buf = small_file(&size);
    gguf_t *g = open_ok(buf, size);
    gguf_destroy(&g);
    for (size_t n = 0; n < size; n++)
        expect_fail(buf, n, NULL);
    /* The messages say what went wrong where, for a few sections. */
    expect_fail(buf, 2, "too short for the magic");
    expect_fail(buf, 6, "truncated: the version");
    expect_fail(buf, 20, "truncated: the tensor and metadata counts");
    expect_fail(buf, 30, "impossible");
    expect_fail(buf, find(buf, size, "ccc") + 1, "string element 2 of 3 bytes goes past the end");
    size_t data = size - 32;
    expect_fail(buf, data, "goes past the end of the file");
    free(buf);
}
END_TEST

START_TEST(test_bad_headers)
{
    size_t size;
    uint8_t *buf = small_file(&size);
    uint8_t *m = malloc(size);
    memcpy(m, buf, size);
    memcpy(m, "GGUX", 4);
    expect_fail(m, size, "bad magic 47 47 55 58");
    memcpy(m, "tjgg", 4);
    expect_fail(m, size, "legacy GGML/GGMF/GGJT");
    memcpy(m, buf, size);
    put_u32(m + 4, 1);
    expect_fail(m, size, "GGUF version 1 is not supported");
    put_u32(m + 4, 4);
    expect_fail(m, size, "unknown GGUF version 4");
    put_u32(m + 4, 0);
    expect_fail(m, size, "unknown GGUF version 0");
    put_u32(m + 4, 0x03000000);
    expect_fail(m, size, "big-endian");
    memcpy(m, buf, size);
    put_u64(m + 16, 1ull << 62);
    expect_fail(m, size, "metadata count 4611686018427387904 is impossible");
    memcpy(m, buf, size);
    put_u64(m + 8, UINT64_MAX);
    expect_fail(m, size, "tensor count 18446744073709551615 is impossible");
    expect_fail(m, 0, "too short");
    free(m);
    free(buf);
}
END_TEST

/* Patches a copy of the small file at (offset of `anchor`) + delta and expects the failure `expect`. */
static void patch_u32(const char *anchor, long delta, uint32_t v, const char *expect)
{
    size_t size;
    uint8_t *buf = small_file(&size);
    put_u32(buf + find(buf, size, anchor) + delta, v);
    expect_fail(buf, size, expect);
    free(buf);
}

static void patch_u64(const char *anchor, long delta, uint64_t v, const char *expect)
{
    size_t size;
    uint8_t *buf = small_file(&size);
    put_u64(buf + find(buf, size, anchor) + delta, v);
    expect_fail(buf, size, expect);
    free(buf);
}

START_TEST(test_bad_metadata)
{
    /* Key layout: u64 length, bytes, u32 type, value. */
    const long after_key = (long)strlen("general.architecture");
    patch_u64("general.architecture", -8, 1ull << 40, "a key of 1099511627776 bytes goes past the end");
    patch_u64("general.architecture", after_key + 4, 1ull << 40,
              "offset 56: key 'general.architecture': a string of 1099511627776 bytes goes past the end");
    patch_u32("general.architecture", after_key, 13, "key 'general.architecture': unknown value type 13");
    patch_u32("test.u32", 8, 0xffffffffu, "unknown value type 4294967295");
    /* test.arr: type ARRAY, then element type u32 and a count. */
    patch_u32("test.arr", 8 + 4, 99, "key 'test.arr': unknown array element type 99");
    patch_u64("test.arr", 8 + 8, 1ull << 62, "array of 4611686018427387904 uint32 elements goes past the end");
    patch_u64("test.arr", 8 + 8, UINT64_MAX, "array of 18446744073709551615 uint32 elements goes past the end");
    patch_u64("test.strs", 9 + 8, 1ull << 61, "array of 2305843009213693952 string elements goes past the end");
    /* the third string ("ccc") claims more bytes than remain */
    patch_u64("ccc", -8, 1ull << 50, "string element 2 of 1125899906842624 bytes goes past the end");
    patch_u64("test.nested", 11 + 8, 1ull << 60, "array of 1152921504606846976 array elements goes past the end");
    /* test.flag: a bool that is neither 0 nor 1 */
    patch_u32("test.flag", 9 + 4, 2, "bool value 2 is neither 0 nor 1");
    /* duplicate key: "test.u32" renamed "test.arr" (same length), the key read after it */
    {
        size_t size;
        uint8_t *buf = small_file(&size);
        memcpy(buf + find(buf, size, "test.u32"), "test.arr", 8);
        expect_fail(buf, size, "key 'test.arr': duplicate key (key #1 and #3)");
        free(buf);
        buf = small_file(&size);
        memcpy(buf + find(buf, size, "test.flag"), "tes\0.flag", 9);
        expect_fail(buf, size, "key 'tes\\x00.flag': contains a NUL byte");
        free(buf);
    }
}
END_TEST

START_TEST(test_bad_alignment)
{
    gguf_writer_t *w = new_writer();
    gguf_writer_set_u32(w, "general.alignment", 32);
    add_tensor(w, "t", GUILD_TYPE_F32, 1, 8, 1, 1, 1);
    size_t size;
    uint8_t *buf = finish_memory(w, &size);
    size_t v = find(buf, size, "general.alignment") + strlen("general.alignment") + 4;
    put_u32(buf + v, 48);
    expect_fail(buf, size, "key 'general.alignment': 48 is not a valid alignment");
    put_u32(buf + v, 0);
    expect_fail(buf, size, "0 is not a valid alignment");
    put_u32(buf + v - 4, GGUF_VALUE_FLOAT32);
    expect_fail(buf, size, "general.alignment': a float32, expected an unsigned integer");
    put_u32(buf + v - 4, GGUF_VALUE_UINT32);
    put_u32(buf + v, 16); /* a valid other alignment: the data section moves, and the offset still fits */
    gguf_t *g = open_ok(buf, size);
    ck_assert_uint_eq(gguf_alignment(g), 16);
    gguf_destroy(&g);
    free(buf);
}
END_TEST

START_TEST(test_bad_tensor_infos)
{
    /* Tensor info layout: u64 name length, name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset.
     * "t.q8": n_dims at +4, ne at +8 and +16, type at +24, offset at +28. "t.f32": ne at +9, type +17,
     * offset +21. */
    patch_u32("t.q8", 4, 5, "tensor 't.q8': n_dims 5 is out of range (1..4)");
    patch_u32("t.q8", 4, 0, "n_dims 0 is out of range");
    patch_u64("t.q8", 16, 0, "tensor 't.q8': dimension 1 is zero");
    patch_u64("t.q8", 8, 0, "dimension 0 is zero");
    patch_u64("t.q8", 8, 1ull << 63, "dimension 0 (9223372036854775808) is larger than INT64_MAX");
    patch_u64("t.q8", 8, 48, "a row of 48 elements is not a whole number of q8_0 blocks");
    patch_u64("t.q8", 16, 1ull << 62, "the element count overflows");
    patch_u32("t.q8", 24, 4, "tensor 't.q8': unknown tensor type 4");
    patch_u32("t.q8", 24, 40, "unknown tensor type 40");
    patch_u32("t.q8", 24, 0xffffffffu, "unknown tensor type 4294967295");
    patch_u64("t.q8", 28, 1, "tensor 't.q8': data offset 1 is not a multiple of the alignment (32)");
    patch_u64("t.f32", 21, 4096, "tensor 't.f32': data (32 bytes at offset 4096");
    patch_u64("t.f32", 21, 4096, "goes past the end of the file");
    patch_u64("t.f32", 21, UINT64_MAX - 31, "goes past the end of the file");
    patch_u64("t.q8", -8, 1ull << 40, "a tensor name of 1099511627776 bytes goes past the end");
    /* t.q8 (68 bytes at 0) and t.f32 (32 bytes at 96) made to share bytes, in either order */
    patch_u64("t.f32", 21, 64, "tensor 't.f32': data at offset");
    patch_u64("t.f32", 21, 64, "overlaps tensor 't.q8' (68 bytes at offset");
    patch_u64("t.f32", 21, 0, "overlaps tensor");
}
END_TEST

START_TEST(test_tensor_order_and_overlap)
{
    /* Data need not be in declaration order, but no two tensors may share bytes. */
    gguf_writer_t *w = new_writer();
    add_tensor(w, "a", GUILD_TYPE_F32, 1, 8, 1, 1, 1);
    add_tensor(w, "b", GUILD_TYPE_F32, 1, 8, 1, 1, 1);
    add_tensor(w, "c", GUILD_TYPE_F32, 1, 8, 1, 1, 1);
    size_t size;
    uint8_t *buf = finish_memory(w, &size);
    /* each info: u64 len, 1 name byte, u32 n_dims, u64 ne0, u32 type, u64 offset: the offset is at +17 */
    size_t infos = find(buf, size, "\x01\0\0\0\0\0\0\0a") + 8;
    put_u64(buf + infos + 17, 64);
    put_u64(buf + infos + 33 + 17, 0);
    put_u64(buf + infos + 66 + 17, 32);
    gguf_t *g = open_ok(buf, size);
    ck_assert_uint_eq(gguf_find_tensor(g, "a")->offset, gguf_data_offset(g) + 64);
    gguf_destroy(&g);
    put_u64(buf + infos + 66 + 17, 0);
    expect_fail(buf, size, "overlaps tensor");
    free(buf);
}
END_TEST

START_TEST(test_duplicate_tensor_name)
{
    gguf_writer_t *w = new_writer();
    add_tensor(w, "blk.1.a", GUILD_TYPE_F32, 1, 8, 1, 1, 1);
    add_tensor(w, "blk.1.b", GUILD_TYPE_F32, 1, 8, 1, 1, 1);
    size_t size;
    uint8_t *buf = finish_memory(w, &size);
    buf[find(buf, size, "blk.1.b") + 6] = 'a';
    expect_fail(buf, size, "tensor 'blk.1.a': duplicate tensor name (tensors #0 and #1)");
    buf[find(buf, size, "blk.1.a") + 6] = '\0';
    expect_fail(buf, size, "tensor 'blk.1.\\x00': the name contains a NUL byte");
    free(buf);
}
END_TEST

START_TEST(test_nesting_limit)
{
    /* Arrays nested GGUF_MAX_ARRAY_DEPTH deep read; one more is refused. */
    for (int depth = GGUF_MAX_ARRAY_DEPTH; depth <= GGUF_MAX_ARRAY_DEPTH + 1; depth++) {
        gguf_wvalue_t *v = gguf_wvalue_arr_new(GGUF_VALUE_UINT8);
        uint8_t one = 1;
        gguf_wvalue_push(v, &one, 1);
        for (int d = 1; d < depth; d++) {
            gguf_wvalue_t *outer = gguf_wvalue_arr_new(GGUF_VALUE_ARRAY);
            gguf_wvalue_push_arr(outer, &v);
            v = outer;
        }
        gguf_writer_t *w = new_writer();
        gguf_writer_set_value(w, "deep", &v);
        size_t size;
        uint8_t *buf = finish_memory(w, &size);
        if (depth == GGUF_MAX_ARRAY_DEPTH) {
            gguf_t *g = open_ok(buf, size);
            gguf_destroy(&g);
        } else {
            expect_fail(buf, size, "arrays nested more than 8 deep");
        }
        free(buf);
    }
}
END_TEST

START_TEST(test_file_errors_name_the_file)
{
    gguf_t *g;
    guild_err_t err;
    ck_assert_int_eq(gguf_new(&g, "/nonexistent/model.gguf", &err), -1);
    ck_assert_ptr_null(g);
    ck_assert_str_eq(err.msg, "/nonexistent/model.gguf: cannot open: No such file or directory");
    ck_assert_int_eq(gguf_new(&g, "/tmp", &err), -1);
    ck_assert_str_eq(err.msg, "/tmp: not a regular file");
    char path[] = "/tmp/check_gguf_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_eq(gguf_new(&g, path, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "the file is empty"));
    ck_assert(write(fd, "GGUF\x03\0\0\0", 8) == 8);
    close(fd);
    ck_assert_int_eq(gguf_new(&g, path, &err), -1);
    ck_assert(!strncmp(err.msg, path, strlen(path)));
    ck_assert_ptr_nonnull(strstr(err.msg, "offset 8: truncated: the tensor and metadata counts"));
    unlink(path);
}
END_TEST

/* --- split models ------------------------------------------------------------------------------------------- */

/* Writes part `no` of `count` of a split model at PREFIX-0000n-of-0000N.gguf: the split keys (split.no as
 * `no_key`, split.count as `count_key`, split.tensors.count `total`, -1: none), general.name in the first part,
 * tensors "t<first>" .. "t<first + n - 1>" (their bytes tensor_bytes(their number)). */
static void write_part(const char *prefix, int no, int count, int no_key, int count_key, int total, int first,
                       int n)
{
    char path[512], name[32];
    guild_err_t err;
    ck_assert_int_eq(gguf_split_path(path, sizeof path, prefix, no, count), 0);
    gguf_writer_t *w = new_writer();
    gguf_writer_set_u16(w, "split.no", (uint16_t)no_key);
    gguf_writer_set_u16(w, "split.count", (uint16_t)count_key);
    if (total >= 0)
        gguf_writer_set_i32(w, "split.tensors.count", total);
    if (no == 0)
        gguf_writer_set_str(w, "general.name", "split");
    for (int i = first; i < first + n; i++) {
        snprintf(name, sizeof name, "t%d", i);
        add_tensor(w, name, GUILD_TYPE_F32, 2, 64, (uint64_t)(3 + i), 1, 1);
    }
    ck_assert_msg(gguf_writer_begin(w, path, &err) == 0, "%s", err.msg);
    for (int64_t k = 0; k < n; k++) {
        const uint64_t size = gguf_writer_tensor_size(w, k);
        uint8_t *d = tensor_bytes(first + k, size);
        ck_assert_msg(gguf_writer_write_tensor(w, k, d, size, &err) == 0, "%s", err.msg);
        free(d);
    }
    ck_assert_msg(gguf_writer_finish(w, &err) == 0, "%s", err.msg);
    gguf_writer_destroy(&w);
}

/* Opening part `no` of the split model PREFIX fails with a message containing both fragments. */
static void split_fails(const char *prefix, int no, int count, const char *frag1, const char *frag2)
{
    char path[512];
    gguf_t *g = NULL;
    guild_err_t err = {{0}};
    ck_assert_int_eq(gguf_split_path(path, sizeof path, prefix, no, count), 0);
    ck_assert_int_eq(gguf_new(&g, path, &err), -1);
    ck_assert_ptr_null(g);
    ck_assert_msg(strstr(err.msg, frag1), "message \"%s\" lacks \"%s\"", err.msg, frag1);
    if (frag2)
        ck_assert_msg(strstr(err.msg, frag2), "message \"%s\" lacks \"%s\"", err.msg, frag2);
}

START_TEST(test_split_model)
{
    char dir[] = "/tmp/check_gguf_split_XXXXXX", prefix[256], path[512];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(prefix, sizeof prefix, "%s/m", dir);
    ck_assert_int_eq(gguf_split_path(path, sizeof path, prefix, 0, 3), 0);
    ck_assert_int_eq(strcmp(path + strlen(prefix), "-00001-of-00003.gguf"), 0);
    char back[256];
    ck_assert_int_eq(gguf_split_prefix(back, sizeof back, path, 0, 3), 0);
    ck_assert_str_eq(back, prefix);
    ck_assert_int_eq(gguf_split_prefix(back, sizeof back, path, 1, 3), -1);
    write_part(prefix, 0, 3, 0, 3, 6, 0, 2);
    write_part(prefix, 1, 3, 1, 3, 6, 2, 3);
    write_part(prefix, 2, 3, 2, 3, 6, 5, 1);

    /* one model from the first part: every tensor, its bytes, offsets from the one mapping */
    gguf_t *g = NULL;
    guild_err_t err;
    ck_assert_msg(gguf_new(&g, path, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(gguf_n_parts(g), 3);
    ck_assert_str_eq(gguf_part_path(g, 0), path);
    ck_assert_str_eq(gguf_path(g), path);
    ck_assert_int_eq(gguf_n_tensors(g), 6);
    uint64_t sum = 0; /* the parts one after the other, each at a page boundary */
    const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    for (int i = 0; i < 3; i++) {
        struct stat st;
        ck_assert_int_eq(stat(gguf_part_path(g, i), &st), 0);
        sum += ((uint64_t)st.st_size + page - 1) / page * page;
    }
    ck_assert_uint_eq(gguf_file_size(g), sum);
    for (int i = 0; i < 6; i++) {
        char name[32];
        snprintf(name, sizeof name, "t%d", i);
        const gguf_tensor_t *t = gguf_find_tensor(g, name);
        ck_assert_ptr_nonnull(t);
        ck_assert_int_eq(t->ne[1], 3 + i);
        ck_assert_ptr_eq((const uint8_t *)gguf_mapping(g) + t->offset, t->data);
        ck_assert_uint_le(t->offset + t->size, gguf_file_size(g));
        uint8_t *d = tensor_bytes(i, t->size);
        ck_assert_msg(!memcmp(t->data, d, t->size), "tensor %s", name);
        free(d);
    }
    const char *str;
    size_t len;
    ck_assert_int_eq(gguf_get_str(g, "general.name", &str, &len, &err), 0);
    ck_assert(len == 5 && !memcmp(str, "split", 5));
    gguf_destroy(&g);

    /* another part: the first is named */
    split_fails(prefix, 1, 3, "part 2 of 3 of a split model: open its first part", "-00001-of-00003.gguf");
    /* a part that says it is another */
    write_part(prefix, 1, 3, 2, 3, 6, 2, 3);
    split_fails(prefix, 0, 3, "-00002-of-00003.gguf: split.no 2 of split.count 3: expected part 2 of 3", NULL);
    write_part(prefix, 1, 3, 1, 4, 6, 2, 3);
    split_fails(prefix, 0, 3, "split.no 1 of split.count 4: expected part 2 of 3", NULL);
    /* a tensor in two parts; a wrong total */
    write_part(prefix, 1, 3, 1, 3, 6, 1, 3);
    split_fails(prefix, 0, 3, "tensor t1 is in part 1", "and in part 2");
    write_part(prefix, 1, 3, 1, 3, 7, 2, 3);
    write_part(prefix, 0, 3, 0, 3, 7, 0, 2);
    write_part(prefix, 2, 3, 2, 3, 7, 5, 1);
    split_fails(prefix, 0, 3, "split.tensors.count = 7, but its 3 parts hold 6 tensors", NULL);
    /* a missing part */
    ck_assert_int_eq(gguf_split_path(path, sizeof path, prefix, 2, 3), 0);
    ck_assert_int_eq(unlink(path), 0);
    split_fails(prefix, 0, 3, "-00003-of-00003.gguf: part 3 of 3 of the split model", "is missing");
    /* a first part whose name does not follow the pattern */
    ck_assert_int_eq(gguf_split_path(path, sizeof path, prefix, 0, 3), 0);
    char other[600];
    snprintf(other, sizeof other, "%s/renamed.gguf", dir);
    ck_assert_int_eq(rename(path, other), 0);
    ck_assert_int_eq(gguf_new(&g, other, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "its name does not end in -00001-of-00003.gguf"));
    unlink(other);
    ck_assert_int_eq(gguf_split_path(path, sizeof path, prefix, 1, 3), 0);
    unlink(path);
    ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

/* --- performance --------------------------------------------------------------------------------------------- */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

START_TEST(test_large_file_opens_fast)
{
    enum { VOCAB = 150000, TENSORS = 20000 };
    gguf_writer_t *w = new_writer();
    char **toks = malloc(VOCAB * sizeof *toks);
    int32_t *types = malloc(VOCAB * sizeof *types);
    for (int i = 0; i < VOCAB; i++) {
        toks[i] = malloc(16);
        snprintf(toks[i], 16, "tok%d", i);
        types[i] = 1;
    }
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)toks, NULL, VOCAB);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)toks, NULL, VOCAB);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_VALUE_INT32, types, VOCAB);
    for (int i = 0; i < TENSORS; i++) {
        char name[64];
        snprintf(name, sizeof name, "blk.%d.ffn_down_exps.%d.weight", i / 100, i % 100);
        add_tensor(w, name, GUILD_TYPE_F32, 2, 4, 2, 1, 1);
    }
    size_t size;
    uint8_t *buf = finish_memory(w, &size);
    for (int i = 0; i < VOCAB; i++)
        free(toks[i]);
    free(toks);
    free(types);

    double best = 1e9;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now_ms();
        gguf_t *g = open_ok(buf, size);
        double t = now_ms() - t0;
        best = t < best ? t : best;
        ck_assert_int_eq(gguf_n_tensors(g), TENSORS);
        ck_assert_ptr_nonnull(gguf_find_tensor(g, "blk.199.ffn_down_exps.99.weight"));
        const char *s;
        size_t len;
        gguf_arr_str(g, "tokenizer.ggml.tokens", VOCAB - 1, &s, &len);
        ck_assert(len == 9 && !memcmp(s, "tok149999", 9));
        gguf_destroy(&g);
    }
    /* The same from a file: gguf_new maps it. */
    char path[] = "/tmp/check_gguf_XXXXXX";
    int fd = mkstemp(path);
    ck_assert(fd >= 0 && write(fd, buf, size) == (ssize_t)size);
    close(fd);
    double best_file = 1e9;
    for (int rep = 0; rep < 3; rep++) {
        gguf_t *g;
        guild_err_t err;
        double t0 = now_ms();
        ck_assert_msg(gguf_new(&g, path, &err) == 0, "%s", err.msg);
        double t = now_ms() - t0;
        best_file = t < best_file ? t : best_file;
        gguf_destroy(&g);
    }
    unlink(path);
    printf("check_gguf: opening %d tensors + 2 x %d strings (%.1f MB) took %.2f ms in memory, %.2f ms from a "
           "file\n",
           TENSORS, VOCAB, size / 1e6, best, best_file);
    best = best_file > best ? best_file : best;
    /* Milliseconds, not seconds; generous for a loaded 2-core CI machine, more so under ASan (~20x slower). */
#if defined(__SANITIZE_ADDRESS__)
    const double limit_ms = 3000;
#else
    const double limit_ms = 400;
#endif
    ck_assert_msg(best < limit_ms, "opening took %.1f ms (limit %.0f)", best, limit_ms);
    free(buf);
}
END_TEST

/* --- guild inspect ---------------------------------------------------------------------------------------- */

/* Runs a shell command; returns its exit status and its stdout+stderr in out (truncated to cap). */
static int run_cmd(const char *cmd, char *out, size_t cap)
{
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    while (fgetc(p) != EOF) {
    }
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

START_TEST(test_inspect_command)
{
    const char *bdir = getenv("GUILD_BUILDDIR") ? getenv("GUILD_BUILDDIR") : GUILD_BUILDDIR;
    char guild[4096];
    snprintf(guild, sizeof guild, "%s/guild", bdir);
    ck_assert_msg(access(guild, X_OK) == 0, "%s is not built", guild);
    char path[] = "/tmp/check_gguf_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    size_t size;
    uint8_t *buf = small_file(&size);
    FILE *f = fopen(path, "wb");
    ck_assert(fwrite(buf, 1, size, f) == size);
    fclose(f);
    char cmd[8192], *out = malloc(1 << 16);
    snprintf(cmd, sizeof cmd, "'%s' inspect '%s' 2>&1", guild, path);
    ck_assert_int_eq(run_cmd(cmd, out, 1 << 16), 0);
    static const char *want[] = {"version 3", "general.architecture", "string", "'test'", "test.u32", "uint32",
                                 "= 7", "test.strs", "[string x 3]", "'ccc'", "test.nested", "[array x 1]",
                                 "[-1, 5]", "t.q8", "q8_0", "[32, 2]", "68", "t.f32", "f32"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_msg(strstr(out, want[i]), "inspect output lacks \"%s\":\n%s", want[i], out);
    buf[0] = 'X';
    f = fopen(path, "wb");
    ck_assert(fwrite(buf, 1, size, f) == size);
    fclose(f);
    ck_assert_int_eq(run_cmd(cmd, out, 1 << 16), 1);
    ck_assert_msg(strstr(out, "guild inspect: ") && strstr(out, "bad magic"), "%s", out);
    snprintf(cmd, sizeof cmd, "'%s' inspect --help 2>&1", guild);
    ck_assert_int_eq(run_cmd(cmd, out, 1 << 16), 0);
    ck_assert_ptr_nonnull(strstr(out, "usage: guild inspect"));
    snprintf(cmd, sizeof cmd, "'%s' inspect 2>&1", guild);
    ck_assert_int_eq(run_cmd(cmd, out, 1 << 16), 2);
    unlink(path);
    free(out);
    free(buf);
}
END_TEST

#else /* CHECK_GGUF_FIXTURES_ONLY */

/* --- real vocabularies -------------------------------------------------------------------------------------- */

static const char *fixtures_dir(char *buf, size_t cap)
{
    const char *env = getenv("GUILD_FIXTURES");
    snprintf(buf, cap, "%s/tokenizer", env && *env ? env : GUILD_FIXTURES);
    return buf;
}


START_TEST(test_real_vocabularies_open)
{
    char dir[4096];
    fixtures_dir(dir, sizeof dir);
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int files = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n < 5 || strcmp(e->d_name + n - 5, ".gguf"))
            continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        gguf_t *g;
        guild_err_t err;
        ck_assert_msg(gguf_new(&g, path, &err) == 0, "%s", err.msg);
        ck_assert_uint_eq(gguf_version(g), 3);
        gguf_value_type_t et;
        uint64_t nt;
        ck_assert_msg(gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &nt, &err) == 0, "%s", err.msg);
        ck_assert(et == GGUF_VALUE_STRING && nt > 1000);
        uint64_t bytes = 0;
        for (uint64_t i = 0; i < nt; i++) {
            const char *s;
            size_t len;
            gguf_arr_str(g, "tokenizer.ggml.tokens", i, &s, &len);
            bytes += len;
        }
        ck_assert_uint_gt(bytes, nt);
        const char *model;
        size_t len;
        ck_assert_msg(gguf_get_str(g, "tokenizer.ggml.model", &model, &len, &err) == 0, "%s", err.msg);
        int64_t *types = malloc(nt * sizeof *types);
        ck_assert_msg(gguf_arr_copy_i64(g, "tokenizer.ggml.token_type", types, nt, &err) == 0, "%s", err.msg);
        free(types);
        printf("check_gguf: %s: %llu tokens, model %.*s\n", e->d_name, (unsigned long long)nt, (int)len, model);
        gguf_destroy(&g);
        files++;
    }
    closedir(d);
    ck_assert_int_ge(files, 6);
}
END_TEST

#endif /* CHECK_GGUF_FIXTURES_ONLY */

int main(void)
{
#ifdef CHECK_GGUF_FIXTURES_ONLY
    char dir[4096];
    struct stat st;
    if (stat(fixtures_dir(dir, sizeof dir), &st) != 0) {
        printf("SKIP: %s is absent: the real GGUF vocabularies were not opened\n", dir);
        return 77;
    }
    Suite *s = suite_create("gguf");
    TCase *tc = tcase_create("real_vocabularies");
    tcase_add_test(tc, test_real_vocabularies_open);
    suite_add_tcase(s, tc);
#else
    Suite *s = suite_create("gguf");
    TCase *tc = tcase_create("round_trip");
    tcase_add_test(tc, test_scalars_round_trip);
    tcase_add_test(tc, test_getter_conversions);
    tcase_add_test(tc, test_arrays_round_trip);
    tcase_add_test(tc, test_tensors_round_trip);
    tcase_add_test(tc, test_file_round_trip_streaming);
    tcase_add_test(tc, test_copy_values_between_files);
    tcase_add_test(tc, test_version_2_reads);
    suite_add_tcase(s, tc);
    tc = tcase_create("writer_misuse");
    tcase_add_test(tc, test_writer_rejects_misuse);
    suite_add_tcase(s, tc);
    tc = tcase_create("malformed");
    tcase_add_test(tc, test_every_truncation_fails);
    tcase_add_test(tc, test_bad_headers);
    tcase_add_test(tc, test_bad_metadata);
    tcase_add_test(tc, test_bad_alignment);
    tcase_add_test(tc, test_bad_tensor_infos);
    tcase_add_test(tc, test_duplicate_tensor_name);
    tcase_add_test(tc, test_tensor_order_and_overlap);
    tcase_add_test(tc, test_nesting_limit);
    tcase_add_test(tc, test_file_errors_name_the_file);
    suite_add_tcase(s, tc);
    tc = tcase_create("split");
    tcase_add_test(tc, test_split_model);
    suite_add_tcase(s, tc);
    tc = tcase_create("performance");
    tcase_add_test(tc, test_large_file_opens_fast);
    suite_add_tcase(s, tc);
    tc = tcase_create("inspect");
    tcase_add_test(tc, test_inspect_command);
    suite_add_tcase(s, tc);
#endif
    return check_run(s);
}
