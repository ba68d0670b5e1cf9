#include "config.h"

#include "coordinator/server/logprobs.h"

#include <math.h>

#include "core/util/err.h"

static double logit(const float *x, int32_t i)
{
    return isnan(x[i]) ? -INFINITY : (double)x[i];
}

/* log p as reported: float, -infinity floored */
static float report(double lp)
{
    return isfinite(lp) && lp > (double)LOGPROB_FLOOR ? (float)(lp < 0 ? lp : 0) : LOGPROB_FLOOR;
}

/* Whether (a, ia) comes before (b, ib): larger logit first, then smaller id. */
static int before(double a, int32_t ia, double b, int32_t ib)
{
    return a > b || (a == b && ia < ib);
}

void logprobs_compute(const float *logits, int32_t n_vocab, int32_t id, int32_t n_top, logprob_entry_t *out)
{
    GUILD_ASSERT(n_vocab > 0 && id >= 0 && id < n_vocab && n_top >= 0 && n_top <= LOGPROBS_MAX_TOP);
    if (n_top > n_vocab)
        n_top = n_vocab;
    double m = -INFINITY;
    for (int32_t i = 0; i < n_vocab; i++)
        m = fmax(m, logit(logits, i));
    double sum = 0;
    if (isfinite(m))
        for (int32_t i = 0; i < n_vocab; i++)
            sum += exp(logit(logits, i) - m);
    /* every logit -infinity (or +infinity somewhere): no distribution to speak of; all are equally unknown */
    const double lse = isfinite(m) ? m + log(sum) : INFINITY;

    /* the n_top best by insertion into a sorted list: n_top is small */
    double best[LOGPROBS_MAX_TOP];
    int32_t k = 0;
    for (int32_t i = 0; i < n_vocab && n_top > 0; i++) {
        const double v = logit(logits, i);
        if (k == n_top && !before(v, i, best[k - 1], out->top[k - 1].id))
            continue;
        int32_t j = k < n_top ? k++ : k - 1;
        while (j > 0 && before(v, i, best[j - 1], out->top[j - 1].id)) {
            best[j] = best[j - 1];
            out->top[j] = out->top[j - 1];
            j--;
        }
        best[j] = v;
        out->top[j].id = i;
    }
    for (int32_t j = 0; j < k; j++)
        out->top[j].logprob = report(best[j] - lse);
    out->n_top = k;
    out->id = id;
    out->logprob = report(logit(logits, id) - lse);
}
