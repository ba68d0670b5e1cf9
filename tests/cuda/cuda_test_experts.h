/* tests/cuda/cuda_test_experts.h — what the routed experts' device tests share (check_cuda_fused,
 * check_cuda_pairs_mma): random rows with every third block of 32 small, device copies of host bytes, experts'
 * weights quantized from random rows, and the timing cases' layers of experts, their routing and their graph's
 * time a step. Check-suite helpers (they assert). */
#ifndef GUILD_TESTS_CUDA_CUDA_TEST_EXPERTS_H
#define GUILD_TESTS_CUDA_CUDA_TEST_EXPERTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "core/quant/types.h"
#include "core/util/err.h"
#include "core/sample/rng.h"

/* x[0 .. n) uniform in (-scale, scale), every third block of 32 scaled by 0.05 (blocks of small and large values,
 * as the quantized types' scales meet them). */
void cuda_test_fill(rng_t *r, float *x, size_t n, float scale);

/* A device copy of h[0 .. n) bytes (cudaMalloc'd: the caller frees it with cudaFree). */
void *cuda_test_dev_bytes(const void *h, size_t n);

/* n_exp experts of nrows rows of n elements of `type`, quantized from nrows + n_exp random rows (expert e the rows
 * from row e: one matrix, repeated with a row offset per expert): device bytes; *rb the row's bytes. */
void *cuda_test_expert_weights(guild_type_t type, int64_t n, int64_t nrows, int32_t n_exp, rng_t *r, uint64_t *rb);

/* The timing cases' layers of routed experts (L layers of n_exp experts, gate and up matrices of gm bytes, down of dm):
 * device bytes whose fp16 scales are small normal numbers (0x11 everywhere: the time does not depend on the values)
 * into *dg, *du, *dd. */
void cuda_test_expert_mats(int32_t L, int32_t n_exp, size_t gm, size_t dm, char **dg, char **du, char **dd);

/* A decode step's routing for the timing cases: for each of L layers and ntok tokens, 8 distinct experts of n_exp
 * (n_exp <= 128) drawn from r, as a router's spread would, into ids[(l * ntok + t) * 8 + j]; returns the distinct
 * experts summed over the layers. */
int32_t cuda_test_step_ids(rng_t *r, int32_t L, int32_t ntok, int32_t n_exp, int32_t *ids);

/* A timing case's step: the launches of step st (of the graph's `steps`) into s; 0, or -1 with err set. */
typedef int (*cuda_test_step_fn)(void *ctx, int32_t st, cudaStream_t s, guild_err_t *err);

/* us a step of fn's launches: `steps` steps captured into one graph, launched once to warm, then the median of 3
 * groups of 2 launches over 2 steps each; asserts that every step was enqueued. */
double cuda_test_graph_us(cuda_test_step_fn fn, void *ctx, int32_t steps, cudaStream_t s);

#endif
