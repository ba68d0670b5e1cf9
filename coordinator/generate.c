#include "coordinator/generate.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Text waiting for the rest of a UTF-8 sequence that a later token completes. */
typedef struct utf8_stream {
    char *buf;
    size_t len, cap;
} utf8_stream_t;

/* Appends a piece and passes on what is complete: to opt->text_out, then to opt->on_text (also when nothing
 * is). 0, 1 (on_text asked to stop) or -1 (error). */
static int stream_put(utf8_stream_t *s, const gen_options_t *opt, const char *piece, size_t n, bool flush_all,
                      guild_err_t *err)
{
    if (s->len + n > s->cap) {
        size_t cap = (s->len + n) * 2 + 16;
        char *b = realloc(s->buf, cap);
        if (!b)
            return guild_err_set(err, "out of memory");
        s->buf = b;
        s->cap = cap;
    }
    if (n)
        memcpy(s->buf + s->len, piece, n); /* s->buf is NULL before the first piece */
    s->len += n;
    size_t keep = flush_all ? 0 : tok_utf8_incomplete(s->buf, s->len);
    size_t emit = s->len - keep;
    if (emit && opt->text_out) {
        if (fwrite(s->buf, 1, emit, opt->text_out) != emit || fflush(opt->text_out) != 0)
            return guild_err_set(err, "cannot write the generated text");
    }
    int stop = opt->on_text && opt->on_text(opt->on_text_ctx, s->buf ? s->buf : "", emit) ? 1 : 0;
    if (s->buf)
        memmove(s->buf, s->buf + emit, keep);
    s->len = keep;
    return stop;
}

static int append_id(gen_result_t *res, int32_t *cap, int32_t id, guild_err_t *err)
{
    if (res->n_sampled == *cap) {
        int32_t ncap = *cap ? *cap * 2 : 64;
        int32_t *v = realloc(res->ids, (size_t)ncap * sizeof *v);
        if (!v)
            return guild_err_set(err, "out of memory");
        res->ids = v;
        *cap = ncap;
    }
    res->ids[res->n_sampled++] = id;
    return 0;
}

/* The loop's state shared by the plain and the speculative decode (gen_seq_t outside). */
struct gen_seq {
    backend_t *be;
    sampler_t *smp;
    const tok_t *tok;
    const gen_options_t *opt;
    gen_result_t *res;
    int32_t ids_cap;
    utf8_stream_t text;
    char *piece;
};
typedef struct gen_seq gen_t;

/* Writes a row of logits when asked (before its token is chosen, as the plain loop always did). */
static int put_logits(gen_t *g, const float *row, guild_err_t *err)
{
    const gen_options_t *opt = g->opt;
    if (opt->logits_out && fwrite(row, sizeof *row, (size_t)opt->n_vocab, opt->logits_out) != (size_t)opt->n_vocab)
        return guild_err_set(err, "cannot write the logits file");
    return 0;
}

/* After sampler_sample or sampler_dist on row: fails on a non-finite logit when asked. */
static int check_row(gen_t *g, const float *row, int32_t pos, guild_err_t *err)
{
    const int32_t bad = sampler_nonfinite(g->smp);
    if (g->opt->check_finite && bad >= 0)
        return guild_err_set(err, "non-finite value: the logits of position %d are not finite (token id %d: %g): "
                             "the LM head (output.weight) makes them so (--check-finite off skips this check)",
                             pos, bad, (double)row[bad]);
    return 0;
}

/* Takes a token chosen from row: tells on_token, records it, stops at end of generation, gives it to the
 * sampler's history, streams its text, stops at n_predict. 0: go on; 1: stop (res->stop set); -1: error. */
static int take(gen_t *g, const float *row, int32_t id, guild_err_t *err)
{
    gen_result_t *res = g->res;
    const gen_options_t *opt = g->opt;
    if (opt->on_token)
        opt->on_token(opt->on_token_ctx, row, id);
    if (append_id(res, &g->ids_cap, id, err) < 0)
        return -1;
    if (!opt->ignore_eog && tok_is_eog(g->tok, id)) {
        res->stop = GEN_STOP_EOG;
        return 1;
    }
    sampler_accept(g->smp, id);
    size_t n = tok_piece(g->tok, id, 0, g->piece, tok_max_piece_len(g->tok));
    int sp = stream_put(&g->text, opt, g->piece, n, false, err);
    if (sp < 0)
        return -1;
    if (sp > 0) {
        res->stop = GEN_STOP_CALLER;
        return 1;
    }
    if (opt->n_predict >= 0 && res->n_sampled >= opt->n_predict) {
        res->stop = GEN_STOP_LENGTH;
        return 1;
    }
    return 0;
}

/* check_row for a row given by its pick (gen_pickable): the same message. */
static int check_pick(gen_t *g, const logits_pick_t *pick, int32_t pos, guild_err_t *err)
{
    if (g->opt->check_finite && pick->nonfinite >= 0)
        return guild_err_set(err, "non-finite value: the logits of position %d are not finite (token id %d: %g): "
                             "the LM head (output.weight) makes them so (--check-finite off skips this check)",
                             pos, pick->nonfinite, (double)pick->bad);
    return 0;
}

bool gen_pickable(const sampler_t *smp, const gen_options_t *opt)
{
    const sample_params_t *p = sampler_params(smp);
    return p->temp <= 0 && (p->repeat_penalty == 1.0f || p->repeat_last_n <= 0) && !opt->logits_out &&
           !opt->on_token;
}

/* One plain decode step on the logits of the cache's last position (kv positions held), or on their pick (logits
 * NULL; gen_pickable): samples and takes the token. 0: *next is to be fed at position kv; 1: stopped (res->stop
 * set); -1: error. */
static int plain_step(gen_t *g, const float *logits, const logits_pick_t *pick, int32_t kv, int32_t *next,
                      guild_err_t *err)
{
    const gen_options_t *opt = g->opt;
    gen_result_t *res = g->res;
    if (opt->n_predict >= 0 && res->n_sampled >= opt->n_predict) {
        res->stop = GEN_STOP_LENGTH;
        return 1;
    }
    int32_t id;
    if (logits) {
        if (put_logits(g, logits, err) < 0)
            return -1;
        id = sampler_sample(g->smp, logits);
        if (check_row(g, logits, kv - 1, err) < 0)
            return -1;
    } else { /* the sampler's greedy choice */
        id = pick->id;
        if (check_pick(g, pick, kv - 1, err) < 0)
            return -1;
    }
    int t = take(g, logits, id, err);
    if (t)
        return t;
    if (kv >= opt->n_ctx) {
        res->stop = GEN_STOP_CONTEXT;
        return 1;
    }
    *next = id;
    return 0;
}

/* One token per forward call, from the prefill's logits on; a greedy loop takes each step's pick from the backend
 * (backend_forward_pick: the row is reduced where it was computed) instead of its row. */
static int decode_plain(gen_t *g, float *logits, guild_err_t *err)
{
    const bool pickable = gen_pickable(g->smp, g->opt);
    logits_pick_t pick;
    bool picked = false; /* the prefill's row first */
    for (;;) {
        int32_t id;
        int s = plain_step(g, picked ? NULL : logits, &pick, backend_kv_len(g->be), &id, err);
        if (s)
            return s < 0 ? -1 : 0;
        int32_t p = backend_kv_len(g->be), row = 0;
        const int rc = pickable ? backend_forward_pick(g->be, 1, &id, NULL, &p, 1, &row, g->opt->n_vocab, NULL, logits,
                                                       &pick, err)
                                : backend_forward(g->be, 1, &id, &p, 1, &row, logits, err);
        if (rc < 0)
            return -1;
        picked = pickable;
        g->res->n_decoded++;
    }
}

int gen_seq_new(gen_seq_t **out, sampler_t *smp, const tok_t *tok, const int32_t *prompt, int32_t n_prompt,
                const gen_options_t *opt, gen_result_t *res, guild_err_t *err)
{
    *out = NULL;
    gen_t *g = calloc(1, sizeof *g);
    char *piece = malloc(tok_max_piece_len(tok) + 1);
    if (!g || !piece) {
        free(g);
        free(piece);
        return guild_err_set(err, "out of memory");
    }
    *g = (gen_t){.smp = smp, .tok = tok, .opt = opt, .res = res, .piece = piece};
    for (int32_t i = 0; i < n_prompt; i++)
        sampler_accept(smp, prompt[i]);
    *out = g;
    return 0;
}

int gen_seq_step(gen_seq_t *g, const float *logits, int32_t kv_len, int32_t *next, guild_err_t *err)
{
    return plain_step(g, logits, NULL, kv_len, next, err);
}

int gen_seq_step_pick(gen_seq_t *g, const logits_pick_t *pick, int32_t kv_len, int32_t *next, guild_err_t *err)
{
    return plain_step(g, NULL, pick, kv_len, next, err);
}

int gen_seq_end(gen_seq_t **gp, int rc, guild_err_t *err)
{
    gen_t *g = *gp;
    if (!g)
        return rc;
    if (g->text.len && stream_put(&g->text, g->opt, "", 0, true, rc < 0 ? NULL : err) < 0)
        rc = -1;
    free(g->text.buf);
    free(g->piece);
    free(g);
    *gp = NULL;
    return rc;
}

/* Verify steps: the pending token (sampled, not yet in the cache) and up to spec_max drafts in one forward call;
 * row i is sampled as the plain loop would sample it after batch[0..i], and the step ends at the first draft that
 * is not the token chosen there (greedy), or that speculative sampling rejects (temperature > 0: kept with
 * probability min(1, p/q), else a token drawn from max(0, p - q)). The cache is truncated back to the tokens
 * kept (a recurrent state too, by the backend's rollback). A greedy loop (gen_pickable) verifies on the rows' picks
 * (backend_forward_pick), not the rows. */
static int decode_spec(gen_t *g, const int32_t *prompt, int32_t n_prompt, float *logits, guild_err_t *err)
{
    const gen_options_t *opt = g->opt;
    gen_result_t *res = g->res;
    spec_drafter_t *dr = opt->drafter;
    const int32_t V = opt->n_vocab;
    int32_t K = opt->spec_max < SPEC_MAX_DRAFT ? opt->spec_max : SPEC_MAX_DRAFT;
    if (K > opt->n_batch - 1)
        K = opt->n_batch - 1;
    if (K < 0)
        K = 0;
    const bool sampled = sampler_params(g->smp)->temp > 0, pickable = gen_pickable(g->smp, opt);
    logits_pick_t picks[SPEC_MAX_DRAFT + 1];
    if ((dr->ops->begin && dr->ops->begin(dr, sampler_params(g->smp), err) < 0) ||
        (dr->ops->target && dr->ops->target(dr, g->be, err) < 0))
        return -1;
    int rc = -1;
    float *rows = malloc((size_t)(K + 1) * (size_t)V * sizeof *rows);
    float *q = dr->has_q && sampled ? malloc((size_t)(K ? K : 1) * (size_t)V * sizeof *q) : NULL;
    double *p = sampled ? malloc((size_t)V * sizeof *p) : NULL;
    int32_t *ctx = malloc((size_t)(opt->n_ctx + 1) * sizeof *ctx); /* the last token sampled is not fed */
    int32_t batch[SPEC_MAX_DRAFT + 1], pos[SPEC_MAX_DRAFT + 1], outr[SPEC_MAX_DRAFT + 1];
    if (!rows || !ctx || (dr->has_q && sampled && !q) || (sampled && !p)) {
        guild_err_set(err, "out of memory for %d rows of logits", K + 1);
        goto done;
    }
    memcpy(ctx, prompt, (size_t)n_prompt * sizeof *ctx);
    int32_t n_ctx_tok = n_prompt;

    /* the first token, from the prompt's last row */
    if (opt->n_predict >= 0 && res->n_sampled >= opt->n_predict) {
        res->stop = GEN_STOP_LENGTH;
        rc = 0;
        goto done;
    }
    if (put_logits(g, logits, err) < 0)
        goto done;
    int32_t id = sampler_sample(g->smp, logits);
    if (check_row(g, logits, backend_kv_len(g->be) - 1, err) < 0)
        goto done;
    int t = take(g, logits, id, err);
    if (t) {
        rc = t < 0 ? -1 : 0;
        goto done;
    }
    ctx[n_ctx_tok++] = id;

    for (;;) {
        const int32_t kv = backend_kv_len(g->be);
        if (kv >= opt->n_ctx) {
            res->stop = GEN_STOP_CONTEXT;
            break;
        }
        int32_t k = K;
        if (k > opt->n_ctx - kv - 1)
            k = opt->n_ctx - kv - 1;
        if (opt->n_predict >= 0 && k > opt->n_predict - res->n_sampled - 1)
            k = opt->n_predict - res->n_sampled - 1;
        int32_t nd = 0;
        if (k > 0) {
            double t0 = now_s();
            nd = dr->ops->draft(dr, ctx, n_ctx_tok, k, batch + 1, q, err);
            res->spec.draft_s += now_s() - t0;
            if (nd < 0)
                goto done;
        }
        batch[0] = id;
        for (int32_t i = 0; i <= nd; i++) {
            pos[i] = kv + i;
            outr[i] = i;
        }
        double t0 = now_s();
        if ((pickable ? backend_forward_pick(g->be, nd + 1, batch, NULL, pos, nd + 1, outr, V, NULL, rows, picks, err)
                      : backend_forward(g->be, nd + 1, batch, pos, nd + 1, outr, rows, err)) < 0)
            goto done;
        res->spec.verify_s += now_s() - t0;
        res->spec.steps++;
        res->spec.drafted += (uint64_t)nd;
        int32_t i = 0;
        for (;; i++) {
            const float *row = pickable ? NULL : rows + (size_t)i * (size_t)V;
            if (row && put_logits(g, row, err) < 0)
                goto done;
            bool kept = false;
            int32_t tok;
            if (!row) {
                tok = picks[i].id;
                kept = i < nd && tok == batch[i + 1];
                if (check_pick(g, &picks[i], kv + i, err) < 0)
                    goto done;
            } else if (i == nd || !sampled) {
                tok = sampler_sample(g->smp, row);
                kept = i < nd && tok == batch[i + 1];
            } else {
                kept = spec_accept_sampled(g->smp, row, batch[i + 1], q ? q + (size_t)i * (size_t)V : NULL, p, &tok);
            }
            if (row && check_row(g, row, kv + i, err) < 0)
                goto done;
            res->spec.tokens++;
            if (kept)
                res->spec.accepted++;
            t = take(g, row, tok, err);
            if (t) {
                backend_kv_truncate(g->be, kv + 1 + i);
                res->n_decoded += 1 + i;
                rc = t < 0 ? -1 : 0;
                goto done;
            }
            ctx[n_ctx_tok++] = tok;
            if (!kept) {
                id = tok;
                break;
            }
        }
        /* kept: batch[0..i]; row i's token is the next pending one */
        backend_kv_truncate(g->be, kv + 1 + i);
        res->n_decoded += 1 + i;
        if (backend_kv_len(g->be) != kv + 1 + i) {
            guild_err_set(err, "speculative decoding: the backend could not take its cache back to %d positions (a "
                          "recurrent state rolls back with backend_options_t.rollback only)", kv + 1 + i);
            goto done;
        }
    }
    rc = 0;
done:
    free(rows);
    free(q);
    free(p);
    free(ctx);
    return rc;
}

int gen_run(backend_t *be, sampler_t *smp, const tok_t *tok, const int32_t *prompt, int32_t n_prompt,
            const gen_options_t *opt, gen_result_t *res, guild_err_t *err)
{
    memset(res, 0, sizeof *res);
    int rc = -1;
    gen_t g = {.be = be, .smp = smp, .tok = tok, .opt = opt, .res = res};
    double t_decode = 0;
    float *logits = backend_logits_alloc(be, (size_t)opt->n_vocab); /* pinned for the GPU: no copy after a step */
    int32_t *pos = malloc((size_t)opt->n_batch * sizeof *pos);
    g.piece = malloc(tok_max_piece_len(tok) + 1);
    if (!logits || !pos || !g.piece) {
        guild_err_set(err, "out of memory for %d logits", opt->n_vocab);
        goto done;
    }

    /* prefill: only the last position's logits are needed */
    double t0 = now_s();
    for (int32_t s = opt->n_past; s < n_prompt; s += opt->n_batch) {
        if (s > opt->n_past && opt->on_text && opt->on_text(opt->on_text_ctx, "", 0)) {
            res->stop = GEN_STOP_CALLER;
            rc = 0;
            goto done;
        }
        int32_t n = n_prompt - s < opt->n_batch ? n_prompt - s : opt->n_batch;
        for (int32_t i = 0; i < n; i++)
            pos[i] = s + i;
        int32_t last = n - 1;
        bool final = s + n == n_prompt;
        if (backend_forward(be, n, prompt + s, pos, final ? 1 : 0, &last, logits, err) < 0)
            goto done;
        res->n_prompt = s + n;
    }
    for (int32_t i = 0; i < n_prompt; i++)
        sampler_accept(smp, prompt[i]);
    res->prefill_s = now_s() - t0;

    t_decode = now_s();
    rc = opt->drafter ? decode_spec(&g, prompt, n_prompt, logits, err) : decode_plain(&g, logits, err);
done:
    if (t_decode > 0)
        res->decode_s = now_s() - t_decode;
    if (g.text.len && stream_put(&g.text, opt, "", 0, true, rc < 0 ? NULL : err) < 0)
        rc = -1;
    free(g.text.buf);
    backend_logits_free(be, logits);
    free(pos);
    free(g.piece);
    return rc;
}
