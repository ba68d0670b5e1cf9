/* core/tokenizer/special.c — cutting added tokens (CONTROL, USER_DEFINED, UNKNOWN) out of the text.
 *
 * llama.cpp takes the added tokens longest text first and, for each, splits every raw fragment at each of
 * its occurrences. That order matters when texts overlap ("<a><b>" vs "<b>" ...), so it is kept exactly.
 * Searching every fragment for every added token would be slow for vocabularies with thousands of them
 * (deepseek-llm has 2400), so a trie walk first lists the tokens that occur in the text at all; only those
 * are then cut in llama.cpp's order.
 */
#include "config.h"

#include "core/tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>

#define ADDED (TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED | TOK_ATTR_UNKNOWN)

static int32_t trie_child(const tok_t *t, int32_t node, uint8_t byte)
{
    for (int32_t c = t->trie[node].child; c >= 0; c = t->trie[c].sibling)
        if (t->trie[c].byte == byte)
            return c;
    return -1;
}

static int32_t trie_add(tok_t *t, size_t *cap, int32_t parent, uint8_t byte)
{
    if ((size_t)t->n_trie == *cap) {
        size_t nc = *cap ? 2 * *cap : 256;
        tok_trie_node_t *v = realloc(t->trie, nc * sizeof *v);
        if (!v)
            return -1;
        t->trie = v;
        *cap = nc;
    }
    int32_t n = t->n_trie++;
    t->trie[n] = (tok_trie_node_t){-1, -1, -1, byte};
    if (parent >= 0) {
        t->trie[n].sibling = t->trie[parent].child;
        t->trie[parent].child = n;
    }
    return n;
}

int tok_special_init(tok_t *t, guild_err_t *err)
{
    size_t cap = 0;
    for (int b = 0; b < 256; b++)
        t->trie_root[b] = -1;
    for (int32_t id = 0; id < t->n_tokens; id++) {
        if (!(t->attr[id] & ADDED))
            continue;
        t->n_added++;
        t->n_user += (t->attr[id] & TOK_ATTR_USER_DEFINED) != 0;
        const uint8_t *s = (const uint8_t *)t->text + t->off[id];
        uint32_t len = t->len[id];
        GUILD_ASSERT(len > 0); /* empty texts were replaced on load */
        int32_t node = t->trie_root[s[0]];
        if (node < 0 && (node = t->trie_root[s[0]] = trie_add(t, &cap, -1, s[0])) < 0)
            goto oom;
        for (uint32_t i = 1; i < len; i++) {
            int32_t c = trie_child(t, node, s[i]);
            if (c < 0 && (c = trie_add(t, &cap, node, s[i])) < 0)
                goto oom;
            node = c;
        }
        t->trie[node].id = id;
    }
    return 0;
oom:
    return guild_err_set(err, "%s: out of memory for the added tokens", t->name);
}

static bool eligible(const tok_t *t, int32_t id, bool parse_special)
{
    return (t->attr[id] & TOK_ATTR_USER_DEFINED) || (parse_special && (t->attr[id] & ADDED));
}

static int frags_push(tok_frags_t *f, int32_t id, size_t off, size_t len)
{
    if (tok_grow((void **)&f->v, &f->cap, f->n + 1, sizeof *f->v) < 0)
        return -1;
    f->v[f->n++] = (tok_frag_t){id, off, len};
    return 0;
}

void tok_frags_fini(tok_frags_t *f)
{
    free(f->v);
    f->v = NULL;
    f->n = f->cap = 0;
}

/* Sorts distinct ids by decreasing text length, then id. The list holds the distinct added tokens present
 * in one text: a handful, rarely more than a few hundred. */
static void sort_by_length(const tok_t *t, int32_t *ids, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        int32_t v = ids[i];
        size_t j = i;
        while (j > 0 && (t->len[ids[j - 1]] < t->len[v] || (t->len[ids[j - 1]] == t->len[v] && ids[j - 1] > v))) {
            ids[j] = ids[j - 1];
            j--;
        }
        ids[j] = v;
    }
}

int tok_special_partition(const tok_t *t, const char *text, size_t len, bool parse_special, tok_frags_t *frags,
                          guild_err_t *err)
{
    frags->n = 0;
    if (!len)
        return 0;
    if (frags_push(frags, -1, 0, len) < 0)
        goto oom;
    if (!(parse_special ? t->n_added : t->n_user))
        return 0;

    /* Which eligible added tokens occur anywhere in the text (each listed once). */
    int32_t *found = NULL;
    size_t n_found = 0, cap_found = 0;
    uint8_t *seen = NULL;
    const uint8_t *s = (const uint8_t *)text;
    for (size_t i = 0; i < len; i++) {
        for (int32_t node = t->trie_root[s[i]], j = 0; node >= 0;) {
            int32_t id = t->trie[node].id;
            if (id >= 0 && eligible(t, id, parse_special) && !(seen && (seen[id >> 3] >> (id & 7) & 1))) {
                if (!seen && !(seen = calloc((size_t)t->n_tokens / 8 + 1, 1)))
                    goto oom_found;
                seen[id >> 3] |= (uint8_t)(1u << (id & 7));
                if (tok_grow((void **)&found, &cap_found, n_found + 1, sizeof *found) < 0)
                    goto oom_found;
                found[n_found++] = id;
            }
            if (i + (size_t)++j >= len)
                break;
            node = trie_child(t, node, s[i + (size_t)j]);
        }
    }
    free(seen);
    seen = NULL;
    sort_by_length(t, found, n_found);

    tok_frags_t next = {0};
    for (size_t k = 0; k < n_found; k++) {
        int32_t id = found[k];
        const char *tt = t->text + t->off[id];
        size_t tl = t->len[id];
        next.n = 0;
        for (size_t f = 0; f < frags->n; f++) {
            tok_frag_t fr = frags->v[f];
            if (fr.id >= 0) {
                if (frags_push(&next, fr.id, fr.off, fr.len) < 0)
                    goto oom_next;
                continue;
            }
            size_t pos = fr.off, end = fr.off + fr.len;
            for (;;) {
                const char *hit = memmem(text + pos, end - pos, tt, tl);
                if (!hit)
                    break;
                size_t at = (size_t)(hit - text);
                if (at > pos && frags_push(&next, -1, pos, at - pos) < 0)
                    goto oom_next;
                if (frags_push(&next, id, at, tl) < 0)
                    goto oom_next;
                pos = at + tl;
            }
            if (pos < end && frags_push(&next, -1, pos, end - pos) < 0)
                goto oom_next;
        }
        tok_frags_t swap = *frags;
        *frags = next;
        next = swap;
    }
    tok_frags_fini(&next);
    free(found);
    return 0;
oom_next:
    tok_frags_fini(&next);
oom_found:
    free(seen);
    free(found);
oom:
    return guild_err_set(err, "%s: encode: out of memory", t->name);
}
