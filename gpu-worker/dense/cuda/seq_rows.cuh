/* A launch's row t through a row table of several sequences (cuda_seq_rows_t, cuda_kernels.h): its sequence's cache
 * length at the step's start, its place among that sequence's rows, and its caches' byte offsets from sequence 0's.
 * Without a table (n = 0) the launch's own: the length kv0 (or *kv0_dev), row t, no offset. The table is a
 * __grid_constant__ kernel parameter: indexed in place, no copy. */
#ifndef GUILD_GPU_WORKER_CUDA_SEQ_ROWS_CUH
#define GUILD_GPU_WORKER_CUDA_SEQ_ROWS_CUH

#include "gpu-worker/dense/cuda/cuda_kernels.h"

typedef struct seq_row {
    int kv0;      /* the cache length the row's position counts from */
    int t;        /* the row's place after kv0: position kv0 + t */
    int64_t ko, vo; /* byte offsets of the row's K and V caches */
} seq_row_t;

/* Reads the device (kv0_dev or the table's lengths): after pdl_begin(), or before it where the caller's contract
 * says no kernel writes them (cuda_attention_decode_dyn's: the step's start copy). */
static __device__ __forceinline__ seq_row_t seq_row_of(const cuda_seq_rows_t &sr, int t, int kv0,
                                                       const int32_t *kv0_dev)
{
    if (sr.n == 0)
        return seq_row_t{kv0_dev ? *kv0_dev : kv0, t, 0, 0};
    const int64_t s = sr.seq[t];
    return seq_row_t{sr.len[sr.grp[t]], (int)sr.idx[t], s * sr.k_seq, s * sr.v_seq};
}

static const cuda_seq_rows_t seq_rows_none = {};

#endif
