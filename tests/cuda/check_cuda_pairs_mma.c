/* A few tokens' routed experts on the tensor cores (cuda_expert_pairs_mma, expert_pair_mma.cu) against the dp4a
 * kernel it stands in for (cuda_expert_pairs, itself checked against cuda_quantize + cuda_expert_route +
 * cuda_expert_matmul in check_cuda_fused), bit for bit:
 *   - "bits": Q4_K, Q5_K, Q6_K, IQ4_XS, Q8_0 at 1, 2, 3, 4, 8, 13, 16 tokens x 6 slots over 11 experts (2 of them
 *     another part's), skipped slots among them, one expert in every token's first slot and again in every third
 *     token's second (up to 22 pairs of one expert: several blocks of 8 or 16 pairs), gate/up with SiLU and the down
 *     product, every block shape (2, 4, 8 warps x 8 pairs, 4, 8 warps x 16 pairs, each unrolled 1 and 2 times; the
 *     staged form, 2, 4, 8 warps x 2-4 stages, with and without the L2 prefetch, its rows' copies at every offset
 *     where the down matrices' experts are not 16-byte aligned); rows past a warp's 16 and past the matrix, the
 *     outputs' padding and the skipped pairs' rows must keep their poison;
 *   - "alone" (batch invariance): the Qwen3-30B-A3B shape (128 experts, gate/up Q4_K 768 x 2048, down Q6_K or Q4_K
 *     2048 x 768) at 2, 3, 4, 8, 13, 16 tokens x 8 distinct experts a token, drawn from 20 so that experts take up
 *     to 16 pairs: the step at once on the tensor-core kernel (the rule's choice from 4 tokens) = each token alone
 *     on the dp4a kernel (the rule's at one token);
 *   - "pairs_mma_time" (a measurement, no assertion; alone: CK_RUN_CASE=pairs_mma_time): a decode step's routed
 *     experts at the Qwen3-30B-A3B shape, 1, 2, 4, 8, 16 tokens, random routing, graphs of 64 steps over 8 layers'
 *     worth of experts, the dp4a kernel against each block shape of the tensor-core kernel, us a step printed.
 * Needs a CUDA device: without one, exit 77 (SKIP). */
#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "core/quant/quant.h"
#include "core/sample/rng.h"
#include "gpu-worker/dense/cuda/cuda_kernels.h"
#include "tests/cuda/cuda_test_experts.h"
#include "tests/cuda/cuda_test_util.h"

#define CK_CUDA(call) ck_assert_msg((call) == cudaSuccess, "%s: %s", #call, cudaGetErrorString(cudaGetLastError()))

static cudaStream_t stream;

/* the block shapes (warps, pairs, unrolled, stages, l2): {0} the kernel's choice; stages 2-4 the staged form */
static const cuda_pairs_mma_shape_t shapes[] = {
    {0},             {2, 8, 1, 1, 2}, {4, 8, 1, 1, 2},  {8, 8, 1, 1, 2},  {2, 8, 2, 1, 2},  {4, 8, 2, 1, 2},
    {8, 8, 2, 1, 2}, {4, 16, 1, 1, 2}, {8, 16, 1, 1, 2}, {4, 16, 2, 1, 2}, {8, 16, 2, 1, 2}, {8, 8, 1, 2, 1},
    {8, 8, 1, 3, 1}, {8, 8, 1, 4, 1}, {4, 8, 1, 3, 1},  {4, 8, 1, 4, 1},  {2, 8, 1, 4, 1},  {8, 8, 1, 3, 2},
    {4, 8, 1, 4, 2},  {4, 8, 1, 2, 1}};
#define N_SHAPES (int)(sizeof shapes / sizeof shapes[0])

/* memcmp of two device buffers of `bytes`; the first differing float's index, or -1. */
static int64_t dev_differ(const void *a, const void *b, size_t bytes)
{
    unsigned char *ha = malloc(bytes), *hb = malloc(bytes);
    CK_CUDA(cudaMemcpy(ha, a, bytes, cudaMemcpyDeviceToHost));
    CK_CUDA(cudaMemcpy(hb, b, bytes, cudaMemcpyDeviceToHost));
    int64_t at = -1;
    for (size_t i = 0; i < bytes; i += 4)
        if (memcmp(ha + i, hb + i, 4)) {
            at = (int64_t)(i / 4);
            break;
        }
    free(ha);
    free(hb);
    return at;
}

/* ---- bits ------------------------------------------------------------------------------------------------------ */

static const guild_type_t bt_types[] = {GUILD_TYPE_Q4_K, GUILD_TYPE_Q6_K, GUILD_TYPE_Q5_K, GUILD_TYPE_IQ4_XS,
                                        GUILD_TYPE_Q8_0};
#define N_BT_TYPES (int)(sizeof bt_types / sizeof bt_types[0])
static const int32_t bt_toks[] = {1, 2, 3, 4, 8, 13, 16};
#define N_BT_TOKS (int)(sizeof bt_toks / sizeof bt_toks[0])

START_TEST(test_pairs_mma_bits)
{
    const guild_type_t type = bt_types[_i % N_BT_TYPES];
    enum { USED = 6, NE = 11, NL = 9, TMAX = 16 }; /* experts 9, 10: another part's */
    const int32_t ntok = bt_toks[_i / N_BT_TYPES], P = ntok * USED;
    /* gate/up 264 rows (a last warp of 8 rows) of 512; down 100 rows of 256 (Q8_0: 160) */
    const int64_t n = 512, nrows = 264, ldx = n + 8, ldo = nrows + 3, nrd = 100;
    const int64_t nd = quant_type_info(type)->block_elems == 256 ? 256 : 160;
    guild_err_t err = {{0}};
    rng_t r;
    rng_seed(&r, 3101 + (uint64_t)_i);
    uint64_t rb = 0, rbd = 0;
    void *dg = cuda_test_expert_weights(type, n, nrows, NE, &r, &rb);
    void *du = cuda_test_expert_weights(type, n, nrows, NE, &r, &rb);
    void *dd = cuda_test_expert_weights(type, nd, nrd, NE, &r, &rbd);
    const size_t es = (size_t)nrows * rb, esd = (size_t)nrd * rbd;
    float *x = malloc((size_t)ntok * (size_t)ldx * sizeof *x);
    cuda_test_fill(&r, x, (size_t)ntok * (size_t)ldx, 2.0f);
    int32_t ids[TMAX * USED], crowd = 0;
    for (int32_t p = 0; p < P; p++) {
        const int32_t t = p / USED, k = p % USED;
        ids[p] = (int32_t)(rng_uniform(&r) * NE) % NE;
        if (k == 0 || (k == 1 && t % 3 == 0))
            ids[p] = 4; /* the crowded expert: twice in some tokens, as no router gives, but the kernel may get */
        if (p % 5 == 3)
            ids[p] = -1;
        crowd += ids[p] == 4;
    }
    float *dx = cuda_test_dev_bytes(x, (size_t)ntok * (size_t)ldx * sizeof *x);
    int32_t *dids = cuda_test_dev_bytes(ids, (size_t)P * sizeof *ids);
    const size_t obytes = (size_t)P * (size_t)ldo * sizeof(float);
    float *dref[2], *dgot[2];
    for (int k = 0; k < 2; k++) {
        CK_CUDA(cudaMalloc((void **)&dref[k], obytes));
        CK_CUDA(cudaMalloc((void **)&dgot[k], obytes));
        CK_CUDA(cudaMemset(dref[k], 0x7e, obytes));
    }
    /* the dp4a kernel: gate and up with SiLU, then the down product over the first nd of those rows' elements */
    ck_assert_msg(cuda_expert_pairs(type, n, nrows, dg, du, es, rb, dx, ldx, USED, dids, NL, P, dref[0], ldo, 0,
                                    false, stream, &err) == 0 &&
                      cuda_expert_pairs(type, nd, nrd, dd, NULL, esd, rbd, dref[0], ldo, 1, dids, NL, P, dref[1],
                                        ldo, 0, true, stream, &err) == 0,
                  "%s", err.msg);
    for (int si = 0; si < N_SHAPES; si++) {
        for (int k = 0; k < 2; k++)
            CK_CUDA(cudaMemset(dgot[k], 0x7e, obytes));
        ck_assert_msg(cuda_expert_pairs_mma(type, n, nrows, dg, du, es, rb, dx, ldx, USED, dids, NL, P, dgot[0], ldo,
                                            &shapes[si], false, stream, &err) == 0 &&
                          cuda_expert_pairs_mma(type, nd, nrd, dd, NULL, esd, rbd, dref[0], ldo, 1, dids, NL, P,
                                                dgot[1], ldo, &shapes[si], true, stream, &err) == 0,
                      "%s", err.msg);
        CK_CUDA(cudaStreamSynchronize(stream));
        for (int k = 0; k < 2; k++) {
            const int64_t at = dev_differ(dref[k], dgot[k], obytes);
            ck_assert_msg(at < 0,
                          "%s, %d tokens, %d warps x %d pairs x unrolled %d, %d stages, l2 %d: %s of pair %lld "
                          "(expert %d), row %lld, differs from the dp4a kernel's",
                          quant_type_info(type)->name, ntok, shapes[si].warps, shapes[si].tile, shapes[si].unroll,
                          shapes[si].stages, shapes[si].l2, k ? "the down product" : "silu(g) u", (long long)(at / ldo), ids[at / ldo],
                          (long long)(at % ldo));
        }
    }
    printf("pairs mma, %-6s, %2d tokens x %d slots (expert 4: %d pairs): = cuda_expert_pairs bit for bit (gate/up "
           "with SiLU, down; %d block shapes)\n",
           quant_type_info(type)->name, ntok, USED, crowd, N_SHAPES);
    for (int k = 0; k < 2; k++) {
        cudaFree(dref[k]);
        cudaFree(dgot[k]);
    }
    cudaFree(dg);
    cudaFree(du);
    cudaFree(dd);
    cudaFree(dx);
    cudaFree(dids);
    free(x);
}
END_TEST

/* ---- batch invariance at the Qwen3-30B-A3B shape ------------------------------------------------------------- */

static const int32_t al_toks[] = {2, 3, 4, 8, 13, 16};
#define N_AL_TOKS (int)(sizeof al_toks / sizeof al_toks[0])

START_TEST(test_pairs_mma_alone)
{
    const guild_type_t gt = GUILD_TYPE_Q4_K, dt = _i % 2 ? GUILD_TYPE_Q4_K : GUILD_TYPE_Q6_K;
    const int32_t T = al_toks[_i / 2];
    enum { K = 8, NE = 128, NL = 120, POOL = 20, TMAX = 16 }; /* experts 120..127: another part's */
    const int64_t n = 2048, nrows = 768;
    const int32_t P = T * K;
    guild_err_t err = {{0}};
    /* the rule: these types from CUDA_EXPERT_PAIRS_MMA_MIN_TOK tokens; not one token, nor untimed types */
    const bool rule = T >= CUDA_EXPERT_PAIRS_MMA_MIN_TOK;
    ck_assert(cuda_expert_pairs_mma_take(gt, n, T) == rule && cuda_expert_pairs_mma_take(dt, nrows, T) == rule);
    ck_assert(!cuda_expert_pairs_mma_take(gt, n, 1) && !cuda_expert_pairs_mma_take(GUILD_TYPE_Q4_1, n, T) &&
              !cuda_expert_pairs_mma_take(GUILD_TYPE_Q8_0, n, T));
    rng_t r;
    rng_seed(&r, 4201 + (uint64_t)_i);
    uint64_t rg = 0, rd = 0;
    void *dg = cuda_test_expert_weights(gt, n, nrows, NE, &r, &rg);
    void *du = cuda_test_expert_weights(gt, n, nrows, NE, &r, &rg);
    void *dd = cuda_test_expert_weights(dt, nrows, n, NE, &r, &rd);
    const size_t gm = (size_t)nrows * rg, dm = (size_t)n * rd;
    const int64_t ldx = n + 4, ldh = nrows + 4;
    float *x = malloc((size_t)T * (size_t)ldx * sizeof *x);
    cuda_test_fill(&r, x, (size_t)T * (size_t)ldx, 2.0f);
    int32_t ids[TMAX * K];
    for (int32_t t = 0; t < T; t++) { /* 8 distinct of a pool of 20, 2 of them another part's */
        int32_t pool[POOL];
        for (int32_t e = 0; e < POOL; e++)
            pool[e] = e < POOL - 2 ? e * 7 % NL : NL + e - (POOL - 2);
        for (int32_t k = 0; k < K; k++) {
            const int32_t c = k + (int32_t)(rng_uniform(&r) * (POOL - k)) % (POOL - k);
            const int32_t e = pool[c];
            pool[c] = pool[k];
            pool[k] = e;
            ids[t * K + k] = (t * K + k) % 13 == 6 ? -1 : e;
        }
    }
    float *dx = cuda_test_dev_bytes(x, (size_t)T * (size_t)ldx * sizeof *x);
    int32_t *dids = cuda_test_dev_bytes(ids, (size_t)P * sizeof *ids);
    const size_t hbytes = (size_t)P * (size_t)ldh * sizeof(float), ybytes = (size_t)P * (size_t)n * sizeof(float);
    float *dh[2], *dy[2];
    for (int k = 0; k < 2; k++) {
        CK_CUDA(cudaMalloc((void **)&dh[k], hbytes));
        CK_CUDA(cudaMalloc((void **)&dy[k], ybytes));
        CK_CUDA(cudaMemset(dh[k], 0x7e, hbytes));
        CK_CUDA(cudaMemset(dy[k], 0x7e, ybytes));
    }
    /* each token alone on the dp4a kernel */
    for (int32_t t = 0; t < T; t++) {
        float *ht = dh[1] + (size_t)t * K * (size_t)ldh, *yt = dy[1] + (size_t)t * K * (size_t)n;
        ck_assert_msg(cuda_expert_pairs(gt, n, nrows, dg, du, gm, rg, dx + t * ldx, ldx, K, dids + t * K, NL, K, ht,
                                        ldh, 0, false, stream, &err) == 0 &&
                          cuda_expert_pairs(dt, nrows, n, dd, NULL, dm, rd, ht, ldh, 1, dids + t * K, NL, K, yt, n, 0,
                                            true, stream, &err) == 0,
                      "%s", err.msg);
    }
    int32_t most = 0;
    for (int32_t e = 0; e < NL; e++) {
        int32_t c = 0;
        for (int32_t p = 0; p < P; p++)
            c += ids[p] == e;
        most = c > most ? c : most;
    }
    for (int si = 0; si < N_SHAPES; si++) {
        CK_CUDA(cudaMemset(dh[0], 0x7e, hbytes));
        CK_CUDA(cudaMemset(dy[0], 0x7e, ybytes));
        ck_assert_msg(cuda_expert_pairs_mma(gt, n, nrows, dg, du, gm, rg, dx, ldx, K, dids, NL, P, dh[0], ldh,
                                            &shapes[si], false, stream, &err) == 0 &&
                          cuda_expert_pairs_mma(dt, nrows, n, dd, NULL, dm, rd, dh[0], ldh, 1, dids, NL, P, dy[0], n,
                                                &shapes[si], true, stream, &err) == 0,
                      "%s", err.msg);
        CK_CUDA(cudaStreamSynchronize(stream));
        const int64_t ah = dev_differ(dh[0], dh[1], hbytes), ay = dev_differ(dy[0], dy[1], ybytes);
        ck_assert_msg(ah < 0, "%s/%s, %d tokens, %d warps x %d pairs x unrolled %d, %d stages, l2 %d: silu(g) u of "
                      "token %lld slot %lld (expert %d) differs from the token alone's",
                      quant_type_info(gt)->name, quant_type_info(dt)->name, T, shapes[si].warps, shapes[si].tile,
                      shapes[si].unroll, shapes[si].stages, shapes[si].l2, (long long)(ah / ldh / K), (long long)(ah / ldh % K), ids[ah / ldh]);
        ck_assert_msg(ay < 0, "%s/%s, %d tokens, %d warps x %d pairs x unrolled %d, %d stages, l2 %d: the down product "
                      "of token %lld slot %lld (expert %d) differs from the token alone's",
                      quant_type_info(gt)->name, quant_type_info(dt)->name, T, shapes[si].warps, shapes[si].tile,
                      shapes[si].unroll, shapes[si].stages, shapes[si].l2, (long long)(ay / n / K), (long long)(ay / n % K), ids[ay / n]);
    }
    printf("pairs mma, gate/up %s 768 x 2048, down %s: %2d tokens x %d slots (up to %d pairs an expert) at once = "
           "each token alone on the dp4a kernel, bit for bit (%d block shapes)\n",
           quant_type_info(gt)->name, quant_type_info(dt)->name, T, K, most, N_SHAPES);
    for (int k = 0; k < 2; k++) {
        cudaFree(dh[k]);
        cudaFree(dy[k]);
    }
    cudaFree(dg);
    cudaFree(du);
    cudaFree(dd);
    cudaFree(dx);
    cudaFree(dids);
    free(x);
}
END_TEST

/* ---- time ------------------------------------------------------------------------------------------------------ */

static const int32_t tm_toks[] = {1, 2, 4, 8, 16};
#define N_TM_TOKS (int)(sizeof tm_toks / sizeof tm_toks[0])

/* One step's launches of variant v (0: the dp4a kernel, its own choice; v > 0: shapes[v - 1]) into stream. */
static int time_step(int v, guild_type_t dt, const char *g0, const char *u0, const char *d0, size_t gm, size_t dm,
                     uint64_t rg, uint64_t rd, const float *dx, const int32_t *li, int32_t k, float *dh, float *dy,
                     guild_err_t *err)
{
    const int64_t E = 2048, F = 768;
    if (v == 0)
        return cuda_expert_pairs(GUILD_TYPE_Q4_K, E, F, g0, u0, gm, rg, dx, E, 8, li, 128, k, dh, F, 0, false, stream,
                                 err) < 0 ||
                       cuda_expert_pairs(dt, F, E, d0, NULL, dm, rd, dh, F, 1, li, 128, k, dy, E, 0, true, stream,
                                         err) < 0
                   ? -1
                   : 0;
    const cuda_pairs_mma_shape_t *sh = &shapes[v - 1];
    return cuda_expert_pairs_mma(GUILD_TYPE_Q4_K, E, F, g0, u0, gm, rg, dx, E, 8, li, 128, k, dh, F, sh, false, stream,
                                 err) < 0 ||
                   cuda_expert_pairs_mma(dt, F, E, d0, NULL, dm, rd, dh, F, 1, li, 128, k, dy, E, sh, true, stream, err) < 0
               ? -1
               : 0;
}

/* A timing step: variant v (time_step's) on layer st % L's experts and routing. */
typedef struct tm_ctx {
    int v;
    const cuda_test_step_t *t;
} tm_ctx_t;

static int tm_step(void *ctx, int32_t st, cudaStream_t s, guild_err_t *err)
{
    const tm_ctx_t *c = ctx;
    const cuda_test_step_t *t = c->t;
    const int32_t l = st % t->L;
    const size_t eo = (size_t)l * (size_t)t->n_exp;
    (void)s; /* time_step launches into the file's stream, the one the graph captures */
    return time_step(c->v, t->dt, t->dg + eo * t->gm, t->du + eo * t->gm, t->dd + eo * t->dm, t->gm, t->dm, t->rg,
                     t->rd, t->dx, t->dids + l * t->k, t->k, t->dh, t->dy, err);
}

START_TEST(test_pairs_mma_time)
{
    cuda_test_step_t t;
    cuda_test_step_open(&t, _i % 2 ? GUILD_TYPE_Q6_K : GUILD_TYPE_Q4_K, tm_toks[_i / 2]);
    enum { NV = N_SHAPES + 1 };
    double us[NV] = {0};
    for (int v = 0; v < NV; v++) {
        tm_ctx_t c = {v, &t};
        us[v] = cuda_test_graph_us(tm_step, &c, 64, stream);
    }
    printf("time: a decode step's routed experts (128 x 768 x 2048, gate/up q4_K, down %s, %d tokens, %d pairs, "
           "%.1f distinct experts a layer; graphs of 64 steps over 8 layers): dp4a %.2f us",
           quant_type_info(t.dt)->name, t.ntok, t.k, (double)t.distinct / t.L, us[0]);
    for (int v = 1; v < NV; v++)
        if (shapes[v - 1].warps)
            printf("; mma %dw x %d x u%d s%d l%d %.2f", shapes[v - 1].warps, shapes[v - 1].tile, shapes[v - 1].unroll,
                   shapes[v - 1].stages, shapes[v - 1].l2, us[v]);
        else
            printf("; mma default %.2f", us[v]);
    printf(" us\n");
    cuda_test_step_close(&t);
}
END_TEST

int main(void)
{
    if (!cuda_test_device(0))
        return 77;
    Suite *s = suite_create("cuda_pairs_mma");
    TCase *tk = tcase_create("kernel");
    tcase_set_timeout(tk, 120);
    tcase_add_loop_test(tk, test_pairs_mma_bits, 0, N_BT_TYPES * N_BT_TOKS);
    tcase_add_loop_test(tk, test_pairs_mma_alone, 0, 2 * N_AL_TOKS);
    suite_add_tcase(s, tk);
    TCase *tt = tcase_create("pairs_mma_time"); /* alone: CK_RUN_CASE=pairs_mma_time */
    tcase_add_loop_test(tt, test_pairs_mma_time, 0, 2 * N_TM_TOKS);
    suite_add_tcase(s, tt);
    return cuda_test_run(s, &stream);
}
