/* cuda_rope: cpu_rope_apply with the cos/sin table of every position precomputed on the host by
 * cpu_rope_table (so the angles are the CPU's bits). One thread per rotated pair. */
#include "gpu-worker/dense/cuda/cuda_common.cuh"
#include "gpu-worker/dense/cuda/seq_rows.cuh"

#define ROPE_THREADS 256

static __global__ void rope_kernel(float *x, int64_t ldx, int n_heads, int head_dim, int half, bool neox,
                                   const float *__restrict__ cs, int pos0, const int32_t *pos_dev, int64_t total,
                                   const __grid_constant__ cuda_seq_rows_t sr)
{
    const int64_t k = (int64_t)blockIdx.x * ROPE_THREADS + threadIdx.x;
    if (k >= total)
        return;
    const int i = (int)(k % half);
    const int h = (int)(k / half % n_heads);
    const int t = (int)(k / half / n_heads);
    const seq_row_t sq = seq_row_of(sr, t, pos0, pos_dev); /* row t's position: sq.kv0 + sq.t */
    const float *c = cs + (int64_t)(sq.kv0 + sq.t) * (2 * half) + 2 * i;
    float *v = x + t * ldx + (int64_t)h * head_dim;
    float *a = neox ? &v[i] : &v[2 * i];
    float *b = neox ? &v[i + half] : &v[2 * i + 1];
    const float x0 = *a, x1 = *b;
    *a = x0 * c[0] - x1 * c[1];
    *b = x0 * c[1] + x1 * c[0];
}

static int rope(float *x, int64_t ldx, int32_t n_tok, int32_t n_heads, int32_t head_dim, int32_t n_rot, bool neox,
                const float *cs, int32_t pos0, const int32_t *pos_dev, const cuda_seq_rows_t &sr, cudaStream_t s,
                guild_err_t *err)
{
    if (n_tok <= 0 || n_rot == 0)
        return 0;
    if (n_rot < 0 || n_rot % 2 || n_rot > head_dim)
        return guild_err_set(err, "cuda: rope: %d rotated dimensions of a head of %d", n_rot, head_dim);
    const int64_t total = (int64_t)n_tok * n_heads * (n_rot / 2);
    rope_kernel<<<(unsigned)((total + ROPE_THREADS - 1) / ROPE_THREADS), ROPE_THREADS, 0, s>>>(
        x, ldx, n_heads, head_dim, n_rot / 2, neox, cs, pos0, pos_dev, total, sr);
    return cuda_launch_check("rope", err);
}

extern "C" int cuda_rope(float *x, int64_t ldx, int32_t n_tok, int32_t n_heads, int32_t head_dim, int32_t n_rot,
                         bool neox, const float *cs, int32_t pos0, cudaStream_t s, guild_err_t *err)
{
    return rope(x, ldx, n_tok, n_heads, head_dim, n_rot, neox, cs, pos0, NULL, seq_rows_none, s, err);
}

extern "C" int cuda_rope_dyn(float *x, int64_t ldx, int32_t n_tok, int32_t n_heads, int32_t head_dim, int32_t n_rot,
                             bool neox, const float *cs, const int32_t *pos0, cudaStream_t s, guild_err_t *err)
{
    return rope(x, ldx, n_tok, n_heads, head_dim, n_rot, neox, cs, 0, pos0, seq_rows_none, s, err);
}

extern "C" int cuda_rope_seqs(float *x, int64_t ldx, int32_t n_heads, int32_t head_dim, int32_t n_rot, bool neox,
                              const float *cs, const cuda_seq_rows_t *rows, cudaStream_t s, guild_err_t *err)
{
    if (!rows || rows->n < 1 || rows->n > CUDA_SEQ_ROWS || !rows->len)
        return guild_err_set(err, "cuda: rope: a row table of %d rows (1 to %d)", rows ? rows->n : 0, CUDA_SEQ_ROWS);
    return rope(x, ldx, rows->n, n_heads, head_dim, n_rot, neox, cs, 0, NULL, *rows, s, err);
}
