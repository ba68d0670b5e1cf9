/* coordinator/server/logprobs.h — the log probabilities a completion reports: for a row of logits (the row the
 * sampler chose a token from, before its penalty and temperature: the model's own distribution), the chosen
 * token's log-softmax and the most likely tokens'.
 *
 * The log-sum-exp is taken in double over the whole row (its largest logit subtracted first) and the results are
 * stored as float. NaN logits count as -infinity, as the sampler counts them; a log probability of -infinity is
 * reported as LOGPROB_FLOOR (JSON has no infinity; OpenAI uses the same value for "very unlikely"). */
#ifndef GUILD_SERVER_LOGPROBS_H
#define GUILD_SERVER_LOGPROBS_H

#include <stdint.h>

#define LOGPROBS_MAX_TOP 20
#define LOGPROB_FLOOR (-9999.0f)

typedef struct logprob_alt {
    int32_t id;
    float logprob;
} logprob_alt_t;

/* One generated token. */
typedef struct logprob_entry {
    int32_t id;                          /* the token chosen */
    float logprob;                       /* its log probability, <= 0 */
    int32_t n_top;                       /* top[0..n_top): the most likely tokens, by log probability descending,
                                            ties by ascending id (the sampler's order) */
    logprob_alt_t top[LOGPROBS_MAX_TOP];
} logprob_entry_t;

/* The entry of token id (in [0, n_vocab)) chosen from logits[n_vocab], with the n_top (0..LOGPROBS_MAX_TOP, at
 * most n_vocab) most likely tokens. */
void logprobs_compute(const float *logits, int32_t n_vocab, int32_t id, int32_t n_top, logprob_entry_t *out);

#endif
