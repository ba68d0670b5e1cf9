/* cuda_swiglu: g = silu(g) * u for the shared expert (model_silu: x / (1 + expf(-x))). */
#include "gpu-worker/dense/cuda/cuda_common.cuh"

#define SWIGLU_THREADS 256

static __global__ void swiglu_kernel(float *g, const float *__restrict__ u, int64_t n)
{
    pdl_begin();
    const int64_t k = (int64_t)blockIdx.x * SWIGLU_THREADS + threadIdx.x;
    if (k >= n)
        return;
    g[k] = silu_mul(g[k], u[k]);
}

extern "C" int cuda_swiglu(float *g, const float *u, int64_t n, cudaStream_t s, guild_err_t *err)
{
    if (n <= 0)
        return 0;
    cuda_launch_pdl(swiglu_kernel, (unsigned)((n + SWIGLU_THREADS - 1) / SWIGLU_THREADS), SWIGLU_THREADS, 0, s, g, u,
                    n);
    return cuda_launch_check("swiglu", err);
}
