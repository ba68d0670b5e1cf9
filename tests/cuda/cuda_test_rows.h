/* tests/cuda/cuda_test_rows.h — random weight rows of every type for the CUDA kernels' tests (check_cuda_kernels
 * on the device, check_cuda_host on the host). Check-suite helpers (they assert). */
#ifndef GUILD_TESTS_CUDA_CUDA_TEST_ROWS_H
#define GUILD_TESTS_CUDA_CUDA_TEST_ROWS_H

#include <stdint.h>

#include "core/quant/types.h"
#include "core/sample/rng.h"

/* A row of n elements of an IQ type, which has no quantizer: random bytes (every grid index, sign and scale
 * pattern is a valid block) with each block's fp16 scale set to a finite value of varied magnitude (IQ1_M's
 * spread over the top nibbles of its four uint16 scales). */
void cuda_test_iq_row(rng_t *r, guild_type_t type, char *w, int64_t n);

/* Row w of n elements of `type`: x quantized by the reference quantizer, or cuda_test_iq_row where the type has
 * none. */
void cuda_test_make_row(rng_t *r, guild_type_t type, const float *x, char *w, int64_t n);

#endif
