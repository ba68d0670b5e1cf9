/* gpu-worker/dense/cuda/quantize.cuh — one warp's quantization of one activation block (Q8_0, Q8_1: 32 elements,
 * one per lane; Q8_K: 256, eight per lane), the operations of quantize_row_q8_*_ref in core/quant/quantize_ref.c,
 * so the bytes are the same. Shared by cuda_quantize (quantize.cu) and the norm that quantizes what it writes
 * (rmsnorm.cu): one body, so both give the same bytes. */
#ifndef GUILD_GPU_WORKER_CUDA_QUANTIZE_CUH
#define GUILD_GPU_WORKER_CUDA_QUANTIZE_CUH

#include "gpu-worker/dense/cuda/cuda_common.cuh"

/* ggml's nearest_int: round to nearest even through the float adder (|f| < 2^22). */
static __device__ __forceinline__ int quant_nearest_int(float f)
{
    return (__float_as_int(__fadd_rn(f, 12582912.f)) & 0x007fffff) - 0x00400000;
}

/* Lane l's element v of a 32-element block into dst (a quant_block_q8_1 when Q8_1, else a quant_block_q8_0); Q8_1
 * also stores s = fp16(sum(qs) * d). Every lane of the warp takes part. */
template <bool Q8_1>
static __device__ __forceinline__ void quantize_block_q8_32(float v, int lane, void *dst)
{
    const float amax = warp_max_f32(fabsf(v));
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const int q = (int)roundf(__fmul_rn(v, id));
    if (Q8_1) {
        quant_block_q8_1 *y = (quant_block_q8_1 *)dst;
        y->qs[lane] = (int8_t)q;
        const int sum = warp_sum_int(q);
        if (lane == 0) {
            y->d = quant_f32_to_f16(d);
            y->s = quant_f32_to_f16(__fmul_rn((float)sum, d));
        }
    } else {
        quant_block_q8_0 *y = (quant_block_q8_0 *)dst;
        y->qs[lane] = (int8_t)q;
        if (lane == 0)
            y->d = quant_f32_to_f16(d);
    }
}

/* Lane l's elements v[0..8) = block elements 8 l .. 8 l + 7 of a 256-element block into y. Every lane takes part. */
static __device__ __forceinline__ void quantize_block_q8_K(const float v[8], int lane, quant_block_q8_K *y)
{
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
        const int q = min(127, quant_nearest_int(__fmul_rn(iscale, v[i])));
        y->qs[lane * 8 + i] = (int8_t)q;
        sum += q;
    }
    sum += __shfl_xor_sync(FULL_MASK, sum, 1); /* lanes 2j, 2j+1 hold the 16 elements of group j */
    if (lane % 2 == 0)
        y->bsums[lane / 2] = (int16_t)sum;
    if (lane == 0)
        y->d = 1 / iscale;
}

#endif
