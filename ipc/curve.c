#include "config.h"

#include "ipc/curve.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "core/util/fileperm.h"

#define MAX_FILE_BYTES (1u << 20) /* an allow list of 4096 keys with names is ~450 KiB */

bool guild_curve_endpoint_is_tcp(const char *endpoint)
{
    return endpoint && !strncmp(endpoint, "tcp://", 6);
}

int guild_curve_check(const guild_curve_options_t *o, const char *flag, const char *endpoint, bool server,
                      guild_err_t *err)
{
    const char *peer_flag = server ? "--allow" : "--server-key";
    const char *peer = server ? o->allow : o->server_key;
    const char *other = server ? o->server_key : o->allow; /* the other side's flag: never this role's */
    if (other)
        return guild_err_set(err, "%s is for %s, not here", server ? "--server-key" : "--allow",
                             server ? "a worker (the coordinator's public key it pins)"
                                    : "the coordinator (the workers' public keys it accepts)");
    const bool any = o->key || peer || o->insecure;
    if (!guild_curve_endpoint_is_tcp(endpoint)) {
        if (any)
            return guild_err_set(err, "--key, %s and --insecure are for a tcp %s endpoint%s%s", peer_flag, flag,
                                 endpoint ? ", not " : "", endpoint ? endpoint : "");
        return 0;
    }
    if (o->insecure) {
        if (o->key || peer)
            return guild_err_set(err, "%s %s: --insecure (plain tcp) and keys (--key, %s) exclude each other", flag,
                                 endpoint, peer_flag);
        return 0;
    }
    if (!o->key || !peer)
        return guild_err_set(err, "%s %s: a tcp endpoint needs CURVE keys: --key FILE (this %s's pair) and %s FILE "
                             "(%s; `guild keygen` writes them), or --insecure for plain tcp that anyone who can "
                             "reach the port may use", flag, endpoint, server ? "coordinator" : "worker", peer_flag,
                             server ? "the public keys of the workers it accepts"
                                    : "the coordinator's public key");
    return 0;
}

/* Reads a whole small text file opened on fd. Caller frees *out. */
static int read_text(int fd, const char *path, char **out, guild_err_t *err)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return guild_err_errno(err, errno, "%s: fstat", path);
    if (st.st_size > (off_t)MAX_FILE_BYTES)
        return guild_err_set(err, "%s: %lld bytes: too large for a key file", path, (long long)st.st_size);
    char *buf = malloc((size_t)st.st_size + 1);
    if (!buf)
        return guild_err_set(err, "%s: out of memory", path);
    size_t n = 0;
    while (n < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + n, (size_t)st.st_size - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            free(buf);
            return guild_err_errno(err, errno, "%s: read", path);
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    buf[n] = '\0';
    if (strlen(buf) != n) {
        free(buf);
        return guild_err_set(err, "%s: not a text file (a NUL byte)", path);
    }
    *out = buf;
    return 0;
}

/* Opens path and runs the permission check; the fd or -1 with err. */
static int open_checked(const char *path, bool private, const char *what, guild_err_t *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return guild_err_errno(err, errno, "%s: %s", path, what);
    if ((private ? guild_file_check_private(fd, path, what, err) : guild_file_check_trusted(fd, path, what, err)) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* The next line of *p (NUL-terminated in place, trimmed), or NULL at the end. */
static char *next_line(char **p, int *lineno)
{
    while (**p) {
        char *line = *p, *nl = strchr(line, '\n');
        if (nl) {
            *nl = '\0';
            *p = nl + 1;
        } else {
            *p = line + strlen(line);
        }
        ++*lineno;
        while (isspace((unsigned char)*line))
            line++;
        size_t n = strlen(line);
        while (n && isspace((unsigned char)line[n - 1]))
            line[--n] = '\0';
        if (n && line[0] != '#') /* (a Z85 key never starts with '#': its first digit is at most '%') */
            return line;
    }
    return NULL;
}

/* A Z85 key at s (exactly 40 key characters); into z85 (41 bytes) and bin (32 bytes, may be NULL). */
static int parse_key(const char *s, size_t len, char *z85, uint8_t *bin, const char *path, int lineno,
                     guild_err_t *err)
{
    uint8_t tmp[32];
    if (len != GUILD_CURVE_Z85)
        return guild_err_set(err, "%s:%d: a key has %d Z85 characters, this one %zu", path, lineno, GUILD_CURVE_Z85,
                             len);
    memcpy(z85, s, GUILD_CURVE_Z85);
    z85[GUILD_CURVE_Z85] = '\0';
    if (!zmq_z85_decode(bin ? bin : tmp, z85))
        return guild_err_set(err, "%s:%d: not a Z85 key", path, lineno);
    return 0;
}

/* "name = value" (value optionally in double quotes, as CZMQ writes certificates). */
static int key_value(char *line, const char *name, const char **value, size_t *len)
{
    size_t nl = strlen(name);
    if (strncmp(line, name, nl) != 0)
        return 0;
    char *p = line + nl;
    while (*p == ' ' || *p == '\t')
        p++;
    if (*p++ != '=')
        return 0;
    while (*p == ' ' || *p == '\t')
        p++;
    size_t n = strlen(p);
    if (n >= 2 && p[0] == '"' && p[n - 1] == '"') {
        p++;
        n -= 2;
    }
    *value = p;
    *len = n;
    return 1;
}

static int load_pair(guild_curve_t *c, const char *path, guild_err_t *err)
{
    int fd = open_checked(path, true, "key pair", err);
    if (fd < 0)
        return -1;
    char *text = NULL;
    int rc = read_text(fd, path, &text, err);
    close(fd);
    if (rc < 0)
        return -1;
    rc = -1;
    char *p = text, *line;
    int lineno = 0;
    bool have_pub = false, have_sec = false;
    while ((line = next_line(&p, &lineno))) {
        const char *v;
        size_t n;
        if (key_value(line, "public-key", &v, &n)) {
            if (parse_key(v, n, c->public_key, NULL, path, lineno, err) < 0)
                goto out;
            have_pub = true;
        } else if (key_value(line, "secret-key", &v, &n)) {
            if (parse_key(v, n, c->secret_key, NULL, path, lineno, err) < 0)
                goto out;
            have_sec = true;
        } else if (strcmp(line, "curve") && strcmp(line, "metadata")) { /* CZMQ's section names */
            guild_err_set(err, "%s:%d: expected `public-key = KEY` or `secret-key = KEY`", path, lineno);
            goto out;
        }
    }
    if (!have_pub || !have_sec) {
        guild_err_set(err, "%s: no %s (a key pair from `guild keygen` has both; is this a .pub file?)", path,
                      have_pub ? "secret-key" : "public-key");
        goto out;
    }
    char derived[GUILD_CURVE_Z85 + 1];
    if (zmq_curve_public(derived, c->secret_key) != 0 || strcmp(derived, c->public_key) != 0) {
        guild_err_set(err, "%s: its public key is not the one of its secret key (a damaged or edited file)", path);
        goto out;
    }
    snprintf(c->key_path, sizeof c->key_path, "%s", path);
    rc = 0;
out:
    free(text);
    return rc;
}

/* Lines "KEY [NAME]"; into c->allowed (allow list) or c->server_key (exactly one key). */
static int load_public(guild_curve_t *c, const char *path, bool list, guild_err_t *err)
{
    int fd = open_checked(path, false, list ? "allow list" : "server key", err);
    if (fd < 0)
        return -1;
    char *text = NULL;
    int rc = read_text(fd, path, &text, err);
    close(fd);
    if (rc < 0)
        return -1;
    rc = -1;
    char *p = text, *line;
    int lineno = 0, n = 0, cap = 0;
    while ((line = next_line(&p, &lineno))) {
        size_t klen = strcspn(line, " \t");
        const char *v = line;
        size_t vn = klen;
        if (key_value(line, "public-key", &v, &vn)) /* a key pair's or CZMQ's line */
            klen = strlen(line);
        const char *name = line + klen;
        while (*name == ' ' || *name == '\t')
            name++;
        uint8_t bin[32];
        char z85[GUILD_CURVE_Z85 + 1];
        if (!strcmp(line, "curve") || !strcmp(line, "metadata")) /* CZMQ's section names */
            continue;
        if (key_value(line, "secret-key", &v, &vn)) {
            guild_err_set(err, "%s:%d: a secret key: this file must hold public keys only (give the .pub file)", path,
                          lineno);
            goto out;
        }
        if (parse_key(v, vn, z85, bin, path, lineno, err) < 0)
            goto out;
        if (!list) {
            if (n++) {
                guild_err_set(err, "%s:%d: a second key: a server key file holds one", path, lineno);
                goto out;
            }
            memcpy(c->server_key, z85, sizeof z85);
            continue;
        }
        if (guild_curve_find(c, bin))
            continue; /* listed twice: harmless */
        if (n == GUILD_CURVE_MAX_ALLOWED) {
            guild_err_set(err, "%s:%d: more than %d keys", path, lineno, GUILD_CURVE_MAX_ALLOWED);
            goto out;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            guild_curve_peer_t *a = realloc(c->allowed, (size_t)cap * sizeof *a);
            if (!a) {
                guild_err_set(err, "%s: out of memory", path);
                goto out;
            }
            c->allowed = a;
        }
        guild_curve_peer_t *e = &c->allowed[n++];
        memcpy(e->key, bin, 32);
        snprintf(e->name, sizeof e->name, "%.*s", (int)strcspn(name, " \t"), name);
        c->n_allowed = n;
    }
    if (n == 0) {
        guild_err_set(err, "%s: no key (expected lines `KEY NAME`, as in the .pub files `guild keygen` writes)", path);
        goto out;
    }
    if (list)
        snprintf(c->allow_path, sizeof c->allow_path, "%s", path);
    rc = 0;
out:
    free(text);
    return rc;
}

int guild_curve_load(guild_curve_t **out, const guild_curve_options_t *o, const char *endpoint, bool server,
                     guild_err_t *err)
{
    *out = NULL;
    if (!guild_curve_endpoint_is_tcp(endpoint))
        return 0;
    guild_curve_t *c = calloc(1, sizeof *c);
    if (!c)
        return guild_err_set(err, "CURVE: out of memory");
    c->server = server;
    c->insecure = o->insecure;
    if (!o->insecure) {
        if (!o->key || !(server ? o->allow : o->server_key)) {
            guild_err_set(err, "%s: CURVE keys missing (an unchecked option record)", endpoint);
            goto fail;
        }
        if (load_pair(c, o->key, err) < 0 || load_public(c, server ? o->allow : o->server_key, server, err) < 0)
            goto fail;
    }
    *out = c;
    return 0;
fail:
    guild_curve_destroy(&c);
    return -1;
}

void guild_curve_destroy(guild_curve_t **pc)
{
    guild_curve_t *c = *pc;
    if (!c)
        return;
    free(c->allowed);
    /* the secret key does not outlive its use in this process's memory */
    volatile char *s = c->secret_key;
    for (size_t i = 0; i < sizeof c->secret_key; i++)
        s[i] = 0;
    free(c);
    *pc = NULL;
}

const guild_curve_peer_t *guild_curve_find(const guild_curve_t *c, const uint8_t *key)
{
    for (int i = 0; i < c->n_allowed; i++)
        if (!memcmp(c->allowed[i].key, key, 32))
            return &c->allowed[i];
    return NULL;
}

/* Writes text to path with mode 0600: a new file (O_EXCL), or with force a temporary one renamed over it. */
static int write_file(const char *path, const char *text, bool force, guild_err_t *err)
{
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp-%d", path, (int)getpid()) >= sizeof tmp)
        return guild_err_set(err, "%s: path too long", path);
    const char *target = force ? tmp : path;
    int fd = open(target, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        if (errno == EEXIST && !force)
            return guild_err_set(err, "%s exists; not overwritten (--force replaces it, and the old key stops "
                                 "working wherever it was used)", path);
        return guild_err_errno(err, errno, "%s: create", target);
    }
    size_t len = strlen(text), n = 0;
    int rc = 0;
    while (n < len && rc == 0) {
        ssize_t w = write(fd, text + n, len - n);
        if (w < 0 && errno != EINTR)
            rc = guild_err_errno(err, errno, "%s: write", target);
        else if (w > 0)
            n += (size_t)w;
    }
    /* the mode even under an odd umask; then on disk before it is relied on */
    if (rc == 0 && fchmod(fd, 0600) < 0)
        rc = guild_err_errno(err, errno, "%s: chmod 600", target);
    if (rc == 0 && fsync(fd) < 0)
        rc = guild_err_errno(err, errno, "%s: fsync", target);
    if (close(fd) < 0 && rc == 0)
        rc = guild_err_errno(err, errno, "%s: close", target);
    if (rc == 0 && force && rename(tmp, path) < 0)
        rc = guild_err_errno(err, errno, "%s: rename to %s", tmp, path);
    if (rc < 0)
        unlink(target);
    return rc;
}

static bool name_ok(const char *name)
{
    if (!name[0] || strlen(name) >= GUILD_CURVE_NAME_MAX || name[0] == '.')
        return false;
    for (const char *p = name; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_' && *p != '.')
            return false;
    return true;
}

int guild_curve_keygen(const char *dir, const char *name, bool force, char *pub, guild_err_t *err)
{
    if (!name_ok(name))
        return guild_err_set(err, "key name '%s': expected 1..%d characters of letters, digits, '-', '_' and '.' "
                             "(not first)", name, GUILD_CURVE_NAME_MAX - 1);
    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return guild_err_errno(err, errno, "%s: mkdir", dir);
    char key_path[4096], pub_path[4096];
    if ((size_t)snprintf(key_path, sizeof key_path, "%s/%s.key", dir, name) >= sizeof key_path ||
        (size_t)snprintf(pub_path, sizeof pub_path, "%s/%s.pub", dir, name) >= sizeof pub_path)
        return guild_err_set(err, "%s: path too long", dir);
    if (!force) /* both or neither: a .pub left over from another pair would lie */
        for (int i = 0; i < 2; i++)
            if (access(i ? pub_path : key_path, F_OK) == 0)
                return guild_err_set(err, "%s exists; not overwritten (--force replaces it, and the old key stops "
                                     "working wherever it was used)", i ? pub_path : key_path);
    char p[GUILD_CURVE_Z85 + 1], s[GUILD_CURVE_Z85 + 1];
    if (zmq_curve_keypair(p, s) != 0)
        return guild_err_set(err, "zmq_curve_keypair: %s (a libzmq without CURVE?)", zmq_strerror(zmq_errno()));
    char text[512];
    snprintf(text, sizeof text,
             "# Guild CURVE key pair \"%s\" (guild keygen). Keep it private: mode 0600, never copied elsewhere.\n"
             "# Give %s.pub to the other side.\n"
             "public-key = %s\n"
             "secret-key = %s\n",
             name, name, p, s);
    int rc = write_file(key_path, text, force, err);
    volatile char *vt = text, *vs = s;
    for (size_t i = 0; i < sizeof text; i++)
        vt[i] = 0;
    for (size_t i = 0; i < sizeof s; i++)
        vs[i] = 0;
    if (rc < 0)
        return -1;
    snprintf(text, sizeof text,
             "# Guild CURVE public key \"%s\" (guild keygen): a worker's goes into the coordinator's --allow file,\n"
             "# the coordinator's is the workers' --server-key.\n"
             "%s %s\n",
             name, p, name);
    if (write_file(pub_path, text, force, err) < 0) {
        unlink(key_path);
        return -1;
    }
    if (pub)
        memcpy(pub, p, sizeof p);
    return 0;
}
