/* ipc/msg.h — Guild's one set of ZeroMQ helpers (sockets, multipart frames; the data socket, ipc/data.h, is built
 * on them) and the control messages over them: one protobuf-c Envelope (proto/guild.proto) per message.
 *
 * The coordinator binds a ROUTER, each worker connects a DEALER with a routing id of its choosing
 * ("cpu-worker-0"). On the wire a DEALER sends [payload] and the ROUTER sees [identity][payload]; a message
 * with any other frame count is malformed. Payloads are limited to GUILD_MSG_MAX_BYTES (a clear error on
 * receive); the sockets made here also have ZMQ_MAXMSGSIZE at 4x that, so ZeroMQ drops the connection of a
 * peer that sends anything absurd before buffering it. Nothing received can crash the receiver: garbage,
 * truncation, a wrong protocol version, an envelope without a body all come back as GUILD_MSG_BAD with a
 * message, the bytes dropped, the socket still usable (the ROUTER side also learns who sent it, to answer
 * with an Error). Sends never block: a full queue or an unknown peer is an error.
 */
#ifndef GUILD_IPC_MSG_H
#define GUILD_IPC_MSG_H

#include "core/util/err.h"
#include "proto/guild.pb-c.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GUILD_PROTOCOL_VERSION 5u /* 2: Options gained the pipeline's fields; 3: gpu_resident_layers; 4: one options
                                    message per role in Assign; 5: the GPU plan (proto/guild.proto) */
#define GUILD_MSG_MAX_BYTES ((size_t)1 << 20) /* control messages are small: a shard is a list of ranges */
#define GUILD_MSG_MAX_IDENTITY 255             /* ZeroMQ routing ids are 1..255 bytes */
#define GUILD_MSG_MAX_FRAMES 4                 /* frames of a received message kept (guild_msg_recv_frames) */

/* A ROUTER peer: its routing id. */
typedef struct guild_msg_peer {
    uint8_t id[GUILD_MSG_MAX_IDENTITY];
    size_t len; /* 0: unknown */
} guild_msg_peer_t;

typedef enum guild_msg_result {
    GUILD_MSG_OK = 0,
    GUILD_MSG_TIMEOUT = 1, /* nothing arrived in time */
    GUILD_MSG_BAD = -1,    /* a malformed message was received and dropped; err says why */
    GUILD_MSG_ERROR = -2,  /* the socket failed (context terminated, ...); err says why */
} guild_msg_result_t;

/* A received multipart message: its first GUILD_MSG_MAX_FRAMES frames (on a ROUTER the sender's routing id
 * first), valid until guild_msg_frames_close. */
typedef struct guild_msg_frames {
    int n_kept;  /* frames held */
    int n_total; /* frames the message had (the ones past n_kept were read and dropped) */
    _Alignas(16) unsigned char msgs_[GUILD_MSG_MAX_FRAMES][64]; /* zmq_msg_t each */
} guild_msg_frames_t;

/* A ROUTER bound to endpoint (`router`), or a DEALER with routing id `identity` (1..255 bytes) connected to it, in
 * ZeroMQ context zctx: no linger; a ROUTER with mandatory routing and handover of a reconnecting routing id;
 * ZMQ_MAXMSGSIZE at max_bytes when > 0 (ZeroMQ drops the connection of a peer that sends more). Close with
 * guild_msg_close. NULL with err on failure. */
void *guild_msg_socket_new(void *zctx, bool router, const char *endpoint, const char *identity, int64_t max_bytes,
                           guild_err_t *err);

/* guild_msg_socket_new for control traffic (endpoint e.g. an ipc path or "tcp://0.0.0.0:5555"): max_bytes at 4x
 * GUILD_MSG_MAX_BYTES. */
void *guild_msg_router_new(void *zctx, const char *endpoint, guild_err_t *err);
void *guild_msg_dealer_new(void *zctx, const char *endpoint, const char *identity, guild_err_t *err);

/* Closes a socket made above and nulls *psock. NULL-safe. */
void guild_msg_close(void **psock);

/* Sends a multipart message without blocking: on a ROUTER first the routing id of `to` (NULL on a DEALER), then
 * frames[0..n) of len[i] bytes. -1 with err prefixed by `what` ("send assign: peer x is not connected", "...: the
 * peer's queue is full"). */
int guild_msg_send_frames(void *sock, const guild_msg_peer_t *to, const void *const *frames, const size_t *len,
                          int n, const char *what, guild_err_t *err);

/* Waits up to timeout_ms (-1: forever, 0: poll) for a message and reads all of its frames into *f. GUILD_MSG_OK
 * (close *f after), GUILD_MSG_TIMEOUT (also when a signal interrupted the wait), or GUILD_MSG_ERROR with err; the
 * caller judges the frames. */
guild_msg_result_t guild_msg_recv_frames(void *sock, int timeout_ms, guild_msg_frames_t *f, guild_err_t *err);
const void *guild_msg_frame_data(guild_msg_frames_t *f, int i); /* frame i < n_kept */
size_t guild_msg_frame_size(guild_msg_frames_t *f, int i);
void guild_msg_frames_close(guild_msg_frames_t *f);

/* Sends env, stamped with GUILD_PROTOCOL_VERSION. On a ROUTER `to` names the peer; on a DEALER it must be
 * NULL. -1 with err if the envelope is too large, the peer unknown, or the queue full. */
int guild_msg_send(void *sock, const guild_msg_peer_t *to, Guild__Envelope *env, guild_err_t *err);

/* Sends an Error envelope (code, message, fatal) — the reply to a bad message. -1 with err on failure. */
int guild_msg_send_error(void *sock, const guild_msg_peer_t *to, Guild__ErrorCode code, int fatal,
                         const char *message, guild_err_t *err);

/* Receives one envelope, waiting up to timeout_ms (-1: forever, 0: poll). On a ROUTER `from` receives the
 * sender (also for GUILD_MSG_BAD, when known); on a DEALER pass NULL. On GUILD_MSG_OK *out is the decoded
 * envelope, owned by the caller (guild_msg_free). */
guild_msg_result_t guild_msg_recv(void *sock, int timeout_ms, guild_msg_peer_t *from, Guild__Envelope **out,
                                  guild_err_t *err);

/* Decodes and checks one payload (the receive path without the socket): size limit, protobuf, protocol
 * version, a body present and plausible. NULL with err when bad. */
Guild__Envelope *guild_msg_decode(const void *data, size_t len, guild_err_t *err);

/* Frees an envelope from guild_msg_recv / guild_msg_decode and nulls *penv. NULL-safe. */
void guild_msg_free(Guild__Envelope **penv);

/* "register_worker", "assign", ... for logs; "none" when unset. */
const char *guild_msg_body_name(const Guild__Envelope *env);

#endif
