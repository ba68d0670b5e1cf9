/* gpt-oss's experts on the device (FFN option clamped swiglu): the biases and the activation that the "gpu"
 * executor applies around its grouped products (cuda_moe_gpu.c), as the experts library does on the CPU
 * (cpu-expert-worker/experts/expert_exec.c):
 *   h = swiglu_oai(gate x + gate_b, up x + up_b)       cuda_expert_swiglu_oai
 *   y = down h + down_b                                 cuda_expert_add_bias
 * One float add per bias, the activation's operations those of core/model/activation.h (expf aside). */
#include "gpu-worker/dense/cuda/cuda_common.cuh"

#define OAI_THREADS 256

static __global__ void expert_swiglu_oai_kernel(float *h, const float *__restrict__ u, const int32_t *__restrict__ ids,
                                                int64_t n_ff, int64_t total, const float *__restrict__ gate_b,
                                                const float *__restrict__ up_b, float alpha, float limit)
{
    const int64_t k = (int64_t)blockIdx.x * OAI_THREADS + threadIdx.x;
    if (k >= total)
        return;
    const int64_t p = k / n_ff, r = k % n_ff;
    const int32_t e = ids[p];
    if (e < 0)
        return; /* a skip slot: another executor's pair */
    const float g = h[k] + gate_b[(int64_t)e * n_ff + r], uu = u[k] + up_b[(int64_t)e * n_ff + r];
    const float x = limit < g ? limit : g;
    const float y = uu < -limit ? -limit : (limit < uu ? limit : uu);
    h[k] = (x / (1.0f + expf(alpha * (-x)))) * (y + 1.0f);
}

static __global__ void expert_add_bias_kernel(float *y, const int32_t *__restrict__ ids, int64_t n, int64_t total,
                                              const float *__restrict__ bias)
{
    const int64_t k = (int64_t)blockIdx.x * OAI_THREADS + threadIdx.x;
    if (k >= total)
        return;
    const int32_t e = ids[k / n];
    if (e >= 0)
        y[k] = y[k] + bias[(int64_t)e * n + k % n];
}

extern "C" int cuda_expert_swiglu_oai(float *h, const float *u, const int32_t *ids, int32_t n_pairs, int64_t n_ff,
                                      const float *gate_b, const float *up_b, float alpha, float limit,
                                      cudaStream_t s, guild_err_t *err)
{
    const int64_t total = (int64_t)n_pairs * n_ff;
    if (total <= 0)
        return 0;
    expert_swiglu_oai_kernel<<<(unsigned)((total + OAI_THREADS - 1) / OAI_THREADS), OAI_THREADS, 0, s>>>(
        h, u, ids, n_ff, total, gate_b, up_b, alpha, limit);
    return cuda_launch_check("expert swiglu_oai", err);
}

extern "C" int cuda_expert_add_bias(float *y, const int32_t *ids, int32_t n_pairs, int64_t n, const float *bias,
                                    cudaStream_t s, guild_err_t *err)
{
    const int64_t total = (int64_t)n_pairs * n;
    if (total <= 0)
        return 0;
    expert_add_bias_kernel<<<(unsigned)((total + OAI_THREADS - 1) / OAI_THREADS), OAI_THREADS, 0, s>>>(y, ids, n,
                                                                                                      total, bias);
    return cuda_launch_check("expert bias", err);
}
