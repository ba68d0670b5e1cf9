/* tests/cuda/cuda_test_model.h — a tiny model with what a CUDA backend over it takes (a thread pool and a local MoE
 * executor), for the device tests that run the backend on tiny models. Check-suite helpers (they assert). */
#ifndef GUILD_TESTS_CUDA_CUDA_TEST_MODEL_H
#define GUILD_TESTS_CUDA_CUDA_TEST_MODEL_H

#include "core/model/model.h"
#include "core/model/moe_exec.h"
#include "core/util/pool.h"
#include "tests/tiny_model.h"

typedef struct cuda_test_model {
    void *image;        /* the model file's bytes (tiny_model_image) */
    model_t *model;
    guild_pool_t *pool; /* 2 threads */
    moe_exec_t *moe;    /* a local executor over model */
} cuda_test_model_t;

/* Opens tiny spec s into t. */
void cuda_test_model_open(cuda_test_model_t *t, const tiny_spec_t *s);

/* Frees what cuda_test_model_open made. */
void cuda_test_model_close(cuda_test_model_t *t);

#endif
