/* cuda_time_cold_code: a launch that runs 256 KB of straight-line code (16,384 FMAs, each with constants of its own)
 * once on every SM, so that the next kernel finds its code out of the SM's instruction caches (not out of L2), as
 * in a decode step: between two launches of one kernel there run the layer's other kernels, ~270 KB of code
 * together (the attention's and the router's 86 and 79 KB). The timing programs' --cold (cuda_time_set_cold): a
 * kernel timed with it against --warm (the same chain of FMAs in a loop of little code before each layer, the caches
 * left as they were) says what cold code costs it. */
#include <cuda_runtime.h>

/* (cuda_time.h's declaration; that C header is not C++'s to include) */
extern "C" int cuda_time_cold_code(cudaStream_t s, bool evict);

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

extern "C" int cuda_time_cold_code(cudaStream_t s, bool evict)
{
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) !=
                                                   cudaSuccess)
        return -1;
    /* four one-warp blocks an SM: the block scheduler spreads them over every SM */
    if (evict)
        cold_code_kernel<<<4 * sms, 32, 0, s>>>(NULL, 1.0f);
    else
        warm_code_kernel<<<4 * sms, 32, 0, s>>>(NULL, 1.0f);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}
