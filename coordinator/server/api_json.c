#include "config.h"

#include "coordinator/server/api_json.h"

json_t *apijson_usage(int32_t n_prompt, int32_t n_completion, int32_t n_cached)
{
    return json_pack("{s:I, s:I, s:I, s:{s:I}}", "prompt_tokens", (json_int_t)n_prompt, "completion_tokens",
                     (json_int_t)n_completion, "total_tokens", (json_int_t)n_prompt + n_completion,
                     "prompt_tokens_details", "cached_tokens", (json_int_t)n_cached);
}

static json_t *envelope(const api_reply_id_t *id, const char *object, json_t *choices)
{
    return json_pack("{s:s, s:s, s:I, s:s, s:o}", "id", id->id, "object", object, "created", (json_int_t)id->created,
                     "model", id->model, "choices", choices);
}

json_t *apijson_reply(const api_reply_id_t *id, const char *text, size_t len, const char *reasoning, size_t rlen,
                      const char *finish, json_t *usage)
{
    json_t *choice = id->kind == API_CHAT
                         ? json_pack("{s:i, s:{s:s, s:s%}, s:n, s:s}", "index", 0, "message", "role", "assistant",
                                     "content", text, len, "logprobs", "finish_reason", finish)
                         : json_pack("{s:i, s:s%, s:n, s:s}", "index", 0, "text", text, len, "logprobs",
                                     "finish_reason", finish);
    if (choice && id->kind == API_CHAT && reasoning)
        json_object_set_new(json_object_get(choice, "message"), "reasoning_content", json_stringn(reasoning, rlen));
    json_t *r = envelope(id, id->kind == API_CHAT ? "chat.completion" : "text_completion", json_pack("[o]", choice));
    if (r && usage)
        json_object_set(r, "usage", usage);
    json_decref(usage);
    return r;
}

json_t *apijson_chunk(const api_reply_id_t *id, const char *text, size_t len, const char *reasoning, size_t rlen,
                      bool role_first, const char *finish)
{
    json_t *choice;
    if (id->kind == API_CHAT) {
        json_t *delta = json_object();
        if (delta && role_first)
            json_object_set_new(delta, "role", json_string("assistant"));
        if (delta && text)
            json_object_set_new(delta, "content", json_stringn(text, len));
        if (delta && reasoning)
            json_object_set_new(delta, "reasoning_content", json_stringn(reasoning, rlen));
        choice = json_pack("{s:i, s:o, s:n, s:s?}", "index", 0, "delta", delta, "logprobs", "finish_reason", finish);
    } else {
        choice = json_pack("{s:i, s:s%, s:n, s:s?}", "index", 0, "text", text ? text : "", text ? len : 0,
                           "logprobs", "finish_reason", finish);
    }
    return envelope(id, id->kind == API_CHAT ? "chat.completion.chunk" : "text_completion", json_pack("[o]", choice));
}

json_t *apijson_usage_chunk(const api_reply_id_t *id, json_t *usage)
{
    json_t *r = envelope(id, id->kind == API_CHAT ? "chat.completion.chunk" : "text_completion", json_array());
    if (r && usage)
        json_object_set(r, "usage", usage);
    json_decref(usage);
    return r;
}

json_t *apijson_models(const char *model, int64_t created)
{
    return json_pack("{s:s, s:[{s:s, s:s, s:I, s:s}]}", "object", "list", "data", "id", model, "object", "model",
                     "created", (json_int_t)created, "owned_by", "guild");
}

json_t *apijson_error(const char *type, const char *param, const char *message)
{
    return json_pack("{s:{s:s, s:s, s:s?, s:n}}", "error", "message", message, "type", type, "param",
                     param && param[0] ? param : NULL, "code");
}

char *apijson_dump(const json_t *j)
{
    return j ? json_dumps(j, JSON_COMPACT) : NULL;
}
