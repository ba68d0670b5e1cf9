/* core/tokenizer/pretok.c — pre-tokenizer regex table and splitting on PCRE2.
 *
 * The table is llama.cpp's (src/llama-vocab.cpp, llm_tokenizer_bpe), pattern for pattern. llama.cpp runs
 * those patterns either through hand-written matchers (the gpt2 and llama3 ones) or through std::regex on a
 * "collapsed" text where every non-ASCII code point is replaced by one byte standing for its category. We
 * run them on PCRE2 with Unicode properties instead, and make the few places where the two disagree agree,
 * in tok_pretok_translate:
 *   - \s and \S: llama.cpp's whitespace is the Unicode White_Space set; PCRE2's \s (UCP) also takes U+180E.
 *     Both are spelled out as that set.
 *   - \p{Lu}, \p{Ll}, \p{Lt}, \p{Lm}, \p{Lo}: collapsing keeps only "letter", so each means \p{L}.
 *   - \p{S}: the collapsed class for symbols lists the ASCII symbols $+<=>^`| but not '~', so '~' is not
 *     a \p{S} there (and is one for a negated class): classes naming \p{S} are wrapped to say so.
 * Patterns without \p{...} are matched by llama.cpp with std::wregex on a text where non-ASCII whitespace
 * was turned into U+000B; a literal class range that spans such whitespace therefore never matches it. The
 * two table entries where that happens (deepseek-llm, deepseek-coder) have those code points cut out of
 * their ranges by hand, noted at the entry.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "core/tokenizer/pretok.h"

#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

/* --- the table ------------------------------------------------------------------------------------------ */

#define CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"

static const char *const re_gpt2[] = {
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    NULL,
};

static const char *const re_default[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|]+",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    "\\p{N}+",
    "[0-9][0-9][0-9]",
    NULL,
};

static const char *const re_llama3[] = {
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+"
                 "|\\s+(?!\\S)|\\s+",
    NULL,
};

/* deepseek-llm. The third and fifth entries differ from llama.cpp's text only in the ranges U+3000-U+3002
 * and U+0800-U+4E00, which lose their whitespace code points (see the top of the file). The long class is
 * the cased letters, as written there. */
static const char *const re_deepseek_llm[] = {
    "[\r\n]",
    "\\s?[A-Za-z\\x{b5}\\x{c0}-\\x{d6}\\x{d8}-\\x{f6}\\x{f8}-\\x{1ba}\\x{1bc}-\\x{1bf}\\x{1c4}-\\x{293}"
    "\\x{295}-\\x{2af}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37b}-\\x{37d}\\x{37f}\\x{386}\\x{388}-\\x{38a}"
    "\\x{38c}\\x{38e}-\\x{3a1}\\x{3a3}-\\x{3f5}\\x{3f7}-\\x{481}\\x{48a}-\\x{52f}\\x{531}-\\x{556}"
    "\\x{10a0}-\\x{10c5}\\x{13a0}-\\x{13f5}\\x{13f8}-\\x{13fd}\\x{1c90}-\\x{1cba}\\x{1cbd}-\\x{1cbf}"
    "\\x{1d00}-\\x{1d2b}\\x{1d6b}-\\x{1d77}\\x{1d79}-\\x{1d9a}\\x{1e00}-\\x{1f15}\\x{1f18}-\\x{1f1d}"
    "\\x{1f20}-\\x{1f45}\\x{1f48}-\\x{1f4d}\\x{1f50}-\\x{1f57}\\x{1f59}\\x{1f5b}\\x{1f5d}\\x{1f5f}-\\x{1f7d}"
    "\\x{1f80}-\\x{1fb4}\\x{1fb6}-\\x{1fbc}\\x{1fbe}\\x{1fc2}-\\x{1fc4}\\x{1fc6}-\\x{1fcc}\\x{1fd0}-\\x{1fd3}"
    "\\x{1fd6}-\\x{1fdb}\\x{1fe0}-\\x{1fec}\\x{1ff2}-\\x{1ff4}\\x{1ff6}-\\x{1ffc}\\x{2102}\\x{2107}"
    "\\x{210a}-\\x{2113}\\x{2115}\\x{2119}-\\x{211d}\\x{2124}\\x{2126}\\x{2128}\\x{212a}-\\x{212d}"
    "\\x{212f}-\\x{2134}\\x{2139}\\x{213c}-\\x{213f}\\x{2145}-\\x{2149}\\x{214e}\\x{2183}\\x{2184}"
    "\\x{2c00}-\\x{2c7b}\\x{2c7e}-\\x{2ce4}\\x{2ceb}-\\x{2cee}\\x{2cf2}\\x{2cf3}\\x{a640}-\\x{a66d}"
    "\\x{a680}-\\x{a69b}\\x{a722}-\\x{a76f}\\x{a771}-\\x{a787}\\x{a78b}-\\x{a78e}\\x{ab70}-\\x{abbf}"
    "\\x{fb00}-\\x{fb06}\\x{fb13}-\\x{fb17}\\x{ff21}-\\x{ff3a}\\x{ff41}-\\x{ff5a}\\x{10400}-\\x{1044f}"
    "\\x{104b0}-\\x{104d3}\\x{104d8}-\\x{104fb}\\x{10c80}-\\x{10cb2}\\x{10cc0}-\\x{10cf2}\\x{118a0}-\\x{118df}"
    "\\x{1e900}-\\x{1e943}]+",
    "\\s?[!-/:-~\\x{ff01}-\\x{ff0f}\\x{ff1a}-\\x{ff5e}\\x{2018}-\\x{201f}\\x{3001}-\\x{3002}]+",
    "\\s+$",
    "[\\x{4e00}-\\x{9fa5}\\x{800}-\\x{167f}\\x{1681}-\\x{1fff}\\x{200b}-\\x{2027}\\x{202a}-\\x{202e}"
    "\\x{2030}-\\x{205e}\\x{2060}-\\x{2fff}\\x{3001}-\\x{4e00}\\x{ac00}-\\x{d7ff}]+",
    "\\p{N}+",
    NULL,
};

/* deepseek-coder; the fourth entry is trimmed of whitespace like deepseek-llm's fifth. */
static const char *const re_deepseek_coder[] = {
    "[\r\n]",
    "\\s?\\p{L}+",
    "\\s?\\p{P}+",
    "[\\x{4e00}-\\x{9fa5}\\x{800}-\\x{167f}\\x{1681}-\\x{1fff}\\x{200b}-\\x{2027}\\x{202a}-\\x{202e}"
    "\\x{2030}-\\x{205e}\\x{2060}-\\x{2fff}\\x{3001}-\\x{4e00}\\x{ac00}-\\x{d7ff}]+",
    "\\p{N}",
    NULL,
};

static const char *const re_deepseek3[] = {
    "\\p{N}{1,3}",
    "[\\x{4e00}-\\x{9fa5}\\x{3040}-\\x{309f}\\x{30a0}-\\x{30ff}]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
    "| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
    NULL,
};

static const char *const re_falcon[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|`]+",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    "[0-9][0-9][0-9]",
    NULL,
};

static const char *const re_starcoder[] = {
    "\\p{N}",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    NULL,
};

static const char *const re_qwen2[] = {
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+"
                 "|\\s+(?!\\S)|\\s+",
    NULL,
};

static const char *const re_qwen35[] = {
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*"
                 "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL,
};

static const char *const re_poro[] = {
    " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{ff0c}\\x{3001}\\x{964}\\x{6d4}\\x{60c})]+",
    NULL,
};

static const char *const re_gpt4o[] = {
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+" CONTRACTIONS
    "?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*" CONTRACTIONS
    "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL,
};

static const char *const re_tekken[] = {
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])"
    "([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL,
};

static const char *const re_seed_coder[] = {
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+"
                 "|\\s+(?!\\S)|\\s+",
    NULL,
};

static const char *const re_bailingmoe[] = {
    "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
    NULL,
};

/* kimi-k2. llama.cpp matches this one with a hand-written splitter (unicode.cpp's kimi_k2 handler, chosen by
 * the trigger pattern "\\p{Han}+"), which is what a GGUF of the model is tokenized with there, so that splitter's
 * behaviour is the spec, written back as one pattern: runs of Han (its unicode_cpt_is_han ranges, not PCRE2's Han
 * script, which also holds radicals and U+3005/U+3007), words of non-Han letters with one optional leading
 * non-letter, non-digit, non-newline character and an optional contraction (case-insensitive there through its
 * own lowercasing, hence the explicit [sS] forms: PCRE2's caseless mode would also fold U+017F to s), then
 * llama3's rest. Moonshot's own pattern splits camel case ("getUserName"); llama.cpp's splitter does not, and
 * neither does this. */
#define HAN_ITEMS "\\x{4e00}-\\x{9fff}\\x{3400}-\\x{4dbf}\\x{20000}-\\x{2a6df}\\x{2a700}-\\x{2b73f}\\x{2b740}-\\x{2b81f}" \
                  "\\x{2b820}-\\x{2ceaf}\\x{2ceb0}-\\x{2ebef}\\x{f900}-\\x{faff}\\x{2f800}-\\x{2fa1f}"
static const char *const re_kimi_k2[] = {
    "[" HAN_ITEMS "]+|[^\\r\\n\\p{L}\\p{N}]?[^\\P{L}" HAN_ITEMS "]+" CONTRACTIONS
    "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL,
};

typedef struct pre_kind {
    const char *name;
    const char *const *re;
    bool ignore_merges;
    bool add_bos;
} pre_kind_t;

static const pre_kind_t k_default = {"default", re_default, false, false};
static const pre_kind_t k_gpt2 = {"gpt2", re_gpt2, false, false};
static const pre_kind_t k_llama3 = {"llama3", re_llama3, true, true};
static const pre_kind_t k_dbrx = {"dbrx", re_llama3, false, false};
static const pre_kind_t k_deepseek_llm = {"deepseek-llm", re_deepseek_llm, false, false};
static const pre_kind_t k_deepseek_coder = {"deepseek-coder", re_deepseek_coder, false, false};
static const pre_kind_t k_deepseek3 = {"deepseek-v3", re_deepseek3, false, false};
static const pre_kind_t k_falcon = {"falcon", re_falcon, false, false};
static const pre_kind_t k_starcoder = {"starcoder", re_starcoder, false, false};
static const pre_kind_t k_qwen2 = {"qwen2", re_qwen2, false, false};
static const pre_kind_t k_qwen35 = {"qwen35", re_qwen35, false, false};
static const pre_kind_t k_poro = {"poro", re_poro, false, false};
static const pre_kind_t k_chatglm4 = {"chatglm4", re_llama3, false, false};
static const pre_kind_t k_gpt4o = {"gpt-4o", re_gpt4o, false, false};
static const pre_kind_t k_tekken = {"tekken", re_tekken, true, true};
static const pre_kind_t k_seed_coder = {"seed-coder", re_seed_coder, false, false};
static const pre_kind_t k_bailingmoe = {"bailingmoe", re_bailingmoe, false, false};
static const pre_kind_t k_kimi_k2 = {"kimi-k2", re_kimi_k2, false, false};

/* tokenizer.ggml.pre values -> regex set, as llama.cpp's llama_vocab::impl::load maps them. */
static const struct {
    const char *name;
    const pre_kind_t *kind;
} k_names[] = {
    {"default", &k_default},
    {"llama3", &k_llama3},        {"llama-v3", &k_llama3},     {"llama-bpe", &k_llama3},
    {"falcon3", &k_llama3},       {"falcon-h1", &k_llama3},    {"pixtral", &k_llama3},
    {"midm-2.0", &k_llama3},      {"lfm2", &k_llama3},
    {"dbrx", &k_dbrx},            {"smaug-bpe", &k_dbrx},
    {"deepseek-llm", &k_deepseek_llm},
    {"deepseek-coder", &k_deepseek_coder},
    {"deepseek-v3", &k_deepseek3}, {"hunyuan-dense", &k_deepseek3}, {"joyai-llm", &k_deepseek3},
    {"falcon", &k_falcon},
    {"starcoder", &k_starcoder},  {"refact", &k_starcoder},    {"command-r", &k_starcoder},
    {"smollm", &k_starcoder},     {"codeshell", &k_starcoder}, {"exaone", &k_starcoder},
    {"minerva-7b", &k_starcoder},
    {"gpt-2", &k_gpt2},           {"phi-2", &k_gpt2},          {"jina-es", &k_gpt2},
    {"jina-de", &k_gpt2},         {"gigachat", &k_gpt2},       {"jina-v2-es", &k_gpt2},
    {"jina-v2-de", &k_gpt2},      {"a.x-4.0", &k_gpt2},        {"mellum", &k_gpt2},
    {"modern-bert", &k_gpt2},     {"exaone4", &k_gpt2},        {"mpt", &k_gpt2},
    {"olmo", &k_gpt2},            {"jais", &k_gpt2},           {"trillion", &k_gpt2},
    {"granite-docling", &k_gpt2},
    {"qwen2", &k_qwen2},          {"deepseek-r1-qwen", &k_qwen2}, {"kormo", &k_qwen2},
    {"f2llmv2", &k_qwen2},        {"stablelm2", &k_qwen2},     {"megrez", &k_qwen2},
    {"hunyuan", &k_qwen2},        {"solar-open", &k_qwen2},    {"grok-2", &k_qwen2},
    {"qwen35", &k_qwen35},
    {"poro-chat", &k_poro},       {"bloom", &k_poro},          {"gpt3-finnish", &k_poro},
    {"glm4", &k_chatglm4},        {"chatglm-bpe", &k_chatglm4},
    {"gpt-4o", &k_gpt4o},         {"llama4", &k_gpt4o},        {"kanana2", &k_gpt4o},
    {"talkie", &k_gpt4o},         {"minimax-m2", &k_gpt4o},
    {"tekken", &k_tekken},
    {"seed-coder", &k_seed_coder},
    {"kimi-k2", &k_kimi_k2},
    {"bailingmoe", &k_bailingmoe}, {"bailingmoe2", &k_bailingmoe}, {"llada-moe", &k_bailingmoe},
};

/* --- translation to PCRE2 ------------------------------------------------------------------------------- */

/* The White_Space code points, as class items. */
#define WS_ITEMS "\\t-\\r\\x20\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}"

typedef struct out_buf {
    char *p;
    size_t n, cap;
    bool overflow;
} out_buf_t;

static void put(out_buf_t *o, const char *s, size_t len)
{
    if (o->n + len >= o->cap) {
        o->overflow = true;
        return;
    }
    memcpy(o->p + o->n, s, len);
    o->n += len;
}

static void puts_(out_buf_t *o, const char *s)
{
    put(o, s, strlen(s));
}

/* Length of the escape at s (s[0] == '\\'): "\\x{...}", "\\p{...}" or a backslash and one character. */
static size_t escape_len(const char *s)
{
    if ((s[1] == 'x' || s[1] == 'p' || s[1] == 'P') && s[2] == '{') {
        const char *close = strchr(s + 3, '}');
        if (close)
            return (size_t)(close - s) + 1;
    }
    return s[1] ? 2 : 1;
}

/* Property escape at s of length len, translated; *is_symbol says it was \p{S}. */
static const char *property(const char *s, size_t len, bool *is_symbol)
{
    static const char *const letters[] = {"\\p{Lu}", "\\p{Ll}", "\\p{Lt}", "\\p{Lm}", "\\p{Lo}"};
    *is_symbol = len == 5 && !memcmp(s, "\\p{S}", 5);
    for (size_t i = 0; i < sizeof letters / sizeof letters[0]; i++)
        if (len == 6 && !memcmp(s, letters[i], 6))
            return "\\p{L}";
    return NULL;
}

int tok_pretok_translate(const char *src, char *dst, size_t cap, guild_err_t *err)
{
    out_buf_t o = {dst, 0, cap, false};
    for (const char *s = src; *s;) {
        if (*s == '\\') {
            size_t len = escape_len(s);
            bool sym;
            const char *p = property(s, len, &sym);
            if (s[1] == 's')
                puts_(&o, "[" WS_ITEMS "]");
            else if (s[1] == 'S')
                puts_(&o, "[^" WS_ITEMS "]");
            else if (sym)
                puts_(&o, "(?:(?!~)\\p{S})");
            else if (p)
                puts_(&o, p);
            else
                put(&o, s, len);
            s += len;
            continue;
        }
        if (*s != '[') {
            put(&o, s, 1);
            s++;
            continue;
        }
        /* A class: translate its items into a scratch buffer, then wrap it if it names \p{S}. */
        char items[4096];
        out_buf_t c = {items, 0, sizeof items, false};
        bool negated = s[1] == '^', has_symbol = false;
        s += negated ? 2 : 1;
        if (*s == ']') { /* a ']' first is a literal */
            put(&c, "\\]", 2);
            s++;
        }
        while (*s && *s != ']') {
            if (*s == '[')
                return guild_err_set(err, "pre-tokenizer regex '%s': nested class", src);
            if (*s != '\\') {
                put(&c, s, 1);
                s++;
                continue;
            }
            size_t len = escape_len(s);
            bool sym;
            const char *p = property(s, len, &sym);
            if (s[1] == 's')
                puts_(&c, WS_ITEMS);
            else if (s[1] == 'S')
                return guild_err_set(err, "pre-tokenizer regex '%s': \\S inside a class", src);
            else if (p)
                puts_(&c, p);
            else
                put(&c, s, len);
            has_symbol |= sym;
            s += len;
        }
        if (*s != ']')
            return guild_err_set(err, "pre-tokenizer regex '%s': unterminated class", src);
        s++;
        if (c.overflow)
            return guild_err_set(err, "pre-tokenizer regex '%s': class too long", src);
        if (has_symbol)
            puts_(&o, negated ? "(?:~|" : "(?:(?!~)");
        puts_(&o, negated ? "[^" : "[");
        put(&o, items, c.n);
        puts_(&o, "]");
        if (has_symbol)
            puts_(&o, ")");
    }
    if (o.overflow)
        return guild_err_set(err, "pre-tokenizer regex '%s': translation longer than %zu bytes", src, cap);
    dst[o.n] = '\0';
    return (int)o.n;
}

/* --- compiled pre-tokenizer ---------------------------------------------------------------------------- */

struct tok_pretok {
    size_t n_re;
    pcre2_code *re[8];
};

int tok_pretok_new(tok_pretok_t **out, const char *name, tok_pretok_info_t *info, guild_err_t *err)
{
    *out = NULL;
    if (!name || !*name)
        name = "default";
    const pre_kind_t *kind = NULL;
    for (size_t i = 0; i < sizeof k_names / sizeof k_names[0] && !kind; i++)
        if (!strcmp(k_names[i].name, name))
            kind = k_names[i].kind;
    if (!kind)
        return guild_err_set(err, "unknown pre-tokenizer '%s'", name);

    tok_pretok_t *p = calloc(1, sizeof *p);
    if (!p)
        return guild_err_set(err, "pre-tokenizer '%s': out of memory", name);
    for (const char *const *re = kind->re; *re; re++) {
        GUILD_ASSERT(p->n_re < sizeof p->re / sizeof p->re[0]);
        char pattern[8192];
        if (tok_pretok_translate(*re, pattern, sizeof pattern, err) < 0)
            goto fail;
        int code;
        PCRE2_SIZE at;
        pcre2_code *c = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                                      PCRE2_UTF | PCRE2_UCP | PCRE2_NO_AUTO_CAPTURE | PCRE2_DOLLAR_ENDONLY, &code,
                                      &at, NULL);
        if (!c) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(code, msg, sizeof msg);
            guild_err_set(err, "pre-tokenizer '%s': regex '%s' at %zu: %s", name, *re, (size_t)at, (char *)msg);
            goto fail;
        }
        /* JIT when the library has it; without it pcre2_match interprets, same results. */
        pcre2_jit_compile(c, PCRE2_JIT_COMPLETE);
        p->re[p->n_re++] = c;
    }
    info->name = kind->name;
    info->ignore_merges = kind->ignore_merges;
    info->add_bos = kind->add_bos;
    *out = p;
    return 0;
fail:
    tok_pretok_destroy(&p);
    return -1;
}

void tok_pretok_destroy(tok_pretok_t **pp)
{
    tok_pretok_t *p = *pp;
    if (!p)
        return;
    for (size_t i = 0; i < p->n_re; i++)
        pcre2_code_free(p->re[i]);
    free(p);
    *pp = NULL;
}

static int spans_push(tok_spans_t *s, size_t off, size_t len)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        tok_span_t *v = realloc(s->v, cap * sizeof *v);
        if (!v)
            return -1;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = (tok_span_t){off, len};
    return 0;
}

void tok_spans_fini(tok_spans_t *s)
{
    free(s->v);
    s->v = NULL;
    s->n = s->cap = 0;
}

/* Matching state of one tok_pretok_split call. */
typedef struct matcher {
    pcre2_match_data *md;
    pcre2_match_context *mc;  /* NULL until a match needs a bigger JIT stack */
    pcre2_jit_stack *stack;
} matcher_t;

/* Patterns that repeat a group (gpt-4o's letter runs, the '~' guard of \p{S}) use JIT stack in proportion
 * to the run they match; the default 32 KiB lasts for runs of a few thousand characters. A longer run gets
 * a stack that can grow to JIT_STACK_MAX, made on first need. */
#define JIT_STACK_MAX (256u << 20)

static int match(const pcre2_code *re, PCRE2_SPTR subject, size_t len, size_t pos, matcher_t *m)
{
    int rc = pcre2_match(re, subject, len, pos, PCRE2_NO_UTF_CHECK, m->md, m->mc);
    if (rc != PCRE2_ERROR_JIT_STACKLIMIT || m->mc)
        return rc;
    m->mc = pcre2_match_context_create(NULL);
    m->stack = pcre2_jit_stack_create(32u << 10, JIT_STACK_MAX, NULL);
    if (!m->mc || !m->stack)
        return PCRE2_ERROR_NOMEMORY;
    pcre2_jit_stack_assign(m->mc, NULL, m->stack);
    return pcre2_match(re, subject, len, pos, PCRE2_NO_UTF_CHECK, m->md, m->mc);
}

/* Splits span sp of text by re into its matches and the gaps between them, appended to out. */
static int split_span(const pcre2_code *re, matcher_t *m, const char *text, tok_span_t sp, tok_spans_t *out,
                      guild_err_t *err)
{
    PCRE2_SPTR subject = (PCRE2_SPTR)(text + sp.off);
    size_t pos = 0, gap = 0;
    while (pos < sp.len) {
        int rc = match(re, subject, sp.len, pos, m);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return guild_err_set(err, "pre-tokenizer: regex match failed at byte %zu: %s", sp.off + pos,
                                 (char *)msg);
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(m->md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) {
            /* An empty match makes no word: step over one character and search on. */
            pos = ms + 1;
            while (pos < sp.len && (subject[pos] & 0xC0) == 0x80)
                pos++;
            continue;
        }
        if (ms > gap && spans_push(out, sp.off + gap, ms - gap) < 0)
            return guild_err_set(err, "pre-tokenizer: out of memory");
        if (spans_push(out, sp.off + ms, me - ms) < 0)
            return guild_err_set(err, "pre-tokenizer: out of memory");
        gap = pos = me;
    }
    if (gap < sp.len && spans_push(out, sp.off + gap, sp.len - gap) < 0)
        return guild_err_set(err, "pre-tokenizer: out of memory");
    return 0;
}

int tok_pretok_split(const tok_pretok_t *p, const char *text, size_t len, tok_spans_t *spans, tok_spans_t *tmp,
                     guild_err_t *err)
{
    spans->n = 0;
    if (!len)
        return 0;
    if (spans_push(spans, 0, len) < 0)
        return guild_err_set(err, "pre-tokenizer: out of memory");
    matcher_t m = {pcre2_match_data_create(1, NULL), NULL, NULL};
    if (!m.md)
        return guild_err_set(err, "pre-tokenizer: out of memory");
    int rc = 0;
    for (size_t r = 0; r < p->n_re && rc == 0; r++) {
        tmp->n = 0;
        for (size_t i = 0; i < spans->n && rc == 0; i++)
            rc = split_span(p->re[r], &m, text, spans->v[i], tmp, err);
        tok_spans_t swap = *spans;
        *spans = *tmp;
        *tmp = swap;
    }
    pcre2_match_data_free(m.md);
    pcre2_match_context_free(m.mc);
    pcre2_jit_stack_free(m.stack);
    return rc;
}
