/* coordinator/server/api.h — the endpoints of `guild serve`, OpenAI-compatible:
 *
 *   GET  /health               200 {"status": "ok", "running": 0|1, "waiting": N} when a request can succeed;
 *                              503 {"status": "loading"} while the model loads, 503 {"status": "degraded" or
 *                              "failed", "reason": ...} while the pipeline cannot serve (no API key needed)
 *   GET  /v1/models            the one model
 *   POST /v1/completions       prompt (text, or token ids) -> text
 *   POST /v1/chat/completions  messages -> the assistant's reply, through the chat template
 *   POST /tokenize, /detokenize  text <-> token ids (llama.cpp's server's shapes: api_tokenize.h)
 *   GET  /metrics              Prometheus's text format (metrics.h)
 *
 * A request is checked (api_request.h), tokenized here on its connection's thread (the tokenizer is
 * thread-safe), then queued on the engine; its connection waits for the reply, or streams it as Server-Sent
 * Events, and cancels the job when its client goes away. While the pipeline cannot serve (engine_health), a
 * request is refused at once with 503 and the reason. */
#ifndef GUILD_SERVER_API_H
#define GUILD_SERVER_API_H

#include <stdint.h>

#include "coordinator/server/engine.h"
#include "coordinator/server/http.h"
#include "coordinator/server/metrics.h"
#include "core/chat/chat.h"
#include "core/tokenizer/tok.h"

typedef struct api_server {
    int ready;                 /* 0 while the model loads (every request gets 503), 1 once every field below is
                                  set: written last, with release order (__atomic_store_n), read with acquire */
    const tok_t *tok;
    engine_t *engine;
    chat_tmpl_t chat;          /* CHAT_TMPL_UNKNOWN: /v1/chat/completions answers chat_error */
    const char *chat_error;    /* why there is no template (start-up message) */
    const char *eos_text;      /* the EOS token's text, for templates that write it */
    const char *model_id;      /* what /v1/models lists and replies name (valid UTF-8) */
    int32_t n_ctx;
    int32_t n_vocab;
    const char *api_key;       /* NULL: none required */
    int64_t created;           /* start-up time, unix seconds */
    metrics_t *metrics;        /* what GET /metrics shows (set before the server starts; NULL: none counted) */
} api_server_t;

/* The http_handler_fn of the server; ctx is an api_server_t. */
void api_handle(void *ctx, http_req_t *req);

#endif
