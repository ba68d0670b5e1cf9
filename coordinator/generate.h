/* coordinator/generate.h — the generation loop of `guild run` and `guild serve`: prefill the prompt in batches,
 * then sample and decode one token per step, streaming the text as it is produced.
 *
 * Stops after n_predict tokens, at an end-of-generation token (EOS/EOT..., not printed), when the context is
 * full, or when the caller's on_text callback says so (the server: a stop string, a client gone). The logits
 * of every sampled token's row can be written out (row 0: the prompt's last position), and the sampled ids
 * collected, for tests and the reference comparison.
 *
 * With a drafter (coordinator/spec.h) the decode steps are verify steps: the last sampled token and the drafts
 * in one forward call; greedy ids, the logits rows written and the KV cache's contents at the end are those of
 * the plain loop. */
#ifndef GUILD_COORDINATOR_GENERATE_H
#define GUILD_COORDINATOR_GENERATE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "coordinator/spec.h"
#include "core/sample/sampler.h"
#include "core/tokenizer/tok.h"
#include "core/util/err.h"
#include "gpu-worker/dense/backend.h"

typedef enum gen_stop {
    GEN_STOP_LENGTH,  /* n_predict tokens were produced */
    GEN_STOP_EOG,     /* the model produced an end-of-generation token */
    GEN_STOP_CONTEXT, /* the KV cache is full */
    GEN_STOP_CALLER,  /* on_text returned non-zero */
} gen_stop_t;

typedef struct gen_options {
    int32_t n_predict; /* tokens to sample (< 0: no limit but the context) */
    int32_t n_batch;   /* prompt tokens per forward call; <= the backend's n_batch */
    int32_t n_ctx;     /* the backend's KV capacity */
    int32_t n_vocab;
    FILE *text_out;    /* generated text, streamed (NULL: none) */
    FILE *logits_out;  /* one row of n_vocab float32 per sampled token (NULL: none) */
    bool ignore_eog;   /* keep going after end-of-generation tokens (benchmarks) */
    bool check_finite; /* a NaN or infinite logit fails the loop (the sampler notes them: sampler_nonfinite) */
    int32_t n_past;    /* prompt[0..n_past) is already in the backend's KV cache (prefix reuse); < n_prompt */
    /* Called after each sampled token (the end-of-generation one excepted) with the text it completes, which
     * may be empty (a token can end inside a UTF-8 sequence), with "" between prompt batches, and once more
     * with what is left at the end. A non-zero return stops the loop (GEN_STOP_CALLER; ignored at the end).
     * NULL: none. */
    int (*on_text)(void *ctx, const char *text, size_t len);
    void *on_text_ctx;
    /* Called with each sampled token and the row of n_vocab logits it was chosen from, before on_text gets the
     * token's text (an end-of-generation token that ends the loop gets no on_text call). NULL: none. */
    void (*on_token)(void *ctx, const float *logits, int32_t id);
    void *on_token_ctx;
    spec_drafter_t *drafter; /* speculative decoding (borrowed); NULL: one token per decode step */
    int32_t spec_max;        /* most drafts per verify step (>= 1 with a drafter; also bounded by n_batch - 1,
                                the context and n_predict) */
} gen_options_t;

typedef struct gen_result {
    int32_t n_prompt;     /* prompt tokens processed */
    int32_t n_sampled;    /* tokens sampled (the EOG one included) */
    int32_t *ids;         /* [n_sampled] the sampled ids (malloc'ed; caller frees) */
    int32_t n_decoded;    /* sampled tokens fed back after the prompt (plain decode: its single-token forward
                             calls); the cache holds the prompt and ids[0..n_decoded) at the end */
    double prefill_s;     /* wall time of the prompt's forward calls */
    double decode_s;      /* wall time of the decode steps (forward + sampling + output) */
    gen_stop_t stop;
    spec_stats_t spec;    /* with a drafter */
} gen_result_t;

/* Runs the loop on a backend whose cache holds exactly prompt[0..opt->n_past) (empty when n_past is 0). The
 * prompt (n_prompt >= 1, fitting the context) is given to the sampler's history too. -1 with a message on a
 * backend failure, a write error or (check_finite) a logit that is not finite; *res holds what was done until
 * then. */
int gen_run(backend_t *be, sampler_t *smp, const tok_t *tok, const int32_t *prompt, int32_t n_prompt,
            const gen_options_t *opt, gen_result_t *res, guild_err_t *err);

/* One sequence's plain decode, a step at a time, for a caller that makes the forward calls itself (the server's
 * batched steps: several sequences in one call): the sampling, stops and streaming of gen_run's plain loop, step
 * for step, so a sequence gives the same tokens and text as gen_run would. opt's n_predict, n_ctx, n_vocab,
 * text_out, logits_out, ignore_eog, check_finite and on_text are used (borrowed, as smp, tok and res: they must
 * outlive it); res is the caller's, zeroed by it (the caller counts n_prompt, n_decoded and the times). */
typedef struct gen_seq gen_seq_t;

/* Begins after the prompt's forward calls: gives the prompt to the sampler's history. -1 on out of memory. */
int gen_seq_new(gen_seq_t **out, sampler_t *smp, const tok_t *tok, const int32_t *prompt, int32_t n_prompt,
                const gen_options_t *opt, gen_result_t *res, guild_err_t *err);

/* The logits of the cache's last position (kv_len positions held): samples and takes a token. 0: *next is to be
 * fed at position kv_len (the caller counts res->n_decoded when it is); 1: stopped (res->stop says why); -1 with
 * err (a write error, a non-finite logit with check_finite). */
int gen_seq_step(gen_seq_t *g, const float *logits, int32_t kv_len, int32_t *next, guild_err_t *err);

/* Whether a step of smp and opt can take the pick of its row (core/sample/logits_pick.h: what a backend reduces
 * the row to where it computed it, backend_forward_pick) instead of the row: a greedy sampler without the
 * repetition penalty, no logits_out and no on_token (they want the row). Its tokens, stops and errors are then
 * those of the row. */
bool gen_pickable(const sampler_t *smp, const gen_options_t *opt);

/* gen_seq_step on the pick of the row (gen_pickable) rather than the row. */
int gen_seq_step_pick(gen_seq_t *g, const logits_pick_t *pick, int32_t kv_len, int32_t *next, guild_err_t *err);

/* The end: passes on the text held back for an incomplete UTF-8 sequence and frees; nulls *g (NULL-safe).
 * Returns rc (the sequence's result so far), or -1 when rc was 0 and that text could not be written. */
int gen_seq_end(gen_seq_t **g, int rc, guild_err_t *err);

#endif
