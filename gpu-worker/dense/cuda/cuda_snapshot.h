/* gpu-worker/dense/cuda/cuda_snapshot.h — internal: the CUDA backend's backend_ops_t.seq_save and seq_load
 * (gpu-worker/dense/backend.h: backend_seq_save, backend_seq_load; the wrappers check the sequence, the length and
 * the blob's header sizes before these run). */
#ifndef GUILD_GPU_WORKER_CUDA_SNAPSHOT_H
#define GUILD_GPU_WORKER_CUDA_SNAPSHOT_H

#include "gpu-worker/dense/backend.h"

int cuda_seq_save(backend_t *b, int32_t seq, int32_t n_pos, void **out, size_t *size, guild_err_t *err);
int cuda_seq_load(backend_t *b, int32_t seq, const int32_t *tokens, int32_t n_pos, const void *blob, size_t size,
                  guild_err_t *err);

#endif
