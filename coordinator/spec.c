#include "coordinator/spec.h"

#include <stdlib.h>
#include <string.h>

#include "core/model/parts.h"
#include "core/util/cli.h"
#include "core/util/log.h"
#include "core/tokenizer/tok.h"

static const char *const kind_names[] = {"none", "ngram", "draft", "mtp"};

void spec_options_init(spec_options_t *o)
{
    *o = (spec_options_t){.kind = SPEC_NONE, .max = 4};
}

int spec_parse_kind(const char *s, spec_kind_t *kind, guild_err_t *err)
{
    for (int i = 0; i < (int)(sizeof kind_names / sizeof kind_names[0]); i++)
        if (!strcmp(s, kind_names[i])) {
            *kind = (spec_kind_t)i;
            return 0;
        }
    return guild_err_set(err, "--spec: unknown drafter '%s' (none, ngram, draft, mtp)", s);
}

const char *spec_kind_name(spec_kind_t kind)
{
    return (unsigned)kind < sizeof kind_names / sizeof kind_names[0] ? kind_names[kind] : "?";
}

int spec_options_check(const spec_options_t *o, const model_t *m, guild_err_t *err)
{
    if (o->max < 1 || o->max > SPEC_MAX_DRAFT)
        return guild_err_set(err, "--spec-max: %d is outside 1..%d", o->max, SPEC_MAX_DRAFT);
    if (!(o->min_p >= 0 && o->min_p <= 1))
        return guild_err_set(err, "--spec-min-p: %g is outside [0, 1]", (double)o->min_p);
    if ((o->draft_model || o->draft_threads || o->draft_backend) && o->kind != SPEC_DRAFT)
        return guild_err_set(err, "--%s needs --spec draft (--spec is %s)",
                             o->draft_model ? "draft-model" : o->draft_threads ? "draft-threads" : "draft-backend",
                             spec_kind_name(o->kind));
    if (o->kind == SPEC_DRAFT && !o->draft_model)
        return guild_err_set(err, "--spec draft needs --draft-model FILE");
    if (o->min_p > 0 && o->kind != SPEC_DRAFT && o->kind != SPEC_MTP)
        return guild_err_set(err, "--spec-min-p gates a drafter by its probabilities: --spec %s has none (use it "
                             "with --spec draft or mtp)", spec_kind_name(o->kind));
    const model_config_t *c = m ? model_config(m) : NULL;
    if (o->kind == SPEC_MTP && (!c || c->n_layer_mtp < 1))
        return guild_err_set(err, "--spec mtp: %s%s%shas no multi-token-prediction layer; use --spec ngram or --spec "
                             "draft", c ? "this " : "the model ", c ? model_arch_info(c->arch)->name : "",
                             c ? " model " : "");
    return 0;
}

void spec_stats_add(spec_stats_t *to, const spec_stats_t *s)
{
    to->steps += s->steps;
    to->drafted += s->drafted;
    to->accepted += s->accepted;
    to->tokens += s->tokens;
    to->draft_s += s->draft_s;
    to->verify_s += s->verify_s;
}

void spec_stats_print(const spec_stats_t *s, const char *who, FILE *out)
{
    fprintf(out,
            "%s: speculative: %llu drafted, %llu accepted (%.1f%%), %llu verify steps, %.2f tokens per step; "
            "draft %.3f s, verify %.3f s\n",
            who, (unsigned long long)s->drafted, (unsigned long long)s->accepted,
            s->drafted ? 100.0 * (double)s->accepted / (double)s->drafted : 0.0, (unsigned long long)s->steps,
            s->steps ? (double)s->tokens / (double)s->steps : 0.0, s->draft_s, s->verify_s);
}

bool spec_accept_sampled(sampler_t *smp, const float *row, int32_t d, const float *q, double *p, int32_t *tok)
{
    sampler_dist(smp, row, p);
    const double qd = q ? (double)q[d] : 1.0;
    *tok = d;
    if (sampler_uniform(smp) * qd < p[d])
        return true;
    const int32_t V = sampler_n_vocab(smp);
    for (int32_t v = 0; v < V; v++) { /* the residual max(0, p - q) */
        const double qv = q ? (double)q[v] : v == d ? 1.0 : 0.0;
        p[v] = p[v] > qv ? p[v] - qv : 0.0;
    }
    const int32_t t = sampler_draw(smp, p);
    if (t >= 0) /* else p <= q everywhere: p = q, and d could not have been rejected */
        *tok = t;
    return false;
}

void spec_drafter_destroy(spec_drafter_t **d)
{
    if (*d)
        (*d)->ops->destroy(*d);
    *d = NULL;
}

/* ---- ngram: prompt lookup ------------------------------------------------------------------------------- */

static int32_t ngram_draft(spec_drafter_t *d, const int32_t *ctx, int32_t n, int32_t k_max, int32_t *out, float *q,
                           guild_err_t *err)
{
    (void)d;
    (void)q;
    (void)err;
    for (int32_t g = SPEC_NGRAM_MAX; g >= SPEC_NGRAM_MIN; g--) {
        if (g >= n)
            continue;
        const int32_t *suffix = ctx + n - g;
        /* the newest earlier occurrence: it starts at s < n - g and is followed by at least one token */
        for (int32_t s = n - g - 1; s >= 0; s--) {
            if (memcmp(ctx + s, suffix, (size_t)g * sizeof *ctx) != 0)
                continue;
            int32_t k = 0;
            while (k < k_max && s + g + k < n) {
                out[k] = ctx[s + g + k];
                k++;
            }
            return k;
        }
    }
    return 0;
}

static void ngram_destroy(spec_drafter_t *d)
{
    free(d);
}

static const spec_drafter_ops_t ngram_ops = {.name = "ngram", .draft = ngram_draft, .destroy = ngram_destroy};

int spec_ngram_new(spec_drafter_t **out, guild_err_t *err)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return guild_err_set(err, "out of memory");
    (*out)->ops = &ngram_ops;
    return 0;
}

/* ---- the vocabularies of a draft model and its target ---------------------------------------------------- */

int spec_vocab_check(const model_t *target, const tok_t *target_tok, const model_t *draft, const tok_t *draft_tok,
                     const char *draft_path, guild_err_t *err)
{
    const int32_t vt = model_config(target)->n_vocab, vd = model_config(draft)->n_vocab;
    if (vt != vd)
        return guild_err_set(err, "--draft-model %s: %d rows of logits, the target model has %d: the vocabularies "
                             "must be the same", draft_path, vd, vt);
    const int32_t nt = tok_n_tokens(target_tok), nd = tok_n_tokens(draft_tok);
    if (nt != nd)
        return guild_err_set(err, "--draft-model %s: its tokenizer has %d tokens, the target's %d: the "
                             "vocabularies must be the same", draft_path, nd, nt);
    for (int32_t id = 0; id < nt; id++) {
        size_t la, lb;
        const char *a = tok_text(target_tok, id, &la), *b = tok_text(draft_tok, id, &lb);
        if (la != lb || memcmp(a, b, la) != 0)
            return guild_err_set(err, "--draft-model %s: token %d is '%.*s' there and '%.*s' in the target: the "
                                 "vocabularies must be the same", draft_path, id, (int)(lb > 40 ? 40 : lb), b,
                                 (int)(la > 40 ? 40 : la), a);
    }
    return 0;
}

/* ---- flags and set-up ------------------------------------------------------------------------------------ */

int spec_flag(spec_options_t *o, const char *name, const char *arg, guild_err_t *err)
{
    long v;
    if (!strcmp(name, "spec"))
        return spec_parse_kind(arg, &o->kind, err) < 0 ? -1 : 1;
    if (!strcmp(name, "spec-max")) {
        if (cli_parse_long("--spec-max", arg, 1, SPEC_MAX_DRAFT, &v, err) < 0)
            return -1;
        o->max = (int32_t)v;
        return 1;
    }
    if (!strcmp(name, "spec-min-p")) {
        float f;
        if (cli_parse_float("--spec-min-p", arg, &f, err) < 0)
            return -1;
        if (!(f >= 0 && f <= 1))
            return guild_err_set(err, "--spec-min-p: %s is outside [0, 1]", arg);
        o->min_p = f;
        return 1;
    }
    if (!strcmp(name, "draft-threads")) {
        if (cli_parse_long("--draft-threads", arg, 1, 1024, &v, err) < 0)
            return -1;
        o->draft_threads = (int)v;
        return 1;
    }
    if (!strcmp(name, "draft-model")) {
        o->draft_model = arg;
        return 1;
    }
    if (!strcmp(name, "draft-backend")) {
        if (strcmp(arg, "cpu") && strcmp(arg, "cuda"))
            return guild_err_set(err, "--draft-backend: '%s' is not cpu or cuda", arg);
        o->draft_backend = arg;
        return 1;
    }
    return 0;
}

void spec_stack_options(spec_options_t *o, stack_options_t *st)
{
    o->stack = st;
    if (o->kind == SPEC_NONE)
        return;
    if (o->kind == SPEC_MTP)
        st->gpu.mtp = true;
    st->gpu.rollback = o->max + 1; /* a verify step's rows: the pending token and its drafts */
    if (st->gpu.max_out < o->max + 1)
        st->gpu.max_out = o->max + 1;
}

int spec_setup_open(spec_setup_t *s, const spec_options_t *o, const model_t *target, const tok_t *target_tok,
                    int32_t n_ctx, int n_threads, guild_err_t *err)
{
    *s = (spec_setup_t){0};
    switch (o->kind) {
    case SPEC_NONE: return 0;
    case SPEC_NGRAM: return spec_ngram_new(&s->drafter, err);
    case SPEC_DRAFT:
        if (cmd_model_init(&s->draft, o->draft_model, err) < 0)
            return guild_err_prefix(err, "--draft-model: ");
        if (spec_vocab_check(target, target_tok, s->draft.model, s->draft.tok, o->draft_model, err) < 0)
            return -1;
        if (o->stack) /* a command's: the draft's own stack with the target's settings */
            return spec_draft_new_stack(&s->drafter, s->draft.model, o->draft_model, o->stack,
                                        o->draft_backend ? o->draft_backend : "cpu", o->min_p, n_ctx,
                                        o->draft_threads > 0 ? o->draft_threads : n_threads, err);
        if (o->draft_backend && strcmp(o->draft_backend, "cpu"))
            return guild_err_set(err, "--draft-backend %s: no target stack options to run it with",
                                 o->draft_backend);
        return spec_draft_new(&s->drafter, s->draft.model, o->min_p, n_ctx,
                              o->draft_threads > 0 ? o->draft_threads : n_threads, err);
    case SPEC_MTP: return spec_mtp_new(&s->drafter, model_config(target)->n_vocab, o->min_p, err);
    }
    return guild_err_set(err, "--spec %s is not available", spec_kind_name(o->kind));
}

void spec_setup_close(spec_setup_t *s)
{
    spec_drafter_destroy(&s->drafter);
    cmd_model_fini(&s->draft);
}
