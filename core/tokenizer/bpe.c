/* core/tokenizer/bpe.c — byte-level BPE (tokenizer.ggml.model = "gpt2").
 *
 * A word from the pre-tokenizer starts as one symbol per byte, each the token of that byte's GPT-2 char;
 * the adjacent pair with the lowest merge rank is merged first (leftmost on ties) until no pair has a rank.
 * Pairs are looked up by token ids: every merge must name two tokens and produce a third (the loader checks),
 * so a symbol's text is always some token's text and ids say the same as llama.cpp's string pairs. The
 * candidate pairs sit in a heap, so a word of n bytes costs O(n log n), not O(n^2).
 */
#include "core/tokenizer/tok_internal.h"
#include "core/tokenizer/utf8.h"

#include <stdlib.h>
#include <string.h>

/* --- GPT-2 byte alphabet ------------------------------------------------------------------------------- */

/* Printable Latin-1 bytes stand for themselves; the other 68 take the code points 256, 257, ... in byte
 * order (GPT-2's bytes_to_unicode): 0x00-0x20 -> 256-288, 0x7F-0xA0 -> 289-322, 0xAD -> 323. */
static bool byte_is_printable(unsigned b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t tok_bpe_byte_char(uint8_t b)
{
    if (byte_is_printable(b))
        return b;
    if (b <= 0x20)
        return 256u + b;
    if (b <= 0xA0)
        return 289u + (b - 0x7Fu);
    return 323; /* 0xAD */
}

int tok_bpe_char_byte(uint32_t cp)
{
    if (cp < 256)
        return byte_is_printable(cp) ? (int)cp : -1;
    if (cp <= 288)
        return (int)(cp - 256);
    if (cp <= 322)
        return (int)(cp - 289 + 0x7F);
    return cp == 323 ? 0xAD : -1;
}

/* --- merges ------------------------------------------------------------------------------------------- */

static uint64_t pair_hash(uint64_t key)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    key *= 0xc4ceb9fe1a85ec53ull;
    key ^= key >> 33;
    return key;
}

static const tok_bpe_pair_t *pair_find(const tok_t *t, int32_t left, int32_t right)
{
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    for (uint64_t i = pair_hash(key) & t->pair_mask;; i = (i + 1) & t->pair_mask) {
        const tok_bpe_pair_t *p = &t->pairs[i];
        if (p->key == key)
            return p;
        if (p->key == UINT64_MAX)
            return NULL;
    }
}

/* At most this much of an offending text goes into a message. */
#define SHOWN 48
#define SHOW(s, len) (int)((len) < SHOWN ? (len) : SHOWN), (s)

/* One merge of a batch being loaded. */
typedef struct merge_load {
    const char *s;            /* "left right" */
    size_t llen, rlen;        /* lengths of left and right */
    uint32_t hl, hr, hj;      /* hashes of left, right and left+right */
    uint64_t key, slot;       /* pair key and its first slot */
    int32_t merged;
} merge_load_t;

static int not_a_token(const tok_t *t, size_t i, const merge_load_t *m, const char *what, size_t wlen,
                       const char *what2, size_t wlen2, guild_err_t *err)
{
    size_t len = m->llen + 1 + m->rlen;
    return guild_err_set(err, "%s: tokenizer.ggml.merges[%zu] '%.*s': '%.*s%.*s' is not a token of the vocabulary",
                         t->name, i, SHOW(m->s, len), SHOW(what, wlen), SHOW(what2, wlen2));
}

int tok_bpe_init_merges(tok_t *t, const tok_str_t *merges, size_t n, guild_err_t *err)
{
    uint64_t cap = 16;
    while (cap < n + n / 2 + 1)
        cap *= 2;
    t->pairs = malloc(cap * sizeof *t->pairs);
    if (!t->pairs)
        return guild_err_set(err, "%s: tokenizer.ggml.merges: out of memory for %zu merges", t->name, n);
    memset(t->pairs, 0xFF, cap * sizeof *t->pairs);
    t->pair_mask = cap - 1;

    merge_load_t b[LOAD_BATCH];
    for (size_t i0 = 0; i0 < n; i0 += LOAD_BATCH) {
        size_t i1 = n - i0 < LOAD_BATCH ? n : i0 + LOAD_BATCH, bad = SIZE_MAX;
        /* Split at the first space after the first byte, as llama.cpp does; hash the three texts. */
        for (size_t i = i0; i < i1; i++) {
            merge_load_t *m = &b[i - i0];
            const char *s = merges[i].s;
            size_t len = merges[i].len;
            const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
            if (!sp) {
                bad = i;
                i1 = i; /* load the ones before, which may hold an earlier error */
                break;
            }
            m->s = s;
            m->llen = (size_t)(sp - s);
            m->rlen = len - m->llen - 1;
            m->hl = tok_strmap_hash(s, m->llen);
            m->hr = tok_strmap_hash(sp + 1, m->rlen);
            m->hj = tok_strmap_hash2(s, m->llen, sp + 1, m->rlen);
            tok_strmap_prefetch(&t->by_text, m->hl);
            tok_strmap_prefetch(&t->by_text, m->hr);
            tok_strmap_prefetch(&t->by_text, m->hj);
        }
        for (size_t i = i0; i < i1; i++) {
            merge_load_t *m = &b[i - i0];
            const char *r = m->s + m->llen + 1;
            int32_t left = tok_strmap_find2(&t->by_text, m->s, m->llen, "", 0, m->hl);
            int32_t right = tok_strmap_find2(&t->by_text, r, m->rlen, "", 0, m->hr);
            m->merged = tok_strmap_find2(&t->by_text, m->s, m->llen, r, m->rlen, m->hj);
            if (left < 0)
                return not_a_token(t, i, m, m->s, m->llen, "", 0, err);
            if (right < 0)
                return not_a_token(t, i, m, r, m->rlen, "", 0, err);
            if (m->merged < 0)
                return not_a_token(t, i, m, m->s, m->llen, r, m->rlen, err);
            m->key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
            m->slot = pair_hash(m->key) & t->pair_mask;
            __builtin_prefetch(&t->pairs[m->slot]);
        }
        for (size_t i = i0; i < i1; i++) {
            const merge_load_t *m = &b[i - i0];
            uint64_t j = m->slot;
            while (t->pairs[j].key != UINT64_MAX && t->pairs[j].key != m->key)
                j = (j + 1) & t->pair_mask;
            if (t->pairs[j].key == m->key)
                continue; /* a repeated pair keeps its first (lowest) rank */
            t->pairs[j] = (tok_bpe_pair_t){m->key, (int32_t)i, m->merged};
        }
        if (bad != SIZE_MAX)
            return guild_err_set(err, "%s: tokenizer.ggml.merges[%zu] '%.*s': no space between the two tokens",
                                 t->name, bad, SHOW(merges[bad].s, merges[bad].len));
    }
    return 0;
}

/* --- encoding ----------------------------------------------------------------------------------------- */

static int push_pair(const tok_t *t, tok_scratch_t *s, int32_t l, int32_t r)
{
    if (l < 0 || r < 0)
        return 0;
    const tok_sym_t *a = &s->sym[l], *b = &s->sym[r];
    if (a->id < 0 || b->id < 0)
        return 0;
    const tok_bpe_pair_t *p = pair_find(t, a->id, b->id);
    if (!p)
        return 0;
    tok_merge_t m = {(double)p->rank, l, r, a->len + b->len, p->merged};
    return tok_merge_queue_push(&s->queue, &m);
}

/* Merges one word (raw bytes) and appends its ids. */
static int encode_word(const tok_t *t, const uint8_t *w, size_t n, tok_scratch_t *s, tok_ids_t *out)
{
    if (n == 0)
        return 0;
    if (t->ignore_merges) {
        /* The word spelled in the byte alphabet; a whole-word token wins outright. */
        if (tok_grow((void **)&s->word, &s->word_cap, 2 * n, 1) < 0)
            return -1;
        size_t wl = 0;
        for (size_t i = 0; i < n; i++)
            wl += tok_utf8_encode(tok_bpe_byte_char(w[i]), s->word + wl);
        int32_t id = tok_strmap_find(&t->by_text, s->word, wl);
        if (id >= 0)
            return tok_ids_push(out, id);
    }
    if (tok_grow((void **)&s->sym, &s->sym_cap, n, sizeof *s->sym) < 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        s->sym[i] = (tok_sym_t){(int32_t)i - 1, i + 1 < n ? (int32_t)i + 1 : -1, (uint32_t)i, 1, t->byte_token[w[i]]};
    s->queue.n = 0;
    for (size_t i = 1; i < n; i++)
        if (push_pair(t, s, (int32_t)i - 1, (int32_t)i) < 0)
            return -1;

    tok_merge_t m;
    while (tok_merge_queue_pop(&s->queue, &m)) {
        tok_sym_t *l = &s->sym[m.left], *r = &s->sym[m.right];
        if (!l->len || !r->len || l->len + r->len != m.size)
            continue; /* stale: one side was merged into something else since */
        l->len += r->len;
        l->id = m.id;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0)
            s->sym[r->next].prev = m.left;
        if (push_pair(t, s, l->prev, m.left) < 0 || push_pair(t, s, m.left, l->next) < 0)
            return -1;
    }

    for (int32_t i = 0; i >= 0; i = s->sym[i].next) {
        const tok_sym_t *y = &s->sym[i];
        if (y->id >= 0) {
            if (tok_ids_push(out, y->id) < 0)
                return -1;
            continue;
        }
        /* A byte whose char is not a token: llama.cpp then tries each byte of the char's UTF-8 spelling as
         * a one-byte token, and drops the ones that are not. */
        char ch[4];
        size_t cl = tok_utf8_encode(tok_bpe_byte_char(w[y->off]), ch);
        for (size_t k = 0; k < cl; k++) {
            int32_t id = tok_strmap_find(&t->by_text, ch + k, 1);
            if (id >= 0 && tok_ids_push(out, id) < 0)
                return -1;
        }
    }
    return 0;
}

int tok_bpe_encode(const tok_t *t, const char *text, size_t len, tok_scratch_t *s, tok_ids_t *out,
                   guild_err_t *err)
{
    if (tok_utf8_valid_prefix(text, len) != len) {
        if (tok_grow((void **)&s->buf, &s->buf_cap, 3 * len, 1) < 0)
            return guild_err_set(err, "%s: encode: out of memory", t->name);
        len = tok_utf8_sanitize(text, len, s->buf);
        text = s->buf;
    }
    if (tok_pretok_split(t->pretok, text, len, &s->spans, &s->spans_tmp, err) < 0)
        return guild_err_prefix(err, "%s: ", t->name);
    for (size_t i = 0; i < s->spans.n; i++) {
        const tok_span_t *sp = &s->spans.v[i];
        if (encode_word(t, (const uint8_t *)text + sp->off, sp->len, s, out) < 0)
            return guild_err_set(err, "%s: encode: out of memory", t->name);
    }
    return 0;
}
