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

/* ---- grid and sign decoding (core/quant/dot_iq.c's layouts): the dot traits below, the mma kernel's
 * fragments (expert_mma_traits.cuh) and the elements (iq_dequant_elem) read the grids through these ------- */

/* IQ2_XXS, IQ3_XXS: the sign byte of entry l of a group, from the 7-bit sign index l of its aux word. */
QD_FN uint8_t iq_aux_signs(uint32_t aux, int l)
{
    return IQ_TAB(ksigns_iq2xs)[(aux >> 7 * l) & 127];
}

/* IQ2_XXS, IQ3_XXS: a group's odd scale, from the top 4 bits of its aux word. */
QD_FN int iq_aux_scale(uint32_t aux)
{
    return (int)(2 * (aux >> 28) + 1);
}

/* IQ2_XXS: grid entry l of a group, from byte l of its index word. */
QD_FN uint64_t iq2xxs_grid_at(uint32_t idx, int l)
{
    return IQ_TAB(iq2xxs_grid)[(idx >> 8 * l) & 0xff];
}

/* IQ2_XS: the grid entry and sign byte of a 16-bit entry q (a 9-bit grid index, a 7-bit sign index). */
QD_FN uint64_t iq2xs_grid_at(uint32_t q)
{
    return IQ_TAB(iq2xs_grid)[q & 511];
}

QD_FN uint8_t iq2xs_signs_at(uint32_t q)
{
    return IQ_TAB(ksigns_iq2xs)[q >> 9];
}

/* IQ2_S: grid entry l of a group: index byte q, bits 2l, 2l+1 of the group's qh its 9th and 10th bits. */
QD_FN uint64_t iq2s_grid_at(int q, int qh, int l)
{
    return IQ_TAB(iq2s_grid)[q | ((qh << (8 - 2 * l)) & 0x300)];
}

/* IQ3_S: grid entry k (0..7, four elements each) of a group: index byte q, bit k of the group's qh its 9th bit. */
QD_FN uint32_t iq3s_grid_at(int q, int qh, int k)
{
    return IQ_TAB(iq3s_grid)[q | ((qh << (8 - k)) & 256)];
}

/* IQ1_S: grid entry l of a group: index byte q, bits 3l .. 3l+2 of the group's qh its 9th to 11th bits. */
QD_FN uint64_t iq1s_grid_at(int q, int qh, int l)
{
    return IQ_TAB(iq1s_grid)[q | (((qh >> (3 * l)) & 7) << 8)];
}

/* IQ1_M: the grid entry of index byte q and its qh nibble (3 index bits; bit 3 the delta sign). */
QD_FN uint64_t iq1m_grid_at(int q, int nib)
{
    return IQ_TAB(iq1s_grid)[q | (nib & 7) << 8];
}

/* The fp16 scale of an IQ1_M block from the top nibbles of its four uint16 scales (quant_iq1_m_d). */
QD_FN quant_half_t iq1m_d(const quant_block_iq1_m *b)
{
    uint32_t sc[4];
#pragma unroll
    for (int k = 0; k < 4; k++)
        sc[k] = (uint32_t)b->scales[2 * k] | (uint32_t)b->scales[2 * k + 1] << 8;
    return (quant_half_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
}

/* IQ1_M: the odd 3-bit scale of half h (16 elements) of group j, from the uint16 scales[j / 2]. */
QD_FN int iq1m_scale(const quant_block_iq1_m *b, int j, int h)
{
    const int sc = b->scales[2 * (j / 2)] | b->scales[2 * (j / 2) + 1] << 8;
    return 2 * ((sc >> (6 * (j % 2) + 3 * h)) & 7) + 1;
}

/* ---- the dot traits (quant_dot.cuh's contract): thread j of TPB = 8 takes group j ------------------------- */

/* IQ2_XS, IQ2_S: the group's two halves' sums s[0], s[1] times the odd scales in the nibbles of sc. */
QD_FN int iq_half_scaled(int sc, const int (&s)[2])
{
    return (2 * (sc & 0xf) + 1) * s[0] + (2 * (sc >> 4) + 1) * s[1];
}

/* Group j: qs bytes 8j .. 8j+7, four grid indices then 4 x 7 sign bits and the scale. Blocks of 66 bytes. */
struct dot_iq2_xxs : dot_qk<quant_block_iq2_xxs, 8> {
    static constexpr float ROW_K = 0.125f;
    QD_FN void partial(const wblock *w, const ablock *a, int j, int &isum, int &imin)
    {
        const uint32_t idx = (uint32_t)qd_load_a2(w->qs + 4 * j), aux = (uint32_t)qd_load_a2(w->qs + 4 * j + 2);
        int s = 0;
#pragma unroll
        for (int l = 0; l < 4; l++)
            s = iq_dot8(iq2xxs_grid_at(idx, l), iq_aux_signs(aux, l), a->qs + 32 * j + 8 * l, s);
        isum = iq_aux_scale(aux) * s;
        imin = 0;
    }
};

/* Group j: qs[4j .. 4j+3], a 9-bit grid index and a 7-bit sign index each; scales nibbles per 16. */
struct dot_iq2_xs : dot_qk<quant_block_iq2_xs, 8> {
    static constexpr float ROW_K = 0.125f;
    QD_FN void partial(const wblock *w, const ablock *a, int j, int &isum, int &imin)
    {
        int s[2] = {0, 0};
#pragma unroll
        for (int l = 0; l < 4; l++) {
            const uint32_t q = w->qs[4 * j + l];
            s[l / 2] = iq_dot8(iq2xs_grid_at(q), iq2xs_signs_at(q), a->qs + 32 * j + 8 * l, s[l / 2]);
        }
        isum = iq_half_scaled(w->scales[j], s);
        imin = 0;
    }
};

/* Group j: index bytes qs[4j ..], sign bytes qs[32 + 4j ..], the high index bits in qh[j]. */
struct dot_iq2_s : dot_qk<quant_block_iq2_s, 8> {
    static constexpr float ROW_K = 0.125f;
    QD_FN void partial(const wblock *w, const ablock *a, int j, int &isum, int &imin)
    {
        const uint8_t *qs = w->qs + 4 * j, *signs = w->qs + QUANT_QK_K / 8 + 4 * j;
        const int qh = w->qh[j];
        int s[2] = {0, 0};
#pragma unroll
        for (int l = 0; l < 4; l++)
            s[l / 2] = iq_dot8(iq2s_grid_at(qs[l], qh, l), signs[l], a->qs + 32 * j + 8 * l, s[l / 2]);
        isum = iq_half_scaled(w->scales[j], s);
        imin = 0;
    }
};

/* Group j: grid indices qs[8j .. 8j+7] (4 elements each), signs and scale in the uint32 at qs[64 + 4j]. */
struct dot_iq3_xxs : dot_qk<quant_block_iq3_xxs, 8> {
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
            s = iq_dot8(g, iq_aux_signs(aux, l), a->qs + 32 * j + 8 * l, s);
        }
        isum = iq_aux_scale(aux) * s;
        imin = 0;
    }
};

/* Group j: qs[8j ..] with 9th bits in qh[j], sign bytes signs[4j ..], scale nibble j % 2 of scales[j / 2]. */
struct dot_iq3_s : dot_qk<quant_block_iq3_s, 8> {
    QD_FN void partial(const wblock *w, const ablock *a, int j, int &isum, int &imin)
    {
        const uint8_t *qs = w->qs + 8 * j, *signs = w->signs + 4 * j;
        const int qh = w->qh[j];
        int s = 0;
#pragma unroll
        for (int l = 0; l < 4; l++) {
            const uint64_t g = (uint64_t)iq3s_grid_at(qs[2 * l], qh, 2 * l) |
                               (uint64_t)iq3s_grid_at(qs[2 * l + 1], qh, 2 * l + 1) << 32;
            s = iq_dot8(g, signs[l], a->qs + 32 * j + 8 * l, s);
        }
        isum = (2 * ((w->scales[j / 2] >> (4 * (j % 2))) & 0xf) + 1) * s;
        imin = 0;
    }
};

/* Group j: qs[4j ..] with 3 index bits each, the scale and the delta sign in qh[j]. */
struct dot_iq1_s : dot_qk<quant_block_iq1_s, 8> {
    static constexpr float ROW_K = 0.125f;
    QD_FN void partial(const wblock *w, const ablock *a, int j, int &isum, int &imin)
    {
        const uint8_t *qs = w->qs + 4 * j;
        const int qh = w->qh[j];
        const int dsign = qh & 0x8000 ? -1 : 1;
        int s = 0;
#pragma unroll
        for (int l = 0; l < 4; l++)
            s += iq1_dot8(iq1s_grid_at(qs[l], qh, l), dsign, a->qs + 32 * j + 8 * l);
        isum = (2 * ((qh >> 12) & 7) + 1) * s;
        imin = 0;
    }
};

/* Group j: qs[4j ..], a nibble of qh[2j ..] per entry (3 index bits, the delta sign), two 3-bit scales (one per
 * 16 elements) in the uint16 scales[j / 2]. Blocks of 56 bytes, byte loads for the weights. */
struct dot_iq1_m : dot_qk<quant_block_iq1_m, 8> {
    static constexpr float ROW_K = 0.125f;
    QD_FN void partial(const wblock *w, const ablock *a, int j, int &isum, int &imin)
    {
        const uint8_t *qs = w->qs + 4 * j, *qh = w->qh + 2 * j;
        const int ls1 = iq1m_scale(w, j, 0), ls2 = iq1m_scale(w, j, 1);
        int s = 0;
#pragma unroll
        for (int l = 0; l < 4; l++) {
            const int nib = (qh[l / 2] >> (4 * (l % 2))) & 0xf;
            s += (l < 2 ? ls1 : ls2) * iq1_dot8(iq1m_grid_at(qs[l], nib), nib & 8 ? -1 : 1, a->qs + 32 * j + 8 * l);
        }
        isum = s;
        imin = 0;
    }
    QD_FN float finish(const wblock *w, const ablock *a, int isum, int imin)
    {
        return qd_finish(iq1m_d(w), a->d, isum);
    }
};

/* ---- every quantized type ----------------------------------------------------------------------------------- */

/* X(type, traits, elements a block) for every quantized weight type of quant_dot.cuh and this file: the type
 * switches of the launchers (matmul.cu, expert_mm.cu). */
#define QD_DOT_TYPES(X)                                                                                            \
    X(GUILD_TYPE_Q8_0, dot_q8_0, 32)                                                                               \
    X(GUILD_TYPE_Q4_0, dot_q4_0, 32)                                                                               \
    X(GUILD_TYPE_Q4_1, dot_q4_1, 32)                                                                               \
    X(GUILD_TYPE_Q5_0, dot_q5_0, 32)                                                                               \
    X(GUILD_TYPE_Q5_1, dot_q5_1, 32)                                                                               \
    X(GUILD_TYPE_IQ4_NL, dot_iq4_nl, 32)                                                                           \
    X(GUILD_TYPE_MXFP4, dot_mxfp4, 32)                                                                             \
    X(GUILD_TYPE_Q4_K, dot_q4_K, QUANT_QK_K)                                                                       \
    X(GUILD_TYPE_Q5_K, dot_q5_K, QUANT_QK_K)                                                                       \
    X(GUILD_TYPE_Q6_K, dot_q6_K, QUANT_QK_K)                                                                       \
    X(GUILD_TYPE_IQ4_XS, dot_iq4_xs, QUANT_QK_K)                                                                   \
    X(GUILD_TYPE_Q2_K, dot_q2_K, QUANT_QK_K)                                                                       \
    X(GUILD_TYPE_Q3_K, dot_q3_K, QUANT_QK_K)                                                                       \
    X(GUILD_TYPE_IQ2_XXS, dot_iq2_xxs, QUANT_QK_K)                                                                 \
    X(GUILD_TYPE_IQ2_XS, dot_iq2_xs, QUANT_QK_K)                                                                   \
    X(GUILD_TYPE_IQ2_S, dot_iq2_s, QUANT_QK_K)                                                                     \
    X(GUILD_TYPE_IQ3_XXS, dot_iq3_xxs, QUANT_QK_K)                                                                 \
    X(GUILD_TYPE_IQ3_S, dot_iq3_s, QUANT_QK_K)                                                                     \
    X(GUILD_TYPE_IQ1_S, dot_iq1_s, QUANT_QK_K)                                                                     \
    X(GUILD_TYPE_IQ1_M, dot_iq1_m, QUANT_QK_K)

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
        const uint64_t grid = iq2xxs_grid_at(idx, l);
        const uint8_t signs = iq_aux_signs(aux, l);
        return db * (int)((grid >> (8 * jj)) & 0xff) * (signs >> jj & 1 ? -1.f : 1.f);
    }
    case GUILD_TYPE_IQ2_XS: {
        const quant_block_iq2_xs *b = (const quant_block_iq2_xs *)row + e / QUANT_QK_K;
        const int sc = l < 2 ? b->scales[ib] & 0xf : b->scales[ib] >> 4;
        const float db = qd_f16(b->d) * (0.5f + sc) * 0.25f;
        const uint32_t q = b->qs[4 * ib + l];
        const uint64_t grid = iq2xs_grid_at(q);
        const uint8_t signs = iq2xs_signs_at(q);
        return db * (int)((grid >> (8 * jj)) & 0xff) * (signs >> jj & 1 ? -1.f : 1.f);
    }
    case GUILD_TYPE_IQ2_S: {
        const quant_block_iq2_s *b = (const quant_block_iq2_s *)row + e / QUANT_QK_K;
        const int sc = l < 2 ? b->scales[ib] & 0xf : b->scales[ib] >> 4;
        const float db = qd_f16(b->d) * (0.5f + sc) * 0.25f;
        const uint64_t grid = iq2s_grid_at(b->qs[4 * ib + l], b->qh[ib], l);
        const uint8_t signs = b->qs[QUANT_QK_K / 8 + 4 * ib + l];
        return db * (int)((grid >> (8 * jj)) & 0xff) * (signs >> jj & 1 ? -1.f : 1.f);
    }
    case GUILD_TYPE_IQ3_XXS: {
        const quant_block_iq3_xxs *b = (const quant_block_iq3_xxs *)row + e / QUANT_QK_K;
        const uint32_t aux = (uint32_t)qd_load_a2(b->qs + QUANT_QK_K / 4 + 4 * ib);
        const float db = qd_f16(b->d) * (0.5f + (aux >> 28)) * 0.5f;
        const uint8_t signs = iq_aux_signs(aux, l);
        const uint32_t g = IQ_TAB(iq3xxs_grid)[b->qs[8 * ib + 2 * l + jj / 4]];
        return db * (int)((g >> (8 * (jj % 4))) & 0xff) * (signs >> jj & 1 ? -1.f : 1.f);
    }
    case GUILD_TYPE_IQ3_S: {
        const quant_block_iq3_s *b = (const quant_block_iq3_s *)row + e / QUANT_QK_K;
        const int ls = (b->scales[ib / 2] >> (4 * (ib % 2))) & 0xf;
        const float db = qd_f16(b->d) * (1 + 2 * ls);
        const int qh = b->qh[ib];
        const uint32_t g = jj < 4 ? iq3s_grid_at(b->qs[8 * ib + 2 * l], qh, 2 * l)
                                  : iq3s_grid_at(b->qs[8 * ib + 2 * l + 1], qh, 2 * l + 1);
        const uint8_t signs = b->signs[4 * ib + l];
        return db * (int)((g >> (8 * (jj % 4))) & 0xff) * (signs >> jj & 1 ? -1.f : 1.f);
    }
    case GUILD_TYPE_IQ1_S: {
        const quant_block_iq1_s *b = (const quant_block_iq1_s *)row + e / QUANT_QK_K;
        const int qh = b->qh[ib];
        const float dl = qd_f16(b->d) * (2 * ((qh >> 12) & 7) + 1);
        const float delta = qh & 0x8000 ? -QUANT_IQ1S_DELTA : QUANT_IQ1S_DELTA;
        const uint64_t grid = iq1s_grid_at(b->qs[4 * ib + l], qh, l);
        return dl * ((int8_t)((grid >> (8 * jj)) & 0xff) + delta);
    }
    case GUILD_TYPE_IQ1_M: {
        const quant_block_iq1_m *b = (const quant_block_iq1_m *)row + e / QUANT_QK_K;
        const float d = qd_f16(iq1m_d(b));
        const float dl = d * iq1m_scale(b, ib, l / 2);
        const int nib = (b->qh[2 * ib + l / 2] >> (4 * (l % 2))) & 0xf;
        const float delta = nib & 8 ? -QUANT_IQ1M_DELTA : QUANT_IQ1M_DELTA;
        const uint64_t grid = iq1m_grid_at(b->qs[4 * ib + l], nib);
        return dl * ((int8_t)((grid >> (8 * jj)) & 0xff) + delta);
    }
    default:
        return 0.0f;
    }
}

#endif
