#include "config.h"

#include "coordinator/server/api_logprobs.h"

#include <stdlib.h>

#include "coordinator/server/strbuf.h"
#include "coordinator/server/textfilt.h"

/* The token's text (valid UTF-8) and, when bytes is not NULL, its bytes as an array. */
static json_t *token_text(const tok_t *tok, int32_t id, char *piece, json_t **bytes)
{
    const size_t n = tok_piece(tok, id, TOK_DECODE_SPECIAL, piece, tok_max_piece_len(tok));
    strbuf_t u = STRBUF_INIT;
    textfilt_sanitize(piece, n, &u);
    json_t *t = strbuf_ok(&u) ? json_stringn(strbuf_str(&u), u.len) : NULL;
    strbuf_fini(&u);
    if (bytes) {
        *bytes = json_array();
        for (size_t i = 0; *bytes && i < n; i++)
            if (json_array_append_new(*bytes, json_integer((unsigned char)piece[i])) < 0) {
                json_decref(*bytes);
                *bytes = NULL;
            }
    }
    return t;
}

json_t *apilp_completion(const tok_t *tok, const logprob_entry_t *v, size_t n, size_t *offset)
{
    char *piece = malloc(tok_max_piece_len(tok) + 1);
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    json_t *o = json_pack("{s:o, s:o, s:o, s:o}", "tokens", tokens, "token_logprobs", lps, "top_logprobs", tops,
                          "text_offset", offs);
    if (!piece || !o)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        json_t *top = json_object();
        for (int32_t k = 0; top && k < v[i].n_top; k++) {
            json_t *t = token_text(tok, v[i].top[k].id, piece, NULL);
            /* two tokens with the same text share a key: the more likely one's value stays (OpenAI's shape) */
            if (!t || (!json_object_get(top, json_string_value(t)) &&
                       json_object_set_new(top, json_string_value(t), json_real(v[i].top[k].logprob)) < 0)) {
                json_decref(t);
                json_decref(top);
                goto fail;
            }
            json_decref(t);
        }
        if (json_array_append_new(tokens, token_text(tok, v[i].id, piece, NULL)) < 0 ||
            json_array_append_new(lps, json_real(v[i].logprob)) < 0 || json_array_append_new(tops, top) < 0 ||
            json_array_append_new(offs, json_integer((json_int_t)*offset)) < 0)
            goto fail;
        *offset += tok_piece(tok, v[i].id, 0, piece, tok_max_piece_len(tok));
    }
    free(piece);
    return o;
fail:
    free(piece);
    json_decref(o);
    return NULL;
}

json_t *apilp_chat(const tok_t *tok, const logprob_entry_t *v, size_t n)
{
    char *piece = malloc(tok_max_piece_len(tok) + 1);
    json_t *content = json_array();
    json_t *o = json_pack("{s:o, s:n}", "content", content, "refusal");
    if (!piece || !o)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        json_t *tops = json_array();
        for (int32_t k = 0; tops && k < v[i].n_top; k++) {
            json_t *b = NULL, *t = token_text(tok, v[i].top[k].id, piece, &b);
            if (json_array_append_new(tops, json_pack("{s:o, s:f, s:o}", "token", t, "logprob",
                                                      (double)v[i].top[k].logprob, "bytes", b)) < 0) {
                json_decref(tops);
                goto fail;
            }
        }
        json_t *b = NULL, *t = token_text(tok, v[i].id, piece, &b);
        if (json_array_append_new(content, json_pack("{s:o, s:f, s:o, s:o}", "token", t, "logprob",
                                                      (double)v[i].logprob, "bytes", b, "top_logprobs", tops)) < 0)
            goto fail;
    }
    free(piece);
    return o;
fail:
    free(piece);
    json_decref(o);
    return NULL;
}
