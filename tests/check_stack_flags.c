/* coordinator/stack_flags: the stager flags (--stager, --stager-threads) and --force-split, parsed through
 * getopt_long as the commands do, checked, and listed in --help. */
#include "config.h"

#include <check.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/stack_flags.h"

/* Parses argv (NULL-terminated, argv[0] included) with every stack flag; 0, or -1 with err. */
static int parse(stack_flags_t *f, char **argv, guild_err_t *err)
{
    int argc = 0;
    while (argv[argc])
        argc++;
    static const struct option none[] = {{NULL, 0, NULL, 0}};
    struct option opts[64];
    stack_flags_options(opts, 64, none, STACK_FLAGS_ALL);
    stack_flags_init(f);
    optind = 1;
    opterr = 0;
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        int r = stack_flags_parse(f, o, optarg, err);
        if (r < 0)
            return -1;
        ck_assert_int_eq(r, 1);
    }
    return stack_flags_check(f, STACK_FLAGS_ALL, NULL, false, err);
}

START_TEST(test_stager_default_and_kinds)
{
    stack_flags_t f;
    guild_err_t err = {{0}};
    char *a0[] = {"x", NULL};
    ck_assert_int_eq(parse(&f, a0, &err), 0);
    ck_assert_int_lt(f.st.pipe.stager, 0); /* the mode's default: the pipeline and the stack resolve it */
    ck_assert_int_eq(f.st.pipe.stager_threads, 0);
    const char *kinds[] = {"none", "thread", "process", "pin"};
    const int want[] = {BACKEND_STAGER_NONE, BACKEND_STAGER_THREAD, BACKEND_STAGER_PROCESS, BACKEND_STAGER_PIN};
    for (int i = 0; i < 4; i++) {
        char *a[] = {"x", "--stager", (char *)kinds[i], NULL};
        ck_assert_msg(parse(&f, a, &err) == 0, "%s", err.msg);
        ck_assert_int_eq(f.st.pipe.stager, want[i]);
    }
    char *a1[] = {"x", "--stager", "process", "--stager-threads", "3", NULL};
    ck_assert_msg(parse(&f, a1, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(f.st.pipe.stager_threads, 3);
    char *a2[] = {"x", "--single-process", "--stager", "thread", "--stager-threads", "2", NULL};
    ck_assert_msg(parse(&f, a2, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(f.st.pipe.stager, BACKEND_STAGER_THREAD);
    char *a3[] = {"x", "--force-split", "0.5", NULL};
    ck_assert_msg(parse(&f, a3, &err) == 0, "%s", err.msg);
    ck_assert(f.st.pipe.split_gpu_fraction == 0.5);
}
END_TEST

START_TEST(test_stager_refused)
{
    stack_flags_t f;
    guild_err_t err = {{0}};
    struct {
        char *argv[8];
        const char *msg;
    } bad[] = {
        {{"x", "--stager", "dma", NULL}, "--stager dma: expected none, thread, process or pin"},
        {{"x", "--stager", "", NULL}, "expected none, thread, process or pin"},
        {{"x", "--stager-threads", "0", NULL}, "--stager-threads"},
        {{"x", "--stager-threads", "many", NULL}, "--stager-threads"},
        {{"x", "--stager", "none", "--stager-threads", "2", NULL}, "not --stager none"},
        {{"x", "--stager", "pin", "--stager-threads", "2", NULL}, "not --stager pin"},
        {{"x", "--single-process", "--stager", "process", NULL}, "--stager process is for the multi-process mode"},
        {{"x", "--force-split", "0", NULL}, "--force-split 0: expected a fraction"},
        {{"x", "--force-split", "1.5", NULL}, "--force-split 1.5"},
        {{"x", "--force-split", "half", NULL}, "--force-split half"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err.msg[0] = '\0';
        ck_assert_msg(parse(&f, bad[i].argv, &err) == -1, "case %zu accepted", i);
        ck_assert_msg(strstr(err.msg, bad[i].msg), "case %zu: '%s' lacks '%s'", i, err.msg, bad[i].msg);
    }
}
END_TEST

START_TEST(test_help_lists_the_stager)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    ck_assert_ptr_nonnull(out);
    stack_flags_usage(out, STACK_FLAGS_ALL, "cpu");
    fclose(out);
    ck_assert_msg(strstr(buf, "--stager KIND") && strstr(buf, "process") && strstr(buf, "thread") &&
                      strstr(buf, "none"), "%s", buf);
    ck_assert_msg(strstr(buf, "--stager-threads K") && strstr(buf, "half the online CPUs"), "%s", buf);
    ck_assert_msg(strstr(buf, "--force-split F"), "%s", buf);
    free(buf);
    /* a command without them does not list them */
    out = open_memstream(&buf, &len);
    stack_flags_usage(out, STACK_FLAG_BACKEND | STACK_FLAG_GPU_MEM, "cpu");
    fclose(out);
    ck_assert_ptr_null(strstr(buf, "--stager"));
    free(buf);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("stack_flags");
    TCase *tc = tcase_create("stager");
    tcase_add_test(tc, test_stager_default_and_kinds);
    tcase_add_test(tc, test_stager_refused);
    tcase_add_test(tc, test_help_lists_the_stager);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
