#include "config.h"

#include "coordinator/server/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coordinator/server/api_json.h"
#include "coordinator/server/strbuf.h"
#include "coordinator/server/textfilt.h"
#include "core/util/log.h"

struct http_server {
    struct MHD_Daemon *d;
    http_handler_fn fn;
    void *ctx;
    size_t max_body;
    int port;
};

/* What MHD keeps for us between the calls of one request (*con_cls). */
typedef struct upload {
    strbuf_t body;
    bool too_big;  /* the body went over max_body: it is read and dropped, then 413 */
    size_t dropped; /* bytes dropped so far */
    bool replied;  /* answered before the body (413 on Content-Length) */
} upload_t;

struct http_req {
    http_server_t *srv;
    struct MHD_Connection *c;
    const char *method, *path, *body;
    size_t body_len;
    int fd;
    bool replied;
    enum MHD_Result result;
};

struct http_stream {
    int fd;
    http_stream_fn fn;
    void *ctx;
    void (*free_ctx)(void *ctx);
};

static bool fd_gone(int fd)
{
    if (fd < 0)
        return false;
    /* POLLRDHUP: the peer shut down its side. Not POLLIN: a pipelined next request is not a goodbye. */
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    if (poll(&p, 1, 0) <= 0)
        return false;
    return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

static int conn_fd(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* --- replies ----------------------------------------------------------------------------------------- */

static enum MHD_Result queue(struct MHD_Connection *c, unsigned status, struct MHD_Response *resp)
{
    if (!resp)
        return MHD_NO;
    enum MHD_Result r = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    return r;
}

static struct MHD_Response *whole(const char *content_type, const char *body, size_t len, const char *allow)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!resp)
        return NULL;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    if (allow)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
    return resp;
}

static enum MHD_Result error_now(struct MHD_Connection *c, unsigned status, const char *type, const char *msg)
{
    json_t *j = apijson_error(type, NULL, msg);
    char *s = apijson_dump(j);
    json_decref(j);
    enum MHD_Result r = s ? queue(c, status, whole("application/json", s, strlen(s), NULL)) : MHD_NO;
    free(s);
    return r;
}

static void log_reply(const http_req_t *r, unsigned status)
{
    guild_log(status >= 500 ? GUILD_LOG_WARN : GUILD_LOG_INFO, "%s %s -> %u", r->method, r->path, status);
}

void http_reply(http_req_t *r, unsigned status, const char *content_type, const char *body, size_t len,
                const char *allow)
{
    GUILD_ASSERT(!r->replied);
    r->replied = true;
    log_reply(r, status);
    r->result = queue(r->c, status, whole(content_type, body, len, allow));
}

void http_reply_json(http_req_t *r, unsigned status, const json_t *j)
{
    char *s = apijson_dump(j);
    if (!s) {
        http_reply_error(r, 500, "server_error", NULL, "out of memory building the reply");
        return;
    }
    http_reply(r, status, "application/json", s, strlen(s), NULL);
    free(s);
}

void http_reply_error(http_req_t *r, unsigned status, const char *type, const char *param, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* messages may quote the request (a role, a field value): keep the reply valid UTF-8 JSON */
    strbuf_t clean = STRBUF_INIT;
    textfilt_sanitize(msg, strlen(msg), &clean);
    json_t *j = apijson_error(type, param, strbuf_str(&clean));
    strbuf_fini(&clean);
    char *s = apijson_dump(j);
    json_decref(j);
    GUILD_ASSERT(!r->replied);
    r->replied = true;
    log_reply(r, status);
    guild_log(GUILD_LOG_INFO, "  %s", msg);
    r->result = s ? queue(r->c, status, whole("application/json", s, strlen(s), NULL)) : MHD_NO;
    free(s);
}

void http_reply_method_not_allowed(http_req_t *r, const char *allow)
{
    char msg[256];
    snprintf(msg, sizeof msg, "method %s is not allowed on %s (allowed: %s)", r->method, r->path, allow);
    json_t *j = apijson_error("invalid_request_error", NULL, msg);
    char *s = apijson_dump(j);
    json_decref(j);
    GUILD_ASSERT(!r->replied);
    r->replied = true;
    log_reply(r, 405);
    r->result = s ? queue(r->c, 405, whole("application/json", s, strlen(s), allow)) : MHD_NO;
    free(s);
}

void http_reply_none(http_req_t *r)
{
    GUILD_ASSERT(!r->replied);
    r->replied = true;
    guild_log(GUILD_LOG_INFO, "%s %s -> client gone", r->method, r->path);
    r->result = MHD_NO;
}

bool http_stream_client_gone(const http_stream_t *s)
{
    return fd_gone(s->fd);
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    http_stream_t *s = cls;
    ssize_t n = s->fn(s->ctx, s, buf, max);
    if (n == HTTP_STREAM_END)
        return MHD_CONTENT_READER_END_OF_STREAM;
    if (n < 0)
        return MHD_CONTENT_READER_END_WITH_ERROR;
    return n;
}

static void stream_free(void *cls)
{
    http_stream_t *s = cls;
    if (s->free_ctx)
        s->free_ctx(s->ctx);
    free(s);
}

void http_reply_stream(http_req_t *r, const char *content_type, http_stream_fn fn, void *ctx,
                       void (*free_ctx)(void *ctx))
{
    GUILD_ASSERT(!r->replied);
    r->replied = true;
    http_stream_t *s = malloc(sizeof *s);
    if (!s) {
        if (free_ctx)
            free_ctx(ctx);
        r->result = MHD_NO;
        return;
    }
    *s = (http_stream_t){.fd = r->fd, .fn = fn, .ctx = ctx, .free_ctx = free_ctx};
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, s,
                                                                  stream_free);
    if (!resp) {
        stream_free(s);
        r->result = MHD_NO;
        return;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    log_reply(r, 200);
    r->result = queue(r->c, 200, resp);
}

/* --- requests ---------------------------------------------------------------------------------------- */

const char *http_req_method(const http_req_t *r)
{
    return r->method;
}

const char *http_req_path(const http_req_t *r)
{
    return r->path;
}

const char *http_req_header(const http_req_t *r, const char *name)
{
    return MHD_lookup_connection_value(r->c, MHD_HEADER_KIND, name);
}

const char *http_req_body(const http_req_t *r, size_t *len)
{
    *len = r->body_len;
    return r->body;
}

bool http_req_client_gone(const http_req_t *r)
{
    return fd_gone(r->fd);
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                 const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    (void)version;
    http_server_t *srv = cls;
    upload_t *up = *con_cls;
    if (!up) {
        if (!(up = calloc(1, sizeof *up)))
            return MHD_NO;
        *con_cls = up;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) / 16 > srv->max_body) {
            /* Hopelessly large: answered before the body is read, and MHD closes the connection after the reply
             * (a client still sending may see the connection reset rather than the reply). A body somewhat
             * over the limit is read and dropped below, so that its client reliably gets the 413. */
            up->replied = true;
            char msg[160];
            snprintf(msg, sizeof msg, "the request body (%s bytes) is larger than the server's limit of %zu bytes",
                     cl, srv->max_body);
            guild_log(GUILD_LOG_INFO, "%s %s -> 413", method, url);
            return error_now(c, 413, "invalid_request_error", msg);
        }
        return MHD_YES;
    }
    if (up->replied)
        return MHD_YES;
    if (*upload_size) {
        if (!up->too_big && up->body.len + *upload_size <= srv->max_body) {
            strbuf_put(&up->body, upload, *upload_size);
        } else {
            /* read on and drop: the client gets its 413 once it has sent everything, unless it never ends */
            up->too_big = true;
            up->dropped += *upload_size;
            if (up->dropped / 16 > srv->max_body) {
                guild_log(GUILD_LOG_INFO, "%s %s: a body of more than %zu bytes: connection closed", method, url,
                          up->dropped);
                return MHD_NO;
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (up->too_big) {
        char msg[160];
        snprintf(msg, sizeof msg, "the request body is larger than the server's limit of %zu bytes", srv->max_body);
        guild_log(GUILD_LOG_INFO, "%s %s -> 413", method, url);
        return error_now(c, 413, "invalid_request_error", msg);
    }
    if (!strbuf_ok(&up->body))
        return error_now(c, 500, "server_error", "out of memory for the request body");
    http_req_t r = {
        .srv = srv,
        .c = c,
        .method = method,
        .path = url,
        .body = strbuf_str(&up->body),
        .body_len = up->body.len,
        .fd = conn_fd(c),
        .result = MHD_NO,
    };
    srv->fn(srv->ctx, &r);
    GUILD_ASSERT(r.replied);
    return r.result;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)c;
    (void)toe;
    upload_t *up = *con_cls;
    if (up) {
        strbuf_fini(&up->body);
        free(up);
        *con_cls = NULL;
    }
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n')
        msg[--n] = '\0';
    guild_log(GUILD_LOG_DEBUG, "http: %s", msg);
}

int http_server_start(http_server_t **out, const http_options_t *o, http_handler_fn fn, void *ctx,
                      guild_err_t *err)
{
    *out = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", o->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE},
                    *ai = NULL;
    int gai = getaddrinfo(o->host, port, &hints, &ai);
    if (gai)
        return guild_err_set(err, "cannot listen on %s:%d: %s", o->host, o->port, gai_strerror(gai));
    http_server_t *s = calloc(1, sizeof *s);
    if (!s) {
        freeaddrinfo(ai);
        return guild_err_set(err, "out of memory");
    }
    s->fn = fn;
    s->ctx = ctx;
    s->max_body = o->max_body;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC |
                     MHD_USE_ERROR_LOG | (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    s->d = MHD_start_daemon(flags, 0, NULL, NULL, on_access, s,
                            MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                            MHD_OPTION_CONNECTION_LIMIT, o->max_connections,
                            MHD_OPTION_CONNECTION_TIMEOUT, o->idle_timeout_s,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
                            MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL,
                            MHD_OPTION_END);
    int e = errno;
    freeaddrinfo(ai);
    if (!s->d) {
        free(s);
        return guild_err_errno(err, e, "cannot listen on %s:%d", o->host, o->port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di && di->port ? di->port : o->port;
    *out = s;
    return 0;
}

int http_server_port(const http_server_t *s)
{
    return s->port;
}

void http_server_quiesce(http_server_t *s)
{
    MHD_socket fd = MHD_quiesce_daemon(s->d);
    if (fd != MHD_INVALID_SOCKET)
        close(fd);
}

void http_server_stop(http_server_t **sp)
{
    http_server_t *s = *sp;
    if (!s)
        return;
    MHD_stop_daemon(s->d);
    free(s);
    *sp = NULL;
}
