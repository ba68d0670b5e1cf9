/* core/model/moe_exec.h — the routed-expert executor: the one seam between the dense side of a MoE layer
 * (attention, router, shared expert, combine: a backend's layer program) and whoever computes the routed experts.
 *
 * For one layer and n_tokens tokens, submit() hands over the post-attention normed activations and the expert ids
 * the router chose (slot order: slot 0 is the highest router weight); collect() gives the UNWEIGHTED output of
 * each (token, slot)'s expert:
 *
 *     y[t][k][:] = down_k( silu(gate_k x[t]) * up_k x[t] ),   k = ids[t][k]
 *
 * The dense side keeps the routing weights and combines out[t] = sum over k = 0..n_used-1, in that order, of
 * weights[t][k] * y[t][k] (float32). Because every y[t][k] is a pure function of (layer, expert, x[t]) and the
 * combine order is fixed, the result is the same bits whichever executor, process or thread computed which expert.
 *
 * Skip slots: ids[t][k] < 0 means "not this executor's" (another one computes that pair: the device's part of a
 * layer split between the GPU and the CPU workers, gpu-worker/dense/expert_split.h): no work is done for it and
 * its row of y holds unspecified bytes. The other rows are the same bits as in the batch without skips.
 *
 * Where a batch lives (ops->mem):
 *   MOE_EXEC_HOST    x, ids and y in host memory, `queue` NULL: submit and collect are plain calls, and y is
 *                    complete when collect returns. What the CPU backend takes.
 *   MOE_EXEC_DEVICE  device memory; `queue` is the CUDA stream that carries the dense side's work: submit
 *                    enqueues what reads x and ids (which stay valid until collect returns), collect enqueues what
 *                    makes y complete for the work enqueued after it, so work between the two (the shared expert)
 *                    overlaps the experts. Its step hooks (below; typed wrappers in gpu-worker/dense/cuda/cuda_moe.h)
 *                    let a whole forward pass be one CUDA graph. The CUDA backend takes either kind: a host
 *                    executor through its adapter, which copies the batch across.
 * collect's y is the executor's own [n_tokens][n_used][n_embd] buffer, valid until the next submit.
 *
 * Each process creates one executor and hands it to its backend (borrowed):
 *   "local"  cpu-expert-worker/experts/moe_local.h  host: every expert in this process's threads (single process)
 *   "xchg"   gpu-worker/dense/moe_xchg.h            the CPU worker processes, through the arena's MoE exchange
 *            (ipc/exchange.h): driven from the host, or from the device by kernels (in-graph doorbells) when the
 *            backend is "cuda" (backend_exchange_exec_new picks)
 * The CUDA backend builds its own around it: "gpu" (experts resident on or streamed to the device, the others
 * through the executor it was given) and "host" (the adapter). Counters are each executor's own (moe_exec_stats).
 *
 * An implementation embeds moe_exec_t as its first member and fills `ops`.
 */
#ifndef GUILD_MODEL_MOE_EXEC_H
#define GUILD_MODEL_MOE_EXEC_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "core/util/err.h"

typedef struct moe_exec moe_exec_t;

typedef enum moe_exec_mem {
    MOE_EXEC_HOST = 0,
    MOE_EXEC_DEVICE = 1,
} moe_exec_mem_t;

/* Counters since creation; zero where an executor has nothing of the kind. */
typedef struct moe_exec_stats {
    uint64_t pairs;          /* host executors: (token, slot) pairs computed or handed on (ids >= 0) */
    uint64_t exchanges;      /* batches the dense side waited for: computed in this process ("local"), by the CPU
                                workers ("xchg"), by the host executor behind the CUDA backend's adapter ("host") */
    uint64_t wait_ns;        /* time it waited for them: host time, device time when the device waits ("xchg"
                                driven from the device) */
    uint64_t sleeps;         /* host waits for them that slept (futex) */
    /* "gpu": layer batches of experts the CPU side holds, computed on the device with streamed weights (whole or
     * split), the bytes copied for them, and the split of those batches (gpu-worker/dense/expert_split.h) */
    uint64_t streamed, streamed_bytes;
    uint64_t split_gpu_experts, split_cpu_experts; /* experts with pairs computed on each side */
    uint64_t split_gpu_pairs, split_cpu_pairs;     /* (token, slot) pairs computed on each side (expected, as
                                                      planned before the routing) */
    /* "gpu": forward passes that streamed experts, and in them (device time) their span, the copy engine busy
     * with their copies, the dense side waiting for copies and for the CPU side (busy the rest of the span) */
    uint64_t stream_passes, stream_span_ns, copy_busy_ns, copy_wait_ns, cpu_wait_ns;
} moe_exec_stats_t;

typedef struct moe_exec_ops {
    const char *name;   /* "local", "xchg", "gpu", "host" for logs */
    moe_exec_mem_t mem;
    /* layer: 0..n_layer-1; x: [n_tokens][n_embd]; ids: [n_tokens][n_used], each in [0, n_expert) or < 0 (skip).
     * 0, or -1 with a message (a bad id, too many tokens, a worker died, a timeout, an interrupt). */
    int (*submit)(moe_exec_t *e, int32_t layer, int32_t n_tokens, const float *x, const int32_t *ids, void *queue,
                  guild_err_t *err);
    /* *y: the outputs of the batch submitted last. 0, or -1 with a message. */
    int (*collect)(moe_exec_t *e, const float **y, void *queue, guild_err_t *err);
    void (*destroy)(moe_exec_t *e);
    void (*stats)(const moe_exec_t *e, moe_exec_stats_t *out); /* optional */
    /* Device executors, each optional (NULL: nothing to do, or the plain way). A forward pass calls step_begin
     * (before its work is enqueued or a graph launched), enqueues its layers, step_end (enqueued last), then
     * sync on an event recorded after everything, then result. */
    bool (*capturable)(const moe_exec_t *e); /* submit/collect only enqueue device work: a graph may hold them */
    int (*step_begin)(moe_exec_t *e, void *queue, guild_err_t *err);
    int (*step_end)(moe_exec_t *e, void *queue, guild_err_t *err);
    int (*sync)(moe_exec_t *e, void *done, guild_err_t *err); /* waits for the event `done` (a cudaEvent_t) */
    int (*result)(moe_exec_t *e, guild_err_t *err); /* after sync: -1 with the reason when an exchange of the step
                                                       failed (its results are garbage then) */
    /* collect for the pairs p with ids[p] >= 0 only (ids: device memory, the batch's or a mask of it): their
     * rows written into y (device [n_tokens][n_used][n_embd], the others untouched), read where the executor
     * left them (the arena's slot, pinned host memory) rather than all copied across: a split layer's few CPU
     * rows. */
    int (*collect_rows)(moe_exec_t *e, float *y, const int32_t *ids, void *queue, guild_err_t *err);
    /* Prefetch hints, both optional. hint_experts: how many predicted experts per token it passes on (0: it takes
     * no hint). hint, between submit and collect (or, for a host executor, before submit: it then travels with the
     * batch submitted next): ids [n_tokens][n_used] (in the executor's memory kind, enqueued on queue like
     * submit), the experts the dense side predicts for layer `layer`, the next exchange's, each row in router
     * order: the first hint_experts of each row travel with the batch (ipc/exchange.h, guild_exchange_hint), for
     * the CPU workers to prefetch while they wait. An executor that computes some experts itself (resident on a
     * device) passes on only the others: ids < 0 are skipped (guild_exchange_hint_pick), a layer it computes
     * whole gets no hint. Never changes a result. A device executor may enqueue its own products of the exchange
     * in flight after the hint (then, when no hint comes, at collect). */
    int32_t (*hint_experts)(const moe_exec_t *e);
    int (*hint)(moe_exec_t *e, int32_t layer, int32_t n_tokens, const int32_t *ids, void *queue, guild_err_t *err);
    /* Optional: false when a hint for `layer` given now would name no expert or travel with no exchange (the
     * layer computed whole by the executor itself, or the submit before it published none), so the dense side
     * need not predict it; absent: true. */
    bool (*hint_wanted)(const moe_exec_t *e, int32_t layer);
} moe_exec_ops_t;

struct moe_exec {
    const moe_exec_ops_t *ops;
};

static inline int moe_exec_submit(moe_exec_t *e, int32_t layer, int32_t n_tokens, const float *x,
                                  const int32_t *ids, void *queue, guild_err_t *err)
{
    return e->ops->submit(e, layer, n_tokens, x, ids, queue, err);
}

static inline int moe_exec_collect(moe_exec_t *e, const float **y, void *queue, guild_err_t *err)
{
    return e->ops->collect(e, y, queue, err);
}

/* Host executors: submit then collect. */
static inline int moe_exec_run(moe_exec_t *e, int32_t layer, int32_t n_tokens, const float *x, const int32_t *ids,
                               const float **y, guild_err_t *err)
{
    if (e->ops->submit(e, layer, n_tokens, x, ids, NULL, err) < 0)
        return -1;
    return e->ops->collect(e, y, NULL, err);
}

static inline int32_t moe_exec_hint_experts(const moe_exec_t *e)
{
    return e->ops->hint_experts && e->ops->hint ? e->ops->hint_experts(e) : 0;
}

/* hint_experts > 0 and the executor takes a hint for `layer` now (hint_wanted). */
static inline bool moe_exec_hint_wanted(const moe_exec_t *e, int32_t layer)
{
    return moe_exec_hint_experts(e) > 0 && (!e->ops->hint_wanted || e->ops->hint_wanted(e, layer));
}

static inline int moe_exec_hint(moe_exec_t *e, int32_t layer, int32_t n_tokens, const int32_t *ids, void *queue,
                                guild_err_t *err)
{
    return e->ops->hint ? e->ops->hint(e, layer, n_tokens, ids, queue, err) : 0;
}

static inline void moe_exec_stats(const moe_exec_t *e, moe_exec_stats_t *out)
{
    memset(out, 0, sizeof *out);
    if (e->ops->stats)
        e->ops->stats(e, out);
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
