/* core/model/routing_profile: the file round-trips every count; each malformed file is refused with a message
 * naming the file and line; a profile of another shape is refused for the model. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/model/routing_profile.h"

static char dir[64];

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/guild-routing-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

START_TEST(test_round_trip)
{
    guild_err_t err = {{0}};
    routing_profile_t *p = NULL, *q = NULL;
    ck_assert_msg(routing_profile_new(&p, 3, 5, 2, &err) == 0, "%s", err.msg);
    uint64_t add[15];
    for (int i = 0; i < 15; i++)
        add[i] = (uint64_t)(i * i) + (i == 14 ? (UINT64_C(1) << 40) : 0);
    /* 2^40 pairs in one layer need 2^39 tokens of top-2 */
    ck_assert(routing_profile_add(p, add, (UINT64_C(1) << 40) + 1000, &err) == 0);
    ck_assert(routing_profile_add(p, add, 7, &err) == 0);
    char path[128];
    snprintf(path, sizeof path, "%s/m.gguf.routing", dir);
    ck_assert_msg(routing_profile_save(p, path, &err) == 0, "%s", err.msg);
    ck_assert_msg(routing_profile_load(&q, path, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(q->n_layer, 3);
    ck_assert_int_eq(q->n_expert, 5);
    ck_assert_int_eq(q->n_used, 2);
    ck_assert_uint_eq(q->tokens, (UINT64_C(1) << 40) + 1007);
    ck_assert(!memcmp(q->count, p->count, sizeof add));
    ck_assert_uint_eq(q->count[14], 2 * ((UINT64_C(1) << 40) + 196));
    /* the model's path: MODEL.routing; absent: no profile, no error */
    char mpath[128], rp[160];
    snprintf(mpath, sizeof mpath, "%s/m.gguf", dir);
    ck_assert(routing_profile_path(mpath, rp, sizeof rp, &err) == 0 && !strcmp(rp, path));
    model_config_t c = {.n_layer = 3, .n_expert = 5, .n_expert_used = 2};
    routing_profile_t *r = NULL;
    ck_assert_msg(routing_profile_load_for_model(mpath, &c, &r, &err) == 0 && r, "%s", err.msg);
    routing_profile_destroy(&r);
    c.n_expert = 6;
    ck_assert_int_eq(routing_profile_load_for_model(mpath, &c, &r, &err), -1);
    ck_assert_msg(strstr(err.msg, "another model") && strstr(err.msg, "m.gguf.routing"), "%s", err.msg);
    ck_assert_ptr_null(r);
    snprintf(mpath, sizeof mpath, "%s/none.gguf", dir);
    ck_assert(routing_profile_load_for_model(mpath, &c, &r, &err) == 0 && !r);
    /* shares */
    uint8_t res[15] = {0};
    ck_assert(routing_profile_share(q, res) == 0.0);
    memset(res, 1, sizeof res);
    ck_assert(routing_profile_share(q, res) == 1.0);
    /* overflow of a sum is refused and changes nothing */
    uint64_t big[15] = {0};
    big[3] = UINT64_C(1) << 62;
    ck_assert_int_eq(routing_profile_add(q, big, 1, &err), -1);
    ck_assert(!memcmp(q->count, p->count, sizeof add));
    routing_profile_destroy(&p);
    routing_profile_destroy(&q);
    ck_assert_ptr_null(q);
    ck_assert_int_eq(routing_profile_new(&p, 0, 5, 2, &err), -1);
    ck_assert_int_eq(routing_profile_new(&p, 2, 5, 6, &err), -1);
}
END_TEST

START_TEST(test_refusals)
{
    static const struct {
        const char *text, *want;
    } bad[] = {
        {"", "empty"},
        {"# nothing\n", "empty"},
        {"version = 2\n", "version 2"},
        {"layers = 2\n", "version = 1` first"},
        {"version = 1\nlayers = 1\nexperts = 2\nexperts_used = 1\ntokens = 5\n", "no layer lines"},
        {"version = 1\nlayers = 1\nexperts = 2\nexperts_used = 1\nlayer 0 = 1 2\n", "before layers"},
        {"version = 1\nlayers = 1\nexperts = 2\nexperts_used = 1\ntokens = 5\nlayer 0 = 1\n", "expected 2 counts"},
        {"version = 1\nlayers = 1\nexperts = 2\nexperts_used = 1\ntokens = 5\nlayer 0 = 1 2 3\n", "more than 2"},
        {"version = 1\nlayers = 1\nexperts = 2\nexperts_used = 1\ntokens = 5\nlayer 0 = 1 -2\n", "expert 1"},
        {"version = 1\nlayers = 1\nexperts = 2\nexperts_used = 1\ntokens = 5\nlayer 0 = 1 2x\n", "expert 1"},
        {"version = 1\nlayers = 1\nexperts = 2\nexperts_used = 1\ntokens = 5\nlayer 0 = 1 9223372036854775808\n",
         "expert 1"},
        {"version = 1\nlayers = 1\nexperts = 2\nexperts_used = 1\ntokens = 5\nlayer 0 = 3 3\n", "more pairs"},
        {"version = 1\nlayers = 2\nexperts = 2\nexperts_used = 1\ntokens = 5\nlayer 0 = 1 2\n", "layer 1 is missing"},
        {"version = 1\nlayers = 2\nexperts = 2\nexperts_used = 1\ntokens = 5\nlayer 0 = 1 2\nlayer 0 = 1 2\n",
         "given twice"},
        {"version = 1\nlayers = 1\nexperts = 2\nexperts_used = 1\ntokens = 5\nlayer 1 = 1 2\n", "out of range"},
        {"version = 1\nlayers = 1\nexperts = 2\nexperts_used = 3\ntokens = 5\nlayer 0 = 1 2\n", "not a shape"},
        {"version = 1\nlayers = 1\nlayers = 1\n", "given twice"},
        {"version = 1\nlayers = 0\n", "layers = 0"},
        {"version = 1\nexperts = 99999\n", "experts = 99999"},
        {"version = 1\ncolour = blue\n", "unknown key"},
        {"version = 1\njust words\n", "key = value"},
        {"version = 1\nlayers = 1\nexperts = 2\nexperts_used = 1\ntokens = 5\nlayer 0 = 1 2\ntokens = 6\n",
         "tokens given twice"},
    };
    char path[128];
    snprintf(path, sizeof path, "%s/bad.routing", dir);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        guild_err_t err = {{0}};
        routing_profile_t *p = NULL;
        write_file(path, bad[i].text);
        ck_assert_msg(routing_profile_load(&p, path, &err) == -1, "accepted case %zu", i);
        ck_assert_ptr_null(p);
        ck_assert_msg(strstr(err.msg, bad[i].want) && strstr(err.msg, "bad.routing"), "case %zu: %s", i, err.msg);
    }
    guild_err_t err = {{0}};
    routing_profile_t *p = NULL;
    snprintf(path, sizeof path, "%s/absent.routing", dir);
    ck_assert_int_eq(routing_profile_load(&p, path, &err), -1);
    ck_assert_msg(strstr(err.msg, "absent.routing"), "%s", err.msg);
    /* a NUL byte */
    snprintf(path, sizeof path, "%s/nul.routing", dir);
    FILE *f = fopen(path, "w");
    fwrite("version = 1\n\0\n", 1, 14, f);
    fclose(f);
    ck_assert_int_eq(routing_profile_load(&p, path, &err), -1);
    ck_assert_msg(strstr(err.msg, "NUL"), "%s", err.msg);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("routing_profile");
    TCase *tc = tcase_create("file");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_refusals);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
