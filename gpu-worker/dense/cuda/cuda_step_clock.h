/* gpu-worker/dense/cuda/cuda_step_clock.h — the CUDA backend's step clock (cuda_config_t.step_clock): where the time
 * of each forward pass goes, without CUPTI (whose tracing of every node of a replayed graph changes the step it
 * measures). Per forward pass:
 *   - host: entry -> the launch (graph_get, the stager, the executor's step_begin), the launch call itself
 *     (cudaGraphLaunch, or the direct path's enqueue of every kernel), its return -> the step's synchronisation,
 *     -> the return (the staged logits' copy to the caller, the caches' bookkeeping);
 *   - device, timing events recorded before and after the launch: from the stream reaching the step to its last
 *     work (the logits' copy included);
 *   - device, marks (cuda_clock_mark: the GPU's global timer once the kernels before the mark have finished) at
 *     the step's start, after the embedding (the tokens' copy, get_rows, the non-finite check's reset), within
 *     layer 0 after each of its parts (the block norm, the attention part, the FFN's norm, the FFN part) and
 *     within the parts that mark themselves (GQA attention: its Q/K/V products, qk_prepare, the attention
 *     kernel; the MoE FFN: its router), after the last layer and after the LM head's product: up to eleven spans.
 * The marks are up to 12 more one-thread kernels in the step: with the clock off the step has none of this. */
#ifndef GUILD_GPU_WORKER_CUDA_STEP_CLOCK_H
#define GUILD_GPU_WORKER_CUDA_STEP_CLOCK_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/util/err.h"

struct backend;

enum {
    CUDA_MARK_START,
    CUDA_MARK_EMBED,
    CUDA_MARK_L0_NORM,   /* layer 0's parts (cuda_layer.c) */
    CUDA_MARK_L0_QKV,    /* within GQA attention (attn_gqa.c): its Q/K/V products, */
    CUDA_MARK_L0_QK,     /* qk_prepare (Q/K norms, RoPE, the K/V store), */
    CUDA_MARK_L0_SCORES, /* the attention kernel (its merge and quantization) */
    CUDA_MARK_L0_ATTN,   /* the attention part (its output product) */
    CUDA_MARK_L0_FFN_NORM,
    CUDA_MARK_L0_ROUTER, /* within the MoE FFN (ffn_moe.c): the router (its product, choice, counts) */
    CUDA_MARK_LAYER0,    /* layer 0 done: its FFN part */
    CUDA_MARK_LAYERS,
    CUDA_MARK_HEAD,
    CUDA_MARKS
};
enum { CUDA_HOST_ENTER, CUDA_HOST_LAUNCH, CUDA_HOST_LAUNCHED, CUDA_HOST_SYNCED, CUDA_HOST_EXIT, CUDA_HOSTS };

/* One forward pass's times (us). */
typedef struct cuda_step_times {
    int32_t rows;                   /* tokens of the pass */
    bool graph;                     /* a replayed (or just captured) graph; else the direct path */
    double host[CUDA_HOSTS - 1];    /* entry -> launch, the launch call, -> synchronised, -> return */
    double wall;                    /* entry -> return */
    double gpu;                     /* the events: the stream reaching the step -> its last work; < 0: unknown */
    double mark[CUDA_MARKS - 1];    /* start -> embedding, layer 0's parts (-> norm, [-> Q/K/V, -> qk_prepare,
                                       -> attention kernel,] -> attention part, -> FFN norm, [-> router,] -> FFN),
                                       -> last layer, -> LM head, each from the latest mark before it that ran;
                                       < 0: unknown (a mark of a part that layer 0 does not have, in []) */
} cuda_step_times_t;

/* The passes recorded since the last call (at most cap, the latest; 0 when none), into out; the record empties.
 * -1 with err when be is not the cuda backend or its clock is off. */
int cuda_backend_step_times(struct backend *be, cuda_step_times_t *out, int32_t cap, int32_t *n, guild_err_t *err);

/* Medians over t[0..n) of each time, printed as a table (what guild-cuda-prof --phases shows). */
void cuda_step_times_print(const cuda_step_times_t *t, int32_t n, FILE *out);

#ifdef GUILD_CUDA_STEP_CLOCK_INTERNAL
/* The backend's side (cuda_backend.c). */
#include <cuda_runtime_api.h>

#define CUDA_CLOCK_KEEP 4096 /* passes kept between reads (the latest) */

typedef struct cuda_step_clock {
    uint64_t *h_marks;              /* mapped pinned [CUDA_MARKS]: written by the marks */
    uint64_t *d_marks;              /* its device address */
    cudaEvent_t ev[2];              /* around the launch */
    double host[CUDA_HOSTS];        /* this pass's host times (s) */
    bool marked;                    /* this pass ran the marks (a graph captured without them does not) */
    cuda_step_times_t *rec;         /* [CUDA_CLOCK_KEEP] ring */
    int64_t n_rec;                  /* recorded since the last read */
} cuda_step_clock_t;

int cuda_step_clock_new(cuda_step_clock_t **out, guild_err_t *err);
void cuda_step_clock_destroy(cuda_step_clock_t **c);
/* NULL c: nothing (0). */
void cuda_step_clock_host(cuda_step_clock_t *c, int which);
int cuda_step_clock_mark(cuda_step_clock_t *c, int which, cudaStream_t s, guild_err_t *err);
int cuda_step_clock_event(cuda_step_clock_t *c, int which, cudaStream_t s, guild_err_t *err);
/* After the pass's synchronisation and CUDA_HOST_EXIT: its times into the record. */
void cuda_step_clock_done(cuda_step_clock_t *c, int32_t rows, bool graph);
#endif

#endif
