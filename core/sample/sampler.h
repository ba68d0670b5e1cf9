/* core/sample/sampler.h — choosing the next token from a row of logits.
 *
 * The chain, in llama.cpp's default order:
 *   1. repetition penalty on every distinct token among the last repeat_last_n accepted tokens
 *      (logit > 0: logit / penalty, else logit * penalty);
 *   2. temp <= 0: greedy, the largest logit (lowest id on ties); done;
 *   3. candidates sorted by logit, descending, ties by ascending id (a total order: same result everywhere);
 *   4. top-k: keep the k best;
 *   5. top-p: keep the shortest prefix whose probability (softmax at temperature 1) reaches top_p;
 *   6. min-p: keep tokens whose probability is >= min_p times the best one's;
 *   7. temperature: softmax of logit / temp over the survivors, one draw from the sampler's own PRNG.
 * Probabilities are computed in double. For a given seed, parameters and sequence of logits the tokens are the
 * same on every run and machine. NaN logits count as -infinity.
 */
#ifndef GUILD_SAMPLE_SAMPLER_H
#define GUILD_SAMPLE_SAMPLER_H

#include <stdint.h>

#include "core/util/err.h"

typedef struct sample_params {
    float temp;            /* <= 0: greedy */
    int32_t top_k;         /* <= 0 or >= n_vocab: off */
    float top_p;           /* in (0, 1]; 1: off */
    float min_p;           /* <= 0: off */
    float repeat_penalty;  /* 1: off */
    int32_t repeat_last_n; /* tokens of history the penalty looks at; 0: off */
    uint64_t seed;
} sample_params_t;

typedef struct sampler sampler_t;

/* Guild's defaults: temp 0.8, top_k 40, top_p 0.95, min_p 0.05, repeat_penalty 1.0, repeat_last_n 64, seed 0. */
void sample_params_default(sample_params_t *p);

/* Checks parameters (finite, in range) and allocates the scratch for n_vocab candidates. Fails with a message
 * naming the bad parameter. */
int sampler_new(sampler_t **out, const sample_params_t *p, int32_t n_vocab, guild_err_t *err);

/* Frees the sampler; sets *s to NULL. NULL-safe. */
void sampler_destroy(sampler_t **s);

/* Appends a token to the history the repetition penalty looks at (prompt tokens and generated ones). */
void sampler_accept(sampler_t *s, int32_t token);

/* Chooses a token from logits[n_vocab] (not modified). Advances the PRNG only when it draws (temp > 0). */
int32_t sampler_sample(sampler_t *s, const float *logits);

/* The distribution sampler_sample draws from for logits (after the penalty, top-k, top-p, min-p and the
 * temperature), into dist[n_vocab], summing to 1; greedy: 1 at the token it would choose. Draws nothing (the
 * distributions of speculative sampling, coordinator/spec.h). */
void sampler_dist(sampler_t *s, const float *logits, double *dist);

/* The vocabulary size it was made for. */
int32_t sampler_n_vocab(const sampler_t *s);

/* The parameters it was made with. */
const sample_params_t *sampler_params(const sampler_t *s);

/* The next number in [0, 1) of the sampler's PRNG (speculative sampling's acceptance test). */
double sampler_uniform(sampler_t *s);

/* One draw, with the sampler's PRNG, from the weights w[n_vocab] (not normalised; <= 0 is never drawn): the
 * token id, or -1 when no weight is positive. */
int32_t sampler_draw(sampler_t *s, const double *w);

/* The lowest token id whose logit was NaN or infinite in the last sampler_sample call (noted in the pass that
 * reads them anyway), or -1 when all were finite. */
int32_t sampler_nonfinite(const sampler_t *s);

/* Forgets the history and reseeds the PRNG with the parameters' seed. */
void sampler_reset(sampler_t *s);

#endif
