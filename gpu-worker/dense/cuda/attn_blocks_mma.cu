/* cuda_attention_blocks_mma: causal prefill attention on tensor cores over the block-format KV caches (q8_0,
 * q4_0 and k8v4's Q8_0 keys with rotated Q4_0 values; gpu-worker/dense/kv_format.h), head dimension 64 or 128.
 *
 * attn_prefill_mma.cu's flash attention (its tiles, its masks, its split Q and P, its online softmax: the steps of
 * attn_mma_tiles.cuh), with the cache's blocks as the mma operands: a block's element is q * d (an integer q of
 * 8 or 4 bits, the block's f16 scale d), and q is exact in f16, so the tensor cores take the integers and the
 * scales are applied in f32 around them:
 * - scores: per block of 32 head dims (two k-steps) a fresh accumulator Q K_q^T, times each key's d of that
 *   block, added to the key's score;
 * - P V: the weights of a block of 32 value dims are P times each key's d of that block (then split hi + lo as
 *   P is), over the integer V columns. d's magnitude is folded out first by the tile's largest |d| of the block
 *   (a power of two, given back to the product in f32), so P' keeps P's range in f16.
 * So the operands carry the same precision as the f16 kernel's (Q and P about 2^-22, K and V exact) and the
 * result is cpu_attention_head_cache's within the attention tolerance, not bit for bit: the tensor cores' f32
 * sums have their own order and rounding, as for every mma kernel here.
 *
 * A key tile's blocks are copied raw by cp.async (4-byte pieces: a head's blocks start on 4-byte boundaries
 * for these head dimensions) into one of two stages while the previous tile is computed; then the block's
 * threads unpack the tile into f16 integer tiles (the ldmatrix layout of attn_prefill_mma.cu) and f32 scales.
 * Rotated values: each row's output goes through the Walsh-Hadamard transform in kv_hadamard's order (the
 * butterflies, then the scale), in shared memory, by the warp that owns the row.
 *
 * The backend takes this kernel for batches of more than CUDA_DECODE_ROWS rows (prompt prefill); smaller batches
 * read the blocks with cuda_attention_blocks, whose rows are the same bits in any batch split (backend.h). */
#include <cuda_fp16.h>

#include "gpu-worker/dense/cuda/attn_mma_tiles.cuh"
#include "gpu-worker/dense/cuda/kv_blocks.cuh"

#define BM_THREADS (AM_WARPS * WARP_SIZE)

/* 4 bytes global -> shared, asynchronous; zero-filled when !in (src is then not read). */
static __device__ __forceinline__ void cp_async4(void *dst, const void *src, bool in)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(in ? 4 : 0));
}

/* Two f16 integers from bits: (lo half, hi half) = (1024 + a, 1024 + b) for bytes a, b of t (the f16 of 1024 has
 * exponent byte 0x64 and a zero mantissa, so the byte is the mantissa's low bits: exact), less `off`. */
static __device__ __forceinline__ uint32_t bm_int_pair(uint32_t t, float off)
{
    __half2 h;
    memcpy(&h, &t, sizeof h);
    h = __hsub2(h, __float2half2_rn(off)); /* integers below 2^11: exact */
    uint32_t r;
    memcpy(&r, &h, sizeof r);
    return r;
}

/* One block of 32 elements (Q8: quant_block_q8_0, else quant_block_q4_0) at p: its integers into dst[0..32) as
 * f16 (exact), its scale returned. Q8: a pair of int8 (2-byte aligned) as bytes offset by 128, then less 1152;
 * Q4: bytes j, j + 1 hold elements j, j + 1 in their low nibbles and j + 16, j + 17 in their high ones, less
 * 1032. */
template <bool Q8>
static __device__ __forceinline__ float bm_unpack(const unsigned char *p, __half *dst)
{
    const float d = quant_f16_to_f32(*(const uint16_t *)p);
    const unsigned char *qs = p + 2;
    if (Q8) {
#pragma unroll
        for (int e = 0; e < 32; e += 2) {
            const uint32_t x = (uint32_t)*(const uint16_t *)(qs + e) ^ 0x8080u;
            *(uint32_t *)(dst + e) = bm_int_pair(__byte_perm(x, 0x64u, 0x4140), 1152.0f);
        }
    } else {
#pragma unroll
        for (int j = 0; j < 16; j += 2) {
            const uint32_t t = __byte_perm((uint32_t)*(const uint16_t *)(qs + j), 0x64u, 0x4140);
            *(uint32_t *)(dst + j) = bm_int_pair((t & 0xff0fff0fu), 1032.0f);
            *(uint32_t *)(dst + 16 + j) = bm_int_pair(((t >> 4) & 0x000f000fu) | 0x64006400u, 1032.0f);
        }
    }
    return d;
}

/* Shared memory of a block: the unpacked tile (K and V integers [AM_BK][HD + 8] halves each, their scales
 * [AM_BK][HD / 32] floats each), then two stages of raw blocks (AM_BK keys' K head slices, then their V slices). */
template <int HD, bool KQ8, bool VQ8>
struct bm_layout {
    static constexpr int LD = HD + 8, NB = HD / 32;
    static constexpr int KH = NB * (KQ8 ? 34 : 18), VH = NB * (VQ8 ? 34 : 18); /* a head's bytes in a cache row */
    static constexpr size_t unpacked = (size_t)2 * AM_BK * LD * sizeof(__half) + (size_t)2 * AM_BK * NB * 4;
    static constexpr size_t stage = (size_t)AM_BK * (KH + VH);
    static constexpr size_t bytes = unpacked + 2 * stage;
    static_assert(KH % 4 == 0 && VH % 4 == 0, "a head's blocks in 4-byte pieces");
    static_assert((size_t)AM_BQ * HD * 4 <= (size_t)2 * AM_BK * LD * sizeof(__half), "the rotated rows fit");
};

/* q: [n_tok][n_head * HD]; kc, vc: one layer's rows (k_row, v_row bytes apart), head hkv's blocks at hkv * KH
 * (VH) bytes; out: [n_tok][n_head * HD]; row t at position kv0 + t. */
template <int HD, bool KQ8, bool VQ8, bool ROT>
static __global__ void __launch_bounds__(BM_THREADS, 2)
    attn_blocks_mma_kernel(float *__restrict__ out, const float *__restrict__ q, const unsigned char *__restrict__ kc,
                           const unsigned char *__restrict__ vc, int64_t k_row, int64_t v_row, int n_tok, int kv0,
                           int n_head, int group, float scale, int window, const float *__restrict__ sinks,
                           float rot_scale)
{
    typedef bm_layout<HD, KQ8, VQ8> L;
    constexpr int KS = HD / 16, NO = HD / 8, NS = AM_BK / 8, LD = L::LD, NB = L::NB;
    constexpr int KH = L::KH, VH = L::VH, KW = KH / 4, VW = VH / 4;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __half *kq = (__half *)smem_raw, *vq = kq + AM_BK * LD; /* [AM_BK][LD] each */
    float *dks = (float *)(vq + AM_BK * LD), *dvs = dks + AM_BK * NB; /* [AM_BK][NB] each */
    unsigned char *raw = smem_raw + L::unpacked;                    /* [2][L::stage] */

    const int tile = (int)(gridDim.x - 1 - blockIdx.x), h = (int)blockIdx.y;
    const int warp = (int)threadIdx.x / WARP_SIZE, lane = (int)threadIdx.x % WARP_SIZE;
    const int g = lane >> 2, t4 = lane & 3;
    const int hkv = h / group;
    const int t0 = tile * AM_BQ;
    const int nq = min(AM_BQ, n_tok - t0);
    const int last_pos = kv0 + t0 + nq - 1;
    const int n_kt = last_pos / AM_BK + 1;
    const int r0 = warp * 16 + g, r1 = r0 + 8;
    const int pos0 = kv0 + t0 + r0, pos1 = pos0 + 8;
    const int wfirst = kv0 + t0 + warp * 16;
    const int wlast = min(wfirst + 15, last_pos);
    const bool active = warp * 16 < nq;
    const int lo0 = window > 0 && pos0 + 1 > window ? pos0 + 1 - window : 0;
    const int lo1 = window > 0 && pos1 + 1 > window ? pos1 + 1 - window : 0;
    const int wlo = window > 0 && wfirst + 1 > window ? wfirst + 1 - window : 0;
    const int blo = window > 0 && kv0 + t0 + 1 > window ? kv0 + t0 + 1 - window : 0;
    const int kt_first = blo / AM_BK;

    /* Q fragments, split, each row scaled into f16's normal range (attn_prefill_mma.cu) */
    uint32_t qh[KS][4], ql[KS][4];
    float rs0, rs1;
    {
        const bool ok0 = r0 < nq, ok1 = r1 < nq;
        const float *q0 = q + ((int64_t)(t0 + (ok0 ? r0 : 0)) * n_head + h) * HD + 2 * t4;
        const float *q1 = q + ((int64_t)(t0 + (ok1 ? r1 : 0)) * n_head + h) * HD + 2 * t4;
        am_q_split<HD>(q0, q1, ok0, ok1, scale, qh, ql, rs0, rs1);
    }

    float o[NO][4];
    am_zero(o);
    float m0 = -INFINITY, m1 = -INFINITY;
    float l0 = 0.0f, l1 = 0.0f;

    const unsigned char *kbase = kc + (int64_t)hkv * KH, *vbase = vc + (int64_t)hkv * VH;
    auto load_tile = [&](int kt) {
        unsigned char *rk = raw + (kt & 1) * L::stage, *rv = rk + AM_BK * KH;
        for (int i = (int)threadIdx.x; i < AM_BK * KW; i += BM_THREADS) {
            const int r = i / KW, w = i % KW, j = kt * AM_BK + r;
            const bool in = j <= last_pos;
            cp_async4(rk + r * KH + 4 * w, kbase + (int64_t)(in ? j : 0) * k_row + 4 * w, in);
        }
        for (int i = (int)threadIdx.x; i < AM_BK * VW; i += BM_THREADS) {
            const int r = i / VW, w = i % VW, j = kt * AM_BK + r;
            const bool in = j <= last_pos;
            cp_async4(rv + r * VH + 4 * w, vbase + (int64_t)(in ? j : 0) * v_row + 4 * w, in);
        }
        cp_async_commit();
    };

    load_tile(kt_first);
    for (int kt = kt_first; kt < n_kt; kt++) {
        if (kt + 1 < n_kt) {
            load_tile(kt + 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads(); /* tile kt's raw blocks are in shared memory; every warp is done with the last unpacked */
        {
            const unsigned char *rk = raw + (kt & 1) * L::stage, *rv = rk + AM_BK * KH;
            for (int i = (int)threadIdx.x; i < AM_BK * NB; i += BM_THREADS) {
                const int r = i / NB, b = i % NB;
                dks[i] = bm_unpack<KQ8>(rk + r * KH + b * (KQ8 ? 34 : 18), kq + r * LD + 32 * b);
                dvs[i] = bm_unpack<VQ8>(rv + r * VH + b * (VQ8 ? 34 : 18), vq + r * LD + 32 * b);
            }
        }
        __syncthreads(); /* the unpacked tile for every warp */
        const int k0 = kt * AM_BK;
        if (active && k0 <= wlast && k0 + AM_BK > wlo) {
            /* S = Q K^T: per 16 keys and block of 32 dims, the integer product (two k-steps, Q split) times each
             * key's scale of the block, added to its score (a fresh accumulator per block: few live registers) */
            float s[NS][4];
            am_zero(s);
#pragma unroll
            for (int np = 0; np < NS / 2; np++)
#pragma unroll
                for (int b = 0; b < NB; b++) {
                    float u[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
                    for (int kk = 2 * b; kk < 2 * b + 2; kk++) {
                        uint32_t bf[4];
                        ldmatrix_x4(bf, kq + am_k_ldsm_offset(lane, np, kk, LD));
                        mma_f16(u[0], qh[kk], bf[0], bf[1]);
                        mma_f16(u[0], ql[kk], bf[0], bf[1]);
                        mma_f16(u[1], qh[kk], bf[2], bf[3]);
                        mma_f16(u[1], ql[kk], bf[2], bf[3]);
                    }
#pragma unroll
                    for (int x = 0; x < 2; x++) {
                        const int nt = 2 * np + x, j = 8 * nt + 2 * t4;
                        const float d0 = dks[j * NB + b], d1 = dks[(j + 1) * NB + b];
                        s[nt][0] = __fmaf_rn(u[x][0], d0, s[nt][0]);
                        s[nt][1] = __fmaf_rn(u[x][1], d1, s[nt][1]);
                        s[nt][2] = __fmaf_rn(u[x][2], d0, s[nt][2]);
                        s[nt][3] = __fmaf_rn(u[x][3], d1, s[nt][3]);
                    }
                }
            const bool diag = k0 + AM_BK - 1 > wfirst;
            const bool early = window > 0 && k0 < (wlast + 1 > window ? wlast + 1 - window : 0);
            float mx0 = m0, mx1 = m1;
            am_mask_tile(s, k0, t4, diag, early, pos0, pos1, lo0, lo1, rs0, rs1, mx0, mx1);
            /* the online softmax (am_softmax_tile's steps), P kept unsplit in s */
            mx0 = am_quad_max(mx0);
            mx1 = am_quad_max(mx1);
            const float c0 = mx0 == -INFINITY ? 1.0f : expf(m0 - mx0);
            const float c1 = mx1 == -INFINITY ? 1.0f : expf(m1 - mx1);
            m0 = mx0;
            m1 = mx1;
            const float e0 = mx0 == -INFINITY ? 0.0f : mx0, e1 = mx1 == -INFINITY ? 0.0f : mx1;
            float lt0 = 0.0f, lt1 = 0.0f;
#pragma unroll
            for (int kk = 0; kk < NS / 2; kk++) {
                float *a = s[2 * kk], *c = s[2 * kk + 1];
                a[0] = expf(a[0] - e0), a[1] = expf(a[1] - e0), a[2] = expf(a[2] - e1), a[3] = expf(a[3] - e1);
                c[0] = expf(c[0] - e0), c[1] = expf(c[1] - e0), c[2] = expf(c[2] - e1), c[3] = expf(c[3] - e1);
                lt0 = lt0 + a[0] + a[1] + c[0] + c[1];
                lt1 = lt1 + a[2] + a[3] + c[2] + c[3];
            }
            l0 = l0 * c0 + lt0;
            l1 = l1 * c1 + lt1;

            /* O = O c + P' V per block of 32 value dims: P' = P d 2^-eb AM_PSCALE, built a k-step at a time,
             * the block's products (output tiles 4b .. 4b+3) times 2^eb */
#pragma unroll
            for (int b = 0; b < NB; b++) {
                float dm = fmaxf(fabsf(dvs[lane * NB + b]), fabsf(dvs[(lane + 32) * NB + b]));
#pragma unroll
                for (int x = 16; x > 0; x >>= 1)
                    dm = fmaxf(dm, __shfl_xor_sync(FULL_MASK, dm, x));
                const int eb = dm > 0.0f ? ilogbf(dm) : 0;
                const float fb = scalbnf(AM_PSCALE, -eb), ob = scalbnf(1.0f, eb);
                float t[4][4];
                am_zero(t);
#pragma unroll
                for (int kk = 0; kk < AM_BK / 16; kk++) {
                    const int ja = 16 * kk + 2 * t4, jb = ja + 8;
                    const float wa0 = dvs[ja * NB + b] * fb, wa1 = dvs[(ja + 1) * NB + b] * fb;
                    const float wb0 = dvs[jb * NB + b] * fb, wb1 = dvs[(jb + 1) * NB + b] * fb;
                    const float *a = s[2 * kk], *c = s[2 * kk + 1];
                    uint32_t ph[4], pl[4];
                    am_split_f16x2(a[0] * wa0, a[1] * wa1, &ph[0], &pl[0]);
                    am_split_f16x2(a[2] * wa0, a[3] * wa1, &ph[1], &pl[1]);
                    am_split_f16x2(c[0] * wb0, c[1] * wb1, &ph[2], &pl[2]);
                    am_split_f16x2(c[2] * wb0, c[3] * wb1, &ph[3], &pl[3]);
#pragma unroll
                    for (int x = 0; x < 2; x++) {
                        uint32_t bf[4];
                        ldmatrix_x4_trans(bf, vq + am_v_ldsm_offset(lane, kk, 2 * b + x, LD));
                        mma_f16(t[2 * x], ph, bf[0], bf[1]);
                        mma_f16(t[2 * x], pl, bf[0], bf[1]);
                        mma_f16(t[2 * x + 1], ph, bf[2], bf[3]);
                        mma_f16(t[2 * x + 1], pl, bf[2], bf[3]);
                    }
                }
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    float *ou = o[4 * b + u];
                    ou[0] = ou[0] * c0 + t[u][0] * ob;
                    ou[1] = ou[1] * c0 + t[u][1] * ob;
                    ou[2] = ou[2] * c1 + t[u][2] * ob;
                    ou[3] = ou[3] * c1 + t[u][3] * ob;
                }
            }
        }
    }

    float f0, f1;
    am_rows_end(l0, l1, m0, m1, sinks, h, f0, f1);
    if (!ROT) {
        am_store_rows<HD, NO>(out, o, t0, r0, r1, nq, n_head, h, t4, sinks != NULL, f0, f1, l0, l1);
        return;
    }
    /* rotated values: the warp's 16 rows into shared memory (over the unpacked tile, once every warp is done
     * with it), kv_hadamard's butterflies and scale per row, then out */
    __syncthreads();
    float *os = (float *)smem_raw + (size_t)warp * 16 * HD; /* the warp's rows [16][HD] */
#pragma unroll
    for (int nt = 0; nt < NO; nt++) {
        const int d = 8 * nt + 2 * t4;
        os[g * HD + d] = sinks ? o[nt][0] * f0 / l0 : o[nt][0] / l0;
        os[g * HD + d + 1] = sinks ? o[nt][1] * f0 / l0 : o[nt][1] / l0;
        os[(g + 8) * HD + d] = sinks ? o[nt][2] * f1 / l1 : o[nt][2] / l1;
        os[(g + 8) * HD + d + 1] = sinks ? o[nt][3] * f1 / l1 : o[nt][3] / l1;
    }
    __syncwarp();
    for (int len = 1; len < HD; len <<= 1) {
        for (int i = lane; i < 16 * (HD / 2); i += WARP_SIZE) {
            const int row = i / (HD / 2), pi = i % (HD / 2);
            float *x = os + row * HD;
            const int j = (pi / len) * 2 * len + pi % len;
            const float a = x[j], b = x[j + len];
            x[j] = a + b;
            x[j + len] = a - b;
        }
        __syncwarp();
    }
    for (int i = lane; i < 16 * HD; i += WARP_SIZE) {
        const int row = i / HD, d = i % HD, r = warp * 16 + row;
        if (r < nq)
            out[((int64_t)(t0 + r) * n_head + h) * HD + d] = os[i] * rot_scale;
    }
}

template <int HD, bool KQ8, bool VQ8, bool ROT>
static cudaError_t bm_launch(float *out, const float *q, const void *kc, const void *vc, int64_t k_row,
                             int64_t v_row, int n_tok, int kv0, int n_head, int group, float scale, int window,
                             const float *sinks, float rot_scale, cudaStream_t s)
{
    const size_t smem = bm_layout<HD, KQ8, VQ8>::bytes;
    cudaError_t e = cudaFuncSetAttribute(attn_blocks_mma_kernel<HD, KQ8, VQ8, ROT>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess)
        return e;
    const dim3 grid((unsigned)((n_tok + AM_BQ - 1) / AM_BQ), (unsigned)n_head);
    attn_blocks_mma_kernel<HD, KQ8, VQ8, ROT><<<grid, BM_THREADS, smem, s>>>(
        out, q, (const unsigned char *)kc, (const unsigned char *)vc, k_row, v_row, n_tok, kv0, n_head, group,
        scale, window, sinks, rot_scale);
    return cudaSuccess;
}

template <int HD>
static cudaError_t bm_dispatch(bool kq8, bool v_rot, float *out, const float *q, const void *kc, const void *vc,
                               int64_t k_row, int64_t v_row, int n_tok, int kv0, int n_head, int group, float scale,
                               int window, const float *sinks, float rot_scale, cudaStream_t s)
{
    if (v_rot)
        return bm_launch<HD, true, false, true>(out, q, kc, vc, k_row, v_row, n_tok, kv0, n_head, group, scale,
                                                window, sinks, rot_scale, s);
    if (kq8)
        return bm_launch<HD, true, true, false>(out, q, kc, vc, k_row, v_row, n_tok, kv0, n_head, group, scale,
                                                window, sinks, rot_scale, s);
    return bm_launch<HD, false, false, false>(out, q, kc, vc, k_row, v_row, n_tok, kv0, n_head, group, scale,
                                              window, sinks, rot_scale, s);
}

extern "C" bool cuda_attention_blocks_mma_takes(guild_type_t kt, guild_type_t vt, bool v_rot, int32_t head_dim,
                                                const float *out, const float *q, const void *k_cache,
                                                const void *v_cache)
{
    /* the three formats of kv_format.h: q8_0 (Q8_0 / Q8_0), q4_0 (Q4_0 / Q4_0), k8v4 (Q8_0 / rotated Q4_0) */
    const bool fmt = v_rot ? kt == GUILD_TYPE_Q8_0 && vt == GUILD_TYPE_Q4_0
                           : (kt == GUILD_TYPE_Q8_0 || kt == GUILD_TYPE_Q4_0) && vt == kt;
    return fmt && (head_dim == 64 || head_dim == 128) && (uintptr_t)k_cache % 4 == 0 && (uintptr_t)v_cache % 4 == 0 &&
           (uintptr_t)q % 8 == 0 && (uintptr_t)out % 8 == 0;
}

extern "C" int cuda_attention_blocks_mma(float *out, const float *q, guild_type_t kt, guild_type_t vt, bool v_rot,
                                         const void *k_cache, const void *v_cache, int32_t n_tok, int32_t kv0,
                                         int32_t n_head, int32_t n_head_kv, int32_t head_dim, float scale,
                                         const cuda_attn_ext_t *ext, cudaStream_t s, guild_err_t *err)
{
    if (n_tok <= 0)
        return 0;
    if (n_head_kv <= 0 || n_head % n_head_kv || n_head > 65535 || kv0 < 0)
        return guild_err_set(err, "cuda: attention (blocks, mma): %d query heads over %d KV heads, %d rows after %d",
                             n_head, n_head_kv, n_tok, kv0);
    if (!cuda_attention_blocks_mma_takes(kt, vt, v_rot, head_dim, out, q, k_cache, v_cache))
        return guild_err_set(err,
                             "cuda: attention (blocks, mma): needs a q8_0, q4_0 or k8v4 cache (types %d, %d%s), head "
                             "dimension 64 or 128 (%d), 4-byte aligned caches and 8-byte aligned q/out",
                             (int)kt, (int)vt, v_rot ? " rotated" : "", head_dim);
    const int window = ext && ext->window > 0 ? ext->window : 0;
    const float *sinks = ext ? ext->sinks : NULL;
    const int64_t KV = (int64_t)n_head_kv * head_dim;
    const int64_t k_row = KV / 32 * (kt == GUILD_TYPE_Q8_0 ? 34 : 18), v_row = KV / 32 * (vt == GUILD_TYPE_Q8_0 ? 34 : 18);
    const float rot_scale = (float)(1.0 / sqrt((double)head_dim)); /* kv_hadamard's */
    const int group = n_head / n_head_kv;
    const bool kq8 = kt == GUILD_TYPE_Q8_0;
    const cudaError_t e =
        head_dim == 64 ? bm_dispatch<64>(kq8, v_rot, out, q, k_cache, v_cache, k_row, v_row, n_tok, kv0, n_head, group,
                                         scale, window, sinks, rot_scale, s)
                       : bm_dispatch<128>(kq8, v_rot, out, q, k_cache, v_cache, k_row, v_row, n_tok, kv0, n_head,
                                          group, scale, window, sinks, rot_scale, s);
    if (e != cudaSuccess)
        return guild_err_set(err, "cuda: attention (blocks, mma): %s", cudaGetErrorString(e));
    return cuda_launch_check("attention (blocks, mma)", err);
}
