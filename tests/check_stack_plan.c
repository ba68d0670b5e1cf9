/* coordinator/stack_plan: --gpu-mem auto (stack_plan_fit_to), on a tiny model against devices of given sizes (no
 * GPU needed: the plan is arithmetic). A model whose whole plan fits the device is planned as with no budget; one
 * that does not is planned against the device's memory (the experts that do not fit stay in RAM), less what other
 * processes hold when the device's free memory was asked; --gpu-mem given, another backend or a device that cannot be
 * asked change nothing. */
#include "config.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/stack_plan.h"
#include "tests/check_run.h"
#include "tests/tiny_model.h"

typedef struct fx {
    void *image;
    model_t *m;
    stack_options_t o;
    uint64_t need; /* the whole plan with the context and the driver's share */
} fx_t;

static void fx_open(fx_t *f)
{
    guild_err_t err = {{0}};
    size_t size;
    tiny_spec_t s = tiny_spec("qwen3moe");
    s.n_layer = 8; /* experts enough that a device short of them matters beside the context */
    s.n_expert = 32;
    tiny_model_image(&s, &f->image, &size);
    ck_assert_msg(tiny_model_open(f->image, size, &f->m, &err) == 0, "%s", err.msg);
    stack_options_init(&f->o);
    f->o.gpu.backend = "cuda";
    f->o.gpu.cuda.stager = CUDA_STAGER_SHARED;
    f->o.n_ctx = 64;
    stack_plan_t sp;
    ck_assert_msg(stack_plan_make(&sp, &f->o, f->m, &err) == 0, "%s", err.msg);
    ck_assert(sp.on);
    ck_assert_uint_eq(sp.gpu.budget, 0);
    f->need = gpu_plan_total(&sp.gpu) + GPU_PLAN_CONTEXT +
              gpu_plan_driver_bytes(f->m, 64, 0, 0, GPU_COPY_PINNED);
    stack_plan_fini(&sp);
}

/* stack_plan_fit_to against a device of `total` bytes of which this process would find `free_b` free (0: not asked) */
static int fit(stack_options_t *o, const model_t *m, uint64_t total, uint64_t free_b, guild_err_t *err)
{
    backend_device_mem_t dev = {.total = total, .free = free_b};
    return stack_plan_fit_to(o, m, &dev, err);
}

static void fx_close(fx_t *f)
{
    model_destroy(&f->m);
    free(f->image);
}

START_TEST(test_fits_no_budget)
{
    fx_t f;
    fx_open(&f);
    guild_err_t err = {{0}};
    ck_assert_msg(fit(&f.o, f.m, f.need, 0, &err) == 0, "%s", err.msg); /* exactly: fits */
    ck_assert_uint_eq(f.o.gpu.cuda.gpu_mem, 0);
    ck_assert_msg(strstr(f.o.gpu_mem_why, "auto: no budget, the whole model fits the device's"), "%s",
                  f.o.gpu_mem_why);
    ck_assert_msg(fit(&f.o, f.m, (uint64_t)1 << 40, 0, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(f.o.gpu.cuda.gpu_mem, 0);
    fx_close(&f);
}
END_TEST

START_TEST(test_too_big_planned_against_the_device)
{
    fx_t f;
    fx_open(&f);
    guild_err_t err = {{0}};
    ck_assert_msg(fit(&f.o, f.m, f.need - 1, 0, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(f.o.gpu.cuda.gpu_mem, f.need - 1);
    ck_assert_msg(strstr(f.o.gpu_mem_why, "auto: the device's") && strstr(f.o.gpu_mem_why, "the whole model would "
                  "take"), "%s", f.o.gpu_mem_why);
    /* a device a third of the way from the plan without experts to the whole plan: the plan keeps what fits and fits */
    stack_options_t o = f.o;
    o.gpu.cuda.gpu_mem = 0;
    stack_plan_t all, none;
    ck_assert_msg(stack_plan_make(&all, &o, f.m, &err) == 0, "%s", err.msg);
    const int64_t experts = all.gpu.n_resident_experts;
    stack_plan_fini(&all);
    ck_assert_int_gt(experts, 3);
    o.gpu.cuda.gpu_expert_layers = GPU_EXPERTS_NONE;
    ck_assert_msg(stack_plan_make(&none, &o, f.m, &err) == 0, "%s", err.msg);
    const uint64_t floor = gpu_plan_total(&none.gpu) + GPU_PLAN_CONTEXT +
                           gpu_plan_driver_bytes(f.m, 64, 0, 0, GPU_COPY_PINNED);
    stack_plan_fini(&none);
    o.gpu.cuda.gpu_expert_layers = f.o.gpu.cuda.gpu_expert_layers;
    ck_assert_uint_lt(floor, f.need);
    const uint64_t device = floor + (f.need - floor) / 3;
    ck_assert_msg(fit(&o, f.m, device, 0, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(o.gpu.cuda.gpu_mem, device);
    stack_plan_t sp;
    ck_assert_msg(stack_plan_make(&sp, &o, f.m, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(sp.gpu.budget, device);
    ck_assert_uint_le(gpu_plan_total(&sp.gpu), device);
    ck_assert_int_lt(sp.gpu.n_resident_experts, experts);
    stack_plan_fini(&sp);
    fx_close(&f);
}
END_TEST

START_TEST(test_nothing_decided)
{
    fx_t f;
    fx_open(&f);
    guild_err_t err = {{0}};
    f.o.gpu.cuda.gpu_mem = (uint64_t)1 << 20; /* --gpu-mem given: as given, however small */
    ck_assert_msg(fit(&f.o, f.m, f.need - 1, 0, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(f.o.gpu.cuda.gpu_mem, (uint64_t)1 << 20);
    ck_assert_str_eq(f.o.gpu_mem_why, "");
    f.o.gpu.cuda.gpu_mem = 0;
    ck_assert_msg(fit(&f.o, f.m, 0, 0, &err) == 0, "%s", err.msg); /* no device to ask */
    ck_assert_uint_eq(f.o.gpu.cuda.gpu_mem, 0);
    ck_assert_str_eq(f.o.gpu_mem_why, "");
    f.o.gpu.backend = "cpu";
    ck_assert_msg(fit(&f.o, f.m, f.need - 1, 0, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(f.o.gpu.cuda.gpu_mem, 0);
    ck_assert_str_eq(f.o.gpu_mem_why, "");
    fx_close(&f);
}
END_TEST

START_TEST(test_other_processes_left_out)
{
    fx_t f;
    fx_open(&f);
    guild_err_t err = {{0}};
    const uint64_t big = (uint64_t)1 << 40;
    /* free as the asker's own context saw it, which the plan counts apart: the whole plan just fits */
    ck_assert_msg(fit(&f.o, f.m, big, f.need - GPU_PLAN_CONTEXT, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(f.o.gpu.cuda.gpu_mem, 0);
    ck_assert_msg(strstr(f.o.gpu_mem_why, "auto: no budget, the whole model fits the ") &&
                  strstr(f.o.gpu_mem_why, "GiB that other processes leave"), "%s", f.o.gpu_mem_why);
    /* a byte less: what the other processes leave is the budget */
    ck_assert_msg(fit(&f.o, f.m, big, f.need - GPU_PLAN_CONTEXT - 1, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(f.o.gpu.cuda.gpu_mem, f.need - 1);
    ck_assert_msg(strstr(f.o.gpu_mem_why, "that other processes leave; the whole model would take"), "%s",
                  f.o.gpu_mem_why);
    /* nobody else holds anything (free and the context are the device): the device's size, as when not asked */
    f.o.gpu.cuda.gpu_mem = 0;
    ck_assert_msg(fit(&f.o, f.m, f.need - 1, f.need - 1 - GPU_PLAN_CONTEXT, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(f.o.gpu.cuda.gpu_mem, f.need - 1);
    ck_assert_msg(strstr(f.o.gpu_mem_why, "auto: the device's") && !strstr(f.o.gpu_mem_why, "other processes"), "%s",
                  f.o.gpu_mem_why);
    /* not asked: the device's size, and why in the line */
    f.o.gpu.cuda.gpu_mem = 0;
    backend_device_mem_t dev = {.total = f.need - 1};
    snprintf(dev.why, sizeof dev.why, "this process holds device 0's context already");
    ck_assert_msg(stack_plan_fit_to(&f.o, f.m, &dev, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(f.o.gpu.cuda.gpu_mem, f.need - 1);
    ck_assert_msg(strstr(f.o.gpu_mem_why, "(its free memory not asked: this process holds device 0's context "
                  "already)"), "%s", f.o.gpu_mem_why);
    fx_close(&f);
}
END_TEST

START_TEST(test_other_processes_leave_too_little)
{
    fx_t f;
    fx_open(&f);
    guild_err_t err = {{0}};
    /* the others leave a MiB beside the context: not even the dense part fits, and the error says auto chose that */
    ck_assert_int_eq(fit(&f.o, f.m, (uint64_t)1 << 40, (uint64_t)1 << 20, &err), -1);
    ck_assert_msg(strstr(err.msg, "--gpu-mem auto: the ") && strstr(err.msg, "that other processes leave"), "%s",
                  err.msg);
    ck_assert_uint_eq(f.o.gpu.cuda.gpu_mem, 0);
    fx_close(&f);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("stack_plan");
    TCase *tc = tcase_create("fit");
    tcase_add_test(tc, test_fits_no_budget);
    tcase_add_test(tc, test_too_big_planned_against_the_device);
    tcase_add_test(tc, test_nothing_decided);
    tcase_add_test(tc, test_other_processes_left_out);
    tcase_add_test(tc, test_other_processes_leave_too_little);
    suite_add_tcase(s, tc);
    return check_run(s);
}
