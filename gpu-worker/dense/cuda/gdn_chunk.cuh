/* The gated delta net's recurrence in its chunkwise parallel form (the WY/UT form of the gated delta rule), for
 * prefill batches on the CUDA backend (gdn_chunk.cu, called by attn_gdn.c); decode keeps the one-step form of
 * gdn.cu. For a value head with state S (DK x DK: row r a value dimension, column i a key dimension), rows t of a
 * chunk of at most GDN_CHUNK, log decays g_t, G_t = g_1 + ... + g_t (within the chunk), the state S0 before it:
 *
 *   sequential:  S_t = e^{g_t} S_{t-1} + d_t k_t^T,   d_t = beta_t (v_t - e^{g_t} S_{t-1} k_t),   o_t = S_t q_t
 *   unrolled:    S_t = e^{G_t} S0 + sum_{s<=t} e^{G_t-G_s} d_s k_s^T, so the d_t solve the unit lower triangular
 *                (I + A) D = diag(beta) (V - diag(e^G) K S0^T),  A[t][s] = beta_t e^{G_t-G_s} k_t.k_s  (s < t)
 *   WY form:     D = U - W S0^T  with  U = (I + A)^-1 diag(beta) V,  W = (I + A)^-1 diag(beta e^G) K
 *   outputs:     O = diag(e^G) Q S0^T + (M o Q K^T) D,  M[t][s] = e^{G_t-G_s} (s <= t)
 *   next state:  S_L = e^{G_L} S0 + sum_s e^{G_L-G_s} d_s k_s^T
 *
 * Every exponent is a difference G_t - G_s with s <= t, or G_t itself, so <= 0: nothing overflows. The chunks'
 * W, U, M o QK^T and G are computed for all chunks at once (gdn_chunk_wy, a block per value head and chunk: A by
 * dot products, (I + A)^-1 applied by forward substitution); then the state walks the chunks in order
 * (gdn_chunk_state, a block per value head and GDN_STATE_ROWS rows of its state: the rows of S are independent
 * given W, U and the keys). The outputs are the sequential form's within float rounding (other sums in another
 * order), not bit for bit.
 *
 * The block bodies are written for any number of threads nt (each loop strides by nt, shared arrays are
 * filled by loops, GDN_SYNC between phases), so tests/cuda/check_cuda_gdn_host.cu runs them on the host with
 * one thread against the sequential form.
 */
#ifndef GUILD_GPU_WORKER_CUDA_GDN_CHUNK_CUH
#define GUILD_GPU_WORKER_CUDA_GDN_CHUNK_CUH

#include <math.h>
#include <stdint.h>

#include "gpu-worker/dense/cuda/cuda_kernels.h"

#define GDN_CHUNK CUDA_GDN_CHUNK
#define GDN_CHUNK_MAX_DK 128
#define GDN_STATE_ROWS 16

#ifdef __CUDA_ARCH__
#define GDN_SYNC() __syncthreads()
#else
#define GDN_SYNC() ((void)0)
#endif

/* Rows of n padded to whole chunks: the scratch's rows per value head. */
static __host__ __device__ inline int64_t gdn_chunk_rows(int32_t n)
{
    return ((int64_t)n + GDN_CHUNK - 1) / GDN_CHUNK * GDN_CHUNK;
}

/* State rows per block of gdn_chunk_state. */
static __host__ __device__ inline int32_t gdn_state_rows(int32_t DK)
{
    return DK < GDN_STATE_ROWS ? DK : GDN_STATE_ROWS;
}

/* The scratch of n rows, per value head: W and U ([rows][DK] each), M o QK^T ([chunks][C][C]), G ([rows]). */
typedef struct gdn_chunk_scratch {
    float *W, *U, *QK, *G;
} gdn_chunk_scratch_t;

static __host__ __device__ inline gdn_chunk_scratch_t gdn_chunk_scratch_at(float *base, int32_t n, int32_t DK,
                                                                           int32_t NV)
{
    const int64_t NP = gdn_chunk_rows(n);
    gdn_chunk_scratch_t s;
    s.W = base;
    s.U = s.W + (int64_t)NV * NP * DK;
    s.QK = s.U + (int64_t)NV * NP * DK;
    s.G = s.QK + (int64_t)NV * NP * GDN_CHUNK;
    return s;
}

/* Floats of shared memory the two bodies take (beyond their fixed arrays). */
static __host__ __device__ inline int64_t gdn_chunk_wy_shared(int32_t DK)
{
    return (int64_t)GDN_CHUNK * (DK + 1) + GDN_CHUNK * GDN_CHUNK + GDN_CHUNK * 2 * (int64_t)DK;
}

static __host__ __device__ inline int64_t gdn_chunk_state_shared(int32_t DK)
{
    const int64_t RB = gdn_state_rows(DK);
    return RB * (DK + 1) + (int64_t)GDN_CHUNK * (DK + 1) + GDN_CHUNK * RB;
}

static __host__ __device__ inline int32_t gdn_key_head(int32_t h, int32_t NK, int32_t NV, bool tiled)
{
    return tiled ? h % NK : h / (NV / NK);
}

/* Block (h, c) of thread tid of nt: value head h, chunk c. sh: gdn_chunk_wy_shared(DK) floats, the chunk's keys
 * [C][DK+1], A [C][C], then W | U [C][2 DK]; Gs, bs: [C]. */
static __host__ __device__ inline void gdn_chunk_wy(const float *qkv, int64_t CH, const float *beta, const float *g,
                                                    int32_t n, int32_t DK, int32_t NK, int32_t NV, bool tiled,
                                                    gdn_chunk_scratch_t sc, int32_t h, int32_t c, int32_t tid,
                                                    int32_t nt, float *sh, float *Gs, float *bs)
{
    const int32_t C = GDN_CHUNK, P = DK + 1, DD = 2 * DK;
    float *ks = sh, *A = ks + C * P, *wu = A + C * C;
    const int32_t t0 = c * C, L = n - t0 < C ? n - t0 : C, kh = gdn_key_head(h, NK, NV, tiled);
    const int64_t NP = gdn_chunk_rows(n), nc = NP / C;
    const float *kin = qkv + (int64_t)NK * DK + (int64_t)kh * DK, *qin = qkv + (int64_t)kh * DK;
    const float *vin = qkv + 2 * (int64_t)NK * DK + (int64_t)h * DK;

    for (int32_t e = tid; e < L * DK; e += nt)
        ks[(e / DK) * P + e % DK] = kin[(int64_t)(t0 + e / DK) * CH + e % DK];
    for (int32_t t = tid; t < L; t += nt)
        bs[t] = beta[(int64_t)(t0 + t) * NV + h];
    if (tid == 0) {
        float acc = 0.0f;
        for (int32_t t = 0; t < L; t++) {
            acc += g[(int64_t)(t0 + t) * NV + h];
            Gs[t] = acc;
        }
    }
    GDN_SYNC();
    for (int32_t t = tid; t < L; t += nt)
        sc.G[(int64_t)h * NP + t0 + t] = Gs[t];
    /* A (strictly lower) and M o QK^T (lower with the diagonal); rows past L zero */
    float *qk = sc.QK + ((int64_t)h * nc + c) * C * C;
    for (int32_t e = tid; e < C * C; e += nt) {
        const int32_t t = e / C, s = e % C;
        float a = 0.0f, m = 0.0f;
        if (t < L && s <= t) {
            const float *kt = ks + t * P, *kss = ks + s * P, *qt = qin + (int64_t)(t0 + t) * CH;
            float dk = 0.0f, dq = 0.0f;
            for (int32_t i = 0; i < DK; i++) {
                dk += kt[i] * kss[i];
                dq += qt[i] * kss[i];
            }
            const float decay = expf(Gs[t] - Gs[s]);
            a = s < t ? bs[t] * decay * dk : 0.0f;
            m = decay * dq;
        }
        A[e] = a;
        qk[e] = m;
    }
    GDN_SYNC();
    /* forward substitution, a column of W (j < DK) or U (j >= DK) per thread: row t's right side minus A[t][s]
     * times the rows s < t already solved (the thread's own column) */
    for (int32_t j = tid; j < DD; j += nt) {
        for (int32_t t = 0; t < L; t++) {
            float acc = j < DK ? bs[t] * expf(Gs[t]) * ks[t * P + j] : bs[t] * vin[(int64_t)(t0 + t) * CH + j - DK];
            const float *at = A + t * C;
            for (int32_t s = 0; s < t; s++)
                acc -= at[s] * wu[s * DD + j];
            wu[t * DD + j] = acc;
        }
    }
    GDN_SYNC();
    for (int32_t e = tid; e < L * DD; e += nt) {
        const int32_t t = e / DD, j = e % DD;
        const int64_t row = (int64_t)h * NP + t0 + t;
        if (j < DK)
            sc.W[row * DK + j] = wu[e];
        else
            sc.U[row * DK + j - DK] = wu[e];
    }
}

/* Block (h, y) of thread tid of nt: value head h, state rows r0 = y * RB ... r0 + RB - 1 (RB = gdn_state_rows),
 * through every chunk in order; o[t][h*DK + r] the raw outputs. sh: gdn_chunk_state_shared(DK) floats, those rows
 * of S [RB][DK+1], a chunk's rows of W, then Q, then K [C][DK+1], D [C][RB]; Gs, coef: [C]. */
static __host__ __device__ inline void gdn_chunk_state(const float *qkv, int64_t CH, float *state,
                                                       gdn_chunk_scratch_t sc, float *o, int64_t IN, int32_t n,
                                                       int32_t DK, int32_t NK, int32_t NV, bool tiled, int32_t h,
                                                       int32_t y, int32_t tid, int32_t nt, float *sh, float *Gs,
                                                       float *coef)
{
    const int32_t C = GDN_CHUNK, P = DK + 1, RB = gdn_state_rows(DK);
    float *S = sh, *buf = S + RB * P, *D = buf + C * P;
    const int32_t r0 = y * RB, kh = gdn_key_head(h, NK, NV, tiled);
    const int64_t NP = gdn_chunk_rows(n), nc = NP / C;
    const float *kin = qkv + (int64_t)NK * DK + (int64_t)kh * DK, *qin = qkv + (int64_t)kh * DK;
    float *Sg = state + ((int64_t)h * DK + r0) * DK;

    for (int32_t e = tid; e < RB * DK; e += nt)
        S[(e / DK) * P + e % DK] = Sg[e];
    for (int64_t c = 0; c < nc; c++) {
        const int32_t t0 = (int32_t)c * C, L = n - t0 < C ? n - t0 : C;
        const float *Wc = sc.W + ((int64_t)h * NP + t0) * DK, *Uc = sc.U + ((int64_t)h * NP + t0) * DK;
        for (int32_t e = tid; e < L * DK; e += nt)
            buf[(e / DK) * P + e % DK] = Wc[e];
        for (int32_t t = tid; t < L; t += nt)
            Gs[t] = sc.G[(int64_t)h * NP + t0 + t];
        GDN_SYNC();
        /* D[s][r] = U[s][r] - W[s] . S[r] */
        for (int32_t e = tid; e < L * RB; e += nt) {
            const int32_t s = e / RB, r = e % RB;
            const float *ws = buf + s * P, *sr = S + r * P;
            float acc = 0.0f;
            for (int32_t i = 0; i < DK; i++)
                acc += ws[i] * sr[i];
            D[e] = Uc[(int64_t)s * DK + r0 + r] - acc;
        }
        GDN_SYNC();
        for (int32_t e = tid; e < L * DK; e += nt)
            buf[(e / DK) * P + e % DK] = qin[(int64_t)(t0 + e / DK) * CH + e % DK];
        GDN_SYNC();
        /* O[t][r] = e^{G_t} q_t . S[r] + sum_{s <= t} (M o QK^T)[t][s] D[s][r] */
        const float *qk = sc.QK + ((int64_t)h * nc + c) * C * C;
        for (int32_t e = tid; e < L * RB; e += nt) {
            const int32_t t = e / RB, r = e % RB;
            const float *qt = buf + t * P, *sr = S + r * P, *m = qk + (int64_t)t * C;
            float acc = 0.0f;
            for (int32_t i = 0; i < DK; i++)
                acc += qt[i] * sr[i];
            acc *= expf(Gs[t]);
            for (int32_t s = 0; s <= t; s++)
                acc += m[s] * D[s * RB + r];
            o[(int64_t)(t0 + t) * IN + (int64_t)h * DK + r0 + r] = acc;
        }
        GDN_SYNC();
        for (int32_t e = tid; e < L * DK; e += nt)
            buf[(e / DK) * P + e % DK] = kin[(int64_t)(t0 + e / DK) * CH + e % DK];
        for (int32_t t = tid; t < L; t += nt)
            coef[t] = expf(Gs[L - 1] - Gs[t]);
        GDN_SYNC();
        /* S[r] = e^{G_L} S[r] + sum_s e^{G_L-G_s} D[s][r] k_s */
        const float eL = expf(Gs[L - 1]);
        for (int32_t e = tid; e < RB * DK; e += nt) {
            const int32_t r = e / DK, i = e % DK;
            float acc = S[r * P + i] * eL;
            for (int32_t s = 0; s < L; s++)
                acc += coef[s] * D[s * RB + r] * buf[s * P + i];
            S[r * P + i] = acc;
        }
        GDN_SYNC();
    }
    for (int32_t e = tid; e < RB * DK; e += nt)
        Sg[e] = S[(e / DK) * P + e % DK];
}

#endif
