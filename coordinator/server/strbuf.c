#include "coordinator/server/strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool reserve(strbuf_t *b, size_t extra)
{
    if (b->oom)
        return false;
    if (b->len + extra + 1 <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = true;
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

void strbuf_put(strbuf_t *b, const char *s, size_t n)
{
    if (!reserve(b, n))
        return;
    if (n)
        memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void strbuf_puts(strbuf_t *b, const char *s)
{
    strbuf_put(b, s, strlen(s));
}

void strbuf_printf(strbuf_t *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !reserve(b, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void strbuf_consume(strbuf_t *b, size_t n)
{
    if (n >= b->len) {
        strbuf_clear(b);
        return;
    }
    memmove(b->p, b->p + n, b->len - n + 1);
    b->len -= n;
}

void strbuf_clear(strbuf_t *b)
{
    b->len = 0;
    if (b->p)
        b->p[0] = '\0';
}

bool strbuf_ok(const strbuf_t *b)
{
    return !b->oom;
}

const char *strbuf_str(const strbuf_t *b)
{
    return b->p ? b->p : "";
}

void strbuf_fini(strbuf_t *b)
{
    free(b->p);
    *b = (strbuf_t)STRBUF_INIT;
}
