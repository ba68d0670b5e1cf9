/* gpu-worker/dense/cuda/cuda_moe.h — how the CUDA backend hands a layer's routed experts to whoever computes them.
 *
 * The layer program calls submit() as soon as the router has run, enqueues the shared expert, then calls
 * collect(), and combines with the y it gets. Both take the compute stream:
 *   submit(layer, n, x, ids)     x: [n][n_embd] normed activations, ids: [n][n_used] (device pointers, valid
 *                                until collect returns); makes them reach the executor
 *   collect(&y)                  sets y to a device-readable [n][n_used][n_embd] of UNWEIGHTED expert outputs
 *                                (moe_exec.h's contract) that stays valid until the next submit, such that
 *                                work enqueued on the stream after collect sees it complete.
 * ids < 0 are skip slots (moe_exec.h): every bridge passes them through unchanged and does no work for them;
 * the rows collect gives for them hold unspecified bytes (the "gpu" bridge's split merges by the ids it masked).
 *
 * Implementations:
 *   "local" (cuda_moe_local_new): copies x/ids to pinned host memory, waits for them, calls the in-process
 *           moe_exec_t on the host thread, copies y back. The shared expert enqueued between submit and collect
 *           runs on the GPU while the CPU computes the experts.
 *   "arena" (cuda_moe_arena_new): the exchange slot lives in the arena, host memory registered with
 *           cudaHostRegister(Mapped); submit enqueues a kernel that writes the slot's x/ids and rings the step
 *           doorbell with a system-scope release store; collect enqueues a kernel that spins on the workers' done
 *           counters with system-scope acquire loads, then one that copies the slot's y to device memory
 *           (gpu-worker/dense/cuda/cuda_xchg.h). Nothing waits on the host, so a decode step can be one CUDA graph;
 *           the host thread meanwhile wakes CPU workers that went to sleep (sync) and can cancel the waits.
 *   "gpu"   (cuda_moe_gpu_new): the experts of the layers it holds live in device memory and run there
 *           (grouped quantized kernels, gpu-worker/dense/cuda/expert_mm.cu); other layers go to a fallback bridge.
 *
 * A forward pass calls step_begin (host, before its work is enqueued or a graph launched), enqueues its layers,
 * step_end (enqueued last), then sync on an event recorded after everything, then result. Each is optional.
 */
#ifndef GUILD_GPU_WORKER_CUDA_MOE_H
#define GUILD_GPU_WORKER_CUDA_MOE_H

#include <stdbool.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "core/model/moe_exec.h"
#include "core/quant/types.h"
#include "core/util/err.h"

typedef struct cuda_moe cuda_moe_t;

/* Counters since creation of the exchanges a bridge drove from the device. */
typedef struct cuda_moe_stats {
    uint64_t exchanges;  /* completed by the CPU side (workers or the host executor) */
    uint64_t wait_ns;    /* time spent waiting for them (device time for the arena, host time for "local") */
    uint64_t streamed;   /* layer computations done on the device with streamed weights ("gpu"), whole or split */
    uint64_t streamed_bytes; /* expert bytes copied to the device for them */
    /* the batches of streamable layers the "gpu" bridge planned (gpu-worker/dense/expert_split.h), summed: */
    uint64_t split_gpu_experts, split_cpu_experts; /* experts with pairs computed on each side */
    uint64_t split_gpu_pairs, split_cpu_pairs;     /* (token, slot) pairs computed on each side */
} cuda_moe_stats_t;

typedef struct cuda_moe_ops {
    const char *name;
    int (*submit)(cuda_moe_t *m, int32_t layer, int32_t n_tokens, const float *x, const int32_t *ids, cudaStream_t s,
                  guild_err_t *err);
    int (*collect)(cuda_moe_t *m, const float **y, cudaStream_t s, guild_err_t *err);
    void (*destroy)(cuda_moe_t *m);
    /* Optional, NULL: nothing to do. */
    bool (*capturable)(const cuda_moe_t *m);  /* submit/collect only enqueue device work (graphs may hold it) */
    int (*step_begin)(cuda_moe_t *m, cudaStream_t s, guild_err_t *err);
    int (*step_end)(cuda_moe_t *m, cudaStream_t s, guild_err_t *err);
    /* Waits for `done` (recorded on the stream after the step) in place of cudaEventSynchronize. */
    int (*sync)(cuda_moe_t *m, cudaEvent_t done, guild_err_t *err);
    /* After sync: -1 with the reason when an exchange of the step failed (its results are garbage then). */
    int (*result)(cuda_moe_t *m, guild_err_t *err);
    void (*stats)(const cuda_moe_t *m, cuda_moe_stats_t *out);
} cuda_moe_ops_t;

/* Implementations embed this as their first member. */
struct cuda_moe {
    const cuda_moe_ops_t *ops;
};

/* The hooks above through ops, with their defaults when absent. */
bool cuda_moe_capturable(const cuda_moe_t *m);
int cuda_moe_step_begin(cuda_moe_t *m, cudaStream_t s, guild_err_t *err);
int cuda_moe_step_end(cuda_moe_t *m, cudaStream_t s, guild_err_t *err);
int cuda_moe_sync(cuda_moe_t *m, cudaEvent_t done, guild_err_t *err);
int cuda_moe_result(cuda_moe_t *m, guild_err_t *err);
void cuda_moe_stats(const cuda_moe_t *m, cuda_moe_stats_t *out);

/* The in-process bridge to `exec` (borrowed) for batches of up to max_tokens tokens. -1 with a message when
 * pinned or device memory cannot be had. */
int cuda_moe_local_new(cuda_moe_t **out, moe_exec_t *exec, int32_t max_tokens, int32_t n_embd, int32_t n_used,
                       guild_err_t *err);

/* The "arena" bridge over exchange x (borrowed), whose memory lies in [host_base, host_base + bytes) registered
 * with cudaHostRegister(Mapped) and seen by the device at dev_base. Exchanges continue from the arena's current
 * step. A device wait gives up after timeout_ns, or when interrupted(ctx, err) returns nonzero while the host
 * waits in sync (may be NULL). -1 with a message on a shape mismatch or when memory cannot be had. */
struct guild_exchange;
int cuda_moe_arena_new(cuda_moe_t **out, struct guild_exchange *x, void *host_base, void *dev_base, int32_t max_tokens,
                       int32_t n_embd, int32_t n_used, uint64_t timeout_ns,
                       int (*interrupted)(void *ctx, guild_err_t *err), void *ctx, guild_err_t *err);

/* A layer's experts for the "gpu" bridge. */
typedef struct cuda_moe_gpu_layer {
    const void *gate, *up, *down;           /* host bytes of the 3-D tensors; gate NULL: never on the device
                                               (types the kernels do not take) */
    guild_type_t gate_type, down_type;      /* up has gate_type */
    size_t gate_row, gate_mat, down_row, down_mat; /* bytes of a row and of one expert's matrix */
    bool resident;                          /* uploaded once and computed on the device */
} cuda_moe_gpu_layer_t;

/* The "gpu" bridge: resident layers computed on the device, the others through `fallback` (owned from here on,
 * also on failure; may be NULL when every layer is resident). With `stream`, a host-side (uncaptured) batch of
 * the other layers is split per expert between the CPU side and the device (gpu-worker/dense/expert_split.h): the
 * device copies only its experts' weights over PCIe into a staging buffer and computes them while the CPU side
 * computes the rest (its exchange submitted first, with the device's pairs as skip slots), and collect merges
 * both; predicted from the copy bandwidth measured at creation and the CPU side's time per exchange measured as
 * it runs (a + b * pairs; everything stays on the CPU side before an exchange of more than one token was
 * measured there). All-CPU and all-device are the split's ends; after an all-device batch the next streamed
 * layer's whole copy overlaps this layer's products (double-buffered). max_tokens tokens per submit. Device
 * bytes it took are added to *bytes. The copies go through `stage` (gpu-worker/dense/cuda/cuda_stage.h, borrowed: a
 * stager's pinned ring; NULL: pageable copies from the weights' host memory). -1 with a message naming the layer
 * for a type the kernels do not handle or when device memory is short. */
struct cuda_stage;
int cuda_moe_gpu_new(cuda_moe_t **out, const cuda_moe_gpu_layer_t *layers, int32_t n_layer, int32_t n_expert,
                     int32_t max_tokens, int32_t n_embd, int32_t n_ff, int32_t n_used, bool stream,
                     struct cuda_stage *stage, cuda_moe_t *fallback, size_t *bytes, guild_err_t *err);

/* Tests only: m ("gpu" bridge) splits every host-side batch of a streamed layer with the device taking the
 * hottest experts holding at least gpu_fraction of its pairs (0: all on the CPU side, 1: all on the device),
 * whatever the measured times; < 0: plan by the times again. */
void cuda_moe_gpu_force_split(cuda_moe_t *m, double gpu_fraction);

/* m ("gpu" bridge, created with a stage) copies through `stage` (borrowed, not NULL) from now on: the backend's
 * replacement of a stage that failed. Call between forward passes (no copy in flight). */
void cuda_moe_gpu_set_stage(cuda_moe_t *m, struct cuda_stage *stage);

/* Destroys through ops; sets *m to NULL; NULL-safe. */
void cuda_moe_destroy(cuda_moe_t **m);

#endif
