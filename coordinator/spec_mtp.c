/* The multi-token-prediction drafter (coordinator/spec.h): the target's own backend runs the model's MTP layer
 * (backend_mtp_step), chained: each step's argmax is the next step's token. */
#include <math.h>
#include <stdlib.h>

#include "coordinator/spec.h"
#include "core/sample/logits_pick.h"
#include "gpu-worker/dense/backend.h"

typedef struct mtp_drafter {
    spec_drafter_t base;
    backend_t *be;   /* the target's, for the generation (target op) */
    float min_p;
    int32_t n_vocab;
    float *logits;   /* [n_vocab] */
} mtp_drafter_t;

static int mtp_target(spec_drafter_t *base, backend_t *be, guild_err_t *err)
{
    (void)err;
    ((mtp_drafter_t *)base)->be = be;
    return 0;
}

/* The greedy pick of l[0..n) (logits_pick's rule, the target's: NaN as -infinity, the lowest id on ties) and,
 * with min_p, its softmax probability (else 1). */
static int32_t argmax_prob(const float *l, int32_t n, bool want_p, double *prob)
{
    int32_t best = logits_pick(l, n).id;
    *prob = 1;
    if (want_p) {
        double sum = 0;
        for (int32_t i = 0; i < n; i++)
            sum += isfinite(l[i]) ? exp((double)l[i] - (double)l[best]) : 0;
        *prob = sum > 0 ? 1.0 / sum : 0;
    }
    return best;
}

static int32_t mtp_draft(spec_drafter_t *base, const int32_t *ctx, int32_t n, int32_t k_max, int32_t *out, float *q,
                         guild_err_t *err)
{
    mtp_drafter_t *d = (mtp_drafter_t *)base;
    (void)q;
    if (!d->be)
        return guild_err_set(err, "--spec mtp: no target backend to draft with");
    if (backend_kv_len(d->be) != n - 1)
        return guild_err_set(err, "--spec mtp: the context holds %d tokens and the cache %d: the pending token "
                             "must be the only one not in the cache", n, backend_kv_len(d->be));
    int32_t tok = ctx[n - 1], k = 0;
    while (k < k_max) {
        if (backend_mtp_step(d->be, k, tok, d->logits, err) < 0)
            return guild_err_prefix(err, "--spec mtp: ");
        double p;
        tok = argmax_prob(d->logits, d->n_vocab, d->min_p > 0, &p);
        if (p < d->min_p)
            break;
        out[k++] = tok;
    }
    return k;
}

static void mtp_destroy(spec_drafter_t *base)
{
    mtp_drafter_t *d = (mtp_drafter_t *)base;
    free(d->logits);
    free(d);
}

static const spec_drafter_ops_t mtp_ops = {.name = "mtp", .target = mtp_target, .draft = mtp_draft,
                                           .destroy = mtp_destroy};

int spec_mtp_new(spec_drafter_t **out, int32_t n_vocab, float min_p, guild_err_t *err)
{
    *out = NULL;
    mtp_drafter_t *d = calloc(1, sizeof *d);
    if (!d || !(d->logits = malloc((size_t)n_vocab * sizeof *d->logits))) {
        free(d);
        return guild_err_set(err, "out of memory");
    }
    d->base.ops = &mtp_ops;
    d->min_p = min_p;
    d->n_vocab = n_vocab;
    *out = &d->base;
    return 0;
}
