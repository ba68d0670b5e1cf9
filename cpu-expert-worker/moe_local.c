#include "cpu-expert-worker/moe_local.h"

#include <stdlib.h>

#include "cpu-expert-worker/expert_exec.h"
#include "cpu-expert-worker/expert_shard.h"

typedef struct moe_local {
    moe_exec_t base;
    expert_shard_t *shard;
    expert_exec_t *exec;
} moe_local_t;

static int local_run(moe_exec_t *base, int32_t layer, int32_t n_tokens, const float *x, const int32_t *ids,
                     const float *weights, float *y, guild_err_t *err)
{
    moe_local_t *m = (moe_local_t *)base;
    (void)weights;
    return expert_exec_run(m->exec, layer, n_tokens, x, ids, y, err) < 0 ? -1 : 0;
}

static void local_destroy(moe_exec_t *base)
{
    moe_local_t *m = (moe_local_t *)base;
    expert_exec_destroy(&m->exec);
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
    *out = NULL;
    moe_local_t *m = calloc(1, sizeof *m);
    if (!m)
        return guild_err_set(err, "local expert executor: out of memory");
    m->base.ops = &local_ops;
    if (expert_shard_new(&m->shard, model, NULL, err) < 0 || expert_exec_new(&m->exec, m->shard, pool, err) < 0) {
        local_destroy(&m->base);
        return -1;
    }
    *out = &m->base;
    return 0;
}
