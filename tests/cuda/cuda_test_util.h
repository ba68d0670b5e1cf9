/* tests/cuda/cuda_test_util.h — what the device tests of the CUDA backend share: the device check and the suite
 * runner of their main(), the tiny models' shapes the CUDA kernels take, a forward step at the cache's end and
 * the argmax of a logits row. Check-suite helpers (they assert). */
#ifndef GUILD_TESTS_CUDA_CUDA_TEST_UTIL_H
#define GUILD_TESTS_CUDA_CUDA_TEST_UTIL_H

#include <stdbool.h>
#include <stdint.h>

#include <check.h>
#include <cuda_runtime_api.h>

#include "core/quant/types.h"
#include "gpu-worker/dense/backend.h"
#include "tests/tiny_model.h"

/* True when device 0 exists and has compute capability min_major.0 or more (0: any); prints the device, or why
 * the test is skipped (the caller then exits 77). */
bool cuda_test_device(int min_major);

/* Runs suite s without fork (a CUDA context does not survive fork()), on a stream created into *stream first
 * and destroyed after when stream is not NULL. Returns main()'s status: 0 when every test passed, else 1. */
int cuda_test_run(Suite *s, cudaStream_t *stream);

/* The shapes the CUDA kernels take on tiny spec s: head_dim 64, widths of whole K-quant blocks; weights of type
 * `type`, seed `seed`. */
void cuda_test_shape(tiny_spec_t *s, guild_type_t type, uint64_t seed);

/* cuda_test_shape on s (a tiny_spec of s->arch), with glm4moe's dense first layer and half-rotary heads, an MTP
 * layer (run by check_cuda_mtp only) and deepseek2's latent attention (keys of 32 + 32 rotated, values of 32). */
void cuda_test_spec(tiny_spec_t *s, guild_type_t type, uint64_t seed);

/* n tokens (n <= 512) at the end of be's cache, the logits of rows[0 .. n_out) into logits; asserts success. */
void cuda_test_forward(backend_t *be, int32_t n, const int32_t *tokens, int32_t n_out, const int32_t *rows,
                       float *logits);

/* The first index of the largest of x[0 .. n). */
int32_t cuda_test_argmax(const float *x, int32_t n);

#endif
