/* gpu-worker/dense/gpu_plan.h — what goes into the GPU's memory under a budget (--gpu-mem): the dense weights, the KV
 * cache and the working buffers always; then the routed experts of as many layers as still fit, which stay
 * resident and run on the GPU (the other layers' experts are computed by the CPU workers, or in-process).
 *
 * Pure arithmetic on the model's tensor sizes, so the coordinator prints the same plan the GPU worker follows
 * (the worker computes it again from the same inputs). The CUDA context, kernels and allocator rounding are not
 * visible to this arithmetic: a fixed GPU_PLAN_RESERVE stands for them (an H200 with CUDA 13 measured 0.53 GiB).
 * When not every layer's experts can stay, two staging buffers of the largest layer's experts come next (if
 * they fit): large prefill batches stream the other layers' experts through them and compute them on the GPU
 * (gpu-worker/dense/cuda/cuda_moe_gpu.c). Then resident layers are taken in index order; one that does not fit, or
 * whose expert types the device kernels do not take (gpu_plan_layer_computable), is skipped and later ones may
 * fit.
 *
 * The resident layers' experts are computed on the GPU only: the multi-process pipeline gives them to no CPU
 * worker (coordinator/placement.h), so the GPU worker must keep exactly these resident (cuda_config_t.resident_layers).
 */
#ifndef GUILD_GPU_WORKER_GPU_PLAN_H
#define GUILD_GPU_WORKER_GPU_PLAN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/model/model.h"
#include "core/quant/types.h"
#include "core/util/err.h"

#define GPU_PLAN_RESERVE ((uint64_t)576 << 20)

/* cuda_config_t.gpu_expert_layers: 0 = as many as the budget allows (every layer without a budget). */
#define GPU_EXPERTS_NONE (-1)

typedef struct gpu_plan_options {
    uint64_t budget;           /* bytes for everything on the device; 0: no budget */
    int32_t n_ctx;             /* KV cache positions */
    int32_t n_batch;           /* tokens per forward pass (sizes the buffers) */
    uint32_t kv_elem;          /* bytes per cache element: 2 (F16) or 4 (F32) */
    int32_t max_expert_layers; /* 0: as many as fit; GPU_EXPERTS_NONE: none; k > 0: at most k */
} gpu_plan_options_t;

typedef struct gpu_plan {
    uint64_t budget;           /* as given (0: none) */
    uint64_t reserve;          /* GPU_PLAN_RESERVE */
    uint64_t dense;            /* dense weights (and the RoPE table) */
    uint64_t kv;               /* K and V caches */
    uint64_t buffers;          /* activations, logits, exchange staging */
    uint64_t expert_buffers;   /* working buffers of the device experts (0 when none runs there) */
    uint64_t staging;          /* two buffers of the largest layer's experts, for streaming (0: no streaming) */
    uint64_t experts;          /* resident expert weights */
    uint64_t experts_all;      /* every layer's expert weights */
    int32_t n_layer;
    int32_t n_resident;        /* layers whose experts are resident */
    bool *resident;            /* [n_layer] */
    int32_t n_ctx, n_batch;
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
 * KV cache, buffers) does not fit in the budget, or on out of memory. Free with gpu_plan_fini. */
int gpu_plan_compute(gpu_plan_t *p, const model_t *m, const gpu_plan_options_t *o, guild_err_t *err);
void gpu_plan_fini(gpu_plan_t *p);

/* The device bytes the plan uses in total. */
uint64_t gpu_plan_total(const gpu_plan_t *p);

/* The slot size of a staging ring (ipc/stage_ring.h) for this plan's streaming: about half the largest
 * layer's experts (staging / 4), between 1 MiB and 128 MiB, a multiple of 1 MiB; 0 when the plan does not
 * stream. The coordinator (which creates a guild-stager's ring) and the cuda backend compute it alike. */
uint64_t gpu_plan_stage_slot_bytes(const gpu_plan_t *p);

/* A few lines: budget, each part's size, which layers' experts are resident. */
void gpu_plan_print(const gpu_plan_t *p, FILE *out);

/* Parses a size: a number with an optional K, M, G or T suffix (powers of 1024; "8G", "512M", "1.5G"). -1
 * with a message naming `what` when it is not one. */
int gpu_plan_parse_size(const char *s, const char *what, uint64_t *out, guild_err_t *err);

#endif
