/* coordinator/server/http.h — the HTTP side of `guild serve`, on libmicrohttpd: listening, reading request
 * bodies within a size limit, handing each complete request to one handler, and sending its reply (a whole
 * body, or a stream of Server-Sent Events).
 *
 * Every connection has its own thread (MHD_USE_THREAD_PER_CONNECTION): a handler may block while its
 * request waits for the model, and look at its client's socket meanwhile (http_req_client_gone). Error replies
 * are OpenAI's error object. Requests over the body limit get 413 without reaching the handler. */
#ifndef GUILD_SERVER_HTTP_H
#define GUILD_SERVER_HTTP_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "core/util/err.h"

typedef struct http_server http_server_t;
typedef struct http_req http_req_t;

/* Called once per complete request, on its connection's thread; it must call exactly one http_reply*. */
typedef void (*http_handler_fn)(void *ctx, http_req_t *req);

typedef struct http_options {
    const char *host;         /* address to bind (name or literal, IPv4 or IPv6) */
    int port;                 /* 0: any free port (see http_server_port) */
    size_t max_body;          /* bytes */
    unsigned max_connections; /* beyond that, new connections are refused */
    unsigned idle_timeout_s;  /* an idle connection is closed after that */
} http_options_t;

/* Binds and starts serving. -1 with err naming the address on failure. */
int http_server_start(http_server_t **out, const http_options_t *o, http_handler_fn fn, void *ctx,
                      guild_err_t *err);

/* The port bound. */
int http_server_port(const http_server_t *s);

/* Stops accepting connections and closes the listening socket; connections in progress go on. */
void http_server_quiesce(http_server_t *s);

/* Closes every connection (waiting for their handlers to return) and frees; nulls *s. NULL-safe. */
void http_server_stop(http_server_t **s);

/* --- a request --- */

const char *http_req_method(const http_req_t *r);
const char *http_req_path(const http_req_t *r);
/* A request header's value, or NULL. */
const char *http_req_header(const http_req_t *r, const char *name);
/* The body (NUL-terminated; *len without the NUL). */
const char *http_req_body(const http_req_t *r, size_t *len);

/* Whether the client has closed its side of the connection (it cannot read a reply any more). */
bool http_req_client_gone(const http_req_t *r);

/* Replies with a whole body. allow: an Allow header's value, or NULL. */
void http_reply(http_req_t *r, unsigned status, const char *content_type, const char *body, size_t len,
                const char *allow);
/* Replies with j dumped (j is not freed); 500 if it cannot be dumped. */
void http_reply_json(http_req_t *r, unsigned status, const json_t *j);
/* Replies with OpenAI's error object. param: the request field at fault, or NULL. */
void http_reply_error(http_req_t *r, unsigned status, const char *type, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* 405 with an Allow header (allow: "POST", "GET, HEAD"). */
void http_reply_method_not_allowed(http_req_t *r, const char *allow);
/* Drops the connection without a reply (the client has gone). */
void http_reply_none(http_req_t *r);

/* A streamed body: writes at most max bytes to buf and returns how many (> 0), blocking until it has some;
 * HTTP_STREAM_END at the end, HTTP_STREAM_ABORT to cut the connection. gone() tells whether the client has gone
 * (for the producer to look at while it waits). */
#define HTTP_STREAM_END ((ssize_t)-1)
#define HTTP_STREAM_ABORT ((ssize_t)-2)
typedef struct http_stream http_stream_t;
typedef ssize_t (*http_stream_fn)(void *ctx, http_stream_t *s, char *buf, size_t max);
bool http_stream_client_gone(const http_stream_t *s);

/* Replies 200 with a body produced by fn(ctx, ...) as the client reads it; free_ctx(ctx) is called when the
 * response is done (finished, aborted or the client gone), exactly once, also if this call fails. */
void http_reply_stream(http_req_t *r, const char *content_type, http_stream_fn fn, void *ctx,
                       void (*free_ctx)(void *ctx));

#endif
