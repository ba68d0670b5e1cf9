#include "config.h"

#include "core/util/hash64.h"

#include <string.h>

#define P1 0x9E3779B185EBCA87ull
#define P2 0xC2B2AE3D27D4EB4Full
#define P3 0x165667B19E3779F9ull
#define P4 0x85EBCA77C2B2AE63ull
#define P5 0x27D4EB2F165667C5ull

static inline uint64_t rotl(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

/* little-endian reads (the specification's byte order; memcpy: no alignment assumed) */
static inline uint64_t read64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

static inline uint32_t read32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap32(v);
#endif
    return v;
}

static inline uint64_t round64(uint64_t acc, uint64_t lane)
{
    acc += lane * P2;
    acc = rotl(acc, 31);
    return acc * P1;
}

static inline uint64_t merge(uint64_t acc, uint64_t v)
{
    acc ^= round64(0, v);
    return acc * P1 + P4;
}

/* Whole 32-byte stripes of p[0 .. n) into the lanes; returns the bytes consumed. */
static size_t stripes(uint64_t *v, const uint8_t *p, size_t n)
{
    size_t done = 0;
    for (; done + 32 <= n; done += 32) {
        v[0] = round64(v[0], read64(p + done));
        v[1] = round64(v[1], read64(p + done + 8));
        v[2] = round64(v[2], read64(p + done + 16));
        v[3] = round64(v[3], read64(p + done + 24));
    }
    return done;
}

void hash64_init(hash64_t *h, uint64_t seed)
{
    memset(h, 0, sizeof *h);
    h->seed = seed;
    h->v[0] = seed + P1 + P2;
    h->v[1] = seed + P2;
    h->v[2] = seed;
    h->v[3] = seed - P1;
}

void hash64_update(hash64_t *h, const void *data, size_t len)
{
    const uint8_t *p = data;
    h->total += len;
    if (h->buffered) {
        size_t take = 32 - h->buffered < len ? 32 - h->buffered : len;
        memcpy(h->buf + h->buffered, p, take);
        h->buffered += (uint32_t)take;
        p += take;
        len -= take;
        if (h->buffered < 32)
            return;
        stripes(h->v, h->buf, 32);
        h->buffered = 0;
    }
    size_t done = stripes(h->v, p, len);
    memcpy(h->buf, p + done, len - done);
    h->buffered = (uint32_t)(len - done);
}

uint64_t hash64_final(const hash64_t *h)
{
    uint64_t acc;
    if (h->total >= 32) {
        const uint64_t *v = h->v;
        acc = rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18);
        for (int i = 0; i < 4; i++)
            acc = merge(acc, v[i]);
    } else {
        acc = h->seed + P5;
    }
    acc += h->total;
    const uint8_t *p = h->buf;
    size_t n = h->buffered;
    for (; n >= 8; n -= 8, p += 8) {
        acc ^= round64(0, read64(p));
        acc = rotl(acc, 27) * P1 + P4;
    }
    if (n >= 4) {
        acc ^= (uint64_t)read32(p) * P1;
        acc = rotl(acc, 23) * P2 + P3;
        n -= 4;
        p += 4;
    }
    for (; n; n--, p++) {
        acc ^= (uint64_t)*p * P5;
        acc = rotl(acc, 11) * P1;
    }
    acc ^= acc >> 33;
    acc *= P2;
    acc ^= acc >> 29;
    acc *= P3;
    acc ^= acc >> 32;
    return acc;
}

uint64_t hash64(const void *data, size_t len, uint64_t seed)
{
    hash64_t h;
    hash64_init(&h, seed);
    hash64_update(&h, data, len);
    return hash64_final(&h);
}
