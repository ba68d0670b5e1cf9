/* cuda_expert_matmul on int8 tensor cores (mma.sync m16n8k32 / m16n8k16 .s8, sm_80+), for tiles of up to
 * CUDA_EXPERT_MMA_TILE pairs of one expert: the products of large batches (prefill).
 *
 * Bits: expert_q_kernel's, exactly. For a (row, pair) it adds, block after block in order, finish(isum, imin)
 * of quant_dot.cuh where isum/imin are exact integers. Here one mma gives the exact int8 dot of one sub-block
 * (the span of one scale: 32 elements for Q4_K/Q5_K/IQ4_XS/Q8_0, 16 for Q6_K/Q2_K/Q3_K) for 16 rows x 8 pairs;
 * times its scale and summed in int32 that is the same isum (integer sums do not depend on order), and the same
 * finish (same operations, --fmad=false) is added in the same block order, so the floats are the same bits; the
 * row's factor of the IQ types (qd_row) last, as the dp4a kernel does.
 * Q4_K/Q5_K/Q2_K's imin (sum of mins times the activation's sub-block sums) is accumulated by a second mma whose
 * A operand holds each sub-block's min in all 32 (16) columns: sum_s m_s * sum_k a_k, the integer the reference
 * gets from the bsums.
 *
 * K order: the dot of a sub-block does not depend on the order of its elements, so a thread's A and B
 * registers take the elements of 8 (or 4) consecutive bytes (k = 4t..4t+3 and 16+4t..16+4t+3 of the PTX
 * fragment <- elements 8t..8t+7 of the sub-block): one 8-byte load of weights and of activations, no shuffle
 * through shared memory. Fragments (PTX ISA, g = lane / 4, t = lane % 4):
 *   A 16x32 row: a0 = A[g][4t..], a1 = A[g+8][4t..], a2 = A[g][16+4t..], a3 = A[g+8][16+4t..]
 *   B 32x8 col:  b0 = B[4t..][g], b1 = B[16+4t..][g]
 *   C 16x8:      c0 = C[g][2t], c1 = C[g][2t+1], c2 = C[g+8][2t], c3 = C[g+8][2t+1]
 *   (m16n8k16: a0, a1 and b0 only.)
 *
 * Block: 8 warps, 4 along the rows x 2 along the pairs; a warp computes two groups of 16 rows (gate and up
 * rows of the same index with w_up; rows r and r + 16 without) for 32 pairs (4 groups of 8). A block: 64 rows
 * (with w_up) or 128 rows, 64 pairs, of the tile's expert. Blocks past *n_tiles exit (graph capture). Per
 * weight block a thread keeps the block's scales and one chunk of fragments at a time, the int32 sums of its
 * 4 x 2 x 4 (pair group, row group, C register) outputs, and their float sums (about 240 registers, no spill:
 * one block of 8 warps an SM).
 * Weight rows past nrows are read as the last row and not stored; pairs past the tile's count as its first
 * pair (whole groups of 8 past it are skipped) and not stored.
 * Dense mode (DENSE, cuda_matmul's large batches): one matrix, no routing tables; the tile of blockIdx.y is
 * pairs (tokens) [64 y, 64 y + 64) cut at npairs, pair p reading activation row p. A template parameter, so the
 * routed kernel's code is what it was. NQ = 1 (dense only): a warp computes one group of 16 rows, a block 64
 * rows: twice the blocks, about half the registers (two blocks an SM); cuda_matmul always takes it, faster than
 * the 128-row blocks in every dense shape timed on the H200.
 */
#include "gpu-worker/dense/cuda/expert_mma.cuh"
#include "gpu-worker/dense/cuda/expert_mma_traits.cuh"
#include "gpu-worker/dense/cuda/mma_s8.cuh"

#include <type_traits>

#define MMA_THREADS 256
#define MMA_ROW_WARPS 4
#define MMA_PAIR_WARPS 2
#define MMA_NT 4 /* groups of 8 pairs per warp */
static_assert(MMA_PAIR_WARPS * MMA_NT * 8 == CUDA_EXPERT_MMA_TILE, "a block covers one tile's pairs");
static_assert(MMA_ROW_WARPS * MMA_PAIR_WARPS * WARP_SIZE == MMA_THREADS, "warp layout");

/* ---- the kernel ---------------------------------------------------------------------------------------------- */

/* c += one sub-block's product: 16 rows (fragments q0: rows g, q8: rows g + 8) x 8 pairs. */
template <int KR>
static __device__ __forceinline__ void mma_sub(int (&c)[4], const int (&q0)[KR], const int (&q8)[KR], const int (&b)[KR])
{
    if (KR == 2)
        mma_s8_k32(c, q0[0], q8[0], q0[KR - 1], q8[KR - 1], b[0], b[KR - 1]);
    else
        mma_s8_k16(c, q0[0], q8[0], b[0]);
}

/* acc += one weight block's products for a warp: wb[q][h] the block of its rows of group q, half h (rows g and
 * g + 8 of the fragments), ab(j) the activation block of pair 8j + g (the B operand), ac(j, i) that of pair
 * 8j + 2t + i (C column 2t + i), for the first njt groups of 8 pairs (warp-uniform). The block's exact integer sums
 * (isum, imin), then finish(...) added to acc: the bits of expert_q_kernel's block. */
template <typename TR, int NQ, typename AB, typename AC>
static __device__ __forceinline__ void mma_wblock(const typename TR::wblock *const (&wb)[NQ][2], const AB &ab,
                                                  const AC &ac, int t, int njt, float (&acc)[NQ][MMA_NT][4])
{
    typedef typename TR::whead whead;
    constexpr int SPC = TR::SPC, KR = TR::KR;
    whead H[NQ][2];
#pragma unroll
    for (int q = 0; q < NQ; q++)
#pragma unroll
        for (int h = 0; h < 2; h++)
            TR::head(wb[q][h], H[q][h]);
    int isum[NQ][MMA_NT][4], imin[NQ][MMA_NT][4];
#pragma unroll
    for (int q = 0; q < NQ; q++)
#pragma unroll
        for (int j = 0; j < MMA_NT; j++)
#pragma unroll
            for (int i = 0; i < 4; i++)
                isum[q][j][i] = imin[q][j][i] = 0;
#pragma unroll
    for (int c = 0; c < TR::NCH; c++) {
        int Q[NQ][2][SPC][KR];
#pragma unroll
        for (int q = 0; q < NQ; q++)
#pragma unroll
            for (int h = 0; h < 2; h++)
                TR::chunk(wb[q][h], t, c, Q[q][h]);
#pragma unroll
        for (int j = 0; j < MMA_NT; j++) {
            if (j >= njt)
                break; /* warp-uniform */
            int B[SPC][KR];
            TR::bchunk(ab(j), t, c, B);
#pragma unroll
            for (int q = 0; q < NQ; q++)
#pragma unroll
                for (int i = 0; i < SPC; i++) {
                    const int s = TR::sub(c, i);
                    int d[4] = {0, 0, 0, 0};
                    mma_sub<KR>(d, Q[q][0][i], Q[q][1][i], B[i]);
                    const int s0 = TR::scale(H[q][0], s), s8 = TR::scale(H[q][1], s);
                    isum[q][j][0] += s0 * d[0];
                    isum[q][j][1] += s0 * d[1];
                    isum[q][j][2] += s8 * d[2];
                    isum[q][j][3] += s8 * d[3];
                    if (TR::HAS_MIN) {
                        const int m0 = TR::minb(H[q][0], s), m8 = TR::minb(H[q][1], s);
                        if (KR == 2)
                            mma_s8_k32(imin[q][j], m0, m8, m0, m8, B[i][0], B[i][KR - 1]);
                        else
                            mma_s8_k16(imin[q][j], m0, m8, B[i][0]);
                    }
                }
        }
    }
#pragma unroll
    for (int j = 0; j < MMA_NT; j++) {
        if (j >= njt)
            break;
        const float ad0 = TR::act_d(ac(j, 0)), ad1 = TR::act_d(ac(j, 1));
#pragma unroll
        for (int q = 0; q < NQ; q++) {
            acc[q][j][0] = acc[q][j][0] + TR::finish(H[q][0], ad0, isum[q][j][0], imin[q][j][0]);
            acc[q][j][1] = acc[q][j][1] + TR::finish(H[q][0], ad1, isum[q][j][1], imin[q][j][1]);
            acc[q][j][2] = acc[q][j][2] + TR::finish(H[q][1], ad0, isum[q][j][2], imin[q][j][2]);
            acc[q][j][3] = acc[q][j][3] + TR::finish(H[q][1], ad1, isum[q][j][3], imin[q][j][3]);
        }
    }
}

/* The warp's outputs: pair pc[j][i] (-1: none) of C column 2t + i, rows rows[q][h] below nrows; with w_up
 * silu(gate) * up of groups 0 and 1; the row's factor (IQ types) last. */
template <typename TR, bool GU, int NQ>
static __device__ __forceinline__ void mma_store(const float (&acc)[NQ][MMA_NT][4], const int (&pc)[MMA_NT][2],
                                                 const int (&rows)[NQ][2], int nrows, float *__restrict__ out,
                                                 int64_t ldo)
{
#pragma unroll
    for (int j = 0; j < MMA_NT; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int p = pc[j][i % 2];
            if (p < 0)
                continue;
            if constexpr (GU) {
                const int r = rows[0][i / 2];
                if (r < nrows)
                    out[(int64_t)p * ldo + r] = silu_mul(qd_row<TR>(acc[0][j][i]), qd_row<TR>(acc[1][j][i]));
            } else {
#pragma unroll
                for (int q = 0; q < NQ; q++) {
                    const int r = rows[q][i / 2];
                    if (r < nrows)
                        out[(int64_t)p * ldo + r] = qd_row<TR>(acc[q][j][i]);
                }
            }
        }
}

/* The block's tile: {expert, first index into order, count, 0}; dense: pairs (tokens) [64 y, 64 y + 64) cut at
 * npairs, order the identity. */
template <bool DENSE>
static __device__ __forceinline__ int4 mma_tile(const int4 *__restrict__ tiles, int npairs)
{
    return DENSE ? make_int4(0, (int)blockIdx.y * CUDA_EXPERT_MMA_TILE,
                             min(CUDA_EXPERT_MMA_TILE, npairs - (int)blockIdx.y * CUDA_EXPERT_MMA_TILE), 0)
                 : tiles[blockIdx.y];
}

template <typename TR, bool GU, bool DENSE, int NQ>
static __global__ void __launch_bounds__(MMA_THREADS)
    expert_mma_kernel(const char *__restrict__ w, const char *__restrict__ wu, size_t expert_stride,
                      size_t row_stride, const char *__restrict__ act, size_t act_stride, int act_div,
                      const int32_t *__restrict__ order, const int4 *__restrict__ tiles,
                      const int32_t *__restrict__ n_tiles, int npairs, float *__restrict__ out, int64_t ldo, int nb,
                      int nrows)
{
    typedef typename TR::wblock wblock;
    typedef typename TR::ablock ablock;
    constexpr int WROWS = GU ? 16 : 16 * NQ; /* rows of a warp: NQ groups of 16 (gate and up: one of each) */
    static_assert(NQ == 2 || (NQ == 1 && !GU), "gate and up take a group each");
    if (!DENSE && (int)blockIdx.y >= *n_tiles)
        return;
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    const int g = lane / 4, t = lane % 4;
    const int wr = warp % MMA_ROW_WARPS, wp = warp / MMA_ROW_WARPS;
    const int row0 = (blockIdx.x * MMA_ROW_WARPS + wr) * WROWS;
    if (row0 >= nrows)
        return; /* whole warps; no block-wide synchronization below */
    const int4 td = mma_tile<DENSE>(tiles, npairs);
    const int nt = td.z, p0 = wp * MMA_NT * 8;
    if (p0 >= nt)
        return;

    /* Rows of this thread: group q, half h (row g or g + 8); past the last row: the last row's bytes, not stored. */
    const wblock *wrp[NQ][2];
    int rows[NQ][2];
#pragma unroll
    for (int q = 0; q < NQ; q++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int r = row0 + (GU ? 0 : 16 * q) + 8 * h + g;
            rows[q][h] = r;
            const char *base = GU && q ? wu : w;
            wrp[q][h] = (const wblock *)(base + (size_t)td.x * expert_stride + (size_t)min(r, nrows - 1) * row_stride);
        }
    /* Activation rows: of pair 8j + g (B operand) and of pairs 8j + 2t, 8j + 2t + 1 (C columns); past the
     * tile's count: its first pair's row, not stored. */
    int arow_b[MMA_NT], pc[MMA_NT][2], arow_c[MMA_NT][2];
#pragma unroll
    for (int j = 0; j < MMA_NT; j++) {
        const int ib = p0 + 8 * j + g;
        arow_b[j] = DENSE ? td.y + (ib < nt ? ib : 0) : order[td.y + (ib < nt ? ib : 0)] / act_div;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int ic = p0 + 8 * j + 2 * t + i;
            pc[j][i] = ic < nt ? (DENSE ? td.y + ic : order[td.y + ic]) : -1;
            arow_c[j][i] = DENSE ? td.y + (ic < nt ? ic : 0) : order[td.y + (ic < nt ? ic : 0)] / act_div;
        }
    }
    const int njt = min(MMA_NT, (nt - p0 + 7) / 8); /* groups of 8 pairs with at least one pair */

    float acc[NQ][MMA_NT][4];
#pragma unroll
    for (int q = 0; q < NQ; q++)
#pragma unroll
        for (int j = 0; j < MMA_NT; j++)
#pragma unroll
            for (int i = 0; i < 4; i++)
                acc[q][j][i] = 0.0f;

    for (int b = 0; b < nb; b++) {
        const wblock *wb[NQ][2];
#pragma unroll
        for (int q = 0; q < NQ; q++)
#pragma unroll
            for (int h = 0; h < 2; h++)
                wb[q][h] = wrp[q][h] + b;
        mma_wblock<TR, NQ>(
            wb, [&](int j) { return (const ablock *)(act + (size_t)arow_b[j] * act_stride) + b; },
            [&](int j, int i) { return (const ablock *)(act + (size_t)arow_c[j][i] * act_stride) + b; }, t, njt, acc);
    }
    mma_store<TR, GU, NQ>(acc, pc, rows, nrows, out, ldo);
}

/* ---- the staged kernel ---------------------------------------------------------------------------------------
 * The products of Q4_K, Q5_K and Q6_K (staged_try; routed, and dense from MMA_ST_DENSE_MIN tokens) with the
 * tile's operands staged in shared memory: per step, BPS weight blocks of the block's 128 weight rows (64 gate +
 * 64 up rows with w_up) and of its 64 pairs' activation rows, copied raw by cp.async NST - 1 steps ahead of the
 * products. The kernel above reads every
 * fragment from global memory as it needs it, each weight byte by both pair warps and each activation byte by all
 * four row warps, with one block of 8 warps an SM to hide the latency; here a byte crosses from L2 once a block and
 * the loads of the products hit shared memory. The fragments, the integer sums, the finish and the stores are the
 * same code (mma_wblock and mma_store, on the staged copies of the same bytes) in the same block order: the same
 * bits.
 * Shared memory: a row's span (BPS blocks) a stride of WSTR bytes, a pair's BPS activation blocks ASTR; both
 * strides are 8 or 24 words modulo 32 banks, so the 8-byte fragment loads of 4 rows (or pairs) x 4 lanes fill 32
 * banks, and pairs 4-7 of each 8 sit one word further (their 4-byte loads in the other banks' half).
 * A step's weight span is copied in pieces of CU bytes (16: rows and blocks 16-byte aligned; 4: Q6_K's pairs of
 * 210-byte blocks), the activations in pieces of 4. CU 2: rows 2-byte aligned only (Q6_K's of an odd count of
 * 210-byte blocks, as the Qwen3-30B-A3B down projection's 3, or rows padded by 2 bytes): a row's span is copied as
 * the 4-byte words that hold it, from the word below its first byte (inside the matrix, whose start is 4-byte
 * aligned), the last word's bytes past the span not read (cp.async's source size: the rest of that word is zero),
 * and the span sits at byte 0 or 2 of its staged row, as its first byte in memory. */
#define MMA_ST_ROWS 128        /* weight rows a block stages: 64 gate + 64 up, or 128 */
#define MMA_ST_DENSE_MIN 1024  /* tokens from which cuda_matmul's products take the staged kernel */

/* The smallest stride >= need that is a multiple of 16 bytes and 8 or 24 words modulo 32 (32 or 96 bytes mod 128). */
static constexpr int mma_st_stride(int need)
{
    return (need + 15) / 16 * 16 % 128 == 32 || (need + 15) / 16 * 16 % 128 == 96 ? (need + 15) / 16 * 16
                                                                                   : mma_st_stride((need + 15) / 16 * 16 + 16);
}

template <typename TR, int BPS, int NST, int CU>
struct mma_st_geom {
    static constexpr int WB = (int)sizeof(typename TR::wblock) * BPS; /* a row's bytes a step */
    static constexpr int AB = (int)sizeof(typename TR::ablock) * BPS; /* a pair's bytes a step */
    static constexpr int WC = CU == 2 ? (WB + 2 + 3) / 4 * 4 : WB;    /* a row's bytes staged a step */
    static constexpr int WSTR = mma_st_stride(WC);
    static constexpr int ASTR = mma_st_stride(AB + 4);
    static constexpr int STAGE = MMA_ST_ROWS * WSTR + CUDA_EXPERT_MMA_TILE * ASTR;
    static constexpr int SMEM = NST * STAGE + CUDA_EXPERT_MMA_TILE * 4; /* + the pairs' activation rows */
};

template <int CU>
static __device__ __forceinline__ void mma_cp_async(void *dst, const void *src)
{
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    if (CU == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src));
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(d), "l"(src));
}

/* The first n (1-4) bytes of the 4-byte word at src, the rest of dst's word zero. */
static __device__ __forceinline__ void mma_cp_async_n(void *dst, const void *src, int n)
{
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(n));
}

static __device__ __forceinline__ void mma_cp_commit(void)
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int N>
static __device__ __forceinline__ void mma_cp_wait(void)
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* The byte offset of staged pair slot p (pairs 4-7 of each 8 one word further). */
static __device__ __forceinline__ int mma_st_pair(int p, int astr)
{
    return p * astr + ((p >> 2) & 1) * 4;
}

template <typename TR, bool GU, bool DENSE, int BPS, int NST, int CU>
static __global__ void __launch_bounds__(MMA_THREADS, 1)
    expert_mma_staged_kernel(const char *__restrict__ w, const char *__restrict__ wu, size_t expert_stride,
                             size_t row_stride, const char *__restrict__ act, size_t act_stride, int act_div,
                             const int32_t *__restrict__ order, const int4 *__restrict__ tiles,
                             const int32_t *__restrict__ n_tiles, int npairs, float *__restrict__ out, int64_t ldo,
                             int nb, int nrows)
{
    typedef typename TR::wblock wblock;
    typedef typename TR::ablock ablock;
    typedef mma_st_geom<TR, BPS, NST, CU> G;
    constexpr int NQ = 2;
    constexpr int WROWS = GU ? 16 : 32; /* rows of a warp: gate and up rows of 16 indices, or 2 x 16 rows */
    static_assert(CU == 2 ? G::WB % 4 == 2 : G::WB % CU == 0, "copy pieces");
    static_assert(G::AB % 4 == 0, "copy pieces");
    extern __shared__ __align__(16) char mma_smem[];
    static_assert(!(GU && DENSE), "dense: one matrix");
    if (!DENSE && (int)blockIdx.y >= *n_tiles)
        return; /* the whole block */
    const int4 td = mma_tile<DENSE>(tiles, npairs);
    const int nt = td.z, tid = threadIdx.x;
    const int lane = tid % WARP_SIZE, warp = tid / WARP_SIZE;
    const int g = lane / 4, t = lane % 4;
    const int wr = warp % MMA_ROW_WARPS, wp = warp / MMA_ROW_WARPS;
    const int brow0 = blockIdx.x * MMA_ROW_WARPS * WROWS; /* the block's first row */
    const int row0 = brow0 + wr * WROWS, p0 = wp * MMA_NT * 8;
    int *arow = (int *)(mma_smem + NST * G::STAGE); /* activation row of each pair slot */
    for (int i = tid; i < CUDA_EXPERT_MMA_TILE; i += MMA_THREADS)
        arow[i] = DENSE ? td.y + (i < nt ? i : 0) : order[td.y + (i < nt ? i : 0)] / act_div;
    __syncthreads();

    const char *wexp = w + (size_t)td.x * expert_stride, *uexp = GU ? wu + (size_t)td.x * expert_stride : NULL;
    /* step k's bytes into stage buffer k % NST: rows past nrows as the last row (not stored), pairs past the
     * tile's count not copied (their slots read as slot 0's, not stored) */
    auto stage_copy = [&](int k) {
        char *sw = mma_smem + (k % NST) * G::STAGE, *sa = sw + MMA_ST_ROWS * G::WSTR;
        constexpr int WU = CU == 2 ? G::WC / 4 : G::WB / CU, AU = G::AB / 4;
        for (int i = tid; i < MMA_ST_ROWS * WU; i += MMA_THREADS) {
            const int r = i / WU, u = i - r * WU;
            const int lr = GU ? r % (MMA_ST_ROWS / 2) : r;
            const char *base = GU && r >= MMA_ST_ROWS / 2 ? uexp : wexp;
            const char *span = base + (size_t)min(brow0 + lr, nrows - 1) * row_stride + (size_t)k * G::WB;
            if constexpr (CU == 2) {
                const int off = (int)((uintptr_t)span & 3); /* 0 or 2 */
                mma_cp_async_n(sw + r * G::WSTR + 4 * u, span - off + 4 * u, min(4, off + G::WB - 4 * u));
            } else
                mma_cp_async<CU>(sw + r * G::WSTR + u * CU, span + u * CU);
        }
        for (int i = tid; i < nt * AU; i += MMA_THREADS) {
            const int p = i / AU, u = i - p * AU;
            mma_cp_async<4>(sa + mma_st_pair(p, G::ASTR) + 4 * u,
                            act + (size_t)arow[p] * act_stride + (size_t)k * G::AB + 4 * u);
        }
    };
    const int nsteps = nb / BPS;
#pragma unroll
    for (int k = 0; k < NST - 1; k++) {
        if (k < nsteps)
            stage_copy(k);
        mma_cp_commit();
    }

    /* Rows of this thread (group q, half h), their staged rows, and with CU 2 the low bits of their first byte
     * (step k's span at byte (roff + k WB) % 4 of its staged words) */
    int rows[NQ][2], srow[NQ][2], roff[NQ][2];
#pragma unroll
    for (int q = 0; q < NQ; q++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            rows[q][h] = row0 + (GU ? 0 : 16 * q) + 8 * h + g;
            srow[q][h] = (GU ? q * (MMA_ST_ROWS / 2) + wr * 16 : wr * 32 + 16 * q) + 8 * h + g;
            roff[q][h] = CU == 2 ? (int)((uintptr_t)((GU && q ? uexp : wexp) +
                                                     (size_t)min(rows[q][h], nrows - 1) * row_stride) & 3)
                                 : 0;
        }
    int sb[MMA_NT], pc[MMA_NT][2], sc[MMA_NT][2];
#pragma unroll
    for (int j = 0; j < MMA_NT; j++) {
        const int ib = p0 + 8 * j + g;
        sb[j] = mma_st_pair(ib < nt ? ib : 0, G::ASTR);
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int ic = p0 + 8 * j + 2 * t + i;
            pc[j][i] = ic < nt ? (DENSE ? td.y + ic : order[td.y + ic]) : -1;
            sc[j][i] = mma_st_pair(ic < nt ? ic : 0, G::ASTR);
        }
    }
    const bool active = row0 < nrows && p0 < nt; /* warp-uniform: a warp with no rows or pairs only copies */
    const int njt = min(MMA_NT, (nt - p0 + 7) / 8);

    float acc[NQ][MMA_NT][4];
#pragma unroll
    for (int q = 0; q < NQ; q++)
#pragma unroll
        for (int j = 0; j < MMA_NT; j++)
#pragma unroll
            for (int i = 0; i < 4; i++)
                acc[q][j][i] = 0.0f;

    for (int k = 0; k < nsteps; k++) {
        mma_cp_wait<NST - 2>();
        __syncthreads(); /* step k landed for every thread; every warp is done with step k - 1's buffer */
        if (k + NST - 1 < nsteps)
            stage_copy(k + NST - 1);
        mma_cp_commit();
        if (!active)
            continue;
        const char *sw = mma_smem + (k % NST) * G::STAGE, *sa = sw + MMA_ST_ROWS * G::WSTR;
#pragma unroll
        for (int bb = 0; bb < BPS; bb++) {
            const wblock *wb[NQ][2];
#pragma unroll
            for (int q = 0; q < NQ; q++)
#pragma unroll
                for (int h = 0; h < 2; h++)
                    wb[q][h] = (const wblock *)(sw + srow[q][h] * G::WSTR +
                                                (CU == 2 ? (roff[q][h] + k * G::WB) & 3 : 0)) + bb;
            mma_wblock<TR, NQ>(
                wb, [&](int j) { return (const ablock *)(sa + sb[j]) + bb; },
                [&](int j, int i) { return (const ablock *)(sa + sc[j][i]) + bb; }, t, njt, acc);
        }
    }
    mma_cp_wait<0>();
    if (active)
        mma_store<TR, GU, NQ>(acc, pc, rows, nrows, out, ldo);
}

/* The staged kernel for one type's step shape: false (nothing launched) when the bytes are not aligned for its
 * copies (CU 2: matrices 4-byte aligned, rows 2), the blocks of a row are not whole steps, or the device refuses
 * its shared memory; go false: only whether it would launch. Dense: order NULL, npairs tokens. */
template <typename TR, bool GU, bool DENSE, int BPS, int NST, int CU>
static bool staged_go(bool go, int64_t n, int64_t nrows, const char *w, const char *wu, size_t es, size_t rs,
                      const char *act, size_t as, int act_div, const int32_t *order, const int4 *tiles,
                      const int32_t *n_tiles, int32_t max_tiles, int32_t npairs, float *out, int64_t ldo,
                      cudaStream_t s)
{
    typedef mma_st_geom<TR, BPS, NST, CU> G;
    constexpr uintptr_t MA = CU == 2 ? 4 : CU; /* the matrices' alignment */
    const int nb = (int)(n / TR::QK);
    if (nb % BPS || (uintptr_t)w % MA || (uintptr_t)wu % MA || es % CU || rs % CU || (uintptr_t)act % 4 || as % 4)
        return false;
    static int ready; /* 0: not asked yet, 1: the shared memory granted, -1: refused */
    if (!ready) {
        const cudaError_t e = cudaFuncSetAttribute(expert_mma_staged_kernel<TR, GU, DENSE, BPS, NST, CU>,
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize, G::SMEM);
        if (e != cudaSuccess)
            (void)cudaGetLastError();
        ready = e == cudaSuccess ? 1 : -1;
    }
    if (ready < 0 || !go)
        return ready > 0;
    const int crows = MMA_ROW_WARPS * (GU ? 16 : 32);
    const dim3 grid((unsigned)((nrows + crows - 1) / crows), (unsigned)max_tiles);
    expert_mma_staged_kernel<TR, GU, DENSE, BPS, NST, CU><<<grid, MMA_THREADS, G::SMEM, s>>>(
        w, wu, es, rs, act, as, act_div, order, tiles, n_tiles, npairs, out, ldo, nb, (int)nrows);
    return true;
}

template <typename TR, int BPS, int NST, int CU>
static bool staged_pick(bool go, bool dense, int64_t n, int64_t nrows, const char *w, const char *wu, size_t es,
                        size_t rs, const char *act, size_t as, int act_div, const int32_t *order, const int4 *tiles,
                        const int32_t *n_tiles, int32_t max_tiles, int32_t npairs, float *out, int64_t ldo,
                        cudaStream_t s)
{
    if (dense)
        return staged_go<TR, false, true, BPS, NST, CU>(go, n, nrows, w, NULL, 0, rs, act, as, 1, NULL, NULL, NULL,
                                                        max_tiles, npairs, out, ldo, s);
    if (wu)
        return staged_go<TR, true, false, BPS, NST, CU>(go, n, nrows, w, wu, es, rs, act, as, act_div, order, tiles,
                                                        n_tiles, max_tiles, 0, out, ldo, s);
    return staged_go<TR, false, false, BPS, NST, CU>(go, n, nrows, w, NULL, es, rs, act, as, act_div, order, tiles,
                                                     n_tiles, max_tiles, 0, out, ldo, s);
}

/* The staged kernel where the type has one (Q4_K and Q5_K: a block a step, 16-byte pieces, 3 buffers; Q6_K: two
 * 210-byte blocks a step, 4-byte pieces, 2 buffers, or where its rows are 2-byte aligned only a block a step, the
 * words that hold it, 3 buffers); false: the kernel above. go false: only whether it would launch. */
template <typename TR>
static bool staged_try(bool go, bool dense, int64_t n, int64_t nrows, const char *w, const char *wu, size_t es,
                       size_t rs, const char *act, size_t as, int act_div, const int32_t *order, const int4 *tiles,
                       const int32_t *n_tiles, int32_t max_tiles, int32_t npairs, float *out, int64_t ldo,
                       cudaStream_t s)
{
    if constexpr (std::is_same<TR, mma_q4_K>::value || std::is_same<TR, mma_q5_K>::value)
        return staged_pick<TR, 1, 3, 16>(go, dense, n, nrows, w, wu, es, rs, act, as, act_div, order, tiles, n_tiles,
                                         max_tiles, npairs, out, ldo, s);
    else if constexpr (std::is_same<TR, mma_q6_K>::value)
        return staged_pick<TR, 2, 2, 4>(go, dense, n, nrows, w, wu, es, rs, act, as, act_div, order, tiles, n_tiles,
                                        max_tiles, npairs, out, ldo, s) ||
               staged_pick<TR, 1, 3, 2>(go, dense, n, nrows, w, wu, es, rs, act, as, act_div, order, tiles, n_tiles,
                                        max_tiles, npairs, out, ldo, s);
    else
        return false;
}

/* Routed (order != NULL): grid.y = max_tiles. Dense (order == NULL, w_up NULL): npairs tokens, grid.y the tiles
 * of 64 that cover them, blocks of 64 rows when narrow (128 otherwise). */
template <typename TR>
static void expert_mma_go(int64_t n, int64_t nrows, const char *w, const char *wu, size_t es, size_t rs,
                          const char *act, size_t as, int act_div, const int32_t *order, const int4 *tiles,
                          const int32_t *n_tiles, int32_t max_tiles, int32_t npairs, bool narrow, float *out,
                          int64_t ldo, cudaStream_t s)
{
    /* dense: the staged kernel's blocks of 128 rows from MMA_ST_DENSE_MIN tokens (fewer leave SMs idle) */
    if ((order || npairs >= MMA_ST_DENSE_MIN) &&
        staged_try<TR>(true, !order, n, nrows, w, wu, es, rs, act, as, act_div, order, tiles, n_tiles, max_tiles,
                       npairs, out, ldo, s))
        return;
    const int crows = MMA_ROW_WARPS * (wu || (!order && narrow) ? 16 : 32);
    const dim3 grid((unsigned)((nrows + crows - 1) / crows), (unsigned)max_tiles);
    const int nb = (int)(n / TR::QK);
    if (!order && narrow)
        expert_mma_kernel<TR, false, true, 1><<<grid, MMA_THREADS, 0, s>>>(w, NULL, 0, rs, act, as, 1, NULL, NULL,
                                                                           NULL, npairs, out, ldo, nb, (int)nrows);
    else if (!order)
        expert_mma_kernel<TR, false, true, 2><<<grid, MMA_THREADS, 0, s>>>(w, NULL, 0, rs, act, as, 1, NULL, NULL,
                                                                           NULL, npairs, out, ldo, nb, (int)nrows);
    else if (wu)
        expert_mma_kernel<TR, true, false, 2><<<grid, MMA_THREADS, 0, s>>>(w, wu, es, rs, act, as, act_div, order,
                                                                           tiles, n_tiles, 0, out, ldo, nb,
                                                                           (int)nrows);
    else
        expert_mma_kernel<TR, false, false, 2><<<grid, MMA_THREADS, 0, s>>>(w, wu, es, rs, act, as, act_div, order,
                                                                            tiles, n_tiles, 0, out, ldo, nb,
                                                                            (int)nrows);
}

extern "C" bool cuda_expert_mma_supported(guild_type_t type)
{
#define MMA_SUPPORTED(T, TR) case T:
    switch (type) {
    MMA_TYPES(MMA_SUPPORTED)
        return true;
    default:
        return false;
    }
#undef MMA_SUPPORTED
}

extern "C" bool cuda_expert_mma_staged(guild_type_t type, int64_t n, const void *w, const void *w_up,
                                       size_t expert_stride, size_t row_stride, const void *act, size_t act_stride,
                                       bool dense)
{
    const char *wc = (const char *)w, *uc = dense ? NULL : (const char *)w_up, *ac = (const char *)act;
    const size_t es = dense ? 0 : expert_stride;
#define MMA_STAGED(T, TR)                                                                                              \
    case T:                                                                                                            \
        return staged_try<TR>(false, dense, n, 0, wc, uc, es, row_stride, ac, act_stride, 1, NULL, NULL, NULL, 0, 0, \
                              NULL, 0, 0);
    switch (type) {
    MMA_TYPES(MMA_STAGED)
#undef MMA_STAGED
    default:
        return false;
    }
}

static bool mma_dispatch(guild_type_t type, int64_t n, int64_t nrows, const char *w, const char *wu,
                         size_t expert_stride, size_t row_stride, const char *act, size_t act_stride, int act_div,
                         const int32_t *order, const int4 *tiles, const int32_t *n_tiles, int32_t max_tiles,
                         int32_t npairs, bool narrow, float *out, int64_t ldo, cudaStream_t s)
{
#define MMA_CASE(T, TR)                                                                                       \
    case T:                                                                                                   \
        expert_mma_go<TR>(n, nrows, w, wu, expert_stride, row_stride, act, act_stride, act_div, order, tiles, \
                          n_tiles, max_tiles, npairs, narrow, out, ldo, s);                                   \
        return true;
    switch (type) {
    MMA_TYPES(MMA_CASE)
#undef MMA_CASE
    default:
        return false;
    }
}

bool expert_mma_launch(guild_type_t type, int64_t n, int64_t nrows, const char *w, const char *wu,
                       size_t expert_stride, size_t row_stride, const char *act, size_t act_stride, int act_div,
                       const int32_t *order, const int4 *tiles, const int32_t *n_tiles, int32_t max_tiles,
                       float *out, int64_t ldo, cudaStream_t s)
{
    return mma_dispatch(type, n, nrows, w, wu, expert_stride, row_stride, act, act_stride, act_div, order, tiles,
                        n_tiles, max_tiles, 0, false, out, ldo, s);
}

bool expert_mma_dense_launch(guild_type_t type, int64_t n, int64_t nrows, int32_t ntok, const char *w,
                             size_t row_stride, const char *act, size_t act_stride, float *out, int64_t ldo,
                             int block_rows, cudaStream_t s)
{
    const int32_t ntiles = (ntok + CUDA_EXPERT_MMA_TILE - 1) / CUDA_EXPERT_MMA_TILE;
    return mma_dispatch(type, n, nrows, w, NULL, 0, row_stride, act, act_stride, 1, NULL, NULL, NULL, ntiles, ntok,
                        block_rows == 64, out, ldo, s);
}
