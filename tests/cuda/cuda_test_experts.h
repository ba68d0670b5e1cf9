/* tests/cuda/cuda_test_experts.h — what the routed experts' device tests share (check_cuda_fused,
 * check_cuda_pairs_mma): random rows with every third block of 32 small, device copies of host bytes, experts'
 * weights quantized from random rows, the timing cases' step of experts and its graph's time a step. Check-suite
 * helpers (they assert). */
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

/* A timing case's decode step of routed experts at the Qwen3-30B-A3B shape: L = 8 layers of 128 experts (gate and up
 * Q4_K 768 x 2048, down dt 2048 x 768) whose bytes have small normal fp16 scales (0x11 everywhere: the time does
 * not depend on the values), ntok (<= 16) tokens' activations and, for each layer, 8 distinct experts a token drawn
 * as a router's spread would (ids[(l * ntok + t) * 8 + j], distinct: summed over the layers), and the products'
 * outputs h (k = 8 ntok rows of F) and y (k rows of E). Device memory; open asserts, close frees. */
typedef struct cuda_test_step {
    guild_type_t dt;
    int32_t ntok, k, L, n_exp, distinct;
    int64_t E, F;
    uint64_t rg, rd; /* a gate/up row's bytes, a down row's */
    size_t gm, dm;   /* one expert's gate (or up) matrix, its down matrix */
    char *dg, *du, *dd;
    float *dx, *dh, *dy;
    int32_t *dids;
} cuda_test_step_t;

void cuda_test_step_open(cuda_test_step_t *t, guild_type_t dt, int32_t ntok);
void cuda_test_step_close(cuda_test_step_t *t);

/* A timing case's step: the launches of step st (of the graph's `steps`) into s; 0, or -1 with err set. */
typedef int (*cuda_test_step_fn)(void *ctx, int32_t st, cudaStream_t s, guild_err_t *err);

/* us a step of fn's launches: `steps` steps captured into one graph, launched once to warm, then the median of 3
 * groups of 2 launches over 2 steps each; asserts that every step was enqueued. */
double cuda_test_graph_us(cuda_test_step_fn fn, void *ctx, int32_t steps, cudaStream_t s);

#endif
