/* cuda_qk_prepare: the per-head Q/K norms, RoPE and the K/V cache store of a batch in one kernel, with the bits
 * of cuda_rmsnorm, cuda_rope_dyn and cuda_kv_store_dyn run one after the other (a decode step ran those as five
 * short launches, every one bound by latency, not work).
 *
 * Block (head, token) of head_dim threads, heads 0 .. n_head-1 of q then 0 .. n_head_kv-1 of k. Thread d holds
 * element d: the norm is rmsnorm_kernel's with one element per thread and the same block size (so the same
 * reduction tree), the rotation of pair i is rope_kernel's expression, through shared memory; a K block also
 * stores its head's K and V elements into the cache at position *pos + t. */
#include <cuda_fp16.h>

#include "gpu-worker/dense/cuda/cuda_common.cuh"
#include "gpu-worker/dense/cuda/rmsnorm_row.cuh"
#include "gpu-worker/dense/cuda/seq_rows.cuh"

#define QKP_MAX_HD 256

static __device__ __forceinline__ void cache_put(__half *p, float v)
{
    *p = __float2half_rn(v);
}

static __device__ __forceinline__ void cache_put(float *p, float v)
{
    *p = v;
}

template <typename KT>
static __global__ void __launch_bounds__(QKP_MAX_HD)
    qk_prepare_kernel(float *__restrict__ q, float *__restrict__ k, const float *__restrict__ v, int n_head,
                      int n_head_kv, const float *__restrict__ q_norm, const float *__restrict__ k_norm, float eps,
                      int half, bool neox, const float *__restrict__ cs, const int32_t *__restrict__ pos_dev,
                      KT *__restrict__ kc, KT *__restrict__ vc, const __grid_constant__ cuda_seq_rows_t sr)
{
    __shared__ double partial[QKP_MAX_HD / WARP_SIZE];
    __shared__ float scale_sh;
    __shared__ float row_sh[QKP_MAX_HD];
    const int hd = (int)blockDim.x, d = threadIdx.x, t = blockIdx.y;
    const bool is_k = (int)blockIdx.x >= n_head;
    const int hh = is_k ? (int)blockIdx.x - n_head : (int)blockIdx.x;
    const int64_t kv_dim = (int64_t)n_head_kv * hd;
    float *row = is_k ? k + t * kv_dim + (int64_t)hh * hd : q + (int64_t)t * n_head * hd + (int64_t)hh * hd;
    const float *w = is_k ? k_norm : q_norm;
    const float wd = w ? w[d] : 0.0f; /* a weight (no kernel's output): while the kernel before ends */
    pdl_begin();
    const seq_row_t sq = seq_row_of(sr, t, 0, pos_dev); /* with a table: row t's sequence, position, caches */
    const int pos = sq.kv0 + sq.t;
    float x = row[d];
    const float vd = is_k ? v[t * kv_dim + (int64_t)hh * hd + d] : 0.0f;
    /* the rotation's cos/sin: loaded now, beside the row, not after the norm's barriers */
    float c0 = 0.0f, c1 = 0.0f;
    if (d < half) {
        const float *c = cs + (int64_t)pos * (2 * half) + 2 * d;
        c0 = c[0];
        c1 = c[1];
    }

    if (w) { /* rmsnorm_kernel<true> with n = blockDim.x: one element per thread */
        double sum = (double)__fmul_rn(x, x);
        sum = warp_sum_f64(sum);
        const int warp = d / WARP_SIZE, lane = d % WARP_SIZE;
        if (lane == 0)
            partial[warp] = sum;
        __syncthreads();
        if (d == 0) {
            scale_sh = rmsnorm_scale(partial, hd / WARP_SIZE, hd, eps);
        }
        __syncthreads();
        x = __fmul_rn(x, scale_sh) * wd;
    }
    row_sh[d] = x;
    __syncthreads();
    if (d < half) { /* rope_kernel's pair d */
        const int a = neox ? d : 2 * d, b = neox ? d + half : 2 * d + 1;
        const float x0 = row_sh[a], x1 = row_sh[b];
        row_sh[a] = x0 * c0 - x1 * c1;
        row_sh[b] = x0 * c1 + x1 * c0;
    }
    __syncthreads();
    x = row_sh[d];
    row[d] = x;
    if (is_k) {
        const int64_t cell = (int64_t)pos * kv_dim + (int64_t)hh * hd + d;
        cache_put((KT *)((char *)kc + sq.ko) + cell, x);
        cache_put((KT *)((char *)vc + sq.vo) + cell, vd);
    }
}

static int qk_prepare(float *q, float *k, const float *v, int32_t n_tok, int32_t n_head, int32_t n_head_kv,
                      int32_t head_dim, const float *q_norm, const float *k_norm, float eps, int32_t n_rot, bool neox,
                      const float *cs, const int32_t *pos, const cuda_seq_rows_t &sr, guild_type_t kv_type,
                      void *k_cache, void *v_cache, cudaStream_t s, guild_err_t *err)
{
    if (n_tok <= 0)
        return 0;
    if (head_dim < WARP_SIZE || head_dim > QKP_MAX_HD || head_dim % WARP_SIZE || n_head < 1 || n_head_kv < 1 ||
        n_head + n_head_kv > 65535 || n_tok > 65535)
        return guild_err_set(err, "cuda: qk prepare: %d + %d heads of %d, %d rows is outside what the kernel "
                             "handles (heads of a multiple of 32 up to 256)", n_head, n_head_kv, head_dim, n_tok);
    if (n_rot < 0 || n_rot % 2 || n_rot > head_dim || (n_rot > 0 && !cs) || (!pos && !sr.len))
        return guild_err_set(err, "cuda: qk prepare: %d rotated dimensions of a head of %d", n_rot, head_dim);
    if ((q_norm == NULL) != (k_norm == NULL))
        return guild_err_set(err, "cuda: qk prepare: a Q norm without a K norm or the reverse");
    const dim3 grid((unsigned)(n_head + n_head_kv), (unsigned)n_tok);
    if (kv_type == GUILD_TYPE_F16)
        cuda_launch_pdl(qk_prepare_kernel<__half>, grid, (unsigned)head_dim, 0, s, q, k, v, n_head, n_head_kv, q_norm,
                        k_norm, eps, n_rot / 2, neox, cs, pos, (__half *)k_cache, (__half *)v_cache, sr);
    else if (kv_type == GUILD_TYPE_F32)
        cuda_launch_pdl(qk_prepare_kernel<float>, grid, (unsigned)head_dim, 0, s, q, k, v, n_head, n_head_kv, q_norm,
                        k_norm, eps, n_rot / 2, neox, cs, pos, (float *)k_cache, (float *)v_cache, sr);
    else
        return guild_err_set(err, "cuda: qk prepare: cache type %d is not f16 or f32", (int)kv_type);
    return cuda_launch_check("qk prepare", err);
}

extern "C" int cuda_qk_prepare(float *q, float *k, const float *v, int32_t n_tok, int32_t n_head, int32_t n_head_kv,
                               int32_t head_dim, const float *q_norm, const float *k_norm, float eps, int32_t n_rot,
                               bool neox, const float *cs, const int32_t *pos, guild_type_t kv_type, void *k_cache,
                               void *v_cache, cudaStream_t s, guild_err_t *err)
{
    return qk_prepare(q, k, v, n_tok, n_head, n_head_kv, head_dim, q_norm, k_norm, eps, n_rot, neox, cs, pos,
                      seq_rows_none, kv_type, k_cache, v_cache, s, err);
}

extern "C" int cuda_qk_prepare_seqs(float *q, float *k, const float *v, int32_t n_head, int32_t n_head_kv,
                                    int32_t head_dim, const float *q_norm, const float *k_norm, float eps,
                                    int32_t n_rot, bool neox, const float *cs, const cuda_seq_rows_t *rows,
                                    guild_type_t kv_type, void *k_cache, void *v_cache, cudaStream_t s,
                                    guild_err_t *err)
{
    if (!rows || rows->n < 1 || rows->n > CUDA_SEQ_ROWS || !rows->len)
        return guild_err_set(err, "cuda: qk prepare: a row table of %d rows (1 to %d)", rows ? rows->n : 0,
                             CUDA_SEQ_ROWS);
    return qk_prepare(q, k, v, rows->n, n_head, n_head_kv, head_dim, q_norm, k_norm, eps, n_rot, neox, cs, NULL,
                      *rows, kv_type, k_cache, v_cache, s, err);
}
