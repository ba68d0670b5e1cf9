#include "tools/mkmodel/vocab.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct mkmodel_vocab {
    int64_t n_tokens;
    char **tokens;   /* [n_tokens] mapped UTF-8 text */
    int32_t *types;  /* [n_tokens] */
    int64_t n_merges;
    char **merges;   /* [n_merges] "left right" */
    int64_t endoftext, im_start, im_end;
};

/* --- learning ---------------------------------------------------------------------------------------------- */

/* A token while learning: its raw bytes. */
typedef struct raw_token {
    char *bytes;
    size_t len;
} raw_token_t;

typedef struct word {
    int32_t *sym; /* [n] token ids */
    int n;
    int64_t count; /* occurrences in the corpus */
} word_t;

typedef struct learner {
    raw_token_t *tok; /* [n_tok] */
    int64_t n_tok, cap_tok;
    int32_t (*merge)[2]; /* [n_merge] (left, right) ids */
    int64_t n_merge, cap_merge;
    word_t *words;
    int64_t n_words;
} learner_t;

static bool is_letter(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80; }
static bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
static bool is_space(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
static bool is_nl(unsigned char c) { return c == '\n' || c == '\r'; }
static bool is_punct(unsigned char c) { return c && !is_space(c) && !is_letter(c) && !is_digit(c); }

/* Length of the chunk starting at s[0] under the "qwen2" pre-tokenizer pattern, restricted to ASCII:
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d) | [^\r\n\p{L}\p{N}]?\p{L}+ | \p{N} | ?[^\s\p{L}\p{N}]+[\r\n]* | \s*[\r\n]+ |
 *   \s+(?!\S) | \s+
 * (alternatives tried in order, as a regex engine does). */
static size_t chunk_len(const unsigned char *s)
{
    static const char *contractions[] = {"s", "t", "re", "ve", "m", "ll", "d"};
    if (s[0] == '\'') {
        for (size_t i = 0; i < sizeof contractions / sizeof *contractions; i++) {
            size_t n = strlen(contractions[i]);
            size_t k = 0;
            while (k < n && s[1 + k] && (s[1 + k] | 0x20) == (unsigned char)contractions[i][k])
                k++;
            if (k == n)
                return 1 + n;
        }
    }
    size_t i = 0;
    if (is_letter(s[0]) || (!is_nl(s[0]) && !is_letter(s[0]) && !is_digit(s[0]) && is_letter(s[1]))) {
        i = is_letter(s[0]) ? 0 : 1;
        while (is_letter(s[i]))
            i++;
        return i;
    }
    if (is_digit(s[0]))
        return 1;
    if (is_punct(s[0]) || (s[0] == ' ' && is_punct(s[1]))) {
        i = s[0] == ' ' ? 1 : 0;
        while (is_punct(s[i]))
            i++;
        while (is_nl(s[i]))
            i++;
        return i;
    }
    /* Whitespace run. */
    size_t run = 0, last_nl = 0;
    while (is_space(s[run])) {
        if (is_nl(s[run]))
            last_nl = run + 1;
        run++;
    }
    if (last_nl)
        return last_nl;
    if (s[run] == '\0' || run == 1)
        return run;
    return run - 1; /* leave the last space to the next word */
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void learner_free(learner_t *L)
{
    for (int64_t i = 0; i < L->n_tok; i++)
        free(L->tok[i].bytes);
    free(L->tok);
    free(L->merge);
    for (int64_t i = 0; i < L->n_words; i++)
        free(L->words[i].sym);
    free(L->words);
    memset(L, 0, sizeof *L);
}

static int add_token(learner_t *L, const char *bytes, size_t len)
{
    if (L->n_tok == L->cap_tok) {
        int64_t cap = L->cap_tok ? 2 * L->cap_tok : 512;
        raw_token_t *t = realloc(L->tok, (size_t)cap * sizeof *t);
        if (!t)
            return -1;
        L->tok = t;
        L->cap_tok = cap;
    }
    char *b = malloc(len + 1);
    if (!b)
        return -1;
    memcpy(b, bytes, len);
    b[len] = '\0';
    L->tok[L->n_tok].bytes = b;
    L->tok[L->n_tok].len = len;
    return (int)L->n_tok++;
}

/* Splits the corpus into chunks and collects the distinct ones with their counts. */
static int learner_init(learner_t *L)
{
    memset(L, 0, sizeof *L);
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        if (add_token(L, &c, 1) < 0)
            return -1;
    }
    const unsigned char *s = (const unsigned char *)mkmodel_corpus;
    size_t total = strlen(mkmodel_corpus), n_chunks = 0;
    char **chunks = malloc((total + 1) * sizeof *chunks);
    if (!chunks)
        return -1;
    for (size_t pos = 0; pos < total;) {
        size_t n = chunk_len(s + pos);
        chunks[n_chunks] = strndup((const char *)s + pos, n);
        if (!chunks[n_chunks])
            goto fail;
        n_chunks++;
        pos += n;
    }
    qsort(chunks, n_chunks, sizeof *chunks, cmp_str);
    L->words = calloc(n_chunks, sizeof *L->words);
    if (!L->words)
        goto fail;
    for (size_t i = 0; i < n_chunks;) {
        size_t j = i;
        while (j < n_chunks && !strcmp(chunks[i], chunks[j]))
            j++;
        word_t *w = &L->words[L->n_words++];
        w->n = (int)strlen(chunks[i]);
        w->count = (int64_t)(j - i);
        w->sym = malloc((size_t)w->n * sizeof *w->sym);
        if (!w->sym)
            goto fail;
        for (int k = 0; k < w->n; k++)
            w->sym[k] = (unsigned char)chunks[i][k];
        i = j;
    }
    for (size_t i = 0; i < n_chunks; i++)
        free(chunks[i]);
    free(chunks);
    return 0;
fail:
    for (size_t i = 0; i < n_chunks; i++)
        free(chunks[i]);
    free(chunks);
    return -1;
}

/* Pair counts in an open-addressing table keyed by (left, right). */
typedef struct pair_slot {
    uint64_t key; /* (left << 32 | right) + 1; 0 = empty */
    int64_t count;
} pair_slot_t;

/* Learns up to max_merges merges (most frequent pair first; ties to the smaller left id, then right id), until
 * no pair occurs twice. Deterministic. */
static int learner_run(learner_t *L, int64_t max_merges, int64_t max_tokens)
{
    size_t cap = 1;
    int64_t n_sym = 0;
    for (int64_t i = 0; i < L->n_words; i++)
        n_sym += L->words[i].n;
    while (cap < (size_t)n_sym * 2)
        cap <<= 1;
    pair_slot_t *table = malloc(cap * sizeof *table);
    if (!table)
        return -1;
    while (L->n_merge < max_merges) {
        memset(table, 0, cap * sizeof *table);
        uint64_t best_key = 0;
        int64_t best = 0;
        for (int64_t i = 0; i < L->n_words; i++) {
            const word_t *w = &L->words[i];
            for (int k = 0; k + 1 < w->n; k++) {
                uint64_t key = ((uint64_t)(uint32_t)w->sym[k] << 32 | (uint32_t)w->sym[k + 1]) + 1;
                size_t h = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & (cap - 1);
                while (table[h].key && table[h].key != key)
                    h = (h + 1) & (cap - 1);
                table[h].key = key;
                table[h].count += w->count;
                if (table[h].count > best || (table[h].count == best && key < best_key)) {
                    best = table[h].count;
                    best_key = key;
                }
            }
        }
        if (best < 2)
            break;
        int32_t left = (int32_t)((best_key - 1) >> 32), right = (int32_t)((best_key - 1) & 0xffffffffu);
        /* The new token's text; an equal text made by other merges before keeps its id (no duplicate texts). */
        size_t len = L->tok[left].len + L->tok[right].len;
        char *text = malloc(len);
        if (!text)
            goto fail;
        memcpy(text, L->tok[left].bytes, L->tok[left].len);
        memcpy(text + L->tok[left].len, L->tok[right].bytes, L->tok[right].len);
        int32_t id = -1;
        for (int64_t t = 256; t < L->n_tok; t++)
            if (L->tok[t].len == len && !memcmp(L->tok[t].bytes, text, len)) {
                id = (int32_t)t;
                break;
            }
        if (id < 0) {
            if (L->n_tok >= max_tokens) {
                free(text);
                break;
            }
            id = add_token(L, text, len);
        }
        free(text);
        if (id < 0)
            goto fail;
        if (L->n_merge == L->cap_merge) {
            int64_t c = L->cap_merge ? 2 * L->cap_merge : 512;
            int32_t(*m)[2] = realloc(L->merge, (size_t)c * sizeof *m);
            if (!m)
                goto fail;
            L->merge = m;
            L->cap_merge = c;
        }
        L->merge[L->n_merge][0] = left;
        L->merge[L->n_merge][1] = right;
        L->n_merge++;
        for (int64_t i = 0; i < L->n_words; i++) {
            word_t *w = &L->words[i];
            int o = 0;
            for (int k = 0; k < w->n; k++) {
                if (k + 1 < w->n && w->sym[k] == left && w->sym[k + 1] == right) {
                    w->sym[o++] = id;
                    k++;
                } else {
                    w->sym[o++] = w->sym[k];
                }
            }
            w->n = o;
        }
    }
    free(table);
    return 0;
fail:
    free(table);
    return -1;
}

/* --- spelling ---------------------------------------------------------------------------------------------- */

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the others for U+0100 onwards. */
static uint32_t byte_codepoint(unsigned char b)
{
    if ((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae))
        return b;
    uint32_t n = 0;
    for (unsigned c = 0; c < b; c++)
        if (!((c >= 0x21 && c <= 0x7e) || (c >= 0xa1 && c <= 0xac) || (c >= 0xae)))
            n++;
    return 256 + n;
}

/* Mapped UTF-8 spelling of raw bytes; malloc'd. */
static char *spell(const char *bytes, size_t len)
{
    char *out = malloc(len * 2 + 1), *o = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < len; i++) {
        uint32_t cp = byte_codepoint((unsigned char)bytes[i]);
        if (cp < 0x80) {
            *o++ = (char)cp;
        } else {
            *o++ = (char)(0xc0 | (cp >> 6));
            *o++ = (char)(0x80 | (cp & 0x3f));
        }
    }
    *o = '\0';
    return out;
}

/* --- public ------------------------------------------------------------------------------------------------ */

int64_t mkmodel_vocab_max_merges(void)
{
    learner_t L;
    int64_t n = -1;
    if (learner_init(&L) == 0 && learner_run(&L, INT64_MAX, INT64_MAX) == 0)
        n = L.n_merge;
    learner_free(&L);
    return n;
}

int mkmodel_vocab_new(mkmodel_vocab_t **out, int64_t n_vocab, guild_err_t *err)
{
    *out = NULL;
    if (n_vocab < MKMODEL_VOCAB_MIN)
        return guild_err_set(err, "vocabulary of %lld tokens: the built-in vocabulary needs at least %d (256 bytes "
                                  "and 3 control tokens)",
                             (long long)n_vocab, MKMODEL_VOCAB_MIN);
    if (n_vocab > INT32_MAX)
        return guild_err_set(err, "vocabulary of %lld tokens: too large", (long long)n_vocab);
    learner_t L;
    mkmodel_vocab_t *v = calloc(1, sizeof *v);
    if (!v || learner_init(&L) < 0) {
        free(v);
        return guild_err_set(err, "built-in vocabulary: out of memory");
    }
    if (learner_run(&L, INT64_MAX, n_vocab - 3) < 0)
        goto oom;
    v->n_tokens = n_vocab;
    v->tokens = calloc((size_t)n_vocab, sizeof *v->tokens);
    v->types = calloc((size_t)n_vocab, sizeof *v->types);
    v->merges = calloc((size_t)L.n_merge + 1, sizeof *v->merges);
    if (!v->tokens || !v->types || !v->merges)
        goto oom;
    int64_t id = 0;
    for (; id < L.n_tok; id++) {
        if (!(v->tokens[id] = spell(L.tok[id].bytes, L.tok[id].len)))
            goto oom;
        v->types[id] = MKMODEL_TOKEN_NORMAL;
    }
    static const char *controls[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    for (int c = 0; c < 3; c++, id++) {
        if (!(v->tokens[id] = strdup(controls[c])))
            goto oom;
        v->types[id] = MKMODEL_TOKEN_CONTROL;
    }
    v->endoftext = id - 3;
    v->im_start = id - 2;
    v->im_end = id - 1;
    for (; id < n_vocab; id++) {
        char pad[32];
        snprintf(pad, sizeof pad, "[PAD%lld]", (long long)id);
        if (!(v->tokens[id] = strdup(pad)))
            goto oom;
        v->types[id] = MKMODEL_TOKEN_UNUSED;
    }
    for (int64_t m = 0; m < L.n_merge; m++) {
        const char *a = v->tokens[L.merge[m][0]], *b = v->tokens[L.merge[m][1]];
        size_t la = strlen(a), lb = strlen(b);
        if (!(v->merges[m] = malloc(la + lb + 2)))
            goto oom;
        memcpy(v->merges[m], a, la);
        v->merges[m][la] = ' ';
        memcpy(v->merges[m] + la + 1, b, lb + 1);
        v->n_merges = m + 1;
    }
    learner_free(&L);
    *out = v;
    return 0;
oom:
    learner_free(&L);
    mkmodel_vocab_destroy(&v);
    return guild_err_set(err, "built-in vocabulary: out of memory");
}

void mkmodel_vocab_destroy(mkmodel_vocab_t **pv)
{
    mkmodel_vocab_t *v = *pv;
    if (!v)
        return;
    if (v->tokens)
        for (int64_t i = 0; i < v->n_tokens; i++)
            free(v->tokens[i]);
    if (v->merges)
        for (int64_t i = 0; i < v->n_merges; i++)
            free(v->merges[i]);
    free(v->tokens);
    free(v->types);
    free(v->merges);
    free(v);
    *pv = NULL;
}

int64_t mkmodel_vocab_n_tokens(const mkmodel_vocab_t *v) { return v->n_tokens; }
const char *mkmodel_vocab_token(const mkmodel_vocab_t *v, int64_t id) { return v->tokens[id]; }
int32_t mkmodel_vocab_token_type(const mkmodel_vocab_t *v, int64_t id) { return v->types[id]; }
int64_t mkmodel_vocab_n_merges(const mkmodel_vocab_t *v) { return v->n_merges; }
const char *mkmodel_vocab_merge(const mkmodel_vocab_t *v, int64_t i) { return v->merges[i]; }
int64_t mkmodel_vocab_endoftext(const mkmodel_vocab_t *v) { return v->endoftext; }
int64_t mkmodel_vocab_im_start(const mkmodel_vocab_t *v) { return v->im_start; }
int64_t mkmodel_vocab_im_end(const mkmodel_vocab_t *v) { return v->im_end; }
