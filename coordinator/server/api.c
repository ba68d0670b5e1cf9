#include "config.h"

#include "coordinator/server/api.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coordinator/server/api_json.h"
#include "coordinator/server/api_logprobs.h"
#include "coordinator/server/api_request.h"
#include "coordinator/server/api_tokenize.h"
#include "coordinator/server/job.h"
#include "coordinator/server/strbuf.h"
#include "coordinator/server/textfilt.h"
#include "core/chat/harmony.h"

#define WAIT_SLICE_MS 100 /* how often a waiting connection looks at its client */

static const char *const endpoints =
    "GET /health, GET /v1/models, POST /v1/completions, POST /v1/chat/completions, POST /tokenize, "
    "POST /detokenize, GET /metrics";

static void reply_id(api_reply_id_t *id, api_kind_t kind, const api_server_t *s, const job_t *j)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    id->kind = kind;
    id->created = (int64_t)ts.tv_sec;
    id->model = s->model_id;
    snprintf(id->id, sizeof id->id, "%s-%08llx%08lx%06llx", kind == API_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)ts.tv_sec & 0xffffffffull, (unsigned long)ts.tv_nsec,
             (unsigned long long)job_id(j) & 0xffffffull);
}

static const char *finish_reason(job_end_t end)
{
    return end == JOB_LENGTH ? "length" : "stop";
}

/* Constant time in the key's length, so that a wrong key's prefix cannot be found by timing. */
static bool authorized(const api_server_t *s, http_req_t *req)
{
    if (!s->api_key)
        return true;
    const char *h = http_req_header(req, "Authorization");
    if (!h || strncmp(h, "Bearer ", 7) != 0)
        return false;
    const char *k = h + 7;
    size_t n = strlen(s->api_key), m = strlen(k);
    unsigned char diff = (unsigned char)(n != m);
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)(s->api_key[i] ^ (i < m ? k[i] : 0));
    return diff == 0;
}

/* ---- prompt ------------------------------------------------------------------------------------------- */

/* The request's prompt as token ids (malloc'ed in *ids). false after replying with the error. */
static bool prompt_ids(const api_server_t *s, http_req_t *req, api_request_t *r, int32_t **ids, int32_t *n)
{
    const char *param = r->kind == API_CHAT ? "messages" : "prompt";
    guild_err_t err = {{0}};
    tok_ids_t t;
    tok_ids_init(&t);
    if (r->kind == API_COMPLETIONS && r->prompt_ids) {
        *ids = r->prompt_ids;
        *n = (int32_t)r->n_prompt_ids;
        r->prompt_ids = NULL;
        r->n_prompt_ids = 0;
    } else {
        unsigned flags = TOK_ADD_SPECIAL;
        const char *text = r->prompt;
        size_t len = r->prompt_len;
        char *chat = NULL;
        if (r->kind == API_CHAT) {
            if (s->chat == CHAT_TMPL_UNKNOWN) {
                http_reply_error(req, 500, "server_error", NULL, "%s", s->chat_error);
                return false;
            }
            const chat_opts_t co = {.reasoning_effort = r->reasoning_effort};
            if (chat_format_opts(s->chat, r->messages, r->n_messages, true, s->eos_text, &co, &chat, &len, &err) <
                0) {
                http_reply_error(req, 500, "server_error", NULL, "%s", err.msg);
                return false;
            }
            text = chat;
            flags |= TOK_PARSE_SPECIAL; /* the template's markers are special tokens */
        }
        int rc = tok_encode(s->tok, text, len, flags, &t, &err);
        free(chat);
        if (rc < 0) {
            http_reply_error(req, 400, "invalid_request_error", param, "%s: %s", param, err.msg);
            tok_ids_fini(&t);
            return false;
        }
        if (t.n > (size_t)INT32_MAX)
            t.n = (size_t)INT32_MAX; /* caught below: more than any context */
        *ids = t.v;
        *n = (int32_t)t.n;
    }
    if (*n == 0) {
        http_reply_error(req, 400, "invalid_request_error", param, "%s: the prompt gives no tokens", param);
        free(*ids);
        return false;
    }
    if (*n > s->n_ctx) {
        http_reply_error(req, 400, "invalid_request_error", param,
                         "%s: the prompt has %d tokens, more than the context of %d tokens (guild serve --ctx)",
                         param, *n, s->n_ctx);
        free(*ids);
        return false;
    }
    return true;
}

/* ---- channels ----------------------------------------------------------------------------------------- */

/* A chat reply whose template has channels (gpt-oss's harmony) is split into content and reasoning, as
 * llama.cpp's server returns them ("content", "reasoning_content"); other replies are content as they are. */
static bool has_channels(const api_server_t *s, api_kind_t kind)
{
    return kind == API_CHAT && s->chat == CHAT_TMPL_GPT_OSS;
}

typedef struct split {
    strbuf_t content, reasoning;
} split_t;

static void split_part(void *ctx, chat_part_t part, const char *text, size_t len)
{
    split_t *sp = ctx;
    strbuf_put(part == CHAT_PART_REASONING ? &sp->reasoning : &sp->content, text, len);
}

/* ---- log probabilities -------------------------------------------------------------------------------- */

/* Sets choices[0].logprobs of a reply or chunk j to the entries v[0..n) in the endpoint's shape (*offset: the
 * completion's text offset, advanced). false when out of memory. */
static bool attach_logprobs(const api_server_t *s, api_kind_t kind, json_t *j, const logprob_entry_t *v, size_t n,
                            size_t *offset)
{
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
    if (!c0)
        return true;
    json_t *lp = kind == API_CHAT ? apilp_chat(s->tok, v, n) : apilp_completion(s->tok, v, n, offset);
    return lp && json_object_set_new(c0, "logprobs", lp) == 0;
}

/* ---- streaming ---------------------------------------------------------------------------------------- */

typedef struct sse {
    const api_server_t *srv;
    job_t *job;
    api_reply_id_t id;
    bool include_usage;
    size_t seen;     /* bytes of the job's text sent */
    strbuf_t out;    /* events not yet given to the connection */
    strbuf_t text;
    bool done;       /* the last event is in out */
    bool channels;   /* split the text into content and reasoning (has_channels) */
    chat_harmony_parser_t harmony;
    chat_part_t part; /* of the text in pending */
    strbuf_t pending; /* text of one part not yet in a chunk */
    bool logprobs;    /* the request asked for them */
    size_t lp_read;   /* entries read from the job */
    logprob_entry_t *lp; /* [n_lp] read, not yet in a chunk: they go in the next chunk with a choice */
    size_t n_lp;
    size_t lp_offset; /* the completion's text offset of lp[0] */
    bool counted;     /* metrics_request done: when the last events are made (before the client can see them) */
} sse_t;

static void sse_event(sse_t *s, json_t *j);

/* pending as one chunk: its part's field of the delta. */
static void sse_flush_part(sse_t *s)
{
    if (!s->pending.len)
        return;
    if (s->part == CHAT_PART_REASONING)
        sse_event(s, apijson_chunk(&s->id, NULL, 0, s->pending.p, s->pending.len, false, NULL));
    else
        sse_event(s, apijson_chunk(&s->id, s->pending.p, s->pending.len, NULL, 0, false, NULL));
    strbuf_clear(&s->pending);
}

static void sse_part(void *ctx, chat_part_t part, const char *text, size_t len)
{
    sse_t *s = ctx;
    if (part != s->part)
        sse_flush_part(s);
    s->part = part;
    strbuf_put(&s->pending, text, len);
}

/* The chunks of new text: as it is, or split by channel, a chunk for each run of one part in the order the text
 * has them (end: the reply is complete; what the parser held goes out). */
static void sse_text(sse_t *s, const char *text, size_t len, bool end)
{
    if (!s->channels) {
        if (len)
            sse_event(s, apijson_chunk(&s->id, text, len, NULL, 0, false, NULL));
        return;
    }
    chat_harmony_parse(&s->harmony, text, len, end, sse_part, s);
    if (!strbuf_ok(&s->pending)) {
        s->out.oom = true;
        return;
    }
    sse_flush_part(s);
}

static void sse_event(sse_t *s, json_t *j)
{
    if (s->n_lp && json_array_size(json_object_get(j, "choices"))) {
        if (!attach_logprobs(s->srv, s->id.kind, j, s->lp, s->n_lp, &s->lp_offset))
            s->out.oom = true;
        free(s->lp);
        s->lp = NULL;
        s->n_lp = 0;
    }
    char *d = apijson_dump(j);
    json_decref(j);
    if (!d) {
        s->out.oom = true;
        return;
    }
    strbuf_puts(&s->out, "data: ");
    strbuf_puts(&s->out, d);
    strbuf_puts(&s->out, "\n\n");
    free(d);
}

static void sse_end(sse_t *s, const job_status_t *st)
{
    s->done = true;
    metrics_request(s->srv->metrics, s->id.kind, metrics_outcome_of(st->end), st);
    s->counted = true;
    switch (st->end) {
    case JOB_STOP:
    case JOB_LENGTH:
        sse_text(s, "", 0, true); /* what the channel parser held */
        sse_event(s, apijson_chunk(&s->id, NULL, 0, NULL, 0, false, finish_reason(st->end)));
        if (s->include_usage)
            sse_event(s, apijson_usage_chunk(&s->id, apijson_usage(st->n_prompt, st->n_generated, st->n_cached)));
        strbuf_puts(&s->out, "data: [DONE]\n\n");
        break;
    case JOB_FAILED: /* the error, then the stream's end: the request is over, the server goes on */
        sse_event(s, apijson_error("server_error", NULL, st->error));
        strbuf_puts(&s->out, "data: [DONE]\n\n");
        break;
    default: /* JOB_SHUTDOWN (a cancelled job has no reader left): cut, not complete */
        sse_event(s, apijson_error("unavailable_error", NULL, "the server is shutting down"));
        break;
    }
}

/* The job's new entries (after job_read: they cover its text), added to those waiting for a chunk. */
static int sse_read_logprobs(sse_t *s)
{
    logprob_entry_t *v;
    size_t n;
    if (job_read_logprobs(s->job, s->lp_read, &v, &n) < 0)
        return -1;
    if (!n)
        return 0;
    logprob_entry_t *all = realloc(s->lp, (s->n_lp + n) * sizeof *all);
    if (!all) {
        free(v);
        return -1;
    }
    memcpy(all + s->n_lp, v, n * sizeof *v);
    free(v);
    s->lp = all;
    s->n_lp += n;
    s->lp_read += n;
    return 0;
}

static ssize_t sse_produce(void *ctx, http_stream_t *hs, char *buf, size_t max)
{
    sse_t *s = ctx;
    while (s->out.len == 0) {
        if (s->done)
            return HTTP_STREAM_END;
        if (!job_wait(s->job, s->seen, WAIT_SLICE_MS)) {
            if (http_stream_client_gone(hs)) {
                job_cancel(s->job);
                return HTTP_STREAM_ABORT;
            }
            continue;
        }
        job_status_t st;
        strbuf_clear(&s->text);
        s->seen = job_read(s->job, s->seen, &s->text, &st);
        if (s->logprobs && sse_read_logprobs(s) < 0)
            s->out.oom = true;
        sse_text(s, s->text.p, s->text.len, false);
        if (st.end != JOB_RUNNING) /* job_read's text and status are of one moment: nothing is left */
            sse_end(s, &st);
        if (!strbuf_ok(&s->out) || !strbuf_ok(&s->text)) {
            job_cancel(s->job);
            return HTTP_STREAM_ABORT;
        }
    }
    size_t n = s->out.len < max ? s->out.len : max;
    memcpy(buf, s->out.p, n);
    strbuf_consume(&s->out, n);
    return (ssize_t)n;
}

static void sse_free(void *ctx)
{
    sse_t *s = ctx;
    if (!s->counted) { /* the client went away first */
        job_status_t st;
        job_read(s->job, SIZE_MAX, &s->text, &st); /* the status only: from SIZE_MAX there is no text */
        metrics_request(s->srv->metrics, s->id.kind, metrics_outcome_of(st.end), &st);
    }
    job_cancel(s->job); /* no-op when it has ended; stops it when the client went away mid-stream */
    job_unref(&s->job);
    strbuf_fini(&s->out);
    strbuf_fini(&s->text);
    strbuf_fini(&s->pending);
    free(s->lp);
    free(s);
}

/* ---- completions -------------------------------------------------------------------------------------- */

static void reply_whole(const api_server_t *s, http_req_t *req, api_kind_t kind, job_t *j)
{
    while (!job_wait(j, SIZE_MAX, WAIT_SLICE_MS)) { /* until the end */
        if (http_req_client_gone(req)) {
            job_cancel(j);
            http_reply_none(req);
            metrics_request(s->metrics, kind, METRICS_CANCELLED, NULL);
            return;
        }
    }
    strbuf_t text = STRBUF_INIT;
    split_t sp = {STRBUF_INIT, STRBUF_INIT};
    job_status_t st;
    job_read(j, 0, &text, &st);
    metrics_request(s->metrics, kind, metrics_outcome_of(st.end), &st);
    if (strbuf_ok(&text) && has_channels(s, kind)) {
        chat_harmony_parser_t h;
        chat_harmony_parser_init(&h);
        chat_harmony_parse(&h, text.p, text.len, true, split_part, &sp);
    }
    if (!strbuf_ok(&text) || !strbuf_ok(&sp.content) || !strbuf_ok(&sp.reasoning)) {
        http_reply_error(req, 500, "server_error", NULL, "out of memory for the reply");
    } else if (st.end == JOB_STOP || st.end == JOB_LENGTH) {
        api_reply_id_t id;
        reply_id(&id, kind, s, j);
        const bool ch = has_channels(s, kind);
        json_t *body = apijson_reply(&id, ch ? strbuf_str(&sp.content) : strbuf_str(&text), ch ? sp.content.len
                                                                                                : text.len,
                                     ch && sp.reasoning.len ? strbuf_str(&sp.reasoning) : NULL, sp.reasoning.len,
                                     finish_reason(st.end),
                                     apijson_usage(st.n_prompt, st.n_generated, st.n_cached));
        logprob_entry_t *lp = NULL;
        size_t n_lp = 0, offset = 0;
        bool ok = body != NULL;
        if (ok && job_spec(j)->logprobs)
            ok = job_read_logprobs(j, 0, &lp, &n_lp) == 0 && attach_logprobs(s, kind, body, lp, n_lp, &offset);
        free(lp);
        if (ok)
            http_reply_json(req, 200, body);
        else
            http_reply_error(req, 500, "server_error", NULL, "out of memory for the reply");
        json_decref(body);
    } else if (st.end == JOB_FAILED) {
        http_reply_error(req, 500, "server_error", NULL, "generation failed: %s", st.error);
    } else if (st.end == JOB_SHUTDOWN) {
        http_reply_error(req, 503, "unavailable_error", NULL, "the server is shutting down");
    } else {
        http_reply_none(req);
    }
    strbuf_fini(&text);
    strbuf_fini(&sp.content);
    strbuf_fini(&sp.reasoning);
}

static void handle_completions(const api_server_t *s, http_req_t *req, api_kind_t kind)
{
    size_t len;
    const char *body = http_req_body(req, &len);
    api_request_t r;
    api_error_t e;
    job_t *j = NULL;
    /* how a request refused before it reaches the engine is counted (metrics.h); once queued, its reply counts */
    metrics_outcome_t refused = METRICS_INVALID;
    if (api_request_parse(&r, kind, body, len, s->n_vocab, &e) < 0) {
        bool oom = !e.param[0] && !strcmp(e.message, "out of memory");
        http_reply_error(req, oom ? 500 : 400, oom ? "server_error" : "invalid_request_error", e.param, "%s",
                         e.message);
        goto done;
    }
    job_spec_t spec = {
        .max_tokens = r.max_tokens,
        .sample = r.sample,
        .stops = r.stops,
        .n_stops = r.n_stops,
        .ignore_eos = r.ignore_eos,
        .logprobs = r.logprobs,
        .top_logprobs = r.top_logprobs,
    };
    if (!prompt_ids(s, req, &r, &spec.prompt, &spec.n_prompt)) {
        if (kind == API_CHAT && s->chat == CHAT_TMPL_UNKNOWN)
            refused = METRICS_FAILED; /* 500: the server cannot format chats */
        goto done;
    }
    r.stops = NULL; /* the job owns them now */
    r.n_stops = 0;
    guild_err_t err = {{0}};
    if (job_new(&j, &spec, &err) < 0) {
        refused = METRICS_FAILED;
        http_reply_error(req, 500, "server_error", NULL, "%s", err.msg);
        goto done;
    }
    int running, waiting;
    char why[1024];
    refused = METRICS_UNAVAILABLE;
    if (engine_health(s->engine, why, sizeof why) != 0) {
        http_reply_error(req, 503, "unavailable_error", NULL, "the server cannot serve now: %s", why);
        goto done;
    }
    switch (engine_submit(s->engine, j)) {
    case ENGINE_QUEUED:
        refused = METRICS_N_OUTCOMES;
        break;
    case ENGINE_BUSY:
        engine_load(s->engine, &running, &waiting);
        http_reply_error(req, 503, "unavailable_error", NULL,
                         "the server is busy: %d requests are already waiting (guild serve --queue)", waiting);
        goto done;
    case ENGINE_STOPPING:
        http_reply_error(req, 503, "unavailable_error", NULL, "the server is shutting down");
        goto done;
    }
    if (!r.stream) {
        reply_whole(s, req, kind, j);
        goto done;
    }
    sse_t *sse = calloc(1, sizeof *sse);
    if (!sse) {
        job_cancel(j);
        http_reply_error(req, 500, "server_error", NULL, "out of memory");
        refused = METRICS_FAILED;
        goto done;
    }
    sse->srv = s;
    sse->job = job_ref(j);
    sse->include_usage = r.include_usage;
    sse->logprobs = r.logprobs;
    sse->channels = has_channels(s, kind);
    chat_harmony_parser_init(&sse->harmony);
    reply_id(&sse->id, kind, s, j);
    if (kind == API_CHAT) /* as OpenAI: the role first, in a chunk of its own */
        sse_event(sse, apijson_chunk(&sse->id, "", 0, NULL, 0, true, NULL));
    http_reply_stream(req, "text/event-stream", sse_produce, sse, sse_free);
done:
    if (refused != METRICS_N_OUTCOMES)
        metrics_request(s->metrics, kind, refused, NULL);
    job_unref(&j);
    api_request_fini(&r);
}

/* ---- metrics ------------------------------------------------------------------------------------------ */

static void reply_metrics(const api_server_t *s, http_req_t *req)
{
    if (!s->metrics) {
        http_reply_error(req, 500, "server_error", NULL, "no metrics are kept");
        return;
    }
    engine_stats_t es;
    engine_stats(s->engine, &es);
    strbuf_t page = STRBUF_INIT;
    metrics_render(s->metrics, &es, &page);
    if (strbuf_ok(&page))
        http_reply(req, 200, METRICS_CONTENT_TYPE, strbuf_str(&page), page.len, NULL);
    else
        http_reply_error(req, 500, "server_error", NULL, "out of memory");
    strbuf_fini(&page);
}

/* ---- routing ------------------------------------------------------------------------------------------ */

void api_handle(void *ctx, http_req_t *req)
{
    const api_server_t *s = ctx;
    const char *path = http_req_path(req), *method = http_req_method(req);
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");

    const bool ready = __atomic_load_n(&s->ready, __ATOMIC_ACQUIRE) != 0;
    if (!strcmp(path, "/health")) {
        if (!get) {
            http_reply_method_not_allowed(req, "GET, HEAD");
            return;
        }
        if (!ready) {
            json_t *j = json_pack("{s:s}", "status", "loading");
            http_reply_json(req, 503, j);
            json_decref(j);
            return;
        }
        int running, waiting;
        char why[1024];
        const int h = engine_health(s->engine, why, sizeof why);
        engine_load(s->engine, &running, &waiting);
        strbuf_t reason = STRBUF_INIT; /* paths in it need not be UTF-8 */
        textfilt_sanitize(why, strlen(why), &reason);
        json_t *j = h == 0 ? json_pack("{s:s, s:i, s:i}", "status", "ok", "running", running, "waiting", waiting)
                           : json_pack("{s:s, s:s, s:i, s:i}", "status", h > 0 ? "degraded" : "failed", "reason",
                                       strbuf_str(&reason), "running", running, "waiting", waiting);
        strbuf_fini(&reason);
        http_reply_json(req, h == 0 ? 200 : 503, j);
        json_decref(j);
        return;
    }
    if (!ready) {
        http_reply_error(req, 503, "unavailable_error", NULL, "the model is loading: guild serve answers once it "
                         "is ready (GET /health says 200 then)");
        return;
    }
    const bool keyed = !strncmp(path, "/v1/", 4) || !strcmp(path, "/tokenize") || !strcmp(path, "/detokenize") ||
                       !strcmp(path, "/metrics"); /* every endpoint but /health */
    if (keyed && !authorized(s, req)) {
        http_reply_error(req, 401, "authentication_error", NULL,
                         "missing or wrong API key: send the header \"Authorization: Bearer KEY\" with the key "
                         "given to guild serve --api-key");
        return;
    }
    static const struct {
        const char *path;
        bool post;
    } routes[] = {{"/v1/models", false},  {"/v1/completions", true}, {"/v1/chat/completions", true},
                  {"/tokenize", true},    {"/detokenize", true},     {"/metrics", false}};
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        if (strcmp(path, routes[i].path) != 0)
            continue;
        if (routes[i].post ? !post : !get) {
            http_reply_method_not_allowed(req, routes[i].post ? "POST" : "GET, HEAD");
            return;
        }
        switch (i) {
        case 0: {
            json_t *j = apijson_models(s->model_id, s->created);
            http_reply_json(req, 200, j);
            json_decref(j);
            break;
        }
        case 1:
        case 2: handle_completions(s, req, i == 1 ? API_COMPLETIONS : API_CHAT); break;
        case 3: api_tokenize(s->tok, req); break;
        case 4: api_detokenize(s->tok, s->n_vocab, req); break;
        default: reply_metrics(s, req); break;
        }
        return;
    }
    http_reply_error(req, 404, "not_found_error", NULL, "no endpoint %s %s (the endpoints are: %s)", method, path,
                     endpoints);
}
