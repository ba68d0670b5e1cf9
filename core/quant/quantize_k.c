/* core/quant/quantize_k.c — reference quantizers of the K-quant super-blocks (Q2_K..Q6_K), following
 * ggml's quantize_row_q*_K_ref and its scale searches (make_qx_quants, make_q3_quants, make_qkx2_quants)
 * operation for operation. No importance matrix: these are the quantizers llama-quantize uses without one. */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "core/quant/fp16.h"
#include "core/quant/quantize_util.h"
#include "core/quant/ref_kernels.h"

/* Symmetric scale for n values on levels -nmax..nmax-1 (stored biased by nmax in L), minimising the
 * x^2-weighted error (ggml's make_qx_quants with rmse_type 1 and no importance weights). Returns the scale. */
static float make_qx_quants(int n, int nmax, const float *x, int8_t *L)
{
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        const float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < QUANT_GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = quant_nearest_int(iscale * x[i]);
        l = QUANT_MAX(-nmax, QUANT_MIN(nmax - 1, l));
        L[i] = (int8_t)(l + nmax);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0)
            continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = quant_nearest_int(iscale * x[i]);
            l = QUANT_MAX(-nmax, QUANT_MIN(nmax - 1, l));
            const float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) {
                const int l = quant_nearest_int(iscale * x[i]);
                L[i] = (int8_t)(nmax + QUANT_MAX(-nmax, QUANT_MIN(nmax - 1, l)));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Symmetric 3-bit scale with an iterative per-element refinement (ggml's make_q3_quants, do_rmse = true).
 * L gets levels biased by nmax. Returns the scale. */
static float make_q3_quants(int n, int nmax, const float *x, int8_t *L)
{
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        const float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < QUANT_GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    const float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = quant_nearest_int(iscale * x[i]);
        l = QUANT_MAX(-nmax, QUANT_MIN(nmax - 1, l));
        L[i] = (int8_t)l;
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * L[i] * L[i];
                int new_l = quant_nearest_int(x[i] * sl2 / slx);
                new_l = QUANT_MAX(-nmax, QUANT_MIN(nmax - 1, new_l));
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed)
            break;
    }
    for (int i = 0; i < n; i++)
        L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Affine fit x ~ scale * L - the_min, L in 0..nmax, min <= 0, weighted, with a grid search over
 * nstep + 1 inverse scales (ggml's make_qkx2_quants). Returns the scale; *the_min gets -min >= 0. */
static float make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                              float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep, bool use_mad)
{
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min)
            min = x[i];
        if (x[i] > max)
            max = x[i];
        const float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0)
        min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; i++) {
        const int l = quant_nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)QUANT_MAX(0, QUANT_MIN(nmax, l));
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_error += weights[i] * diff;
    }
    if (nstep < 1) {
        *the_min = -min;
        return scale;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = quant_nearest_int(iscale * (x[i] - min));
            l = QUANT_MAX(0, QUANT_MIN(nmax, l));
            Laux[i] = (uint8_t)l;
            const float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                cur_error += weights[i] * diff;
            }
            if (cur_error < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* Packs 2-bit levels: byte l of each 32-byte group holds elements l, l + 32, l + 64, l + 96 of a 128 chunk. */
static void pack_2bit(const uint8_t *L, uint8_t *qs)
{
    for (int j = 0; j < QUANT_QK_K; j += 128)
        for (int l = 0; l < 32; l++)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | L[j + l + 32] << 2 | L[j + l + 64] << 4 | L[j + l + 96] << 6);
}

void quant_quant_q2_K_ref(const float *x, quant_block_q2_K *y, int64_t nb)
{
    uint8_t L[QUANT_QK_K], Laux[16];
    float weights[16], mins[QUANT_QK_K / 16], scales[QUANT_QK_K / 16];
    const float q4scale = 15.f;
    for (int64_t i = 0; i < nb; i++, x += QUANT_QK_K) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < QUANT_QK_K / 16; j++) {
            for (int l = 0; l < 16; l++)
                weights[l] = fabsf(x[16 * j + l]);
            scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15,
                                         true);
            if (scales[j] > max_scale)
                max_scale = scales[j];
            if (mins[j] > max_min)
                max_min = mins[j];
        }
        if (max_scale > 0) {
            const float iscale = q4scale / max_scale;
            for (int j = 0; j < QUANT_QK_K / 16; j++)
                y[i].scales[j] = (uint8_t)quant_nearest_int(iscale * scales[j]);
            y[i].d = quant_f32_to_f16(max_scale / q4scale);
        } else {
            memset(y[i].scales, 0, sizeof y[i].scales);
            y[i].d = quant_f32_to_f16(0.f);
        }
        if (max_min > 0) {
            const float iscale = q4scale / max_min;
            for (int j = 0; j < QUANT_QK_K / 16; j++)
                y[i].scales[j] |= (uint8_t)(quant_nearest_int(iscale * mins[j]) << 4);
            y[i].dmin = quant_f32_to_f16(max_min / q4scale);
        } else {
            y[i].dmin = quant_f32_to_f16(0.f);
        }
        /* Re-quantize against the rounded fp16 scales actually stored. */
        for (int j = 0; j < QUANT_QK_K / 16; j++) {
            const float d = quant_f16_to_f32(y[i].d) * (y[i].scales[j] & 0xF);
            if (!d)
                continue;
            const float dm = quant_f16_to_f32(y[i].dmin) * (y[i].scales[j] >> 4);
            for (int ii = 0; ii < 16; ii++) {
                const int l = quant_nearest_int((x[16 * j + ii] + dm) / d);
                L[16 * j + ii] = (uint8_t)QUANT_MAX(0, QUANT_MIN(3, l));
            }
        }
        pack_2bit(L, y[i].qs);
    }
}

void quant_quant_q3_K_ref(const float *x, quant_block_q3_K *y, int64_t nb)
{
    int8_t L[QUANT_QK_K];
    float scales[QUANT_QK_K / 16];
    for (int64_t i = 0; i < nb; i++, x += QUANT_QK_K) {
        float max_scale = 0, amax = 0;
        for (int j = 0; j < QUANT_QK_K / 16; j++) {
            scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
            const float scale = fabsf(scales[j]);
            if (scale > amax) {
                amax = scale;
                max_scale = scales[j];
            }
        }
        memset(y[i].scales, 0, 12);
        if (max_scale) {
            const float iscale = -32.f / max_scale;
            for (int j = 0; j < QUANT_QK_K / 16; j++) {
                int8_t l = (int8_t)quant_nearest_int(iscale * scales[j]);
                l = (int8_t)(QUANT_MAX(-32, QUANT_MIN(31, l)) + 32);
                if (j < 8)
                    y[i].scales[j] = l & 0xF;
                else
                    y[i].scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
                l >>= 4;
                y[i].scales[j % 4 + 8] |= (uint8_t)(l << (2 * (j / 4)));
            }
            y[i].d = quant_f32_to_f16(1 / iscale);
        } else {
            y[i].d = quant_f32_to_f16(0.f);
        }
        int8_t sc[16];
        quant_q3_K_scales(y[i].scales, sc);
        for (int j = 0; j < QUANT_QK_K / 16; j++) {
            const float d = quant_f16_to_f32(y[i].d) * sc[j];
            if (!d)
                continue;
            for (int ii = 0; ii < 16; ii++) {
                const int l = quant_nearest_int(x[16 * j + ii] / d);
                L[16 * j + ii] = (int8_t)(QUANT_MAX(-4, QUANT_MIN(3, l)) + 4);
            }
        }
        /* High bit of element j goes to bit j / 32 of hmask[j % 32]; the low 2 bits are packed as Q2_K. */
        memset(y[i].hmask, 0, QUANT_QK_K / 8);
        int m = 0;
        uint8_t hm = 1;
        for (int j = 0; j < QUANT_QK_K; j++) {
            if (L[j] > 3) {
                y[i].hmask[m] |= hm;
                L[j] = (int8_t)(L[j] - 4);
            }
            if (++m == QUANT_QK_K / 8) {
                m = 0;
                hm = (uint8_t)(hm << 1);
            }
        }
        pack_2bit((const uint8_t *)L, y[i].qs);
    }
}

/* Shared by Q4_K and Q5_K: 8 sub-blocks of 32, affine fits, 6-bit scales and mins packed in 12 bytes.
 * Fills scales, d, dmin and the levels L (0..nmax). */
static void quant_k_affine(const float *x, int nmax, float rmin, int nstep, uint8_t scales_out[12],
                           quant_half_t *d_out, quant_half_t *dmin_out, uint8_t L[QUANT_QK_K])
{
    uint8_t Laux[32];
    float weights[32], mins[QUANT_QK_K / 32], scales[QUANT_QK_K / 32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < QUANT_QK_K / 32; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++)
            sum_x2 += x[32 * j + l] * x[32 * j + l];
        const float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++)
            weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep,
                                     false);
        if (scales[j] > max_scale)
            max_scale = scales[j];
        if (mins[j] > max_min)
            max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < QUANT_QK_K / 32; j++) {
        uint8_t ls = (uint8_t)quant_nearest_int(inv_scale * scales[j]);
        uint8_t lm = (uint8_t)quant_nearest_int(inv_min * mins[j]);
        ls = QUANT_MIN(63, ls);
        lm = QUANT_MIN(63, lm);
        if (j < 4) {
            scales_out[j] = ls;
            scales_out[j + 4] = lm;
        } else {
            scales_out[j + 4] = (uint8_t)((ls & 0xF) | (lm & 0xF) << 4);
            scales_out[j - 4] |= (uint8_t)((ls >> 4) << 6);
            scales_out[j - 0] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *d_out = quant_f32_to_f16(max_scale / 63.f);
    *dmin_out = quant_f32_to_f16(max_min / 63.f);
    for (int j = 0; j < QUANT_QK_K / 32; j++) {
        uint8_t sc, m;
        quant_k4_scale_min(j, scales_out, &sc, &m);
        const float d = quant_f16_to_f32(*d_out) * sc;
        if (!d)
            continue;
        const float dm = quant_f16_to_f32(*dmin_out) * m;
        for (int ii = 0; ii < 32; ii++) {
            const int l = quant_nearest_int((x[32 * j + ii] + dm) / d);
            L[32 * j + ii] = (uint8_t)QUANT_MAX(0, QUANT_MIN(nmax, l));
        }
    }
}

void quant_quant_q4_K_ref(const float *x, quant_block_q4_K *y, int64_t nb)
{
    uint8_t L[QUANT_QK_K];
    for (int64_t i = 0; i < nb; i++, x += QUANT_QK_K) {
        memset(y[i].scales, 0, sizeof y[i].scales);
        quant_k_affine(x, 15, -1.f, 20, y[i].scales, &y[i].d, &y[i].dmin, L);
        uint8_t *q = y[i].qs;
        for (int j = 0; j < QUANT_QK_K; j += 64, q += 32)
            for (int l = 0; l < 32; l++)
                q[l] = (uint8_t)(L[j + l] | L[j + l + 32] << 4);
    }
}

void quant_quant_q5_K_ref(const float *x, quant_block_q5_K *y, int64_t nb)
{
    uint8_t L[QUANT_QK_K];
    for (int64_t i = 0; i < nb; i++, x += QUANT_QK_K) {
        memset(y[i].scales, 0, sizeof y[i].scales);
        quant_k_affine(x, 31, -0.5f, 15, y[i].scales, &y[i].d, &y[i].dmin, L);
        uint8_t *qh = y[i].qh;
        uint8_t *ql = y[i].qs;
        memset(qh, 0, QUANT_QK_K / 8);
        uint8_t m1 = 1, m2 = 2;
        for (int n = 0; n < QUANT_QK_K; n += 64, ql += 32) {
            for (int j = 0; j < 32; j++) {
                int l1 = L[n + j];
                if (l1 > 15) {
                    l1 -= 16;
                    qh[j] |= m1;
                }
                int l2 = L[n + j + 32];
                if (l2 > 15) {
                    l2 -= 16;
                    qh[j] |= m2;
                }
                ql[j] = (uint8_t)(l1 | l2 << 4);
            }
            m1 = (uint8_t)(m1 << 2);
            m2 = (uint8_t)(m2 << 2);
        }
    }
}

void quant_quant_q6_K_ref(const float *x, quant_block_q6_K *y, int64_t nb)
{
    int8_t L[QUANT_QK_K];
    float scales[QUANT_QK_K / 16];
    for (int64_t i = 0; i < nb; i++, x += QUANT_QK_K) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < QUANT_QK_K / 16; ib++) {
            const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
            scales[ib] = scale;
            const float abs_scale = fabsf(scale);
            if (abs_scale > max_abs_scale) {
                max_abs_scale = abs_scale;
                max_scale = scale;
            }
        }
        if (max_abs_scale < QUANT_GROUP_MAX_EPS) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -128.f / max_scale;
        y[i].d = quant_f32_to_f16(1 / iscale);
        for (int ib = 0; ib < QUANT_QK_K / 16; ib++)
            y[i].scales[ib] = (int8_t)QUANT_MIN(127, quant_nearest_int(iscale * scales[ib]));
        for (int j = 0; j < QUANT_QK_K / 16; j++) {
            const float d = quant_f16_to_f32(y[i].d) * y[i].scales[j];
            if (!d)
                continue;
            for (int ii = 0; ii < 16; ii++) {
                const int l = quant_nearest_int(x[16 * j + ii] / d);
                L[16 * j + ii] = (int8_t)(QUANT_MAX(-32, QUANT_MIN(31, l)) + 32);
            }
        }
        uint8_t *ql = y[i].ql;
        uint8_t *qh = y[i].qh;
        for (int j = 0; j < QUANT_QK_K; j += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; l++) {
                const uint8_t q1 = L[j + l + 0] & 0xF;
                const uint8_t q2 = L[j + l + 32] & 0xF;
                const uint8_t q3 = L[j + l + 64] & 0xF;
                const uint8_t q4 = L[j + l + 96] & 0xF;
                ql[l + 0] = (uint8_t)(q1 | q3 << 4);
                ql[l + 32] = (uint8_t)(q2 | q4 << 4);
                qh[l] = (uint8_t)((L[j + l] >> 4) | (L[j + l + 32] >> 4) << 2 | (L[j + l + 64] >> 4) << 4 |
                                  (L[j + l + 96] >> 4) << 6);
            }
        }
    }
}
