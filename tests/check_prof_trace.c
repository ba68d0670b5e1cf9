/* core/prof/prof_trace: a trace written and read back item for item; the record cap; malformed files refused
 * with their line, nothing kept. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/prof/prof_trace.h"
#include "tests/check_run.h"

static char path[64];

static void setup(void)
{
    snprintf(path, sizeof path, "/tmp/check_prof_trace_%d.trace", (int)getpid());
}

static void teardown(void)
{
    unlink(path);
}

/* Writes text to path. */
static void put(const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
}

/* A trace of two names (one with spaces and template arguments), three steps, every kind of record. */
static void fill(prof_trace_t *t)
{
    guild_err_t err = {{0}};
    ck_assert_int_eq(prof_trace_add_name(t, "rmsnorm_cl_kernel", &err), 0);
    ck_assert_int_eq(prof_trace_add_name(t, "matmul_q_multi2_kernel<(int)12, (int)14, 1, 2>", &err), 1);
    ck_assert_int_eq(prof_trace_set_model(t, "/tmp/a model.gguf", &err), 0);
    t->n_layer = 48;
    t->dropped = 7;
    const prof_step_t steps[] = {
        {.start = 100, .end = 900, .n_tokens = 512, .n_out = 1, .kind = PROF_STEP_FORWARD, .ok = 1},
        {.start = 1000, .end = 1200, .n_tokens = 1, .n_out = 1, .kind = PROF_STEP_SEQS, .ok = 1},
        {.start = 1300, .end = 1310, .n_tokens = 0, .n_out = 0, .kind = PROF_STEP_STATE, .ok = 0},
    };
    for (size_t i = 0; i < 3; i++)
        ck_assert_int_eq(prof_trace_add_step(t, &steps[i], &err), 0);
    const prof_rec_t recs[] = {
        {.start = 1010, .end = 1050, .what = 1, .kind = PROF_KERNEL, .graph = 1},
        {.start = 1000, .end = 1020, .what = 0, .kind = PROF_KERNEL, .graph = 0},
        {.start = 1100, .end = 1150, .bytes = 4096, .what = PROF_COPY_DTOH, .kind = PROF_MEMCPY, .graph = 1},
        {.start = 1160, .end = 1170, .bytes = 64, .kind = PROF_MEMSET, .graph = 0},
        {.start = UINT64_MAX - 5, .end = UINT64_MAX, .what = 0, .kind = PROF_KERNEL, .graph = 1},
    };
    for (size_t i = 0; i < 5; i++)
        ck_assert_int_eq(prof_trace_add_rec(t, &recs[i], &err), 0);
}

START_TEST(test_round_trip)
{
    prof_trace_t a, b;
    guild_err_t err = {{0}};
    prof_trace_init(&a, 0);
    fill(&a);
    ck_assert_msg(prof_trace_write(&a, path, &err) == 0, "%s", err.msg);
    ck_assert_msg(prof_trace_read(&b, path, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(b.n_layer, 48);
    ck_assert_uint_eq(b.dropped, 7);
    ck_assert_str_eq(b.model, "/tmp/a model.gguf");
    ck_assert_int_eq(b.n_names, 2);
    for (int32_t i = 0; i < 2; i++)
        ck_assert_str_eq(b.names[i], a.names[i]);
    ck_assert_uint_eq(b.n_steps, 3);
    for (size_t i = 0; i < 3; i++) { /* field by field: the padding is not the file's */
        const prof_step_t *x = &a.steps[i], *y = &b.steps[i];
        ck_assert_uint_eq(y->start, x->start);
        ck_assert_uint_eq(y->end, x->end);
        ck_assert_int_eq(y->n_tokens, x->n_tokens);
        ck_assert_int_eq(y->n_out, x->n_out);
        ck_assert_uint_eq(y->kind, x->kind);
        ck_assert_uint_eq(y->ok, x->ok);
    }
    ck_assert_uint_eq(b.n_recs, 5);
    for (size_t i = 0; i < 5; i++) {
        const prof_rec_t *x = &a.recs[i], *y = &b.recs[i];
        ck_assert_uint_eq(y->start, x->start);
        ck_assert_uint_eq(y->end, x->end);
        ck_assert_uint_eq(y->bytes, x->bytes);
        ck_assert_int_eq(y->what, x->what);
        ck_assert_uint_eq(y->kind, x->kind);
        ck_assert_uint_eq(y->graph, x->graph);
    }
    prof_trace_fini(&a);
    prof_trace_fini(&b);
}
END_TEST

/* Past the cap a record only counts as dropped; a kernel of an unknown name is refused. */
START_TEST(test_cap_and_names)
{
    prof_trace_t t;
    guild_err_t err = {{0}};
    prof_trace_init(&t, 2);
    ck_assert_int_eq(prof_trace_add_name(&t, "k\nrest", &err), 0);
    ck_assert_str_eq(t.names[0], "k"); /* a name is one line */
    const prof_rec_t k = {.start = 1, .end = 2, .what = 0, .kind = PROF_KERNEL};
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(prof_trace_add_rec(&t, &k, &err), 0);
    ck_assert_uint_eq(t.n_recs, 2);
    ck_assert_uint_eq(t.dropped, 3);
    const prof_rec_t bad = {.start = 1, .end = 2, .what = 1, .kind = PROF_KERNEL};
    ck_assert_int_eq(prof_trace_add_rec(&t, &bad, &err), -1);
    ck_assert_msg(strstr(err.msg, "name 1 (1 names)"), "%s", err.msg);
    prof_trace_fini(&t);
    ck_assert_uint_eq(t.max_recs, 2);
    ck_assert_uint_eq(t.n_recs, 0);
}
END_TEST

/* Each malformed file: read fails naming the file and line (where there is one) and why; nothing is kept. */
START_TEST(test_malformed)
{
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"", "an empty file"},
        {"guild-trace 2\n", ":1: a trace of version 2"},
        {"perf trace\n", ":1: not a trace"},
        {"guild-trace 1\nlayers x\n", ":2: layers: expected a count"},
        {"guild-trace 1\nname 1 k\n", ":2: name 1: expected name 0 next"},
        {"guild-trace 1\nname 0\n", ":2: name: expected an index and a name"},
        {"guild-trace 1\nkernel 1 2 0 1\n", ":2: a kernel record of name 0 (0 names)"},
        {"guild-trace 1\nname 0 k\nkernel 5 2 0 1\n", ":3: kernel: END >= START"},
        {"guild-trace 1\nname 0 k\nkernel 1 2 0 2\n", ":3: kernel: END >= START and GRAPH 0 or 1"},
        {"guild-trace 1\nname 0 k\nkernel 1 2 0\n", ":3: kernel: expected START END NAME GRAPH"},
        {"guild-trace 1\nname 0 k\nkernel 1 2 0 1 9\n", ":3: kernel: expected START END NAME GRAPH"},
        {"guild-trace 1\nmemcpy 1 2 8 sideways 0\n", ":2: memcpy: direction sideways"},
        {"guild-trace 1\nstep 1 2 decode 1 1 1\n", ":2: step: a kind of forward"},
        {"guild-trace 1\nstep 1 2 forward 1 1\n", ":2: step: expected START END KIND TOKENS OUT OK"},
        {"guild-trace 1\nlayers 4\nbogus 1\n", ":3: unknown item \"bogus\""},
        {"guild-trace 1\n\n", ":2: an empty line"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        put(cases[i].text);
        prof_trace_t t;
        guild_err_t err = {{0}};
        ck_assert_int_eq(prof_trace_read(&t, path, &err), -1);
        ck_assert_msg(strstr(err.msg, path) && strstr(err.msg, cases[i].want), "case %zu: %s", i, err.msg);
        ck_assert_ptr_null(t.recs);
        ck_assert_ptr_null(t.names);
        ck_assert_ptr_null(t.steps);
        ck_assert_uint_eq(t.n_recs + t.n_steps + (size_t)t.n_names, 0);
    }
    prof_trace_t t;
    guild_err_t err = {{0}};
    ck_assert_int_eq(prof_trace_read(&t, "/nonexistent/x.trace", &err), -1);
    ck_assert_msg(strstr(err.msg, "/nonexistent/x.trace: No such file"), "%s", err.msg);
}
END_TEST

/* A file without a final line break, and one of only the header: read whole. */
START_TEST(test_minimal)
{
    prof_trace_t t;
    guild_err_t err = {{0}};
    put("guild-trace 1");
    ck_assert_msg(prof_trace_read(&t, path, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(t.n_recs + t.n_steps, 0);
    prof_trace_fini(&t);
    put("guild-trace 1\nname 0 a b\nkernel 1 2 0 1");
    ck_assert_msg(prof_trace_read(&t, path, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(t.names[0], "a b");
    ck_assert_uint_eq(t.n_recs, 1);
    prof_trace_fini(&t);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("prof_trace");
    TCase *tc = tcase_create("file");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_malformed);
    tcase_add_test(tc, test_minimal);
    suite_add_tcase(s, tc);
    tc = tcase_create("memory");
    tcase_add_test(tc, test_cap_and_names);
    suite_add_tcase(s, tc);
    return check_run(s);
}
