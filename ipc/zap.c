#include "config.h"

#include "ipc/zap.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "ipc/doorbell.h"
#include "core/util/log.h"

#define ZAP_ENDPOINT "inproc://zeromq.zap.01" /* fixed by RFC 27 */
#define POLL_MS 50                            /* how late a stop is noticed */
#define REQ_FRAMES 7                          /* version, id, domain, address, identity, mechanism, key */
#define LOG_EVERY_NS 1000000000ull            /* refusals are logged at most once a second (a client may retry) */

struct guild_zap {
    const guild_curve_t *curve;
    void *rep;
    pthread_t thread;
    bool started;
    _Atomic int stop;
    _Atomic uint64_t accepted, refused;
    uint64_t last_log_ns;
    uint64_t unlogged;
};

static void reply(guild_zap_t *z, const void *id, size_t id_len, const char *status, const char *text,
                  const char *user)
{
    /* version, request id, status code, status text, user id, metadata */
    const void *f[6] = {"1.0", id, status, text, user, ""};
    const size_t n[6] = {3, id_len, strlen(status), strlen(text), strlen(user), 0};
    for (int i = 0; i < 6; i++)
        if (zmq_send(z->rep, f[i], n[i], i < 5 ? ZMQ_SNDMORE : 0) < 0) {
            guild_log(GUILD_LOG_WARN, "ZAP: cannot answer: %s", zmq_strerror(zmq_errno()));
            return;
        }
}

static void refused(guild_zap_t *z, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void refused(guild_zap_t *z, const char *fmt, ...)
{
    atomic_fetch_add(&z->refused, 1);
    uint64_t now = guild_now_ns();
    if (z->last_log_ns && now - z->last_log_ns < LOG_EVERY_NS) {
        z->unlogged++;
        return;
    }
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (z->unlogged)
        guild_log(GUILD_LOG_WARN, "%s (and %llu more refusals in the last second)", msg,
                  (unsigned long long)z->unlogged);
    else
        guild_log(GUILD_LOG_WARN, "%s", msg);
    z->unlogged = 0;
    z->last_log_ns = now;
}

/* One request: every frame read (the first REQ_FRAMES kept), then one reply. */
static void handle(guild_zap_t *z)
{
    zmq_msg_t f[REQ_FRAMES];
    int n = 0, more = 1, total = 0;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, z->rep, 0) < 0) {
            zmq_msg_close(&m);
            break;
        }
        more = zmq_msg_more(&m);
        total++;
        if (n < REQ_FRAMES) {
            zmq_msg_init(&f[n]);
            zmq_msg_move(&f[n++], &m);
        }
        zmq_msg_close(&m);
    }
    if (n < 6) { /* not even an id to answer to: REP needs a reply anyway */
        if (n >= 2)
            reply(z, zmq_msg_data(&f[1]), zmq_msg_size(&f[1]), "500", "malformed ZAP request", "");
        else if (total)
            reply(z, "", 0, "500", "malformed ZAP request", "");
        goto out;
    }
    const void *id = zmq_msg_data(&f[1]);
    size_t id_len = zmq_msg_size(&f[1]);
    char addr[64] = "", mech[16] = "";
    snprintf(addr, sizeof addr, "%.*s", (int)zmq_msg_size(&f[3]), (const char *)zmq_msg_data(&f[3]));
    snprintf(mech, sizeof mech, "%.*s", (int)zmq_msg_size(&f[5]), (const char *)zmq_msg_data(&f[5]));
    if (zmq_msg_size(&f[0]) != 3 || memcmp(zmq_msg_data(&f[0]), "1.0", 3) != 0) {
        reply(z, id, id_len, "500", "ZAP version 1.0 only", "");
        goto out;
    }
    if (!strcmp(mech, "NULL")) {
        /* only a plain endpoint completes a NULL handshake (a CURVE endpoint fails it at the greeting, before
         * asking): one bound plain after a secure one on the same socket, which keeps the ZAP domain */
        reply(z, id, id_len, "200", "OK", "");
        goto out;
    }
    if (strcmp(mech, "CURVE") != 0 || n < 7 || zmq_msg_size(&f[6]) != 32) {
        refused(z, "control: refused a connection from %s: mechanism %s (only CURVE is accepted here)", addr, mech);
        reply(z, id, id_len, "400", "CURVE only", "");
        goto out;
    }
    const uint8_t *key = zmq_msg_data(&f[6]);
    const guild_curve_peer_t *p = guild_curve_find(z->curve, key);
    if (!p) {
        char z85[GUILD_CURVE_Z85 + 1];
        zmq_z85_encode(z85, key, 32);
        refused(z, "control: refused a CURVE client from %s: its public key %s is not in the allow list %s", addr,
                z85, z->curve->allow_path);
        reply(z, id, id_len, "400", "public key not allowed", "");
        goto out;
    }
    atomic_fetch_add(&z->accepted, 1);
    char user[GUILD_CURVE_NAME_MAX + 2];
    snprintf(user, sizeof user, "%s", p->name[0] ? p->name : "?");
    guild_log(GUILD_LOG_INFO, "control: accepted the CURVE key of %s from %s", user, addr);
    reply(z, id, id_len, "200", "OK", user);
out:
    for (int i = 0; i < n; i++)
        zmq_msg_close(&f[i]);
}

static void *zap_main(void *arg)
{
    guild_zap_t *z = arg;
    while (!atomic_load(&z->stop)) {
        zmq_pollitem_t item = {z->rep, 0, ZMQ_POLLIN, 0};
        int r = zmq_poll(&item, 1, POLL_MS);
        if (r < 0) {
            if (zmq_errno() == ETERM)
                break;
            continue;
        }
        if (r > 0)
            handle(z);
    }
    return NULL;
}

int guild_zap_new(guild_zap_t **out, void *zctx, const guild_curve_t *curve, guild_err_t *err)
{
    *out = NULL;
    guild_zap_t *z = calloc(1, sizeof *z);
    if (!z)
        return guild_err_set(err, "ZAP handler: out of memory");
    z->curve = curve;
    int linger = 0;
    if (!(z->rep = zmq_socket(zctx, ZMQ_REP)) || zmq_setsockopt(z->rep, ZMQ_LINGER, &linger, sizeof linger) < 0 ||
        zmq_bind(z->rep, ZAP_ENDPOINT) < 0) {
        guild_err_set(err, "ZAP handler: bind %s: %s", ZAP_ENDPOINT, zmq_strerror(zmq_errno()));
        goto fail;
    }
    int e = pthread_create(&z->thread, NULL, zap_main, z);
    if (e) {
        guild_err_errno(err, e, "ZAP handler: cannot start its thread");
        goto fail;
    }
    z->started = true;
    *out = z;
    return 0;
fail:
    guild_zap_destroy(&z);
    return -1;
}

void guild_zap_destroy(guild_zap_t **pz)
{
    guild_zap_t *z = *pz;
    if (!z)
        return;
    if (z->started) {
        atomic_store(&z->stop, 1);
        pthread_join(z->thread, NULL);
    }
    if (z->rep)
        zmq_close(z->rep);
    free(z);
    *pz = NULL;
}

void guild_zap_counts(const guild_zap_t *z, uint64_t *accepted, uint64_t *refused)
{
    *accepted = atomic_load(&((guild_zap_t *)z)->accepted);
    *refused = atomic_load(&((guild_zap_t *)z)->refused);
}
