/* cuda_add_bias and cuda_add: the bias and residual additions of the layer program (one float add each, so
 * the CPU's bits). */
#include "gpu-worker/dense/cuda/residual.cuh"

#define ADD_THREADS 256

static __global__ void add_bias_kernel(float *x, int64_t ldx, const float *__restrict__ b, int64_t n, int64_t total)
{
    pdl_begin();
    const int64_t k = (int64_t)blockIdx.x * ADD_THREADS + threadIdx.x;
    if (k >= total)
        return;
    float *p = x + (k / n) * ldx + k % n;
    *p = *p + b[k % n];
}

static __global__ void add_kernel(float *x, const float *__restrict__ p, int64_t n)
{
    pdl_begin();
    const int64_t k = (int64_t)blockIdx.x * ADD_THREADS + threadIdx.x;
    if (k < n)
        x[k] = residual_add(x[k], p[k]);
}

extern "C" int cuda_add_bias(float *x, int64_t ldx, const float *b, int64_t n, int32_t n_rows, cudaStream_t s,
                             guild_err_t *err)
{
    const int64_t total = n * n_rows;
    if (total <= 0)
        return 0;
    cuda_launch_pdl(add_bias_kernel, (unsigned)((total + ADD_THREADS - 1) / ADD_THREADS), ADD_THREADS, 0, s, x, ldx, b,
                    n, total);
    return cuda_launch_check("add_bias", err);
}

extern "C" int cuda_add(float *x, const float *p, int64_t n, cudaStream_t s, guild_err_t *err)
{
    if (n <= 0)
        return 0;
    cuda_launch_pdl(add_kernel, (unsigned)((n + ADD_THREADS - 1) / ADD_THREADS), ADD_THREADS, 0, s, x, p, n);
    return cuda_launch_check("add", err);
}
