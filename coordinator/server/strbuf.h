/* coordinator/server/strbuf.h — a growable byte string (always NUL-terminated), for response bodies and text.
 * Allocation failure is sticky: later appends do nothing and strbuf_ok() says false, so a builder checks once. */
#ifndef GUILD_SERVER_STRBUF_H
#define GUILD_SERVER_STRBUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct strbuf {
    char *p;    /* [len + 1], NUL-terminated; NULL until the first append */
    size_t len;
    size_t cap;
    bool oom;
} strbuf_t;

/* Zero-initialise, or: */
#define STRBUF_INIT {0}

void strbuf_put(strbuf_t *b, const char *s, size_t n);
void strbuf_puts(strbuf_t *b, const char *s);
void strbuf_printf(strbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Drops the first n bytes. */
void strbuf_consume(strbuf_t *b, size_t n);
void strbuf_clear(strbuf_t *b);
bool strbuf_ok(const strbuf_t *b);
/* The contents ("" when empty). */
const char *strbuf_str(const strbuf_t *b);
/* Frees the memory; the buffer is empty and usable again. */
void strbuf_fini(strbuf_t *b);

#endif
