/* gpu-worker/dense/cuda/expert_mma_traits.cuh — per-type fragments of the int8 mma expert kernel (expert_mma.cu):
 * which weight and activation bytes a thread gives the mma, and the integer scales and float finish around it.
 * __host__ __device__ (quant_dot.cuh's emulations), so tests/cuda/check_cuda_host.cu checks on the host that the
 * element permutation, the scale decoding, the min trick and the finish give quant_vec_dot_ref's bits.
 */
#ifndef GUILD_GPU_WORKER_CUDA_EXPERT_MMA_TRAITS_CUH
#define GUILD_GPU_WORKER_CUDA_EXPERT_MMA_TRAITS_CUH

#include "gpu-worker/dense/cuda/quant_dot.cuh"

/* ---- per-type traits ----------------------------------------------------------------------------------------
 * A weight block (QK elements) is NCH chunks of SPC sub-blocks (one mma each; KR = 2: m16n8k32, KR = 1: m16n8k16); sub(c, i)
 * is the index of chunk c's i-th sub-block. A thread keeps a whole block's head (whead: packed scales, block
 * scales) but one chunk of fragments at a time (register pressure).
 *   head(w, h)                     the block's scales
 *   chunk(w, t, c, q), bchunk(a, t, c, b)   thread t's fragments of chunk c (the same element permutation)
 *   scale(h, s), minb(h, s)        sub-block s's integer scale; its min in the four bytes (HAS_MIN)
 *   finish(h, ad, isum, imin)      quant_dot.cuh's finish, the same operations; ad: the activation's block
 *                                  scale as a float */

/* The head of a Q4_K/Q5_K block (16-byte aligned): dd = d | dmin << 16, the 6-bit scales and mins of sub-blocks
 * 0..3 and 4..7 one a byte. quant_k4_scale_min: j < 4 from bytes j (scale) and j + 4 (min); j >= 4 from the
 * nibbles of byte j + 4 and the top two bits of bytes j - 4 (scale) and j (min). */
QD_FN void k4_head(const void *w, uint32_t (&sc)[2], uint32_t (&m)[2], uint32_t &dd)
{
    const uint4 h = *(const uint4 *)w; /* d, dmin, scales[12] */
    dd = h.x;
    sc[0] = h.y & 0x3f3f3f3fu;
    m[0] = h.z & 0x3f3f3f3fu;
    sc[1] = (h.w & 0x0f0f0f0fu) | ((h.y >> 2) & 0x30303030u);
    m[1] = ((h.w >> 4) & 0x0f0f0f0fu) | ((h.z >> 2) & 0x30303030u);
}

/* Q4_K: sub-block s = 2c + i is the low (i = 0) or high nibbles of qs[32c .. 32c+31]; thread t takes
 * qs[32c + 8t .. +7] (8-byte aligned: rows are 16-byte aligned, qs at 16) and the activation's elements
 * 64c + 32i + 8t .. +7. */
struct mma_q4_K {
    typedef quant_block_q4_K wblock;
    typedef quant_block_q8_K ablock;
    static constexpr int QK = QUANT_QK_K, NCH = 4, SPC = 2, KR = 2;
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
        k4_head(w, r.sc, r.m, r.dd);
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
    static constexpr int QK = QUANT_QK_K, NCH = 4, SPC = 4, KR = 1;
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

/* Q5_K: as Q4_K, the 5th bit of element e being bit e / 32 of qh[e % 32]: sub-block s = 2c + i takes bit s of
 * qh[8t .. 8t+7] (qh at 16, qs at 48: 8-byte aligned). */
struct mma_q5_K {
    typedef quant_block_q5_K wblock;
    typedef quant_block_q8_K ablock;
    static constexpr int QK = QUANT_QK_K, NCH = 4, SPC = 2, KR = 2;
    static constexpr bool HAS_MIN = true;
    typedef mma_q4_K::whead whead;
    QD_FN int sub(int c, int i)
    {
        return 2 * c + i;
    }
    QD_FN void head(const wblock *w, whead &r)
    {
        k4_head(w, r.sc, r.m, r.dd);
    }
    QD_FN void chunk(const wblock *w, int t, int c, int (&q)[SPC][KR])
    {
        const uint2 v = *(const uint2 *)(w->qs + 32 * c + 8 * t);
        const uint2 h = *(const uint2 *)(w->qh + 8 * t);
        q[0][0] = (int)((v.x & 0x0f0f0f0fu) | ((h.x >> (2 * c)) & 0x01010101u) << 4);
        q[0][1] = (int)((v.y & 0x0f0f0f0fu) | ((h.y >> (2 * c)) & 0x01010101u) << 4);
        q[1][0] = (int)(((v.x >> 4) & 0x0f0f0f0fu) | ((h.x >> (2 * c + 1)) & 0x01010101u) << 4);
        q[1][1] = (int)(((v.y >> 4) & 0x0f0f0f0fu) | ((h.y >> (2 * c + 1)) & 0x01010101u) << 4);
    }
    QD_FN void bchunk(const ablock *a, int t, int c, int (&b)[SPC][KR])
    {
        mma_q4_K::bchunk(a, t, c, b);
    }
    QD_FN float act_d(const ablock *a)
    {
        return a->d;
    }
    QD_FN int scale(const whead &r, int s)
    {
        return mma_q4_K::scale(r, s);
    }
    QD_FN int minb(const whead &r, int s)
    {
        return mma_q4_K::minb(r, s);
    }
    QD_FN float finish(const whead &r, float ad, int isum, int imin)
    {
        return mma_q4_K::finish(r, ad, isum, imin);
    }
};

/* IQ4_XS: sub-block s (32 elements, scale ls - 32) is qs[16s .. 16s+15], low nibbles elements 0..15, high
 * nibbles 16..31, through the iq4_nl levels; thread t's elements 8t .. 8t+7 are nibble t / 2 of
 * qs[16s + 8 (t % 2) .. +7]. Blocks of 136 bytes: 4-byte loads. */
struct mma_iq4_xs {
    typedef quant_block_iq4_xs wblock;
    typedef quant_block_q8_K ablock;
    static constexpr int QK = QUANT_QK_K, NCH = 4, SPC = 2, KR = 2;
    static constexpr bool HAS_MIN = false;
    struct whead {
        uint32_t sc[2]; /* ls - 32 of sub-blocks 0..3, 4..7, one signed byte each */
        uint32_t dd;    /* d */
    };
    QD_FN int sub(int c, int i)
    {
        return 2 * c + i;
    }
    QD_FN void head(const wblock *w, whead &r)
    {
        const uint32_t h0 = (uint32_t)qd_load_a4(w), sl = (uint32_t)qd_load_a4(w->scales_l);
        const uint32_t sh = h0 >> 16;
        r.dd = h0 & 0xffffu;
        r.sc[0] = r.sc[1] = 0;
#pragma unroll
        for (int ib = 0; ib < 8; ib++) {
            const int ls = (int)((sl >> 4 * ib) & 0xfu) | (int)(((sh >> 2 * ib) & 3u) << 4);
            r.sc[ib / 4] |= (uint32_t)(uint8_t)(ls - 32) << 8 * (ib % 4);
        }
    }
    QD_FN void chunk(const wblock *w, int t, int c, int (&q)[SPC][KR])
    {
#pragma unroll
        for (int i = 0; i < SPC; i++) {
            const uint8_t *p = w->qs + 16 * (2 * c + i) + 8 * (t % 2);
            const int sh = 4 * (t / 2);
            q[i][0] = iq4nl_lookup4(((uint32_t)qd_load_a4(p) >> sh) & 0x0f0f0f0fu);
            q[i][1] = iq4nl_lookup4(((uint32_t)qd_load_a4(p + 4) >> sh) & 0x0f0f0f0fu);
        }
    }
    QD_FN void bchunk(const ablock *a, int t, int c, int (&b)[SPC][KR])
    {
        mma_q4_K::bchunk(a, t, c, b);
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
        const float d = qd_f16((quant_half_t)r.dd) * ad; /* dot_iq4_xs::finish */
        return d * (float)isum;
    }
};

/* Q8_0 against Q8_0: one sub-block of 32 a block (scale 1); thread t takes qs[8t .. 8t+7]. Blocks of 34 bytes:
 * 2-byte loads. */
struct mma_q8_0 {
    typedef quant_block_q8_0 wblock;
    typedef quant_block_q8_0 ablock;
    static constexpr int QK = 32, NCH = 1, SPC = 1, KR = 2;
    static constexpr bool HAS_MIN = false;
    struct whead {
        uint32_t dd; /* d */
    };
    QD_FN int sub(int c, int i)
    {
        return 0;
    }
    QD_FN void head(const wblock *w, whead &r)
    {
        r.dd = w->d;
    }
    QD_FN void chunk(const wblock *w, int t, int c, int (&q)[SPC][KR])
    {
        q[0][0] = qd_load_a2(w->qs + 8 * t);
        q[0][1] = qd_load_a2(w->qs + 8 * t + 4);
    }
    QD_FN void bchunk(const ablock *a, int t, int c, int (&b)[SPC][KR])
    {
        b[0][0] = qd_load_a2(a->qs + 8 * t);
        b[0][1] = qd_load_a2(a->qs + 8 * t + 4);
    }
    QD_FN float act_d(const ablock *a)
    {
        return qd_f16(a->d); /* exact: the product below is dot_q8_0::finish's */
    }
    QD_FN int scale(const whead &r, int s)
    {
        return 1;
    }
    QD_FN int minb(const whead &r, int s)
    {
        return 0;
    }
    QD_FN float finish(const whead &r, float ad, int isum, int imin)
    {
        const float d = qd_f16((quant_half_t)r.dd) * ad;
        return d * (float)isum;
    }
};

/* MXFP4 against Q8_0: one sub-block of 32 a block (scale 1); thread t takes qs[4t .. 4t+3], whose low nibbles are
 * elements 4t .. 4t+3 and high nibbles 16 + 4t .. 16 + 4t + 3 (the two K halves of the fragment), through the
 * mxfp4 levels. Blocks of 17 bytes: byte loads. */
struct mma_mxfp4 {
    typedef quant_block_mxfp4 wblock;
    typedef quant_block_q8_0 ablock;
    static constexpr int QK = 32, NCH = 1, SPC = 1, KR = 2;
    static constexpr bool HAS_MIN = false;
    struct whead {
        uint32_t e; /* the E8M0 exponent */
    };
    QD_FN int sub(int c, int i)
    {
        return 0;
    }
    QD_FN void head(const wblock *w, whead &r)
    {
        r.e = w->e;
    }
    QD_FN void chunk(const wblock *w, int t, int c, int (&q)[SPC][KR])
    {
        const uint32_t v = (uint32_t)qd_load_a1(w->qs + 4 * t);
        q[0][0] = mxfp4_lookup4(v & 0x0f0f0f0fu);
        q[0][1] = mxfp4_lookup4((v >> 4) & 0x0f0f0f0fu);
    }
    QD_FN void bchunk(const ablock *a, int t, int c, int (&b)[SPC][KR])
    {
        b[0][0] = qd_load_a2(a->qs + 4 * t);
        b[0][1] = qd_load_a2(a->qs + 16 + 4 * t);
    }
    QD_FN float act_d(const ablock *a)
    {
        return qd_f16(a->d); /* exact: the product below is dot_mxfp4::finish's */
    }
    QD_FN int scale(const whead &r, int s)
    {
        return 1;
    }
    QD_FN int minb(const whead &r, int s)
    {
        return 0;
    }
    QD_FN float finish(const whead &r, float ad, int isum, int imin)
    {
        const float d = quant_e8m0_to_f32_half((uint8_t)r.e) * ad;
        return d * (float)isum;
    }
};

#endif
