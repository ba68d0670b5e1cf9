/* Tests for the AMX-INT8 kernels (core/kern/amx.h):
 *  - the C model of the tile unit (core/kern/x86/amx_tile.h) against a plain matrix product, so that the model
 *    itself encodes Intel's layouts (B[k / 4][4 n + k % 4]) and accumulation;
 *  - the AMX kernels run on that model (kern_amx_emu_matmul): same bytes as the scalar reference for every
 *    covered type, token counts 1..8, around the 16-token tile and the 32-token pair (15, 16, 17, 31, 32, 33),
 *    53, a 256-token x 64-row prefill group, a group past AMX_TG (300 tokens), odd row counts, rows longer than
 *    a chunk, padded and unpadded strides; needs an AVX-512 VNNI CPU (the float stage is AVX-512), else skips;
 *  - the same cases on the real tiles (kern_amx_matmul) and through the amx level's table (the token
 *    threshold), where the CPU has AMX, else skips visibly;
 *  - the kernels on packed rows (kern_amx_emu_matmul_packed, kern_amx_matmul_packed, kern_matmul_packed_at at
 *    the amx level) against the scalar reference on the plain rows, for Q2_K-Q6_K and IQ4_XS: 16..40 tokens
 *    and 257 (past AMX_TG), 16 and 48 rows, rows of 1, 2 and 8 blocks, group strides of exactly 16 plain rows
 *    and longer, quantized, random and +-127 activations.
 * Outputs carry guard values outside the written rectangle; activations are exactly as long as their rows in
 * half the cases, so a tile load past a row shows under ASan. */
#include <check.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/kern/amx.h"
#include "core/kern/cpu.h"
#include "core/kern/kern.h"
#include "core/kern/pack.h"
#include "core/kern/x86/amx_tile.h"
#include "core/quant/blocks.h"
#include "core/quant/fp16.h"
#include "core/quant/quant.h"
#include "tests/check_run.h"
#include "tests/kern_test_rows.h"

/* ---- the tile model --------------------------------------------------------------------------------------- */

START_TEST(test_model_matches_matrix_product)
{
    kern_test_seed(0xa11);
    static const int shapes[][3] = {{16, 64, 16}, {1, 4, 1}, {7, 32, 16}, {16, 32, 3}, {5, 12, 9}}; /* M, K, N */
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int M = shapes[si][0], K = shapes[si][1], N = shapes[si][2];
        int8_t a[16][64], wmat[64][16], bpack[16][64];
        int32_t c0[16][16], c[16][16];
        memset(bpack, 0x5a, sizeof bpack);
        for (int m = 0; m < M; m++)
            for (int k = 0; k < K; k++)
                a[m][k] = (int8_t)kern_test_rng_next();
        for (int k = 0; k < K; k++)
            for (int n = 0; n < N; n++)
                wmat[k][n] = (int8_t)kern_test_rng_next();
        /* Intel's VNNI layout of B: the 4 consecutive k of a column side by side */
        for (int k = 0; k < K; k++)
            for (int n = 0; n < N; n++)
                bpack[k / 4][4 * n + k % 4] = wmat[k][n];
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++)
                c0[m][n] = (int32_t)(kern_test_rng_next() % 2000000) - 1000000;
        amx_tilecfg_t cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.palette = 1;
        cfg.rows[0] = (uint8_t)M, cfg.colsb[0] = (uint16_t)K;
        cfg.rows[1] = (uint8_t)(K / 4), cfg.colsb[1] = (uint16_t)(4 * N);
        cfg.rows[2] = (uint8_t)M, cfg.colsb[2] = (uint16_t)(4 * N);
        amx_model_loadconfig(&cfg);
        amx_model_load(0, a, 64);
        amx_model_load(1, bpack, 64);
        amx_model_load(2, c0, 64);
        amx_model_dpbssd(2, 0, 1);
        memset(c, 0x77, sizeof c);
        amx_model_store(2, c, 64);
        for (int m = 0; m < 16; m++)
            for (int n = 0; n < 16; n++) {
                if (m >= M || n >= N) { /* a store writes only the configured rows x bytes */
                    ck_assert_int_eq(c[m][n], 0x77777777);
                    continue;
                }
                int32_t want = c0[m][n];
                for (int k = 0; k < K; k++)
                    want += a[m][k] * wmat[k][n];
                ck_assert_msg(c[m][n] == want, "M=%d K=%d N=%d: C[%d][%d] = %d, want %d", M, K, N, m, n, c[m][n],
                              want);
            }
        amx_model_release();
    }
}
END_TEST

/* ---- kernel cases ----------------------------------------------------------------------------------------- */

static const guild_type_t amx_types[] = {
    GUILD_TYPE_Q8_0, GUILD_TYPE_Q4_0, GUILD_TYPE_Q4_1, GUILD_TYPE_Q5_0, GUILD_TYPE_Q5_1,  GUILD_TYPE_IQ4_NL,
    GUILD_TYPE_MXFP4, GUILD_TYPE_Q2_K, GUILD_TYPE_Q3_K, GUILD_TYPE_Q4_K, GUILD_TYPE_Q5_K, GUILD_TYPE_Q6_K,
    GUILD_TYPE_IQ4_XS,
};
#define N_AMX_TYPES (int)(sizeof amx_types / sizeof amx_types[0])

typedef struct mm_case {
    guild_type_t type;
    int64_t n, nrows, ntok;
    size_t ldo;
    uint8_t *w; /* [nrows][w_stride] */
    size_t w_stride;
    uint8_t *act; /* [ntok][act_stride] */
    size_t act_stride;
    uint8_t *pw;      /* packed cases: the rows packed (core/kern/pack.h), group g at pw + 16 g * pw_stride */
    size_t pw_stride; /* bytes per packed row: the plain row size or more */
} mm_case_t;

/* Activation row of n elements in `at` (Q8_0, Q8_1 or Q8_K): quantized from random floats with outliers (now and
 * then all zero), or, when raw, random quant bytes (-128 included: the AMX kernels are exact for any bytes)
 * with a finite scale and bsums that match them. */
static void fill_act_row(guild_type_t at, uint8_t *row, int64_t n, bool raw)
{
    if (!raw) {
        float *x = malloc((size_t)n * sizeof *x);
        ck_assert(x);
        for (int64_t i = 0; i < n; i++)
            x[i] = kern_test_rng_float();
        for (int k = 0; k < 4; k++)
            x[kern_test_rng_next() % (uint64_t)n] *= 20.0f;
        if (kern_test_rng_next() % 16 == 0)
            memset(x, 0, (size_t)n * sizeof *x);
        guild_err_t err;
        ck_assert_msg(quant_quantize_row_ref(at, x, row, n, &err) == 0, "%s", err.msg);
        free(x);
        return;
    }
    if (at == GUILD_TYPE_Q8_0) {
        for (int64_t b = 0; b < n / 32; b++) {
            quant_block_q8_0 blk;
            blk.d = kern_test_scale_f16();
            for (int j = 0; j < 32; j++)
                blk.qs[j] = (int8_t)kern_test_rng_next();
            memcpy(row + (size_t)b * sizeof blk, &blk, sizeof blk);
        }
        return;
    }
    if (at == GUILD_TYPE_Q8_1) { /* s: fp16(d * sum of qs), as the quantizer makes it */
        for (int64_t b = 0; b < n / 32; b++) {
            quant_block_q8_1 blk;
            blk.d = kern_test_scale_f16();
            int sum = 0;
            for (int j = 0; j < 32; j++) {
                blk.qs[j] = (int8_t)kern_test_rng_next();
                sum += blk.qs[j];
            }
            blk.s = quant_f32_to_f16(quant_f16_to_f32(blk.d) * (float)sum);
            memcpy(row + (size_t)b * sizeof blk, &blk, sizeof blk);
        }
        return;
    }
    for (int64_t b = 0; b < n / QUANT_QK_K; b++) {
        quant_block_q8_K blk;
        blk.d = ldexpf(1.0f + 0.5f * kern_test_rng_float(), -8);
        for (int j = 0; j < QUANT_QK_K; j++)
            blk.qs[j] = (int8_t)kern_test_rng_next();
        for (int g = 0; g < QUANT_QK_K / 16; g++) {
            int s = 0;
            for (int j = 0; j < 16; j++)
                s += blk.qs[16 * g + j];
            blk.bsums[g] = (int16_t)s;
        }
        memcpy(row + (size_t)b * sizeof blk, &blk, sizeof blk);
    }
}

/* A case with random or quantized weights; activation rows padded by 8 bytes, or not at all when `tight`
 * (the buffer then ends where the last row does). */
static void case_new(mm_case_t *c, guild_type_t type, int64_t n, int64_t nrows, int64_t ntok, bool quantized,
                     bool tight, bool raw_act)
{
    const quant_type_info_t *info = quant_type_info((uint32_t)type);
    const guild_type_t at = info->dot_type;
    uint64_t wrow, arow;
    guild_err_t err;
    ck_assert_int_eq(quant_row_bytes((uint32_t)type, (uint64_t)n, &wrow, &err), 0);
    ck_assert_int_eq(quant_row_bytes((uint32_t)at, (uint64_t)n, &arow, &err), 0);
    c->type = type;
    c->n = n;
    c->nrows = nrows;
    c->ntok = ntok;
    c->ldo = (size_t)nrows + 3;
    c->w_stride = (size_t)wrow + 16;
    c->act_stride = (size_t)arow + (tight ? 0 : 8);
    c->pw = NULL;
    c->pw_stride = 0;
    c->w = calloc((size_t)nrows, c->w_stride);
    c->act = malloc((size_t)ntok * c->act_stride);
    float *x = malloc((size_t)n * sizeof *x);
    ck_assert(c->w && c->act && x);
    memset(c->act, 0xa5, (size_t)ntok * c->act_stride);
    for (int64_t r = 0; r < nrows; r++) {
        uint8_t *row = c->w + (size_t)r * c->w_stride;
        if (quantized) {
            for (int64_t i = 0; i < n; i++)
                x[i] = 0.05f * kern_test_rng_float();
            ck_assert_msg(quant_quantize_row_ref(type, x, row, n, &err) == 0, "%s", err.msg);
        } else {
            kern_test_fill_blocks(type, row, n);
        }
    }
    for (int64_t t = 0; t < ntok; t++)
        fill_act_row(at, c->act + (size_t)t * c->act_stride, n, raw_act);
    free(x);
}

static void case_free(mm_case_t *c)
{
    free(c->w);
    free(c->act);
    free(c->pw);
}

/* Packs the case's rows one group at a time into pw: groups exactly 16 plain rows long (the buffer ends where
 * the last group does) or, when `padded`, 16 * 64 bytes longer. */
static void case_pack(mm_case_t *c, bool padded)
{
    const size_t rb = (size_t)(c->n / QUANT_QK_K) * quant_type_info((uint32_t)c->type)->block_bytes;
    guild_err_t err;
    c->pw_stride = rb + (padded ? 64 : 0);
    c->pw = malloc((size_t)c->nrows * c->pw_stride);
    ck_assert(c->pw);
    memset(c->pw, 0x5a, (size_t)c->nrows * c->pw_stride);
    for (int64_t g = 0; g < c->nrows; g += KERN_PACK_ROWS)
        ck_assert_msg(kern_pack(c->type, c->n, KERN_PACK_ROWS, c->w + (size_t)g * c->w_stride, c->w_stride,
                                c->pw + (size_t)g * c->pw_stride, &err) == 0,
                      "%s", err.msg);
}

/* Q8_K activations at the domain's edge: every quant +-127 at random (the largest integer sums), bsums to
 * match, the scales kept. */
static void case_edge_acts(mm_case_t *c)
{
    for (int64_t t = 0; t < c->ntok; t++)
        for (int64_t b = 0; b < c->n / QUANT_QK_K; b++) {
            quant_block_q8_K blk;
            uint8_t *p = c->act + (size_t)t * c->act_stride + (size_t)b * sizeof blk;
            memcpy(&blk, p, sizeof blk);
            for (int j = 0; j < QUANT_QK_K; j++)
                blk.qs[j] = (kern_test_rng_next() & 1) ? 127 : -127;
            for (int g = 0; g < QUANT_QK_K / 16; g++) {
                int sum = 0;
                for (int j = 0; j < 16; j++)
                    sum += blk.qs[16 * g + j];
                blk.bsums[g] = (int16_t)sum;
            }
            memcpy(p, &blk, sizeof blk);
        }
}

#define GUARD_BITS 0x7fc0dead /* a NaN no kernel writes */

static float *out_new(const mm_case_t *c)
{
    const size_t total = (size_t)c->ntok * c->ldo + 32;
    float *o = malloc(total * sizeof *o);
    ck_assert(o);
    const uint32_t g = GUARD_BITS;
    for (size_t i = 0; i < total; i++)
        memcpy(&o[i], &g, 4);
    return o;
}

typedef enum amx_mode { MODE_EMU, MODE_AMX, MODE_LEVEL } amx_mode_t;

static const char *const mode_names[] = {"emulated tiles", "AMX tiles", "amx level"};

/* Runs the case in `mode` (on its packed rows when c->pw is set) and with the scalar reference on the plain
 * rows; fails at the first differing byte or touched guard. */
static void compare(amx_mode_t mode, const mm_case_t *c)
{
    char what[224];
    snprintf(what, sizeof what, "%s %s%s n=%lld rows=%lld tokens=%lld act_stride=%zu pw_stride=%zu",
             mode_names[mode], c->pw ? "packed " : "", quant_type_info((uint32_t)c->type)->name, (long long)c->n,
             (long long)c->nrows, (long long)c->ntok, c->act_stride, c->pw_stride);
    float *ref = out_new(c), *got = out_new(c);
    kern_matmul_at(KERN_LEVEL_SCALAR, c->type, c->n, c->nrows, c->ntok, c->w, c->w_stride, c->act, c->act_stride,
                   ref + 16, c->ldo);
    if (c->pw && mode == MODE_EMU)
        kern_amx_emu_matmul_packed(c->type, c->n, c->nrows, c->ntok, c->pw, c->pw_stride, c->act, c->act_stride,
                                   got + 16, c->ldo);
    else if (c->pw && mode == MODE_AMX)
        kern_amx_matmul_packed(c->type, c->n, c->nrows, c->ntok, c->pw, c->pw_stride, c->act, c->act_stride,
                               got + 16, c->ldo);
    else if (c->pw)
        kern_matmul_packed_at(KERN_LEVEL_AMX, c->type, c->n, c->nrows, c->ntok, c->pw, c->pw_stride, c->act,
                              c->act_stride, got + 16, c->ldo);
    else if (mode == MODE_EMU)
        kern_amx_emu_matmul(c->type, c->n, c->nrows, c->ntok, c->w, c->w_stride, c->act, c->act_stride, got + 16,
                            c->ldo);
    else if (mode == MODE_AMX)
        kern_amx_matmul(c->type, c->n, c->nrows, c->ntok, c->w, c->w_stride, c->act, c->act_stride, got + 16,
                        c->ldo);
    else
        kern_matmul_at(KERN_LEVEL_AMX, c->type, c->n, c->nrows, c->ntok, c->w, c->w_stride, c->act,
                       c->act_stride, got + 16, c->ldo);
    const size_t total = (size_t)c->ntok * c->ldo + 32;
    for (size_t i = 0; i < total; i++) {
        const bool inside = i >= 16 && i < total - 16 && (i - 16) % c->ldo < (size_t)c->nrows;
        if (!inside) {
            ck_assert_msg(!memcmp(&got[i], &ref[i], 4), "%s: guard float %zu overwritten", what, i);
            continue;
        }
        const size_t t = (i - 16) / c->ldo, r = (i - 16) % c->ldo;
        ck_assert_msg(!memcmp(&ref[i], &got[i], 4), "%s: row %zu token %zu: %.9g, reference %.9g", what, r, t,
                      (double)got[i], (double)ref[i]);
    }
    free(ref);
    free(got);
}

/* compare() for kern_amx_(emu_)sb_matmul in a chosen work order (big NULL: the token-pair order), on the case's
 * packed rows when c->pw is set. */
static void compare_order(amx_mode_t mode, const mm_case_t *c, const kern_amx_big_t *big)
{
    char what[256];
    snprintf(what, sizeof what,
             "%s %s%s order %s groups %d prefetch %d depth %d n=%lld rows=%lld tokens=%lld act_stride=%zu",
             mode_names[mode], c->pw ? "packed " : "", quant_type_info((uint32_t)c->type)->name,
             big ? "many-token" : "token-pair", big ? big->row_groups : 0, big ? big->prefetch : 0,
             big ? big->depth : 0, (long long)c->n,
             (long long)c->nrows, (long long)c->ntok, c->act_stride);
    float *ref = out_new(c), *got = out_new(c);
    kern_matmul_at(KERN_LEVEL_SCALAR, c->type, c->n, c->nrows, c->ntok, c->w, c->w_stride, c->act, c->act_stride,
                   ref + 16, c->ldo);
    const void *w = c->pw ? (const void *)c->pw : (const void *)c->w;
    const size_t ws = c->pw ? c->pw_stride : c->w_stride;
    if (mode == MODE_EMU)
        kern_amx_emu_sb_matmul(big, c->pw != NULL, c->type, c->n, c->nrows, c->ntok, w, ws, c->act, c->act_stride,
                               got + 16, c->ldo);
    else
        kern_amx_sb_matmul(big, c->pw != NULL, c->type, c->n, c->nrows, c->ntok, w, ws, c->act, c->act_stride,
                           got + 16, c->ldo);
    const size_t total = (size_t)c->ntok * c->ldo + 32;
    for (size_t i = 0; i < total; i++) {
        const bool inside = i >= 16 && i < total - 16 && (i - 16) % c->ldo < (size_t)c->nrows;
        if (!inside) {
            ck_assert_msg(!memcmp(&got[i], &ref[i], 4), "%s: guard float %zu overwritten", what, i);
            continue;
        }
        const size_t t = (i - 16) / c->ldo, r = (i - 16) % c->ldo;
        ck_assert_msg(!memcmp(&ref[i], &got[i], 4), "%s: row %zu token %zu: %.9g, reference %.9g", what, r, t,
                      (double)got[i], (double)ref[i]);
    }
    free(ref);
    free(got);
}

/* Blocks per row: 1; 3; a Qwen3 expert row (64 or 8 blocks: several chunks); a chunk and a bit (33 or 5: 32-element
 * chunks are 16 blocks, laid out 4 at a time; 256-element chunks 2). */
static int64_t row_len(guild_type_t type, int which)
{
    static const int64_t k_len[] = {256, 768, 2048, 1280};
    static const int64_t b32_len[] = {32, 96, 2048, 1056};
    return quant_type_info((uint32_t)type)->block_elems == 256 ? k_len[which] : b32_len[which];
}

static bool mode_available(amx_mode_t mode)
{
    const kern_level_t need = mode == MODE_EMU ? KERN_LEVEL_AVX512_VNNI : KERN_LEVEL_AMX;
    if (kern_level_supported(need))
        return true;
    fprintf(stderr, "check_amx: %s: this CPU (%s) lacks %s: skipped\n", mode_names[mode], kern_cpu()->model,
            kern_level_name(need));
    return false;
}

/* loop index `_i` is the mode */
START_TEST(test_small_groups)
{
    const amx_mode_t mode = (amx_mode_t)_i;
    if (!mode_available(mode))
        return;
    kern_test_seed(0x100 + (uint64_t)_i);
    for (int ti = 0; ti < N_AMX_TYPES; ti++)
        for (int64_t ntok = 1; ntok <= 8; ntok++) {
            mm_case_t c;
            const int64_t nrows = 1 + (int64_t)(kern_test_rng_next() % 37);
            case_new(&c, amx_types[ti], row_len(amx_types[ti], (int)(ntok % 2)), nrows, ntok, ntok % 3 == 0,
                     ntok % 2 == 1, ntok == 5);
            compare(mode, &c);
            case_free(&c);
        }
}
END_TEST

START_TEST(test_tile_edges)
{
    const amx_mode_t mode = (amx_mode_t)_i;
    if (!mode_available(mode))
        return;
    kern_test_seed(0x200 + (uint64_t)_i);
    static const int64_t toks[] = {15, 16, 17, 31, 32, 33, 53};
    for (int ti = 0; ti < N_AMX_TYPES; ti++)
        for (size_t k = 0; k < sizeof toks / sizeof toks[0]; k++) {
            mm_case_t c;
            const int64_t nrows = k % 3 == 0 ? 16 : 1 + (int64_t)(kern_test_rng_next() % 40);
            case_new(&c, amx_types[ti], row_len(amx_types[ti], 1 + (int)(k % 3 == 2) * 2), nrows, toks[k],
                     k % 2 == 0, k % 2 == 1, k == 3);
            compare(mode, &c);
            case_free(&c);
        }
}
END_TEST

START_TEST(test_prefill_groups)
{
    const amx_mode_t mode = (amx_mode_t)_i;
    if (!mode_available(mode))
        return;
    kern_test_seed(0x300 + (uint64_t)_i);
    for (int ti = 0; ti < N_AMX_TYPES; ti++) {
        mm_case_t c;
        /* 256 tokens x 64 rows over a row of several chunks */
        case_new(&c, amx_types[ti], row_len(amx_types[ti], 3), 64, 256, ti % 2 == 0, ti % 2 == 1, false);
        compare(mode, &c);
        case_free(&c);
        /* past a token group (AMX_TG = 256), odd rows */
        case_new(&c, amx_types[ti], row_len(amx_types[ti], 0), 5, 300, false, true, ti == 1);
        compare(mode, &c);
        case_free(&c);
    }
}
END_TEST

/* Through the amx level's table: the token threshold picks the tiles or the level below. */
START_TEST(test_level_threshold)
{
    if (!mode_available(MODE_LEVEL))
        return;
    kern_test_seed(0x400);
    static const int64_t toks[] = {1, 8, KERN_AMX_MIN_TOKENS - 1, KERN_AMX_MIN_TOKENS, 53, 256};
    for (int ti = 0; ti < N_AMX_TYPES; ti++)
        for (size_t k = 0; k < sizeof toks / sizeof toks[0]; k++) {
            mm_case_t c;
            case_new(&c, amx_types[ti], row_len(amx_types[ti], toks[k] == 256 ? 2 : 1), toks[k] == 256 ? 64 : 37, toks[k], k % 2 == 0,
                     k % 2 == 1, false);
            compare(MODE_LEVEL, &c);
            case_free(&c);
        }
}
END_TEST

/* Packed rows (loop index `_i`: the mode; the amx level is kern_matmul_packed_at's path from
 * KERN_AMX_MIN_TOKENS tokens). */
static const guild_type_t packed_types[] = {GUILD_TYPE_Q4_K, GUILD_TYPE_Q5_K, GUILD_TYPE_Q6_K, GUILD_TYPE_IQ4_XS,
                                              GUILD_TYPE_Q2_K, GUILD_TYPE_Q3_K};
#define N_PACKED_TYPES (int)(sizeof packed_types / sizeof packed_types[0])

START_TEST(test_packed)
{
    const amx_mode_t mode = (amx_mode_t)_i;
    if (!mode_available(mode))
        return;
    kern_test_seed(0x500 + (uint64_t)_i);
    static const int64_t toks[] = {16, 17, 31, 32, 33, 40, 257};
    static const int64_t lens[] = {256, 512, 2048};
    for (int ti = 0; ti < N_PACKED_TYPES; ti++)
        for (size_t k = 0; k < sizeof toks / sizeof toks[0]; k++) {
            mm_case_t c;
            const bool past_tg = toks[k] > 256; /* keep the 257-token case small: the model is slow */
            const int64_t n = past_tg ? 512 : lens[(k + (size_t)ti) % 3];
            const int64_t nrows = past_tg || k % 2 == 0 ? 16 : 48;
            case_new(&c, packed_types[ti], n, nrows, toks[k], k % 3 == 1, k % 2 == 1, k % 3 == 2);
            if (k % 3 == 0)
                case_edge_acts(&c);
            case_pack(&c, (k + (size_t)ti) % 2 == 0);
            compare(mode, &c);
            case_free(&c);
        }
}
END_TEST

/* Both work orders of the 256-element types (kern_amx_(emu_)sb_matmul), tunings of the many-token one (1-4 row
 * groups, with and without the prefetch, float stages 0-2 steps behind), at
 * token counts around its tiles, pairs and token group (AMX_BIG_TG = 256: 257 and 300 cross it), row counts that
 * fill some of a pass's row groups (16, 48, 80), cross a range of KERN_AMX_BIG_ROWS (144, 137) and odd ones on
 * plain rows (37, 137), plain and packed rows, rows of 1, 3 and 8 blocks, and the kernels' dispatch on each case
 * (loop index `_i`: the mode). */
START_TEST(test_sb_orders)
{
    const amx_mode_t mode = (amx_mode_t)_i;
    if (!mode_available(mode))
        return;
    kern_test_seed(0x600 + (uint64_t)_i);
    static const kern_amx_big_t bigs[] = {{1, 0, 0}, {2, 1, 1}, {3, 1, 2}, {4, 0, 1}, {4, 1, 2}, {2, 0, 0}};
    static const int64_t toks[] = {1, 17, 33, 64, 100, 257, 300};
    static const int64_t lens[] = {256, 768, 2048};
    static const int64_t rows[] = {16, 48, 80, 37, 144, 137};
    const int nbig = (int)(sizeof bigs / sizeof bigs[0]);
    int k = 0;
    for (int ti = 0; ti < N_PACKED_TYPES; ti++)
        for (size_t tk = 0; tk < sizeof toks / sizeof toks[0]; tk++, k++) {
            const bool large = toks[tk] > 256;
            const int64_t n = large ? 256 : lens[(size_t)k % 3];
            int64_t nrows = rows[(size_t)k % 6];
            const bool packed = k % 3 != 2 && nrows % 16 == 0;
            if (large && nrows > 48)
                nrows = 48;
            mm_case_t c;
            case_new(&c, packed_types[ti], n, nrows, toks[tk], k % 3 == 1, k % 2 == 1, k % 5 == 2);
            if (k % 4 == 0)
                case_edge_acts(&c);
            if (packed)
                case_pack(&c, k % 2 == 0);
            compare_order(mode, &c, NULL);
            compare_order(mode, &c, &bigs[k % nbig]);
            if (!large)
                compare_order(mode, &c, &bigs[(k + 2) % nbig]);
            compare(mode, &c); /* the dispatch: either order by the token and row thresholds */
            case_free(&c);
        }
}
END_TEST

START_TEST(test_coverage)
{
    for (int ti = 0; ti < N_AMX_TYPES; ti++)
        ck_assert(kern_amx_covers(amx_types[ti]));
    ck_assert(!kern_amx_covers(GUILD_TYPE_IQ2_XXS));
    ck_assert(!kern_amx_covers(GUILD_TYPE_IQ1_S));
    ck_assert(!kern_amx_covers(GUILD_TYPE_F32));
    /* every packed layout of 256-element blocks has its packed AMX kernel, and only those; the 32-element
     * types' layouts (q4_0, iq4_nl, mxfp4, q8_0) have none: from KERN_AMX_MIN_TOKENS tokens they are unpacked for
     * the plain kernels (check_pack's amx prefill case) */
    for (int t = 0; t < GUILD_TYPE_COUNT; t++) {
        const bool b32 = t == GUILD_TYPE_Q4_0 || t == GUILD_TYPE_IQ4_NL || t == GUILD_TYPE_MXFP4 || t == GUILD_TYPE_Q8_0;
        ck_assert_int_eq(kern_amx_packed_covers((guild_type_t)t), kern_pack_has((guild_type_t)t) && !b32);
        if (b32)
            ck_assert(kern_pack_has((guild_type_t)t));
    }
    char desc[256];
    kern_cpu_describe(kern_cpu(), desc, sizeof desc);
    fprintf(stderr, "check_amx: %s: %s; best level %s\n", kern_cpu()->model, desc,
            kern_level_name(kern_level_best()));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("amx");
    TCase *tc = tcase_create("model");
    tcase_add_test(tc, test_model_matches_matrix_product);
    tcase_add_test(tc, test_coverage);
    suite_add_tcase(s, tc);
    tc = tcase_create("kernels");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_small_groups, MODE_EMU, MODE_AMX + 1);
    tcase_add_loop_test(tc, test_tile_edges, MODE_EMU, MODE_AMX + 1);
    tcase_add_loop_test(tc, test_sb_orders, MODE_EMU, MODE_AMX + 1);
    tcase_add_loop_test(tc, test_prefill_groups, MODE_EMU, MODE_AMX + 1);
    tcase_add_test(tc, test_level_threshold);
    tcase_add_loop_test(tc, test_packed, MODE_EMU, MODE_LEVEL + 1);
    suite_add_tcase(s, tc);
    return check_run(s);
}
