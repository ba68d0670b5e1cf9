#include "coordinator/expert_stats.h"

#include <stdlib.h>

#include "cpu-expert-worker/experts/moe_local.h"

void expert_stats_print_counts(const uint64_t *counts, const model_config_t *cfg, FILE *out)
{
    for (int32_t il = 0; il < cfg->n_layer; il++) {
        uint64_t total = 0, max = 0;
        int32_t touched = 0;
        for (int32_t e = 0; e < cfg->n_expert; e++) {
            const uint64_t c = counts[(size_t)il * (size_t)cfg->n_expert + (size_t)e];
            total += c;
            touched += c > 0;
            if (c > max)
                max = c;
        }
        double share = total ? (double)max / (double)total : 0.0;
        fprintf(out, "stats: layer %d: experts touched %d/%d, largest share %.4f (%.2f x fair)\n", il, touched,
                cfg->n_expert, share, share * cfg->n_expert);
    }
}

void expert_stats_print(const moe_exec_t *local, const model_config_t *cfg, FILE *out)
{
    const size_t n = (size_t)cfg->n_layer * (size_t)cfg->n_expert;
    uint64_t *counts = calloc(n ? n : 1, sizeof *counts);
    if (!counts) {
        fputs("stats: out of memory to print them\n", out);
        return;
    }
    for (int32_t il = 0; il < cfg->n_layer; il++)
        for (int32_t e = 0; e < cfg->n_expert; e++)
            counts[(size_t)il * (size_t)cfg->n_expert + (size_t)e] = (uint64_t)moe_local_routed(local, il, e);
    expert_stats_print_counts(counts, cfg, out);
    free(counts);
}
