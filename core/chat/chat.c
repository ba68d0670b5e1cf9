#include "core/chat/chat.h"

#include <stdlib.h>
#include <string.h>

#include "core/chat/harmony.h"

static const char *const names[CHAT_TMPL_COUNT_] = {
    [CHAT_TMPL_UNKNOWN] = "unknown",
    [CHAT_TMPL_CHATML] = "chatml",
    [CHAT_TMPL_LLAMA2] = "llama2",
    [CHAT_TMPL_LLAMA2_SYS] = "llama2-sys",
    [CHAT_TMPL_LLAMA2_SYS_BOS] = "llama2-sys-bos",
    [CHAT_TMPL_LLAMA2_SYS_STRIP] = "llama2-sys-strip",
    [CHAT_TMPL_MISTRAL_V1] = "mistral-v1",
    [CHAT_TMPL_MISTRAL_V3] = "mistral-v3",
    [CHAT_TMPL_MISTRAL_V3_TEKKEN] = "mistral-v3-tekken",
    [CHAT_TMPL_MISTRAL_V7] = "mistral-v7",
    [CHAT_TMPL_PHI3] = "phi3",
    [CHAT_TMPL_ZEPHYR] = "zephyr",
    [CHAT_TMPL_GEMMA] = "gemma",
    [CHAT_TMPL_COMMAND_R] = "command-r",
    [CHAT_TMPL_DEEPSEEK] = "deepseek",
    [CHAT_TMPL_DEEPSEEK2] = "deepseek2",
    [CHAT_TMPL_DEEPSEEK3] = "deepseek3",
    [CHAT_TMPL_LLAMA3] = "llama3",
    [CHAT_TMPL_LLAMA4] = "llama4",
    [CHAT_TMPL_TULU] = "tulu",
    [CHAT_TMPL_GPT_OSS] = "gpt-oss",
    [CHAT_TMPL_KIMI_K2] = "kimi-k2",
};

const char *chat_tmpl_name(chat_tmpl_t t)
{
    return t > CHAT_TMPL_UNKNOWN && t < CHAT_TMPL_COUNT_ ? names[t] : names[CHAT_TMPL_UNKNOWN];
}

chat_tmpl_t chat_tmpl_from_name(const char *name)
{
    for (int t = CHAT_TMPL_UNKNOWN + 1; t < CHAT_TMPL_COUNT_; t++)
        if (!strcmp(name, names[t]))
            return (chat_tmpl_t)t;
    return CHAT_TMPL_UNKNOWN;
}

const char *chat_tmpl_names(void)
{
    static char all[512];
    if (!all[0]) {
        size_t n = 0;
        for (int t = CHAT_TMPL_UNKNOWN + 1; t < CHAT_TMPL_COUNT_; t++) {
            size_t l = strlen(names[t]);
            GUILD_ASSERT(n + l + 2 < sizeof all);
            if (n)
                all[n++] = ' ';
            memcpy(all + n, names[t], l + 1);
            n += l;
        }
    }
    return all;
}

/* The rules follow llama.cpp's llm_chat_detect_template, in its order, for the templates formatted here;
 * templates that rule recognises as something Guild does not format give UNKNOWN rather than a wrong guess. */
chat_tmpl_t chat_tmpl_detect(const char *j)
{
#define HAS(s) (strstr(j, (s)) != NULL)
    chat_tmpl_t named = chat_tmpl_from_name(j);
    if (named != CHAT_TMPL_UNKNOWN)
        return named;
    if (HAS("<|im_start|>"))
        /* phi4 (<|im_sep|>) and SmolVLM (<end_of_utterance>) borrow <|im_start|> but are not ChatML */
        return HAS("<|im_sep|>") || HAS("<end_of_utterance>") ? CHAT_TMPL_UNKNOWN : CHAT_TMPL_CHATML;
    if (!strncmp(j, "mistral", 7) || HAS("[INST]")) {
        if (HAS("[SYSTEM_PROMPT]"))
            return CHAT_TMPL_MISTRAL_V7;
        if (HAS("' [INST] ' + system_message") || HAS("[AVAILABLE_TOOLS]")) {
            if (HAS(" [INST]"))
                return CHAT_TMPL_MISTRAL_V1;
            if (HAS("\"[INST]\""))
                return CHAT_TMPL_MISTRAL_V3_TEKKEN;
            return CHAT_TMPL_MISTRAL_V3;
        }
        if (HAS("content.strip()"))
            return CHAT_TMPL_LLAMA2_SYS_STRIP;
        if (HAS("bos_token + '[INST]"))
            return CHAT_TMPL_LLAMA2_SYS_BOS;
        return HAS("<<SYS>>") ? CHAT_TMPL_LLAMA2_SYS : CHAT_TMPL_LLAMA2;
    }
    if (HAS("<|assistant|>") && HAS("<|end|>"))
        return CHAT_TMPL_PHI3;
    if (HAS("[gMASK]"))
        return CHAT_TMPL_UNKNOWN; /* ChatGLM */
    /* Tulu: a newline after each user turn and the EOS token after the assistant's (llama.cpp takes it for
     * GLM-Edge, which has neither) */
    if (HAS("<|user|>") && HAS("<|assistant|>") && HAS("message['content'] + '\\n'") && HAS("eos_token"))
        return CHAT_TMPL_TULU;
    if (HAS("<|assistant|>") && HAS("<|user|>"))
        return CHAT_TMPL_UNKNOWN; /* Falcon 3, GLM-Edge */
    if (HAS("<|user|>") && HAS("<|endoftext|>"))
        return CHAT_TMPL_ZEPHYR;
    if (HAS("bos_token + message['role']"))
        return CHAT_TMPL_UNKNOWN; /* Monarch */
    if (HAS("<start_of_turn>"))
        return CHAT_TMPL_GEMMA;
    if (HAS("'\\n\\nAssistant: ' + eos_token") || HAS("GPT4 Correct ") || (HAS("USER: ") && HAS("ASSISTANT: ")))
        return CHAT_TMPL_UNKNOWN; /* Orion, OpenChat, Vicuna */
    if (HAS("### Instruction:") && HAS("<|EOT|>"))
        return CHAT_TMPL_DEEPSEEK;
    if (HAS("<|START_OF_TURN_TOKEN|>") && HAS("<|USER_TOKEN|>"))
        return CHAT_TMPL_COMMAND_R;
    if (HAS("<|start_header_id|>") && HAS("<|end_header_id|>"))
        return CHAT_TMPL_LLAMA3;
    if (HAS("'Assistant: ' + message['content'] + eos_token"))
        return CHAT_TMPL_DEEPSEEK2;
    if (HAS("<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>") && HAS("<\xef\xbd\x9c" "User\xef\xbd\x9c>") &&
        HAS("<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"))
        return CHAT_TMPL_DEEPSEEK3;
    if (HAS("<|header_start|>") && HAS("<|header_end|>"))
        return CHAT_TMPL_LLAMA4;
    if (HAS("<|start|>") && HAS("<|channel|>"))
        return CHAT_TMPL_GPT_OSS;
    if (HAS("<|im_assistant|>assistant<|im_middle|>"))
        return CHAT_TMPL_KIMI_K2;
    return CHAT_TMPL_UNKNOWN;
#undef HAS
}

/* ---- formatting --------------------------------------------------------------------------------------- */

typedef struct sbuf {
    char *p;
    size_t len, cap;
    bool oom;
} sbuf_t;

static void put_n(sbuf_t *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = (b->len + n + 1) * 2;
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

static void put(sbuf_t *b, const char *s)
{
    put_n(b, s, strlen(s));
}

/* s without leading and trailing ASCII white space (as llama.cpp's trim, in the C locale) */
static void put_trimmed(sbuf_t *b, const char *s)
{
    size_t n = strlen(s), a = 0;
    while (a < n && strchr(" \t\n\v\f\r", s[a]))
        a++;
    while (n > a && strchr(" \t\n\v\f\r", s[n - 1]))
        n--;
    put_n(b, s + a, n - a);
}

static bool is(const chat_msg_t *m, const char *role)
{
    return !strcmp(m->role, role);
}

static void fmt_llama2(sbuf_t *b, chat_tmpl_t t, const chat_msg_t *m, size_t n)
{
    bool sys_block = t != CHAT_TMPL_LLAMA2, bos_inside = t == CHAT_TMPL_LLAMA2_SYS_BOS;
    bool strip = t == CHAT_TMPL_LLAMA2_SYS_STRIP, inside = true;
    put(b, "[INST] ");
    for (size_t i = 0; i < n; i++) {
        if (!inside) {
            inside = true;
            put(b, bos_inside ? "<s>[INST] " : "[INST] ");
        }
        if (is(&m[i], "system"))
            put(b, sys_block ? "<<SYS>>\n" : "");
        if (strip)
            put_trimmed(b, m[i].content);
        else
            put(b, m[i].content);
        if (is(&m[i], "system")) {
            put(b, sys_block ? "\n<</SYS>>\n\n" : "\n");
        } else if (is(&m[i], "user")) {
            put(b, " [/INST]");
        } else {
            put(b, "</s>");
            inside = false;
        }
    }
}

static void fmt_mistral(sbuf_t *b, chat_tmpl_t t, const chat_msg_t *m, size_t n)
{
    const char *lead = t == CHAT_TMPL_MISTRAL_V1 ? " " : "";
    const char *trail = t == CHAT_TMPL_MISTRAL_V3_TEKKEN ? "" : " ";
    bool inside = false;
    for (size_t i = 0; i < n; i++) {
        if (!inside) {
            put(b, lead);
            put(b, "[INST]");
            put(b, trail);
            inside = true;
        }
        if (is(&m[i], "system")) {
            put(b, m[i].content);
            put(b, "\n\n");
        } else if (is(&m[i], "user")) {
            put(b, m[i].content);
            put(b, lead);
            put(b, "[/INST]");
        } else {
            put(b, trail);
            if (t == CHAT_TMPL_MISTRAL_V3)
                put_trimmed(b, m[i].content);
            else
                put(b, m[i].content);
            put(b, "</s>");
            inside = false;
        }
    }
}

static void fmt_gemma(sbuf_t *b, const chat_msg_t *m, size_t n, bool gen)
{
    /* no system role: the system text goes in front of the next user turn */
    sbuf_t sys = {0};
    for (size_t i = 0; i < n; i++) {
        if (is(&m[i], "system")) {
            put_trimmed(&sys, m[i].content);
            continue;
        }
        bool model = is(&m[i], "assistant");
        put(b, "<start_of_turn>");
        put(b, model ? "model" : m[i].role);
        put(b, "\n");
        if (sys.len && !model) {
            put_n(b, sys.p, sys.len);
            put(b, "\n\n");
            sys.len = 0;
        }
        put_trimmed(b, m[i].content);
        put(b, "<end_of_turn>\n");
    }
    b->oom |= sys.oom;
    free(sys.p);
    if (gen)
        put(b, "<start_of_turn>model\n");
}

#define DS_USER "<\xef\xbd\x9c" "User\xef\xbd\x9c>"
#define DS_ASSISTANT "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"
#define DS_EOS "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"

int chat_format(chat_tmpl_t t, const chat_msg_t *m, size_t n, bool gen, const char *eos_text, char **out,
                size_t *out_len, guild_err_t *err)
{
    return chat_format_opts(t, m, n, gen, eos_text, NULL, out, out_len, err);
}

int chat_format_opts(chat_tmpl_t t, const chat_msg_t *m, size_t n, bool gen, const char *eos_text,
                     const chat_opts_t *o, char **out, size_t *out_len, guild_err_t *err)
{
    *out = NULL;
    *out_len = 0;
    if (t == CHAT_TMPL_GPT_OSS)
        return chat_harmony_format(m, n, gen, o, out, out_len, err);
    sbuf_t b = {0};
    const char *eos = eos_text ? eos_text : "</s>";
    put(&b, ""); /* an empty conversation still gives a string */
    switch (t) {
    case CHAT_TMPL_CHATML:
        for (size_t i = 0; i < n; i++) {
            put(&b, "<|im_start|>");
            put(&b, m[i].role);
            put(&b, "\n");
            put(&b, m[i].content);
            put(&b, "<|im_end|>\n");
        }
        if (gen)
            put(&b, "<|im_start|>assistant\n");
        break;
    case CHAT_TMPL_KIMI_K2:
        /* a role other than these four gets no header, as llama.cpp formats it */
        for (size_t i = 0; i < n; i++) {
            if (is(&m[i], "system"))
                put(&b, "<|im_system|>system<|im_middle|>");
            else if (is(&m[i], "user"))
                put(&b, "<|im_user|>user<|im_middle|>");
            else if (is(&m[i], "assistant"))
                put(&b, "<|im_assistant|>assistant<|im_middle|>");
            else if (is(&m[i], "tool"))
                put(&b, "<|im_system|>tool<|im_middle|>");
            put(&b, m[i].content);
            put(&b, "<|im_end|>");
        }
        if (gen)
            put(&b, "<|im_assistant|>assistant<|im_middle|>");
        break;
    case CHAT_TMPL_LLAMA2:
    case CHAT_TMPL_LLAMA2_SYS:
    case CHAT_TMPL_LLAMA2_SYS_BOS:
    case CHAT_TMPL_LLAMA2_SYS_STRIP:
        fmt_llama2(&b, t, m, n);
        break;
    case CHAT_TMPL_MISTRAL_V1:
    case CHAT_TMPL_MISTRAL_V3:
    case CHAT_TMPL_MISTRAL_V3_TEKKEN:
        fmt_mistral(&b, t, m, n);
        break;
    case CHAT_TMPL_MISTRAL_V7:
        for (size_t i = 0; i < n; i++) {
            if (is(&m[i], "system")) {
                put(&b, "[SYSTEM_PROMPT] ");
                put(&b, m[i].content);
                put(&b, "[/SYSTEM_PROMPT]");
            } else if (is(&m[i], "user")) {
                put(&b, "[INST] ");
                put(&b, m[i].content);
                put(&b, "[/INST]");
            } else {
                put(&b, " ");
                put(&b, m[i].content);
                put(&b, "</s>");
            }
        }
        break;
    case CHAT_TMPL_PHI3:
    case CHAT_TMPL_ZEPHYR:
        for (size_t i = 0; i < n; i++) {
            put(&b, "<|");
            put(&b, m[i].role);
            put(&b, "|>\n");
            put(&b, m[i].content);
            put(&b, t == CHAT_TMPL_PHI3 ? "<|end|>\n" : "<|endoftext|>\n");
        }
        if (gen)
            put(&b, "<|assistant|>\n");
        break;
    case CHAT_TMPL_GEMMA:
        fmt_gemma(&b, m, n, gen);
        break;
    case CHAT_TMPL_COMMAND_R:
        for (size_t i = 0; i < n; i++) {
            const char *tag = is(&m[i], "system") ? "<|SYSTEM_TOKEN|>"
                              : is(&m[i], "user") ? "<|USER_TOKEN|>"
                              : is(&m[i], "assistant") ? "<|CHATBOT_TOKEN|>"
                                                       : NULL;
            if (!tag)
                continue;
            put(&b, "<|START_OF_TURN_TOKEN|>");
            put(&b, tag);
            put_trimmed(&b, m[i].content);
            put(&b, "<|END_OF_TURN_TOKEN|>");
        }
        if (gen)
            put(&b, "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>");
        break;
    case CHAT_TMPL_DEEPSEEK:
        for (size_t i = 0; i < n; i++) {
            if (is(&m[i], "system")) {
                put(&b, m[i].content);
            } else if (is(&m[i], "user")) {
                put(&b, "### Instruction:\n");
                put(&b, m[i].content);
                put(&b, "\n");
            } else if (is(&m[i], "assistant")) {
                put(&b, "### Response:\n");
                put(&b, m[i].content);
                put(&b, "\n<|EOT|>\n");
            }
        }
        if (gen)
            put(&b, "### Response:\n");
        break;
    case CHAT_TMPL_DEEPSEEK2:
        for (size_t i = 0; i < n; i++) {
            if (is(&m[i], "system")) {
                put(&b, m[i].content);
                put(&b, "\n\n");
            } else if (is(&m[i], "user")) {
                put(&b, "User: ");
                put(&b, m[i].content);
                put(&b, "\n\n");
            } else if (is(&m[i], "assistant")) {
                put(&b, "Assistant: ");
                put(&b, m[i].content);
                put(&b, DS_EOS);
            }
        }
        if (gen)
            put(&b, "Assistant:");
        break;
    case CHAT_TMPL_DEEPSEEK3:
        for (size_t i = 0; i < n; i++) {
            if (is(&m[i], "system")) {
                put(&b, m[i].content);
                put(&b, "\n\n");
            } else if (is(&m[i], "user")) {
                put(&b, DS_USER);
                put(&b, m[i].content);
            } else if (is(&m[i], "assistant")) {
                put(&b, DS_ASSISTANT);
                put(&b, m[i].content);
                put(&b, DS_EOS);
            }
        }
        if (gen)
            put(&b, DS_ASSISTANT);
        break;
    case CHAT_TMPL_LLAMA3:
    case CHAT_TMPL_LLAMA4: {
        bool l3 = t == CHAT_TMPL_LLAMA3;
        for (size_t i = 0; i < n; i++) {
            put(&b, l3 ? "<|start_header_id|>" : "<|header_start|>");
            put(&b, m[i].role);
            put(&b, l3 ? "<|end_header_id|>\n\n" : "<|header_end|>\n\n");
            put_trimmed(&b, m[i].content);
            put(&b, l3 ? "<|eot_id|>" : "<|eot|>");
        }
        if (gen)
            put(&b, l3 ? "<|start_header_id|>assistant<|end_header_id|>\n\n"
                       : "<|header_start|>assistant<|header_end|>\n\n");
        break;
    }
    case CHAT_TMPL_TULU:
        for (size_t i = 0; i < n; i++) {
            if (is(&m[i], "assistant")) {
                put(&b, "<|assistant|>\n");
                put(&b, m[i].content);
                put(&b, eos);
                if (i + 1 < n)
                    put(&b, "\n");
            } else if (is(&m[i], "system") || is(&m[i], "user")) {
                put(&b, is(&m[i], "system") ? "<|system|>\n" : "<|user|>\n");
                put(&b, m[i].content);
                put(&b, "\n");
            }
        }
        if (gen)
            put(&b, "<|assistant|>\n");
        break;
    default:
        free(b.p);
        return guild_err_set(err, "no chat template: the model's is not one Guild recognises (built in: %s)",
                             chat_tmpl_names());
    }
    if (b.oom) {
        free(b.p);
        return guild_err_set(err, "out of memory formatting a chat of %zu messages", n);
    }
    *out = b.p;
    *out_len = b.len;
    return 0;
}
