/* core/tokenizer/utf8.h — the few UTF-8 operations the tokenizer needs (internal). */
#ifndef GUILD_TOK_UTF8_H
#define GUILD_TOK_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Length of the sequence a byte starts, judged by its top four bits alone (1 for continuation and invalid
 * bytes): how llama.cpp cuts text into symbols, valid or not. */
static inline size_t tok_utf8_seq_len(uint8_t lead)
{
    static const uint8_t len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return len[lead >> 4];
}

/* Decodes one well-formed sequence (no overlongs, surrogates or values past U+10FFFF) at s[0..n).
 * Returns its length with *cp set, or 0 if s does not start with one. */
size_t tok_utf8_decode(const char *s, size_t n, uint32_t *cp);

/* Encodes cp (<= 0x10FFFF) into out[0..4); returns the length. */
size_t tok_utf8_encode(uint32_t cp, char *out);

/* Length of the longest prefix of s[0..n) that is well-formed UTF-8. */
size_t tok_utf8_valid_prefix(const char *s, size_t n);

/* Writes s[0..n) to out with every byte that does not begin a well-formed sequence replaced by U+FFFD
 * (EF BF BD). out must hold 3 * n bytes. Returns the length written. */
size_t tok_utf8_sanitize(const char *s, size_t n, char *out);

#endif
