/* Fuzz target for the GGUF reader: any input either opens, and then every getter and every byte of every
 * tensor can be read without a fault, or fails with a message naming the input. Invariants the reader
 * promises are checked here; a violation aborts (a finding). Built with libFuzzer (tests/fuzz/README.md) and,
 * with fuzz_gguf_replay.c, as a plain program that replays files. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/gguf/gguf.h"
#include "core/quant/types.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond) ((cond) ? (void)0 : abort())

static uint64_t sink; /* what was read, so that nothing is optimized away */

static void walk_value(const gguf_value_t *v)
{
    int64_t i;
    uint64_t u;
    double f;
    bool b;
    const char *s;
    size_t len;
    sink += (uint64_t)gguf_value_to_int(v, &i) + (uint64_t)gguf_value_to_uint(v, &u) +
            (uint64_t)gguf_value_to_float(v, &f) + (uint64_t)gguf_value_to_bool(v, &b);
    switch (v->type) {
    case GGUF_VALUE_STRING:
        gguf_value_str(v, &s, &len);
        for (size_t k = 0; k < len; k++)
            sink += (unsigned char)s[k];
        break;
    case GGUF_VALUE_ARRAY:
        CHECK((unsigned)v->elem_type < GGUF_VALUE_TYPE_COUNT);
        for (uint64_t k = 0; k < v->n; k++) {
            gguf_value_t e = gguf_value_at(v, k);
            CHECK(e.type == v->elem_type);
            walk_value(&e);
        }
        break;
    default:
        CHECK(gguf_value_type_size(v->type) > 0);
        for (size_t k = 0; k < gguf_value_type_size(v->type); k++)
            sink += v->data[k];
    }
}

/* The typed getters by key, which must agree with the generic view. */
static void typed_getters(const gguf_t *g, const char *key, const gguf_value_t *v)
{
    guild_err_t err;
    int64_t i;
    uint64_t u;
    double f;
    bool b;
    const char *s;
    size_t len;
    gguf_value_type_t et;
    uint64_t n;
    sink += (uint64_t)gguf_get_int(g, key, &i, &err) + (uint64_t)gguf_get_uint(g, key, &u, &err) +
            (uint64_t)gguf_get_float(g, key, &f, &err) + (uint64_t)gguf_get_bool(g, key, &b, &err);
    CHECK((gguf_get_str(g, key, &s, &len, &err) == 0) == (v->type == GGUF_VALUE_STRING));
    CHECK((gguf_get_arr(g, key, &et, &n, &err) == 0) == (v->type == GGUF_VALUE_ARRAY));
    if (v->type != GGUF_VALUE_ARRAY)
        return;
    CHECK(et == v->elem_type && n == v->n);
    if (et == GGUF_VALUE_STRING) {
        for (uint64_t k = 0; k < n; k++) {
            gguf_arr_str(g, key, k, &s, &len);
            sink += len ? (unsigned char)s[len - 1] : 0;
        }
    } else if (gguf_value_type_size(et)) {
        /* n elements take at least n bytes of the input: the buffers are bounded by its size */
        int64_t *iv = malloc((size_t)n * sizeof *iv + 1);
        float *fv = malloc((size_t)n * sizeof *fv + 1);
        CHECK(iv && fv);
        sink += (uint64_t)gguf_arr_copy_i64(g, key, iv, n, &err) + (uint64_t)gguf_arr_copy_f32(g, key, fv, n, &err);
        CHECK(gguf_arr_copy_i64(g, key, iv, n + 1, &err) == -1);
        free(iv);
        free(fv);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    gguf_t *g;
    guild_err_t err = {{0}};
    if (gguf_new_from_memory(&g, data, size, "fuzz", &err) < 0) {
        CHECK(g == NULL);
        CHECK(!strncmp(err.msg, "fuzz: ", 6) && strlen(err.msg) > 6);
        return 0;
    }
    CHECK(gguf_version(g) == 2 || gguf_version(g) == 3);
    uint32_t a = gguf_alignment(g);
    CHECK(a && !(a & (a - 1)));
    CHECK(gguf_data_offset(g) % a == 0);
    CHECK(gguf_file_size(g) == size);

    for (int64_t k = 0; k < gguf_n_kv(g); k++) {
        const char *key = gguf_kv_key(g, k);
        const gguf_value_t *v = gguf_kv_value(g, k);
        CHECK(gguf_kv_type(g, k) == v->type);
        CHECK(gguf_find_key(g, key) == k && gguf_find_value(g, key) == v);
        walk_value(v);
        typed_getters(g, key, v);
    }
    uint64_t data_bytes = 0;
    for (int64_t k = 0; k < gguf_n_tensors(g); k++) {
        const gguf_tensor_t *t = gguf_tensor(g, k);
        CHECK(gguf_find_tensor(g, t->name) == t);
        CHECK(t->n_dims >= 1 && t->n_dims <= GGUF_MAX_DIMS);
        const quant_type_info_t *info = quant_type_info(t->type);
        CHECK(info && t->ne[0] % info->block_elems == 0);
        for (int d = 0; d < GGUF_MAX_DIMS; d++)
            CHECK(t->ne[d] >= 1 && (d < (int)t->n_dims || t->ne[d] == 1));
        CHECK(t->offset >= gguf_data_offset(g) && (t->offset - gguf_data_offset(g)) % a == 0);
        CHECK(t->offset <= size && t->size <= size - t->offset);
        CHECK((const uint8_t *)t->data == data + t->offset);
        const uint8_t *p = t->data;
        for (uint64_t i = 0; i < t->size; i++)
            sink += p[i];
        data_bytes += t->size;
    }
    CHECK(data_bytes <= size); /* tensors do not overlap */
    gguf_destroy(&g);
    return 0;
}
