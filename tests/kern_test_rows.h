/* tests/kern_test_rows.h — the CPU kernel tests' random stream and random weight rows (check_kernels, check_amx,
 * check_pack): a seedable splitmix64 stream, so that a failure reproduces from its seed, and rows of random
 * blocks whose every float field is a finite scale while the quants stay fully random. */
#ifndef GUILD_TESTS_KERN_TEST_ROWS_H
#define GUILD_TESTS_KERN_TEST_ROWS_H

#include <stdint.h>

#include "core/quant/types.h"

/* Restarts the stream at `seed`. */
void kern_test_seed(uint64_t seed);

/* The next 64 random bits. */
uint64_t kern_test_rng_next(void);

/* Uniform in [-1, 1). */
float kern_test_rng_float(void);

/* A finite, normal fp16 scale of either sign in about [2^-12, 2^-3]. */
uint16_t kern_test_scale_f16(void);

/* p[0..1] = v, little-endian. */
void kern_test_put_u16(uint8_t *p, uint16_t v);

/* Row of n elements of `type`: random bytes, then every float field of each block made a finite scale (F32,
 * F16 and BF16 rows are random values in [-4, 4)). */
void kern_test_fill_blocks(guild_type_t type, uint8_t *row, int64_t n);

#endif
