/* core/tokenizer/tok.c — building the tokenizer from a vocabulary description, and its accessors.
 *
 * Defaults and fix-ups follow llama.cpp's llama_vocab::impl::load, so that the same GGUF gives the same ids:
 * SPM vocabularies default to BOS 1, EOS 2, UNK 0, add BOS, prefix a space; end-of-turn and end-of-generation
 * tokens are also recognised by their text, and such tokens are made CONTROL if the file says otherwise.
 * Where llama.cpp only warns about broken metadata (an id out of range, add_bos without a BOS, ...) this
 * refuses the vocabulary with a message instead.
 */
#include "core/tokenizer/tok_internal.h"
#include "core/tokenizer/utf8.h"
#include "core/util/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tok_grow(void **buf, size_t *cap, size_t n, size_t elem)
{
    if (n <= *cap)
        return 0;
    size_t nc = *cap ? *cap : 16;
    while (nc < n)
        nc *= 2;
    void *p = realloc(*buf, nc * elem);
    if (!p)
        return -1;
    *buf = p;
    *cap = nc;
    return 0;
}

void tok_ids_init(tok_ids_t *ids)
{
    *ids = (tok_ids_t){0};
}

void tok_ids_fini(tok_ids_t *ids)
{
    free(ids->v);
    *ids = (tok_ids_t){0};
}

int tok_ids_push(tok_ids_t *ids, int32_t id)
{
    if (tok_grow((void **)&ids->v, &ids->cap, ids->n + 1, sizeof *ids->v) < 0)
        return -1;
    ids->v[ids->n++] = id;
    return 0;
}

void tok_spec_init(tok_spec_t *spec)
{
    *spec = (tok_spec_t){0};
    spec->bos = spec->eos = spec->eot = spec->eom = spec->unk = spec->pad = spec->sep = TOK_SPEC_UNSET;
    spec->add_bos = spec->add_eos = spec->add_space_prefix = TOK_SPEC_UNSET;
}

static tok_attr_t attr_of_type(int32_t type)
{
    switch (type) {
    case TOK_TYPE_NORMAL: return TOK_ATTR_NORMAL;
    case TOK_TYPE_UNKNOWN: return TOK_ATTR_UNKNOWN;
    case TOK_TYPE_CONTROL: return TOK_ATTR_CONTROL;
    case TOK_TYPE_USER_DEFINED: return TOK_ATTR_USER_DEFINED;
    case TOK_TYPE_UNUSED: return TOK_ATTR_UNUSED;
    case TOK_TYPE_BYTE: return TOK_ATTR_BYTE;
    default: return TOK_ATTR_UNDEFINED;
    }
}

/* Copies the token texts into one block, each NUL-terminated; empty ones become "[EMPTY_<id>]" as in
 * llama.cpp (an empty text could never be matched nor looked up). */
static int copy_texts(tok_t *t, const tok_spec_t *spec, guild_err_t *err)
{
    size_t n = spec->n_tokens, total = 0;
    for (size_t i = 0; i < n; i++)
        total += (spec->tokens[i].len ? spec->tokens[i].len : 32) + 1;
    if (total > UINT32_MAX)
        return guild_err_set(err, "%s: tokenizer.ggml.tokens: %zu bytes of text, more than 4 GiB", t->name, total);
    t->text = malloc(total);
    t->off = malloc(n * sizeof *t->off);
    t->len = malloc(n * sizeof *t->len);
    if (!t->text || !t->off || !t->len)
        return guild_err_set(err, "%s: out of memory for %zu tokens", t->name, n);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len = spec->tokens[i].len;
        t->off[i] = (uint32_t)o;
        if (len) {
            memcpy(t->text + o, spec->tokens[i].s, len);
        } else {
            guild_log(GUILD_LOG_WARN, "%s: token %zu has an empty text", t->name, i);
            len = (size_t)snprintf(t->text + o, 32, "[EMPTY_%zu]", i);
        }
        t->text[o + len] = '\0';
        t->len[i] = (uint32_t)len;
        if (len > t->max_piece)
            t->max_piece = len; /* a piece is never longer than its text */
        o += len + 1;
    }
    return 0;
}

/* Resolves one special id: the metadata value (checked) or the model's default. */
static int special_id(const tok_t *t, int64_t given, int32_t def, const char *key, int32_t *out, guild_err_t *err)
{
    if (given == TOK_SPEC_UNSET) {
        *out = def < t->n_tokens ? def : -1;
        return 0;
    }
    if (given < -1 || given >= t->n_tokens)
        return guild_err_set(err, "%s: tokenizer.ggml.%s = %lld is out of range (the vocabulary has %d tokens)",
                             t->name, key, (long long)given, t->n_tokens);
    *out = (int32_t)given;
    return 0;
}

static bool flag(int64_t given, bool def)
{
    return given == TOK_SPEC_UNSET ? def : given != 0;
}

static int32_t find_cstr(const tok_t *t, const char *s)
{
    return tok_strmap_find(&t->by_text, s, strlen(s));
}

static void make_control(tok_t *t, int32_t id)
{
    if (!(t->attr[id] & TOK_ATTR_CONTROL))
        t->attr[id] |= TOK_ATTR_CONTROL;
}

static void eog_remove(tok_t *t, int32_t id)
{
    for (size_t i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id)
            t->eog[i] = t->eog[--t->n_eog];
}

/* Special tokens llama.cpp finds by text when the metadata does not name them. */
static int find_end_tokens(tok_t *t, guild_err_t *err)
{
    static const char *const eot_texts[] = {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>",
        "_<EOT>", "[EOT]", "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
        "<end_of_utterance>",
    };
    static const char *const eog_texts[] = {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
        "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
        "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
        "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", "[e~[",
    };
    /* When several are present llama.cpp takes whichever its hash map yields first; we take the first of
     * the list, which is deterministic. */
    for (size_t i = 0; t->eot < 0 && i < sizeof eot_texts / sizeof eot_texts[0]; i++)
        if ((t->eot = find_cstr(t, eot_texts[i])) >= 0)
            make_control(t, t->eot);
    if (t->eom < 0 && (t->eom = find_cstr(t, "<|eom_id|>")) >= 0)
        make_control(t, t->eom);

    size_t cap = sizeof eog_texts / sizeof eog_texts[0] + 3;
    t->eog = malloc(cap * sizeof *t->eog);
    if (!t->eog)
        return guild_err_set(err, "%s: out of memory", t->name);
    for (size_t i = 0; i < sizeof eog_texts / sizeof eog_texts[0]; i++) {
        int32_t id = find_cstr(t, eog_texts[i]);
        if (id >= 0) {
            t->eog[t->n_eog++] = id;
            make_control(t, id);
        }
    }
    /* gpt-oss: these must show up in the output even though they are control tokens. */
    static const char *const rendered[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};
    for (size_t i = 0; i < sizeof rendered / sizeof rendered[0]; i++) {
        int32_t id = find_cstr(t, rendered[i]);
        if (id >= 0)
            t->attr[id] = TOK_ATTR_USER_DEFINED;
    }
    int32_t ends[3] = {t->eos, t->eot, t->eom};
    for (int k = 0; k < 3; k++)
        if (ends[k] >= 0 && !tok_is_eog(t, ends[k]))
            t->eog[t->n_eog++] = ends[k];
    /* o200k_harmony (gpt-oss) and solar-open: <|end|> closes a message, not the generation. */
    int32_t end = find_cstr(t, "<|end|>");
    bool ret = tok_is_eog(t, find_cstr(t, "<|return|>")), call = tok_is_eog(t, find_cstr(t, "<|call|>")),
         calls = tok_is_eog(t, find_cstr(t, "<|calls|>")), flush = tok_is_eog(t, find_cstr(t, "<|flush|>"));
    if (end >= 0 && tok_is_eog(t, end) && ((ret && call) || (calls && flush))) {
        eog_remove(t, end);
        t->attr[end] = TOK_ATTR_USER_DEFINED;
    }
    /* gemma4, paddleocr: </s> is an ordinary token next to <|tool_response>. */
    int32_t s_end = find_cstr(t, "</s>");
    if (s_end >= 0 && tok_is_eog(t, s_end) && tok_is_eog(t, find_cstr(t, "<|tool_response>"))) {
        eog_remove(t, s_end);
        t->attr[s_end] = TOK_ATTR_NORMAL;
    }
    return 0;
}

static void init_byte_tokens(tok_t *t)
{
    for (int b = 0; b < 256; b++) {
        char s[8];
        size_t n;
        if (t->model == TOK_MODEL_BPE) {
            n = tok_utf8_encode(tok_bpe_byte_char((uint8_t)b), s);
            t->byte_token[b] = tok_strmap_find(&t->by_text, s, n);
        } else {
            snprintf(s, sizeof s, "<0x%02X>", b);
            t->byte_token[b] = find_cstr(t, s);
            if (t->byte_token[b] < 0) {
                s[0] = (char)b;
                t->byte_token[b] = tok_strmap_find(&t->by_text, s, 1);
            }
        }
    }
}

int tok_new(tok_t **out, const tok_spec_t *spec, guild_err_t *err)
{
    *out = NULL;
    tok_t *t = calloc(1, sizeof *t);
    if (!t)
        return guild_err_set(err, "tokenizer: out of memory");
    t->name = strdup(spec->name ? spec->name : "vocabulary");
    if (!t->name) {
        guild_err_set(err, "tokenizer: out of memory");
        goto fail;
    }

    if (!spec->model) {
        guild_err_set(err, "%s: tokenizer.ggml.model: missing", t->name);
        goto fail;
    }
    if (!strcmp(spec->model, "gpt2")) {
        t->model = TOK_MODEL_BPE;
    } else if (!strcmp(spec->model, "llama")) {
        t->model = TOK_MODEL_SPM;
    } else {
        guild_err_set(err, "%s: tokenizer.ggml.model '%s' is not supported (gpt2, llama)", t->name, spec->model);
        goto fail;
    }
    if (!spec->tokens) {
        guild_err_set(err, "%s: tokenizer.ggml.tokens: missing", t->name);
        goto fail;
    }
    if (spec->n_tokens == 0 || spec->n_tokens > INT32_MAX) {
        guild_err_set(err, "%s: tokenizer.ggml.tokens: %zu tokens", t->name, spec->n_tokens);
        goto fail;
    }
    t->n_tokens = (int32_t)spec->n_tokens;
    if (copy_texts(t, spec, err) < 0)
        goto fail;
    t->score = malloc(spec->n_tokens * sizeof *t->score);
    t->attr = malloc(spec->n_tokens * sizeof *t->attr);
    if (!t->score || !t->attr || tok_strmap_init(&t->by_text, spec->n_tokens, t->text, t->off, t->len) < 0) {
        guild_err_set(err, "%s: out of memory for %d tokens", t->name, t->n_tokens);
        goto fail;
    }
    for (int32_t i0 = 0; i0 < t->n_tokens; i0 += LOAD_BATCH) {
        int32_t i1 = t->n_tokens - i0 < LOAD_BATCH ? t->n_tokens : i0 + LOAD_BATCH;
        uint32_t h[LOAD_BATCH];
        for (int32_t i = i0; i < i1; i++) {
            h[i - i0] = tok_strmap_hash(t->text + t->off[i], t->len[i]);
            tok_strmap_prefetch(&t->by_text, h[i - i0]);
        }
        for (int32_t i = i0; i < i1; i++) {
            t->score[i] = spec->scores ? spec->scores[i] : 0.0f;
            t->attr[i] = spec->types ? (uint16_t)attr_of_type(spec->types[i]) : TOK_ATTR_NORMAL;
            int32_t dup = tok_strmap_insert(&t->by_text, i, h[i - i0]);
            if (dup >= 0) {
                guild_err_set(err, "%s: tokenizer.ggml.tokens: tokens %d and %d are both '%.48s'", t->name, dup,
                              i, t->text + t->off[i]);
                goto fail;
            }
        }
    }

    tok_pretok_info_t pre = {0};
    if (t->model == TOK_MODEL_BPE) {
        if (!spec->pre || !*spec->pre)
            guild_log(GUILD_LOG_WARN, "%s: no tokenizer.ggml.pre; using the 'default' pre-tokenizer", t->name);
        if (tok_pretok_new(&t->pretok, spec->pre, &pre, err) < 0) {
            guild_err_prefix(err, "%s: tokenizer.ggml.pre: ", t->name);
            goto fail;
        }
        t->pre = strdup(spec->pre && *spec->pre ? spec->pre : "default");
        t->ignore_merges = pre.ignore_merges;
        if (!spec->merges) {
            guild_err_set(err, "%s: tokenizer.ggml.merges: missing (required by the gpt2 model)", t->name);
            goto fail;
        }
        if (tok_bpe_init_merges(t, spec->merges, spec->n_merges, err) < 0)
            goto fail;
    } else {
        t->pre = strdup("");
    }
    if (!t->pre) {
        guild_err_set(err, "tokenizer: out of memory");
        goto fail;
    }

    bool spm = t->model == TOK_MODEL_SPM;
    if (special_id(t, spec->bos, spm ? 1 : -1, "bos_token_id", &t->bos, err) < 0 ||
        special_id(t, spec->eos, spm ? 2 : -1, "eos_token_id", &t->eos, err) < 0 ||
        special_id(t, spec->unk, spm ? 0 : -1, "unknown_token_id", &t->unk, err) < 0 ||
        special_id(t, spec->eot, -1, "eot_token_id", &t->eot, err) < 0 ||
        special_id(t, spec->eom, -1, "eom_token_id", &t->eom, err) < 0 ||
        special_id(t, spec->pad, -1, "padding_token_id", &t->pad, err) < 0 ||
        special_id(t, spec->sep, -1, "seperator_token_id", &t->sep, err) < 0)
        goto fail;
    t->add_bos = flag(spec->add_bos, spm || pre.add_bos);
    t->add_eos = flag(spec->add_eos, false);
    t->add_space_prefix = spm && flag(spec->add_space_prefix, true);
    if (t->add_bos && t->bos < 0) {
        guild_err_set(err, "%s: tokenizer.ggml.add_bos_token is true but there is no BOS token", t->name);
        goto fail;
    }
    if (t->add_eos && t->eos < 0) {
        guild_err_set(err, "%s: tokenizer.ggml.add_eos_token is true but there is no EOS token", t->name);
        goto fail;
    }

    init_byte_tokens(t);
    if (find_end_tokens(t, err) < 0 || tok_special_init(t, err) < 0)
        goto fail;
    *out = t;
    return 0;
fail:
    tok_destroy(&t);
    return -1;
}

void tok_destroy(tok_t **pt)
{
    tok_t *t = *pt;
    if (!t)
        return;
    tok_pretok_destroy(&t->pretok);
    tok_strmap_fini(&t->by_text);
    free(t->pairs);
    free(t->trie);
    free(t->eog);
    free(t->score);
    free(t->attr);
    free(t->off);
    free(t->len);
    free(t->text);
    free(t->pre);
    free(t->name);
    free(t);
    *pt = NULL;
}

/* --- accessors ----------------------------------------------------------------------------------------- */

tok_model_t tok_model(const tok_t *t) { return t->model; }
const char *tok_pre(const tok_t *t) { return t->pre; }
int32_t tok_n_tokens(const tok_t *t) { return t->n_tokens; }
int32_t tok_bos(const tok_t *t) { return t->bos; }
int32_t tok_eos(const tok_t *t) { return t->eos; }
int32_t tok_eot(const tok_t *t) { return t->eot; }
int32_t tok_eom(const tok_t *t) { return t->eom; }
int32_t tok_unk(const tok_t *t) { return t->unk; }
int32_t tok_pad(const tok_t *t) { return t->pad; }
bool tok_add_bos(const tok_t *t) { return t->add_bos; }
bool tok_add_eos(const tok_t *t) { return t->add_eos; }
size_t tok_max_piece_len(const tok_t *t) { return t->max_piece; }

bool tok_is_eog(const tok_t *t, int32_t id)
{
    if (id < 0)
        return false;
    for (size_t i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id)
            return true;
    return false;
}

const char *tok_text(const tok_t *t, int32_t id, size_t *len)
{
    GUILD_ASSERT(id >= 0 && id < t->n_tokens);
    if (len)
        *len = t->len[id];
    return t->text + t->off[id];
}

tok_attr_t tok_attr(const tok_t *t, int32_t id)
{
    GUILD_ASSERT(id >= 0 && id < t->n_tokens);
    return (tok_attr_t)t->attr[id];
}

float tok_score(const tok_t *t, int32_t id)
{
    GUILD_ASSERT(id >= 0 && id < t->n_tokens);
    return t->score[id];
}

int32_t tok_find(const tok_t *t, const char *text, size_t len)
{
    return tok_strmap_find(&t->by_text, text, len);
}
