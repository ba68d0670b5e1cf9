/* Prints how core/tokenizer's pre-tokenizer argv[1] splits texts: stdin holds the texts separated by NUL
 * bytes; each gives one line "off,len;off,len;..." (byte offsets). For tests/tokenizer_pretok_ref.py. */
#include "core/tokenizer/pretok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: pretok_split PRE-NAME < texts\n");
        return 2;
    }
    guild_err_t err = {{0}};
    tok_pretok_t *p = NULL;
    tok_pretok_info_t info;
    if (tok_pretok_new(&p, argv[1], &info, &err) < 0) {
        fprintf(stderr, "pretok_split: %s\n", err.msg);
        return 1;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (size_t r; buf && (r = fread(buf + n, 1, cap - n, stdin)) > 0;) {
        n += r;
        if (n == cap)
            buf = realloc(buf, cap *= 2);
    }
    if (!buf)
        return 1;
    tok_spans_t spans = {0}, tmp = {0};
    for (size_t start = 0; start <= n;) {
        char *end = memchr(buf + start, '\0', n - start);
        size_t len = end ? (size_t)(end - (buf + start)) : n - start;
        if (!end && len == 0)
            break;
        if (tok_pretok_split(p, buf + start, len, &spans, &tmp, &err) < 0) {
            fprintf(stderr, "pretok_split: %s\n", err.msg);
            return 1;
        }
        for (size_t i = 0; i < spans.n; i++)
            printf("%zu,%zu;", spans.v[i].off, spans.v[i].len);
        putchar('\n');
        start += len + 1;
    }
    tok_spans_fini(&spans);
    tok_spans_fini(&tmp);
    tok_pretok_destroy(&p);
    free(buf);
    return 0;
}
