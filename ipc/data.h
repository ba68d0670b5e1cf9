/* ipc/data.h — the data socket: MoE exchanges as ZeroMQ messages, for a CPU worker that cannot map the
 * arena (on another host, or started with --no-shared-memory). Its sockets and frames are ipc/msg.h's.
 *
 * The coordinator binds a ROUTER (coordinator/bridge.c), the worker connects a DEALER. A message is one
 * packed guild.Data (proto/guild.proto) in the first frame, then raw arrays (host byte order; both ends are
 * the same build on little-endian hosts):
 *   hello   (worker -> coordinator)  no arrays
 *   request (coordinator -> worker)  x float32[n_tokens][n_embd], ids int32[n_tokens][n_used]
 *   result  (worker -> coordinator)  pairs int32[n_pairs], y float32[n_pairs][n_embd]
 *   shard_read (worker -> coordinator) no arrays: bytes of the model file it asks for
 *   shard_data (coordinator -> worker) bytes uint8[length] (none with an error, or for length 0)
 * data_recv checks the version, the body and every frame's size against the header before handing the
 * message over; anything else is GUILD_MSG_BAD with a message, the socket still usable.
 */
#ifndef GUILD_IPC_DATA_H
#define GUILD_IPC_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "core/util/err.h"
#include "ipc/msg.h"
#include "proto/guild.pb-c.h"

#define DATA_MAX_FRAMES 3
#define DATA_MAX_SHARD_BYTES ((uint64_t)64 << 20) /* bytes of the model file in one shard_data message */

/* A received message: the decoded header and its arrays (pointers into the frames, valid until
 * data_msg_close). */
typedef struct data_msg {
    Guild__Data *hdr;
    guild_msg_peer_t from;  /* ROUTER side: the sender */
    const void *array[2];   /* request: x, ids; result: pairs, y (64-byte aligned when ZeroMQ's frame is not);
                               shard_data: the bytes (array[0], not realigned) */
    guild_msg_frames_t *frames_; /* owned frames */
    void *copy_[2];         /* aligned copies of misaligned frames */
} data_msg_t;

/* A DEALER for the data socket, connected to endpoint with routing id `identity`; a ROUTER bound to it
 * (guild_msg_socket_new without a message size cap: exchanges of a prefill chunk are megabytes; a tcp endpoint
 * secured as curve says, like the control socket's). NULL with err. */
void *data_dealer_new(void *zctx, const char *endpoint, const char *identity, const guild_curve_t *curve,
                      guild_err_t *err);
void *data_router_new(void *zctx, const char *endpoint, const guild_curve_t *curve, guild_err_t *err);

int data_send_hello(void *dealer, uint64_t generation, uint32_t worker, guild_err_t *err);
int data_send_request(void *router, const guild_msg_peer_t *to, uint64_t seq, int32_t layer, uint32_t n_tokens,
                      uint32_t n_used, uint32_t n_embd, const float *x, const int32_t *ids, guild_err_t *err);
int data_send_result(void *dealer, uint64_t seq, uint32_t n_pairs, const int32_t *pairs, const float *y,
                     uint32_t n_embd, guild_err_t *err);

/* A worker's request for bytes [offset, offset + length) of the model file (length 0: the sizes only). */
int data_send_shard_read(void *dealer, uint64_t generation, uint32_t worker, uint64_t offset, uint64_t length,
                         guild_err_t *err);
/* The answer: `length` bytes at `bytes` read at `offset`, the file's size and data offset; or error (non-NULL:
 * no bytes). */
int data_send_shard_data(void *router, const guild_msg_peer_t *to, uint64_t offset, uint64_t length,
                         uint64_t file_size, uint64_t data_offset, const void *bytes, const char *error,
                         guild_err_t *err);

/* Receives one message within timeout_ms (0: poll). GUILD_MSG_OK: *m filled (close it with data_msg_close). */
guild_msg_result_t data_recv(void *sock, int timeout_ms, data_msg_t *m, guild_err_t *err);
void data_msg_close(data_msg_t *m);

/* A tcp data endpoint whose host is "*" (as the coordinator sends it) takes the host of the worker's
 * control endpoint: tcp, star, port 5556 with control tcp://10.0.0.1:5555 gives tcp://10.0.0.1:5556. Other
 * endpoints are copied. -1 with err if it does not fit. */
int data_endpoint_resolve(const char *data_endpoint, const char *control_endpoint, char *out, size_t size,
                          guild_err_t *err);

#endif
