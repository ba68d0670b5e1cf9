/* Tests for core/util: error messages. */
#include "core/util/err.h"

#include <check.h>
#include <errno.h>
#include <string.h>

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

int main(void)
{
    Suite *s = suite_create("util");
    TCase *tc = tcase_create("err");
    tcase_add_test(tc, test_err_set_returns_minus_one_and_formats);
    tcase_add_test(tc, test_err_prefix_and_errno);
    tcase_add_test(tc, test_err_truncates_long_messages);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
