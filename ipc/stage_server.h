/* ipc/stage_server.h — serving a staging ring: a dispatcher thread and a pool of copy threads.
 *
 * The same loop runs in the guild-stager process and in-process (--single-process, tests). The dispatcher
 * beats the ring's heartbeat, waits for the next request (stage_ring.h's protocol), checks every piece against
 * the served memory and the slot, splits the request's bytes evenly over the copy threads (each copies one
 * contiguous share with streaming stores, ipc/stage_copy.h), and rings `filled` once all are done. A bad request is answered
 * with a status, never a crash. The server stops when stage_server_stop is called or when the ring's stop
 * word is set (stage_ring_request_stop).
 */
#ifndef GUILD_IPC_STAGE_SERVER_H
#define GUILD_IPC_STAGE_SERVER_H

#include "core/util/err.h"
#include "ipc/stage_ring.h"

#include <stddef.h>
#include <stdint.h>

typedef struct stage_server stage_server_t;

typedef struct stage_server_stats {
    uint64_t requests; /* served */
    uint64_t refused;  /* answered with a status other than STAGE_OK */
    uint64_t bytes;    /* copied */
    uint64_t copy_ns;  /* time from dispatch to all threads done, summed over requests */
} stage_server_stats_t;

/* Starts serving ring (which must outlive the server) from src[0..src_bytes) (the served file's mapping;
 * read-only) with `threads` copy threads (1..256). Publishes this process as the ring's server. -1 with err
 * (thread creation). */
int stage_server_start(stage_server_t **out, stage_ring_t *ring, const void *src, size_t src_bytes, int threads,
                       guild_err_t *err);

/* 1 while the dispatcher runs; 0 once it stopped on the ring's stop word. */
int stage_server_running(const stage_server_t *s);

void stage_server_stats(const stage_server_t *s, stage_server_stats_t *out);

/* Stops the threads (the request being copied is finished first), clears the ring's server pid, frees, nulls
 * *ps. NULL-safe. */
void stage_server_stop(stage_server_t **ps);

#endif
