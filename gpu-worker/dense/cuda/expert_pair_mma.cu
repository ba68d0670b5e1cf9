/* cuda_expert_pairs_mma: cuda_expert_pairs' products (a decode step's routed experts without a route) on int8
 * tensor cores, the step's pairs grouped by expert inside the launch.
 *
 * Why: expert_pair_kernel (expert_pair.cu) costs about the same per pair whatever the experts the pairs share:
 * each pair's warps unpack every weight block, reduce each block's partial sums over a lane group, finish it and
 * shuffle it into block order. At 2-16 tokens a step's pairs share experts (16 tokens x 8 slots: ~83 of 128), and
 * an mma takes an expert's pairs as its N columns: a weight block is unpacked once for all of them and one mma
 * gives a sub-block's exact dot for 16 rows x 8 pairs, with no lane reduction.
 *
 * Grouping without a route: the grid is expert_pair_kernel's (row blocks x pairs). The block of pair p reads the
 * pairs' expert ids: it computes if p is the first of its expert's pairs in pair order, or the MC-th, 2 MC-th ...
 * (MC = 8 NJ, the columns of a block), and then takes that pair and the next MC - 1 of the expert; the others leave
 * at once. Each block quantizes its pairs' activation rows into shared memory (quantize.cuh's warp bodies: the
 * bytes cuda_quantize writes) and its warps compute 16 weight rows each over the whole row (gate and up rows of
 * the same index with w_up), for all its pairs: reading the weights' fragments from global memory as they are
 * needed (expert_pair_mma_kernel), or, the default, from copies of the rows' blocks each warp stages in shared
 * memory a block or more ahead (expert_pair_mma_staged_kernel, below).
 *
 * Bits: per (row, pair, block) mma_few.cuh's mf_block gives the exact integer sums and the type's finish with the
 * dp4a kernel's operations; they are added to 0.0f in block order, then the row's factor (qd_row) and SiLU as
 * expert_pair_kernel: every pair's floats are the ones expert_pair_kernel gives it alone, whichever pairs share
 * its block (a session's outputs do not depend on the batch). Slots of a block past its pairs read its first
 * pair's row and store nothing.
 *
 * The down products' expert ids were written two launches back: their blocks prefetch their rows into L2 before
 * pdl_begin() (a hint at most, as expert_pair_kernel's: ids read there decide nothing else and are read again
 * after the wait). */
#include "gpu-worker/dense/cuda/expert_mma_traits.cuh"
#include "gpu-worker/dense/cuda/mma_few.cuh"
#include "gpu-worker/dense/cuda/quantize.cuh"

#define EM_ROWS 16      /* weight rows of a warp: one mma tile's */
#define EM_WARPS_MAX 8  /* warps of a block: 2, 4 or 8 */
#define EM_PAIRS_MAX 4096 /* each block scans the pairs' ids: a few tokens' pairs */
/* the block's activation rows in shared memory; with the static list under the 48 KiB of no opt-in */
#define EM_SMEM_MAX (47 * 1024)

/* The types with mma fragments whose dot type is the one cuda_quantize writes for them (Q8_K, Q8_0). */
#define EM_TYPES(X)                   \
    X(GUILD_TYPE_Q4_K, mma_q4_K)     \
    X(GUILD_TYPE_Q5_K, mma_q5_K)     \
    X(GUILD_TYPE_Q6_K, mma_q6_K)     \
    X(GUILD_TYPE_IQ4_XS, mma_iq4_xs) \
    X(GUILD_TYPE_Q8_0, mma_q8_0)

/* An activation block's loads (QK floats from x, V a lane) and their quantization into a, by the whole warp:
 * quantize.cuh's bodies, cuda_quantize's bytes. Apart so that a warp can have several blocks' loads in flight
 * (the staged kernel); em_quantize does both. */
template <typename AB>
struct em_act;

template <>
struct em_act<quant_block_q8_K> {
    static constexpr int V = 8;
    static __device__ __forceinline__ void load(const float *x, int lane, float (&v)[V])
    {
#pragma unroll
        for (int k = 0; k < 8; k++)
            v[k] = x[lane * 8 + k];
    }
    static __device__ __forceinline__ void quantize(const float (&v)[V], int lane, quant_block_q8_K *a)
    {
        quantize_block_q8_K(v, lane, a);
    }
};

template <>
struct em_act<quant_block_q8_0> {
    static constexpr int V = 1;
    static __device__ __forceinline__ void load(const float *x, int lane, float (&v)[V])
    {
        v[0] = x[lane];
    }
    static __device__ __forceinline__ void quantize(const float (&v)[V], int lane, quant_block_q8_0 *a)
    {
        quantize_block_q8_32<false>(v[0], lane, a);
    }
};

/* One activation block (QK floats from x) into a, by the whole warp. */
template <typename AB>
static __device__ __forceinline__ void em_quantize(const float *x, int lane, AB *a)
{
    float v[em_act<AB>::V];
    em_act<AB>::load(x, lane, v);
    em_act<AB>::quantize(v, lane, a);
}

/* Pair p's group, by a whole warp (every warp of a block gets the same answer: no barrier needed to agree on it):
 * returns the pairs of expert e from p on that the block takes (at most MC), 0 when p is not the first of a group
 * (the pairs of e before p are not a multiple of MC). list (when not NULL) gets them in pair order. PRE: the first
 * PRE warps' worth of ids (4: a step of 16 tokens x 8 slots) loaded at once before the loop rather than one load
 * after another in it; the same answer. */
template <int MC, int PRE = 0>
static __device__ __forceinline__ int em_group(const int32_t *lids, int npairs, int p, int e, int lane, int *list)
{
    int id[PRE > 0 ? PRE : 1] = {-1};
#pragma unroll
    for (int k = 0; k < PRE; k++)
        id[k] = k * WARP_SIZE + lane < npairs ? lids[k * WARP_SIZE + lane] : -1;
    int before = 0, cnt = 0;
    for (int base = 0; base < npairs && cnt < MC; base += WARP_SIZE) { /* warp-uniform */
        const int q = base + lane;
        int v = id[0];
        if (base >= PRE * WARP_SIZE)
            v = q < npairs ? lids[q] : -1;
        else
#pragma unroll
            for (int k = 1; k < PRE; k++) /* static indices: id stays in registers */
                if (base == k * WARP_SIZE)
                    v = id[k];
        const bool m = q < npairs && v == e;
        const unsigned lo = __ballot_sync(FULL_MASK, m && q < p), hi = __ballot_sync(FULL_MASK, m && q >= p);
        before += __popc(lo);
        const int rank = cnt + __popc(hi & ((1u << lane) - 1u));
        if (list && m && q >= p && rank < MC)
            list[rank] = q;
        cnt += __popc(hi);
    }
    return before % MC ? 0 : min(cnt, MC);
}

/* Grid (row blocks of EM_ROWS rows a warp, pairs), blockDim.x / 32 warps; U: the loop over a row's blocks unrolled
 * U times (the next block's loads in flight, more registers). x: [pairs / act_div] float rows, ldx
 * apart; lids[p] the pair's expert among the n_local at w (+ e * expert_stride, rows row_stride apart);
 * out[p * ldo + r]: silu(gate) * up with wu, else the product. nb blocks a row. */
template <typename TR, bool GU, int NJ, int U>
static __global__ void __launch_bounds__(EM_WARPS_MAX *WARP_SIZE)
    expert_pair_mma_kernel(const char *__restrict__ w, const char *__restrict__ wu, size_t expert_stride,
                           size_t row_stride, const float *__restrict__ x, int64_t ldx, int act_div,
                           const int32_t *__restrict__ lids, int n_local, int npairs, float *__restrict__ out,
                           int64_t ldo, int nb, int nrows, int early)
{
    typedef typename TR::wblock wblock;
    typedef typename TR::ablock ablock;
    constexpr int MC = 8 * NJ; /* pairs (mma columns) of a block */
    extern __shared__ __align__(16) unsigned char em_act_smem[];
    __shared__ int list[MC];
    const int p = blockIdx.y, kw = (int)blockDim.x / WARP_SIZE;
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int blk0 = blockIdx.x * kw * EM_ROWS;
    const size_t blk_bytes = (size_t)min(kw * EM_ROWS, nrows - blk0) * row_stride;
    if (early) { /* the ids are two launches old: a group's first block asks L2 for its rows before the wait */
        const int e = lids[p];
        if (e >= 0 && e < n_local && em_group<MC>(lids, npairs, p, e, lane, NULL))
            prefetch_l2_lines(w + (size_t)e * expert_stride + (size_t)blk0 * row_stride, blk_bytes, threadIdx.x,
                              blockDim.x);
    }
    pdl_begin();
    const int e = lids[p];
    if (e < 0 || e >= n_local)
        return; /* the whole block: a skipped pair, or another part's */
    const int cnt = em_group<MC>(lids, npairs, p, e, lane, warp == 0 ? list : NULL);
    if (!cnt)
        return; /* the whole block: another block takes this pair */
    const char *we = w + (size_t)e * expert_stride, *ue = GU ? wu + (size_t)e * expert_stride : we;
    if (!early) {
        prefetch_l2_lines(we + (size_t)blk0 * row_stride, blk_bytes, threadIdx.x, blockDim.x);
        if (GU)
            prefetch_l2_lines(ue + (size_t)blk0 * row_stride, blk_bytes, threadIdx.x, blockDim.x);
    }
    __syncthreads(); /* list */
    ablock *a = (ablock *)em_act_smem; /* [MC][nb]: slot k is pair list[k]'s row */
    for (int i = warp; i < cnt * nb; i += kw) {
        const int k = i / nb, b = i - k * nb;
        em_quantize(x + (int64_t)(list[k] / act_div) * ldx + (int64_t)b * TR::QK, lane, a + (size_t)k * nb + b);
    }
    __syncthreads();

    const int row0 = blk0 + warp * EM_ROWS;
    if (row0 >= nrows)
        return; /* whole warps; no barrier below */
    const int g = lane / 4, t = lane % 4;
    const size_t r0 = (size_t)min(row0 + g, nrows - 1), r8 = (size_t)min(row0 + 8 + g, nrows - 1);
    const wblock *w0 = (const wblock *)(we + r0 * row_stride), *w8 = (const wblock *)(we + r8 * row_stride);
    const wblock *u0 = (const wblock *)(ue + r0 * row_stride), *u8 = (const wblock *)(ue + r8 * row_stride);
    const char *ab[NJ], *ac[NJ][2]; /* slot 8j + g (B operand), 8j + 2t + i (C column 2t + i); past cnt: slot 0 */
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        const int kb = 8 * j + g;
        ab[j] = (const char *)(a + (size_t)(kb < cnt ? kb : 0) * nb);
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int kc = 8 * j + 2 * t + i;
            ac[j][i] = (const char *)(a + (size_t)(kc < cnt ? kc : 0) * nb);
        }
    }
    /* groups of 8 pairs with pairs; a constant 1 for blocks of 8, so that mf_block has no branch and the
     * compiler may issue a block's loads (and the next block's) before their products */
    const int njt = NJ == 1 ? 1 : (cnt + 7) / 8;
    float sg[NJ][4], su[NJ][4];
#pragma unroll
    for (int j = 0; j < NJ; j++)
#pragma unroll
        for (int i = 0; i < 4; i++)
            sg[j][i] = su[j][i] = 0.0f;
#pragma unroll(U)
    for (int b = 0; b < nb; b++) { /* block order, as expert_pair_kernel */
        float cg[NJ][4], cu[NJ][4];
        mf_block<TR, NJ>(w0 + b, w8 + b, ab, ac, b, t, njt, cg);
        if (GU)
            mf_block<TR, NJ>(u0 + b, u8 + b, ab, ac, b, t, njt, cu);
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            if (j >= njt)
                break; /* warp-uniform */
#pragma unroll
            for (int i = 0; i < 4; i++) {
                sg[j][i] = sg[j][i] + cg[j][i];
                if (GU)
                    su[j][i] = su[j][i] + cu[j][i];
            }
        }
    }
#pragma unroll
    for (int j = 0; j < NJ; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int k = 8 * j + 2 * t + i % 2, r = row0 + g + 8 * (i / 2);
            if (k < cnt && r < nrows)
                out[(int64_t)list[k] * ldo + r] =
                    GU ? silu_mul(qd_row<TR>(sg[j][i]), qd_row<TR>(su[j][i])) : qd_row<TR>(sg[j][i]);
        }
}

/* ---- the staged form -------------------------------------------------------------------------------------
 * Why: the kernel above reads each fragment from global memory as mf_block needs it. A load instruction of a warp
 * touches 16 weight rows, a few bytes of each (Q6_K: 2-byte loads, 33 a block), so the loads' count rather than
 * their bytes bounds the rate, and the bytes in flight are those of the block in hand. Here each warp copies its 16
 * rows' next blocks raw into shared memory by 16-byte cp.async, ST - 1 blocks ahead of its products (the first
 * ones before the block quantizes its activations), and mf_block reads the fragments from those copies: the same
 * bytes, the same code, the same block order, so the same bits.
 * A row's block is copied as the 16-byte pieces that hold it (cp.async's source size stops at the block's last
 * byte; the piece below its first byte starts inside the matrix when the matrix is 16-byte aligned, the host's
 * condition) and sits at its address's offset in its piece; rows are RS bytes apart, an odd count of 16-byte
 * pieces so that 8 rows' 16-byte spans fall in distinct banks. The block's front is shortened the same way: the
 * pairs' ids (em_group<MC, 4>) and up to 4 activation blocks a warp (em_act) are loaded at once rather than one after
 * another. */
template <typename TR>
struct em_st_geom {
    static constexpr int BB = (int)sizeof(typename TR::wblock); /* a row's bytes a block */
    /* pieces of a row's block: Q4_K's and Q5_K's rows are 16-byte aligned (em_align), the others start at most
     * 14 bytes into a piece */
    static constexpr int NP = BB % 16 == 0 ? BB / 16 : (BB + 14 + 15) / 16;
    static constexpr int RS = (NP % 2 ? NP : NP + 1) * 16;
    static constexpr int MAT = EM_ROWS * RS; /* one matrix's 16 rows */
};

/* dst's 16 bytes from the n (1-16) bytes at src (16-byte aligned), the rest zero; asynchronous (em_cp_commit,
 * em_cp_wait). */
static __device__ __forceinline__ void em_cp16(void *dst, const void *src, int n)
{
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(n) : "memory");
}

static __device__ __forceinline__ void em_cp_commit(void)
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/* until at most N of this thread's groups are in flight */
template <int N>
static __device__ __forceinline__ void em_cp_wait(void)
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* Block b of rows min(row0 + i, nrows - 1), i < 16, of matrix m into dst + i RS (+ the row's offset in its
 * piece), by the whole warp. */
template <typename TR>
static __device__ __forceinline__ void em_stage(unsigned char *dst, const char *m, size_t row_stride, int row0,
                                                int nrows, int b, int lane)
{
    typedef em_st_geom<TR> G;
    for (int idx = lane; idx < EM_ROWS * G::NP; idx += WARP_SIZE) {
        const int i = idx / G::NP, k = idx - i * G::NP;
        const char *ra = m + (size_t)min(row0 + i, nrows - 1) * row_stride + (size_t)b * G::BB;
        const char *src = (const char *)((uintptr_t)ra & ~(uintptr_t)15) + 16 * k;
        const int left = (int)(ra + G::BB - src);
        if (left > 0)
            em_cp16(dst + i * G::RS + 16 * k, src, min(left, 16));
    }
}

/* Block b's copy of a row whose first block is at ra, in the rows' copies at sl (row slot i). */
template <typename TR>
static __device__ __forceinline__ const typename TR::wblock *em_staged_row(const unsigned char *sl, int i,
                                                                             const char *ra, int b)
{
    typedef em_st_geom<TR> G;
    return (const typename TR::wblock *)(sl + i * G::RS + (((uintptr_t)ra + (size_t)b * G::BB) & 15));
}

/* expert_pair_mma_kernel with 8 pairs a block and the rows staged: shared memory holds the activation rows
 * (abytes) and then each warp's ring of min(ST, nb) stages (wst bytes a warp), a stage one block of the warp's 16
 * rows (and 16 up rows with wu). l2: the L2 prefetch of the block's rows as expert_pair_mma_kernel (with early:
 * before the wait, whatever l2). */
template <typename TR, bool GU, int ST>
static __global__ void __launch_bounds__(EM_WARPS_MAX *WARP_SIZE)
    expert_pair_mma_staged_kernel(const char *__restrict__ w, const char *__restrict__ wu, size_t expert_stride,
                                  size_t row_stride, const float *__restrict__ x, int64_t ldx, int act_div,
                                  const int32_t *__restrict__ lids, int n_local, int npairs, float *__restrict__ out,
                                  int64_t ldo, int nb, int nrows, int early, int l2, int abytes, int wst)
{
    typedef typename TR::ablock ablock;
    typedef em_st_geom<TR> G;
    constexpr int MC = 8, STAGE = (GU ? 2 : 1) * G::MAT;
    extern __shared__ __align__(16) unsigned char em_st_smem[];
    __shared__ int list[MC];
    const int p = blockIdx.y, kw = (int)blockDim.x / WARP_SIZE;
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int blk0 = blockIdx.x * kw * EM_ROWS;
    const size_t blk_bytes = (size_t)min(kw * EM_ROWS, nrows - blk0) * row_stride;
    if (early) { /* as expert_pair_mma_kernel */
        const int e = lids[p];
        if (e >= 0 && e < n_local && em_group<MC, 4>(lids, npairs, p, e, lane, NULL))
            prefetch_l2_lines(w + (size_t)e * expert_stride + (size_t)blk0 * row_stride, blk_bytes, threadIdx.x,
                              blockDim.x);
    }
    pdl_begin();
    const int e = lids[p];
    if (e < 0 || e >= n_local)
        return;
    const int cnt = em_group<MC, 4>(lids, npairs, p, e, lane, warp == 0 ? list : NULL);
    if (!cnt)
        return;
    const char *we = w + (size_t)e * expert_stride, *ue = GU ? wu + (size_t)e * expert_stride : we;
    if (!early && l2) {
        prefetch_l2_lines(we + (size_t)blk0 * row_stride, blk_bytes, threadIdx.x, blockDim.x);
        if (GU)
            prefetch_l2_lines(ue + (size_t)blk0 * row_stride, blk_bytes, threadIdx.x, blockDim.x);
    }
    const int row0 = blk0 + warp * EM_ROWS;
    unsigned char *ring = em_st_smem + abytes + (size_t)warp * wst;
    if (row0 < nrows) /* the first ST - 1 blocks' copies in flight while the activations are quantized */
#pragma unroll
        for (int s = 0; s < ST - 1; s++) {
            if (s < nb) {
                em_stage<TR>(ring + s * STAGE, we, row_stride, row0, nrows, s, lane);
                if (GU)
                    em_stage<TR>(ring + s * STAGE + G::MAT, ue, row_stride, row0, nrows, s, lane);
            }
            em_cp_commit();
        }
    __syncthreads(); /* list */
    ablock *a = (ablock *)em_st_smem; /* [MC][nb]: slot k is pair list[k]'s row */
    typedef em_act<ablock> A;
    for (int i0 = warp; i0 < cnt * nb; i0 += 4 * kw) { /* up to 4 blocks' loads in flight, then their quantization */
        float v[4][A::V];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int i = i0 + j * kw, k = i / nb, b = i - k * nb;
            if (i < cnt * nb) /* warp-uniform */
                A::load(x + (int64_t)(list[k] / act_div) * ldx + (int64_t)b * TR::QK, lane, v[j]);
        }
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int i = i0 + j * kw;
            if (i < cnt * nb)
                A::quantize(v[j], lane, a + i);
        }
    }
    __syncthreads();
    if (row0 >= nrows)
        return; /* whole warps; no barrier below */
    const int g = lane / 4, t = lane % 4;
    const size_t r0 = (size_t)min(row0 + g, nrows - 1), r8 = (size_t)min(row0 + 8 + g, nrows - 1);
    const char *w0 = we + r0 * row_stride, *w8 = we + r8 * row_stride;
    const char *u0 = ue + r0 * row_stride, *u8 = ue + r8 * row_stride;
    const char *ab[1], *ac[1][2]; /* as expert_pair_mma_kernel's */
    ab[0] = (const char *)(a + (size_t)(g < cnt ? g : 0) * nb);
#pragma unroll
    for (int i = 0; i < 2; i++)
        ac[0][i] = (const char *)(a + (size_t)(2 * t + i < cnt ? 2 * t + i : 0) * nb);
    float sg[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}}, su[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
    for (int b = 0; b < nb; b++) { /* block order, as expert_pair_kernel */
        const int bn = b + ST - 1;
        if (bn < nb) { /* its slot's copy was read in block b - 1, before the __syncwarp that ended it */
            em_stage<TR>(ring + (bn % ST) * STAGE, we, row_stride, row0, nrows, bn, lane);
            if (GU)
                em_stage<TR>(ring + (bn % ST) * STAGE + G::MAT, ue, row_stride, row0, nrows, bn, lane);
        }
        em_cp_commit();
        em_cp_wait<ST - 1>(); /* this thread's copies of block b */
        __syncwarp();          /* and the other lanes' */
        const unsigned char *sl = ring + (b % ST) * STAGE;
        float cg[1][4], cu[1][4];
        mf_block<TR, 1>(em_staged_row<TR>(sl, g, w0, b), em_staged_row<TR>(sl, 8 + g, w8, b), ab, ac, b, t, 1, cg);
        if (GU)
            mf_block<TR, 1>(em_staged_row<TR>(sl + G::MAT, g, u0, b), em_staged_row<TR>(sl + G::MAT, 8 + g, u8, b),
                            ab, ac, b, t, 1, cu);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            sg[0][i] = sg[0][i] + cg[0][i];
            if (GU)
                su[0][i] = su[0][i] + cu[0][i];
        }
        __syncwarp(); /* every lane's reads of slot b % ST before its next copy */
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int k = 2 * t + i % 2, r = row0 + g + 8 * (i / 2);
        if (k < cnt && r < nrows)
            out[(int64_t)list[k] * ldo + r] =
                GU ? silu_mul(qd_row<TR>(sg[0][i]), qd_row<TR>(su[0][i])) : qd_row<TR>(sg[0][i]);
    }
}

template <typename TR, int NJ, int U>
static void em_launch_tr(const dim3 &grid, int warps, size_t smem, cudaStream_t s, const char *w, const char *wu,
                         size_t es, size_t rs, const float *x, int64_t ldx, int act_div, const int32_t *lids,
                         int n_local, int pairs, float *out, int64_t ldo, int64_t n, int64_t nrows, int early)
{
    const int nb = (int)(n / TR::QK);
    if (wu)
        cuda_launch_pdl(expert_pair_mma_kernel<TR, true, NJ, U>, grid, (unsigned)(warps * WARP_SIZE), smem, s, w, wu, es,
                        rs, x, ldx, act_div, lids, n_local, pairs, out, ldo, nb, (int)nrows, early);
    else
        cuda_launch_pdl(expert_pair_mma_kernel<TR, false, NJ, U>, grid, (unsigned)(warps * WARP_SIZE), smem, s, w, wu,
                        es, rs, x, ldx, act_div, lids, n_local, pairs, out, ldo, nb, (int)nrows, early);
}

/* The staged kernel's launch (8 pairs a block, ST stages); false, nothing launched, where it does not apply: the
 * matrices not 16-byte aligned (em_stage's pieces below a row's first byte), or more shared memory than the device
 * grants a block. asmem: the activation rows' bytes. */
template <typename TR, bool GU, int ST>
static bool em_launch_st(const dim3 &grid, int warps, size_t asmem, bool l2, cudaStream_t s, const char *w,
                         const char *wu, size_t es, size_t rs, const float *x, int64_t ldx, int act_div,
                         const int32_t *lids, int n_local, int pairs, float *out, int64_t ldo, int64_t n, int64_t nrows,
                         int early)
{
    /* the most dynamic shared memory the device grants a block, asked (and granted the kernel) once a process */
    static const int most = [] {
        int dev = 0, m = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&m, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess ||
            cudaFuncSetAttribute(expert_pair_mma_staged_kernel<TR, GU, ST>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, m - 1024) != cudaSuccess) {
            (void)cudaGetLastError();
            return 0;
        }
        return m - 1024; /* the static list and what the runtime keeps */
    }();
    const int nb = (int)(n / TR::QK);
    const size_t abytes = (asmem + 15) / 16 * 16;
    const size_t wst = (size_t)min(ST, nb) * (GU ? 2 : 1) * em_st_geom<TR>::MAT;
    const size_t smem = abytes + (size_t)warps * wst;
    if (((uintptr_t)w | (uintptr_t)wu) % 16 || smem > (size_t)most)
        return false;
    cuda_launch_pdl(expert_pair_mma_staged_kernel<TR, GU, ST>, grid, (unsigned)(warps * WARP_SIZE), smem, s, w, wu,
                    es, rs, x, ldx, act_div, lids, n_local, pairs, out, ldo, nb, (int)nrows, early, l2 ? 1 : 0,
                    (int)abytes, (int)wst);
    return true;
}

template <typename TR, int ST>
static bool em_launch_st_tr(const dim3 &grid, int warps, size_t asmem, bool l2, cudaStream_t s, const char *w,
                            const char *wu, size_t es, size_t rs, const float *x, int64_t ldx, int act_div,
                            const int32_t *lids, int n_local, int pairs, float *out, int64_t ldo, int64_t n,
                            int64_t nrows, int early)
{
    return wu ? em_launch_st<TR, true, ST>(grid, warps, asmem, l2, s, w, wu, es, rs, x, ldx, act_div, lids, n_local,
                                           pairs, out, ldo, n, nrows, early)
              : em_launch_st<TR, false, ST>(grid, warps, asmem, l2, s, w, wu, es, rs, x, ldx, act_div, lids, n_local,
                                            pairs, out, ldo, n, nrows, early);
}

/* The activation rows' bytes in shared memory for blocks of `tile` pairs, 0 where the kernel does not take the
 * type or width. */
static size_t em_smem(guild_type_t type, int64_t n, int tile)
{
    size_t ab = 0; /* the traits' activation block, which must be the dot type's */
    switch (type) {
#define EM_AB(T, TR)                       \
    case T:                                \
        ab = sizeof(typename TR::ablock); \
        break;
        EM_TYPES(EM_AB)
#undef EM_AB
    default:
        return 0;
    }
    const quant_type_info_t *ai = quant_type_info(quant_type_info(type)->dot_type);
    if ((size_t)ai->block_bytes != ab || n <= 0 || n % ai->block_elems || n > INT32_MAX)
        return 0;
    const size_t bytes = (size_t)tile * (size_t)(n / ai->block_elems) * ab;
    return bytes <= EM_SMEM_MAX ? bytes : 0;
}

/* Byte alignment the type's loads need of weight rows (cuda_expert_matmul's rule for these types). */
static size_t em_align(guild_type_t type)
{
    return type == GUILD_TYPE_Q4_K || type == GUILD_TYPE_Q5_K ? 16 : type == GUILD_TYPE_IQ4_XS ? 4 : 2;
}

extern "C" bool cuda_expert_pairs_mma_take(guild_type_t type, int64_t n, int32_t ntok)
{
    /* the types timed against the dp4a kernel at the Qwen3-30B-A3B shape (bench/results/
     * expmma-h200-2026-12-03-s31.md, mma35-h200-2026-12-03-s35.md): from 4 tokens faster with either down type;
     * at 1 and 2 slower, staged or not (a block's grouping, quantization and barriers for pairs that share no
     * expert), 3 untimed */
    const bool timed = type == GUILD_TYPE_Q4_K || type == GUILD_TYPE_Q6_K;
    return timed && ntok >= CUDA_EXPERT_PAIRS_MMA_MIN_TOK && ntok <= CUDA_EXPERT_PAIRS_MMA_MAX_TOK &&
           em_smem(type, n, 8) > 0;
}

extern "C" int cuda_expert_pairs_mma(guild_type_t type, int64_t n, int64_t nrows, const void *w, const void *w_up,
                                     size_t expert_stride, size_t row_stride, const float *x, int64_t ldx,
                                     int32_t act_div, const int32_t *lids, int32_t n_local, int32_t pairs, float *out,
                                     int64_t ldo, const cuda_pairs_mma_shape_t *shape, bool early, cudaStream_t s,
                                     guild_err_t *err)
{
    /* the kernel's choice: blocks of 8 pairs (16: the spare columns cost registers), 8 warps, each warp's rows
     * staged 2 blocks deep (the ring's shared memory leaves room for 2 blocks an SM; 3 or 4 deep, or the L2
     * prefetch as well, were slower), the fastest shape timed at 8 and 16 tokens and within 8% of the fastest at 4
     * (bench/results/mma35-h200-2026-12-03-s35.md); where the rows cannot be staged, the direct loads, not unrolled
     * (expmma-h200-2026-12-03-s31.md) */
    cuda_pairs_mma_shape_t sh = {8, 8, 1, 2, 1};
    if (shape) {
        sh.warps = shape->warps ? shape->warps : sh.warps;
        sh.tile = shape->tile ? shape->tile : sh.tile;
        sh.unroll = shape->unroll ? shape->unroll : sh.unroll;
        sh.stages = shape->stages ? shape->stages : sh.stages;
        sh.l2 = shape->l2 ? shape->l2 : sh.l2;
    }
    if ((sh.warps != 2 && sh.warps != 4 && sh.warps != 8) || (sh.tile != 8 && sh.tile != 16) ||
        (sh.unroll != 1 && sh.unroll != 2) || sh.stages < 1 || sh.stages > 4 || (sh.stages > 1 && sh.tile != 8) ||
        (sh.l2 != 1 && sh.l2 != 2))
        return guild_err_set(err, "cuda: expert pairs (mma): %d warps (2, 4 or 8), %d pairs a block (8 or 16), "
                             "unrolled %d times (1 or 2), %d stages (1, or 2-4 with 8 pairs), l2 %d (1 or 2)",
                             sh.warps, sh.tile, sh.unroll, sh.stages, sh.l2);
    const size_t smem = em_smem(type, n, sh.tile);
    if (!smem)
        return guild_err_set(err, "cuda: expert pairs (mma): %s rows of %lld are not the kernel's",
                             quant_type_info(type)->name, (long long)n);
    if (pairs <= 0 || nrows <= 0)
        return 0;
    if (pairs > EM_PAIRS_MAX || nrows > INT32_MAX || n_local < 1 || act_div < 1 || ldx < n)
        return guild_err_set(err, "cuda: expert pairs (mma): %d pairs of %lld rows, %d experts, rows of %lld floats "
                             "%lld apart", pairs, (long long)nrows, n_local, (long long)n, (long long)ldx);
    const size_t wa = em_align(type);
    if (((uintptr_t)w | (uintptr_t)w_up | expert_stride | row_stride) % wa)
        return guild_err_set(err, "cuda: expert pairs (mma): weight rows must be %zu-byte aligned", wa);
    const int warps = sh.warps;
    const dim3 grid((unsigned)((nrows + warps * EM_ROWS - 1) / (warps * EM_ROWS)), (unsigned)pairs);
    const char *wc = (const char *)w, *uc = (const char *)w_up;
    const int ek = early ? 1 : 0;
#define EM_GO(TR, NJ, U)                                                                                           \
    em_launch_tr<TR, NJ, U>(grid, warps, smem, s, wc, uc, expert_stride, row_stride, x, ldx, act_div, lids, n_local,  \
                            pairs, out, ldo, n, nrows, ek)
    switch (type) {
#define EM_ST(TR, ST)                                                                                               \
    em_launch_st_tr<TR, ST>(grid, warps, smem, sh.l2 == 2, s, wc, uc, expert_stride, row_stride, x, ldx, act_div,    \
                            lids, n_local, pairs, out, ldo, n, nrows, ek)
#define EM_CASE(T, TR)                                  \
    case T:                                             \
        if ((sh.stages == 2 && EM_ST(TR, 2)) || (sh.stages == 3 && EM_ST(TR, 3)) || (sh.stages == 4 && EM_ST(TR, 4))) \
            break; /* else the direct loads */          \
        if (sh.tile == 8 && sh.unroll == 1)             \
            EM_GO(TR, 1, 1);                            \
        else if (sh.tile == 8)                          \
            EM_GO(TR, 1, 2);                            \
        else if (sh.unroll == 1)                        \
            EM_GO(TR, 2, 1);                            \
        else                                            \
            EM_GO(TR, 2, 2);                            \
        break;
        EM_TYPES(EM_CASE)
#undef EM_CASE
#undef EM_ST
#undef EM_GO
    default: break; /* rejected by em_smem */
    }
    return cuda_launch_check("expert pairs (mma)", err);
}
