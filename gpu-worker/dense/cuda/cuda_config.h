/* gpu-worker/dense/cuda/cuda_config.h — what only the "cuda" backend takes: its own settings record, given to
 * backend_new("cuda", ..., config) beside the dense contract (gpu-worker/dense/backend.h). No CUDA header here:
 * the coordinator and the GPU worker fill it (from the command line, or from the GPU worker's options on the
 * wire: gpu-worker/gpu_worker_options.h) in builds without nvcc too.
 *
 * Zero-filled, it is the defaults: no memory budget, every layer's experts on the device as far as they fit,
 * CUDA graphs on, plain copies of streamed experts. (The CPU workers' exchange is not a setting: the GPU worker's
 * executor over it, backend_exchange_exec_new, comes as the dense contract's moe.) */
#ifndef GUILD_GPU_WORKER_CUDA_CONFIG_H
#define GUILD_GPU_WORKER_CUDA_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct expert_host;

/* How the backend copies the experts it streams to the device (only when its memory plan streams). */
typedef enum cuda_stager {
    CUDA_STAGER_NONE = 0, /* pageable copies from the model mapping */
    CUDA_STAGER_THREAD,   /* a pinned staging ring served by stage_threads copy threads of this process */
    CUDA_STAGER_PROCESS,  /* the pinned staging ring stage_ring, served by a guild-stager process */
    CUDA_STAGER_PIN,      /* the streamed layers' experts copied once into page-locked memory at load: the
                             device copies them by DMA, at the bus's speed and with no CPU copy per batch, for
                             the price of RAM for them while the backend lives */
    CUDA_STAGER_SHARED,   /* the memory the CPU side computes the streamed experts from (expert_host: its own
                             copies; else the model mapping) registered for the device in place: DMA at the
                             bus's speed, no second copy in RAM */
} cuda_stager_t;

#define CUDA_STAGER_LAST CUDA_STAGER_SHARED

typedef struct cuda_config {
    /* Settings (guild run's --gpu-mem, --gpu-experts, --no-cuda-graph, --stager, --stager-threads). */
    uint64_t gpu_mem;          /* budget in bytes for everything on the device (gpu-worker/dense/gpu_plan.h); 0: none */
    int32_t gpu_expert_layers; /* layers whose routed experts live and run on the device: 0 as many as the budget
                                  allows (all without a budget), GPU_EXPERTS_NONE none, k > 0 at most k */
    bool no_graph;             /* debugging: enqueue every kernel of every step (no captured graphs) */
    bool no_fuse;              /* debugging: the block norms, the residual updates before them and the quantizations
                                  after them as separate launches (cuda_layer.c; the fused launch has their bits) */
    bool no_pdl;               /* debugging: no programmatic dependent launch (cuda_set_pdl; the same bits) */
    bool step_clock;           /* measurement: each forward pass's host times, timing events and marks on the
                                  device (gpu-worker/dense/cuda/cuda_step_clock.h; 5 one-thread kernels more a
                                  step); read by cuda_backend_step_times */
    cuda_stager_t stager;      /* the streamed experts' copies */
    int32_t stage_threads;     /* THREAD: copy threads (0: half the online CPUs, at most 256) */
    const char *stage_ring;    /* PROCESS: the ring's arena name (ipc/stage_ring.h); borrowed during creation */
    const struct expert_host *expert_host; /* wiring, not a setting: where the CPU side's copies of the experts
                                  are in this process (gpu-worker/dense/expert_host.h; the GPU worker builds it from
                                  the CPU workers' expert stores, a single process from its executor; read during
                                  creation, the memory must outlive the backend); NULL: the model mapping. Streamed
                                  experts are copied from there (NONE, PIN, SHARED) */
    /* The multi-process plan (coordinator/placement.h): layers whose routed experts no other process holds;
     * creation fails unless the backend keeps each of them resident and computes it itself. Borrowed during
     * creation; NULL/0: none. */
    const uint32_t *resident_layers; /* [n_resident_layers] layer indices */
    size_t n_resident_layers;
    /* Test hooks: set by tests and by the tests' --force-split flag only; no user setting lives here. */
    struct {
        double split_gpu_fraction; /* > 0: every planned batch of a streamed layer splits with the device taking
                                      at least this fraction of its pairs, whatever the measured times
                                      (cuda_moe_gpu_force_split): the same bits run after run; 0: by the times */
        uint64_t context;          /* > 0: the CUDA context's bytes the backend's own plan counts, instead of the
                                      measured (a test process's other allocations blur that measure) */
    } test;
    /* Measurement (--cuda-off attn-grid,attn-early,attn-prefetch): the decode attention's launch form
     * (cuda_attn_form_t, cuda_set_attn_form) without a part; the same bits either way. */
    bool no_attn_grid;         /* a block a split (no grid cut to the blocks the device holds at once) */
    bool no_attn_early;        /* the row lengths read after the wait (then no prefetch either) */
    bool no_attn_prefetch;     /* no L2 prefetch of the keys and values before the wait */
    bool no_attn_mma;          /* measurement (--cuda-off attn-mma): the decode attention's FMA forms where the
                                  tensor-core form applies (cuda_set_attn_mma; other bits, within the tolerance) */
    bool no_mm_split;          /* measurement (--cuda-off mm-split): one-token products a warp a row
                                  (cuda_set_matmul_split); the same bits */
    bool no_norm_cluster;      /* measurement (--cuda-off norm-cluster): the fused norm one block a row
                                  (cuda_set_norm_cluster); the same bits */
    bool no_xchg_fuse;         /* measurement (--cuda-off xchg-fuse): the MoE exchange's publish and take of rows
                                  as launches of their own, not in the router's launch and the next norm's; the
                                  same bits */
    bool no_l2_stream;         /* measurement (--cuda-off l2-stream): the weights a step reads once at L2's normal
                                  priority, not marked as streaming (cuda_set_l2_stream); the same bits */
} cuda_config_t;

#endif
