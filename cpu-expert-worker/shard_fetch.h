/* cpu-expert-worker/shard_fetch.h — a CPU worker without its own copy of the model receives the bytes its shard
 * needs from the coordinator over the data socket (ShardRead / ShardData in proto/guild.proto; the coordinator's
 * side is coordinator/bridge.c): the file's GGUF header first, then the matrices of its experts, each written at
 * its offset into a memory file (memfd) of the model file's size. The memory file then opens as the model: the
 * bytes not received (the dense weights, other workers' experts) read as zeros, take no memory, and are never
 * used. The digests of the shard (core/model/expert_digest.h) prove the result to the coordinator. */
#ifndef GUILD_CPU_EXPERT_WORKER_SHARD_FETCH_H
#define GUILD_CPU_EXPERT_WORKER_SHARD_FETCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/model/model.h"
#include "core/util/err.h"

typedef struct shard_fetch {
    void *data;           /* the worker's data socket (a DEALER; borrowed) */
    uint64_t generation;  /* Assign.generation */
    uint32_t worker;      /* Assign.worker_index */
    bool (*stop)(void *ctx); /* polled while waiting: true abandons the fetch */
    void *stop_ctx;
    uint32_t timeout_ms;  /* the longest silence of the coordinator while a read is pending */
    /* out */
    int fd;               /* the memory file (-1: none); the caller closes it */
    char path[64];        /* "/proc/self/fd/N": what model_new opens */
    uint64_t file_size, data_offset;
    uint64_t bytes;       /* received */
} shard_fetch_t;

/* Receives the file's header into a new memory file of the file's size: f->fd, f->path, the sizes. -1 with err
 * (the coordinator's refusal, a silence longer than timeout_ms, a stop). */
int shard_fetch_header(shard_fetch_t *f, guild_err_t *err);

/* Receives the matrices of the experts flagged in owned ([n_layer * n_expert]) of model m (the memory file
 * opened, header only) into the memory file. Open the model again afterwards: a mapping made before may not
 * show the bytes written since. -1 with err. */
int shard_fetch_experts(shard_fetch_t *f, const model_t *m, const uint8_t *owned, guild_err_t *err);

/* Gives the memory of the received expert bytes back once the shard holds its own copy of them (the model's
 * mapping then reads zeros there; its header stays). 0, or -1 with err. */
int shard_fetch_release(shard_fetch_t *f, guild_err_t *err);

#endif
