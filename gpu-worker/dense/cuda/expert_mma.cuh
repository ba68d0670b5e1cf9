/* gpu-worker/dense/cuda/expert_mma.cuh — the tensor-core (int8 mma) path of cuda_expert_matmul, for tiles of
 * CUDA_EXPERT_MMA_TILE pairs, and of cuda_matmul's large batches (gpu-worker/dense/cuda/expert_mma.cu). Internal to the
 * CUDA kernels: expert_mm.cu and matmul.cu call it after their own argument checks (alignment, shape, grid.y <=
 * 65535).
 */
#ifndef GUILD_GPU_WORKER_CUDA_EXPERT_MMA_CUH
#define GUILD_GPU_WORKER_CUDA_EXPERT_MMA_CUH

#include "gpu-worker/dense/cuda/cuda_common.cuh"

/* Launches the products of cuda_expert_matmul for tiles of up to CUDA_EXPERT_MMA_TILE pairs on stream s, with the
 * same bits as the dp4a kernel. Returns false (and launches nothing) when `type` has no mma kernel
 * (cuda_expert_mma_supported). The activation rows must be well-formed blocks of the dot type (Q8_K bsums are
 * the sums of their qs, as every quantizer writes them): the mins are summed from qs here. */
bool expert_mma_launch(guild_type_t type, int64_t n, int64_t nrows, const char *w, const char *wu,
                       size_t expert_stride, size_t row_stride, const char *act, size_t act_stride, int act_div,
                       const int32_t *order, const int4 *tiles, const int32_t *n_tiles, int32_t max_tiles,
                       float *out, int64_t ldo, cudaStream_t s);

/* cuda_matmul's product on the same kernel (one matrix, no routing): out[t * ldo + r] = dot(row r of w, act row t)
 * for r < nrows, t < ntok, the bits of cuda_matmul's dp4a kernel, on stream s. Tiles of CUDA_EXPERT_MMA_TILE
 * tokens: grid.y = ceil(ntok / 64) <= 65535; blocks of block_rows weight rows, 64 or 128 (64: twice the blocks
 * for small grids). The caller checks cuda_matmul's alignment (the same as cuda_expert_matmul's) and the shape;
 * activation rows well-formed as above. Returns false (nothing launched) when `type` has no mma kernel. */
bool expert_mma_dense_launch(guild_type_t type, int64_t n, int64_t nrows, int32_t ntok, const char *w,
                             size_t row_stride, const char *act, size_t act_stride, float *out, int64_t ldo,
                             int block_rows, cudaStream_t s);

#endif
