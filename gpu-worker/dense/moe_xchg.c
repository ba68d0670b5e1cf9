/* The host-driven "xchg" executor (contract in moe_xchg.h). */
#include "gpu-worker/dense/moe_xchg.h"

#include <stdlib.h>
#include <string.h>

#include "ipc/doorbell.h"
#include "ipc/exchange.h"

#define DEFAULT_SLICE_NS 100000000u

typedef struct moe_xchg {
    moe_exec_t base;
    guild_exchange_t *x;
    moe_xchg_options_t o;
    int32_t n_embd, n_used, max_tokens;
    uint64_t next;      /* exchange seq of the next submit */
    uint64_t pending;   /* the exchange published by the last submit, not collected yet (0: none) */
    int32_t held[GUILD_EXCHANGE_HINT_MAX]; /* a prefetch hint given before the next submit (xchg_hint) */
    int32_t n_held, held_layer;
    uint64_t published; /* when it was published (guild_now_ns) */
    moe_exec_stats_t stats;
} moe_xchg_t;

/* One host wait for the exchange in slices, asking interrupted() between them: 0, or -1 with err. */
static int wait_sliced(moe_xchg_t *m, uint64_t seq, bool done, guild_exchange_slot_t *slot, guild_err_t *err)
{
    const guild_wait_policy_t pol = {.spin_ns = m->o.spin_ns, .timeout_ns = m->o.slice_ns};
    guild_wait_stats_t ws = {0};
    for (;;) {
        const guild_wait_result_t r = done ? guild_exchange_wait_done(m->x, seq, &pol, &ws, err)
                                           : guild_exchange_begin(m->x, seq, &pol, slot, &ws, err);
        if (r == GUILD_WAIT_OK)
            break;
        if (r == GUILD_WAIT_ERROR || (m->o.interrupted && m->o.interrupted(m->o.ctx, err))) {
            m->stats.sleeps += ws.sleeps;
            return -1;
        }
    }
    m->stats.sleeps += ws.sleeps;
    return 0;
}

static int xchg_submit(moe_exec_t *base, int32_t layer, int32_t n, const float *x, const int32_t *ids,
                       void *queue, guild_err_t *err)
{
    moe_xchg_t *m = (moe_xchg_t *)base;
    if (n < 0 || n > m->max_tokens)
        return guild_err_set(err, "expert exchange: %d tokens, the slots hold %d", n, m->max_tokens);
    m->pending = 0;
    const uint64_t seq = m->next;
    guild_exchange_slot_t slot;
    if (wait_sliced(m, seq, false, &slot, err) < 0)
        return -1;
    const size_t xe = (size_t)n * (size_t)m->n_embd, ku = (size_t)n * (size_t)m->n_used;
    memcpy(slot.x, x, xe * sizeof *x);
    memcpy(slot.ids, ids, ku * sizeof *ids);
    if (m->n_held) /* a hint given before this submit */
        guild_exchange_hint(m->x, seq, m->held_layer, m->n_held, m->held);
    m->n_held = 0;
    if (guild_exchange_publish(m->x, seq, n, layer, err) < 0)
        return -1;
    /* published: the workers will complete it whatever happens here, so the next submit uses the next seq */
    m->next = seq + 1;
    m->pending = seq;
    m->published = guild_now_ns();
    for (size_t p = 0; p < ku; p++)
        m->stats.pairs += ids[p] >= 0;
    return 0;
}

static int xchg_collect(moe_exec_t *base, const float **y, void *queue, guild_err_t *err)
{
    moe_xchg_t *m = (moe_xchg_t *)base;
    if (!m->pending)
        return guild_err_set(err, "expert exchange: nothing submitted to collect");
    if (wait_sliced(m, m->pending, true, NULL, err) < 0)
        return -1;
    m->stats.exchanges++;
    m->stats.wait_ns += guild_now_ns() - m->published;
    guild_exchange_slot_t slot;
    guild_exchange_view(m->x, m->pending, &slot);
    m->pending = 0;
    *y = slot.y; /* in place: the workers write this slot again only after a later publish */
    return 0;
}

static int32_t xchg_hint_experts(const moe_exec_t *base)
{
    return (int32_t)guild_exchange_shape(((const moe_xchg_t *)base)->x)->n_prefetch;
}

/* The predicted experts that the CPU workers compute (ids >= 0) that guild_exchange_hint_pick takes (a few tokens:
 * each one's first n_prefetch, rank-major; a batched step: those most tokens route to): on the pending exchange's
 * slot, or, before a submit, held for the next one (which writes them before it publishes: the workers find them
 * every time). None left: no hint. */
static int xchg_hint(moe_exec_t *base, int32_t layer, int32_t n, const int32_t *ids, void *queue, guild_err_t *err)
{
    moe_xchg_t *m = (moe_xchg_t *)base;
    (void)queue;
    (void)err;
    const int32_t per = guild_exchange_hint_per(n, xchg_hint_experts(base));
    m->n_held = 0;
    if (per <= 0 || n < 1)
        return 0;
    const int32_t k = guild_exchange_hint_pick(n, m->n_used, per, ids, m->held);
    if (!k)
        return 0;
    m->held_layer = layer;
    m->n_held = k;
    if (m->pending) {
        guild_exchange_hint(m->x, m->pending, layer, k, m->held);
        m->n_held = 0;
    }
    return 0;
}

static void xchg_stats(const moe_exec_t *base, moe_exec_stats_t *out)
{
    *out = ((const moe_xchg_t *)base)->stats;
}

static void xchg_destroy(moe_exec_t *base)
{
    free(base);
}

static const moe_exec_ops_t xchg_ops = {
    .name = "xchg",
    .mem = MOE_EXEC_HOST,
    .submit = xchg_submit,
    .collect = xchg_collect,
    .destroy = xchg_destroy,
    .stats = xchg_stats,
    .hint_experts = xchg_hint_experts,
    .hint = xchg_hint,
};

int moe_xchg_new(moe_exec_t **out, guild_exchange_t *x, const moe_xchg_options_t *o, guild_err_t *err)
{
    *out = NULL;
    moe_xchg_t *m = calloc(1, sizeof *m);
    if (!m)
        return guild_err_set(err, "expert exchange: out of memory");
    const guild_exchange_shape_t *s = guild_exchange_shape(x);
    m->base.ops = &xchg_ops;
    m->x = x;
    m->o = *o;
    if (!m->o.slice_ns)
        m->o.slice_ns = DEFAULT_SLICE_NS;
    m->n_embd = (int32_t)s->n_embd;
    m->n_used = (int32_t)s->n_used;
    m->max_tokens = (int32_t)s->max_tokens;
    m->next = guild_exchange_step(x) + 1;
    *out = &m->base;
    return 0;
}
