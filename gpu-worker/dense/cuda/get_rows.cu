/* cuda_get_rows: the embedding lookup — rows of a weight matrix of any supported type, dequantized to float
 * exactly as quant_dequantize_row_ref does (dequant.cuh). One thread per output element. */
#include "gpu-worker/dense/cuda/dequant.cuh"

#define GR_THREADS 256

static __global__ void get_rows_kernel(guild_type_t type, const char *__restrict__ w, size_t row_bytes, int64_t n,
                                       const int32_t *__restrict__ ids, float *__restrict__ out, int64_t ldo)
{
    pdl_begin();
    const int64_t e = (int64_t)blockIdx.x * GR_THREADS + threadIdx.x;
    if (e >= n)
        return;
    const int i = blockIdx.y;
    out[i * ldo + e] = dequant_elem(type, w + (size_t)ids[i] * row_bytes, e);
}

static void get_rows_launch(guild_type_t type, const void *w, size_t row_bytes, int64_t n, const int32_t *ids,
                            int32_t n_ids, float *out, int64_t ldo, cudaStream_t s)
{
    const dim3 grid((unsigned)((n + GR_THREADS - 1) / GR_THREADS), (unsigned)n_ids);
    cuda_launch_pdl(get_rows_kernel, grid, GR_THREADS, 0, s, type, (const char *)w, row_bytes, n, ids, out, ldo);
}

extern "C" int cuda_get_rows(guild_type_t type, const void *w, size_t row_bytes, int64_t n, const int32_t *ids,
                             int32_t n_ids, float *out, int64_t ldo, cudaStream_t s, guild_err_t *err)
{
    if (!cuda_type_supported(type))
        return guild_err_set(err, "cuda: get_rows: type %d is not supported (supported: %s)", (int)type,
                             cuda_supported_types());
    if (n_ids <= 0)
        return 0;
    if (n_ids > 65535 || n <= 0)
        return guild_err_set(err, "cuda: get_rows: %d rows of %lld is outside what the kernel handles", n_ids,
                             (long long)n);
    get_rows_launch(type, w, row_bytes, n, ids, n_ids, out, ldo, s);
    return cuda_launch_check("get_rows", err);
}
