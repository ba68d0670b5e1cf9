/* Activation quantization (Q8_0, Q8_1, Q8_K) for the matrix products: one warp per block, the operations of
 * quantize_row_q8_*_ref in core/quant/quantize_ref.c (quantize.cuh), so the bytes are the same. */
#include "gpu-worker/dense/cuda/quantize.cuh"

/* One warp per 32-element block, one element per lane. */
template <bool Q8_1>
static __global__ void quantize_q8_32_kernel(const float *x, int64_t ldx, char *dst, size_t dst_stride, int nb,
                                             int n_rows, const int32_t *__restrict__ keep, int32_t lo,
                                             int32_t hi)
{
    pdl_begin();
    const int64_t warp = (int64_t)blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    const int lane = threadIdx.x % WARP_SIZE;
    if (warp >= (int64_t)nb * n_rows)
        return;
    const int row = (int)(warp / nb), b = (int)(warp % nb);
    if (keep && (keep[row] < lo || keep[row] >= hi))
        return;
    const size_t block = Q8_1 ? sizeof(quant_block_q8_1) : sizeof(quant_block_q8_0);
    quantize_block_q8_32<Q8_1>(x[row * ldx + (int64_t)b * 32 + lane], lane, dst + row * dst_stride + b * block);
}

/* One warp per 256-element Q8_K block; lane l holds elements 8 l .. 8 l + 7. */
static __global__ void quantize_q8_K_kernel(const float *x, int64_t ldx, char *dst, size_t dst_stride, int nb,
                                            int n_rows, const int32_t *__restrict__ keep, int32_t lo,
                                            int32_t hi)
{
    pdl_begin();
    const int64_t warp = (int64_t)blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    const int lane = threadIdx.x % WARP_SIZE;
    if (warp >= (int64_t)nb * n_rows)
        return;
    const int row = (int)(warp / nb), b = (int)(warp % nb);
    if (keep && (keep[row] < lo || keep[row] >= hi))
        return;
    const float *xb = x + row * ldx + (int64_t)b * QUANT_QK_K + lane * 8;
    float v[8];
#pragma unroll
    for (int i = 0; i < 8; i++)
        v[i] = xb[i];
    quantize_block_q8_K(v, lane, (quant_block_q8_K *)(dst + row * dst_stride) + b);
}

static void quantize_launch(guild_type_t act_type, const float *x, int64_t ldx, void *dst, size_t dst_stride,
                            int64_t n, int32_t n_rows, const int32_t *keep, int32_t lo, int32_t hi, cudaStream_t s)
{
    const int threads = 128, warps = threads / WARP_SIZE;
    if (act_type == GUILD_TYPE_Q8_K) {
        const int nb = (int)(n / QUANT_QK_K);
        const int64_t blocks = ((int64_t)nb * n_rows + warps - 1) / warps;
        cuda_launch_pdl(quantize_q8_K_kernel, (unsigned)blocks, threads, 0, s, x, ldx, (char *)dst, dst_stride, nb,
                        n_rows, keep, lo, hi);
    } else {
        const int nb = (int)(n / 32);
        const int64_t blocks = ((int64_t)nb * n_rows + warps - 1) / warps;
        if (act_type == GUILD_TYPE_Q8_1)
            cuda_launch_pdl(quantize_q8_32_kernel<true>, (unsigned)blocks, threads, 0, s, x, ldx, (char *)dst,
                            dst_stride, nb, n_rows, keep, lo, hi);
        else
            cuda_launch_pdl(quantize_q8_32_kernel<false>, (unsigned)blocks, threads, 0, s, x, ldx, (char *)dst,
                            dst_stride, nb, n_rows, keep, lo, hi);
    }
}

static int quantize(guild_type_t act_type, const float *x, int64_t ldx, void *dst, size_t dst_stride, int64_t n,
                    int32_t n_rows, const int32_t *keep, int32_t lo, int32_t hi, cudaStream_t s, guild_err_t *err)
{
    if (n_rows <= 0 || n <= 0)
        return 0;
    if (act_type == GUILD_TYPE_F32) { /* a copy of every row, kept or not */
        cudaError_t e = cudaMemcpy2DAsync(dst, dst_stride, x, (size_t)ldx * sizeof(float), (size_t)n * sizeof(float),
                                          (size_t)n_rows, cudaMemcpyDeviceToDevice, s);
        if (e != cudaSuccess)
            return guild_err_set(err, "cuda: quantize f32: %s", cudaGetErrorString(e));
        return 0;
    }
    if (act_type != GUILD_TYPE_Q8_0 && act_type != GUILD_TYPE_Q8_1 && act_type != GUILD_TYPE_Q8_K)
        return guild_err_set(err, "cuda: quantize: activation type %d is not one of f32, q8_0, q8_1, q8_K",
                             (int)act_type);
    const int64_t qk = act_type == GUILD_TYPE_Q8_K ? QUANT_QK_K : 32;
    if (n % qk)
        return guild_err_set(err, "cuda: quantize: a row of %lld is not a whole number of %lld-element blocks",
                             (long long)n, (long long)qk);
    quantize_launch(act_type, x, ldx, dst, dst_stride, n, n_rows, keep, lo, hi, s);
    return cuda_launch_check("quantize", err);
}

extern "C" int cuda_quantize(guild_type_t act_type, const float *x, int64_t ldx, void *dst, size_t dst_stride,
                             int64_t n, int32_t n_rows, cudaStream_t s, guild_err_t *err)
{
    return quantize(act_type, x, ldx, dst, dst_stride, n, n_rows, NULL, 0, 0, s, err);
}

extern "C" int cuda_quantize_rows(guild_type_t act_type, const float *x, int64_t ldx, void *dst, size_t dst_stride,
                                  int64_t n, int32_t n_rows, const int32_t *keep, int32_t lo, int32_t hi,
                                  cudaStream_t s, guild_err_t *err)
{
    return quantize(act_type, x, ldx, dst, dst_stride, n, n_rows, keep, lo, hi, s, err);
}
