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

int gen_run(backend_t *be, sampler_t *smp, const tok_t *tok, const int32_t *prompt, int32_t n_prompt,
            const gen_options_t *opt, gen_result_t *res, guild_err_t *err)
{
    memset(res, 0, sizeof *res);
    int rc = -1;
    int32_t ids_cap = 0;
    utf8_stream_t text = {0};
    double t_decode = 0;
    float *logits = malloc((size_t)opt->n_vocab * sizeof *logits);
    int32_t *pos = malloc((size_t)opt->n_batch * sizeof *pos);
    char *piece = malloc(tok_max_piece_len(tok) + 1);
    if (!logits || !pos || !piece) {
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
    for (;;) {
        if (opt->n_predict >= 0 && res->n_sampled >= opt->n_predict) {
            res->stop = GEN_STOP_LENGTH;
            break;
        }
        if (opt->logits_out &&
            fwrite(logits, sizeof *logits, (size_t)opt->n_vocab, opt->logits_out) != (size_t)opt->n_vocab) {
            guild_err_set(err, "cannot write the logits file");
            goto done;
        }
        int32_t id = sampler_sample(smp, logits);
        if (opt->check_finite && sampler_nonfinite(smp) >= 0) {
            const int32_t bad = sampler_nonfinite(smp);
            guild_err_set(err, "non-finite value: the logits of position %d are not finite (token id %d: %g): the "
                          "LM head (output.weight) makes them so (--check-finite off skips this check)",
                          backend_kv_len(be) - 1, bad, (double)logits[bad]);
            goto done;
        }
        if (append_id(res, &ids_cap, id, err) < 0)
            goto done;
        if (!opt->ignore_eog && tok_is_eog(tok, id)) {
            res->stop = GEN_STOP_EOG;
            break;
        }
        sampler_accept(smp, id);
        size_t n = tok_piece(tok, id, 0, piece, tok_max_piece_len(tok));
        int sp = stream_put(&text, opt, piece, n, false, err);
        if (sp < 0)
            goto done;
        if (sp > 0) {
            res->stop = GEN_STOP_CALLER;
            break;
        }
        if (opt->n_predict >= 0 && res->n_sampled >= opt->n_predict) {
            res->stop = GEN_STOP_LENGTH;
            break;
        }
        int32_t p = backend_kv_len(be);
        if (p >= opt->n_ctx) {
            res->stop = GEN_STOP_CONTEXT;
            break;
        }
        int32_t row = 0;
        if (backend_forward(be, 1, &id, &p, 1, &row, logits, err) < 0)
            goto done;
        res->n_decoded++;
    }
    rc = 0;
done:
    if (t_decode > 0)
        res->decode_s = now_s() - t_decode;
    if (text.len && stream_put(&text, opt, "", 0, true, rc < 0 ? NULL : err) < 0)
        rc = -1;
    free(text.buf);
    free(logits);
    free(pos);
    free(piece);
    return rc;
}
