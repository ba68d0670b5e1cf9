#include "config.h"

#include "coordinator/server/api_tokenize.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/server/strbuf.h"
#include "coordinator/server/textfilt.h"

/* The body as a JSON object, or NULL after replying 400. */
static json_t *body_object(http_req_t *req)
{
    size_t len;
    const char *body = http_req_body(req, &len);
    json_error_t je;
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    if (!o) {
        http_reply_error(req, 400, "invalid_request_error", NULL, "the body is not valid JSON: %s (line %d, "
                         "column %d)", je.text, je.line, je.column);
        return NULL;
    }
    if (!json_is_object(o)) {
        http_reply_error(req, 400, "invalid_request_error", NULL, "the body must be a JSON object");
        json_decref(o);
        return NULL;
    }
    return o;
}

/* An optional boolean field into *v (left as is when absent). false after replying 400. */
static bool get_bool(http_req_t *req, const json_t *o, const char *name, bool *v)
{
    const json_t *f = json_object_get(o, name);
    if (!f || json_is_null(f))
        return true;
    if (!json_is_boolean(f)) {
        http_reply_error(req, 400, "invalid_request_error", name, "%s: must be true or false", name);
        return false;
    }
    *v = json_is_true(f);
    return true;
}

static void reply_oom(http_req_t *req)
{
    http_reply_error(req, 500, "server_error", NULL, "out of memory");
}

/* A piece as llama.cpp's server gives it: a string when valid UTF-8, else its bytes. */
static json_t *piece_json(const char *p, size_t n)
{
    size_t i = 0;
    while (i < n) {
        size_t c = tok_utf8_char_len(p + i, n - i);
        if (!c)
            break;
        i += c;
    }
    if (i == n)
        return json_stringn(p, n);
    json_t *a = json_array();
    for (size_t k = 0; a && k < n; k++)
        if (json_array_append_new(a, json_integer((unsigned char)p[k])) < 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

void api_tokenize(const tok_t *tok, http_req_t *req)
{
    json_t *o = body_object(req), *out = NULL;
    tok_ids_t ids;
    tok_ids_init(&ids);
    char *piece = NULL;
    if (!o)
        return;
    const json_t *content = json_object_get(o, "content");
    if (!content) {
        http_reply_error(req, 400, "invalid_request_error", "content", "content: missing (the text to tokenize)");
        goto done;
    }
    if (!json_is_string(content)) {
        http_reply_error(req, 400, "invalid_request_error", "content", "content: must be a string");
        goto done;
    }
    bool add_special = false, parse_special = true, with_pieces = false; /* llama.cpp's defaults */
    if (!get_bool(req, o, "add_special", &add_special) || !get_bool(req, o, "parse_special", &parse_special) ||
        !get_bool(req, o, "with_pieces", &with_pieces))
        goto done;
    guild_err_t err = {{0}};
    const unsigned flags = (add_special ? TOK_ADD_SPECIAL : 0u) | (parse_special ? TOK_PARSE_SPECIAL : 0u);
    if (tok_encode(tok, json_string_value(content), json_string_length(content), flags, &ids, &err) < 0) {
        http_reply_error(req, 400, "invalid_request_error", "content", "content: %s", err.msg);
        goto done;
    }
    json_t *arr = json_array();
    out = json_pack("{s:o}", "tokens", arr);
    if (!out || !(piece = malloc(tok_max_piece_len(tok) + 1))) {
        reply_oom(req);
        goto done;
    }
    for (size_t i = 0; i < ids.n; i++) {
        json_t *t;
        if (with_pieces) {
            /* the piece as it is printed: control tokens as their text (parse_special put them there) */
            size_t n = tok_piece(tok, ids.v[i], TOK_DECODE_SPECIAL, piece, tok_max_piece_len(tok));
            t = json_pack("{s:i, s:o}", "id", (json_int_t)ids.v[i], "piece", piece_json(piece, n));
        } else {
            t = json_integer(ids.v[i]);
        }
        if (json_array_append_new(arr, t) < 0) {
            reply_oom(req);
            goto done;
        }
    }
    http_reply_json(req, 200, out);
done:
    free(piece);
    tok_ids_fini(&ids);
    json_decref(out);
    json_decref(o);
}

void api_detokenize(const tok_t *tok, int32_t n_vocab, http_req_t *req)
{
    json_t *o = body_object(req), *out = NULL;
    int32_t *ids = NULL;
    char *text = NULL;
    strbuf_t utf8 = STRBUF_INIT;
    if (!o)
        return;
    const json_t *tokens = json_object_get(o, "tokens");
    if (!tokens) {
        http_reply_error(req, 400, "invalid_request_error", "tokens", "tokens: missing (an array of token ids)");
        goto done;
    }
    if (!json_is_array(tokens)) {
        http_reply_error(req, 400, "invalid_request_error", "tokens", "tokens: must be an array of token ids");
        goto done;
    }
    const size_t n = json_array_size(tokens);
    if (!(ids = malloc((n ? n : 1) * sizeof *ids))) {
        reply_oom(req);
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *t = json_array_get(tokens, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) >= n_vocab) {
            http_reply_error(req, 400, "invalid_request_error", "tokens",
                             "tokens[%zu]: must be a token id, an integer in [0, %d)", i, n_vocab);
            goto done;
        }
        ids[i] = (int32_t)json_integer_value(t);
    }
    size_t len = 0;
    guild_err_t err = {{0}};
    if (tok_decode(tok, ids, n, TOK_DECODE_SPECIAL, &text, &len, &err) < 0) {
        reply_oom(req);
        goto done;
    }
    textfilt_sanitize(text, len, &utf8); /* JSON strings are UTF-8: a lone byte becomes U+FFFD */
    if (!strbuf_ok(&utf8) || !(out = json_pack("{s:s%}", "content", strbuf_str(&utf8), utf8.len))) {
        reply_oom(req);
        goto done;
    }
    http_reply_json(req, 200, out);
done:
    strbuf_fini(&utf8);
    free(text);
    free(ids);
    json_decref(out);
    json_decref(o);
}
