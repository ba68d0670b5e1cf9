/* coordinator/spec.h — speculative decoding: the drafters that propose tokens, the options and the counters.
 *
 * A verify step (coordinator/generate.c) runs the last sampled token and up to K drafted ones through the
 * target model in one forward call, which returns K + 1 rows of logits. The rows are sampled in order as plain
 * decode would (greedy: the same token), and a draft is kept while it is the token the target chooses
 * (temperature > 0: kept with probability min(1, p/q), else a token is drawn from norm(max(0, p - q)): the
 * output follows the target's distribution). The first token that differs ends the step and the KV cache is
 * truncated back to the positions kept; a model with recurrent layers (gated delta nets) gets the recurrent state
 * of the last position kept, which the backend copied aside after each row of the step (backend_options_t.rollback,
 * set by spec_stack_options; in the GPU worker too). Because the backends compute every position's logits from its own
 * inputs and the cache in a fixed order (gpu-worker/dense/backend.h), a greedy run gives the ids of --spec none.
 *
 * Drafters:
 *   ngram  prompt lookup: the last n tokens (n = SPEC_NGRAM_MAX down to SPEC_NGRAM_MIN) are searched for
 *          earlier in the context, newest match first; the tokens that followed it are proposed.
 *   draft  a second, smaller model with the same vocabulary, run in this process with its own KV cache, kept in
 *          step with the context at each call (its cache is truncated to the longest prefix it shares with the
 *          context, the rest fed in: up to its batch size at a time, the last token alone after a longer run,
 *          so a prompt is cut as the target cuts it). By the CPU backend, or (--draft-backend cuda) by the CUDA
 *          backend with the target's GPU settings (--gpu-mem, --gpu-experts, graphs): the target as its own
 *          draft model then drafts the target's own tokens (the backend is batch-invariant, backend.h).
 *   mtp    the first multi-token-prediction layer of architectures that ship one (deepseek2, glm4moe,
 *          qwen35moe), run by the target's own
 *          backend (backend_mtp_step, created with backend_options_t.mtp: the cpu and cuda backends, in this
 *          process or the GPU worker's, ipc/step.h GUILD_STEP_MTP): step 0 from the hidden state of the cache's
 *          last position and the pending token, each next step chained on the previous one's output and draft;
 *          greedy drafts (the argmax), stopped below --spec-min-p. */
#ifndef GUILD_COORDINATOR_SPEC_H
#define GUILD_COORDINATOR_SPEC_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "coordinator/cmd_model.h"
#include "coordinator/stack_options.h"
#include "core/model/model.h"
#include "core/sample/sampler.h"
#include "core/util/err.h"

#define SPEC_MAX_DRAFT 16 /* --spec-max's bound */
#define SPEC_NGRAM_MAX 4  /* the longest suffix the ngram drafter looks up */
#define SPEC_NGRAM_MIN 2  /* the shortest (a single token matches too often to be worth a verify row) */

typedef enum spec_kind {
    SPEC_NONE,
    SPEC_NGRAM,
    SPEC_DRAFT,
    SPEC_MTP,
} spec_kind_t;

/* What --spec, --spec-max, --spec-min-p and --draft-model say. */
typedef struct spec_options {
    spec_kind_t kind;
    int32_t max;             /* most drafted tokens per verify step, 1..SPEC_MAX_DRAFT (default 4) */
    float min_p;             /* draft, mtp: stop drafting when the draft's probability of its token is below it;
                                0 off */
    const char *draft_model; /* --draft-model FILE (kind draft) */
    const char *draft_backend; /* --draft-backend: "cpu" (NULL: the default) or "cuda" */
    const struct stack_options *stack; /* the target's stack options (spec_stack_options records them): a cuda
                                          draft runs with their GPU settings; borrowed */
    int draft_threads;       /* --draft-threads: the draft model's CPU threads; 0: --threads */
} spec_options_t;

/* kind none, max 4, min_p 0, no draft model. */
void spec_options_init(spec_options_t *o);

/* "none", "ngram", "draft" or "mtp" into *kind; -1 with err naming the choices. */
int spec_parse_kind(const char *s, spec_kind_t *kind, guild_err_t *err);
const char *spec_kind_name(spec_kind_t kind);

/* Checks the options together (--draft-model with draft only and required by it, --spec-min-p with a drafter
 * that has probabilities) and against the target model m (mtp: it has an MTP layer). -1 with err naming the
 * flag. */
int spec_options_check(const spec_options_t *o, const model_t *m, guild_err_t *err);

/* Counters of one generation (or summed over several). */
typedef struct spec_stats {
    uint64_t steps;    /* verify steps: forward calls of the last token and its drafts */
    uint64_t drafted;  /* draft tokens proposed and verified */
    uint64_t accepted; /* of them, kept */
    uint64_t tokens;   /* tokens the verify steps produced (accepted drafts + the target's own token each step) */
    double draft_s;    /* wall time in the drafter */
    double verify_s;   /* wall time in the verify steps' forward calls */
} spec_stats_t;

void spec_stats_add(spec_stats_t *to, const spec_stats_t *s);

/* One line: drafted, accepted, acceptance rate, tokens per verify step, time in draft and verify. */
void spec_stats_print(const spec_stats_t *s, const char *who, FILE *out);

typedef struct spec_drafter spec_drafter_t;
struct backend;

typedef struct spec_drafter_ops {
    const char *name;
    /* Optional: called before a generation's first draft with the target's sampling parameters (a drafter that
     * draws sets has_q here). */
    int (*begin)(spec_drafter_t *d, const sample_params_t *sp, guild_err_t *err);
    /* Optional: called before a generation's first draft with the target's backend (the mtp drafter runs its
     * multi-token-prediction layer; borrowed for the generation). */
    int (*target)(spec_drafter_t *d, struct backend *be, guild_err_t *err);
    /* Proposes up to k_max (>= 1) tokens that follow ctx[0..n) (n >= 1) into out[]; returns how many (0..k_max),
     * or -1 with err. With has_q, q[j * n_vocab ...] is the distribution draft j was drawn from. */
    int32_t (*draft)(spec_drafter_t *d, const int32_t *ctx, int32_t n, int32_t k_max, int32_t *out, float *q,
                     guild_err_t *err);
    void (*destroy)(spec_drafter_t *d);
} spec_drafter_ops_t;

/* Implementations embed this as their first member. */
struct spec_drafter {
    const spec_drafter_ops_t *ops;
    bool has_q; /* draft() fills q; otherwise each draft is certain (q = 1 at the token) */
};

/* Speculative sampling of one verify row (the target's sampler smp, temperature > 0): draft d, drawn from q
 * (q[n_vocab], NULL: d was certain), is kept with probability min(1, p(d) / q(d)) where p = sampler_dist(row);
 * otherwise a token is drawn from norm(max(0, p - q)). true when d is kept; *tok: the token chosen. p: scratch
 * of n_vocab doubles. The tokens chosen follow p whatever q is. */
bool spec_accept_sampled(sampler_t *smp, const float *row, int32_t d, const float *q, double *p, int32_t *tok);

/* The prompt-lookup drafter. */
int spec_ngram_new(spec_drafter_t **out, guild_err_t *err);

/* The multi-token-prediction drafter of a target model with n_vocab logits, whose backend (given by the target
 * op) was created with backend_options_t.mtp. A draft call's context is the backend's cache and the pending token
 * (ctx[n - 1]); drafts are the argmax of each step's logits, until one's softmax probability is below min_p
 * (0: off) or k_max are drafted. */
int spec_mtp_new(spec_drafter_t **out, int32_t n_vocab, float min_p, guild_err_t *err);

/* The draft-model drafter for `draft` (borrowed: must outlive it), whose vocabulary has been checked against the
 * target's (spec_vocab_check). With the target's temperature <= 0 a draft is the draft model's argmax;
 * otherwise it is drawn, with the target's top-k/top-p/min-p/temperature and no repetition penalty, from a PRNG
 * seeded from the target's seed (begin, each generation). min_p: spec_options_t.min_p. n_ctx: the target's
 * context; n_threads: the CPU backend's threads. */
int spec_draft_new(spec_drafter_t **out, const model_t *draft, float min_p, int32_t n_ctx, int n_threads,
                   guild_err_t *err);

/* The same drafter on a backend stack of its own in this process (coordinator/backend_stack.h), opened from the
 * target's stack options st (read during the call) with backend `backend` and n_threads threads, one process
 * and no statistics: the draft model at draft_path (its model `draft` borrowed) computes as the target's stack
 * would, and takes the prompt in the target's batches. */
int spec_draft_new_stack(spec_drafter_t **out, const model_t *draft, const char *draft_path,
                         const struct stack_options *st, const char *backend, float min_p, int32_t n_ctx,
                         int n_threads, guild_err_t *err);

/* Whether the draft model can draft for the target: the same number of logits rows, and the same tokens (text
 * and id) in their tokenizers' vocabularies. -1 with err naming the first difference. */
struct tok;
int spec_vocab_check(const model_t *target, const struct tok *target_tok, const model_t *draft,
                     const struct tok *draft_tok, const char *draft_path, guild_err_t *err);

/* Frees the drafter; sets *d to NULL. NULL-safe. */
void spec_drafter_destroy(spec_drafter_t **d);

/* The --help lines of the flags. */
#define SPEC_FLAGS_HELP                                                                                         \
    "      --spec KIND         speculative decoding: none (default), ngram (prompt lookup), draft (a draft\n"    \
    "                          model, --draft-model), mtp (the model's multi-token-prediction layer)\n"      \
    "      --spec-max K        most drafted tokens per verify step (default 4, at most 16)\n"                  \
    "      --spec-min-p P      draft, mtp: stop drafting when the drafter's probability of its token is\n"    \
    "                          below P (default 0: off)\n"                                                     \
    "      --draft-model FILE  the draft model of --spec draft: a GGUF model with the target's vocabulary,\n"  \
    "                          run in this process\n"                                                          \
    "      --draft-backend B   the draft model's backend: cpu (default) or cuda (with the target's --gpu-mem,\n" \
    "                          --gpu-experts and graph settings; the target as draft drafts its own tokens)\n" \
    "      --draft-threads N   the draft model's CPU threads (default: --threads)\n"

/* Parses one of the flags by its long name ("spec", "spec-max", "spec-min-p", "draft-model", "draft-threads",
 * "draft-backend"): 1 when it was one of them, 0 when not, -1 with err on a bad value. */
int spec_flag(spec_options_t *o, const char *name, const char *arg, guild_err_t *err);

/* What speculative decoding needs of the stack: logits rows for a whole verify step in one GPU-worker request
 * (gpu.max_out >= max + 1), a recurrent state that rolls back over a verify step's max + 1 rows
 * (gpu.rollback), and with mtp the backend's multi-token-prediction layer (gpu.mtp: the GPU worker's backend, or
 * this process's). Records st in o->stack (a cuda draft model runs with its GPU settings). Both
 * backends give a verify step's rows the bits of plain decode (the cuda backend is batch-invariant up to
 * CUDA_DECODE_ROWS rows, gpu-worker/dense/backend.h), so greedy ids are --spec none's. */
void spec_stack_options(spec_options_t *o, stack_options_t *st);

/* The drafter the options ask for, with the draft model it runs (if any). */
typedef struct spec_setup {
    cmd_model_t draft;       /* --draft-model, opened */
    spec_drafter_t *drafter; /* NULL with --spec none */
} spec_setup_t;

/* Opens the drafter of o (spec_options_check passed) for the target model and its tokenizer: the draft model is
 * opened and its vocabulary checked; n_threads: its threads unless o->draft_threads says. With o->stack (a
 * command's, spec_stack_options) the draft runs on a stack of its own (spec_draft_new_stack, backend
 * o->draft_backend or cpu), else on the CPU backend (spec_draft_new; --draft-backend cuda refused). -1 with
 * err; spec_setup_close is still to be called then. */
int spec_setup_open(spec_setup_t *s, const spec_options_t *o, const model_t *target, const struct tok *target_tok,
                    int32_t n_ctx, int n_threads, guild_err_t *err);
void spec_setup_close(spec_setup_t *s);

#endif
