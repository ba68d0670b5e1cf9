/* gpu-worker/dense/cuda/expert_mma_traits.cuh — per-type fragments of the int8 mma expert kernel (expert_mma.cu):
 * which weight and activation bytes a thread gives the mma, and the integer scales and float finish around it.
 * __host__ __device__ (quant_dot.cuh's emulations), so tests/cuda/check_cuda_host.cu checks on the host that the
 * element permutation, the scale decoding, the min trick and the finish give quant_vec_dot_ref's bits.
 */
#ifndef GUILD_GPU_WORKER_CUDA_EXPERT_MMA_TRAITS_CUH
#define GUILD_GPU_WORKER_CUDA_EXPERT_MMA_TRAITS_CUH

#include "gpu-worker/dense/cuda/quant_dot_iq.cuh"

/* ---- per-type traits ----------------------------------------------------------------------------------------
 * A weight block (QK elements) is NCH chunks of SPC sub-blocks (one mma each; KR = 2: m16n8k32, KR = 1: m16n8k16); sub(c, i)
 * is the index of chunk c's i-th sub-block. A thread keeps a whole block's head (whead: packed scales, block
 * scales) but one chunk of fragments at a time (register pressure).
 *   head(w, h)                     the block's scales
 *   chunk(w, t, c, q), bchunk(a, t, c, b)   thread t's fragments of chunk c (the same element permutation)
 *   scale(h, s), minb(h, s)        sub-block s's integer scale; its min in the four bytes (HAS_MIN)
 *   finish(h, ad, isum, imin)      quant_dot.cuh's finish, the same operations; ad: the activation's block
 *                                  scale as a float
 * The bases below hold what the types share; a type's struct names its block and the rest. */

/* The 256-element types against Q8_K (TR: the traits themselves, whose sub() orders the activation fragments):
 * 4 chunks of SPC sub-blocks of 16 KR elements; by default sub-block SPC c + i, no mins and the finish
 * d(w) * d(a) * isum of the head's dd. */
template <typename TR, typename WB, int SPC_, int KR_>
struct mma_qk {
    typedef WB wblock;
    typedef quant_block_q8_K ablock;
    static constexpr int QK = QUANT_QK_K, NCH = 4, SPC = SPC_, KR = KR_;
    static constexpr bool HAS_MIN = false;
    QD_FN int sub(int c, int i)
    {
        return SPC * c + i;
    }
    /* Thread t takes the KR words 4 KR s + KR t .. of sub-block s = TR::sub(c, i): its elements 4 KR t ..
     * (4-byte aligned: blocks of 292 bytes, qs at 4). */
    QD_FN void bchunk(const ablock *a, int t, int c, int (&b)[SPC][KR])
    {
        const int *q = (const int *)a->qs;
#pragma unroll
        for (int i = 0; i < SPC; i++)
#pragma unroll
            for (int k = 0; k < KR; k++)
                b[i][k] = q[4 * KR * TR::sub(c, i) + KR * t + k];
    }
    QD_FN float act_d(const ablock *a)
    {
        return a->d;
    }
    template <typename H>
    QD_FN int minb(const H &r, int s)
    {
        return 0;
    }
    template <typename H>
    QD_FN float finish(const H &r, float ad, int isum, int imin)
    {
        return qd_finish((quant_half_t)r.dd, ad, isum);
    }
};

/* Signed byte s % 4 of word s / 4 of sc (Q6_K's, Q3_K's and IQ4_XS's scales). */
QD_FN int mma_sbyte(const uint32_t *sc, int s)
{
    return (int)(int8_t)(uint8_t)(sc[s / 4] >> 8 * (s % 4));
}

/* Heads of a scale a byte (signed) in N words and the fp16 d. */
template <int N>
struct mma_sbyte_head {
    uint32_t sc[N]; /* the scales of sub-blocks 4i .. 4i+3 in word i, one signed byte each */
    uint32_t dd;    /* d */
};

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

/* quant_dot.cuh's k4_finish of a head whose dd is d | dmin << 16 (Q4_K, Q5_K, Q2_K). */
QD_FN float k4_finish_dd(uint32_t dd, float ad, int isum, int imin)
{
    return k4_finish((quant_half_t)(dd & 0xffffu), (quant_half_t)(dd >> 16), ad, isum, imin);
}

/* Q4_K and Q5_K: sub-block s = 2c + i is the low (i = 0) or high nibbles of qs[32c .. 32c+31]; thread t takes
 * qs[32c + 8t .. +7] and the activation's elements 64c + 32i + 8t .. +7; the scales and mins of k4_head. */
template <typename TR, typename WB>
struct mma_k4 : mma_qk<TR, WB, 2, 2> {
    static constexpr bool HAS_MIN = true;
    struct whead {
        uint32_t sc[2], m[2]; /* 6-bit scales and mins of sub-blocks 0..3, 4..7, one a byte */
        uint32_t dd;          /* d | dmin << 16 */
    };
    QD_FN void head(const WB *w, whead &r)
    {
        k4_head(w, r.sc, r.m, r.dd);
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
        return k4_finish_dd(r.dd, ad, isum, imin);
    }
};

/* Q4_K: qs at 16, rows 16-byte aligned: 8-byte loads. */
struct mma_q4_K : mma_k4<mma_q4_K, quant_block_q4_K> {
    QD_FN void chunk(const wblock *w, int t, int c, int (&q)[SPC][KR])
    {
        const uint2 v = *(const uint2 *)(w->qs + 32 * c + 8 * t);
        q[0][0] = (int)(v.x & 0x0f0f0f0fu);
        q[0][1] = (int)(v.y & 0x0f0f0f0fu);
        q[1][0] = (int)((v.x >> 4) & 0x0f0f0f0fu);
        q[1][1] = (int)((v.y >> 4) & 0x0f0f0f0fu);
    }
};

/* Q5_K: as Q4_K, the 5th bit of element e being bit e / 32 of qh[e % 32]: sub-block s = 2c + i takes bit s of
 * qh[8t .. 8t+7] (qh at 16, qs at 48: 8-byte aligned). */
struct mma_q5_K : mma_k4<mma_q5_K, quant_block_q5_K> {
    QD_FN void chunk(const wblock *w, int t, int c, int (&q)[SPC][KR])
    {
        const uint2 v = *(const uint2 *)(w->qs + 32 * c + 8 * t);
        const uint2 h = *(const uint2 *)(w->qh + 8 * t);
        q[0][0] = (int)((v.x & 0x0f0f0f0fu) | ((h.x >> (2 * c)) & 0x01010101u) << 4);
        q[0][1] = (int)((v.y & 0x0f0f0f0fu) | ((h.y >> (2 * c)) & 0x01010101u) << 4);
        q[1][0] = (int)(((v.x >> 4) & 0x0f0f0f0fu) | ((h.x >> (2 * c + 1)) & 0x01010101u) << 4);
        q[1][1] = (int)(((v.y >> 4) & 0x0f0f0f0fu) | ((h.y >> (2 * c + 1)) & 0x01010101u) << 4);
    }
};

/* The 16-element sub-blocks of Q6_K, Q2_K and Q3_K (KR = 1): sub-block s = 8 hf + 2 k + p holds elements
 * 128 hf + 32 k + 16 p + l; chunk c = 2 hf + p holds k = 0..3. */
template <typename TR, typename WB>
struct mma_sub16 : mma_qk<TR, WB, 4, 1> {
    QD_FN int sub(int c, int i)
    {
        return 8 * (c / 2) + 2 * i + c % 2;
    }
};

/* Q6_K: sub-block s = 8 hf + 2 kq + r16 (16 elements, one int8 scale) holds elements 128 hf + 32 kq + 16 r16 + i:
 * low bits in ql[64 hf + 32 (kq % 2) + 16 r16 + i] (nibble kq / 2), high bits 2 kq of qh[32 hf + 16 r16 + i],
 * the value minus 32 (dot_q6_K's __vsub4). Chunk c = 2 hf + r16 holds kq = 0..3; thread t takes i = 4t .. 4t+3.
 * Blocks of 210 bytes: 2-byte loads. */
struct mma_q6_K : mma_sub16<mma_q6_K, quant_block_q6_K> {
    typedef mma_sbyte_head<4> whead; /* int8 scales, d */
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
    QD_FN int scale(const whead &r, int s)
    {
        return mma_sbyte(r.sc, s);
    }
};

/* IQ4_XS: sub-block s (32 elements, scale ls - 32) is qs[16s .. 16s+15], low nibbles elements 0..15, high
 * nibbles 16..31, through the iq4_nl levels; thread t's elements 8t .. 8t+7 are nibble t / 2 of
 * qs[16s + 8 (t % 2) .. +7]. Blocks of 136 bytes: 4-byte loads. */
struct mma_iq4_xs : mma_qk<mma_iq4_xs, quant_block_iq4_xs, 2, 2> {
    typedef mma_sbyte_head<2> whead; /* ls - 32, d */
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
    QD_FN int scale(const whead &r, int s)
    {
        return mma_sbyte(r.sc, s);
    }
};

/* ---- the 32-element types against Q8_0 (one sub-block of scale 1 a block) ------------------------------------
 * DOT: quant_dot.cuh's traits of the type. Thread t takes qs[4t .. 4t+3], low nibbles elements 4t .., high
 * nibbles 16 + 4t .. (the two K halves of the fragment): DOT::levels(w, t, ...) is the fragment (blocks of 18,
 * 22 and 17 bytes: 2-byte and byte loads). The finish d(w) * d(a) * isum. */
template <typename DOT>
struct mma_b32 {
    typedef typename DOT::wblock wblock;
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
        DOT::levels(w, t, q[0][0], q[0][1]);
    }
    QD_FN void bchunk(const ablock *a, int t, int c, int (&b)[SPC][KR])
    {
        b[0][0] = qd_load_a2(a->qs + 4 * t);
        b[0][1] = qd_load_a2(a->qs + 16 + 4 * t);
    }
    QD_FN float act_d(const ablock *a)
    {
        return qd_f16(a->d); /* exact: the product below is quant_dot.cuh's finish */
    }
    template <typename H>
    QD_FN int scale(const H &r, int s)
    {
        return 1;
    }
    template <typename H>
    QD_FN int minb(const H &r, int s)
    {
        return 0;
    }
    QD_FN float finish(const whead &r, float ad, int isum, int imin)
    {
        return qd_finish((quant_half_t)r.dd, ad, isum);
    }
};

typedef mma_b32<dot_q4_0> mma_q4_0;
typedef mma_b32<dot_q5_0> mma_q5_0;
typedef mma_b32<dot_iq4_nl> mma_iq4_nl;

/* Q8_0 against Q8_0: thread t takes qs[8t .. 8t+7] of both blocks (blocks of 34 bytes: 2-byte loads). */
struct mma_q8_0 : mma_b32<dot_q8_0> {
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
};

/* MXFP4: the mxfp4 levels; the block scale is an E8M0 exponent (dot_mxfp4::finish). */
struct mma_mxfp4 : mma_b32<dot_mxfp4> {
    struct whead {
        uint32_t e; /* the E8M0 exponent */
    };
    QD_FN void head(const wblock *w, whead &r)
    {
        r.e = w->e;
    }
    QD_FN float finish(const whead &r, float ad, int isum, int imin)
    {
        const float d = quant_e8m0_to_f32_half((uint8_t)r.e) * ad;
        return d * (float)isum;
    }
};

/* Q2_K: sub-block s = 8 hf + 2 k + p (16 elements, 4-bit scale and 4-bit min in scales[s]) holds elements
 * 128 hf + 32 k + 16 p + l, the 2-bit field at shift 2k of qs[32 hf + 16 p + l]; chunk c = 2 hf + p holds
 * k = 0..3 (Q6_K's order), thread t takes l = 4t .. 4t+3: one 4-byte load (blocks of 84 bytes, qs at 16). The
 * mins' integer: each sub-block's min against its activation elements (the bsums of dot_q2_K). */
struct mma_q2_K : mma_sub16<mma_q2_K, quant_block_q2_K> {
    static constexpr bool HAS_MIN = true;
    struct whead {
        uint32_t sc[4]; /* scales[16]: scale | min << 4 of sub-blocks 4i .. 4i+3 */
        uint32_t dd;    /* d | dmin << 16 */
    };
    QD_FN void head(const wblock *w, whead &r)
    {
#pragma unroll
        for (int i = 0; i < 4; i++)
            r.sc[i] = (uint32_t)qd_load_a4(w->scales + 4 * i);
        r.dd = (uint32_t)qd_load_a4(&w->d); /* d at 80, dmin at 82 */
    }
    QD_FN void chunk(const wblock *w, int t, int c, int (&q)[SPC][KR])
    {
        const int v = qd_load_a4(w->qs + 32 * (c / 2) + 16 * (c % 2) + 4 * t);
#pragma unroll
        for (int k = 0; k < 4; k++)
            q[k][0] = (v >> (2 * k)) & 0x03030303;
    }
    QD_FN int scale(const whead &r, int s)
    {
        return (int)((r.sc[s / 4] >> 8 * (s % 4)) & 0xfu);
    }
    QD_FN int minb(const whead &r, int s)
    {
        return (int)qd_byte_perm((r.sc[s / 4] >> 4) & 0x0f0f0f0fu, 0, (s % 4) * 0x1111u);
    }
    QD_FN float finish(const whead &r, float ad, int isum, int imin)
    {
        return k4_finish_dd(r.dd, ad, isum, imin); /* dot_q2_K */
    }
};

/* Q3_K: Q2_K's sub-blocks and fragments; the level is the 2-bit field minus 4 where bit 4 hf + k of
 * hmask[16 p + l] is clear (dot_q3_K), the scales q3k_scale's 6-bit values minus 32, decoded four at a time:
 * sub-blocks 4i .. 4i+3 take the low (i = 0, 1) or high (i = 2, 3) nibbles of scales[4 (i % 2) ..] and bits
 * 2i, 2i+1 of scales[8 ..]. Blocks of 110 bytes: 2-byte loads. */
struct mma_q3_K : mma_sub16<mma_q3_K, quant_block_q3_K> {
    typedef mma_sbyte_head<4> whead; /* scale - 32, d */
    QD_FN void head(const wblock *w, whead &r)
    {
        const uint32_t a0 = (uint32_t)qd_load_a2(w->scales), a1 = (uint32_t)qd_load_a2(w->scales + 4);
        const uint32_t a2 = (uint32_t)qd_load_a2(w->scales + 8);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t lo = ((i % 2 ? a1 : a0) >> (4 * (i / 2))) & 0x0f0f0f0fu;
            const uint32_t hi = (a2 >> (2 * i)) & 0x03030303u;
            r.sc[i] = (uint32_t)qd_vsub4((int)(lo | hi << 4), 0x20202020);
        }
        r.dd = w->d;
    }
    QD_FN void chunk(const wblock *w, int t, int c, int (&q)[SPC][KR])
    {
        const int hf = c / 2, p = c % 2;
        const int v = qd_load_a2(w->qs + 32 * hf + 16 * p + 4 * t);
        const int h = qd_load_a2(w->hmask + 16 * p + 4 * t);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int lo = (v >> (2 * k)) & 0x03030303;
            const int hi = ((h >> (4 * hf + k)) & 0x01010101) << 2;
            q[k][0] = qd_vsub4(lo | hi, 0x04040404);
        }
    }
    QD_FN int scale(const whead &r, int s)
    {
        return mma_sbyte(r.sc, s);
    }
};

/* ---- the lattice IQ types (quant_dot_iq.cuh's contract) ------------------------------------------------------
 * A sub-block is the span of one odd scale: a group of 32 (IQ2_XXS, IQ3_XXS, IQ3_S, IQ1_S: KR = 2, thread t
 * takes grid entry t, elements 8t .. 8t+7, as Q4_K's fragments) or half a group (IQ2_XS, IQ2_S, IQ1_M: KR = 1,
 * thread t takes half t % 2 of entry 2 (s % 2) + t / 2 of group s / 2, elements 16 s + 4t .. +3). The signs are
 * applied in the word (iq_signed4). IQ1's delta is folded into the element: 8 g + dsign (-9 .. 9), whose dot is
 * iq1_dot8's 8 sum g a + dsign sum a. ROW_K is the row's factor (qd_row, applied by the kernel last). */

/* The odd scale 2 v + 1 of the 4-bit field v at nibble s of sc. */
QD_FN int iq_odd_nibble(uint32_t sc, int s)
{
    return 2 * (int)((sc >> 4 * s) & 0xfu) + 1;
}

/* 8 g + dsign of the four int8 grid bytes -1 / 0 / 1 in v (dsign -1 when neg). */
QD_FN int iq1_level4(uint32_t v, bool neg)
{
    return qd_vsub4((int)((v << 3) & 0xf8f8f8f8u), neg ? 0x01010101 : (int)0xffffffffu);
}

/* The group types (sub-block s = group s = 2c + i): the odd scale of group s in nibble s of the head. */
template <typename TR, typename WB>
struct mma_iq_group : mma_qk<TR, WB, 2, 2> {
    struct whead {
        uint32_t sc; /* the 4-bit scale of group s at nibble s */
        uint32_t dd; /* d */
    };
    QD_FN int scale(const whead &r, int s)
    {
        return iq_odd_nibble(r.sc, s);
    }
};

/* The 4-bit scales of groups 0..7 from the top nibbles of the groups' aux words at aux + 4s (IQ2_XXS: uint16
 * qs, IQ3_XXS: bytes; 2-byte loads). */
template <typename T>
QD_FN uint32_t iq_aux_scales(const T *aux)
{
    uint32_t sc = 0;
#pragma unroll
    for (int s = 0; s < 8; s++)
        sc |= ((uint32_t)qd_load_a2(aux + 4 * s) >> 28) << 4 * s;
    return sc;
}

/* Group s: four grid-index bytes, then four 7-bit sign indices and the scale in the uint16 pair at qs + 4s
 * (blocks of 66 bytes: 2-byte loads). */
struct mma_iq2_xxs : mma_iq_group<mma_iq2_xxs, quant_block_iq2_xxs> {
    static constexpr float ROW_K = 0.125f;
    QD_FN void head(const wblock *w, whead &r)
    {
        r.sc = iq_aux_scales(w->qs + 2);
        r.dd = w->d;
    }
    QD_FN void chunk(const wblock *w, int t, int c, int (&q)[SPC][KR])
    {
#pragma unroll
        for (int i = 0; i < SPC; i++) {
            const int s = 2 * c + i;
            const uint32_t idx = (uint32_t)qd_load_a2(w->qs + 4 * s), aux = (uint32_t)qd_load_a2(w->qs + 4 * s + 2);
            const uint64_t g = iq2xxs_grid_at(idx, t);
            const uint32_t sg = iq_aux_signs(aux, t);
            q[i][0] = iq_signed4((uint32_t)g, sg & 15u);
            q[i][1] = iq_signed4((uint32_t)(g >> 32), sg >> 4);
        }
    }
};

/* Group s: grid indices qs[8s .. 8s+7] (4 elements each), the signs and scale in the uint32 at qs[64 + 4s]
 * (blocks of 98 bytes: 2-byte loads). */
struct mma_iq3_xxs : mma_iq_group<mma_iq3_xxs, quant_block_iq3_xxs> {
    static constexpr float ROW_K = 0.25f;
    QD_FN void head(const wblock *w, whead &r)
    {
        r.sc = iq_aux_scales(w->qs + QUANT_QK_K / 4);
        r.dd = w->d;
    }
    QD_FN void chunk(const wblock *w, int t, int c, int (&q)[SPC][KR])
    {
#pragma unroll
        for (int i = 0; i < SPC; i++) {
            const int s = 2 * c + i;
            const uint32_t aux = (uint32_t)qd_load_a2(w->qs + QUANT_QK_K / 4 + 4 * s);
            const uint32_t sg = iq_aux_signs(aux, t);
            q[i][0] = iq_signed4(IQ_TAB(iq3xxs_grid)[w->qs[8 * s + 2 * t]], sg & 15u);
            q[i][1] = iq_signed4(IQ_TAB(iq3xxs_grid)[w->qs[8 * s + 2 * t + 1]], sg >> 4);
        }
    }
};

/* Group s: qs[8s ..] with 9th bits in qh[s], sign bytes signs[4s ..], the scale nibble s of scales[4]
 * (blocks of 110 bytes: 2-byte loads); no row factor. */
struct mma_iq3_s : mma_iq_group<mma_iq3_s, quant_block_iq3_s> {
    QD_FN void head(const wblock *w, whead &r)
    {
        r.sc = (uint32_t)qd_load_a2(w->scales);
        r.dd = w->d;
    }
    QD_FN void chunk(const wblock *w, int t, int c, int (&q)[SPC][KR])
    {
#pragma unroll
        for (int i = 0; i < SPC; i++) {
            const int s = 2 * c + i, qh = w->qh[s];
            const uint32_t sg = w->signs[4 * s + t];
            q[i][0] = iq_signed4(iq3s_grid_at(w->qs[8 * s + 2 * t], qh, 2 * t), sg & 15u);
            q[i][1] = iq_signed4(iq3s_grid_at(w->qs[8 * s + 2 * t + 1], qh, 2 * t + 1), sg >> 4);
        }
    }
};

/* Group s: qs[4s ..] with 3 index bits each, the scale (bits 12-14) and the delta sign (bit 15) in qh[s]
 * (blocks of 50 bytes: 2-byte loads). */
struct mma_iq1_s : mma_iq_group<mma_iq1_s, quant_block_iq1_s> {
    static constexpr float ROW_K = 0.125f;
    QD_FN void head(const wblock *w, whead &r)
    {
        r.sc = 0;
#pragma unroll
        for (int s = 0; s < 8; s++)
            r.sc |= (uint32_t)((w->qh[s] >> 12) & 7) << 4 * s;
        r.dd = w->d;
    }
    QD_FN void chunk(const wblock *w, int t, int c, int (&q)[SPC][KR])
    {
#pragma unroll
        for (int i = 0; i < SPC; i++) {
            const int s = 2 * c + i, qh = w->qh[s];
            const uint64_t g = iq1s_grid_at(w->qs[4 * s + t], qh, t);
            q[i][0] = iq1_level4((uint32_t)g, qh & 0x8000);
            q[i][1] = iq1_level4((uint32_t)(g >> 32), qh & 0x8000);
        }
    }
};

/* The half-group types (16-element sub-blocks s = 4c + i, KR = 1): the odd scale of sub-block s in nibble s % 8
 * of scale word s / 8, the words the 8 bytes of scales[] (IQ1_M reads its own). */
template <typename TR, typename WB>
struct mma_iq_half : mma_qk<TR, WB, 4, 1> {
    struct whead {
        uint32_t sc[2]; /* IQ2_XS, IQ2_S: the 4-bit scales of sub-blocks 8k .. 8k+7, one a nibble; IQ1_M: scales as
                         * two little-endian uint32 (uint16s 0, 1 and 2, 3) */
        uint32_t dd;    /* d */
    };
    QD_FN void head(const WB *w, whead &r)
    {
        r.sc[0] = (uint32_t)qd_load_a2(w->scales);
        r.sc[1] = (uint32_t)qd_load_a2(w->scales + 4);
        r.dd = w->d;
    }
    QD_FN int scale(const whead &r, int s)
    {
        return iq_odd_nibble(r.sc[s / 8], s % 8);
    }
};

/* Sub-block s: half s % 2 of group s / 2, entries qs[4 (s / 2) + 2 (s % 2) + 0, 1] (a 9-bit grid index and a
 * 7-bit sign index each), the scale nibble s of scales[8] (blocks of 74 bytes: 2-byte loads). */
struct mma_iq2_xs : mma_iq_half<mma_iq2_xs, quant_block_iq2_xs> {
    static constexpr float ROW_K = 0.125f;
    QD_FN void chunk(const wblock *w, int t, int c, int (&q)[SPC][KR])
    {
#pragma unroll
        for (int i = 0; i < SPC; i++) {
            const int s = 4 * c + i;
            const uint32_t e = w->qs[4 * (s / 2) + 2 * (s % 2) + t / 2];
            const uint64_t g = iq2xs_grid_at(e);
            const uint32_t sg = iq2xs_signs_at(e);
            q[i][0] = iq_signed4((uint32_t)(g >> 32 * (t % 2)), (sg >> 4 * (t % 2)) & 15u);
        }
    }
};

/* As IQ2_XS: entry l of group j has the 10-bit index qs[4j + l] | bits 2l, 2l+1 of qh[j] << 8 and the sign byte
 * qs[32 + 4j + l] (blocks of 82 bytes). */
struct mma_iq2_s : mma_iq_half<mma_iq2_s, quant_block_iq2_s> {
    static constexpr float ROW_K = 0.125f;
    QD_FN void chunk(const wblock *w, int t, int c, int (&q)[SPC][KR])
    {
#pragma unroll
        for (int i = 0; i < SPC; i++) {
            const int s = 4 * c + i, j = s / 2, l = 2 * (s % 2) + t / 2;
            const uint64_t g = iq2s_grid_at(w->qs[4 * j + l], w->qh[j], l);
            const uint32_t sg = w->qs[QUANT_QK_K / 8 + 4 * j + l];
            q[i][0] = iq_signed4((uint32_t)(g >> 32 * (t % 2)), (sg >> 4 * (t % 2)) & 15u);
        }
    }
};

/* Sub-block s: half s % 2 of group s / 2; entry l = 2 (s % 2) + t / 2 has index qs[4 (s / 2) + l] | 3 bits of
 * nibble t / 2 of qh[s] << 8 and that nibble's bit 3 as its delta sign; the 3-bit scale of sub-block s is bits
 * 3 (s % 4) .. of the uint16 s / 4 of scales, whose top nibbles are d (iq1m_d). Blocks of 56 bytes. */
struct mma_iq1_m : mma_iq_half<mma_iq1_m, quant_block_iq1_m> {
    static constexpr float ROW_K = 0.125f;
    QD_FN void head(const wblock *w, whead &r)
    {
        r.sc[0] = (uint32_t)qd_load_a2(w->scales);
        r.sc[1] = (uint32_t)qd_load_a2(w->scales + 4);
        r.dd = iq1m_d(w);
    }
    QD_FN void chunk(const wblock *w, int t, int c, int (&q)[SPC][KR])
    {
#pragma unroll
        for (int i = 0; i < SPC; i++) {
            const int s = 4 * c + i, l = 2 * (s % 2) + t / 2;
            const int nib = (w->qh[s] >> (4 * (t / 2))) & 0xf;
            const uint64_t g = iq1m_grid_at(w->qs[4 * (s / 2) + l], nib);
            q[i][0] = iq1_level4((uint32_t)(g >> 32 * (t % 2)), nib & 8);
        }
    }
    QD_FN int scale(const whead &r, int s)
    {
        return 2 * (int)((r.sc[s / 8] >> (16 * ((s / 4) % 2) + 3 * (s % 4))) & 7u) + 1;
    }
};

/* X(type, traits) for every type of the mma kernel: expert_mma.cu's dispatch and cuda_expert_mma_supported,
 * check_cuda_host's emulation. */
#define MMA_TYPES(X)                                                                                               \
    X(GUILD_TYPE_Q4_K, mma_q4_K)                                                                                   \
    X(GUILD_TYPE_Q6_K, mma_q6_K)                                                                                   \
    X(GUILD_TYPE_Q5_K, mma_q5_K)                                                                                   \
    X(GUILD_TYPE_IQ4_XS, mma_iq4_xs)                                                                               \
    X(GUILD_TYPE_Q8_0, mma_q8_0)                                                                                   \
    X(GUILD_TYPE_MXFP4, mma_mxfp4)                                                                                 \
    X(GUILD_TYPE_Q2_K, mma_q2_K)                                                                                   \
    X(GUILD_TYPE_Q3_K, mma_q3_K)                                                                                   \
    X(GUILD_TYPE_IQ2_XXS, mma_iq2_xxs)                                                                             \
    X(GUILD_TYPE_IQ2_XS, mma_iq2_xs)                                                                               \
    X(GUILD_TYPE_IQ2_S, mma_iq2_s)                                                                                 \
    X(GUILD_TYPE_IQ3_XXS, mma_iq3_xxs)                                                                             \
    X(GUILD_TYPE_IQ3_S, mma_iq3_s)                                                                                 \
    X(GUILD_TYPE_IQ1_S, mma_iq1_s)                                                                                 \
    X(GUILD_TYPE_IQ1_M, mma_iq1_m)                                                                                 \
    X(GUILD_TYPE_Q4_0, mma_q4_0)                                                                                   \
    X(GUILD_TYPE_Q5_0, mma_q5_0)                                                                                   \
    X(GUILD_TYPE_IQ4_NL, mma_iq4_nl)

#endif
