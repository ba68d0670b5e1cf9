#include "gpu-worker/dense/expert_cost.h"

#include <math.h>
#include <string.h>

#include "core/util/err.h"

void expert_cost_init(expert_cost_t *c, double lo_ns, double hi_ns)
{
    GUILD_ASSERT(lo_ns > 0 && hi_ns > lo_ns);
    memset(c, 0, sizeof *c);
    c->lo = lo_ns;
    c->hi = hi_ns;
}

bool expert_cost_add(expert_cost_t *c, double units, double ns)
{
    if (!isfinite(units) || !isfinite(ns) || units <= 0 || ns <= 0) {
        c->rejected++;
        return false;
    }
    const double rate = ns / units;
    if (!(rate >= c->lo && rate <= c->hi)) {
        c->rejected++;
        return false;
    }
    if (c->units > 0) {
        const double est = c->ns / c->units;
        if (rate > est * EXPERT_COST_OUTLIER || rate < est / EXPERT_COST_OUTLIER) {
            /* a run counts outliers on one side only: noise either way is not a change of rate */
            const bool high = rate > est, run_high = c->run > 0 && c->run_ns / c->run_units > est;
            if (c->run > 0 && high != run_high)
                c->run = 0;
            if (c->run == 0)
                c->run_ns = c->run_units = 0;
            c->run_ns = c->run_ns * EXPERT_COST_KEEP + ns;
            c->run_units = c->run_units * EXPERT_COST_KEEP + units;
            if (++c->run < EXPERT_COST_RESTART) {
                c->rejected++;
                return false;
            }
            c->ns = c->run_ns;
            c->units = c->run_units;
            c->run = 0;
            c->accepted++;
            return true;
        }
    }
    c->ns = c->ns * EXPERT_COST_KEEP + ns;
    c->units = c->units * EXPERT_COST_KEEP + units;
    c->run = 0;
    c->accepted++;
    return true;
}

bool expert_cost_known(const expert_cost_t *c)
{
    return c->units > 0;
}

double expert_cost_ns_per_unit(const expert_cost_t *c)
{
    return c->units > 0 ? c->ns / c->units : 0.0;
}

uint64_t expert_cost_accepted(const expert_cost_t *c)
{
    return c->accepted;
}

uint64_t expert_cost_rejected(const expert_cost_t *c)
{
    return c->rejected;
}
