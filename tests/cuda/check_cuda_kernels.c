/* The CUDA backend's kernels against the CPU backend's functions and the scalar references, on random inputs
 * (no all-zero data), with every output poisoned (NaN bytes) before the launch and guard rows around it.
 * Needs a CUDA device: without one the program prints why and exits 77 (SKIP).
 *
 * Tolerances (the contract of gpu-worker/dense/cuda/cuda_kernels.h):
 *   bit-exact (memcmp): quantize, matmul (every type, 1..64 tokens), get_rows, rope, add, add_bias, kv_store,
 *                       combine without the shared expert
 *   |d| <= 4 ulp:       rmsnorm (double sum in another order)
 *   |d| <= 2e-6 |ref| + 1e-7:  swiglu, combine with the sigmoid gate, router weights (CUDA expf vs libm expf)
 *   |d| <= 2e-5 + 1e-4 |ref|:  attention (parallel sums; the same K/V values on both sides, F16 or F32 cache;
 *                              the block formats' bytes, which the device's store makes bit-exact)
 *   |d| <= (3e-5 smax + 1e-5) sum p|v|: mla attention against a float64 softmax (smax: the largest score's
 *                       magnitude sum; tensor cores' split operands with an F16 cache, CUDA cores with F32)
 * Each test prints its largest measured error. Check runs without fork here: a CUDA context does not survive
 * fork(). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "core/kern/pack.h"
#include "core/model/activation.h"
#include "core/quant/fp16.h"
#include "core/quant/quant.h"
#include "core/sample/rng.h"
#include "gpu-worker/dense/cpu/cpu_kernels.h"
#include "gpu-worker/dense/cpu/cpu_matmul.h"
#include "gpu-worker/dense/cuda/cuda_kernels.h"
#include "gpu-worker/dense/cuda/cuda_util.h"
#include "gpu-worker/dense/cuda/l2_stream.h"
#include "gpu-worker/dense/kv_format.h"
#include "tests/cuda/cuda_test_kv.h"
#include "tests/cuda/cuda_test_rows.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/dev_guard.h"

static cudaStream_t stream;

static void fill(rng_t *r, float *x, int64_t n, float scale)
{
    for (int64_t i = 0; i < n; i++) {
        const float s = (i / 32) % 3 == 0 ? 0.05f : (i / 32) % 3 == 1 ? 1.0f : 4.0f;
        x[i] = (float)(scale * s * (2 * rng_uniform(r) - 1)) + 0.001f * scale;
    }
}

static size_t row_bytes(guild_type_t t, int64_t n)
{
    uint64_t b = 0;
    ck_assert(quant_row_bytes(t, (uint64_t)n, &b, NULL) == 0);
    return (size_t)b;
}

/* |a - b| in units in the last place of b (0 for identical bits). */
static double ulps(float a, float b)
{
    if (!memcmp(&a, &b, sizeof a))
        return 0;
    const float u = nextafterf(fabsf(b), INFINITY) - fabsf(b);
    return fabs((double)a - (double)b) / (double)u;
}

/* ---- quantize -------------------------------------------------------------------------------------------- */

START_TEST(test_quantize)
{
    static const guild_type_t types[] = {GUILD_TYPE_Q8_0, GUILD_TYPE_Q8_1, GUILD_TYPE_Q8_K, GUILD_TYPE_F32};
    const guild_type_t at = types[_i];
    const int64_t n = 2048, ldx = 2048 + 40;
    const int rows = 5;
    rng_t r;
    rng_seed(&r, 1);
    float *x = malloc((size_t)(rows * ldx) * sizeof *x);
    fill(&r, x, rows * ldx, 1.0f);
    /* a block of exact magnitude ties of both signs: the reference keeps the first one */
    for (int j = 0; j < 256; j++)
        x[ldx + j] = (j % 7 == 3) ? -2.5f : (j % 7 == 5) ? 2.5f : (float)(j % 13) * 0.1f + 0.01f;
    const size_t rb = row_bytes(at, n), stride = rb + 16;
    unsigned char *ref = malloc((size_t)rows * stride), *got = malloc((size_t)rows * stride);
    memset(ref, 0xff, (size_t)rows * stride);
    guild_err_t err;
    for (int row = 0; row < rows; row++)
        ck_assert(quant_quantize_row_ref(at, x + row * ldx, ref + row * stride, n, &err) == 0);
    float *dx = dev_upload(x, (size_t)(rows * ldx) * sizeof *x);
    void *dq = dev_new((size_t)rows * stride);
    ck_assert_msg(cuda_quantize(at, dx, ldx, dq, stride, n, rows, stream, &err) == 0, "%s", err.msg);
    dev_download(got, dq, (size_t)rows * stride, stream);
    for (int row = 0; row < rows; row++)
        ck_assert_msg(!memcmp(got + row * stride, ref + row * stride, rb), "%s row %d differs from the reference",
                      quant_type_info(at)->name, row);
    printf("quantize %-5s: bit-exact over %d rows of %lld\n", quant_type_info(at)->name, rows, (long long)n);
    dev_free(dx);
    dev_free(dq);
    free(x);
    free(ref);
    free(got);
}
END_TEST

/* ---- matmul ---------------------------------------------------------------------------------------------- */

static const guild_type_t mm_types[] = {GUILD_TYPE_F32, GUILD_TYPE_F16, GUILD_TYPE_BF16, GUILD_TYPE_Q8_0,
                                        GUILD_TYPE_Q4_0, GUILD_TYPE_Q4_1, GUILD_TYPE_Q5_0, GUILD_TYPE_Q5_1,
                                        GUILD_TYPE_IQ4_NL, GUILD_TYPE_Q4_K, GUILD_TYPE_Q5_K, GUILD_TYPE_Q6_K,
                                        GUILD_TYPE_IQ4_XS, GUILD_TYPE_MXFP4, GUILD_TYPE_Q2_K, GUILD_TYPE_Q3_K,
                                        GUILD_TYPE_IQ2_XXS, GUILD_TYPE_IQ2_XS, GUILD_TYPE_IQ2_S, GUILD_TYPE_IQ3_XXS, GUILD_TYPE_IQ3_S, GUILD_TYPE_IQ1_S, GUILD_TYPE_IQ1_M};
#define N_MM_TYPES (int)(sizeof mm_types / sizeof mm_types[0])

/* H products of nrows x n weights with ntok tokens each, the weights one matrix after another, token t's head h
 * activation row at t * H + h, head h's outputs at h * ldh of rows H * ldh apart (ldh = nrows + 3): each bit for bit
 * cpu_matmul's (quant_vec_dot_ref), the padding after each head's rows untouched. H = 0: one product by cuda_matmul,
 * or with l2 bytes (> 0) by cuda_matmul_l2 hinting that many bytes of another buffer into L2 (a hint must not move
 * a bit); else cuda_matmul_heads (multi-head latent attention's per-head up-projections in one launch). */
static void check_matmul(guild_type_t type, int64_t n, int64_t nrows, int32_t ntok, int32_t heads, uint64_t seed,
                         size_t l2)
{
    const guild_type_t at = quant_type_info(type)->dot_type;
    const int32_t H = heads ? heads : 1;
    const int64_t ldh = nrows + 3, ldo = (int64_t)H * ldh;
    const size_t wrb = row_bytes(type, n), arb = row_bytes(at, n) + 4, wh = wrb * (size_t)nrows;
    rng_t r;
    rng_seed(&r, seed);
    float *f = malloc((size_t)n * sizeof *f);
    char *w = malloc(wh * (size_t)H), *a = malloc(arb * (size_t)ntok * (size_t)H);
    for (int64_t row = 0; row < nrows * H; row++) {
        fill(&r, f, n, 1.0f);
        cuda_test_make_row(&r, type, f, w + (size_t)row * wrb, n);
    }
    for (int32_t i = 0; i < ntok * H; i++) {
        fill(&r, f, n, 1.0f);
        cpu_quantize(at, f, a + (size_t)i * arb, n);
    }
    const size_t out_bytes = (size_t)ntok * (size_t)ldo * sizeof(float);
    float *ref = malloc(out_bytes), *got = malloc(out_bytes);
    memset(ref, 0xff, out_bytes);
    for (int32_t h = 0; h < H; h++)
        cpu_matmul(type, n, nrows, ntok, w + (size_t)h * wh, wrb, a + (size_t)h * arb, arb * (size_t)H,
                   ref + h * ldh, (size_t)ldo);
    void *dw = dev_upload(w, wh * (size_t)H), *da = dev_upload(a, arb * (size_t)ntok * (size_t)H);
    float *dout = dev_new(out_bytes);
    void *dl2 = l2 ? dev_new(l2) : NULL;
    guild_err_t err;
    const int rc = heads ? cuda_matmul_heads(type, n, nrows, ntok, H, dw, wrb, wh, da, arb * (size_t)H, arb, dout,
                                             ldo, ldh, stream, &err)
                   : l2  ? cuda_matmul_l2(type, n, nrows, ntok, dw, wrb, da, arb, dout, ldo, dl2, l2, stream, &err)
                         : cuda_matmul(type, n, nrows, ntok, dw, wrb, da, arb, dout, ldo, stream, &err);
    ck_assert_msg(rc == 0, "%s", err.msg);
    dev_download(got, dout, out_bytes, stream);
    int bad = 0;
    for (int64_t k = 0; k < ntok * ldo; k++) {
        if (k % ldh >= nrows) {
            ck_assert_msg(isnan(got[k]), "matmul wrote past a head's last row (padding of ldh)");
            continue;
        }
        if (memcmp(&got[k], &ref[k], sizeof(float)) && bad++ < 3)
            fprintf(stderr, "  %s n=%lld tok %lld head %lld row %lld: %.9g, reference %.9g\n",
                    quant_type_info(type)->name, (long long)n, (long long)(k / ldo), (long long)(k % ldo / ldh),
                    (long long)(k % ldh), (double)got[k], (double)ref[k]);
    }
    ck_assert_msg(bad == 0, "%s n=%lld rows=%lld tokens=%d heads=%d l2=%zu: %d outputs differ from quant_vec_dot_ref",
                  quant_type_info(type)->name, (long long)n, (long long)nrows, ntok, heads, l2, bad);
    dev_free(dl2);
    dev_free(dw);
    dev_free(da);
    dev_free(dout);
    free(f);
    free(w);
    free(a);
    free(ref);
    free(got);
}

START_TEST(test_matmul)
{
    const guild_type_t type = mm_types[_i];
    const int plain = type == GUILD_TYPE_F32 || type == GUILD_TYPE_F16 || type == GUILD_TYPE_BF16;
    static const int32_t toks[] = {1, 2, 3, 4, 5, 8, 13, 64};
    const int64_t sizes[] = {768, 4096, plain ? 1000 : 256};
    int cases = 0;
    for (size_t si = 0; si < 3; si++)
        for (size_t ti = 0; ti < sizeof toks / sizeof toks[0]; ti++, cases++)
            check_matmul(type, sizes[si], 37, toks[ti], 0, 1000 * (uint64_t)_i + cases, 0);
    /* with an L2 hint (cuda_matmul_l2: the one-token kernels issue it, others ignore it): more lines than the grid
     * has threads, and a size that is no whole line */
    check_matmul(type, 4096, 37, 1, 0, 1000 * (uint64_t)_i + cases++, (size_t)1 << 20);
    check_matmul(type, 768, 37, 1, 0, 1000 * (uint64_t)_i + cases++, 1000);
    check_matmul(type, 768, 37, 5, 0, 1000 * (uint64_t)_i + cases++, 4096);
    cuda_set_matmul_split(false); /* one token a warp a row too (4096: split over warps by default) */
    check_matmul(type, 4096, 37, 1, 0, 1000 * (uint64_t)_i + cases++, 0);
    check_matmul(type, 4096, 37, 1, 0, 1000 * (uint64_t)_i + cases++, (size_t)1 << 20);
    cuda_set_matmul_split(true);
    printf("matmul %-6s: bit-exact in %d shapes (n 256..4096, 37 rows, 1..64 tokens; 4 with an L2 hint)\n",
           quant_type_info(type)->name, cases);
}
END_TEST

START_TEST(test_matmul_heads)
{
    static const guild_type_t types[] = {GUILD_TYPE_F32, GUILD_TYPE_F16, GUILD_TYPE_BF16, GUILD_TYPE_Q8_0,
                                         GUILD_TYPE_Q4_0, GUILD_TYPE_Q4_K, GUILD_TYPE_Q6_K};
    static const int32_t toks[] = {1, 2, 5, 8, 13, 31, 40};
    int cases = 0;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        for (size_t t = 0; t < sizeof toks / sizeof toks[0]; t++, cases++)
            check_matmul(types[i], quant_type_info(types[i])->block_elems == 256 ? 256 : 128, 37, toks[t],
                         t % 2 ? 7 : 128, 7000 + (uint64_t)cases, 0);
    guild_err_t err;
    /* heads whose offsets would misalign a head's rows */
    ck_assert_int_eq(cuda_matmul_heads(GUILD_TYPE_Q4_K, 256, 4, 1, 2, NULL, 144, 146, NULL, 292, 292, NULL, 4, 4,
                                       stream, &err), -1);
    printf("matmul heads: bit-exact in %d shapes (7 types, 7 or 128 heads, 1..40 tokens)\n", cases);
}
END_TEST

/* ---- the weights marked as streaming in L2 (l2_stream.h) --------------------------------------------------- */

/* The access policy window of the one kernel node that a product's launch (op 0: cuda_matmul of Q4_K rows of
 * 4096, op 1: cuda_expert_pairs of Q4_K gate rows (up rows with up) of 2048, two pairs) leaves in a graph captured
 * from a stream: the window a decode step's graph replays. Only captured, never run: the buffers need no data. */
static struct cudaAccessPolicyWindow captured_window(int op, const void *w, const void *up, int64_t nrows, int32_t ntok,
                                              int32_t n_local)
{
    cudaStream_t s;
    ck_assert(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    const size_t n = op ? 2048 : 4096, wrb = row_bytes(GUILD_TYPE_Q4_K, (int64_t)n);
    void *act = dev_new(row_bytes(GUILD_TYPE_Q8_K, (int64_t)n) * 8 + n * 8 * sizeof(float));
    float *out = dev_new((size_t)nrows * 8 * sizeof(float));
    int32_t *lids = dev_new(2 * sizeof(int32_t));
    cudaGraph_t g;
    guild_err_t err;
    ck_assert(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    const int rc = op ? cuda_expert_pairs(GUILD_TYPE_Q4_K, (int64_t)n, nrows, w, up, (size_t)nrows * wrb, wrb, act,
                                          (int64_t)n, 1, lids, n_local, 2, out, nrows, 0, false, s, &err)
                      : cuda_matmul(GUILD_TYPE_Q4_K, (int64_t)n, nrows, ntok, w, wrb, act,
                                    row_bytes(GUILD_TYPE_Q8_K, (int64_t)n), out, nrows, s, &err);
    ck_assert(cudaStreamEndCapture(s, &g) == cudaSuccess);
    ck_assert_msg(rc == 0, "%s", err.msg);
    size_t nodes = 0;
    ck_assert(cudaGraphGetNodes(g, NULL, &nodes) == cudaSuccess);
    ck_assert_uint_eq(nodes, 1);
    cudaGraphNode_t node;
    enum cudaGraphNodeType type;
    ck_assert(cudaGraphGetNodes(g, &node, &nodes) == cudaSuccess);
    ck_assert(cudaGraphNodeGetType(node, &type) == cudaSuccess && type == cudaGraphNodeTypeKernel);
    cudaKernelNodeAttrValue v;
    memset(&v, 0, sizeof v);
    ck_assert(cudaGraphKernelNodeGetAttribute(node, cudaKernelNodeAttributeAccessPolicyWindow, &v) == cudaSuccess);
    ck_assert(cudaGraphDestroy(g) == cudaSuccess && cudaStreamDestroy(s) == cudaSuccess);
    dev_free(act);
    dev_free(out);
    dev_free(lids);
    return v.accessPolicyWindow;
}

/* The window is the launch's weights, marked streaming for hits and misses alike, at most the device's largest;
 * bytes 0: no window (the dense products, and every launch with marking off). */
static void check_window(struct cudaAccessPolicyWindow a, const void *base, size_t bytes, const char *what)
{
    const size_t max = cuda_l2_stream_max();
    if (!max || !bytes) { /* marking off, a device without windows, or a launch that marks nothing */
        ck_assert_msg(a.num_bytes == 0, "%s: a window of %zu bytes where none belongs", what, a.num_bytes);
        return;
    }
    ck_assert_msg(a.base_ptr == base && a.num_bytes == (bytes < max ? bytes : max),
                  "%s: window %p + %zu, expected %p + %zu", what, a.base_ptr, a.num_bytes, base,
                  bytes < max ? bytes : max);
    ck_assert_msg(a.hitProp == cudaAccessPropertyStreaming && a.missProp == cudaAccessPropertyStreaming &&
                      a.hitRatio == 1.0f,
                  "%s: hit %d miss %d ratio %g", what, (int)a.hitProp, (int)a.missProp, (double)a.hitRatio);
}

START_TEST(test_l2_stream)
{
    const size_t wrb = row_bytes(GUILD_TYPE_Q4_K, 4096), erb = row_bytes(GUILD_TYPE_Q4_K, 2048);
    cuda_set_l2_stream(true);
    const size_t max = cuda_l2_stream_max();
    /* a buffer past the device's largest window: gate and up at its two ends lie farther apart than a window */
    const int64_t big = max ? (int64_t)(max / wrb) + 40 : 64;
    char *w = dev_new((size_t)big * wrb);
    for (int off = 0; off < 2; off++) {
        cuda_set_l2_stream(!off);
        /* the dense products mark nothing */
        check_window(captured_window(0, w, NULL, 37, 1, 0), w, 0, "matmul, 1 token (split)");
        check_window(captured_window(0, w, NULL, 37, 3, 0), w, 0, "matmul, 3 tokens");
        /* routed experts: 4 experts of 64 rows, gate and up one after the other (one window over both), the
         * down product alone */
        const size_t es = 64 * erb;
        check_window(captured_window(1, w, w + 4 * es, 64, 1, 4), w, 8 * es, "expert pairs, gate and up");
        check_window(captured_window(1, w, NULL, 64, 1, 4), w, 4 * es, "expert pairs, one weight");
        if (max) { /* gate and up farther apart than a window holds: the gate's */
            check_window(captured_window(1, w, w + (size_t)big * wrb - 4 * es, 64, 1, 4), w, 4 * es,
                         "expert pairs, gate and up far apart");
            /* a layer's experts past the largest window (a Q6_K down tensor of the 30B shape): its first max bytes
             * (only captured: the launch reads nothing) */
            const int32_t nl = (int32_t)(max / es) + 2;
            check_window(captured_window(1, w, NULL, 64, 1, nl), w, (size_t)nl * es,
                         "expert pairs past the largest window");
        }
    }
    cuda_set_l2_stream(true);
    dev_free(w);
    printf("l2 stream: windows of the routed experts' weights in captured graphs (the device's largest: %zu bytes), "
           "none on the dense products, none with marking off\n", max);
}
END_TEST

/* ---- get_rows -------------------------------------------------------------------------------------------- */

START_TEST(test_get_rows)
{
    const guild_type_t type = mm_types[_i];
    const int64_t n = 512, nrows = 50, ldo = 520;
    const int32_t ids[] = {3, 49, 0, 3, 17, 25};
    const int32_t n_ids = 6;
    const size_t rb = row_bytes(type, n);
    rng_t r;
    rng_seed(&r, 77 + (uint64_t)_i);
    float *f = malloc((size_t)n * sizeof *f);
    char *w = malloc(rb * (size_t)nrows);
    guild_err_t err;
    for (int64_t row = 0; row < nrows; row++) {
        fill(&r, f, n, 2.0f);
        cuda_test_make_row(&r, type, f, w + (size_t)row * rb, n);
    }
    float *got = malloc((size_t)(n_ids * ldo) * sizeof *got), *ref = malloc((size_t)n * sizeof *ref);
    void *dw = dev_upload(w, rb * (size_t)nrows);
    int32_t *dids = dev_upload(ids, sizeof ids);
    float *dout = dev_new((size_t)(n_ids * ldo) * sizeof *got);
    ck_assert_msg(cuda_get_rows(type, dw, rb, n, dids, n_ids, dout, ldo, stream, &err) == 0, "%s", err.msg);
    dev_download(got, dout, (size_t)(n_ids * ldo) * sizeof *got, stream);
    for (int32_t i = 0; i < n_ids; i++) {
        quant_dequantize_row_ref(type, w + (size_t)ids[i] * rb, ref, n);
        ck_assert_msg(!memcmp(got + i * ldo, ref, (size_t)n * sizeof *ref), "%s: row %d differs",
                      quant_type_info(type)->name, ids[i]);
        ck_assert(isnan(got[i * ldo + n]));
    }
    printf("get_rows %-6s: bit-exact\n", quant_type_info(type)->name);
    dev_free(dw);
    dev_free(dids);
    dev_free(dout);
    free(f);
    free(w);
    free(got);
    free(ref);
}
END_TEST

/* ---- rmsnorm --------------------------------------------------------------------------------------------- */

START_TEST(test_rmsnorm)
{
    static const int64_t sizes[] = {2048, 128, 4096, 96};
    const int64_t n = sizes[_i], ld = n + 8;
    const int rows = 6;
    const int32_t map[] = {5, 0, 2, 2, 4, 1};
    rng_t r;
    rng_seed(&r, 5);
    float *x = malloc((size_t)(rows * ld) * sizeof *x), *w = malloc((size_t)n * sizeof *w);
    float *got = malloc((size_t)(rows * ld) * sizeof *got), *ref = malloc((size_t)n * sizeof *ref);
    fill(&r, x, rows * ld, 3.0f);
    for (int64_t i = 0; i < n; i++)
        w[i] = 1.0f + 0.2f * (float)(2 * rng_uniform(&r) - 1);
    float *dx = dev_upload(x, (size_t)(rows * ld) * sizeof *x), *dw = dev_upload(w, (size_t)n * sizeof *w);
    float *dout = dev_new((size_t)(rows * ld) * sizeof *got);
    int32_t *dmap = dev_upload(map, sizeof map);
    guild_err_t err;
    double worst = 0;
    for (int pass = 0; pass < 3; pass++) {
        /* 0: out of place; 1: gathered rows; 2: in place */
        float *out = pass == 2 ? dx : dout;
        ck_assert_msg(cuda_rmsnorm(out, ld, dx, ld, pass == 1 ? dmap : NULL, dw, n, rows, 1e-6f, stream, &err) == 0,
                      "%s", err.msg);
        dev_download(got, out, (size_t)(rows * ld) * sizeof *got, stream);
        for (int row = 0; row < rows; row++) {
            const int src = pass == 1 ? map[row] : row;
            cpu_rmsnorm(ref, x + src * ld, w, n, 1e-6f);
            for (int64_t i = 0; i < n; i++) {
                const double u = ulps(got[row * ld + i], ref[i]);
                worst = u > worst ? u : worst;
                ck_assert_msg(u <= 4, "rmsnorm n=%lld row %d [%lld]: %.9g vs %.9g", (long long)n, row, (long long)i,
                              (double)got[row * ld + i], (double)ref[i]);
            }
        }
    }
    printf("rmsnorm n=%-5lld: max %.0f ulp (tolerance 4)\n", (long long)n, worst);
    dev_free(dx);
    dev_free(dw);
    dev_free(dout);
    dev_free(dmap);
    free(x);
    free(w);
    free(got);
    free(ref);
}
END_TEST

/* ---- rope ------------------------------------------------------------------------------------------------ */

/* cuda_qk_prepare against cuda_rmsnorm (per head), cuda_rope_dyn and cuda_kv_store_dyn run one after the other:
 * the same bits in q, k and both caches. _i: bit 0 F32 cache (else F16), bit 1 no norms, bit 2 normal RoPE with
 * n_rot < head_dim (else NeoX, full), bit 3 heads of 64 and 5 rows (else 128 and 1). */
START_TEST(test_qk_prepare)
{
    const bool f32 = _i & 1, norms = !(_i & 2), neox = !(_i & 4);
    const int32_t HD = _i & 8 ? 64 : 128, n = _i & 8 ? 5 : 1, nh = 8, nkv = 2, n_rot = neox ? HD : HD / 2;
    const int32_t pos0 = 300, n_ctx = pos0 + n + 2;
    const int64_t Q = (int64_t)nh * HD, KV = (int64_t)nkv * HD;
    const size_t es = f32 ? 4 : 2, cache_bytes = (size_t)n_ctx * (size_t)KV * es;
    const guild_type_t kvt = f32 ? GUILD_TYPE_F32 : GUILD_TYPE_F16;
    rng_t r;
    rng_seed(&r, 77 + (uint64_t)_i);
    float *q = malloc((size_t)(n * Q) * sizeof *q), *k = malloc((size_t)(n * KV) * sizeof *k);
    float *v = malloc((size_t)(n * KV) * sizeof *v), *qn = malloc((size_t)HD * sizeof *qn);
    float *kn = malloc((size_t)HD * sizeof *kn), *cs = malloc((size_t)n_ctx * (size_t)n_rot * sizeof *cs);
    fill(&r, q, n * Q, 3.0f);
    fill(&r, k, n * KV, 3.0f);
    fill(&r, v, n * KV, 1.0f);
    fill(&r, qn, HD, 1.0f);
    fill(&r, kn, HD, 1.0f);
    for (int64_t i = 0; i < (int64_t)n_ctx * n_rot; i++)
        cs[i] = sinf(0.37f * (float)i); /* any values: both paths read the same table */
    const int32_t pos = pos0;
    /* two copies of every input: [0] for the fused kernel, [1] for the three kernels */
    float *dq[2], *dk[2], *dv[2];
    void *dkc[2], *dvc[2];
    char *zero = calloc(1, cache_bytes);
    for (int j = 0; j < 2; j++) {
        dq[j] = dev_upload(q, (size_t)(n * Q) * sizeof *q);
        dk[j] = dev_upload(k, (size_t)(n * KV) * sizeof *k);
        dv[j] = dev_upload(v, (size_t)(n * KV) * sizeof *v);
        dkc[j] = dev_upload(zero, cache_bytes);
        dvc[j] = dev_upload(zero, cache_bytes);
    }
    float *dqn = dev_upload(qn, (size_t)HD * sizeof *qn), *dkn = dev_upload(kn, (size_t)HD * sizeof *kn);
    float *dcs = dev_upload(cs, (size_t)n_ctx * (size_t)n_rot * sizeof *cs);
    int32_t *dpos = dev_upload(&pos, sizeof pos);
    guild_err_t err;
    ck_assert_msg(cuda_qk_prepare(dq[0], dk[0], dv[0], n, nh, nkv, HD, norms ? dqn : NULL, norms ? dkn : NULL, 1e-6f,
                                  n_rot, neox, dcs, dpos, kvt, dkc[0], dvc[0], stream, &err) == 0, "%s", err.msg);
    if (norms) {
        ck_assert(cuda_rmsnorm(dq[1], HD, dq[1], HD, NULL, dqn, HD, n * nh, 1e-6f, stream, &err) == 0);
        ck_assert(cuda_rmsnorm(dk[1], HD, dk[1], HD, NULL, dkn, HD, n * nkv, 1e-6f, stream, &err) == 0);
    }
    ck_assert(cuda_rope_dyn(dq[1], Q, n, nh, HD, n_rot, neox, dcs, dpos, stream, &err) == 0);
    ck_assert(cuda_rope_dyn(dk[1], KV, n, nkv, HD, n_rot, neox, dcs, dpos, stream, &err) == 0);
    ck_assert(cuda_kv_store_dyn(kvt, dkc[1], dvc[1], dk[1], dv[1], KV, n, dpos, stream, &err) == 0);
    const size_t sizes[4] = {(size_t)(n * Q) * sizeof *q, (size_t)(n * KV) * sizeof *k, cache_bytes, cache_bytes};
    void *got[2][4] = {{dq[0], dk[0], dkc[0], dvc[0]}, {dq[1], dk[1], dkc[1], dvc[1]}};
    static const char *const names[4] = {"q", "k", "K cache", "V cache"};
    for (int b = 0; b < 4; b++) {
        char *h0 = malloc(sizes[b]), *h1 = malloc(sizes[b]);
        dev_download(h0, got[0][b], sizes[b], stream);
        dev_download(h1, got[1][b], sizes[b], stream);
        ck_assert_msg(!memcmp(h0, h1, sizes[b]), "qk prepare case %d: %s differs from the three kernels'", _i,
                      names[b]);
        free(h0);
        free(h1);
    }
    printf("qk prepare case %d (%s cache, %s, %s, heads of %d, %d rows): bit-exact\n", _i, f32 ? "f32" : "f16",
           norms ? "norms" : "no norms", neox ? "neox" : "normal, partial", HD, n);
    for (int j = 0; j < 2; j++) {
        dev_free(dq[j]);
        dev_free(dk[j]);
        dev_free(dv[j]);
        dev_free(dkc[j]);
        dev_free(dvc[j]);
    }
    dev_free(dqn);
    dev_free(dkn);
    dev_free(dcs);
    dev_free(dpos);
    free(zero);
    free(q);
    free(k);
    free(v);
    free(qn);
    free(kn);
    free(cs);
}
END_TEST

START_TEST(test_rope)
{
    /* _i: 0 neox full rotation, 1 norm full, 2 neox partial (n_rot < head_dim), 3 norm partial, yarn */
    model_config_t c;
    memset(&c, 0, sizeof c);
    c.arch = _i % 2 == 0 ? MODEL_ARCH_QWEN3MOE : MODEL_ARCH_LLAMA;
    c.rope_neox = _i % 2 == 0;
    c.head_dim = 128;
    c.n_rot = _i < 2 ? 128 : 64;
    c.rope_freq_base = 1000000.0f;
    c.rope_freq_scale = _i == 3 ? 0.25f : 1.0f;
    c.rope_scaling = _i == 3 ? MODEL_ROPE_SCALING_YARN : MODEL_ROPE_SCALING_NONE;
    c.rope_n_ctx_orig = 4096;
    c.yarn_ext_factor = _i == 3 ? 1.0f : 0.0f;
    c.yarn_attn_factor = 1.0f;
    c.yarn_beta_fast = 32.0f;
    c.yarn_beta_slow = 1.0f;
    cpu_rope_t rope;
    ck_assert(cpu_rope_init(&rope, &c, NULL) == 0);
    const int32_t n_tok = 5, n_heads = 6, pos0 = 1000, HD = 128;
    const int64_t ldx = n_heads * HD + 16;
    float *cs = malloc((size_t)(pos0 + n_tok) * (size_t)c.n_rot * sizeof *cs);
    for (int32_t p = 0; p < pos0 + n_tok; p++)
        cpu_rope_table(&rope, p, cs + (size_t)p * (size_t)c.n_rot);
    rng_t r;
    rng_seed(&r, 9);
    float *x = malloc((size_t)(n_tok * ldx) * sizeof *x), *got = malloc((size_t)(n_tok * ldx) * sizeof *got);
    fill(&r, x, n_tok * ldx, 2.0f);
    float *dx = dev_upload(x, (size_t)(n_tok * ldx) * sizeof *x);
    float *dcs = dev_upload(cs, (size_t)(pos0 + n_tok) * (size_t)c.n_rot * sizeof *cs);
    guild_err_t err;
    ck_assert_msg(cuda_rope(dx, ldx, n_tok, n_heads, HD, c.n_rot, rope.neox, dcs, pos0, stream, &err) == 0, "%s",
                  err.msg);
    dev_download(got, dx, (size_t)(n_tok * ldx) * sizeof *got, stream);
    for (int32_t t = 0; t < n_tok; t++)
        cpu_rope_apply(&rope, x + t * ldx, n_heads, HD, cs + (size_t)(pos0 + t) * (size_t)c.n_rot);
    ck_assert_msg(!memcmp(got, x, (size_t)(n_tok * ldx) * sizeof *x), "rope case %d differs from cpu_rope_apply", _i);
    printf("rope case %d (%s, n_rot %d%s): bit-exact\n", _i, rope.neox ? "neox" : "norm", c.n_rot,
           _i == 3 ? ", yarn" : "");
    cpu_rope_fini(&rope);
    dev_free(dx);
    dev_free(dcs);
    free(cs);
    free(x);
    free(got);
}
END_TEST

/* ---- elementwise: add, add_bias, swiglu, kv_store ---------------------------------------------------------- */

START_TEST(test_elementwise)
{
    const int64_t n = 1000, rows = 7, ld = 1010, total = rows * ld;
    rng_t r;
    rng_seed(&r, 11);
    float *x = malloc((size_t)total * sizeof *x), *p = malloc((size_t)total * sizeof *p);
    float *b = malloc((size_t)n * sizeof *b), *got = malloc((size_t)total * sizeof *got);
    fill(&r, x, total, 3.0f);
    fill(&r, p, total, 3.0f);
    fill(&r, b, n, 1.0f);
    guild_err_t err;
    float *dx = dev_upload(x, (size_t)total * sizeof *x), *dp = dev_upload(p, (size_t)total * sizeof *p);
    float *db = dev_upload(b, (size_t)n * sizeof *b);

    ck_assert_msg(cuda_add_bias(dx, ld, db, n, (int32_t)rows, stream, &err) == 0, "%s", err.msg);
    dev_download(got, dx, (size_t)total * sizeof *got, stream);
    for (int64_t t = 0; t < rows; t++)
        for (int64_t i = 0; i < n; i++)
            x[t * ld + i] = x[t * ld + i] + b[i];
    ck_assert_msg(!memcmp(got, x, (size_t)total * sizeof *x), "add_bias differs (or wrote between rows)");

    ck_assert_msg(cuda_add(dx, dp, total, stream, &err) == 0, "%s", err.msg);
    dev_download(got, dx, (size_t)total * sizeof *got, stream);
    for (int64_t i = 0; i < total; i++)
        x[i] = p[i] + x[i];
    ck_assert_msg(!memcmp(got, x, (size_t)total * sizeof *x), "add differs");

    ck_assert_msg(cuda_swiglu(dx, dp, total, stream, &err) == 0, "%s", err.msg);
    dev_download(got, dx, (size_t)total * sizeof *got, stream);
    double worst = 0;
    for (int64_t i = 0; i < total; i++) {
        const float ref = model_silu(x[i]) * p[i];
        const double d = fabs((double)got[i] - ref), lim = 2e-6 * fabs(ref) + 1e-7;
        ck_assert_msg(d <= lim, "swiglu [%lld]: %.9g vs %.9g", (long long)i, (double)got[i], (double)ref);
        worst = d / (fabs(ref) + 1e-30) > worst ? d / (fabs(ref) + 1e-30) : worst;
    }
    printf("add, add_bias: bit-exact; swiglu: max rel err %.3g (tolerance 2e-6)\n", worst);

    /* kv_store: two tokens of kv_dim 96 at position 3 of a 10-position cache, F16 and F32 */
    const int64_t kvd = 96;
    const int32_t n_tok = 2, pos0 = 3, n_ctx = 10;
    quant_half_t *kc = dev_new((size_t)(n_ctx * kvd) * 2), *vc = dev_new((size_t)(n_ctx * kvd) * 2);
    float *kc32 = dev_new((size_t)(n_ctx * kvd) * 4), *vc32 = dev_new((size_t)(n_ctx * kvd) * 4);
    ck_assert_msg(cuda_kv_store(GUILD_TYPE_F16, kc, vc, dx, dp, kvd, n_tok, pos0, stream, &err) == 0, "%s", err.msg);
    ck_assert_msg(cuda_kv_store(GUILD_TYPE_F32, kc32, vc32, dx, dp, kvd, n_tok, pos0, stream, &err) == 0, "%s",
                  err.msg);
    quant_half_t *hk = malloc((size_t)(n_ctx * kvd) * 2), *hv = malloc((size_t)(n_ctx * kvd) * 2);
    float *hk32 = malloc((size_t)(n_ctx * kvd) * 4), *hv32 = malloc((size_t)(n_ctx * kvd) * 4);
    dev_download(hk, kc, (size_t)(n_ctx * kvd) * 2, stream);
    dev_download(hv, vc, (size_t)(n_ctx * kvd) * 2, stream);
    dev_download(hk32, kc32, (size_t)(n_ctx * kvd) * 4, stream);
    dev_download(hv32, vc32, (size_t)(n_ctx * kvd) * 4, stream);
    dev_download(got, dx, (size_t)total * sizeof *got, stream);
    for (int64_t i = 0; i < n_ctx * kvd; i++) {
        const int64_t cell = i - pos0 * kvd;
        if (cell >= 0 && cell < n_tok * kvd) {
            ck_assert_uint_eq(hk[i], quant_f32_to_f16(got[cell]));
            ck_assert_uint_eq(hv[i], quant_f32_to_f16(p[cell]));
            ck_assert(!memcmp(&hk32[i], &got[cell], 4) && !memcmp(&hv32[i], &p[cell], 4));
        } else {
            ck_assert_uint_eq(hk[i], 0xffff); /* untouched */
            ck_assert(isnan(hv32[i]));
        }
    }
    ck_assert_int_eq(cuda_kv_store(GUILD_TYPE_Q8_0, kc, vc, dx, dp, kvd, n_tok, pos0, stream, &err), -1);
    printf("kv_store: bit-exact (f16: round to nearest even; f32)\n");
    dev_free(dx);
    dev_free(dp);
    dev_free(db);
    dev_free(kc);
    dev_free(vc);
    dev_free(kc32);
    dev_free(vc32);
    free(hk32);
    free(hv32);
    free(x);
    free(p);
    free(b);
    free(got);
    free(hk);
    free(hv);
}
END_TEST

/* ---- router ---------------------------------------------------------------------------------------------- */

START_TEST(test_router)
{
    static const struct { int32_t n_expert, k, groups, used; bool renorm; float scale; } cases[] = {
        {128, 8, 0, 0, true, 1.0f},   {60, 4, 0, 0, false, 0.0f},  {8, 2, 0, 0, true, 2.5f},
        {256, 8, 0, 0, false, 1.0f},  {1024, 32, 0, 0, true, 1.0f},
        {160, 6, 8, 3, false, 16.0f}, {64, 6, 8, 3, true, 1.0f}, {16, 4, 4, 2, false, 0.0f}}; /* V2's groups */
    const int32_t ne = cases[_i].n_expert, k = cases[_i].k, n_tok = 37;
    rng_t r;
    rng_seed(&r, 13 + (uint64_t)_i);
    float *logits = malloc((size_t)(n_tok * ne) * sizeof *logits);
    fill(&r, logits, n_tok * ne, 3.0f);
    float *dl = dev_upload(logits, (size_t)(n_tok * ne) * sizeof *logits);
    int32_t *dids = dev_new((size_t)(n_tok * k) * sizeof(int32_t));
    float *dw = dev_new((size_t)(n_tok * k) * sizeof(float));
    guild_err_t err;
    ck_assert_msg(cuda_router_topk(dl, n_tok, ne, k, cases[_i].groups, cases[_i].used, cases[_i].renorm,
                                   cases[_i].scale, dids, dw, NULL, stream, &err) == 0,
                  "%s", err.msg);
    int32_t *ids = malloc((size_t)(n_tok * k) * sizeof *ids), rids[32];
    float *w = malloc((size_t)(n_tok * k) * sizeof *w), rw[32],
          *probs = malloc((size_t)cpu_router_sigmoid_scratch(ne, cases[_i].groups) * sizeof *probs);
    dev_download(ids, dids, (size_t)(n_tok * k) * sizeof *ids, stream);
    dev_download(w, dw, (size_t)(n_tok * k) * sizeof *w, stream);
    double worst = 0;
    for (int32_t t = 0; t < n_tok; t++) {
        cpu_router_softmax_grouped(logits + t * ne, ne, k, cases[_i].groups, cases[_i].used, cases[_i].renorm,
                                   cases[_i].scale, rids, rw, probs);
        for (int32_t s = 0; s < k; s++) {
            ck_assert_msg(ids[t * k + s] == rids[s], "token %d slot %d: expert %d, reference %d", t, s, ids[t * k + s],
                          rids[s]);
            const double d = fabs((double)w[t * k + s] - rw[s]);
            ck_assert_msg(d <= 2e-6 * fabs(rw[s]) + 1e-7, "token %d slot %d: weight %.9g vs %.9g", t, s,
                          (double)w[t * k + s], (double)rw[s]);
            worst = d / fabs(rw[s]) > worst ? d / fabs(rw[s]) : worst;
        }
    }
    printf("router top-%d of %d%s: same experts, max rel weight err %.3g (tolerance 2e-6)\n", k, ne,
           cases[_i].renorm ? ", renorm" : "", worst);
    dev_free(dl);
    dev_free(dids);
    dev_free(dw);
    free(logits);
    free(ids);
    free(w);
    free(probs);
}
END_TEST

/* gpt-oss's router: top k of logits + bias, weighted by the softmax of those k; the same experts as
 * cpu_router_topk_logits, the weights within expf's rounding. */
START_TEST(test_router_topk_logits)
{
    static const struct { int32_t n_expert, k; bool bias; float scale; } cases[] = {
        {32, 4, true, 0.0f}, {128, 4, true, 1.0f}, {8, 2, false, 2.5f}, {1024, 32, true, 1.0f}};
    const int32_t ne = cases[_i].n_expert, k = cases[_i].k, n_tok = 37;
    rng_t r;
    rng_seed(&r, 29 + (uint64_t)_i);
    float *logits = malloc((size_t)(n_tok * ne) * sizeof *logits), *bias = malloc((size_t)ne * sizeof *bias);
    fill(&r, logits, n_tok * ne, 3.0f);
    fill(&r, bias, ne, 1.0f);
    float *dl = dev_upload(logits, (size_t)(n_tok * ne) * sizeof *logits);
    float *db = dev_upload(bias, (size_t)ne * sizeof *bias);
    int32_t *dids = dev_new((size_t)(n_tok * k) * sizeof(int32_t));
    float *dw = dev_new((size_t)(n_tok * k) * sizeof(float));
    guild_err_t err;
    ck_assert_msg(cuda_router_topk_logits(dl, cases[_i].bias ? db : NULL, n_tok, ne, k, cases[_i].scale, dids, dw,
                                          stream, &err) == 0, "%s", err.msg);
    int32_t *ids = malloc((size_t)(n_tok * k) * sizeof *ids), rids[32];
    float *w = malloc((size_t)(n_tok * k) * sizeof *w), rw[32], *scratch = malloc((size_t)ne * sizeof *scratch);
    dev_download(ids, dids, (size_t)(n_tok * k) * sizeof *ids, stream);
    dev_download(w, dw, (size_t)(n_tok * k) * sizeof *w, stream);
    double worst = 0;
    for (int32_t t = 0; t < n_tok; t++) {
        cpu_router_topk_logits(logits + t * ne, cases[_i].bias ? bias : NULL, ne, k, cases[_i].scale, rids, rw,
                               scratch);
        for (int32_t s = 0; s < k; s++) {
            ck_assert_msg(ids[t * k + s] == rids[s], "token %d slot %d: expert %d, reference %d", t, s, ids[t * k + s],
                          rids[s]);
            const double d = fabs((double)w[t * k + s] - rw[s]);
            ck_assert_msg(d <= 2e-6 * fabs(rw[s]) + 1e-7, "token %d slot %d: weight %.9g vs %.9g", t, s,
                          (double)w[t * k + s], (double)rw[s]);
            worst = d / fabs(rw[s]) > worst ? d / fabs(rw[s]) : worst;
        }
    }
    printf("router top-%d of %d logits%s, then softmax: same experts, max rel weight err %.3g (tolerance 2e-6)\n", k,
           ne, cases[_i].bias ? " + bias" : "", worst);
    dev_free(dl);
    dev_free(db);
    dev_free(dids);
    dev_free(dw);
    free(logits);
    free(bias);
    free(ids);
    free(w);
    free(scratch);
}
END_TEST

/* gpt-oss's expert epilogues: swiglu_oai with the experts' gate/up biases, and the down bias, per pair (skip slots
 * untouched), against model_swiglu_oai and float adds. */
START_TEST(test_expert_oai)
{
    const int32_t n_pairs = 13, n_expert = 6;
    const int64_t F = 300, E = 200;
    rng_t r;
    rng_seed(&r, 31);
    int32_t ids[13];
    for (int32_t p = 0; p < n_pairs; p++)
        ids[p] = p % 5 == 3 ? -1 : (int32_t)(rng_next(&r) % (uint64_t)n_expert);
    float *h = malloc((size_t)(n_pairs * F) * sizeof *h), *u = malloc((size_t)(n_pairs * F) * sizeof *u);
    float *gb = malloc((size_t)(n_expert * F) * sizeof *gb), *ub = malloc((size_t)(n_expert * F) * sizeof *ub);
    float *y = malloc((size_t)(n_pairs * E) * sizeof *y), *db = malloc((size_t)(n_expert * E) * sizeof *db);
    float *got = malloc((size_t)(n_pairs * (F > E ? F : E)) * sizeof *got);
    fill(&r, h, n_pairs * (int32_t)F, 9.0f); /* past the limit 7 both ways */
    fill(&r, u, n_pairs * (int32_t)F, 9.0f);
    fill(&r, gb, n_expert * (int32_t)F, 0.5f);
    fill(&r, ub, n_expert * (int32_t)F, 0.5f);
    fill(&r, y, n_pairs * (int32_t)E, 2.0f);
    fill(&r, db, n_expert * (int32_t)E, 0.5f);
    int32_t *dids = dev_upload(ids, sizeof ids);
    float *dh = dev_upload(h, (size_t)(n_pairs * F) * sizeof *h);
    float *du = dev_upload(u, (size_t)(n_pairs * F) * sizeof *u);
    float *dgb = dev_upload(gb, (size_t)(n_expert * F) * sizeof *gb);
    float *dub = dev_upload(ub, (size_t)(n_expert * F) * sizeof *ub);
    float *dy = dev_upload(y, (size_t)(n_pairs * E) * sizeof *y);
    float *ddb = dev_upload(db, (size_t)(n_expert * E) * sizeof *db);
    guild_err_t err;
    ck_assert_msg(cuda_expert_swiglu_oai(dh, du, dids, n_pairs, F, dgb, dub, 1.702f, 7.0f, stream, &err) == 0, "%s",
                  err.msg);
    ck_assert_msg(cuda_expert_add_bias(dy, dids, n_pairs, E, ddb, stream, &err) == 0, "%s", err.msg);
    dev_download(got, dh, (size_t)(n_pairs * F) * sizeof *got, stream);
    double worst = 0;
    for (int32_t p = 0; p < n_pairs; p++)
        for (int64_t i = 0; i < F; i++) {
            const float in = h[p * F + i], g = got[p * F + i];
            if (ids[p] < 0) {
                ck_assert_msg(g == in, "skipped pair %d written", p);
                continue;
            }
            const float ref =
                model_swiglu_oai(in + gb[ids[p] * F + i], u[p * F + i] + ub[ids[p] * F + i], 1.702f, 7.0f);
            const double d = fabs((double)g - ref);
            ck_assert_msg(d <= 2e-6 * fabs(ref) + 1e-6, "pair %d elem %lld: %.9g vs %.9g", p, (long long)i, (double)g,
                          (double)ref);
            worst = d > worst ? d : worst;
        }
    dev_download(got, dy, (size_t)(n_pairs * E) * sizeof *got, stream);
    for (int32_t p = 0; p < n_pairs; p++)
        for (int64_t i = 0; i < E; i++) {
            const float want = ids[p] < 0 ? y[p * E + i] : y[p * E + i] + db[ids[p] * E + i];
            ck_assert_msg(got[p * E + i] == want, "down bias, pair %d elem %lld: %.9g vs %.9g", p, (long long)i,
                          (double)got[p * E + i], (double)want);
        }
    printf("expert swiglu_oai with biases: max abs err %.3g (tolerance 2e-6 |ref| + 1e-6); down bias bit-exact\n",
           worst);
    dev_free(dids);
    dev_free(dh);
    dev_free(du);
    dev_free(dgb);
    dev_free(dub);
    dev_free(dy);
    dev_free(ddb);
    free(h);
    free(u);
    free(gb);
    free(ub);
    free(y);
    free(db);
    free(got);
}
END_TEST

/* The grouped sigmoid router against the CPU's: the same experts in the same slots, weights within expf's
 * difference. */
START_TEST(test_router_sigmoid)
{
    static const struct {
        int32_t n_expert, k, groups, used;
        bool bias, renorm;
        float scale;
    } cases[] = {{128, 8, 0, 0, true, true, 1.0f},   {160, 8, 0, 0, true, true, 2.5f},  {256, 8, 8, 4, true, true, 2.5f},
                 {64, 6, 8, 3, false, false, 16.0f}, {1024, 32, 16, 8, true, true, 0.0f}, {8, 2, 4, 2, true, true, 1.0f}};
    const int32_t ne = cases[_i].n_expert, k = cases[_i].k, n_tok = 37;
    rng_t r;
    rng_seed(&r, 29 + (uint64_t)_i);
    float *logits = malloc((size_t)(n_tok * ne) * sizeof *logits), *bias = malloc((size_t)ne * sizeof *bias);
    fill(&r, logits, n_tok * ne, 3.0f);
    fill(&r, bias, ne, 0.1f);
    float *dl = dev_upload(logits, (size_t)(n_tok * ne) * sizeof *logits);
    float *db = dev_upload(bias, (size_t)ne * sizeof *bias);
    int32_t *dids = dev_new((size_t)(n_tok * k) * sizeof(int32_t));
    float *dw = dev_new((size_t)(n_tok * k) * sizeof(float));
    guild_err_t err;
    const float *b = cases[_i].bias ? bias : NULL;
    ck_assert_msg(cuda_router_sigmoid_grouped(dl, cases[_i].bias ? db : NULL, n_tok, ne, k, cases[_i].groups,
                                              cases[_i].used, cases[_i].renorm, cases[_i].scale, dids, dw, stream,
                                              &err) == 0, "%s", err.msg);
    int32_t *ids = malloc((size_t)(n_tok * k) * sizeof *ids), rids[32];
    float *w = malloc((size_t)(n_tok * k) * sizeof *w), rw[32];
    float *scratch = malloc((size_t)cpu_router_sigmoid_scratch(ne, cases[_i].groups) * sizeof *scratch);
    dev_download(ids, dids, (size_t)(n_tok * k) * sizeof *ids, stream);
    dev_download(w, dw, (size_t)(n_tok * k) * sizeof *w, stream);
    double worst = 0;
    for (int32_t t = 0; t < n_tok; t++) {
        cpu_router_sigmoid_grouped(logits + t * ne, b, ne, k, cases[_i].groups, cases[_i].used, cases[_i].renorm,
                                   cases[_i].scale, rids, rw, scratch);
        for (int32_t s = 0; s < k; s++) {
            ck_assert_msg(ids[t * k + s] == rids[s], "token %d slot %d: expert %d, reference %d", t, s, ids[t * k + s],
                          rids[s]);
            const double d = fabs((double)w[t * k + s] - rw[s]);
            ck_assert_msg(d <= 2e-6 * fabs(rw[s]) + 1e-7, "token %d slot %d: weight %.9g vs %.9g", t, s,
                          (double)w[t * k + s], (double)rw[s]);
            worst = d / fabs(rw[s]) > worst ? d / fabs(rw[s]) : worst;
        }
    }
    /* a configuration the kernel does not take is refused */
    ck_assert_int_eq(cuda_router_sigmoid_grouped(dl, NULL, n_tok, ne, k, 3, 1, false, 0, dids, dw, stream, &err), -1);
    printf("router sigmoid top-%d of %d, %d groups (%d used)%s: same experts, max rel weight err %.3g (tolerance "
           "2e-6)\n", k, ne, cases[_i].groups, cases[_i].used, cases[_i].bias ? ", score bias" : "", worst);
    dev_free(dl);
    dev_free(db);
    dev_free(dids);
    dev_free(dw);
    free(logits);
    free(bias);
    free(ids);
    free(w);
    free(scratch);
}
END_TEST

/* ---- combine --------------------------------------------------------------------------------------------- */

START_TEST(test_combine)
{
    const bool shared = _i >= 1, gated = _i == 1; /* 2: an ungated shared expert (glm4moe) */
    const int32_t n_tok = 5, K = 8;
    const int64_t E = 640;
    rng_t r;
    rng_seed(&r, 17);
    float *x = malloc((size_t)(n_tok * E) * sizeof *x), *y = malloc((size_t)(n_tok * K * E) * sizeof *y);
    float *w = malloc((size_t)(n_tok * K) * sizeof *w), *sh = malloc((size_t)(n_tok * E) * sizeof *sh);
    float *lg = malloc((size_t)n_tok * sizeof *lg), *got = malloc((size_t)(n_tok * E) * sizeof *got);
    fill(&r, x, n_tok * E, 2.0f);
    fill(&r, y, n_tok * K * E, 2.0f);
    fill(&r, w, n_tok * K, 1.0f);
    fill(&r, sh, n_tok * E, 2.0f);
    fill(&r, lg, n_tok, 3.0f);
    float *dx = dev_upload(x, (size_t)(n_tok * E) * sizeof *x), *dy = dev_upload(y, (size_t)(n_tok * K * E) * sizeof *y);
    float *dw = dev_upload(w, (size_t)(n_tok * K) * sizeof *w), *dsh = dev_upload(sh, (size_t)(n_tok * E) * sizeof *sh);
    float *dlg = dev_upload(lg, (size_t)n_tok * sizeof *lg);
    guild_err_t err;
    ck_assert_msg(cuda_moe_combine(dx, dy, dw, shared ? dsh : NULL, gated ? dlg : NULL, n_tok, K, E, stream, &err) == 0,
                  "%s", err.msg);
    dev_download(got, dx, (size_t)(n_tok * E) * sizeof *got, stream);
    double worst = 0;
    for (int32_t t = 0; t < n_tok; t++) {
        const float gate = model_sigmoid(lg[t]);
        for (int64_t i = 0; i < E; i++) {
            float acc = w[t * K] * y[(t * K) * E + i];
            for (int32_t k = 1; k < K; k++)
                acc += w[t * K + k] * y[(t * K + k) * E + i];
            if (gated)
                acc += sh[t * E + i] * gate;
            else if (shared)
                acc += sh[t * E + i];
            const float ref = acc + x[t * E + i], g = got[t * E + i];
            if (!gated) {
                ck_assert_msg(!memcmp(&g, &ref, sizeof g), "combine [%d][%lld]: %.9g vs %.9g", t, (long long)i,
                              (double)g, (double)ref);
            } else {
                const double d = fabs((double)g - ref);
                ck_assert_msg(d <= 2e-6 * fabs(ref) + 1e-6, "combine+shared [%d][%lld]: %.9g vs %.9g", t,
                              (long long)i, (double)g, (double)ref);
                worst = d > worst ? d : worst;
            }
        }
    }
    /* the rows read in place from mapped host memory through a device word (cuda_moe_combine_at): the same bits */
    float *hy = NULL, *hy_dev = NULL, *got2 = malloc((size_t)(n_tok * E) * sizeof *got2);
    ck_assert(cudaHostAlloc((void **)&hy, (size_t)(n_tok * K * E) * sizeof *hy, cudaHostAllocMapped) == cudaSuccess);
    memcpy(hy, y, (size_t)(n_tok * K * E) * sizeof *hy);
    ck_assert(cudaHostGetDevicePointer((void **)&hy_dev, hy, 0) == cudaSuccess);
    const float **dy_at = dev_upload(&hy_dev, sizeof hy_dev);
    float *dx2 = dev_upload(x, (size_t)(n_tok * E) * sizeof *x);
    ck_assert_msg(cuda_moe_combine_at(dx2, dy_at, dw, shared ? dsh : NULL, gated ? dlg : NULL, n_tok, K, E, stream,
                                      &err) == 0, "%s", err.msg);
    dev_download(got2, dx2, (size_t)(n_tok * E) * sizeof *got2, stream);
    ck_assert_msg(!memcmp(got, got2, (size_t)(n_tok * E) * sizeof *got), "combine: rows read in place differ");
    ck_assert_int_eq(cuda_moe_combine_at(dx2, NULL, dw, NULL, NULL, n_tok, K, E, stream, &err), -1);
    if (gated)
        printf("combine with shared expert: max abs err %.3g (tolerance 2e-6 |ref| + 1e-6); in place the same bits\n",
               worst);
    else
        printf("combine%s: bit-exact, in place too\n", shared ? " with an ungated shared expert" : "");
    dev_free(dx2);
    dev_free(dy_at);
    cudaFreeHost(hy);
    free(got2);
    dev_free(dx);
    dev_free(dy);
    dev_free(dw);
    dev_free(dsh);
    dev_free(dlg);
    free(x);
    free(y);
    free(w);
    free(sh);
    free(lg);
    free(got);
}
END_TEST

/* ---- attention ------------------------------------------------------------------------------------------- */

typedef struct attn_case {
    int32_t n_tok, kv0, n_head, n_head_kv, head_dim;
    bool prefill;
    int32_t window; /* sliding window (0: none) */
    bool sinks;     /* a sink logit per head */
} attn_case_t;

static const attn_case_t attn_cases[] = {
    {1, 0, 8, 2, 128, false, 0, false},   {1, 300, 8, 2, 128, false, 0, false},  {3, 5000, 32, 4, 128, false, 0, false},
    {4, 40, 4, 4, 64, false, 0, false},   {2, 9000, 16, 2, 256, false, 0, false}, {1, 77, 2, 1, 32, false, 0, false},
    {7, 0, 8, 2, 128, true, 0, false},    {33, 50, 8, 2, 128, true, 0, false},   {100, 1000, 4, 1, 64, true, 0, false},
    {40, 3, 4, 2, 256, true, 0, false},   {65, 0, 2, 2, 32, true, 0, false},     {1, 500, 8, 2, 128, true, 0, false},
    /* groups of 3 (the per-head kernel) and of 16 (the GQA kernel's 16-warp blocks) */
    {1, 700, 6, 2, 128, false, 0, false}, {2, 3000, 32, 2, 128, false, 0, false}, {1, 1200, 12, 4, 64, true, 0, false},
    {1, 2000, 16, 1, 128, true, 0, false},
    /* gpt-oss's options: windows (shorter and longer than the context), sinks, both; decode (GQA and per-head
     * kernels, one and several splits), prefill (tensor-core: f16 and head dim 64/128; FP32 otherwise) */
    {1, 300, 8, 2, 128, false, 128, true},  {3, 5000, 64, 8, 64, false, 128, true},
    {4, 40, 4, 4, 64, false, 8, false},     {1, 700, 6, 2, 128, false, 100, true},
    {2, 50, 8, 2, 64, false, 0, true},      {1, 3, 8, 1, 64, false, 128, true},
    {33, 50, 8, 2, 128, true, 16, true},    {100, 1000, 64, 8, 64, true, 128, true},
    {40, 3, 4, 2, 256, true, 5, true},      {65, 0, 2, 2, 32, true, 7, false},
    {130, 200, 8, 2, 64, true, 0, true},    {70, 20, 4, 1, 128, true, 64, false},
};

#define N_ATTN_CASES (int)(sizeof attn_cases / sizeof attn_cases[0])

/* _i: case _i % N_ATTN_CASES, with an F16 cache (first pass) or an F32 one */
START_TEST(test_attention)
{
    const attn_case_t c = attn_cases[_i % N_ATTN_CASES];
    const bool f32 = _i >= N_ATTN_CASES;
    const size_t es = f32 ? 4 : 2;
    const int32_t HD = c.head_dim, Q = c.n_head * HD, KV = c.n_head_kv * HD, n_kv = c.kv0 + c.n_tok;
    const int32_t n_ctx = n_kv + 3;
    rng_t r;
    rng_seed(&r, 19 + (uint64_t)_i);
    float *kf = malloc((size_t)n_ctx * (size_t)KV * sizeof *kf), *vf = malloc((size_t)n_ctx * (size_t)KV * sizeof *vf);
    quant_half_t *kh = malloc((size_t)n_ctx * (size_t)KV * 2), *vh = malloc((size_t)n_ctx * (size_t)KV * 2);
    fill(&r, kf, (int64_t)n_ctx * KV, 1.0f);
    fill(&r, vf, (int64_t)n_ctx * KV, 1.0f);
    for (int64_t i = 0; i < (int64_t)n_ctx * KV && !f32; i++) {
        kh[i] = quant_f32_to_f16(kf[i]);
        vh[i] = quant_f32_to_f16(vf[i]);
        kf[i] = quant_f16_to_f32(kh[i]); /* the CPU sees the cache's values */
        vf[i] = quant_f16_to_f32(vh[i]);
    }
    float *q = malloc((size_t)c.n_tok * (size_t)Q * sizeof *q), *got = malloc((size_t)c.n_tok * (size_t)Q * sizeof *got);
    float *ref = malloc((size_t)HD * sizeof *ref), *scores = malloc((size_t)n_ctx * sizeof *scores);
    fill(&r, q, (int64_t)c.n_tok * Q, 1.5f);
    void *dk = dev_upload(f32 ? (void *)kf : (void *)kh, (size_t)n_ctx * (size_t)KV * es);
    void *dv = dev_upload(f32 ? (void *)vf : (void *)vh, (size_t)n_ctx * (size_t)KV * es);
    const guild_type_t kvt = f32 ? GUILD_TYPE_F32 : GUILD_TYPE_F16;
    float *dq = dev_upload(q, (size_t)c.n_tok * (size_t)Q * sizeof *q);
    float *dout = dev_new((size_t)c.n_tok * (size_t)Q * sizeof *got);
    const size_t sb = cuda_attention_decode_scratch(c.n_tok, c.n_head, HD, n_ctx);
    void *dscratch = dev_new(sb);
    const float scale = 1.0f / sqrtf((float)HD);
    float *sinks = malloc((size_t)c.n_head * sizeof *sinks);
    fill(&r, sinks, c.n_head, 3.0f);
    float *dsinks = dev_upload(sinks, (size_t)c.n_head * sizeof *sinks);
    const cuda_attn_ext_t ext = {c.window, c.sinks ? dsinks : NULL};
    guild_err_t err;
    /* decode over an F16 cache: the tensor-core form (the default where it applies), then the FMA forms */
    const int forms = c.prefill || f32 ? 1 : 2;
    for (int form = 0; form < forms; form++) {
        cuda_set_attn_mma(form == 0);
        const int rc = c.prefill ? cuda_attention_prefill(dout, dq, kvt, dk, dv, c.n_tok, c.kv0, c.n_head, c.n_head_kv,
                                                          HD, scale, &ext, stream, &err)
                                 : cuda_attention_decode(dout, dq, kvt, dk, dv, c.n_tok, c.kv0, c.n_head, c.n_head_kv,
                                                         HD, scale, &ext, dscratch, sb, stream, &err);
        cuda_set_attn_mma(true);
        ck_assert_msg(rc == 0, "%s", err.msg);
        dev_download(got, dout, (size_t)c.n_tok * (size_t)Q * sizeof *got, stream);
        double worst = 0;
        const int32_t group = c.n_head / c.n_head_kv;
        for (int32_t t = 0; t < c.n_tok; t++)
            for (int32_t h = 0; h < c.n_head; h++) {
                /* the CPU backend's window: keys from first, given to the kernel from there */
                const int32_t n = c.kv0 + t + 1, first = c.window > 0 && n > c.window ? n - c.window : 0;
                cpu_attention_head(ref, q + (int64_t)t * Q + h * HD, kf + (int64_t)first * KV + (h / group) * HD,
                                   vf + (int64_t)first * KV + (h / group) * HD, KV, n - first, HD, scale,
                                   c.sinks ? &sinks[h] : NULL, scores);
                for (int32_t d = 0; d < HD; d++) {
                    const float g = got[(int64_t)t * Q + h * HD + d];
                    const double e = fabs((double)g - ref[d]);
                    ck_assert_msg(e <= 2e-5 + 1e-4 * fabs(ref[d]), "attention case %d tok %d head %d dim %d: %.9g vs %.9g",
                                  _i, t, h, d, (double)g, (double)ref[d]);
                    worst = e > worst ? e : worst;
                }
            }
        printf("attention %s %s %3d rows after %5d keys, %2d/%d heads of %3d, window %3d%s%s: max abs err %.3g (tolerance "
               "2e-5 + 1e-4 |ref|)\n", c.prefill ? "prefill" : "decode ", f32 ? "f32" : "f16", c.n_tok, c.kv0, c.n_head,
               c.n_head_kv, HD, c.window, c.sinks ? ", sinks" : "", forms == 1 ? "" : form ? ", FMA" : ", tensor form",
               worst);
    }
    dev_free(dsinks);
    free(sinks);
    dev_free(dk);
    dev_free(dv);
    dev_free(dq);
    dev_free(dout);
    dev_free(dscratch);
    free(kf);
    free(vf);
    free(kh);
    free(vh);
    free(q);
    free(got);
    free(ref);
    free(scores);
}
END_TEST

/* ---- multi-head latent attention (deepseek2's absorbed form) -------------------------------------------------- */

typedef struct {
    int32_t R, RR, n_head, n_tok, kv0;
    bool scratch; /* give the split scratch (batches of <= CUDA_MLA_SPLIT_ROWS rows split) */
} mla_case_t;

static const mla_case_t mla_cases[] = {
    {512, 576, 128, 1, 700, true},   /* decode: 3 splits of 256 (n_ctx 705), 8 blocks of 16 heads */
    {512, 576, 128, 5, 1000, true},  /* a verify batch: rows over 4 splits */
    {512, 576, 16, 40, 300, false},  /* prefill, unsplit: one block per row */
    {512, 576, 128, 36, 0, true},    /* past CUDA_MLA_SPLIT_ROWS: unsplit from position 0 */
    {64, 96, 4, 37, 90, false},      /* the test models' shape: blocks of 4 rows of 4 heads, each masked */
    {64, 96, 4, 3, 600, true},       /* decode of that shape, split */
};
#define N_MLA_CASES (int)(sizeof mla_cases / sizeof mla_cases[0])

/* _i < N_MLA_CASES: the F16 cache (tensor cores), then the F32 cache (CUDA cores). Against a float64 softmax over
 * the cache's values: |d| <= (3e-5 smax + 1e-5) sum_j p_j |v_jd| + 1e-7, smax = max_j scale sum_e |q_e k_je| (a
 * score's error is f32 rounding of a 576-term dot product, ~2^-24 sqrt(n) of its magnitude sum, and moves the
 * output by as much relative to sum p|v|; the hi/lo operands add 2^-22). Cache rows past the last position are
 * NaN: never read. With splits, the batch's last row run alone gives the same bits (the split plan is the row's
 * own). */
START_TEST(test_mla_attention)
{
    const mla_case_t c = mla_cases[_i % N_MLA_CASES];
    const bool f32 = _i >= N_MLA_CASES;
    const size_t es = f32 ? 4 : 2;
    const int32_t R = c.R, RR = c.RR, H = c.n_head, n_kv = c.kv0 + c.n_tok, n_ctx = n_kv + 4;
    const int64_t n_rows = (int64_t)c.n_tok * H;
    rng_t r;
    rng_seed(&r, 77 + (uint64_t)_i);
    float *cf = malloc((size_t)n_ctx * (size_t)RR * sizeof *cf);
    quant_half_t *ch = malloc((size_t)n_ctx * (size_t)RR * 2);
    fill(&r, cf, (int64_t)n_ctx * RR, 1.0f);
    for (int64_t i = 0; i < (int64_t)n_ctx * RR; i++) {
        if (i >= (int64_t)n_kv * RR)
            cf[i] = NAN;
        ch[i] = quant_f32_to_f16(cf[i]);
        if (!f32)
            cf[i] = quant_f16_to_f32(ch[i]); /* the reference sees the cache's values */
    }
    float *q = malloc((size_t)n_rows * (size_t)RR * sizeof *q), *got = malloc((size_t)n_rows * (size_t)R * sizeof *got);
    fill(&r, q, n_rows * RR, 0.25f);
    const float scale = 0.1f;
    const guild_type_t kvt = f32 ? GUILD_TYPE_F32 : GUILD_TYPE_F16;
    void *dc = dev_upload(f32 ? (void *)cf : (void *)ch, (size_t)n_ctx * (size_t)RR * es);
    float *dq = dev_upload(q, (size_t)n_rows * (size_t)RR * sizeof *q);
    float *dout = dev_new((size_t)n_rows * (size_t)R * sizeof *got);
    int32_t *dkv0 = dev_upload(&c.kv0, sizeof c.kv0);
    const size_t sb = c.scratch ? cuda_mla_attention_scratch(H, R, n_ctx) : 0;
    void *dscratch = sb ? dev_new(sb) : NULL;
    guild_err_t err;
    ck_assert_msg(cuda_mla_attention(dout, dq, kvt, dc, c.n_tok, dkv0, n_ctx, H, R, RR, scale, dscratch, sb, stream,
                                     &err) == 0,
                  "%s", err.msg);
    dev_download(got, dout, (size_t)n_rows * (size_t)R * sizeof *got, stream);
    double *p = malloc((size_t)n_kv * sizeof *p), worst = 0;
    for (int64_t row = 0; row < n_rows; row++) {
        const int32_t n = c.kv0 + (int32_t)(row / H) + 1;
        double mx = -INFINITY, sum = 0, smax = 0;
        for (int32_t j = 0; j < n; j++) {
            double d = 0, a = 0;
            for (int32_t e = 0; e < RR; e++) {
                d += (double)q[row * RR + e] * cf[(int64_t)j * RR + e];
                a += fabs((double)q[row * RR + e] * cf[(int64_t)j * RR + e]);
            }
            p[j] = d * scale;
            mx = fmax(mx, p[j]);
            smax = fmax(smax, a * scale);
        }
        for (int32_t j = 0; j < n; j++)
            sum += p[j] = exp(p[j] - mx);
        for (int32_t d = 0; d < R; d++) {
            double ref = 0, mag = 0;
            for (int32_t j = 0; j < n; j++) {
                ref += p[j] * cf[(int64_t)j * RR + d];
                mag += p[j] * fabs(cf[(int64_t)j * RR + d]);
            }
            ref /= sum;
            mag /= sum;
            const float g = got[row * R + d];
            const double e = fabs((double)g - ref);
            const double tol = (3e-5 * smax + 1e-5) * mag + 1e-7;
            ck_assert_msg(e <= tol, "mla case %d row %lld (tok %lld head %lld) dim %d: %.9g vs %.9g (tolerance %.3g)",
                          _i, (long long)row, (long long)(row / H), (long long)(row % H), d, (double)g, ref, tol);
            worst = fmax(worst, e / tol);
        }
    }
    bool alone = false;
    if (c.scratch && c.n_tok > 1 && c.n_tok <= CUDA_MLA_SPLIT_ROWS) {
        /* the last row alone, at its position: the same bits as in the batch */
        const int32_t kv_last = n_kv - 1;
        float *one = malloc((size_t)H * (size_t)R * sizeof *one);
        float *done = dev_new((size_t)H * (size_t)R * sizeof *one);
        int32_t *dkl = dev_upload(&kv_last, sizeof kv_last);
        ck_assert_msg(cuda_mla_attention(done, dq + (n_rows - H) * RR, kvt, dc, 1, dkl, n_ctx, H, R, RR, scale,
                                         dscratch, sb, stream, &err) == 0,
                      "%s", err.msg);
        dev_download(one, done, (size_t)H * (size_t)R * sizeof *one, stream);
        ck_assert_msg(!memcmp(one, got + (n_rows - H) * R, (size_t)H * (size_t)R * sizeof *one),
                      "mla case %d: the last row alone differs from its batch", _i);
        alone = true;
        dev_free(dkl);
        dev_free(done);
        free(one);
    }
    printf("mla attention %s %2d rows after %4d positions, %3d heads, latent %d + %d%s: largest error %.3g "
           "of the tolerance%s\n", f32 ? "f32" : "f16", c.n_tok, c.kv0, H, R, RR - R, sb ? ", split scratch" : "",
           worst, alone ? "; last row alone bit-identical" : "");
    free(p);
    dev_free(dkv0);
    dev_free(dc);
    dev_free(dq);
    dev_free(dout);
    if (dscratch)
        dev_free(dscratch);
    free(cf);
    free(ch);
    free(q);
    free(got);
}
END_TEST

/* The block formats of the KV cache (gpu-worker/dense/kv_format.h): cuda_kv_store_blocks writes the CPU's
 * kv_store_row bytes (bit-exact: the same quantizers, k8v4's rotation in the same order), and cuda_attention_blocks
 * reading them is cpu_attention_head_cache on the same bytes within the attention tolerance. _i: case _i / 3 of
 * attn_cases (head dims 32 to 256, windows, sinks, groups, decode and prefill shapes), format q8_0, q4_0, k8v4. */
START_TEST(test_kv_blocks)
{
    const attn_case_t c = attn_cases[_i / 3];
    const int32_t fmt = KV_TYPE_Q8_0 + _i % 3;
    const guild_type_t kt = kv_type_k(fmt), vt = kv_type_v(fmt);
    const bool rot = kv_type_rotates_v(fmt);
    const int32_t HD = c.head_dim, Q = c.n_head * HD, KV = c.n_head_kv * HD, n_kv = c.kv0 + c.n_tok;
    const size_t krow = kv_elem_bytes(kt, KV), vrow = kv_elem_bytes(vt, KV);
    rng_t r;
    rng_seed(&r, 23 + (uint64_t)_i);
    float *kf = malloc((size_t)n_kv * (size_t)KV * sizeof *kf), *vf = malloc((size_t)n_kv * (size_t)KV * sizeof *vf);
    fill(&r, kf, (int64_t)n_kv * KV, 1.0f);
    fill(&r, vf, (int64_t)n_kv * KV, 1.0f);
    uint8_t *kc = malloc((size_t)n_kv * krow), *vc = malloc((size_t)n_kv * vrow);
    uint8_t *kg = malloc((size_t)n_kv * krow), *vg = malloc((size_t)n_kv * vrow);
    float *rows = malloc(2 * (size_t)HD * sizeof *rows);
    for (int32_t p = 0; p < n_kv; p++) {
        kv_store_row(kt, false, kf + (int64_t)p * KV, kc + (size_t)p * krow, KV, HD, rows);
        kv_store_row(vt, rot, vf + (int64_t)p * KV, vc + (size_t)p * vrow, KV, HD, rows);
    }
    /* the device stores the rows in two calls: [0, kv0) at pos0 0 from the host, the batch's at *pos_dev */
    float *dkf = dev_upload(kf, (size_t)n_kv * (size_t)KV * sizeof *kf);
    float *dvf = dev_upload(vf, (size_t)n_kv * (size_t)KV * sizeof *vf);
    void *dk = dev_new((size_t)n_kv * krow), *dv = dev_new((size_t)n_kv * vrow);
    int32_t *dpos = dev_upload(&c.kv0, sizeof c.kv0);
    guild_err_t err;
    ck_assert_msg(cuda_kv_store_blocks(kt, vt, rot, dk, dv, dkf, dvf, KV, HD, c.kv0, 0, NULL, stream, &err) == 0, "%s",
                  err.msg);
    ck_assert_msg(cuda_kv_store_blocks(kt, vt, rot, dk, dv, dkf + (int64_t)c.kv0 * KV, dvf + (int64_t)c.kv0 * KV, KV,
                                       HD, c.n_tok, 0, dpos, stream, &err) == 0, "%s", err.msg);
    dev_download(kg, dk, (size_t)n_kv * krow, stream);
    dev_download(vg, dv, (size_t)n_kv * vrow, stream);
    ck_assert_msg(!memcmp(kg, kc, (size_t)n_kv * krow), "%s keys: the device's bytes are not the CPU's",
                  kv_type_name(fmt));
    ck_assert_msg(!memcmp(vg, vc, (size_t)n_kv * vrow), "%s values: the device's bytes are not the CPU's",
                  kv_type_name(fmt));

    float *q = malloc((size_t)c.n_tok * (size_t)Q * sizeof *q), *got = malloc((size_t)c.n_tok * (size_t)Q * sizeof *got);
    fill(&r, q, (int64_t)c.n_tok * Q, 1.5f);
    float *sinks = malloc((size_t)c.n_head * sizeof *sinks);
    fill(&r, sinks, c.n_head, 3.0f);
    float *dq = dev_upload(q, (size_t)c.n_tok * (size_t)Q * sizeof *q), *dout = dev_new((size_t)c.n_tok * (size_t)Q * 4);
    float *dsinks = dev_upload(sinks, (size_t)c.n_head * sizeof *sinks);
    const cuda_attn_ext_t ext = {c.window, c.sinks ? dsinks : NULL};
    const float scale = 1.0f / sqrtf((float)HD);
    ck_assert_msg(cuda_attention_blocks(dout, dq, kt, vt, rot, dk, dv, c.n_tok, c.kv0, dpos, c.n_head, c.n_head_kv,
                                        HD, scale, &ext, NULL, 0, stream, &err) == 0, "%s", err.msg);
    dev_download(got, dout, (size_t)c.n_tok * (size_t)Q * sizeof *got, stream);
    const cuda_test_kv_attn_t cpu = {.kt = kt, .vt = vt, .rot = rot, .k = kc, .v = vc, .krow = krow, .vrow = vrow,
                                     .n_head = c.n_head, .n_head_kv = c.n_head_kv, .head_dim = HD, .kv0 = c.kv0,
                                     .window = c.window, .sinks = c.sinks ? sinks : NULL, .scale = scale, .q = q};
    char what[64];
    snprintf(what, sizeof what, "%s case %d", kv_type_name(fmt), _i / 3);
    double worst = 0;
    for (int32_t t = 0; t < c.n_tok; t++)
        worst = fmax(worst, cuda_test_kv_attn_check_row(&cpu, got, t, what));
    printf("kv %-4s store bit-exact; attention %3d rows after %5d keys, %2d/%d heads of %3d, window %3d%s: max abs "
           "err %.3g (tolerance 2e-5 + 1e-4 |ref|)\n", kv_type_name(fmt), c.n_tok, c.kv0, c.n_head, c.n_head_kv, HD,
           c.window, c.sinks ? ", sinks" : "", worst);
    dev_free(dkf);
    dev_free(dvf);
    dev_free(dk);
    dev_free(dv);
    dev_free(dpos);
    dev_free(dq);
    dev_free(dout);
    dev_free(dsinks);
    free(kf);
    free(vf);
    free(kc);
    free(vc);
    free(kg);
    free(vg);
    free(rows);
    free(q);
    free(got);
    free(sinks);
}
END_TEST

/* ---- streamed experts: device unpack of packed copies, the parts' id maps ------------------------------------ */

/* Packed matrices (kern_pack, the CPU workers' layout) unpacked in place on the device: the plain bytes exactly,
 * the gaps between matrices untouched; rows of 256 elements and of 5120 (16 q6_K rows: 67 KB of shared memory,
 * past the default 48 KB; q8_0's 87 KB). The bytes are random: a layout is a byte permutation. */
START_TEST(test_expert_unpack)
{
    static const guild_type_t types[] = {GUILD_TYPE_Q4_K,   GUILD_TYPE_Q5_K,  GUILD_TYPE_Q6_K, GUILD_TYPE_IQ4_XS,
                                         GUILD_TYPE_Q2_K,   GUILD_TYPE_Q3_K,  GUILD_TYPE_Q4_0, GUILD_TYPE_IQ4_NL,
                                         GUILD_TYPE_MXFP4, GUILD_TYPE_Q8_0};
    rng_t r;
    rng_seed(&r, 500 + (uint64_t)_i);
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const guild_type_t type = types[ti];
        const int64_t n = _i ? 20 * 256 : 256, rows = 48;
        const int32_t ne = 3;
        const quant_type_info_t *qi = quant_type_info(type);
        const size_t rb = (size_t)(n / qi->block_elems) * qi->block_bytes, mat = rb * (size_t)rows;
        const size_t stride = (mat + 64 + 63) / 64 * 64, total = stride * (size_t)ne;
        uint8_t *plain = malloc(total), *packed = malloc(total), *got = malloc(total);
        for (size_t i = 0; i < total; i++)
            plain[i] = (uint8_t)rng_next(&r);
        memcpy(packed, plain, total);
        guild_err_t err;
        for (int32_t e = 0; e < ne; e++)
            ck_assert_msg(kern_pack(type, n, rows, plain + e * stride, rb, packed + e * stride, &err) == 0, "%s",
                          err.msg);
        void *d = NULL;
        uint32_t *tab = NULL;
        ck_assert(cudaMalloc(&d, total) == cudaSuccess);
        ck_assert_msg(cuda_expert_unpack_table(kern_pack_layout(type), rb, &tab, NULL, &err) == 0, "%s", err.msg);
        for (int with_table = 0; with_table < 2; with_table++) { /* places per byte, then the gather table */
            ck_assert(cudaMemcpy(d, packed, total, cudaMemcpyHostToDevice) == cudaSuccess);
            ck_assert_msg(cuda_expert_unpack(kern_pack_layout(type), with_table ? tab : NULL, d, stride, ne, rows, rb,
                                             stream, &err) == 0, "%s", err.msg);
            ck_assert(cudaStreamSynchronize(stream) == cudaSuccess);
            ck_assert(cudaMemcpy(got, d, total, cudaMemcpyDeviceToHost) == cudaSuccess);
            ck_assert_msg(!memcmp(got, plain, total), "%s, %lld elements%s: unpacked bytes differ",
                          quant_type_info(type)->name, (long long)n, with_table ? ", gather table" : "");
        }
        cudaFree(tab);
        cudaFree(d);
        free(plain);
        free(packed);
        free(got);
    }
    guild_err_t err;
    ck_assert_int_eq(cuda_expert_unpack(kern_pack_layout(GUILD_TYPE_Q4_K), NULL, NULL, 0, 1, 15, 144, stream, &err),
                     -1);
    uint32_t *bad = NULL;
    ck_assert_int_eq(cuda_expert_unpack_table(kern_pack_layout(GUILD_TYPE_Q4_K), 100, &bad, NULL, &err), -1);
    ck_assert_ptr_null(bad);
    printf("expert unpack: %d packed types, rows of %d elements, bit for bit (places per byte and gather table)\n",
           (int)(sizeof types / sizeof types[0]), _i ? 20 * 256 : 256);
}
END_TEST

/* The ids of a device part (ranks [lo, hi) as local ids) and of the CPU side (its experts' ids), skip slots
 * kept, against a host loop. */
START_TEST(test_expert_ids_map)
{
    rng_t r;
    rng_seed(&r, 600);
    enum { NE = 128, P = 4099 };
    static cuda_rank_table_t t;
    int32_t ids[P], got[P], *d_ids = NULL, *d_out = NULL;
    for (int e = 0; e < CUDA_RANK_TABLE_MAX; e++)
        t.rank[e] = -1;
    int16_t next = 0;
    for (int e = 0; e < NE; e++)
        if (rng_next(&r) % 3)
            t.rank[e] = next++;
    for (int p = 0; p < P; p++)
        ids[p] = p % 17 == 5 ? -1 : (int32_t)(rng_next(&r) % NE);
    ck_assert(cudaMalloc((void **)&d_ids, sizeof ids) == cudaSuccess);
    ck_assert(cudaMalloc((void **)&d_out, sizeof ids) == cudaSuccess);
    ck_assert(cudaMemcpy(d_ids, ids, sizeof ids, cudaMemcpyHostToDevice) == cudaSuccess);
    const int32_t ranges[][2] = {{-1, -1}, {0, next}, {3, 17}, {next - 1, next}, {5, 5}};
    guild_err_t err;
    for (size_t k = 0; k < sizeof ranges / sizeof ranges[0]; k++) {
        const int32_t lo = ranges[k][0], hi = ranges[k][1];
        ck_assert_msg(cuda_expert_ids_map(d_ids, P, &t, NE, lo, hi, d_out, stream, &err) == 0, "%s", err.msg);
        ck_assert(cudaStreamSynchronize(stream) == cudaSuccess);
        ck_assert(cudaMemcpy(got, d_out, sizeof got, cudaMemcpyDeviceToHost) == cudaSuccess);
        for (int p = 0; p < P; p++) {
            const int32_t e = ids[p], rk = e >= 0 ? t.rank[e] : -1;
            const int32_t want = e < 0 ? -1 : lo < 0 ? (rk < 0 ? e : -1) : (rk >= lo && rk < hi ? rk - lo : -1);
            ck_assert_msg(got[p] == want, "range [%d, %d) pair %d (expert %d, rank %d): %d, expected %d", lo, hi, p,
                          e, rk, got[p], want);
        }
    }
    cudaFree(d_ids);
    cudaFree(d_out);
}
END_TEST

/* ---- argument errors ------------------------------------------------------------------------------------- */

START_TEST(test_errors)
{
    guild_err_t err;
    ck_assert_int_eq(cuda_matmul(GUILD_TYPE_Q8_K, 256, 4, 1, NULL, 292, NULL, 292, NULL, 4, stream, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "not supported"));
    ck_assert_int_eq(cuda_matmul(GUILD_TYPE_Q4_K, 300, 4, 1, NULL, 144, NULL, 292, NULL, 4, stream, &err), -1);
    ck_assert_int_eq(cuda_quantize(GUILD_TYPE_Q8_K, NULL, 100, NULL, 292, 100, 1, stream, &err), -1);
    ck_assert_int_eq(cuda_attention_prefill(NULL, NULL, GUILD_TYPE_F16, NULL, NULL, 3, 0, 4, 4, 80, 1.0f, NULL, stream,
                                            &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "head dimension 80"));
    ck_assert_int_eq(cuda_router_topk(NULL, 1, 2000, 8, 0, 0, true, 1.0f, NULL, NULL, NULL, stream, &err), -1);
    ck_assert_int_eq(cuda_router_topk(NULL, 1, 64, 8, 7, 1, true, 1.0f, NULL, NULL, NULL, stream, &err), -1); /* 7 groups: unequal */
    ck_assert_ptr_nonnull(strstr(err.msg, "groups"));
}
END_TEST

static Suite *kernels_suite(void)
{
    Suite *s = suite_create("cuda_kernels");
    TCase *tc;
#define ADD(name, fn, lo, hi)            \
    tc = tcase_create(name);             \
    tcase_set_timeout(tc, 120);          \
    tcase_add_loop_test(tc, fn, lo, hi); \
    suite_add_tcase(s, tc)
    ADD("quantize", test_quantize, 0, 4);
    ADD("matmul", test_matmul, 0, N_MM_TYPES);
    ADD("matmul_heads", test_matmul_heads, 0, 1);
    ADD("l2_stream", test_l2_stream, 0, 1);
    ADD("get_rows", test_get_rows, 0, N_MM_TYPES);
    ADD("rmsnorm", test_rmsnorm, 0, 4);
    ADD("rope", test_rope, 0, 4);
    ADD("qk_prepare", test_qk_prepare, 0, 16);
    ADD("elementwise", test_elementwise, 0, 1);
    ADD("router", test_router, 0, 8);
    ADD("router_topk_logits", test_router_topk_logits, 0, 4);
    ADD("expert_oai", test_expert_oai, 0, 1);
    ADD("router_sigmoid", test_router_sigmoid, 0, 6);
    ADD("combine", test_combine, 0, 3);
    ADD("attention", test_attention, 0, 2 * N_ATTN_CASES);
    ADD("mla_attention", test_mla_attention, 0, 2 * N_MLA_CASES);
    ADD("kv_blocks", test_kv_blocks, 0, 3 * N_ATTN_CASES);
    ADD("expert_unpack", test_expert_unpack, 0, 2);
    ADD("expert_ids_map", test_expert_ids_map, 0, 1);
    ADD("errors", test_errors, 0, 1);
#undef ADD
    return s;
}

int main(void)
{
    if (!cuda_test_device(0))
        return 77;
    return cuda_test_run(kernels_suite(), &stream);
}
