/* tools/mkmodel/vocab.h — the built-in byte-level BPE vocabulary of guild-mkmodel.
 *
 * GPT-2 style: 256 byte tokens (ids 0..255 = byte values, spelled with GPT-2's byte-to-unicode mapping), then
 * one token per merge learned deterministically from mkmodel_corpus (English prose), then the control tokens
 * <|endoftext|>, <|im_start|>, <|im_end|>, then "[PADn]" tokens of type UNUSED up to the requested size (as
 * llama.cpp's converter pads). Merges are learned on chunks split the way the "qwen2" pre-tokenizer splits
 * ASCII text, so they apply to what a tokenizer with tokenizer.ggml.pre = "qwen2" feeds its BPE.
 */
#ifndef GUILD_MKMODEL_VOCAB_H
#define GUILD_MKMODEL_VOCAB_H

#include <stdint.h>

#include "core/util/err.h"

/* Token types as GGUF stores them in tokenizer.ggml.token_type (llama.cpp's llama_token_type). */
enum {
    MKMODEL_TOKEN_NORMAL = 1,
    MKMODEL_TOKEN_CONTROL = 3,
    MKMODEL_TOKEN_UNUSED = 5,
};

/* 256 bytes + 3 control tokens: the smallest vocabulary that can exist. */
#define MKMODEL_VOCAB_MIN 259

extern const char mkmodel_corpus[];

typedef struct mkmodel_vocab mkmodel_vocab_t;

/* Builds the vocabulary with exactly n_vocab tokens (>= MKMODEL_VOCAB_MIN): as many learned merges as fit, the
 * control tokens, then padding. Fails (message in err) on a size below the minimum or out of memory. */
int mkmodel_vocab_new(mkmodel_vocab_t **out, int64_t n_vocab, guild_err_t *err);

/* Frees; sets *v to NULL. NULL-safe. */
void mkmodel_vocab_destroy(mkmodel_vocab_t **v);

int64_t mkmodel_vocab_n_tokens(const mkmodel_vocab_t *v);
/* Text of token id as GGUF stores it (byte-mapped UTF-8, NUL-terminated); lives as long as v. */
const char *mkmodel_vocab_token(const mkmodel_vocab_t *v, int64_t id);
int32_t mkmodel_vocab_token_type(const mkmodel_vocab_t *v, int64_t id);
int64_t mkmodel_vocab_n_merges(const mkmodel_vocab_t *v);
/* Merge i (rank order) as "left right" in the mapped spelling; lives as long as v. */
const char *mkmodel_vocab_merge(const mkmodel_vocab_t *v, int64_t i);
/* Ids of <|endoftext|> (bos, padding), <|im_start|> and <|im_end|> (eos, as Qwen's chat models use). */
int64_t mkmodel_vocab_endoftext(const mkmodel_vocab_t *v);
int64_t mkmodel_vocab_im_start(const mkmodel_vocab_t *v);
int64_t mkmodel_vocab_im_end(const mkmodel_vocab_t *v);

/* Number of merges the corpus yields when nothing limits them (for --help and tests). */
int64_t mkmodel_vocab_max_merges(void);

#endif
