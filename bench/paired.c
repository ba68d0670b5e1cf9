/* bench/paired.c — runs against the limit at their flanking probes (bench/paired.h says why). */
#include "config.h"

#include "bench/paired.h"

#include <stdio.h>

#include "core/util/clock.h"
#include "core/util/err.h"

double paired_limit_step_s(const paired_limit_t *lim, double gbps)
{
    return lim->fixed_s + (gbps > 0 ? lim->dram_bytes / (gbps * 1e9) : 0);
}

/* The limit's step at r GB/s over a step of step_s: the fraction of the limit the step reached. */
static double fraction_at(const paired_limit_t *lim, double r, double step_s)
{
    return step_s > 0 ? paired_limit_step_s(lim, r) / step_s : 0;
}

void paired_runs(const paired_limit_t *lim, const double *flanks_gbps, const double *steps_s, const double *waits_s,
                 const double *early_bytes, int n, double tol, paired_run_t *runs)
{
    for (int k = 0; k < n; k++) {
        paired_run_t *r = &runs[k];
        const double a = flanks_gbps[k], b = flanks_gbps[k + 1];
        GUILD_ASSERT(a > 0 && b > 0);
        const double hi = a > b ? a : b, lo = a > b ? b : a;
        r->before_gbps = a;
        r->after_gbps = b;
        r->step_s = steps_s[k];
        r->wait_s = waits_s ? waits_s[k] : 0;
        r->early_bytes = early_bytes && early_bytes[k] > 0 ? early_bytes[k] : 0;
        const double in_wait = lim->dram_bytes > r->early_bytes ? lim->dram_bytes - r->early_bytes : 0;
        r->wait_gbps = r->wait_s > 0 ? in_wait / r->wait_s / 1e9 : 0;
        r->fraction = fraction_at(lim, 0.5 * (a + b), r->step_s);
        r->fraction_hi = fraction_at(lim, hi, r->step_s);
        r->fraction_lo = fraction_at(lim, lo, r->step_s);
        r->phase = hi > lo * (1 + tol);
        r->outran = r->wait_gbps > hi;
    }
}

void paired_summarize(const paired_run_t *runs, int n, double target, paired_summary_t *s)
{
    *s = (paired_summary_t){.runs = n, .verdict = PAIRED_NO_EVIDENCE};
    GUILD_ASSERT(n <= PAIRED_MAX_RUNS);
    double f[PAIRED_MAX_RUNS], hi[PAIRED_MAX_RUNS], lo[PAIRED_MAX_RUNS], w[PAIRED_MAX_RUNS];
    int nw = 0;
    for (int k = 0; k < n; k++) {
        const paired_run_t *r = &runs[k];
        if (r->phase || r->outran) {
            s->phase += r->phase;
            s->outran += !r->phase;
            continue;
        }
        f[s->stable] = r->fraction;
        hi[s->stable] = r->fraction_hi;
        lo[s->stable] = r->fraction_lo;
        s->stable++;
        if (r->wait_gbps > 0)
            w[nw++] = r->wait_gbps / (0.5 * (r->before_gbps + r->after_gbps));
    }
    if (s->stable) {
        s->median = guild_median(f, s->stable); /* sorts f */
        s->min = f[0];
        s->max = f[s->stable - 1];
        s->median_hi = guild_median(hi, s->stable);
        s->median_lo = guild_median(lo, s->stable);
        s->verdict = s->median_hi >= target ? PAIRED_MET : s->median_lo < target ? PAIRED_MISSED : PAIRED_UNDECIDED;
    }
    if (nw)
        s->wait_over_flank = guild_median(w, nw);
}

void paired_summary_cells(const paired_summary_t *s, paired_cells_t *c)
{
    *c = (paired_cells_t){"-", "-", "-", "-"};
    if (!s->stable)
        return;
    snprintf(c->median, sizeof c->median, "%.1f%%", 100 * s->median);
    snprintf(c->spread, sizeof c->spread, "%.1f-%.1f%%", 100 * s->min, 100 * s->max);
    snprintf(c->hi, sizeof c->hi, "%.1f%%", 100 * s->median_hi);
    snprintf(c->lo, sizeof c->lo, "%.1f%%", 100 * s->median_lo);
}

const char *paired_verdict_name(paired_verdict_t v)
{
    switch (v) {
    case PAIRED_MET: return "met";
    case PAIRED_MISSED: return "missed";
    case PAIRED_UNDECIDED: return "undecided";
    case PAIRED_NO_EVIDENCE: break;
    }
    return "no stable run";
}
