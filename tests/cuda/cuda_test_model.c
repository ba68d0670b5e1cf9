/* tests/cuda/cuda_test_model.c — see cuda_test_model.h. */
#include "tests/cuda/cuda_test_model.h"

#include <check.h>
#include <stdlib.h>

#include "cpu-expert-worker/experts/moe_local.h"

void cuda_test_model_open(cuda_test_model_t *t, const tiny_spec_t *s)
{
    guild_err_t err = {{0}};
    size_t size;
    *t = (cuda_test_model_t){0};
    tiny_model_image(s, &t->image, &size);
    ck_assert_msg(tiny_model_open(t->image, size, &t->model, &err) == 0, "%s", err.msg);
    ck_assert_msg(guild_pool_new(&t->pool, 2, NULL, &err) == 0 && moe_local_new(&t->moe, t->model, t->pool, &err) == 0,
                  "%s", err.msg);
}

void cuda_test_model_close(cuda_test_model_t *t)
{
    moe_exec_destroy(&t->moe);
    guild_pool_destroy(&t->pool);
    model_destroy(&t->model);
    free(t->image);
    t->image = NULL;
}
