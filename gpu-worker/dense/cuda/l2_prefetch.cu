/* cuda_l2_prefetch: asks L2 for byte ranges, a 128-byte line per prefetch.global.L2, so that a kernel that reads
 * them later finds them there; it writes nothing. The constant ranges' lines are asked before the wait on the kernel
 * before (programmatic dependent launch); those whose length is a count of positions on the device after it. */
#include "gpu-worker/dense/cuda/cuda_common.cuh"
#include "gpu-worker/dense/cuda/cuda_kernels.h"

#define L2P_THREADS 256
#define L2P_BLOCKS 64
#define L2P_LINE 128

typedef struct l2p_args {
    const char *p[CUDA_L2_PREFETCH_MAX];
    uint64_t bytes[CUDA_L2_PREFETCH_MAX]; /* a positioned range's: bytes a position */
    int n, n_pos;                         /* ranges; the last n_pos are positioned */
    const int32_t *pos;
    int rows;
} l2p_args_t;

static __device__ __forceinline__ void l2p_range(const char *p, uint64_t bytes)
{
    const uint64_t lines = (bytes + L2P_LINE - 1) / L2P_LINE;
    for (uint64_t i = (uint64_t)blockIdx.x * L2P_THREADS + threadIdx.x; i < lines;
         i += (uint64_t)gridDim.x * L2P_THREADS)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(p + i * L2P_LINE));
}

static __global__ void __launch_bounds__(L2P_THREADS) l2_prefetch_kernel(l2p_args_t a)
{
    for (int r = 0; r < a.n - a.n_pos; r++)
        l2p_range(a.p[r], a.bytes[r]);
    pdl_begin();
    if (!a.n_pos)
        return;
    const uint64_t len = (uint64_t)(*a.pos + a.rows);
    for (int r = a.n - a.n_pos; r < a.n; r++)
        l2p_range(a.p[r], a.bytes[r] * len);
}

extern "C" int cuda_l2_prefetch(const cuda_l2_range_t *r, int n, const int32_t *pos, int32_t rows, cudaStream_t s,
                                guild_err_t *err)
{
    if (n < 0 || n > CUDA_L2_PREFETCH_MAX)
        return guild_err_set(err, "cuda: L2 prefetch: %d ranges (0..%d)", n, CUDA_L2_PREFETCH_MAX);
    l2p_args_t a = {};
    for (int i = 0; i < n; i++) /* the constant ranges first */
        if (!r[i].per_pos && r[i].p && r[i].bytes) {
            a.p[a.n] = (const char *)r[i].p;
            a.bytes[a.n++] = r[i].bytes;
        }
    for (int i = 0; i < n; i++)
        if (r[i].per_pos && r[i].p && r[i].bytes) {
            if (!pos)
                return guild_err_set(err, "cuda: L2 prefetch: a range by positions and no position");
            a.p[a.n] = (const char *)r[i].p;
            a.bytes[a.n++] = r[i].bytes;
            a.n_pos++;
        }
    if (!a.n)
        return 0;
    a.pos = pos;
    a.rows = rows;
    cuda_launch_pdl(l2_prefetch_kernel, L2P_BLOCKS, L2P_THREADS, 0, s, a);
    return cuda_launch_check("L2 prefetch", err);
}
