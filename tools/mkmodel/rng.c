#include "tools/mkmodel/rng.h"

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t mkmodel_rng_hash(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ull;
    }
    return h;
}

void mkmodel_rng_init(mkmodel_rng_t *r, uint64_t seed, uint64_t stream, uint64_t row)
{
    /* Mixing each input separately keeps streams of neighbouring rows (and seeds) unrelated. */
    r->state = mix64(mix64(seed + 0x243F6A8885A308D3ull) ^ mix64(stream) ^ mix64(row * 0x9E3779B97F4A7C15ull + 1));
}
