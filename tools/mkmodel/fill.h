/* tools/mkmodel/fill.h — the bytes of a run of rows of one tensor.
 *
 * Row r of tensor t holds ne[0] elements mean + std * N(0, 1) drawn from the stream (seed, name of t, r)
 * (tools/mkmodel/rng.h), then quantized to t's type with quant_quantize_row_ref (F32 copied; IQ types without
 * a quantizer written as random blocks of the same mean and std, tools/mkmodel/iq_fill.h). The result depends
 * on (seed, t, r) only, so any thread may make any rows.
 */
#ifndef GUILD_MKMODEL_FILL_H
#define GUILD_MKMODEL_FILL_H

#include <stdint.h>

#include "core/util/err.h"
#include "tools/mkmodel/plan.h"

/* Writes rows [row0, row0 + n_rows) of t into dst (n_rows * t->row_bytes bytes). scratch holds t->ne[0] floats.
 * Fails only when the quantizer refuses the type (a bug in the plan), with a message naming the tensor. */
int mkmodel_fill_rows(const mkmodel_tensor_t *t, uint64_t seed, uint64_t row0, uint64_t n_rows, void *dst,
                      float *scratch, guild_err_t *err);

/* True when rows of `type` can be made (a quantizer, a float type, or random IQ blocks). */
bool mkmodel_fill_supported(guild_type_t type);

#endif
