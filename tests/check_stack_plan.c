/* coordinator/stack_plan: --gpu-mem auto (stack_plan_fit_to), on a tiny model against devices of given sizes (no
 * GPU needed: the plan is arithmetic). A model whose whole plan fits the device is planned as with no budget; one
 * that does not is planned against the device's memory (the experts that do not fit stay in RAM); --gpu-mem given,
 * another backend or a device that cannot be asked change nothing. */
#include "config.h"

#include <check.h>
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
    ck_assert_msg(stack_plan_fit_to(&f.o, f.m, f.need, &err) == 0, "%s", err.msg); /* exactly: fits */
    ck_assert_uint_eq(f.o.gpu.cuda.gpu_mem, 0);
    ck_assert_msg(strstr(f.o.gpu_mem_why, "auto: no budget, the whole model fits the device's"), "%s",
                  f.o.gpu_mem_why);
    ck_assert_msg(stack_plan_fit_to(&f.o, f.m, (uint64_t)1 << 40, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(f.o.gpu.cuda.gpu_mem, 0);
    fx_close(&f);
}
END_TEST

START_TEST(test_too_big_planned_against_the_device)
{
    fx_t f;
    fx_open(&f);
    guild_err_t err = {{0}};
    ck_assert_msg(stack_plan_fit_to(&f.o, f.m, f.need - 1, &err) == 0, "%s", err.msg);
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
    ck_assert_msg(stack_plan_fit_to(&o, f.m, device, &err) == 0, "%s", err.msg);
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
    ck_assert_msg(stack_plan_fit_to(&f.o, f.m, f.need - 1, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(f.o.gpu.cuda.gpu_mem, (uint64_t)1 << 20);
    ck_assert_str_eq(f.o.gpu_mem_why, "");
    f.o.gpu.cuda.gpu_mem = 0;
    ck_assert_msg(stack_plan_fit_to(&f.o, f.m, 0, &err) == 0, "%s", err.msg); /* no device to ask */
    ck_assert_uint_eq(f.o.gpu.cuda.gpu_mem, 0);
    ck_assert_str_eq(f.o.gpu_mem_why, "");
    f.o.gpu.backend = "cpu";
    ck_assert_msg(stack_plan_fit_to(&f.o, f.m, f.need - 1, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(f.o.gpu.cuda.gpu_mem, 0);
    ck_assert_str_eq(f.o.gpu_mem_why, "");
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
    suite_add_tcase(s, tc);
    return check_run(s);
}
