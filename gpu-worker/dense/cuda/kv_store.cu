/* cuda_kv_store: the batch's K and V rows into the cache, as F16 (round to nearest even) or F32 (copied);
 * cuda_kv_store_blocks: into a cache of the block formats (Q8_0, Q4_0; k8v4's values rotated first), quantized as
 * ggml's reference quantizers do, operation for operation: the CPU backend's cache bytes (kv_format.h). */
#include <cuda_fp16.h>

#include "gpu-worker/dense/cuda/cuda_common.cuh"
#include "gpu-worker/dense/cuda/kv_blocks.cuh"
#include "gpu-worker/dense/cuda/seq_rows.cuh"

#define KV_THREADS 256

static __device__ __forceinline__ void kv_put(__half *p, float v)
{
    *p = __float2half_rn(v);
}

static __device__ __forceinline__ void kv_put(float *p, float v)
{
    *p = v;
}

template <typename KT>
static __global__ void kv_store_kernel(KT *kc, KT *vc, const float *__restrict__ k, const float *__restrict__ v,
                                       int64_t total, int64_t cell0, const int32_t *pos_dev, int64_t kv_dim,
                                       const __grid_constant__ cuda_seq_rows_t sr)
{
    const int64_t i = (int64_t)blockIdx.x * KV_THREADS + threadIdx.x;
    if (i >= total)
        return;
    if (sr.n) { /* row i / kv_dim at its sequence's position, in its caches */
        const seq_row_t sq = seq_row_of(sr, (int)(i / kv_dim), 0, NULL);
        const int64_t cell = (int64_t)(sq.kv0 + sq.t) * kv_dim + i % kv_dim;
        kv_put((KT *)((char *)kc + sq.ko) + cell, k[i]);
        kv_put((KT *)((char *)vc + sq.vo) + cell, v[i]);
        return;
    }
    if (pos_dev)
        cell0 = (int64_t)*pos_dev * kv_dim;
    kv_put(kc + cell0 + i, k[i]);
    kv_put(vc + cell0 + i, v[i]);
}

static int kv_store(guild_type_t kv_type, void *k_cache, void *v_cache, const float *k, const float *v, int64_t kv_dim,
                    int32_t n_tok, int32_t pos0, const int32_t *pos_dev, const cuda_seq_rows_t &sr, cudaStream_t s,
                    guild_err_t *err)
{
    const int64_t total = kv_dim * n_tok;
    if (total <= 0)
        return 0;
    const unsigned blocks = (unsigned)((total + KV_THREADS - 1) / KV_THREADS);
    const int64_t cell0 = (int64_t)pos0 * kv_dim;
    if (kv_type == GUILD_TYPE_F16)
        kv_store_kernel<__half><<<blocks, KV_THREADS, 0, s>>>((__half *)k_cache, (__half *)v_cache, k, v, total, cell0,
                                                              pos_dev, kv_dim, sr);
    else if (kv_type == GUILD_TYPE_F32)
        kv_store_kernel<float><<<blocks, KV_THREADS, 0, s>>>((float *)k_cache, (float *)v_cache, k, v, total, cell0,
                                                             pos_dev, kv_dim, sr);
    else
        return guild_err_set(err, "cuda: kv_store: cache type %d is not f16 or f32", (int)kv_type);
    return cuda_launch_check("kv_store", err);
}

extern "C" int cuda_kv_store(guild_type_t kv_type, void *k_cache, void *v_cache, const float *k, const float *v,
                             int64_t kv_dim, int32_t n_tok, int32_t pos0, cudaStream_t s, guild_err_t *err)
{
    return kv_store(kv_type, k_cache, v_cache, k, v, kv_dim, n_tok, pos0, NULL, seq_rows_none, s, err);
}

extern "C" int cuda_kv_store_dyn(guild_type_t kv_type, void *k_cache, void *v_cache, const float *k, const float *v,
                                 int64_t kv_dim, int32_t n_tok, const int32_t *pos0, cudaStream_t s, guild_err_t *err)
{
    return kv_store(kv_type, k_cache, v_cache, k, v, kv_dim, n_tok, 0, pos0, seq_rows_none, s, err);
}

extern "C" int cuda_kv_store_seqs(guild_type_t kv_type, void *k_cache, void *v_cache, const float *k, const float *v,
                                  int64_t kv_dim, const cuda_seq_rows_t *rows, cudaStream_t s, guild_err_t *err)
{
    if (!rows || rows->n < 1 || rows->n > CUDA_SEQ_ROWS || !rows->len)
        return guild_err_set(err, "cuda: kv_store: a row table of %d rows (1 to %d)", rows ? rows->n : 0,
                             CUDA_SEQ_ROWS);
    return kv_store(kv_type, k_cache, v_cache, k, v, kv_dim, rows->n, 0, NULL, *rows, s, err);
}

/* One head of one row per block, a thread per element (head_dim threads, a warp per 32-element block): the head
 * into shared memory, kv_hadamard_shared when ROT, then the warp's block quantized.
 *   Q8_0 (quant_quant_q8_0_ref): d = max|x| / 127, id = 1 / d (0 when d is 0), q = (int8) roundf(x * id).
 *   Q4_0 (quant_quant_q4_0_ref): m = the first element of largest |x|, d = m / -8, id likewise,
 *        q = min(15, (int8)(x * id + 8.5f)); element j in the low nibble of byte j, j + 16 in the high one.
 * The maxima are exact in any order; Q4_0's "first" is the lowest index among the equal magnitudes. */
template <bool Q8, bool ROT>
static __global__ void kv_store_blocks_kernel(void *cache, const float *__restrict__ x, int64_t kv_dim,
                                              int32_t pos0, const int32_t *pos_dev, float rot_scale, bool is_v,
                                              const __grid_constant__ cuda_seq_rows_t sr)
{
    extern __shared__ float sh[]; /* [head_dim] */
    const int t = blockIdx.x, h = blockIdx.y, i = threadIdx.x, hd = blockDim.x;
    const int lane = i % WARP_SIZE;
    const seq_row_t sq = seq_row_of(sr, t, pos0, pos_dev); /* row t's position and caches */
    const int64_t row = (int64_t)sq.kv0 + sq.t;
    cache = (char *)cache + (is_v ? sq.vo : sq.ko);
    float xi = x[(int64_t)t * kv_dim + (int64_t)h * hd + i];
    if (ROT) {
        sh[i] = xi;
        kv_hadamard_shared(sh, hd, rot_scale, i, hd);
        xi = sh[i];
    }
    const int64_t blk = (row * kv_dim + (int64_t)h * hd + i) / 32; /* this element's block in the layer */
    if (Q8) {
        const float amax = warp_max_f32(fabsf(xi));
        const float d = amax / 127, id = d ? 1.0f / d : 0.0f;
        quant_block_q8_0 *b = (quant_block_q8_0 *)cache + blk;
        b->qs[lane] = (int8_t)roundf(xi * id);
        if (lane == 0)
            b->d = quant_f32_to_f16(d);
    } else {
        /* the largest magnitude, and the lowest lane holding it */
        float a = fabsf(xi);
        int at = lane;
#pragma unroll
        for (int o = WARP_SIZE / 2; o > 0; o >>= 1) {
            const float oa = __shfl_xor_sync(FULL_MASK, a, o);
            const int oat = __shfl_xor_sync(FULL_MASK, at, o);
            if (oa > a || (oa == a && oat < at)) {
                a = oa;
                at = oat;
            }
        }
        const float m = __shfl_sync(FULL_MASK, xi, at);
        const float d = m / -8, id = d ? 1.0f / d : 0.0f;
        const int q = min(15, (int)(int8_t)(xi * id + 8.5f));
        const int hi = __shfl_down_sync(FULL_MASK, q, 16);
        quant_block_q4_0 *b = (quant_block_q4_0 *)cache + blk;
        if (lane < 16)
            b->qs[lane] = (uint8_t)(q | hi << 4);
        if (lane == 0)
            b->d = quant_f32_to_f16(d);
    }
}

template <bool Q8>
static void store_blocks(void *cache, const float *x, int64_t kv_dim, int32_t head_dim, int32_t n_tok, int32_t pos0,
                         const int32_t *pos_dev, bool rot, bool is_v, const cuda_seq_rows_t &sr, cudaStream_t s)
{
    const dim3 grid((unsigned)n_tok, (unsigned)(kv_dim / head_dim));
    const float scale = (float)(1.0 / sqrt((double)head_dim)); /* kv_hadamard's */
    const size_t shared = rot ? (size_t)head_dim * sizeof(float) : 0;
    if (rot)
        kv_store_blocks_kernel<Q8, true>
            <<<grid, head_dim, shared, s>>>(cache, x, kv_dim, pos0, pos_dev, scale, is_v, sr);
    else
        kv_store_blocks_kernel<Q8, false>
            <<<grid, head_dim, shared, s>>>(cache, x, kv_dim, pos0, pos_dev, scale, is_v, sr);
}

static int kv_store_blocks(guild_type_t kt, guild_type_t vt, bool v_rot, void *k_cache, void *v_cache, const float *k,
                           const float *v, int64_t kv_dim, int32_t head_dim, int32_t n_tok, int32_t pos0,
                           const int32_t *pos_dev, const cuda_seq_rows_t &sr, cudaStream_t s, guild_err_t *err)
{
    if (n_tok <= 0)
        return 0;
    if (head_dim % 32 || head_dim > 1024 || kv_dim % head_dim || n_tok > 65535 || kv_dim / head_dim > 65535 ||
        (v_rot && (head_dim & (head_dim - 1))))
        return guild_err_set(err, "cuda: kv_store: rows of %lld in heads of %d are not whole blocks%s",
                             (long long)kv_dim, (int)head_dim, v_rot ? " of a power-of-two head" : "");
    const guild_type_t types[2] = {kt, vt};
    void *caches[2] = {k_cache, v_cache};
    const float *rows[2] = {k, v};
    for (int side = 0; side < 2; side++) {
        const bool rot = side == 1 && v_rot;
        if (types[side] == GUILD_TYPE_Q8_0)
            store_blocks<true>(caches[side], rows[side], kv_dim, head_dim, n_tok, pos0, pos_dev, rot, side, sr, s);
        else if (types[side] == GUILD_TYPE_Q4_0)
            store_blocks<false>(caches[side], rows[side], kv_dim, head_dim, n_tok, pos0, pos_dev, rot, side, sr, s);
        else
            return guild_err_set(err, "cuda: kv_store: cache type %d is not q8_0 or q4_0", (int)types[side]);
    }
    return cuda_launch_check("kv_store_blocks", err);
}

extern "C" int cuda_kv_store_blocks(guild_type_t kt, guild_type_t vt, bool v_rot, void *k_cache, void *v_cache,
                                    const float *k, const float *v, int64_t kv_dim, int32_t head_dim, int32_t n_tok,
                                    int32_t pos0, const int32_t *pos_dev, cudaStream_t s, guild_err_t *err)
{
    return kv_store_blocks(kt, vt, v_rot, k_cache, v_cache, k, v, kv_dim, head_dim, n_tok, pos0, pos_dev,
                           seq_rows_none, s, err);
}

extern "C" int cuda_kv_store_blocks_seqs(guild_type_t kt, guild_type_t vt, bool v_rot, void *k_cache, void *v_cache,
                                         const float *k, const float *v, int64_t kv_dim, int32_t head_dim,
                                         const cuda_seq_rows_t *rows, cudaStream_t s, guild_err_t *err)
{
    if (!rows || rows->n < 1 || rows->n > CUDA_SEQ_ROWS || !rows->len)
        return guild_err_set(err, "cuda: kv_store: a row table of %d rows (1 to %d)", rows ? rows->n : 0,
                             CUDA_SEQ_ROWS);
    return kv_store_blocks(kt, vt, v_rot, k_cache, v_cache, k, v, kv_dim, head_dim, rows->n, 0, NULL, *rows, s, err);
}
