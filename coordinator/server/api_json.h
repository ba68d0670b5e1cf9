/* coordinator/server/api_json.h — the JSON that the server sends, in OpenAI's shapes: completion and chat
 * completion objects, their streamed chunks, the usage block, the model list and the error object.
 * Every builder returns a new jansson reference (NULL when out of memory) that the caller dumps and frees.
 * Texts must be valid UTF-8 (the server's texts come through textfilt). */
#ifndef GUILD_SERVER_API_JSON_H
#define GUILD_SERVER_API_JSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "coordinator/server/api_request.h"

/* Identity of one response, shared by all its chunks. */
typedef struct api_reply_id {
    api_kind_t kind;
    char id[48];        /* "cmpl-..." / "chatcmpl-..." */
    int64_t created;    /* unix seconds */
    const char *model;
} api_reply_id_t;

/* {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details": {"cached_tokens"}} */
json_t *apijson_usage(int32_t n_prompt, int32_t n_completion, int32_t n_cached);

/* The whole reply: text_completion or chat.completion with one choice. text[0..len) may hold NUL characters
 * (a model can produce byte 0). finish: "stop" or "length". reasoning[0..rlen): the message's
 * "reasoning_content" (chat; NULL: none, as llama.cpp's server for a model that reasons). Takes usage. */
json_t *apijson_reply(const api_reply_id_t *id, const char *text, size_t len, const char *reasoning, size_t rlen,
                      const char *finish, json_t *usage);

/* A streamed chunk with one choice: text[0..len) (text NULL: no content), reasoning[0..rlen) as the delta's
 * "reasoning_content" (chat; NULL: none), finish (NULL while generating). For chat, role_first adds "role":
 * "assistant" to the delta (the first chunk). */
json_t *apijson_chunk(const api_reply_id_t *id, const char *text, size_t len, const char *reasoning, size_t rlen,
                      bool role_first, const char *finish);

/* The final usage chunk of a stream (stream_options.include_usage): no choices. */
json_t *apijson_usage_chunk(const api_reply_id_t *id, json_t *usage);

/* {"object": "list", "data": [{"id": model, "object": "model", "created", "owned_by": "guild"}]} */
json_t *apijson_models(const char *model, int64_t created);

/* {"error": {"message", "type", "param" (null when empty), "code" (null)}} */
json_t *apijson_error(const char *type, const char *param, const char *message);

/* The dump of j (compact, UTF-8) or NULL; frees nothing. */
char *apijson_dump(const json_t *j);

#endif
