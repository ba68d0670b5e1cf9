/* gpu-worker/dense/cpu/cpu_matmul.h — the one entry point of every dense matrix product of the CPU backend.
 *
 * cpu_matmul and cpu_quantize have exactly the contracts of kern_matmul and kern_quantize (core/kern/kern.h):
 *   out[t * ldo + r] = quant_vec_dot_ref(type, n, w + r * w_stride, act + t * act_stride)
 * so switching them to the SIMD kernels changes no bit. cpu_linear is the threaded y = W x built on them.
 */
#ifndef GUILD_GPU_WORKER_CPU_MATMUL_H
#define GUILD_GPU_WORKER_CPU_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#include "core/model/weights.h"
#include "core/quant/types.h"
#include "core/util/pool.h"

void cpu_matmul(guild_type_t type, int64_t n, int64_t nrows, int64_t ntok, const void *w, size_t w_stride,
                const void *act, size_t act_stride, float *out, size_t ldo);

/* Quantizes n floats into act_type (the dot_type of a weight type; F32 copies). */
void cpu_quantize(guild_type_t act_type, const float *x, void *dst, int64_t n);

/* Bytes of one activation row of n elements for weights of `type` (its dot_type). */
size_t cpu_act_row_bytes(guild_type_t type, int64_t n);

/* y[t][0..nrows) = W x[t] for t < n_tok, W a 2-D tensor (or matrix `expert` of a 3-D one) of nrows rows of
 * n_in = W->ne[0] elements. x rows are ldx floats apart, y rows ldy floats. act: scratch of
 * n_tok * cpu_act_row_bytes(W->type, n_in) bytes. Threads split the quantization by token and the product by
 * blocks of rows. */
void cpu_linear(guild_pool_t *pool, const model_tensor_t *W, int64_t expert, int64_t nrows, int32_t n_tok,
                const float *x, int64_t ldx, float *y, int64_t ldy, void *act);

#endif
