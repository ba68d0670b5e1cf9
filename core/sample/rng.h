/* core/sample/rng.h — Guild's own pseudo-random generator: xoshiro256** seeded through splitmix64.
 *
 * Sampling must be reproducible for a given seed on every machine and libc, so nothing here uses rand().
 * The sequence for a seed is fixed forever (tests pin its first values).
 */
#ifndef GUILD_SAMPLE_RNG_H
#define GUILD_SAMPLE_RNG_H

#include <stdint.h>

typedef struct rng {
    uint64_t s[4]; /* xoshiro256** state; never all zero */
} rng_t;

/* Seeds the state from `seed` by four steps of splitmix64 (any seed, 0 included, is fine). */
void rng_seed(rng_t *r, uint64_t seed);

/* Next 64 random bits. */
uint64_t rng_next(rng_t *r);

/* Uniform double in [0, 1) with 53 random bits. */
double rng_uniform(rng_t *r);

#endif
