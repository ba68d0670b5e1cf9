/* The probe's read loops (bench/bw_read.c): bench_read_ahead, the loads with the CPU workers' kernels' software
 * prefetch ahead of them, gives bench_read's value for every length (the same loads in the same order: only the
 * prefetches differ, and they never reach past the end), and the value depends on the bytes read. */
#include "config.h"

#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bw.h"
#include "tests/check_run.h"

START_TEST(test_ahead_equals_plain)
{
    const size_t cap = (size_t)1 << 20;
    uint8_t *buf = aligned_alloc(64, cap);
    ck_assert_ptr_nonnull(buf);
    uint64_t x = 0x9e3779b97f4a7c15u;
    for (size_t i = 0; i < cap; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        buf[i] = (uint8_t)x;
    }
    /* lengths around the prefetch distance and a 4 KiB page, and whole buffers */
    static const size_t lens[] = {256, 512, 4096 - 256, 4096, 4096 + 256, 8192, 65536 + 768, (size_t)1 << 20};
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        ck_assert_uint_eq(bench_read_ahead(buf, lens[k]), bench_read(buf, lens[k]));
        /* an offset start (64-byte aligned), as a thread's share of a piece */
        if (lens[k] + 320 <= cap)
            ck_assert_uint_eq(bench_read_ahead(buf + 320, lens[k]), bench_read(buf + 320, lens[k]));
    }
    /* the value depends on every byte: a byte changed at each 8-byte lane of a 256-byte round changes it */
    for (size_t at = 4096; at < 4096 + 256; at += 8) {
        const uint64_t before = bench_read(buf, 8192), before_ahead = bench_read_ahead(buf, 8192);
        buf[at] ^= 0x10;
        ck_assert_uint_ne(bench_read(buf, 8192), before);
        ck_assert_uint_ne(bench_read_ahead(buf, 8192), before_ahead);
    }
    free(buf);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("bw_read");
    TCase *tc = tcase_create("read");
    tcase_add_test(tc, test_ahead_equals_plain);
    suite_add_tcase(s, tc);
    return check_run(s);
}
