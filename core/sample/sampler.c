#include "core/sample/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/sample/rng.h"

typedef struct candidate {
    float logit;
    int32_t id;
} candidate_t;

struct sampler {
    sample_params_t p;
    int32_t n_vocab;
    rng_t rng;
    candidate_t *cand;   /* [n_vocab] scratch */
    double *prob;        /* [n_vocab] scratch */
    uint8_t *penalised;  /* [n_vocab] marks, all zero between calls */
    int32_t *history;    /* [repeat_last_n] ring of accepted tokens */
    int64_t n_accepted;  /* tokens accepted since the last reset */
    int32_t nonfinite;   /* the first id whose logit was NaN or infinite in the last sampler_sample; -1: none */
};

void sample_params_default(sample_params_t *p)
{
    *p = (sample_params_t){
        .temp = 0.8f,
        .top_k = 40,
        .top_p = 0.95f,
        .min_p = 0.05f,
        .repeat_penalty = 1.0f,
        .repeat_last_n = 64,
        .seed = 0,
    };
}

int sampler_new(sampler_t **out, const sample_params_t *p, int32_t n_vocab, guild_err_t *err)
{
    *out = NULL;
    if (n_vocab < 1)
        return guild_err_set(err, "sampler: vocabulary of %d tokens", (int)n_vocab);
    if (!isfinite(p->temp))
        return guild_err_set(err, "sampler: temperature must be a finite number");
    if (!isfinite(p->top_p) || p->top_p <= 0 || p->top_p > 1)
        return guild_err_set(err, "sampler: top-p must be in (0, 1] (got %g)", (double)p->top_p);
    if (!isfinite(p->min_p) || p->min_p > 1)
        return guild_err_set(err, "sampler: min-p must be in [0, 1] (got %g)", (double)p->min_p);
    if (!isfinite(p->repeat_penalty) || p->repeat_penalty <= 0)
        return guild_err_set(err, "sampler: repeat penalty must be > 0 (got %g)", (double)p->repeat_penalty);
    if (p->repeat_last_n < 0)
        return guild_err_set(err, "sampler: repeat-last-n must be >= 0 (got %d)", (int)p->repeat_last_n);
    sampler_t *s = calloc(1, sizeof *s);
    if (!s)
        return guild_err_set(err, "sampler: out of memory");
    s->p = *p;
    s->n_vocab = n_vocab;
    s->nonfinite = -1;
    s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
    s->prob = malloc((size_t)n_vocab * sizeof *s->prob);
    s->penalised = calloc((size_t)n_vocab, 1);
    s->history = malloc((size_t)(p->repeat_last_n > 0 ? p->repeat_last_n : 1) * sizeof *s->history);
    if (!s->cand || !s->prob || !s->penalised || !s->history) {
        sampler_destroy(&s);
        return guild_err_set(err, "sampler: out of memory for %d candidates", (int)n_vocab);
    }
    sampler_reset(s);
    *out = s;
    return 0;
}

void sampler_destroy(sampler_t **sp)
{
    sampler_t *s = *sp;
    if (!s)
        return;
    free(s->cand);
    free(s->prob);
    free(s->penalised);
    free(s->history);
    free(s);
    *sp = NULL;
}

void sampler_reset(sampler_t *s)
{
    s->n_accepted = 0;
    rng_seed(&s->rng, s->p.seed);
}

void sampler_accept(sampler_t *s, int32_t token)
{
    if (s->p.repeat_last_n <= 0)
        return;
    s->history[s->n_accepted % s->p.repeat_last_n] = token;
    s->n_accepted++;
}

static int cmp_candidate(const void *a, const void *b)
{
    const candidate_t *x = a, *y = b;
    if (x->logit != y->logit)
        return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Keeps the k best candidates of cand[0..n) at the front, sorted. A min-heap of k keeps this O(n log k) for
 * large vocabularies; for k == n it is a plain sort. */
static void select_sorted(candidate_t *cand, int32_t n, int32_t k)
{
    if (k >= n) {
        qsort(cand, (size_t)n, sizeof *cand, cmp_candidate);
        return;
    }
    /* heap of the k best so far, worst at the root (cmp_candidate > 0 means "worse") */
    for (int32_t i = 0; i < n; i++) {
        candidate_t c = cand[i];
        int32_t pos;
        if (i < k) {
            pos = i;
            while (pos > 0 && cmp_candidate(&cand[(pos - 1) / 2], &c) < 0) {
                cand[pos] = cand[(pos - 1) / 2];
                pos = (pos - 1) / 2;
            }
            cand[pos] = c;
            continue;
        }
        if (cmp_candidate(&c, &cand[0]) >= 0)
            continue; /* not better than the worst kept */
        pos = 0;
        for (;;) {
            int32_t l = 2 * pos + 1, r = l + 1, w = pos;
            const candidate_t *worst = &c;
            if (l < k && cmp_candidate(&cand[l], worst) > 0)
                w = l, worst = &cand[l];
            if (r < k && cmp_candidate(&cand[r], worst) > 0)
                w = r, worst = &cand[r];
            if (w == pos)
                break;
            cand[pos] = cand[w];
            pos = w;
        }
        cand[pos] = c;
    }
    qsort(cand, (size_t)k, sizeof *cand, cmp_candidate);
}

int32_t sampler_nonfinite(const sampler_t *s)
{
    return s->nonfinite;
}

/* Steps 1-6 of the chain on logits: the token when it is decided without a draw (greedy, or nothing possible),
 * else -1 with s->cand[0..*keep) the survivors and s->prob[0..*keep) their weights at the temperature (not
 * normalised; their sum in *total). */
static int32_t chain(sampler_t *s, const float *logits, int32_t *keep_out, double *total_out)
{
    const sample_params_t *p = &s->p;
    int32_t n = s->n_vocab;
    candidate_t *cand = s->cand;
    int32_t nonfinite = -1;
    for (int32_t i = 0; i < n; i++) {
        const float l = logits[i];
        if (!isfinite(l) && nonfinite < 0)
            nonfinite = i;
        cand[i] = (candidate_t){isnan(l) ? -INFINITY : l, i};
    }
    s->nonfinite = nonfinite;

    if (p->repeat_penalty != 1.0f && p->repeat_last_n > 0) {
        int64_t have = s->n_accepted < p->repeat_last_n ? s->n_accepted : p->repeat_last_n;
        for (int64_t j = 0; j < have; j++) {
            int32_t t = s->history[j];
            if (t < 0 || t >= n || s->penalised[t])
                continue;
            s->penalised[t] = 1;
            float l = cand[t].logit;
            cand[t].logit = l > 0 ? l / p->repeat_penalty : l * p->repeat_penalty;
        }
        for (int64_t j = 0; j < have; j++)
            if (s->history[j] >= 0 && s->history[j] < n)
                s->penalised[s->history[j]] = 0;
    }

    if (p->temp <= 0) { /* the first largest; the running maximum in a register, not reloaded through best (a
                            compare chained to a load through the last move, ~5x slower over a 150k vocabulary,
                            paid per session and step by the batched server) */
        int32_t best = 0;
        float m = cand[0].logit;
        for (int32_t i = 1; i < n; i++)
            if (cand[i].logit > m) {
                m = cand[i].logit;
                best = i;
            }
        return best;
    }

    int32_t k = (p->top_k > 0 && p->top_k < n) ? p->top_k : n;
    select_sorted(cand, n, k);
    if (cand[0].logit == -INFINITY)
        return cand[0].id; /* nothing is possible; the order still gives a deterministic answer */

    /* probabilities at temperature 1, for top-p and min-p */
    double *prob = s->prob, sum = 0;
    for (int32_t i = 0; i < k; i++) {
        prob[i] = exp((double)cand[i].logit - (double)cand[0].logit);
        sum += prob[i];
    }
    int32_t keep = k;
    if (p->top_p < 1.0f) {
        double cum = 0;
        for (int32_t i = 0; i < k; i++) {
            cum += prob[i] / sum;
            if (cum >= (double)p->top_p) {
                keep = i + 1;
                break;
            }
        }
    }
    if (p->min_p > 0) {
        /* prob[0] / sum is the best probability; compare unnormalised values */
        double floor_p = (double)p->min_p * prob[0];
        int32_t i = 1;
        while (i < keep && prob[i] >= floor_p)
            i++;
        keep = i;
    }

    double total = 0;
    for (int32_t i = 0; i < keep; i++) {
        prob[i] = exp(((double)cand[i].logit - (double)cand[0].logit) / (double)p->temp);
        total += prob[i];
    }
    *keep_out = keep;
    *total_out = total;
    return -1;
}

int32_t sampler_sample(sampler_t *s, const float *logits)
{
    int32_t keep;
    double total;
    const int32_t id = chain(s, logits, &keep, &total);
    if (id >= 0)
        return id;
    const candidate_t *cand = s->cand;
    const double *prob = s->prob;
    double u = rng_uniform(&s->rng) * total, cum = 0;
    for (int32_t i = 0; i < keep; i++) {
        cum += prob[i];
        if (u < cum)
            return cand[i].id;
    }
    return cand[keep - 1].id;
}

void sampler_dist(sampler_t *s, const float *logits, double *dist)
{
    int32_t keep;
    double total;
    memset(dist, 0, (size_t)s->n_vocab * sizeof *dist);
    const int32_t id = chain(s, logits, &keep, &total);
    if (id >= 0) {
        dist[id] = 1.0;
        return;
    }
    for (int32_t i = 0; i < keep; i++)
        dist[s->cand[i].id] = s->prob[i] / total;
}

int32_t sampler_n_vocab(const sampler_t *s)
{
    return s->n_vocab;
}

const sample_params_t *sampler_params(const sampler_t *s)
{
    return &s->p;
}

double sampler_uniform(sampler_t *s)
{
    return rng_uniform(&s->rng);
}

int32_t sampler_draw(sampler_t *s, const double *w)
{
    double total = 0;
    int32_t last = -1;
    for (int32_t i = 0; i < s->n_vocab; i++)
        if (w[i] > 0) {
            total += w[i];
            last = i;
        }
    if (last < 0)
        return -1;
    double u = rng_uniform(&s->rng) * total, cum = 0;
    for (int32_t i = 0; i < s->n_vocab; i++) {
        cum += w[i] > 0 ? w[i] : 0;
        if (w[i] > 0 && u < cum)
            return i;
    }
    return last;
}
