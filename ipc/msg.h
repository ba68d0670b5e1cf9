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
 * with an Error). Sends never block: a full queue or an unknown peer is an error. A tcp endpoint is secured with
 * CURVE (ipc/curve.h) or was explicitly left insecure; ipc and inproc endpoints are plain.
 */
#ifndef GUILD_IPC_MSG_H
#define GUILD_IPC_MSG_H

#include "core/util/err.h"
#include "ipc/curve.h"
#include "proto/guild.pb-c.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GUILD_PROTOCOL_VERSION 6u /* 2: Options gained the pipeline's fields; 3: gpu_resident_layers; 4: one options
                                    message per role in Assign; 5: the GPU plan; 6: shard digests in Ready,
                                    ShardRead/ShardData (proto/guild.proto) */
#define GUILD_MSG_MAX_BYTES ((size_t)1 << 20) /* control messages are small: a shard is a list of ranges */
#define GUILD_MSG_MAX_IDENTITY 255             /* ZeroMQ routing ids are 1..255 bytes */
#define GUILD_MSG_MAX_FRAMES 4                 /* frames of a received message kept (guild_msg_recv_frames) */

/* A ROUTER peer: its routing id. */
typedef struct guild_msg_peer {
    uint8_t id[GUILD_MSG_MAX_IDENTITY];
    size_t len; /* 0: unknown */
    char user[GUILD_CURVE_NAME_MAX]; /* received over CURVE: the name of its key in the allow list (ipc/zap.h);
                                        "" otherwise */
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

/* How guild_msg_socket_new makes a socket. */
typedef struct guild_msg_socket_opts {
    int64_t max_bytes;          /* ZMQ_MAXMSGSIZE when > 0: ZeroMQ drops the connection of a peer that sends more */
    const guild_curve_t *curve; /* a tcp endpoint's security (ipc/curve.h: loaded keys, or an insecure one); must
                                   be given for a tcp endpoint, is ignored for others */
    void **monitor;             /* a DEALER's handshake events: a PAIR socket made before it connects, to read
                                   with guild_msg_monitor_read (close it with guild_msg_close); NULL: none */
} guild_msg_socket_opts_t;

/* A ROUTER bound to endpoint (`router`), or a DEALER with routing id `identity` (1..255 bytes) connected to it, in
 * ZeroMQ context zctx: no linger; a ROUTER with mandatory routing and handover of a reconnecting routing id;
 * a tcp endpoint secured as opts->curve says: a ROUTER as a CURVE server (guild_msg_bind), a DEALER as a CURVE
 * client that talks only to the server key it was given. NULL with err on failure, and for a tcp endpoint
 * without opts->curve. Close with guild_msg_close. */
void *guild_msg_socket_new(void *zctx, bool router, const char *endpoint, const char *identity,
                           const guild_msg_socket_opts_t *opts, guild_err_t *err);

/* Binds one more endpoint to a ROUTER. A tcp endpoint needs curve: with keys it is bound as a CURVE server
 * whose clients the context's ZAP handler judges (ipc/zap.h: make it first), then the socket is put back to
 * plain for later binds (which the handler then also hears about, and accepts: their security was decided
 * at their bind); an insecure curve binds plain tcp. -1 with err. */
int guild_msg_bind(void *sock, const char *endpoint, const guild_curve_t *curve, guild_err_t *err);

/* guild_msg_socket_new for control traffic over ipc (endpoint an ipc path): max_bytes at 4x
 * GUILD_MSG_MAX_BYTES, no CURVE (so no tcp). */
#define GUILD_MSG_CONTROL_MAX_BYTES ((int64_t)(4 * GUILD_MSG_MAX_BYTES))
void *guild_msg_router_new(void *zctx, const char *endpoint, guild_err_t *err);
void *guild_msg_dealer_new(void *zctx, const char *endpoint, const char *identity, guild_err_t *err);

/* What a DEALER's monitor reported (guild_msg_monitor_read). */
typedef enum guild_msg_handshake {
    GUILD_MSG_HS_NONE = 0,    /* nothing (more) to read */
    GUILD_MSG_HS_OK,          /* a handshake succeeded */
    GUILD_MSG_HS_REFUSED,     /* the server refused our key (ZAP status in *value: 400) */
    GUILD_MSG_HS_MISMATCH,    /* the two sides do not speak the same security (CURVE against plain tcp) */
    GUILD_MSG_HS_FAILED,      /* a handshake failed otherwise (a wrong server key looks like this) */
    GUILD_MSG_HS_OTHER,       /* an event that says nothing about security (connected, retried, ...) */
} guild_msg_handshake_t;

/* Reads one pending event of a monitor without blocking; *value: the event's value (a status code, a protocol
 * error, an errno). */
guild_msg_handshake_t guild_msg_monitor_read(void *monitor, uint32_t *value);

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
/* The name of the sender's key when frame i came over CURVE (ipc/zap.h), "" otherwise; into user[n]. */
void guild_msg_frame_user(guild_msg_frames_t *f, int i, char *user, size_t n);
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
