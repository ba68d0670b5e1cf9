/* gpu-worker/dense/cpu/cpu_snapshot.h — internal: the CPU backend's backend_ops_t.seq_save and seq_load
 * (gpu-worker/dense/backend.h: backend_seq_save, backend_seq_load; the wrappers check the sequence, the length and
 * the blob's header size before these run). */
#ifndef GUILD_GPU_WORKER_CPU_SNAPSHOT_H
#define GUILD_GPU_WORKER_CPU_SNAPSHOT_H

#include "gpu-worker/dense/backend.h"

int cpu_seq_save(backend_t *b, int32_t seq, int32_t n_pos, void **out, size_t *size, guild_err_t *err);
int cpu_seq_load(backend_t *b, int32_t seq, const int32_t *tokens, int32_t n_pos, const void *blob, size_t size,
                 guild_err_t *err);

#endif
