/* tests/cuda/cuda_test_kv.h — the CPU's attention over a block-format KV cache (gpu-worker/dense/kv_format.h) as
 * the reference of the device's (check_cuda_kernels, check_cuda_kv_long). Check-suite helpers (they assert). */
#ifndef GUILD_TESTS_CUDA_CUDA_TEST_KV_H
#define GUILD_TESTS_CUDA_CUDA_TEST_KV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/quant/types.h"

/* A batch's attention over a cache of block-format rows, as the device computed it. */
typedef struct cuda_test_kv_attn {
    guild_type_t kt, vt;      /* the key and value rows' types (kv_type_k, kv_type_v) */
    bool rot;                 /* the value rows rotated head by head (kv_type_rotates_v) */
    const uint8_t *k, *v;     /* the cache's bytes on the host: a row of krow, vrow bytes a position */
    size_t krow, vrow;
    int32_t n_head, n_head_kv, head_dim;
    int32_t kv0;              /* the batch's row t is at position kv0 + t, after kv0 cached positions */
    int32_t window;           /* the last `window` positions a row sees (0: all) */
    const float *sinks;       /* [n_head] the heads' attention sinks, or NULL */
    float scale;
    const float *q;           /* [n_tok][n_head * head_dim] the batch's queries */
} cuda_test_kv_attn_t;

/* Checks row t of out ([n_tok][n_head * head_dim], the device's output) against cpu_attention_head_cache on the
 * same bytes, every head, within the attention tolerance 2e-5 + 1e-4 |ref|; `what` names the case in a failure
 * ("<what> tok T head H dim D: got vs ref"). Returns the largest absolute error. */
double cuda_test_kv_attn_check_row(const cuda_test_kv_attn_t *a, const float *out, int32_t t, const char *what);

#endif
