#include "config.h"

#include "coordinator/server/textfilt.h"

#include <stdlib.h>
#include <string.h>

struct textfilt {
    char **stops;
    size_t *stop_len;
    size_t n_stops;
    size_t max_stop;   /* longest stop string */
    char raw[4];       /* bytes of an unfinished UTF-8 sequence */
    size_t n_raw;
    strbuf_t held;     /* valid text that may begin a stop string */
    bool stopped;
};

#define REPLACEMENT "\xef\xbf\xbd"

/* The well-formed range of the second byte after lead byte c, and the number of continuation bytes (0: c is
 * not a lead byte). Table 3-7 of the Unicode standard. */
static int seq_info(unsigned char c, unsigned char *lo, unsigned char *hi)
{
    *lo = 0x80;
    *hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf)
        return 1;
    if (c >= 0xe0 && c <= 0xef) {
        if (c == 0xe0)
            *lo = 0xa0;
        else if (c == 0xed)
            *hi = 0x9f;
        return 2;
    }
    if (c >= 0xf0 && c <= 0xf4) {
        if (c == 0xf0)
            *lo = 0x90;
        else if (c == 0xf4)
            *hi = 0x8f;
        return 3;
    }
    return 0;
}

/* Converts s[0..n) to out; when `final` is false, an unfinished but so far well-formed sequence at the end is
 * not converted: its length is returned (the caller keeps those bytes). */
static size_t sanitize(const char *s, size_t n, bool final, strbuf_t *out)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, run = 0; /* run: start of pending plain bytes, copied in one go */
    while (i < n) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        unsigned char lo, hi;
        int need = seq_info(u[i], &lo, &hi);
        size_t j = 1;
        while ((int)j <= need && i + j < n && u[i + j] >= lo && u[i + j] <= hi) {
            j++;
            lo = 0x80;
            hi = 0xbf;
        }
        if (need && (int)j == need + 1) {
            i += j; /* a whole character */
            continue;
        }
        strbuf_put(out, s + run, i - run);
        if (need && i + j == n && !final) /* well-formed so far: wait for more */
            return n - i;
        strbuf_puts(out, REPLACEMENT); /* one per maximal subpart: the lead and its valid continuations */
        i += j;
        run = i;
    }
    strbuf_put(out, s + run, n - run);
    return 0;
}

void textfilt_sanitize(const char *s, size_t n, strbuf_t *out)
{
    sanitize(s, n, true, out);
}

int textfilt_new(textfilt_t **out, const char *const *stops, size_t n_stops, guild_err_t *err)
{
    *out = NULL;
    textfilt_t *f = calloc(1, sizeof *f);
    if (!f)
        return guild_err_set(err, "out of memory");
    if (n_stops) {
        f->stops = calloc(n_stops, sizeof *f->stops);
        f->stop_len = calloc(n_stops, sizeof *f->stop_len);
        if (!f->stops || !f->stop_len)
            goto oom;
    }
    for (size_t i = 0; i < n_stops; i++) {
        if (!(f->stops[i] = strdup(stops[i])))
            goto oom;
        f->n_stops = i + 1;
        f->stop_len[i] = strlen(stops[i]);
        if (f->stop_len[i] > f->max_stop)
            f->max_stop = f->stop_len[i];
    }
    *out = f;
    return 0;
oom:
    textfilt_destroy(&f);
    return guild_err_set(err, "out of memory for %zu stop strings", n_stops);
}

void textfilt_destroy(textfilt_t **fp)
{
    textfilt_t *f = *fp;
    if (!f)
        return;
    for (size_t i = 0; i < f->n_stops; i++)
        free(f->stops[i]);
    free(f->stops);
    free(f->stop_len);
    strbuf_fini(&f->held);
    free(f);
    *fp = NULL;
}

/* Releases from f->held what can no longer be part of a stop string (everything when `all`). */
static int release(textfilt_t *f, bool all, strbuf_t *out)
{
    const char *t = strbuf_str(&f->held);
    size_t len = f->held.len, first = len;
    /* A stop string cannot start in text released before: whatever could begin one was held. */
    for (size_t k = 0; k < f->n_stops; k++) {
        const char *hit = f->stop_len[k] ? memmem(t, len, f->stops[k], f->stop_len[k]) : NULL;
        if (hit && (size_t)(hit - t) < first)
            first = (size_t)(hit - t);
    }
    if (first < len) {
        strbuf_put(out, t, first);
        strbuf_clear(&f->held);
        f->stopped = true;
        return 1;
    }
    size_t keep = 0;
    if (!all && f->max_stop > 1) {
        /* the longest end of the text that is a proper prefix of some stop string */
        size_t most = len < f->max_stop - 1 ? len : f->max_stop - 1;
        for (size_t h = most; h > 0 && !keep; h--)
            for (size_t k = 0; k < f->n_stops && !keep; k++)
                if (f->stop_len[k] > h && !memcmp(t + len - h, f->stops[k], h))
                    keep = h;
    }
    strbuf_put(out, t, len - keep);
    strbuf_consume(&f->held, len - keep);
    return 0;
}

int textfilt_push(textfilt_t *f, const char *s, size_t n, strbuf_t *out)
{
    if (f->stopped)
        return 1;
    if (!n)
        return 0;
    /* the unfinished sequence from before goes in front (it is at most 3 bytes) */
    strbuf_t in = STRBUF_INIT;
    strbuf_put(&in, f->raw, f->n_raw);
    strbuf_put(&in, s, n);
    if (!strbuf_ok(&in)) {
        out->oom = true;
        return 0;
    }
    size_t keep = sanitize(in.p, in.len, false, &f->held);
    memcpy(f->raw, in.p + in.len - keep, keep);
    f->n_raw = keep;
    strbuf_fini(&in);
    if (!strbuf_ok(&f->held)) {
        out->oom = true;
        return 0;
    }
    return release(f, false, out);
}

int textfilt_finish(textfilt_t *f, strbuf_t *out)
{
    if (f->stopped)
        return 1;
    sanitize(f->raw, f->n_raw, true, &f->held);
    f->n_raw = 0;
    if (!strbuf_ok(&f->held)) {
        out->oom = true;
        return 0;
    }
    return release(f, true, out);
}
