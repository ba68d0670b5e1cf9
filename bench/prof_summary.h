/* bench/prof_summary.h — what guild-cuda-prof makes of a trace: GPU activity records (kernels, copies, memsets,
 * with start and end times) and the host's step intervals, summed per kernel name and per step: step wall time,
 * busy fraction, idle gaps between kernels, copies. Pure arithmetic (no CUPTI here), so CI tests it without a GPU. */
#ifndef GUILD_BENCH_PROF_SUMMARY_H
#define GUILD_BENCH_PROF_SUMMARY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/prof/prof_trace.h"
#include "core/util/err.h"

/* The kernel name column's width: the longest name a tracer keeps (a longer one read from a file pushes the
 * line). */
#define PROF_NAME_WIDTH PROF_NAME_MAX

typedef struct prof_kernel_stat {
    const char *name;    /* borrowed from the names given */
    uint64_t count, ns;  /* launches and summed durations over every step */
    uint64_t graph;      /* of the launches, those from a graph */
    uint64_t idle_ns;    /* summed idle time just before its launches (the gap from every earlier kernel's end) */
    uint64_t busy_ns;    /* summed over its launches, what each adds to the union of the step's kernel intervals
                          * (in start order: its end past its start and every earlier kernel's end). Launches that
                          * overlap the one before (programmatic dependent launch) count from its end, not their
                          * own start: the per-name split of the busy time, which sums to it, where the durations
                          * (ns) count the overlaps twice */
    uint64_t shadow_ns;  /* the part of busy_ns of launches in the exchange's shadow (PROF_XCHG_PUBLISH_PREFIX) */
} prof_kernel_stat_t;

typedef struct prof_bytes_stat {
    uint64_t count, bytes, ns;
} prof_bytes_stat_t;

typedef struct prof_summary {
    int32_t steps;
    double wall_median_ns, wall_mean_ns; /* the host's step intervals */
    uint64_t kernels, graph_kernels;     /* over every step */
    double busy_kernels;                 /* median over steps of union(kernel intervals) / wall */
    double busy_step_ns;                 /* median over steps of union(kernel intervals), ns */
    double busy_all;                     /* the same with copies and memsets */
    double head_ns;                      /* median over steps: step start to the first kernel's start */
    double gap_step_ns;                  /* median over steps: idle time between its kernels, summed */
    double tail_ns;                      /* median over steps: the last kernel's end to the step's end */
    double gap_median_ns, gap_p90_ns;    /* over every pair of consecutive kernels (0 where they overlap) */
    size_t outside;                      /* records that start in no step interval (dropped) */
    prof_kernel_stat_t *kernels_by_name; /* [n_names], by summed time, largest first; unused names at the end */
    int n_names;                         /* names with at least one launch */
    prof_bytes_stat_t copies[PROF_COPY_N], memsets;
} prof_summary_t;

/* Sums recs[0..n) (reordered: sorted by start) over the steps [t0[s], t1[s]), s < steps (ascending, disjoint);
 * kernel records' what indexes names[0..n_names). -1 with err when out of memory; s then holds nothing to free. */
int prof_summarize(prof_summary_t *s, prof_rec_t *recs, size_t n, const char *const *names, int n_names,
                   const uint64_t *t0, const uint64_t *t1, int32_t steps, guild_err_t *err);

/* The report: step wall, busy fractions and time, gaps, then one line per kernel name (with its busy_ns a launch)
 * and per copy direction. */
void prof_summary_print(const prof_summary_t *s, FILE *out);

/* Issue 17's GPU time a layer of a decode step: the busy time a step (busy_ns, what each launch adds to the union)
 * of the kernels launched at least n_layer / 4 times a step on average (the layer's kernels, also those that take
 * turns between layers, as two product forms do; not the LM head or a step's one-off kernels), over n_layer
 * layers, in ns; *n_kernels (optional) the names counted. 0 for n_layer < 1 or no steps. */
double prof_summary_layer_ns(const prof_summary_t *s, int32_t n_layer, int *n_kernels);

/* The names of the routed experts' kernels on the GPU begin with this (expert_pair_kernel, expert_mm..., the
 * streamed experts' expert_stream...). */
#define PROF_EXPERT_PREFIX "expert"

/* The name of the kernel that waits in the step for the CPU workers' experts (the device-driven exchange of the
 * multi-process pipeline, gpu-worker/dense/cuda/cuda_xchg.h) begins with this: its time is theirs. */
#define PROF_XCHG_WAIT_PREFIX "xchg_wait"

/* The kernel that hands a layer's routed rows to the CPU workers begins with this. The launches that start after
 * it, up to and with the next wait (PROF_XCHG_WAIT_PREFIX), are in the exchange's shadow: they run while the CPU
 * workers compute (the next layer's prediction and hint, the wait itself), off the step's path while the CPU side
 * takes longer than they do. */
#define PROF_XCHG_PUBLISH_PREFIX "xchg_publish"
/* The router's launch that publishes a decode step's lone token itself (router.cu's router_publish_kernel) begins
 * with this: the shadow starts after it too. */
#define PROF_ROUTER_PUBLISH_PREFIX "router_publish"

/* prof_summary_layer_ns less the kernels whose names begin with PROF_EXPERT_PREFIX or PROF_XCHG_WAIT_PREFIX: the
 * dense step's part of a layer (its norms, products, attention and router, and the exchange's publishing and
 * taking of rows) in a profile with every expert on the GPU, or with them on the CPU workers of the pipeline
 * (guild-gpu-worker --prof), the measure in a step that runs as one CUDA graph. *n_kernels (optional) the
 * names counted. */
double prof_summary_dense_layer_ns(const prof_summary_t *s, int32_t n_layer, int *n_kernels);

/* prof_summary_dense_layer_ns without the exchange's shadow (PROF_XCHG_PUBLISH_PREFIX): the dense step's GPU time
 * a layer on the pipeline step's path. The same as it where no exchange was published. */
double prof_summary_path_layer_ns(const prof_summary_t *s, int32_t n_layer);

/* The line that says it: "busy a layer: X us (the busy us of the N kernel name(s) launched at least L/4 times a
 * step, times n/step, over L layers)"; where some of them are the routed experts' or the exchange's wait, a second
 * line: "dense busy a layer: X us (the same without M kernel name(s): the routed experts', "expert...", and the
 * exchange's wait, "xchg_wait...")"; where some of that ran in the exchange's shadow, a third: "dense busy a layer
 * on the step's path: X us (less Y us a layer in the exchange's shadow: ...)". */
void prof_summary_print_layer(const prof_summary_t *s, int32_t n_layer, FILE *out);

/* Frees what prof_summarize allocated. NULL-safe fields. */
void prof_summary_fini(prof_summary_t *s);

#endif
