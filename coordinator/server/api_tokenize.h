/* coordinator/server/api_tokenize.h — POST /tokenize and POST /detokenize, in llama.cpp's server's shapes:
 *
 *   /tokenize    {"content": "text", "add_special": false, "parse_special": true, "with_pieces": false}
 *                -> {"tokens": [ids]}, or with with_pieces {"tokens": [{"id", "piece"}]} where a piece is a
 *                   string when its bytes are valid UTF-8, else an array of its bytes
 *   /detokenize  {"tokens": [ids]} -> {"content": "text"} (special tokens as their text; bytes that are not
 *                   valid UTF-8 become U+FFFD)
 *
 * add_special: BOS/EOS where the vocabulary asks (as a completion's prompt is tokenized); parse_special:
 * control-token texts in the content become those tokens. A malformed body, a field of the wrong type or an
 * id outside [0, n_vocab) gets 400 with OpenAI's error object naming the field. */
#ifndef GUILD_SERVER_API_TOKENIZE_H
#define GUILD_SERVER_API_TOKENIZE_H

#include <stdint.h>

#include "coordinator/server/http.h"
#include "core/tokenizer/tok.h"

void api_tokenize(const tok_t *tok, http_req_t *req);
void api_detokenize(const tok_t *tok, int32_t n_vocab, http_req_t *req);

#endif
