/* tools/mkmodel/rng.h — counter-based random numbers for synthetic weights.
 *
 * Every row of every tensor draws from its own stream, derived from (seed, tensor name, row index) alone, so the
 * bytes of a file depend only on the seed and the shape: never on the number of threads or which thread made
 * which row. The generator (splitmix64) and the gaussian (a sum of twelve 16-bit uniforms, Irwin-Hall) use
 * integer arithmetic only, so the values are the same on every machine and libm.
 */
#ifndef GUILD_MKMODEL_RNG_H
#define GUILD_MKMODEL_RNG_H

#include <stdint.h>

typedef struct mkmodel_rng {
    uint64_t state;
} mkmodel_rng_t;

/* 64-bit FNV-1a of a NUL-terminated string: the stream id of a tensor. */
uint64_t mkmodel_rng_hash(const char *s);

/* Positions r at the start of the stream of (seed, stream, row). */
void mkmodel_rng_init(mkmodel_rng_t *r, uint64_t seed, uint64_t stream, uint64_t row);

/* Next 64 uniform bits. */
static inline uint64_t mkmodel_rng_next(mkmodel_rng_t *r)
{
    uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform integer in [0, n), n >= 1 (multiply-shift: bias below 2^-32 for the small n used here). */
static inline uint32_t mkmodel_rng_below(mkmodel_rng_t *r, uint32_t n)
{
    return (uint32_t)(((mkmodel_rng_next(r) >> 32) * (uint64_t)n) >> 32);
}

/* Approximately standard normal: zero mean, unit variance (to 1e-9), support [-6, 6], values on a 2^-16 grid.
 * Exact integer arithmetic, hence reproducible everywhere. */
static inline float mkmodel_rng_gauss(mkmodel_rng_t *r)
{
    int64_t sum = 0;
    for (int i = 0; i < 3; i++) {
        uint64_t u = mkmodel_rng_next(r);
        sum += (int64_t)(u & 0xffff) + (int64_t)((u >> 16) & 0xffff) + (int64_t)((u >> 32) & 0xffff) +
               (int64_t)(u >> 48);
    }
    /* Twelve uniforms on 0..65535 have mean 12 * 32767.5 = 393210 and standard deviation ~65536. */
    return (float)(sum - 393210) * (1.0f / 65536.0f);
}

#endif
