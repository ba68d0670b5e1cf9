/* gpu-worker/dense/kv_format.h — the KV cache's storage formats (backend_options_t.kv_type, guild's --kv-type):
 * what a cached position costs, which models take a format, and the scalar reference of storing a row.
 *
 *   f32   keys and values as float (the "cpu" backend's default: the reference precision)
 *   f16   IEEE half, round to nearest even (the "cuda" backend's default)
 *   q8_0  GGUF's Q8_0 blocks (32 elements, an F16 scale, int8 values), keys and values
 *   q4_0  GGUF's Q4_0 blocks (32 elements, an F16 scale, 4-bit values), keys and values
 *   k8v4  keys Q8_0; values Q4_0 after a normalised Walsh-Hadamard rotation of each head (kv_hadamard)
 *
 * Blocks never straddle heads (head_dim a multiple of 32), so a head's slice of a row is whole blocks and a
 * position's row is quantized from that position's K/V alone: a position's cache bytes are the same whatever
 * the batch split. Attention reads the format directly: each key and value row a dot product takes is
 * dequantized as it is read (ggml's dequantization), never a dequantized copy of the cache; its arithmetic is
 * then the f32 cache's (gpu-worker/dense/cpu/cpu_kernels.h), on the dequantized values.
 *
 * Why k8v4 rotates the values: attention's output is a weighted sum of value rows, so their error goes straight
 * into it, and a head's value row often has a few large channels that set a 4-bit block's scale and leave the
 * rest with a couple of levels. The Walsh-Hadamard transform H (orthonormal, H = H^T = H^-1 when normalised by
 * 1/sqrt(n)) spreads each channel over the whole head, so blocks see a flatter spread and quantize with less
 * error. Undoing it is cheap and exact in exact arithmetic: out = sum_j p_j v_j = H (sum_j p_j (H v_j)), so the
 * attention output of the rotated rows is rotated back once per head output, not once per cached row. Keys are
 * not rotated: a score q.k would need the query rotated too, and Q8_0 keys lose little. */
#ifndef GUILD_GPU_WORKER_KV_FORMAT_H
#define GUILD_GPU_WORKER_KV_FORMAT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/model/config.h"
#include "core/quant/types.h"
#include "core/util/err.h"

/* backend_options_t.kv_type */
typedef enum kv_type {
    KV_TYPE_DEFAULT = 0, /* the backend's own: f32 on "cpu", f16 on "cuda" (a GPU plan counts f16) */
    KV_TYPE_F32,
    KV_TYPE_F16,
    KV_TYPE_Q8_0,
    KV_TYPE_Q4_0,
    KV_TYPE_K8V4,
} kv_type_t;

#define KV_TYPE_LAST KV_TYPE_K8V4

/* Elements per block of the block formats: a head's dimension must be a multiple of it. */
#define KV_BLOCK 32

/* "f32", "f16", "q8_0", "q4_0", "k8v4"; "default" for KV_TYPE_DEFAULT, "?" for anything else. Inline: the
 * options records that print it link no dense library. */
static inline const char *kv_type_name(int32_t t)
{
    static const char *const names[] = {"default", "f32", "f16", "q8_0", "q4_0", "k8v4"};
    _Static_assert(sizeof names / sizeof names[0] == KV_TYPE_LAST + 1, "a name per format");
    return t >= 0 && t <= KV_TYPE_LAST ? names[t] : "?";
}

/* The format named s (one of kv_type_name's, not "default"): 0 with *out set, -1 with a message listing them. */
int kv_type_parse(const char *s, int32_t *out, guild_err_t *err);

/* t, or dflt when t is KV_TYPE_DEFAULT. */
static inline int32_t kv_type_resolve(int32_t t, int32_t dflt)
{
    return t == KV_TYPE_DEFAULT ? dflt : t;
}

/* The element type of the key rows (kv_type_k) and value rows (kv_type_v) of format t (resolved: not DEFAULT,
 * which is taken as f16): F32, F16, Q8_0 or Q4_0. */
guild_type_t kv_type_k(int32_t t);
guild_type_t kv_type_v(int32_t t);

/* True when format t stores value rows rotated by kv_hadamard, head by head (k8v4). */
bool kv_type_rotates_v(int32_t t);

/* Bytes of n elements of element type et (F32, F16, Q8_0 or Q4_0; n a multiple of KV_BLOCK for the blocks). */
uint64_t kv_elem_bytes(guild_type_t et, int64_t n);

/* Whether model c can keep its cache in format t (resolved): 0, or -1 with "WHO: --kv-type NAME: ..." naming
 * what stands in the way: a block format with a head dimension that is not a multiple of 32, k8v4 with one that
 * is not a power of two, a multi-head latent attention layer (deepseek2) with a format other than those of
 * mla_types (bits 1 << KV_TYPE_*: the ones the backend's latent attention reads). Recurrent layers keep no K/V
 * (their state stays f32) and take any format. */
int kv_type_check(int32_t t, const model_config_t *c, unsigned mla_types, const char *who, guild_err_t *err);

/* The bytes of a cached position in format t (DEFAULT: f16) as the backends allocate it: every layer that keeps
 * K/V rows (not a recurrent one) keeps the widest key and value rows of the layers' attention parts
 * (model_layer_cache_row). */
uint64_t kv_type_position_bytes(int32_t t, const model_config_t *c);

/* The normalised Walsh-Hadamard transform of x[0..n) in place (n a power of two): butterflies (a, b) -> (a + b,
 * a - b) at strides 1, 2, 4, ... n/2, pairs in ascending order, then every element times (float)(1 / sqrt(n)).
 * Its own inverse (up to float rounding). The CUDA backend runs the same operations in the same order: the
 * same bits. */
void kv_hadamard(float *x, int32_t n);

/* One cache row of n floats (n / head_dim heads of head_dim) in element type et into dst (kv_elem_bytes(et, n)
 * bytes): F32 copied, F16 rounded to nearest even, Q8_0 and Q4_0 by ggml's reference quantizers
 * (quant_quant_q8_0_ref, quant_quant_q4_0_ref); with rotate, each head goes through kv_hadamard first (scratch:
 * head_dim floats). x is left as it was. x must be finite for the block formats. */
void kv_store_row(guild_type_t et, bool rotate, const float *x, void *dst, int64_t n, int32_t head_dim,
                  float *scratch);

/* n elements of element type et at src (the start of a head's slice, or of a row) as floats into dst: ggml's
 * dequantization (quant_dequantize_row_ref); F32 copied. */
void kv_load(guild_type_t et, const void *src, float *dst, int64_t n);

#endif
