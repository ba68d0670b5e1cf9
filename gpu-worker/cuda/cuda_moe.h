/* gpu-worker/cuda/cuda_moe.h — how the CUDA backend hands a layer's routed experts to whoever computes them.
 *
 * The layer program calls submit() as soon as the router has run, enqueues the shared expert, then calls
 * collect(), and combines with the y it gets. Both take the compute stream:
 *   submit(layer, n, x, ids, w)  x: [n][n_embd] normed activations, ids/w: [n][n_used] (device pointers, valid
 *                                until collect returns); makes them reach the executor
 *   collect(&y)                  sets y to a device-readable [n][n_used][n_embd] of UNWEIGHTED expert outputs
 *                                (moe_exec.h's contract) that stays valid until the next submit, such that
 *                                work enqueued on the stream after collect sees it complete.
 *
 * Implementations:
 *   "local" (cuda_moe_local_new): copies x/ids/w to pinned host memory, waits for them, calls the in-process
 *           moe_exec_t on the host thread, copies y back. The shared expert enqueued between submit and collect
 *           runs on the GPU while the CPU computes the experts.
 *   "arena" (part 2 of issue 6, with the multi-process pipeline): the exchange slot lives in hugepage memory
 *           registered with cudaHostRegister(Mapped); submit enqueues a kernel that writes the slot's x/ids/w
 *           and rings the step doorbell with a system-scope release store; collect enqueues a kernel that spins
 *           on the workers' done counters with system-scope acquire loads and returns the slot's y (mapped
 *           memory) as y. Nothing waits on the host, so a decode step can be captured as one CUDA graph.
 */
#ifndef GUILD_GPU_WORKER_CUDA_MOE_H
#define GUILD_GPU_WORKER_CUDA_MOE_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#include "core/model/moe_exec.h"
#include "core/util/err.h"

typedef struct cuda_moe cuda_moe_t;

typedef struct cuda_moe_ops {
    const char *name;
    int (*submit)(cuda_moe_t *m, int32_t layer, int32_t n_tokens, const float *x, const int32_t *ids,
                  const float *w, cudaStream_t s, guild_err_t *err);
    int (*collect)(cuda_moe_t *m, const float **y, cudaStream_t s, guild_err_t *err);
    void (*destroy)(cuda_moe_t *m);
} cuda_moe_ops_t;

/* Implementations embed this as their first member. */
struct cuda_moe {
    const cuda_moe_ops_t *ops;
};

/* The in-process bridge to `exec` (borrowed) for batches of up to max_tokens tokens. -1 with a message when
 * pinned or device memory cannot be had. */
int cuda_moe_local_new(cuda_moe_t **out, moe_exec_t *exec, int32_t max_tokens, int32_t n_embd, int32_t n_used,
                       guild_err_t *err);

/* Destroys through ops; sets *m to NULL; NULL-safe. */
void cuda_moe_destroy(cuda_moe_t **m);

#endif
