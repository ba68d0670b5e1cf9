#include "cpu-expert-worker/expert_shard.h"

#include <stdlib.h>

struct expert_shard {
    const model_config_t *cfg;
    expert_mats_t *mats; /* [n_layer][n_expert]; gate == NULL when not owned */
    int64_t count;
};

int expert_shard_new(expert_shard_t **out, const model_t *m, const uint8_t *owned, guild_err_t *err)
{
    *out = NULL;
    const model_config_t *c = model_config(m);
    const model_weights_t *w = model_weights(m);
    expert_shard_t *s = calloc(1, sizeof *s);
    size_t n = (size_t)c->n_layer * (size_t)c->n_expert;
    if (!s || !(s->mats = calloc(n, sizeof *s->mats))) {
        free(s);
        return guild_err_set(err, "expert shard: out of memory");
    }
    s->cfg = c;
    for (int32_t il = 0; il < c->n_layer; il++) {
        const model_layer_t *L = &w->layers[il];
        for (int32_t e = 0; e < c->n_expert; e++) {
            size_t i = (size_t)il * (size_t)c->n_expert + (size_t)e;
            if (owned && !owned[i])
                continue;
            s->mats[i] = (expert_mats_t){
                .gate = model_tensor_row(&L->gate_exps, e, 0),
                .up = model_tensor_row(&L->up_exps, e, 0),
                .down = model_tensor_row(&L->down_exps, e, 0),
                .gate_type = L->gate_exps.type,
                .up_type = L->up_exps.type,
                .down_type = L->down_exps.type,
                .gate_row = L->gate_exps.row_bytes,
                .up_row = L->up_exps.row_bytes,
                .down_row = L->down_exps.row_bytes,
            };
            s->count++;
        }
    }
    *out = s;
    return 0;
}

void expert_shard_destroy(expert_shard_t **sp)
{
    expert_shard_t *s = *sp;
    if (!s)
        return;
    free(s->mats);
    free(s);
    *sp = NULL;
}

const expert_mats_t *expert_shard_get(const expert_shard_t *s, int32_t layer, int32_t expert)
{
    GUILD_ASSERT(layer >= 0 && layer < s->cfg->n_layer && expert >= 0 && expert < s->cfg->n_expert);
    const expert_mats_t *e = &s->mats[(size_t)layer * (size_t)s->cfg->n_expert + (size_t)expert];
    return e->gate ? e : NULL;
}

int64_t expert_shard_count(const expert_shard_t *s)
{
    return s->count;
}

const model_config_t *expert_shard_config(const expert_shard_t *s)
{
    return s->cfg;
}
