/* What the CUDA timing programs share (tests/cuda/cuda_head_time, cuda_attn_time: not tests, run by hand or by a
 * device script): ending the program on a failed condition, and the time of a sequence of layers' launches, as a
 * replayed CUDA graph and launched from the host one by one. */
#ifndef GUILD_TESTS_CUDA_TIME_H
#define GUILD_TESTS_CUDA_TIME_H

#include <stdbool.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "core/util/err.h"

/* The name the messages of cuda_time_need start with (the program's); without a CUDA device, says why and ends the
 * program with 77 (automake's "skipped"). */
void cuda_time_init(const char *program);

/* A failed condition ends the program with its message. */
void cuda_time_need(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define CUDA_TIME_CU(call)                                                                                          \
    do {                                                                                                            \
        const cudaError_t ce_ = (call);                                                                             \
        cuda_time_need(ce_ == cudaSuccess, "%s:%d: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(ce_));   \
    } while (0)

/* Launches of one layer l (0..L) of a timed sequence, on the caller's stream. */
typedef int (*cuda_time_layer_fn)(void *ctx, int32_t l, guild_err_t *err);

/* us a layer: the L layers' launches captured on s as one CUDA graph, replayed once (warm), then `timings` times
 * `reps` replays each, the median of the timings. With a cold mode set, each layer's launches follow
 * cuda_time_cold_code's, and the time of a graph of those launches alone is taken off. */
double cuda_time_graph(cuda_time_layer_fn fn, void *ctx, int32_t L, int timings, int reps, cudaStream_t s);

/* us a layer: the same launched from the host one by one (what a step without graphs pays), `reps` passes after a
 * warm one. */
double cuda_time_host(cuda_time_layer_fn fn, void *ctx, int32_t L, int reps, cudaStream_t s);

/* --cold, --cold-l2 and --warm of the timing programs: cuda_time_graph puts a launch of cuda_time_cold_code before
 * each layer, with evict (cold; cold-l2: after a read of twice L2's size) or without (warm); COLD_NONE: none.
 * Setting COLD_EVICT_L2 makes the read's buffer (before any capture); a failure is reported and exits. */
typedef enum { COLD_NONE, COLD_EVICT, COLD_WARM, COLD_EVICT_L2 } cuda_time_cold_t;
void cuda_time_set_cold(cuda_time_cold_t mode);
/* The timing programs' flag arg, if it is --cold, --cold-l2 or --warm: its mode set (cuda_time_set_cold), true. */
bool cuda_time_cold_arg(const char *arg);

/* A launch on s of a long chain of FMAs on every SM; with evict, in 256 KB of straight-line code that leaves the SM's
 * instruction caches holding none of the timed kernels' code, else in a loop of a few instructions; with l2, after
 * a launch that reads twice L2's size of the buffer cuda_time_cold_l2_alloc made (cold_code.cu). */
int cuda_time_cold_code(cudaStream_t s, bool evict, bool l2);
int cuda_time_cold_l2_alloc(void);

#endif
