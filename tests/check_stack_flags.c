/* coordinator/stack_flags: the stager flags (--stager, --stager-threads), --force-split and the other flags,
 * parsed through getopt_long as the commands do into the coordinator's options record (each into the role's
 * record that owns it), checked, and listed in --help. */
#include "config.h"

#include <check.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coordinator/stack_flags.h"
#include "gpu-worker/dense/backend.h"
#include "gpu-worker/dense/gpu_plan.h"
#include "tests/check_run.h"

/* Parses argv (NULL-terminated, argv[0] included) with every stack flag; 0, or -1 with err. */
static int parse(stack_options_t *f, char **argv, guild_err_t *err)
{
    int argc = 0;
    while (argv[argc])
        argc++;
    static const struct option none[] = {{NULL, 0, NULL, 0}};
    struct option opts[64];
    stack_flags_options(opts, 64, none, STACK_FLAGS_ALL);
    stack_options_init(f);
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
    stack_options_t f;
    guild_err_t err = {{0}};
    char *a0[] = {"x", NULL};
    ck_assert_int_eq(parse(&f, a0, &err), 0);
    /* the default in both modes: the CPU side's own copies registered in place */
    ck_assert_int_eq(f.gpu.cuda.stager, CUDA_STAGER_SHARED);
    ck_assert_int_eq(f.gpu.cuda.stage_threads, 0);
    char *a0s[] = {"x", "--single-process", NULL};
    ck_assert_msg(parse(&f, a0s, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(f.gpu.cuda.stager, CUDA_STAGER_SHARED);
    const char *kinds[] = {"none", "thread", "process", "pin", "shared"};
    const int want[] = {CUDA_STAGER_NONE, CUDA_STAGER_THREAD, CUDA_STAGER_PROCESS, CUDA_STAGER_PIN,
                        CUDA_STAGER_SHARED};
    for (int i = 0; i < 5; i++) {
        char *a[] = {"x", "--stager", (char *)kinds[i], NULL};
        ck_assert_msg(parse(&f, a, &err) == 0, "%s", err.msg);
        ck_assert_int_eq(f.gpu.cuda.stager, want[i]);
        ck_assert_uint_eq(f.given, STACK_FLAG_STAGER);
    }
    char *a1[] = {"x", "--stager", "process", "--stager-threads", "3", NULL};
    ck_assert_msg(parse(&f, a1, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(f.gpu.cuda.stage_threads, 3);
    char *a2[] = {"x", "--single-process", "--stager", "thread", "--stager-threads", "2", NULL};
    ck_assert_msg(parse(&f, a2, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(f.gpu.cuda.stager, CUDA_STAGER_THREAD);
    char *a3[] = {"x", "--force-split", "0.5", NULL};
    ck_assert_msg(parse(&f, a3, &err) == 0, "%s", err.msg);
    ck_assert(f.gpu.cuda.test.split_gpu_fraction == 0.5);
}
END_TEST

START_TEST(test_stager_refused)
{
    stack_options_t f;
    guild_err_t err = {{0}};
    struct {
        char *argv[8];
        const char *msg;
    } bad[] = {
        {{"x", "--stager", "dma", NULL}, "--stager dma: expected shared, none, thread, process or pin"},
        {{"x", "--stager", "", NULL}, "expected shared, none, thread, process or pin"},
        {{"x", "--stager-threads", "2", NULL}, "not --stager shared"},
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
    /* a flag wider than the column keeps its help apart (it ran into it once: "--prefetch-experts Nwith") */
    ck_assert_msg(strstr(buf, "--prefetch-experts N\n") && !strstr(buf, "--prefetch-experts Nwith"), "%s", buf);
    free(buf);
    /* a command without them does not list them */
    out = open_memstream(&buf, &len);
    stack_flags_usage(out, STACK_FLAG_BACKEND | STACK_FLAG_GPU_MEM, "cpu");
    fclose(out);
    ck_assert_ptr_null(strstr(buf, "--stager"));
    free(buf);
}
END_TEST

/* Every other flag lands in the field of the record that owns it, with its given bit; the defaults stand
 * otherwise. */
START_TEST(test_flags_fill_their_records)
{
    stack_options_t f, d;
    guild_err_t err = {{0}};
    char *a0[] = {"x", NULL};
    ck_assert_msg(parse(&d, a0, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(d.given, 0);
    ck_assert_str_eq(d.gpu.backend, "cpu");
    ck_assert_uint_eq(d.spin_ns, 50000);
    ck_assert_int_eq(d.gpu.max_out, 8);
    ck_assert_int_eq(d.cpu.expert_layout, EXPERT_LAYOUT_AUTO);
    ck_assert(d.gpu.check_finite);
    char *a[] = {"x", "--threads", "3", "--no-tuning", "--cpu-workers", "2", "--listen", "ipc:///tmp/l",
                 "--arena-dir", "/dev/shm", "--mlock", "--spin-us", "7", "--backend", "cuda", "--gpu-mem", "2G",
                 "--gpu-experts", "none", "--no-cuda-graph", "--expert-layout", "packed", "--check-finite", "off",
                 "--cpu-nodes", "0-1/2", "--cuda-off", "pdl,fuse", "--huge-pages", "require", "--prefetch-experts", "3",
                 NULL};
    ck_assert_msg(parse(&f, a, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(f.given, STACK_FLAG_THREADS | STACK_FLAG_NO_TUNING | STACK_FLAG_CPU_WORKERS | STACK_FLAG_LISTEN |
                                   STACK_FLAG_ARENA_DIR | STACK_FLAG_MLOCK | STACK_FLAG_SPIN_US | STACK_FLAG_BACKEND |
                                   STACK_FLAG_GPU_MEM | STACK_FLAG_GPU_EXPERTS | STACK_FLAG_NO_GRAPH |
                                   STACK_FLAG_EXPERT_LAYOUT | STACK_FLAG_CHECK_FINITE | STACK_FLAG_CPU_NODES |
                                   STACK_FLAG_CUDA_OFF | STACK_FLAG_HUGE_PAGES | STACK_FLAG_PREFETCH_EXPERTS);
    ck_assert_int_eq(f.prefetch_experts, 3);
    ck_assert_int_eq(d.prefetch_experts, 4);
    ck_assert_int_eq(f.n_threads, 3);
    ck_assert_str_eq(f.cpu_nodes, "0-1/2");
    ck_assert_int_eq(f.cpu_workers, 2);
    ck_assert_str_eq(f.listen, "ipc:///tmp/l");
    ck_assert_str_eq(f.arena_dir, "/dev/shm");
    ck_assert(f.cpu.mlock);
    ck_assert(f.huge_pages_required && !d.huge_pages_required);
    ck_assert_uint_eq(f.spin_ns, 7000);
    ck_assert_str_eq(f.gpu.backend, "cuda");
    ck_assert_uint_eq(f.gpu.cuda.gpu_mem, 2ull << 30);
    ck_assert_int_eq(f.gpu.cuda.gpu_expert_layers, GPU_EXPERTS_NONE);
    ck_assert(f.gpu.cuda.no_graph);
    ck_assert(f.gpu.cuda.no_fuse && f.gpu.cuda.no_pdl);
    ck_assert_int_eq(f.cpu.expert_layout, EXPERT_LAYOUT_PACKED);
    ck_assert(!f.gpu.check_finite);
    char *c[] = {"x", "--check-finite", "yes", NULL};
    ck_assert_int_eq(parse(&f, c, &err), -1);
    ck_assert_msg(strstr(err.msg, "--check-finite yes: expected on or off"), "%s", err.msg);
    char *h[] = {"x", "--huge-pages", "always", NULL};
    ck_assert_int_eq(parse(&f, h, &err), -1);
    ck_assert_msg(strstr(err.msg, "--huge-pages always: expected auto or require"), "%s", err.msg);
    char *h2[] = {"x", "--huge-pages", "auto", NULL};
    ck_assert_msg(parse(&f, h2, &err) == 0 && !f.huge_pages_required, "%s", err.msg);
    char *g[] = {"x", "--cuda-off", "fuse,graph", NULL};
    ck_assert_int_eq(parse(&f, g, &err), -1);
    ck_assert_msg(strstr(err.msg, "--cuda-off fuse,graph: expected fuse, pdl, attn-grid"), "%s", err.msg);
    ck_assert(!f.gpu.cuda.no_attn_grid && !f.gpu.cuda.no_attn_early && !f.gpu.cuda.no_attn_prefetch);
    /* the decode attention's launch form, a part at a time */
    char *ga[] = {"x", "--cuda-off", "attn-grid,attn-prefetch", NULL};
    ck_assert_msg(parse(&f, ga, &err) == 0, "%s", err.msg);
    ck_assert(f.gpu.cuda.no_attn_grid && !f.gpu.cuda.no_attn_early && f.gpu.cuda.no_attn_prefetch);
    ck_assert(!f.gpu.cuda.no_fuse && !f.gpu.cuda.no_pdl);
    char *ge[] = {"x", "--cuda-off", "pdl,attn-early", NULL};
    ck_assert_msg(parse(&f, ge, &err) == 0, "%s", err.msg);
    ck_assert(!f.gpu.cuda.no_attn_grid && f.gpu.cuda.no_attn_early && !f.gpu.cuda.no_attn_prefetch);
    ck_assert(f.gpu.cuda.no_pdl);
    ck_assert(!f.gpu.cuda.no_attn_mma);
    char *gm[] = {"x", "--cuda-off", "attn-mma", NULL};
    ck_assert_msg(parse(&f, gm, &err) == 0, "%s", err.msg);
    ck_assert(f.gpu.cuda.no_attn_mma && !f.gpu.cuda.no_attn_grid && !f.gpu.cuda.no_attn_early);
    ck_assert(!f.gpu.cuda.no_norm_cluster);
    char *gc[] = {"x", "--cuda-off", "norm-cluster,attn-mma", NULL};
    ck_assert_msg(parse(&f, gc, &err) == 0, "%s", err.msg);
    ck_assert(f.gpu.cuda.no_norm_cluster && f.gpu.cuda.no_attn_mma && !f.gpu.cuda.no_pdl && !f.gpu.cuda.no_mm_split);
    char *gs[] = {"x", "--cuda-off", "mm-split", NULL};
    ck_assert_msg(parse(&f, gs, &err) == 0, "%s", err.msg);
    ck_assert(f.gpu.cuda.no_mm_split && !f.gpu.cuda.no_norm_cluster);
    ck_assert(!f.gpu.cuda.no_xchg_fuse);
    char *gxf[] = {"x", "--cuda-off", "xchg-fuse", NULL};
    ck_assert_msg(parse(&f, gxf, &err) == 0, "%s", err.msg);
    ck_assert(f.gpu.cuda.no_xchg_fuse && !f.gpu.cuda.no_mm_split && !f.gpu.cuda.no_fuse);
    ck_assert(!f.gpu.cuda.no_l2_stream);
    char *gl2[] = {"x", "--cuda-off", "l2-stream", NULL};
    ck_assert_msg(parse(&f, gl2, &err) == 0, "%s", err.msg);
    ck_assert(f.gpu.cuda.no_l2_stream && !f.gpu.cuda.no_xchg_fuse && !f.gpu.cuda.no_fuse);
    char *gx[] = {"x", "--cuda-off", "attn-grids", NULL};
    ck_assert_int_eq(parse(&f, gx, &err), -1);
    /* nothing else moved: the supervision's timings stay the defaults */
    ck_assert_uint_eq(f.hang_ms, d.hang_ms);
    ck_assert_uint_eq(f.start_ms, d.start_ms);
    ck_assert_uint_eq(f.wait_slice_ns, d.wait_slice_ns);
    /* multi-process flags with --single-process: refused, naming every one the command has */
    char *b[] = {"x", "--single-process", "--mlock", NULL};
    ck_assert_int_eq(parse(&f, b, &err), -1);
    ck_assert_msg(strstr(err.msg, "--cpu-workers, --cpu-nodes, --listen, --arena-dir, --mlock, --huge-pages, "
                                  "--spin-us, --prefetch-experts, --gpu-prof, --key, --allow, --insecure, "
                                  "--fallback-local and "
                                  "--rejoin-ms are for the multi-process mode, not --single-process"), "%s", err.msg);
}
END_TEST

/* --gpu-prof FILE: the GPU worker's trace (guild-gpu-worker --prof), of the cuda backend's device, in a build that
 * can trace (CUPTI); a multi-process flag. */
START_TEST(test_gpu_prof)
{
    stack_options_t f;
    guild_err_t err = {{0}};
    char *a[] = {"x", "--backend", "cuda", "--gpu-prof", "/tmp/t.trace", NULL};
#ifdef GUILD_HAVE_CUPTI
    ck_assert_msg(parse(&f, a, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(f.gpu_prof, "/tmp/t.trace");
    ck_assert_uint_eq(f.given, STACK_FLAG_BACKEND | STACK_FLAG_GPU_PROF);
    char *s[] = {"x", "--single-process", "--backend", "cuda", "--gpu-prof", "/tmp/t.trace", NULL};
    ck_assert_int_eq(parse(&f, s, &err), -1);
    ck_assert_msg(strstr(err.msg, "--gpu-prof") && strstr(err.msg, "for the multi-process mode, not --single-process"),
                  "%s", err.msg);
#else
    ck_assert_int_eq(parse(&f, a, &err), -1);
    ck_assert_msg(strstr(err.msg, "--gpu-prof: this build cannot trace the GPU (configure found no CUPTI"), "%s",
                  err.msg);
#endif
    char *d[] = {"x", NULL};
    ck_assert_msg(parse(&f, d, &err) == 0, "%s", err.msg);
    ck_assert_ptr_null(f.gpu_prof);
    char *c[] = {"x", "--backend", "cpu", "--gpu-prof", "/tmp/t.trace", NULL};
    ck_assert_int_eq(parse(&f, c, &err), -1);
    ck_assert_msg(strstr(err.msg, "--gpu-prof traces the cuda backend's device, not --backend cpu"), "%s", err.msg);
    char *e[] = {"x", "--backend", "cuda", "--gpu-prof", "", NULL};
    ck_assert_int_eq(parse(&f, e, &err), -1);
    ck_assert_msg(strstr(err.msg, "--gpu-prof: expected a file name"), "%s", err.msg);
}
END_TEST

/* --backend auto (the commands' default): resolved by the check to a built-in backend's name, with what was found;
 * cpu in a build without a GPU backend or where that backend finds no device (CI), naming that backend's reason. A
 * name given stays as given, with no reason. */
START_TEST(test_backend_auto)
{
    stack_options_t f;
    guild_err_t err = {{0}};
    char *a[] = {"x", "--backend", "auto", NULL};
    ck_assert_msg(parse(&f, a, &err) == 0, "%s", err.msg);
    ck_assert_msg(f.backend_why[0], "no reason for the choice");
    ck_assert_int_ge(backend_plan_caps(f.gpu.backend), 0);
#ifdef GUILD_HAVE_CUDA
    if (!strcmp(f.gpu.backend, "cuda"))
        ck_assert_msg(!strncmp(f.backend_why, "cuda: ", 6) && strstr(f.backend_why, "device"), "%s", f.backend_why);
    else
        ck_assert_msg(!strcmp(f.gpu.backend, "cpu") && !strncmp(f.backend_why, "cuda: ", 6), "%s: %s", f.gpu.backend,
                      f.backend_why);
#else
    ck_assert_str_eq(f.gpu.backend, "cpu");
    ck_assert_str_eq(f.backend_why, "this build has no GPU backend");
#endif
    char *c[] = {"x", "--backend", "cpu", NULL};
    ck_assert_msg(parse(&f, c, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(f.gpu.backend, "cpu");
    ck_assert_str_eq(f.backend_why, "");
    char *g[] = {"x", "--gpu-mem", "auto", NULL}; /* as the default: decided with the model (check_stack_plan) */
    ck_assert_msg(parse(&f, g, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(f.gpu.cuda.gpu_mem, 0);
}
END_TEST

/* A tcp --listen's security: keys into the coordinator's record, or --insecure; neither is refused, as are keys
 * without a tcp --listen (issue 19; the files are read later: tests/check_curve). */
START_TEST(test_listen_keys)
{
    stack_options_t f;
    guild_err_t err = {{0}};
    char *a[] = {"x", "--listen", "tcp://0.0.0.0:5555", "--key", "c.key", "--allow", "allow", NULL};
    ck_assert_msg(parse(&f, a, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(f.curve.key, "c.key");
    ck_assert_str_eq(f.curve.allow, "allow");
    ck_assert(!f.curve.insecure);
    ck_assert_uint_eq(f.given, STACK_FLAG_LISTEN | STACK_FLAG_KEY | STACK_FLAG_ALLOW);
    char *b[] = {"x", "--listen", "tcp://0.0.0.0:5555", "--insecure", NULL};
    ck_assert_msg(parse(&f, b, &err) == 0, "%s", err.msg);
    ck_assert(f.curve.insecure);
    char *c[] = {"x", "--listen", "tcp://0.0.0.0:5555", NULL};
    ck_assert_int_eq(parse(&f, c, &err), -1);
    ck_assert_msg(strstr(err.msg, "--listen tcp://0.0.0.0:5555: a tcp endpoint needs CURVE keys"), "%s", err.msg);
    char *d[] = {"x", "--listen", "tcp://0.0.0.0:5555", "--key", "c.key", NULL};
    ck_assert_int_eq(parse(&f, d, &err), -1);
    char *e[] = {"x", "--listen", "ipc:///tmp/x", "--key", "c.key", "--allow", "a", NULL};
    ck_assert_int_eq(parse(&f, e, &err), -1);
    ck_assert_msg(strstr(err.msg, "are for a tcp --listen endpoint"), "%s", err.msg);
    char *g[] = {"x", "--insecure", NULL};
    ck_assert_int_eq(parse(&f, g, &err), -1);
    char *h[] = {"x", "--single-process", "--insecure", NULL};
    ck_assert_int_eq(parse(&f, h, &err), -1);
    ck_assert_msg(strstr(err.msg, "not --single-process"), "%s", err.msg);
    /* a lost worker started by hand: its shard to a local one, or a bounded wait for its return */
    ck_assert_uint_eq(f.rejoin_ms, 10000);
    char *i[] = {"x", "--listen", "ipc:///tmp/x", "--fallback-local", NULL};
    ck_assert_msg(parse(&f, i, &err) == 0, "%s", err.msg);
    ck_assert(f.fallback_local);
    char *j[] = {"x", "--listen", "ipc:///tmp/x", "--rejoin-ms", "1500", NULL};
    ck_assert_msg(parse(&f, j, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(f.rejoin_ms, 1500);
    char *k[] = {"x", "--fallback-local", NULL};
    ck_assert_int_eq(parse(&f, k, &err), -1);
    ck_assert_msg(strstr(err.msg, "are for workers started by hand (--listen)"), "%s", err.msg);
    char *l[] = {"x", "--listen", "ipc:///tmp/x", "--fallback-local", "--rejoin-ms", "1500", NULL};
    ck_assert_int_eq(parse(&f, l, &err), -1);
    char *m[] = {"x", "--listen", "ipc:///tmp/x", "--rejoin-ms", "5", NULL};
    ck_assert_int_eq(parse(&f, m, &err), -1);
}
END_TEST

/* The GPU plan's flags: --batch auto, --record-routing, and which routing profile the plan reads. */
START_TEST(test_plan_flags)
{
    stack_options_t f;
    guild_err_t err = {{0}};
    int32_t nb = -1;
    ck_assert(stack_flags_parse_batch("auto", &nb, &err) == 0 && nb == 0);
    ck_assert(stack_flags_parse_batch("4096", &nb, &err) == 0 && nb == 4096);
    ck_assert_int_eq(stack_flags_parse_batch("0", &nb, &err), -1);
    ck_assert_msg(strstr(err.msg, "--batch 0: expected auto or"), "%s", err.msg);
    ck_assert_int_eq(stack_flags_parse_batch("65537", &nb, &err), -1);
    char dir[] = "/tmp/guild-flags-XXXXXX", model[128], prof[160];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(model, sizeof model, "%s/m.gguf", dir);
    snprintf(prof, sizeof prof, "%s/m.gguf.routing", dir);
    char *a[] = {"x", "--record-routing", "/tmp/r.routing", NULL};
    ck_assert_msg(parse(&f, a, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(f.record_routing, "/tmp/r.routing");
    ck_assert(stack_flags_routing(&f, model, &err) == 0 && f.routing_path[0] == '\0'); /* none beside it */
    FILE *fp = fopen(prof, "w");
    ck_assert_ptr_nonnull(fp);
    fclose(fp);
    ck_assert(stack_flags_routing(&f, model, &err) == 0);
    ck_assert_str_eq(f.routing_path, prof);
    char *b[] = {"x", "--no-tuning", NULL};
    ck_assert(parse(&f, b, &err) == 0 && stack_flags_routing(&f, model, &err) == 0 && f.routing_path[0] == '\0');
    char *c[] = {"x", "--routing", "/elsewhere/p.routing", NULL};
    ck_assert(parse(&f, c, &err) == 0 && stack_flags_routing(&f, model, &err) == 0);
    ck_assert_str_eq(f.routing_path, "/elsewhere/p.routing");
    char *d[] = {"x", "--routing", "none", NULL};
    ck_assert(parse(&f, d, &err) == 0 && stack_flags_routing(&f, model, &err) == 0 && f.routing_path[0] == '\0');
    remove(prof);
    rmdir(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("stack_flags");
    TCase *tc = tcase_create("stager");
    tcase_add_test(tc, test_stager_default_and_kinds);
    tcase_add_test(tc, test_flags_fill_their_records);
    tcase_add_test(tc, test_stager_refused);
    tcase_add_test(tc, test_help_lists_the_stager);
    tcase_add_test(tc, test_plan_flags);
    tcase_add_test(tc, test_listen_keys);
    tcase_add_test(tc, test_gpu_prof);
    tcase_add_test(tc, test_backend_auto);
    suite_add_tcase(s, tc);
    return check_run(s);
}
