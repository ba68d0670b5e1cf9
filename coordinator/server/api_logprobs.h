/* coordinator/server/api_logprobs.h — generated tokens' log probabilities (coordinator/server/logprobs.h) in
 * OpenAI's two shapes, as a choice's "logprobs" (whole replies and streamed chunks alike):
 *
 *   completions (legacy):  {"tokens": [text], "token_logprobs": [lp], "top_logprobs": [{text: lp, ...}],
 *                           "text_offset": [byte offset of the token in the generated text]}
 *   chat:                  {"content": [{"token": text, "logprob": lp, "bytes": [b...], "top_logprobs":
 *                           [{"token", "logprob", "bytes"}]}], "refusal": null}
 *
 * A token's text is its piece with special tokens rendered, as valid UTF-8 (a piece that ends inside a character
 * has U+FFFD there; "bytes" keeps the exact bytes). Each builder returns a new reference, NULL when out of
 * memory. */
#ifndef GUILD_SERVER_API_LOGPROBS_H
#define GUILD_SERVER_API_LOGPROBS_H

#include <jansson.h>
#include <stddef.h>

#include "coordinator/server/logprobs.h"
#include "core/tokenizer/tok.h"

/* The legacy object for entries v[0..n); *offset is the first one's text offset on entry and past the last one
 * on return (the generated text's pieces, special tokens giving none). */
json_t *apilp_completion(const tok_t *tok, const logprob_entry_t *v, size_t n, size_t *offset);

/* The chat object for entries v[0..n). */
json_t *apilp_chat(const tok_t *tok, const logprob_entry_t *v, size_t n);

#endif
