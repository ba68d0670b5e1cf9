/* The tensor-core prefill attention's per-lane code (gpu-worker/dense/cuda/attn_prefill_mma.cuh), run on the host for
 * the 32 lanes of a warp through emulations of ldmatrix.x4 (.trans) and mma.sync.m16n8k16 written from the
 * PTX ISA's fragment layouts (no GPU needed, so it runs in CI): the scores of a 16-row x 64-key tile from the
 * split Q fragments and the K addressing, and P V from the score fragments reused as A fragments and the
 * transposed V addressing, against float64 sums; the hi/lo split's error and the row scaling's range. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu-worker/dense/cuda/attn_prefill_mma.cuh"
#include "tests/check_run.h"

#define _Noreturn [[noreturn]]
extern "C" {
#include "core/sample/rng.h"
}
#undef _Noreturn

static float half_bits_to_float(uint16_t b)
{
    return __half2float(__ushort_as_half(b));
}

static uint16_t float_to_half_bits(float x)
{
    return __half_as_ushort(__float2half_rn(x));
}

static double lo_of(uint32_t r)
{
    return half_bits_to_float((uint16_t)(r & 0xffff));
}

static double hi_of(uint32_t r)
{
    return half_bits_to_float((uint16_t)(r >> 16));
}

/* ldmatrix.sync.aligned.m8n8.x4(.trans).b16: lanes 8i .. 8i+7 give the rows of matrix i (8 consecutive
 * halves each, at tile + off[lane]); without .trans register i of a lane holds (row lane/4, columns 2(lane%4),
 * +1) of matrix i, with .trans (rows 2(lane%4), +1, column lane/4); the first element in the low half. */
static void emu_ldmatrix_x4(const uint16_t *tile, const int off[32], bool trans, uint32_t r[32][4])
{
    for (int lane = 0; lane < 32; lane++)
        for (int i = 0; i < 4; i++) {
            uint16_t e0, e1;
            if (!trans) {
                const uint16_t *row = tile + off[8 * i + lane / 4];
                e0 = row[2 * (lane % 4)];
                e1 = row[2 * (lane % 4) + 1];
            } else {
                e0 = tile[off[8 * i + 2 * (lane % 4)] + lane / 4];
                e1 = tile[off[8 * i + 2 * (lane % 4) + 1] + lane / 4];
            }
            r[lane][i] = (uint32_t)e0 | (uint32_t)e1 << 16;
        }
}

/* mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32, d += a b over the warp (g = lane/4, t = lane%4):
 * A: a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..); B: b0 (rows 2t, 2t+1, col g), b1 (rows
 * 2t+8, 2t+9, col g); D: d0, d1 (g, 2t..2t+1), d2, d3 (g+8, 2t..). Products and sums in float64, rounded once. */
static void emu_mma(float d[32][4], const uint32_t a[32][4], const uint32_t b0[32], const uint32_t b1[32])
{
    double A[16][16], B[16][8], C[16][8];
    for (int lane = 0; lane < 32; lane++) {
        const int g = lane / 4, t = lane % 4;
        for (int i = 0; i < 4; i++) {
            const int r = g + (i & 1) * 8, c = 2 * t + (i >> 1) * 8;
            A[r][c] = lo_of(a[lane][i]);
            A[r][c + 1] = hi_of(a[lane][i]);
        }
        B[2 * t][g] = lo_of(b0[lane]);
        B[2 * t + 1][g] = hi_of(b0[lane]);
        B[2 * t + 8][g] = lo_of(b1[lane]);
        B[2 * t + 9][g] = hi_of(b1[lane]);
        C[g][2 * t] = d[lane][0];
        C[g][2 * t + 1] = d[lane][1];
        C[g + 8][2 * t] = d[lane][2];
        C[g + 8][2 * t + 1] = d[lane][3];
    }
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 8; c++)
            for (int k = 0; k < 16; k++)
                C[r][c] += A[r][k] * B[k][c];
    for (int lane = 0; lane < 32; lane++) {
        const int g = lane / 4, t = lane % 4;
        d[lane][0] = (float)C[g][2 * t];
        d[lane][1] = (float)C[g][2 * t + 1];
        d[lane][2] = (float)C[g + 8][2 * t];
        d[lane][3] = (float)C[g + 8][2 * t + 1];
    }
}

/* A tile of AM_BK rows of hd random f16 values, rows ld halves apart; the padding is NaN (never read). */
static uint16_t *tile_new(rng_t *r, int hd, int ld)
{
    uint16_t *t = (uint16_t *)malloc((size_t)AM_BK * (size_t)ld * sizeof *t);
    for (int j = 0; j < AM_BK; j++)
        for (int d = 0; d < ld; d++)
            t[j * ld + d] = d < hd ? float_to_half_bits((float)(4 * rng_uniform(r) - 2)) : 0x7e00;
    return t;
}

/* Row r's score scale exponent as the kernel computes it: the largest |q| over the quad's lanes. */
template <int HD>
static void q_frags_warp(const float *Q, const bool *ok, uint32_t qh[32][HD / 16][4], uint32_t ql[32][HD / 16][4],
                         int e[16])
{
    float mx[32][2];
    for (int lane = 0; lane < 32; lane++) {
        const int g = lane / 4, t = lane % 4;
        am_q_absmax<HD>(Q + g * HD + 2 * t, Q + (g + 8) * HD + 2 * t, ok[g], ok[g + 8], &mx[lane][0], &mx[lane][1]);
    }
    for (int g = 0; g < 8; g++)
        for (int u = 0; u < 2; u++) {
            float m = 0.0f;
            for (int t = 0; t < 4; t++)
                m = fmaxf(m, mx[4 * g + t][u]);
            e[g + 8 * u] = am_row_exponent(m);
        }
    for (int lane = 0; lane < 32; lane++) {
        const int g = lane / 4, t = lane % 4;
        am_q_frags<HD>(Q + g * HD + 2 * t, Q + (g + 8) * HD + 2 * t, ok[g], ok[g + 8], ldexpf(1.0f, -e[g]),
                       ldexpf(1.0f, -e[g + 8]), qh[lane], ql[lane]);
    }
}

/* S = Q K^T for one warp: 16 rows of mixed magnitudes (one past f16 range, one tiny, one past the batch). */
template <int HD>
static void check_scores(uint64_t seed)
{
    constexpr int KS = HD / 16, NS = AM_BK / 8, LD = HD + 8;
    rng_t r;
    rng_seed(&r, seed);
    float *Q = (float *)malloc(16 * HD * sizeof *Q);
    bool ok[16];
    for (int i = 0; i < 16; i++) {
        const double mag = i == 3 ? 3e5 : i == 5 ? 1e-3 : i % 3 == 0 ? 0.05 : i % 3 == 1 ? 1.5 : 40.0;
        for (int d = 0; d < HD; d++)
            Q[i * HD + d] = (float)(mag * (2 * rng_uniform(&r) - 1));
        ok[i] = i != 14;
    }
    uint16_t *K = tile_new(&r, HD, LD);
    static uint32_t qh[32][KS][4], ql[32][KS][4];
    int e[16];
    q_frags_warp<HD>(Q, ok, qh, ql, e);
    for (int i = 0; i < 16; i++) {
        float mx = 0.0f;
        for (int d = 0; d < HD; d++)
            mx = fmaxf(mx, fabsf(Q[i * HD + d]));
        const float sc = ldexpf(mx, -e[i]);
        ck_assert_msg(!ok[i] || (sc >= 8192.0f && sc < 16384.0f), "row %d: largest |q| %g scaled to %g", i,
                      (double)mx, (double)sc);
    }

    static float s[NS][32][4];
    memset(s, 0, sizeof s);
    for (int kk = 0; kk < KS; kk++)
        for (int np = 0; np < NS / 2; np++) {
            int off[32];
            uint32_t b[32][4], a_h[32][4], a_l[32][4], b0[32], b1[32], b2[32], b3[32];
            for (int lane = 0; lane < 32; lane++)
                off[lane] = am_k_ldsm_offset(lane, np, kk, LD);
            emu_ldmatrix_x4(K, off, false, b);
            for (int lane = 0; lane < 32; lane++) {
                memcpy(a_h[lane], qh[lane][kk], sizeof a_h[lane]);
                memcpy(a_l[lane], ql[lane][kk], sizeof a_l[lane]);
                b0[lane] = b[lane][0];
                b1[lane] = b[lane][1];
                b2[lane] = b[lane][2];
                b3[lane] = b[lane][3];
            }
            emu_mma(s[2 * np], a_h, b0, b1);
            emu_mma(s[2 * np], a_l, b0, b1);
            emu_mma(s[2 * np + 1], a_h, b2, b3);
            emu_mma(s[2 * np + 1], a_l, b2, b3);
        }

    double worst = 0;
    for (int lane = 0; lane < 32; lane++)
        for (int nt = 0; nt < NS; nt++)
            for (int c = 0; c < 4; c++) {
                const int row = lane / 4 + (c >> 1) * 8, key = 8 * nt + 2 * (lane % 4) + (c & 1);
                double ref = 0, mag = 0;
                for (int d = 0; d < HD; d++) {
                    const double kv = half_bits_to_float(K[key * LD + d]);
                    ref += (double)Q[row * HD + d] * kv;
                    mag += fabs((double)Q[row * HD + d] * kv);
                }
                ref = ok[row] ? ldexp(ref, -e[row]) : 0.0;
                mag = ldexp(mag, -e[row]);
                const double err = fabs((double)s[nt][lane][c] - ref);
                ck_assert_msg(err <= mag * 0x1p-18 + 1e-30, "FAIL scores hd %d: row %d key %d: %.9g vs %.9g", HD,
                              row, key, (double)s[nt][lane][c], ref);
                worst = fmax(worst, err / (mag + 1e-300));
            }
    printf("PASS scores (hd %d): split Q fragments x ldmatrix K, largest error %.3g of sum |q k| (bound 2^-18)\n",
           HD, worst);
    free(Q);
    free(K);
}

/* O = P V for one warp: scores in C layout (some masked; key 0 at the row maximum 0, as the kernel's running
 * maximum makes some p 1), their probabilities as A fragments. */
template <int HD>
static void check_pv(uint64_t seed)
{
    constexpr int NO = HD / 8, LD = HD + 8;
    rng_t r;
    rng_seed(&r, seed);
    static float S[16][AM_BK];
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < AM_BK; j++)
            S[i][j] = j == 0 ? 0.0f : j > 40 + i ? -INFINITY : i == 7 ? (float)(-80 + 10 * rng_uniform(&r))
                                                                   : (float)(-25 * rng_uniform(&r));
    uint16_t *V = tile_new(&r, HD, LD);
    static float o[NO][32][4];
    memset(o, 0, sizeof o);
    float l[32][2] = {{0}};
    for (int kk = 0; kk < AM_BK / 16; kk++) {
        uint32_t ph[32][4], pl[32][4];
        for (int lane = 0; lane < 32; lane++) {
            const int g = lane / 4, t = lane % 4;
            float s0[4], s1[4];
            for (int c = 0; c < 4; c++) {
                s0[c] = S[g + (c >> 1) * 8][16 * kk + 2 * t + (c & 1)];
                s1[c] = S[g + (c >> 1) * 8][16 * kk + 8 + 2 * t + (c & 1)];
            }
            am_p_frags(s0, s1, 0.0f, 0.0f, ph[lane], pl[lane], &l[lane][0], &l[lane][1]);
        }
        for (int dp = 0; dp < NO / 2; dp++) {
            int off[32];
            uint32_t b[32][4], b0[32], b1[32], b2[32], b3[32];
            for (int lane = 0; lane < 32; lane++)
                off[lane] = am_v_ldsm_offset(lane, kk, dp, LD);
            emu_ldmatrix_x4(V, off, true, b);
            for (int lane = 0; lane < 32; lane++) {
                b0[lane] = b[lane][0];
                b1[lane] = b[lane][1];
                b2[lane] = b[lane][2];
                b3[lane] = b[lane][3];
            }
            emu_mma(o[2 * dp], ph, b0, b1);
            emu_mma(o[2 * dp], pl, b0, b1);
            emu_mma(o[2 * dp + 1], ph, b2, b3);
            emu_mma(o[2 * dp + 1], pl, b2, b3);
        }
    }

    double worst = 0;
    for (int lane = 0; lane < 32; lane++)
        for (int nt = 0; nt < NO; nt++)
            for (int c = 0; c < 4; c++) {
                const int row = lane / 4 + (c >> 1) * 8, dim = 8 * nt + 2 * (lane % 4) + (c & 1);
                double ref = 0, mag = 0;
                for (int j = 0; j < AM_BK; j++) {
                    const double p = exp((double)S[row][j]) * AM_PSCALE, v = half_bits_to_float(V[j * LD + dim]);
                    ref += p * v;
                    mag += fabs(p * v);
                }
                /* bound: 2^-21 of each p (the hi/lo split and expf) or 2^-25 where lo is subnormal, the f32
                 * roundings of the sums */
                const double err = fabs((double)o[nt][lane][c] - ref);
                ck_assert_msg(err <= mag * 0x1p-18 + AM_BK * 0x1p-24, "FAIL P V hd %d: row %d dim %d: %.9g vs %.9g", HD, row,
                              dim, (double)o[nt][lane][c], ref);
                worst = fmax(worst, err / (mag + 1e-300));
            }
    for (int row = 0; row < 16; row++) {
        double ref = 0;
        float got = 0.0f;
        for (int j = 0; j < AM_BK; j++)
            ref += exp((double)S[row][j]);
        for (int t = 0; t < 4; t++)
            got += l[4 * (row % 8) + t][row / 8];
        ck_assert_msg(fabs(got - ref) <= 1e-6 * ref, "FAIL row sum %d: %.9g vs %.9g", row, (double)got, ref);
    }
    printf("PASS P V (hd %d): split P fragments from the score layout x ldmatrix.trans V, largest error %.3g of "
           "sum |p v| (bound 2^-18)\n", HD, worst);
    free(V);
}

START_TEST(test_scores)
{
    if (_i == 0)
        check_scores<128>(11);
    else
        check_scores<64>(12);
}
END_TEST

START_TEST(test_pv)
{
    if (_i == 0)
        check_pv<128>(21);
    else
        check_pv<64>(22);
}
END_TEST

START_TEST(test_split)
{
    rng_t r;
    rng_seed(&r, 5);
    double worst = 0;
    for (int i = 0; i < 100000; i++) {
        /* magnitudes the scaled operands take: [2^-12, 2^14) */
        const float x = (float)ldexp(1.0 + rng_uniform(&r), (int)(rng_next(&r) % 26) - 12) * (i % 2 ? -1.0f : 1.0f);
        uint32_t hi, lo;
        am_split_f16x2(x, -x, &hi, &lo);
        /* lo is exact to 2^-11 of itself while normal, to 2^-25 absolute when subnormal */
        const double e0 = fabs(lo_of(hi) + lo_of(lo) - x), e1 = fabs(hi_of(hi) + hi_of(lo) + x);
        const double bound = fmax(0x1p-22 * fabs(x), 0x1p-25);
        ck_assert_msg(e0 <= bound && e1 <= bound, "FAIL split of %.9g: error %.3g", (double)x, fmax(e0, e1));
        worst = fmax(worst, fmax(e0, e1) / bound);
    }
    ck_assert_int_eq(am_row_exponent(1.5f), -13);
    ck_assert_int_eq(am_row_exponent(3.0e5f), 18 - 13);
    ck_assert_int_eq(am_row_exponent(0.0f), 0);
    ck_assert_int_eq(am_row_exponent(INFINITY), 0);
    ck_assert_int_eq(am_row_exponent(NAN), 0);
    ck_assert_int_eq(am_row_exponent(1e-30f), -64);
    printf("PASS hi/lo split over [2^-12, 2^14): largest error %.3g of the bound max(2^-22 |x|, 2^-25); row "
           "exponents\n", worst);
}
END_TEST

static Suite *attn_host_suite(void)
{
    Suite *s = suite_create("cuda_attn_host");
    TCase *tc = tcase_create("fragments");
    tcase_add_loop_test(tc, test_scores, 0, 2);
    tcase_add_loop_test(tc, test_pv, 0, 2);
    tcase_add_test(tc, test_split);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(attn_host_suite());
}
