/* gpu-worker/dense/expert_split.h — which of a layer's routed experts the GPU computes (their weights streamed over
 * PCIe) and which the CPU side computes, for one batch of a layer whose experts are not resident on the GPU.
 *
 * Both sides start together (the CPU side's exchange is submitted first) and the layer is done when the slower
 * finishes, so the plan minimises max(t_gpu, t_cpu), predicted from
 *     t_gpu = (bytes copied) / copy_bpns + gpu_ns_per_pair * (GPU pairs)        (0 with no GPU pair)
 *     t_cpu = cpu_a_ns + cpu_b_ns * (CPU pairs)                                   (0 with no CPU pair)
 * or, for layers whose copies run ahead of the products (pipelined: the next layers' experts copy while this
 * one computes, so in the steady state a layer costs the slower of its copies and the dense side's work, which
 * is its dense part, copy_hidden_ns, then the slower of its products and the CPU side),
 *     t_gpu = max((bytes copied) / copy_bpns - copy_hidden_ns, gpu_ns_per_pair * (GPU pairs)),
 * so that copy_hidden_ns + max(t_gpu, t_cpu) is the layer's time.
 * A CPU part also costs the device its exchange, on the device's own queue: the batch's activations posted to the
 * host (xchg_ns) and the CPU side's rows of y brought back (xchg_ns_per_pair each), so a plan with CPU pairs
 * costs max(t_gpu, t_cpu) + xchg_ns + xchg_ns_per_pair * (CPU pairs) and all-GPU t_gpu alone: in large batches,
 * where posting the activations costs more than the CPU side's share of the products saves, nothing goes to it.
 * Before the routing is known, `count` may be the pairs expected per expert (a profile, or the fair share).
 * An expert goes wholly to one side (its pairs are never split: it would cost its copy and the CPU's pass over
 * its weights both). The GPU takes a prefix of the experts ordered by pairs per byte to copy, descending (the
 * most tokens first when every expert costs the same bytes; an expert already on the device costs none),
 * ties broken by more pairs, then the lower id: the same inputs give the same plan. All-CPU (no copy) and
 * all-GPU (no exchange) are the plans' ends. No CUDA here: the "gpu" bridge (cuda/cuda_moe_gpu.c) applies it.
 */
#ifndef GUILD_GPU_WORKER_EXPERT_SPLIT_H
#define GUILD_GPU_WORKER_EXPERT_SPLIT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/util/err.h"

typedef struct expert_split_model {
    double copy_bpns;          /* host -> device copy bandwidth, bytes per ns (measured); <= 0: no copy possible */
    double gpu_ns_per_pair;    /* the device's products per (token, slot) pair, ns (may be 0) */
    double cpu_a_ns, cpu_b_ns; /* the CPU side's time for an exchange of p > 0 pairs: a + b * p ns (measured) */
    double force_gpu_fraction; /* tests only; < 0: plan by the times. Else the GPU takes the shortest prefix of
                                  the order holding at least this fraction of the pairs (0: none, 1: all) */
    bool pipelined;            /* t_gpu the slower of copies and products, not their sum */
    double copy_hidden_ns;     /* pipelined: copy time hidden behind the layer's dense part */
    double xchg_ns;            /* the device's time for a CPU part's exchange (posting the batch), 0: free */
    double xchg_ns_per_pair;   /* and per CPU pair (its row of y brought back) */
} expert_split_model_t;

typedef struct expert_split_result {
    int32_t gpu_experts, cpu_experts; /* experts with pairs in the batch, on each side */
    int64_t gpu_pairs, cpu_pairs;     /* (token, slot) pairs on each side */
    uint64_t gpu_bytes;               /* bytes to copy for the GPU's experts */
    double t_gpu_ns, t_cpu_ns;        /* the predicted times of each side */
    double t_xchg_ns;                 /* the device's time for the CPU part's exchange (0 without CPU pairs) */
} expert_split_result_t;

typedef struct expert_split expert_split_t;

/* A planner for layers of n_expert experts (its scratch). -1 with a message when out of memory. */
int expert_split_new(expert_split_t **out, int32_t n_expert, guild_err_t *err);
void expert_split_destroy(expert_split_t **s);

/* Plans one batch: count[e] pairs routed to expert e, bytes[e] to copy for it to run on the GPU (0: already
 * there). Sets on_gpu[e] (n_expert entries) to 1 for the experts the GPU computes (only experts with pairs),
 * 0 for the others, and fills *r. */
void expert_split_plan(expert_split_t *s, const int32_t *count, const uint64_t *bytes,
                       const expert_split_model_t *model, uint8_t *on_gpu, expert_split_result_t *r);

#endif
