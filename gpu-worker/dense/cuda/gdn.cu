/* The gated delta net's steps (MODEL_ATTN_GDN, gpu-worker/dense/cuda/attn_gdn.c), each the CPU backend's
 * (gpu-worker/dense/cpu/attn_gdn.c) in its sequential form: every row of the batch is one step of the
 * recurrence, in order, so a prefill in chunks and decoding give the same bits; and the output gate of gated
 * attention (MODEL_GQA_OUT_GATE). The float operations are the CPU's in its order (sums over ascending index,
 * double where the CPU sums in double); expf and log1pf are CUDA's (within 2 ulp of the C library's).
 */
#include "gpu-worker/dense/cuda/cuda_common.cuh"

#define GDN_THREADS 128
#define GDN_MAX_STATE 1024 /* value-head rows: one thread each */

static __device__ __forceinline__ float gdn_silu(float x)
{
    return x / (1.0f + expf(-x));
}

static __device__ __forceinline__ float gdn_sigmoid(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

/* one thread per channel: the rows in order through the channel's last K-1 inputs, then silu */
static __global__ void gdn_conv_kernel(float *qkv, int64_t CH, int32_t n, const float *__restrict__ w, float *state,
                                       int32_t K, float *ring, int64_t ring_row)
{
    const int64_t ch = (int64_t)blockIdx.x * GDN_THREADS + threadIdx.x;
    if (ch >= CH)
        return;
    const float *wc = w + ch * K;
    float *s = state + ch * (K - 1);
    for (int32_t t = 0; t < n; t++) {
        float *x = qkv + (int64_t)t * CH + ch;
        float sum = 0.0f;
        for (int32_t k = 0; k < K - 1; k++)
            sum += s[k] * wc[k];
        sum += *x * wc[K - 1];
        if (K > 1) {
            for (int32_t k = 0; k < K - 2; k++)
                s[k] = s[k + 1];
            s[K - 2] = *x;
        }
        *x = gdn_silu(sum);
        if (ring)
            for (int32_t k = 0; k < K - 1; k++)
                ring[t * ring_row + ch * (K - 1) + k] = s[k];
    }
}

extern "C" int cuda_gdn_conv(float *qkv, int64_t CH, int32_t n, const float *w, float *state, int32_t K,
                             float *ring, int64_t ring_row, cudaStream_t s, guild_err_t *err)
{
    if (n <= 0)
        return 0;
    if (K < 1 || CH < 1)
        return guild_err_set(err, "cuda: gdn_conv: %d taps, %lld channels", K, (long long)CH);
    gdn_conv_kernel<<<(unsigned)((CH + GDN_THREADS - 1) / GDN_THREADS), GDN_THREADS, 0, s>>>(qkv, CH, n, w, state, K, ring,
                                                                                               ring_row);
    return cuda_launch_check("gdn_conv", err);
}

/* thread (t, j): j < 2*NK a key head of row t L2-normalised (the query heads also times 1/sqrt(DK)); else value
 * head j - 2*NK's beta and the decay's log */
static __global__ void gdn_prep_kernel(float *qkv, int64_t CH, const float *__restrict__ ba, float *beta, float *g,
                                       const float *__restrict__ dt, const float *__restrict__ A, int32_t n,
                                       int32_t DK, int32_t NK, int32_t NV, bool split, float eps)
{
    const int64_t task = (int64_t)blockIdx.x * GDN_THREADS + threadIdx.x;
    const int32_t per = 2 * NK + NV;
    if (task >= (int64_t)n * per)
        return;
    const int64_t t = task / per;
    const int32_t j = (int32_t)(task % per);
    if (j < 2 * NK) {
        float *x = qkv + t * CH + (int64_t)j * DK;
        double sum = 0.0;
        for (int32_t i = 0; i < DK; i++)
            sum += (double)(x[i] * x[i]);
        const float scale = 1.0f / fmaxf(sqrtf((float)sum), eps);
        for (int32_t i = 0; i < DK; i++)
            x[i] *= scale;
        if (j < NK) {
            const float qscale = 1.0f / sqrtf((float)DK);
            for (int32_t i = 0; i < DK; i++)
                x[i] *= qscale;
        }
        return;
    }
    const int32_t h = j - 2 * NK, R = NV / NK;
    const float *row = ba + t * 2 * NV;
    float bl, al;
    if (split) {
        bl = row[h];
        al = row[NV + h];
    } else {
        bl = row[(h / R) * 2 * R + h % R];
        al = row[(h / R) * 2 * R + R + h % R];
    }
    const float x = al + dt[h];
    const float sp = x > 20.0f ? x : log1pf(expf(x));
    beta[t * NV + h] = gdn_sigmoid(bl);
    g[t * NV + h] = sp * A[h];
}

extern "C" int cuda_gdn_prep(float *qkv, int64_t CH, const float *ba, float *beta, float *g, const float *dt,
                             const float *A, int32_t n, int32_t DK, int32_t NK, int32_t NV, bool split, float eps,
                             cudaStream_t s, guild_err_t *err)
{
    if (n <= 0)
        return 0;
    if (NK < 1 || NV % NK)
        return guild_err_set(err, "cuda: gdn_prep: %d value heads over %d key heads", NV, NK);
    const int64_t total = (int64_t)n * (2 * NK + NV);
    gdn_prep_kernel<<<(unsigned)((total + GDN_THREADS - 1) / GDN_THREADS), GDN_THREADS, 0, s>>>(
        qkv, CH, ba, beta, g, dt, A, n, DK, NK, NV, split, eps);
    return cuda_launch_check("gdn_prep", err);
}

/* block h (a value head), thread r (a row of its state): every row of the batch in order through the state,
 * then the head's output RMS-normed and gated (cpu_rmsnorm's order: the squares summed in double by one thread,
 * ascending) */
static __global__ void gdn_delta_kernel(const float *__restrict__ qkv, int64_t CH, const float *__restrict__ beta,
                                        const float *__restrict__ g, float *state, const float *__restrict__ z,
                                        const float *__restrict__ norm_w, float *o, int64_t IN, int32_t n,
                                        int32_t DK, int32_t NK, int32_t NV, bool tiled, float eps, float *ring,
                                        int64_t ring_row)
{
    extern __shared__ float sh[]; /* k[DK], q[DK], o[DK] */
    float *ks = sh, *qs = sh + DK, *os = sh + 2 * DK;
    __shared__ float scale_s;
    const int32_t h = blockIdx.x, r = threadIdx.x;
    const int32_t kh = tiled ? h % NK : h / (NV / NK);
    float *S = state + ((int64_t)h * DK + r) * DK;
    for (int32_t t = 0; t < n; t++) {
        const float *row = qkv + (int64_t)t * CH;
        ks[r] = row[(int64_t)NK * DK + (int64_t)kh * DK + r];
        qs[r] = row[(int64_t)kh * DK + r];
        __syncthreads();
        const float decay = expf(g[(int64_t)t * NV + h]), b = beta[(int64_t)t * NV + h];
        const float v = row[2 * (int64_t)NK * DK + (int64_t)h * DK + r];
        float sk = 0.0f;
        for (int32_t i = 0; i < DK; i++) {
            S[i] *= decay;
            sk += S[i] * ks[i];
        }
        const float d = (v - sk) * b;
        float sq = 0.0f;
        for (int32_t i = 0; i < DK; i++) {
            S[i] += ks[i] * d;
            sq += S[i] * qs[i];
        }
        os[r] = sq;
        if (ring) {
            float *kept = ring + t * ring_row + ((int64_t)h * DK + r) * DK;
            for (int32_t i = 0; i < DK; i++)
                kept[i] = S[i];
        }
        __syncthreads();
        if (r == 0) {
            double sum = 0.0;
            for (int32_t i = 0; i < DK; i++)
                sum += (double)(os[i] * os[i]);
            const float mean = (float)(sum / DK);
            scale_s = 1.0f / sqrtf(mean + eps);
        }
        __syncthreads();
        const float zr = z[(int64_t)t * IN + (int64_t)h * DK + r];
        o[(int64_t)t * IN + (int64_t)h * DK + r] = ((sq * scale_s) * norm_w[r]) * gdn_silu(zr);
        __syncthreads(); /* ks, qs, os are reused by the next row */
    }
}

extern "C" int cuda_gdn_delta(const float *qkv, int64_t CH, const float *beta, const float *g, float *state,
                              const float *z, const float *norm_w, float *o, int64_t IN, int32_t n, int32_t DK,
                              int32_t NK, int32_t NV, bool tiled, float eps, float *ring, int64_t ring_row,
                              cudaStream_t s, guild_err_t *err)
{
    if (n <= 0)
        return 0;
    if (DK < 1 || DK > GDN_MAX_STATE || NK < 1 || NV % NK)
        return guild_err_set(err, "cuda: gdn_delta: heads of %d (at most %d), %d value heads over %d key heads", DK,
                             GDN_MAX_STATE, NV, NK);
    gdn_delta_kernel<<<(unsigned)NV, (unsigned)DK, 3 * (size_t)DK * sizeof(float), s>>>(
        qkv, CH, beta, g, state, z, norm_w, o, IN, n, DK, NK, NV, tiled, eps, ring, ring_row);
    return cuda_launch_check("gdn_delta", err);
}

/* gated attention: q and gate out of the projection's rows (each head's query, then its gate) */
static __global__ void qg_split_kernel(const float *__restrict__ qg, float *q, float *gate, int32_t HD, int64_t Q,
                                       int64_t total)
{
    const int64_t k = (int64_t)blockIdx.x * GDN_THREADS + threadIdx.x;
    if (k >= total)
        return;
    const int64_t t = k / Q, e = k % Q, h = e / HD, d = e % HD;
    const float *src = qg + t * 2 * Q + h * 2 * HD + d;
    q[k] = src[0];
    gate[k] = src[HD];
}

extern "C" int cuda_qg_split(const float *qg, float *q, float *gate, int32_t n, int32_t n_head, int32_t head_dim,
                             cudaStream_t s, guild_err_t *err)
{
    const int64_t Q = (int64_t)n_head * head_dim, total = Q * n;
    if (total <= 0)
        return 0;
    qg_split_kernel<<<(unsigned)((total + GDN_THREADS - 1) / GDN_THREADS), GDN_THREADS, 0, s>>>(qg, q, gate, head_dim,
                                                                                              Q, total);
    return cuda_launch_check("qg_split", err);
}

static __global__ void sigmoid_mul_kernel(float *x, const float *__restrict__ gate, int64_t total)
{
    const int64_t k = (int64_t)blockIdx.x * GDN_THREADS + threadIdx.x;
    if (k < total)
        x[k] *= gdn_sigmoid(gate[k]);
}

extern "C" int cuda_sigmoid_mul(float *x, const float *gate, int64_t total, cudaStream_t s, guild_err_t *err)
{
    if (total <= 0)
        return 0;
    sigmoid_mul_kernel<<<(unsigned)((total + GDN_THREADS - 1) / GDN_THREADS), GDN_THREADS, 0, s>>>(x, gate, total);
    return cuda_launch_check("sigmoid_mul", err);
}
