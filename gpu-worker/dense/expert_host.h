/* gpu-worker/dense/expert_host.h — where the routed experts the CPU side computes lie in this process's memory,
 * so that a GPU backend streams them from there (DMA from the same bytes: no second copy in RAM).
 *
 * The CPU side's copies (cpu-expert-worker/experts/expert_shard.h: node-bound, possibly packed or with gate
 * and up rows interleaved) are described per (layer, expert) by pointers and row strides, as the expert
 * pipeline reads them; a packed matrix (core/kern/pack.h) has the plain one's size. In a single process the
 * coordinator fills this from its in-process executor's shard; in the GPU worker, from the CPU workers' shared
 * expert stores (ipc/expert_store.h) it maps read-only. No CUDA here. */
#ifndef GUILD_GPU_WORKER_EXPERT_HOST_H
#define GUILD_GPU_WORKER_EXPERT_HOST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One expert's matrices: gate [n_ff rows][n_embd], up [n_ff rows][n_embd], down [n_embd rows][n_ff] of the
 * model's types; rows gate_row / up_row / down_row bytes apart (gate_row = up_row = two plain rows with up =
 * gate + one row when gate and up alternate). gate NULL: not held here. */
typedef struct expert_host_mats {
    const void *gate, *up, *down;
    size_t gate_row, up_row, down_row;
    bool gate_packed, up_packed, down_packed;
} expert_host_mats_t;

typedef struct expert_host {
    int32_t n_layer, n_expert;
    const expert_host_mats_t *mats; /* [n_layer * n_expert], layer-major */
} expert_host_t;

/* The entry of (layer, expert), or NULL when it is not held. */
static inline const expert_host_mats_t *expert_host_get(const expert_host_t *h, int32_t layer, int32_t expert)
{
    const expert_host_mats_t *m = &h->mats[(size_t)layer * (size_t)h->n_expert + (size_t)expert];
    return m->gate ? m : NULL;
}

#endif
