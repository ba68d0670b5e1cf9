/* Tests for core/tokenizer on small vocabularies built in memory (the conformance with llama.cpp on real
 * vocabularies is tests/tokenizer_conformance.c). */
#include "config.h"

#include "core/gguf/gguf.h"
#include "core/tokenizer/pretok.h"
#include "core/tokenizer/tok.h"
#include "tests/check_run.h"

#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* --- building vocabularies ----------------------------------------------------------------------------- */

#define MAX_TOKENS 1024

typedef struct vocab {
    tok_spec_t spec;
    tok_str_t tok[MAX_TOKENS];
    float score[MAX_TOKENS];
    int32_t type[MAX_TOKENS];
    tok_str_t merge[256];
    char store[65536];
    size_t used;
} vocab_t;

static const char *keep(vocab_t *v, const char *s, size_t len)
{
    ck_assert_uint_lt(v->used + len + 1, sizeof v->store);
    char *p = v->store + v->used;
    memcpy(p, s, len);
    p[len] = '\0';
    v->used += len + 1;
    return p;
}

static int32_t add_len(vocab_t *v, const char *text, size_t len, float score, int32_t type)
{
    size_t i = v->spec.n_tokens++;
    ck_assert_uint_lt(i, MAX_TOKENS);
    v->tok[i] = (tok_str_t){keep(v, text, len), len};
    v->score[i] = score;
    v->type[i] = type;
    return (int32_t)i;
}

static int32_t add(vocab_t *v, const char *text, float score, int32_t type)
{
    return add_len(v, text, strlen(text), score, type);
}

static void add_merge(vocab_t *v, const char *merge)
{
    size_t i = v->spec.n_merges++;
    v->merge[i] = (tok_str_t){keep(v, merge, strlen(merge)), strlen(merge)};
}

static void vocab_init(vocab_t *v, const char *model, const char *pre)
{
    memset(v, 0, sizeof *v);
    tok_spec_init(&v->spec);
    v->spec.name = "test-vocab";
    v->spec.model = model;
    v->spec.pre = pre;
    v->spec.tokens = v->tok;
    v->spec.scores = v->score;
    v->spec.types = v->type;
    if (!strcmp(model, "gpt2"))
        v->spec.merges = v->merge;
}

/* GPT-2's byte -> char map, written out independently of the library: printable Latin-1 bytes stay,
 * the others take 256, 257, ... in order. */
static size_t byte_char(unsigned b, char *out)
{
    bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    unsigned cp = b;
    if (!printable) {
        cp = 256;
        for (unsigned c = 0; c < b; c++)
            cp += !((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE));
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

/* A byte-level vocabulary: ids 0..255 are the byte chars (id == byte). */
static void bpe_vocab(vocab_t *v, const char *pre)
{
    vocab_init(v, "gpt2", pre);
    for (unsigned b = 0; b < 256; b++) {
        char c[2];
        size_t n = byte_char(b, c);
        ck_assert_int_eq(add_len(v, c, n, 0, TOK_TYPE_NORMAL), (int32_t)b);
    }
}

/* A SentencePiece vocabulary: <unk>, <s>, </s>, then <0x00>..<0xFF> at 3..258. */
static void spm_vocab(vocab_t *v, bool byte_tokens)
{
    vocab_init(v, "llama", NULL);
    add(v, "<unk>", 0, TOK_TYPE_UNKNOWN);
    add(v, "<s>", 0, TOK_TYPE_CONTROL);
    add(v, "</s>", 0, TOK_TYPE_CONTROL);
    for (unsigned b = 0; byte_tokens && b < 256; b++) {
        char s[8];
        snprintf(s, sizeof s, "<0x%02X>", b);
        add(v, s, 0, TOK_TYPE_BYTE);
    }
}

static tok_t *build(const vocab_t *v)
{
    guild_err_t err = {{0}};
    tok_t *t = NULL;
    int rc = tok_new(&t, &v->spec, &err);
    ck_assert_msg(rc == 0, "tok_new: %s", err.msg);
    return t;
}

/* The error message tok_new gives for v (it must fail). */
static const char *build_error(const vocab_t *v)
{
    static guild_err_t err;
    tok_t *t = NULL;
    memset(&err, 0, sizeof err);
    ck_assert_int_eq(tok_new(&t, &v->spec, &err), -1);
    ck_assert_ptr_null(t);
    return err.msg;
}

/* Encodes and compares with the expected ids (terminated by -1). */
static void expect_ids(const tok_t *t, const char *text, unsigned flags, const int32_t *want)
{
    guild_err_t err = {{0}};
    tok_ids_t ids = {0};
    ck_assert_msg(tok_encode(t, text, strlen(text), flags, &ids, &err) == 0, "%s", err.msg);
    size_t n = 0;
    while (want[n] >= 0)
        n++;
    char got[512] = "", exp[512] = "";
    for (size_t i = 0; i < ids.n; i++)
        snprintf(got + strlen(got), sizeof got - strlen(got), " %d", ids.v[i]);
    for (size_t i = 0; i < n; i++)
        snprintf(exp + strlen(exp), sizeof exp - strlen(exp), " %d", want[i]);
    ck_assert_msg(ids.n == n && (n == 0 || !memcmp(ids.v, want, n * sizeof *want)), "'%s': got%s, expected%s", text, got, exp);
    tok_ids_fini(&ids);
}

#define IDS(...) ((const int32_t[]){__VA_ARGS__, -1})
#define NO_IDS ((const int32_t[]){-1})

static char *decode(const tok_t *t, const int32_t *ids, size_t n, unsigned flags, size_t *len)
{
    guild_err_t err = {{0}};
    char *s = NULL;
    ck_assert_int_eq(tok_decode(t, ids, n, flags, &s, len, &err), 0);
    return s;
}

/* decode(encode(text)) == text, byte for byte. */
static void expect_round_trip(const tok_t *t, const char *text, size_t len, unsigned flags)
{
    guild_err_t err = {{0}};
    tok_ids_t ids = {0};
    ck_assert_int_eq(tok_encode(t, text, len, flags, &ids, &err), 0);
    size_t back_len;
    char *back = decode(t, ids.v, ids.n, 0, &back_len);
    ck_assert_msg(back_len == len && !memcmp(back, text, len), "'%.*s' came back as '%s'", (int)len, text, back);
    free(back);
    tok_ids_fini(&ids);
}

/* --- byte-level BPE ------------------------------------------------------------------------------------ */

START_TEST(test_bpe_merges_by_rank)
{
    static vocab_t v;
    bpe_vocab(&v, "gpt-2");
    int32_t he = add(&v, "he", 0, 1), ll = add(&v, "ll", 0, 1), hell = add(&v, "hell", 0, 1);
    int32_t hello = add(&v, "hello", 0, 1), gw = add(&v, "\xC4\xA0w", 0, 1), gwo = add(&v, "\xC4\xA0wo", 0, 1);
    add_merge(&v, "h e");
    add_merge(&v, "l l");
    add_merge(&v, "he ll");
    add_merge(&v, "hell o");
    add_merge(&v, "\xC4\xA0 w");
    add_merge(&v, "\xC4\xA0w o");
    tok_t *t = build(&v);
    ck_assert_int_eq(tok_model(t), TOK_MODEL_BPE);
    ck_assert_str_eq(tok_pre(t), "gpt-2");
    /* "hello" merges fully; " world" is split by the pre-tokenizer into " world" and merged to Ġwo + bytes. */
    expect_ids(t, "hello world", 0, IDS(hello, gwo, 'r', 'l', 'd'));
    expect_ids(t, "hell", 0, IDS(hell));
    expect_ids(t, "helo", 0, IDS(he, 'l', 'o'));
    expect_ids(t, "lll", 0, IDS(ll, 'l'));
    expect_ids(t, " w", 0, IDS(gw));
    expect_ids(t, "", 0, NO_IDS);
    tok_destroy(&t);
    ck_assert_ptr_null(t);
}
END_TEST

START_TEST(test_bpe_rank_order_and_ties)
{
    static vocab_t v;
    /* "a b" before "b c": abc -> ab c; the other way round: a bc. */
    for (int order = 0; order < 2; order++) {
        bpe_vocab(&v, "gpt-2");
        int32_t ab = add(&v, "ab", 0, 1), bc = add(&v, "bc", 0, 1), aa = add(&v, "aa", 0, 1);
        add_merge(&v, order ? "b c" : "a b");
        add_merge(&v, order ? "a b" : "b c");
        add_merge(&v, "a a");
        tok_t *t = build(&v);
        if (order)
            expect_ids(t, "abc", 0, IDS('a', bc));
        else
            expect_ids(t, "abc", 0, IDS(ab, 'c'));
        /* Equal ranks: the leftmost pair goes first. */
        expect_ids(t, "aaa", 0, IDS(aa, 'a'));
        expect_ids(t, "aaaaa", 0, IDS(aa, aa, 'a'));
        tok_destroy(&t);
    }
}
END_TEST

START_TEST(test_bpe_ignore_merges_takes_whole_words)
{
    static vocab_t v;
    /* llama3's pre-tokenizer ignores merges for words that are tokens: "xyz" has no merge path. */
    for (int llama3 = 0; llama3 < 2; llama3++) {
        bpe_vocab(&v, llama3 ? "llama-bpe" : "gpt-2");
        int32_t bos = add(&v, "<|begin_of_text|>", 0, TOK_TYPE_CONTROL);
        int32_t xyz = add(&v, "xyz", 0, 1);
        v.spec.bos = bos;
        tok_t *t = build(&v);
        if (llama3) {
            expect_ids(t, "xyz", 0, IDS(xyz));
            ck_assert(tok_add_bos(t)); /* llama3 adds BOS by default */
            expect_ids(t, "xyz", TOK_ADD_SPECIAL, IDS(bos, xyz));
        } else {
            expect_ids(t, "xyz", 0, IDS('x', 'y', 'z'));
            ck_assert(!tok_add_bos(t));
            expect_ids(t, "xyz", TOK_ADD_SPECIAL, IDS('x', 'y', 'z'));
        }
        tok_destroy(&t);
    }
}
END_TEST

START_TEST(test_bpe_long_word_is_fast)
{
    static vocab_t v;
    bpe_vocab(&v, "gpt-2");
    /* a, aa, aaaa, ... up to 64 a's: a 100000-byte word merges into 1562 tokens of 64 and one of 32. */
    char text[65] = "a", merge[140];
    int32_t ids[8];
    for (int k = 1, i = 0; k <= 32; k *= 2, i++) {
        memset(text, 'a', (size_t)2 * k);
        text[2 * k] = '\0';
        ids[i] = add(&v, text, 0, 1);
        memset(merge, 'a', (size_t)k);
        merge[k] = ' ';
        memset(merge + k + 1, 'a', (size_t)k);
        merge[2 * k + 1] = '\0';
        add_merge(&v, merge);
    }
    tok_t *t = build(&v);
    size_t n = 100000;
    char *big = malloc(n);
    memset(big, 'a', n);
    guild_err_t err = {{0}};
    tok_ids_t out = {0};
    clock_t c0 = clock();
    ck_assert_int_eq(tok_encode(t, big, n, 0, &out, &err), 0);
    double secs = (double)(clock() - c0) / CLOCKS_PER_SEC;
    ck_assert_uint_eq(out.n, 1563);
    for (size_t i = 0; i < 1562; i++)
        ck_assert_int_eq(out.v[i], ids[5]);
    ck_assert_int_eq(out.v[1562], ids[4]);
    ck_assert_msg(secs < 1.0, "100 kB word took %.2f s", secs); /* quadratic merging would take minutes */
    expect_round_trip(t, big, n, 0);
    tok_ids_fini(&out);
    free(big);
    tok_destroy(&t);
}
END_TEST

START_TEST(test_bpe_invalid_utf8_reads_as_replacement_char)
{
    static vocab_t v;
    bpe_vocab(&v, "gpt-2");
    tok_t *t = build(&v);
    /* "a\xFF" : the bad byte is read as U+FFFD (EF BF BD), as llama.cpp does. */
    expect_ids(t, "a\xFF", 0, IDS('a', 0xEF, 0xBF, 0xBD));
    expect_ids(t, "\xC3", 0, IDS(0xEF, 0xBF, 0xBD));
    tok_destroy(&t);
}
END_TEST

/* --- pre-tokenizers ------------------------------------------------------------------------------------ */

/* Splits text with pre-tokenizer `name` and joins the words with '|'. */
static void expect_split(const char *name, const char *text, const char *want)
{
    guild_err_t err = {{0}};
    tok_pretok_t *p = NULL;
    tok_pretok_info_t info;
    ck_assert_msg(tok_pretok_new(&p, name, &info, &err) == 0, "%s", err.msg);
    tok_spans_t spans = {0}, tmp = {0};
    ck_assert_int_eq(tok_pretok_split(p, text, strlen(text), &spans, &tmp, &err), 0);
    char got[1024] = "";
    size_t covered = 0;
    for (size_t i = 0; i < spans.n; i++) {
        ck_assert_uint_eq(spans.v[i].off, covered);
        ck_assert_uint_gt(spans.v[i].len, 0);
        covered += spans.v[i].len;
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%.*s", i ? "|" : "", (int)spans.v[i].len,
                 text + spans.v[i].off);
    }
    ck_assert_uint_eq(covered, strlen(text));
    ck_assert_msg(!strcmp(got, want), "%s: '%s' split as '%s', expected '%s'", name, text, got, want);
    tok_spans_fini(&spans);
    tok_spans_fini(&tmp);
    tok_pretok_destroy(&p);
    ck_assert_ptr_null(p);
}

START_TEST(test_pretok_gpt2)
{
    expect_split("gpt-2", "Hello world", "Hello| world");
    expect_split("gpt-2", "I've 12 cats!!", "I|'ve| 12| cats|!!");
    /* \s+(?!\S): the last space of a run goes with the next word. */
    expect_split("gpt-2", "a   b", "a|  | b");
    expect_split("gpt-2", "a\t\tb", "a|\t|\t|b");
    expect_split("gpt-2", "end  ", "end|  ");
    /* Unicode letters and numbers, U+00A0 and U+3000 as whitespace, U+180E not. */
    expect_split("gpt-2", "\xD0\xBD\xD0\xB0 \xD9\xA3", "\xD0\xBD\xD0\xB0| \xD9\xA3");
    expect_split("gpt-2", "a\xC2\xA0\xC2\xA0" "b", "a|\xC2\xA0|\xC2\xA0|b");
    expect_split("gpt-2", "a\xE1\xA0\x8E!", "a|\xE1\xA0\x8E!");
}
END_TEST

START_TEST(test_pretok_llama3_and_qwen2)
{
    expect_split("llama-bpe", "12345 apples", "123|45| apples");
    expect_split("llama-bpe", "HE'S here", "HE|'S| here");
    expect_split("llama-bpe", "a\n\n b", "a|\n\n| b");
    expect_split("llama-bpe", "x !?\n\ny", "x| !?\n\n|y");
    expect_split("qwen2", "12345", "1|2|3|4|5");
    expect_split("deepseek-coder", "ab12\ncd", "ab|1|2|\n|cd");
    /* default: punctuation runs first, then gpt2, numbers, and runs of three ASCII digits. */
    expect_split("default", "a.b 12345", "a|.|b| |123|45");
}
END_TEST

START_TEST(test_pretok_translation)
{
    char out[4096];
    guild_err_t err = {{0}};
    ck_assert_int_gt(tok_pretok_translate("\\s+(?!\\S)", out, sizeof out, &err), 0);
    ck_assert_ptr_nonnull(strstr(out, "\\x{3000}"));
    ck_assert_ptr_null(strstr(out, "\\s"));
    ck_assert_ptr_nonnull(strstr(out, "(?![^"));
    ck_assert_int_gt(tok_pretok_translate("[\\p{Lu}\\p{Ll}]", out, sizeof out, &err), 0);
    ck_assert_str_eq(out, "[\\p{L}\\p{L}]");
    ck_assert_int_gt(tok_pretok_translate(" ?[\\p{P}\\p{S}]+", out, sizeof out, &err), 0);
    ck_assert_str_eq(out, " ?(?:(?!~)[\\p{P}\\p{S}])+");
    ck_assert_int_gt(tok_pretok_translate("[^\\p{S}a]", out, sizeof out, &err), 0);
    ck_assert_str_eq(out, "(?:~|[^\\p{S}a])");
    ck_assert_int_gt(tok_pretok_translate("[]a]\\x{41}", out, sizeof out, &err), 0);
    ck_assert_str_eq(out, "[\\]a]\\x{41}");
    ck_assert_int_eq(tok_pretok_translate("[a", out, sizeof out, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "unterminated"));
    ck_assert_int_eq(tok_pretok_translate("\\s\\s\\s", out, 16, &err), -1);
    /* deepseek-v3: '~' is not a symbol for llama.cpp there, so "!~" is two words. */
    expect_split("deepseek-v3", "a!~", "a|!|~");
}
END_TEST

START_TEST(test_pretok_unknown_name)
{
    guild_err_t err = {{0}};
    tok_pretok_t *p = NULL;
    tok_pretok_info_t info;
    ck_assert_int_eq(tok_pretok_new(&p, "no-such-pre", &info, &err), -1);
    ck_assert_ptr_null(p);
    ck_assert_ptr_nonnull(strstr(err.msg, "no-such-pre"));
    /* Every name the table knows compiles. */
    static const char *const names[] = {"default", "gpt-2", "llama3", "dbrx", "deepseek-llm", "deepseek-coder",
                                        "deepseek-v3", "falcon", "starcoder", "qwen2", "qwen35", "poro-chat",
                                        "chatglm-bpe", "gpt-4o", "tekken", "seed-coder", "bailingmoe", "olmo",
                                        "kimi-k2"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        ck_assert_msg(tok_pretok_new(&p, names[i], &info, &err) == 0, "%s: %s", names[i], err.msg);
        tok_pretok_destroy(&p);
    }
    expect_split("gpt-4o", "HelloWorld's 1234", "Hello|World's| |123|4");
}
END_TEST

/* kimi-k2, as llama.cpp's hand-written splitter cuts (the cases follow its branches): Han runs apart from other
 * letters (a Han character never starts or continues a word, nor takes the leading character), camel case kept
 * whole, contractions in either case, digits by three, a non-Han letter after a Han run starting a new word, the
 * leading punctuation of a word, U+3005 (Han script, not in the splitter's Han ranges) a letter of the word. */
START_TEST(test_pretok_kimi_k2)
{
    expect_split("kimi-k2", "Hello\xe4\xb8\x96\xe7\x95\x8cworld's 12345 getUserName",
                 "Hello|\xe4\xb8\x96\xe7\x95\x8c|world's| |123|45| getUserName");
    expect_split("kimi-k2", "IT'S \xe4\xb8\xad,\xe4\xb8\xad .x\xe3\x80\x85y",
                 "IT'S| |\xe4\xb8\xad|,|\xe4\xb8\xad| .|x\xe3\x80\x85y");
    expect_split("kimi-k2", "a\n\n  b  ", "a|\n\n| | b|  ");
}
END_TEST

/* A single match longer than the default JIT stack allows (gpt-4o's repeated lookahead groups, the '~' guard
 * of deepseek-v3's symbol runs) still splits. */
START_TEST(test_pretok_long_runs)
{
    static const struct {
        const char *pre;
        char c;
    } cases[] = {{"gpt-4o", 'a'}, {"tekken", 'a'}, {"deepseek-v3", '!'}, {"qwen2", ' '}};
    size_t n = 300000;
    char *text = malloc(n);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        memset(text, cases[k].c, n);
        guild_err_t err = {{0}};
        tok_pretok_t *p = NULL;
        tok_pretok_info_t info;
        ck_assert_int_eq(tok_pretok_new(&p, cases[k].pre, &info, &err), 0);
        tok_spans_t spans = {0}, tmp = {0};
        ck_assert_msg(tok_pretok_split(p, text, n, &spans, &tmp, &err) == 0, "%s: %s", cases[k].pre, err.msg);
        ck_assert_uint_eq(spans.n, 1);
        ck_assert_uint_eq(spans.v[0].len, n);
        tok_spans_fini(&spans);
        tok_spans_fini(&tmp);
        tok_pretok_destroy(&p);
    }
    free(text);
}
END_TEST

/* --- SentencePiece ------------------------------------------------------------------------------------- */

START_TEST(test_spm_merges_by_score)
{
    static vocab_t v;
    spm_vocab(&v, true);
    int32_t sp = add(&v, "\xE2\x96\x81", -1, 1);
    int32_t sph = add(&v, "\xE2\x96\x81h", -2, 1);
    int32_t h = add(&v, "h", -3, 1), e = add(&v, "e", -3, 1), l = add(&v, "l", -3, 1), o = add(&v, "o", -3, 1);
    int32_t ll = add(&v, "ll", -0.5f, 1), he = add(&v, "he", -0.7f, 1);
    int32_t hell = add(&v, "hell", -0.2f, 1), sphello = add(&v, "\xE2\x96\x81hello", -0.1f, 1);
    (void)sph;
    tok_t *t = build(&v);
    ck_assert_int_eq(tok_model(t), TOK_MODEL_SPM);
    ck_assert_int_eq(tok_bos(t), 1);
    ck_assert_int_eq(tok_eos(t), 2);
    ck_assert_int_eq(tok_unk(t), 0);
    ck_assert(tok_add_bos(t));
    /* ll (-0.5) before he (-0.7), then hell; "▁" + "hell" + "o" never reaches ▁hello: ▁h needs h alone. */
    expect_ids(t, "hello", 0, IDS(sp, hell, o));
    expect_ids(t, "hello", TOK_ADD_SPECIAL, IDS(1, sp, hell, o));
    expect_ids(t, "eh", 0, IDS(sp, e, h));
    expect_ids(t, "ohe l", 0, IDS(sp, o, he, sp, l));
    expect_ids(t, "", TOK_ADD_SPECIAL, IDS(1));
    expect_ids(t, "", 0, NO_IDS);
    (void)ll;
    (void)sphello;
    tok_destroy(&t);
}
END_TEST

START_TEST(test_spm_byte_fallback_and_unknown)
{
    static vocab_t v;
    spm_vocab(&v, true);
    int32_t sp = add(&v, "\xE2\x96\x81", -1, 1), a = add(&v, "a", -1, 1);
    tok_t *t = build(&v);
    /* é is not a piece: its two bytes (C3 A9) are <0xC3> <0xA9>, ids 3 + byte. */
    expect_ids(t, "a\xC3\xA9", 0, IDS(sp, a, 3 + 0xC3, 3 + 0xA9));
    /* Invalid UTF-8 passes through as bytes and decodes back exactly. */
    expect_round_trip(t, "a\xFF\xC3" "a", 4, 0);
    tok_destroy(&t);

    spm_vocab(&v, false); /* no byte pieces: the unknown token stands in, once per byte */
    sp = add(&v, "\xE2\x96\x81", -1, 1);
    a = add(&v, "a", -1, 1);
    t = build(&v);
    expect_ids(t, "a\xC3\xA9", 0, IDS(sp, a, 0, 0));
    tok_destroy(&t);
}
END_TEST

START_TEST(test_spm_space_prefix_flag)
{
    static vocab_t v;
    spm_vocab(&v, true);
    int32_t sp = add(&v, "\xE2\x96\x81", -1, 1), a = add(&v, "a", -1, 1), spa = add(&v, "\xE2\x96\x81" "a", 0, 1);
    v.spec.add_space_prefix = 0;
    v.spec.add_bos = 0;
    v.spec.add_eos = 1;
    tok_t *t = build(&v);
    ck_assert(!tok_add_bos(t));
    ck_assert(tok_add_eos(t));
    expect_ids(t, "a a", 0, IDS(a, spa));
    expect_ids(t, "a", TOK_ADD_SPECIAL, IDS(a, 2));
    expect_round_trip(t, " a", 2, 0);
    (void)sp;
    tok_destroy(&t);
}
END_TEST

/* --- added tokens -------------------------------------------------------------------------------------- */

START_TEST(test_special_tokens_in_text)
{
    static vocab_t v;
    bpe_vocab(&v, "gpt-2");
    int32_t eot = add(&v, "<|endoftext|>", 0, TOK_TYPE_CONTROL);
    int32_t user = add(&v, "<tool>", 0, TOK_TYPE_USER_DEFINED);
    int32_t a = add(&v, "<a>", 0, TOK_TYPE_CONTROL), ab = add(&v, "<a><b>", 0, TOK_TYPE_CONTROL);
    int32_t bcd = add(&v, "bcd", 0, TOK_TYPE_CONTROL), xab = add(&v, "ab", 0, TOK_TYPE_CONTROL);
    tok_t *t = build(&v);
    /* CONTROL tokens only with TOK_PARSE_SPECIAL; USER_DEFINED always. */
    expect_ids(t, "x<|endoftext|>", 0, IDS('x', '<', '|', 'e', 'n', 'd', 'o', 'f', 't', 'e', 'x', 't', '|', '>'));
    expect_ids(t, "x<|endoftext|>y", TOK_PARSE_SPECIAL, IDS('x', eot, 'y'));
    expect_ids(t, "<tool>x<tool>", 0, IDS(user, 'x', user));
    /* Longest text first. */
    expect_ids(t, "<a><b><a>", TOK_PARSE_SPECIAL, IDS(ab, a));
    /* Longest first over the whole text, not leftmost-longest: "abcd" is a + bcd (llama.cpp's order). */
    expect_ids(t, "abcd", TOK_PARSE_SPECIAL, IDS('a', bcd));
    expect_ids(t, "abab", TOK_PARSE_SPECIAL, IDS(xab, xab));
    /* <|endoftext|> is found by text as the end-of-turn and end-of-generation token. */
    ck_assert_int_eq(tok_eot(t), eot);
    ck_assert(tok_is_eog(t, eot));
    ck_assert(!tok_is_eog(t, user));
    tok_destroy(&t);
}
END_TEST

START_TEST(test_special_tokens_spm_prefix)
{
    static vocab_t v;
    spm_vocab(&v, true);
    int32_t sp = add(&v, "\xE2\x96\x81", -1, 1), hi = add(&v, "\xE2\x96\x81hi", 0, 1);
    add(&v, "h", -3, 1);
    add(&v, "i", -3, 1);
    add(&v, "\xE2\x96\x81h", -2, 1);
    tok_t *t = build(&v);
    /* A space is prefixed to every raw fragment: the first and each one after an added token. */
    expect_ids(t, "hi</s>hi", TOK_PARSE_SPECIAL, IDS(hi, 2, hi));
    expect_ids(t, "<s>hi", TOK_PARSE_SPECIAL | TOK_ADD_SPECIAL, IDS(1, 1, hi));
    expect_ids(t, "</s>", TOK_PARSE_SPECIAL, IDS(2));
    (void)sp;
    tok_destroy(&t);
}
END_TEST

START_TEST(test_end_tokens_found_by_text)
{
    static vocab_t v;
    bpe_vocab(&v, "qwen2");
    int32_t endtext = add(&v, "<|endoftext|>", 0, TOK_TYPE_CONTROL);
    int32_t imend = add(&v, "<|im_end|>", 0, TOK_TYPE_NORMAL); /* typed NORMAL: made CONTROL */
    v.spec.eos = endtext;
    tok_t *t = build(&v);
    ck_assert_int_eq(tok_eos(t), endtext);
    ck_assert_int_eq(tok_eot(t), imend); /* first of llama.cpp's list present */
    ck_assert(tok_attr(t, imend) & TOK_ATTR_CONTROL);
    ck_assert(tok_is_eog(t, endtext) && tok_is_eog(t, imend));
    ck_assert(!tok_is_eog(t, 'a') && !tok_is_eog(t, -1));
    tok_destroy(&t);

    /* gpt-oss: <|end|> ends a message, not the generation, when <|return|> and <|call|> exist. */
    bpe_vocab(&v, "gpt-4o");
    int32_t ret = add(&v, "<|return|>", 0, TOK_TYPE_CONTROL), call = add(&v, "<|call|>", 0, TOK_TYPE_CONTROL);
    int32_t end = add(&v, "<|end|>", 0, TOK_TYPE_CONTROL), chan = add(&v, "<|channel|>", 0, TOK_TYPE_CONTROL);
    t = build(&v);
    ck_assert(tok_is_eog(t, ret) && tok_is_eog(t, call) && !tok_is_eog(t, end));
    ck_assert_int_eq(tok_attr(t, end), TOK_ATTR_USER_DEFINED);
    ck_assert_int_eq(tok_attr(t, chan), TOK_ATTR_USER_DEFINED);
    tok_destroy(&t);
}
END_TEST

/* --- decoding ------------------------------------------------------------------------------------------ */

START_TEST(test_decode_pieces)
{
    static vocab_t v;
    spm_vocab(&v, true);
    int32_t spx = add(&v, "\xE2\x96\x81x\xE2\x96\x81", 0, 1), unused = add(&v, "<unused0>", 0, TOK_TYPE_UNUSED);
    int32_t user = add(&v, "<u>", 0, TOK_TYPE_USER_DEFINED);
    tok_t *t = build(&v);
    char buf[64];
    ck_assert_uint_eq(tok_piece(t, spx, 0, buf, sizeof buf), 3);
    ck_assert(!memcmp(buf, " x ", 3));
    ck_assert_uint_eq(tok_piece(t, 1, 0, buf, sizeof buf), 0); /* <s>: control */
    ck_assert_uint_eq(tok_piece(t, 1, TOK_DECODE_SPECIAL, buf, sizeof buf), 3);
    ck_assert(!memcmp(buf, "<s>", 3));
    ck_assert_uint_eq(tok_piece(t, 0, 0, buf, sizeof buf), 0); /* <unk> */
    ck_assert_uint_eq(tok_piece(t, 3 + 0x41, 0, buf, sizeof buf), 1);
    ck_assert_int_eq(buf[0], 'A');
    ck_assert_uint_eq(tok_piece(t, unused, TOK_DECODE_SPECIAL, buf, sizeof buf), 0);
    ck_assert_uint_eq(tok_piece(t, user, 0, buf, sizeof buf), 3);
    ck_assert_uint_eq(tok_piece(t, -1, 0, buf, sizeof buf), 0);
    ck_assert_uint_eq(tok_piece(t, tok_n_tokens(t), 0, buf, sizeof buf), 0);
    /* A short buffer: the full length is returned and only what fits is written. */
    memset(buf, '#', sizeof buf);
    ck_assert_uint_eq(tok_piece(t, spx, 0, buf, 2), 3);
    ck_assert(!memcmp(buf, " x#", 3));
    ck_assert_uint_ge(tok_max_piece_len(t), 5);

    /* decode drops the prefixed space once, after BOS too. */
    size_t len;
    char *s = decode(t, (const int32_t[]){1, spx, spx}, 3, 0, &len);
    ck_assert_str_eq(s, "x  x ");
    ck_assert_uint_eq(len, 5);
    free(s);
    s = decode(t, (const int32_t[]){1, spx}, 2, TOK_DECODE_SPECIAL, &len);
    ck_assert_str_eq(s, "<s> x ");
    free(s);
    tok_destroy(&t);
}
END_TEST

START_TEST(test_decode_round_trip_random_text)
{
    static vocab_t v;
    static const char *const models[] = {"gpt2", "llama"};
    unsigned seed = 12345;
    for (int m = 0; m < 2; m++) {
        if (m == 0) {
            bpe_vocab(&v, "llama-bpe"); /* adds BOS: it needs one */
            v.spec.bos = add(&v, "<|begin_of_text|>", 0, TOK_TYPE_CONTROL);
            add(&v, "\xC4\xA0\xC4\xA0", 0, 1);
            add_merge(&v, "\xC4\xA0 \xC4\xA0");
        } else {
            spm_vocab(&v, true);
            add(&v, "\xE2\x96\x81", -1, 1);
            add(&v, "\xE2\x96\x81\xE2\x96\x81", -0.5f, 1);
        }
        ck_assert_str_eq(v.spec.model, models[m]);
        tok_t *t = build(&v);
        /* Random valid UTF-8: ASCII (spaces, newlines and letters often), Cyrillic, CJK, emoji. */
        for (int iter = 0; iter < 200; iter++) {
            char text[400];
            size_t n = 0;
            int chars = (int)(rand_r(&seed) % 60);
            for (int c = 0; c < chars; c++) {
                unsigned r = (unsigned)rand_r(&seed), cp;
                switch (r % 6) {
                case 0: cp = ' '; break;
                case 1: cp = "\n\t\r"[r / 6 % 3]; break;
                case 2: cp = 0x20 + r / 6 % 0x5F; break;
                case 3: cp = 0x400 + r / 6 % 0x100; break;
                case 4: cp = 0x4E00 + r / 6 % 0x5000; break;
                default: cp = 0x1F600 + r / 6 % 0x50; break;
                }
                if (cp < 0x80) {
                    text[n++] = (char)cp;
                } else if (cp < 0x800) {
                    text[n++] = (char)(0xC0 | cp >> 6);
                    text[n++] = (char)(0x80 | (cp & 0x3F));
                } else if (cp < 0x10000) {
                    text[n++] = (char)(0xE0 | cp >> 12);
                    text[n++] = (char)(0x80 | (cp >> 6 & 0x3F));
                    text[n++] = (char)(0x80 | (cp & 0x3F));
                } else {
                    text[n++] = (char)(0xF0 | cp >> 18);
                    text[n++] = (char)(0x80 | (cp >> 12 & 0x3F));
                    text[n++] = (char)(0x80 | (cp >> 6 & 0x3F));
                    text[n++] = (char)(0x80 | (cp & 0x3F));
                }
            }
            expect_round_trip(t, text, n, 0);
            expect_round_trip(t, text, n, TOK_ADD_SPECIAL);
        }
        tok_destroy(&t);
    }
}
END_TEST

START_TEST(test_utf8_incomplete)
{
    ck_assert_uint_eq(tok_utf8_incomplete("", 0), 0);
    ck_assert_uint_eq(tok_utf8_incomplete("ab", 2), 0);
    ck_assert_uint_eq(tok_utf8_incomplete("a\xC3", 2), 1);
    ck_assert_uint_eq(tok_utf8_incomplete("a\xC3\xA9", 3), 0);
    ck_assert_uint_eq(tok_utf8_incomplete("\xF0\x9F\x98", 3), 3);
    ck_assert_uint_eq(tok_utf8_incomplete("\xF0\x9F\x98\x81", 4), 0);
    ck_assert_uint_eq(tok_utf8_incomplete("\xE4\xB8", 2), 2);
    ck_assert_uint_eq(tok_utf8_incomplete("\x80\x80", 2), 0);   /* stray continuations: nothing to wait for */
    ck_assert_uint_eq(tok_utf8_incomplete("a\xFF", 2), 0);      /* not a lead byte */
}
END_TEST

/* Streaming pieces through the helper gives back the text even when tokens split characters. */
START_TEST(test_streaming_pieces)
{
    static vocab_t v;
    bpe_vocab(&v, "gpt-2");
    tok_t *t = build(&v);
    const char *text = "h\xC3\xA9llo \xF0\x9F\x98\x81!";
    guild_err_t err = {{0}};
    tok_ids_t ids = {0};
    ck_assert_int_eq(tok_encode(t, text, strlen(text), 0, &ids, &err), 0);
    char out[64], pending[8];
    size_t n_out = 0, n_pending = 0;
    for (size_t i = 0; i < ids.n; i++) {
        char buf[16];
        size_t k = tok_piece(t, ids.v[i], 0, buf, sizeof buf);
        memcpy(pending + n_pending, buf, k);
        n_pending += k;
        size_t keep = tok_utf8_incomplete(pending, n_pending);
        memcpy(out + n_out, pending, n_pending - keep);
        n_out += n_pending - keep;
        memmove(pending, pending + n_pending - keep, keep);
        n_pending = keep;
        if (i == 1)
            ck_assert_uint_eq(keep, 1); /* after "h" and the first byte of é */
    }
    ck_assert_uint_eq(n_pending, 0);
    ck_assert_uint_eq(n_out, strlen(text));
    ck_assert(!memcmp(out, text, n_out));
    tok_ids_fini(&ids);
    tok_destroy(&t);
}
END_TEST

/* --- concurrency --------------------------------------------------------------------------------------- */

typedef struct worker {
    const tok_t *t;
    size_t n_ids;
    int32_t first, last;
    int rc;
} worker_t;

static void *encode_many(void *arg)
{
    worker_t *w = arg;
    char text[2048];
    for (size_t i = 0; i < sizeof text; i++)
        text[i] = "ab cd\n12!"[i % 9];
    for (int r = 0; r < 50; r++) {
        tok_ids_t ids = {0};
        guild_err_t err;
        w->rc |= tok_encode(w->t, text, sizeof text, TOK_ADD_SPECIAL, &ids, &err);
        w->n_ids = ids.n;
        w->first = ids.v[0];
        w->last = ids.v[ids.n - 1];
        tok_ids_fini(&ids);
    }
    return NULL;
}

START_TEST(test_encode_from_threads)
{
    static vocab_t v;
    bpe_vocab(&v, "default");
    add(&v, "ab", 0, 1);
    add_merge(&v, "a b");
    tok_t *t = build(&v);
    worker_t w[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (worker_t){t, 0, 0, 0, 0};
        pthread_create(&th[i], NULL, encode_many, &w[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(w[i].rc, 0);
        ck_assert_uint_eq(w[i].n_ids, w[0].n_ids);
        ck_assert_int_eq(w[i].first, w[0].first);
        ck_assert_int_eq(w[i].last, w[0].last);
    }
    tok_destroy(&t);
}
END_TEST

/* --- malformed vocabularies ---------------------------------------------------------------------------- */

START_TEST(test_malformed_spec)
{
    static vocab_t v;
    bpe_vocab(&v, "gpt-2");
    v.spec.tokens = NULL;
    ck_assert_ptr_nonnull(strstr(build_error(&v), "tokenizer.ggml.tokens: missing"));

    bpe_vocab(&v, "gpt-2");
    v.spec.model = NULL;
    ck_assert_ptr_nonnull(strstr(build_error(&v), "tokenizer.ggml.model"));
    v.spec.model = "rwkv";
    ck_assert_ptr_nonnull(strstr(build_error(&v), "'rwkv' is not supported"));

    bpe_vocab(&v, "gpt-2");
    v.spec.merges = NULL;
    ck_assert_ptr_nonnull(strstr(build_error(&v), "tokenizer.ggml.merges: missing"));

    bpe_vocab(&v, "gpt-2");
    add_merge(&v, "h e"); /* "he" is no token */
    ck_assert_ptr_nonnull(strstr(build_error(&v), "merges[0] 'h e': 'he' is not a token"));
    bpe_vocab(&v, "gpt-2");
    add(&v, "he", 0, 1);
    add_merge(&v, "h e");
    add_merge(&v, "hx e");
    ck_assert_ptr_nonnull(strstr(build_error(&v), "merges[1] 'hx e': 'hx' is not a token"));
    bpe_vocab(&v, "gpt-2");
    add_merge(&v, "he");
    ck_assert_ptr_nonnull(strstr(build_error(&v), "merges[0] 'he': no space"));

    bpe_vocab(&v, "gpt-2");
    v.spec.bos = 256;
    ck_assert_ptr_nonnull(strstr(build_error(&v), "bos_token_id = 256 is out of range (the vocabulary has 256"));
    bpe_vocab(&v, "gpt-2");
    v.spec.eos = -7;
    ck_assert_ptr_nonnull(strstr(build_error(&v), "eos_token_id = -7 is out of range"));

    bpe_vocab(&v, "gpt-2");
    v.spec.add_bos = 1; /* no BOS token */
    ck_assert_ptr_nonnull(strstr(build_error(&v), "add_bos_token is true but there is no BOS"));

    bpe_vocab(&v, "gpt-2");
    add(&v, "a", 0, 1);
    ck_assert_ptr_nonnull(strstr(build_error(&v), "tokens 97 and 256 are both 'a'"));

    bpe_vocab(&v, "what-pre");
    ck_assert_ptr_nonnull(strstr(build_error(&v), "unknown pre-tokenizer 'what-pre'"));

    /* An empty token text is renamed, as llama.cpp does, not refused. */
    spm_vocab(&v, true);
    add(&v, "", 0, 1);
    tok_t *t = build(&v);
    size_t len;
    ck_assert_str_eq(tok_text(t, tok_n_tokens(t) - 1, &len), "[EMPTY_259]");
    tok_destroy(&t);
}
END_TEST

/* A GGUF image in memory, with just the tokenizer keys the test asks for. */
typedef struct gguf_img {
    uint8_t b[1 << 16];
    size_t n;
    uint64_t n_kv;
} gguf_img_t;

static void img_bytes(gguf_img_t *g, const void *p, size_t n)
{
    ck_assert_uint_le(g->n + n, sizeof g->b);
    memcpy(g->b + g->n, p, n);
    g->n += n;
}

static void img_u32(gguf_img_t *g, uint32_t v) { img_bytes(g, &v, 4); }
static void img_u64(gguf_img_t *g, uint64_t v) { img_bytes(g, &v, 8); }

static void img_str(gguf_img_t *g, const char *s)
{
    img_u64(g, strlen(s));
    img_bytes(g, s, strlen(s));
}

static void img_key(gguf_img_t *g, const char *key, uint32_t type)
{
    img_str(g, key);
    img_u32(g, type);
    g->n_kv++;
}

static void img_begin(gguf_img_t *g)
{
    g->n = 0;
    g->n_kv = 0;
    img_u32(g, GGUF_MAGIC);
    img_u32(g, 3);
    img_u64(g, 0); /* tensors */
    img_u64(g, 0); /* kv count, patched by img_end */
}

static void img_end(gguf_img_t *g)
{
    memcpy(g->b + 16, &g->n_kv, 8);
}

static void img_strings(gguf_img_t *g, const char *key, const char *const *s, size_t n)
{
    img_key(g, key, GGUF_VALUE_ARRAY);
    img_u32(g, GGUF_VALUE_STRING);
    img_u64(g, n);
    for (size_t i = 0; i < n; i++)
        img_str(g, s[i]);
}

static const char *gguf_error(const gguf_img_t *img)
{
    static guild_err_t err;
    memset(&err, 0, sizeof err);
    gguf_t *g = NULL;
    tok_t *t = NULL;
    ck_assert_msg(gguf_new_from_memory(&g, img->b, img->n, "mem.gguf", &err) == 0, "%s", err.msg);
    ck_assert_int_eq(tok_new_from_gguf(&t, g, &err), -1);
    ck_assert_ptr_null(t);
    gguf_destroy(&g);
    return err.msg;
}

START_TEST(test_malformed_gguf)
{
    static gguf_img_t img;
    static const char *const toks[] = {"<unk>", "<s>", "</s>", "\xE2\x96\x81" "a", "a"};

    img_begin(&img);
    img_key(&img, "tokenizer.ggml.model", GGUF_VALUE_STRING);
    img_str(&img, "llama");
    img_end(&img);
    const char *msg = gguf_error(&img);
    ck_assert_msg(strstr(msg, "mem.gguf") && strstr(msg, "tokenizer.ggml.tokens: missing"), "%s", msg);

    img_begin(&img); /* tokens of the wrong type */
    img_key(&img, "tokenizer.ggml.model", GGUF_VALUE_STRING);
    img_str(&img, "llama");
    img_key(&img, "tokenizer.ggml.tokens", GGUF_VALUE_ARRAY);
    img_u32(&img, GGUF_VALUE_UINT32);
    img_u64(&img, 1);
    img_u32(&img, 7);
    img_end(&img);
    msg = gguf_error(&img);
    ck_assert_msg(strstr(msg, "tokenizer.ggml.tokens") && strstr(msg, "array of strings"), "%s", msg);

    img_begin(&img); /* fewer scores than tokens */
    img_key(&img, "tokenizer.ggml.model", GGUF_VALUE_STRING);
    img_str(&img, "llama");
    img_strings(&img, "tokenizer.ggml.tokens", toks, 5);
    img_key(&img, "tokenizer.ggml.scores", GGUF_VALUE_ARRAY);
    img_u32(&img, GGUF_VALUE_FLOAT32);
    img_u64(&img, 1);
    img_u32(&img, 0);
    img_end(&img);
    msg = gguf_error(&img);
    ck_assert_msg(strstr(msg, "tokenizer.ggml.scores") && strstr(msg, "1 elements for 5 tokens"), "%s", msg);

    img_begin(&img); /* BOS id past the end */
    img_key(&img, "tokenizer.ggml.model", GGUF_VALUE_STRING);
    img_str(&img, "llama");
    img_strings(&img, "tokenizer.ggml.tokens", toks, 5);
    img_key(&img, "tokenizer.ggml.bos_token_id", GGUF_VALUE_UINT32);
    img_u32(&img, 99);
    img_end(&img);
    msg = gguf_error(&img);
    ck_assert_msg(strstr(msg, "mem.gguf: tokenizer.ggml.bos_token_id = 99 is out of range"), "%s", msg);

    /* And a good one loads, with its flags. */
    img_begin(&img);
    img_key(&img, "tokenizer.ggml.model", GGUF_VALUE_STRING);
    img_str(&img, "llama");
    img_strings(&img, "tokenizer.ggml.tokens", toks, 5);
    img_key(&img, "tokenizer.ggml.add_bos_token", GGUF_VALUE_BOOL);
    img_bytes(&img, "\0", 1);
    img_end(&img);
    guild_err_t err = {{0}};
    gguf_t *g = NULL;
    tok_t *t = NULL;
    ck_assert_int_eq(gguf_new_from_memory(&g, img.b, img.n, "mem.gguf", &err), 0);
    ck_assert_msg(tok_new_from_gguf(&t, g, &err) == 0, "%s", err.msg);
    gguf_destroy(&g); /* the tokenizer does not need it any more */
    ck_assert(!tok_add_bos(t));
    expect_ids(t, "a", TOK_ADD_SPECIAL, IDS(3));
    tok_destroy(&t);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tokenizer");
    TCase *tc;

    tc = tcase_create("bpe");
    tcase_add_test(tc, test_bpe_merges_by_rank);
    tcase_add_test(tc, test_bpe_rank_order_and_ties);
    tcase_add_test(tc, test_bpe_ignore_merges_takes_whole_words);
    tcase_add_test(tc, test_bpe_long_word_is_fast);
    tcase_add_test(tc, test_bpe_invalid_utf8_reads_as_replacement_char);
    suite_add_tcase(s, tc);

    tc = tcase_create("pretok");
    tcase_add_test(tc, test_pretok_gpt2);
    tcase_add_test(tc, test_pretok_llama3_and_qwen2);
    tcase_add_test(tc, test_pretok_translation);
    tcase_add_test(tc, test_pretok_unknown_name);
    tcase_add_test(tc, test_pretok_kimi_k2);
    tcase_add_test(tc, test_pretok_long_runs);
    suite_add_tcase(s, tc);

    tc = tcase_create("spm");
    tcase_add_test(tc, test_spm_merges_by_score);
    tcase_add_test(tc, test_spm_byte_fallback_and_unknown);
    tcase_add_test(tc, test_spm_space_prefix_flag);
    suite_add_tcase(s, tc);

    tc = tcase_create("special");
    tcase_add_test(tc, test_special_tokens_in_text);
    tcase_add_test(tc, test_special_tokens_spm_prefix);
    tcase_add_test(tc, test_end_tokens_found_by_text);
    suite_add_tcase(s, tc);

    tc = tcase_create("decode");
    tcase_add_test(tc, test_decode_pieces);
    tcase_add_test(tc, test_decode_round_trip_random_text);
    tcase_add_test(tc, test_utf8_incomplete);
    tcase_add_test(tc, test_streaming_pieces);
    suite_add_tcase(s, tc);

    tc = tcase_create("threads");
    tcase_add_test(tc, test_encode_from_threads);
    suite_add_tcase(s, tc);

    tc = tcase_create("malformed");
    tcase_add_test(tc, test_malformed_spec);
    tcase_add_test(tc, test_malformed_gguf);
    suite_add_tcase(s, tc);

    return check_run(s);
}
