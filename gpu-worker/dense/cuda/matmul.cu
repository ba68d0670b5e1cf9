/* cuda_matmul: out[t][r] = dot(weight row r, activation row t) for every weight type the backend supports, with
 * the reference's numbers (core/quant/dot_ref.c's contract) bit for bit.
 *
 * One warp per weight row and up to NC tokens (the weight bytes are read once for the NC tokens; larger
 * batches take several NC-token slices, gridDim.y). Quantized types: each block is split over TPB lanes
 * (quant_dot.cuh), the lanes' integer sums are added exactly, and the block contributions are added to the
 * row's float sum in block order, as the reference does. F32/F16/BF16: lane l accumulates elements l, l+32, ...
 * with fmaf, then the warp folds its 32 lanes in the reference's tree order — which is the reference's
 * 32-lane accumulator exactly.
 * From CUDA_MATMUL_MMA_MIN_TOK tokens on (from CUDA_MATMUL_MMA_WIDE_TOK for products of many rows:
 * cuda_matmul_mma_rule), the types of cuda_expert_mma_supported go through the int8 tensor-core kernel of
 * expert_mma.cu instead (the same integer block sums, finish and block order: the same bits). From 2 tokens below
 * that (cuda_matmul_few_rule: a decode step of several sessions) they take matmul_few_kernel, tensor-core tiles of
 * 16 rows x 8 or 16 tokens split along K over a block's warps (the same bits again); one token stays here.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <atomic>
#include <type_traits>

#include "gpu-worker/dense/cuda/expert_mma.cuh"
#include "gpu-worker/dense/cuda/expert_mma_traits.cuh"
#include "gpu-worker/dense/cuda/matmul_plain.cuh"
#include "gpu-worker/dense/cuda/mma_few.cuh"
#include "gpu-worker/dense/cuda/mma_s8.cuh"
#include "gpu-worker/dense/cuda/matmul_rule.h"
#include "gpu-worker/dense/cuda/quant_dot_iq.cuh"

#define MM_THREADS 128 /* 4 rows per thread block */

/* Independent products launched as one grid (gridDim.z of them, cuda_matmul_heads): the bytes between
 * consecutive ones' weights and activations and the floats between their outputs; zeros for one product. And
 * (cuda_matmul_l2) l2_lines 128-byte lines at l2 that the grid's threads ask into L2 before their wait, a line a
 * thread: the next kernel's weights, for a kernel that cannot start before this one ends. */
typedef struct mm_heads {
    size_t w, act;
    int64_t out;
    const char *l2;
    unsigned l2_lines;
} mm_heads_t;

/* This thread's line of hz's L2 hint (cuda_matmul_l2), before the wait: thread i of the grid's first token slice
 * (blockIdx.y 0) and first product (blockIdx.z 0) asks line i. A prefetch is a hint: nothing waits for it, and the
 * bits do not depend on it. */
static __device__ __forceinline__ void mm_l2_hint(const mm_heads_t &hz)
{
    if (blockIdx.y == 0 && blockIdx.z == 0) {
        const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < hz.l2_lines)
            asm volatile("prefetch.global.L2 [%0];" ::"l"(hz.l2 + (size_t)i * 128));
    }
}

/* The start of a row kernel: the warp's weight row (bytes at wr) prefetched by the blocks of the first token group
 * when it exists (row < nrows), then the wait for the previous kernel (pdl_begin); whether the warp has a row. */
static __device__ __forceinline__ bool mm_row_start(const char *wr, size_t bytes, int row, int nrows, int lane)
{
    if (row < nrows && blockIdx.y == 0)
        prefetch_l2_lines(wr, bytes, lane, WARP_SIZE);
    pdl_begin();
    return row < nrows;
}

/* Weight row `row` (w + row * w_stride) against the NC-token slice t0.. of act: the warp's output elements. */
template <typename TR, int NC>
static __device__ __forceinline__ void matmul_q_row(const char *__restrict__ w, size_t w_stride,
                                                    const char *__restrict__ act, size_t act_stride,
                                                    float *__restrict__ out, int64_t ldo, int nb, int row, int ntok,
                                                    int t0, int lane)
{
    constexpr int TPB = TR::TPB, G = WARP_SIZE / TPB;
    typedef typename TR::wblock wblock;
    typedef typename TR::ablock ablock;
    const int nt = min(NC, ntok - t0);
    const int g = lane / TPB, j = lane % TPB;
    const wblock *wr = (const wblock *)(w + (size_t)row * w_stride);
    const char *a0 = act + (size_t)t0 * act_stride;

    float sumf[NC];
#pragma unroll
    for (int t = 0; t < NC; t++)
        sumf[t] = 0.0f;
#pragma unroll 2 /* 2 was faster than 4 for Q4_K on the H200 */
    for (int b0 = 0; b0 < nb; b0 += G) {
        const int b = b0 + g;
        const bool ok = b < nb;
        float c[NC];
#pragma unroll
        for (int t = 0; t < NC; t++) {
            const ablock *ab = (const ablock *)(a0 + (size_t)t * act_stride) + b;
            c[t] = qd_block<TR>(wr + b, ab, j, ok && t < nt);
        }
        /* Block order: the G blocks of this step are held by lanes 0, TPB, 2 TPB, ... */
#pragma unroll
        for (int gg = 0; gg < G; gg++) {
#pragma unroll
            for (int t = 0; t < NC; t++) {
                const float cv = __shfl_sync(FULL_MASK, c[t], gg * TPB);
                if (b0 + gg < nb)
                    sumf[t] = sumf[t] + cv;
            }
        }
    }
    if (lane == 0) {
#pragma unroll
        for (int t = 0; t < NC; t++)
            if (t < nt)
                out[(int64_t)(t0 + t) * ldo + row] = qd_row<TR>(sumf[t]); /* the contract's final factor */
    }
}

template <typename TR, int NC>
static __global__ void __launch_bounds__(MM_THREADS)
    matmul_q_kernel(const char *__restrict__ w, size_t w_stride, const char *__restrict__ act, size_t act_stride,
                    float *__restrict__ out, int64_t ldo, int nb, int nrows, int ntok, mm_heads_t hz)
{
    w += blockIdx.z * hz.w;
    act += blockIdx.z * hz.act;
    out += blockIdx.z * hz.out;
    const int lane = threadIdx.x % WARP_SIZE;
    const int row = blockIdx.x * (MM_THREADS / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    mm_l2_hint(hz);
    if (!mm_row_start(w + (size_t)row * w_stride, (size_t)nb * sizeof(typename TR::wblock), row, nrows, lane))
        return; /* whole warps */
    matmul_q_row<TR, NC>(w, w_stride, act, act_stride, out, ldo, nb, row, ntok, blockIdx.y * NC, lane);
}

/* ---- one token, a row's blocks split over warps (cuda_set_matmul_split) -----------------------------------------
 * A one-token product's warp makes its row's block sums one step of G blocks after the other, each step a chain of
 * dependent loads, dp4a, shuffles and the finish, with three or four warps a scheduler to hide it (session 44's
 * Nsight Compute profile, bench/results/dense44-h200-2026-12-04-s44.md). Here KW warps share a row, warp k taking
 * the steps k, k + KW, ...: the same block sums (TR::partial, the group sums, TR::finish), each into shared memory;
 * then the row's first lane adds them to 0.0f in block order, as matmul_q_row does, and applies qd_row: the same
 * operations, the same bits. A block holds MM_THREADS / (32 KW) rows; its shared memory a float a block of each.
 *
 * Block `blk` of a split product (weights w, rows nrows, nb blocks a row) against one token's act into out: its
 * RPB rows' prefetch, the wait for the previous kernel, the block sums, the rows' finishes. Shared memory cs: a
 * float a block of each of the block's rows. Every thread of the block comes here (a block barrier). */
template <typename TR, int KW>
static __device__ __forceinline__ void mm_split_block(const char *__restrict__ w, size_t w_stride,
                                                      const char *__restrict__ act, float *__restrict__ out, int nb,
                                                      int nrows, int blk, float *mm_cs)
{
    constexpr int TPB = TR::TPB, G = WARP_SIZE / TPB, RPB = MM_THREADS / WARP_SIZE / KW;
    typedef typename TR::wblock wblock;
    typedef typename TR::ablock ablock;
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int rl = warp / KW, kw = warp % KW, row = blk * RPB + rl;
    const bool has = row < nrows;
    const wblock *wr = (const wblock *)(w + (size_t)(has ? row : 0) * w_stride);
    if (has) /* the row's lines into L2 before the wait, shared by its warps */
        prefetch_l2_lines((const char *)wr, (size_t)nb * sizeof(wblock), lane + kw * WARP_SIZE, KW * WARP_SIZE);
    pdl_begin();
    float *cs = mm_cs + rl * nb;
    const int g = lane / TPB, j = lane % TPB;
    if (has)
        for (int b0 = kw * G; b0 < nb; b0 += KW * G) {
            const int b = b0 + g;
            const bool ok = b < nb;
            const ablock *ab = (const ablock *)act + b;
            int isum = 0, imin = 0;
            if (ok)
                TR::partial(wr + b, ab, j, isum, imin);
            isum = group_sum_int<TPB>(isum);
            if (TR::HAS_MIN)
                imin = group_sum_int<TPB>(imin);
            if (ok && j == 0)
                cs[b] = TR::finish(wr + b, ab, isum, imin);
        }
    __syncthreads();
    if (has && kw == 0 && lane == 0) {
        float sumf = 0.0f;
        for (int b = 0; b < nb; b++)
            sumf = sumf + cs[b];
        out[row] = qd_row<TR>(sumf); /* the contract's final factor */
    }
}

template <typename TR, int KW>
static __global__ void __launch_bounds__(MM_THREADS)
    matmul_q_split_kernel(const char *__restrict__ w, size_t w_stride, const char *__restrict__ act,
                          float *__restrict__ out, int nb, int nrows, mm_heads_t hz)
{
    extern __shared__ float mm_cs[]; /* [RPB][nb]: the block sums of the block's rows */
    mm_l2_hint(hz);
    mm_split_block<TR, KW>(w + blockIdx.z * hz.w, w_stride, act + blockIdx.z * hz.act, out + blockIdx.z * hz.out, nb,
                           nrows, (int)blockIdx.x, mm_cs);
}

static std::atomic<bool> g_mm_split{true};

extern "C" void cuda_set_matmul_split(bool on)
{
    g_mm_split.store(on, std::memory_order_relaxed);
}

/* The most blocks a row split over warps (a float of shared memory each, the occupancy asked at that). */
#define MM_SPLIT_NB_MAX 512

/* The blocks of `kernel` (MM_THREADS threads, smem bytes of dynamic shared memory) the GPU holds at once: the
 * occupancy calculator's blocks an SM x SMs; 0 where it cannot say. */
template <typename K>
static int mm_resident(K kernel, size_t smem)
{
    int dev = 0, sms = 0, per = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, kernel, MM_THREADS, smem) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return per * sms;
}

/* The shared memory of a split product's block, KW warps a row: a float a block of each of its rows, NB blocks a
 * row. */
#define MM_SPLIT_SMEM(KW, NB) ((size_t)(MM_THREADS / WARP_SIZE / (KW)) * (size_t)(NB) * sizeof(float))

/* mm_resident of matmul_q_split_kernel<TR, KW>, asked once a process. */
template <typename TR, int KW>
static int mm_split_resident()
{
    static const int r = mm_resident(matmul_q_split_kernel<TR, KW>, MM_SPLIT_SMEM(KW, MM_SPLIT_NB_MAX));
    return r;
}

/* The warps a row of nb blocks of a type with TR::TPB lanes a block takes in matmul_q_split_kernel, for `rows` rows
 * (all heads): 4 from four steps of a warp, 2 from two, where the split grid fits on the GPU at once; 0 (the row
 * kernel) otherwise, with the split off, or past MM_SPLIT_NB_MAX blocks. A grid past one wave waits for
 * its last blocks a whole block's time: the split pays where it shortens every warp's chain at once (the attention
 * output's 2048 rows of 16 Q4_K blocks), not where it adds a wave (Q/K/V's 5120 rows, the LM head).
 * bench/results/dense46-h200-2026-12-05-s46.md has the timings. */
template <typename TR>
static int mm_split_warps(int nb, int64_t rows)
{
    constexpr int G = WARP_SIZE / TR::TPB;
    if (!g_mm_split.load(std::memory_order_relaxed) || nb > MM_SPLIT_NB_MAX)
        return 0;
    const int64_t r4 = mm_split_resident<TR, 4>(), r2 = mm_split_resident<TR, 2>();
    if (nb >= 4 * G && rows <= r4) /* blocks of one row */
        return 4;
    if (nb >= 2 * G && (rows + 1) / 2 <= r2) /* blocks of two rows */
        return 2;
    return 0;
}

/* matmul_q_split_kernel<TR, kw> (kw 2 or 4, mm_split_warps') over nrows rows of nb blocks, in each of n_heads
 * products (hz): a block MM_THREADS / (32 kw) rows, its shared memory a float a block of each. */
template <typename TR>
static void mm_split_launch(int kw, const char *w, size_t w_stride, const char *act, float *out, int nb, int64_t nrows,
                            int n_heads, mm_heads_t hz, cudaStream_t s)
{
    const int rpb = MM_THREADS / WARP_SIZE / kw;
    const dim3 grid((unsigned)((nrows + rpb - 1) / rpb), 1, (unsigned)n_heads);
    const size_t smem = MM_SPLIT_SMEM(kw, nb);
    if (kw == 4)
        cuda_launch_pdl(matmul_q_split_kernel<TR, 4>, grid, MM_THREADS, smem, s, w, w_stride, act, out, nb, (int)nrows,
                        hz);
    else
        cuda_launch_pdl(matmul_q_split_kernel<TR, 2>, grid, MM_THREADS, smem, s, w, w_stride, act, out, nb, (int)nrows,
                        hz);
}

/* Products of one activation with up to MM_MULTI weight matrices of one type and width (cuda_matmul_multi): the
 * blocks of product i follow those of product i - 1 (gridDim.x is their sum). */
#define MM_MULTI 4
typedef struct mm_multi {
    const char *w[MM_MULTI];
    size_t w_stride[MM_MULTI];
    float *out[MM_MULTI];
    int64_t ldo[MM_MULTI];
    int nrows[MM_MULTI];
    int blk_end[MM_MULTI]; /* the first block past product i */
} mm_multi_t;

/* The product of this block in a launch of several (the first whose blocks end past it) and the block's index in
 * it. */
static __device__ __forceinline__ int mm_multi_block(const mm_multi_t &m, int &blk)
{
    int i = 0;
#pragma unroll
    for (int k = 0; k < MM_MULTI - 1; k++)
        i += (int)blockIdx.x >= m.blk_end[k];
    blk = (int)blockIdx.x - (i ? m.blk_end[i - 1] : 0);
    return i;
}

/* The product of this block in a launch of several and the warp's row in it (a warp a row). */
static __device__ __forceinline__ int mm_multi_product(const mm_multi_t &m, int &row)
{
    int blk;
    const int i = mm_multi_block(m, blk);
    row = blk * (MM_THREADS / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    return i;
}

template <typename TR, int NC>
static __global__ void __launch_bounds__(MM_THREADS)
    matmul_q_multi_kernel(mm_multi_t m, const char *__restrict__ act, size_t act_stride, int nb, int ntok)
{
    int row;
    const int i = mm_multi_product(m, row), lane = threadIdx.x % WARP_SIZE;
    const char *w = m.w[i];
    const size_t w_stride = m.w_stride[i];
    if (!mm_row_start(w + (size_t)row * w_stride, (size_t)nb * sizeof(typename TR::wblock), row, m.nrows[i], lane))
        return;
    matmul_q_row<TR, NC>(w, w_stride, act, act_stride, m.out[i], m.ldo[i], nb, row, ntok, blockIdx.y * NC, lane);
}

/* As matmul_q_multi_kernel with products of two weight types of one dot type: product i is of TRB where bit i of
 * m.b_mask is set, of TRA otherwise (cuda_matmul_multi_types: a step's Q and K of one type, V of another). With
 * KWB > 1 (one token), TRB's rows are split over KWB warps as matmul_q_split_kernel splits them (its blocks in
 * m.blk_end of MM_THREADS / (32 KWB) rows; dynamic shared memory a float a block of each): a type whose warp
 * takes KWB times the steps of TRA's (Q6_K's 16 lanes a block against Q4_K's 8) would otherwise end the launch
 * that long after the others. The same block sums, added in the same order: the same bits. */
template <typename TRA, typename TRB, int NC, int KWB>
static __global__ void __launch_bounds__(MM_THREADS)
    matmul_q_multi2_kernel(mm_multi_t m, int b_mask, const char *__restrict__ act, size_t act_stride, int nb_a,
                           int nb_b, int ntok)
{
    static_assert(KWB == 1 || NC == 1, "the split B rows are one token's");
    int blk;
    const int i = mm_multi_block(m, blk), lane = threadIdx.x % WARP_SIZE;
    const char *w = m.w[i];
    const size_t w_stride = m.w_stride[i];
    const bool b = (b_mask >> i) & 1;
    if constexpr (KWB > 1)
        if (b) { /* the whole block: the split's barrier */
            extern __shared__ float mm_cs[];
            mm_split_block<TRB, KWB>(w, w_stride, act, m.out[i], nb_b, m.nrows[i], blk, mm_cs);
            return;
        }
    const int row = blk * (MM_THREADS / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    const int nb = b ? nb_b : nb_a;
    if (!mm_row_start(w + (size_t)row * w_stride,
                      (size_t)nb * (b ? sizeof(typename TRB::wblock) : sizeof(typename TRA::wblock)), row, m.nrows[i],
                      lane))
        return;
    if (b)
        matmul_q_row<TRB, NC>(w, w_stride, act, act_stride, m.out[i], m.ldo[i], nb, row, ntok, blockIdx.y * NC, lane);
    else
        matmul_q_row<TRA, NC>(w, w_stride, act, act_stride, m.out[i], m.ldo[i], nb, row, ntok, blockIdx.y * NC, lane);
}

template <typename WT, int NC>
static __global__ void __launch_bounds__(MM_THREADS)
    matmul_plain_kernel(const char *__restrict__ w, size_t w_stride, const char *__restrict__ act, size_t act_stride,
                        float *__restrict__ out, int64_t ldo, int n, int nrows, int ntok, mm_heads_t hz)
{
    w += blockIdx.z * hz.w;
    act += blockIdx.z * hz.act;
    out += blockIdx.z * hz.out;
    const int lane = threadIdx.x % WARP_SIZE;
    const int row = blockIdx.x * (MM_THREADS / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    if (!mm_row_start(w + (size_t)row * w_stride, (size_t)n * sizeof(WT), row, nrows, lane))
        return;
    const int t0 = blockIdx.y * NC;
    const int nt = min(NC, ntok - t0);
    float acc[NC];
    matmul_plain_row<WT, NC>((const WT *)(w + (size_t)row * w_stride), act + (size_t)t0 * act_stride, act_stride, n,
                             nt, lane, acc);
    if (lane == 0) {
#pragma unroll
        for (int t = 0; t < NC; t++)
            if (t < nt)
                out[(int64_t)(t0 + t) * ldo + row] = acc[t];
    }
}

template <int NC>
static void matmul_launch_nc(guild_type_t type, int64_t n, int64_t nrows, int32_t ntok, const void *w,
                             size_t w_stride, const void *act, size_t act_stride, float *out, int64_t ldo,
                             int n_heads, mm_heads_t hz, cudaStream_t s)
{
    const dim3 grid((unsigned)((nrows + MM_THREADS / WARP_SIZE - 1) / (MM_THREADS / WARP_SIZE)),
                    (unsigned)((ntok + NC - 1) / NC), (unsigned)n_heads);
    const char *wc = (const char *)w, *ac = (const char *)act;
    const int nr = (int)nrows;
#define MM_Q(TR, QK)                                                                                           \
    do {                                                                                                       \
        const int nb_ = (int)(n / (QK)), kw_ = NC == 1 ? mm_split_warps<TR>(nb_, nrows * n_heads) : 0;         \
        if (kw_)                                                                                               \
            mm_split_launch<TR>(kw_, wc, w_stride, ac, out, nb_, nrows, n_heads, hz, s);                       \
        else                                                                                                   \
            cuda_launch_pdl(matmul_q_kernel<TR, NC>, grid, MM_THREADS, 0, s, wc, w_stride, ac, act_stride,     \
                            out, ldo, nb_, nr, ntok, hz);                                                      \
    } while (0)
#define MM_P(WT)                                                                                               \
    cuda_launch_pdl(matmul_plain_kernel<WT, NC>, grid, MM_THREADS, 0, s, wc, w_stride, ac, act_stride, out, ldo, \
                    (int)n, nr, ntok, hz)
#define MM_CASE(T, TR, QK) \
    case T: MM_Q(TR, QK); break;
    switch (type) {
    case GUILD_TYPE_F32: MM_P(float); break;
    case GUILD_TYPE_F16: MM_P(__half); break;
    case GUILD_TYPE_BF16: MM_P(__nv_bfloat16); break;
    QD_DOT_TYPES(MM_CASE)
    default: break; /* rejected by the entry point */
    }
#undef MM_CASE
#undef MM_Q
#undef MM_P
}

static void matmul_launch(guild_type_t type, int64_t n, int64_t nrows, int32_t ntok, const void *w, size_t w_stride,
                          const void *act, size_t act_stride, float *out, int64_t ldo, int n_heads, mm_heads_t hz,
                          cudaStream_t s)
{
    if (ntok == 1)
        matmul_launch_nc<1>(type, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo, n_heads, hz, s);
    else if (ntok == 2)
        matmul_launch_nc<2>(type, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo, n_heads, hz, s);
    else if (ntok <= 4)
        matmul_launch_nc<4>(type, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo, n_heads, hz, s);
    else
        matmul_launch_nc<8>(type, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo, n_heads, hz, s);
}

template <int NC>
static void matmul_multi_launch_nc(guild_type_t type, int64_t n, int32_t ntok, const mm_multi_t &m, int blocks,
                                   const void *act, size_t act_stride, cudaStream_t s)
{
    const dim3 grid((unsigned)blocks, (unsigned)((ntok + NC - 1) / NC));
    const char *ac = (const char *)act;
#define MM_MQ(TR, QK) \
    cuda_launch_pdl(matmul_q_multi_kernel<TR, NC>, grid, MM_THREADS, 0, s, m, ac, act_stride, (int)(n / (QK)), ntok)
#define MM_MCASE(T, TR, QK) \
    case T: MM_MQ(TR, QK); break;
    switch (type) {
    QD_DOT_TYPES(MM_MCASE)
    default: break; /* the entry point takes only these */
    }
#undef MM_MCASE
#undef MM_MQ
}

/* The type pairs of matmul_q_multi2_kernel (K quants against Q8_K, each type's blocks 256 elements). */
#define MM_PAIRS(X)                                  \
    X(GUILD_TYPE_Q4_K, dot_q4_K, GUILD_TYPE_Q6_K, dot_q6_K) \
    X(GUILD_TYPE_Q5_K, dot_q5_K, GUILD_TYPE_Q6_K, dot_q6_K) \
    X(GUILD_TYPE_Q4_K, dot_q4_K, GUILD_TYPE_Q5_K, dot_q5_K)

/* mm_resident of matmul_q_multi2_kernel<TA, TB, 1, KWB>, asked once a process. */
template <typename TA, typename TB, int KWB>
static int mm_multi2_resident()
{
    static const int r = mm_resident(matmul_q_multi2_kernel<TA, TB, 1, KWB>, MM_SPLIT_SMEM(KWB, MM_SPLIT_NB_MAX));
    return r;
}

/* m's block table (blk_end) for `count` products: the products of b_mask in blocks of rows_b rows, the others of
 * rows_a; the number of blocks. */
static int mm_multi_table(mm_multi_t &m, int count, int rows_a, int b_mask, int rows_b)
{
    int blocks = 0;
    for (int i = 0; i < count; i++) {
        const int rpb = (b_mask >> i) & 1 ? rows_b : rows_a;
        blocks += (m.nrows[i] + rpb - 1) / rpb;
        m.blk_end[i] = blocks;
    }
    for (int i = count; i < MM_MULTI; i++)
        m.blk_end[i] = INT32_MAX;
    return blocks;
}

/* One token: TB's rows split over TB::TPB / TA::TPB warps where that is 2 or 4, the split is on
 * (cuda_set_matmul_split), its rows' blocks fit in shared memory and the launch's grid on the GPU at once (one
 * wave, as mm_split_warps asks); m's table then redone for it. Otherwise the launch a warp a row. */
template <typename TA, typename TB>
static void mm_multi2_launch1(mm_multi_t m, int count, int b_mask, int blocks, int nb, const char *ac,
                              size_t act_stride, cudaStream_t s)
{
    constexpr int KWB = TB::TPB / TA::TPB;
    if constexpr (KWB == 2 || KWB == 4) {
        if (g_mm_split.load(std::memory_order_relaxed) && nb <= MM_SPLIT_NB_MAX) {
            mm_multi_t ms = m;
            const int bs = mm_multi_table(ms, count, MM_THREADS / WARP_SIZE, b_mask, MM_THREADS / WARP_SIZE / KWB);
            if (bs <= mm_multi2_resident<TA, TB, KWB>()) {
                cuda_launch_pdl(matmul_q_multi2_kernel<TA, TB, 1, KWB>, dim3((unsigned)bs), MM_THREADS,
                                MM_SPLIT_SMEM(KWB, nb), s, ms, b_mask, ac, act_stride, nb, nb, 1);
                return;
            }
        }
    }
    cuda_launch_pdl(matmul_q_multi2_kernel<TA, TB, 1, 1>, dim3((unsigned)blocks), MM_THREADS, 0, s, m, b_mask, ac,
                    act_stride, nb, nb, 1);
}

template <int NC>
static bool matmul_multi2_launch_nc(guild_type_t ta, guild_type_t tb, int64_t n, int32_t ntok, const mm_multi_t &m,
                                    int count, int b_mask, int blocks, const void *act, size_t act_stride,
                                    cudaStream_t s)
{
    const dim3 grid((unsigned)blocks, (unsigned)((ntok + NC - 1) / NC));
    const char *ac = (const char *)act;
    const int nb = (int)(n / QUANT_QK_K);
#define MM_PAIR(A, TA, BT, TB)                                                                                     \
    if (ta == A && tb == BT) {                                                                                     \
        if (NC == 1)                                                                                               \
            mm_multi2_launch1<TA, TB>(m, count, b_mask, blocks, nb, ac, act_stride, s);                            \
        else                                                                                                       \
            cuda_launch_pdl(matmul_q_multi2_kernel<TA, TB, NC, 1>, grid, MM_THREADS, 0, s, m, b_mask, ac,          \
                            act_stride, nb, nb, ntok);                                                             \
        return true;                                                                                               \
    }
    MM_PAIRS(MM_PAIR)
#undef MM_PAIR
    return false;
}

/* Byte alignment the type's kernel loads need of weight rows. */
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

/* ---- a few tokens on the tensor cores (matmul_few_kernel) -------------------------------------------------------
 * The batches of a decode step (2 .. CUDA_MATMUL_MMA_MIN_TOK - 1 tokens) of the cuda_expert_mma_supported types: the
 * dp4a kernel above re-reads every activation block for each weight row and reduces each (row, token, block) over
 * its lanes, so its cost grows with the tokens; here one int8 mma (expert_mma_traits.cuh's fragments) gives a
 * sub-block's exact dot for 16 rows x 8 tokens, a weight fragment serves 8 or 16 tokens and an activation fragment
 * 16 rows. Bits: expert_mma.cu's argument, the same traits: per (row, token, block) the exact integer isum/imin,
 * the type's finish with the same operations, and the finishes added to 0.0f in block order, the row's factor
 * last: the dp4a kernel's floats, so a token's outputs do not depend on the batch it is in.
 * Block: kw warps on the same 16 rows x 8 NJ tokens; warp w takes blocks w, w + kw, ... (the split
 * along K is what gives a product of a few thousand rows enough warps), each a round's finishes into shared
 * memory; warp 0 adds the round's kw finishes in block order (its own first) and stores. Rows past nrows
 * read the last row, tokens past ntok the slice's first token; neither is stored. */
/* Warps of a block (the split along K): 2, 4 or 8 (mf_shape_default), or 16 in a kernel of its own
 * (matmul_few_kernel's KW): its launch bound, 512 threads, would make ptxas allocate the others' registers
 * differently. */
#define MF_WARPS_MAX 8
#define MF_WARPS_WIDE 16
#define MF_ROWS 16     /* weight rows of a block: one mma tile's */

/* The block's 16 rows from row0 of one product (w, w_stride, nrows, nb blocks a row) for the tokens of blockIdx.y;
 * buf: the block's shared memory (two rounds of kw x 32 x 4 NJ floats, kw = the block's warps). */
template <typename TR, int NJ>
static __device__ __forceinline__ void mf_rows(const char *__restrict__ w, size_t w_stride, int nrows, int nb, int row0,
                                               const char *__restrict__ act, size_t act_stride, int ntok,
                                               float *__restrict__ out, int64_t ldo, float *buf)
{
    typedef typename TR::wblock wblock;
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE, kw = (int)blockDim.x / WARP_SIZE;
    const int g = lane / 4, t = lane % 4;
    if (blockIdx.y == 0) { /* the rows into L2 while the kernel before ends (weights: no kernel's output) */
        const int lines = (int)(((size_t)nb * sizeof(wblock) + 127) / 128);
        for (int k = threadIdx.x; k < MF_ROWS * lines; k += (int)blockDim.x) {
            const int r = row0 + k / lines;
            if (r < nrows)
                asm volatile("prefetch.global.L2 [%0];" ::"l"(w + (size_t)r * w_stride + (size_t)(k % lines) * 128));
        }
    }
    pdl_begin();
    const wblock *w0 = (const wblock *)(w + (size_t)min(row0 + g, nrows - 1) * w_stride);
    const wblock *w8 = (const wblock *)(w + (size_t)min(row0 + 8 + g, nrows - 1) * w_stride);
    const int tok0 = (int)blockIdx.y * 8 * NJ, nt = min(8 * NJ, ntok - tok0), njt = (nt + 7) / 8;
    const char *ab[NJ], *ac[NJ][2];
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        const int ib = 8 * j + g;
        ab[j] = act + (size_t)(tok0 + (ib < nt ? ib : 0)) * act_stride;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int ic = 8 * j + 2 * t + i;
            ac[j][i] = act + (size_t)(tok0 + (ic < nt ? ic : 0)) * act_stride;
        }
    }
    constexpr int NE = 4 * NJ; /* a thread's outputs */
    float acc[NJ][4];
#pragma unroll
    for (int j = 0; j < NJ; j++)
#pragma unroll
        for (int i = 0; i < 4; i++)
            acc[j][i] = 0.0f;
    for (int b0 = 0; b0 < nb; b0 += kw) { /* block-uniform: every thread reaches the barrier */
        const int b = b0 + warp;
        float cv[NJ][4];
        if (b < nb)
            mf_block<TR, NJ>((const wblock *)w0 + b, (const wblock *)w8 + b, ab, ac, b, t, njt, cv);
        /* two buffers: round r + 1 writes the other one, round r + 2 this one only after warp 0 has passed round
         * r + 1's barrier, i.e. after it read round r's */
        float *rb = buf + ((b0 / kw) % 2) * (kw * NE * WARP_SIZE);
        if (warp && b < nb)
#pragma unroll
            for (int j = 0; j < NJ; j++)
#pragma unroll
                for (int i = 0; i < 4; i++)
                    if (j < njt)
                        rb[(warp * NE + 4 * j + i) * WARP_SIZE + lane] = cv[j][i];
        __syncthreads();
        if (warp == 0) {
#pragma unroll
            for (int j = 0; j < NJ; j++)
#pragma unroll
                for (int i = 0; i < 4; i++)
                    if (j < njt)
                        acc[j][i] = acc[j][i] + cv[j][i]; /* block b0 < nb */
            for (int ww = 1; ww < kw; ww++) {
                if (b0 + ww >= nb)
                    break;
#pragma unroll
                for (int j = 0; j < NJ; j++)
#pragma unroll
                    for (int i = 0; i < 4; i++)
                        if (j < njt)
                            acc[j][i] = acc[j][i] + rb[(ww * NE + 4 * j + i) * WARP_SIZE + lane];
            }
        }
    }
    if (warp)
        return;
#pragma unroll
    for (int j = 0; j < NJ; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int tk = 8 * j + 2 * t + i % 2, r = row0 + g + 8 * (i / 2);
            if (tk < nt && r < nrows)
                out[(int64_t)(tok0 + tk) * ldo + r] = qd_row<TR>(acc[j][i]);
        }
}

/* Up to MM_MULTI products of one activation (mm_multi_t, blk_end in blocks of MF_ROWS rows): product i of TRB where
 * bit i of b_mask is set, of TRA otherwise (one type: TRA = TRB). */
template <typename TRA, typename TRB, int NJ, int KW>
static __global__ void __launch_bounds__(KW *WARP_SIZE)
    matmul_few_kernel(mm_multi_t m, int b_mask, const char *__restrict__ act, size_t act_stride, int nb_a, int nb_b,
                      int ntok)
{
    __shared__ float buf[2 * KW * 4 * NJ * WARP_SIZE];
    int i = 0;
#pragma unroll
    for (int k = 0; k < MM_MULTI - 1; k++)
        i += (int)blockIdx.x >= m.blk_end[k];
    const int row0 = ((int)blockIdx.x - (i ? m.blk_end[i - 1] : 0)) * MF_ROWS;
    if constexpr (std::is_same<TRA, TRB>::value)
        mf_rows<TRA, NJ>(m.w[i], m.w_stride[i], m.nrows[i], nb_a, row0, act, act_stride, ntok, m.out[i], m.ldo[i],
                         buf);
    else if (!((b_mask >> i) & 1)) /* block-uniform */
        mf_rows<TRA, NJ>(m.w[i], m.w_stride[i], m.nrows[i], nb_a, row0, act, act_stride, ntok, m.out[i], m.ldo[i],
                         buf);
    else
        mf_rows<TRB, NJ>(m.w[i], m.w_stride[i], m.nrows[i], nb_b, row0, act, act_stride, ntok, m.out[i], m.ldo[i],
                         buf);
}

/* How matmul_few_kernel is launched: tokens a block (8 or 16) and warps a block (2, 4, 8 or 16); fit: the warps
 * are the rule's, which mf_launch may change to the grid's fit on this GPU (mf_fit_kw). */
typedef struct mf_shape {
    int tile, kw;
    bool fit;
} mf_shape_t;

/* cuda_set_matmul_few_shape's override of the rule below (0: the rule's), for measurement. */
static std::atomic<int> g_few_tile{0}, g_few_kw{0};

extern "C" int cuda_set_matmul_few_shape(int32_t tile_tokens, int32_t k_warps, guild_err_t *err)
{
    if ((tile_tokens != 0 && tile_tokens != 8 && tile_tokens != 16) ||
        (k_warps != 0 && k_warps != 2 && k_warps != 4 && k_warps != 8 && k_warps != 16))
        return guild_err_set(err, "cuda: matmul: few-token blocks of %d tokens (0, 8, 16), %d warps (0, 2, 4, 8, 16)",
                             tile_tokens, k_warps);
    g_few_tile.store(tile_tokens, std::memory_order_relaxed);
    g_few_kw.store(k_warps, std::memory_order_relaxed);
    return 0;
}

/* cuda_matmul's for nrows rows (all of a launch's products): 8 warps, 4 for products of CUDA_MATMUL_MMA_WIDE_ROWS
 * rows or more (their grid fills the GPU anyway); tiles of 16 tokens from 9 tokens on for products of 4096 rows
 * or more, of 8 below (twice the blocks). The best of the 6 shapes, or within 10% of it, in each of
 * check_cuda_expert_mma's few timings on the H200 (bench/results/dense16-h200-2026-12-03-s29.md); fit: mf_launch
 * then fits those 8 warps to the grid (mf_fit_kw), unless cuda_set_matmul_few_shape named the warps. */
static mf_shape_t mf_shape_default(int64_t nrows, int32_t ntok)
{
    const int tile = g_few_tile.load(std::memory_order_relaxed), kw = g_few_kw.load(std::memory_order_relaxed);
    return mf_shape_t{tile ? tile : ntok > 8 && nrows >= 4096 ? 16 : 8,
                      kw ? kw : nrows >= CUDA_MATMUL_MMA_WIDE_ROWS ? 4 : 8, kw == 0};
}

/* The blocks of matmul_few_kernel<TRA, TRB, NJ, KW> in blocks of `threads` the GPU holds at once (the occupancy
 * calculator's blocks an SM x SMs), asked once a process; 0 where it cannot say. */
template <typename TRA, typename TRB, int NJ, int KW, int THREADS>
static int mf_resident()
{
    static const int r = [] {
        int dev = 0, sms = 0, per = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, matmul_few_kernel<TRA, TRB, NJ, KW>, THREADS, 0) !=
                cudaSuccess) {
            (void)cudaGetLastError();
            return 0;
        }
        return per * sms;
    }();
    return r;
}

/* The rule's 8 warps a block changed to what the grid (`blocks` x its token tiles) fits on this GPU: a grid past
 * one wave waits a block's whole time for its last blocks, and a warp's chain of blocks along K is the block's
 * time. With 8-token tiles and at least 16 blocks along K (an attention output product's 4096), 16 warps where the
 * grid still fits: half the chain. With 16-token tiles (~128 registers a thread: 2 blocks of 8 warps an SM), 4
 * warps where 8 would pass one wave and 4 do not (Q/K/V's 320 blocks of 16 rows at 9-16 tokens). Any shape gives
 * the same bits; bench/results/route35-h200-2026-12-03-s35.md has the timings. */
template <typename TRA, typename TRB>
static int mf_fit_kw(const mf_shape_t &sh, int grid, int nb)
{
    if (!sh.fit || sh.kw != 8)
        return sh.kw;
    if (sh.tile == 8)
        return nb >= 16 && grid <= mf_resident<TRA, TRB, 1, MF_WARPS_WIDE, 16 * WARP_SIZE>() ? 16 : 8;
    return grid > mf_resident<TRA, TRB, 2, MF_WARPS_MAX, 8 * WARP_SIZE>() &&
                   grid <= mf_resident<TRA, TRB, 2, MF_WARPS_MAX, 4 * WARP_SIZE>()
               ? 4
               : 8;
}

/* The rows of m's first count products. */
static int64_t mf_rows_all(const mm_multi_t &m, int count)
{
    int64_t r = 0;
    for (int i = 0; i < count; i++)
        r += m.nrows[i];
    return r;
}

/* m's products (blk_end filled in blocks of MF_ROWS rows) with matmul_few_kernel, shaped as sh. */
template <typename TRA, typename TRB>
static void mf_launch(const mm_multi_t &m, int b_mask, int blocks, int64_t n, int32_t ntok, const char *act,
                      size_t act_stride, mf_shape_t sh, cudaStream_t s)
{
    const int nb_a = (int)(n / TRA::QK), nb_b = (int)(n / TRB::QK);
    const dim3 grid((unsigned)blocks, (unsigned)((ntok + sh.tile - 1) / sh.tile));
    const int kw = mf_fit_kw<TRA, TRB>(sh, (int)(grid.x * grid.y), nb_a < nb_b ? nb_a : nb_b);
    const unsigned threads = (unsigned)(kw * WARP_SIZE);
    const bool wide = kw > MF_WARPS_MAX;
    if (sh.tile == 8)
        cuda_launch_pdl(wide ? matmul_few_kernel<TRA, TRB, 1, MF_WARPS_WIDE>
                             : matmul_few_kernel<TRA, TRB, 1, MF_WARPS_MAX>,
                        grid, threads, 0, s, m, b_mask, act, act_stride, nb_a, nb_b, ntok);
    else
        cuda_launch_pdl(wide ? matmul_few_kernel<TRA, TRB, 2, MF_WARPS_WIDE>
                             : matmul_few_kernel<TRA, TRB, 2, MF_WARPS_MAX>,
                        grid, threads, 0, s, m, b_mask, act, act_stride, nb_a, nb_b, ntok);
}

/* The kernel for m's products of one type; false (nothing launched) when the type has no mma traits. */
static bool mf_launch_type(guild_type_t type, const mm_multi_t &m, int blocks, int64_t n, int32_t ntok,
                           const char *act, size_t act_stride, mf_shape_t sh, cudaStream_t s)
{
#define MF_CASE(T, TR)                                                   \
    case T:                                                              \
        mf_launch<TR, TR>(m, 0, blocks, n, ntok, act, act_stride, sh, s); \
        return true;
    switch (type) {
    MMA_TYPES(MF_CASE)
    default:
        return false;
    }
#undef MF_CASE
}

/* The type pairs of the two-type launch (cuda_matmul_multi_types: MM_PAIRS'), A first. */
#define MF_PAIRS(X)                                        \
    X(GUILD_TYPE_Q4_K, mma_q4_K, GUILD_TYPE_Q6_K, mma_q6_K) \
    X(GUILD_TYPE_Q5_K, mma_q5_K, GUILD_TYPE_Q6_K, mma_q6_K) \
    X(GUILD_TYPE_Q4_K, mma_q4_K, GUILD_TYPE_Q5_K, mma_q5_K)

static bool mf_launch_pair(guild_type_t ta, guild_type_t tb, const mm_multi_t &m, int b_mask, int blocks, int64_t n,
                           int32_t ntok, const char *act, size_t act_stride, mf_shape_t sh, cudaStream_t s)
{
#define MF_PAIR(A, TA, BT, TB)                                                                         \
    if (ta == A && tb == BT) {                                                                         \
        mf_launch<TA, TB>(m, b_mask, blocks, n, ntok, act, act_stride, sh, s);                     \
        return true;                                                                                   \
    }
    MF_PAIRS(MF_PAIR)
#undef MF_PAIR
    return false;
}

/* One product on matmul_few_kernel (cuda_matmul's checks made): false when the type has none. */
static bool mf_single(guild_type_t type, int64_t n, int64_t nrows, int32_t ntok, const void *w, size_t w_stride,
                      const void *act, size_t act_stride, float *out, int64_t ldo, mf_shape_t sh, cudaStream_t s)
{
    mm_multi_t m = {};
    m.w[0] = (const char *)w;
    m.w_stride[0] = w_stride;
    m.out[0] = out;
    m.ldo[0] = ldo;
    m.nrows[0] = (int)nrows;
    const int blocks = mm_multi_table(m, 1, MF_ROWS, 0, 0);
    return mf_launch_type(type, m, blocks, n, ntok, (const char *)act, act_stride, sh, s);
}

typedef enum { MM_AUTO, MM_DP4A, MM_MMA, MM_FEW } mm_path_t;

/* Blocks of 64 rows: on the H200 they were as fast or faster than blocks of 128 in every timed shape
 * (tests/cuda/check_cuda_expert_mma; bench/results/code-comment-measurements.md): their ~115 registers let two
 * blocks share an SM where the 128-row blocks' ~210 do not. */
static int mma_block_rows(int64_t nrows, int32_t ntok)
{
    (void)nrows;
    (void)ntok;
    return 64;
}

/* n_heads > 1: that many products of one launch (mm_heads_t), on the CUDA cores. */
static int matmul_run(guild_type_t type, int64_t n, int64_t nrows, int32_t ntok, const void *w, size_t w_stride,
                      const void *act, size_t act_stride, float *out, int64_t ldo, mm_path_t path, int block_rows,
                      mf_shape_t fs, int n_heads, mm_heads_t hz, cudaStream_t s, guild_err_t *err)
{
    if (!cuda_type_supported(type))
        return guild_err_set(err, "cuda: matmul: weight type %d is not supported (supported: %s)", (int)type,
                             cuda_supported_types());
    if ((path == MM_MMA || path == MM_FEW) && !cuda_expert_mma_supported(type))
        return guild_err_set(err, "cuda: matmul: %s has no mma kernel", quant_type_info(type)->name);
    if (block_rows != 0 && block_rows != 64 && block_rows != 128)
        return guild_err_set(err, "cuda: matmul: mma blocks of %d rows (0, 64 or 128)", block_rows);
    if ((fs.tile != 0 && fs.tile != 8 && fs.tile != 16) ||
        (fs.kw != 0 && fs.kw != 2 && fs.kw != 4 && fs.kw != 8 && fs.kw != 16))
        return guild_err_set(err, "cuda: matmul: few-token blocks of %d tokens (0, 8, 16), %d warps (0, 2, 4, 8, 16)",
                             fs.tile, fs.kw);
    if (nrows <= 0 || ntok <= 0)
        return 0;
    const int64_t qk = quant_type_info(type)->block_elems;
    if (n <= 0 || n % qk || n > INT32_MAX || nrows > INT32_MAX || (ntok + 7) / 8 > 65535)
        return guild_err_set(err, "cuda: matmul: shape %lld x %lld, %d tokens is outside what the kernel handles",
                             (long long)n, (long long)nrows, ntok);
    const size_t wa = weight_align(type);
    const size_t aa = quant_type_info(type)->dot_type == GUILD_TYPE_Q8_0 ? 2 : 4;
    if (((uintptr_t)w | w_stride | hz.w) % wa || ((uintptr_t)act | act_stride | hz.act) % aa)
        return guild_err_set(err, "cuda: matmul: weight rows must be %zu-byte aligned, activation rows %zu-byte",
                             wa, aa);
    /* The mma kernel's loads need what was just checked (the alignments are cuda_expert_matmul's), its grid.y
     * ceil(ntok / 64) <= 65535 follows from the check on ceil(ntok / 8). */
    if (n_heads == 1 && (path == MM_FEW || (path == MM_AUTO && cuda_matmul_few_rule(nrows, ntok))) &&
        nrows <= INT32_MAX - MF_ROWS && (ntok + 7) / 8 <= 65535 &&
        mf_single(type, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo,
                  mf_shape_t{fs.tile ? fs.tile : mf_shape_default(nrows, ntok).tile,
                             fs.kw ? fs.kw : mf_shape_default(nrows, ntok).kw,
                             !fs.kw && mf_shape_default(nrows, ntok).fit},
                  s))
        return cuda_launch_check("matmul (few tokens)", err);
    if (n_heads == 1 && (path == MM_MMA || (path == MM_AUTO && cuda_matmul_mma_rule(nrows, ntok))) &&
        expert_mma_dense_launch(type, n, nrows, ntok, (const char *)w, w_stride, (const char *)act, act_stride, out,
                                ldo, block_rows ? block_rows : mma_block_rows(nrows, ntok), s))
        return cuda_launch_check("matmul (mma)", err);
    matmul_launch(type, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo, n_heads, hz, s);
    return cuda_launch_check("matmul", err);
}

extern "C" int cuda_matmul_l2(guild_type_t type, int64_t n, int64_t nrows, int32_t ntok, const void *w,
                              size_t w_stride, const void *act, size_t act_stride, float *out, int64_t ldo,
                              const void *l2, size_t l2_bytes, cudaStream_t s, guild_err_t *err)
{
    mm_heads_t hz = {0, 0, 0, (const char *)l2, (unsigned)((l2_bytes + 127) / 128)};
    if (!l2 || l2_bytes > ((size_t)1 << 30))
        hz.l2_lines = 0;
    return matmul_run(type, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo, MM_AUTO, 0,
                      mf_shape_t{0, 0, false}, 1, hz, s, err);
}

extern "C" int cuda_matmul(guild_type_t type, int64_t n, int64_t nrows, int32_t ntok, const void *w, size_t w_stride,
                           const void *act, size_t act_stride, float *out, int64_t ldo, cudaStream_t s,
                           guild_err_t *err)
{
    return cuda_matmul_l2(type, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo, NULL, 0, s, err);
}

extern "C" int cuda_matmul_dp4a(guild_type_t type, int64_t n, int64_t nrows, int32_t ntok, const void *w,
                                size_t w_stride, const void *act, size_t act_stride, float *out, int64_t ldo,
                                cudaStream_t s, guild_err_t *err)
{
    return matmul_run(type, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo, MM_DP4A, 0,
                      mf_shape_t{0, 0, false}, 1, mm_heads_t{0, 0, 0, nullptr, 0}, s, err);
}

extern "C" int cuda_matmul_mma(guild_type_t type, int64_t n, int64_t nrows, int32_t ntok, const void *w,
                               size_t w_stride, const void *act, size_t act_stride, float *out, int64_t ldo,
                               int32_t block_rows, cudaStream_t s, guild_err_t *err)
{
    return matmul_run(type, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo, MM_MMA, block_rows,
                      mf_shape_t{0, 0, false}, 1, mm_heads_t{0, 0, 0, nullptr, 0}, s, err);
}

extern "C" int cuda_matmul_few(guild_type_t type, int64_t n, int64_t nrows, int32_t ntok, const void *w,
                               size_t w_stride, const void *act, size_t act_stride, float *out, int64_t ldo,
                               int32_t tile_tokens, int32_t k_warps, cudaStream_t s, guild_err_t *err)
{
    return matmul_run(type, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo, MM_FEW, 0,
                      mf_shape_t{tile_tokens, k_warps, false}, 1, mm_heads_t{0, 0, 0, nullptr, 0}, s, err);
}

/* cuda_matmul_multi; few: whether batches of 2 .. CUDA_MATMUL_MMA_MIN_TOK - 1 tokens may take matmul_few_kernel. */
static int matmul_multi_run(guild_type_t type, int64_t n, int32_t ntok, int32_t count, const void *const *w,
                            const size_t *w_stride, const int64_t *nrows, const void *act, size_t act_stride,
                            float *const *out, const int64_t *ldo, bool few, cudaStream_t s, guild_err_t *err)
{
    if (count < 1 || count > MM_MULTI)
        return guild_err_set(err, "cuda: matmul: %d products in one launch (1..%d)", count, MM_MULTI);
    bool one = ntok >= 1 && ntok < CUDA_MATMUL_MMA_MIN_TOK && count > 1;
    switch (type) { /* the quantized types' CUDA-core kernel; the others product by product */
#define MM_MTYPE(T, TR, QK) case T:
    QD_DOT_TYPES(MM_MTYPE)
#undef MM_MTYPE
        break;
    default: one = false;
    }
    mm_multi_t m = {};
    for (int32_t i = 0; i < count && one; i++) {
        if (nrows[i] <= 0 || nrows[i] > INT32_MAX / 2) {
            one = false;
            break;
        }
        m.w[i] = (const char *)w[i];
        m.w_stride[i] = w_stride[i];
        m.out[i] = out[i];
        m.ldo[i] = ldo[i];
        m.nrows[i] = (int)nrows[i];
    }
    const int blocks = one ? mm_multi_table(m, count, MM_THREADS / WARP_SIZE, 0, 0) : 0;
    if (!one) {
        for (int32_t i = 0; i < count; i++)
            if ((few ? cuda_matmul : cuda_matmul_dp4a)(type, n, nrows[i], ntok, w[i], w_stride[i], act, act_stride,
                                                       out[i], ldo[i], s, err) < 0)
                return -1;
        return 0;
    }
    /* each product's checks, as cuda_matmul makes them (shape, alignment) */
    const int64_t qk = quant_type_info(type)->block_elems;
    const size_t wa = weight_align(type);
    const size_t aa = quant_type_info(type)->dot_type == GUILD_TYPE_Q8_0 ? 2 : 4;
    if (!cuda_type_supported(type) || n <= 0 || n % qk || n > INT32_MAX || ((uintptr_t)act | act_stride) % aa)
        return guild_err_set(err, "cuda: matmul: %lld-wide products of %s or their activations are outside what the "
                             "kernel handles", (long long)n, quant_type_info(type)->name);
    for (int32_t i = 0; i < count; i++)
        if (((uintptr_t)w[i] | w_stride[i]) % wa)
            return guild_err_set(err, "cuda: matmul: weight rows must be %zu-byte aligned", wa);
    if (few && cuda_matmul_few_rule(0, ntok) && cuda_expert_mma_supported(type)) {
        mm_multi_t f = m;
        const int fblocks = mm_multi_table(f, count, MF_ROWS, 0, 0);
        if (mf_launch_type(type, f, fblocks, n, ntok, (const char *)act, act_stride,
                           mf_shape_default(mf_rows_all(f, count), ntok), s))
            return cuda_launch_check("matmul (multi, few tokens)", err);
    }
    if (ntok == 1)
        matmul_multi_launch_nc<1>(type, n, ntok, m, blocks, act, act_stride, s);
    else if (ntok == 2)
        matmul_multi_launch_nc<2>(type, n, ntok, m, blocks, act, act_stride, s);
    else if (ntok <= 4)
        matmul_multi_launch_nc<4>(type, n, ntok, m, blocks, act, act_stride, s);
    else
        matmul_multi_launch_nc<8>(type, n, ntok, m, blocks, act, act_stride, s);
    return cuda_launch_check("matmul (multi)", err);
}

extern "C" int cuda_matmul_multi(guild_type_t type, int64_t n, int32_t ntok, int32_t count, const void *const *w,
                                 const size_t *w_stride, const int64_t *nrows, const void *act, size_t act_stride,
                                 float *const *out, const int64_t *ldo, cudaStream_t s, guild_err_t *err)
{
    return matmul_multi_run(type, n, ntok, count, w, w_stride, nrows, act, act_stride, out, ldo, true, s, err);
}

extern "C" int cuda_matmul_multi_dp4a(guild_type_t type, int64_t n, int32_t ntok, int32_t count,
                                      const void *const *w, const size_t *w_stride, const int64_t *nrows,
                                      const void *act, size_t act_stride, float *const *out, const int64_t *ldo,
                                      cudaStream_t s, guild_err_t *err)
{
    return matmul_multi_run(type, n, ntok, count, w, w_stride, nrows, act, act_stride, out, ldo, false, s, err);
}

extern "C" int cuda_matmul_multi_types(const guild_type_t *type, int64_t n, int32_t ntok, int32_t count,
                                       const void *const *w, const size_t *w_stride, const int64_t *nrows,
                                       const void *act, size_t act_stride, float *const *out, const int64_t *ldo,
                                       cudaStream_t s, guild_err_t *err)
{
    if (count < 1 || count > MM_MULTI)
        return guild_err_set(err, "cuda: matmul: %d products in one launch (1..%d)", count, MM_MULTI);
    guild_type_t ta = type[0], tb = type[0];
    int b_mask = 0;
    bool two = true;
    for (int32_t i = 0; i < count; i++) {
        if (type[i] == ta)
            continue;
        if (tb != ta && type[i] != tb)
            two = false;
        tb = type[i];
        b_mask |= 1 << i;
    }
    bool pair = false;
#define MM_PAIR_OK(A, TA, BT, TB) pair = pair || (ta == A && tb == BT) || (ta == BT && tb == A);
    MM_PAIRS(MM_PAIR_OK)
#undef MM_PAIR_OK
    if (ta == tb)
        return cuda_matmul_multi(ta, n, ntok, count, w, w_stride, nrows, act, act_stride, out, ldo, s, err);
    if (!two || !pair || ntok < 1 || ntok >= CUDA_MATMUL_MMA_MIN_TOK || n <= 0 || n % QUANT_QK_K || n > INT32_MAX ||
        ((uintptr_t)act | act_stride) % 4) { /* product by product */
        for (int32_t i = 0; i < count; i++)
            if (cuda_matmul(type[i], n, nrows[i], ntok, w[i], w_stride[i], act, act_stride, out[i], ldo[i], s, err) < 0)
                return -1;
        return 0;
    }
    /* the pair's first type in the table's order is the kernel's A */
    bool swap = true;
#define MM_PAIR_ORDER(A, TA, BT, TB) swap = swap && !(ta == A && tb == BT);
    MM_PAIRS(MM_PAIR_ORDER)
#undef MM_PAIR_ORDER
    if (swap) {
        const guild_type_t t = ta;
        ta = tb;
        tb = t;
        b_mask = ~b_mask & ((1 << count) - 1);
    }
    mm_multi_t m = {};
    for (int32_t i = 0; i < count; i++) {
        if (nrows[i] <= 0 || nrows[i] > INT32_MAX / 2)
            return guild_err_set(err, "cuda: matmul: a product of %lld rows in one launch", (long long)nrows[i]);
        if (((uintptr_t)w[i] | w_stride[i]) % weight_align(type[i]))
            return guild_err_set(err, "cuda: matmul: weight rows must be %zu-byte aligned", weight_align(type[i]));
        m.w[i] = (const char *)w[i];
        m.w_stride[i] = w_stride[i];
        m.out[i] = out[i];
        m.ldo[i] = ldo[i];
        m.nrows[i] = (int)nrows[i];
    }
    const int blocks = mm_multi_table(m, count, MM_THREADS / WARP_SIZE, 0, 0);
    if (cuda_matmul_few_rule(0, ntok)) {
        mm_multi_t f = m;
        const int fblocks = mm_multi_table(f, count, MF_ROWS, 0, 0);
        if (mf_launch_pair(ta, tb, f, b_mask, fblocks, n, ntok, (const char *)act, act_stride,
                           mf_shape_default(mf_rows_all(f, count), ntok), s))
            return cuda_launch_check("matmul (multi, two types, few tokens)", err);
    }
#define MM2(NC) matmul_multi2_launch_nc<NC>(ta, tb, n, ntok, m, count, b_mask, blocks, act, act_stride, s)
    const bool ok = ntok == 1 ? MM2(1) : ntok == 2 ? MM2(2) : ntok <= 4 ? MM2(4) : MM2(8);
#undef MM2
    if (!ok)
        return guild_err_set(err, "cuda: matmul: no kernel for %s with %s", quant_type_info(ta)->name,
                             quant_type_info(tb)->name);
    return cuda_launch_check("matmul (multi, two types)", err);
}

extern "C" int cuda_matmul_heads(guild_type_t type, int64_t n, int64_t nrows, int32_t ntok, int32_t n_heads,
                                 const void *w, size_t w_stride, size_t w_head, const void *act, size_t act_stride,
                                 size_t act_head, float *out, int64_t ldo, int64_t out_head, cudaStream_t s,
                                 guild_err_t *err)
{
    if (n_heads <= 0 || n_heads > 65535)
        return guild_err_set(err, "cuda: matmul: %d heads (1..65535)", n_heads);
    if (ntok >= CUDA_MATMUL_MMA_MIN_TOK && cuda_expert_mma_supported(type)) { /* each fills the GPU alone */
        for (int32_t h = 0; h < n_heads; h++)
            if (matmul_run(type, n, nrows, ntok, (const char *)w + (size_t)h * w_head, w_stride,
                           (const char *)act + (size_t)h * act_head, act_stride, out + (int64_t)h * out_head, ldo,
                           MM_AUTO, 0, mf_shape_t{0, 0, false}, 1, mm_heads_t{0, 0, 0, nullptr, 0}, s, err) < 0)
                return -1;
        return 0;
    }
    return matmul_run(type, n, nrows, ntok, w, w_stride, act, act_stride, out, ldo, MM_DP4A, 0, mf_shape_t{0, 0, false},
                      n_heads, mm_heads_t{w_head, act_head, out_head, nullptr, 0}, s, err);
}
