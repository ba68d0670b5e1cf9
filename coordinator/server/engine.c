#include "config.h"

#include "coordinator/server/engine.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/generate.h"
#include "coordinator/server/batch_plan.h"
#include "coordinator/server/prefix_cache.h"
#include "coordinator/server/textfilt.h"
#include "core/util/clock.h"
#include "core/util/log.h"

typedef struct run_ctx {
    struct engine *e;
    job_t *job;
    textfilt_t *filt;
    strbuf_t out;
    bool stopped;  /* a stop string was seen */
    bool oom;
    logprob_entry_t lp; /* the last token's log probabilities (job_spec_t.logprobs), given to the job with its text */
    bool lp_pending;
} run_ctx_t;

/* One sequence of the backend (--parallel N: N of them) and the request it runs. */
typedef struct slot {
    int32_t *cached;     /* [n_ctx] the tokens in this sequence's KV cache */
    int32_t n_cached;
    uint64_t last_used;  /* the serial of the last request it ran (least recently used first) */
    job_t *job;          /* the request it runs; NULL: free (written under mu: engine_load counts them) */
    /* the running request's (batched loop) */
    uint64_t serial;     /* admission order: prompts are prefilled oldest first */
    sampler_t *smp;
    run_ctx_t r;
    gen_options_t go;
    gen_result_t res;
    gen_seq_t *gen;      /* NULL while its prompt is prefilled */
    job_status_t st;
    int32_t n_done;      /* prompt tokens in the cache */
    int32_t next;        /* decoding: the token to feed at the next step */
    int32_t row;         /* its logits row in the current step, -1: none */
    int32_t shared;      /* most other sessions in one step with it */
    int32_t snap_at;     /* a recurrent model's prompt is prefilled up to here first and snapshotted (the state at
                            the reusable point of a repeated prompt), -1: not */
    double t0, t_decode;
} slot_t;

struct engine {
    engine_config_t c;
    int32_t n_vocab;
    pthread_t thread;
    bool thread_started;

    pthread_mutex_t mu;
    pthread_cond_t cv;   /* queue, state or stopping changed */
    job_t **queue;       /* [queue_max] ring, under mu */
    int q_head, q_len;
    job_t *running;      /* under mu (one at a time) */
    int active;          /* under mu: slots running a request (batched loop) */
    int stopping;        /* atomic; written under mu */
    int state;           /* under mu: 0 opening, 1 up, -1 failed, 2 closing */
    guild_err_t open_err;
    double busy_s;       /* under mu: engine_stats' counters, published after each request */
    uint64_t expert_wait_ns;
    int64_t kv_used;     /* atomic: published after each token */
    uint64_t hits[3];    /* under mu: requests that reused a prefix, by source (prefix_source_t) */
    uint64_t misses;     /* under mu: requests that reused none (prefix reuse on) */

    /* the generation thread's own */
    backend_stack_t *stack;
    pcache_t *pc;        /* the snapshots (engine_config_t.cache_*), or NULL */
    bool recurrent;      /* the model's cache keeps no shorter prefix (model_recurrent) */
    spec_setup_t spec;   /* the drafter (engine_config_t.spec) */
    slot_t *slots;       /* [parallel] */
    uint64_t serial;     /* requests admitted */
    float *logits;       /* [parallel][n_vocab] a batched step's rows */
    uint8_t *b_full;     /* [parallel] whether a step's output row is wanted whole (not gen_pickable) */
    logits_pick_t *b_pick; /* [parallel] a step's output rows' picks (backend_forward_pick) */
    int32_t *b_tok, *b_seq, *b_pos, *b_out; /* [n_batch] a batched step's rows and its logits rows */
    bool prompt_owed;    /* the oldest waiting prompt chunk is owed the next step (batch_plan_place) */
};

static bool is_stopping(engine_t *e)
{
    return __atomic_load_n(&e->stopping, __ATOMIC_ACQUIRE) != 0;
}

static int on_text(void *ctx, const char *s, size_t n)
{
    run_ctx_t *r = ctx;
    if (r->e->c.parallel == 1) /* the batched loop publishes its sequences' sum after each step */
        __atomic_store_n(&r->e->kv_used, (int64_t)backend_kv_len(backend_stack_backend(r->e->stack)),
                         __ATOMIC_RELAXED);
    if (job_cancelled(r->job) || is_stopping(r->e))
        return 1;
    if (r->lp_pending && job_add_logprob(r->job, &r->lp) < 0) {
        r->oom = true;
        return 1;
    }
    r->lp_pending = false;
    strbuf_clear(&r->out);
    if (textfilt_push(r->filt, s, n, &r->out))
        r->stopped = true;
    if (!strbuf_ok(&r->out) || job_append(r->job, r->out.p, r->out.len) < 0) {
        r->oom = true;
        return 1;
    }
    return r->stopped;
}

/* An end-of-generation token that ends the request gets no on_text: its entry is never given to the job. */
static void on_token(void *ctx, const float *logits, int32_t id)
{
    run_ctx_t *r = ctx;
    const job_spec_t *sp = job_spec(r->job);
    logprobs_compute(logits, r->e->n_vocab, id, sp->top_logprobs, &r->lp);
    r->lp_pending = true;
}

/* Slot s's sequence of the backend. */
static int32_t slot_seq(const engine_t *e, const slot_t *s)
{
    return (int32_t)(s - e->slots);
}

/* The prompt tokens slot s's cache holds already (prefix reuse), at most n_prompt - 1: the last prompt
 * position is run again for its logits. A recurrent model's cache is reusable whole or not at all. */
static int32_t slot_prefix(const engine_t *e, const slot_t *s, const job_spec_t *sp)
{
    int32_t n = 0;
    if (!e->c.prefix_cache)
        return 0;
    while (n < s->n_cached && n < sp->n_prompt && s->cached[n] == sp->prompt[n])
        n++;
    n = n == sp->n_prompt ? n - 1 : n;
    return e->recurrent && n < s->n_cached ? 0 : n;
}

/* Where a request's reused prefix came from (engine_stats_t.prefix_hits). */
enum { PREFIX_SLOT, PREFIX_SNAPSHOT, PREFIX_SESSION };

/* Saves positions [0, n) of sequence seq, which hold tokens[0 .. n), as a snapshot, unless one gives them
 * already. A failure costs the reuse only: it is logged. */
static void take_snapshot(engine_t *e, const int32_t *tokens, int32_t n, int32_t seq)
{
    if (!e->pc || n < 1 || pcache_covers(e->pc, tokens, n))
        return;
    void *blob;
    size_t size;
    guild_err_t err = {{0}};
    if (backend_seq_save(backend_stack_backend(e->stack), seq, n, &blob, &size, &err) < 0 ||
        pcache_put(e->pc, tokens, n, blob, size, &err) < 0)
        guild_log(GUILD_LOG_WARN, "prefix cache: a snapshot of %d positions: %s", n, err.msg);
}

/* Copies a prefix of n_pos positions into sequence seq: from snapshot key, or (from != NULL) from the cache of
 * the running session on slot from. -1 with err. */
static int prefix_copy(engine_t *e, int32_t seq, const job_spec_t *sp, int32_t n_pos, uint64_t key,
                       const slot_t *from, guild_err_t *err)
{
    backend_t *be = backend_stack_backend(e->stack);
    if (from) {
        void *blob;
        size_t size;
        if (backend_seq_save(be, slot_seq(e, from), n_pos, &blob, &size, err) < 0)
            return -1;
        int rc = backend_seq_load(be, seq, sp->prompt, n_pos, blob, size, err);
        free(blob);
        return rc;
    }
    const void *blob;
    size_t size;
    if (pcache_get(e->pc, key, &blob, &size, err) < 0)
        return -1;
    return backend_seq_load(be, seq, sp->prompt, n_pos, blob, size, err);
}

/* Places in sequence seq of slot s the longest prefix of request sp's prompt (at most n_prompt - 1 tokens) that
 * the slot's cache, a snapshot or (not for a recurrent model) a running session's cache holds; the slot's
 * previous contents are saved as a snapshot first when the request would cut them. Counts the hit or miss and
 * returns the positions reused. */
static int32_t prefix_start(engine_t *e, slot_t *s, int32_t seq, const job_spec_t *sp)
{
    backend_t *be = backend_stack_backend(e->stack);
    int32_t n_past = slot_prefix(e, s, sp);
    int src = PREFIX_SLOT;
    if (e->pc && e->c.prefix_cache) {
        const int32_t n_max = sp->n_prompt - 1;
        uint64_t key = 0;
        const int32_t m = pcache_match(e->pc, sp->prompt, n_max, &key);
        const slot_t *from = NULL;
        int32_t mf = 0;
        for (int i = 0; !e->recurrent && i < e->c.parallel; i++) {
            const slot_t *t = &e->slots[i];
            if (t == s || !t->job)
                continue;
            const job_spec_t *tp = job_spec(t->job);
            const int32_t held = t->n_done < tp->n_prompt ? t->n_done : tp->n_prompt; /* its prompt's, cached */
            int32_t k = 0;
            while (k < held && k < n_max && tp->prompt[k] == sp->prompt[k])
                k++;
            if (k > mf) {
                mf = k;
                from = t;
            }
        }
        if (s->n_cached > n_past) /* the request cuts it */
            take_snapshot(e, s->cached, s->n_cached, seq);
        const bool session = mf > n_past && mf >= m;
        if (session || m > n_past) {
            guild_err_t err = {{0}};
            const int32_t n = session ? mf : m;
            if (prefix_copy(e, seq, sp, n, key, session ? from : NULL, &err) == 0) {
                n_past = n;
                src = session ? PREFIX_SESSION : PREFIX_SNAPSHOT;
                memcpy(s->cached, sp->prompt, (size_t)n * sizeof *s->cached);
                s->n_cached = n;
            } else {
                guild_log(GUILD_LOG_WARN, "prefix cache: %s", err.msg);
            }
        }
    }
    backend_seq_kv_truncate(be, seq, n_past);
    if (backend_seq_kv_len(be, seq) != n_past) { /* the cache was not what we thought: start afresh */
        backend_seq_kv_truncate(be, seq, 0);
        s->n_cached = 0;
        n_past = 0;
    }
    s->snap_at = -1;
    if (e->pc && e->recurrent && n_past < sp->n_prompt - 1 && !pcache_covers(e->pc, sp->prompt, sp->n_prompt - 1))
        s->snap_at = sp->n_prompt - 1;
    if (e->c.prefix_cache) {
        pthread_mutex_lock(&e->mu);
        if (n_past > 0)
            e->hits[src]++;
        else
            e->misses++;
        pthread_mutex_unlock(&e->mu);
    }
    return n_past;
}

/* Runs prompt[from .. to) into sequence seq with no logits, in batches (a recurrent model's prompt up to the
 * point its snapshot is taken). -1 with err. */
static int prefill_to(engine_t *e, int32_t seq, const int32_t *prompt, int32_t from, int32_t to, guild_err_t *err)
{
    backend_t *be = backend_stack_backend(e->stack);
    const int32_t nb = backend_stack_n_batch(e->stack);
    for (int32_t p = from; p < to;) {
        const int32_t m = to - p < nb ? to - p : nb;
        for (int32_t k = 0; k < m; k++) {
            e->b_seq[k] = seq;
            e->b_pos[k] = p + k;
        }
        if (backend_forward_seq(be, m, prompt + p, e->b_seq, e->b_pos, 0, NULL, NULL, err) < 0)
            return -1;
        p += m;
    }
    return 0;
}

/* The end of a request on sequence `seq` (slot s): records what its cache holds now (the prompt, then the sampled
 * tokens fed back; emptied after a failure), releases the filter's last text, and finishes the job with its end,
 * counts and log line. grc: the generation's result (-1: failed with err). */
static void end_request(engine_t *e, slot_t *s, int32_t seq, job_t *j, run_ctx_t *r, const gen_result_t *res,
                        int grc, job_status_t *st, guild_err_t *err)
{
    backend_t *be = backend_stack_backend(e->stack);
    const job_spec_t *sp = job_spec(j);
    st->prefill_s = res->prefill_s;
    st->decode_s = res->decode_s;
    st->n_generated = res->n_sampled - (res->stop == GEN_STOP_EOG ? 1 : 0);
    if (st->n_generated < 0)
        st->n_generated = 0;

    int32_t kv = grc < 0 ? 0 : backend_seq_kv_len(be, seq);
    if (grc < 0)
        backend_seq_kv_truncate(be, seq, 0);
    s->n_cached = 0;
    for (int32_t i = 0; i < kv && i < sp->n_prompt; i++)
        s->cached[s->n_cached++] = sp->prompt[i];
    for (int32_t i = 0; s->n_cached < kv && i < res->n_decoded; i++)
        s->cached[s->n_cached++] = res->ids[i];
    if (s->n_cached != kv) { /* cannot happen with gen_run's contract; never trust a cache we cannot name */
        backend_seq_kv_truncate(be, seq, 0);
        s->n_cached = 0;
    }

    if (grc < 0) {
        st->end = JOB_FAILED;
    } else {
        if (!r->stopped && !r->oom && res->stop != GEN_STOP_CALLER) {
            strbuf_clear(&r->out);
            if (textfilt_finish(r->filt, &r->out))
                r->stopped = true;
            if (!strbuf_ok(&r->out) || job_append(j, r->out.p, r->out.len) < 0)
                r->oom = true;
        }
        if (r->oom) {
            st->end = JOB_FAILED;
            guild_err_set(err, "out of memory for the generated text");
        } else if (r->stopped || res->stop == GEN_STOP_EOG) {
            st->end = JOB_STOP;
        } else if (res->stop == GEN_STOP_LENGTH || res->stop == GEN_STOP_CONTEXT) {
            st->end = JOB_LENGTH;
        } else {
            st->end = job_cancelled(j) ? JOB_CANCELLED : JOB_SHUTDOWN;
        }
    }
}

/* The request's log line and its end, for the waiting connection. */
static void log_and_finish(engine_t *e, job_t *j, job_status_t *st, const gen_result_t *res, const guild_err_t *err,
                           int32_t shared)
{
    if (st->end == JOB_FAILED)
        snprintf(st->error, sizeof st->error, "%s", err->msg);
    static const char *ends[] = {"running", "stop", "length", "cancelled", "failed", "shutdown"};
    double pf = st->prefill_s > 0 ? (st->n_prompt - st->n_cached) / st->prefill_s : 0;
    double dc = st->decode_s > 0 ? res->n_decoded / st->decode_s : 0;
    char beside[64] = "";
    if (shared >= 0)
        snprintf(beside, sizeof beside, "; steps shared with up to %d other sessions", shared);
    guild_log(st->end == JOB_FAILED ? GUILD_LOG_WARN : GUILD_LOG_INFO,
              "request %llu: %d prompt tokens (%d cached), %d generated, %s%s%s; prefill %.1f tok/s, decode %.1f "
              "tok/s%s",
              (unsigned long long)job_id(j), st->n_prompt, st->n_cached, st->n_generated, ends[st->end],
              st->end == JOB_FAILED ? ": " : "", st->end == JOB_FAILED ? st->error : "", pf, dc, beside);
    if (e->spec.drafter)
        guild_log(GUILD_LOG_INFO,
                  "request %llu: speculative: %llu drafted, %llu accepted, %llu verify steps; draft %.3f s, verify "
                  "%.3f s",
                  (unsigned long long)job_id(j), (unsigned long long)res->spec.drafted,
                  (unsigned long long)res->spec.accepted, (unsigned long long)res->spec.steps, res->spec.draft_s,
                  res->spec.verify_s);
    job_finish(j, st);
}

/* One request at a time on sequence 0 (--parallel 1): gen_run's loop, speculative decoding included. The engine's
 * counters (busy time since t0, the CPU experts' wait, KV use) are brought up to date before the request ends, so
 * that a client reading /metrics after its reply sees them. */
static void run_job(engine_t *e, job_t *j, double t0)
{
    const job_spec_t *sp = job_spec(j);
    backend_t *be = backend_stack_backend(e->stack);
    slot_t *s = &e->slots[0];
    job_status_t st = {.end = JOB_RUNNING, .n_prompt = sp->n_prompt};
    guild_err_t err = {{0}};
    sampler_t *smp = NULL;
    run_ctx_t r = {.e = e, .job = j, .out = STRBUF_INIT};
    gen_result_t res = {0};

    if (job_cancelled(j)) {
        st.end = JOB_CANCELLED;
        goto done;
    }
    if (sampler_new(&smp, &sp->sample, e->n_vocab, &err) < 0 ||
        textfilt_new(&r.filt, (const char *const *)sp->stops, sp->n_stops, &err) < 0) {
        st.end = JOB_FAILED;
        goto done;
    }
    int32_t n_past = prefix_start(e, s, 0, sp);
    st.n_cached = n_past;
    int grc = 0;
    double t_snap = 0;
    if (s->snap_at > n_past) { /* a recurrent model: the prompt up to its snapshot point first */
        const double t1 = guild_clock_s();
        grc = prefill_to(e, 0, sp->prompt, n_past, s->snap_at, &err);
        if (grc == 0) {
            take_snapshot(e, sp->prompt, s->snap_at, 0);
            n_past = s->snap_at;
        }
        t_snap = guild_clock_s() - t1;
    }
    gen_options_t go = {
        .n_predict = sp->max_tokens,
        .n_batch = backend_stack_n_batch(e->stack),
        .n_ctx = e->c.stack->n_ctx,
        .n_vocab = e->n_vocab,
        .ignore_eog = sp->ignore_eos,
        .check_finite = e->c.stack->gpu.check_finite,
        .n_past = n_past,
        .on_text = on_text,
        .on_text_ctx = &r,
        .on_token = sp->logprobs ? on_token : NULL,
        .on_token_ctx = &r,
        .drafter = e->spec.drafter,
        .spec_max = e->c.spec ? e->c.spec->max : 0,
    };
    if (grc == 0)
        grc = gen_run(be, smp, e->c.tok, sp->prompt, sp->n_prompt, &go, &res, &err);
    res.prefill_s += t_snap;
    end_request(e, s, 0, j, &r, &res, grc, &st, &err);
done:;
    const uint64_t wait_ns = backend_stack_expert_wait_ns(e->stack);
    __atomic_store_n(&e->kv_used, (int64_t)backend_kv_len(be), __ATOMIC_RELAXED);
    pthread_mutex_lock(&e->mu);
    e->busy_s += guild_clock_s() - t0;
    e->expert_wait_ns = wait_ns;
    e->running = NULL; /* as the counters: a client that has its reply sees no request running */
    pthread_mutex_unlock(&e->mu);
    log_and_finish(e, j, &st, &res, &err, -1);
    free(res.ids);
    strbuf_fini(&r.out);
    textfilt_destroy(&r.filt);
    sampler_destroy(&smp);
}

/* ---- the batched loop (--parallel N > 1): every running request's next tokens in one forward call ---- */

/* Ends slot s's request (grc: its result, -1 with err) and frees the slot. */
static void slot_end(engine_t *e, slot_t *s, int grc, guild_err_t *err)
{
    job_t *j = s->job;
    if (s->gen) {
        grc = gen_seq_end(&s->gen, grc, err);
        s->res.decode_s = guild_clock_s() - s->t_decode;
    }
    if (s->st.end == JOB_RUNNING)
        end_request(e, s, slot_seq(e, s), j, &s->r, &s->res, grc, &s->st, err);
    log_and_finish(e, j, &s->st, &s->res, err, s->shared);
    free(s->res.ids);
    strbuf_fini(&s->r.out);
    textfilt_destroy(&s->r.filt);
    sampler_destroy(&s->smp);
    s->last_used = s->serial;
    pthread_mutex_lock(&e->mu);
    s->job = NULL;
    e->active--;
    pthread_mutex_unlock(&e->mu);
    job_unref(&j);
}

/* Starts request j on free slot s: its sampler and filter, the prefix its cache keeps. */
static void slot_start(engine_t *e, slot_t *s, job_t *j)
{
    const job_spec_t *sp = job_spec(j);
    const int32_t seq = slot_seq(e, s);
    guild_err_t err = {{0}};
    s->serial = ++e->serial;
    s->smp = NULL;
    s->r = (run_ctx_t){.e = e, .job = j, .out = STRBUF_INIT};
    s->res = (gen_result_t){0};
    s->gen = NULL;
    s->st = (job_status_t){.end = JOB_RUNNING, .n_prompt = sp->n_prompt};
    s->shared = 0;
    s->t0 = guild_clock_s();
    if (job_cancelled(j)) {
        s->st.end = JOB_CANCELLED;
        slot_end(e, s, 0, &err);
        return;
    }
    if (sampler_new(&s->smp, &sp->sample, e->n_vocab, &err) < 0 ||
        textfilt_new(&s->r.filt, (const char *const *)sp->stops, sp->n_stops, &err) < 0) {
        s->st.end = JOB_FAILED;
        slot_end(e, s, -1, &err);
        return;
    }
    const int32_t n_past = prefix_start(e, s, seq, sp);
    s->st.n_cached = n_past;
    s->n_done = n_past;
    s->go = (gen_options_t){
        .n_predict = sp->max_tokens,
        .n_batch = backend_stack_n_batch(e->stack),
        .n_ctx = e->c.stack->n_ctx,
        .n_vocab = e->n_vocab,
        .ignore_eog = sp->ignore_eos,
        .check_finite = e->c.stack->gpu.check_finite,
        .n_past = n_past,
        .on_text = on_text,
        .on_text_ctx = &s->r,
        .on_token = sp->logprobs ? on_token : NULL,
        .on_token_ctx = &s->r,
    };
}

/* Slot s's row of logits, or (row NULL) its pick (kv_len positions held): the first after its prompt begins its
 * decode. */
static void slot_take(engine_t *e, slot_t *s, const float *row, const logits_pick_t *pick, int32_t kv_len)
{
    guild_err_t err = {{0}};
    const job_spec_t *sp = job_spec(s->job);
    if (!s->gen) {
        s->res.prefill_s = guild_clock_s() - s->t0;
        if (gen_seq_new(&s->gen, s->smp, e->c.tok, sp->prompt, sp->n_prompt, &s->go, &s->res, &err) < 0) {
            slot_end(e, s, -1, &err);
            return;
        }
        s->t_decode = guild_clock_s();
    }
    int rc = row ? gen_seq_step(s->gen, row, kv_len, &s->next, &err)
                 : gen_seq_step_pick(s->gen, pick, kv_len, &s->next, &err);
    if (rc != 0)
        slot_end(e, s, rc < 0 ? -1 : 0, &err);
}

/* The running slots in admission order (prompts are prefilled oldest first). */
static int slots_by_age(const engine_t *e, slot_t **order)
{
    int n = 0;
    for (int i = 0; i < e->c.parallel; i++) {
        slot_t *s = &e->slots[i];
        if (!s->job)
            continue;
        int k = n++;
        while (k > 0 && order[k - 1]->serial > s->serial) {
            order[k] = order[k - 1];
            k--;
        }
        order[k] = s;
    }
    return n;
}

/* One step: a row for each decoding request's token and whole chunks of the prompts still prefilling, oldest first,
 * as far as the batch goes (batch_plan.h); the logits of the rows that need them go to their requests. */
static void batch_step(engine_t *e)
{
    backend_t *be = backend_stack_backend(e->stack);
    const int32_t n_batch = backend_stack_n_batch(e->stack);
    slot_t *order[e->c.parallel];
    int32_t take_n[e->c.parallel];
    int n_run = slots_by_age(e, order);
    int32_t n = 0, n_out = 0;
    for (int i = 0; i < n_run; i++) {
        slot_t *s = order[i];
        s->row = -1;
        if (job_cancelled(s->job) || is_stopping(e)) {
            guild_err_t err = {{0}};
            s->res.stop = GEN_STOP_CALLER;
            slot_end(e, s, 0, &err);
            order[i] = NULL;
        }
    }
    /* who takes part, and with how many rows: whole chunks of the prompts, as alone (batch_plan.h) */
    batch_want_t want[e->c.parallel];
    for (int i = 0; i < n_run; i++) {
        const slot_t *s = order[i];
        want[i] = !s       ? (batch_want_t){0, false}
                  : s->gen ? (batch_want_t){1, false}
                           : (batch_want_t){batch_plan_chunk(s->n_done, job_spec(s->job)->n_prompt, s->snap_at,
                                                             n_batch),
                                            true};
    }
    batch_plan_place(want, n_run, n_batch, &e->prompt_owed, take_n);
    for (int i = 0; i < n_run; i++) { /* decoding: one row each */
        slot_t *s = order[i];
        if (!take_n[i] || want[i].prompt)
            continue;
        const int32_t seq = slot_seq(e, s);
        e->b_tok[n] = s->next;
        e->b_seq[n] = seq;
        e->b_pos[n] = backend_seq_kv_len(be, seq);
        s->row = n_out;
        e->b_full[n_out] = !gen_pickable(s->smp, &s->go);
        e->b_out[n_out++] = n++;
    }
    for (int i = 0; i < n_run; i++) { /* prefilling: a whole chunk each */
        slot_t *s = order[i];
        if (!take_n[i] || !want[i].prompt)
            continue;
        const job_spec_t *sp = job_spec(s->job);
        const int32_t seq = slot_seq(e, s), m = take_n[i];
        for (int32_t k = 0; k < m; k++) {
            e->b_tok[n + k] = sp->prompt[s->n_done + k];
            e->b_seq[n + k] = seq;
            e->b_pos[n + k] = s->n_done + k;
        }
        n += m;
        if (s->n_done + m == sp->n_prompt) {
            s->row = n_out;
            e->b_full[n_out] = !gen_pickable(s->smp, &s->go);
            e->b_out[n_out++] = n - 1;
        }
    }
    if (n == 0)
        return;
    const double t0 = guild_clock_s();
    int in_step = 0;
    for (int i = 0; i < n_run; i++)
        in_step += order[i] && take_n[i] > 0;
    guild_err_t err = {{0}};
    /* greedy rows come back as their picks, reduced where the backend computed them: only sampled rows (and those
     * whose logprobs are asked) move n_vocab floats */
    const int frc = backend_forward_pick(be, n, e->b_tok, e->b_seq, e->b_pos, n_out, e->b_out, e->n_vocab, e->b_full,
                                         e->logits, e->b_pick, &err);
    int64_t kv = 0;
    for (int32_t q = 0; q < e->c.parallel; q++)
        kv += backend_seq_kv_len(be, q);
    __atomic_store_n(&e->kv_used, kv, __ATOMIC_RELAXED);
    const uint64_t wait_ns = backend_stack_expert_wait_ns(e->stack);
    pthread_mutex_lock(&e->mu);
    e->busy_s += guild_clock_s() - t0;
    e->expert_wait_ns = wait_ns;
    pthread_mutex_unlock(&e->mu);
    if (frc < 0) {
        for (int i = 0; i < n_run; i++)
            if (order[i] && take_n[i] > 0) {
                guild_err_t mine = err;
                slot_end(e, order[i], -1, &mine);
            }
        return;
    }
    for (int i = 0; i < n_run; i++) {
        slot_t *s = order[i];
        if (!s || take_n[i] == 0)
            continue;
        if (in_step - 1 > s->shared)
            s->shared = in_step - 1;
        if (s->gen) {
            s->res.n_decoded++;
        } else {
            s->n_done += take_n[i];
            s->res.n_prompt = s->n_done;
            if (s->n_done == s->snap_at) {
                take_snapshot(e, job_spec(s->job)->prompt, s->snap_at, slot_seq(e, s));
                s->snap_at = -1;
            }
        }
        if (s->row >= 0)
            slot_take(e, s, e->b_full[s->row] ? e->logits + (size_t)s->row * (size_t)e->n_vocab : NULL,
                      &e->b_pick[s->row], backend_seq_kv_len(be, slot_seq(e, s)));
    }
}

/* The free slot for a prompt: the one whose cache keeps the longest prefix of it, else the least recently
 * used. */
static slot_t *slot_for(engine_t *e, const job_spec_t *sp)
{
    slot_t *best = NULL;
    int32_t best_n = -1;
    for (int i = 0; i < e->c.parallel; i++) {
        slot_t *s = &e->slots[i];
        if (s->job)
            continue;
        const int32_t n = slot_prefix(e, s, sp);
        if (n > best_n || (n == best_n && s->last_used < best->last_used)) {
            best = s;
            best_n = n;
        }
    }
    return best;
}

/* Until stopped: requests join free slots between steps, and every running one advances at each step. */
static void batch_loop(engine_t *e)
{
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (!e->stopping && e->q_len == 0 && e->active == 0)
            pthread_cond_wait(&e->cv, &e->mu);
        if (e->stopping && e->active == 0) {
            pthread_mutex_unlock(&e->mu);
            break;
        }
        slot_t *joined[e->c.parallel];
        int n_joined = 0;
        while (!e->stopping && e->q_len > 0 && e->active < e->c.parallel) {
            job_t *j = e->queue[e->q_head];
            slot_t *s = slot_for(e, job_spec(j));
            e->q_head = (e->q_head + 1) % e->c.queue_max;
            e->q_len--;
            s->job = j; /* the queue's reference, now the slot's */
            s->n_done = 0; /* nothing of its prompt is cached yet (prefix_start of another joining slot looks) */
            e->active++;
            joined[n_joined++] = s;
        }
        pthread_mutex_unlock(&e->mu);
        for (int i = 0; i < n_joined; i++)
            slot_start(e, joined[i], joined[i]->job);
        batch_step(e); /* when stopping, it ends the running requests */
    }
}

/* Until stopped: one request at a time, in arrival order (--parallel 1). */
static void serial_loop(engine_t *e)
{
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (!e->stopping && e->q_len == 0)
            pthread_cond_wait(&e->cv, &e->mu);
        if (e->stopping) {
            pthread_mutex_unlock(&e->mu);
            break;
        }
        job_t *j = e->queue[e->q_head];
        e->q_head = (e->q_head + 1) % e->c.queue_max;
        e->q_len--;
        e->running = j;
        pthread_mutex_unlock(&e->mu);

        run_job(e, j, guild_clock_s());
        pthread_mutex_lock(&e->mu);
        e->running = NULL;
        pthread_mutex_unlock(&e->mu);
        job_unref(&j);
    }
}

/* The snapshot store (engine_config_t.cache_*), when prefix reuse is on and the backend takes snapshots. -1 with
 * err: the model file or --cache-dir cannot be read. */
static int prefix_open(engine_t *e, guild_err_t *err)
{
    backend_t *be = backend_stack_backend(e->stack);
    if (!e->c.prefix_cache || (e->c.cache_ram == 0 && !e->c.cache_dir))
        return 0;
    if (e->c.spec && e->c.spec->kind == SPEC_MTP) { /* the MTP layer's hidden states are not in a snapshot */
        guild_log(GUILD_LOG_INFO, "prefix cache: no snapshots with --spec mtp: only the sequence's own cache is "
                  "reused");
        return 0;
    }
    if (!backend_has_snapshots(be)) {
        guild_log(GUILD_LOG_WARN, "prefix cache: backend %s keeps no snapshots: only each sequence's own cache is "
                  "reused", e->c.stack->gpu.backend);
        return 0;
    }
    pcache_options_t o = {
        .ram_max = e->c.cache_ram,
        .dir = e->c.cache_dir,
        .disk_max = e->c.cache_disk,
        .recurrent = e->recurrent,
        .id.kv_type = e->c.stack->gpu.kv_type,
    };
    snprintf(o.id.backend, sizeof o.id.backend, "%s", e->c.stack->gpu.backend);
    if (pcache_model_identity(e->c.model_path, &o.id.model_size, &o.id.model_hash, err) < 0)
        return guild_err_prefix(err, "prefix cache: ");
    pcache_t *pc;
    if (pcache_new(&pc, &o, err) < 0)
        return -1;
    pthread_mutex_lock(&e->mu);
    e->pc = pc; /* engine_stats reads it under mu */
    pthread_mutex_unlock(&e->mu);
    return 0;
}

/* Frees the snapshot store (engine_stats reads it under mu). */
static void prefix_close(engine_t *e)
{
    pthread_mutex_lock(&e->mu);
    pcache_t *pc = e->pc;
    e->pc = NULL;
    pthread_mutex_unlock(&e->mu);
    pcache_destroy(&pc);
}

static void *engine_main(void *arg)
{
    engine_t *e = arg;
    guild_err_t err = {{0}};
    int rc = backend_stack_open(&e->stack, e->c.stack, e->c.model, e->c.model_path, &err);
    if (rc == 0 && backend_stack_n_batch(e->stack) < e->c.parallel) {
        guild_err_set(&err, "--parallel %d: a step decodes a token of every session, so the batch must be at least "
                      "%d tokens (it is %d: --batch)", e->c.parallel, e->c.parallel, backend_stack_n_batch(e->stack));
        backend_stack_close(&e->stack);
        rc = -1;
    }
    if (rc == 0) {
        const size_t NB = (size_t)backend_stack_n_batch(e->stack);
        e->logits = malloc((size_t)e->c.parallel * (size_t)e->n_vocab * sizeof *e->logits);
        e->b_tok = malloc(NB * sizeof *e->b_tok);
        e->b_seq = malloc(NB * sizeof *e->b_seq);
        e->b_pos = malloc(NB * sizeof *e->b_pos);
        e->b_out = malloc(NB * sizeof *e->b_out);
        e->b_full = malloc((size_t)e->c.parallel * sizeof *e->b_full);
        e->b_pick = malloc((size_t)e->c.parallel * sizeof *e->b_pick);
        if (!e->logits || !e->b_tok || !e->b_seq || !e->b_pos || !e->b_out || !e->b_full || !e->b_pick) {
            guild_err_set(&err, "out of memory for steps of %zu tokens", NB);
            backend_stack_close(&e->stack);
            rc = -1;
        }
    }
    if (rc == 0 && prefix_open(e, &err) < 0) {
        backend_stack_close(&e->stack);
        rc = -1;
    }
    if (rc == 0 && e->c.spec &&
        spec_setup_open(&e->spec, e->c.spec, e->c.model, e->c.tok, e->c.stack->n_ctx, e->c.stack->n_threads, &err) <
            0) {
        spec_setup_close(&e->spec);
        prefix_close(e);
        backend_stack_close(&e->stack);
        rc = -1;
    }
    pthread_mutex_lock(&e->mu);
    e->state = rc < 0 ? -1 : 1;
    e->open_err = err;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (rc < 0)
        return NULL;
    if (e->c.parallel > 1)
        batch_loop(e);
    else
        serial_loop(e);
    for (int i = 0; e->pc && e->c.cache_dir && i < e->c.parallel; i++) /* what the next start can reuse */
        take_snapshot(e, e->slots[i].cached, e->slots[i].n_cached, i);
    prefix_close(e);
    if (e->c.stack->record_routing) {
        routing_profile_merge_t mi;
        if (backend_stack_record_routing(e->stack, e->c.stack->record_routing, false, &mi, &err) < 0)
            guild_log(GUILD_LOG_ERROR, "--record-routing: %s", err.msg);
        else
            guild_log(GUILD_LOG_INFO, "routing counts %s %s: %llu tokens before, %llu now%s",
                      mi.created ? "written to" : "added to", e->c.stack->record_routing,
                      (unsigned long long)mi.tokens_before, (unsigned long long)mi.tokens_after,
                      mi.saturated ? " (some counts saturated at their limit)" : "");
    }
    pthread_mutex_lock(&e->mu);
    e->state = 2; /* engine_health no longer looks at the stack */
    pthread_mutex_unlock(&e->mu);
    spec_setup_close(&e->spec);
    backend_stack_close(&e->stack);
    return NULL;
}

int32_t engine_n_batch(const engine_t *e)
{
    return e->stack ? backend_stack_n_batch(e->stack) : e->c.stack->n_batch;
}

int engine_new(engine_t **out, const engine_config_t *c, guild_err_t *err)
{
    *out = NULL;
    engine_t *e = calloc(1, sizeof *e);
    if (!e)
        return guild_err_set(err, "out of memory");
    e->c = *c;
    if (e->c.queue_max < 1)
        e->c.queue_max = 1;
    e->n_vocab = model_config(c->model)->n_vocab;
    e->recurrent = model_recurrent(model_config(c->model));
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    if (e->c.parallel < 1)
        e->c.parallel = 1;
    if (e->c.parallel > 1 && e->c.spec) {
        guild_err_set(err, "speculative decoding (--spec) runs one session at a time: it cannot be combined with "
                      "--parallel %d (use --parallel 1, or leave --spec out)", e->c.parallel);
        goto fail;
    }
    if (e->c.parallel != (c->stack->n_seq > 1 ? c->stack->n_seq : 1)) {
        guild_err_set(err, "--parallel %d: the backend stack holds %d sequences", e->c.parallel, c->stack->n_seq);
        goto fail;
    }
    e->queue = calloc((size_t)e->c.queue_max, sizeof *e->queue);
    e->slots = calloc((size_t)e->c.parallel, sizeof *e->slots);
    if (!e->queue || !e->slots) {
        guild_err_set(err, "out of memory");
        goto fail;
    }
    for (int i = 0; i < e->c.parallel; i++)
        if (!(e->slots[i].cached = malloc((size_t)c->stack->n_ctx * sizeof *e->slots[i].cached))) {
            guild_err_set(err, "out of memory");
            goto fail;
        }
    int pe = pthread_create(&e->thread, NULL, engine_main, e);
    if (pe) {
        guild_err_errno(err, pe, "cannot start the generation thread");
        goto fail;
    }
    e->thread_started = true;
    pthread_mutex_lock(&e->mu);
    while (e->state == 0)
        pthread_cond_wait(&e->cv, &e->mu);
    int state = e->state;
    pthread_mutex_unlock(&e->mu);
    if (state < 0) {
        *err = e->open_err;
        goto fail;
    }
    *out = e;
    return 0;
fail:
    engine_destroy(&e);
    return -1;
}

engine_submit_t engine_submit(engine_t *e, job_t *j)
{
    engine_submit_t r;
    pthread_mutex_lock(&e->mu);
    if (e->stopping) {
        r = ENGINE_STOPPING;
    } else if (e->q_len == e->c.queue_max) {
        r = ENGINE_BUSY;
    } else {
        e->queue[(e->q_head + e->q_len) % e->c.queue_max] = job_ref(j);
        e->q_len++;
        pthread_cond_broadcast(&e->cv);
        r = ENGINE_QUEUED;
    }
    pthread_mutex_unlock(&e->mu);
    return r;
}

void engine_load(engine_t *e, int *running, int *waiting)
{
    pthread_mutex_lock(&e->mu);
    *running = e->c.parallel > 1 ? e->active : e->running != NULL;
    *waiting = e->q_len;
    pthread_mutex_unlock(&e->mu);
}

void engine_stats(engine_t *e, engine_stats_t *out)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&e->mu);
    out->running = e->c.parallel > 1 ? e->active : e->running != NULL;
    out->waiting = e->q_len;
    out->busy_s = e->busy_s;
    out->expert_wait_s = (double)e->expert_wait_ns * 1e-9;
    if (e->state == 1) /* the stack is up (closing waits for mu) */
        backend_stack_restarts(e->stack, &out->gpu_restarts, &out->cpu_restarts);
    for (int i = 0; i < 3; i++)
        out->prefix_hits[i] = e->hits[i];
    out->prefix_misses = e->misses;
    if (e->pc) /* freed under mu */
        pcache_stats(e->pc, &out->cache);
    pthread_mutex_unlock(&e->mu);
    out->kv_used = __atomic_load_n(&e->kv_used, __ATOMIC_RELAXED);
    out->kv_capacity = (int64_t)e->c.stack->n_ctx * e->c.parallel;
}

int engine_health(engine_t *e, char *why, size_t n)
{
    int rc;
    pthread_mutex_lock(&e->mu);
    if (e->state == 1 && !e->stopping) {
        rc = backend_stack_health(e->stack, why, n);
    } else {
        snprintf(why, n, "the server is shutting down");
        rc = -1;
    }
    pthread_mutex_unlock(&e->mu);
    return rc;
}

void engine_shutdown(engine_t *e)
{
    pthread_mutex_lock(&e->mu);
    __atomic_store_n(&e->stopping, 1, __ATOMIC_RELEASE); /* the running job sees it at its next token */
    while (e->q_len) {
        job_t *j = e->queue[e->q_head];
        e->q_head = (e->q_head + 1) % e->c.queue_max;
        e->q_len--;
        job_status_t st = {.end = JOB_SHUTDOWN, .n_prompt = job_spec(j)->n_prompt};
        job_finish(j, &st);
        job_unref(&j);
    }
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (e->thread_started) {
        pthread_join(e->thread, NULL);
        e->thread_started = false;
    }
}

void engine_destroy(engine_t **ep)
{
    engine_t *e = *ep;
    if (!e)
        return;
    engine_shutdown(e);
    free(e->queue);
    for (int i = 0; e->slots && i < e->c.parallel; i++)
        free(e->slots[i].cached);
    free(e->slots);
    free(e->logits);
    free(e->b_tok);
    free(e->b_seq);
    free(e->b_pos);
    free(e->b_out);
    free(e->b_full);
    free(e->b_pick);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    free(e);
    *ep = NULL;
}
