/* cuda_expert_pairs: the routed experts of a decode step without a route (the few-token steps whose tiles hold one
 * pair each): block row y is pair y, its expert the pair's local id, so no routing launch comes first and no
 * activation quantization either: each block quantizes its pair's activation row into shared memory
 * (quantize.cuh's warp bodies, the bytes cuda_quantize writes) and its warps compute R weight rows each, with
 * cuda_expert_matmul's per-row arithmetic for tiles of one pair (the same block dots, folded in block order, the
 * same final factor and SiLU): the same bits as cuda_expert_route + cuda_quantize + cuda_expert_matmul.
 *
 * A pair's expert is known once the router's launch has ended, so a block reads it after pdl_begin() and first
 * asks L2 for its weight rows, then quantizes while they come. The down products' expert was chosen two launches
 * back: their blocks also prefetch the rows before pdl_begin() (a hint at most: the id read there is used for
 * nothing else, clamped to the part's experts, and read again after the wait).
 */
#include "gpu-worker/dense/cuda/l2_stream.cuh"
#include "gpu-worker/dense/cuda/quant_dot_iq.cuh"
#include "gpu-worker/dense/cuda/quantize.cuh"

#define EP_WARPS 8
#define EP_THREADS (EP_WARPS * WARP_SIZE)
#define EP_SMEM_MAX (40 * 1024) /* the activation row's blocks in shared memory */

/* Warp `warp` of the block quantizes blocks warp, warp + EP_WARPS, ... of the row x of nb blocks into a. */
static __device__ __forceinline__ void ep_quantize(const float *x, int nb, int warp, int lane, quant_block_q8_K *a)
{
    for (int b = warp; b < nb; b += EP_WARPS) {
        const float *xb = x + (int64_t)b * QUANT_QK_K + lane * 8;
        float v[8];
#pragma unroll
        for (int k = 0; k < 8; k++)
            v[k] = xb[k];
        quantize_block_q8_K(v, lane, a + b);
    }
}

static __device__ __forceinline__ void ep_quantize(const float *x, int nb, int warp, int lane, quant_block_q8_1 *a)
{
    for (int b = warp; b < nb; b += EP_WARPS)
        quantize_block_q8_32<true>(x[(int64_t)b * 32 + lane], lane, a + b);
}

static __device__ __forceinline__ void ep_quantize(const float *x, int nb, int warp, int lane, quant_block_q8_0 *a)
{
    for (int b = warp; b < nb; b += EP_WARPS)
        quantize_block_q8_32<false>(x[(int64_t)b * 32 + lane], lane, a + b);
}

/* Grid (row groups of EP_WARPS * R rows, pairs). x: [pairs / act_div] float rows, ldx apart; lids[p] the pair's
 * expert among the n_local at w (+ e * expert_stride); out[p * ldo + r]. */
template <typename TR, int R, bool GU>
static __global__ void __launch_bounds__(EP_THREADS)
    expert_pair_kernel(const char *__restrict__ w, const char *__restrict__ wu, size_t expert_stride,
                       size_t row_stride, const float *__restrict__ x, int64_t ldx, int act_div,
                       const int32_t *__restrict__ lids, int n_local, float *__restrict__ out, int64_t ldo, int nb,
                       int nrows, int early)
{
    typedef typename TR::wblock wblock;
    typedef typename TR::ablock ablock;
    constexpr int TPB = TR::TPB, G = WARP_SIZE / TPB;
    extern __shared__ __align__(16) unsigned char ep_act_smem[];
    const int p = blockIdx.y;
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int blk0 = blockIdx.x * EP_WARPS * R;
    const size_t blk_bytes = (size_t)min(EP_WARPS * R, nrows - blk0) * row_stride;
    if (early) {
        const int e = min(max(lids[p], 0), n_local - 1);
        prefetch_l2_lines(w + (size_t)e * expert_stride + (size_t)blk0 * row_stride, blk_bytes, threadIdx.x,
                          EP_THREADS);
    }
    pdl_begin();
    const int e = lids[p];
    if (e < 0 || e >= n_local)
        return; /* the whole block: a skipped pair, or another part's */
    const char *we = w + (size_t)e * expert_stride, *ue = GU ? wu + (size_t)e * expert_stride : we;
    if (!early) {
        prefetch_l2_lines(we + (size_t)blk0 * row_stride, blk_bytes, threadIdx.x, EP_THREADS);
        if (GU)
            prefetch_l2_lines(ue + (size_t)blk0 * row_stride, blk_bytes, threadIdx.x, EP_THREADS);
    }
    ablock *a = (ablock *)ep_act_smem;
    ep_quantize(x + (int64_t)(p / act_div) * ldx, nb, warp, lane, a);
    __syncthreads();

    const int g = lane / TPB, j = lane % TPB;
    const int row0 = blk0 + warp * R;
    const wblock *wr[R], *ur[R];
#pragma unroll
    for (int i = 0; i < R; i++) {
        const int r = min(row0 + i, nrows - 1); /* rows past the end compute row nrows - 1 and write nothing */
        wr[i] = (const wblock *)(we + (size_t)r * row_stride);
        ur[i] = (const wblock *)(ue + (size_t)r * row_stride);
    }
    float sg[R], su[R];
#pragma unroll
    for (int i = 0; i < R; i++)
        sg[i] = su[i] = 0.0f;
#pragma unroll 2
    for (int b0 = 0; b0 < nb; b0 += G) {
        const int b = b0 + g;
        const bool ok = b < nb;
        float cg[R], cu[R];
#pragma unroll
        for (int i = 0; i < R; i++) {
            int isum = 0, imin = 0;
            if (ok)
                TR::partial(wr[i] + b, a + b, j, isum, imin);
            isum = group_sum_int<TPB>(isum);
            if (TR::HAS_MIN)
                imin = group_sum_int<TPB>(imin);
            cg[i] = ok ? TR::finish(wr[i] + b, a + b, isum, imin) : 0.0f;
            if (GU) {
                int usum = 0, umin = 0;
                if (ok)
                    TR::partial(ur[i] + b, a + b, j, usum, umin);
                usum = group_sum_int<TPB>(usum);
                if (TR::HAS_MIN)
                    umin = group_sum_int<TPB>(umin);
                cu[i] = ok ? TR::finish(ur[i] + b, a + b, usum, umin) : 0.0f;
            } else {
                cu[i] = 0.0f;
            }
        }
        /* block order, as cuda_matmul: the G blocks of this step are held by lanes 0, TPB, 2 TPB, ... */
#pragma unroll
        for (int gg = 0; gg < G; gg++) {
#pragma unroll
            for (int i = 0; i < R; i++) {
                const float cv = __shfl_sync(FULL_MASK, cg[i], gg * TPB);
                const float uv = GU ? __shfl_sync(FULL_MASK, cu[i], gg * TPB) : 0.0f;
                if (b0 + gg < nb) {
                    sg[i] = sg[i] + cv;
                    if (GU)
                        su[i] = su[i] + uv;
                }
            }
        }
    }
    if (lane == 0) {
#pragma unroll
        for (int i = 0; i < R; i++)
            if (row0 + i < nrows)
                out[(int64_t)p * ldo + row0 + i] =
                    GU ? silu_mul(qd_row<TR>(sg[i]), qd_row<TR>(su[i])) : qd_row<TR>(sg[i]); /* final factor */
    }
}

template <int R, bool GU>
static void ep_launch(guild_type_t type, int64_t n, int64_t nrows, int32_t pairs, const char *w, const char *wu,
                      size_t es, size_t rs, const float *x, int64_t ldx, int act_div, const int32_t *lids,
                      int32_t n_local, float *out, int64_t ldo, int early, size_t smem, cudaStream_t s)
{
    const dim3 grid((unsigned)((nrows + EP_WARPS * R - 1) / (EP_WARPS * R)), (unsigned)pairs);
    /* the part's experts (gate and up where one window covers both): a step reads each routed expert once */
    const l2_span_t ws = l2_span_join(l2_span(w, (size_t)n_local * es), l2_span(GU ? wu : NULL, (size_t)n_local * es));
#define EP_CASE(T, TR, QK)                                                                                         \
    case T:                                                                                                        \
        cuda_launch_pdl_stream(expert_pair_kernel<TR, R, GU>, grid, EP_THREADS, smem, s, ws, w, wu, es, rs, x, ldx, \
                               act_div, lids, (int)n_local, out, ldo, (int)(n / (QK)), (int)nrows, early);          \
        break;
    switch (type) {
    QD_DOT_TYPES(EP_CASE)
    default: break; /* rejected by the entry point */
    }
#undef EP_CASE
}

/* The activation row's bytes in shared memory, 0 where the kernel does not take the type or width. */
static size_t ep_smem(guild_type_t type, int64_t n)
{
    bool dp4a = false;
    switch (type) {
#define EP_TYPE(T, TR, QK) case T:
    QD_DOT_TYPES(EP_TYPE)
#undef EP_TYPE
        dp4a = true;
        break;
    default: break;
    }
    const quant_type_info_t *ai = quant_type_info(quant_type_info(type)->dot_type);
    if (!dp4a || n <= 0 || n % ai->block_elems || n > INT32_MAX)
        return 0;
    const size_t bytes = (size_t)(n / ai->block_elems) * ai->block_bytes;
    return bytes <= EP_SMEM_MAX ? bytes : 0;
}

/* Byte alignment the type's loads need of weight rows (cuda_expert_matmul's rule). */
static size_t weight_align(guild_type_t type)
{
    switch (type) {
    case GUILD_TYPE_Q4_K: case GUILD_TYPE_Q5_K:
        return 16;
    case GUILD_TYPE_Q4_1: case GUILD_TYPE_Q5_1: case GUILD_TYPE_IQ4_XS: case GUILD_TYPE_Q2_K:
        return 4;
    case GUILD_TYPE_MXFP4:
        return 1;
    default:
        return 2;
    }
}

extern "C" bool cuda_expert_pairs_take(guild_type_t type, int64_t n)
{
    return ep_smem(type, n) > 0;
}

extern "C" int cuda_expert_pairs(guild_type_t type, int64_t n, int64_t nrows, const void *w, const void *w_up,
                                 size_t expert_stride, size_t row_stride, const float *x, int64_t ldx, int32_t act_div,
                                 const int32_t *lids, int32_t n_local, int32_t pairs, float *out, int64_t ldo,
                                 int32_t rows_per_warp, bool early, cudaStream_t s, guild_err_t *err)
{
    const size_t smem = ep_smem(type, n);
    if (!smem)
        return guild_err_set(err, "cuda: expert pairs: %s rows of %lld are not the kernel's",
                             quant_type_info(type)->name, (long long)n);
    if (pairs <= 0 || nrows <= 0)
        return 0;
    if (pairs > 65535 || nrows > INT32_MAX || n_local < 1 || act_div < 1 || ldx < n)
        return guild_err_set(err, "cuda: expert pairs: %d pairs of %lld rows, %d experts, rows of %lld floats "
                             "%lld apart", pairs, (long long)nrows, n_local, (long long)n, (long long)ldx);
    const size_t wa = weight_align(type);
    if (((uintptr_t)w | (uintptr_t)w_up | expert_stride | row_stride) % wa)
        return guild_err_set(err, "cuda: expert pairs: weight rows must be %zu-byte aligned", wa);
    int R = rows_per_warp;
    if (R == 0) /* fewer warps, each with two rows' loads in flight, for a step's many rows (4 were slower) */
        R = nrows * pairs > 4096 ? 2 : 1;
    if (R != 1 && R != 2 && R != 4)
        return guild_err_set(err, "cuda: expert pairs: %d rows a warp (0, 1, 2 or 4)", R);
    const char *wc = (const char *)w, *uc = (const char *)w_up;
    const int ek = early ? 1 : 0;
#define EP_R(RR)                                                                                                  \
    (w_up ? ep_launch<RR, true>(type, n, nrows, pairs, wc, uc, expert_stride, row_stride, x, ldx, act_div, lids, \
                                n_local, out, ldo, ek, smem, s)                                                  \
          : ep_launch<RR, false>(type, n, nrows, pairs, wc, uc, expert_stride, row_stride, x, ldx, act_div, lids, \
                                 n_local, out, ldo, ek, smem, s))
    if (R == 1)
        EP_R(1);
    else if (R == 2)
        EP_R(2);
    else
        EP_R(4);
#undef EP_R
    return cuda_launch_check("expert pairs", err);
}
