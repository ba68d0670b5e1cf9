#include "config.h"

#include "coordinator/server/metrics.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

/* Upper bounds of the request duration histogram's buckets, seconds (+Inf follows). */
static const double duration_le[] = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
#define N_LE (sizeof duration_le / sizeof duration_le[0])

static const char *const outcome_name[METRICS_N_OUTCOMES] = {
    "stop", "length", "cancelled", "failed", "shutdown", "invalid", "unavailable",
};
static const char *const endpoint_name[2] = {"completions", "chat_completions"}; /* by api_kind_t */

typedef struct counts {
    uint64_t requests[2][METRICS_N_OUTCOMES];
    uint64_t prompt_tokens, cached_tokens, generated_tokens;
    double prefill_s, decode_s;
    uint64_t duration_bucket[N_LE + 1]; /* per bucket (not cumulative); the last: above every bound */
    uint64_t duration_count;
    double duration_sum;
} counts_t;

struct metrics {
    pthread_mutex_t mu;
    counts_t c; /* under mu */
};

int metrics_new(metrics_t **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return -1;
    pthread_mutex_init(&(*out)->mu, NULL);
    return 0;
}

void metrics_destroy(metrics_t **mp)
{
    metrics_t *m = *mp;
    if (!m)
        return;
    pthread_mutex_destroy(&m->mu);
    free(m);
    *mp = NULL;
}

metrics_outcome_t metrics_outcome_of(job_end_t end)
{
    switch (end) {
    case JOB_STOP: return METRICS_STOP;
    case JOB_LENGTH: return METRICS_LENGTH;
    case JOB_FAILED: return METRICS_FAILED;
    case JOB_SHUTDOWN: return METRICS_SHUTDOWN;
    default: return METRICS_CANCELLED; /* JOB_CANCELLED, or still running when its client went away */
    }
}

void metrics_request(metrics_t *m, api_kind_t kind, metrics_outcome_t outcome, const job_status_t *st)
{
    if (!m)
        return;
    pthread_mutex_lock(&m->mu);
    counts_t *c = &m->c;
    c->requests[kind == API_CHAT][outcome]++;
    if (st && st->end != JOB_RUNNING) { /* a job still running when its client left has no counts yet */
        c->prompt_tokens += (uint64_t)st->n_prompt;
        c->cached_tokens += (uint64_t)st->n_cached;
        c->generated_tokens += (uint64_t)st->n_generated;
        c->prefill_s += st->prefill_s;
        c->decode_s += st->decode_s;
        const double d = st->prefill_s + st->decode_s;
        size_t b = 0;
        while (b < N_LE && d > duration_le[b])
            b++;
        c->duration_bucket[b]++;
        c->duration_count++;
        c->duration_sum += d;
    }
    pthread_mutex_unlock(&m->mu);
}

static void family(strbuf_t *o, const char *name, const char *type, const char *help)
{
    strbuf_printf(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* %.17g keeps a double's every bit; integers print as integers. */
static void sample(strbuf_t *o, const char *name, const char *labels, double v)
{
    strbuf_printf(o, "%s%s%s%s %.17g\n", name, labels ? "{" : "", labels ? labels : "", labels ? "}" : "", v);
}

void metrics_render(metrics_t *m, const engine_stats_t *g, strbuf_t *o)
{
    counts_t c; /* a consistent copy: the page is one moment */
    pthread_mutex_lock(&m->mu);
    c = m->c;
    pthread_mutex_unlock(&m->mu);

    family(o, "guild_requests_total", "counter",
           "Generation requests that ended, by endpoint and outcome (stop, length, cancelled, failed, shutdown; "
           "invalid and unavailable: refused before generation with 400 and 503).");
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < METRICS_N_OUTCOMES; i++) {
            char lab[96];
            snprintf(lab, sizeof lab, "endpoint=\"%s\",outcome=\"%s\"", endpoint_name[k], outcome_name[i]);
            sample(o, "guild_requests_total", lab, (double)c.requests[k][i]);
        }
    family(o, "guild_prompt_tokens_total", "counter", "Prompt tokens of the requests that ran, cached ones included.");
    sample(o, "guild_prompt_tokens_total", NULL, (double)c.prompt_tokens);
    family(o, "guild_prompt_tokens_cached_total", "counter",
           "Prompt tokens reused from the KV cache (usage.prompt_tokens_details.cached_tokens).");
    sample(o, "guild_prompt_tokens_cached_total", NULL, (double)c.cached_tokens);
    family(o, "guild_generated_tokens_total", "counter", "Tokens generated (completion_tokens).");
    sample(o, "guild_generated_tokens_total", NULL, (double)c.generated_tokens);
    family(o, "guild_prefill_seconds_total", "counter",
           "Time spent in prompt processing; prefill tok/s = rate(prompt - cached tokens) / rate(this).");
    sample(o, "guild_prefill_seconds_total", NULL, c.prefill_s);
    family(o, "guild_decode_seconds_total", "counter",
           "Time spent generating after the prompt; decode tok/s = rate(generated tokens) / rate(this).");
    sample(o, "guild_decode_seconds_total", NULL, c.decode_s);
    family(o, "guild_request_duration_seconds", "histogram",
           "Time a request spent in prefill and decode (queueing not included).");
    uint64_t cum = 0;
    for (size_t b = 0; b <= N_LE; b++) {
        char lab[48];
        cum += c.duration_bucket[b];
        if (b < N_LE)
            snprintf(lab, sizeof lab, "le=\"%g\"", duration_le[b]);
        else
            snprintf(lab, sizeof lab, "le=\"+Inf\"");
        sample(o, "guild_request_duration_seconds_bucket", lab, (double)cum);
    }
    sample(o, "guild_request_duration_seconds_sum", NULL, c.duration_sum);
    sample(o, "guild_request_duration_seconds_count", NULL, (double)c.duration_count);

    family(o, "guild_requests_running", "gauge", "Requests generating now (active sessions).");
    sample(o, "guild_requests_running", NULL, g->running);
    family(o, "guild_requests_waiting", "gauge", "Requests queued behind the running ones (queue depth).");
    sample(o, "guild_requests_waiting", NULL, g->waiting);
    family(o, "guild_kv_cache_used_positions", "gauge", "KV cache positions holding tokens.");
    sample(o, "guild_kv_cache_used_positions", NULL, (double)g->kv_used);
    family(o, "guild_kv_cache_capacity_positions", "gauge", "KV cache positions in all (the context).");
    sample(o, "guild_kv_cache_capacity_positions", NULL, (double)g->kv_capacity);
    family(o, "guild_kv_cache_usage_ratio", "gauge", "Used over capacity, 0 to 1.");
    sample(o, "guild_kv_cache_usage_ratio", NULL,
           g->kv_capacity > 0 ? (double)g->kv_used / (double)g->kv_capacity : 0.0);
    family(o, "guild_engine_busy_seconds_total", "counter", "Time the engine spent running requests.");
    sample(o, "guild_engine_busy_seconds_total", NULL, g->busy_s);
    family(o, "guild_cpu_expert_wait_seconds_total", "counter",
           "Time the forward passes waited for the routed experts computed on the CPU (the CPU expert workers, "
           "or this process's executor).");
    sample(o, "guild_cpu_expert_wait_seconds_total", NULL, g->expert_wait_s);
    family(o, "guild_cpu_expert_wait_ratio", "gauge",
           "CPU expert wait over engine busy time since start-up (rates of the two counters give it per "
           "interval).");
    sample(o, "guild_cpu_expert_wait_ratio", NULL, g->busy_s > 0 ? g->expert_wait_s / g->busy_s : 0.0);
    family(o, "guild_worker_restarts_total", "counter",
           "Worker processes restarted by the supervisor, by role (multi-process mode; 0 in a single process).");
    sample(o, "guild_worker_restarts_total", "role=\"gpu\"", (double)g->gpu_restarts);
    sample(o, "guild_worker_restarts_total", "role=\"cpu\"", (double)g->cpu_restarts);
    family(o, "guild_prefix_cache_hits_total", "counter",
           "Requests that reused a prefix of their prompt, by where it was: their sequence's own cache (slot), a "
           "snapshot (snapshot), a running session's cache (session).");
    static const char *const src[3] = {"slot", "snapshot", "session"};
    for (int i = 0; i < 3; i++) {
        char lab[32];
        snprintf(lab, sizeof lab, "source=\"%s\"", src[i]);
        sample(o, "guild_prefix_cache_hits_total", lab, (double)g->prefix_hits[i]);
    }
    family(o, "guild_prefix_cache_misses_total", "counter", "Requests that reused no prefix (prefix reuse on).");
    sample(o, "guild_prefix_cache_misses_total", NULL, (double)g->prefix_misses);
    family(o, "guild_prefix_cache_evictions_total", "counter",
           "Prefix snapshots dropped from RAM (--cache-ram) or disk (--cache-disk), least recently used first.");
    sample(o, "guild_prefix_cache_evictions_total", NULL, (double)g->cache.evictions);
    family(o, "guild_prefix_cache_refused_total", "counter",
           "Snapshot files refused: of another model, backend or KV format, corrupt or unreadable.");
    sample(o, "guild_prefix_cache_refused_total", NULL, (double)g->cache.refused);
    family(o, "guild_prefix_cache_snapshots", "gauge", "Prefix snapshots held (in RAM, on disk or both).");
    sample(o, "guild_prefix_cache_snapshots", NULL, (double)g->cache.entries);
    family(o, "guild_prefix_cache_bytes", "gauge", "Bytes of prefix snapshots, in RAM and in --cache-dir.");
    sample(o, "guild_prefix_cache_bytes", "where=\"ram\"", (double)g->cache.ram_bytes);
    sample(o, "guild_prefix_cache_bytes", "where=\"disk\"", (double)g->cache.disk_bytes);
}
