/* The CUDA backend's step clock (cuda_config_t.step_clock, gpu-worker/dense/cuda/cuda_step_clock.h): with it on,
 * the same logits bits as with it off (its marks are kernels of the step, graphs and the direct path; the logits
 * into backend_logits_alloc's page-locked memory on one side and malloc'd memory on the other); a record per
 * forward pass, each with its rows and path, host parts that add up to its wall time, the device's span and every
 * span between marks known (a qwen3moe layer 0 runs all of them), the marks' spans within the events' span; the
 * record empties when read;
 * -1 with the clock off and for another backend. Needs a CUDA device: without one, exit 77 (SKIP). */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu-expert-worker/experts/moe_local.h"
#include "gpu-worker/dense/backend.h"
#include "gpu-worker/dense/cuda/cuda_config.h"
#include "gpu-worker/dense/cuda/cuda_step_clock.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/tiny_model.h"

static backend_t *open_backend(model_t *m, guild_pool_t *pool, moe_exec_t *moe, const char *name, bool clock,
                               bool graphs)
{
    guild_err_t err = {{0}};
    backend_t *be = NULL;
    const backend_options_t o = {.n_ctx = 64, .n_batch = 16, .pool = pool, .moe = moe, .check_finite = true};
    const cuda_config_t cc = {.no_graph = !graphs, .step_clock = clock};
    ck_assert_msg(backend_new(&be, name, m, &o, strcmp(name, "cuda") ? NULL : &cc, &err) == 0, "%s: %s", name,
                  err.msg);
    return be;
}

static int run(backend_t *be, const int32_t *tok, int32_t n, float *logits, guild_err_t *err)
{
    int32_t pos[16], last = n - 1;
    for (int32_t i = 0; i < n; i++)
        pos[i] = backend_kv_len(be) + i;
    return backend_forward(be, n, tok, pos, 1, &last, logits, err);
}

START_TEST(test_clock)
{
    const bool graphs = _i == 1;
    guild_err_t err = {{0}};
    void *image = NULL;
    size_t size = 0;
    model_t *m = NULL;
    guild_pool_t *pool = NULL;
    moe_exec_t *moe = NULL;
    tiny_spec_t s = tiny_spec("qwen3moe");
    cuda_test_shape(&s, GUILD_TYPE_Q8_0, 26);
    tiny_model_image(&s, &image, &size);
    ck_assert_msg(tiny_model_open(image, size, &m, &err) == 0, "%s", err.msg);
    ck_assert(guild_pool_new(&pool, 2, NULL, &err) == 0);
    ck_assert(moe_local_new(&moe, m, pool, &err) == 0);
    const int32_t V = model_config(m)->n_vocab;
    backend_t *on = open_backend(m, pool, moe, "cuda", true, graphs), *off = open_backend(m, pool, moe, "cuda", false,
                                                                                         graphs);
    /* the clocked backend's logits into its own kind of memory (page-locked: the graph's copy lands there), the
     * other's into malloc'd memory (through its staging buffer) */
    float *la = backend_logits_alloc(on, (size_t)V), *lb = malloc((size_t)V * sizeof *lb);
    ck_assert(la && lb);
    cuda_step_times_t t[16];
    int32_t n = -1;
    ck_assert_int_eq(cuda_backend_step_times(off, t, 16, &n, &err), -1);
    ck_assert_int_eq(n, 0);
    static const int32_t prompt[] = {5, 9, 2, 40, 17, 3, 88, 1};
    ck_assert_msg(run(on, prompt, 8, la, &err) == 0, "%s", err.msg);
    ck_assert(run(off, prompt, 8, lb, &err) == 0);
    ck_assert(!memcmp(la, lb, (size_t)V * sizeof *la));
    for (int step = 0; step < 5; step++) {
        const int32_t tok = (int32_t)(step * 37 % V);
        ck_assert_msg(run(on, &tok, 1, la, &err) == 0, "%s", err.msg);
        ck_assert(run(off, &tok, 1, lb, &err) == 0);
        ck_assert_msg(!memcmp(la, lb, (size_t)V * sizeof *la), "step %d: the clock changed the logits", step);
    }
    ck_assert_msg(cuda_backend_step_times(on, t, 16, &n, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(n, 6);
    for (int32_t i = 0; i < n; i++) {
        const cuda_step_times_t *x = &t[i];
        ck_assert_int_eq(x->rows, i == 0 ? 8 : 1);
        ck_assert(x->graph == graphs); /* the prompt of 8 rows is a graph's too (up to CUDA_GRAPH_ROWS rows) */
        double sum = 0, marks = 0;
        for (int k = 0; k < CUDA_HOSTS - 1; k++) {
            ck_assert_msg(x->host[k] >= 0, "pass %d: host part %d is %g", i, k, x->host[k]);
            sum += x->host[k];
        }
        ck_assert_msg(x->wall > 0 && fabs(sum - x->wall) < 1e-3 * x->wall + 0.01, "pass %d: parts %g, wall %g", i, sum,
                      x->wall);
        ck_assert_msg(x->gpu > 0 && x->gpu <= x->wall, "pass %d: device %g us of a wall of %g", i, x->gpu, x->wall);
        for (int k = 0; k < CUDA_MARKS - 1; k++) {
            ck_assert_msg(x->mark[k] >= 0, "pass %d: span %d unknown", i, k);
            marks += x->mark[k];
        }
        /* two clocks: the marks' spans lie inside the events' (a microsecond of slack for their resolution) */
        ck_assert_msg(marks <= x->gpu + 2, "pass %d: marks %g us, events %g us", i, marks, x->gpu);
    }
    ck_assert(cuda_backend_step_times(on, t, 16, &n, &err) == 0);
    ck_assert_int_eq(n, 0);
    backend_t *cpu = open_backend(m, pool, moe, "cpu", false, false);
    ck_assert_int_eq(cuda_backend_step_times(cpu, t, 16, &n, &err), -1);
    backend_destroy(&cpu);
    backend_logits_free(on, la);
    backend_destroy(&on);
    backend_destroy(&off);
    free(lb);
    moe_exec_destroy(&moe);
    guild_pool_destroy(&pool);
    model_destroy(&m);
    free(image);
}
END_TEST

int main(void)
{
    if (!cuda_test_device(0))
        return 77;
    Suite *s = suite_create("cuda_clock");
    TCase *tc = tcase_create("clock");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_clock, 0, 2);
    suite_add_tcase(s, tc);
    return cuda_test_run(s, NULL);
}
