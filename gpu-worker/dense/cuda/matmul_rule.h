/* gpu-worker/dense/cuda/matmul_rule.h — which path cuda_matmul (matmul.cu) takes for a product of nrows weight rows
 * and ntok tokens of a cuda_expert_mma_supported type; shared with the tests that check both paths give the same
 * bits at the rule's edges (tests/cuda/check_cuda_expert_mma). */
#ifndef GUILD_GPU_WORKER_CUDA_MATMUL_RULE_H
#define GUILD_GPU_WORKER_CUDA_MATMUL_RULE_H

#include <stdint.h>

#include "gpu-worker/dense/cuda/cuda_kernels.h" /* CUDA_MATMUL_MMA_MIN_TOK */

/* From CUDA_MATMUL_MMA_WIDE_TOK tokens, products of at least CUDA_MATMUL_MMA_WIDE_ROWS weight rows (an output head,
 * a batched decode step's logits) take the mma kernel below CUDA_MATMUL_MMA_MIN_TOK too: their grid fills the GPU
 * many times over, and there the dp4a kernel's per-token work on every row costs more than the mma tiles' empty
 * columns (check_cuda_expert_mma's dense timing, the output head's shape); up to 16 tokens the few-token kernel
 * comes first (cuda_matmul_few_rule below). */
#define CUDA_MATMUL_MMA_WIDE_TOK 8
#define CUDA_MATMUL_MMA_WIDE_ROWS 32768

/* Whether cuda_matmul takes the mma kernel for nrows x ntok (one product, a type with an mma kernel). */
static inline int cuda_matmul_mma_rule(int64_t nrows, int32_t ntok)
{
    return ntok >= CUDA_MATMUL_MMA_MIN_TOK || (ntok >= CUDA_MATMUL_MMA_WIDE_TOK && nrows >= CUDA_MATMUL_MMA_WIDE_ROWS);
}

/* Whether a product (or a launch of several, nrows 0) of a cuda_expert_mma_supported type takes the few-token
 * tensor-core kernel (matmul.cu's matmul_few_kernel) for ntok tokens: the batches of a decode step of several
 * sessions, 2 .. 16 tokens whatever the rows (the output head at 8 and 16 tokens: 134 and 195 us against the mma
 * kernel's 175 and 271 on the H200), up to CUDA_MATMUL_MMA_MIN_TOK - 1 where cuda_matmul_mma_rule does not take
 * the mma kernel (above 16 tokens the few-token kernel makes two passes over the weights); one token stays on the
 * dp4a kernel (nothing to share its weights with). */
static inline int cuda_matmul_few_rule(int64_t nrows, int32_t ntok)
{
    return ntok >= 2 && ntok < CUDA_MATMUL_MMA_MIN_TOK && (ntok <= 16 || !cuda_matmul_mma_rule(nrows, ntok));
}

#endif
