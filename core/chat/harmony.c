/* OpenAI's harmony format for gpt-oss (contract in harmony.h): the prompt as the model's Jinja template writes it
 * (openai/gpt-oss's chat_template.jinja, without tools), and a parser of the reply's channels. */
#include "config.h"

#include "core/chat/harmony.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the prompt ---------------------------------------------------------------------------------------- */

typedef struct buf {
    char *p;
    size_t len, cap;
    bool oom;
} buf_t;

static void put_n(buf_t *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        const size_t cap = (b->len + n + 1) * 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void put(buf_t *b, const char *s)
{
    put_n(b, s, strlen(s));
}

int chat_harmony_format(const chat_msg_t *m, size_t n, bool gen, const chat_opts_t *o, char **out, size_t *out_len,
                        guild_err_t *err)
{
    *out = NULL;
    *out_len = 0;
    const char *effort = o && o->reasoning_effort ? o->reasoning_effort : "medium";
    if (strcmp(effort, "low") && strcmp(effort, "medium") && strcmp(effort, "high"))
        return guild_err_set(err, "reasoning effort \"%.32s\": gpt-oss takes low, medium or high", effort);
    char today[16];
    const char *date = o ? o->date : NULL;
    if (!date) { /* the template's strftime_now("%Y-%m-%d") */
        const time_t now = time(NULL);
        struct tm tm;
        if (!localtime_r(&now, &tm) || !strftime(today, sizeof today, "%Y-%m-%d", &tm))
            snprintf(today, sizeof today, "1970-01-01");
        date = today;
    }
    buf_t b = {0};
    put(&b, "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
            "Knowledge cutoff: 2024-06\nCurrent date: ");
    put(&b, date);
    put(&b, "\n\nReasoning: ");
    put(&b, effort);
    put(&b, "\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>");
    /* a first system (or developer) message is the developer's instructions */
    size_t i = 0;
    if (n > 0 && (!strcmp(m[0].role, "system") || !strcmp(m[0].role, "developer"))) {
        if (m[0].content[0]) {
            put(&b, "<|start|>developer<|message|># Instructions\n\n");
            put(&b, m[0].content);
            put(&b, "\n\n<|end|>");
        }
        i = 1;
    }
    for (; i < n; i++) {
        if (!strcmp(m[i].role, "assistant")) {
            /* the chain of thought of earlier turns is dropped; a last assistant message without a generation
             * prompt (training) ends the generation */
            put(&b, "<|start|>assistant<|channel|>final<|message|>");
            put(&b, m[i].content);
            put(&b, i + 1 == n && !gen ? "<|return|>" : "<|end|>");
        } else if (!strcmp(m[i].role, "user")) {
            put(&b, "<|start|>user<|message|>");
            put(&b, m[i].content);
            put(&b, "<|end|>");
        } /* other roles (a later system message, tools) the template writes nothing for */
    }
    if (gen)
        put(&b, "<|start|>assistant");
    put(&b, ""); /* a string even when empty */
    if (b.oom) {
        free(b.p);
        return guild_err_set(err, "out of memory formatting a chat of %zu messages", n);
    }
    *out = b.p;
    *out_len = b.len;
    return 0;
}

/* ---- the reply ----------------------------------------------------------------------------------------- */

enum { HEADER, BODY, BETWEEN };

enum { M_START, M_CHANNEL, M_CONSTRAIN, M_MESSAGE, M_END, M_RETURN, M_CALL, N_MARKERS };

static const char *const markers[N_MARKERS] = {
    [M_START] = "<|start|>",     [M_CHANNEL] = "<|channel|>", [M_CONSTRAIN] = "<|constrain|>",
    [M_MESSAGE] = "<|message|>", [M_END] = "<|end|>",         [M_RETURN] = "<|return|>",
    [M_CALL] = "<|call|>",
};

void chat_harmony_parser_init(chat_harmony_parser_t *p)
{
    memset(p, 0, sizeof *p);
    p->state = HEADER;
    p->part = CHAT_PART_CONTENT;
}

static void emit(chat_part_fn fn, void *ctx, chat_part_t part, const char *s, size_t n)
{
    if (n)
        fn(ctx, part, s, n);
}

/* Whether the header's text holds a marker (<|channel|>, <|constrain|>): then it was a message's header. */
static bool header_marked(const chat_harmony_parser_t *p)
{
    return memmem(p->header, p->header_len, "<|channel|>", 11) || memmem(p->header, p->header_len, "<|constrain|>", 13);
}

/* Gives out s[0..n) as `part` without the markers in it (a header's text as content). */
static void emit_unmarked(chat_part_fn fn, void *ctx, chat_part_t part, const char *s, size_t n)
{
    size_t run = 0;
    for (size_t i = 0; i < n;) {
        size_t l = 0;
        if (s[i] == '<')
            for (int k = 0; k < N_MARKERS && !l; k++)
                if (n - i >= strlen(markers[k]) && !memcmp(s + i, markers[k], strlen(markers[k])))
                    l = strlen(markers[k]);
        if (!l) {
            i++;
            continue;
        }
        emit(fn, ctx, part, s + run, i - run);
        i += l;
        run = i;
    }
    emit(fn, ctx, part, s + run, n - run);
}

/* The header's text does not end in <|message|> after all: the reply's first header, which the prompt opened,
 * goes out as content when it holds no marker (a model that answers without the format); a header with a
 * marker, or one after <|start|>, was a message that never began (its role and channel are nothing to show). */
static void header_to_content(chat_harmony_parser_t *p, chat_part_fn fn, void *ctx)
{
    if (!p->role && !header_marked(p))
        emit(fn, ctx, CHAT_PART_CONTENT, p->header, p->header_len);
    p->header_len = 0;
}

/* The channel named in the header (after <|channel|>, up to a space, a marker or the end): analysis is
 * reasoning, everything else content. */
static chat_part_t header_part(const chat_harmony_parser_t *p)
{
    static const char ch[] = "<|channel|>";
    const char *h = p->header, *end = p->header + p->header_len;
    for (const char *s = h; s + sizeof ch - 1 <= end; s++)
        if (!memcmp(s, ch, sizeof ch - 1)) {
            const char *name = s + sizeof ch - 1, *e = name;
            while (e < end && *e != ' ' && *e != '<')
                e++;
            return e - name == 8 && !memcmp(name, "analysis", 8) ? CHAT_PART_REASONING : CHAT_PART_CONTENT;
        }
    return CHAT_PART_CONTENT;
}

/* Text of the current state (no marker in it). */
static void text(chat_harmony_parser_t *p, const char *s, size_t n, chat_part_fn fn, void *ctx)
{
    if (!n)
        return;
    switch (p->state) {
    case HEADER:
        if (p->header_len + n <= sizeof p->header) {
            memcpy(p->header + p->header_len, s, n);
            p->header_len += n;
            return;
        }
        /* too long for a header: the model does not write harmony here; it (without its markers) and what
         * follows are content */
        emit_unmarked(fn, ctx, CHAT_PART_CONTENT, p->header, p->header_len);
        p->header_len = 0;
        p->state = BODY;
        p->part = CHAT_PART_CONTENT;
        emit(fn, ctx, CHAT_PART_CONTENT, s, n);
        return;
    case BODY:
        emit(fn, ctx, p->part, s, n);
        return;
    default: /* text between messages */
        emit(fn, ctx, CHAT_PART_CONTENT, s, n);
        return;
    }
}

static void marker(chat_harmony_parser_t *p, int k, chat_part_fn fn, void *ctx)
{
    switch (k) {
    case M_START: /* a new message; an unfinished header was not one */
        if (p->state == HEADER)
            header_to_content(p, fn, ctx);
        p->state = HEADER;
        p->header_len = 0;
        p->role = true;
        return;
    case M_CHANNEL:
    case M_CONSTRAIN:
        if (p->state != HEADER) { /* a header without its <|start|> (also right after a message's text) */
            p->state = HEADER;
            p->header_len = 0;
            p->role = true;
        }
        text(p, markers[k], strlen(markers[k]), fn, ctx); /* part of the header */
        return;
    case M_MESSAGE: /* outside a header it opens nothing: dropped, as every marker */
        if (p->state == HEADER) {
            p->part = header_part(p);
            p->header_len = 0;
            p->state = BODY;
        }
        return;
    default: /* <|end|>, <|return|>, <|call|>: the message is over */
        if (p->state == HEADER)
            header_to_content(p, fn, ctx);
        p->state = BETWEEN;
        return;
    }
}

/* The marker that s[0..n) begins with (-1: none); *prefix: s[0..n) is a proper prefix of one. */
static int marker_at(const char *s, size_t n, bool *prefix)
{
    *prefix = false;
    for (int k = 0; k < N_MARKERS; k++) {
        const size_t l = strlen(markers[k]);
        if (n >= l && !memcmp(s, markers[k], l))
            return k;
        if (n < l && !memcmp(s, markers[k], n))
            *prefix = true;
    }
    return -1;
}

void chat_harmony_parse(chat_harmony_parser_t *p, const char *in, size_t len, bool end, chat_part_fn fn, void *ctx)
{
    /* the held bytes, then the piece: at most one marker's length is held, so the copy is small beside the
     * piece only when the piece is small */
    char *own = NULL;
    const char *s = in;
    size_t n = len;
    if (p->hold_len) {
        own = malloc(p->hold_len + len);
        if (!own) { /* cannot join them: give the held bytes out as they stand */
            text(p, p->hold, p->hold_len, fn, ctx);
        } else {
            memcpy(own, p->hold, p->hold_len);
            if (len)
                memcpy(own + p->hold_len, in, len);
            s = own;
            n = p->hold_len + len;
        }
        p->hold_len = 0;
    }
    size_t i = 0, run = 0; /* text [run, i) not given out yet */
    while (i < n) {
        if (s[i] != '<') {
            i++;
            continue;
        }
        bool prefix;
        const int k = marker_at(s + i, n - i, &prefix);
        if (k >= 0) {
            text(p, s + run, i - run, fn, ctx);
            marker(p, k, fn, ctx);
            i += strlen(markers[k]);
            run = i;
            continue;
        }
        if (prefix && !end) { /* the rest may begin a marker: keep it for the next piece */
            text(p, s + run, i - run, fn, ctx);
            memcpy(p->hold, s + i, n - i);
            p->hold_len = n - i;
            run = i = n;
            break;
        }
        i++;
    }
    text(p, s + run, n - run, fn, ctx);
    if (end && p->state == HEADER) /* a reply that ends inside a header */
        header_to_content(p, fn, ctx);
    free(own);
}
