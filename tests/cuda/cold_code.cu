/* cuda_time_cold_code: a launch that runs 256 KB of straight-line code (16,384 FMAs, each with constants of its own)
 * once on every SM, so that the next kernel finds its code out of the SM's instruction caches (not out of L2), as
 * in a decode step: between two launches of one kernel there run the layer's other kernels, ~270 KB of code
 * together (the attention's and the router's 86 and 79 KB). The timing programs' --cold (cuda_time_set_cold): a
 * kernel timed with it against --warm (the same chain of FMAs in a loop of little code before each layer, the caches
 * left as they were) says what cold code costs it. --cold-l2 also reads twice L2's size of a buffer of its own
 * before each layer, so that the next kernel's code (and its data) come from device memory: in an all-GPU decode
 * step a layer's weights, tens of MB, pass through L2 between two launches of one kernel (session 59's question:
 * bench/results/attn59-h100-2026-12-06-s59.md). */
#include <cuda_runtime.h>

/* (cuda_time.h's declaration; that C header is not C++'s to include) */
extern "C" int cuda_time_cold_code(cudaStream_t s, bool evict, bool l2);
extern "C" int cuda_time_cold_l2_alloc(void);

#define CC_FMAS 16384

/* FMAs B .. B + N - 1 of the chain, each with constants of its own (none alike, none folded), inlined: straight-line
 * code with no loop (a tree of instantiations, so that no template nests deeper than log2 N) */
template <int B, int N>
static __device__ __forceinline__ float cc_chain(float x)
{
    if constexpr (N == 1)
        return fmaf(x, 1.0f + (float)B * 1e-8f, (float)B * 1e-5f);
    else
        return cc_chain<B + N / 2, N - N / 2>(cc_chain<B, N / 2>(x));
}

static __global__ void cold_code_kernel(float *out, float x)
{
    x = cc_chain<0, CC_FMAS>(x);
    if (x == -1.0e30f) /* never: the chain's result is used */
        out[threadIdx.x] = x;
}

/* The control: the same chain of FMAs in a loop of a few instructions (the SM's instruction caches keep what they
 * hold). A longer launch (its constants are made at run time), which --timeline's phases, taken inside the timed
 * kernel, do not see. */
static __global__ void warm_code_kernel(float *out, float x)
{
#pragma unroll 1
    for (int i = 0; i < CC_FMAS; i++)
        x = fmaf(x, 1.0f + (float)i * 1e-8f, (float)i * 1e-5f);
    if (x == -1.0e30f)
        out[threadIdx.x] = x;
}

/* The L2 flush's buffer (twice L2's size; made before any capture: cudaMalloc may not run inside one) and its
 * reading kernel: 16-byte loads over the whole buffer, their XOR kept (never stored) so that none is left out. */
static uint4 *l2_buf;
static size_t l2_n; /* uint4s */

static __global__ void l2_read_kernel(const uint4 *__restrict__ b, size_t n, uint4 *out)
{
    uint4 a = make_uint4(0, 0, 0, 0);
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const uint4 v = b[i];
        a.x ^= v.x, a.y ^= v.y, a.z ^= v.z, a.w ^= v.w;
    }
    if (a.x == 0x9e3779b9u && a.y == 0x7f4a7c15u && out) /* never, with the zeros the buffer holds */
        out[0] = a;
}

extern "C" int cuda_time_cold_l2_alloc(void)
{
    int dev = 0, l2 = 0;
    if (l2_buf)
        return 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev) !=
                                                   cudaSuccess || l2 <= 0)
        return -1;
    l2_n = (size_t)2 * (size_t)l2 / sizeof(uint4);
    if (cudaMalloc((void **)&l2_buf, l2_n * sizeof(uint4)) != cudaSuccess)
        return -1;
    return cudaMemset(l2_buf, 0, l2_n * sizeof(uint4)) == cudaSuccess ? 0 : -1;
}

extern "C" int cuda_time_cold_code(cudaStream_t s, bool evict, bool l2)
{
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) !=
                                                   cudaSuccess)
        return -1;
    if (l2) {
        if (!l2_buf)
            return -1; /* cuda_time_cold_l2_alloc first */
        l2_read_kernel<<<4 * sms, 256, 0, s>>>(l2_buf, l2_n, NULL);
    }
    /* four one-warp blocks an SM: the block scheduler spreads them over every SM */
    if (evict)
        cold_code_kernel<<<4 * sms, 32, 0, s>>>(NULL, 1.0f);
    else
        warm_code_kernel<<<4 * sms, 32, 0, s>>>(NULL, 1.0f);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}
