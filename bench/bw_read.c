/* The probe's read loops: the widest loads the CPU has (one core's DRAM throughput depends on the load width:
 * bench/results/code-comment-measurements.md), four independent chains. */
#include "config.h"

#include "bench/bw.h"

#include <stdint.h>

#include "core/kern/cpu.h"

#if defined(__x86_64__)
#include <immintrin.h>

/* The 512-bit loads of p[0 .. n), four chains; with ahead > 0 every line up to `ahead` bytes past the loads is asked
 * into L2 first, never past the end (the kernels' prefetch cursor: addresses as integers, as the kernels keep them).
 * Inlined into each caller with its constant `ahead`. */
__attribute__((target("avx512f"), always_inline)) static inline uint64_t read_avx512_ahead(const void *p, size_t n,
                                                                                          size_t ahead)
{
    const char *c = p;
    const uintptr_t end = (uintptr_t)c + n;
    uintptr_t next = (uintptr_t)c;
    __m512i a = _mm512_setzero_si512(), b = a, d = a, e = a;
    for (size_t i = 0; i + 256 <= n; i += 256) {
        if (ahead) {
            const uintptr_t want = (uintptr_t)c + i + ahead < end ? (uintptr_t)c + i + ahead : end;
            for (; next < want; next += 64)
                _mm_prefetch((const char *)next, _MM_HINT_T1);
        }
        a = _mm512_xor_si512(a, _mm512_load_si512(c + i));
        b = _mm512_xor_si512(b, _mm512_load_si512(c + i + 64));
        d = _mm512_xor_si512(d, _mm512_load_si512(c + i + 128));
        e = _mm512_xor_si512(e, _mm512_load_si512(c + i + 192));
    }
    a = _mm512_xor_si512(_mm512_xor_si512(a, b), _mm512_xor_si512(d, e));
    /* the lanes folded by xor (the intrinsic's reduce-add is signed arithmetic: it overflows on such values) */
    uint64_t lanes[8], v = 0;
    _mm512_storeu_si512(lanes, a);
    for (int l = 0; l < 8; l++)
        v ^= lanes[l];
    return v;
}

__attribute__((target("avx512f"))) static uint64_t read_avx512(const void *p, size_t n)
{
    return read_avx512_ahead(p, n, 0);
}

__attribute__((target("avx512f"))) static uint64_t read_ahead_avx512(const void *p, size_t n)
{
    return read_avx512_ahead(p, n, BENCH_READ_AHEAD);
}

__attribute__((target("avx512f,avx512bw"))) static uint64_t sum_avx512(const void *p, size_t n)
{
    const char *c = p;
    const __m512i z = _mm512_setzero_si512();
    __m512i a = z, b = z;
    size_t i = 0;
    for (; i + 128 <= n; i += 128) {
        a = _mm512_add_epi64(a, _mm512_sad_epu8(_mm512_loadu_si512(c + i), z));
        b = _mm512_add_epi64(b, _mm512_sad_epu8(_mm512_loadu_si512(c + i + 64), z));
    }
    uint64_t s = (uint64_t)_mm512_reduce_add_epi64(_mm512_add_epi64(a, b));
    for (; i < n; i++)
        s += (uint8_t)c[i];
    return s;
}

__attribute__((target("avx2"))) static uint64_t sum_avx2(const void *p, size_t n)
{
    const char *c = p;
    const __m256i z = _mm256_setzero_si256();
    __m256i a = z, b = z;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        a = _mm256_add_epi64(a, _mm256_sad_epu8(_mm256_loadu_si256((const __m256i *)(c + i)), z));
        b = _mm256_add_epi64(b, _mm256_sad_epu8(_mm256_loadu_si256((const __m256i *)(c + i + 32)), z));
    }
    a = _mm256_add_epi64(a, b);
    uint64_t s = (uint64_t)_mm256_extract_epi64(a, 0) + (uint64_t)_mm256_extract_epi64(a, 1) +
                 (uint64_t)_mm256_extract_epi64(a, 2) + (uint64_t)_mm256_extract_epi64(a, 3);
    for (; i < n; i++)
        s += (uint8_t)c[i];
    return s;
}

__attribute__((target("avx2"))) static uint64_t read_avx2(const void *p, size_t n)
{
    const char *c = p;
    __m256i a = _mm256_setzero_si256(), b = a, d = a, e = a;
    for (size_t i = 0; i + 128 <= n; i += 128) {
        a = _mm256_xor_si256(a, _mm256_load_si256((const __m256i *)(c + i)));
        b = _mm256_xor_si256(b, _mm256_load_si256((const __m256i *)(c + i + 32)));
        d = _mm256_xor_si256(d, _mm256_load_si256((const __m256i *)(c + i + 64)));
        e = _mm256_xor_si256(e, _mm256_load_si256((const __m256i *)(c + i + 96)));
    }
    a = _mm256_xor_si256(_mm256_xor_si256(a, b), _mm256_xor_si256(d, e));
    /* every lane, so that the value depends on every byte */
    return (uint64_t)_mm256_extract_epi64(a, 0) ^ (uint64_t)_mm256_extract_epi64(a, 1) ^
           (uint64_t)_mm256_extract_epi64(a, 2) ^ (uint64_t)_mm256_extract_epi64(a, 3);
}
#endif

static uint64_t read_words(const void *p, size_t n)
{
    const uint64_t *w = p;
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
    n /= sizeof *w;
    for (size_t i = 0; i + 8 <= n; i += 8) {
        a0 ^= w[i];
        a1 ^= w[i + 1];
        a2 ^= w[i + 2];
        a3 ^= w[i + 3];
        a4 ^= w[i + 4];
        a5 ^= w[i + 5];
        a6 ^= w[i + 6];
        a7 ^= w[i + 7];
    }
    return a0 ^ a1 ^ a2 ^ a3 ^ a4 ^ a5 ^ a6 ^ a7;
}

uint64_t bench_sum_bytes(const void *p, size_t n)
{
#if defined(__x86_64__)
    const kern_cpu_t *cpu = kern_cpu();
    if (cpu->avx512f && cpu->avx512bw)
        return sum_avx512(p, n);
    if (cpu->avx2)
        return sum_avx2(p, n);
#endif
    const uint8_t *c = p;
    uint64_t s = 0;
    for (size_t i = 0; i < n; i++)
        s += c[i];
    return s;
}

uint64_t bench_read(const void *p, size_t n)
{
#if defined(__x86_64__)
    const kern_cpu_t *cpu = kern_cpu();
    if (cpu->avx512f)
        return read_avx512(p, n);
    if (cpu->avx2)
        return read_avx2(p, n);
#endif
    return read_words(p, n);
}

uint64_t bench_read_ahead(const void *p, size_t n)
{
#if defined(__x86_64__)
    if (kern_cpu()->avx512f)
        return read_ahead_avx512(p, n);
#endif
    return bench_read(p, n); /* no AVX-512: the CPU workers' kernels that prefetch are not the ones that run */
}
