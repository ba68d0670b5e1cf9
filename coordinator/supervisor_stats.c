#include "config.h"

/* The workers' counters as sup_gpu_stats, sup_print_stats & co give them: refreshed by a stats request to each
 * ready worker (its heartbeat's may be a period old), read under the supervisor's lock. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coordinator/remote_backend.h"
#include "coordinator/supervisor_slots.h"
#include "core/util/log.h"

#define STATS_WAIT_MS 10000ull

void sup_take_stats(wslot_t *w, const Guild__Stats *st)
{
    w->exchanges = st->exchanges;
    w->tokens = st->tokens;
    w->busy_ns = st->busy_ns;
    w->wait_ns = st->wait_ns;
    w->sleeps = st->futex_sleeps;
    remote_stats_take(&w->streaming, st);
    if (st->n_routing) {
        if (st->n_routing != w->n_routing) {
            uint64_t *r = realloc(w->routing, st->n_routing * sizeof *r);
            if (!r)
                return; /* the older counts stay */
            w->routing = r;
            w->n_routing = st->n_routing;
        }
        memcpy(w->routing, st->routing, st->n_routing * sizeof *w->routing);
    }
}

void sup_restarts(sup_t *s, int *gpu, int *cpu)
{
    pthread_mutex_lock(&s->mu);
    *gpu = gpu_slot(s)->restarts;
    *cpu = 0;
    for (int i = 0; i < s->n_cpu; i++)
        *cpu += s->w[i].restarts;
    pthread_mutex_unlock(&s->mu);
}

/* Under mu: asks the ready workers for their counters and waits for the answers (STATS_WAIT_MS at most, or twice
 * hang_ms if longer). */
static void refresh_stats(sup_t *s)
{
    /* fresh counters: a heartbeat's may be up to a period old */
    for (int i = 0; i < s->n_w; i++) {
        wslot_t *w = &s->w[i];
        if (w->state != W_READY)
            continue;
        w->stats_pending = true;
        s->stats_wanted = true; /* the supervisor thread sends the requests: it owns the socket */
    }
    /* a starved machine answers late, and an answer given up on leaves a heartbeat's older counts, which --stats
     * and --record-routing would give as the run's (a sanitizer build among parallel tests on 2 CPUs missed twice
     * hang_ms, 600 ms): STATS_WAIT_MS at least. Only a worker that stays ready waits this long: one that goes
     * silent is taken out of W_READY by the supervisor thread within hang_ms, which ends the wait. */
    const uint64_t hang2 = 2ull * (s->opts.hang_ms ? s->opts.hang_ms : 300);
    const uint64_t wait_ns = (hang2 > STATS_WAIT_MS ? hang2 : STATS_WAIT_MS) * 1000000ull;
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += (time_t)(wait_ns / 1000000000ull);
    dl.tv_nsec += (long)(wait_ns % 1000000000ull);
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    bool timed_out = false;
    for (;;) {
        bool pending = false;
        for (int i = 0; i < s->n_w; i++)
            pending |= s->w[i].stats_pending && s->w[i].state == W_READY;
        if (!pending)
            break;
        if (pthread_cond_timedwait(&s->cond, &s->mu, &dl) == ETIMEDOUT) {
            timed_out = true;
            break;
        }
    }
    for (int i = 0; i < s->n_w; i++) {
        if (timed_out && s->w[i].stats_pending && s->w[i].state == W_READY)
            guild_log(GUILD_LOG_WARN, "%s did not answer a stats request within %llu ms: its counters are from its "
                      "last heartbeat", s->w[i].name, (unsigned long long)(wait_ns / 1000000ull));
        s->w[i].stats_pending = false;
    }
}

void sup_gpu_stats(sup_t *s, backend_stats_t *out)
{
    pthread_mutex_lock(&s->mu);
    refresh_stats(s);
    *out = gpu_slot(s)->streaming;
    for (int i = 0; i < s->n_cpu; i++) { /* the CPU workers' prefetch and turnaround counters */
        const backend_stats_t *c = &s->w[i].streaming;
        out->hint_experts += c->hint_experts;
        out->hint_hits += c->hint_hits;
        out->prefetch_bytes += c->prefetch_bytes;
        out->prefetch_layers += c->prefetch_layers;
        out->turnaround_ns += c->turnaround_ns;
        out->turnarounds += c->turnarounds;
    }
    pthread_mutex_unlock(&s->mu);
}

int sup_gpu_routing(sup_t *s, uint64_t *counts)
{
    pthread_mutex_lock(&s->mu);
    refresh_stats(s);
    const wslot_t *g = gpu_slot(s);
    const size_t n = (size_t)s->mc.n_layer * (size_t)s->mc.n_expert;
    const int rc = g->routing && g->n_routing == n ? 0 : -1;
    if (rc == 0)
        memcpy(counts, g->routing, n * sizeof *counts);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int sup_pids(sup_t *s, int *pids, char (*names)[32], int max)
{
    pthread_mutex_lock(&s->mu);
    int n = 0;
    for (int i = 0; i < s->n_w && n < max; i++)
        if (s->w[i].pid > 0) {
            pids[n] = (int)s->w[i].pid;
            snprintf(names[n], 32, "%s", s->w[i].name);
            n++;
        }
    pthread_mutex_unlock(&s->mu);
    return n;
}

void sup_print_stats(sup_t *s, FILE *out)
{
    pthread_mutex_lock(&s->mu);
    refresh_stats(s);
    for (int i = 0; i < s->n_w; i++) {
        const wslot_t *w = &s->w[i];
        char pairs[160] = "";
        const backend_stats_t *c = &w->streaming;
        if (w->role == GUILD__ROLE__ROLE_CPU_WORKER && c->hint_experts)
            snprintf(pairs, sizeof pairs, " (%llu pairs; prefetch: %llu of %llu hinted experts routed, %.1f MB "
                     "before %llu exchanges)", (unsigned long long)w->tokens, (unsigned long long)c->hint_hits,
                     (unsigned long long)c->hint_experts, (double)c->prefetch_bytes / 1e6,
                     (unsigned long long)c->prefetch_layers);
        else if (w->role == GUILD__ROLE__ROLE_CPU_WORKER)
            snprintf(pairs, sizeof pairs, " (%llu pairs)", (unsigned long long)w->tokens);
        fprintf(out, "  %-14s pid %-7d restarts %d, %llu %s%s, busy %.1f ms (%.1f us each), waiting %.1f ms, "
                "heartbeat rtt %.2f ms\n",
                w->name, (int)w->pid, w->restarts, (unsigned long long)w->exchanges,
                w->role == GUILD__ROLE__ROLE_GPU_WORKER ? "requests"
                : w->role == GUILD__ROLE__ROLE_STAGER   ? "fills"
                                                        : "exchanges", pairs, (double)w->busy_ns / 1e6,
                w->exchanges ? (double)w->busy_ns / (double)w->exchanges / 1e3 : 0.0, (double)w->wait_ns / 1e6,
                (double)w->rtt_ns / 1e6);
    }
    pthread_mutex_unlock(&s->mu);
}
