#include "cpu-expert-worker/experts/moe_local.h"

#include <stdlib.h>
#include <time.h>

#include "core/util/log.h"

#include "cpu-expert-worker/experts/expert_pipe.h"
#include "cpu-expert-worker/experts/expert_shard.h"

typedef struct moe_local {
    moe_exec_t base;
    expert_shard_t *shard;
    expert_pipe_t *pipe; /* the fused pipeline: same bits as expert_exec, one pool pass per layer */
    int32_t n_layer, n_expert, n_used, n_embd;
    /* the batch submitted last: borrowed until collect */
    int32_t layer, n;
    const float *x;
    const int32_t *ids;
    float *y;            /* [y_cap] floats: outputs, grown to the largest batch */
    size_t y_cap;
    int64_t *routed;     /* [n_layer][n_expert] slots routed (moe_local_count_routing), or NULL */
    moe_exec_stats_t stats;
} moe_local_t;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int local_submit(moe_exec_t *base, int32_t layer, int32_t n_tokens, const float *x, const int32_t *ids,
                        void *queue, guild_err_t *err)
{
    moe_local_t *m = (moe_local_t *)base;
    if (n_tokens < 0)
        return guild_err_set(err, "local expert executor: %d tokens", n_tokens);
    m->layer = layer;
    m->n = n_tokens;
    m->x = x;
    m->ids = ids;
    if (m->routed && layer >= 0 && layer < m->n_layer)
        for (int64_t i = 0; i < (int64_t)n_tokens * m->n_used; i++)
            if (ids[i] >= 0 && ids[i] < m->n_expert)
                m->routed[(int64_t)layer * m->n_expert + ids[i]]++;
    return 0;
}

static int local_collect(moe_exec_t *base, const float **y, void *queue, guild_err_t *err)
{
    moe_local_t *m = (moe_local_t *)base;
    const size_t need = (size_t)m->n * (size_t)m->n_used * (size_t)m->n_embd;
    if (need > m->y_cap) {
        float *ny = realloc(m->y, need * sizeof *ny);
        if (!ny)
            return guild_err_set(err, "local expert executor: out of memory for the outputs of %d tokens", m->n);
        m->y = ny;
        m->y_cap = need;
    }
    const uint64_t t0 = now_ns();
    const int64_t pairs = expert_pipe_run(m->pipe, m->layer, m->n, m->x, m->ids, m->y, err);
    if (pairs < 0)
        return -1;
    m->stats.pairs += (uint64_t)pairs;
    m->stats.exchanges++;
    m->stats.wait_ns += now_ns() - t0;
    *y = m->y;
    return 0;
}

static void local_stats(const moe_exec_t *base, moe_exec_stats_t *out)
{
    *out = ((const moe_local_t *)base)->stats;
}

static void local_destroy(moe_exec_t *base)
{
    moe_local_t *m = (moe_local_t *)base;
    expert_pipe_destroy(&m->pipe);
    expert_shard_destroy(&m->shard);
    free(m->y);
    free(m->routed);
    free(m);
}

static const moe_exec_ops_t local_ops = {
    .name = "local",
    .mem = MOE_EXEC_HOST,
    .submit = local_submit,
    .collect = local_collect,
    .destroy = local_destroy,
    .stats = local_stats,
};

const expert_shard_t *moe_local_shard(const moe_exec_t *e)
{
    GUILD_ASSERT(e->ops == &local_ops);
    return ((const moe_local_t *)e)->shard;
}

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
    const model_config_t *c = model_config(model);
    m->n_layer = c->n_layer;
    m->n_expert = c->n_expert;
    m->n_used = c->n_expert_used;
    m->n_embd = c->n_embd;
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

int moe_local_count_routing(moe_exec_t *e, guild_err_t *err)
{
    GUILD_ASSERT(e->ops == &local_ops);
    moe_local_t *m = (moe_local_t *)e;
    if (!m->routed && !(m->routed = calloc((size_t)m->n_layer * (size_t)m->n_expert, sizeof *m->routed)))
        return guild_err_set(err, "routing statistics: out of memory");
    return 0;
}

int64_t moe_local_routed(const moe_exec_t *e, int32_t layer, int32_t expert)
{
    GUILD_ASSERT(e->ops == &local_ops);
    const moe_local_t *m = (const moe_local_t *)e;
    GUILD_ASSERT(layer >= 0 && layer < m->n_layer && expert >= 0 && expert < m->n_expert);
    return m->routed ? m->routed[(int64_t)layer * m->n_expert + expert] : 0;
}
