/* ipc/msg.c — envelope framing over ROUTER/DEALER (contract in msg.h). */
#include "config.h"

#include "ipc/msg.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

_Static_assert(sizeof(zmq_msg_t) <= sizeof(((guild_msg_frames_t *)0)->msgs_[0]), "guild_msg_frames_t holds zmq_msg_t");

static int set_int(void *sock, int opt, int value, const char *name, guild_err_t *err)
{
    if (zmq_setsockopt(sock, opt, &value, sizeof value) < 0)
        return guild_err_set(err, "zmq_setsockopt %s: %s", name, zmq_strerror(zmq_errno()));
    return 0;
}

/* A tcp endpoint must come with its security decided (keys, or --insecure). */
static int need_curve(const char *endpoint, const guild_curve_t *curve, guild_err_t *err)
{
    if (guild_curve_endpoint_is_tcp(endpoint) && !curve)
        return guild_err_set(err, "%s: a tcp endpoint without CURVE keys (or --insecure)", endpoint);
    return 0;
}

static int set_str(void *sock, int opt, const char *value, const char *name, guild_err_t *err)
{
    if (zmq_setsockopt(sock, opt, value, strlen(value)) < 0)
        return guild_err_set(err, "zmq_setsockopt %s: %s", name, zmq_strerror(zmq_errno()));
    return 0;
}

int guild_msg_bind(void *sock, const char *endpoint, const guild_curve_t *curve, guild_err_t *err)
{
    if (need_curve(endpoint, curve, err) < 0)
        return -1;
    const bool secure = guild_curve_endpoint_is_tcp(endpoint) && !curve->insecure;
    if (secure) {
        GUILD_ASSERT(curve->server);
        /* options apply to the binds made after them: this endpoint only (put back below) */
        if (set_int(sock, ZMQ_CURVE_SERVER, 1, "ZMQ_CURVE_SERVER", err) < 0 ||
            set_str(sock, ZMQ_CURVE_SECRETKEY, curve->secret_key, "ZMQ_CURVE_SECRETKEY", err) < 0 ||
            set_str(sock, ZMQ_ZAP_DOMAIN, "guild", "ZMQ_ZAP_DOMAIN", err) < 0)
            return -1;
    }
    int rc = 0;
    if (zmq_bind(sock, endpoint) < 0)
        rc = guild_err_set(err, "bind %s: %s", endpoint, zmq_strerror(zmq_errno()));
    /* ZeroMQ cannot empty a ZAP domain once set: later plain binds keep it, and the ZAP handler accepts their
     * NULL handshakes (ipc/zap.h) */
    if (secure && set_int(sock, ZMQ_CURVE_SERVER, 0, "ZMQ_CURVE_SERVER", err) < 0)
        rc = -1;
    return rc;
}

/* A DEALER's CURVE client keys, before it connects. */
static int curve_client(void *s, const guild_curve_t *curve, guild_err_t *err)
{
    GUILD_ASSERT(!curve->server);
    if (set_str(s, ZMQ_CURVE_SERVERKEY, curve->server_key, "ZMQ_CURVE_SERVERKEY", err) < 0 ||
        set_str(s, ZMQ_CURVE_PUBLICKEY, curve->public_key, "ZMQ_CURVE_PUBLICKEY", err) < 0 ||
        set_str(s, ZMQ_CURVE_SECRETKEY, curve->secret_key, "ZMQ_CURVE_SECRETKEY", err) < 0)
        return -1;
    return 0;
}

#define MONITOR_EVENTS                                                                                            \
    (ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |     \
     ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL)

/* A PAIR reading s's handshake events (made before s connects, so that none is missed). */
static void *monitor_new(void *zctx, void *s, guild_err_t *err)
{
    char ep[64];
    snprintf(ep, sizeof ep, "inproc://guild-msg-monitor-%p", s);
    if (zmq_socket_monitor(s, ep, MONITOR_EVENTS) < 0) {
        guild_err_set(err, "zmq_socket_monitor: %s", zmq_strerror(zmq_errno()));
        return NULL;
    }
    void *m = zmq_socket(zctx, ZMQ_PAIR);
    if (!m || set_int(m, ZMQ_LINGER, 0, "ZMQ_LINGER", err) < 0 || zmq_connect(m, ep) < 0) {
        if (m)
            zmq_close(m);
        guild_err_set(err, "monitor %s: %s", ep, zmq_strerror(zmq_errno()));
        return NULL;
    }
    return m;
}

void *guild_msg_socket_new(void *zctx, bool router, const char *endpoint, const char *identity,
                           const guild_msg_socket_opts_t *opts, guild_err_t *err)
{
    size_t idlen = identity ? strlen(identity) : 0;
    if (opts->monitor)
        *opts->monitor = NULL;
    if (!router && (idlen == 0 || idlen > GUILD_MSG_MAX_IDENTITY)) {
        guild_err_set(err, "connect %s: routing id must be 1..%d bytes", endpoint, GUILD_MSG_MAX_IDENTITY);
        return NULL;
    }
    if (need_curve(endpoint, opts->curve, err) < 0)
        return NULL;
    void *s = zmq_socket(zctx, router ? ZMQ_ROUTER : ZMQ_DEALER);
    if (!s) {
        guild_err_set(err, "zmq_socket %s: %s", router ? "ROUTER" : "DEALER", zmq_strerror(zmq_errno()));
        return NULL;
    }
    const int64_t max_bytes = opts->max_bytes;
    if (max_bytes > 0 && zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &max_bytes, sizeof max_bytes) < 0) {
        guild_err_set(err, "zmq_setsockopt ZMQ_MAXMSGSIZE: %s", zmq_strerror(zmq_errno()));
        goto fail;
    }
    if (set_int(s, ZMQ_LINGER, 0, "ZMQ_LINGER", err) < 0)
        goto fail;
    if (router) {
        if (set_int(s, ZMQ_ROUTER_MANDATORY, 1, "ZMQ_ROUTER_MANDATORY", err) < 0 ||
            set_int(s, ZMQ_ROUTER_HANDOVER, 1, "ZMQ_ROUTER_HANDOVER", err) < 0)
            goto fail;
        if (guild_msg_bind(s, endpoint, opts->curve, err) < 0)
            goto fail;
        return s;
    }
    if (zmq_setsockopt(s, ZMQ_ROUTING_ID, identity, idlen) < 0) {
        guild_err_set(err, "zmq_setsockopt ZMQ_ROUTING_ID: %s", zmq_strerror(zmq_errno()));
        goto fail;
    }
    if (guild_curve_endpoint_is_tcp(endpoint) && !opts->curve->insecure && curve_client(s, opts->curve, err) < 0)
        goto fail;
    if (opts->monitor && !(*opts->monitor = monitor_new(zctx, s, err)))
        goto fail;
    if (zmq_connect(s, endpoint) < 0) {
        guild_err_set(err, "connect %s: %s", endpoint, zmq_strerror(zmq_errno()));
        goto fail;
    }
    return s;
fail:
    if (opts->monitor && *opts->monitor) {
        zmq_close(*opts->monitor);
        *opts->monitor = NULL;
    }
    zmq_close(s);
    return NULL;
}

void *guild_msg_router_new(void *zctx, const char *endpoint, guild_err_t *err)
{
    const guild_msg_socket_opts_t o = {.max_bytes = GUILD_MSG_CONTROL_MAX_BYTES};
    return guild_msg_socket_new(zctx, true, endpoint, NULL, &o, err);
}

void *guild_msg_dealer_new(void *zctx, const char *endpoint, const char *identity, guild_err_t *err)
{
    const guild_msg_socket_opts_t o = {.max_bytes = GUILD_MSG_CONTROL_MAX_BYTES};
    return guild_msg_socket_new(zctx, false, endpoint, identity, &o, err);
}

guild_msg_handshake_t guild_msg_monitor_read(void *monitor, uint32_t *value)
{
    *value = 0;
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, monitor, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&m);
        return GUILD_MSG_HS_NONE;
    }
    /* frame 1: event (u16) and value (u32); frame 2: the endpoint */
    uint16_t event = 0;
    if (zmq_msg_size(&m) >= 6) {
        memcpy(&event, zmq_msg_data(&m), 2);
        memcpy(value, (const char *)zmq_msg_data(&m) + 2, 4);
    }
    while (zmq_msg_more(&m)) {
        zmq_msg_close(&m);
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, monitor, ZMQ_DONTWAIT) < 0)
            break;
    }
    zmq_msg_close(&m);
    switch (event) {
    case ZMQ_EVENT_HANDSHAKE_SUCCEEDED: return GUILD_MSG_HS_OK;
    case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH: return GUILD_MSG_HS_REFUSED;
    case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
        return *value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH ? GUILD_MSG_HS_MISMATCH : GUILD_MSG_HS_FAILED;
    case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL: return GUILD_MSG_HS_FAILED;
    default: return GUILD_MSG_HS_OTHER;
    }
}

void guild_msg_close(void **psock)
{
    if (!psock || !*psock)
        return;
    zmq_close(*psock);
    *psock = NULL;
}

int guild_msg_send_frames(void *sock, const guild_msg_peer_t *to, const void *const *frames, const size_t *len,
                          int n, const char *what, guild_err_t *err)
{
    GUILD_ASSERT(n >= 1);
    if (to && (to->len == 0 || to->len > GUILD_MSG_MAX_IDENTITY))
        return guild_err_set(err, "%s: no peer routing id", what);
    if (to && zmq_send(sock, to->id, to->len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
        goto fail;
    for (int i = 0; i < n; i++)
        if (zmq_send(sock, frames[i], len[i], (i + 1 < n ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT) < 0)
            goto fail;
    return 0;
fail:;
    const int e = zmq_errno();
    if (e == EHOSTUNREACH && to)
        return guild_err_set(err, "%s: peer %.*s is not connected", what, (int)to->len, (const char *)to->id);
    if (e == EAGAIN)
        return guild_err_set(err, "%s: the peer's queue is full", what);
    return guild_err_set(err, "%s: %s", what, zmq_strerror(e));
}

guild_msg_result_t guild_msg_recv_frames(void *sock, int timeout_ms, guild_msg_frames_t *f, guild_err_t *err)
{
    memset(f, 0, sizeof *f);
    zmq_pollitem_t item = {sock, 0, ZMQ_POLLIN, 0};
    int n = zmq_poll(&item, 1, timeout_ms);
    if (n < 0) {
        int e = zmq_errno();
        if (e == EINTR)
            return GUILD_MSG_TIMEOUT;
        guild_err_set(err, "receive: %s", zmq_strerror(e));
        return GUILD_MSG_ERROR;
    }
    if (n == 0)
        return GUILD_MSG_TIMEOUT;
    /* every frame of the message (ZeroMQ delivers multipart messages whole), the first GUILD_MSG_MAX_FRAMES kept */
    int more = 1;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, sock, ZMQ_DONTWAIT) < 0) {
            int e = zmq_errno();
            zmq_msg_close(&m);
            const int total = f->n_total;
            guild_msg_frames_close(f);
            if (e == EAGAIN && total == 0)
                return GUILD_MSG_TIMEOUT;
            guild_err_set(err, "receive: %s", zmq_strerror(e));
            return GUILD_MSG_ERROR;
        }
        more = zmq_msg_more(&m);
        f->n_total++;
        if (f->n_kept < GUILD_MSG_MAX_FRAMES) {
            zmq_msg_t *slot = (zmq_msg_t *)(void *)f->msgs_[f->n_kept++];
            zmq_msg_init(slot);
            zmq_msg_move(slot, &m);
        }
        zmq_msg_close(&m);
    }
    return GUILD_MSG_OK;
}

const void *guild_msg_frame_data(guild_msg_frames_t *f, int i)
{
    GUILD_ASSERT(i >= 0 && i < f->n_kept);
    return zmq_msg_data((zmq_msg_t *)(void *)f->msgs_[i]);
}

size_t guild_msg_frame_size(guild_msg_frames_t *f, int i)
{
    GUILD_ASSERT(i >= 0 && i < f->n_kept);
    return zmq_msg_size((zmq_msg_t *)(void *)f->msgs_[i]);
}

void guild_msg_frame_user(guild_msg_frames_t *f, int i, char *user, size_t n)
{
    GUILD_ASSERT(i >= 0 && i < f->n_kept && n > 0);
    const char *u = zmq_msg_gets((zmq_msg_t *)(void *)f->msgs_[i], "User-Id");
    snprintf(user, n, "%s", u ? u : "");
}

void guild_msg_frames_close(guild_msg_frames_t *f)
{
    for (int i = 0; i < f->n_kept; i++)
        zmq_msg_close((zmq_msg_t *)(void *)f->msgs_[i]);
    memset(f, 0, sizeof *f);
}

static int socket_type(void *sock)
{
    int type = -1;
    size_t len = sizeof type;
    if (zmq_getsockopt(sock, ZMQ_TYPE, &type, &len) < 0)
        return -1;
    return type;
}

int guild_msg_send(void *sock, const guild_msg_peer_t *to, Guild__Envelope *env, guild_err_t *err)
{
    int router = socket_type(sock) == ZMQ_ROUTER;
    GUILD_ASSERT(router ? to != NULL : to == NULL);
    env->protocol_version = GUILD_PROTOCOL_VERSION;
    size_t len = guild__envelope__get_packed_size(env);
    if (len > GUILD_MSG_MAX_BYTES)
        return guild_err_set(err, "send %s: %zu bytes exceeds the %zu-byte message limit",
                             guild_msg_body_name(env), len, GUILD_MSG_MAX_BYTES);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        return guild_err_set(err, "send %s: out of memory", guild_msg_body_name(env));
    guild__envelope__pack(env, buf);
    char what[64];
    snprintf(what, sizeof what, "send %s", guild_msg_body_name(env));
    const void *frame = buf;
    const int rc = guild_msg_send_frames(sock, to, &frame, &len, 1, what, err);
    free(buf);
    return rc;
}

int guild_msg_send_error(void *sock, const guild_msg_peer_t *to, Guild__ErrorCode code, int fatal,
                         const char *message, guild_err_t *err)
{
    Guild__Envelope env = GUILD__ENVELOPE__INIT;
    Guild__Error e = GUILD__ERROR__INIT;
    e.code = code;
    e.fatal = fatal != 0;
    e.message = (char *)message;
    env.body_case = GUILD__ENVELOPE__BODY_ERROR;
    env.error = &e;
    return guild_msg_send(sock, to, &env, err);
}

/* Semantic checks that protobuf decoding cannot make: enum values in range, strings present where a
 * receiver would otherwise act on nothing. */
static int check_body(const Guild__Envelope *env, guild_err_t *err)
{
    switch (env->body_case) {
    case GUILD__ENVELOPE__BODY_REGISTER_WORKER: {
        const Guild__Register *r = env->register_worker;
        if (r->role <= GUILD__ROLE__ROLE_UNSPECIFIED || r->role > GUILD__ROLE__ROLE_STAGER)
            return guild_err_set(err, "register: unknown role %d", (int)r->role);
        if (r->pid <= 0)
            return guild_err_set(err, "register: invalid pid %d", (int)r->pid);
        return 0;
    }
    case GUILD__ENVELOPE__BODY_ASSIGN: {
        const Guild__Assign *a = env->assign;
        if (!a->model_path || !a->model_path[0])
            return guild_err_set(err, "assign: no model path");
        for (size_t i = 0; i < a->n_shard; i++)
            for (size_t j = 0; j < a->shard[i]->n_experts; j++)
                if (a->shard[i]->experts[j]->count == 0)
                    return guild_err_set(err, "assign: layer %u: empty expert range", a->shard[i]->layer);
        if (a->arena && (!a->arena->name || !a->arena->name[0]))
            return guild_err_set(err, "assign: arena without a name");
        return 0;
    }
    case GUILD__ENVELOPE__BODY_ERROR:
        if (env->error->code < GUILD__ERROR_CODE__ERROR_UNSPECIFIED ||
            env->error->code > GUILD__ERROR_CODE__ERROR_INTERNAL)
            return guild_err_set(err, "error: unknown code %d", (int)env->error->code);
        return 0;
    case GUILD__ENVELOPE__BODY_READY:
    case GUILD__ENVELOPE__BODY_HEARTBEAT:
    case GUILD__ENVELOPE__BODY_STATS_REQUEST:
    case GUILD__ENVELOPE__BODY_STATS:
    case GUILD__ENVELOPE__BODY_SHUTDOWN:
        return 0;
    default:
        return guild_err_set(err, "envelope without a known body (field %d; a newer peer?)", (int)env->body_case);
    }
}

Guild__Envelope *guild_msg_decode(const void *data, size_t len, guild_err_t *err)
{
    if (len > GUILD_MSG_MAX_BYTES) {
        guild_err_set(err, "message of %zu bytes exceeds the %zu-byte limit", len, GUILD_MSG_MAX_BYTES);
        return NULL;
    }
    if (len == 0) {
        guild_err_set(err, "empty message");
        return NULL;
    }
    Guild__Envelope *env = guild__envelope__unpack(NULL, len, data);
    if (!env) {
        guild_err_set(err, "malformed envelope (%zu bytes that do not decode as guild.Envelope)", len);
        return NULL;
    }
    if (env->protocol_version != GUILD_PROTOCOL_VERSION) {
        guild_err_set(err, "protocol version %u, this build speaks %u", env->protocol_version,
                      GUILD_PROTOCOL_VERSION);
        goto fail;
    }
    if (check_body(env, err) < 0)
        goto fail;
    return env;
fail:
    guild__envelope__free_unpacked(env, NULL);
    return NULL;
}

void guild_msg_free(Guild__Envelope **penv)
{
    if (!penv || !*penv)
        return;
    guild__envelope__free_unpacked(*penv, NULL);
    *penv = NULL;
}

guild_msg_result_t guild_msg_recv(void *sock, int timeout_ms, guild_msg_peer_t *from, Guild__Envelope **out,
                                  guild_err_t *err)
{
    *out = NULL;
    int router = socket_type(sock) == ZMQ_ROUTER;
    GUILD_ASSERT(router ? from != NULL : from == NULL);
    if (from) {
        from->len = 0;
        from->user[0] = '\0';
    }
    guild_msg_frames_t f;
    const guild_msg_result_t r = guild_msg_recv_frames(sock, timeout_ms, &f, err);
    if (r != GUILD_MSG_OK)
        return r;
    /* a frame count other than the expected one makes the whole message bad */
    guild_msg_result_t rc = GUILD_MSG_BAD;
    int payload = 0;
    if (router) {
        size_t idlen = guild_msg_frame_size(&f, 0);
        if (idlen > 0 && idlen <= GUILD_MSG_MAX_IDENTITY) {
            memcpy(from->id, guild_msg_frame_data(&f, 0), idlen);
            from->len = idlen;
        }
        payload = 1;
        if (f.n_kept > 1)
            guild_msg_frame_user(&f, 1, from->user, sizeof from->user);
    }
    if (f.n_total != payload + 1) {
        guild_err_set(err, "message of %d frames, expected %d", f.n_total - payload, 1);
    } else {
        *out = guild_msg_decode(guild_msg_frame_data(&f, payload), guild_msg_frame_size(&f, payload), err);
        if (*out)
            rc = GUILD_MSG_OK;
    }
    guild_msg_frames_close(&f);
    return rc;
}

const char *guild_msg_body_name(const Guild__Envelope *env)
{
    switch (env->body_case) {
    case GUILD__ENVELOPE__BODY_REGISTER_WORKER: return "register";
    case GUILD__ENVELOPE__BODY_ASSIGN: return "assign";
    case GUILD__ENVELOPE__BODY_READY: return "ready";
    case GUILD__ENVELOPE__BODY_HEARTBEAT: return "heartbeat";
    case GUILD__ENVELOPE__BODY_STATS_REQUEST: return "stats_request";
    case GUILD__ENVELOPE__BODY_STATS: return "stats";
    case GUILD__ENVELOPE__BODY_ERROR: return "error";
    case GUILD__ENVELOPE__BODY_SHUTDOWN: return "shutdown";
    default: return "none";
    }
}
