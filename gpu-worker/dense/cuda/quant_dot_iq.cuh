/* gpu-worker/dense/cuda/quant_dot_iq.cuh — quant_dot.cuh's traits for the lattice IQ types against Q8_K (IQ2_XXS,
 * IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M), core/quant/dot_iq.c's contract: thread j of a block (TPB = 8)
 * takes the 32 elements of group j, the grid entries' magnitudes with their signs applied in the word
 * (qd_vsub4 of v ^ m and m, m = 0xff in each negated byte), four at a time through dp4a, times the group's odd
 * integer scale; the finish is d * (float)isum and the row's sum ends with the format's factor (ROW_K, applied
 * by qd_row: 1/8, 1/4; IQ3_S has none).
 * The grids are read from core/quant/iq_tables.c's arrays on the host and from iq_grids.cuh's __device__ copies
 * on the device (IQ_TAB), so tests/cuda/check_cuda_host.cu checks every split against the reference without a
 * GPU and the tables against each other.
 */
#ifndef GUILD_GPU_WORKER_CUDA_QUANT_DOT_IQ_CUH
#define GUILD_GPU_WORKER_CUDA_QUANT_DOT_IQ_CUH

#include "gpu-worker/dense/cuda/iq_grids.cuh"
#include "gpu-worker/dense/cuda/quant_dot.cuh"

extern "C" {
#include "core/quant/iq_tables.h"
}

#ifdef __CUDA_ARCH__
#define IQ_TAB(name) iqd_##name
#else
#define IQ_TAB(name) quant_##name
#endif

/* The four bytes of v (magnitudes below 128) negated where bits 0..3 of s4 are set. */
QD_FN int iq_signed4(uint32_t v, uint32_t s4)
{
    const uint32_t m = ((s4 * 0x00204081u) & 0x01010101u) * 0xffu; /* bit i -> byte i (no carries: 4 bits) */
    return qd_vsub4((int)(v ^ m), (int)m);
}

/* acc + sum_j grid_j * sign_j * a[j] over the 8 elements of a grid entry (a 4-byte aligned). */
QD_FN int iq_dot8(uint64_t grid, uint32_t signs8, const int8_t *a, int acc)
{
    acc = qd_dp4a(iq_signed4((uint32_t)grid, signs8 & 15u), qd_load_a4(a), acc);
    return qd_dp4a(iq_signed4((uint32_t)(grid >> 32), signs8 >> 4), qd_load_a4(a + 4), acc);
}

/* 8 * sum_j grid_j * a[j] + dsign * sum_j a[j] over an iq1 entry (grid bytes int8 -1/0/1). */
QD_FN int iq1_dot8(uint64_t grid, int dsign, const int8_t *a)
{
    const int a0 = qd_load_a4(a), a1 = qd_load_a4(a + 4);
    const int sg = qd_dp4a((int)(uint32_t)(grid >> 32), a1, qd_dp4a((int)(uint32_t)grid, a0, 0));
    const int sa = qd_dp4a(0x01010101, a1, qd_dp4a(0x01010101, a0, 0));
    return 8 * sg + dsign * sa;
}

/* The row's final factor of the contract: ROW_K * sumf where the traits have ROW_K, sumf otherwise. */
template <typename TR, typename = void>
struct qd_row_k {
    QD_FN float apply(float s)
    {
        return s;
    }
};

template <typename TR>
struct qd_row_k<TR, decltype((void)TR::ROW_K)> {
    QD_FN float apply(float s)
    {
        return TR::ROW_K * s;
    }
};

template <typename TR>
QD_FN float qd_row(float sumf)
{
    return qd_row_k<TR>::apply(sumf);
}

QD_FN float iq_finish(quant_half_t wd, float ad, int isum)
{
    const float d = qd_f16(wd) * ad;
    return d * (float)isum;
}

/* Group j: qs bytes 8j .. 8j+7, four grid indices then 4 x 7 sign bits and the scale. Blocks of 66 bytes. */
struct dot_iq2_xxs {
    typedef quant_block_iq2_xxs wblock;
    typedef quant_block_q8_K ablock;
    static constexpr int TPB = 8;
    static constexpr bool HAS_MIN = false; /* imin is used */
    static constexpr float ROW_K = 0.125f;
    QD_FN void partial(const wblock *w, const ablock *a, int j, int &isum, int &imin)
    {
        const uint32_t idx = (uint32_t)qd_load_a2(w->qs + 4 * j), aux = (uint32_t)qd_load_a2(w->qs + 4 * j + 2);
        int s = 0;
#pragma unroll
        for (int l = 0; l < 4; l++)
            s = iq_dot8(IQ_TAB(iq2xxs_grid)[(idx >> 8 * l) & 0xff], IQ_TAB(ksigns_iq2xs)[(aux >> 7 * l) & 127],
                        a->qs + 32 * j + 8 * l, s);
        isum = (int)(2 * (aux >> 28) + 1) * s;
        imin = 0;
    }
    QD_FN float finish(const wblock *w, const ablock *a, int isum, int imin)
    {
        return iq_finish(w->d, a->d, isum);
    }
};

/* Group j: qs[4j .. 4j+3], a 9-bit grid index and a 7-bit sign index each; scales nibbles per 16. */
struct dot_iq2_xs {
    typedef quant_block_iq2_xs wblock;
    typedef quant_block_q8_K ablock;
    static constexpr int TPB = 8;
    static constexpr bool HAS_MIN = false; /* imin is used */
    static constexpr float ROW_K = 0.125f;
    QD_FN void partial(const wblock *w, const ablock *a, int j, int &isum, int &imin)
    {
        int s[2] = {0, 0};
#pragma unroll
        for (int l = 0; l < 4; l++) {
            const uint32_t q = w->qs[4 * j + l];
            s[l / 2] = iq_dot8(IQ_TAB(iq2xs_grid)[q & 511], IQ_TAB(ksigns_iq2xs)[q >> 9], a->qs + 32 * j + 8 * l,
                               s[l / 2]);
        }
        const int sc = w->scales[j];
        isum = (2 * (sc & 0xf) + 1) * s[0] + (2 * (sc >> 4) + 1) * s[1];
        imin = 0;
    }
    QD_FN float finish(const wblock *w, const ablock *a, int isum, int imin)
    {
        return iq_finish(w->d, a->d, isum);
    }
};

/* Group j: index bytes qs[4j ..], sign bytes qs[32 + 4j ..], the high index bits in qh[j]. */
struct dot_iq2_s {
    typedef quant_block_iq2_s wblock;
    typedef quant_block_q8_K ablock;
    static constexpr int TPB = 8;
    static constexpr bool HAS_MIN = false; /* imin is used */
    static constexpr float ROW_K = 0.125f;
    QD_FN void partial(const wblock *w, const ablock *a, int j, int &isum, int &imin)
    {
        const uint8_t *qs = w->qs + 4 * j, *signs = w->qs + QUANT_QK_K / 8 + 4 * j;
        const int qh = w->qh[j];
        int s[2] = {0, 0};
#pragma unroll
        for (int l = 0; l < 4; l++)
            s[l / 2] = iq_dot8(IQ_TAB(iq2s_grid)[qs[l] | ((qh << (8 - 2 * l)) & 0x300)], signs[l],
                               a->qs + 32 * j + 8 * l, s[l / 2]);
        const int sc = w->scales[j];
        isum = (2 * (sc & 0xf) + 1) * s[0] + (2 * (sc >> 4) + 1) * s[1];
        imin = 0;
    }
    QD_FN float finish(const wblock *w, const ablock *a, int isum, int imin)
    {
        return iq_finish(w->d, a->d, isum);
    }
};

/* Group j: grid indices qs[8j .. 8j+7] (4 elements each), signs and scale in the uint32 at qs[64 + 4j]. */
struct dot_iq3_xxs {
    typedef quant_block_iq3_xxs wblock;
    typedef quant_block_q8_K ablock;
    static constexpr int TPB = 8;
    static constexpr bool HAS_MIN = false; /* imin is used */
    static constexpr float ROW_K = 0.25f;
    QD_FN void partial(const wblock *w, const ablock *a, int j, int &isum, int &imin)
    {
        const uint8_t *qs = w->qs + 8 * j;
        const uint32_t aux = (uint32_t)qd_load_a2(w->qs + QUANT_QK_K / 4 + 4 * j);
        int s = 0;
#pragma unroll
        for (int l = 0; l < 4; l++) {
            const uint64_t g = (uint64_t)IQ_TAB(iq3xxs_grid)[qs[2 * l]] |
                               (uint64_t)IQ_TAB(iq3xxs_grid)[qs[2 * l + 1]] << 32;
            s = iq_dot8(g, IQ_TAB(ksigns_iq2xs)[(aux >> 7 * l) & 127], a->qs + 32 * j + 8 * l, s);
        }
        isum = (int)(2 * (aux >> 28) + 1) * s;
        imin = 0;
    }
    QD_FN float finish(const wblock *w, const ablock *a, int isum, int imin)
    {
        return iq_finish(w->d, a->d, isum);
    }
};

/* Group j: qs[8j ..] with 9th bits in qh[j], sign bytes signs[4j ..], scale nibble j % 2 of scales[j / 2]. */
struct dot_iq3_s {
    typedef quant_block_iq3_s wblock;
    typedef quant_block_q8_K ablock;
    static constexpr int TPB = 8;
    static constexpr bool HAS_MIN = false; /* imin is used */
    QD_FN void partial(const wblock *w, const ablock *a, int j, int &isum, int &imin)
    {
        const uint8_t *qs = w->qs + 8 * j, *signs = w->signs + 4 * j;
        const int qh = w->qh[j];
        int s = 0;
#pragma unroll
        for (int l = 0; l < 4; l++) {
            const uint64_t g = (uint64_t)IQ_TAB(iq3s_grid)[qs[2 * l] | ((qh << (8 - 2 * l)) & 256)] |
                               (uint64_t)IQ_TAB(iq3s_grid)[qs[2 * l + 1] | ((qh << (7 - 2 * l)) & 256)] << 32;
            s = iq_dot8(g, signs[l], a->qs + 32 * j + 8 * l, s);
        }
        isum = (2 * ((w->scales[j / 2] >> (4 * (j % 2))) & 0xf) + 1) * s;
        imin = 0;
    }
    QD_FN float finish(const wblock *w, const ablock *a, int isum, int imin)
    {
        return iq_finish(w->d, a->d, isum);
    }
};

/* Group j: qs[4j ..] with 3 index bits each, the scale and the delta sign in qh[j]. */
struct dot_iq1_s {
    typedef quant_block_iq1_s wblock;
    typedef quant_block_q8_K ablock;
    static constexpr int TPB = 8;
    static constexpr bool HAS_MIN = false; /* imin is used */
    static constexpr float ROW_K = 0.125f;
    QD_FN void partial(const wblock *w, const ablock *a, int j, int &isum, int &imin)
    {
        const uint8_t *qs = w->qs + 4 * j;
        const int qh = w->qh[j];
        const int dsign = qh & 0x8000 ? -1 : 1;
        int s = 0;
#pragma unroll
        for (int l = 0; l < 4; l++)
            s += iq1_dot8(IQ_TAB(iq1s_grid)[qs[l] | (((qh >> (3 * l)) & 7) << 8)], dsign, a->qs + 32 * j + 8 * l);
        isum = (2 * ((qh >> 12) & 7) + 1) * s;
        imin = 0;
    }
    QD_FN float finish(const wblock *w, const ablock *a, int isum, int imin)
    {
        return iq_finish(w->d, a->d, isum);
    }
};

/* The fp16 scale of an IQ1_M block from the top nibbles of its four uint16 scales (quant_iq1_m_d). */
QD_FN quant_half_t iq1m_d(const quant_block_iq1_m *b)
{
    uint32_t sc[4];
#pragma unroll
    for (int k = 0; k < 4; k++)
        sc[k] = (uint32_t)b->scales[2 * k] | (uint32_t)b->scales[2 * k + 1] << 8;
    return (quant_half_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
}

/* Group j: qs[4j ..], a nibble of qh[2j ..] per entry (3 index bits, the delta sign), two 3-bit scales (one per
 * 16 elements) in the uint16 scales[j / 2]. Blocks of 56 bytes, byte loads for the weights. */
struct dot_iq1_m {
    typedef quant_block_iq1_m wblock;
    typedef quant_block_q8_K ablock;
    static constexpr int TPB = 8;
    static constexpr bool HAS_MIN = false; /* imin is used */
    static constexpr float ROW_K = 0.125f;
    QD_FN void partial(const wblock *w, const ablock *a, int j, int &isum, int &imin)
    {
        const uint8_t *qs = w->qs + 4 * j, *qh = w->qh + 2 * j;
        const int sc = w->scales[2 * (j / 2)] | w->scales[2 * (j / 2) + 1] << 8;
        const int ls1 = 2 * ((sc >> (6 * (j % 2))) & 7) + 1, ls2 = 2 * ((sc >> (6 * (j % 2) + 3)) & 7) + 1;
        int s = 0;
#pragma unroll
        for (int l = 0; l < 4; l++) {
            const int nib = (qh[l / 2] >> (4 * (l % 2))) & 0xf;
            s += (l < 2 ? ls1 : ls2) *
                 iq1_dot8(IQ_TAB(iq1s_grid)[qs[l] | (nib & 7) << 8], nib & 8 ? -1 : 1, a->qs + 32 * j + 8 * l);
        }
        isum = s;
        imin = 0;
    }
    QD_FN float finish(const wblock *w, const ablock *a, int isum, int imin)
    {
        return iq_finish(iq1m_d(w), a->d, isum);
    }
};

/* ---- elements (dequant.cuh) ------------------------------------------------------------------------------- */

/* Element e of an IQ row as core/quant/dequant_iq.c computes it (same float operations); 0 for other types. */
QD_FN float iq_dequant_elem(guild_type_t type, const void *row, int64_t e)
{
    const int i = (int)(e % QUANT_QK_K), ib = i / 32, l = (i % 32) / 8, jj = i % 8;
    switch (type) {
    case GUILD_TYPE_IQ2_XXS: {
        const quant_block_iq2_xxs *b = (const quant_block_iq2_xxs *)row + e / QUANT_QK_K;
        const uint32_t idx = (uint32_t)qd_load_a2(b->qs + 4 * ib), aux = (uint32_t)qd_load_a2(b->qs + 4 * ib + 2);
        const float db = qd_f16(b->d) * (0.5f + (aux >> 28)) * 0.25f;
        const uint64_t grid = IQ_TAB(iq2xxs_grid)[(idx >> (8 * l)) & 0xff];
        const uint8_t signs = IQ_TAB(ksigns_iq2xs)[(aux >> (7 * l)) & 127];
        return db * (int)((grid >> (8 * jj)) & 0xff) * (signs >> jj & 1 ? -1.f : 1.f);
    }
    case GUILD_TYPE_IQ2_XS: {
        const quant_block_iq2_xs *b = (const quant_block_iq2_xs *)row + e / QUANT_QK_K;
        const int sc = l < 2 ? b->scales[ib] & 0xf : b->scales[ib] >> 4;
        const float db = qd_f16(b->d) * (0.5f + sc) * 0.25f;
        const uint32_t q = b->qs[4 * ib + l];
        const uint64_t grid = IQ_TAB(iq2xs_grid)[q & 511];
        const uint8_t signs = IQ_TAB(ksigns_iq2xs)[q >> 9];
        return db * (int)((grid >> (8 * jj)) & 0xff) * (signs >> jj & 1 ? -1.f : 1.f);
    }
    case GUILD_TYPE_IQ2_S: {
        const quant_block_iq2_s *b = (const quant_block_iq2_s *)row + e / QUANT_QK_K;
        const int sc = l < 2 ? b->scales[ib] & 0xf : b->scales[ib] >> 4;
        const float db = qd_f16(b->d) * (0.5f + sc) * 0.25f;
        const uint64_t grid = IQ_TAB(iq2s_grid)[b->qs[4 * ib + l] | ((b->qh[ib] << (8 - 2 * l)) & 0x300)];
        const uint8_t signs = b->qs[QUANT_QK_K / 8 + 4 * ib + l];
        return db * (int)((grid >> (8 * jj)) & 0xff) * (signs >> jj & 1 ? -1.f : 1.f);
    }
    case GUILD_TYPE_IQ3_XXS: {
        const quant_block_iq3_xxs *b = (const quant_block_iq3_xxs *)row + e / QUANT_QK_K;
        const uint32_t aux = (uint32_t)qd_load_a2(b->qs + QUANT_QK_K / 4 + 4 * ib);
        const float db = qd_f16(b->d) * (0.5f + (aux >> 28)) * 0.5f;
        const uint8_t signs = IQ_TAB(ksigns_iq2xs)[(aux >> (7 * l)) & 127];
        const uint32_t g = IQ_TAB(iq3xxs_grid)[b->qs[8 * ib + 2 * l + jj / 4]];
        return db * (int)((g >> (8 * (jj % 4))) & 0xff) * (signs >> jj & 1 ? -1.f : 1.f);
    }
    case GUILD_TYPE_IQ3_S: {
        const quant_block_iq3_s *b = (const quant_block_iq3_s *)row + e / QUANT_QK_K;
        const int ls = (b->scales[ib / 2] >> (4 * (ib % 2))) & 0xf;
        const float db = qd_f16(b->d) * (1 + 2 * ls);
        const int qh = b->qh[ib];
        const uint32_t g = jj < 4 ? IQ_TAB(iq3s_grid)[b->qs[8 * ib + 2 * l] | ((qh << (8 - 2 * l)) & 256)]
                                  : IQ_TAB(iq3s_grid)[b->qs[8 * ib + 2 * l + 1] | ((qh << (7 - 2 * l)) & 256)];
        const uint8_t signs = b->signs[4 * ib + l];
        return db * (int)((g >> (8 * (jj % 4))) & 0xff) * (signs >> jj & 1 ? -1.f : 1.f);
    }
    case GUILD_TYPE_IQ1_S: {
        const quant_block_iq1_s *b = (const quant_block_iq1_s *)row + e / QUANT_QK_K;
        const int qh = b->qh[ib];
        const float dl = qd_f16(b->d) * (2 * ((qh >> 12) & 7) + 1);
        const float delta = qh & 0x8000 ? -QUANT_IQ1S_DELTA : QUANT_IQ1S_DELTA;
        const uint64_t grid = IQ_TAB(iq1s_grid)[b->qs[4 * ib + l] | (((qh >> (3 * l)) & 7) << 8)];
        return dl * ((int8_t)((grid >> (8 * jj)) & 0xff) + delta);
    }
    case GUILD_TYPE_IQ1_M: {
        const quant_block_iq1_m *b = (const quant_block_iq1_m *)row + e / QUANT_QK_K;
        const int sc = b->scales[2 * (ib / 2)] | b->scales[2 * (ib / 2) + 1] << 8;
        const float d = qd_f16(iq1m_d(b));
        const float dl = d * (2 * ((sc >> (6 * (ib % 2) + (l < 2 ? 0 : 3))) & 0x7) + 1);
        const int qh = b->qh[2 * ib + l / 2];
        const int idx = b->qs[4 * ib + l] | ((qh << (l % 2 ? 4 : 8)) & 0x700);
        const float delta = qh & (l % 2 ? 0x80 : 0x08) ? -QUANT_IQ1M_DELTA : QUANT_IQ1M_DELTA;
        const uint64_t grid = IQ_TAB(iq1s_grid)[idx];
        return dl * ((int8_t)((grid >> (8 * jj)) & 0xff) + delta);
    }
    default:
        return 0.0f;
    }
}

#endif
