/* core/chat/harmony.h — OpenAI's harmony format, gpt-oss's chat: the conversation as the model's own template
 * writes it (chat_format's "gpt-oss"), and the model's reply split into its channels.
 *
 * A harmony message is <|start|>ROLE<|channel|>CHANNEL<|message|>TEXT<|end|>; the system message carries the
 * model's identity, the date, the reasoning effort and the valid channels, a "system" message of the
 * conversation becomes the developer's instructions, earlier assistant turns keep only their final channel (the
 * chain of thought is dropped, as the template does). The prompt ends with "<|start|>assistant", and the model
 * then writes messages of its own:
 *
 *     <|channel|>analysis<|message|>REASONING<|end|><|start|>assistant<|channel|>final<|message|>ANSWER<|return|>
 *
 * chat_harmony_parse takes that text as it comes (pieces of any size) and hands each channel's text on: the
 * analysis channel as reasoning, the final channel (and commentary, and text outside any message) as content,
 * the markers themselves to neither (a <|channel|> or <|constrain|> right after a message's text opens a new
 * header; a <|message|> outside a header is dropped). <|return|> and <|call|> end the generation (the tokenizer's end-of-
 * generation tokens), so they seldom reach the parser; <|end|>, <|start|>, <|channel|>, <|message|> and
 * <|constrain|> are rendered as text by the tokenizer (core/tokenizer/tok.c) for this purpose. */
#ifndef GUILD_CHAT_HARMONY_H
#define GUILD_CHAT_HARMONY_H

#include <stdbool.h>
#include <stddef.h>

#include "core/chat/chat.h"
#include "core/util/err.h"

/* The conversation msgs[0..n) in harmony (gpt-oss's Jinja template, without tools), malloc'ed in *out (NUL-
 * terminated, *out_len without it). o NULL: today's date (local time), reasoning effort "medium". -1 with a
 * message for a reasoning effort other than low, medium, high, or out of memory. */
int chat_harmony_format(const chat_msg_t *msgs, size_t n, bool add_generation_prompt, const chat_opts_t *o,
                        char **out, size_t *out_len, guild_err_t *err);

/* Where a piece of the model's reply goes. */
typedef enum chat_part {
    CHAT_PART_CONTENT,   /* the answer: the final channel, commentary, text outside the format */
    CHAT_PART_REASONING, /* the analysis channel */
} chat_part_t;

typedef void (*chat_part_fn)(void *ctx, chat_part_t part, const char *text, size_t len);

#define CHAT_HARMONY_HEADER_MAX 256 /* a longer header is not one: its text becomes content */

/* The parser's state between pieces; init with chat_harmony_parser_init. */
typedef struct chat_harmony_parser {
    int state;                           /* header, body, between messages */
    chat_part_t part;                    /* of the message whose body is read */
    char header[CHAT_HARMONY_HEADER_MAX]; /* the current header's text (role, <|channel|>NAME, recipient, ...) */
    size_t header_len;
    bool role;                           /* the header came after <|start|> (it begins with a role), not the
                                            reply's first one, which the prompt opened */
    char hold[16];                       /* the end of the last piece, when it may begin a marker */
    size_t hold_len;
} chat_harmony_parser_t;

/* Starts a reply: the text that follows "<|start|>assistant" (a message header). */
void chat_harmony_parser_init(chat_harmony_parser_t *p);

/* Feeds text[0..len) of the reply: fn gets each channel's text as soon as it is known (never a marker, nor the
 * part of a piece that may begin one: that waits for the next piece). end: the reply is complete; what was held
 * is given out. fn may be called several times per piece, never with len 0. */
void chat_harmony_parse(chat_harmony_parser_t *p, const char *text, size_t len, bool end, chat_part_fn fn,
                        void *ctx);

#endif
