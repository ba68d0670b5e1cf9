#include "cpu-expert-worker/experts/moe_local.h"

#include <stdlib.h>

#include "core/util/log.h"

#include "cpu-expert-worker/experts/expert_pipe.h"
#include "cpu-expert-worker/experts/expert_shard.h"

typedef struct moe_local {
    moe_exec_t base;
    expert_shard_t *shard;
    expert_pipe_t *pipe; /* the fused pipeline: same bits as expert_exec, one pool pass per layer */
} moe_local_t;

static int local_run(moe_exec_t *base, int32_t layer, int32_t n_tokens, const float *x, const int32_t *ids,
                     float *y, guild_err_t *err)
{
    moe_local_t *m = (moe_local_t *)base;
    return expert_pipe_run(m->pipe, layer, n_tokens, x, ids, y, err) < 0 ? -1 : 0;
}

static void local_destroy(moe_exec_t *base)
{
    moe_local_t *m = (moe_local_t *)base;
    expert_pipe_destroy(&m->pipe);
    expert_shard_destroy(&m->shard);
    free(m);
}

static const moe_exec_ops_t local_ops = {
    .name = "local",
    .run = local_run,
    .destroy = local_destroy,
};

int moe_local_new(moe_exec_t **out, const model_t *model, guild_pool_t *pool, guild_err_t *err)
{
    return moe_local_new_tuned(out, model, pool, NULL, false, EXPERT_LAYOUT_PLAIN, err);
}

/* Whether the layout packs some expert matrix of the model (then the experts need a copy). */
static bool layout_packs_any(const model_t *model, expert_layout_t layout)
{
    const model_config_t *c = model_config(model);
    const model_weights_t *w = model_weights(model);
    for (int32_t il = 0; il < c->n_layer; il++) {
        const model_layer_t *L = &w->layers[il];
        const model_tensor_t *t[3] = {&L->gate_exps, &L->up_exps, &L->down_exps};
        for (int k = 0; k < 3; k++)
            if (t[k]->data && expert_layout_packs(layout, t[k]->type, t[k]->ne[1]))
                return true;
    }
    return false;
}

int moe_local_new_tuned(moe_exec_t **out, const model_t *model, guild_pool_t *pool,
                        const expert_pipe_tuning_t *tuning, bool interleave_gate_up, expert_layout_t layout,
                        guild_err_t *err)
{
    *out = NULL;
    moe_local_t *m = calloc(1, sizeof *m);
    if (!m)
        return guild_err_set(err, "local expert executor: out of memory");
    m->base.ops = &local_ops;
    const bool copy = interleave_gate_up || layout_packs_any(model, layout);
    if ((copy ? expert_shard_new_copy(&m->shard, model, NULL, -1, false, interleave_gate_up, layout, err)
              : expert_shard_new(&m->shard, model, NULL, err)) < 0) {
        local_destroy(&m->base);
        return -1;
    }
    if (copy)
        guild_log(GUILD_LOG_INFO, "experts copied out of the model file: %.1f MiB, layout %s (%lld matrices packed)%s",
                  (double)expert_shard_resident_bytes(m->shard) / 1048576.0, expert_layout_name(layout),
                  (long long)expert_shard_packed_count(m->shard), interleave_gate_up ? ", gate/up interleaved" : "");
    expert_pipe_src_t src;
    expert_pipe_src_from_shard(&src, m->shard);
    if (expert_pipe_new(&m->pipe, &src, pool, tuning, err) < 0) {
        local_destroy(&m->base);
        return -1;
    }
    *out = &m->base;
    return 0;
}
