/* gpu-worker/dense/cuda/cuda_moe.h — the device side of the routed-expert seam (core/model/moe_exec.h): the
 * executors that work on device memory (MOE_EXEC_DEVICE), and their step hooks with CUDA's types.
 *
 * The CUDA backend's layer program calls moe_exec_submit(x, ids, stream) as soon as the router has run, enqueues
 * the shared expert, then moe_exec_collect(&y, stream), and combines with the y it gets (device memory). ids < 0
 * are skip slots: every executor here passes them on unchanged and does no work for them.
 *
 * Executors:
 *   "xchg" (cuda_moe_xchg_new): the CPU workers through the arena's MoE exchange, driven by kernels. The arena is
 *          host memory registered with cudaHostRegister(Mapped); submit enqueues a kernel that writes the slot's
 *          x/ids and rings the step doorbell with a system-scope release store; collect enqueues one that spins
 *          on the workers' done counters with system-scope acquire loads, then one that copies the slot's y to
 *          device memory (gpu-worker/dense/cuda/cuda_xchg.h). Nothing waits on the host, so a decode step can be
 *          one CUDA graph; the host thread meanwhile (sync) wakes CPU workers that went to sleep and can cancel
 *          the waits. The GPU worker's one executor when its backend is "cuda" (backend_exchange_exec_new).
 *   "host" (cuda_moe_host_new): a host executor (moe_local, or "xchg" driven from the host) seen from the device:
 *          submit copies x/ids to pinned host memory, collect waits for them, runs the host executor on the host
 *          thread and copies its y to the device. The shared expert enqueued between the two runs on the GPU
 *          while the CPU computes the experts.
 *   "gpu"  (cuda_moe_gpu_new): the experts of the layers it holds live in device memory and run there
 *          (grouped quantized kernels, gpu-worker/dense/cuda/expert_mm.cu); the other layers go to a fallback
 *          executor, whole or split per expert with the device.
 * The backend builds "gpu" and "host" around the executor it was given; their counters are their own.
 */
#ifndef GUILD_GPU_WORKER_CUDA_MOE_H
#define GUILD_GPU_WORKER_CUDA_MOE_H

#include <stdbool.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "core/model/activation.h"
#include "core/model/moe_exec.h"
#include "core/model/weights.h"
#include "core/quant/types.h"
#include "core/util/err.h"
#include "gpu-worker/dense/moe_xchg.h"
#include "gpu-worker/dense/expert_host.h"

/* The step hooks of moe_exec_ops_t, with their defaults when absent: not capturable (the executor waits on the
 * host), nothing to do around a step, a plain event wait, no failure. */
bool cuda_moe_capturable(const moe_exec_t *m);
int cuda_moe_step_begin(moe_exec_t *m, cudaStream_t s, guild_err_t *err);
int cuda_moe_step_end(moe_exec_t *m, cudaStream_t s, guild_err_t *err);
int cuda_moe_sync(moe_exec_t *m, cudaEvent_t done, guild_err_t *err);
int cuda_moe_result(moe_exec_t *m, guild_err_t *err);

/* moe_exec_collect without the copy, where m is "xchg": enqueues the wait for the exchange submitted last and sets
 * *y_at to the device word where the wait leaves its rows' address (the slot's y in mapped host memory, valid until
 * the next submit), for cuda_moe_combine_at; 1. Any other executor: 0, nothing enqueued (collect as usual). */
int cuda_moe_collect_at(moe_exec_t *m, const float *const **y_at, cudaStream_t s, guild_err_t *err);

/* Where m is "xchg" (and it takes n tokens, n == 1): *pub, what the router's launch needs to publish the layer's
 * exchange itself (cuda_router_fused_norm), true. Then, when that launch did publish, cuda_moe_published(m, layer,
 * n) in place of moe_exec_submit; else submit as usual. Any other executor: false. */
struct cuda_xchg_pub;
bool cuda_moe_pub_of(moe_exec_t *m, int32_t layer, int32_t n, struct cuda_xchg_pub *pub);
void cuda_moe_published(moe_exec_t *m, int32_t layer, int32_t n);
/* Tests: how often m ("xchg"; any other: 0) was published by the router's launch (cuda_moe_published) and
 * collected without the copy (cuda_moe_collect_at), counted where enqueued (a captured graph's once). */
void cuda_moe_xchg_fused(const moe_exec_t *m, uint64_t *router_pubs, uint64_t *in_place);

/* The "host" adapter to `host` (a MOE_EXEC_HOST executor, borrowed) for batches of up to max_tokens tokens. -1
 * with a message when pinned or device memory cannot be had. */
int cuda_moe_host_new(moe_exec_t **out, moe_exec_t *host, int32_t max_tokens, int32_t n_embd, int32_t n_used,
                      guild_err_t *err);

/* The device-driven "xchg" executor over exchange x (borrowed: must outlive it; moe_xchg.h): registers
 * [o->map, o->map + o->map_bytes), which holds x, for the device (Mapped | Portable) until destroyed. Exchanges
 * continue from the exchange's current step. A device wait gives up after o->timeout_ns, or when o->interrupted
 * returns nonzero while the host waits in sync. -1 with a message when the memory cannot be registered or device
 * memory cannot be had. */
struct guild_exchange;
int cuda_moe_xchg_new(moe_exec_t **out, struct guild_exchange *x, const moe_xchg_options_t *o, guild_err_t *err);

/* A layer's experts for the "gpu" executor. */
typedef struct cuda_moe_gpu_layer {
    const void *gate, *up, *down;           /* the model mapping's 3-D tensors (plain rows); gate NULL: never on
                                               the device (types the kernels do not take) */
    guild_type_t gate_type, down_type;      /* up has gate_type */
    size_t gate_row, gate_mat, down_row, down_mat; /* bytes of a row and of one expert's matrix */
    bool resident;                          /* every expert uploaded once and computed on the device */
    const uint8_t *resident_experts;        /* [n_expert] or NULL: the experts uploaded (the hottest, with a
                                               routing profile); overrides `resident` when not NULL */
    bool stream;                            /* the others may stream (the plan's mode STREAMED) */
    const expert_host_mats_t *src;          /* [n_expert] or NULL: where streaming copies each expert from (the
                                               CPU side's own copies, gpu-worker/dense/expert_host.h); NULL: from
                                               the tensors above */
    /* gpt-oss (FFN option clamped swiglu): h = swiglu_oai(gate x + gate_b, up x + up_b), y = down h + down_b;
     * the biases (host, [n_expert][n_ff], [n_expert][n_embd] f32) stay on the device for resident and streamed
     * layers alike. oai false: h = silu(gate x) * up x, no biases. */
    bool oai;
    float alpha, limit;
    const float *gate_b, *up_b, *down_b;
} cuda_moe_gpu_layer_t;

/* Layer L's experts as the model holds them: the tensors, their types and sizes, the biases and the activation
 * act (model_expert_act_of); resident, resident_experts, stream and src are left to the caller (false, NULL). */
cuda_moe_gpu_layer_t cuda_moe_gpu_layer_of(const model_layer_t *L, const model_expert_act_t *act);

/* The "gpu" executor: resident experts computed on the device, the others through `fallback` (a device executor,
 * borrowed: must outlive it; may be NULL when every expert is resident), or streamed. A layer's experts are
 * ranked: the resident ones first, then those a forward pass streams; each device part (the resident experts,
 * each staged chunk) computes its ranks with part-local ids, the CPU side's batch carries its own experts' pairs
 * only (the others as skip slots), and collect merges (a layer with no expert on the CPU side has none).
 *
 * With staging slots (n_slots >= 2 of slot_bytes: the plan's, gpu-worker/dense/gpu_plan.h), the first
 * host-side (uncaptured) batch of more than a few tokens of a forward pass plans the pass: for each layer
 * marked `stream` with experts the CPU side holds, which of them the device computes, from the
 * pairs expected per expert (the fair share before the routing is known) and the measured costs
 * (gpu-worker/dense/expert_split.h, pipelined: copy bandwidth, device products per pair, the CPU side's a + b *
 * pairs), and queues their copies through the staging slots (cuda_expert_stream.h: whole layers where a slot
 * holds one, else slices). The copies run ahead of the products; the CPU
 * side and the device then compute at once. Before the CPU side's time per pair is known the pass's first
 * streamable layer goes to it whole (measured), the others to the device. max_tokens tokens per submit. Device
 * bytes it took are added to *bytes. The copies go through `stage` (gpu-worker/dense/cuda/cuda_stage.h,
 * borrowed; NULL: pageable copies). -1 with a message naming the layer for a type the kernels do not handle
 * or when device memory is short. */
struct cuda_stage;
int cuda_moe_gpu_new(moe_exec_t **out, const cuda_moe_gpu_layer_t *layers, int32_t n_layer, int32_t n_expert,
                     int32_t max_tokens, int32_t n_embd, int32_t n_ff, int32_t n_used, int32_t n_slots,
                     size_t slot_bytes, struct cuda_stage *stage, moe_exec_t *fallback, size_t *bytes,
                     guild_err_t *err);

/* Tests only: m ("gpu") plans every pass that streams with the device taking, in each streamed layer, the first
 * experts (by expected pairs, then id) holding at least gpu_fraction of its expected pairs (0: all on the CPU
 * side, 1: all on the device), whatever the measured times; < 0: plan by the times again. */
void cuda_moe_gpu_force_split(moe_exec_t *m, double gpu_fraction);

/* Whether a whole resident layer quantizes its rows in the route's launch (cuda_expert_route_quantize; the same
 * bytes as the separate launches, which cuda_config_t.no_fuse keeps). Off until set. */
void cuda_moe_gpu_set_fuse(moe_exec_t *m, bool fuse);

/* m ("gpu", created with a stage) copies through `stage` (borrowed, not NULL) from now on: the backend's
 * replacement of a stage that failed. Call between forward passes (no copy in flight). */
void cuda_moe_gpu_set_stage(moe_exec_t *m, struct cuda_stage *stage);

#endif
