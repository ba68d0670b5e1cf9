/* core/kern/kern.h — the CPU matrix kernels: weight rows of any computable type times quantized activations.
 *
 * Every kernel here gives, bit for bit, what the scalar references of core/quant give (quant_vec_dot_ref for
 * each output element, quant_quantize_row_ref for activations): the SIMD versions only reorder the exact
 * integer parts and evaluate the same float operations per lane. So a result never depends on the ISA level,
 * the machine, the thread count or how rows and tokens were grouped.
 *
 * Kernels are chosen once, at the first call, for the best level this CPU supports (kern_cpu()). Tests and
 * benchmarks may force a level with kern_set_level(); that is a start-up decision too, not a per-call one.
 *
 * Domain: activation quants must be in [-127, 127], which Guild's quantizers (kern_quantize, the reference
 * ones, ggml's) guarantee; the AVX2 and AVX-512BW kernels of signed-level types (Q8_0, IQ4_NL, IQ4_XS) multiply
 * magnitudes by sign-flipped activations, where -128 would wrap. Every other kernel, and every VNNI kernel, is
 * exact for any bytes. Weight blocks may hold any bytes.
 *
 * Coverage (table.h fills): AVX-512 (BW and VNNI variants) and AVX2 for every computable type.
 */
#ifndef GUILD_KERN_H
#define GUILD_KERN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/quant/types.h"
#include "core/util/err.h"

typedef enum kern_level {
    KERN_LEVEL_SCALAR = 0,  /* the core/quant references: any CPU */
    KERN_LEVEL_AVX2,        /* AVX2 + FMA + F16C (Haswell, Zen 1 and later) */
    KERN_LEVEL_AVX512,      /* AVX-512 F/BW/VL/DQ + BMI2 (Skylake-SP) */
    KERN_LEVEL_AVX512_VNNI, /* + AVX512-VNNI (Cascade Lake, Ice Lake, Sapphire Rapids, Zen 4) */
    KERN_LEVEL_AMX,         /* + AMX-INT8 tiles for large token groups (Sapphire Rapids and later) */
    KERN_LEVEL_COUNT
} kern_level_t;

/* "scalar", "avx2", "avx512", "avx512-vnni", "amx". */
const char *kern_level_name(kern_level_t level);

/* The level named `name` (as kern_level_name spells it), or -1. */
int kern_level_from_name(const char *name);

/* True when this CPU (and OS) can run the kernels of `level`. */
bool kern_level_supported(kern_level_t level);

/* The best level this CPU supports. */
kern_level_t kern_level_best(void);

/* The level kern_matmul and kern_quantize use now. */
kern_level_t kern_level(void);

/* Forces a level for the whole process (tests, benchmarks, `--kern-level`). Call it before any kernel runs on
 * another thread. Fails (message in err) when the CPU does not support `level`. */
int kern_set_level(kern_level_t level, guild_err_t *err);

/* True when `type` has a matrix kernel, i.e. quant_type_info(type)->computable. */
bool kern_can_matmul(guild_type_t type);

/* Matrix product of nrows weight rows and ntok activation rows:
 *   out[t * ldo + r] = quant_vec_dot_ref(type, n, w + r * w_stride, act + t * act_stride)
 * for r < nrows, t < ntok. Weight rows are `type`; activation rows are quant_type_info(type)->dot_type
 * (kern_quantize makes them). Strides are in bytes, ldo in floats. Single-threaded: callers split rows (or
 * tokens) between threads. Each weight row is read once for all ntok tokens. n must be a whole number of the
 * type's blocks (asserted). */
void kern_matmul(guild_type_t type, int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                 const void *act, size_t act_stride, float *out, size_t ldo);

/* Quantizes n floats into the activation type `act_type` (Q8_K, Q8_0, Q8_1; F32 copies), same bytes as
 * quant_quantize_row_ref. n must be a whole number of blocks (asserted). */
void kern_quantize(guild_type_t act_type, const float *x, void *dst, int64_t n);

/* kern_matmul / kern_quantize at an explicit level (tests compare levels with these); `level` must be
 * supported (asserted). */
void kern_matmul_at(kern_level_t level, guild_type_t type, int64_t n, int64_t nrows, int64_t ntok, const void *w,
                    size_t w_stride, const void *act, size_t act_stride, float *out, size_t ldo);
void kern_quantize_at(kern_level_t level, guild_type_t act_type, const float *x, void *dst, int64_t n);

#endif
