#include "gpu-worker/moe_arena.h"

#include <stdlib.h>
#include <string.h>

#include "ipc/doorbell.h"

typedef struct moe_arena {
    moe_exec_t base;
    guild_exchange_t *x;
    moe_arena_options_t o;
    int32_t n_embd, n_used, max_tokens;
    uint64_t next; /* exchange seq of the next run */
    moe_arena_stats_t stats;
} moe_arena_t;

static int arena_run(moe_exec_t *base, int32_t layer, int32_t n, const float *x, const int32_t *ids, float *y,
                     guild_err_t *err)
{
    moe_arena_t *m = (moe_arena_t *)base;
    if (n < 0 || n > m->max_tokens)
        return guild_err_set(err, "expert exchange: %d tokens, the slots hold %d", n, m->max_tokens);
    uint64_t t0 = guild_now_ns(), seq = m->next;
    guild_wait_policy_t pol = {.spin_ns = m->o.spin_ns, .timeout_ns = m->o.slice_ns};
    guild_wait_stats_t ws = {0};
    guild_exchange_slot_t slot;
    for (;;) {
        guild_wait_result_t r = guild_exchange_begin(m->x, seq, &pol, &slot, &ws, err);
        if (r == GUILD_WAIT_OK)
            break;
        if (r == GUILD_WAIT_ERROR || (m->o.interrupted && m->o.interrupted(m->o.ctx, err)))
            return -1;
    }
    const size_t xe = (size_t)n * (size_t)m->n_embd, ku = (size_t)n * (size_t)m->n_used;
    memcpy(slot.x, x, xe * sizeof *x);
    memcpy(slot.ids, ids, ku * sizeof *ids);
    if (guild_exchange_publish(m->x, seq, n, layer, err) < 0)
        return -1;
    /* published: the workers will complete it whatever happens here, so the next run uses the next seq */
    m->next = seq + 1;
    uint64_t t1 = guild_now_ns();
    for (;;) {
        guild_wait_result_t r = guild_exchange_wait_done(m->x, seq, &pol, &ws, err);
        if (r == GUILD_WAIT_OK)
            break;
        if (r == GUILD_WAIT_ERROR || (m->o.interrupted && m->o.interrupted(m->o.ctx, err)))
            return -1;
    }
    uint64_t t2 = guild_now_ns();
    guild_exchange_view(m->x, seq, &slot);
    /* only the pairs computed: a skipped pair's row (id < 0) is the caller's (moe_exec.h); runs of computed
     * pairs go in one copy */
    const size_t E = (size_t)m->n_embd;
    for (size_t p = 0; p < ku;) {
        if (ids[p] < 0) {
            p++;
            continue;
        }
        size_t q = p + 1;
        while (q < ku && ids[q] >= 0)
            q++;
        memcpy(y + p * E, slot.y + p * E, (q - p) * E * sizeof *y);
        p = q;
    }
    m->stats.exchanges++;
    m->stats.wait_ns += t2 - t1;
    m->stats.total_ns += guild_now_ns() - t0;
    m->stats.sleeps += ws.sleeps;
    return 0;
}

static void arena_destroy(moe_exec_t *base)
{
    free(base);
}

static const moe_exec_ops_t arena_ops = {
    .name = "arena",
    .run = arena_run,
    .destroy = arena_destroy,
};

int moe_arena_new(moe_exec_t **out, guild_exchange_t *x, const model_config_t *cfg, const moe_arena_options_t *opt,
                  guild_err_t *err)
{
    *out = NULL;
    const guild_exchange_shape_t *s = guild_exchange_shape(x);
    if (s->n_embd != (uint32_t)cfg->n_embd || s->n_used != (uint32_t)cfg->n_expert_used)
        return guild_err_set(err, "expert exchange: slots for width %u, top-%u; the model has %d, top-%d", s->n_embd,
                             s->n_used, cfg->n_embd, cfg->n_expert_used);
    moe_arena_t *m = calloc(1, sizeof *m);
    if (!m)
        return guild_err_set(err, "expert exchange: out of memory");
    m->base.ops = &arena_ops;
    m->x = x;
    m->o = *opt;
    m->n_embd = cfg->n_embd;
    m->n_used = cfg->n_expert_used;
    m->max_tokens = (int32_t)s->max_tokens;
    m->next = guild_exchange_step(x) + 1;
    *out = &m->base;
    return 0;
}

void moe_arena_stats(const moe_exec_t *e, moe_arena_stats_t *out)
{
    *out = ((const moe_arena_t *)e)->stats;
}
