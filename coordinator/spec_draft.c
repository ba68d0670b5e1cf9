/* The draft-model drafter (coordinator/spec.h): a second model in this process with its own KV cache: on the CPU
 * backend with its own thread pool and expert executor, or on a backend stack of its own (the target's settings,
 * one process). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/backend_stack.h"
#include "coordinator/spec.h"
#include "core/util/pool.h"
#include "cpu-expert-worker/experts/moe_local.h"
#include "gpu-worker/dense/backend.h"

#define DRAFT_BATCH 64 /* tokens per forward call when the draft catches up with the context (CPU backend) */
#define DRAFT_ALONE 16 /* a catch-up of more tokens runs its last one alone: the prompt and its first token are cut
                          as the target cuts them (its prefill, then a verify step), so a batch-invariant backend
                          leaves the target's bits in the draft's cache */

typedef struct draft {
    spec_drafter_t base;
    guild_pool_t *pool;
    moe_exec_t *moe;
    backend_stack_t *stack; /* the backend's stack, or NULL: the CPU backend over pool and moe */
    backend_t *be;
    sampler_t *smp;    /* temperature > 0: draws the drafts; NULL: argmax */
    float min_p;
    int32_t n_vocab, n_ctx, n_batch;
    int32_t *hist;     /* [n_ctx] the tokens in the draft's cache */
    float *logits;     /* [n_vocab] */
    double *dist;      /* [n_vocab] */
    int32_t *pos;      /* [n_batch] */
} draft_t;

/* Makes the cache hold ctx[0..n) with the logits of its last position in d->logits. */
static int catch_up(draft_t *d, const int32_t *ctx, int32_t n, guild_err_t *err)
{
    int32_t kv = backend_kv_len(d->be), c = 0;
    while (c < kv && c < n && d->hist[c] == ctx[c])
        c++;
    if (c == n)
        c = n - 1; /* the last position runs again for its logits */
    backend_kv_truncate(d->be, c);
    c = backend_kv_len(d->be); /* a recurrent draft model may keep less: fed again from there */
    const int32_t head = n - c > DRAFT_ALONE ? n - 1 : n; /* a long run: its last token alone */
    for (int32_t s = c; s < n;) {
        const int32_t end = s < head ? head : n;
        const int32_t m = end - s < d->n_batch ? end - s : d->n_batch, last = m - 1;
        for (int32_t i = 0; i < m; i++)
            d->pos[i] = s + i;
        if (backend_forward(d->be, m, ctx + s, d->pos, s + m == n ? 1 : 0, &last, d->logits, err) < 0) {
            backend_kv_truncate(d->be, 0);
            return guild_err_prefix(err, "draft model: ");
        }
        memcpy(d->hist + s, ctx + s, (size_t)m * sizeof *ctx);
        s += m;
    }
    return 0;
}

/* The draft's token from d->logits and its probability under the draft's distribution (written to q when
 * drawn). */
static int32_t pick(draft_t *d, float *q, double *prob)
{
    const float *l = d->logits;
    if (!d->smp) {
        int32_t best = 0;
        for (int32_t i = 1; i < d->n_vocab; i++)
            if (l[i] > l[best])
                best = i;
        if (d->min_p > 0) { /* softmax at temperature 1 */
            double sum = 0;
            for (int32_t i = 0; i < d->n_vocab; i++)
                sum += isfinite(l[i]) ? exp((double)l[i] - (double)l[best]) : 0;
            *prob = sum > 0 ? 1.0 / sum : 0;
        } else {
            *prob = 1;
        }
        return best;
    }
    sampler_dist(d->smp, l, d->dist);
    const int32_t id = sampler_draw(d->smp, d->dist);
    for (int32_t i = 0; i < d->n_vocab; i++)
        q[i] = (float)d->dist[i];
    *prob = id >= 0 ? d->dist[id] : 0;
    return id;
}

static int32_t draft_draft(spec_drafter_t *base, const int32_t *ctx, int32_t n, int32_t k_max, int32_t *out, float *q,
                           guild_err_t *err)
{
    draft_t *d = (draft_t *)base;
    if (n > d->n_ctx)
        return 0;
    if (catch_up(d, ctx, n, err) < 0)
        return -1;
    int32_t k = 0;
    while (k < k_max) {
        double prob;
        const int32_t id = pick(d, q ? q + (size_t)k * (size_t)d->n_vocab : NULL, &prob);
        if (id < 0 || prob < (double)d->min_p)
            break;
        out[k++] = id;
        const int32_t p = backend_kv_len(d->be), row = 0;
        if (k == k_max || p >= d->n_ctx)
            break;
        if (backend_forward(d->be, 1, &id, &p, 1, &row, d->logits, err) < 0) {
            backend_kv_truncate(d->be, 0);
            return guild_err_prefix(err, "draft model: ");
        }
        d->hist[p] = id;
    }
    return k;
}

static int draft_begin(spec_drafter_t *base, const sample_params_t *sp, guild_err_t *err)
{
    draft_t *d = (draft_t *)base;
    sampler_destroy(&d->smp);
    d->base.has_q = false;
    if (!(sp->temp > 0))
        return 0;
    /* the drafts' own draws: no penalty (any q is right as long as the drafts are drawn from it), another stream
     * than the target's */
    sample_params_t dp = *sp;
    dp.repeat_penalty = 1.0f;
    dp.seed = sp->seed ^ 0x9e3779b97f4a7c15ull;
    if (sampler_new(&d->smp, &dp, d->n_vocab, err) < 0)
        return guild_err_prefix(err, "draft model: ");
    d->base.has_q = true;
    return 0;
}

static void draft_destroy(spec_drafter_t *base)
{
    draft_t *d = (draft_t *)base;
    if (d->stack) {
        backend_stack_close(&d->stack);
        d->be = NULL;
    }
    backend_destroy(&d->be);
    moe_exec_destroy(&d->moe);
    guild_pool_destroy(&d->pool);
    sampler_destroy(&d->smp);
    free(d->hist);
    free(d->logits);
    free(d->dist);
    free(d->pos);
    free(d);
}

static const spec_drafter_ops_t draft_ops = {.name = "draft", .begin = draft_begin, .draft = draft_draft, .destroy = draft_destroy};

int spec_draft_new(spec_drafter_t **out, const model_t *m, float min_p, int32_t n_ctx, int n_threads,
                   guild_err_t *err)
{
    *out = NULL;
    draft_t *d = calloc(1, sizeof *d);
    if (!d)
        return guild_err_set(err, "out of memory");
    d->base.ops = &draft_ops;
    d->min_p = min_p;
    d->n_vocab = model_config(m)->n_vocab;
    d->n_ctx = n_ctx;
    d->n_batch = n_ctx < DRAFT_BATCH ? n_ctx : DRAFT_BATCH;
    d->hist = malloc((size_t)n_ctx * sizeof *d->hist);
    d->logits = malloc((size_t)d->n_vocab * sizeof *d->logits);
    d->dist = malloc((size_t)d->n_vocab * sizeof *d->dist);
    d->pos = malloc((size_t)d->n_batch * sizeof *d->pos);
    if (!d->hist || !d->logits || !d->dist || !d->pos) {
        draft_destroy(&d->base);
        return guild_err_set(err, "draft model: out of memory for a context of %d", n_ctx);
    }
    if (guild_pool_new(&d->pool, n_threads, NULL, err) < 0 || moe_local_new(&d->moe, m, d->pool, err) < 0) {
        draft_destroy(&d->base);
        return guild_err_prefix(err, "draft model: ");
    }
    const backend_options_t bo = {.n_ctx = n_ctx, .n_batch = d->n_batch, .pool = d->pool, .moe = d->moe};
    if (backend_new(&d->be, "cpu", m, &bo, NULL, err) < 0) {
        draft_destroy(&d->base);
        return guild_err_prefix(err, "draft model: ");
    }
    *out = &d->base;
    return 0;
}

int spec_draft_new_stack(spec_drafter_t **out, const model_t *m, const char *draft_path, const stack_options_t *st,
                         const char *backend, float min_p, int32_t n_ctx, int n_threads, guild_err_t *err)
{
    *out = NULL;
    stack_options_t so = *st; /* the target's settings, in this process, counting nothing */
    so.single_process = true;
    so.stats = false;
    so.record_routing = NULL;
    so.gpu.backend = backend;
    if (strcmp(backend, "cuda")) /* no device budget to stand in for: the plain CPU backend */
        memset(&so.gpu.cuda, 0, sizeof so.gpu.cuda);
    so.gpu.count_routing = false;
    so.n_ctx = n_ctx;
    so.n_threads = n_threads;
    draft_t *d = calloc(1, sizeof *d);
    if (!d)
        return guild_err_set(err, "out of memory");
    d->base.ops = &draft_ops;
    d->min_p = min_p;
    d->n_vocab = model_config(m)->n_vocab;
    d->n_ctx = n_ctx;
    if (backend_stack_open(&d->stack, &so, m, draft_path, err) < 0) {
        draft_destroy(&d->base);
        return guild_err_prefix(err, "draft model (%s backend): ", backend);
    }
    d->be = backend_stack_backend(d->stack);
    d->n_batch = backend_stack_n_batch(d->stack);
    d->hist = malloc((size_t)n_ctx * sizeof *d->hist);
    d->logits = malloc((size_t)d->n_vocab * sizeof *d->logits);
    d->dist = malloc((size_t)d->n_vocab * sizeof *d->dist);
    d->pos = malloc((size_t)d->n_batch * sizeof *d->pos);
    if (!d->hist || !d->logits || !d->dist || !d->pos) {
        draft_destroy(&d->base);
        return guild_err_set(err, "draft model: out of memory for a context of %d", n_ctx);
    }
    *out = &d->base;
    return 0;
}
