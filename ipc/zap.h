/* ipc/zap.h — the coordinator's judge of CURVE clients: a ZeroMQ ZAP handler (RFC 27) that accepts a client
 * whose public key is in the allow list (ipc/curve.h) and refuses every other one.
 *
 * ZeroMQ asks the ZAP handler of a socket's context about each handshake on an endpoint bound with a ZAP domain
 * (guild_msg_bind sets one on the tcp endpoints it secures); the handler answers 200 with the key's name as the
 * user id (ZeroMQ attaches it to every message of that connection: guild_msg_peer_t.user), or 400. NULL
 * handshakes are accepted (only an endpoint bound plain can complete one: guild_msg_bind), PLAIN ones refused. The handler must run before such an endpoint is bound and until its socket is
 * closed: make it first, destroy it last (before zmq_ctx_term). One per context.
 */
#ifndef GUILD_IPC_ZAP_H
#define GUILD_IPC_ZAP_H

#include <stdint.h>

#include "core/util/err.h"
#include "ipc/curve.h"

typedef struct guild_zap guild_zap_t;

/* Binds the ZAP endpoint in zctx and starts the handler's thread over curve's allow list (borrowed: it must
 * outlive the handler). -1 with err (another handler in this context, no thread). */
int guild_zap_new(guild_zap_t **out, void *zctx, const guild_curve_t *curve, guild_err_t *err);

/* Stops the thread and closes its socket; nulls *pz. NULL-safe. */
void guild_zap_destroy(guild_zap_t **pz);

/* Handshakes accepted and refused so far. */
void guild_zap_counts(const guild_zap_t *z, uint64_t *accepted, uint64_t *refused);

#endif
