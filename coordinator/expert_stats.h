/* coordinator/expert_stats.h — routing statistics for `guild run --stats`: the printout of what the in-process
 * executor counted (moe_local_count_routing, cpu-expert-worker/experts/moe_local.h). */
#ifndef GUILD_COORDINATOR_EXPERT_STATS_H
#define GUILD_COORDINATOR_EXPERT_STATS_H

#include <stdint.h>
#include <stdio.h>

#include "core/model/config.h"
#include "core/model/moe_exec.h"

/* One line per layer of cfg from counts[n_layer * n_expert] (routed slots per (layer, expert)), as below. */
void expert_stats_print_counts(const uint64_t *counts, const model_config_t *cfg, FILE *out);

/* One line per layer of cfg, from the routing counters of `local` (a "local" executor):
 *   "stats: layer L: experts touched T/N, largest share S (R x fair)"
 * T: experts that received at least one slot; S: the busiest expert's fraction of the layer's slots; R: S
 * divided by the fair share 1/N. */
void expert_stats_print(const moe_exec_t *local, const model_config_t *cfg, FILE *out);

#endif
