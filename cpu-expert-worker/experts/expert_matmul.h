/* cpu-expert-worker/experts/expert_matmul.h — the one entry point of every matrix product of the routed experts.
 *
 * Same contracts as kern_matmul / kern_quantize (core/kern/kern.h):
 *   out[t * ldo + r] = quant_vec_dot_ref(type, n, w + r * w_stride, act + t * act_stride)
 * so switching them to the SIMD kernels changes no bit of any expert output. A packed matrix (expert_mats_t's
 * *_packed, core/kern/pack.h) gives the same bits through kern_matmul_packed.
 */
#ifndef GUILD_CPU_EXPERT_WORKER_EXPERT_MATMUL_H
#define GUILD_CPU_EXPERT_WORKER_EXPERT_MATMUL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/quant/types.h"

/* packed: w is row r0 of a packed matrix, r0 and nrows multiples of KERN_PACK_ROWS (callers assert r0; nrows is
 * asserted here). */
void expert_matmul(guild_type_t type, bool packed, int64_t n, int64_t nrows, int64_t ntok, const void *w,
                   size_t w_stride, const void *act, size_t act_stride, float *out, size_t ldo);

/* Quantizes n floats into act_type (a weight type's dot_type; F32 copies). */
void expert_quantize(guild_type_t act_type, const float *x, void *dst, int64_t n);

#endif
