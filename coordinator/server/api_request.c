#include "config.h"

#include "coordinator/server/api_request.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(api_error_t *e, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int fail(api_error_t *e, const char *param, const char *fmt, ...)
{
    snprintf(e->param, sizeof e->param, "%s", param);
    va_list ap;
    va_start(ap, fmt);
    char msg[400];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (param[0])
        snprintf(e->message, sizeof e->message, "%s: %s", param, msg);
    else
        snprintf(e->message, sizeof e->message, "%s", msg);
    return -1;
}

static int oom(api_error_t *e)
{
    return fail(e, "", "out of memory");
}

/* The field, or NULL when absent or null. */
static json_t *field(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_null(v) ? NULL : v;
}

static int get_number(json_t *o, const char *key, double lo, double hi, bool lo_open, double *out, bool *present,
                      api_error_t *e)
{
    json_t *v = field(o, key);
    if (present)
        *present = v != NULL;
    if (!v)
        return 0;
    if (!json_is_number(v))
        return fail(e, key, "must be a number");
    double d = json_number_value(v);
    if (!isfinite(d) || d < lo || (lo_open && d == lo) || d > hi) {
        if (isinf(hi))
            return fail(e, key, "must be a number %s %g", lo_open ? ">" : ">=", lo);
        return fail(e, key, "must be a number in %s%g, %g]", lo_open ? "(" : "[", lo, hi);
    }
    *out = d;
    return 0;
}

static int get_int(json_t *o, const char *key, long long lo, long long hi, long long *out, bool *present,
                   api_error_t *e)
{
    json_t *v = field(o, key);
    if (present)
        *present = v != NULL;
    if (!v)
        return 0;
    long long x;
    if (json_is_integer(v)) {
        x = json_integer_value(v);
    } else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
               fabs(json_real_value(v)) < 9e15) {
        x = (long long)json_real_value(v); /* 16.0 is 16 */
    } else {
        return fail(e, key, "must be an integer");
    }
    if (x < lo || x > hi)
        return fail(e, key, "must be an integer in [%lld, %lld]", lo, hi);
    *out = x;
    return 0;
}

static int get_bool(json_t *o, const char *key, bool *out, api_error_t *e)
{
    json_t *v = field(o, key);
    if (!v)
        return 0;
    if (!json_is_boolean(v))
        return fail(e, key, "must be true or false");
    *out = json_is_true(v);
    return 0;
}

static int parse_stop(api_request_t *r, json_t *o, api_error_t *e)
{
    json_t *v = field(o, "stop");
    if (!v)
        return 0;
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    if (!json_is_string(v) && !json_is_array(v))
        return fail(e, "stop", "must be a string or an array of strings");
    if (n > API_MAX_STOPS)
        return fail(e, "stop", "at most %d stop strings", API_MAX_STOPS);
    if (n && !(r->stops = calloc(n, sizeof *r->stops)))
        return oom(e);
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_array(v) ? json_array_get(v, i) : v;
        char name[32];
        snprintf(name, sizeof name, json_is_array(v) ? "stop[%zu]" : "stop", i);
        if (!json_is_string(s) || json_string_length(s) == 0)
            return fail(e, name, "must be a non-empty string");
        if (!(r->stops[i] = strdup(json_string_value(s))))
            return oom(e);
        r->n_stops = i + 1;
    }
    return 0;
}

/* A field Guild does not implement: accepted only with its default value (`is_default` says). */
static int refuse_unless(json_t *o, const char *key, bool (*is_default)(json_t *), const char *why, api_error_t *e)
{
    json_t *v = field(o, key);
    if (v && !is_default(v))
        return fail(e, key, "%s", why);
    return 0;
}

static bool zero_or_false(json_t *v)
{
    return json_is_false(v) || (json_is_number(v) && json_number_value(v) == 0);
}

static bool one(json_t *v)
{
    return json_is_number(v) && json_number_value(v) == 1;
}

static bool empty(json_t *v)
{
    return (json_is_string(v) && json_string_length(v) == 0) || (json_is_array(v) && json_array_size(v) == 0) ||
           (json_is_object(v) && json_object_size(v) == 0);
}

static bool text_format(json_t *v)
{
    json_t *t = json_object_get(v, "type");
    return json_is_object(v) && json_is_string(t) && !strcmp(json_string_value(t), "text");
}

/* Completions: OpenAI's legacy "logprobs": N, the N most likely tokens at each position (0: none, as llama.cpp's
 * server); "top_logprobs" is not a field there. Chat: "logprobs": true, "top_logprobs": N. */
static int parse_logprobs(api_request_t *r, json_t *o, api_error_t *e)
{
    long long x;
    bool present;
    if (r->kind == API_COMPLETIONS) {
        if (refuse_unless(o, "top_logprobs", zero_or_false,
                          "not a completions field: give \"logprobs\": N (the chat field is top_logprobs)", e) < 0)
            return -1;
        json_t *v = field(o, "logprobs");
        if (json_is_false(v))
            return 0;
        if (get_int(o, "logprobs", 0, API_MAX_TOP_LOGPROBS, &x, &present, e) < 0)
            return -1;
        r->logprobs = present && x > 0;
        r->top_logprobs = present ? (int32_t)x : 0;
        return 0;
    }
    if (get_bool(o, "logprobs", &r->logprobs, e) < 0 ||
        get_int(o, "top_logprobs", 0, API_MAX_TOP_LOGPROBS, &x, &present, e) < 0)
        return -1;
    if (present && x > 0 && !r->logprobs)
        return fail(e, "top_logprobs", "needs \"logprobs\": true");
    r->top_logprobs = present ? (int32_t)x : 0;
    return 0;
}

static int parse_sampling(api_request_t *r, json_t *o, api_error_t *e)
{
    double d;
    long long x;
    bool present;
    if (get_number(o, "temperature", 0, INFINITY, false, &d, &present, e) < 0)
        return -1;
    if (present)
        r->sample.temp = (float)d;
    if (get_number(o, "top_p", 0, 1, true, &d, &present, e) < 0)
        return -1;
    if (present)
        r->sample.top_p = (float)d;
    if (get_int(o, "top_k", 0, INT32_MAX, &x, &present, e) < 0)
        return -1;
    if (present)
        r->sample.top_k = (int32_t)x;
    if (get_number(o, "min_p", 0, 1, false, &d, &present, e) < 0)
        return -1;
    if (present)
        r->sample.min_p = (float)d;
    /* llama.cpp's name and the Hugging Face one */
    static const char *const rep[] = {"repeat_penalty", "repetition_penalty"};
    for (int i = 0; i < 2; i++) {
        if (get_number(o, rep[i], 0, INFINITY, true, &d, &present, e) < 0)
            return -1;
        if (present)
            r->sample.repeat_penalty = (float)d;
    }
    if (get_int(o, "repeat_last_n", 0, 1 << 20, &x, &present, e) < 0)
        return -1;
    if (present)
        r->sample.repeat_last_n = (int32_t)x;
    if (get_int(o, "seed", 0, INT64_MAX, &x, &present, e) < 0)
        return -1;
    if (present)
        r->sample.seed = (uint64_t)x;
    /* OpenAI's additive penalties are not in the sampler: only their neutral value is accepted */
    static const char *const additive[] = {"presence_penalty", "frequency_penalty"};
    for (int i = 0; i < 2; i++) {
        if (get_number(o, additive[i], -2, 2, false, &d, &present, e) < 0)
            return -1;
        if (present && d != 0)
            return fail(e, additive[i], "only 0 is supported (the sampler has a multiplicative repetition_penalty "
                                        "instead)");
    }
    return 0;
}

static int parse_prompt(api_request_t *r, json_t *o, int32_t n_vocab, api_error_t *e)
{
    json_t *p = field(o, "prompt");
    if (!p)
        return fail(e, "prompt", "is required");
    if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0)))
        p = json_array_get(p, 0); /* ["text"]: one prompt */
    if (json_is_string(p)) {
        if (!(r->prompt = strdup(json_string_value(p))))
            return oom(e);
        r->prompt_len = json_string_length(p);
        return 0;
    }
    if (!json_is_array(p) || json_array_size(p) == 0)
        return fail(e, "prompt", "must be a string or a non-empty array of token ids");
    size_t n = json_array_size(p);
    if (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0)))
        return fail(e, "prompt", "only one prompt per request is supported (got %zu)", n);
    if (!(r->prompt_ids = malloc(n * sizeof *r->prompt_ids)))
        return oom(e);
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(p, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) >= n_vocab) {
            char name[40];
            snprintf(name, sizeof name, "prompt[%zu]", i);
            return fail(e, name, "must be a token id in [0, %d)", n_vocab);
        }
        r->prompt_ids[i] = (int32_t)json_integer_value(t);
    }
    r->n_prompt_ids = n;
    return 0;
}

/* A message's content: a string, or an array of {"type": "text", "text": ...} parts (concatenated). */
static int message_content(json_t *c, bool may_be_absent, const char *name, char **out, api_error_t *e)
{
    char param[64];
    snprintf(param, sizeof param, "%s.content", name);
    if (!c || json_is_null(c)) {
        if (!may_be_absent)
            return fail(e, param, "is required");
        return (*out = strdup("")) ? 0 : oom(e);
    }
    if (json_is_string(c))
        return (*out = strdup(json_string_value(c))) ? 0 : oom(e);
    if (!json_is_array(c))
        return fail(e, param, "must be a string or an array of text parts");
    size_t total = 0;
    for (size_t i = 0; i < json_array_size(c); i++) {
        json_t *part = json_array_get(c, i), *type = json_object_get(part, "type"),
               *text = json_object_get(part, "text");
        char pname[96];
        snprintf(pname, sizeof pname, "%s[%zu]", param, i);
        if (!json_is_object(part) || !json_is_string(type))
            return fail(e, pname, "must be an object with a \"type\"");
        if (strcmp(json_string_value(type), "text") != 0)
            return fail(e, pname, "content parts of type \"%s\" are not supported (only \"text\")",
                        json_string_value(type));
        if (!json_is_string(text))
            return fail(e, pname, "\"text\" must be a string");
        total += json_string_length(text);
    }
    char *s = malloc(total + 1);
    if (!s)
        return oom(e);
    size_t at = 0;
    for (size_t i = 0; i < json_array_size(c); i++) {
        json_t *text = json_object_get(json_array_get(c, i), "text");
        memcpy(s + at, json_string_value(text), json_string_length(text));
        at += json_string_length(text);
    }
    s[at] = '\0';
    *out = s;
    return 0;
}

static int parse_messages(api_request_t *r, json_t *o, api_error_t *e)
{
    json_t *m = field(o, "messages");
    if (!m)
        return fail(e, "messages", "is required");
    if (!json_is_array(m) || json_array_size(m) == 0)
        return fail(e, "messages", "must be a non-empty array of messages");
    size_t n = json_array_size(m);
    if (!(r->messages = calloc(n, sizeof *r->messages)))
        return oom(e);
    for (size_t i = 0; i < n; i++) {
        json_t *msg = json_array_get(m, i);
        char name[40];
        snprintf(name, sizeof name, "messages[%zu]", i);
        if (!json_is_object(msg))
            return fail(e, name, "must be an object with \"role\" and \"content\"");
        json_t *role = json_object_get(msg, "role");
        char rname[56];
        snprintf(rname, sizeof rname, "%s.role", name);
        if (!json_is_string(role))
            return fail(e, rname, "must be a string");
        const char *rs = json_string_value(role);
        static const char *const roles[] = {"system", "user", "assistant"};
        const char *canon = NULL;
        for (int k = 0; k < 3; k++)
            if (!strcmp(rs, roles[k]))
                canon = roles[k];
        if (!strcmp(rs, "developer"))
            canon = "system"; /* OpenAI's newer name for the system role */
        if (!canon)
            return fail(e, rname, "\"%s\" is not supported (system, developer, user, assistant)", rs);
        char *content = NULL;
        if (message_content(json_object_get(msg, "content"), canon == roles[2], name, &content, e) < 0)
            return -1;
        r->messages[i] = (chat_msg_t){.role = canon, .content = content};
        r->n_messages = i + 1;
    }
    return 0;
}

int api_request_parse(api_request_t *r, api_kind_t kind, const char *body, size_t len, int32_t n_vocab,
                      api_error_t *e)
{
    memset(r, 0, sizeof *r);
    memset(e, 0, sizeof *e);
    r->kind = kind;
    sample_params_default(&r->sample);
    r->max_tokens = kind == API_COMPLETIONS ? 16 : -1; /* OpenAI's defaults */

    json_error_t je;
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    if (!o)
        return fail(e, "", "the body is not valid JSON: %s (line %d, column %d)", je.text, je.line, je.column);
    int rc = -1;
    if (!json_is_object(o)) {
        fail(e, "", "the body must be a JSON object");
        goto done;
    }
    json_t *model = field(o, "model");
    if (model && !json_is_string(model)) {
        fail(e, "model", "must be a string");
        goto done;
    }
    long long x;
    bool present;
    if (get_int(o, "n", 1, INT32_MAX, &x, NULL, e) < 0)
        goto done;
    if (refuse_unless(o, "n", one, "only 1 is supported (one choice per request)", e) < 0 ||
        refuse_unless(o, "best_of", one, "only 1 is supported", e) < 0 ||
        refuse_unless(o, "echo", zero_or_false, "echoing the prompt is not supported", e) < 0 ||
        refuse_unless(o, "suffix", empty, "insertion (suffix) is not supported", e) < 0 ||
        refuse_unless(o, "logit_bias", empty, "logit bias is not supported", e) < 0 ||
        refuse_unless(o, "tools", empty, "tools are not supported", e) < 0 ||
        refuse_unless(o, "functions", empty, "functions are not supported", e) < 0 ||
        refuse_unless(o, "response_format", text_format, "only {\"type\": \"text\"} is supported", e) < 0)
        goto done;
    if (get_int(o, "max_tokens", 0, INT32_MAX, &x, &present, e) < 0)
        goto done;
    if (present)
        r->max_tokens = (int32_t)x;
    if (kind == API_CHAT) {
        if (get_int(o, "max_completion_tokens", 0, INT32_MAX, &x, &present, e) < 0)
            goto done;
        if (present)
            r->max_tokens = (int32_t)x;
        /* OpenAI's reasoning_effort, or llama.cpp's server's chat_template_kwargs.reasoning_effort: the chat
         * template's variable (gpt-oss) */
        const char *re_name = "reasoning_effort";
        json_t *re = field(o, "reasoning_effort"), *kw = field(o, "chat_template_kwargs");
        if (kw && !json_is_object(kw)) {
            fail(e, "chat_template_kwargs", "must be an object");
            goto done;
        }
        if (!re && kw && (re = field(kw, "reasoning_effort")))
            re_name = "chat_template_kwargs.reasoning_effort";
        static const char *const efforts[] = {"low", "medium", "high"};
        for (int k = 0; re && json_is_string(re) && k < 3; k++)
            if (!strcmp(json_string_value(re), efforts[k]))
                r->reasoning_effort = efforts[k];
        if (re && !r->reasoning_effort) {
            fail(e, re_name, "must be \"low\", \"medium\" or \"high\"");
            goto done;
        }
    }
    if (parse_logprobs(r, o, e) < 0)
        goto done;
    if (parse_sampling(r, o, e) < 0 || parse_stop(r, o, e) < 0 || get_bool(o, "stream", &r->stream, e) < 0 ||
        get_bool(o, "ignore_eos", &r->ignore_eos, e) < 0)
        goto done;
    json_t *so = field(o, "stream_options");
    if (so) {
        if (!json_is_object(so)) {
            fail(e, "stream_options", "must be an object");
            goto done;
        }
        json_t *iu = field(so, "include_usage");
        if (iu && !json_is_boolean(iu)) {
            fail(e, "stream_options.include_usage", "must be true or false");
            goto done;
        }
        r->include_usage = json_is_true(iu);
    }
    if (kind == API_COMPLETIONS ? parse_prompt(r, o, n_vocab, e) < 0 : parse_messages(r, o, e) < 0)
        goto done;
    rc = 0;
done:
    json_decref(o);
    return rc;
}

void api_request_fini(api_request_t *r)
{
    free(r->prompt);
    free(r->prompt_ids);
    for (size_t i = 0; i < r->n_messages; i++)
        free((char *)r->messages[i].content);
    free(r->messages);
    for (size_t i = 0; i < r->n_stops; i++)
        free(r->stops[i]);
    free(r->stops);
    memset(r, 0, sizeof *r);
}
