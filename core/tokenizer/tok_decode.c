/* core/tokenizer/tok_decode.c — ids -> bytes. */
#include "core/tokenizer/tok_internal.h"
#include "core/tokenizer/utf8.h"

#include <stdlib.h>
#include <string.h>

/* The byte of an "<0xNN>" text, or -1. */
static int hex_byte(const char *s, size_t len)
{
    if (len != 6 || memcmp(s, "<0x", 3) || s[5] != '>')
        return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Bytes go to out while they fit in cap; the count goes on, so the return is the piece's full length. */
typedef struct sink {
    char *out;
    size_t cap, n;
} sink_t;

static void emit(sink_t *k, const char *s, size_t len)
{
    if (k->n < k->cap)
        memcpy(k->out + k->n, s, len <= k->cap - k->n ? len : k->cap - k->n);
    k->n += len;
}

size_t tok_piece(const tok_t *t, int32_t id, unsigned flags, char *buf, size_t cap)
{
    sink_t k = {buf, cap, 0};
    if (id < 0 || id >= t->n_tokens)
        return 0;
    const char *s = t->text + t->off[id];
    size_t len = t->len[id];
    unsigned a = t->attr[id];
    if (a & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN)) {
        if (flags & TOK_DECODE_SPECIAL)
            emit(&k, s, len);
        return k.n;
    }
    if (a & TOK_ATTR_USER_DEFINED) {
        emit(&k, s, len);
        return k.n;
    }
    if (a & TOK_ATTR_NORMAL) {
        if (t->model == TOK_MODEL_SPM) {
            for (size_t i = 0; i < len;) {
                if (len - i >= 3 && !memcmp(s + i, "\xE2\x96\x81", 3)) {
                    emit(&k, " ", 1);
                    i += 3;
                } else {
                    emit(&k, s + i++, 1);
                }
            }
            return k.n;
        }
        /* Byte-level: each char of the text stands for one byte; a char outside that alphabet (added
         * tokens typed NORMAL) is copied as it is, where llama.cpp would print "[UNK_BYTE_...]". */
        for (size_t i = 0; i < len;) {
            uint32_t cp;
            size_t cl = tok_utf8_decode(s + i, len - i, &cp);
            int b = cl ? tok_bpe_char_byte(cp) : -1;
            if (b >= 0) {
                char c = (char)b;
                emit(&k, &c, 1);
            } else {
                cl = cl ? cl : 1;
                emit(&k, s + i, cl);
            }
            i += cl;
        }
        return k.n;
    }
    if (a & TOK_ATTR_BYTE) {
        int b = hex_byte(s, len);
        char c = (char)b;
        if (b < 0)
            emit(&k, s, len);
        else
            emit(&k, &c, 1);
        return k.n;
    }
    return 0; /* UNUSED, UNDEFINED */
}

int tok_decode(const tok_t *t, const int32_t *ids, size_t n, unsigned flags, char **out, size_t *out_len,
               guild_err_t *err)
{
    size_t cap = 1;
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < t->n_tokens)
            cap += t->len[ids[i]];
    char *s = malloc(cap);
    if (!s)
        return guild_err_set(err, "%s: decode: out of memory", t->name);
    size_t o = 0;
    bool strip = t->add_space_prefix;
    for (size_t i = 0; i < n; i++) {
        size_t k = tok_piece(t, ids[i], flags, s + o, cap - o);
        if (strip && k) {
            /* The space SPM put in front of the text is not part of it. */
            if (s[o] == ' ') {
                memmove(s + o, s + o + 1, k - 1);
                k--;
            }
            strip = false;
        }
        o += k;
    }
    s[o] = '\0';
    *out = s;
    *out_len = o;
    return 0;
}
