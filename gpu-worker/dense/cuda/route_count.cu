/* cuda_route_count: the routing statistics of one layer on the device (backend_options_t.count_routing, for
 * --stats, --record-routing and the GPU plan's hit rate): one atomic add per routed (token, slot) pair into the
 * layer's row of per-expert counters. A forward pass captured in a CUDA graph counts on every replay. */
#include "gpu-worker/dense/cuda/cuda_common.cuh"

static __global__ void route_count_kernel(const int32_t *__restrict__ ids, int n, int n_expert,
                                          unsigned long long *counts)
{
    pdl_begin();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const int e = ids[i];
        if (e >= 0 && e < n_expert)
            atomicAdd(&counts[e], 1ull);
    }
}

extern "C" int cuda_route_count(const int32_t *ids, int32_t n_pairs, int32_t n_expert, unsigned long long *counts,
                                cudaStream_t s, guild_err_t *err)
{
    if (n_pairs <= 0)
        return 0;
    cuda_launch_pdl(route_count_kernel, (unsigned)((n_pairs + 255) / 256), 256, 0, s, ids, n_pairs, n_expert, counts);
    return cuda_launch_check("route count", err);
}
