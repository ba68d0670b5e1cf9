/* The gated delta net's chunkwise parallel form on the device (cuda_gdn_chunk): the block bodies of
 * gdn_chunk.cuh (the algebra is described there) as kernels, then each output head RMS-normed and gated as gdn.cu
 * does after its sequential form. */
#include "gpu-worker/dense/cuda/cuda_common.cuh"
#include "gpu-worker/dense/cuda/gdn_chunk.cuh"

#define GDN_CHUNK_THREADS 256

static __device__ __forceinline__ float chunk_silu(float x)
{
    return x / (1.0f + expf(-x));
}

extern "C" size_t cuda_gdn_chunk_scratch(int32_t n, int32_t DK, int32_t NV)
{
    return (size_t)NV * (size_t)gdn_chunk_rows(n) * (2 * (size_t)DK + GDN_CHUNK + 1) * sizeof(float);
}

extern "C" bool cuda_gdn_chunk_fits(int32_t DK)
{
    return DK >= 1 && DK <= GDN_CHUNK_MAX_DK && DK % gdn_state_rows(DK) == 0;
}

static __global__ void gdn_chunk_wy_kernel(const float *__restrict__ qkv, int64_t CH, const float *__restrict__ beta,
                                           const float *__restrict__ g, int32_t n, int32_t DK, int32_t NK, int32_t NV,
                                           bool tiled, gdn_chunk_scratch_t sc)
{
    extern __shared__ float sh[];
    __shared__ float Gs[GDN_CHUNK], bs[GDN_CHUNK];
    gdn_chunk_wy(qkv, CH, beta, g, n, DK, NK, NV, tiled, sc, blockIdx.x, blockIdx.y, threadIdx.x, blockDim.x, sh,
                 Gs, bs);
}

static __global__ void gdn_chunk_state_kernel(const float *__restrict__ qkv, int64_t CH, float *state,
                                              gdn_chunk_scratch_t sc, float *o, int64_t IN, int32_t n, int32_t DK,
                                              int32_t NK, int32_t NV, bool tiled)
{
    extern __shared__ float sh[];
    __shared__ float Gs[GDN_CHUNK], coef[GDN_CHUNK];
    gdn_chunk_state(qkv, CH, state, sc, o, IN, n, DK, NK, NV, tiled, blockIdx.x, blockIdx.y, threadIdx.x,
                    blockDim.x, sh, Gs, coef);
}

/* a warp per (row t, value head h): o = rmsnorm(o) * norm_w * silu(z), the squares summed in float */
static __global__ void gdn_norm_gate_kernel(float *o, const float *__restrict__ z, const float *__restrict__ norm_w,
                                            int64_t IN, int32_t n, int32_t DK, int32_t NV, float eps)
{
    const int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int32_t lane = threadIdx.x % 32;
    if (w >= (int64_t)n * NV)
        return;
    const int64_t t = w / NV, h = w % NV;
    float *x = o + t * IN + h * DK;
    const float *zr = z + t * IN + h * DK;
    float sum = 0.0f;
    for (int32_t i = lane; i < DK; i += 32)
        sum += x[i] * x[i];
    for (int32_t off = 16; off > 0; off /= 2)
        sum += __shfl_xor_sync(0xffffffffu, sum, off);
    const float scale = 1.0f / sqrtf(sum / (float)DK + eps);
    for (int32_t i = lane; i < DK; i += 32)
        x[i] = ((x[i] * scale) * norm_w[i]) * chunk_silu(zr[i]);
}

extern "C" int cuda_gdn_chunk(const float *qkv, int64_t CH, const float *beta, const float *g, float *state,
                              const float *z, const float *norm_w, float *o, int64_t IN, int32_t n, int32_t DK,
                              int32_t NK, int32_t NV, bool tiled, float eps, float *scratch, cudaStream_t s,
                              guild_err_t *err)
{
    if (n <= 0)
        return 0;
    if (!cuda_gdn_chunk_fits(DK) || NK < 1 || NV % NK)
        return guild_err_set(err, "cuda: gdn_chunk: heads of %d (at most %d), %d value heads over %d key heads", DK,
                             GDN_CHUNK_MAX_DK, NV, NK);
    const gdn_chunk_scratch_t sc = gdn_chunk_scratch_at(scratch, n, DK, NV);
    const int32_t nc = (int32_t)(gdn_chunk_rows(n) / GDN_CHUNK), RB = gdn_state_rows(DK);
    const size_t wy_smem = (size_t)gdn_chunk_wy_shared(DK) * sizeof(float);
    const size_t st_smem = (size_t)gdn_chunk_state_shared(DK) * sizeof(float);
    cudaError_t e = cudaFuncSetAttribute(gdn_chunk_wy_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)wy_smem);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(gdn_chunk_state_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)st_smem);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return guild_err_set(err, "cuda: gdn_chunk: %zu bytes of shared memory: %s", wy_smem, cudaGetErrorString(e));
    }
    gdn_chunk_wy_kernel<<<dim3((unsigned)NV, (unsigned)nc), GDN_CHUNK_THREADS, wy_smem, s>>>(qkv, CH, beta, g, n, DK,
                                                                                           NK, NV, tiled, sc);
    if (cuda_launch_check("gdn_chunk_wy", err) < 0)
        return -1;
    gdn_chunk_state_kernel<<<dim3((unsigned)NV, (unsigned)(DK / RB)), GDN_CHUNK_THREADS, st_smem, s>>>(
        qkv, CH, state, sc, o, IN, n, DK, NK, NV, tiled);
    if (cuda_launch_check("gdn_chunk_state", err) < 0)
        return -1;
    const int64_t threads = (int64_t)n * NV * 32;
    gdn_norm_gate_kernel<<<(unsigned)((threads + GDN_CHUNK_THREADS - 1) / GDN_CHUNK_THREADS), GDN_CHUNK_THREADS, 0,
                           s>>>(o, z, norm_w, IN, n, DK, NV, eps);
    return cuda_launch_check("gdn_norm_gate", err);
}
