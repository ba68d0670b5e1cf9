/* core/tokenizer/spm.c — SentencePiece-style BPE (tokenizer.ggml.model = "llama").
 *
 * The fragment, with a space in front where add_space_prefix asks for one and every space written U+2581,
 * starts as one symbol per UTF-8 character (cut by lead byte alone, as llama.cpp does, so any bytes go
 * through). Adjacent symbols whose concatenation is a token are merged, highest score first (leftmost on
 * ties), until none is. A symbol that is not a token (only single characters can be) falls back to its
 * bytes' <0xNN> tokens, else their one-byte tokens, else the unknown token.
 */
#include "core/tokenizer/tok_internal.h"
#include "core/tokenizer/utf8.h"

#include <string.h>

static int push_pair(const tok_t *t, tok_scratch_t *s, const char *text, int32_t l, int32_t r)
{
    if (l < 0 || r < 0)
        return 0;
    const tok_sym_t *a = &s->sym[l], *b = &s->sym[r];
    /* Live neighbours are contiguous in the text: the pair's text is a slice of it. */
    int32_t id = tok_strmap_find(&t->by_text, text + a->off, a->len + b->len);
    if (id < 0)
        return 0;
    tok_merge_t m = {-(double)t->score[id], l, r, a->len + b->len, id};
    return tok_merge_queue_push(&s->queue, &m);
}

static int push_byte(const tok_t *t, uint8_t b, tok_ids_t *out)
{
    int32_t id = t->byte_token[b] >= 0 ? t->byte_token[b] : t->unk;
    return id >= 0 ? tok_ids_push(out, id) : 0;
}

int tok_spm_encode(const tok_t *t, const char *raw, size_t raw_len, tok_scratch_t *s, tok_ids_t *out,
                   guild_err_t *err)
{
    /* The text to merge: optional leading space, then the fragment, spaces escaped as U+2581 (3 bytes). */
    size_t n_space = t->add_space_prefix;
    for (size_t i = 0; i < raw_len; i++)
        n_space += raw[i] == ' ';
    size_t len = raw_len + t->add_space_prefix + 2 * n_space;
    if (tok_grow((void **)&s->buf, &s->buf_cap, len, 1) < 0)
        goto oom;
    char *text = s->buf;
    size_t o = 0;
    if (t->add_space_prefix) {
        memcpy(text, "\xE2\x96\x81", 3);
        o = 3;
    }
    for (size_t i = 0; i < raw_len; i++) {
        if (raw[i] == ' ') {
            memcpy(text + o, "\xE2\x96\x81", 3);
            o += 3;
        } else {
            text[o++] = raw[i];
        }
    }
    if (o == 0)
        return 0;

    size_t n = 0;
    for (size_t off = 0; off < o; n++)
        off += tok_utf8_seq_len((uint8_t)text[off]);
    if (tok_grow((void **)&s->sym, &s->sym_cap, n, sizeof *s->sym) < 0)
        goto oom;
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        size_t cl = tok_utf8_seq_len((uint8_t)text[off]);
        if (cl > o - off)
            cl = o - off;
        s->sym[i] = (tok_sym_t){(int32_t)i - 1, i + 1 < n ? (int32_t)i + 1 : -1, (uint32_t)off, (uint32_t)cl, -1};
        off += cl;
    }
    s->queue.n = 0;
    for (size_t i = 1; i < n; i++)
        if (push_pair(t, s, text, (int32_t)i - 1, (int32_t)i) < 0)
            goto oom;

    tok_merge_t m;
    while (tok_merge_queue_pop(&s->queue, &m)) {
        tok_sym_t *l = &s->sym[m.left], *r = &s->sym[m.right];
        if (!l->len || !r->len || l->len + r->len != m.size)
            continue; /* stale */
        l->len += r->len;
        l->id = m.id;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0)
            s->sym[r->next].prev = m.left;
        if (push_pair(t, s, text, l->prev, m.left) < 0 || push_pair(t, s, text, m.left, l->next) < 0)
            goto oom;
    }

    for (int32_t i = 0; i >= 0; i = s->sym[i].next) {
        const tok_sym_t *y = &s->sym[i];
        int32_t id = y->id >= 0 ? y->id : tok_strmap_find(&t->by_text, text + y->off, y->len);
        if (id >= 0) {
            if (tok_ids_push(out, id) < 0)
                goto oom;
            continue;
        }
        for (uint32_t k = 0; k < y->len; k++)
            if (push_byte(t, (uint8_t)text[y->off + k], out) < 0)
                goto oom;
    }
    return 0;
oom:
    return guild_err_set(err, "%s: encode: out of memory", t->name);
}
