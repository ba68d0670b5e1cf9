/* gpu-worker/gpu_plan: the GPU memory plan (--gpu-mem) on tiny models: no budget puts every layer's experts on
 * the GPU; a budget takes the staging buffers, then layers in order while they fit; the dense part not fitting
 * is refused with the sizes;
 * --gpu-experts limits; layers whose expert types the device kernels do not take stay off the GPU; sizes parse
 * with K/M/G/T suffixes. No GPU needed: the plan is arithmetic. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu-worker/dense/gpu_plan.h"
#include "tests/tiny_model.h"

typedef struct fx {
    void *image;
    model_t *m;
} fx_t;

static void fx_open(fx_t *f, int n_layer)
{
    guild_err_t err = {{0}};
    size_t size;
    tiny_spec_t s = tiny_spec("qwen3moe");
    s.n_layer = n_layer;
    tiny_model_image(&s, &f->image, &size);
    ck_assert_msg(tiny_model_open(f->image, size, &f->m, &err) == 0, "%s", err.msg);
}

static void fx_close(fx_t *f)
{
    model_destroy(&f->m);
    free(f->image);
}

START_TEST(test_no_budget_all_resident)
{
    fx_t f;
    fx_open(&f, 3);
    gpu_plan_t p;
    guild_err_t err = {{0}};
    gpu_plan_options_t o = {.n_ctx = 64, .n_batch = 8, .kv_elem = 2};
    ck_assert_msg(gpu_plan_compute(&p, f.m, &o, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(p.n_resident, 3);
    ck_assert(p.resident[0] && p.resident[1] && p.resident[2]);
    ck_assert(p.experts == p.experts_all && p.experts > 0 && p.expert_buffers > 0);
    ck_assert_uint_eq(p.reserve, 0);
    /* KV: K and V, 3 layers, 64 positions, 2 KV heads of 16, F16 */
    ck_assert_uint_eq(p.kv, 2u * 3u * 64u * 32u * 2u);
    ck_assert_uint_eq(gpu_plan_total(&p), p.dense + p.kv + p.buffers + p.expert_buffers + p.experts);
    gpu_plan_fini(&p);
    o.max_expert_layers = GPU_EXPERTS_NONE;
    ck_assert(gpu_plan_compute(&p, f.m, &o, &err) == 0);
    ck_assert_int_eq(p.n_resident, 0);
    ck_assert_uint_eq(p.expert_buffers, 0);
    gpu_plan_fini(&p);
    o.max_expert_layers = 2;
    ck_assert(gpu_plan_compute(&p, f.m, &o, &err) == 0);
    ck_assert_int_eq(p.n_resident, 2);
    ck_assert(p.resident[0] && p.resident[1] && !p.resident[2]);
    gpu_plan_fini(&p);
    fx_close(&f);
}
END_TEST

START_TEST(test_budget)
{
    fx_t f;
    fx_open(&f, 6);
    gpu_plan_t p;
    guild_err_t err = {{0}};
    gpu_plan_options_t o = {.n_ctx = 64, .n_batch = 8, .kv_elem = 2};
    ck_assert(gpu_plan_compute(&p, f.m, &o, &err) == 0);
    const uint64_t layer = p.experts / 6, fixed = GPU_PLAN_RESERVE + p.dense + p.kv + p.buffers, eb = p.expert_buffers;
    gpu_plan_fini(&p);
    /* not every layer fits: two staging buffers first, then two layers' experts and a half */
    o.budget = fixed + eb + 4 * layer + layer / 2;
    ck_assert_msg(gpu_plan_compute(&p, f.m, &o, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(p.staging, 2 * layer);
    ck_assert_int_eq(p.n_resident, 2);
    ck_assert(p.resident[0] && p.resident[1] && !p.resident[2] && !p.resident[5]);
    ck_assert(gpu_plan_total(&p) <= o.budget);
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    gpu_plan_print(&p, out);
    fclose(out);
    ck_assert_msg(strstr(buf, "2 of 6 layers") && strstr(buf, "layers 0-1") && strstr(buf, "on the CPU") &&
                  strstr(buf, "streamed"), "%s", buf);
    free(buf);
    gpu_plan_fini(&p);
    /* room for the staging buffers only: every layer streams or stays on the CPU */
    o.budget = fixed + eb + 2 * layer + layer / 2;
    ck_assert(gpu_plan_compute(&p, f.m, &o, &err) == 0);
    ck_assert_int_eq(p.n_resident, 0);
    ck_assert_uint_eq(p.staging, 2 * layer);
    ck_assert_uint_eq(p.expert_buffers, eb);
    gpu_plan_fini(&p);
    /* an explicit limit of layers: no staging */
    o.max_expert_layers = 1;
    ck_assert(gpu_plan_compute(&p, f.m, &o, &err) == 0);
    ck_assert_int_eq(p.n_resident, 1);
    ck_assert_uint_eq(p.staging, 0);
    gpu_plan_fini(&p);
    o.max_expert_layers = 0;
    /* the dense part fits, no expert and no staging does */
    o.budget = fixed + eb + layer / 2;
    ck_assert(gpu_plan_compute(&p, f.m, &o, &err) == 0);
    ck_assert_int_eq(p.n_resident, 0);
    ck_assert_uint_eq(p.staging, 0);
    ck_assert_uint_eq(p.expert_buffers, 0);
    gpu_plan_fini(&p);
    /* the dense part does not fit: refused, with its sizes */
    o.budget = fixed - 1;
    ck_assert_int_eq(gpu_plan_compute(&p, f.m, &o, &err), -1);
    ck_assert_msg(strstr(err.msg, "does not fit") && strstr(err.msg, "KV cache") && strstr(err.msg, "64 positions"),
                  "%s", err.msg);
    ck_assert_ptr_null(p.resident);
    fx_close(&f);
}
END_TEST

START_TEST(test_types_the_device_takes)
{
    /* layer 1's up matrix in another type than its gate: the grouped expert kernels cannot take it */
    guild_err_t err = {{0}};
    tiny_spec_t s = tiny_spec("qwen3moe");
    s.n_layer = 3;
    s.f16_tensor = "blk.1.ffn_up_exps.weight";
    void *image;
    size_t size;
    model_t *m = NULL;
    tiny_model_image(&s, &image, &size);
    ck_assert_msg(tiny_model_open(image, size, &m, &err) == 0, "%s", err.msg);
    ck_assert(gpu_plan_layer_computable(m, 0) && !gpu_plan_layer_computable(m, 1) && gpu_plan_layer_computable(m, 2));
    gpu_plan_t p;
    gpu_plan_options_t o = {.n_ctx = 64, .n_batch = 8, .kv_elem = 2};
    ck_assert_msg(gpu_plan_compute(&p, m, &o, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(p.n_resident, 2);
    ck_assert(p.resident[0] && !p.resident[1] && p.resident[2]);
    ck_assert(p.experts < p.experts_all);
    gpu_plan_fini(&p);
    /* one layer at most: the first computable one */
    o.max_expert_layers = 1;
    ck_assert(gpu_plan_compute(&p, m, &o, &err) == 0);
    ck_assert(p.resident[0] && !p.resident[1] && !p.resident[2]);
    gpu_plan_fini(&p);
    model_destroy(&m);
    free(image);

    ck_assert(gpu_plan_type_supported(GUILD_TYPE_Q4_K) && gpu_plan_type_supported(GUILD_TYPE_F16));
    ck_assert(!gpu_plan_type_supported(GUILD_TYPE_Q2_K) && !gpu_plan_type_supported(GUILD_TYPE_IQ2_XXS));
    ck_assert(strstr(gpu_plan_supported_types(), "q4_K"));
}
END_TEST

START_TEST(test_parse_size)
{
    guild_err_t err = {{0}};
    uint64_t v;
    ck_assert(gpu_plan_parse_size("8G", "--gpu-mem", &v, &err) == 0 && v == (uint64_t)8 << 30);
    ck_assert(gpu_plan_parse_size("512M", "--gpu-mem", &v, &err) == 0 && v == (uint64_t)512 << 20);
    ck_assert(gpu_plan_parse_size("1.5GiB", "--gpu-mem", &v, &err) == 0 && v == (uint64_t)3 << 29);
    ck_assert(gpu_plan_parse_size("24GB", "--gpu-mem", &v, &err) == 0 && v == (uint64_t)24 << 30);
    ck_assert(gpu_plan_parse_size("1T", "--gpu-mem", &v, &err) == 0 && v == (uint64_t)1 << 40);
    ck_assert(gpu_plan_parse_size("4096", "--gpu-mem", &v, &err) == 0 && v == 4096);
    const char *bad[] = {"", "G", "8X", "-1", "0", "8GG", "nan", "1e30T"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_msg(gpu_plan_parse_size(bad[i], "--gpu-mem", &v, &err) == -1, "accepted '%s'", bad[i]);
        ck_assert_msg(strstr(err.msg, "--gpu-mem"), "%s", err.msg);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gpu_plan");
    TCase *tc = tcase_create("plan");
    tcase_add_test(tc, test_no_budget_all_resident);
    tcase_add_test(tc, test_budget);
    tcase_add_test(tc, test_types_the_device_takes);
    tcase_add_test(tc, test_parse_size);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
