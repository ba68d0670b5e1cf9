/* gpu-worker/dense/cuda/l2_stream.cuh — the launch of a kernel whose weights are marked as streaming in L2
 * (l2_stream.h says why): cuda_launch_pdl with an access policy window over the weights it reads, its hits and
 * misses there evicted first. One window a launch, at most cuda_l2_stream_max() bytes (the device's limit,
 * cudaDevAttrMaxAccessPolicyWindowSize): a launch that reads more (two tensors far apart, or a layer's experts past
 * the limit) marks a part. */
#ifndef GUILD_GPU_WORKER_CUDA_L2_STREAM_CUH
#define GUILD_GPU_WORKER_CUDA_L2_STREAM_CUH

#include "gpu-worker/dense/cuda/cuda_common.cuh"
#include "gpu-worker/dense/cuda/l2_stream.h"

/* A launch's weights: [base, base + bytes). */
typedef struct l2_span {
    const char *base;
    size_t bytes;
} l2_span_t;

static inline l2_span_t l2_span(const void *base, size_t bytes)
{
    l2_span_t s = {(const char *)base, base ? bytes : 0};
    return s;
}

/* The span that covers a and b where it fits a window, else a. */
static inline l2_span_t l2_span_join(l2_span_t a, l2_span_t b)
{
    if (!b.bytes)
        return a;
    if (!a.bytes)
        return b;
    const char *lo = a.base < b.base ? a.base : b.base;
    const char *hi = a.base + a.bytes > b.base + b.bytes ? a.base + a.bytes : b.base + b.bytes;
    return (size_t)(hi - lo) <= cuda_l2_stream_max() ? l2_span(lo, (size_t)(hi - lo)) : a;
}

/* cuda_launch_pdl(kernel, grid, block, smem, s, args...) with w's bytes (its first cuda_l2_stream_max()) marked as
 * streaming in L2 for this launch (a graph's kernel node keeps the window). */
template <typename... P, typename... A>
static inline void cuda_launch_pdl_stream(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                                          l2_span_t w, A... args)
{
    const size_t max = w.bytes ? cuda_l2_stream_max() : 0;
    cudaAccessPolicyWindow win = {};
    if (max) {
        win.base_ptr = (void *)w.base;
        win.num_bytes = w.bytes < max ? w.bytes : max;
        win.hitRatio = 1.0f;
        win.hitProp = cudaAccessPropertyStreaming;
        win.missProp = cudaAccessPropertyStreaming;
    }
    cuda_launch_pdl_win(kernel, grid, block, smem, 0u, &win, s, args...);
}

#endif
