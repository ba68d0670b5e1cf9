/* cuda_expert_route, cuda_expert_matmul: the routed experts of a layer computed on the device (grouped by
 * expert), with cuda_matmul's per-row arithmetic, so each (token, slot) pair's products are the reference's bits.
 *
 * route: one block counts the pairs of each expert (shared-memory atomics), lays the pair indices out expert by
 *        expert (order[]), and cuts each expert's run into tiles of at most `tile` pairs. The order inside an
 *        expert's run depends on atomics, which changes nothing: every pair's sums are its own.
 * matmul: grid (row blocks of 4 warps, tiles); a block past the tile count exits, so a graph captured for the
 *        largest tile count replays for any routing. One warp per weight row of the tile's expert and the
 *        tile's pairs (mmvq-style with tile 1 for a few tokens; tile 8 shares each weight block among 8 pairs
 *        for many). With w_up, the warp computes the gate and up rows together and writes silu(g) * u.
 *        Tiles of CUDA_EXPERT_MMA_TILE pairs go to the int8 tensor-core kernel of expert_mma.cu (same bits).
 * route + quantize (cuda_expert_route_quantize): for a decode step's few rows, the route's block also quantizes
 *        the rows the products read (quantize.cuh's warp bodies, cuda_quantize's bytes): one launch less.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "gpu-worker/dense/cuda/expert_mma.cuh"
#include "gpu-worker/dense/cuda/quant_dot_iq.cuh"
#include "gpu-worker/dense/cuda/quantize.cuh"

#define EM_THREADS 128 /* 4 rows per block */
#define ER_THREADS 1024
#define ER_MAX_EXPERTS 1024

/* Exclusive prefix sums of a and b over the block's threads (thread i holds a[i], b[i]); the totals go to
 * *ta, *tb. A warp scan, then a scan of the warps' sums: a serial loop over the experts was about half of a
 * decode step's route. */
static __device__ __forceinline__ void block_scan2(int &a, int &b, int *ta, int *tb)
{
    __shared__ int wa[ER_THREADS / WARP_SIZE], wb[ER_THREADS / WARP_SIZE];
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    int ia = a, ib = b;
#pragma unroll
    for (int o = 1; o < WARP_SIZE; o <<= 1) {
        const int x = __shfl_up_sync(FULL_MASK, ia, o), y = __shfl_up_sync(FULL_MASK, ib, o);
        if (lane >= o)
            ia += x, ib += y;
    }
    if (lane == WARP_SIZE - 1)
        wa[warp] = ia, wb[warp] = ib;
    __syncthreads();
    if (warp == 0) {
        const int va = lane < (int)(blockDim.x / WARP_SIZE) ? wa[lane] : 0;
        const int vb = lane < (int)(blockDim.x / WARP_SIZE) ? wb[lane] : 0;
        int sa = va, sb = vb;
#pragma unroll
        for (int o = 1; o < WARP_SIZE; o <<= 1) {
            const int x = __shfl_up_sync(FULL_MASK, sa, o), y = __shfl_up_sync(FULL_MASK, sb, o);
            if (lane >= o)
                sa += x, sb += y;
        }
        if (lane < (int)(blockDim.x / WARP_SIZE))
            wa[lane] = sa - va, wb[lane] = sb - vb;
        if (lane == WARP_SIZE - 1)
            *ta = sa, *tb = sb;
    }
    __syncthreads();
    a = ia - a + wa[warp];
    b = ib - b + wb[warp];
}

/* The rows to quantize in the route's launch (cuda_expert_route_quantize): qt 0 none, else the activation type. */
typedef struct er_quant {
    int qt; /* 0, or a GUILD_TYPE_Q8_0 / Q8_1 / Q8_K */
    const float *x;
    int64_t ldx;
    char *dst;
    size_t dst_stride;
    int nb, n_rows; /* blocks a row, rows */
} er_quant_t;

/* Warp w of the block quantizes blocks w, w + warps, ... of the rows (cuda_quantize's kernels' per-warp work). */
static __device__ __forceinline__ void er_quantize(const er_quant_t &q)
{
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE, n_warps = blockDim.x / WARP_SIZE;
    for (int i = warp; i < q.nb * q.n_rows; i += n_warps) {
        const int row = i / q.nb, b = i % q.nb;
        char *dr = q.dst + (size_t)row * q.dst_stride;
        if (q.qt == GUILD_TYPE_Q8_K) {
            const float *xb = q.x + row * q.ldx + (int64_t)b * QUANT_QK_K + lane * 8;
            float v[8];
#pragma unroll
            for (int k = 0; k < 8; k++)
                v[k] = xb[k];
            quantize_block_q8_K(v, lane, (quant_block_q8_K *)dr + b);
        } else if (q.qt == GUILD_TYPE_Q8_1) {
            quantize_block_q8_32<true>(q.x[row * q.ldx + (int64_t)b * 32 + lane], lane,
                                       dr + (size_t)b * sizeof(quant_block_q8_1));
        } else {
            quantize_block_q8_32<false>(q.x[row * q.ldx + (int64_t)b * 32 + lane], lane,
                                        dr + (size_t)b * sizeof(quant_block_q8_0));
        }
    }
}

static __global__ void __launch_bounds__(ER_THREADS)
    expert_route_kernel(const int32_t *__restrict__ ids, int n_pairs, int n_expert, int tile,
                        int32_t *__restrict__ order, int4 *__restrict__ tiles, int32_t *__restrict__ n_tiles,
                        er_quant_t q)
{
    pdl_begin();
    if (q.qt)
        er_quantize(q);
    __shared__ int cnt[ER_MAX_EXPERTS], cur[ER_MAX_EXPERTS];
    __shared__ int total_pairs, total_tiles;
    for (int e = threadIdx.x; e < n_expert; e += blockDim.x)
        cnt[e] = cur[e] = 0;
    __syncthreads();
    for (int p = threadIdx.x; p < n_pairs; p += blockDim.x) {
        const int e = ids[p];
        if (e >= 0 && e < n_expert)
            atomicAdd(&cnt[e], 1);
    }
    __syncthreads();
    /* thread e owns expert e (n_expert <= blockDim.x, the launch's rule) */
    const int e = threadIdx.x;
    const int c = e < n_expert ? cnt[e] : 0;
    int off = c, toff = (c + tile - 1) / tile;
    block_scan2(off, toff, &total_pairs, &total_tiles);
    if (e == 0)
        *n_tiles = total_tiles;
    __syncthreads(); /* cnt[] is reused for the offsets */
    if (e < n_expert)
        cnt[e] = off;
    __syncthreads();
    for (int p = threadIdx.x; p < n_pairs; p += blockDim.x) {
        const int pe = ids[p];
        if (pe >= 0 && pe < n_expert)
            order[cnt[pe] + atomicAdd(&cur[pe], 1)] = p;
    }
    for (int j = 0; j * tile < c; j++)
        tiles[toff + j] = make_int4(e, off + j * tile, min(tile, c - j * tile), 0);
}

template <typename TR, int NC, bool GU>
static __global__ void __launch_bounds__(EM_THREADS)
    expert_q_kernel(const char *__restrict__ w, const char *__restrict__ wu, size_t expert_stride, size_t row_stride,
                    const char *__restrict__ act, size_t act_stride, int act_div, const int32_t *__restrict__ order,
                    const int4 *__restrict__ tiles, const int32_t *__restrict__ n_tiles, float *__restrict__ out,
                    int64_t ldo, int nb, int nrows)
{
    pdl_begin();
    constexpr int TPB = TR::TPB, G = WARP_SIZE / TPB;
    typedef typename TR::wblock wblock;
    typedef typename TR::ablock ablock;
    if ((int)blockIdx.y >= *n_tiles)
        return;
    const int lane = threadIdx.x % WARP_SIZE;
    const int row = blockIdx.x * (EM_THREADS / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    if (row >= nrows)
        return; /* whole warps */
    const int4 td = tiles[blockIdx.y];
    const int nt = td.z;
    const int g = lane / TPB, j = lane % TPB;
    int pair[NC];
    const ablock *arow[NC];
#pragma unroll
    for (int t = 0; t < NC; t++) {
        pair[t] = t < nt ? order[td.y + t] : 0;
        arow[t] = (const ablock *)(act + (size_t)(pair[t] / act_div) * act_stride);
    }
    const size_t wo = (size_t)td.x * expert_stride + (size_t)row * row_stride;
    const wblock *wr = (const wblock *)(w + wo);
    const wblock *ur = GU ? (const wblock *)(wu + wo) : wr;

    float sg[NC], su[NC];
#pragma unroll
    for (int t = 0; t < NC; t++)
        sg[t] = su[t] = 0.0f;
#pragma unroll 2
    for (int b0 = 0; b0 < nb; b0 += G) {
        const int b = b0 + g;
        const bool ok = b < nb;
        float cg[NC], cu[NC];
#pragma unroll
        for (int t = 0; t < NC; t++) {
            const ablock *ab = arow[t] + b;
            cg[t] = qd_block<TR>(wr + b, ab, j, ok && t < nt);
            cu[t] = GU ? qd_block<TR>(ur + b, ab, j, ok && t < nt) : 0.0f;
        }
        /* Block order, as cuda_matmul: the G blocks of this step are held by lanes 0, TPB, 2 TPB, ... */
#pragma unroll
        for (int gg = 0; gg < G; gg++) {
#pragma unroll
            for (int t = 0; t < NC; t++) {
                const float cv = __shfl_sync(FULL_MASK, cg[t], gg * TPB);
                const float uv = GU ? __shfl_sync(FULL_MASK, cu[t], gg * TPB) : 0.0f;
                if (b0 + gg < nb) {
                    sg[t] = sg[t] + cv;
                    if (GU)
                        su[t] = su[t] + uv;
                }
            }
        }
    }
    if (lane == 0) {
#pragma unroll
        for (int t = 0; t < NC; t++)
            if (t < nt)
                out[(int64_t)pair[t] * ldo + row] =
                    GU ? silu_mul(qd_row<TR>(sg[t]), qd_row<TR>(su[t])) : qd_row<TR>(sg[t]); /* final factor */
    }
}

static __device__ __forceinline__ float plain_f32(float v)
{
    return v;
}

static __device__ __forceinline__ float plain_f32(__half v)
{
    return __half2float(v);
}

static __device__ __forceinline__ float plain_f32(__nv_bfloat16 v)
{
    return __bfloat162float(v);
}

template <typename WT, int NC, bool GU>
static __global__ void __launch_bounds__(EM_THREADS)
    expert_plain_kernel(const char *__restrict__ w, const char *__restrict__ wu, size_t expert_stride,
                        size_t row_stride, const char *__restrict__ act, size_t act_stride, int act_div,
                        const int32_t *__restrict__ order, const int4 *__restrict__ tiles,
                        const int32_t *__restrict__ n_tiles, float *__restrict__ out, int64_t ldo, int n, int nrows)
{
    pdl_begin();
    if ((int)blockIdx.y >= *n_tiles)
        return;
    const int lane = threadIdx.x % WARP_SIZE;
    const int row = blockIdx.x * (EM_THREADS / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    if (row >= nrows)
        return;
    const int4 td = tiles[blockIdx.y];
    const int nt = td.z;
    int pair[NC];
    const float *arow[NC];
#pragma unroll
    for (int t = 0; t < NC; t++) {
        pair[t] = t < nt ? order[td.y + t] : 0;
        arow[t] = (const float *)(act + (size_t)(pair[t] / act_div) * act_stride);
    }
    const size_t wo = (size_t)td.x * expert_stride + (size_t)row * row_stride;
    const WT *wr = (const WT *)(w + wo);
    const WT *ur = GU ? (const WT *)(wu + wo) : wr;
    float ag[NC], au[NC];
#pragma unroll
    for (int t = 0; t < NC; t++)
        ag[t] = au[t] = 0.0f;
    for (int i = lane; i < n; i += WARP_SIZE) {
        const float wv = plain_f32(wr[i]);
        const float uv = GU ? plain_f32(ur[i]) : 0.0f;
#pragma unroll
        for (int t = 0; t < NC; t++)
            if (t < nt) {
                ag[t] = fmaf(wv, arow[t][i], ag[t]);
                if (GU)
                    au[t] = fmaf(uv, arow[t][i], au[t]);
            }
    }
    /* cuda_matmul's fold: lane j < h adds lane j + h, h = 16, 8, 4, 2, 1. */
#pragma unroll
    for (int h = WARP_SIZE / 2; h >= 1; h /= 2)
#pragma unroll
        for (int t = 0; t < NC; t++) {
            ag[t] = ag[t] + __shfl_down_sync(FULL_MASK, ag[t], h);
            if (GU)
                au[t] = au[t] + __shfl_down_sync(FULL_MASK, au[t], h);
        }
    if (lane == 0) {
#pragma unroll
        for (int t = 0; t < NC; t++)
            if (t < nt)
                out[(int64_t)pair[t] * ldo + row] = GU ? silu_mul(ag[t], au[t]) : ag[t];
    }
}

/* Byte alignment the type's loads need of weight rows (cuda_matmul's rule). */
static size_t weight_align(guild_type_t type)
{
    switch (type) {
    case GUILD_TYPE_Q4_K: case GUILD_TYPE_Q5_K:
        return 16;
    case GUILD_TYPE_F32: case GUILD_TYPE_Q4_1: case GUILD_TYPE_Q5_1: case GUILD_TYPE_IQ4_XS: case GUILD_TYPE_Q2_K:
        return 4;
    case GUILD_TYPE_MXFP4:
        return 1;
    default:
        return 2;
    }
}

extern "C" int32_t cuda_expert_max_tiles(int32_t n_pairs, int32_t n_expert, int32_t tile)
{
    /* every expert's run ends with at most one partial tile */
    return (n_pairs + tile - 1) / tile + (n_expert < n_pairs ? n_expert : n_pairs);
}

static int expert_route(const int32_t *ids, int32_t n_pairs, int32_t n_expert, int32_t tile, int32_t *order,
                        int32_t *tiles, int32_t *n_tiles, const er_quant_t &q, cudaStream_t s, guild_err_t *err)
{
    if (n_expert < 1 || n_expert > ER_MAX_EXPERTS || tile < 1 || n_pairs < 0)
        return guild_err_set(err, "cuda: expert route: %d experts, tiles of %d, %d pairs", n_expert, tile, n_pairs);
    if ((uintptr_t)tiles % 16)
        return guild_err_set(err, "cuda: expert route: the tile table must be 16-byte aligned");
    /* a thread per expert at least; more for many pairs (a decode step's 8 pairs take the smallest block) */
    int threads = n_pairs > n_expert ? (n_pairs < ER_THREADS ? n_pairs : ER_THREADS) : n_expert;
    threads = (threads + WARP_SIZE - 1) / WARP_SIZE * WARP_SIZE;
    cuda_launch_pdl(expert_route_kernel, 1, threads, 0, s, ids, n_pairs, n_expert, tile, order, (int4 *)tiles,
                    n_tiles, q);
    return cuda_launch_check("expert route", err);
}

extern "C" int cuda_expert_route(const int32_t *ids, int32_t n_pairs, int32_t n_expert, int32_t tile, int32_t *order,
                                 int32_t *tiles, int32_t *n_tiles, cudaStream_t s, guild_err_t *err)
{
    return expert_route(ids, n_pairs, n_expert, tile, order, tiles, n_tiles, er_quant_t{}, s, err);
}

extern "C" int cuda_expert_route_quantize(const int32_t *ids, int32_t n_pairs, int32_t n_expert, int32_t tile,
                                          int32_t *order, int32_t *tiles, int32_t *n_tiles, guild_type_t act_type,
                                          const float *x, int64_t ldx, void *dst, size_t dst_stride, int64_t n,
                                          int32_t n_rows, cudaStream_t s, guild_err_t *err)
{
    const int64_t qk = act_type == GUILD_TYPE_Q8_K ? QUANT_QK_K : 32;
    const bool q8 = act_type == GUILD_TYPE_Q8_0 || act_type == GUILD_TYPE_Q8_1 || act_type == GUILD_TYPE_Q8_K;
    if (!q8 || n <= 0 || n % qk || n_rows < 1 || n_rows * (n / qk) > CUDA_ROUTE_QUANTIZE_BLOCKS)
        return cuda_quantize(act_type, x, ldx, dst, dst_stride, n, n_rows, s, err) < 0 ||
                       expert_route(ids, n_pairs, n_expert, tile, order, tiles, n_tiles, er_quant_t{}, s, err) < 0
                   ? -1
                   : 0;
    const er_quant_t q = {(int)act_type, x, ldx, (char *)dst, dst_stride, (int)(n / qk), (int)n_rows};
    return expert_route(ids, n_pairs, n_expert, tile, order, tiles, n_tiles, q, s, err);
}

template <int NC, bool GU>
static void expert_launch(guild_type_t type, int64_t n, dim3 grid, const char *w, const char *wu, size_t es,
                          size_t rs, const char *act, size_t as, int act_div, const int32_t *order, const int4 *tiles,
                          const int32_t *n_tiles, float *out, int64_t ldo, int nrows, cudaStream_t s)
{
#define EM_Q(TR, QK)                                                                                           \
    cuda_launch_pdl(expert_q_kernel<TR, NC, GU>, grid, EM_THREADS, 0, s, w, wu, es, rs, act, as, act_div, order,   \
                    tiles, n_tiles, out, ldo, (int)(n / (QK)), nrows)
#define EM_P(WT)                                                                                               \
    cuda_launch_pdl(expert_plain_kernel<WT, NC, GU>, grid, EM_THREADS, 0, s, w, wu, es, rs, act, as, act_div,      \
                    order, tiles, n_tiles, out, ldo, (int)n, nrows)
#define EM_CASE(T, TR, QK) \
    case T: EM_Q(TR, QK); break;
    switch (type) {
    case GUILD_TYPE_F32: EM_P(float); break;
    case GUILD_TYPE_F16: EM_P(__half); break;
    case GUILD_TYPE_BF16: EM_P(__nv_bfloat16); break;
    QD_DOT_TYPES(EM_CASE)
    default: break; /* rejected by the entry point */
    }
#undef EM_CASE
#undef EM_Q
#undef EM_P
}

template <bool GU>
static void expert_launch_tile(int tile, guild_type_t type, int64_t n, dim3 grid, const char *w, const char *wu,
                               size_t es, size_t rs, const char *act, size_t as, int act_div, const int32_t *order,
                               const int4 *tiles, const int32_t *n_tiles, float *out, int64_t ldo, int nrows,
                               cudaStream_t s)
{
    switch (tile) {
    case 1: expert_launch<1, GU>(type, n, grid, w, wu, es, rs, act, as, act_div, order, tiles, n_tiles, out, ldo, nrows, s); break;
    case 2: expert_launch<2, GU>(type, n, grid, w, wu, es, rs, act, as, act_div, order, tiles, n_tiles, out, ldo, nrows, s); break;
    case 4: expert_launch<4, GU>(type, n, grid, w, wu, es, rs, act, as, act_div, order, tiles, n_tiles, out, ldo, nrows, s); break;
    default: expert_launch<8, GU>(type, n, grid, w, wu, es, rs, act, as, act_div, order, tiles, n_tiles, out, ldo, nrows, s); break;
    }
}

extern "C" int cuda_expert_matmul(guild_type_t type, int64_t n, int64_t nrows, const void *w, const void *w_up,
                                  size_t expert_stride, size_t row_stride, const void *act, size_t act_stride,
                                  int32_t act_div, const int32_t *order, const int32_t *tiles, const int32_t *n_tiles,
                                  int32_t max_tiles, int32_t tile, float *out, int64_t ldo, cudaStream_t s,
                                  guild_err_t *err)
{
    if (!cuda_type_supported(type))
        return guild_err_set(err, "cuda: expert matmul: weight type %d is not supported (supported: %s)", (int)type,
                             cuda_supported_types());
    if (max_tiles <= 0 || nrows <= 0)
        return 0;
    const bool mma = tile == CUDA_EXPERT_MMA_TILE;
    if (mma && !cuda_expert_mma_supported(type))
        return guild_err_set(err, "cuda: expert matmul: tiles of %d pairs need a type with an mma kernel (%s has "
                             "none)", tile, quant_type_info(type)->name);
    if (tile != 1 && tile != 2 && tile != 4 && tile != 8 && !mma)
        return guild_err_set(err, "cuda: expert matmul: tiles of %d pairs (1, 2, 4, 8 or %d)", tile,
                             CUDA_EXPERT_MMA_TILE);
    if (n <= 0 || n > INT32_MAX || nrows > INT32_MAX || max_tiles > 65535 || act_div < 1)
        return guild_err_set(err, "cuda: expert matmul: shape %lld x %lld, %d tiles is outside what the kernel "
                             "handles", (long long)n, (long long)nrows, max_tiles);
    const size_t wa = weight_align(type);
    const size_t aa = quant_type_info(type)->dot_type == GUILD_TYPE_Q8_0 ? 2 : 4;
    if (((uintptr_t)w | (uintptr_t)w_up | expert_stride | row_stride) % wa || ((uintptr_t)act | act_stride) % aa)
        return guild_err_set(err, "cuda: expert matmul: weight rows must be %zu-byte aligned, activation rows "
                             "%zu-byte", wa, aa);
    const char *wc = (const char *)w, *uc = (const char *)w_up, *ac = (const char *)act;
    if (mma) {
        expert_mma_launch(type, n, nrows, wc, uc, expert_stride, row_stride, ac, act_stride, act_div, order,
                          (const int4 *)tiles, n_tiles, max_tiles, out, ldo, s);
        return cuda_launch_check("expert matmul (mma)", err);
    }
    const dim3 grid((unsigned)((nrows + EM_THREADS / WARP_SIZE - 1) / (EM_THREADS / WARP_SIZE)), (unsigned)max_tiles);
    if (w_up)
        expert_launch_tile<true>(tile, type, n, grid, wc, uc, expert_stride, row_stride, ac, act_stride, act_div,
                                 order, (const int4 *)tiles, n_tiles, out, ldo, (int)nrows, s);
    else
        expert_launch_tile<false>(tile, type, n, grid, wc, uc, expert_stride, row_stride, ac, act_stride, act_div,
                                  order, (const int4 *)tiles, n_tiles, out, ldo, (int)nrows, s);
    return cuda_launch_check("expert matmul", err);
}

/* One block per pair: the row of a pair the other side computed (ids[p] >= 0) copied into y. */
static __global__ void expert_merge_kernel(float *__restrict__ y, const float *__restrict__ src,
                                           const int32_t *__restrict__ ids, int64_t n_embd)
{
    pdl_begin();
    const int64_t p = blockIdx.x;
    if (ids[p] < 0)
        return;
    for (int64_t i = threadIdx.x; i < n_embd; i += blockDim.x)
        y[p * n_embd + i] = src[p * n_embd + i];
}

extern "C" int cuda_expert_merge(float *y, const float *src, const int32_t *ids, int32_t n_pairs, int64_t n_embd,
                                 cudaStream_t s, guild_err_t *err)
{
    if (n_pairs < 0 || n_pairs > INT32_MAX / 2 || n_embd < 1)
        return guild_err_set(err, "cuda: expert merge: %d pairs of %lld", n_pairs, (long long)n_embd);
    if (n_pairs == 0)
        return 0;
    cuda_launch_pdl(expert_merge_kernel, (unsigned)n_pairs, 256, 0, s, y, src, ids, n_embd);
    return cuda_launch_check("expert merge", err);
}
