/* core/quant/quant.h — scalar reference operations on GGUF/ggml quantized rows.
 *
 * These are the deterministic references every SIMD and CUDA kernel is tested against. A "row" is n elements
 * (a multiple of the type's block size) stored as n / block_elems consecutive blocks (core/quant/blocks.h).
 * Dot products take the weight row in its own type and the activation row already quantized to
 * quant_type_info(type)->dot_type (Q8_K for K and IQ types, Q8_0 / Q8_1 for the 32-element types, F32 for
 * F32/F16/BF16 weights).
 *
 * The per-type functions behind these dispatchers are declared in core/quant/ref_kernels.h (SIMD kernels call
 * their type's reference directly in tests). The exact order of floating-point operations of every dot product
 * is a contract written at the top of core/quant/dot_ref.c: SIMD kernels must reproduce it bit for bit.
 * Rows are little-endian (x86-64, aarch64).
 */
#ifndef GUILD_QUANT_H
#define GUILD_QUANT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/quant/types.h"
#include "core/util/err.h"

/* Dequantizes n elements of `type` from src into dst. `type` must be computable or Q8_0/Q8_1/Q8_K (asserted). */
void quant_dequantize_row_ref(guild_type_t type, const void *src, float *dst, int64_t n);

/* True when quant_quantize_row_ref supports `type`. */
bool quant_can_quantize(guild_type_t type);

/* Quantizes n floats into `type` (dst holds row-bytes of n). Deterministic; ggml's reference quantizers
 * operation for operation (quantize_row_*_ref; IQ4_NL/IQ4_XS as ggml's quantize_iq4_* without an importance
 * matrix), so the bytes match a ggml built without FMA contraction. Types: F32, F16, BF16, Q4_0, Q4_1,
 * Q5_0, Q5_1, Q8_0, Q8_1, Q8_K, Q2_K..Q6_K, IQ4_NL, IQ4_XS, MXFP4. src must be finite. Fails when the type
 * has no quantizer or n is not a whole number of blocks. */
int quant_quantize_row_ref(guild_type_t type, const float *src, void *dst, int64_t n, guild_err_t *err);

/* Dot product of a weight row of `type` and an activation row in quant_type_info(type)->dot_type, n elements.
 * `type` must be computable (asserted). */
float quant_vec_dot_ref(guild_type_t type, int64_t n, const void *w, const void *act);

#endif
