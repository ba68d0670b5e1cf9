/* cuda_expert_matmul's int8 tensor-core path (tiles of CUDA_EXPERT_MMA_TILE pairs, gpu-worker/dense/cuda/expert_mma.cu)
 * against its dp4a path (tiles of 8): the SAME routed problem through both, outputs poisoned (NaN bytes) before
 * each launch, compared with memcmp, every type of cuda_expert_mma_supported (sampled dp4a outputs against
 * quant_vec_dot_ref too). Uneven expert loads (1, 63, 64, 65, 200 pairs, an expert with none, skip slots), with
 * and without w_up, n = 2048, 768 and DeepSeek-V3's 7168, row counts that leave a partial block of rows,
 * ldo > nrows, rows padded off the types' natural alignment and not (Q4_K, Q5_K and Q6_K's staged kernel: rows of
 * whole steps, aligned for its copies; Q6_K's rows of an odd count of blocks or padded by 2 bytes, 2-byte aligned:
 * its variant of a block a step), each case checked to take the staged kernel where it should
 * (cuda_expert_mma_staged: every Q4_K, Q5_K and Q6_K case). Then a timing of a Qwen3-30B-A3B-shaped layer (128 experts of 2048 x 768,
 * 2048 tokens x 8 slots; Q4_K/Q6_K and the low-bit K and IQ types) and of a Qwen3-235B-A22B-shaped one (4096 x
 * 1536, 4096 and 512 tokens): dp4a against mma, cudaEvent, median of 5, ms and TFLOP/s printed (the bits compared
 * there too).
 * Dense: cuda_matmul's mma path (cuda_matmul_mma, and cuda_matmul itself by cuda_matmul_mma_rule)
 * against its dp4a path (cuda_matmul_dp4a), every mma type, n 2048/768/4096, 4096/512/77 rows and the Q6_K
 * output head (151936 rows), 7..2048 tokens (many rows from CUDA_MATMUL_MMA_WIDE_TOK on cuda_matmul's mma path),
 * memcmp from poisoned outputs; and their timing (q4_K 4096 x 4096,
 * 4096 x 2048, 2048 x 4096, q6_K 151936 x 2048, q4_K 8192 x 4096 at 4..4096 tokens) with the crossover printed.
 * A decode step's batches ("few bits"): the few-token kernel (cuda_matmul_few) and every other path against the dp4a
 * kernel and against one-token launches at 2, 3, 4, 8, 13, 16, 17 and 31 tokens (Q4_K, Q6_K, Q8_0, Q5_K, IQ4_XS;
 * K of 1 to 16 blocks, partial row tiles, rows padded and not), and Q/K/V launches (cuda_matmul_multi_types: one
 * type, Q4_K/Q5_K with Q6_K) at 1 .. 16 tokens against one-token launches; "few timing": Qwen3-30B-A3B's dense
 * products and its Q/K/V launch at 1, 2, 4, 8 and 16 tokens, the dp4a kernel against cuda_matmul.
 * Needs a CUDA device of compute capability 8.0 or more: without one the program prints why and exits 77. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "core/quant/fp16.h"
#include "core/quant/quant.h"
#include "core/sample/rng.h"
#include "gpu-worker/dense/cuda/cuda_kernels.h"
#include "gpu-worker/dense/cuda/matmul_rule.h"
#include "gpu-worker/dense/cuda/cuda_util.h"
#include "tests/cuda/cuda_test_util.h"

static cudaStream_t stream;

#define CK_CUDA(call) ck_assert_msg((call) == cudaSuccess, "%s: %s", #call, cudaGetErrorString(cudaGetLastError()))

static void *dev_alloc(size_t bytes)
{
    void *p = NULL;
    CK_CUDA(cudaMalloc(&p, bytes));
    return p;
}

static size_t row_bytes(guild_type_t t, int64_t n)
{
    uint64_t b = 0;
    ck_assert(quant_row_bytes(t, (uint64_t)n, &b, NULL) == 0);
    return (size_t)b;
}

/* A random weight row: random bytes (every scale and quant pattern), then each block's float16 scales set to
 * finite values of varied magnitude (random bits would give NaN and infinities). */
static void fill_weights(rng_t *r, guild_type_t type, char *w, size_t bytes)
{
    size_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
        const uint64_t v = rng_next(r);
        memcpy(w + i, &v, 8);
    }
    for (; i < bytes; i++)
        w[i] = (char)rng_next(r);
    size_t bsz, doff[2];
    int nd;
    if (type == GUILD_TYPE_MXFP4) {
        /* E8M0 exponents of scales 2^-10 .. 2^5 (the extremes would overflow to infinities whose NaN sums have
         * other payloads on the CPU) */
        ck_assert(bytes % sizeof(quant_block_mxfp4) == 0);
        for (size_t b = 0; b < bytes; b += sizeof(quant_block_mxfp4))
            w[b] = (char)(118 + rng_next(r) % 16);
        return;
    }
    switch (type) {
    case GUILD_TYPE_Q4_K: bsz = sizeof(quant_block_q4_K), doff[0] = 0, doff[1] = 2, nd = 2; break;
    case GUILD_TYPE_Q5_K: bsz = sizeof(quant_block_q5_K), doff[0] = 0, doff[1] = 2, nd = 2; break;
    case GUILD_TYPE_Q6_K: bsz = sizeof(quant_block_q6_K), doff[0] = 208, doff[1] = 0, nd = 1; break;
    case GUILD_TYPE_IQ4_XS: bsz = sizeof(quant_block_iq4_xs), doff[0] = 0, doff[1] = 0, nd = 1; break;
    case GUILD_TYPE_Q8_0: bsz = sizeof(quant_block_q8_0), doff[0] = 0, doff[1] = 0, nd = 1; break;
    case GUILD_TYPE_Q2_K: bsz = sizeof(quant_block_q2_K), doff[0] = 80, doff[1] = 82, nd = 2; break;
    case GUILD_TYPE_Q3_K: bsz = sizeof(quant_block_q3_K), doff[0] = 108, doff[1] = 0, nd = 1; break;
    case GUILD_TYPE_Q4_0: bsz = sizeof(quant_block_q4_0), doff[0] = 0, doff[1] = 0, nd = 1; break;
    case GUILD_TYPE_Q5_0: bsz = sizeof(quant_block_q5_0), doff[0] = 0, doff[1] = 0, nd = 1; break;
    case GUILD_TYPE_IQ4_NL: bsz = sizeof(quant_block_iq4_nl), doff[0] = 0, doff[1] = 0, nd = 1; break;
    case GUILD_TYPE_IQ2_XXS: bsz = sizeof(quant_block_iq2_xxs), doff[0] = 0, doff[1] = 0, nd = 1; break;
    case GUILD_TYPE_IQ2_XS: bsz = sizeof(quant_block_iq2_xs), doff[0] = 0, doff[1] = 0, nd = 1; break;
    case GUILD_TYPE_IQ2_S: bsz = sizeof(quant_block_iq2_s), doff[0] = 0, doff[1] = 0, nd = 1; break;
    case GUILD_TYPE_IQ3_XXS: bsz = sizeof(quant_block_iq3_xxs), doff[0] = 0, doff[1] = 0, nd = 1; break;
    case GUILD_TYPE_IQ3_S: bsz = sizeof(quant_block_iq3_s), doff[0] = 0, doff[1] = 0, nd = 1; break;
    case GUILD_TYPE_IQ1_S: bsz = sizeof(quant_block_iq1_s), doff[0] = 0, doff[1] = 0, nd = 1; break;
    case GUILD_TYPE_IQ1_M:
        /* the fp16 scale is the top nibbles of the four uint16 of scales (little-endian, at offset 48) */
        ck_assert(bytes % sizeof(quant_block_iq1_m) == 0);
        for (size_t b = 0; b < bytes; b += sizeof(quant_block_iq1_m)) {
            const float v = (float)(1e-4 + 3e-3 * rng_uniform(r)) * ((rng_next(r) & 3) ? 1.0f : 10.0f);
            const quant_half_t h = quant_f32_to_f16(v);
            uint16_t hb, sc[4];
            memcpy(&hb, &h, 2);
            memcpy(sc, w + b + 48, 8);
            for (int k = 0; k < 4; k++)
                sc[k] = (uint16_t)((sc[k] & 0x0fff) | (((hb >> (4 * k)) & 0xf) << 12));
            memcpy(w + b + 48, sc, 8);
        }
        return;
    default: ck_abort_msg("no weight filler for type %d", (int)type); return;
    }
    ck_assert(bytes % bsz == 0);
    for (size_t b = 0; b < bytes; b += bsz)
        for (int k = 0; k < nd; k++) {
            const float v = (float)(1e-4 + 3e-3 * rng_uniform(r)) * ((rng_next(r) & 3) ? 1.0f : 10.0f);
            const quant_half_t h = quant_f32_to_f16(v);
            memcpy(w + b + doff[k], &h, 2);
        }
}

/* n_expert matrices es bytes apart of nrows rows rs bytes apart (rb bytes of blocks, then padding). */
static void fill_matrices(rng_t *r, guild_type_t type, char *w, int32_t n_expert, size_t es, int64_t nrows,
                          size_t rs, size_t rb)
{
    memset(w, 0x5a, es * (size_t)n_expert);
    for (int32_t e = 0; e < n_expert; e++)
        for (int64_t row = 0; row < nrows; row++)
            fill_weights(r, type, w + (size_t)e * es + (size_t)row * rs, rb);
}

/* n_tok * n_used expert ids, expert e getting counts[e] pairs (the rest of the slots skip: -1), shuffled. */
static int32_t *make_ids(rng_t *r, const int32_t *counts, int32_t n_expert, int32_t n_pairs)
{
    int32_t *ids = malloc((size_t)n_pairs * sizeof *ids);
    int32_t k = 0;
    for (int32_t e = 0; e < n_expert; e++)
        for (int32_t i = 0; i < counts[e]; i++)
            ids[k++] = e;
    ck_assert_msg(k <= n_pairs, "%d pairs routed into %d slots", k, n_pairs);
    while (k < n_pairs)
        ids[k++] = -1;
    for (int32_t i = n_pairs - 1; i > 0; i--) {
        const int32_t j = (int32_t)(rng_next(r) % (uint64_t)(i + 1)), t = ids[i];
        ids[i] = ids[j];
        ids[j] = t;
    }
    return ids;
}

/* One routed problem on the device: weights (and w_up) of n_expert experts, activation rows, routing tables
 * for tiles of 8 and of CUDA_EXPERT_MMA_TILE. */
typedef struct {
    guild_type_t type;
    int64_t n, nrows, ldo;
    int32_t n_expert, n_pairs, act_div, n_act;
    size_t rs, es, as;
    char *w, *wu, *act;      /* device */
    char *hw, *hwu, *hact;   /* host copies (for the sampled check against quant_vec_dot_ref) */
    int32_t *ids;            /* device [n_pairs] */
    int32_t *order[2], *tiles[2], *n_tiles[2], max_tiles[2];
    float *out;              /* device [n_pairs][ldo] */
    size_t out_bytes;
} problem_t;

static const int32_t tile_of[2] = {8, CUDA_EXPERT_MMA_TILE};

static void problem_init(problem_t *P, rng_t *r, guild_type_t type, int64_t n, int64_t nrows, bool gu,
                         const int32_t *h_ids, int32_t n_expert, int32_t n_pairs, int32_t act_div, bool padded)
{
    memset(P, 0, sizeof *P);
    P->type = type, P->n = n, P->nrows = nrows, P->ldo = nrows + 3;
    P->n_expert = n_expert, P->n_pairs = n_pairs, P->act_div = act_div;
    P->n_act = (n_pairs + act_div - 1) / act_div;
    /* padded: rows padded where the type's alignment allows (16 bytes for Q4_K/Q5_K, 4 for IQ4_XS and Q2_K, 2 for
     * the others); else rows of the blocks alone, as a model file's (Q6_K's rows of an even count of blocks then
     * 4-byte aligned: the staged kernel's copies) */
    const bool mma = cuda_expert_mma_supported(type);
    const size_t pad = !padded || !mma || type == GUILD_TYPE_Q4_K || type == GUILD_TYPE_Q5_K ? 0
                       : type == GUILD_TYPE_IQ4_XS || type == GUILD_TYPE_Q2_K ? 4 : 2;
    P->rs = row_bytes(type, n) + pad;
    P->es = P->rs * (size_t)nrows + 16;
    const guild_type_t at = quant_type_info(type)->dot_type;
    P->as = row_bytes(at, n) + 4;
    P->hw = malloc(P->es * (size_t)n_expert);
    fill_matrices(r, type, P->hw, n_expert, P->es, nrows, P->rs, row_bytes(type, n));
    P->w = dev_alloc(P->es * (size_t)n_expert);
    CK_CUDA(cudaMemcpy(P->w, P->hw, P->es * (size_t)n_expert, cudaMemcpyHostToDevice));
    if (gu) {
        P->hwu = malloc(P->es * (size_t)n_expert);
        fill_matrices(r, type, P->hwu, n_expert, P->es, nrows, P->rs, row_bytes(type, n));
        P->wu = dev_alloc(P->es * (size_t)n_expert);
        CK_CUDA(cudaMemcpy(P->wu, P->hwu, P->es * (size_t)n_expert, cudaMemcpyHostToDevice));
    }
    /* activations: random floats of mixed scales quantized on the device (well-formed Q8_K blocks) */
    const size_t nf = (size_t)P->n_act * (size_t)n;
    float *hf = malloc(nf * sizeof *hf);
    for (size_t i = 0; i < nf; i++) {
        const double s = (i / 256) % 3 == 0 ? 0.02 : (i / 256) % 3 == 1 ? 1.0 : 9.0;
        hf[i] = (float)(s * (2 * rng_uniform(r) - 1));
    }
    float *df = dev_alloc(nf * sizeof *df);
    CK_CUDA(cudaMemcpy(df, hf, nf * sizeof *df, cudaMemcpyHostToDevice));
    P->act = dev_alloc(P->as * (size_t)P->n_act);
    guild_err_t err;
    ck_assert_msg(cuda_quantize(at, df, n, P->act, P->as, n, P->n_act, stream, &err) == 0, "%s", err.msg);
    CK_CUDA(cudaStreamSynchronize(stream));
    P->hact = malloc(P->as * (size_t)P->n_act);
    CK_CUDA(cudaMemcpy(P->hact, P->act, P->as * (size_t)P->n_act, cudaMemcpyDeviceToHost));
    cudaFree(df);
    free(hf);
    P->ids = dev_alloc((size_t)n_pairs * sizeof(int32_t));
    CK_CUDA(cudaMemcpy(P->ids, h_ids, (size_t)n_pairs * sizeof(int32_t), cudaMemcpyHostToDevice));
    for (int k = 0; k < 2; k++) {
        P->max_tiles[k] = cuda_expert_max_tiles(n_pairs, n_expert, tile_of[k]);
        P->order[k] = dev_alloc((size_t)n_pairs * sizeof(int32_t));
        P->tiles[k] = dev_alloc((size_t)P->max_tiles[k] * 4 * sizeof(int32_t));
        P->n_tiles[k] = dev_alloc(sizeof(int32_t));
        ck_assert_msg(cuda_expert_route(P->ids, n_pairs, n_expert, tile_of[k], P->order[k], P->tiles[k],
                                        P->n_tiles[k], stream, &err) == 0, "%s", err.msg);
    }
    P->out_bytes = (size_t)n_pairs * (size_t)P->ldo * sizeof(float);
    P->out = dev_alloc(P->out_bytes);
}

static void problem_fini(problem_t *P)
{
    cudaFree(P->w);
    cudaFree(P->wu);
    cudaFree(P->act);
    cudaFree(P->ids);
    for (int k = 0; k < 2; k++) {
        cudaFree(P->order[k]);
        cudaFree(P->tiles[k]);
        cudaFree(P->n_tiles[k]);
    }
    cudaFree(P->out);
    free(P->hw);
    free(P->hwu);
    free(P->hact);
}

/* Path k (0: dp4a tiles of 8, 1: mma) into P->out. */
static void problem_run(problem_t *P, int k)
{
    guild_err_t err;
    ck_assert_msg(cuda_expert_matmul(P->type, P->n, P->nrows, P->w, P->wu, P->es, P->rs, P->act, P->as,
                                     P->act_div, P->order[k], P->tiles[k], P->n_tiles[k], P->max_tiles[k],
                                     tile_of[k], P->out, P->ldo, stream, &err) == 0, "%s", err.msg);
}

/* Whether a case of a type must take the staged kernel: every Q4_K, Q5_K and Q6_K case here (the weight and
 * activation rows of every case are aligned for its copies). */
static bool staged_type(guild_type_t t)
{
    return t == GUILD_TYPE_Q4_K || t == GUILD_TYPE_Q5_K || t == GUILD_TYPE_Q6_K;
}

/* The mma kernel a routed problem takes, checked against staged_type. */
static const char *problem_kernel(const problem_t *P, const char *what)
{
    if (!cuda_expert_mma_supported(P->type))
        return "dp4a only";
    const bool st = cuda_expert_mma_staged(P->type, P->n, P->w, P->wu, P->es, P->rs, P->act, P->as, false);
    ck_assert_msg(st == staged_type(P->type), "%s: the staged kernel %s it", what, st ? "takes" : "does not take");
    return st ? "staged kernel" : "mma kernel";
}

/* Both paths from poisoned outputs; returns the count of outputs that differ (0: memcmp-identical) and checks
 * that skipped pairs and the ldo padding stay poison and that routed outputs were written. */
static long problem_compare(problem_t *P, const int32_t *h_ids, const char *what)
{
    float *got[2];
    /* a type without the mma kernel: the dp4a path alone, against the sampled anchor below */
    const int paths = cuda_expert_mma_supported(P->type) ? 2 : 1;
    got[1] = NULL;
    for (int k = 0; k < paths; k++) {
        got[k] = malloc(P->out_bytes);
        CK_CUDA(cudaMemsetAsync(P->out, 0xff, P->out_bytes, stream));
        problem_run(P, k);
        CK_CUDA(cudaStreamSynchronize(stream));
        CK_CUDA(cudaMemcpy(got[k], P->out, P->out_bytes, cudaMemcpyDeviceToHost));
    }
    long bad = 0, written = 0;
    const uint32_t poison = 0xffffffffu;
    for (int32_t p = 0; p < P->n_pairs; p++)
        for (int64_t r = 0; r < P->ldo; r++) {
            const size_t i = (size_t)p * (size_t)P->ldo + (size_t)r;
            const bool routed = r < P->nrows && h_ids[p] >= 0;
            uint32_t b0, b1;
            memcpy(&b0, &got[0][i], 4);
            memcpy(&b1, &got[paths - 1][i], 4);
            if (!routed) {
                ck_assert_msg(b0 == poison && b1 == poison, "%s: pair %d row %lld (not routed / padding) was "
                              "written (dp4a %08x, mma %08x)", what, p, (long long)r, b0, b1);
                continue;
            }
            written += b0 != poison;
            if (b0 != b1 && bad++ < 5)
                fprintf(stderr, "  %s: pair %d (expert %d) row %lld: mma %.9g, dp4a %.9g\n", what, p, h_ids[p],
                        (long long)r, (double)got[1][i], (double)got[0][i]);
        }
    ck_assert_msg(written > 0, "%s: the dp4a path wrote nothing", what);
    /* an anchor independent of both kernels: sampled outputs of the dp4a path (which the mma path must equal)
     * against quant_vec_dot_ref (exact), and with w_up against silu(g) * u on the host (libm expf against
     * CUDA's: check_cuda_kernels' swiglu tolerance) */
    int checked = 0;
    for (int k = 0; k < 4096 && checked < 256; k++) {
        const int32_t p = (int32_t)(((uint64_t)k * 7919u + 13u) % (uint64_t)P->n_pairs);
        const int64_t row = (int64_t)(((uint64_t)k * 104729u + 7u) % (uint64_t)P->nrows);
        if (h_ids[p] < 0)
            continue;
        const size_t wo = (size_t)h_ids[p] * P->es + (size_t)row * P->rs;
        const char *a = P->hact + (size_t)(p / P->act_div) * P->as;
        const float g = quant_vec_dot_ref(P->type, P->n, P->hw + wo, a);
        const float v = got[0][(size_t)p * (size_t)P->ldo + (size_t)row];
        if (!P->hwu) {
            ck_assert_msg(!memcmp(&g, &v, sizeof g), "%s: pair %d row %lld: dp4a %.9g, quant_vec_dot_ref %.9g", what,
                          p, (long long)row, (double)v, (double)g);
        } else {
            const float u = quant_vec_dot_ref(P->type, P->n, P->hwu + wo, a);
            const float ref = g / (1.0f + expf(-g)) * u;
            ck_assert_msg(fabsf(v - ref) <= 2e-6f * fabsf(ref) + 1e-7f, "%s: pair %d row %lld: dp4a %.9g, host "
                          "silu(g) * u %.9g", what, p, (long long)row, (double)v, (double)ref);
        }
        checked++;
    }
    ck_assert_msg(checked > 0, "%s: no routed output sampled", what);
    free(got[0]);
    free(got[1]);
    return bad;
}

/* ---- bits ------------------------------------------------------------------------------------------------ */

typedef struct {
    guild_type_t type;
    int64_t n, nrows;
    bool gu;
} bits_case_t;

static const bits_case_t bits_cases[] = {
    {GUILD_TYPE_Q4_K, 2048, 768, true},  {GUILD_TYPE_Q4_K, 768, 2048, false}, {GUILD_TYPE_Q6_K, 768, 2048, false},
    {GUILD_TYPE_Q6_K, 2048, 768, true},  {GUILD_TYPE_Q4_K, 512, 100, true},   {GUILD_TYPE_Q4_K, 256, 77, false},
    {GUILD_TYPE_Q6_K, 512, 77, false},   {GUILD_TYPE_Q6_K, 256, 40, true},    {GUILD_TYPE_Q5_K, 2048, 768, true},
    {GUILD_TYPE_Q5_K, 768, 200, false},  {GUILD_TYPE_IQ4_XS, 2048, 768, true}, {GUILD_TYPE_IQ4_XS, 768, 200, false},
    {GUILD_TYPE_Q8_0, 2048, 768, true},  {GUILD_TYPE_Q8_0, 96, 200, false},
    {GUILD_TYPE_MXFP4, 2880, 2880, true}, /* gpt-oss's expert shape */
    {GUILD_TYPE_MXFP4, 2880, 2880, false}, {GUILD_TYPE_MXFP4, 96, 200, false},
    {GUILD_TYPE_Q2_K, 7168, 2048, true}, /* DeepSeek-V3's gate/up shape */
    {GUILD_TYPE_Q2_K, 2048, 7168, false}, {GUILD_TYPE_Q2_K, 256, 77, false},
    {GUILD_TYPE_Q3_K, 7168, 2048, true},  {GUILD_TYPE_Q3_K, 2048, 7168, false}, {GUILD_TYPE_Q3_K, 512, 100, true},
    {GUILD_TYPE_IQ1_S, 7168, 2048, true},  {GUILD_TYPE_IQ1_S, 2048, 7168, false}, {GUILD_TYPE_IQ1_S, 256, 77, false},
    {GUILD_TYPE_IQ2_XXS, 7168, 2048, true}, {GUILD_TYPE_IQ2_XXS, 2048, 7168, false},
    {GUILD_TYPE_IQ2_XXS, 512, 100, true}, {GUILD_TYPE_IQ1_M, 7168, 2048, true},  {GUILD_TYPE_IQ1_M, 768, 200, false},
    {GUILD_TYPE_IQ2_XS, 2048, 768, true},  {GUILD_TYPE_IQ2_XS, 768, 200, false}, {GUILD_TYPE_IQ2_S, 2048, 768, true},
    {GUILD_TYPE_IQ2_S, 768, 200, false},   {GUILD_TYPE_IQ3_XXS, 2048, 768, true}, {GUILD_TYPE_IQ3_XXS, 768, 200, false},
    {GUILD_TYPE_IQ3_S, 2048, 768, true},   {GUILD_TYPE_IQ3_S, 768, 200, false},  {GUILD_TYPE_Q4_0, 2048, 768, true},
    {GUILD_TYPE_Q4_0, 96, 200, false},     {GUILD_TYPE_Q5_0, 2048, 768, true},   {GUILD_TYPE_Q5_0, 96, 200, false},
    {GUILD_TYPE_IQ4_NL, 2880, 2880, true}, {GUILD_TYPE_IQ4_NL, 96, 200, false},
};
#define N_BITS_CASES (int)(sizeof bits_cases / sizeof bits_cases[0])

/* Rows not padded, as a model file's (Qwen3-235B-A22B's experts among them): Q6_K's rows of an even count of
 * blocks are then 4-byte aligned, which the staged kernel's copies of two blocks a step need; of an odd count
 * (Qwen3-30B-A3B's down projection: 768 columns, rows of 630 bytes) 2-byte aligned, its variant of a block a
 * step: a row's first byte at byte 0 or 2 of a word, every step. */
static const bits_case_t plain_cases[] = {
    {GUILD_TYPE_Q6_K, 1536, 4096, false}, {GUILD_TYPE_Q6_K, 512, 77, false}, {GUILD_TYPE_Q6_K, 2048, 200, true},
    {GUILD_TYPE_Q4_K, 4096, 1536, true},  {GUILD_TYPE_Q5_K, 4096, 300, false}, {GUILD_TYPE_Q6_K, 768, 2048, false},
    {GUILD_TYPE_Q6_K, 768, 200, true},    {GUILD_TYPE_Q6_K, 2304, 77, false},  {GUILD_TYPE_Q6_K, 256, 130, true},
};
#define N_PLAIN_CASES (int)(sizeof plain_cases / sizeof plain_cases[0])

static void bits_run(const bits_case_t *C, uint64_t seed, bool padded)
{
    rng_t r;
    rng_seed(&r, seed);
    /* expert loads: 1, 63, 64, 65, 200 pairs, one expert with none, two more with 130 and 9 */
    static const int32_t counts[] = {1, 63, 64, 65, 200, 0, 130, 9};
    const int32_t n_expert = 8, n_used = 8, n_tok = 72, n_pairs = n_tok * n_used; /* 532 routed, 44 skip */
    int32_t *ids = make_ids(&r, counts, n_expert, n_pairs);
    problem_t P;
    problem_init(&P, &r, C->type, C->n, C->nrows, C->gu, ids, n_expert, n_pairs, C->gu ? n_used : 1, padded);
    char what[128];
    snprintf(what, sizeof what, "%s %s n=%lld rows=%lld%s", quant_type_info(C->type)->name,
             C->gu ? "gate+up" : "plain", (long long)C->n, (long long)C->nrows, padded ? "" : " (rows not padded)");
    const char *kernel = problem_kernel(&P, what);
    const long bad = problem_compare(&P, ids, what);
    printf("%s: %s mma (%s) vs dp4a, loads 1/63/64/65/200/0/130/9 pairs: %ld outputs differ\n", bad ? "FAIL" : "PASS",
           what, kernel, bad);
    ck_assert_msg(bad == 0, "%s: %ld outputs of the mma path differ from the dp4a path", what, bad);
    problem_fini(&P);
    free(ids);
}

START_TEST(test_mma_bits)
{
    bits_run(&bits_cases[_i], 500 + (uint64_t)_i, true);
}
END_TEST

START_TEST(test_mma_bits_plain)
{
    bits_run(&plain_cases[_i], 600 + (uint64_t)_i, false);
}
END_TEST

START_TEST(test_mma_rejects)
{
    guild_err_t err;
    int32_t *d = dev_alloc(4096);
    /* a type without an mma kernel asked for mma tiles: an error naming it, nothing launched */
    ck_assert(!cuda_expert_mma_supported(GUILD_TYPE_F32));
    ck_assert(cuda_expert_mma_supported(GUILD_TYPE_Q4_K) && cuda_expert_mma_supported(GUILD_TYPE_Q6_K));
    ck_assert(cuda_expert_mma_supported(GUILD_TYPE_MXFP4) && cuda_expert_mma_supported(GUILD_TYPE_Q2_K));
    ck_assert(cuda_expert_mma_supported(GUILD_TYPE_Q3_K) && cuda_expert_mma_supported(GUILD_TYPE_IQ1_S));
    ck_assert(cuda_expert_mma_supported(GUILD_TYPE_IQ2_XXS) && cuda_expert_mma_supported(GUILD_TYPE_IQ1_M));
    ck_assert(cuda_expert_mma_supported(GUILD_TYPE_Q4_0) && cuda_expert_mma_supported(GUILD_TYPE_IQ4_NL));
    ck_assert(!cuda_expert_mma_supported(GUILD_TYPE_Q4_1) && !cuda_expert_mma_supported(GUILD_TYPE_BF16));
    ck_assert_int_eq(cuda_expert_matmul(GUILD_TYPE_F32, 256, 16, d, NULL, 0, 1024, d, 1024, 1, d, d, d, 1,
                                        CUDA_EXPERT_MMA_TILE, (float *)d, 16, stream, &err), -1);
    ck_assert_msg(strstr(err.msg, "mma") != NULL, "%s", err.msg);
    cudaFree(d);
}
END_TEST

/* ---- timing ---------------------------------------------------------------------------------------------- */

static int cmp_float(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Median of 5 timed runs (after one warm-up) of run(ctx, k) on the stream, in ms. */
static float time_median(void (*run)(void *ctx, int k), void *ctx, int k)
{
    cudaEvent_t e0, e1;
    CK_CUDA(cudaEventCreate(&e0));
    CK_CUDA(cudaEventCreate(&e1));
    float ms[5];
    run(ctx, k);
    for (int i = 0; i < 5; i++) {
        CK_CUDA(cudaEventRecord(e0, stream));
        run(ctx, k);
        CK_CUDA(cudaEventRecord(e1, stream));
        CK_CUDA(cudaEventSynchronize(e1));
        CK_CUDA(cudaEventElapsedTime(&ms[i], e0, e1));
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    qsort(ms, 5, sizeof ms[0], cmp_float);
    return ms[2];
}

static void problem_run_ctx(void *P, int k)
{
    problem_run(P, k);
}

/* Median of 5 timed runs (after one warm-up) of path k, in ms. */
static float time_path(problem_t *P, int k)
{
    return time_median(problem_run_ctx, P, k);
}

/* Qwen3-30B-A3B: 128 experts, n_embd 2048, n_ff 768, 8 of them per token; random top-8 routing. Gate and up
 * Q4_K, then the low-bit types of the big downloads. Last, Qwen3-235B-A22B's layer (n_embd 4096, n_ff 1536, 128
 * experts, top-8) at 4096 tokens, Q4_K gate and up, Q6_K down: a streamed prefill chunk's products. */
static const struct {
    int32_t n_tok;
    guild_type_t gate, down;
    int64_t n_embd, n_ff;
} timing_runs[] = {{2048, GUILD_TYPE_Q4_K, GUILD_TYPE_Q4_K, 2048, 768},
                   {2048, GUILD_TYPE_Q4_K, GUILD_TYPE_Q6_K, 2048, 768},
                   {512, GUILD_TYPE_Q4_K, GUILD_TYPE_Q4_K, 2048, 768},
                   {128, GUILD_TYPE_Q4_K, GUILD_TYPE_Q4_K, 2048, 768},
                   {64, GUILD_TYPE_Q4_K, GUILD_TYPE_Q4_K, 2048, 768},
                   {2048, GUILD_TYPE_Q2_K, GUILD_TYPE_Q3_K, 2048, 768},
                   {2048, GUILD_TYPE_IQ1_S, GUILD_TYPE_IQ2_XXS, 2048, 768},
                   {2048, GUILD_TYPE_IQ1_M, GUILD_TYPE_IQ2_XS, 2048, 768},
                   {2048, GUILD_TYPE_IQ3_XXS, GUILD_TYPE_IQ2_S, 2048, 768},
                   {4096, GUILD_TYPE_Q4_K, GUILD_TYPE_Q6_K, 4096, 1536},
                   {512, GUILD_TYPE_Q4_K, GUILD_TYPE_Q6_K, 4096, 1536}};
#define N_TIMING_RUNS (int)(sizeof timing_runs / sizeof timing_runs[0])

START_TEST(test_mma_timing)
{
    const int32_t n_tok = timing_runs[_i].n_tok, n_expert = 128, n_used = 8, n_pairs = n_tok * n_used;
    const int64_t n_embd = timing_runs[_i].n_embd, n_ff = timing_runs[_i].n_ff;
    rng_t r;
    rng_seed(&r, 900 + (uint64_t)_i);
    int32_t *ids = malloc((size_t)n_pairs * sizeof *ids);
    for (int32_t t = 0; t < n_tok; t++)
        for (int32_t k = 0; k < n_used; k++) {
            int32_t e, dup;
            do {
                e = (int32_t)(rng_next(&r) % (uint64_t)n_expert);
                dup = 0;
                for (int32_t j = 0; j < k; j++)
                    dup |= ids[t * n_used + j] == e;
            } while (dup);
            ids[t * n_used + k] = e;
        }
    problem_t G, D;
    const bool padded = n_embd == 2048; /* the 235B layer in a model file's layout */
    problem_init(&G, &r, timing_runs[_i].gate, n_embd, n_ff, true, ids, n_expert, n_pairs, n_used, padded);
    problem_init(&D, &r, timing_runs[_i].down, n_ff, n_embd, false, ids, n_expert, n_pairs, 1, padded);
    char what[96];
    snprintf(what, sizeof what, "%d tokens gate+up %s", n_tok, quant_type_info(timing_runs[_i].gate)->name);
    const char *kernel_g = problem_kernel(&G, what);
    const long bad_g = problem_compare(&G, ids, what);
    snprintf(what, sizeof what, "%d tokens down %s", n_tok, quant_type_info(timing_runs[_i].down)->name);
    const char *kernel_d = problem_kernel(&D, what);
    const long bad_d = problem_compare(&D, ids, what);
    const double fl_g = 2.0 * 2.0 * (double)n_pairs * (double)n_embd * (double)n_ff;
    const double fl_d = 2.0 * (double)n_pairs * (double)n_embd * (double)n_ff;
    float t[2][2];
    for (int k = 0; k < 2; k++) {
        t[k][0] = time_path(&G, k);
        t[k][1] = time_path(&D, k);
    }
    printf("%s: %s layer, %d tokens x %d of %d experts (%.0f pairs/expert), gate+up %s, down %s:\n",
           bad_g || bad_d ? "FAIL" : "PASS", n_embd == 2048 ? "Qwen3-30B-A3B" : "Qwen3-235B-A22B", n_tok, n_used,
           n_expert, (double)n_pairs / n_expert,
           quant_type_info(timing_runs[_i].gate)->name, quant_type_info(timing_runs[_i].down)->name);
    for (int k = 0; k < 2; k++)
        printf("  %-5s gate+up %8.3f ms %6.2f TFLOP/s | down %8.3f ms %6.2f TFLOP/s | layer %8.3f ms\n",
               k ? "mma" : "dp4a", t[k][0], fl_g / t[k][0] / 1e9, t[k][1], fl_d / t[k][1] / 1e9, t[k][0] + t[k][1]);
    printf("  speed-up mma/dp4a: gate+up %.2fx, down %.2fx, layer %.2fx; outputs differing: %ld + %ld; mma: gate+up "
           "%s, down %s\n", t[0][0] / t[1][0], t[0][1] / t[1][1], (t[0][0] + t[0][1]) / (t[1][0] + t[1][1]), bad_g,
           bad_d, kernel_g, kernel_d);
    ck_assert_msg(bad_g == 0 && bad_d == 0, "mma outputs differ from dp4a: %ld gate+up, %ld down", bad_g, bad_d);
    problem_fini(&G);
    problem_fini(&D);
    free(ids);
}
END_TEST

/* ---- dense (cuda_matmul) --------------------------------------------------------------------------------- */

/* One dense product on the device: nrows weight rows rs bytes apart (padded where the alignment allows, unless
 * plain), ntok activation rows quantized on the device, out [ntok][ldo = nrows + 3]. */
typedef struct {
    guild_type_t type;
    int64_t n, nrows, ldo;
    int32_t ntok;
    int32_t few_tile, few_kw; /* cuda_matmul_few's blocks (0: cuda_matmul's choice) */
    size_t rs, as;
    char *w, *act, *hw, *hact; /* device, host copies */
    float *out;
    size_t out_bytes;
} dense_t;

static void dense_init(dense_t *D, rng_t *r, guild_type_t type, int64_t n, int64_t nrows, int32_t ntok, bool plain)
{
    memset(D, 0, sizeof *D);
    D->type = type, D->n = n, D->nrows = nrows, D->ntok = ntok, D->ldo = nrows + 3;
    const size_t pad = plain                                                    ? 0
                       : type == GUILD_TYPE_Q4_K || type == GUILD_TYPE_Q5_K       ? 16
                       : type == GUILD_TYPE_IQ4_XS || type == GUILD_TYPE_Q2_K ? 4
                                                                              : 2;
    D->rs = row_bytes(type, n) + pad;
    D->hw = malloc(D->rs * (size_t)nrows);
    fill_matrices(r, type, D->hw, 1, D->rs * (size_t)nrows, nrows, D->rs, row_bytes(type, n));
    D->w = dev_alloc(D->rs * (size_t)nrows);
    CK_CUDA(cudaMemcpy(D->w, D->hw, D->rs * (size_t)nrows, cudaMemcpyHostToDevice));
    const guild_type_t at = quant_type_info(type)->dot_type;
    D->as = row_bytes(at, n) + 4;
    const size_t nf = (size_t)ntok * (size_t)n;
    float *hf = malloc(nf * sizeof *hf);
    for (size_t i = 0; i < nf; i++) {
        const double sc = (i / 256) % 3 == 0 ? 0.02 : (i / 256) % 3 == 1 ? 1.0 : 9.0;
        hf[i] = (float)(sc * (2 * rng_uniform(r) - 1));
    }
    float *df = dev_alloc(nf * sizeof *df);
    CK_CUDA(cudaMemcpy(df, hf, nf * sizeof *df, cudaMemcpyHostToDevice));
    D->act = dev_alloc(D->as * (size_t)ntok);
    guild_err_t err;
    ck_assert_msg(cuda_quantize(at, df, n, D->act, D->as, n, ntok, stream, &err) == 0, "%s", err.msg);
    CK_CUDA(cudaStreamSynchronize(stream));
    D->hact = malloc(D->as * (size_t)ntok);
    CK_CUDA(cudaMemcpy(D->hact, D->act, D->as * (size_t)ntok, cudaMemcpyDeviceToHost));
    cudaFree(df);
    free(hf);
    D->out_bytes = (size_t)ntok * (size_t)D->ldo * sizeof(float);
    D->out = dev_alloc(D->out_bytes);
}

static void dense_fini(dense_t *D)
{
    cudaFree(D->w);
    cudaFree(D->act);
    cudaFree(D->out);
    free(D->hw);
    free(D->hact);
}

/* Path k into D->out: 0 cuda_matmul_dp4a, 1 cuda_matmul_mma in blocks of 128 rows, 2 of 64 rows, 3 cuda_matmul,
 * 4 cuda_matmul_few (the few-token kernel), 5 the dp4a kernel one token a launch (what a session's token gets
 * alone: batch invariance). */
#define N_DENSE_PATHS 6
#define DENSE_TIMED_PATHS 5 /* the one-token launches are not timed */
static const char *const dense_path_name[N_DENSE_PATHS] = {"dp4a", "mma128", "mma64", "cuda_matmul", "few", "tok1"};

static void dense_run(dense_t *D, int k)
{
    guild_err_t err;
    int rc;
    if (k == 0)
        rc = cuda_matmul_dp4a(D->type, D->n, D->nrows, D->ntok, D->w, D->rs, D->act, D->as, D->out, D->ldo, stream,
                              &err);
    else if (k < 3)
        rc = cuda_matmul_mma(D->type, D->n, D->nrows, D->ntok, D->w, D->rs, D->act, D->as, D->out, D->ldo,
                             k == 1 ? 128 : 64, stream, &err);
    else if (k == 3)
        rc = cuda_matmul(D->type, D->n, D->nrows, D->ntok, D->w, D->rs, D->act, D->as, D->out, D->ldo, stream, &err);
    else if (k == 4)
        rc = cuda_matmul_few(D->type, D->n, D->nrows, D->ntok, D->w, D->rs, D->act, D->as, D->out, D->ldo,
                             D->few_tile, D->few_kw, stream, &err);
    else
        for (int32_t t = rc = 0; t < D->ntok && rc == 0; t++)
            rc = cuda_matmul_dp4a(D->type, D->n, D->nrows, 1, D->w, D->rs, D->act + (size_t)t * D->as, D->as,
                                  D->out + (size_t)t * (size_t)D->ldo, D->ldo, stream, &err);
    ck_assert_msg(rc == 0, "%s: %s", dense_path_name[k], err.msg);
}

/* Paths 0 .. np-1 from poisoned outputs: the count of outputs where a path differs from dp4a (0: memcmp-
 * identical); checks that the ldo padding stays poison, that every output was written, and sampled dp4a outputs
 * against quant_vec_dot_ref. */
static long dense_compare(dense_t *D, int np, const char *what)
{
    float *got[N_DENSE_PATHS] = {NULL};
    for (int k = 0; k < np; k++) {
        got[k] = malloc(D->out_bytes);
        ck_assert(got[k] != NULL);
        CK_CUDA(cudaMemsetAsync(D->out, 0xff, D->out_bytes, stream));
        dense_run(D, k);
        CK_CUDA(cudaStreamSynchronize(stream));
        CK_CUDA(cudaMemcpy(got[k], D->out, D->out_bytes, cudaMemcpyDeviceToHost));
    }
    long bad = 0, unwritten = 0;
    const uint32_t poison = 0xffffffffu;
    for (int32_t t = 0; t < D->ntok; t++) {
        const size_t o = (size_t)t * (size_t)D->ldo;
        for (int k = 1; k < np; k++)
            if (memcmp(got[0] + o, got[k] + o, (size_t)D->nrows * sizeof(float)))
                for (int64_t row = 0; row < D->nrows; row++)
                    if (memcmp(&got[0][o + row], &got[k][o + row], 4) && bad++ < 5)
                        fprintf(stderr, "  %s: %s token %d row %lld: %.9g, dp4a %.9g\n", what,
                                dense_path_name[k], t, (long long)row, (double)got[k][o + row],
                                (double)got[0][o + row]);
        for (int k = 0; k < np; k++)
            for (int64_t row = 0; row < D->ldo; row++) {
                uint32_t b;
                memcpy(&b, &got[k][o + row], 4);
                if (row >= D->nrows)
                    ck_assert_msg(b == poison, "%s: path %d wrote token %d padding row %lld (%08x)", what, k, t,
                                  (long long)row, b);
                else
                    unwritten += b == poison;
            }
    }
    ck_assert_msg(unwritten == 0, "%s: %ld outputs left unwritten", what, unwritten);
    for (int k = 0; k < 256; k++) {
        const int32_t t = (int32_t)(((uint64_t)k * 7919u + 13u) % (uint64_t)D->ntok);
        const int64_t row = (int64_t)(((uint64_t)k * 104729u + 7u) % (uint64_t)D->nrows);
        const float g = quant_vec_dot_ref(D->type, D->n, D->hw + (size_t)row * D->rs, D->hact + (size_t)t * D->as);
        const float v = got[0][(size_t)t * (size_t)D->ldo + (size_t)row];
        ck_assert_msg(!memcmp(&g, &v, sizeof g), "%s: token %d row %lld: dp4a %.9g, quant_vec_dot_ref %.9g", what, t,
                      (long long)row, (double)v, (double)g);
    }
    for (int k = 0; k < np; k++)
        free(got[k]);
    return bad;
}

typedef struct {
    guild_type_t type;
    int64_t n, nrows;
    int32_t ntok;
} dense_case_t;

#define DENSE_TYPE_CASES(T) \
    {T, 2048, 4096, 16}, {T, 768, 77, 33}, {T, 4096, 512, 100}, {T, 768, 4096, 64}, {T, 2048, 512, 2048}

static const dense_case_t dense_cases[] = {
    DENSE_TYPE_CASES(GUILD_TYPE_Q4_K), DENSE_TYPE_CASES(GUILD_TYPE_Q5_K), DENSE_TYPE_CASES(GUILD_TYPE_Q6_K),
    DENSE_TYPE_CASES(GUILD_TYPE_IQ4_XS), DENSE_TYPE_CASES(GUILD_TYPE_Q8_0), DENSE_TYPE_CASES(GUILD_TYPE_MXFP4),
    DENSE_TYPE_CASES(GUILD_TYPE_Q2_K), DENSE_TYPE_CASES(GUILD_TYPE_Q3_K), DENSE_TYPE_CASES(GUILD_TYPE_IQ2_XXS),
    DENSE_TYPE_CASES(GUILD_TYPE_IQ2_XS), DENSE_TYPE_CASES(GUILD_TYPE_IQ2_S), DENSE_TYPE_CASES(GUILD_TYPE_IQ3_XXS),
    DENSE_TYPE_CASES(GUILD_TYPE_IQ3_S), DENSE_TYPE_CASES(GUILD_TYPE_IQ1_S), DENSE_TYPE_CASES(GUILD_TYPE_IQ1_M),
    DENSE_TYPE_CASES(GUILD_TYPE_Q4_0), DENSE_TYPE_CASES(GUILD_TYPE_Q5_0), DENSE_TYPE_CASES(GUILD_TYPE_IQ4_NL),
    {GUILD_TYPE_MXFP4, 2880, 201088, 100}, /* gpt-oss's width and vocabulary */
    {GUILD_TYPE_Q6_K, 2048, 151936, 512}, /* the output head of Qwen3-30B-A3B */
    {GUILD_TYPE_Q4_K, 256, 1, 65},        /* one row, a token past a whole tile */
    {GUILD_TYPE_Q5_K, 2048, 200, 1024},   /* the staged kernel (from 1024 tokens), partial tiles and row blocks */
    /* products of many rows (a batched decode step's output head) below CUDA_MATMUL_MMA_MIN_TOK tokens, at the
     * edges of the rules (cuda_matmul_few_rule: the few-token kernel up to 16 tokens, then the mma kernel) */
    {GUILD_TYPE_Q6_K, 2048, CUDA_MATMUL_MMA_WIDE_ROWS + 77, 17},
    {GUILD_TYPE_Q6_K, 2048, CUDA_MATMUL_MMA_WIDE_ROWS + 77, CUDA_MATMUL_MMA_WIDE_TOK},
    {GUILD_TYPE_Q6_K, 2048, CUDA_MATMUL_MMA_WIDE_ROWS, 13},
    {GUILD_TYPE_Q4_K, 1024, CUDA_MATMUL_MMA_WIDE_ROWS - 1, CUDA_MATMUL_MMA_WIDE_TOK},
    {GUILD_TYPE_Q8_0, 512, CUDA_MATMUL_MMA_WIDE_ROWS + 5, CUDA_MATMUL_MMA_WIDE_TOK - 1},
};
#define N_DENSE_CASES (int)(sizeof dense_cases / sizeof dense_cases[0])

/* Rows not padded: Q6_K's of an even count of blocks in the staged kernel, of an odd count (2-byte aligned) in its
 * variant of a block a step */
static const dense_case_t dense_plain_cases[] = {{GUILD_TYPE_Q6_K, 4096, 300, 1100},
                                                 {GUILD_TYPE_Q4_K, 4096, 77, 1030},
                                                 {GUILD_TYPE_Q6_K, 768, 300, 1100},
                                                 {GUILD_TYPE_Q6_K, 2304, 77, 1030}};
#define N_DENSE_PLAIN_CASES (int)(sizeof dense_plain_cases / sizeof dense_plain_cases[0])

static void dense_bits_run(const dense_case_t *C, uint64_t seed, bool plain)
{
    rng_t r;
    rng_seed(&r, seed);
    dense_t D;
    dense_init(&D, &r, C->type, C->n, C->nrows, C->ntok, plain);
    char what[128];
    snprintf(what, sizeof what, "dense %s n=%lld rows=%lld tokens=%d%s", quant_type_info(C->type)->name,
             (long long)C->n, (long long)C->nrows, C->ntok, plain ? " (rows not padded)" : "");
    /* from 1024 tokens the three mma paths take the staged kernel where it has the type */
    const bool st = cuda_expert_mma_staged(C->type, C->n, D.w, NULL, 0, D.rs, D.act, D.as, true);
    if (C->ntok >= 1024)
        ck_assert_msg(st == staged_type(C->type), "%s: the staged kernel %s it", what, st ? "takes" : "does not take");
    const long bad = dense_compare(&D, N_DENSE_PATHS, what);
    printf("%s: %s mma128, mma64, cuda_matmul (%s%s), few and tok1 vs dp4a: %ld outputs differ\n",
           bad ? "FAIL" : "PASS", what,
           cuda_matmul_few_rule(C->nrows, C->ntok)   ? "few path"
           : cuda_matmul_mma_rule(C->nrows, C->ntok) ? "mma path"
                                                     : "dp4a path",
           C->ntok >= 1024 && st ? ", staged kernel" : "", bad);
    ck_assert_msg(bad == 0, "%s: %ld outputs differ from the dp4a path", what, bad);
    dense_fini(&D);
}

START_TEST(test_dense_bits)
{
    dense_bits_run(&dense_cases[_i], 700 + (uint64_t)_i, false);
}
END_TEST

START_TEST(test_dense_bits_plain)
{
    dense_bits_run(&dense_plain_cases[_i], 800 + (uint64_t)_i, true);
}
END_TEST

START_TEST(test_dense_rejects)
{
    guild_err_t err;
    char *d = dev_alloc(4096);
    ck_assert_int_eq(cuda_matmul_mma(GUILD_TYPE_F32, 256, 4, 64, d, 1024, d, 1024, (float *)d, 4, 0, stream, &err),
                     -1);
    ck_assert_msg(strstr(err.msg, "mma") != NULL, "%s", err.msg);
    ck_assert_int_eq(cuda_matmul_mma(GUILD_TYPE_Q4_1, 256, 4, 64, d, 160, d, 288, (float *)d, 4, 0, stream, &err),
                     -1);
    ck_assert_int_eq(cuda_matmul_mma(GUILD_TYPE_Q4_K, 256, 4, 64, d, 144, d, 292, (float *)d, 4, 96, stream, &err),
                     -1);
    /* the alignment rule holds on the mma path too: Q4_K rows 16-byte aligned */
    ck_assert_int_eq(cuda_matmul_mma(GUILD_TYPE_Q4_K, 256, 4, 64, d, 152, d, 292, (float *)d, 4, 0, stream, &err),
                     -1);
    ck_assert_int_eq(cuda_matmul(GUILD_TYPE_Q4_K, 256, 4, 64, d + 8, 144, d, 292, (float *)d, 4, stream, &err), -1);
    cudaFree(d);
}
END_TEST

static void dense_run_ctx(void *D, int k)
{
    dense_run(D, k);
}

/* Median of 5 timed runs (after one warm-up) of dense path k, in ms. */
static float time_dense(dense_t *D, int k)
{
    return time_median(dense_run_ctx, D, k);
}

static const struct {
    guild_type_t type;
    int64_t nrows, n;
} dense_shapes[] = {
    {GUILD_TYPE_Q4_K, 4096, 4096}, {GUILD_TYPE_Q4_K, 4096, 2048}, {GUILD_TYPE_Q4_K, 2048, 4096},
    {GUILD_TYPE_Q6_K, 151936, 2048}, {GUILD_TYPE_Q4_K, 8192, 4096}, /* Qwen3-235B-A22B's Q projection */
};

/* dp4a against mma for one shape at 4 .. 4096 tokens; the smallest token count from which mma wins. */
START_TEST(test_dense_timing)
{
    static const int32_t toks[] = {4, 8, 16, 32, 64, 512, 2048, 4096};
    const guild_type_t type = dense_shapes[_i].type;
    const int64_t nrows = dense_shapes[_i].nrows, n = dense_shapes[_i].n;
    /* the output head's outputs at 4096 tokens would take 2.5 GB */
    const int nt = (int)(sizeof toks / sizeof toks[0]) - (nrows > 8192);
    rng_t r;
    rng_seed(&r, 950 + (uint64_t)_i);
    /* the weights once, at the largest token count; smaller batches use its first rows of activations */
    dense_t D;
    dense_init(&D, &r, type, n, nrows, toks[nt - 1], false);
    int32_t mma_from = 2;
    while (!cuda_matmul_mma_rule(nrows, mma_from) || cuda_matmul_few_rule(nrows, mma_from))
        mma_from++;
    printf("dense timing %s %lld rows x n %lld (cuda_matmul takes mma from %d tokens):\n",
           quant_type_info(type)->name, (long long)nrows, (long long)n, mma_from);
    int32_t cross = -1;
    long bad_all = 0;
    for (int i = 0; i < nt; i++) {
        D.ntok = toks[i];
        char what[96];
        snprintf(what, sizeof what, "timing %s %lld x %lld, %d tokens", quant_type_info(type)->name,
                 (long long)nrows, (long long)n, D.ntok);
        const size_t full = D.out_bytes;
        D.out_bytes = (size_t)D.ntok * (size_t)D.ldo * sizeof(float);
        const long bad = dense_compare(&D, 3, what);
        D.out_bytes = full;
        bad_all += bad;
        float tm[DENSE_TIMED_PATHS];
        for (int k = 0; k < DENSE_TIMED_PATHS; k++)
            tm[k] = time_dense(&D, k);
        const double ops = 2.0 * (double)nrows * (double)n * (double)D.ntok;
        printf("  %5d tokens:", D.ntok);
        for (int k = 0; k < DENSE_TIMED_PATHS; k++)
            printf(" %s %.3f ms %.2f TOP/s |", dense_path_name[k], tm[k], ops / tm[k] / 1e9);
        printf(" cuda_matmul/dp4a speed-up %.2fx | %ld differ\n", tm[0] / tm[3], bad);
        const float t0 = tm[0], t1 = tm[1] < tm[2] ? tm[1] : tm[2];
        if (t1 < t0 && cross < 0)
            cross = D.ntok;
        else if (t1 >= t0)
            cross = -1;
    }
    printf("%s: dense %s %lld x %lld: mma (best block) faster from %d tokens on (of those timed; -1: not at the "
           "largest)\n",
           bad_all ? "FAIL" : "PASS", quant_type_info(type)->name, (long long)nrows, (long long)n, cross);
    ck_assert_msg(bad_all == 0, "%ld mma outputs differ from dp4a", bad_all);
    D.ntok = toks[nt - 1];
    dense_fini(&D);
}
END_TEST

/* ---- a decode step's batches (cuda_matmul_few_rule: the few-token kernel) -------------------------------------
 * Every path against the dp4a kernel and against one-token launches (dense_compare) at 2, 3, 4, 8, 13 and 16 tokens
 * (and 17, 31: two slices of 16), the types of a Q4_K_M file and Q8_0/Q5_K/IQ4_XS, K of 1 to 16 blocks (rounds of
 * the kernel's split along K with idle warps), row counts that leave a partial tile, one row. */
#define FEW_TOKS(T, n, rows) \
    {T, n, rows, 2}, {T, n, rows, 3}, {T, n, rows, 4}, {T, n, rows, 8}, {T, n, rows, 13}, {T, n, rows, 16}
static const dense_case_t few_cases[] = {
    FEW_TOKS(GUILD_TYPE_Q4_K, 4096, 2048), FEW_TOKS(GUILD_TYPE_Q4_K, 2304, 77), FEW_TOKS(GUILD_TYPE_Q6_K, 2048, 512),
    FEW_TOKS(GUILD_TYPE_Q6_K, 768, 45),    FEW_TOKS(GUILD_TYPE_Q8_0, 2048, 512), FEW_TOKS(GUILD_TYPE_Q8_0, 2080, 33),
    FEW_TOKS(GUILD_TYPE_Q5_K, 1280, 100),  FEW_TOKS(GUILD_TYPE_IQ4_XS, 512, 64),
    {GUILD_TYPE_Q4_K, 256, 1, 5},          {GUILD_TYPE_Q6_K, 256, 17, 16},       {GUILD_TYPE_Q4_K, 2048, 300, 17},
    {GUILD_TYPE_Q6_K, 4096, 130, 31},      {GUILD_TYPE_Q8_0, 32, 40, 9},         {GUILD_TYPE_Q6_K, 2048, 151936, 4},
};
#define N_FEW_CASES (int)(sizeof few_cases / sizeof few_cases[0])

START_TEST(test_few_bits)
{
    dense_bits_run(&few_cases[_i], 1300 + (uint64_t)_i, false);
}
END_TEST

START_TEST(test_few_bits_plain)
{
    dense_bits_run(&few_cases[_i], 1400 + (uint64_t)_i, true);
}
END_TEST

/* A decode step's Q, K and V in one launch (cuda_matmul_multi_types: one type, or Q4_K/Q5_K with a Q6_K V) at
 * 1 .. 16 tokens against each product's one-token dp4a launches, memcmp from poisoned outputs. */
static const struct {
    guild_type_t type[3];
    int64_t n, nrows[3];
} multi_cases[] = {
    {{GUILD_TYPE_Q4_K, GUILD_TYPE_Q4_K, GUILD_TYPE_Q4_K}, 2048, {4096, 512, 512}}, /* Qwen3-30B-A3B's */
    {{GUILD_TYPE_Q4_K, GUILD_TYPE_Q4_K, GUILD_TYPE_Q6_K}, 2048, {4096, 512, 512}},
    {{GUILD_TYPE_Q6_K, GUILD_TYPE_Q4_K, GUILD_TYPE_Q4_K}, 768, {77, 20, 300}}, /* the pair's B first */
    {{GUILD_TYPE_Q5_K, GUILD_TYPE_Q5_K, GUILD_TYPE_Q6_K}, 1280, {100, 33, 33}},
    {{GUILD_TYPE_Q8_0, GUILD_TYPE_Q8_0, GUILD_TYPE_Q8_0}, 2080, {260, 40, 40}},
};

START_TEST(test_few_multi)
{
    static const int32_t toks[] = {1, 2, 3, 4, 8, 13, 16};
    rng_t r;
    rng_seed(&r, 1500 + (uint64_t)_i);
    dense_t D[3];
    for (int k = 0; k < 3; k++)
        dense_init(&D[k], &r, multi_cases[_i].type[k], multi_cases[_i].n, multi_cases[_i].nrows[k], 16, false);
    long bad = 0;
    /* the rule's shape, then 16 warps along K in both tiles (cuda_set_matmul_few_shape) */
    static const int32_t shapes[][2] = {{0, 0}, {8, 16}, {16, 16}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
    for (size_t ti = 0; ti < sizeof toks / sizeof toks[0]; ti++) {
        const int32_t nt = toks[ti];
        guild_err_t serr;
        ck_assert_msg(cuda_set_matmul_few_shape(shapes[si][0], shapes[si][1], &serr) == 0, "%s", serr.msg);
        const void *w[3];
        size_t ws[3];
        int64_t nr[3], ldo[3];
        float *out[3];
        guild_type_t ty[3];
        for (int k = 0; k < 3; k++) {
            w[k] = D[k].w, ws[k] = D[k].rs, nr[k] = D[k].nrows, ldo[k] = D[k].ldo, out[k] = D[k].out;
            ty[k] = D[k].type;
            CK_CUDA(cudaMemsetAsync(D[k].out, 0xff, D[k].out_bytes, stream));
        }
        guild_err_t err;
        ck_assert_msg(cuda_matmul_multi_types(ty, D[0].n, nt, 3, w, ws, nr, D[0].act, D[0].as, out, ldo, stream,
                                              &err) == 0,
                      "%s", err.msg);
        CK_CUDA(cudaStreamSynchronize(stream));
        float *got[3], *ref[3];
        for (int k = 0; k < 3; k++) {
            got[k] = malloc(D[k].out_bytes);
            ref[k] = malloc(D[k].out_bytes);
            CK_CUDA(cudaMemcpy(got[k], D[k].out, D[k].out_bytes, cudaMemcpyDeviceToHost));
            CK_CUDA(cudaMemsetAsync(D[k].out, 0xff, D[k].out_bytes, stream));
            for (int32_t t = 0; t < nt; t++)
                ck_assert_msg(cuda_matmul_dp4a(D[k].type, D[k].n, D[k].nrows, 1, D[k].w, D[k].rs,
                                               D[0].act + (size_t)t * D[0].as, D[0].as,
                                               D[k].out + (size_t)t * (size_t)D[k].ldo, D[k].ldo, stream, &err) == 0,
                              "%s", err.msg);
            CK_CUDA(cudaStreamSynchronize(stream));
            CK_CUDA(cudaMemcpy(ref[k], D[k].out, D[k].out_bytes, cudaMemcpyDeviceToHost));
            /* the whole buffer: the tokens' rows equal, the padding and tokens past nt poison in both */
            for (size_t o = 0; o < D[k].out_bytes / 4; o++)
                if (memcmp(&got[k][o], &ref[k][o], 4) && bad++ < 5)
                    fprintf(stderr, "  multi case %d product %d, %d tokens: output %zu: %.9g, one token %.9g\n", _i,
                            k, nt, o, (double)got[k][o], (double)ref[k][o]);
            for (int32_t t = 0; t < nt; t++)
                for (int64_t row = 0; row < D[k].nrows; row++) {
                    uint32_t b;
                    memcpy(&b, &ref[k][(size_t)t * (size_t)D[k].ldo + (size_t)row], 4);
                    ck_assert_msg(b != 0xffffffffu, "multi case %d: one-token output unwritten", _i);
                }
            free(got[k]);
            free(ref[k]);
        }
    }
    guild_err_t serr;
    ck_assert_msg(cuda_set_matmul_few_shape(0, 0, &serr) == 0, "%s", serr.msg);
    printf("%s: few multi case %d (%s, %s, %s; n %lld): 1 .. 16 tokens (the rule's shape, 8 x 16 and 16 x 16) vs "
           "one-token launches: %ld outputs differ\n",
           bad ? "FAIL" : "PASS", _i, quant_type_info(D[0].type)->name, quant_type_info(D[1].type)->name,
           quant_type_info(D[2].type)->name, (long long)D[0].n, bad);
    ck_assert_msg(bad == 0, "%ld outputs differ", bad);
    for (int k = 0; k < 3; k++)
        dense_fini(&D[k]);
}
END_TEST

/* ---- timing of a decode step's products at 1 .. 16 tokens ------------------------------------------------------ */

/* Median of 5 timed groups of `reps` runs (after a warm-up group), in microseconds a run. */
static float time_reps(void (*run)(void *ctx, int k), void *ctx, int k, int reps)
{
    cudaEvent_t e0, e1;
    CK_CUDA(cudaEventCreate(&e0));
    CK_CUDA(cudaEventCreate(&e1));
    float ms[5];
    for (int i = 0; i < reps; i++)
        run(ctx, k);
    for (int i = 0; i < 5; i++) {
        CK_CUDA(cudaEventRecord(e0, stream));
        for (int j = 0; j < reps; j++)
            run(ctx, k);
        CK_CUDA(cudaEventRecord(e1, stream));
        CK_CUDA(cudaEventSynchronize(e1));
        CK_CUDA(cudaEventElapsedTime(&ms[i], e0, e1));
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    qsort(ms, 5, sizeof ms[0], cmp_float);
    return ms[2] * 1000.0f / (float)reps;
}

/* Qwen3-30B-A3B's dense products (Q4_K_M): wo, Q, K, V, the output head. */
static const struct {
    const char *name;
    guild_type_t type;
    int64_t nrows, n;
} few_shapes[] = {
    {"wo", GUILD_TYPE_Q4_K, 2048, 4096},   {"q", GUILD_TYPE_Q4_K, 4096, 2048},
    {"k", GUILD_TYPE_Q4_K, 512, 2048},     {"v q6_K", GUILD_TYPE_Q6_K, 512, 2048},
    {"head", GUILD_TYPE_Q6_K, 151936, 2048},
};

static const int32_t few_toks[] = {1, 2, 4, 8, 16};

/* D's first ntok token rows of outputs after path k. */
static float *dense_got(dense_t *D, int k)
{
    float *o = malloc(D->out_bytes);
    ck_assert(o != NULL);
    CK_CUDA(cudaMemsetAsync(D->out, 0xff, D->out_bytes, stream));
    dense_run(D, k);
    CK_CUDA(cudaStreamSynchronize(stream));
    CK_CUDA(cudaMemcpy(o, D->out, (size_t)D->ntok * (size_t)D->ldo * sizeof(float), cudaMemcpyDeviceToHost));
    return o;
}

START_TEST(test_few_timing)
{
    rng_t r;
    rng_seed(&r, 1600 + (uint64_t)_i);
    dense_t D;
    dense_init(&D, &r, few_shapes[_i].type, few_shapes[_i].n, few_shapes[_i].nrows, 16, false);
    const int reps = D.nrows > 8192 ? 5 : 20;
    long bad = 0;
    for (size_t ti = 0; ti < sizeof few_toks / sizeof few_toks[0]; ti++) {
        D.ntok = few_toks[ti];
        static const int paths[] = {0, 3, 2}; /* dp4a (the session-start kernel), cuda_matmul, mma64 */
        float us[3];
        for (int k = 0; k < 3; k++)
            us[k] = time_reps(dense_run_ctx, &D, paths[k], reps);
        printf("few timing %-7s %s %6lld x %5lld, %2d tokens: dp4a %8.2f us | cuda_matmul %8.2f us | mma64 %8.2f us | "
               "dp4a/cuda_matmul %.2fx | few:",
               few_shapes[_i].name, quant_type_info(D.type)->name, (long long)D.nrows, (long long)D.n, D.ntok, us[0],
               us[1], us[2], us[0] / us[1]);
        /* the few-token kernel's shapes, each checked against dp4a */
        float *ref = dense_got(&D, 0);
        for (int tile = 8; tile <= 16; tile += 8)
            for (int kw = 2; kw <= 16; kw *= 2) {
                if (tile == 16 && D.ntok <= 8)
                    continue;
                D.few_tile = tile, D.few_kw = kw;
                float *got = dense_got(&D, 4);
                for (size_t o = 0; o < (size_t)D.ntok * (size_t)D.ldo; o++)
                    bad += (o % (size_t)D.ldo) < (size_t)D.nrows && memcmp(&got[o], &ref[o], 4);
                free(got);
                printf(" %dx%d %.2f", tile, kw, time_reps(dense_run_ctx, &D, 4, reps));
            }
        D.few_tile = D.few_kw = 0;
        free(ref);
        printf(" us\n");
    }
    printf("%s: few timing %s: %ld outputs of the few-token shapes differ from dp4a\n", bad ? "FAIL" : "PASS",
           few_shapes[_i].name, bad);
    ck_assert_msg(bad == 0, "%ld outputs differ", bad);
    D.ntok = 16;
    dense_fini(&D);
}
END_TEST

/* Q, K and V in one launch (Qwen3-30B-A3B: 4096 + 512 + 512 rows of 2048), the dp4a kernel against today's. */
typedef struct {
    dense_t D[3];
    guild_type_t ty[3];
    int32_t ntok;
} multi_t;

static void multi_run(void *ctx, int k)
{
    multi_t *M = ctx;
    const void *w[3];
    size_t ws[3];
    int64_t nr[3], ldo[3];
    float *out[3];
    for (int i = 0; i < 3; i++)
        w[i] = M->D[i].w, ws[i] = M->D[i].rs, nr[i] = M->D[i].nrows, ldo[i] = M->D[i].ldo, out[i] = M->D[i].out;
    guild_err_t err;
    const int rc = k == 0 ? cuda_matmul_multi_dp4a(M->ty[0], M->D[0].n, M->ntok, 3, w, ws, nr, M->D[0].act,
                                                   M->D[0].as, out, ldo, stream, &err)
                          : cuda_matmul_multi_types(M->ty, M->D[0].n, M->ntok, 3, w, ws, nr, M->D[0].act, M->D[0].as,
                                                    out, ldo, stream, &err);
    ck_assert_msg(rc == 0, "%s", err.msg);
}

START_TEST(test_few_multi_timing)
{
    rng_t r;
    rng_seed(&r, 1700);
    multi_t M;
    static const int64_t nrows[3] = {4096, 512, 512};
    for (int i = 0; i < 3; i++) {
        M.ty[i] = GUILD_TYPE_Q4_K;
        dense_init(&M.D[i], &r, GUILD_TYPE_Q4_K, 2048, nrows[i], 16, false);
    }
    for (size_t ti = 0; ti < sizeof few_toks / sizeof few_toks[0]; ti++) {
        M.ntok = few_toks[ti];
        const float u0 = time_reps(multi_run, &M, 0, 20), u1 = time_reps(multi_run, &M, 1, 20);
        printf("few timing qkv     q4_K 3 products (4096+512+512 x 2048), %2d tokens: dp4a multi %8.2f us | "
               "cuda_matmul_multi_types %8.2f us | %.2fx\n",
               M.ntok, u0, u1, u0 / u1);
    }
    for (int i = 0; i < 3; i++)
        dense_fini(&M.D[i]);
}
END_TEST

static Suite *mma_suite(void)
{
    Suite *s = suite_create("cuda_expert_mma");
    TCase *tc = tcase_create("bits");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_mma_bits, 0, N_BITS_CASES);
    tcase_add_loop_test(tc, test_mma_bits_plain, 0, N_PLAIN_CASES);
    tcase_add_test(tc, test_mma_rejects);
    suite_add_tcase(s, tc);
    tc = tcase_create("timing");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_mma_timing, 0, N_TIMING_RUNS);
    suite_add_tcase(s, tc);
    tc = tcase_create("dense bits");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_dense_bits, 0, N_DENSE_CASES);
    tcase_add_loop_test(tc, test_dense_bits_plain, 0, N_DENSE_PLAIN_CASES);
    tcase_add_test(tc, test_dense_rejects);
    suite_add_tcase(s, tc);
    tc = tcase_create("few bits");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_few_bits, 0, N_FEW_CASES);
    tcase_add_loop_test(tc, test_few_bits_plain, 0, N_FEW_CASES);
    tcase_add_loop_test(tc, test_few_multi, 0, (int)(sizeof multi_cases / sizeof multi_cases[0]));
    suite_add_tcase(s, tc);
    tc = tcase_create("few timing");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_few_timing, 0, (int)(sizeof few_shapes / sizeof few_shapes[0]));
    tcase_add_test(tc, test_few_multi_timing);
    suite_add_tcase(s, tc);
    tc = tcase_create("dense timing");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_dense_timing, 0, (int)(sizeof dense_shapes / sizeof dense_shapes[0]));
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    if (!cuda_test_device(8)) /* the int8 mma kernels: compute capability 8.0 or more */
        return 77;
    return cuda_test_run(mma_suite(), &stream);
}
