/* cpu-expert-worker/experts/expert_shard.h — the routed experts one executor owns: which (layer, expert) pairs, and
 * where each one's three matrices are (in the mapped GGUF today; in node-local memory once shards are copied to
 * their NUMA node — only this object changes then). */
#ifndef GUILD_CPU_EXPERT_WORKER_EXPERT_SHARD_H
#define GUILD_CPU_EXPERT_WORKER_EXPERT_SHARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/model/model.h"
#include "core/quant/types.h"
#include "core/util/err.h"

/* One expert's matrices: y = down(silu(gate x) * up x), or with biases (FFN option clamped swiglu)
 * y = down(swiglu_oai(gate x + gate_b, up x + up_b)) + down_b (core/model/activation.h). A packed matrix
 * (core/kern/pack.h: rows re-laid 16 at a time) is read only through kern_matmul_packed, in row ranges that start
 * on a multiple of KERN_PACK_ROWS; its pointer and row size address a 16-row group as in the plain layout. */
typedef struct expert_mats {
    const void *gate;       /* [n_ff_exp rows][n_embd], gate_type */
    const void *up;         /* [n_ff_exp rows][n_embd], up_type */
    const void *down;       /* [n_embd rows][n_ff_exp], down_type */
    guild_type_t gate_type, up_type, down_type;
    size_t gate_row, up_row, down_row; /* bytes per row */
    bool gate_packed, up_packed, down_packed; /* laid out by kern_pack */
    const float *gate_b, *up_b; /* [n_ff_exp] biases, NULL when the model has none */
    const float *down_b;        /* [n_embd], likewise */
} expert_mats_t;

/* How expert_shard_new_copy lays out the matrices it copies. Speed only: every layout gives the same bits. */
typedef enum expert_layout {
    EXPERT_LAYOUT_AUTO = 0, /* packed where this CPU has packed kernels for the type (kern_pack_native), else
                             * plain */
    EXPERT_LAYOUT_PLAIN = 1,  /* the file's rows */
    EXPERT_LAYOUT_PACKED = 2, /* packed wherever the type has a packed layout (kern_pack_has), else plain */
} expert_layout_t;

/* Whether `layout` packs a matrix of `rows` rows of `type`: the type has a packed layout (natively on this CPU
 * for AUTO) and rows is a multiple of KERN_PACK_ROWS. */
bool expert_layout_packs(expert_layout_t layout, guild_type_t type, int64_t rows);

/* "auto", "plain", "packed". */
const char *expert_layout_name(expert_layout_t layout);

/* The layout named s (one of the names above); -1 when s names none. */
int expert_layout_from_name(const char *s, expert_layout_t *layout);

typedef struct expert_shard expert_shard_t;

/* A shard of model m (borrowed: must outlive the shard). owned: [n_layer * n_expert] flags (layer-major), 1 =
 * this shard computes that expert; NULL = every expert of every layer. -1 with a message on out of memory. */
int expert_shard_new(expert_shard_t **out, const model_t *m, const uint8_t *owned, guild_err_t *err);

/* Like expert_shard_new, but copies every owned expert's three matrices out of the model's mapping into memory
 * of NUMA node `node` (core/topo's topo_alloc; node < 0: no binding), so only the shard's bytes are read from
 * the file and they sit next to the CPUs that compute them. lock: mlock the copy (fails with a message naming
 * RLIMIT_MEMLOCK when refused). layout: each matrix that expert_layout_packs is packed straight from the
 * mapping into the copy (kern_pack; the same size, no extra memory) and flagged in expert_mats_t.
 * interleave_gate_up: where gate and up have the same type and are not packed, their rows alternate in the
 * copy (gate row 0, up row 0, gate row 1, ...): the matrices then read up = gate + one row and gate_row =
 * up_row = two rows (strides), which every consumer handles as is, and the expert pipeline reads a block of
 * gate and up rows as one stream (expert_mats_interleaved). The two are exclusive: where the layout packs gate
 * and up, packing wins and their rows do not alternate. -1 with a message on out of memory or a refused
 * binding. */
int expert_shard_new_copy(expert_shard_t **out, const model_t *m, const uint8_t *owned, int node, bool lock,
                          bool interleave_gate_up, expert_layout_t layout, guild_err_t *err);

/* The bytes expert_shard_new_copy takes for the experts `owned` flags (NULL: all) of model m. */
size_t expert_shard_copy_bytes(const model_t *m, const uint8_t *owned);

/* expert_shard_new_copy into the caller's memory mem[0..size) (at least expert_shard_copy_bytes; bound and
 * locked by the caller, owned by it: it must outlive the shard): the same layout at the same offsets. -1 with
 * a message when it does not fit. */
int expert_shard_new_copy_at(expert_shard_t **out, const model_t *m, const uint8_t *owned, void *mem, size_t size,
                             bool interleave_gate_up, expert_layout_t layout, guild_err_t *err);

/* Matrices of the shard laid out packed (0 for a shard that reads the mapping). */
int64_t expert_shard_packed_count(const expert_shard_t *s);

/* True when m's gate and up rows alternate as expert_shard_new_copy's interleave_gate_up lays them out. */
static inline bool expert_mats_interleaved(const expert_mats_t *m)
{
    return !m->gate_packed && m->gate_type == m->up_type && m->gate_row == m->up_row &&
           (const char *)m->up == (const char *)m->gate + m->gate_row / 2;
}

/* Bytes of expert weights held in the shard's own memory (0 for a shard that reads the mapping). */
size_t expert_shard_resident_bytes(const expert_shard_t *s);

/* Frees; sets *s to NULL. NULL-safe. */
void expert_shard_destroy(expert_shard_t **s);

/* The expert's matrices, or NULL when the shard does not own it. layer and expert must be in range. */
const expert_mats_t *expert_shard_get(const expert_shard_t *s, int32_t layer, int32_t expert);

/* Experts owned in total. */
int64_t expert_shard_count(const expert_shard_t *s);

const model_config_t *expert_shard_config(const expert_shard_t *s);

#endif
