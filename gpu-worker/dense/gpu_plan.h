/* gpu-worker/dense/gpu_plan.h — what goes into the GPU's memory under a budget (--gpu-mem), decided from a cost
 * model (gpu_cost.h): the chunk (tokens per forward pass, which sizes the buffers), the staging slots through
 * which the experts that are not resident are streamed to the device, and which individual experts stay
 * resident. This plan is the contract between the coordinator, the GPU worker's backend and the CPU workers:
 *
 *   - per layer a mode: RESIDENT (every expert on the device, computed there only: no exchange with the CPU
 *     side), STREAMED (the experts not resident are copied to the device through the staging slots for batches
 *     where that beats the CPU side, split per batch with it: expert_split.h), or CPU (the experts not resident
 *     are computed by the CPU side only: types the device kernels do not take, or no staging fits);
 *   - per layer the set of resident experts (expert_resident: one byte per (layer, expert), 1 = resident). A
 *     resident expert is computed by the device only: the CPU workers are not given it (coordinator/placement.h,
 *     their Assign leaves it out) and a batch's pairs routed to it are skip slots for the CPU side (ids < 0,
 *     core/model/moe_exec.h). With a routing profile (core/model/routing_profile.h) the hottest (layer, expert)
 *     pairs across all layers fill the memory left after the dense part, the buffers and the staging; without
 *     one, whole layers in index order;
 *   - the staging slots (stage_slots >= 2, or 0: nothing streams): each holds the gate, up and down matrices of
 *     up to stage_slot_experts experts of one layer, laid out as
 *         [gate of k experts][up of k experts][down of k experts],   k = stage_slot_experts,
 *     each region starting at a multiple of GPU_PLAN_ALIGN bytes and sized for the largest streamed layer's
 *     matrices (stage_slot_bytes = gpu_plan_slot_bytes(...)); the experts of a slot sit at consecutive
 *     positions in ascending expert order. k == n_expert: a slot holds a whole layer (its experts at their own
 *     index); fewer: a layer's streamed experts go through the slots in slices of k. The slots are a ring:
 *     slice i goes to slot i mod stage_slots, its copies start as soon as the products of the slice before it
 *     in that slot are done, and its products as soon as its copies have landed, so with more slots the copies
 *     run further ahead (through the dense part between two layers, where no slot is released);
 *   - n_batch: the chunk, the most tokens one forward pass takes (the buffers' size): at most what was asked,
 *     smaller when the budget is tight rather than a refusal (--batch auto: the plan's choice, up to
 *     GPU_PLAN_BATCH_AUTO_MAX);
 *   - where the KV cache lives (kv_host): in GPU memory, or, with a backend that can (GPU_PLAN_CAP_KV_HOST), the
 *     attention layers' K and V rows in mapped host RAM, decode attention reading them over PCIe and a prefill
 *     batch's attention reading a copy of its layer's rows staged on the device (kv_stage). Both placements are
 *     planned and the one with the shorter predicted reference request is taken (the cache's reads counted at the
 *     decode kernels' rates per format, at most GPU_PLAN_KV_HBM_GBPS on the device and the PCIe rate from host
 *     RAM); a context neither fits is refused with the sizes and the compact formats (--kv-type) that would fit;
 *   - a short "why" for each decision (printed by gpu_plan_print, `guild plan`).
 *
 * Pure arithmetic on the model's tensor sizes and the cost model, no CUDA: the coordinator prints the plan the
 * GPU worker follows; the coordinator computes it once and hands it over (backend_options_t.plan; to a GPU
 * worker process in its Assign), and a backend given none computes its own from its options. What the driver
 * takes beyond the allocations is counted apart: the CUDA context (`reserve`: measured by a backend that computes
 * its own plan, gpu_plan_options_t.context, else GPU_PLAN_CONTEXT) and the driver's share that grows with the
 * work (`driver`, gpu_plan_driver_bytes: each allocation rounded to the driver's pages, the kernels loaded on first
 * use, page tables of host memory mapped for the device, the kept step graphs). The CUDA backend's memory trace
 * (cuda/cuda_mem_trace.h) measures both phase by phase (bench/results/vram-h200-2026-12-02-s27.md).
 *
 * A backend states what it can follow (gpu_plan_options_t.caps): without GPU_PLAN_CAP_EXPERTS the resident set
 * is whole layers; without GPU_PLAN_CAP_SLICES a staging slot holds a whole layer.
 */
#ifndef GUILD_GPU_WORKER_GPU_PLAN_H
#define GUILD_GPU_WORKER_GPU_PLAN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/model/model.h"
#include "core/quant/types.h"
#include "core/util/err.h"
#include "gpu-worker/dense/gpu_cost.h"

/* What the driver takes beyond the allocations, each a little above its measure on the device machine
 * (bench/results/vram-h200-2026-12-02-s27.md; bench/results/code-comment-measurements.md): the CUDA context where
 * the backend does not measure it (the coordinator's arithmetic), then the driver's share (gpu_plan_driver_bytes). */
#define GPU_PLAN_CONTEXT ((uint64_t)544 << 20)
#define GPU_PLAN_ALLOCS 64                        /* device allocations of the CUDA backend, at most ... */
#define GPU_PLAN_ALLOC_SLACK ((uint64_t)1 << 20)  /* ... each rounded up to the driver's 2 MiB pages */
#define GPU_PLAN_KERNELS ((uint64_t)32 << 20)     /* the kernels' code (sm_90), loaded on first use */
#define GPU_PLAN_MAP_DIV 512                      /* page tables: 8 bytes a 4 KiB page of host memory mapped */
#define GPU_PLAN_GRAPHS 40                        /* step graphs kept (cuda/cuda_state.h CUDA_GRAPHS) ... */
#define GPU_PLAN_GRAPH_LAYER ((uint64_t)32 << 10) /* ... each this much device memory a layer */
#define GPU_PLAN_ALIGN 256u

/* cuda_config_t.gpu_expert_layers: 0 = as many as the budget allows (every layer without a budget). */
#define GPU_EXPERTS_NONE (-1)

/* gpu_plan_options_t.n_batch: the plan chooses the chunk (--batch auto), up to this many tokens (and n_ctx). */
#define GPU_PLAN_BATCH_AUTO 0
#define GPU_PLAN_BATCH_AUTO_MAX 8192

/* The smallest staging slot worth planning holds this share of a layer's experts (1/16, at least one). */
#define GPU_PLAN_MIN_SLICE_DIV 16

/* The rate the plan counts a prefill batch's attention reads of a cache in GPU memory at, GB/s, and the most it
 * counts decode's at (below the HBM's peak: the decode kernels are latency-bound at short spans, and the block
 * formats' bound by their arithmetic: gpu_plan.c's kv_decode_gbps). */
#define GPU_PLAN_KV_HBM_GBPS 2000.0

/* gpu_plan_options_t.caps: what the backend that follows the plan can do. */
enum {
    GPU_PLAN_CAP_EXPERTS = 1u << 0, /* resident experts one by one (else whole layers) */
    GPU_PLAN_CAP_SLICES = 1u << 1,  /* staging slots smaller than a layer */
    GPU_PLAN_CAP_KV_HOST = 1u << 2, /* the GQA layers' KV cache in mapped host RAM (kv_host) */
};

/* gpu_plan_layer_t.mode */
typedef enum gpu_plan_mode {
    GPU_PLAN_CPU = 0,      /* the experts not resident: on the CPU side only */
    GPU_PLAN_STREAMED = 1, /* the experts not resident: streamed to the device for batches where that pays */
    GPU_PLAN_RESIDENT = 2, /* every expert resident, computed on the device only */
} gpu_plan_mode_t;

typedef struct gpu_plan_options {
    uint64_t budget;           /* bytes for everything on the device; 0: no budget */
    int32_t n_ctx;             /* KV cache positions (of each sequence) */
    int32_t n_seq;             /* sequences, each a cache of n_ctx positions and its recurrent state; 0 or 1: one */
    int32_t n_batch;           /* the most tokens per forward pass; GPU_PLAN_BATCH_AUTO: the plan chooses */
    int32_t n_batch_min;       /* the fewest the chunk may shrink to under a tight budget; 0: n_batch exactly (a
                                  backend computing its own plan for its caller's batch) */
    int32_t kv_type;           /* the cache's format (KV_TYPE_*, gpu-worker/dense/kv_format.h; 0: f16) */
    int32_t max_expert_layers; /* 0: as many as fit; GPU_EXPERTS_NONE: no resident expert; k > 0: at most k
                                  layers' worth of resident experts (streaming is planned either way) */
    unsigned caps;             /* GPU_PLAN_CAP_* of the backend that follows the plan */
    const gpu_cost_t *cost;    /* NULL: gpu_cost_default(copy_path) */
    gpu_copy_path_t copy_path; /* how streamed experts are copied (for the default copy rate) */
    const uint64_t *routing;   /* [n_layer][n_expert] routed pairs of a routing profile, or NULL */
    const char *routing_name;  /* where it came from, for the why (may be NULL) */
    bool mtp;                  /* the backend runs the model's first multi-token-prediction layer
                                  (backend_options_t.mtp): its dense weights, every routed expert of it, a cache slot
                                  and every position's hidden state on the device (the CUDA backend's cuda_mtp.c) */
    int32_t rollback;          /* rows of recurrent states kept per sequence for a rollback (backend_options_t.rollback:
                                  the stack's --spec, --spec-max + 1); counted for a model with gated delta net layers
                                  (gpu_plan_rollback_bytes); 0: none */
    uint64_t context;          /* the CUDA context's device bytes as measured by the backend (cuda_mem_trace_start);
                                  0: GPU_PLAN_CONTEXT */
    int32_t ref_prompt;        /* the reference request the plan minimises the predicted time of: a prompt of */
    int32_t ref_gen;           /* ref_prompt tokens, then ref_gen generated; 0: min(n_ctx, 16384) and 256 */
} gpu_plan_options_t;

typedef struct gpu_plan_layer {
    uint8_t mode;              /* gpu_plan_mode_t */
    int32_t n_resident;        /* its experts resident on the device */
    uint64_t expert_bytes;     /* one expert's gate, up and down matrices */
    uint64_t resident_bytes;   /* the resident experts' device bytes (each matrix region rounded to the align) */
    double hot_share;          /* share of the layer's routed pairs (routing profile) its resident experts took;
                                  < 0: no profile */
    char why[112];
} gpu_plan_layer_t;

typedef struct gpu_plan {
    uint64_t budget;           /* as given (0: none) */
    uint64_t reserve;          /* the CUDA context (the options' context, else GPU_PLAN_CONTEXT; 0 without a budget) */
    uint64_t driver;           /* the driver's share beyond the context and the allocations (gpu_plan_driver_bytes;
                                  0 without a budget) */
    uint64_t dense;            /* dense weights (and the RoPE table) */
    uint64_t kv;               /* on the device: the K and V caches of the attention layers (unless kv_host), the
                                  recurrent layers' states (gpu_plan_cache_bytes) */
    bool kv_host;              /* the attention layers' K and V rows in mapped host RAM */
    uint64_t kv_host_bytes;    /* their bytes there (0: none) */
    uint64_t kv_stage;         /* with kv_host: one layer's K and V rows on the device, for prefill batches */
    int32_t kv_type;           /* the cache's format (KV_TYPE_*, resolved: f16 for the default) */
    double pred_kv_ms;         /* predicted: the attention's reads of the cache per generated token of the
                                  reference request, ms */
    uint64_t buffers;          /* activations, logits, exchange staging (for n_batch tokens) */
    uint64_t mtp;              /* the options' mtp: the multi-token-prediction layer's weights, experts, cache slot,
                                  hidden states and buffers (0: none) */
    uint64_t rollback;         /* the options' rollback: every sequence's recurrent states kept after each row of a
                                  verify step (gpu_plan_rollback_bytes; 0: none) */
    uint64_t expert_buffers;   /* working buffers of the device experts (0 when none runs there) */
    uint64_t staging;          /* stage_slots * stage_slot_bytes */
    uint64_t experts;          /* resident expert weights */
    uint64_t experts_all;      /* every layer's expert weights */
    int32_t n_layer, n_expert;
    int32_t n_resident;        /* layers whose experts are all resident (mode RESIDENT) */
    int64_t n_resident_experts; /* resident experts in all */
    bool *resident;            /* [n_layer]: mode == RESIDENT */
    uint8_t *expert_resident;  /* [n_layer * n_expert]: 1 = the expert is resident */
    gpu_plan_layer_t *layer;   /* [n_layer] */
    int32_t n_ctx;
    int32_t n_seq;             /* sequences the KV bytes count (>= 1) */
    int32_t n_batch;           /* the chunk: tokens per forward pass the buffers hold */
    int32_t n_batch_asked;     /* as asked (GPU_PLAN_BATCH_AUTO: auto) */
    int32_t stage_slots;       /* 0 (nothing streams) or >= 2: the ring's slots */
    int32_t stage_slot_experts; /* experts a slot holds (n_expert: a whole layer) */
    uint64_t stage_slot_bytes; /* one slot (gpu_plan_slot_bytes) */
    int32_t stream_min_tokens; /* predicted: from this many tokens a batch's streaming beats the CPU side (the
                                  run-time split decides with measured times; printed) */
    unsigned caps;             /* the options' caps */
    gpu_cost_t cost;           /* the cost model used */
    bool have_routing;         /* planned with a routing profile */
    double hit_rate;           /* the profile's routed pairs on resident experts (-1: no profile) */
    double pred_prefill_tps;   /* predicted, routed experts only: prefill tokens/s of the reference prompt */
    double pred_decode_ms;     /* ... and the CPU side's time per generated token, ms */
    char why_batch[320], why_stage[320], why_resident[320], why_kv[400];
} gpu_plan_t;

/* True when the device kernels take weights of `type` (the one list: the CUDA backend's cuda_type_supported is
 * this function). */
bool gpu_plan_type_supported(guild_type_t type);

/* The names of those types, for messages ("f32 f16 ..."). */
const char *gpu_plan_supported_types(void);

/* True when layer `il`'s routed experts can be computed on the device: they exist, gate and up share a type,
 * the kernels take the gate and down types, and the activations fill whole blocks of their dot types. */
bool gpu_plan_layer_computable(const model_t *m, int32_t il);

/* Computes the plan for model m. -1 with a message giving the sizes when the dense part (reserve, dense weights,
 * KV cache, buffers) does not fit in the budget even at the smallest chunk allowed (n_batch_min), when the
 * routing profile's shape is not the model's, or on out of memory. Free with gpu_plan_fini. */
int gpu_plan_compute(gpu_plan_t *p, const model_t *m, const gpu_plan_options_t *o, guild_err_t *err);

/* A plan decided elsewhere (the coordinator's, carried to a GPU worker): n_batch, the staging slots, and the
 * resident experts (expert_resident[n_layer * n_expert], 0/1) for model m; the sizes are computed again from
 * m, the layers' modes from the resident sets and the staging, the KV cache in host RAM when it does not fit
 * beside them (as gpu_plan_compute decides; the multi-token-prediction layer's and the rollback states' bytes are not
 * counted: a plan computed with the options' mtp and rollback left room for them). -1 with a message when the decisions do not
 * fit the model (a resident expert of a layer the device cannot compute, a slot too small for one expert, more
 * than the budget) or on out of memory. The driver's share leaves out the page tables of streamed experts (the
 * coordinator counted them for a stager that maps them). */
int gpu_plan_import(gpu_plan_t *p, const model_t *m, uint64_t budget, int32_t n_ctx, int32_t n_seq, int32_t kv_type,
                    int32_t n_batch, int32_t stage_slots, int32_t stage_slot_experts, const uint8_t *expert_resident,
                    guild_err_t *err);

/* A deep copy of src into dst (which the caller frees with gpu_plan_fini). -1 on out of memory. */
int gpu_plan_copy(gpu_plan_t *dst, const gpu_plan_t *src, guild_err_t *err);

void gpu_plan_fini(gpu_plan_t *p);

/* Whether expert e of layer il is resident. */
static inline bool gpu_plan_expert_resident(const gpu_plan_t *p, int32_t il, int32_t e)
{
    return p->expert_resident && p->expert_resident[(int64_t)il * p->n_expert + e];
}

/* The driver's device memory beyond the context and the allocations for model m with n_seq caches of n_ctx
 * positions in format kv_type: GPU_PLAN_ALLOCS allocations' rounding, the kernels, the page tables of host memory
 * the device may map (every cache's rows in host RAM, and with GPU_COPY_PINNED every routed expert, streamed from
 * page-locked or registered memory: upper bounds), GPU_PLAN_GRAPHS step graphs of every layer. */
uint64_t gpu_plan_driver_bytes(const model_t *m, int32_t n_ctx, int32_t n_seq, int32_t kv_type, gpu_copy_path_t path);

/* The device bytes the plan uses in total (reserve and driver included). */
uint64_t gpu_plan_total(const gpu_plan_t *p);

/* The device bytes of one sequence's cache: the K and V rows of the layers that keep them (the widest rows of any
 * layer in the format kv_type, KV_TYPE_* of kv_format.h, 0: f16; n_ctx positions) and the F32 recurrent state of
 * each gated delta net layer. */
uint64_t gpu_plan_cache_bytes(const model_config_t *c, int32_t n_ctx, int32_t kv_type);

/* The device bytes of one sequence's recurrent states kept for a rollback over `rows` rows (the CUDA backend's
 * rb_conv and rb_ssm: the F32 convolution and delta-rule states of each gated delta net layer after each row); 0
 * for a model without such layers or rows <= 0. */
uint64_t gpu_plan_rollback_bytes(const model_config_t *c, int32_t rows);

/* Whether model c's cache can live in host RAM (GPU_PLAN_CAP_KV_HOST): every layer with cache rows is GQA. */
bool gpu_plan_kv_host_possible(const model_config_t *c);

/* The ns a streamed layer's staged chunks add to a steady run of like layers through a ring of `slots` staging
 * slots: each layer's other device work takes dense_ns (its dense part, its resident experts), then its m
 * chunks (copy_ns, products_ns each) compute in order, each once its copy has landed; the copies go through the
 * copy engine one after another, each starting refill_ns after the products of the chunk `slots` places back
 * released its slot. The layer's period less dense_ns: m * products_ns when the copies keep up, more where the
 * copy engine waits for room (a ring too small to run ahead through the dense part, or to cover the refill)
 * or the products wait for copies; never less than m * copy_ns - dense_ns. (The plan's model of
 * cuda_expert_stream.h's ring.) */
double gpu_plan_ring_ns(double dense_ns, int32_t m, double copy_ns, double products_ns, double refill_ns,
                        int32_t slots);

/* Bytes of one staging slot of k experts of model m's streamable layers (the layout above: each of the three
 * regions sized for the largest such layer's matrices and rounded to GPU_PLAN_ALIGN). */
uint64_t gpu_plan_slot_bytes(const model_t *m, int32_t k);

/* The slot size of a staging ring (ipc/stage_ring.h: the stager's pinned host slots, not the device's staging
 * slots) for this plan's streaming: about half a device slot (staging / 4), between 1 MiB and 128 MiB, a multiple
 * of 1 MiB; 0 when the plan does not stream. The coordinator (which creates a guild-stager's ring) and the cuda
 * backend compute it alike. */
uint64_t gpu_plan_stage_slot_bytes(const gpu_plan_t *p);

/* The plan in lines: budget, each part's size, the chunk, the staging and the resident experts with their
 * reasons, the predictions, then one line per layer (its mode, resident experts, why). */
void gpu_plan_print(const gpu_plan_t *p, FILE *out);

/* Parses a size: a number with an optional K, M, G or T suffix (powers of 1024; "8G", "512M", "1.5G"). -1
 * with a message naming `what` when it is not one. */
int gpu_plan_parse_size(const char *s, const char *what, uint64_t *out, guild_err_t *err);

#endif
