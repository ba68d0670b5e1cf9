/* core/gguf/gguf_writer.h — writing GGUF v3 files, streaming: only the metadata and a 1 MiB buffer are held in
 * memory, so files of any size can be written (the model generator writes tens of GB).
 *
 * Order of calls:
 *   gguf_writer_new
 *   gguf_writer_set_* ... (any order; keys are written in the order first set; setting a key again replaces
 *                          its value in place)
 *   gguf_writer_add_tensor ... (tensors are numbered from 0 in declaration order)
 *   gguf_writer_begin(path) or gguf_writer_begin_memory: writes header, metadata, tensor infos and padding
 *   gguf_writer_write_tensor / gguf_writer_write ... : the data of every tensor, in declaration order
 *   gguf_writer_finish (then gguf_writer_take_memory for a memory image)
 *   gguf_writer_destroy
 * Tensor data offsets are aligned to `general.alignment` when that key is set (a uint32 power of two), else to
 * 32; every tensor's data is followed by zero padding up to the alignment (as ggml writes it).
 *
 * The metadata setters can only fail on misuse (bad key or element type, called after begin) or out of
 * memory. They return 0/-1, and the writer remembers the first failure: gguf_writer_begin* then fails with
 * that message, so a run of setters can be checked once.
 */
#ifndef GUILD_GGUF_WRITER_H
#define GUILD_GGUF_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/gguf/gguf.h"
#include "core/util/err.h"

typedef struct gguf_writer gguf_writer_t;

/* An empty writer; -1 on out of memory. Free with gguf_writer_destroy. */
int gguf_writer_new(gguf_writer_t **out, guild_err_t *err);

/* Frees the writer; a file begun but not finished is removed (a half-written model must not be left behind).
 * Sets *w to NULL; NULL-safe. */
void gguf_writer_destroy(gguf_writer_t **w);

/* --- metadata ----------------------------------------------------------------------------------------- */

int gguf_writer_set_u8(gguf_writer_t *w, const char *key, uint8_t v);
int gguf_writer_set_i8(gguf_writer_t *w, const char *key, int8_t v);
int gguf_writer_set_u16(gguf_writer_t *w, const char *key, uint16_t v);
int gguf_writer_set_i16(gguf_writer_t *w, const char *key, int16_t v);
int gguf_writer_set_u32(gguf_writer_t *w, const char *key, uint32_t v);
int gguf_writer_set_i32(gguf_writer_t *w, const char *key, int32_t v);
int gguf_writer_set_u64(gguf_writer_t *w, const char *key, uint64_t v);
int gguf_writer_set_i64(gguf_writer_t *w, const char *key, int64_t v);
int gguf_writer_set_f32(gguf_writer_t *w, const char *key, float v);
int gguf_writer_set_f64(gguf_writer_t *w, const char *key, double v);
int gguf_writer_set_bool(gguf_writer_t *w, const char *key, bool v);
/* A NUL-terminated string; gguf_writer_set_strn: len bytes (which may include NULs). */
int gguf_writer_set_str(gguf_writer_t *w, const char *key, const char *s);
int gguf_writer_set_strn(gguf_writer_t *w, const char *key, const char *s, size_t len);

/* An array of n fixed-size elements of elem_type, given as a C array of the matching type (uint8_t ... double;
 * `bool` for GGUF_VALUE_BOOL). Strings and arrays are refused here: see the next two. */
int gguf_writer_set_arr(gguf_writer_t *w, const char *key, gguf_value_type_t elem_type, const void *elems,
                        uint64_t n);
/* An array of n strings; lens[i] gives their lengths, or lens == NULL for NUL-terminated strings. */
int gguf_writer_set_arr_str(gguf_writer_t *w, const char *key, const char *const *strs, const size_t *lens,
                            uint64_t n);

/* Array values of any shape, arrays of arrays included, built element by element. */
typedef struct gguf_wvalue gguf_wvalue_t;

/* An empty array of elem_type (any type, GGUF_VALUE_ARRAY for an array of arrays); NULL on out of memory. */
gguf_wvalue_t *gguf_wvalue_arr_new(gguf_value_type_t elem_type);
void gguf_wvalue_destroy(gguf_wvalue_t **v);
/* Appends n fixed-size elements (as for gguf_writer_set_arr) / one string / one array (taking ownership of
 * *inner and setting it to NULL, even on failure). Fail (-1) on an element type that is not the array's, or
 * out of memory; the value then remembers the failure and gguf_writer_set_value refuses it. */
int gguf_wvalue_push(gguf_wvalue_t *arr, const void *elems, uint64_t n);
int gguf_wvalue_push_str(gguf_wvalue_t *arr, const char *s, size_t len);
int gguf_wvalue_push_arr(gguf_wvalue_t *arr, gguf_wvalue_t **inner);
/* Sets key to the array built in *v, taking ownership of it (*v is set to NULL, even on failure). */
int gguf_writer_set_value(gguf_writer_t *w, const char *key, gguf_wvalue_t **v);

/* Sets key to a copy of a value read from a file (any type, nested arrays included): copying metadata from
 * one GGUF file to another, e.g. a real tokenizer into a generated model. */
int gguf_writer_set_copy(gguf_writer_t *w, const char *key, const gguf_value_t *v);

/* Removes key if set (0 either way). */
int gguf_writer_remove(gguf_writer_t *w, const char *key);

/* --- tensors ------------------------------------------------------------------------------------------ */

/* Declares the next tensor: name (unique, 1..63 bytes: ggml's limit), type known to quant_type_info(),
 * n_dims 1..4, ne[0] (innermost) a multiple of the type's block size, no zero dimension, size within 64 bits.
 * Before begin only. -1 with a message naming the tensor otherwise. */
int gguf_writer_add_tensor(gguf_writer_t *w, const char *name, uint32_t type, uint32_t n_dims, const uint64_t *ne,
                           guild_err_t *err);

int64_t gguf_writer_n_tensors(const gguf_writer_t *w);
/* Bytes of tensor i's data (without padding). */
uint64_t gguf_writer_tensor_size(const gguf_writer_t *w, int64_t i);

/* --- output ------------------------------------------------------------------------------------------- */

/* Creates (or truncates) the file at path and writes everything up to the tensor data. -1 with a message
 * (the first failed setter's, or an I/O error naming the file). */
int gguf_writer_begin(gguf_writer_t *w, const char *path, guild_err_t *err);
/* The same, into a memory image (tests, fuzz seeds). */
int gguf_writer_begin_memory(gguf_writer_t *w, guild_err_t *err);

/* After begin: where the data section starts, and the absolute file offset of tensor i's data. */
uint64_t gguf_writer_data_offset(const gguf_writer_t *w);
uint64_t gguf_writer_tensor_offset(const gguf_writer_t *w, int64_t i);

/* Writes all `size` bytes of tensor idx, which must be the next tensor not yet written and size its exact
 * size. -1 with a message otherwise, or on an I/O error. */
int gguf_writer_write_tensor(gguf_writer_t *w, int64_t idx, const void *data, uint64_t size, guild_err_t *err);
/* Writes the next `size` bytes of tensor data, in declaration order, in chunks of any size (a chunk may span
 * tensors; padding is inserted between them). Fails when more bytes are given than declared. */
int gguf_writer_write(gguf_writer_t *w, const void *data, uint64_t size, guild_err_t *err);

/* Checks that every tensor was written in full, flushes and closes. A file is complete only after this
 * returned 0. */
int gguf_writer_finish(gguf_writer_t *w, guild_err_t *err);

/* After a successful finish of a memory image: hands over the bytes (caller frees with free()). */
void gguf_writer_take_memory(gguf_writer_t *w, void **data, size_t *size);

#endif
