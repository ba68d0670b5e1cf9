/* core/chat/chat.h — chat templates without a Jinja engine.
 *
 * A GGUF model carries its chat template as Jinja source (`tokenizer.chat_template`). Like llama.cpp's
 * llm_chat_detect_template, Guild recognises the common templates by distinctive substrings of that source and
 * formats the messages in C. The output of each template is the one llama.cpp's built-in formatter gives for
 * it (tests/check_chat.c pins it on llama.cpp's test conversation), except "tulu" (OLMoE, OLMo-2, Tulu), which
 * llama.cpp does not recognise and which follows the Jinja source of those models.
 *
 * "gpt-oss" follows the model's Jinja template (OpenAI's harmony format, core/chat/harmony.h), not llama.cpp's
 * built-in formatter, which writes a plain subset without the system header and channels the model was trained
 * with.
 *
 * The text does not start with BOS: the tokenizer adds it (TOK_ADD_SPECIAL), as llama.cpp does. Special-token
 * texts in it (<|im_start|>, [INST], ...) must be tokenized with TOK_PARSE_SPECIAL.
 */
#ifndef GUILD_CHAT_CHAT_H
#define GUILD_CHAT_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include "core/util/err.h"

typedef enum chat_tmpl {
    CHAT_TMPL_UNKNOWN = 0,
    CHAT_TMPL_CHATML,           /* Qwen2/Qwen2-MoE/Qwen3/Qwen3-MoE/Qwen3-Next, OpenHermes, the demo model */
    CHAT_TMPL_LLAMA2,           /* [INST] ... [/INST]: Mixtral-Instruct, Mistral-7B-Instruct-v0.2 */
    CHAT_TMPL_LLAMA2_SYS,       /* llama2 with a <<SYS>> block */
    CHAT_TMPL_LLAMA2_SYS_BOS,   /* ... and <s> before each later [INST] */
    CHAT_TMPL_LLAMA2_SYS_STRIP, /* ... and contents stripped */
    CHAT_TMPL_MISTRAL_V1,
    CHAT_TMPL_MISTRAL_V3,
    CHAT_TMPL_MISTRAL_V3_TEKKEN,
    CHAT_TMPL_MISTRAL_V7,
    CHAT_TMPL_PHI3,
    CHAT_TMPL_ZEPHYR,
    CHAT_TMPL_GEMMA,
    CHAT_TMPL_COMMAND_R,
    CHAT_TMPL_DEEPSEEK,         /* deepseek-coder-instruct */
    CHAT_TMPL_DEEPSEEK2,        /* DeepSeek-V2(-Lite) chat */
    CHAT_TMPL_DEEPSEEK3,        /* DeepSeek-V3, R1 */
    CHAT_TMPL_LLAMA3,
    CHAT_TMPL_LLAMA4,
    CHAT_TMPL_TULU,             /* OLMoE-Instruct, OLMo-2, Tulu */
    CHAT_TMPL_GPT_OSS,          /* GPT-OSS (harmony: core/chat/harmony.h) */
    CHAT_TMPL_KIMI_K2,          /* Kimi-K2-Instruct (<|im_user|>user<|im_middle|>...<|im_end|>) */
    CHAT_TMPL_COUNT_
} chat_tmpl_t;

/* The template's name ("chatml", "llama2", ... as llama.cpp's --chat-template names them; "unknown"). */
const char *chat_tmpl_name(chat_tmpl_t t);

/* The template named name, or CHAT_TMPL_UNKNOWN. */
chat_tmpl_t chat_tmpl_from_name(const char *name);

/* The built-in names, separated by spaces. */
const char *chat_tmpl_names(void);

/* Recognises a template from its Jinja source (a built-in name is accepted too). CHAT_TMPL_UNKNOWN when no
 * rule matches, also for templates llama.cpp knows but Guild does not format (phi4, chatglm, ...). */
chat_tmpl_t chat_tmpl_detect(const char *jinja);

typedef struct chat_msg {
    const char *role;    /* "system", "user", "assistant" (other roles: as each template treats them) */
    const char *content; /* NUL-terminated UTF-8 */
} chat_msg_t;

/* What some templates take beyond the messages (their Jinja sources' variables). */
typedef struct chat_opts {
    const char *date;             /* "gpt-oss": the system message's "Current date" (YYYY-MM-DD); NULL: today's */
    const char *reasoning_effort; /* "gpt-oss": "low", "medium" or "high"; NULL: "medium" */
} chat_opts_t;

/* Formats msgs[0..n) with template t into a malloc'ed NUL-terminated string (*out, caller frees; *out_len its
 * length). add_generation_prompt: end with the opening of the assistant's turn (templates whose format has
 * none ignore it). eos_text: the model's EOS token text, written where the Jinja source writes eos_token
 * ("tulu"); NULL: "</s>". -1 with a message for CHAT_TMPL_UNKNOWN or out of memory. */
int chat_format(chat_tmpl_t t, const chat_msg_t *msgs, size_t n, bool add_generation_prompt, const char *eos_text,
                char **out, size_t *out_len, guild_err_t *err);

/* chat_format with the template's options (o NULL: the defaults); -1 also for an option the template refuses. */
int chat_format_opts(chat_tmpl_t t, const chat_msg_t *msgs, size_t n, bool add_generation_prompt,
                     const char *eos_text, const chat_opts_t *o, char **out, size_t *out_len, guild_err_t *err);

#endif
