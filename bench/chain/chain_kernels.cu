/* bench/chain/chain_kernels.cu — the phases of guild-cuda-chain-bench's step (chain_kernels.h says what one
 * computes), as a kernel a phase and as a persistent kernel whose phases meet at grid-wide barriers. */
/* first: it makes core/util/err.h, which chain_kernels.h includes, readable as C++ */
#include "gpu-worker/dense/cuda/cuda_common.cuh"

#include "bench/chain/chain_kernels.h"

#define CHAIN_MAX_WARPS 32

/* The block's sum of v (uint32, wraparound: exact in any order), in every thread. */
static __device__ uint32_t block_sum_u32(uint32_t v, uint32_t *red)
{
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE, nw = blockDim.x / WARP_SIZE;
#pragma unroll
    for (int o = WARP_SIZE / 2; o > 0; o >>= 1)
        v += __shfl_xor_sync(FULL_MASK, v, o);
    __syncthreads(); /* red may hold the previous call's sums */
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    uint32_t s = 0;
    for (int i = 0; i < nw; i++)
        s += red[i];
    return s;
}

/* Block b's sum of its share of phase g's weights: the part without a dependency. */
static __device__ uint32_t weights_sum(const chain_args_t a, int64_t g, uint32_t *red)
{
    const uint4 *w = (const uint4 *)(a.w + (size_t)g * a.words);
    const size_t n16 = a.words / 4, b = blockIdx.x, G = gridDim.x;
    const size_t lo = n16 * b / G, hi = n16 * (b + 1) / G;
    uint32_t s = 0;
    for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        uint4 x = __ldg(w + i);
        s += x.x + x.y + x.z + x.w;
    }
    return block_sum_u32(s, red);
}

/* The dependent part: the sum of the activation vector the phase before wrote, and this block's words of the next. */
static __device__ void activation_step(const chain_args_t a, int64_t g, uint32_t acc, uint32_t *red)
{
    const uint32_t *in = a.vec + (size_t)(g % 2) * a.act;
    uint32_t *out = a.vec + (size_t)((g + 1) % 2) * a.act;
    uint32_t s = 0;
    for (int i = threadIdx.x; i < a.act; i += blockDim.x)
        s += __ldcg(in + i); /* L2: another block wrote it */
    s = block_sum_u32(s, red) + acc;
    for (int i = blockIdx.x + (int)gridDim.x * threadIdx.x; i < a.act; i += (int)gridDim.x * blockDim.x)
        out[i] = s + (uint32_t)i;
}

__global__ void chain_phase_kernel(const chain_args_t a, int64_t g)
{
    __shared__ uint32_t red[CHAIN_MAX_WARPS];
    const uint32_t acc = weights_sum(a, g, red);
    pdl_begin(); /* the weights are no kernel's output: read before the wait */
    activation_step(a, g, acc, red);
}

/* Every block of the grid takes a ticket from a counter that only grows (across barriers, launches and replays):
 * tickets [k G, (k + 1) G) are one barrier's, so a block waits until the counter reaches the end of its ticket's
 * window. No block resets anything, so the last arrival opens the barrier with its own atomic add. The writes
 * before the barrier are visible to every block after it (release before the ticket, acquire on the poll). */
static __device__ __forceinline__ uint32_t load_acquire(const uint32_t *p)
{
    uint32_t v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

static __device__ void grid_barrier(uint32_t *bar)
{
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        const uint32_t ticket = atomicAdd(bar, 1u);
        const uint32_t open = (ticket / gridDim.x + 1) * gridDim.x;
        while ((int32_t)(load_acquire(bar) - open) < 0)
            ;
    }
    __syncthreads();
}

__global__ void chain_persistent_kernel(const chain_args_t a, int64_t g0, int32_t n)
{
    __shared__ uint32_t red[CHAIN_MAX_WARPS];
    for (int32_t p = 0; p < n; p++) {
        const uint32_t acc = weights_sum(a, g0 + p, red); /* in flight while the other blocks finish phase p - 1 */
        if (p > 0)
            grid_barrier(a.barrier);
        activation_step(a, g0 + p, acc, red);
    }
}

__global__ void chain_stream_kernel(const uint4 *w, size_t n16, uint32_t *sink)
{
    __shared__ uint32_t red[CHAIN_MAX_WARPS];
    uint32_t s = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += (size_t)gridDim.x * blockDim.x) {
        uint4 x = __ldg(w + i);
        s += x.x + x.y + x.z + x.w;
    }
    s = block_sum_u32(s, red);
    if (threadIdx.x == 0)
        atomicAdd(sink, s);
}

__global__ void chain_fill_kernel(uint32_t *w, size_t n)
{
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += (size_t)gridDim.x * blockDim.x)
        w[j] = chain_word(j);
}

static int args_check(const chain_args_t *a, guild_err_t *err)
{
    if (a->threads < 32 || a->threads > 32 * CHAIN_MAX_WARPS || a->threads % 32 || a->blocks < 1 || a->words % 4 ||
        a->act < 1 || a->layers < 1 || a->phases < 1)
        return guild_err_set(err, "chain: bad shape (threads %d, blocks %d, words %zu, act %d, %d x %d phases)",
                             a->threads, a->blocks, a->words, a->act, a->layers, a->phases);
    return 0;
}

extern "C" int chain_fill(uint32_t *w, size_t n, uint32_t *vec, int32_t act, uint32_t *barrier, cudaStream_t s,
                          guild_err_t *err)
{
    chain_fill_kernel<<<1024, 256, 0, s>>>(w, n);
    if (cudaMemsetAsync(vec, 0, 2 * (size_t)act * sizeof *vec, s) != cudaSuccess ||
        cudaMemsetAsync(barrier, 0, CHAIN_BARRIER_WORDS * sizeof *barrier, s) != cudaSuccess)
        return cuda_launch_check("chain fill (memset)", err);
    return cuda_launch_check("chain fill", err);
}

/* a->blocks x a->threads on s, with the attribute `id` set (cooperative or programmatic serialization) when on */
static cudaLaunchConfig_t launch_config(const chain_args_t *a, cudaStream_t s, cudaLaunchAttribute *at,
                                        cudaLaunchAttributeID id, int on)
{
    at->id = id;
    if (id == cudaLaunchAttributeCooperative)
        at->val.cooperative = 1;
    else
        at->val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t c = {};
    c.gridDim = dim3((unsigned)a->blocks);
    c.blockDim = dim3((unsigned)a->threads);
    c.stream = s;
    c.attrs = at;
    c.numAttrs = on ? 1 : 0;
    return c;
}

extern "C" int chain_launch_kernels(const chain_args_t *a, int pdl, cudaStream_t s, guild_err_t *err)
{
    if (args_check(a, err) < 0)
        return -1;
    cudaLaunchAttribute at;
    const cudaLaunchConfig_t c = launch_config(a, s, &at, cudaLaunchAttributeProgrammaticStreamSerialization, pdl);
    const int64_t n = (int64_t)a->layers * a->phases;
    for (int64_t g = 0; g < n; g++)
        if (cudaLaunchKernelEx(&c, chain_phase_kernel, *a, g) != cudaSuccess)
            break;
    return cuda_launch_check("chain phase kernel", err);
}

extern "C" int chain_launch_persistent(const chain_args_t *a, int per_step, cudaStream_t s, guild_err_t *err)
{
    if (args_check(a, err) < 0)
        return -1;
    cudaLaunchAttribute at;
    const cudaLaunchConfig_t c = launch_config(a, s, &at, cudaLaunchAttributeCooperative, 1);
    const int32_t launches = per_step ? 1 : a->layers, n = per_step ? a->layers * a->phases : a->phases;
    for (int32_t l = 0; l < launches; l++)
        if (cudaLaunchKernelEx(&c, chain_persistent_kernel, *a, (int64_t)l * n, n) != cudaSuccess)
            break;
    return cuda_launch_check("chain persistent kernel", err);
}

extern "C" int chain_persistent_blocks(int dev, int32_t threads, int32_t *blocks, guild_err_t *err)
{
    int per_sm = 0, sms = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, chain_persistent_kernel, threads, 0) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
        return cuda_launch_check("chain occupancy", err);
    if (per_sm < 1)
        return guild_err_set(err, "chain: a block of %d threads does not fit an SM", threads);
    *blocks = per_sm * sms;
    return 0;
}

extern "C" int chain_launch_stream(const uint32_t *w, size_t words_total, int32_t blocks, int32_t threads,
                                   uint32_t *sink, cudaStream_t s, guild_err_t *err)
{
    chain_stream_kernel<<<blocks, threads, 0, s>>>((const uint4 *)w, words_total / 4, sink);
    return cuda_launch_check("chain stream kernel", err);
}
