/* Conformance of core/tokenizer with llama.cpp on its test vocabularies.
 *
 * GUILD_FIXTURES/tokenizer/ holds llama.cpp's ggml-vocab-*.gguf files with, for each, `.inp` (texts
 * separated by "\n__ggml_vocab_test__\n") and `.out` (the ids llama.cpp's test-tokenizer-0 expects, one line
 * per text). test-tokenizer-0 tokenizes each text exactly as split (the newline before a separator belongs
 * to the separator), with add_special = false and parse_special = false; so do we. Every text must match,
 * and decode(encode(text)) must give the text back. Also prints load and encode timings.
 * Exits 77 (skip) when the fixtures are absent. Vocabularies llama.cpp does not ship but a fixture directory may
 * hold (gpt-oss's o200k_harmony, converted from the model) are checked the same way when present, and skipped by
 * name when not; gpt-oss's also has its harmony markers checked (one id each, given back as text, the end tokens).
 */
#include "config.h"

#include "core/gguf/gguf.h"
#include "core/tokenizer/tok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const k_vocabs[] = {"gpt-2", "llama-spm", "falcon", "starcoder", "deepseek-llm", "deepseek-coder"};
static const char *const k_optional[] = {"gpt-oss"};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts); /* CPU time: the CI machine is shared */
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (size_t r; buf && (r = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += r;
        if (n == cap)
            buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    if (buf)
        *len = n;
    return buf;
}

/* Splits like test-tokenizer-0: pieces between separators; a trailing separator ends the last piece. */
static size_t split_texts(const char *s, size_t len, const char **texts, size_t *lens, size_t max)
{
    static const char sep[] = "\n__ggml_vocab_test__\n";
    size_t n = 0, pos = 0, sl = sizeof sep - 1;
    while (pos < len && n < max) {
        const char *next = memmem(s + pos, len - pos, sep, sl);
        texts[n] = s + pos;
        lens[n] = next ? (size_t)(next - (s + pos)) : len - pos;
        n++;
        if (!next)
            break;
        pos = (size_t)(next - s) + sl;
    }
    return n;
}

static void print_ids(const char *what, const int32_t *ids, size_t n)
{
    fprintf(stderr, "    %s:", what);
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "\n");
}

/* Returns the number of failures. */
static int run_vocab(const char *dir, const char *vocab)
{
    char path[8192], inp_path[8300], out_path[8300];
    snprintf(path, sizeof path, "%s/ggml-vocab-%s.gguf", dir, vocab);
    snprintf(inp_path, sizeof inp_path, "%s.inp", path);
    snprintf(out_path, sizeof out_path, "%s.out", path);

    guild_err_t err = {{0}};
    gguf_t *g = NULL;
    tok_t *t = NULL;
    double t0 = now_ms();
    if (gguf_new(&g, path, &err) < 0 || tok_new_from_gguf(&t, g, &err) < 0) {
        fprintf(stderr, "%s: %s\n", vocab, err.msg);
        gguf_destroy(&g);
        return 1;
    }
    double load_ms = now_ms() - t0;
    gguf_destroy(&g); /* the tokenizer keeps nothing of it */

    size_t inp_len = 0, out_len = 0;
    char *inp = slurp(inp_path, &inp_len), *out = slurp(out_path, &out_len);
    if (!inp || !out) {
        fprintf(stderr, "%s: cannot read %s or %s\n", vocab, inp_path, out_path);
        free(inp);
        free(out);
        tok_destroy(&t);
        return 1;
    }
    enum { MAX_TEXTS = 1024 };
    static const char *texts[MAX_TEXTS];
    static size_t lens[MAX_TEXTS];
    size_t n_texts = split_texts(inp, inp_len, texts, lens, MAX_TEXTS);

    int failures = 0;
    size_t matched = 0, round_trips = 0, n_lines = 0;
    tok_ids_t ids = {0};
    int32_t *want = malloc(out_len * sizeof *want + 1);
    char *line = out;
    for (size_t i = 0; i < n_texts && line < out + out_len; i++, n_lines++) {
        char *eol = memchr(line, '\n', (size_t)(out + out_len - line));
        if (eol)
            *eol = '\0';
        size_t n_want = 0;
        for (char *p = line, *end; *p; p = end) {
            long v = strtol(p, &end, 10);
            if (end == p)
                break;
            want[n_want++] = (int32_t)v;
        }
        line = eol ? eol + 1 : out + out_len;

        ids.n = 0;
        if (tok_encode(t, texts[i], lens[i], 0, &ids, &err) < 0) {
            fprintf(stderr, "%s: text %zu: %s\n", vocab, i, err.msg);
            failures++;
            continue;
        }
        if (ids.n == n_want && !memcmp(ids.v, want, n_want * sizeof *want)) {
            matched++;
        } else {
            failures++;
            fprintf(stderr, "%s: text %zu '%.*s' differs\n", vocab, i, (int)lens[i], texts[i]);
            print_ids("expected", want, n_want);
            print_ids("got     ", ids.v, ids.n);
        }
        char *back = NULL;
        size_t back_len = 0;
        if (tok_decode(t, ids.v, ids.n, 0, &back, &back_len, &err) == 0 && back_len == lens[i] &&
            !memcmp(back, texts[i], back_len)) {
            round_trips++;
        } else {
            failures++;
            fprintf(stderr, "%s: text %zu '%.*s' decodes to '%s'\n", vocab, i, (int)lens[i], texts[i],
                    back ? back : "(error)");
        }
        free(back);
    }
    if (n_lines != n_texts) {
        fprintf(stderr, "%s: %zu texts but %zu lines of expected ids\n", vocab, n_texts, n_lines);
        failures++;
    }

    /* Timing: all the texts joined, repeated up to ~10 KB, encoded several times; the best run counts. */
    char *big = malloc(16384);
    size_t big_len = 0;
    while (big_len < 10000)
        for (size_t i = 0; i < n_texts && big_len + lens[i] + 1 < 16384; i++) {
            memcpy(big + big_len, texts[i], lens[i]);
            big_len += lens[i];
            big[big_len++] = '\n';
        }
    double best = 1e9;
    for (int r = 0; r < 5; r++) {
        ids.n = 0;
        double s0 = now_ms();
        tok_encode(t, big, big_len, TOK_ADD_SPECIAL, &ids, &err);
        double dt = now_ms() - s0;
        best = dt < best ? dt : best;
    }
    printf("%s: %zu/%zu texts match, %zu/%zu round-trip; %d tokens loaded in %.1f ms; %zu bytes -> %zu ids in "
           "%.2f ms (CPU time)\n",
           vocab, matched, n_texts, round_trips, n_texts, tok_n_tokens(t), load_ms, big_len, ids.n, best);
    free(big);
    free(want);
    tok_ids_fini(&ids);
    free(inp);
    free(out);
    tok_destroy(&t);
    return failures;
}

/* gpt-oss: the harmony markers of a prompt are one id each; the reply's markers come back as text without
 * TOK_DECODE_SPECIAL (the server splits the channels on them); <|return|> and <|call|> end the generation,
 * <|end|> does not. Returns the number of failures. */
static int harmony_markers(const char *dir)
{
    static const char *const markers[] = {"<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|constrain|>",
                                          "<|return|>", "<|call|>"};
    char path[8192];
    snprintf(path, sizeof path, "%s/ggml-vocab-gpt-oss.gguf", dir);
    guild_err_t err = {{0}};
    gguf_t *g = NULL;
    tok_t *t = NULL;
    if (gguf_new(&g, path, &err) < 0 || tok_new_from_gguf(&t, g, &err) < 0) {
        fprintf(stderr, "gpt-oss: %s\n", err.msg);
        gguf_destroy(&g);
        return 1;
    }
    gguf_destroy(&g);
    int failures = 0;
    int32_t id[7];
    for (int k = 0; k < 7; k++) {
        id[k] = tok_find(t, markers[k], strlen(markers[k]));
        if (id[k] < 0) {
            fprintf(stderr, "gpt-oss: no token %s\n", markers[k]);
            failures++;
        }
    }
    if (failures) {
        tok_destroy(&t);
        return failures;
    }
    if (!tok_is_eog(t, id[5]) || !tok_is_eog(t, id[6]) || tok_is_eog(t, id[3])) {
        fprintf(stderr, "gpt-oss: <|return|> and <|call|> must end the generation, <|end|> not\n");
        failures++;
    }
    static const char reply[] = "<|start|>assistant<|channel|>analysis<|message|>Think.<|end|><|start|>assistant"
                                "<|channel|>commentary<|constrain|>json<|message|>{}<|end|>";
    tok_ids_t ids = {0};
    if (tok_encode(t, reply, sizeof reply - 1, TOK_PARSE_SPECIAL, &ids, &err) < 0) {
        fprintf(stderr, "gpt-oss: %s\n", err.msg);
        failures++;
    } else {
        size_t seen[5] = {0};
        for (size_t i = 0; i < ids.n; i++)
            for (int k = 0; k < 5; k++)
                seen[k] += ids.v[i] == id[k];
        if (seen[0] != 2 || seen[1] != 2 || seen[2] != 2 || seen[3] != 2 || seen[4] != 1) {
            fprintf(stderr, "gpt-oss: the markers are not one id each in '%s'\n", reply);
            print_ids("got", ids.v, ids.n);
            failures++;
        }
        char *back = NULL;
        size_t back_len = 0;
        if (tok_decode(t, ids.v, ids.n, 0, &back, &back_len, &err) < 0 || back_len != sizeof reply - 1 ||
            memcmp(back, reply, back_len)) {
            fprintf(stderr, "gpt-oss: the reply decodes to '%s'\n", back ? back : err.msg);
            failures++;
        }
        free(back);
    }
    printf("gpt-oss: harmony markers %s\n", failures ? "FAIL" : "ok");
    tok_ids_fini(&ids);
    tok_destroy(&t);
    return failures;
}

int main(void)
{
    const char *env = getenv("GUILD_FIXTURES");
    const char *base = env && *env ? env : GUILD_FIXTURES;
    char dir[4096], probe[4200];
    snprintf(dir, sizeof dir, "%s/tokenizer", base);
    snprintf(probe, sizeof probe, "%s/ggml-vocab-gpt-2.gguf", dir);
    FILE *f = fopen(probe, "rb");
    if (!f) {
        printf("skipped: fixtures absent (%s)\n", dir);
        return 77;
    }
    fclose(f);
    int failures = 0;
    for (size_t i = 0; i < sizeof k_vocabs / sizeof k_vocabs[0]; i++)
        failures += run_vocab(dir, k_vocabs[i]);
    for (size_t i = 0; i < sizeof k_optional / sizeof k_optional[0]; i++) {
        snprintf(probe, sizeof probe, "%s/ggml-vocab-%s.gguf", dir, k_optional[i]);
        if (!(f = fopen(probe, "rb"))) {
            printf("%s: skipped (no %s)\n", k_optional[i], probe);
            continue;
        }
        fclose(f);
        snprintf(probe, sizeof probe, "%s/ggml-vocab-%s.gguf.inp", dir, k_optional[i]);
        if ((f = fopen(probe, "rb"))) { /* the texts and ids, when someone made them with test-tokenizer-0 */
            fclose(f);
            failures += run_vocab(dir, k_optional[i]);
        }
        if (!strcmp(k_optional[i], "gpt-oss"))
            failures += harmony_markers(dir);
    }
    return failures ? 1 : 0;
}
