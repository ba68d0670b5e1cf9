/* core/tokenizer/pretok.h — BPE pre-tokenizers: the regexes that cut text into words before merging
 * (internal).
 *
 * Each `tokenizer.ggml.pre` name maps to llama.cpp's list of regexes for it (src/llama-vocab.cpp), applied in
 * sequence: every regex splits each current span into its matches and the gaps between them, and sees only
 * that span (lookaheads and `$` stop at its end). The regexes run on PCRE2 in UTF + UCP mode; where the
 * semantics llama.cpp gets from std::regex differ from PCRE2's, the pattern is translated (pretok.c says how)
 * so that the spans, and hence the ids, are the same. */
#ifndef GUILD_TOK_PRETOK_H
#define GUILD_TOK_PRETOK_H

#include <stdbool.h>
#include <stddef.h>

#include "core/util/err.h"

typedef struct tok_pretok tok_pretok_t;

/* Properties a pre-tokenizer name carries besides its regexes (as llama.cpp sets them). */
typedef struct tok_pretok_info {
    const char *name;   /* canonical name of the regex set ("llama3", "gpt2", ...) */
    bool ignore_merges; /* a word that is a token as a whole is emitted without merging */
    bool add_bos;       /* BOS is added by default (the GGUF key add_bos_token overrides) */
} tok_pretok_info_t;

typedef struct tok_span {
    size_t off, len; /* bytes of the text */
} tok_span_t;

typedef struct tok_spans {
    tok_span_t *v;
    size_t n, cap;
} tok_spans_t;

/* Compiles the regexes for pre-tokenizer `name` (NULL or "" : "default"). Fails (-1) for a name llama.cpp
 * does not know or one whose pre-tokenizer is not regex-based. */
int tok_pretok_new(tok_pretok_t **out, const char *name, tok_pretok_info_t *info, guild_err_t *err);
void tok_pretok_destroy(tok_pretok_t **p);

/* Splits text[0..len), which must be valid UTF-8, into words: spans (replaced, in text order, none empty)
 * cover the text. tmp is scratch. Returns 0, or -1 when out of memory or on a PCRE2 error. */
int tok_pretok_split(const tok_pretok_t *p, const char *text, size_t len, tok_spans_t *spans, tok_spans_t *tmp,
                     guild_err_t *err);

void tok_spans_fini(tok_spans_t *s);

/* Translates one regex of the table into the PCRE2 pattern actually compiled (exposed for tests). Returns
 * the pattern's length, or -1 (message in err) if it does not fit in cap or uses an unsupported construct. */
int tok_pretok_translate(const char *src, char *dst, size_t cap, guild_err_t *err);

#endif
