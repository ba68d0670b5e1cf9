/* gpu-worker/dense/cuda/cuda_backend.h — the CUDA backend ("cuda"): the layer program on one NVIDIA GPU (device 0),
 * dense weights uploaded once, F16 KV cache, routed experts through the backend options' moe_exec_t.
 * Built only when configure finds nvcc (GUILD_HAVE_CUDA); creating it fails with a message when no device is
 * present. Numerical contract against the "cpu" backend: gpu-worker/dense/cuda/cuda_kernels.h; the F16 cache adds
 * its rounding (about 5e-4 relative) to K and V. */
#ifndef GUILD_GPU_WORKER_CUDA_BACKEND_H
#define GUILD_GPU_WORKER_CUDA_BACKEND_H

#include <stdbool.h>

#include "gpu-worker/dense/backend.h"

extern const backend_ops_t cuda_backend_ops;

/* What only this backend has. Zero-filled: the defaults backend_new("cuda") uses. */
typedef struct cuda_backend_options {
    bool kv_f32; /* KV cache in float32 instead of F16: twice the memory, the CPU backend's precision (tests) */
    /* tests: with split_forced, every host-side batch of a streamed layer splits with the GPU taking at least
     * split_gpu_fraction of its pairs (cuda_moe_gpu_force_split), whatever the measured times */
    bool split_forced;
    double split_gpu_fraction;
} cuda_backend_options_t;

/* backend_new("cuda", ...) with these options (copt may be NULL). */
int cuda_backend_new(backend_t **out, const model_t *m, const backend_options_t *opt,
                     const cuda_backend_options_t *copt, guild_err_t *err);

#endif
