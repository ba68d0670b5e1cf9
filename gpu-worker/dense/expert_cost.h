/* gpu-worker/dense/expert_cost.h — a running estimate of one cost of the expert split (gpu-worker/dense/expert_split.h),
 * in nanoseconds per unit, from measurements: the device's products (ns per (token, slot) pair) or the staged
 * copies (ns per byte, end to end). No CUDA here: cuda/cuda_moe_gpu.c times its planned batches and folds them.
 *
 * The estimate is the ratio of decayed sums (ns over units; each older sample weighs EXPERT_COST_KEEP as much as
 * the next), so a large sample counts more than a small one, whose fixed costs weigh more per unit. The first
 * accepted sample sets it. A sample is ignored when not finite, its ns or units <= 0, or its rate outside the
 * plausible range given at init; one more than EXPERT_COST_OUTLIER times away from the estimate (either way) is
 * set aside as an outlier, unless EXPERT_COST_RESTART outliers come in a row: then the rate has really changed,
 * and the estimate restarts from those outliers' own decayed sums.
 */
#ifndef GUILD_GPU_WORKER_EXPERT_COST_H
#define GUILD_GPU_WORKER_EXPERT_COST_H

#include <stdbool.h>
#include <stdint.h>

#define EXPERT_COST_KEEP 0.75
#define EXPERT_COST_OUTLIER 4.0
#define EXPERT_COST_RESTART 3

/* In the caller's memory; fields are the tracker's (read them through the functions below). */
typedef struct expert_cost {
    double lo, hi;              /* the plausible range of ns per unit */
    double ns, units;           /* decayed sums of the accepted samples (units 0: no estimate) */
    double run_ns, run_units;   /* decayed sums of the outliers in a row */
    int32_t run;                /* outliers in a row since the last accepted sample */
    uint64_t accepted, rejected; /* samples folded, samples ignored or set aside */
} expert_cost_t;

/* An empty tracker of rates in [lo_ns, hi_ns] ns per unit (0 < lo_ns < hi_ns: asserted). */
void expert_cost_init(expert_cost_t *c, double lo_ns, double hi_ns);

/* Folds `ns` nanoseconds measured for `units` units. Returns true when the sample moved the estimate (accepted,
 * or a restart), false when it was ignored or set aside as an outlier. */
bool expert_cost_add(expert_cost_t *c, double units, double ns);

/* Whether a sample was accepted yet. */
bool expert_cost_known(const expert_cost_t *c);

/* The estimate in ns per unit; 0 until known. */
double expert_cost_ns_per_unit(const expert_cost_t *c);

/* Samples accepted / ignored or set aside so far. */
uint64_t expert_cost_accepted(const expert_cost_t *c);
uint64_t expert_cost_rejected(const expert_cost_t *c);

#endif
