/* core/util/hash64.h — XXH64, a fast non-cryptographic 64-bit hash (Yann Collet's xxHash, 64-bit variant, as
 * specified in its xxhash_spec.md; written here from the specification). Used to tell that two copies of the
 * same bytes are the same (core/model/expert_digest.h): it detects a different, damaged or edited file, not a
 * forgery made to collide (who can forge the file could as well replace the program). */
#ifndef GUILD_UTIL_HASH64_H
#define GUILD_UTIL_HASH64_H

#include <stddef.h>
#include <stdint.h>

/* A streaming state: hash64_init, hash64_update any number of times, hash64_final. The same bytes give the
 * same value however they are split. */
typedef struct hash64 {
    uint64_t v[4];     /* the four lanes */
    uint64_t total;    /* bytes so far */
    uint8_t buf[32];   /* a partial stripe */
    uint32_t buffered; /* bytes in buf */
    uint64_t seed;
} hash64_t;

void hash64_init(hash64_t *h, uint64_t seed);
void hash64_update(hash64_t *h, const void *data, size_t len);
uint64_t hash64_final(const hash64_t *h);

/* The hash of data[0 .. len) in one call. */
uint64_t hash64(const void *data, size_t len, uint64_t seed);

#endif
