/* Activation quantization (Q8_0, Q8_1, Q8_K) for the matrix products: one warp per block, the operations of
 * quantize_row_q8_*_ref in core/quant/quantize_ref.c, so the bytes are the same. */
#include "gpu-worker/dense/cuda/cuda_common.cuh"

/* ggml's nearest_int: round to nearest even through the float adder (|f| < 2^22). */
static __device__ __forceinline__ int nearest_int(float f)
{
    return (__float_as_int(__fadd_rn(f, 12582912.f)) & 0x007fffff) - 0x00400000;
}

/* One warp per 32-element block, one element per lane. Q8_1 also stores s = fp16(sum(qs) * d). */
template <bool Q8_1>
static __global__ void quantize_q8_32_kernel(const float *x, int64_t ldx, char *dst, size_t dst_stride, int nb,
                                             int n_rows, const int32_t *__restrict__ keep, int32_t lo,
                                             int32_t hi)
{
    const int64_t warp = (int64_t)blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    const int lane = threadIdx.x % WARP_SIZE;
    if (warp >= (int64_t)nb * n_rows)
        return;
    const int row = (int)(warp / nb), b = (int)(warp % nb);
    if (keep && (keep[row] < lo || keep[row] >= hi))
        return;
    const float v = x[row * ldx + (int64_t)b * 32 + lane];
    const float amax = warp_max_f32(fabsf(v));
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const int q = (int)roundf(__fmul_rn(v, id));
    if (Q8_1) {
        quant_block_q8_1 *y = (quant_block_q8_1 *)(dst + row * dst_stride) + b;
        y->qs[lane] = (int8_t)q;
        const int sum = warp_sum_int(q);
        if (lane == 0) {
            y->d = quant_f32_to_f16(d);
            y->s = quant_f32_to_f16(__fmul_rn((float)sum, d));
        }
    } else {
        quant_block_q8_0 *y = (quant_block_q8_0 *)(dst + row * dst_stride) + b;
        y->qs[lane] = (int8_t)q;
        if (lane == 0)
            y->d = quant_f32_to_f16(d);
    }
}

/* One warp per 256-element Q8_K block; lane l holds elements 8 l .. 8 l + 7. */
static __global__ void quantize_q8_K_kernel(const float *x, int64_t ldx, char *dst, size_t dst_stride, int nb,
                                            int n_rows, const int32_t *__restrict__ keep, int32_t lo,
                                            int32_t hi)
{
    const int64_t warp = (int64_t)blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    const int lane = threadIdx.x % WARP_SIZE;
    if (warp >= (int64_t)nb * n_rows)
        return;
    const int row = (int)(warp / nb), b = (int)(warp % nb);
    if (keep && (keep[row] < lo || keep[row] >= hi))
        return;
    const float *xb = x + row * ldx + (int64_t)b * QUANT_QK_K + lane * 8;
    quant_block_q8_K *y = (quant_block_q8_K *)(dst + row * dst_stride) + b;
    float v[8];
#pragma unroll
    for (int i = 0; i < 8; i++)
        v[i] = xb[i];
    /* The reference keeps the first element of largest magnitude: reduce (|x|, index) with ties to the lower
     * index, and carry the signed value. */
    float amax = 0.0f, max = 0.0f;
    int idx = 0x7fffffff;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        if (fabsf(v[i]) > amax) {
            amax = fabsf(v[i]);
            max = v[i];
            idx = lane * 8 + i;
        }
    }
#pragma unroll
    for (int o = WARP_SIZE / 2; o > 0; o >>= 1) {
        const float oa = __shfl_xor_sync(FULL_MASK, amax, o);
        const float om = __shfl_xor_sync(FULL_MASK, max, o);
        const int oi = __shfl_xor_sync(FULL_MASK, idx, o);
        if (oa > amax || (oa == amax && oi < idx)) {
            amax = oa;
            max = om;
            idx = oi;
        }
    }
    if (amax == 0.0f) {
        for (int i = 0; i < 8; i++)
            y->qs[lane * 8 + i] = 0;
        if (lane < QUANT_QK_K / 16)
            y->bsums[lane] = 0;
        if (lane == 0)
            y->d = 0.0f;
        return;
    }
    const float iscale = -127.f / max;
    int sum = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int q = min(127, nearest_int(__fmul_rn(iscale, v[i])));
        y->qs[lane * 8 + i] = (int8_t)q;
        sum += q;
    }
    sum += __shfl_xor_sync(FULL_MASK, sum, 1); /* lanes 2j, 2j+1 hold the 16 elements of group j */
    if (lane % 2 == 0)
        y->bsums[lane / 2] = (int16_t)sum;
    if (lane == 0)
        y->d = 1 / iscale;
}

static void quantize_launch(guild_type_t act_type, const float *x, int64_t ldx, void *dst, size_t dst_stride,
                            int64_t n, int32_t n_rows, const int32_t *keep, int32_t lo, int32_t hi, cudaStream_t s)
{
    const int threads = 128, warps = threads / WARP_SIZE;
    if (act_type == GUILD_TYPE_Q8_K) {
        const int nb = (int)(n / QUANT_QK_K);
        const int64_t blocks = ((int64_t)nb * n_rows + warps - 1) / warps;
        quantize_q8_K_kernel<<<(unsigned)blocks, threads, 0, s>>>(x, ldx, (char *)dst, dst_stride, nb, n_rows, keep,
                                                                  lo, hi);
    } else {
        const int nb = (int)(n / 32);
        const int64_t blocks = ((int64_t)nb * n_rows + warps - 1) / warps;
        if (act_type == GUILD_TYPE_Q8_1)
            quantize_q8_32_kernel<true><<<(unsigned)blocks, threads, 0, s>>>(x, ldx, (char *)dst, dst_stride, nb,
                                                                              n_rows, keep, lo, hi);
        else
            quantize_q8_32_kernel<false><<<(unsigned)blocks, threads, 0, s>>>(x, ldx, (char *)dst, dst_stride, nb,
                                                                               n_rows, keep, lo, hi);
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
