/* gpu-worker/dense/cuda/mma_few.cuh — one weight block's finishes on int8 tensor cores for 16 weight rows x a few
 * groups of 8 activation rows: the step of the few-column kernels, the dense products' (matmul.cu's
 * matmul_few_kernel) and the routed experts' grouped by expert (expert_pair_mma.cu). Per (row, column) the exact
 * integer isum/imin of the block (expert_mma_traits.cuh's fragments, exact in any order) and the type's finish
 * with quant_dot.cuh's operations: the float the dp4a kernels add for that block, so a kernel that adds these in
 * block order from 0.0f gives the dp4a kernels' bits. */
#ifndef GUILD_GPU_WORKER_CUDA_MMA_FEW_CUH
#define GUILD_GPU_WORKER_CUDA_MMA_FEW_CUH

#include "gpu-worker/dense/cuda/expert_mma_traits.cuh"
#include "gpu-worker/dense/cuda/mma_s8.cuh"

/* The finishes of weight block w0 (rows g: C registers 0, 1) and w8 (rows g + 8: 2, 3) against activation block b
 * of the first njt (warp-uniform) groups of 8 tokens: ab[j] the row of token 8j + g (B operand), ac[j][i] that of
 * token 8j + 2t + i (C column 2t + i). */
template <typename TR, int NJ>
static __device__ __forceinline__ void mf_block(const typename TR::wblock *w0, const typename TR::wblock *w8,
                                                const char *const (&ab)[NJ], const char *const (&ac)[NJ][2], int b,
                                                int t, int njt, float (&cv)[NJ][4])
{
    typedef typename TR::ablock ablock;
    typedef typename TR::whead whead;
    constexpr int SPC = TR::SPC, KR = TR::KR;
    whead H0, H8;
    TR::head(w0, H0);
    TR::head(w8, H8);
    int isum[NJ][4], imin[NJ][4];
#pragma unroll
    for (int j = 0; j < NJ; j++)
#pragma unroll
        for (int i = 0; i < 4; i++)
            isum[j][i] = imin[j][i] = 0;
#pragma unroll
    for (int c = 0; c < TR::NCH; c++) {
        int Q0[SPC][KR], Q8[SPC][KR];
        TR::chunk(w0, t, c, Q0);
        TR::chunk(w8, t, c, Q8);
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            if (j >= njt)
                break; /* warp-uniform */
            int B[SPC][KR];
            TR::bchunk((const ablock *)ab[j] + b, t, c, B);
#pragma unroll
            for (int i = 0; i < SPC; i++) {
                const int s = TR::sub(c, i);
                int d[4] = {0, 0, 0, 0};
                if (KR == 2)
                    mma_s8_k32(d, Q0[i][0], Q8[i][0], Q0[i][KR - 1], Q8[i][KR - 1], B[i][0], B[i][KR - 1]);
                else
                    mma_s8_k16(d, Q0[i][0], Q8[i][0], B[i][0]);
                const int s0 = TR::scale(H0, s), s8 = TR::scale(H8, s);
                isum[j][0] += s0 * d[0];
                isum[j][1] += s0 * d[1];
                isum[j][2] += s8 * d[2];
                isum[j][3] += s8 * d[3];
                if (TR::HAS_MIN) { /* the sub-block's min in every column: sum_s m_s * (its activations' sum) */
                    const int m0 = TR::minb(H0, s), m8 = TR::minb(H8, s);
                    if (KR == 2)
                        mma_s8_k32(imin[j], m0, m8, m0, m8, B[i][0], B[i][KR - 1]);
                    else
                        mma_s8_k16(imin[j], m0, m8, B[i][0]);
                }
            }
        }
    }
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        if (j >= njt)
            break;
        const float ad0 = TR::act_d((const ablock *)ac[j][0] + b), ad1 = TR::act_d((const ablock *)ac[j][1] + b);
        cv[j][0] = TR::finish(H0, ad0, isum[j][0], imin[j][0]);
        cv[j][1] = TR::finish(H0, ad1, isum[j][1], imin[j][1]);
        cv[j][2] = TR::finish(H8, ad0, isum[j][2], imin[j][2]);
        cv[j][3] = TR::finish(H8, ad1, isum[j][3], imin[j][3]);
    }
}

#endif
