/* gpu-worker/dense/cpu/cpu_resident.h — the cpu backend's stand-in for experts resident on a device: a moe_exec_t
 * wrapped around the backend's routed-expert executor that computes, in the backend's own process, the experts a
 * GPU memory plan keeps resident (gpu-worker/dense/gpu_plan.h: no CPU worker holds them) and hands the executor
 * their pairs as skip slots (core/model/moe_exec.h), as the CUDA backend does with its device copies. The
 * multi-process pipeline and the placement's per-expert skip sets are so exercised without a GPU, and give the
 * same bits: each pair is computed with the kernels the CPU workers use (core/kern: the experts' activation
 * quantization, the matrix products, silu(gate) * up in float), from the model's own mapping.
 *
 * It also counts the routed pairs per (layer, expert) and those it served itself (backend_stats_t.routed_pairs,
 * resident_pairs; backend_routing), and passes the executor's prefetch hints on (moe_exec.h) naming only experts
 * the CPU workers compute: the resident ones masked, none for a layer resident whole (as the CUDA backend does).
 */
#ifndef GUILD_GPU_WORKER_CPU_RESIDENT_H
#define GUILD_GPU_WORKER_CPU_RESIDENT_H

#include <stdint.h>

#include "core/model/model.h"
#include "core/model/moe_exec.h"
#include "core/util/err.h"
#include "core/util/pool.h"

/* Wraps `inner` (borrowed). resident[n_layer * n_expert] (copied; NULL: none) flags the experts computed here,
 * with `pool`'s threads (borrowed). -1 with a message for a resident expert of a type the kernels do not take,
 * or out of memory. */
int cpu_resident_new(moe_exec_t **out, moe_exec_t *inner, const model_t *m, guild_pool_t *pool,
                     const uint8_t *resident, guild_err_t *err);

/* Routed pairs per (layer, expert) since creation, into counts[n_layer * n_expert]; *routed and *resident: all
 * of them and those computed here. */
void cpu_resident_counts(const moe_exec_t *e, uint64_t *counts, uint64_t *routed, uint64_t *resident);

#endif
