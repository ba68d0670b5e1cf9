/* Tests for core/util: error messages; hash64 (XXH64) against the specification's published values, and the
 * streaming form against the one-shot one for every split; progress lines only on a terminal. */
#include "core/util/err.h"
#include "core/util/hash64.h"
#include "core/util/progress.h"
#include "tests/check_run.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

START_TEST(test_err_set_returns_minus_one_and_formats)
{
    guild_err_t err = {{0}};
    ck_assert_int_eq(guild_err_set(&err, "tensor %s: type %d", "x", 39), -1);
    ck_assert_str_eq(err.msg, "tensor x: type 39");
}
END_TEST

START_TEST(test_err_prefix_and_errno)
{
    guild_err_t err = {{0}};
    guild_err_errno(&err, ENOENT, "open %s", "a.gguf");
    ck_assert_str_eq(err.msg, "open a.gguf: No such file or directory");
    guild_err_prefix(&err, "model %d: ", 3);
    ck_assert_str_eq(err.msg, "model 3: open a.gguf: No such file or directory");
    ck_assert_int_eq(guild_err_set(NULL, "ignored"), -1);
}
END_TEST

START_TEST(test_err_truncates_long_messages)
{
    guild_err_t err;
    char big[4 * GUILD_ERR_MAX];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    guild_err_set(&err, "%s", big);
    ck_assert_uint_eq(strlen(err.msg), GUILD_ERR_MAX - 1);
    guild_err_prefix(&err, "p: ");
    ck_assert_uint_eq(strlen(err.msg), GUILD_ERR_MAX - 1);
    ck_assert(!strncmp(err.msg, "p: aaa", 6));
}
END_TEST

START_TEST(test_hash64_known_values)
{
    /* xxHash's own and python-xxhash's published XXH64 values */
    ck_assert_uint_eq(hash64("", 0, 0), 0xEF46DB3751D8E999ull);
    ck_assert_uint_eq(hash64("a", 1, 0), 0xD24EC4F1A98C6E5Bull);
    ck_assert_uint_eq(hash64("abc", 3, 0), 0x44BC2CF5AD770999ull);
    ck_assert_uint_eq(hash64("Nobody inspects the spammish repetition", 39, 0), 0xFBCEA83C8A378BF1ull);
    ck_assert_uint_eq(hash64("xxhash", 6, 20141025), 0xB559B98D844E0635ull);
    ck_assert_uint_ne(hash64("abc", 3, 1), hash64("abc", 3, 0));
}
END_TEST

START_TEST(test_hash64_streaming_equals_one_shot)
{
    unsigned char buf[300];
    for (int i = 0; i < 300; i++)
        buf[i] = (unsigned char)(i * 131 + 7);
    for (size_t n = 0; n <= sizeof buf; n += 7) {
        const uint64_t want = hash64(buf, n, 42);
        for (size_t step = 1; step <= 40; step += 3) {
            hash64_t h;
            hash64_init(&h, 42);
            for (size_t k = 0; k < n; k += step)
                hash64_update(&h, buf + k, k + step <= n ? step : n - k);
            ck_assert_uint_eq(hash64_final(&h), want);
        }
        /* a different byte, a different hash */
        if (n) {
            buf[n / 2] ^= 1;
            ck_assert_uint_ne(hash64(buf, n, 42), want);
            buf[n / 2] ^= 1;
        }
    }
}
END_TEST

/* Progress lines: never without a terminal (logs, tests), never in a process that did not ask for them; the
 * calls take the NULL they get then. */
START_TEST(test_progress_only_on_a_terminal)
{
    guild_progress_enable(false);
    ck_assert_ptr_null(guild_progress_begin("x", 10, GUILD_PROGRESS_COUNT));
    guild_progress_enable(true);
    const int saved = dup(STDERR_FILENO);
    FILE *f = tmpfile();
    ck_assert_ptr_nonnull(f);
    ck_assert_int_ge(dup2(fileno(f), STDERR_FILENO), 0);
    guild_progress_t *p = guild_progress_begin("x", 10, GUILD_PROGRESS_BYTES);
    guild_progress_add(p, 5);
    guild_progress_note(p, "note");
    guild_progress_end(&p);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    ck_assert_ptr_null(p);
    ck_assert_int_eq(ftell(f), 0);
    fclose(f);
    guild_progress_enable(false);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("util");
    TCase *tc = tcase_create("err");
    tcase_add_test(tc, test_err_set_returns_minus_one_and_formats);
    tcase_add_test(tc, test_err_prefix_and_errno);
    tcase_add_test(tc, test_err_truncates_long_messages);
    tcase_add_test(tc, test_hash64_known_values);
    tcase_add_test(tc, test_hash64_streaming_equals_one_shot);
    tcase_add_test(tc, test_progress_only_on_a_terminal);
    suite_add_tcase(s, tc);
    return check_run(s);
}
