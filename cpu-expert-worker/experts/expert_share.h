/* cpu-expert-worker/experts/expert_share.h — the CPU workers of one node share each exchange's work.
 *
 * Every worker owns a fixed range of each layer's experts (coordinator/placement.h) and keeps one copy of them
 * (its expert store). Computing only the experts it owns, a worker's share of one token's top-k experts is
 * binomial: with 8 of 128 experts, the busier of 2 workers takes 5.06 on average, of 4 workers 3.48 against an
 * even 2, and the step waits for the busiest. Workers of one node read the same DRAM, so where an expert lies
 * does not matter to them: each maps every store of its node (read only) and, per exchange, the node's workers
 * split the experts routed to them among themselves by the same rule, computed by each from the exchange's ids
 * alone (expert_share_split): no worker-to-worker message, and a worker restarted mid-exchange redoes the same
 * part. An expert is still computed whole by one worker with the same kernels (expert_pipe.h), so y's rows and
 * the dense side's combine (ipc/exchange.h) are the bits of one worker computing them all; memory stays at one
 * copy of each expert.
 */
#ifndef GUILD_CPU_EXPERT_WORKER_EXPERT_SHARE_H
#define GUILD_CPU_EXPERT_WORKER_EXPERT_SHARE_H

#include <stdint.h>

#include "core/util/err.h"
#include "cpu-expert-worker/experts/expert_pipe.h"
#include "cpu-expert-worker/experts/expert_shard.h"

/* The cost of an expert with `pairs` routed (token, slot) pairs, in pairs: reading its weights costs about
 * EXPERT_SHARE_READ_PAIRS pairs' products (decode is memory-bound). Speed only: the bits never depend on it. */
#define EXPERT_SHARE_READ_PAIRS 4

/* The split of one exchange between n_members workers: member[e] (n_expert entries) = the member, 0..n_members-1,
 * that computes expert e, for each e with count[e] > 0 (-1 for the others). Longest first: the experts by cost
 * (count + EXPERT_SHARE_READ_PAIRS) descending, ties by the lower id, each to the member with the least cost so
 * far (ties: the lower member). The same inputs give the same split on every worker. load (NULL, or n_members
 * entries) receives each member's cost. */
void expert_share_split(const int32_t *count, int32_t n_expert, int n_members, int32_t *member, int64_t *load);

typedef struct expert_share expert_share_t;

/* A share of the experts of a model configured as cfg (borrowed) between n_members workers, this one member
 * `rank`; it knows no expert until expert_share_add. -1 with a message on out of memory or a bad rank. */
int expert_share_new(expert_share_t **out, const model_config_t *cfg, int n_members, int rank, guild_err_t *err);
void expert_share_destroy(expert_share_t **s);

/* The group holds (layer, expert), with these matrices (copied; the memory they point at must outlive the share):
 * every member adds the same experts, whichever store holds them. -1 with a message when it was added before. */
int expert_share_add(expert_share_t *s, int32_t layer, int32_t expert, const expert_mats_t *mats, guild_err_t *err);

/* Experts added. */
int64_t expert_share_count(const expert_share_t *s);

/* Chooses this member's experts of one exchange (layer, ids [n_tokens][n_used], id < 0: skipped): of the experts
 * the group holds, those expert_share_split gives it. Returns the pairs it computes. */
int64_t expert_share_plan(expert_share_t *s, int32_t layer, int32_t n_tokens, const int32_t *ids);

/* The experts as an expert pipeline's source: (layer, expert) is given for the experts of the last plan only. */
void expert_share_src(expert_pipe_src_t *src, const expert_share_t *s);

/* A prefetch hint's share (expert_prefetch.h): of the predicted experts ids[0..n) of `layer` (the likeliest first;
 * ids < 0, out of range or not held are left out), those this member would compute if the exchange routed exactly
 * them, one pair each occurrence (expert_share_split's rule), in the hint's order, each once, into out (n
 * entries); returns their count. The members' shares of one hint are disjoint and cover the held experts, so the
 * node's workers pull each predicted expert into their caches once, each the experts it likely computes (not all
 * of them each, nor none). Leaves the last plan as it was. */
int32_t expert_share_hinted(expert_share_t *s, int32_t layer, int32_t n, const int32_t *ids, int32_t *out);

/* Every expert the group holds as a source, whatever the last plan (a prefetch of the next exchange's layer). */
void expert_share_src_held(expert_pipe_src_t *src, const expert_share_t *s);

#endif
