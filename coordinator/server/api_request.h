/* coordinator/server/api_request.h — an OpenAI completions / chat completions request body, parsed and checked.
 *
 * Every problem is reported with the name of the field ("temperature: must be a number >= 0") so that the
 * server can answer 400 with OpenAI's error object (param = the field). Fields Guild does not implement are
 * refused when they ask for something (n > 1, echo, tools, a non-zero presence or frequency
 * penalty...) and accepted when they ask for the default; unknown fields are ignored, as most OpenAI-compatible
 * servers do. Absent sampling fields take `guild run`'s defaults (sample_params_default), so that the server
 * and the CLI give the same text for the same request. */
#ifndef GUILD_SERVER_API_REQUEST_H
#define GUILD_SERVER_API_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/chat/chat.h"
#include "core/sample/sampler.h"

typedef enum api_kind {
    API_COMPLETIONS, /* /v1/completions */
    API_CHAT,        /* /v1/chat/completions */
} api_kind_t;

#define API_MAX_STOPS 16
#define API_MAX_TOP_LOGPROBS 20 /* top_logprobs (chat) and logprobs (completions) */

typedef struct api_request {
    api_kind_t kind;
    /* completions: the prompt as text, or as token ids */
    char *prompt;           /* NUL-terminated (JSON strings hold no NUL); NULL when prompt_ids */
    size_t prompt_len;
    int32_t *prompt_ids;    /* [n_prompt_ids] */
    size_t n_prompt_ids;
    /* chat */
    chat_msg_t *messages;   /* [n_messages]; contents malloc'ed, roles static */
    size_t n_messages;
    const char *reasoning_effort; /* "low", "medium", "high" (static) or NULL: the template's default (gpt-oss) */

    int32_t max_tokens;     /* < 0: no limit but the context */
    sample_params_t sample;
    char **stops;           /* [n_stops] non-empty, malloc'ed */
    size_t n_stops;
    bool stream;
    bool include_usage;     /* stream_options.include_usage */
    bool ignore_eos;        /* extension */
    bool logprobs;          /* report each generated token's log probability (chat "logprobs": true; completions
                               "logprobs": N > 0) */
    int32_t top_logprobs;   /* and the most likely tokens at each position, 0..API_MAX_TOP_LOGPROBS */
} api_request_t;

/* What is wrong with a request. */
typedef struct api_error {
    char param[64];   /* the field ("messages[2].content"), "" for the body as a whole */
    char message[512];
} api_error_t;

/* Parses body[0..len) for endpoint kind. n_vocab bounds token-id prompts. 0, or -1 with *e filled (out of
 * memory is reported the same way, with an empty param). r is always left safe for api_request_fini. */
int api_request_parse(api_request_t *r, api_kind_t kind, const char *body, size_t len, int32_t n_vocab,
                      api_error_t *e);

void api_request_fini(api_request_t *r);

#endif
