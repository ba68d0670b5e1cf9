/* core/tokenizer/tok.h — text <-> token ids, from a GGUF vocabulary.
 *
 * Two tokenizer models, chosen by `tokenizer.ggml.model`:
 *   "gpt2"  byte-level BPE: the text is split by the pre-tokenizer regexes named by `tokenizer.ggml.pre`
 *           (PCRE2, Unicode mode), each piece is mapped byte -> GPT-2 "byte char" and merged by rank;
 *   "llama" SentencePiece-style: spaces become U+2581, a space is prefixed (add_space_prefix), pieces are
 *           merged by score, bytes with no piece fall back to <0xNN> tokens (or the unknown token).
 * Added tokens (types CONTROL, USER_DEFINED, UNKNOWN) are cut out of the text before that: USER_DEFINED ones
 * always, CONTROL/UNKNOWN ones only with TOK_PARSE_SPECIAL, longest text first. The output is the one
 * llama.cpp gives for the same vocabulary (checked against its test vocabularies).
 *
 * A tok_t copies everything it needs: the gguf_t it was built from may be destroyed right after. It is
 * immutable once built; every function below may be called from several threads at once.
 */
#ifndef GUILD_TOK_H
#define GUILD_TOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/gguf/gguf.h"
#include "core/util/err.h"

typedef struct tok tok_t;

typedef enum tok_model {
    TOK_MODEL_SPM = 1, /* "llama" */
    TOK_MODEL_BPE = 2, /* "gpt2" */
} tok_model_t;

/* Token attributes (a bit set, as llama.cpp's llama_token_attr), derived from the GGUF token types. */
typedef enum tok_attr {
    TOK_ATTR_UNDEFINED = 0,
    TOK_ATTR_UNKNOWN = 1u << 0,
    TOK_ATTR_UNUSED = 1u << 1,
    TOK_ATTR_NORMAL = 1u << 2,
    TOK_ATTR_CONTROL = 1u << 3,
    TOK_ATTR_USER_DEFINED = 1u << 4,
    TOK_ATTR_BYTE = 1u << 5,
} tok_attr_t;

/* GGUF `tokenizer.ggml.token_type` values. */
typedef enum tok_gguf_type {
    TOK_TYPE_UNDEFINED = 0,
    TOK_TYPE_NORMAL = 1,
    TOK_TYPE_UNKNOWN = 2,
    TOK_TYPE_CONTROL = 3,
    TOK_TYPE_USER_DEFINED = 4,
    TOK_TYPE_UNUSED = 5,
    TOK_TYPE_BYTE = 6,
} tok_gguf_type_t;

/* --- construction ------------------------------------------------------------------------------------- */

/* Builds the tokenizer from the `tokenizer.ggml.*` metadata of g. Fails (-1, *out = NULL, message naming the
 * file and the key) on a missing or ill-typed tokens array, an unknown model or pre-tokenizer, a merge that
 * names a token the vocabulary lacks, a special token id out of range, duplicate token texts, ... */
int tok_new_from_gguf(tok_t **out, const gguf_t *g, guild_err_t *err);

/* A string that need not be NUL-terminated. */
typedef struct tok_str {
    const char *s;
    size_t len;
} tok_str_t;

#define TOK_SPEC_UNSET INT64_MIN /* an id or flag whose GGUF key is absent: the model's default applies */

/* The vocabulary as the GGUF keys give it, for tok_new (tests build these in memory). Fill with
 * tok_spec_init first: ids and flags start TOK_SPEC_UNSET. Nothing is kept: tok_new copies. */
typedef struct tok_spec {
    const char *name;          /* used in messages (the file name); NULL: "vocabulary" */
    const char *model;         /* tokenizer.ggml.model: "gpt2" or "llama" */
    const char *pre;           /* tokenizer.ggml.pre; NULL when absent (BPE: "default" regexes) */
    size_t n_tokens;           /* tokenizer.ggml.tokens */
    const tok_str_t *tokens;   /* [n_tokens]; NULL: the key is absent (an error) */
    const float *scores;       /* [n_tokens] tokenizer.ggml.scores, or NULL (all 0) */
    const int32_t *types;      /* [n_tokens] tokenizer.ggml.token_type (tok_gguf_type_t), or NULL (all NORMAL) */
    size_t n_merges;           /* tokenizer.ggml.merges (BPE only) */
    const tok_str_t *merges;   /* [n_merges] "left right"; NULL: absent (an error for BPE) */
    int64_t bos, eos, eot, eom, unk, pad, sep; /* tokenizer.ggml.<x>_token_id; -1: none */
    int64_t add_bos, add_eos, add_space_prefix; /* tokenizer.ggml.add_bos_token, ... : 0/1 */
} tok_spec_t;

void tok_spec_init(tok_spec_t *spec);

/* Builds the tokenizer from spec (same checks as tok_new_from_gguf). */
int tok_new(tok_t **out, const tok_spec_t *spec, guild_err_t *err);

/* Frees; sets *t to NULL. NULL-safe. */
void tok_destroy(tok_t **t);

/* --- vocabulary --------------------------------------------------------------------------------------- */

tok_model_t tok_model(const tok_t *t);
const char *tok_pre(const tok_t *t); /* the pre-tokenizer name ("" for SPM, "default" when absent) */
int32_t tok_n_tokens(const tok_t *t);

/* Special ids, -1 when the vocabulary has none. */
int32_t tok_bos(const tok_t *t);
int32_t tok_eos(const tok_t *t);
int32_t tok_eot(const tok_t *t); /* end of turn: from metadata or found by text (<|eot_id|>, <|im_end|>, ...) */
int32_t tok_eom(const tok_t *t);
int32_t tok_unk(const tok_t *t);
int32_t tok_pad(const tok_t *t);
bool tok_add_bos(const tok_t *t); /* whether TOK_ADD_SPECIAL prepends BOS */
bool tok_add_eos(const tok_t *t);
/* Whether id ends generation (EOS, EOT, EOM and the end tokens llama.cpp recognises by text). */
bool tok_is_eog(const tok_t *t, int32_t id);

/* The stored text of token id (NUL-terminated; *len its length; BPE texts are in the GPT-2 byte alphabet).
 * id must be in [0, n_tokens). */
const char *tok_text(const tok_t *t, int32_t id, size_t *len);
tok_attr_t tok_attr(const tok_t *t, int32_t id);
float tok_score(const tok_t *t, int32_t id);
/* The id whose stored text is exactly text[0..len), or -1. */
int32_t tok_find(const tok_t *t, const char *text, size_t len);

/* --- encoding ----------------------------------------------------------------------------------------- */

/* A growable array of ids in caller memory: zero-initialise (or tok_ids_init), free with tok_ids_fini. */
typedef struct tok_ids {
    int32_t *v;
    size_t n;
    size_t cap;
} tok_ids_t;

void tok_ids_init(tok_ids_t *ids);
void tok_ids_fini(tok_ids_t *ids);

enum {
    TOK_ADD_SPECIAL = 1u << 0,   /* prepend BOS / append EOS where the vocabulary asks for them */
    TOK_PARSE_SPECIAL = 1u << 1, /* recognise CONTROL/UNKNOWN token texts in the input */
};

/* Appends the ids of text[0..len) (any bytes; NUL is an ordinary byte) to out. flags: TOK_ADD_SPECIAL,
 * TOK_PARSE_SPECIAL. BPE: invalid UTF-8 is read as U+FFFD, one per bad byte (as llama.cpp does); SPM keeps
 * every byte. Returns 0, or -1 on out of memory, a regex engine failure or a text over 1 GiB (message in
 * err; out keeps what it had). */
int tok_encode(const tok_t *t, const char *text, size_t len, unsigned flags, tok_ids_t *out, guild_err_t *err);

/* --- decoding ----------------------------------------------------------------------------------------- */

enum {
    TOK_DECODE_SPECIAL = 1u << 0, /* render CONTROL/UNKNOWN tokens as their text (otherwise they give nothing) */
};

/* The longest piece tok_piece can produce, in bytes. */
size_t tok_max_piece_len(const tok_t *t);

/* The bytes of token id alone: BPE byte chars decoded, SPM U+2581 -> ' ' and <0xNN> -> the byte, USER_DEFINED
 * tokens as their text, CONTROL/UNKNOWN only with TOK_DECODE_SPECIAL, UNUSED/UNDEFINED and ids out of range
 * nothing. Returns the piece's length and writes as much of it as fits in cap to buf (tok_max_piece_len
 * bytes always hold it). A piece may end inside a UTF-8 sequence that the next token completes: see tok_utf8_incomplete. */
size_t tok_piece(const tok_t *t, int32_t id, unsigned flags, char *buf, size_t cap);

/* Concatenates the pieces of ids[0..n) into a malloc'ed NUL-terminated string (*out, caller frees; *out_len
 * without the NUL). For SPM vocabularies with add_space_prefix the leading space of the first piece that
 * gives bytes is dropped, so that decode(encode(s)) == s for any valid UTF-8 s without special-token texts
 * (with or without TOK_ADD_SPECIAL); a space that SPM adds after a special token is kept. Unlike llama.cpp
 * no "clean up tokenization spaces" pass is made: the bytes are exact. -1 only when out of memory. */
int tok_decode(const tok_t *t, const int32_t *ids, size_t n, unsigned flags, char **out, size_t *out_len,
               guild_err_t *err);

/* For streaming: the number of bytes (0..3) at the end of buf[0..n) that start a UTF-8 sequence that is
 * not complete yet. Print n - that, keep the rest in front of the next piece. */
size_t tok_utf8_incomplete(const char *buf, size_t n);

/* Length (1..4) of the well-formed UTF-8 character that starts s[0..n), or 0 if none does (a stray or
 * truncated sequence, an overlong form, a surrogate): for printing pieces safely. */
size_t tok_utf8_char_len(const char *s, size_t n);

#endif
