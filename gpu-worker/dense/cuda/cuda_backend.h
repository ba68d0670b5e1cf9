/* gpu-worker/dense/cuda/cuda_backend.h — the CUDA backend ("cuda"): the layer program on one NVIDIA GPU (device 0),
 * dense weights uploaded once, F16 KV cache, routed experts through the executor in the backend options (a
 * device one as it is, a host one through an adapter: gpu-worker/dense/cuda/cuda_moe.h). Its own settings
 * (memory budget, graphs, the streamed experts' stager, test hooks) come in a cuda_config_t
 * (gpu-worker/dense/cuda/cuda_config.h), backend_new's config.
 * Built only when configure finds nvcc (GUILD_HAVE_CUDA); creating it fails with a message when no device is
 * present. Numerical contract against the "cpu" backend: gpu-worker/dense/cuda/cuda_kernels.h; the F16 cache adds
 * its rounding (about 5e-4 relative) to K and V. */
#ifndef GUILD_GPU_WORKER_CUDA_BACKEND_H
#define GUILD_GPU_WORKER_CUDA_BACKEND_H

#include "gpu-worker/dense/backend.h"

extern const backend_ops_t cuda_backend_ops;

#endif
