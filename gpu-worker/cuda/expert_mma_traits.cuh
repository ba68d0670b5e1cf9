/* gpu-worker/cuda/expert_mma_traits.cuh — per-type fragments of the int8 mma expert kernel (expert_mma.cu):
 * which weight and activation bytes a thread gives the mma, and the integer scales and float finish around it.
 * __host__ __device__ (quant_dot.cuh's emulations), so tests/cuda/check_cuda_host.cu checks on the host that the
 * element permutation, the scale decoding, the min trick and the finish give quant_vec_dot_ref's bits.
 */
#ifndef GUILD_GPU_WORKER_CUDA_EXPERT_MMA_TRAITS_CUH
#define GUILD_GPU_WORKER_CUDA_EXPERT_MMA_TRAITS_CUH

#include "gpu-worker/cuda/quant_dot.cuh"

/* ---- per-type traits ----------------------------------------------------------------------------------------
 * A weight block is NCH chunks of SPC sub-blocks (one mma each; KR = 2: m16n8k32, KR = 1: m16n8k16); sub(c, i)
 * is the index of chunk c's i-th sub-block. A thread keeps a whole block's head (whead: packed scales, block
 * scales) but one chunk of fragments at a time (register pressure).
 *   head(w, h)                     the block's scales
 *   chunk(w, t, c, q), bchunk(a, t, c, b)   thread t's fragments of chunk c (the same element permutation)
 *   scale(h, s), minb(h, s)        sub-block s's integer scale; its min in the four bytes (HAS_MIN)
 *   finish(h, ad, isum, imin)      quant_dot.cuh's finish, the same operations; ad: the activation's block
 *                                  scale as a float */

/* Q4_K: sub-block s = 2c + i is the low (i = 0) or high nibbles of qs[32c .. 32c+31]; thread t takes
 * qs[32c + 8t .. +7] (8-byte aligned: rows are 16-byte aligned, qs at 16) and the activation's elements
 * 64c + 32i + 8t .. +7. */
struct mma_q4_K {
    typedef quant_block_q4_K wblock;
    typedef quant_block_q8_K ablock;
    static constexpr int NCH = 4, SPC = 2, KR = 2;
    static constexpr bool HAS_MIN = true;
    struct whead {
        uint32_t sc[2], m[2]; /* 6-bit scales and mins of sub-blocks 0..3, 4..7, one a byte */
        uint32_t dd;          /* d | dmin << 16 */
    };
    QD_FN int sub(int c, int i)
    {
        return 2 * c + i;
    }
    QD_FN void head(const wblock *w, whead &r)
    {
        const uint4 h = *(const uint4 *)w; /* d, dmin, scales[12] */
        r.dd = h.x;
        /* quant_k4_scale_min: j < 4 from bytes j (scale) and j + 4 (min); j >= 4 from the nibbles of byte
         * j + 4 and the top two bits of bytes j - 4 (scale) and j (min) */
        r.sc[0] = h.y & 0x3f3f3f3fu;
        r.m[0] = h.z & 0x3f3f3f3fu;
        r.sc[1] = (h.w & 0x0f0f0f0fu) | ((h.y >> 2) & 0x30303030u);
        r.m[1] = ((h.w >> 4) & 0x0f0f0f0fu) | ((h.z >> 2) & 0x30303030u);
    }
    QD_FN void chunk(const wblock *w, int t, int c, int (&q)[SPC][KR])
    {
        const uint2 v = *(const uint2 *)(w->qs + 32 * c + 8 * t);
        q[0][0] = (int)(v.x & 0x0f0f0f0fu);
        q[0][1] = (int)(v.y & 0x0f0f0f0fu);
        q[1][0] = (int)((v.x >> 4) & 0x0f0f0f0fu);
        q[1][1] = (int)((v.y >> 4) & 0x0f0f0f0fu);
    }
    QD_FN void bchunk(const ablock *a, int t, int c, int (&b)[SPC][KR])
    {
        const int *q = (const int *)a->qs; /* 4-byte aligned (blocks of 292 bytes, qs at 4) */
#pragma unroll
        for (int i = 0; i < SPC; i++) {
            b[i][0] = q[16 * c + 8 * i + 2 * t];
            b[i][1] = q[16 * c + 8 * i + 2 * t + 1];
        }
    }
    QD_FN float act_d(const ablock *a)
    {
        return a->d;
    }
    QD_FN int scale(const whead &r, int s)
    {
        return (int)((r.sc[s / 4] >> 8 * (s % 4)) & 0xffu);
    }
    QD_FN int minb(const whead &r, int s)
    {
        return (int)qd_byte_perm(r.m[s / 4], 0, (s % 4) * 0x1111u);
    }
    QD_FN float finish(const whead &r, float ad, int isum, int imin)
    {
        return k4_finish((quant_half_t)(r.dd & 0xffffu), (quant_half_t)(r.dd >> 16), ad, isum, imin);
    }
};

/* Q6_K: sub-block s = 8 hf + 2 kq + r16 (16 elements, one int8 scale) holds elements 128 hf + 32 kq + 16 r16 + i:
 * low bits in ql[64 hf + 32 (kq % 2) + 16 r16 + i] (nibble kq / 2), high bits 2 kq of qh[32 hf + 16 r16 + i],
 * the value minus 32 (dot_q6_K's __vsub4). Chunk c = 2 hf + r16 holds kq = 0..3; thread t takes i = 4t .. 4t+3.
 * Blocks of 210 bytes: 2-byte loads. */
struct mma_q6_K {
    typedef quant_block_q6_K wblock;
    typedef quant_block_q8_K ablock;
    static constexpr int NCH = 4, SPC = 4, KR = 1;
    static constexpr bool HAS_MIN = false;
    struct whead {
        uint32_t sc[4]; /* int8 scales of sub-blocks 4i .. 4i+3 */
        uint32_t dd;    /* d */
    };
    QD_FN int sub(int c, int i)
    {
        return 8 * (c / 2) + 2 * i + c % 2;
    }
    QD_FN void head(const wblock *w, whead &r)
    {
#pragma unroll
        for (int i = 0; i < 4; i++)
            r.sc[i] = (uint32_t)qd_load_a2(w->scales + 4 * i);
        r.dd = w->d;
    }
    QD_FN void chunk(const wblock *w, int t, int c, int (&q)[SPC][KR])
    {
        const int hf = c / 2, r16 = c % 2;
        const int l0 = qd_load_a2(w->ql + 64 * hf + 16 * r16 + 4 * t);
        const int l1 = qd_load_a2(w->ql + 64 * hf + 32 + 16 * r16 + 4 * t);
        const int h = qd_load_a2(w->qh + 32 * hf + 16 * r16 + 4 * t);
#pragma unroll
        for (int kq = 0; kq < 4; kq++) {
            const int lo = ((kq % 2 ? l1 : l0) >> (4 * (kq / 2))) & 0x0f0f0f0f;
            const int hi = ((h >> (2 * kq)) & 0x03030303) << 4;
            q[kq][0] = qd_vsub4(lo | hi, 0x20202020);
        }
    }
    QD_FN void bchunk(const ablock *a, int t, int c, int (&b)[SPC][KR])
    {
        const int *q = (const int *)a->qs;
#pragma unroll
        for (int i = 0; i < SPC; i++)
            b[i][0] = q[4 * sub(c, i) + t];
    }
    QD_FN float act_d(const ablock *a)
    {
        return a->d;
    }
    QD_FN int scale(const whead &r, int s)
    {
        return (int)(int8_t)(uint8_t)(r.sc[s / 4] >> 8 * (s % 4));
    }
    QD_FN int minb(const whead &r, int s)
    {
        return 0;
    }
    QD_FN float finish(const whead &r, float ad, int isum, int imin)
    {
        const float d = qd_f16((quant_half_t)r.dd) * ad; /* dot_q6_K::finish */
        return d * (float)isum;
    }
};

#endif
