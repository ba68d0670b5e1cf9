/* gpu-worker/dense/finite_check.h — the layer programs' check for NaN and infinity (backend_options_t.check_finite),
 * shared by the CPU backend (C) and the CUDA backend's kernels (CUDA C++): what a find is, and its message.
 *
 * Where it looks: in the RMSNorms of the residual stream, every layer's attn_norm and ffn_norm and the output
 * norm, which read every row of the stream and write every row of the next part's input anyway:
 *   - the sum of squares a norm computes is non-finite exactly when a value of its residual row is (or when the
 *     values are so large that a square overflows a float): every part adds its output into the stream, so
 *     a part whose output is not finite is found at the next norm;
 *   - each value a norm writes is tested as it is stored: a norm weight that is not finite (or one so large
 *     that the product overflows) is found where it is used. A quantized matrix product would otherwise turn
 *     such a NaN into finite garbage, never seen in the stream.
 * The check changes no value: outputs are the same bits with it on or off. Not covered: a non-finite value made
 * and consumed inside a part whose quantized products turn it finite before the part adds to the stream (a Q/K
 * norm weight), and the LM head's logits (the coordinator's sampler looks at those, coordinator/generate.h).
 *
 * A find is a 64-bit key, packed so that the smallest key is the one to report: the earliest site, at a site
 * the residual before the norm's own output, then the lowest row and element. Sites: 2 * il for layer il's
 * attn_norm (the stream entering layer il), 2 * il + 1 for its ffn_norm (the stream after its attention part),
 * 2 * n_layer for the output norm. */
#ifndef GUILD_GPU_WORKER_FINITE_CHECK_H
#define GUILD_GPU_WORKER_FINITE_CHECK_H

#include <stdint.h>

#define FINITE_NONE UINT64_MAX          /* no find (the value a check starts from) */
#define FINITE_RESIDUAL 0u              /* the residual row read by the norm is not finite */
#define FINITE_NORMED 1u                /* the residual row is finite, the norm's output is not: its weight */
#define FINITE_ELEM_NONE 0x1ffffffu     /* RESIDUAL without an element: no value is, but a square overflows */
#define FINITE_MAX_SITES (1u << 14)     /* sites, rows and elements a key holds */
#define FINITE_MAX_ROWS (1u << 24)
#define FINITE_MAX_ELEMS FINITE_ELEM_NONE

/* The key of a find: site (< FINITE_MAX_SITES), kind, row of the batch (< FINITE_MAX_ROWS), element
 * (< FINITE_MAX_ELEMS, or FINITE_ELEM_NONE). */
#define FINITE_KEY(site, kind, row, elem)                                                                       \
    (((uint64_t)(site) << 50) | ((uint64_t)(kind) << 49) | ((uint64_t)(row) << 25) | (uint64_t)(elem))

#ifndef __CUDACC__
#include "core/model/config.h"
#include "core/util/err.h"

/* -1 with err when a model of this shape with batches of n_batch rows has more sites, rows or elements than a
 * key holds (the check cannot run then). */
int finite_check_fits(const model_config_t *c, int32_t n_batch, guild_err_t *err);

/* The message of find `key` (not FINITE_NONE) in a batch whose row 0 is at position pos0: -1 with err naming the
 * layer, the tensor, the position and the element, for example "layer 3: the residual stream after its attention
 * part (blk.3.attn_*) is not finite at position 17 (row 2 of the batch), element 5". */
int finite_report(uint64_t key, const model_config_t *c, int32_t pos0, guild_err_t *err);
#endif

#endif
