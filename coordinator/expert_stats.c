#include "coordinator/expert_stats.h"

#include <stdlib.h>

struct expert_stats {
    moe_exec_t base;
    moe_exec_t *inner;
    int32_t n_layer, n_expert, n_used;
    int64_t *count; /* [n_layer][n_expert] */
};

static int stats_run(moe_exec_t *e, int32_t layer, int32_t n_tokens, const float *x, const int32_t *ids, float *y,
                     guild_err_t *err)
{
    expert_stats_t *s = (expert_stats_t *)e;
    if (layer >= 0 && layer < s->n_layer)
        for (int64_t i = 0; i < (int64_t)n_tokens * s->n_used; i++)
            if (ids[i] >= 0 && ids[i] < s->n_expert)
                s->count[(int64_t)layer * s->n_expert + ids[i]]++;
    return moe_exec_run(s->inner, layer, n_tokens, x, ids, y, err);
}

static void stats_destroy(moe_exec_t *e)
{
    expert_stats_t *s = (expert_stats_t *)e;
    free(s->count);
    free(s);
}

static const moe_exec_ops_t stats_ops = {
    .name = "stats",
    .run = stats_run,
    .destroy = stats_destroy,
};

int expert_stats_new(expert_stats_t **out, moe_exec_t *inner, const model_config_t *cfg, guild_err_t *err)
{
    *out = NULL;
    expert_stats_t *s = calloc(1, sizeof *s);
    if (!s || !(s->count = calloc((size_t)cfg->n_layer * (size_t)cfg->n_expert, sizeof *s->count))) {
        free(s);
        return guild_err_set(err, "expert statistics: out of memory");
    }
    s->base.ops = &stats_ops;
    s->inner = inner;
    s->n_layer = cfg->n_layer;
    s->n_expert = cfg->n_expert;
    s->n_used = cfg->n_expert_used;
    *out = s;
    return 0;
}

void expert_stats_destroy(expert_stats_t **sp)
{
    if (*sp) {
        stats_destroy(&(*sp)->base);
        *sp = NULL;
    }
}

moe_exec_t *expert_stats_exec(expert_stats_t *s)
{
    return &s->base;
}

int64_t expert_stats_count(const expert_stats_t *s, int32_t layer, int32_t expert)
{
    return s->count[(int64_t)layer * s->n_expert + expert];
}

void expert_stats_print(const expert_stats_t *s, FILE *out)
{
    for (int32_t il = 0; il < s->n_layer; il++) {
        const int64_t *c = s->count + (int64_t)il * s->n_expert;
        int64_t total = 0, max = 0;
        int32_t touched = 0;
        for (int32_t e = 0; e < s->n_expert; e++) {
            total += c[e];
            touched += c[e] > 0;
            if (c[e] > max)
                max = c[e];
        }
        double share = total ? (double)max / (double)total : 0.0;
        fprintf(out, "stats: layer %d: experts touched %d/%d, largest share %.4f (%.2f x fair)\n", il, touched,
                s->n_expert, share, share * s->n_expert);
    }
}
