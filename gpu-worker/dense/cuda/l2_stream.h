/* gpu-worker/dense/cuda/l2_stream.h — weights a step reads once, marked as streaming in L2.
 *
 * A decode step reads each layer's weights once (the whole model passes through L2 between two reads of a line),
 * while the step's kernels' code, the KV cache and the activations are read again layer after layer. Left at the
 * normal priority the weights push those out of L2, and the next layer's launches fetch them from device memory
 * again: the kernels of a decode step run their code cold (docs/adding-a-kernel.md). A launch that reads weights
 * can mark them as streaming instead (an access policy window over them: its hits and misses there are evicted
 * first, l2_stream.cuh), so that what the step reads again stays. The routed experts' launches do (most of a
 * step's weight bytes with every expert on the GPU); the dense products do not: marked too, they ran slower on the
 * H100 and the step was no faster (bench/results/l2stream65-h100-2026-12-07-s65.md). A cache policy, not
 * arithmetic: the same bits either way. */
#ifndef GUILD_GPU_WORKER_CUDA_L2_STREAM_H
#define GUILD_GPU_WORKER_CUDA_L2_STREAM_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Weights marked as streaming (on: the default) or not (--cuda-off l2-stream: measurement). On asks the device
 * for its largest access policy window now (none: nothing is marked). */
void cuda_set_l2_stream(bool on);

/* The largest window a launch may mark, in bytes: 0 where marking is off or the device has no windows. */
size_t cuda_l2_stream_max(void);

#ifdef __cplusplus
}
#endif

#endif
