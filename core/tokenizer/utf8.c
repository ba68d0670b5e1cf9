/* core/tokenizer/utf8.c — UTF-8 decoding, validation and the streaming helper. */
#include "core/tokenizer/utf8.h"

#include "core/tokenizer/tok.h"

#include <string.h>

size_t tok_utf8_decode(const char *str, size_t n, uint32_t *cp)
{
    const uint8_t *s = (const uint8_t *)str;
    if (n == 0)
        return 0;
    uint8_t b0 = s[0];
    if (b0 < 0x80) {
        *cp = b0;
        return 1;
    }
    size_t len;
    uint32_t c, min;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        len = 2, c = b0 & 0x1F, min = 0x80;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        len = 3, c = b0 & 0x0F, min = 0x800;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        len = 4, c = b0 & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        c = (c << 6) | (s[i] & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
        return 0;
    *cp = c;
    return len;
}

size_t tok_utf8_encode(uint32_t cp, char *out)
{
    uint8_t *o = (uint8_t *)out;
    if (cp < 0x80) {
        o[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (uint8_t)(0xC0 | (cp >> 6));
        o[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (uint8_t)(0xE0 | (cp >> 12));
        o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | (cp >> 18));
    o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

size_t tok_utf8_valid_prefix(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        if ((uint8_t)s[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        size_t len = tok_utf8_decode(s + i, n - i, &cp);
        if (!len)
            break;
        i += len;
    }
    return i;
}

size_t tok_utf8_sanitize(const char *s, size_t n, char *out)
{
    size_t o = 0, i = 0;
    while (i < n) {
        uint32_t cp;
        size_t len = tok_utf8_decode(s + i, n - i, &cp);
        if (len) {
            memcpy(out + o, s + i, len);
            o += len;
            i += len;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    return o;
}

size_t tok_utf8_incomplete(const char *buf, size_t n)
{
    const uint8_t *s = (const uint8_t *)buf;
    /* Walk back over at most 3 continuation bytes to the lead byte of the last sequence. */
    size_t k = 0;
    while (k < 3 && k < n && (s[n - 1 - k] & 0xC0) == 0x80)
        k++;
    if (k == n)
        return 0; /* only continuation bytes: nothing a later byte could complete */
    uint8_t lead = s[n - 1 - k];
    size_t need;
    if (lead >= 0xC2 && lead <= 0xDF)
        need = 2;
    else if (lead >= 0xE0 && lead <= 0xEF)
        need = 3;
    else if (lead >= 0xF0 && lead <= 0xF4)
        need = 4;
    else
        return 0;
    return k + 1 < need ? k + 1 : 0;
}

size_t tok_utf8_char_len(const char *s, size_t n)
{
    uint32_t cp;
    return tok_utf8_decode(s, n, &cp);
}
