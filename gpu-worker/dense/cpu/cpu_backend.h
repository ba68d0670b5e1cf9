/* gpu-worker/dense/cpu/cpu_backend.h — the portable CPU backend ("cpu"): the layer program in plain C on a fork-join
 * thread pool, float32 KV cache. The numerical reference for every other backend (see gpu-worker/dense/backend.h). */
#ifndef GUILD_GPU_WORKER_CPU_BACKEND_H
#define GUILD_GPU_WORKER_CPU_BACKEND_H

#include "gpu-worker/dense/backend.h"

extern const backend_ops_t cpu_backend_ops;

#endif
