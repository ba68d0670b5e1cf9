/* gpu-worker/dense/gpu_cost.h — the cost model the GPU memory plan (gpu_plan.h) decides with: how fast the
 * host copies experts to the device, the device and the CPU side compute routed experts, and the CPU side reads
 * them at decode. Pure arithmetic, no CUDA.
 *
 * Where the numbers come from, in order (each field separately):
 *   1. the model's tuning file (MODEL.gguf.tuning, cpu-expert-worker/experts/expert_tuning.h), whose cost keys
 *      `guild optimize` measures on the machine: the CPU side's prefill rate (one layer's experts at a prefill
 *      batch) and decode read rate (one token's experts), scaled to every NUMA node, and the pinned host to
 *      device rate when a CUDA device is present (cuda_probe);
 *   2. otherwise the defaults below, measured on the project's device machine (an H200 over PCIe 5, 16 cores
 *      with AMX, one NUMA node; bench/results/cuda4-*, final-qwen3-30b-a3b-h200-*): honest there, a guess
 *      elsewhere. `guild plan` prints which applied.
 * The run-time split of each streamed batch (expert_split.h) measures the copy and product times again as it
 * runs; the plan only needs them to choose sizes (chunk, staging, resident experts), which are fixed for a run.
 */
#ifndef GUILD_GPU_WORKER_GPU_COST_H
#define GUILD_GPU_WORKER_GPU_COST_H

#include <stdint.h>

/* How streamed experts reach the device (backend_options_t.stager): their copy rates differ. */
typedef enum gpu_copy_path {
    GPU_COPY_PINNED = 0, /* page-locked memory (--stager pin, or the CPU side's own copies registered in place:
                            --stager shared): DMA at the bus's speed */
    GPU_COPY_RING,       /* a stager's pinned ring (--stager thread|process): a host copy, then DMA */
    GPU_COPY_PAGEABLE,   /* straight from the model's pageable mapping (--stager none) */
} gpu_copy_path_t;

/* Defaults (the device machine). */
#define GPU_COST_H2D_PINNED_GBPS 54.0   /* cudaMemcpyAsync from page-locked memory, H200 PCIe 5 x16 */
#define GPU_COST_H2D_RING_GBPS 24.0     /* through guild-stager's ring, same machine */
#define GPU_COST_H2D_PAGEABLE_GBPS 5.9  /* from the pageable mapping */
#define GPU_COST_GPU_TFLOPS 100.0       /* int8 tensor-core expert products at prefill batches: the staged
                                           kernel's Q4_K/Q5_K/Q6_K (97-132 on Qwen3-235B-A22B's layer at 4096
                                           tokens; other types ~45-60: a tuning file measures them) */
#define GPU_COST_CPU_TFLOPS 2.0         /* the CPU workers' expert products at prefill batches (AMX, 14 threads) */
#define GPU_COST_CPU_GBPS 90.0          /* the CPU workers' expert weight reads at one token */
#define GPU_COST_EXCHANGE_US 30.0       /* one exchange with the CPU workers, beyond its reads */
#define GPU_COST_SLICE_US 150.0         /* one more staged chunk's products in a layer: its routing and kernels
                                           over the batch's pairs, a device part-filled by few experts' tiles
                                           (bench/results/stream-h200-2026-12-01.md) */
#define GPU_COST_REFILL_US 350.0        /* from a staging slot's release on the device to its next copy's start:
                                           the host enqueues that copy after the products it waits for */
#define GPU_COST_PASS_US 40.0           /* one forward pass's fixed cost per layer (launches, routing to the host) */

typedef struct gpu_cost {
    double h2d_gbps;        /* host -> device copies of streamed experts, 1e9 bytes/s (for the plan's copy path) */
    double gpu_tflops;      /* the device's routed-expert products, 1e12 FLOP/s */
    double cpu_tflops;      /* the CPU side's routed-expert products at prefill batches, all workers together */
    double cpu_gbps;        /* the CPU side's expert reads at one token, all workers together, 1e9 bytes/s */
    double exchange_us;     /* fixed time of one exchange with the CPU side */
    double slice_us;        /* fixed time of one staged chunk's products */
    double refill_us;       /* from a staging slot's release to the start of its next copy */
    double pass_us;         /* fixed time of one forward pass per layer */
    char source[160];       /* where the numbers come from ("defaults (H200 device machine)", "tuning FILE") */
} gpu_cost_t;

/* The defaults for copies through `path`. */
void gpu_cost_default(gpu_cost_t *c, gpu_copy_path_t path);

/* Measured values override the defaults: each argument > 0 replaces its field (h2d_pinned_gbps only for
 * GPU_COPY_PINNED: the other paths' rates are the stager's, not the bus's), and `source` (may be NULL) is
 * recorded as where they came from. */
void gpu_cost_measured(gpu_cost_t *c, gpu_copy_path_t path, double h2d_pinned_gbps, double gpu_tflops,
                       double cpu_tflops, double cpu_gbps, const char *source);

/* FLOPs of one (token, expert) pair of experts of width n_embd and hidden width n_ff: gate, up and down. */
double gpu_cost_pair_flop(int64_t n_embd, int64_t n_ff);

#endif
