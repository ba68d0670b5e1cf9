/* tools/mkmodel/iq_fill.h — valid random blocks for the IQ types that have no quantizer.
 *
 * IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S and IQ1_M need an importance-matrix search to quantize well and
 * Guild has no quantizer for them; synthetic models in these types exist so kernels can be benchmarked. Each
 * block gets uniformly random grid indices and signs (IQ1: uniform over the grid entries whose negation is also
 * in the grid, and a random delta sign), sub-block scales uniform over the upper half of their range, and a
 * super-block scale d chosen so that the dequantized elements have zero mean and standard deviation `std`
 * (computed exactly from the grid tables; fp16 rounding of d aside).
 */
#ifndef GUILD_MKMODEL_IQ_FILL_H
#define GUILD_MKMODEL_IQ_FILL_H

#include <stdbool.h>
#include <stdint.h>

#include "core/quant/types.h"
#include "tools/mkmodel/rng.h"

/* True for the types mkmodel_iq_fill_row writes. */
bool mkmodel_iq_fill_supported(guild_type_t type);

/* Writes n elements (a multiple of 256) of `type` as random blocks into dst. Thread-safe. */
void mkmodel_iq_fill_row(guild_type_t type, mkmodel_rng_t *r, float std, void *dst, int64_t n);

#endif
