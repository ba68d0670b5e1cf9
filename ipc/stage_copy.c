/* ipc/stage_copy.c — streaming-store copy (contract in stage_copy.h); memcpy is its reference. */
#include "config.h"

#include "ipc/stage_copy.h"

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>

#define STREAM_MIN 4096 /* below this, memcpy: the fence and the head/tail would cost more than they save */

void stage_copy_stream(void *dst, const void *src, size_t n)
{
    if (n < STREAM_MIN) {
        memcpy(dst, src, n);
        return;
    }
    char *d = dst;
    const char *s = src;
    /* head: up to the next 16-byte boundary of dst, where streaming stores need to start */
    size_t head = (16 - ((uintptr_t)d & 15)) & 15;
    memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
    for (; n >= 64; n -= 64, d += 64, s += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)s), b = _mm_loadu_si128((const __m128i *)(s + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + 32)), e = _mm_loadu_si128((const __m128i *)(s + 48));
        _mm_stream_si128((__m128i *)d, a);
        _mm_stream_si128((__m128i *)(d + 16), b);
        _mm_stream_si128((__m128i *)(d + 32), c);
        _mm_stream_si128((__m128i *)(d + 48), e);
    }
    memcpy(d, s, n);
    _mm_sfence();
}

#else

void stage_copy_stream(void *dst, const void *src, size_t n)
{
    memcpy(dst, src, n);
}

#endif
