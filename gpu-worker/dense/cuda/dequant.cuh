/* gpu-worker/dense/cuda/dequant.cuh — element e of a weight row, as quant_dequantize_row_ref computes it (the same
 * float operations: core/quant/dequant_ref.c, dequant_k.c, dequant_iq.c), for cuda_get_rows. Host and device,
 * so tests/cuda/check_cuda_host.c checks them without a GPU. */
#ifndef GUILD_GPU_WORKER_CUDA_DEQUANT_CUH
#define GUILD_GPU_WORKER_CUDA_DEQUANT_CUH

#include "gpu-worker/dense/cuda/quant_dot_iq.cuh"

/* kvalues_iq4nl[i] from the packed words of quant_dot.cuh. */
QD_FN int iq4nl_value(int i)
{
    const uint32_t w = i < 4 ? IQ4NL_W0 : i < 8 ? IQ4NL_W1 : i < 12 ? IQ4NL_W2 : IQ4NL_W3;
    return (int)(int8_t)(w >> 8 * (i % 4));
}

QD_FN uint32_t u32_le(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Nibble of element j (0..31) of a 32-element block laid out as q4_0: low nibbles first. */
QD_FN int nib32(const uint8_t *qs, int j)
{
    return j < 16 ? qs[j] & 0x0F : qs[j - 16] >> 4;
}

/* 5-bit level of element j of a q5_0/q5_1 block (unsigned, 0..31). */
QD_FN int q5_level(const uint8_t *qs, const uint8_t *qh4, int j)
{
    const uint32_t qh = u32_le(qh4);
    return j < 16 ? (int)((qs[j] & 0x0F) | ((qh >> j) << 4 & 0x10))
                  : (int)((qs[j - 16] >> 4) | ((qh >> (j - 16 + 12)) & 0x10));
}

QD_FN float dequant_elem(guild_type_t type, const void *row, int64_t e)
{
    switch (type) {
    case GUILD_TYPE_F32:
        return ((const float *)row)[e];
    case GUILD_TYPE_F16:
        return quant_f16_to_f32(((const quant_half_t *)row)[e]);
    case GUILD_TYPE_BF16:
        return quant_bf16_to_f32(((const quant_bf16_t *)row)[e]);
    case GUILD_TYPE_Q8_0: {
        const quant_block_q8_0 *b = (const quant_block_q8_0 *)row + e / 32;
        return b->qs[e % 32] * quant_f16_to_f32(b->d);
    }
    case GUILD_TYPE_Q4_0: {
        const quant_block_q4_0 *b = (const quant_block_q4_0 *)row + e / 32;
        return (nib32(b->qs, (int)(e % 32)) - 8) * quant_f16_to_f32(b->d);
    }
    case GUILD_TYPE_Q4_1: {
        const quant_block_q4_1 *b = (const quant_block_q4_1 *)row + e / 32;
        return nib32(b->qs, (int)(e % 32)) * quant_f16_to_f32(b->d) + quant_f16_to_f32(b->m);
    }
    case GUILD_TYPE_Q5_0: {
        const quant_block_q5_0 *b = (const quant_block_q5_0 *)row + e / 32;
        return (q5_level(b->qs, b->qh, (int)(e % 32)) - 16) * quant_f16_to_f32(b->d);
    }
    case GUILD_TYPE_Q5_1: {
        const quant_block_q5_1 *b = (const quant_block_q5_1 *)row + e / 32;
        return q5_level(b->qs, b->qh, (int)(e % 32)) * quant_f16_to_f32(b->d) + quant_f16_to_f32(b->m);
    }
    case GUILD_TYPE_IQ4_NL: {
        const quant_block_iq4_nl *b = (const quant_block_iq4_nl *)row + e / 32;
        return quant_f16_to_f32(b->d) * iq4nl_value(nib32(b->qs, (int)(e % 32)));
    }
    case GUILD_TYPE_MXFP4: {
        const quant_block_mxfp4 *b = (const quant_block_mxfp4 *)row + e / 32;
        const int c = nib32(b->qs, (int)(e % 32));
        return (int)(int8_t)((c < 8 ? (c < 4 ? MXFP4_W0 : MXFP4_W1) : (c < 12 ? MXFP4_W2 : MXFP4_W3)) >> 8 * (c % 4)) *
               quant_e8m0_to_f32_half(b->e);
    }
    case GUILD_TYPE_Q2_K: {
        /* sub-block s = i / 16 (scale and min nibbles), 2-bit field (i % 128) / 32 of qs[32 (i / 128) + i % 32] */
        const quant_block_q2_K *b = (const quant_block_q2_K *)row + e / QUANT_QK_K;
        const int i = (int)(e % QUANT_QK_K), sc = b->scales[i / 16];
        const int q = (b->qs[32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3;
        const float dl = quant_f16_to_f32(b->d) * (sc & 0xF), ml = quant_f16_to_f32(b->dmin) * (sc >> 4);
        return dl * q - ml;
    }
    case GUILD_TYPE_Q3_K: {
        const quant_block_q3_K *b = (const quant_block_q3_K *)row + e / QUANT_QK_K;
        const int i = (int)(e % QUANT_QK_K);
        const int q = (b->qs[32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3;
        const int hbit = (b->hmask[i % 32] >> (i / 32)) & 1;
        const float dl = quant_f16_to_f32(b->d) * q3k_scale(b->scales, i / 16);
        return dl * (q - (hbit ? 0 : 4));
    }
    case GUILD_TYPE_Q4_K:
    case GUILD_TYPE_Q5_K: {
        /* 64-element chunk c: sub-block 2c from the low nibbles, 2c + 1 from the high ones */
        const int i = (int)(e % QUANT_QK_K), c = i / 64, hi = (i % 64) / 32, l = i % 32;
        const uint8_t *scales, *qs;
        quant_half_t d, dmin;
        int q;
        if (type == GUILD_TYPE_Q4_K) {
            const quant_block_q4_K *b = (const quant_block_q4_K *)row + e / QUANT_QK_K;
            scales = b->scales, qs = b->qs, d = b->d, dmin = b->dmin;
            q = hi ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 0xF;
        } else {
            const quant_block_q5_K *b = (const quant_block_q5_K *)row + e / QUANT_QK_K;
            scales = b->scales, qs = b->qs, d = b->d, dmin = b->dmin;
            q = (hi ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 0xF) + ((b->qh[l] >> (2 * c + hi)) & 1 ? 16 : 0);
        }
        int sc, m;
        k4_scale_min(2 * c + hi, scales, sc, m);
        const float d1 = quant_f16_to_f32(d) * sc, m1 = quant_f16_to_f32(dmin) * m;
        return d1 * q - m1;
    }
    case GUILD_TYPE_Q6_K: {
        const quant_block_q6_K *b = (const quant_block_q6_K *)row + e / QUANT_QK_K;
        const int i = (int)(e % QUANT_QK_K), h = i / 128, k = (i % 128) / 32, l = i % 32;
        const int lo = (b->ql[64 * h + 32 * (k % 2) + l] >> (4 * (k / 2))) & 0xF;
        const int q = (int)(lo | ((b->qh[32 * h + l] >> (2 * k)) & 3) << 4) - 32;
        return quant_f16_to_f32(b->d) * b->scales[8 * h + l / 16 + 2 * k] * q;
    }
    case GUILD_TYPE_IQ4_XS: {
        const quant_block_iq4_xs *b = (const quant_block_iq4_xs *)row + e / QUANT_QK_K;
        const int i = (int)(e % QUANT_QK_K), ib = i / 32;
        const int ls = ((b->scales_l[ib / 2] >> 4 * (ib % 2)) & 0xf) | (((b->scales_h >> 2 * ib) & 3) << 4);
        const float dl = quant_f16_to_f32(b->d) * (ls - 32);
        return dl * iq4nl_value(nib32(b->qs + 16 * ib, i % 32));
    }
    case GUILD_TYPE_IQ2_XXS: case GUILD_TYPE_IQ2_XS: case GUILD_TYPE_IQ2_S: case GUILD_TYPE_IQ3_XXS:
    case GUILD_TYPE_IQ3_S: case GUILD_TYPE_IQ1_S: case GUILD_TYPE_IQ1_M:
        return iq_dequant_elem(type, row, e);
    default:
        return 0.0f; /* rejected before */
    }
}

#endif
