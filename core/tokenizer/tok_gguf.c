/* core/tokenizer/tok_gguf.c — the tokenizer from a GGUF file's `tokenizer.ggml.*` keys. */
#include "core/tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>

/* An optional string key, copied NUL-terminated into *out (NULL when absent). */
static int opt_str(const gguf_t *g, const char *key, char **out, guild_err_t *err)
{
    *out = NULL;
    if (gguf_find_key(g, key) < 0)
        return 0;
    const char *s;
    size_t len;
    if (gguf_get_str(g, key, &s, &len, err) < 0)
        return -1;
    *out = strndup(s, len);
    return *out ? 0 : guild_err_set(err, "%s: out of memory", gguf_path(g));
}

static int opt_int(const gguf_t *g, const char *key, int64_t *out, guild_err_t *err)
{
    if (gguf_find_key(g, key) < 0)
        return 0;
    return gguf_get_int(g, key, out, err);
}

static int opt_bool(const gguf_t *g, const char *key, int64_t *out, guild_err_t *err)
{
    if (gguf_find_key(g, key) < 0)
        return 0;
    bool b;
    if (gguf_get_bool(g, key, &b, err) < 0)
        return -1;
    *out = b;
    return 0;
}

/* An optional array of strings as tok_str_t pointing into the mapping (*out NULL when absent). */
static int opt_strings(const gguf_t *g, const char *key, tok_str_t **out, size_t *n, guild_err_t *err)
{
    *out = NULL;
    *n = 0;
    const gguf_value_t *v = gguf_find_value(g, key);
    if (!v)
        return 0;
    if (v->type != GGUF_VALUE_ARRAY || v->elem_type != GGUF_VALUE_STRING)
        return guild_err_set(err, "%s: key '%s': expected an array of strings", gguf_path(g), key);
    tok_str_t *s = malloc((v->n ? v->n : 1) * sizeof *s);
    if (!s)
        return guild_err_set(err, "%s: key '%s': out of memory for %llu strings", gguf_path(g), key,
                             (unsigned long long)v->n);
    for (uint64_t i = 0; i < v->n; i++) {
        gguf_value_t e = gguf_value_at(v, i);
        gguf_value_str(&e, &s[i].s, &s[i].len);
    }
    *out = s;
    *n = (size_t)v->n;
    return 0;
}

/* A numeric per-token array (scores, types): at least n elements, the first n used. */
static int per_token_array(const gguf_t *g, const char *key, size_t n, bool want_float, void **out,
                           guild_err_t *err)
{
    *out = NULL;
    if (gguf_find_key(g, key) < 0)
        return 0;
    gguf_value_type_t et;
    uint64_t count;
    if (gguf_get_arr(g, key, &et, &count, err) < 0)
        return -1;
    if (count < n)
        return guild_err_set(err, "%s: key '%s': %llu elements for %zu tokens", gguf_path(g), key,
                             (unsigned long long)count, n);
    if (want_float) {
        float *f = malloc((size_t)count * sizeof *f + 1);
        if (!f)
            return guild_err_set(err, "%s: key '%s': out of memory", gguf_path(g), key);
        *out = f;
        return gguf_arr_copy_f32(g, key, f, count, err);
    }
    int64_t *w = malloc((size_t)count * sizeof *w + 1);
    int32_t *t = malloc(n * sizeof *t + 1);
    if (!w || !t) {
        free(w);
        free(t);
        return guild_err_set(err, "%s: key '%s': out of memory", gguf_path(g), key);
    }
    *out = t;
    int rc = gguf_arr_copy_i64(g, key, w, count, err);
    for (size_t i = 0; rc == 0 && i < n; i++)
        t[i] = w[i] >= INT32_MIN && w[i] <= INT32_MAX ? (int32_t)w[i] : TOK_TYPE_UNDEFINED;
    free(w);
    return rc;
}

int tok_new_from_gguf(tok_t **out, const gguf_t *g, guild_err_t *err)
{
    *out = NULL;
    tok_spec_t spec;
    tok_spec_init(&spec);
    spec.name = gguf_path(g);
    char *model = NULL, *pre = NULL;
    tok_str_t *tokens = NULL, *merges = NULL;
    float *scores = NULL;
    int32_t *types = NULL;
    int rc = -1;

    if (opt_str(g, "tokenizer.ggml.model", &model, err) < 0 || opt_str(g, "tokenizer.ggml.pre", &pre, err) < 0 ||
        opt_strings(g, "tokenizer.ggml.tokens", &tokens, &spec.n_tokens, err) < 0 ||
        opt_strings(g, "tokenizer.ggml.merges", &merges, &spec.n_merges, err) < 0)
        goto done;
    if (tokens &&
        (per_token_array(g, "tokenizer.ggml.scores", spec.n_tokens, true, (void **)&scores, err) < 0 ||
         per_token_array(g, "tokenizer.ggml.token_type", spec.n_tokens, false, (void **)&types, err) < 0))
        goto done;
    if (opt_int(g, "tokenizer.ggml.bos_token_id", &spec.bos, err) < 0 ||
        opt_int(g, "tokenizer.ggml.eos_token_id", &spec.eos, err) < 0 ||
        opt_int(g, "tokenizer.ggml.eot_token_id", &spec.eot, err) < 0 ||
        opt_int(g, "tokenizer.ggml.eom_token_id", &spec.eom, err) < 0 ||
        opt_int(g, "tokenizer.ggml.unknown_token_id", &spec.unk, err) < 0 ||
        opt_int(g, "tokenizer.ggml.padding_token_id", &spec.pad, err) < 0 ||
        opt_int(g, "tokenizer.ggml.seperator_token_id", &spec.sep, err) < 0 ||
        opt_bool(g, "tokenizer.ggml.add_bos_token", &spec.add_bos, err) < 0 ||
        opt_bool(g, "tokenizer.ggml.add_eos_token", &spec.add_eos, err) < 0 ||
        opt_bool(g, "tokenizer.ggml.add_space_prefix", &spec.add_space_prefix, err) < 0)
        goto done;
    spec.model = model;
    spec.pre = pre;
    spec.tokens = tokens;
    spec.scores = scores;
    spec.types = types;
    spec.merges = merges;
    rc = tok_new(out, &spec, err);
done:
    free(model);
    free(pre);
    free(tokens);
    free(merges);
    free(scores);
    free(types);
    return rc;
}
