/* Tests for core/chat: each template's exact text on llama.cpp's test conversation (the expected strings of
 * the templates llama.cpp formats are those of its tests/test-chat-template.cpp; gpt-oss's are its Jinja
 * template's), detection from Jinja sources, and the harmony parser of gpt-oss's replies. */
#include "core/chat/chat.h"
#include "core/chat/harmony.h"
#include "tests/check_run.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const chat_msg_t conv[] = {
    {"system", "You are a helpful assistant"},
    {"user", "Hello"},
    {"assistant", "Hi there"},
    {"user", "Who are you"},
    {"assistant", "   I am an assistant   "},
    {"user", "Another question"},
};
#define N_CONV (sizeof conv / sizeof conv[0])

/* gpt-oss's template writes the date: the tests fix it */
static const chat_opts_t fixed_date = {"2025-06-28", NULL};

static void expect_format(chat_tmpl_t t, const chat_msg_t *m, size_t n, bool gen, const char *eos, const char *want)
{
    char *out = NULL;
    size_t len = 0;
    guild_err_t err = {{0}};
    ck_assert_msg(chat_format_opts(t, m, n, gen, eos, &fixed_date, &out, &len, &err) == 0, "%s: %s",
                  chat_tmpl_name(t), err.msg);
    ck_assert_uint_eq(len, strlen(out));
    ck_assert_msg(!strcmp(out, want), "%s:\n got: [%s]\nwant: [%s]", chat_tmpl_name(t), out, want);
    free(out);
}

#define DS_USER "<\xef\xbd\x9c" "User\xef\xbd\x9c>"
#define DS_ASSISTANT "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"
#define DS_EOS "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"

static const struct {
    chat_tmpl_t t;
    const char *want;
} formats[] = {
    {CHAT_TMPL_CHATML,
     "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>"
     "assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n<|im_start|>assistant\n   I am an "
     "assistant   <|im_end|>\n<|im_start|>user\nAnother question<|im_end|>\n<|im_start|>assistant\n"},
    {CHAT_TMPL_LLAMA2,
     "[INST] You are a helpful assistant\nHello [/INST]Hi there</s>[INST] Who are you [/INST]   I am an assistant"
     "   </s>[INST] Another question [/INST]"},
    {CHAT_TMPL_LLAMA2_SYS,
     "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s>[INST] Who are you [/INST]"
     "   I am an assistant   </s>[INST] Another question [/INST]"},
    {CHAT_TMPL_LLAMA2_SYS_BOS,
     "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s><s>[INST] Who are you "
     "[/INST]   I am an assistant   </s><s>[INST] Another question [/INST]"},
    {CHAT_TMPL_LLAMA2_SYS_STRIP,
     "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s>[INST] Who are you "
     "[/INST]I am an assistant</s>[INST] Another question [/INST]"},
    {CHAT_TMPL_MISTRAL_V1,
     " [INST] You are a helpful assistant\n\nHello [/INST] Hi there</s> [INST] Who are you [/INST]    I am an "
     "assistant   </s> [INST] Another question [/INST]"},
    {CHAT_TMPL_MISTRAL_V3,
     "[INST] You are a helpful assistant\n\nHello[/INST] Hi there</s>[INST] Who are you[/INST] I am an "
     "assistant</s>[INST] Another question[/INST]"},
    {CHAT_TMPL_MISTRAL_V3_TEKKEN,
     "[INST]You are a helpful assistant\n\nHello[/INST]Hi there</s>[INST]Who are you[/INST]   I am an assistant"
     "   </s>[INST]Another question[/INST]"},
    {CHAT_TMPL_MISTRAL_V7,
     "[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMPT][INST] Hello[/INST] Hi there</s>[INST] Who are "
     "you[/INST]    I am an assistant   </s>[INST] Another question[/INST]"},
    {CHAT_TMPL_PHI3,
     "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n<|assistant|>\nHi there<|end|>\n"
     "<|user|>\nWho are you<|end|>\n<|assistant|>\n   I am an assistant   <|end|>\n<|user|>\nAnother "
     "question<|end|>\n<|assistant|>\n"},
    {CHAT_TMPL_ZEPHYR,
     "<|system|>\nYou are a helpful assistant<|endoftext|>\n<|user|>\nHello<|endoftext|>\n<|assistant|>\nHi "
     "there<|endoftext|>\n<|user|>\nWho are you<|endoftext|>\n<|assistant|>\n   I am an assistant   "
     "<|endoftext|>\n<|user|>\nAnother question<|endoftext|>\n<|assistant|>\n"},
    {CHAT_TMPL_GEMMA,
     "<start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n<start_of_turn>model\nHi "
     "there<end_of_turn>\n<start_of_turn>user\nWho are you<end_of_turn>\n<start_of_turn>model\nI am an "
     "assistant<end_of_turn>\n<start_of_turn>user\nAnother question<end_of_turn>\n<start_of_turn>model\n"},
    {CHAT_TMPL_COMMAND_R,
     "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>You are a helpful assistant<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|>"
     "<|USER_TOKEN|>Hello<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>Hi there<|END_OF_TURN_TOKEN|>"
     "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Who are you<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"
     "I am an assistant<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|>Another question"
     "<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"},
    {CHAT_TMPL_DEEPSEEK,
     "You are a helpful assistant### Instruction:\nHello\n### Response:\nHi there\n<|EOT|>\n### Instruction:\nWho "
     "are you\n### Response:\n   I am an assistant   \n<|EOT|>\n### Instruction:\nAnother question\n### "
     "Response:\n"},
    {CHAT_TMPL_DEEPSEEK2,
     "You are a helpful assistant\n\nUser: Hello\n\nAssistant: Hi there" DS_EOS "User: Who are you\n\nAssistant:    "
     "I am an assistant   " DS_EOS "User: Another question\n\nAssistant:"},
    {CHAT_TMPL_DEEPSEEK3,
     "You are a helpful assistant\n\n" DS_USER "Hello" DS_ASSISTANT "Hi there" DS_EOS DS_USER "Who are you"
     DS_ASSISTANT "   I am an assistant   " DS_EOS DS_USER "Another question" DS_ASSISTANT},
    {CHAT_TMPL_LLAMA3,
     "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|><|start_header_id|>user"
     "<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|>"
     "<|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|><|start_header_id|>assistant"
     "<|end_header_id|>\n\nI am an assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnother "
     "question<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {CHAT_TMPL_LLAMA4,
     "<|header_start|>system<|header_end|>\n\nYou are a helpful assistant<|eot|><|header_start|>user<|header_end|>"
     "\n\nHello<|eot|><|header_start|>assistant<|header_end|>\n\nHi there<|eot|><|header_start|>user<|header_end|>"
     "\n\nWho are you<|eot|><|header_start|>assistant<|header_end|>\n\nI am an assistant<|eot|><|header_start|>"
     "user<|header_end|>\n\nAnother question<|eot|><|header_start|>assistant<|header_end|>\n\n"},
    {CHAT_TMPL_TULU,
     "<|system|>\nYou are a helpful assistant\n<|user|>\nHello\n<|assistant|>\nHi there<|endoftext|>\n<|user|>\nWho "
     "are you\n<|assistant|>\n   I am an assistant   <|endoftext|>\n<|user|>\nAnother question\n<|assistant|>\n"},
    {CHAT_TMPL_GPT_OSS, /* openai/gpt-oss's chat_template.jinja: the system header, the developer's instructions */
     "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: "
     "2024-06\nCurrent date: 2025-06-28\n\nReasoning: medium\n\n# Valid channels: analysis, commentary, final. "
     "Channel must be included for every message.<|end|><|start|>developer<|message|># Instructions\n\nYou are a "
     "helpful assistant\n\n<|end|><|start|>user<|message|>Hello<|end|><|start|>assistant<|channel|>final"
     "<|message|>Hi there<|end|><|start|>user<|message|>Who are you<|end|><|start|>assistant<|channel|>final"
     "<|message|>   I am an assistant   <|end|><|start|>user<|message|>Another question<|end|><|start|>assistant"},
    {CHAT_TMPL_KIMI_K2, /* llama.cpp's test-chat-template.cpp, moonshotai/Kimi-K2-Instruct */
     "<|im_system|>system<|im_middle|>You are a helpful assistant<|im_end|><|im_user|>user<|im_middle|>Hello"
     "<|im_end|><|im_assistant|>assistant<|im_middle|>Hi there<|im_end|><|im_user|>user<|im_middle|>Who are you"
     "<|im_end|><|im_assistant|>assistant<|im_middle|>   I am an assistant   <|im_end|><|im_user|>user<|im_middle|>"
     "Another question<|im_end|><|im_assistant|>assistant<|im_middle|>"},
};

START_TEST(test_format_each_template)
{
    const char *eos = formats[_i].t == CHAT_TMPL_TULU ? "<|endoftext|>" : NULL;
    expect_format(formats[_i].t, conv, N_CONV, true, eos, formats[_i].want);
}
END_TEST

START_TEST(test_format_every_template_is_tested)
{
    for (int t = CHAT_TMPL_UNKNOWN + 1; t < CHAT_TMPL_COUNT_; t++) {
        bool found = false;
        for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
            found |= formats[i].t == (chat_tmpl_t)t;
        ck_assert_msg(found, "template %s has no format test", chat_tmpl_name((chat_tmpl_t)t));
    }
}
END_TEST

START_TEST(test_format_without_generation_prompt)
{
    static const chat_msg_t two[] = {{"user", "Hi"}, {"assistant", "Yo"}};
    expect_format(CHAT_TMPL_CHATML, two, 2, false, NULL,
                  "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nYo<|im_end|>\n");
    /* Tulu's Jinja: no newline after the last assistant turn */
    expect_format(CHAT_TMPL_TULU, two, 2, false, "<|endoftext|>", "<|user|>\nHi\n<|assistant|>\nYo<|endoftext|>");
    expect_format(CHAT_TMPL_TULU, two, 2, false, NULL, "<|user|>\nHi\n<|assistant|>\nYo</s>");
    expect_format(CHAT_TMPL_LLAMA3, two, 2, false, NULL,
                  "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant"
                  "<|end_header_id|>\n\nYo<|eot_id|>");
}
END_TEST

START_TEST(test_format_edge_cases)
{
    expect_format(CHAT_TMPL_CHATML, NULL, 0, true, NULL, "<|im_start|>assistant\n");
    expect_format(CHAT_TMPL_CHATML, NULL, 0, false, NULL, "");
    static const chat_msg_t odd[] = {{"user", ""}, {"user", "caf\xc3\xa9 \xf0\x9f\x98\x80"}};
    expect_format(CHAT_TMPL_CHATML, odd, 2, true, NULL,
                  "<|im_start|>user\n<|im_end|>\n<|im_start|>user\ncaf\xc3\xa9 \xf0\x9f\x98\x80<|im_end|>\n"
                  "<|im_start|>assistant\n");
    /* all-space content trims to nothing */
    static const chat_msg_t sp[] = {{"user", " \t\n "}};
    expect_format(CHAT_TMPL_LLAMA3, sp, 1, true, NULL,
                  "<|start_header_id|>user<|end_header_id|>\n\n<|eot_id|><|start_header_id|>assistant"
                  "<|end_header_id|>\n\n");
    char *out = (char *)1;
    size_t len = 7;
    guild_err_t err = {{0}};
    ck_assert_int_eq(chat_format(CHAT_TMPL_UNKNOWN, conv, N_CONV, true, NULL, &out, &len, &err), -1);
    ck_assert_ptr_null(out);
    ck_assert_msg(strstr(err.msg, "chatml") != NULL, "%s", err.msg);
}
END_TEST

/* ---- harmony (gpt-oss) ------------------------------------------------------------------------------- */

#define OSS_SYSTEM(effort)                                                                                      \
    "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: " \
    "2024-06\nCurrent date: 2025-06-28\n\nReasoning: " effort "\n\n# Valid channels: analysis, commentary, "   \
    "final. Channel must be included for every message.<|end|>"

START_TEST(test_harmony_format)
{
    /* no system message: no developer message; the last assistant turn without a generation prompt returns */
    static const chat_msg_t two[] = {{"user", "2+2?"}, {"assistant", "4"}};
    expect_format(CHAT_TMPL_GPT_OSS, two, 2, false, NULL,
                  OSS_SYSTEM("medium") "<|start|>user<|message|>2+2?<|end|><|start|>assistant<|channel|>final"
                                      "<|message|>4<|return|>");
    /* the effort; a developer message as the system one; an empty one writes none */
    static const chat_msg_t dev[] = {{"developer", "Be brief."}, {"user", "Hi"}};
    const chat_opts_t high = {"2025-06-28", "high"};
    char *out = NULL;
    size_t len = 0;
    guild_err_t err = {{0}};
    ck_assert(chat_format_opts(CHAT_TMPL_GPT_OSS, dev, 2, true, NULL, &high, &out, &len, &err) == 0);
    ck_assert_str_eq(out, OSS_SYSTEM("high") "<|start|>developer<|message|># Instructions\n\nBe brief.\n\n<|end|>"
                          "<|start|>user<|message|>Hi<|end|><|start|>assistant");
    free(out);
    static const chat_msg_t empty_sys[] = {{"system", ""}, {"user", "Hi"}};
    expect_format(CHAT_TMPL_GPT_OSS, empty_sys, 2, true, NULL,
                  OSS_SYSTEM("medium") "<|start|>user<|message|>Hi<|end|><|start|>assistant");
    /* a bad effort is refused; no date: today's, as the template's strftime_now */
    const chat_opts_t bad = {NULL, "max"};
    ck_assert_int_eq(chat_format_opts(CHAT_TMPL_GPT_OSS, dev, 2, true, NULL, &bad, &out, &len, &err), -1);
    ck_assert_msg(strstr(err.msg, "low, medium or high") != NULL, "%s", err.msg);
    ck_assert(chat_format(CHAT_TMPL_GPT_OSS, dev, 2, true, NULL, &out, &len, &err) == 0);
    const char *d = strstr(out, "Current date: ");
    ck_assert_ptr_nonnull(d);
    d += 14;
    for (int i = 0; i < 10; i++)
        ck_assert_msg(i == 4 || i == 7 ? d[i] == '-' : d[i] >= '0' && d[i] <= '9', "date %.10s", d);
    ck_assert(d[10] == '\n');
    free(out);
}
END_TEST

typedef struct parts {
    char content[512], reasoning[512];
    size_t nc, nr;
    int calls;
} parts_t;

static void collect(void *ctx, chat_part_t part, const char *text, size_t len)
{
    parts_t *p = ctx;
    ck_assert_uint_gt(len, 0);
    char *dst = part == CHAT_PART_REASONING ? p->reasoning : p->content;
    size_t *n = part == CHAT_PART_REASONING ? &p->nr : &p->nc;
    ck_assert_uint_lt(*n + len, sizeof p->content);
    memcpy(dst + *n, text, len);
    *n += len;
    dst[*n] = '\0';
    p->calls++;
}

/* Parses reply in pieces of `step` bytes (0: whole), then the end. */
static parts_t parse_reply(const char *reply, size_t step)
{
    parts_t p;
    memset(&p, 0, sizeof p);
    chat_harmony_parser_t h;
    chat_harmony_parser_init(&h);
    const size_t n = strlen(reply);
    if (!step)
        step = n ? n : 1;
    for (size_t i = 0; i < n; i += step)
        chat_harmony_parse(&h, reply + i, n - i < step ? n - i : step, false, collect, &p);
    chat_harmony_parse(&h, "", 0, true, collect, &p);
    return p;
}

START_TEST(test_harmony_parse)
{
    static const struct {
        const char *reply, *content, *reasoning;
    } cases[] = {
        /* the usual reply: analysis, then the final answer (generation stopped at <|return|>) */
        {"<|channel|>analysis<|message|>User asks 2+2. Easy.<|end|><|start|>assistant<|channel|>final<|message|>"
         "2 + 2 = 4.", "2 + 2 = 4.", "User asks 2+2. Easy."},
        /* the end tokens when they come through; a final answer only */
        {"<|channel|>final<|message|>Hi!<|return|>", "Hi!", ""},
        {"<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final<|message|>ok<|call|>", "ok",
         "think"},
        /* commentary (a preamble) is content; a recipient and <|constrain|> stay in the header */
        {"<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\": 1}<|call|>", "{\"a\": 1}", ""},
        /* a model that does not write harmony: everything is content */
        {"Just text, no format.", "Just text, no format.", ""},
        /* '<' that begins no marker is text, also at the very end */
        {"<|channel|>final<|message|>a < b, x <|y|> z <|", "a < b, x <|y|> z <|", ""},
        {"<|channel|>analysis<|message|>1 <| 2", "", "1 <| 2"},
        /* a reply cut after a message's header: the empty message shows nothing */
        {"<|channel|>analysis<|message|>x<|end|><|start|>assistant", "", "x"},
        {"<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>final", "", "x"},
        /* several analysis messages */
        {"<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>analysis<|message|>b<|end|>"
         "<|start|>assistant<|channel|>final<|message|>c", "c", "ab"},
        /* a message's header right after its text (no <|end|><|start|>): still a header, never text */
        {"<|channel|>analysis<|message|>a<|channel|>final<|message|>b", "b", "a"},
        {"<|channel|>final<|message|>x<|message|>y<|constrain|>", "xy", ""},
        /* plain text with '<' in it, shorter than a header may be, then the end: all content */
        {"a < b", "a < b", ""},
        {"x <|end", "x <|end", ""},
        /* a reply cut inside its first header: nothing to show, not the channel's name */
        {"<|channel|>analysis", "", ""},
        {"<|channel|>anal", "", ""},
        /* UTF-8 passes through untouched */
        {"<|channel|>final<|message|>caf\xc3\xa9 \xf0\x9f\x98\x80", "caf\xc3\xa9 \xf0\x9f\x98\x80", ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (size_t step = 0; step <= 7; step++) { /* whole, then pieces of 1..7 bytes: markers split anywhere */
            const parts_t p = parse_reply(cases[i].reply, step);
            ck_assert_msg(!strcmp(p.content, cases[i].content) && !strcmp(p.reasoning, cases[i].reasoning),
                          "case %zu, pieces of %zu: content [%s] reasoning [%s], want [%s] [%s]", i, step, p.content,
                          p.reasoning, cases[i].content, cases[i].reasoning);
        }
    /* a header too long to be one is content, given out before the reply ends */
    char longtext[400];
    memset(longtext, 'x', sizeof longtext - 1);
    longtext[sizeof longtext - 1] = '\0';
    chat_harmony_parser_t h;
    chat_harmony_parser_init(&h);
    parts_t p;
    memset(&p, 0, sizeof p);
    chat_harmony_parse(&h, longtext, strlen(longtext), false, collect, &p);
    ck_assert_uint_eq(p.nc, strlen(longtext));
    /* ... also one with a marker in it, without the marker */
    char marked[400];
    snprintf(marked, sizeof marked, "<|channel|>%s", longtext + 100);
    chat_harmony_parser_init(&h);
    memset(&p, 0, sizeof p);
    chat_harmony_parse(&h, marked, strlen(marked), false, collect, &p);
    ck_assert_uint_eq(p.nc, strlen(longtext + 100));
    ck_assert_ptr_null(strstr(p.content, "<|"));
    /* streaming: the reasoning is given out before the answer begins */
    chat_harmony_parser_init(&h);
    memset(&p, 0, sizeof p);
    static const char part[] = "<|channel|>analysis<|message|>Hmm";
    chat_harmony_parse(&h, part, sizeof part - 1, false, collect, &p);
    ck_assert_str_eq(p.reasoning, "Hmm");
    ck_assert_uint_eq(p.nc, 0);
}
END_TEST

/* ---- detection ---------------------------------------------------------------------------------------- */

static const struct {
    const char *jinja;
    chat_tmpl_t want;
} detections[] = {
    /* guild-mkmodel's template (the demo model's) */
    {"{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' "
     "+ '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
     CHAT_TMPL_CHATML},
    /* Qwen3 (abridged) */
    {"{%- if tools %}{{- '<|im_start|>system\\n' }}{%- endif %}{%- for message in messages %}{%- if "
     "message.role == \"user\" %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' "
     "}}{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- if "
     "enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
     "{%- endif %}",
     CHAT_TMPL_CHATML},
    /* Qwen3-Next-80B-A3B-Instruct (abridged): tools in <tools>, tool responses as user turns */
    {"{%- if tools %}{{- '<|im_start|>system\\n' }}{{- \"# Tools\\n\\n<tools>\" }}{%- for tool in tools %}{{- tool "
     "| tojson }}{%- endfor %}{{- \"\\n</tools><|im_end|>\\n\" }}{%- endif %}{%- for message in messages %}{%- if "
     "message.role == \"tool\" %}{{- '<|im_start|>user\\n<tool_response>\\n' + message.content + "
     "'\\n</tool_response><|im_end|>\\n' }}{%- else %}{{- '<|im_start|>' + message.role + '\\n' + message.content + "
     "'<|im_end|>' + '\\n' }}{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' "
     "}}{%- endif %}",
     CHAT_TMPL_CHATML},
    /* Qwen3.5 (abridged): vision placeholders and the thinking switch beside ChatML turns */
    {"{%- set image_count = namespace(value=0) %}{%- for message in messages %}{%- if message.content is string %}"
     "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- else %}{%- for item in "
     "message.content %}{%- if item.type == 'image' %}{{- '<|vision_start|><|image_pad|><|vision_end|>' }}{%- endif "
     "%}{%- endfor %}{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- if "
     "enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- else %}"
     "{{- '<think>\\n' }}{%- endif %}{%- endif %}",
     CHAT_TMPL_CHATML},
    /* Mixtral-8x7B-Instruct */
    {"{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
     "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
     "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] "
     "== 'assistant' %}{{ message['content'] + eos_token}}{% endif %}{% endfor %}",
     CHAT_TMPL_LLAMA2},
    {"{% if message['role'] == 'system' %}{{ '<<SYS>>\\n' + content + '\\n<</SYS>>\\n\\n' }}{% endif %}"
     "{{ '[INST] ' + content + ' [/INST]' }}",
     CHAT_TMPL_LLAMA2_SYS},
    {"{{- bos_token + '[INST] ' + messages[idx]['content'] + ' [/INST]' -}}{{- '[INST] <<SYS>>\\n' -}}",
     CHAT_TMPL_LLAMA2_SYS_BOS},
    {"{{ '[INST] ' + content.strip() + ' [/INST]' }}{{ '<<SYS>>\\n' }}", CHAT_TMPL_LLAMA2_SYS_STRIP},
    {"{{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}", CHAT_TMPL_MISTRAL_V1},
    {"{{- \"[AVAILABLE_TOOLS] [\" }}{{- \"[INST] \" + message[\"content\"] + \"[/INST]\" }}", CHAT_TMPL_MISTRAL_V3},
    {"{{- \"[AVAILABLE_TOOLS][\" }}{{- \"[INST]\" + message[\"content\"] + \"[/INST]\" }}",
     CHAT_TMPL_MISTRAL_V3_TEKKEN},
    {"{{ '[SYSTEM_PROMPT] ' + message['content'] + '[/SYSTEM_PROMPT]' }}{{ '[INST] ' + message['content'] + "
     "'[/INST]' }}",
     CHAT_TMPL_MISTRAL_V7},
    {"{{'<|' + message['role'] + '|>' + '\\n' + message['content'] + '<|end|>\\n' }}{{ '<|assistant|>\\n' }}",
     CHAT_TMPL_PHI3},
    {"{{ '<|user|>\\n' + message['content'] + '<|endoftext|>' }}", CHAT_TMPL_ZEPHYR},
    {"{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}", CHAT_TMPL_GEMMA},
    {"{{ '<|START_OF_TURN_TOKEN|><|USER_TOKEN|>' + content.strip() + '<|END_OF_TURN_TOKEN|>' }}",
     CHAT_TMPL_COMMAND_R},
    {"{{'### Instruction:\\n' + message['content'] + '\\n'}}{{'### Response:\\n' + message['content'] + "
     "'\\n<|EOT|>\\n'}}",
     CHAT_TMPL_DEEPSEEK},
    /* DeepSeek-V2-Lite-Chat */
    {"{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}{{ bos_token }}"
     "{% for message in messages %}{% if message['role'] == 'user' %}{{ 'User: ' + message['content'] + '\\n\\n' }}"
     "{% elif message['role'] == 'assistant' %}{{ 'Assistant: ' + message['content'] + eos_token }}{% elif "
     "message['role'] == 'system' %}{{ message['content'] + '\\n\\n' }}{% endif %}{% endfor %}{% if "
     "add_generation_prompt %}{{ 'Assistant:' }}{% endif %}",
     CHAT_TMPL_DEEPSEEK2},
    /* DeepSeek-V3 (abridged) */
    {"{{'" DS_USER "' + message['content']}}{{'" DS_ASSISTANT "' + message['content'] + '" DS_EOS "'}}",
     CHAT_TMPL_DEEPSEEK3},
    {"{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | "
     "trim + '<|eot_id|>' %}",
     CHAT_TMPL_LLAMA3},
    {"{{- '<|header_start|>' + message['role'] + '<|header_end|>\\n\\n' }}", CHAT_TMPL_LLAMA4},
    /* OLMoE-1B-7B-0924-Instruct / OLMo-2 / Tulu */
    {"{{ bos_token }}{% for message in messages %}{% if message['role'] == 'system' %}{{ '<|system|>\\n' + "
     "message['content'] + '\\n' }}{% elif message['role'] == 'user' %}{{ '<|user|>\\n' + message['content'] + "
     "'\\n' }}{% elif message['role'] == 'assistant' %}{% if not loop.last %}{{ '<|assistant|>\\n'  + "
     "message['content'] + eos_token + '\\n' }}{% else %}{{ '<|assistant|>\\n'  + message['content'] + eos_token }}"
     "{% endif %}{% endif %}{% if loop.last and add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
     "{% endfor %}",
     CHAT_TMPL_TULU},
    {"<|start|>system<|message|>{{ model_identity }}<|end|>{%- if add_generation_prompt -%}<|start|>assistant"
     "{%- endif -%}<|channel|>analysis",
     CHAT_TMPL_GPT_OSS},
    {"{%- if message['role'] == 'user' -%}<|im_user|>user<|im_middle|>{%- elif message['role'] == 'assistant' -%}"
     "<|im_assistant|>assistant<|im_middle|>{%- endif -%}{%- if add_generation_prompt -%}"
     "<|im_assistant|>assistant<|im_middle|>{%- endif -%}",
     CHAT_TMPL_KIMI_K2},
    /* recognised by llama.cpp but not formatted here, and nonsense */
    {"{{'<|im_start|>system<|im_sep|>' + message['content'] + '<|im_end|>'}}", CHAT_TMPL_UNKNOWN},
    {"[gMASK]<sop>{% for item in messages %}<|{{ item['role'] }}|>{% endfor %}", CHAT_TMPL_UNKNOWN},
    {"{{ '<|user|>\\n' + message['content'] }}{{ '<|assistant|>\\n' }}", CHAT_TMPL_UNKNOWN},
    {"{% for m in messages %}{{ m.content }}{% endfor %}", CHAT_TMPL_UNKNOWN},
    {"", CHAT_TMPL_UNKNOWN},
};

START_TEST(test_detect)
{
    chat_tmpl_t got = chat_tmpl_detect(detections[_i].jinja);
    ck_assert_msg(got == detections[_i].want, "case %d: detected %s, expected %s", _i, chat_tmpl_name(got),
                  chat_tmpl_name(detections[_i].want));
}
END_TEST

START_TEST(test_names)
{
    for (int t = CHAT_TMPL_UNKNOWN + 1; t < CHAT_TMPL_COUNT_; t++) {
        const char *n = chat_tmpl_name((chat_tmpl_t)t);
        ck_assert_int_eq(chat_tmpl_from_name(n), t);
        ck_assert_int_eq(chat_tmpl_detect(n), t); /* a name is accepted where a template is */
        ck_assert_ptr_nonnull(strstr(chat_tmpl_names(), n));
    }
    ck_assert_int_eq(chat_tmpl_from_name("unknown"), CHAT_TMPL_UNKNOWN);
    ck_assert_int_eq(chat_tmpl_from_name("ChatML"), CHAT_TMPL_UNKNOWN);
    ck_assert_str_eq(chat_tmpl_name(CHAT_TMPL_COUNT_), "unknown");
}
END_TEST

static Suite *chat_suite(void)
{
    Suite *s = suite_create("chat");
    TCase *tc = tcase_create("format");
    tcase_add_loop_test(tc, test_format_each_template, 0, (int)(sizeof formats / sizeof formats[0]));
    tcase_add_test(tc, test_format_every_template_is_tested);
    tcase_add_test(tc, test_format_without_generation_prompt);
    tcase_add_test(tc, test_format_edge_cases);
    tcase_add_test(tc, test_harmony_format);
    tcase_add_test(tc, test_harmony_parse);
    suite_add_tcase(s, tc);
    tc = tcase_create("detect");
    tcase_add_loop_test(tc, test_detect, 0, (int)(sizeof detections / sizeof detections[0]));
    tcase_add_test(tc, test_names);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(chat_suite());
}
