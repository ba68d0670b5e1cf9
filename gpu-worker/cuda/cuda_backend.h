/* gpu-worker/cuda/cuda_backend.h — the CUDA backend ("cuda"): the layer program on one NVIDIA GPU (device 0),
 * dense weights uploaded once, F16 KV cache, routed experts through the backend options' moe_exec_t.
 * Built only when configure finds nvcc (GUILD_HAVE_CUDA); creating it fails with a message when no device is
 * present. Numerical contract against the "cpu" backend: gpu-worker/cuda/cuda_kernels.h. */
#ifndef GUILD_GPU_WORKER_CUDA_BACKEND_H
#define GUILD_GPU_WORKER_CUDA_BACKEND_H

#include "gpu-worker/backend.h"

extern const backend_ops_t cuda_backend_ops;

#endif
