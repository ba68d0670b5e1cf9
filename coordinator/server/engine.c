#include "config.h"

#include "coordinator/server/engine.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/generate.h"
#include "coordinator/server/textfilt.h"
#include "core/util/clock.h"
#include "core/util/log.h"

struct engine {
    engine_config_t c;
    int32_t n_vocab;
    pthread_t thread;
    bool thread_started;

    pthread_mutex_t mu;
    pthread_cond_t cv;   /* queue, state or stopping changed */
    job_t **queue;       /* [queue_max] ring, under mu */
    int q_head, q_len;
    job_t *running;      /* under mu */
    int stopping;        /* atomic; written under mu */
    int state;           /* under mu: 0 opening, 1 up, -1 failed, 2 closing */
    guild_err_t open_err;
    double busy_s;       /* under mu: engine_stats' counters, published after each request */
    uint64_t expert_wait_ns;
    int64_t kv_used;     /* atomic: published after each token */

    /* the generation thread's own */
    backend_stack_t *stack;
    spec_setup_t spec;   /* the drafter (engine_config_t.spec) */
    int32_t *cached;     /* [n_ctx] the tokens in the KV cache */
    int32_t n_cached;
};

typedef struct run_ctx {
    engine_t *e;
    job_t *job;
    textfilt_t *filt;
    strbuf_t out;
    bool stopped;  /* a stop string was seen */
    bool oom;
    logprob_entry_t lp; /* the last token's log probabilities (job_spec_t.logprobs), given to the job with its text */
    bool lp_pending;
} run_ctx_t;

static bool is_stopping(engine_t *e)
{
    return __atomic_load_n(&e->stopping, __ATOMIC_ACQUIRE) != 0;
}

static int on_text(void *ctx, const char *s, size_t n)
{
    run_ctx_t *r = ctx;
    __atomic_store_n(&r->e->kv_used, (int64_t)backend_kv_len(backend_stack_backend(r->e->stack)), __ATOMIC_RELAXED);
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

static void run_job(engine_t *e, job_t *j)
{
    const job_spec_t *sp = job_spec(j);
    backend_t *be = backend_stack_backend(e->stack);
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
    int32_t n_past = 0;
    if (e->c.prefix_cache) {
        while (n_past < e->n_cached && n_past < sp->n_prompt && e->cached[n_past] == sp->prompt[n_past])
            n_past++;
        if (n_past == sp->n_prompt)
            n_past--; /* the last prompt position is run again for its logits */
    }
    backend_kv_truncate(be, n_past);
    if (backend_kv_len(be) != n_past) { /* the cache was not what we thought: start afresh */
        backend_kv_truncate(be, 0);
        n_past = 0;
    }
    st.n_cached = n_past;
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
    int grc = gen_run(be, smp, e->c.tok, sp->prompt, sp->n_prompt, &go, &res, &err);
    st.prefill_s = res.prefill_s;
    st.decode_s = res.decode_s;
    st.n_generated = res.n_sampled - (res.stop == GEN_STOP_EOG ? 1 : 0);
    if (st.n_generated < 0)
        st.n_generated = 0;

    /* what the KV cache holds now: the prompt, then the sampled tokens that were fed back */
    int32_t kv = grc < 0 ? 0 : backend_kv_len(be);
    if (grc < 0)
        backend_kv_truncate(be, 0);
    e->n_cached = 0;
    for (int32_t i = 0; i < kv && i < sp->n_prompt; i++)
        e->cached[e->n_cached++] = sp->prompt[i];
    for (int32_t i = 0; e->n_cached < kv && i < res.n_decoded; i++)
        e->cached[e->n_cached++] = res.ids[i];
    if (e->n_cached != kv) { /* cannot happen with gen_run's contract; never trust a cache we cannot name */
        backend_kv_truncate(be, 0);
        e->n_cached = 0;
    }

    if (grc < 0) {
        st.end = JOB_FAILED;
        goto done;
    }
    if (!r.stopped && !r.oom && res.stop != GEN_STOP_CALLER) {
        strbuf_clear(&r.out);
        if (textfilt_finish(r.filt, &r.out))
            r.stopped = true;
        if (!strbuf_ok(&r.out) || job_append(j, r.out.p, r.out.len) < 0)
            r.oom = true;
    }
    if (r.oom) {
        st.end = JOB_FAILED;
        guild_err_set(&err, "out of memory for the generated text");
    } else if (r.stopped || res.stop == GEN_STOP_EOG) {
        st.end = JOB_STOP;
    } else if (res.stop == GEN_STOP_LENGTH || res.stop == GEN_STOP_CONTEXT) {
        st.end = JOB_LENGTH;
    } else {
        st.end = job_cancelled(j) ? JOB_CANCELLED : JOB_SHUTDOWN;
    }
done:
    if (st.end == JOB_FAILED)
        snprintf(st.error, sizeof st.error, "%s", err.msg);
    static const char *ends[] = {"running", "stop", "length", "cancelled", "failed", "shutdown"};
    double pf = st.prefill_s > 0 ? (st.n_prompt - st.n_cached) / st.prefill_s : 0;
    double dc = st.decode_s > 0 ? res.n_decoded / st.decode_s : 0;
    guild_log(st.end == JOB_FAILED ? GUILD_LOG_WARN : GUILD_LOG_INFO,
              "request %llu: %d prompt tokens (%d cached), %d generated, %s%s%s; prefill %.1f tok/s, decode %.1f "
              "tok/s",
              (unsigned long long)job_id(j), st.n_prompt, st.n_cached, st.n_generated, ends[st.end],
              st.end == JOB_FAILED ? ": " : "", st.end == JOB_FAILED ? st.error : "", pf, dc);
    if (e->spec.drafter)
        guild_log(GUILD_LOG_INFO,
                  "request %llu: speculative: %llu drafted, %llu accepted, %llu verify steps; draft %.3f s, verify "
                  "%.3f s",
                  (unsigned long long)job_id(j), (unsigned long long)res.spec.drafted,
                  (unsigned long long)res.spec.accepted, (unsigned long long)res.spec.steps, res.spec.draft_s,
                  res.spec.verify_s);
    job_finish(j, &st);
    free(res.ids);
    strbuf_fini(&r.out);
    textfilt_destroy(&r.filt);
    sampler_destroy(&smp);
}

static void *engine_main(void *arg)
{
    engine_t *e = arg;
    guild_err_t err = {{0}};
    int rc = backend_stack_open(&e->stack, e->c.stack, e->c.model, e->c.model_path, &err);
    if (rc == 0 && e->c.spec &&
        spec_setup_open(&e->spec, e->c.spec, e->c.model, e->c.tok, e->c.stack->n_ctx, e->c.stack->n_threads, &err) <
            0) {
        spec_setup_close(&e->spec);
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

        const double t0 = guild_clock_s();
        run_job(e, j);
        const uint64_t wait_ns = backend_stack_expert_wait_ns(e->stack);
        __atomic_store_n(&e->kv_used, (int64_t)backend_kv_len(backend_stack_backend(e->stack)), __ATOMIC_RELAXED);

        pthread_mutex_lock(&e->mu);
        e->busy_s += guild_clock_s() - t0;
        e->expert_wait_ns = wait_ns;
        e->running = NULL;
        pthread_mutex_unlock(&e->mu);
        job_unref(&j);
    }
    if (e->c.stack->record_routing) {
        if (backend_stack_record_routing(e->stack, e->c.stack->record_routing, &err) < 0)
            guild_log(GUILD_LOG_ERROR, "--record-routing: %s", err.msg);
        else
            guild_log(GUILD_LOG_INFO, "routing counts added to %s", e->c.stack->record_routing);
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
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    e->queue = calloc((size_t)e->c.queue_max, sizeof *e->queue);
    e->cached = malloc((size_t)c->stack->n_ctx * sizeof *e->cached);
    if (!e->queue || !e->cached) {
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
    *running = e->running != NULL;
    *waiting = e->q_len;
    pthread_mutex_unlock(&e->mu);
}

void engine_stats(engine_t *e, engine_stats_t *out)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&e->mu);
    out->running = e->running != NULL;
    out->waiting = e->q_len;
    out->busy_s = e->busy_s;
    out->expert_wait_s = (double)e->expert_wait_ns * 1e-9;
    if (e->state == 1) /* the stack is up (closing waits for mu) */
        backend_stack_restarts(e->stack, &out->gpu_restarts, &out->cpu_restarts);
    pthread_mutex_unlock(&e->mu);
    out->kv_used = __atomic_load_n(&e->kv_used, __ATOMIC_RELAXED);
    out->kv_capacity = e->c.stack->n_ctx;
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
    free(e->cached);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    free(e);
    *ep = NULL;
}
