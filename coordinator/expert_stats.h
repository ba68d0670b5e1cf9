/* coordinator/expert_stats.h — routing statistics for `guild run --stats`: a moe_exec_t that counts, per layer,
 * how many routed slots went to each expert, then hands the work to the real executor unchanged. */
#ifndef GUILD_COORDINATOR_EXPERT_STATS_H
#define GUILD_COORDINATOR_EXPERT_STATS_H

#include <stdint.h>
#include <stdio.h>

#include "core/model/config.h"
#include "core/model/moe_exec.h"
#include "core/util/err.h"

typedef struct expert_stats expert_stats_t;

/* Wraps `inner` (borrowed, must outlive the wrapper). -1 on out of memory. */
int expert_stats_new(expert_stats_t **out, moe_exec_t *inner, const model_config_t *cfg, guild_err_t *err);

/* Frees the wrapper (not the inner executor); sets *s to NULL. NULL-safe. */
void expert_stats_destroy(expert_stats_t **s);

/* The executor to hand to the backend in place of the inner one. */
moe_exec_t *expert_stats_exec(expert_stats_t *s);

/* Slots routed to `expert` in `layer` so far. */
int64_t expert_stats_count(const expert_stats_t *s, int32_t layer, int32_t expert);

/* One line per layer:
 *   "stats: layer L: experts touched T/N, largest share S (R x fair)"
 * T: experts that received at least one slot; S: the busiest expert's fraction of the layer's slots; R: S
 * divided by the fair share 1/N. */
void expert_stats_print(const expert_stats_t *s, FILE *out);

#endif
