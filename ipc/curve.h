/* ipc/curve.h — ZeroMQ CURVE for Guild's tcp endpoints: the key files `guild keygen` writes, the coordinator's
 * allow list, the options every role takes for them and their one check. The sockets themselves are set up in
 * ipc/msg.c (guild_msg_socket_new, guild_msg_bind) and the coordinator's judge of client keys is ipc/zap.h.
 *
 * Only tcp endpoints are secured: ipc:// and inproc:// stay as they are (the file system's permissions guard
 * them). A tcp endpoint without keys is refused unless the role was given --insecure.
 *
 * Files (text; '#' starts a comment line; keys are ZeroMQ's Z85 encoding, 40 characters):
 *   NAME.key  a key pair, which must be private (mode 0600 or 0400, no access for group or others):
 *               public-key = <40 chars>
 *               secret-key = <40 chars>
 *   NAME.pub  a public key, one line "<40 chars> NAME"; an allow list is any number of such lines (the
 *             concatenation of the workers' .pub files), and must not be writable by group or others, like
 *             a pinned server key (whoever may change it decides who may connect, or whom to trust).
 * The coordinator takes --key (its pair) and --allow (the workers it accepts); a worker takes --key (its pair)
 * and --server-key (the coordinator's .pub: the one public key it will talk to).
 */
#ifndef GUILD_IPC_CURVE_H
#define GUILD_IPC_CURVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/util/err.h"

#define GUILD_CURVE_Z85 40         /* characters of a key in Z85 */
#define GUILD_CURVE_NAME_MAX 64    /* bytes of a key's name, NUL included */
#define GUILD_CURVE_MAX_ALLOWED 4096 /* keys in an allow list */

/* What a role was given on its command line (all NULL/false: nothing). */
typedef struct guild_curve_options {
    const char *key;        /* --key FILE: this process's key pair */
    const char *server_key; /* --server-key FILE: a worker's pinned coordinator public key */
    const char *allow;      /* --allow FILE: the coordinator's allow list */
    bool insecure;          /* --insecure: plain tcp (no authentication, no encryption) */
} guild_curve_options_t;

/* One allowed public key. */
typedef struct guild_curve_peer {
    uint8_t key[32];                 /* binary public key */
    char name[GUILD_CURVE_NAME_MAX]; /* its name in the allow list ("" when none) */
} guild_curve_peer_t;

/* Loaded keys (guild_curve_load). A server has a pair and an allow list; a client a pair and the server's key;
 * an insecure one nothing (plain tcp, as the operator asked). */
typedef struct guild_curve {
    bool insecure;
    bool server;
    char public_key[GUILD_CURVE_Z85 + 1];
    char secret_key[GUILD_CURVE_Z85 + 1];
    char server_key[GUILD_CURVE_Z85 + 1]; /* client: the coordinator's public key */
    guild_curve_peer_t *allowed;          /* server: [n_allowed] */
    int n_allowed;
    char key_path[256];                   /* for messages */
    char allow_path[256];
} guild_curve_t;

/* 1 when endpoint is a tcp one (the endpoints CURVE applies to). */
bool guild_curve_endpoint_is_tcp(const char *endpoint);

/* The one check of a role's options against the endpoint it binds (server) or connects to (a client):
 * a tcp endpoint needs --key and --allow (server) or --key and --server-key (client), or --insecure alone;
 * keys or --insecure for an endpoint that is not tcp (or for none: endpoint NULL) are a mistake. -1 with err
 * naming the flags ("--listen tcp://...: ..."); `flag` is how the endpoint was given ("--listen",
 * "--connect"). Files are not read here (guild_curve_load). */
int guild_curve_check(const guild_curve_options_t *o, const char *flag, const char *endpoint, bool server,
                      guild_err_t *err);

/* Loads what checked options o name (*out NULL when the endpoint is not tcp: nothing to secure; an insecure
 * one when --insecure): the key pair (private file, the public key must match the secret one), the allow list
 * or the server key (not writable by others). -1 with err naming the file, the line and the fix ("chmod 600
 * FILE"). */
int guild_curve_load(guild_curve_t **out, const guild_curve_options_t *o, const char *endpoint, bool server,
                     guild_err_t *err);

void guild_curve_destroy(guild_curve_t **pc);

/* The allowed peer with binary public key `key` (32 bytes), or NULL. */
const guild_curve_peer_t *guild_curve_find(const guild_curve_t *c, const uint8_t *key);

/* Writes a new key pair as DIR/NAME.key and DIR/NAME.pub (both mode 0600; DIR created 0700 when missing). An
 * existing file is refused unless force. The public key's Z85 into pub (41 bytes) when not NULL. -1 with err. */
int guild_curve_keygen(const char *dir, const char *name, bool force, char *pub, guild_err_t *err);

#endif
