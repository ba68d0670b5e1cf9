#include "coordinator/expert_stats.h"

#include "cpu-expert-worker/experts/moe_local.h"

void expert_stats_print(const moe_exec_t *local, const model_config_t *cfg, FILE *out)
{
    for (int32_t il = 0; il < cfg->n_layer; il++) {
        int64_t total = 0, max = 0;
        int32_t touched = 0;
        for (int32_t e = 0; e < cfg->n_expert; e++) {
            const int64_t c = moe_local_routed(local, il, e);
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
