/* gpu-worker/dense/cuda/quant_dot.cuh — the per-type block dot products of cuda_matmul, split over TPB threads.
 *
 * Each type's traits give, for a weight block and its activation block (quant_type_info()->dot_type):
 *   partial(w, a, j, &isum, &imin)   the integer sums of thread j's share of the block (0 <= j < TPB);
 *                                    summed over the TPB threads they are EXACTLY the reference's isum/imin
 *   finish(w, a, isum, imin)         the block's float contribution, with the operations of the reference
 *                                    (core/quant/dot_ref.c's contract), so the row's result is the same bits
 *                                    once the contributions are added in block order.
 * Loads follow the alignment of each layout (2 bytes for the 34/18/22-byte blocks, 4 for the others).
 * Everything here is __host__ __device__: the SIMD-in-a-word intrinsics have host emulations below, so
 * tests/cuda/check_cuda_host.c checks every type's split against the C reference on a machine without a GPU.
 */
#ifndef GUILD_GPU_WORKER_CUDA_QUANT_DOT_CUH
#define GUILD_GPU_WORKER_CUDA_QUANT_DOT_CUH

#include <cuda_fp16.h>

#include "gpu-worker/dense/cuda/cuda_common.cuh"

#define QD_FN static __host__ __device__ __forceinline__

/* __dp4a: c + the sum of the four signed byte products of a and b. */
QD_FN int qd_dp4a(int a, int b, int c)
{
#ifdef __CUDA_ARCH__
    return __dp4a(a, b, c);
#else
    for (int i = 0; i < 4; i++)
        c += (int)(int8_t)(a >> 8 * i) * (int)(int8_t)(b >> 8 * i);
    return c;
#endif
}

/* __vsub4: per-byte a - b, modulo 256. */
QD_FN int qd_vsub4(int a, int b)
{
#ifdef __CUDA_ARCH__
    return (int)__vsub4((unsigned)a, (unsigned)b);
#else
    uint32_t r = 0;
    for (int i = 0; i < 4; i++) {
        const uint32_t d = ((uint32_t)a >> 8 * i) - ((uint32_t)b >> 8 * i);
        r |= (d & 0xffu) << 8 * i;
    }
    return (int)r;
#endif
}

/* __byte_perm with selectors 0..7 (no sign replication): byte i of the result is byte (s >> 4i) & 7 of
 * the 8 bytes y:x. */
QD_FN uint32_t qd_byte_perm(uint32_t x, uint32_t y, uint32_t s)
{
#ifdef __CUDA_ARCH__
    return __byte_perm(x, y, s);
#else
    const uint64_t v = (uint64_t)y << 32 | x;
    uint32_t r = 0;
    for (int i = 0; i < 4; i++)
        r |= (uint32_t)(uint8_t)(v >> 8 * ((s >> 4 * i) & 7)) << 8 * i;
    return r;
#endif
}

/* fp16 bits -> float: the hardware conversion on the device (exact, as quant_f16_to_f32 is for every
 * non-NaN value; block scales are never NaN in a valid file), core/quant/fp16.h's on the host. */
QD_FN float qd_f16(uint16_t h)
{
#ifdef __CUDA_ARCH__
    return __half2float(__ushort_as_half(h));
#else
    return quant_f16_to_f32(h);
#endif
}

/* 16 bytes at a 16-byte aligned address, as four little-endian ints. */
QD_FN void qd_load16(const void *p, int *v)
{
    const int4 x = *(const int4 *)p;
    v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
}

/* Little-endian 32-bit loads at the alignment the block layouts guarantee. */
QD_FN int qd_load_a2(const void *p)
{
    const uint16_t *h = (const uint16_t *)p;
    return (int)((uint32_t)h[0] | (uint32_t)h[1] << 16);
}

QD_FN int qd_load_a4(const void *p)
{
    return *(const int *)p;
}

/* kvalues_iq4nl of core/quant/iq_tables.c (ggml's values), packed 4 per uint32, little-endian. */
#define IQ4NL_W0 0xbfad9881u /* -127 -104 -83 -65 */
#define IQ4NL_W1 0xf6eaddcfu /* -49 -35 -22 -10 */
#define IQ4NL_W2 0x26190d01u /* 1 13 25 38 */
#define IQ4NL_W3 0x71594535u /* 53 69 89 113 */

/* The four int8 levels of the four nibbles (bits 0-3, 8-11, 16-19, 24-27) of v, packed as v is. */
QD_FN int iq4nl_lookup4(uint32_t v)
{
    /* __byte_perm picks bytes of (lo, hi) by 3-bit selectors: nibble bits 0-2 choose within a half table,
     * bit 3 chooses the half. */
    const uint32_t sel = (v & 0x07u) | (v >> 4 & 0x70u) | (v >> 8 & 0x700u) | (v >> 12 & 0x7000u);
    const uint32_t lo = qd_byte_perm(IQ4NL_W0, IQ4NL_W1, sel);
    const uint32_t hi = qd_byte_perm(IQ4NL_W2, IQ4NL_W3, sel);
    const uint32_t half = v & 0x08080808u; /* bit 3 of each nibble */
    const uint32_t mask = (half >> 3) * 0xffu; /* 0xff in each byte whose nibble is >= 8 */
    return (int)((lo & ~mask) | (hi & mask));
}

/* kvalues_mxfp4 of core/quant/iq_tables.c (E2M1 values doubled), packed 4 per uint32, little-endian. */
#define MXFP4_W0 0x03020100u /* 0 1 2 3 */
#define MXFP4_W1 0x0c080604u /* 4 6 8 12 */
#define MXFP4_W2 0xfdfeff00u /* 0 -1 -2 -3 */
#define MXFP4_W3 0xf4f8fafcu /* -4 -6 -8 -12 */

/* As iq4nl_lookup4, through the mxfp4 levels. */
QD_FN int mxfp4_lookup4(uint32_t v)
{
    const uint32_t sel = (v & 0x07u) | (v >> 4 & 0x70u) | (v >> 8 & 0x700u) | (v >> 12 & 0x7000u);
    const uint32_t lo = qd_byte_perm(MXFP4_W0, MXFP4_W1, sel);
    const uint32_t hi = qd_byte_perm(MXFP4_W2, MXFP4_W3, sel);
    const uint32_t mask = ((v & 0x08080808u) >> 3) * 0xffu;
    return (int)((lo & ~mask) | (hi & mask));
}

/* Four bytes at any address (the 17-byte MXFP4 blocks align nothing), little-endian. */
QD_FN int qd_load_a1(const uint8_t *p)
{
    return (int)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

/* The finish d(w) * d(a) * isum of the types without mins: wd the weight block's fp16 scale, ad the activation's
 * as a float. */
QD_FN float qd_finish(quant_half_t wd, float ad, int isum)
{
    const float d = qd_f16(wd) * ad;
    return d * (float)isum;
}

/* ---- 32-element blocks --------------------------------------------------------------------------------- */

/* The types against Q8_0 (TR: the traits themselves): thread j of TPB = 4 takes qs bytes 4j .. 4j+3, whose low
 * nibbles are elements 4j .. 4j+3 and high nibbles 16 + 4j .. 16 + 4j + 3; TR::levels(w, j, lo, hi) gives their
 * int8 levels, four to a word (the mma kernel's fragments too: expert_mma_traits.cuh). */
template <typename TR, typename WB>
struct dot_b32 {
    typedef WB wblock;
    typedef quant_block_q8_0 ablock;
    static constexpr int TPB = 4;
    static constexpr bool HAS_MIN = false; /* imin is used */
    QD_FN void partial(const wblock *w, const ablock *a, int j, int &isum, int &imin)
    {
        int lo, hi;
        TR::levels(w, j, lo, hi);
        isum = qd_dp4a(lo, qd_load_a2(a->qs + 4 * j), 0);
        isum = qd_dp4a(hi, qd_load_a2(a->qs + 16 + 4 * j), isum);
        imin = 0;
    }
    QD_FN float finish(const wblock *w, const ablock *a, int isum, int imin)
    {
        return qd_finish(w->d, qd_f16(a->d), isum);
    }
};

/* Thread j: elements 8j .. 8j+7 of both blocks (8 elements per thread). */
struct dot_q8_0 : dot_b32<dot_q8_0, quant_block_q8_0> {
    QD_FN void partial(const wblock *w, const ablock *a, int j, int &isum, int &imin)
    {
        isum = qd_dp4a(qd_load_a2(w->qs + 8 * j), qd_load_a2(a->qs + 8 * j), 0);
        isum = qd_dp4a(qd_load_a2(w->qs + 8 * j + 4), qd_load_a2(a->qs + 8 * j + 4), isum);
        imin = 0;
    }
};

struct dot_q4_0 : dot_b32<dot_q4_0, quant_block_q4_0> {
    QD_FN void levels(const wblock *w, int j, int &lo, int &hi)
    {
        const int v = qd_load_a2(w->qs + 4 * j);
        lo = qd_vsub4(v & 0x0f0f0f0f, 0x08080808);
        hi = qd_vsub4((v >> 4) & 0x0f0f0f0f, 0x08080808);
    }
};

struct dot_iq4_nl : dot_b32<dot_iq4_nl, quant_block_iq4_nl> {
    QD_FN void levels(const wblock *w, int j, int &lo, int &hi)
    {
        const uint32_t v = (uint32_t)qd_load_a2(w->qs + 4 * j);
        lo = iq4nl_lookup4(v & 0x0f0f0f0fu);
        hi = iq4nl_lookup4((v >> 4) & 0x0f0f0f0fu);
    }
};

/* The 5th bits of elements e0 .. e0+3 (bit e of qh) moved to bit 4 of each byte. */
QD_FN int q5_high4(uint32_t qh, int e0)
{
    const uint32_t b = qh >> e0;
    return (int)(((b & 1u) << 4) | ((b & 2u) << 11) | ((b & 4u) << 18) | ((b & 8u) << 25));
}

struct dot_q5_0 : dot_b32<dot_q5_0, quant_block_q5_0> {
    QD_FN void levels(const wblock *w, int j, int &lo, int &hi)
    {
        const uint32_t qh = (uint32_t)qd_load_a2(w->qh);
        const int v = qd_load_a2(w->qs + 4 * j);
        lo = qd_vsub4((v & 0x0f0f0f0f) | q5_high4(qh, 4 * j), 0x10101010);
        hi = qd_vsub4(((v >> 4) & 0x0f0f0f0f) | q5_high4(qh, 16 + 4 * j), 0x10101010);
    }
};

/* As Q4_0 through the mxfp4 levels; the block scale is the E8M0 half of core/quant/fp16.h (exact on both sides:
 * integer bit arithmetic). Byte loads: blocks of 17 bytes. */
struct dot_mxfp4 : dot_b32<dot_mxfp4, quant_block_mxfp4> {
    QD_FN void levels(const wblock *w, int j, int &lo, int &hi)
    {
        const uint32_t v = (uint32_t)qd_load_a1(w->qs + 4 * j);
        lo = mxfp4_lookup4(v & 0x0f0f0f0fu);
        hi = mxfp4_lookup4((v >> 4) & 0x0f0f0f0fu);
    }
    QD_FN float finish(const wblock *w, const ablock *a, int isum, int imin)
    {
        const float d = quant_e8m0_to_f32_half(w->e) * qd_f16(a->d);
        return d * (float)isum;
    }
};

/* The types with a min against Q8_1 (blocks of 20 and 24 bytes: 4-byte loads): thread j as in dot_b32, the
 * levels unsigned; the finish adds m(w) * s(a). */
template <typename TR, typename WB>
struct dot_b32_min {
    typedef WB wblock;
    typedef quant_block_q8_1 ablock;
    static constexpr int TPB = 4;
    static constexpr bool HAS_MIN = false; /* imin is used */
    QD_FN void partial(const wblock *w, const ablock *a, int j, int &isum, int &imin)
    {
        int lo, hi;
        TR::levels(w, j, lo, hi);
        isum = qd_dp4a(lo, qd_load_a4(a->qs + 4 * j), 0);
        isum = qd_dp4a(hi, qd_load_a4(a->qs + 16 + 4 * j), isum);
        imin = 0;
    }
    QD_FN float finish(const wblock *w, const ablock *a, int isum, int imin)
    {
        const float d = qd_f16(w->d) * qd_f16(a->d);
        const float m = qd_f16(w->m) * qd_f16(a->s);
        const float t = d * (float)isum;
        return t + m;
    }
};

struct dot_q4_1 : dot_b32_min<dot_q4_1, quant_block_q4_1> {
    QD_FN void levels(const wblock *w, int j, int &lo, int &hi)
    {
        const int v = qd_load_a4(w->qs + 4 * j);
        lo = v & 0x0f0f0f0f;
        hi = (v >> 4) & 0x0f0f0f0f;
    }
};

struct dot_q5_1 : dot_b32_min<dot_q5_1, quant_block_q5_1> {
    QD_FN void levels(const wblock *w, int j, int &lo, int &hi)
    {
        const uint32_t qh = (uint32_t)qd_load_a4(w->qh);
        const int v = qd_load_a4(w->qs + 4 * j);
        lo = (v & 0x0f0f0f0f) | q5_high4(qh, 4 * j);
        hi = ((v >> 4) & 0x0f0f0f0f) | q5_high4(qh, 16 + 4 * j);
    }
};

/* ---- K quants against Q8_K ------------------------------------------------------------------------------ */

/* What the types against Q8_K share: TPB threads a block; no mins and the finish d(w) * d(a) * isum unless the
 * type has mins (dot_qk_min). */
template <typename WB, int TPB_>
struct dot_qk {
    typedef WB wblock;
    typedef quant_block_q8_K ablock;
    static constexpr int TPB = TPB_;
    static constexpr bool HAS_MIN = false; /* imin is used */
    QD_FN float finish(const wblock *w, const ablock *a, int isum, int imin)
    {
        return qd_finish(w->d, a->d, isum);
    }
};

/* The 6-bit scale and min j (0..7) of a Q4_K/Q5_K block (quant_k4_scale_min). */
QD_FN void k4_scale_min(int j, const uint8_t *q, int &sc, int &m)
{
    if (j < 4) {
        sc = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
    }
}

QD_FN float k4_finish(quant_half_t wd, quant_half_t wdmin, float ad, int isum, int imin)
{
    const float d = qd_f16(wd) * ad;
    const float dmin = qd_f16(wdmin) * ad;
    const float t1 = d * (float)isum;
    const float t2 = dmin * (float)imin;
    return t1 - t2;
}

/* The types with mins (Q4_K, Q5_K, Q2_K): d * isum - dmin * imin. */
template <typename WB, int TPB_>
struct dot_qk_min : dot_qk<WB, TPB_> {
    static constexpr bool HAS_MIN = true; /* imin is used */
    QD_FN float finish(const WB *w, const quant_block_q8_K *a, int isum, int imin)
    {
        return k4_finish(w->d, w->dmin, a->d, isum, imin);
    }
};

/* Thread j of Q4_K and Q5_K: 64-element chunk c = j / 2, half h = j % 2: TR::levels(w, c, h, lo, hi) gives the
 * elements 64c + 16h + 4i .. +3 (sub-block 2c) and 64c + 32 + 16h + 4i .. +3 (sub-block 2c + 1) of i = 0..3,
 * four to a word. (8 threads a block were faster than 4 on the H200.) */
template <typename TR, typename WB>
struct dot_k4 : dot_qk_min<WB, 8> {
    QD_FN void partial(const WB *w, const quant_block_q8_K *a, int j, int &isum, int &imin)
    {
        const int c = j / 2, h = j % 2;
        int lo[4], hi[4];
        TR::levels(w, c, h, lo, hi);
        const int *alo = (const int *)(a->qs + 64 * c + 16 * h);
        const int *ahi = (const int *)(a->qs + 64 * c + 32 + 16 * h);
        int dlo = 0, dhi = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            dlo = qd_dp4a(lo[i], alo[i], dlo);
            dhi = qd_dp4a(hi[i], ahi[i], dhi);
        }
        int sc0, m0, sc1, m1;
        k4_scale_min(2 * c, w->scales, sc0, m0);
        k4_scale_min(2 * c + 1, w->scales, sc1, m1);
        isum = sc0 * dlo + sc1 * dhi;
        imin = m0 * a->bsums[4 * c + h] + m1 * a->bsums[4 * c + 2 + h];
    }
};

/* Q4_K: qs bytes 32c + 16h .. +15, low nibbles sub-block 2c, high nibbles 2c + 1. */
struct dot_q4_K : dot_k4<dot_q4_K, quant_block_q4_K> {
    QD_FN void levels(const wblock *w, int c, int h, int (&lo)[4], int (&hi)[4])
    {
        int q[4];
        qd_load16(w->qs + 32 * c + 16 * h, q); /* blocks of 144 bytes: 16-byte aligned rows keep qs aligned */
#pragma unroll
        for (int i = 0; i < 4; i++) {
            lo[i] = q[i] & 0x0f0f0f0f;
            hi[i] = (q[i] >> 4) & 0x0f0f0f0f;
        }
    }
};

/* As Q4_K; the 5th bit of element e is bit e / 32 of qh[e % 32]. */
struct dot_q5_K : dot_k4<dot_q5_K, quant_block_q5_K> {
    QD_FN void levels(const wblock *w, int c, int h, int (&lo)[4], int (&hi)[4])
    {
        int q[4], qh[4];
        qd_load16(w->qs + 32 * c + 16 * h, q); /* blocks of 176 bytes: qs at 48, qh at 16, both aligned */
        qd_load16(w->qh + 16 * h, qh);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            lo[i] = (q[i] & 0x0f0f0f0f) | (((qh[i] >> (2 * c)) & 0x01010101) << 4);
            hi[i] = ((q[i] >> 4) & 0x0f0f0f0f) | (((qh[i] >> (2 * c + 1)) & 0x01010101) << 4);
        }
    }
};

/* Thread j: half hf = j / 8, l0 = 4 (j % 8); for each quarter k the four elements 128 hf + 32 k + l0 + i,
 * low bits from ql[64 hf + 32 (k % 2) + l0 + i] (nibble k / 2), high bits 2k of qh[32 hf + l0 + i]; all four
 * in sub-block 8 hf + 2 k + (j % 8) / 4. */
struct dot_q6_K : dot_qk<quant_block_q6_K, 16> {
    QD_FN void partial(const wblock *w, const ablock *a, int j, int &isum, int &imin)
    {
        const int hf = j / 8, r = j % 8, l0 = 4 * r;
        const int ql0 = qd_load_a2(w->ql + 64 * hf + l0);
        const int ql1 = qd_load_a2(w->ql + 64 * hf + 32 + l0);
        const int qh = qd_load_a2(w->qh + 32 * hf + l0);
        const int *av = (const int *)(a->qs + 128 * hf + l0);
        const int8_t *sc = w->scales + 8 * hf + r / 4;
        int s = 0;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int lo = ((k % 2 ? ql1 : ql0) >> (4 * (k / 2))) & 0x0f0f0f0f;
            const int hi = ((qh >> (2 * k)) & 0x03030303) << 4;
            const int q = qd_vsub4(lo | hi, 0x20202020);
            s += sc[2 * k] * qd_dp4a(q, av[8 * k], 0); /* a->qs + 128 hf + 32 k + l0 */
        }
        isum = s;
        imin = 0;
    }
};

/* Thread j: sub-block ib = j / 2, part p = j % 2: qs bytes 16 ib + 8p .. +7, low nibbles elements
 * 32 ib + 8p + i, high nibbles 32 ib + 16 + 8p + i. */
struct dot_iq4_xs : dot_qk<quant_block_iq4_xs, 16> {
    QD_FN void partial(const wblock *w, const ablock *a, int j, int &isum, int &imin)
    {
        const int ib = j / 2, p = j % 2;
        const uint32_t *q = (const uint32_t *)(w->qs + 16 * ib + 8 * p);
        const int *alo = (const int *)(a->qs + 32 * ib + 8 * p);
        const int *ahi = (const int *)(a->qs + 32 * ib + 16 + 8 * p);
        int s = 0;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            s = qd_dp4a(iq4nl_lookup4(q[i] & 0x0f0f0f0fu), alo[i], s);
            s = qd_dp4a(iq4nl_lookup4((q[i] >> 4) & 0x0f0f0f0fu), ahi[i], s);
        }
        const int ls = ((w->scales_l[ib / 2] >> 4 * (ib % 2)) & 0xf) | (((w->scales_h >> 2 * ib) & 3) << 4);
        isum = (ls - 32) * s;
        imin = 0;
    }
};

/* Q2_K: thread j takes sub-block s = j (16 elements, 128 hf + 32 k + 16 p + l with hf = j / 8, k = (j % 8) / 2,
 * p = j % 2): the 2-bit fields at shift 2k of qs[32 hf + 16 p .. +15]. Blocks of 84 bytes, qs at 16: 4-byte
 * loads. */
struct dot_q2_K : dot_qk_min<quant_block_q2_K, 16> {
    QD_FN void partial(const wblock *w, const ablock *a, int j, int &isum, int &imin)
    {
        const int hf = j / 8, k = (j % 8) / 2, p = j % 2;
        const uint8_t *q = w->qs + 32 * hf + 16 * p;
        const int *av = (const int *)(a->qs + 16 * j);
        int s = 0;
#pragma unroll
        for (int i = 0; i < 4; i++)
            s = qd_dp4a((qd_load_a4(q + 4 * i) >> (2 * k)) & 0x03030303, av[i], s);
        const int sc = w->scales[j];
        isum = (sc & 15) * s;
        imin = (sc >> 4) * a->bsums[j];
    }
};

/* The 6-bit scale of Q3_K sub-block j (0..15) minus 32 (quant_q3_K_scales). */
QD_FN int q3k_scale(const uint8_t *packed, int j)
{
    const int lo = j < 8 ? packed[j] & 0xF : packed[j - 8] >> 4;
    const int hi = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | hi << 4) - 32;
}

/* Q3_K: thread j takes sub-block j as Q2_K does; the level is the 2-bit field minus 4 where bit 4 hf + k of
 * hmask[16 p + l] is clear. Blocks of 110 bytes: 2-byte loads. */
struct dot_q3_K : dot_qk<quant_block_q3_K, 16> {
    QD_FN void partial(const wblock *w, const ablock *a, int j, int &isum, int &imin)
    {
        const int hf = j / 8, k = (j % 8) / 2, p = j % 2, hb = 4 * hf + k;
        const uint8_t *q = w->qs + 32 * hf + 16 * p;
        const uint8_t *hm = w->hmask + 16 * p;
        const int *av = (const int *)(a->qs + 16 * j);
        int s = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int lo = (qd_load_a2(q + 4 * i) >> (2 * k)) & 0x03030303;
            const int hi = ((qd_load_a2(hm + 4 * i) >> hb) & 0x01010101) << 2;
            s = qd_dp4a(qd_vsub4(lo | hi, 0x04040404), av[i], s);
        }
        isum = q3k_scale(w->scales, j) * s;
        imin = 0;
    }
};

/* One block's dot product in the reference's numbers, over the TPB lanes of a group (lane j of it): TR::partial
 * where ok (the block exists; 0 otherwise), the lanes' integer sums added exactly (group_sum_int: every lane of the
 * group must call it), TR::finish. cuda_matmul's row kernel (matmul.cu) and expert_mm.cu's take their block sums
 * from it. Not yet expert_pair.cu's and matmul_q_split_kernel's, which write the same steps inline: their sm_90 PTX
 * changes through it (the same arithmetic, other branches), unmeasured on a GPU. */
template <typename TR>
static __device__ __forceinline__ float qd_block(const typename TR::wblock *w, const typename TR::ablock *a, int j,
                                                 bool ok)
{
    int isum = 0, imin = 0;
    if (ok)
        TR::partial(w, a, j, isum, imin);
    isum = group_sum_int<TR::TPB>(isum);
    if (TR::HAS_MIN)
        imin = group_sum_int<TR::TPB>(imin);
    return ok ? TR::finish(w, a, isum, imin) : 0.0f;
}

#endif
