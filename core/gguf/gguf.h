/* core/gguf/gguf.h — reading GGUF files (v2, v3).
 *
 * gguf_new() maps a file read-only and validates all of it up front: every count, string length, array size,
 * tensor shape, type and data range is checked against the file size with overflow-safe arithmetic, so that the
 * getters below never fail on a file that opened. A malformed file gives -1 and a message naming the file, the
 * byte offset or key, and the problem; never a crash, hang or an allocation sized by untrusted counts.
 *
 * Strings returned point into the mapping (not NUL-terminated in the file: each comes with its length; the
 * `name` of a tensor and the keys are copied and NUL-terminated for convenience). Everything returned lives as
 * long as the gguf_t. A gguf_t does not change after it opened: its getters may be called from several threads.
 * Key and tensor lookups are hashed (O(1)); opening a file with 20k tensors and a 150k-token vocabulary takes a
 * few milliseconds.
 */
#ifndef GUILD_GGUF_H
#define GUILD_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/util/err.h"

#define GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4

typedef enum gguf_value_type {
    GGUF_VALUE_UINT8 = 0,
    GGUF_VALUE_INT8 = 1,
    GGUF_VALUE_UINT16 = 2,
    GGUF_VALUE_INT16 = 3,
    GGUF_VALUE_UINT32 = 4,
    GGUF_VALUE_INT32 = 5,
    GGUF_VALUE_FLOAT32 = 6,
    GGUF_VALUE_BOOL = 7,
    GGUF_VALUE_STRING = 8,
    GGUF_VALUE_ARRAY = 9,
    GGUF_VALUE_UINT64 = 10,
    GGUF_VALUE_INT64 = 11,
    GGUF_VALUE_FLOAT64 = 12,
    GGUF_VALUE_TYPE_COUNT
} gguf_value_type_t;

typedef struct gguf gguf_t;

/* A metadata value: a view into the file, valid as long as the gguf_t. Read it through the gguf_value_*
 * functions below; the bytes are little-endian and may be unaligned. */
typedef struct gguf_value {
    gguf_value_type_t type;      /* the type of this value */
    gguf_value_type_t elem_type; /* arrays: the type of every element */
    uint64_t n;                  /* arrays: the number of elements; strings: the length in bytes */
    const uint8_t *data;         /* scalars: the value's bytes; strings: the bytes; arrays: element 0's bytes */
    const void *index_;          /* private: per-element index of arrays of strings or of arrays */
} gguf_value_t;

#define GGUF_MAX_ARRAY_DEPTH 8 /* arrays nested deeper than this are rejected */

/* One tensor of the file. */
typedef struct gguf_tensor {
    const char *name;         /* NUL-terminated copy */
    uint32_t type;            /* guild_type_t id (core/quant/types.h); known to quant_type_info() */
    uint32_t n_dims;          /* 1..4 */
    uint64_t ne[GGUF_MAX_DIMS]; /* elements per dimension, ne[0] innermost (contiguous); unused dims are 1 */
    uint64_t offset;          /* byte offset of the data from the start of the file */
    uint64_t size;            /* bytes of data */
    const void *data;         /* the data in the mapping */
} gguf_tensor_t;

/* Maps and validates `path`. On failure returns -1, *out = NULL, message in err. A split model (llama.cpp's
 * NAME-00001-of-0000N.gguf, split.count > 1) opens from its first part as one: every part mapped and validated,
 * the tensors of all in one table; offsets and gguf_file_size are then of the parts laid one after the other,
 * each at a page boundary (core/gguf/split.c). Another part, or a missing or mismatched one, is refused naming
 * the file. */
int gguf_new(gguf_t **out, const char *path, guild_err_t *err);

/* The parts of a split model: their count (1 for a single file) and part i's path (gguf_path for i = 0). */
int gguf_n_parts(const gguf_t *g);
const char *gguf_part_path(const gguf_t *g, int i);

/* The name of part `no` (from 0) of `count` of a split model: "PREFIX-%05d-of-%05d.gguf" of no + 1, as
 * llama.cpp's llama_split_path. -1 when it does not fit in buf. */
int gguf_split_path(char *buf, size_t size, const char *prefix, int no, int count);
/* The PREFIX of a part's path for (no, count); -1 when path does not end so or the prefix does not fit. */
int gguf_split_prefix(char *buf, size_t size, const char *path, int no, int count);

/* Validates a GGUF image already in memory (not copied: `data` must outlive the gguf_t). `name` is used in
 * messages. Used by the fuzz target and by tests. */
int gguf_new_from_memory(gguf_t **out, const void *data, size_t size, const char *name, guild_err_t *err);

/* Unmaps and frees; sets *g to NULL. NULL-safe. */
void gguf_destroy(gguf_t **g);

const char *gguf_path(const gguf_t *g);
uint32_t gguf_version(const gguf_t *g);
uint32_t gguf_alignment(const gguf_t *g);
uint64_t gguf_data_offset(const gguf_t *g); /* start of the tensor data section */

/* --- metadata ----------------------------------------------------------------------------------------- */

int64_t gguf_n_kv(const gguf_t *g);
/* Index of `key`, or -1. */
int64_t gguf_find_key(const gguf_t *g, const char *key);
const char *gguf_kv_key(const gguf_t *g, int64_t i);
gguf_value_type_t gguf_kv_type(const gguf_t *g, int64_t i);

/* Typed getters by key. Each fails (message names the key) when the key is absent or its value cannot be
 * represented in the requested form: gguf_get_int accepts any integer type (and bool) in range of int64;
 * gguf_get_uint any integer type (and bool) that is >= 0; gguf_get_float any float or integer type;
 * gguf_get_bool only bools; gguf_get_str only strings. */
int gguf_get_int(const gguf_t *g, const char *key, int64_t *out, guild_err_t *err);
int gguf_get_uint(const gguf_t *g, const char *key, uint64_t *out, guild_err_t *err);
int gguf_get_float(const gguf_t *g, const char *key, double *out, guild_err_t *err);
int gguf_get_bool(const gguf_t *g, const char *key, bool *out, guild_err_t *err);
int gguf_get_str(const gguf_t *g, const char *key, const char **s, size_t *len, guild_err_t *err);

/* Arrays. gguf_get_arr gives the element type and count of the array at `key`. */
int gguf_get_arr(const gguf_t *g, const char *key, gguf_value_type_t *elem_type, uint64_t *n, guild_err_t *err);
/* Element i of a string array (no bounds failure: i must be < n, an assertion). */
void gguf_arr_str(const gguf_t *g, const char *key, uint64_t i, const char **s, size_t *len);
/* Copies a numeric array, converting each element to the requested C type; fails on a non-numeric array, a
 * count != n, or a value out of range. */
int gguf_arr_copy_i64(const gguf_t *g, const char *key, int64_t *dst, uint64_t n, guild_err_t *err);
int gguf_arr_copy_f32(const gguf_t *g, const char *key, float *dst, uint64_t n, guild_err_t *err);

/* Generic access to values (`guild inspect`, nested arrays). */

/* The value of key i (0 <= i < gguf_n_kv), or of `key` (NULL when absent). */
const gguf_value_t *gguf_kv_value(const gguf_t *g, int64_t i);
const gguf_value_t *gguf_find_value(const gguf_t *g, const char *key);
/* Element i of an array (asserts that `arr` is an array and i < arr->n). O(1) for every element type. */
gguf_value_t gguf_value_at(const gguf_value_t *arr, uint64_t i);
/* Scalar conversions, with the rules of gguf_get_int/uint/float/bool: 0, or -1 (nothing written) when the value
 * has another type or does not fit. */
int gguf_value_to_int(const gguf_value_t *v, int64_t *out);
int gguf_value_to_uint(const gguf_value_t *v, uint64_t *out);
int gguf_value_to_float(const gguf_value_t *v, double *out);
int gguf_value_to_bool(const gguf_value_t *v, bool *out);
/* The bytes of a string value (asserts that it is one). */
void gguf_value_str(const gguf_value_t *v, const char **s, size_t *len);
/* "uint8", "string", "array", ... ("?" for an id outside the enum). */
const char *gguf_value_type_name(gguf_value_type_t type);
/* Bytes of one value of a fixed-size type; 0 for strings, arrays and unknown ids. */
size_t gguf_value_type_size(gguf_value_type_t type);

/* --- tensors ------------------------------------------------------------------------------------------ */

int64_t gguf_n_tensors(const gguf_t *g);
const gguf_tensor_t *gguf_tensor(const gguf_t *g, int64_t i);
/* The tensor called `name`, or NULL. */
const gguf_tensor_t *gguf_find_tensor(const gguf_t *g, const char *name);
/* Size of the mapped file (or memory image) in bytes; of a split model, the range its parts are mapped into. */
uint64_t gguf_file_size(const gguf_t *g);

/* The first byte of the mapping (offsets count from it): for those who serve the model's bytes by offset. */
const void *gguf_mapping(const gguf_t *g);

#endif
