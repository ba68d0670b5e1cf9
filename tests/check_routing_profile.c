/* core/model/routing_profile: the file round-trips every count; each malformed (or truncated) file is refused
 * with a message naming the file and line; a profile of another shape is refused for the model; recordings
 * merged into a file add up exactly, and a file that cannot be added to is left byte for byte as it was; sums
 * saturate at the limits. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/model/routing_profile.h"
#include "tests/check_run.h"

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
    /* a sum past a limit saturates there, says so, and leaves the other counts exact */
    uint64_t big[15] = {0};
    big[3] = ROUTING_PROFILE_MAX_COUNT - 100;
    ck_assert_int_eq(routing_profile_add(q, big, 1, &err), 0);
    ck_assert_uint_eq(q->count[3], ROUTING_PROFILE_MAX_COUNT - 100 + 18);
    ck_assert_int_eq(routing_profile_add(q, big, ROUTING_PROFILE_MAX_TOKENS, &err), 1);
    ck_assert_msg(strstr(err.msg, "saturated") && strstr(err.msg, "1 pair counts"), "%s", err.msg);
    ck_assert_uint_eq(q->count[3], ROUTING_PROFILE_MAX_COUNT);
    ck_assert_uint_eq(q->tokens, ROUTING_PROFILE_MAX_TOKENS);
    for (int i = 0; i < 15; i++)
        if (i != 3)
            ck_assert_uint_eq(q->count[i], p->count[i]);
    /* ... and still saves and loads (tokens at its limit: "at least", no pairs-per-token bound) */
    ck_assert_msg(routing_profile_save(q, path, &err) == 0, "%s", err.msg);
    routing_profile_destroy(&r);
    ck_assert_msg(routing_profile_load(&r, path, &err) == 0, "%s", err.msg);
    ck_assert(!memcmp(r->count, q->count, sizeof add) && r->tokens == ROUTING_PROFILE_MAX_TOKENS);
    routing_profile_destroy(&r);
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
        /* cut short inside the last count: "2" may have been "25" */
        {"version = 1\nlayers = 1\nexperts = 2\nexperts_used = 1\ntokens = 50\nlayer 0 = 1 2", "truncated"},
        {"version = 1\nlayers = 1\nexperts = 2\nexperts_used = 1\ntoke", "truncated"},
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

static char *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    char *b = malloc(1 << 16);
    ck_assert_ptr_nonnull(b);
    *n = fread(b, 1, 1 << 16, f);
    fclose(f);
    return b;
}

/* path's bytes are still `want` (n of them) */
static void same_bytes(const char *path, const char *want, size_t n)
{
    size_t m;
    char *b = read_all(path, &m);
    ck_assert_msg(m == n && !memcmp(b, want, n), "%s changed", path);
    free(b);
}

START_TEST(test_merge)
{
    guild_err_t err = {{0}};
    const model_config_t c = {.n_layer = 2, .n_expert = 4, .n_expert_used = 2};
    char path[128];
    snprintf(path, sizeof path, "%s/m.gguf.routing", dir);
    /* two recordings add up exactly; the first creates the file */
    const uint64_t a[8] = {3, 0, 5, 2, 1, 1, 7, 1}, b[8] = {0, 4, 4, 0, 2, 2, 2, 2};
    routing_profile_merge_t mi;
    ck_assert_msg(routing_profile_merge_file(path, &c, "m.gguf", a, 5, false, &mi, &err) == 0, "%s", err.msg);
    ck_assert(mi.created && mi.tokens_before == 0 && mi.tokens_after == 5 && !mi.saturated);
    ck_assert_int_eq(routing_profile_check_file(path, &c, "m.gguf", &err), 0);
    ck_assert_msg(routing_profile_merge_file(path, &c, "m.gguf", b, 4, false, &mi, &err) == 0, "%s", err.msg);
    ck_assert(!mi.created && mi.tokens_before == 5 && mi.tokens_after == 9);
    routing_profile_t *p = NULL;
    ck_assert_msg(routing_profile_load(&p, path, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(p->tokens, 9);
    for (int i = 0; i < 8; i++)
        ck_assert_uint_eq(p->count[i], a[i] + b[i]);
    routing_profile_destroy(&p);
    size_t n;
    char *good = read_all(path, &n);

    /* another model's shape: refused naming the profile and the model, the file as it was */
    const model_config_t other = {.n_layer = 2, .n_expert = 8, .n_expert_used = 2};
    ck_assert_int_eq(routing_profile_merge_file(path, &other, "other.gguf", a, 5, false, &mi, &err), -1);
    ck_assert_msg(strstr(err.msg, "m.gguf.routing") && strstr(err.msg, "other.gguf") && strstr(err.msg, "another"),
                  "%s", err.msg);
    ck_assert_int_eq(routing_profile_check_file(path, &other, "other.gguf", &err), -1);
    ck_assert_msg(strstr(err.msg, "m.gguf.routing") && strstr(err.msg, "other.gguf"), "%s", err.msg);
    same_bytes(path, good, n);

    /* a truncated file, cut anywhere (inside a count, at a line's end, in the header): refused, left as it is */
    for (size_t cut = 1; cut < n; cut++) {
        FILE *f = fopen(path, "wb");
        fwrite(good, 1, cut, f);
        fclose(f);
        ck_assert_msg(routing_profile_merge_file(path, &c, "m.gguf", a, 5, false, &mi, &err) == -1,
                      "a file cut at %zu of %zu bytes was added to", cut, n);
        ck_assert_msg(strstr(err.msg, "m.gguf.routing"), "%s", err.msg);
        ck_assert_int_eq(routing_profile_check_file(path, &c, "m.gguf", &err), -1);
        same_bytes(path, good, cut);
    }
    /* replace: the old file (truncated here) is neither read nor kept */
    ck_assert_msg(routing_profile_merge_file(path, &c, "m.gguf", b, 4, true, &mi, &err) == 0, "%s", err.msg);
    ck_assert(mi.created && mi.tokens_after == 4);
    ck_assert_msg(routing_profile_load(&p, path, &err) == 0, "%s", err.msg);
    ck_assert(!memcmp(p->count, b, sizeof b) && p->tokens == 4);
    routing_profile_destroy(&p);
    /* no temporary file is left beside it */
    char cmd[256];
    snprintf(cmd, sizeof cmd, "test \"$(ls %s | wc -l)\" -eq 1", dir);
    ck_assert_int_eq(system(cmd), 0);
    /* an absent file checks fine */
    snprintf(path, sizeof path, "%s/none.routing", dir);
    ck_assert_int_eq(routing_profile_check_file(path, &c, "m.gguf", &err), 0);
    free(good);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("routing_profile");
    TCase *tc = tcase_create("file");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_merge);
    suite_add_tcase(s, tc);
    return check_run(s);
}
