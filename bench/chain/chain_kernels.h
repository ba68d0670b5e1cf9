/* bench/chain/chain_kernels.h — the dependent-phase chain that guild-cuda-chain-bench times (issue 17: what a
 * decode layer's chain of dependent steps costs as separate kernels, with programmatic dependent launch, and as one
 * persistent kernel with grid-wide barriers between its phases).
 *
 * The model of a decode step: `layers` x `phases` dependent phases. Phase g (g = layer * phases + p) reads its own
 * weights, words [g * words, (g + 1) * words) of w (no dependency: what a kernel may read before it waits for the one
 * before), then the activation vector the phase before wrote (act words of in: the dependency), and writes the
 * next activation vector. Block b of the G blocks sums its share of the phase's weights, the 16-byte pieces
 * [b * n16 / G, (b + 1) * n16 / G) with n16 = words / 4, and writes out[i] = its sum + the sum of all of in + i
 * for i = b, b + G, ... < act. All arithmetic is uint32 with wraparound, so any order gives the same words and
 * chain_reference (bench/chain/chain_ref.c) computes them on the host. Host C API; the kernels are CUDA. */
#ifndef GUILD_BENCH_CHAIN_KERNELS_H
#define GUILD_BENCH_CHAIN_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "core/util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CHAIN_BARRIER_WORDS 32 /* one 128-byte line: the ticket counter */

typedef struct chain_args {
    const uint32_t *w;  /* device: layers * phases * words words, chain_fill's */
    uint32_t *vec;      /* device: 2 * act words, the activation vectors (phase g reads vec[g % 2], writes the other) */
    uint32_t *barrier;  /* device: CHAIN_BARRIER_WORDS words, zero: the persistent kernel's ticket counter */
    int32_t layers, phases;
    size_t words;       /* a phase's weight words, a multiple of 4 */
    int32_t act;        /* words of the activation vector */
    int32_t blocks;     /* G: every variant's grid, so that every variant computes the same words */
    int32_t threads;    /* a block's threads, a multiple of 32, <= 1024 */
} chain_args_t;

#ifdef __CUDACC__
#define CHAIN_HD __host__ __device__
#else
#define CHAIN_HD
#endif

/* The weight word at index j of w: what chain_fill writes and chain_reference assumes. */
static inline CHAIN_HD uint32_t chain_word(uint64_t j)
{
    uint64_t x = (j + 1) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(x >> 32) ^ (uint32_t)x;
}

/* w[j] = chain_word(j) for j < n, and vec, barrier zeroed (both vectors: the first phase reads zeros). */
int chain_fill(uint32_t *w, size_t n, uint32_t *vec, int32_t act, uint32_t *barrier, cudaStream_t s,
               guild_err_t *err);

/* The step as layers * phases kernel launches on s (pdl: with programmatic stream serialization, each kernel reading
 * its weights before it waits for the one before). Capturable. */
int chain_launch_kernels(const chain_args_t *a, int pdl, cudaStream_t s, guild_err_t *err);

/* The step as one persistent kernel a layer (per_step == 0: `layers` launches of `phases` phases, a grid barrier
 * between phases) or one for the whole step (per_step != 0: one launch, a barrier between all phases). The grid
 * must fit the device at once (chain_persistent_blocks); launched as a cooperative kernel. Capturable. */
int chain_launch_persistent(const chain_args_t *a, int per_step, cudaStream_t s, guild_err_t *err);

/* The largest grid of `threads`-thread blocks the persistent kernel can keep resident on device dev. */
int chain_persistent_blocks(int dev, int32_t threads, int32_t *blocks, guild_err_t *err);

/* One kernel reading every weight word of the step once (words_total = layers * phases * words, grid G x threads):
 * the rate of this read pattern without dependencies; its sum into *sink (device, one word). */
int chain_launch_stream(const uint32_t *w, size_t words_total, int32_t blocks, int32_t threads, uint32_t *sink,
                        cudaStream_t s, guild_err_t *err);

/* The scalar reference: the activation vector after the whole step (act words into out), from zeros. */
void chain_reference(const chain_args_t *a, uint32_t *out, uint32_t *scratch);

#ifdef __cplusplus
}
#endif

#endif
