/* core/model/moe_exec.h — the routed-expert executor: the one seam between the dense side of a MoE layer
 * (attention, router, shared expert, combine: the GPU worker's backend) and whoever computes the routed experts
 * (in-process: cpu-expert-worker/experts/moe_local.h; later CPU worker processes through the shared-memory arena).
 *
 * run() receives, for one layer and n_tokens tokens, the post-attention normed activations and the expert ids the
 * router chose (slot order: slot 0 is the highest router weight), and writes the UNWEIGHTED output of each
 * (token, slot)'s expert:
 *
 *     y[t][k][:] = down_k( silu(gate_k x[t]) * up_k x[t] ),   k = ids[t][k]
 *
 * The dense side keeps the routing weights and combines out[t] = sum over k = 0..n_used-1, in that order, of
 * weights[t][k] * y[t][k] (float32). Because every y[t][k] is a pure function of (layer, expert, x[t]) and the
 * combine order is fixed, the result is the same bits whichever process or thread computed which expert.
 *
 * Skip slots: ids[t][k] < 0 means "not this executor's" (another one computes that pair, e.g. the GPU when a
 * layer is split between the GPU and the CPU workers, gpu-worker/dense/expert_split.h): the executor does no work for
 * it and writes nothing to y[t][k] (the caller's bytes there stay as they were). The other pairs' y are the
 * same bits as in the batch without skips.
 *
 * An implementation embeds moe_exec_t as its first member and fills `ops`.
 */
#ifndef GUILD_MODEL_MOE_EXEC_H
#define GUILD_MODEL_MOE_EXEC_H

#include <stdint.h>

#include "core/util/err.h"

typedef struct moe_exec moe_exec_t;

typedef struct moe_exec_ops {
    const char *name; /* "local", "arena", ... for logs */
    /* layer: 0..n_layer-1; x: [n_tokens][n_embd]; ids: [n_tokens][n_used] in [0, n_expert), or < 0: skip;
     * y: [n_tokens][n_used][n_embd]. 0, or -1 with a message (a worker died, a timeout, an expert this executor
     * cannot reach). */
    int (*run)(moe_exec_t *e, int32_t layer, int32_t n_tokens, const float *x, const int32_t *ids, float *y,
               guild_err_t *err);
    void (*destroy)(moe_exec_t *e);
} moe_exec_ops_t;

struct moe_exec {
    const moe_exec_ops_t *ops;
};

static inline int moe_exec_run(moe_exec_t *e, int32_t layer, int32_t n_tokens, const float *x, const int32_t *ids,
                               float *y, guild_err_t *err)
{
    return e->ops->run(e, layer, n_tokens, x, ids, y, err);
}

/* Destroys the executor through its ops; sets *e to NULL. NULL-safe. */
static inline void moe_exec_destroy(moe_exec_t **e)
{
    if (*e) {
        (*e)->ops->destroy(*e);
        *e = NULL;
    }
}

#endif
