#include "config.h"

#include "cpu-expert-worker/cpu_worker.h"

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/kern/kern.h"
#include "core/model/expert_digest.h"
#include "core/model/model.h"
#include "core/util/clock.h"
#include "core/util/log.h"
#include "core/topo/topo.h"
#include "core/util/pool.h"
#include "cpu-expert-worker/cpu_worker_options.h"
#include "cpu-expert-worker/experts/expert_pipe.h"
#include "cpu-expert-worker/experts/expert_prefetch.h"
#include "cpu-expert-worker/experts/expert_share.h"
#include "cpu-expert-worker/experts/expert_shard.h"
#include "cpu-expert-worker/shard_fetch.h"
#include "ipc/arena.h"
#include "ipc/expert_store.h"
#include "ipc/expert_store_map.h"
#include "ipc/exchange.h"
#include <zmq.h>
#include "ipc/actor.h"
#include "ipc/data.h"
#include "ipc/rundir.h"

#define DEFAULT_SLICE_NS 100000000u
#define FETCH_TIMEOUT_MS 30000u /* the coordinator's longest silence while it sends a shard */
#define MAX_CPUS 4096
/* an exchange of at least this many pairs is a prefill batch's: its rate and page faults are logged */
#define LARGE_PAIRS 1024
#define LARGE_LOGGED 2 /* the first ones at info level (a cold start shows there), the others at debug */
/* With -v, the pipeline's profile (expert_pipe_prof.h) of the decode-sized exchanges (up to PROF_MAX_TOKENS
 * tokens: a prefill batch's would outweigh them) is logged once per PROF_LOG_EXCHANGES of them, then restarted. */
#define PROF_LOG_EXCHANGES 1024
#define PROF_MAX_TOKENS 64

static volatile sig_atomic_t signalled;

/* The worker's state (the actor's "self"). */
typedef struct cpu_worker {
    actor_t *actor;
    int node;
    uint64_t generation;
    int index;            /* this worker's done counter */
    char *model_path;     /* the file w->model maps (NULL for a shard received) */
    model_t *model;
    const char *own_model; /* --model: this host's copy of the model; NULL: none */
    shard_fetch_t fetch;  /* a shard received from the coordinator (fetch.fd >= 0) */
    const char *source;   /* where the current shard's bytes came from (Ready.model_source; "": model_path) */
    expert_digest_t *digests; /* [n_digests] of the current shard, when its source is not the coordinator's file */
    size_t n_digests;
    expert_shard_t *shard;
    guild_arena_t *store_arena; /* the expert store its shard is copied into (ipc/expert_store.h); NULL: none */
    expert_share_t *share;      /* the experts of its node's workers, split per exchange (expert_share.h); NULL:
                                 * it computes the experts it owns */
    guild_arena_t **peer_stores; /* [n_peer_stores] the other workers' stores it reads from, read only */
    size_t n_peer_stores;
    guild_pool_t *pool;
    expert_pipe_t *pipe; /* the fused pipeline: same bits as expert_exec, one pool pass per layer */
    expert_pipe_prof_t *prof;    /* -v: the pipeline's profile, logged every PROF_LOG_EXCHANGES; NULL: none */
    uint64_t prof_sleeps;        /* the pool's sleeps when the profile restarted */
    uint64_t prof_exchanges, prof_doorbell; /* exchanges served and doorbell sleeps then */
    /* From this worker's done ring to its seeing the next exchange's step ring (the dense side's turnaround of a
     * layer as the CPU side sees it: its kernels up to the next publish, the bus both ways, and the other workers'
     * finish): counted in the Stats between a decode step's exchanges of one token (the next one of a later layer),
     * and with -v, for the exchanges of the profile, in seconds, logged as their median */
    uint64_t done_ns;            /* when the last done ring went (0: none since the Assign) */
    int32_t done_layer;          /* that exchange's layer, -1 unless it was of one token */
    int n_turn;
    double turn_s[PROF_LOG_EXCHANGES];
    expert_prefetch_t *prefetch; /* the exchange carries prefetch hints (shape.n_prefetch); NULL: it does not */
    int32_t hint_layer, n_hint;  /* the hint last prefetched, scored against the exchange that follows */
    int32_t hint_ids[GUILD_EXCHANGE_HINT_MAX];
    uint64_t wait_for;           /* the exchange the prefetch stops for (step doorbell) */
    guild_arena_t *arena;
    guild_exchange_t *x;
    guild_wait_policy_t slice;
    /* without the arena: exchanges as messages on the data socket */
    const char *endpoint;  /* the coordinator's control endpoint (resolves a "*" data host) */
    const guild_curve_t *curve; /* a tcp endpoint's security (the data socket's too); NULL: none */
    void *zctx;
    void *data;            /* DEALER, NULL when the arena is used */
    float *y;              /* [cap_y] scratch of a request's outputs */
    int32_t *pairs;        /* [cap_pairs] */
    size_t cap_y, cap_pairs;
    /* the large exchanges (LARGE_PAIRS) since the last Assign: their count, time, pairs and page faults */
    uint64_t large_n, large_ns, large_pairs, large_faults;
    uint64_t first_ns, first_pairs, first_faults; /* the first of them */
} cpu_worker_t;

/* Page faults of this process so far (minor and major), 0 when unknown. */
static uint64_t page_faults(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) < 0)
        return 0;
    return (uint64_t)ru.ru_minflt + (uint64_t)ru.ru_majflt;
}

/* Page faults so far when an exchange of n_tokens tokens, top-n_used, can be a large one (LARGE_PAIRS: its pairs
 * here are at most n_tokens x n_used), else 0: a decode step's exchanges (one a layer) make no system call for it. */
static uint64_t faults_if_large(uint32_t n_tokens, uint32_t n_used)
{
    return (uint64_t)n_tokens * n_used >= LARGE_PAIRS ? page_faults() : 0;
}

/* One exchange's products took ns for `pairs` pairs with `faults` page faults: a large one is counted and logged
 * with its routing's spread (experts routed to, the most tokens on one: the pipeline's work per expert), the
 * first LARGE_LOGGED at info level (a rate measured on the first batches, like the GPU worker's split measure,
 * includes what they fault in). */
static void note_exchange(cpu_worker_t *w, uint64_t seq, int32_t layer, int32_t n_tokens, const int32_t *ids,
                          int64_t pairs, uint64_t ns, uint64_t faults)
{
    if (pairs < LARGE_PAIRS)
        return;
    w->large_n++;
    w->large_ns += ns;
    w->large_pairs += (uint64_t)pairs;
    w->large_faults += faults;
    if (w->large_n == 1)
        w->first_ns = ns, w->first_pairs = (uint64_t)pairs, w->first_faults = faults;
    const guild_log_level_t level = w->large_n <= LARGE_LOGGED ? GUILD_LOG_INFO : GUILD_LOG_DEBUG;
    if (guild_log_level() < level)
        return;
    const model_config_t *c = model_config(w->model);
    int32_t *count = calloc((size_t)c->n_expert, sizeof *count), used = 0, most = 0;
    if (count) {
        for (size_t q = 0; q < (size_t)n_tokens * (size_t)c->n_expert_used; q++)
            if (ids[q] >= 0 && ids[q] < c->n_expert && !count[ids[q]]++)
                used++;
        for (int32_t e = 0; e < c->n_expert; e++)
            most = count[e] > most ? count[e] : most;
        free(count);
    }
    guild_log(level, "exchange %llu (layer %d, %d tokens routed to %d experts, up to %d on one): %lld pairs here in "
              "%.1f ms (%.2f us a pair), %llu page faults", (unsigned long long)seq, layer, n_tokens, used, most,
              (long long)pairs, (double)ns / 1e6, (double)ns / 1e3 / (double)pairs, (unsigned long long)faults);
}

/* -v: every PROF_LOG_EXCHANGES exchanges, where the pipeline's time went (expert_pipe_prof.h) and how often the
 * pool's threads slept between them; then the profile restarts. */
static void log_profile(cpu_worker_t *w)
{
    if (!w->prof || w->prof->runs < PROF_LOG_EXCHANGES)
        return;
    expert_pipe_prof_summary_t s;
    char line[512];
    expert_pipe_prof_summarize(w->prof, &s);
    expert_pipe_prof_format(&s, line, sizeof line);
    const uint64_t sleeps = guild_pool_sleeps(w->pool);
    actor_stats_t *st = actor_stats(w->actor);
    const uint64_t xs = atomic_load(&st->exchanges), db = atomic_load(&st->futex_sleeps);
    /* the doorbell's sleeps: this worker's main thread asleep on the next exchange (after --spin-us), over every
     * exchange served since the last line (larger ones too) */
    char turn[96] = "";
    if (w->n_turn) /* the median: the few waits that span a step's end (sampling, the next request) stay out */
        snprintf(turn, sizeof turn, " dense_turnaround_us=%.1f (median of %d)", guild_median(w->turn_s, w->n_turn) * 1e6,
                 w->n_turn);
    guild_log(GUILD_LOG_INFO, "pipeline profile (exchanges of up to %d tokens): %s pool_sleeps=%.3f a run "
              "doorbell_sleeps=%.3f an exchange%s", PROF_MAX_TOKENS, line, (double)(sleeps - w->prof_sleeps) / s.runs,
              xs > w->prof_exchanges ? (double)(db >= w->prof_doorbell ? db - w->prof_doorbell : db) /
                                           (double)(xs - w->prof_exchanges) : 0.0, turn);
    w->n_turn = 0;
    expert_pipe_prof_reset(w->prof);
    w->prof_sleeps = sleeps;
    w->prof_exchanges = xs;
    w->prof_doorbell = db;
}

/* The large exchanges since the last Assign, in one line (the first apart from the others), then forgotten. */
static void log_large(cpu_worker_t *w)
{
    if (w->large_n > 1)
        guild_log(GUILD_LOG_INFO, "%llu exchanges of %d pairs or more: the first %.2f us a pair (%llu page faults), "
                  "the others %.2f us a pair (%.1f page faults each)", (unsigned long long)w->large_n, LARGE_PAIRS,
                  (double)w->first_ns / 1e3 / (double)w->first_pairs, (unsigned long long)w->first_faults,
                  (double)(w->large_ns - w->first_ns) / 1e3 / (double)(w->large_pairs - w->first_pairs),
                  (double)(w->large_faults - w->first_faults) / (double)(w->large_n - 1));
    w->large_n = w->large_ns = w->large_pairs = w->large_faults = 0;
}

static void release(cpu_worker_t *w)
{
    log_large(w);
    free(w->digests);
    w->digests = NULL;
    w->n_digests = 0;
    expert_prefetch_destroy(&w->prefetch);
    w->n_hint = 0;
    expert_pipe_destroy(&w->pipe);
    free(w->prof);
    w->prof = NULL;
    w->done_ns = 0;
    w->done_layer = -1;
    w->n_turn = 0;
    guild_pool_destroy(&w->pool);
    expert_share_destroy(&w->share);
    for (size_t i = 0; i < w->n_peer_stores; i++)
        guild_arena_destroy(&w->peer_stores[i]);
    free(w->peer_stores);
    w->peer_stores = NULL;
    w->n_peer_stores = 0;
    expert_shard_destroy(&w->shard);
    if (w->store_arena) { /* the store stays (the coordinator's): only this process's lock and mapping go */
        size_t rs = 0;
        void *r = guild_arena_region(w->store_arena, EXPERT_STORE_ARENA_KIND, 0, &rs);
        if (r)
            munlock(r, rs);
    }
    guild_arena_destroy(&w->store_arena);
    guild_exchange_destroy(&w->x);
    guild_arena_destroy(&w->arena);
    if (w->data) {
        zmq_close(w->data);
        w->data = NULL;
    }
}

/* The shard copied into the expert store the coordinator named (its pages bound to the node, locked if asked),
 * its table written and published for the GPU worker, which streams the same bytes. */
static int shard_into_store(cpu_worker_t *w, const Guild__ArenaRef *ref, const cpu_worker_options_t *o,
                            const uint8_t *owned, guild_err_t *err)
{
    const model_config_t *c = model_config(w->model);
    guild_arena_expect_t ex = {.tag = ref->tag, .size = ref->size};
    size_t rs = 0;
    void *r;
    expert_store_t st;
    if (!(w->store_arena = guild_arena_attach(ref->name, &ex, err)))
        return -1;
    if (!(r = guild_arena_region(w->store_arena, EXPERT_STORE_ARENA_KIND, 0, &rs)))
        return guild_err_set(err, "arena %s: no expert store region", ref->name);
    if (expert_store_attach(&st, r, rs, c->n_layer, c->n_expert, err) < 0)
        return guild_err_prefix(err, "arena %s: ", ref->name);
    char *data = expert_store_data(&st);
    const size_t need = expert_shard_copy_bytes(w->model, owned), have = (size_t)st.h->data_bytes;
    if (need > have)
        return guild_err_set(err, "expert store %s: %zu bytes for %zu bytes of copies", ref->name, have, need);
    if (topo_bind(data, have, w->node, err) < 0)
        return -1;
    if (o->mlock && mlock(r, rs) != 0)
        return guild_err_errno(err, errno, "expert store: cannot lock %zu bytes in memory (RLIMIT_MEMLOCK, ulimit -l)",
                               rs);
    if (expert_shard_new_copy_at(&w->shard, w->model, owned, data, have, o->interleave_gate_up, o->expert_layout,
                                 err) < 0)
        return -1;
    for (int32_t il = 0; il < c->n_layer; il++)
        for (int32_t e = 0; e < c->n_expert; e++) {
            const expert_mats_t *x = expert_shard_get(w->shard, il, e);
            expert_store_entry_t *en = expert_store_entry(&st, il, e);
            if (!x) {
                memset(en, 0, sizeof *en);
                continue;
            }
            *en = (expert_store_entry_t){
                .gate = (uint64_t)((const char *)x->gate - st.base),
                .up = (uint64_t)((const char *)x->up - st.base),
                .down = (uint64_t)((const char *)x->down - st.base),
                .gate_row = (uint32_t)x->gate_row,
                .up_row = (uint32_t)x->up_row,
                .down_row = (uint32_t)x->down_row,
                .flags = (x->gate_packed ? EXPERT_STORE_GATE_PACKED : 0u) | (x->up_packed ? EXPERT_STORE_UP_PACKED : 0u) |
                         (x->down_packed ? EXPERT_STORE_DOWN_PACKED : 0u),
            };
        }
    expert_store_publish(&st);
    return 0;
}

static int load_interrupted(void *ctx, guild_err_t *err)
{
    cpu_worker_t *w = ctx;
    const char *why = "";
    if (actor_stopping(w->actor, &why))
        return guild_err_set(err, "the CPU worker is stopping (%s)", why);
    if (actor_assign_pending(w->actor))
        return guild_err_set(err, "another assignment arrived");
    return 0;
}

/* The experts of another worker of its node, from its store (mapped read only, waited for until its worker
 * publishes it), into w->share: the matrices where the store says, their types and biases the model's (the
 * biases' bits are the same in the file as in the copy). */
static int share_peer(cpu_worker_t *w, const Guild__ArenaRef *ref, guild_err_t *err)
{
    const model_config_t *c = model_config(w->model);
    const model_weights_t *mw = model_weights(w->model);
    guild_arena_t *a = NULL;
    expert_store_t st;
    const int rc = expert_store_map(ref->name, ref->tag, ref->size, w->model, load_interrupted, w, &a, &st, err);
    if (a)
        w->peer_stores[w->n_peer_stores++] = a;
    if (rc < 0)
        return -1;
    for (int32_t il = 0; il < c->n_layer; il++) {
        const model_layer_t *L = &mw->layers[il];
        for (int32_t e = 0; e < c->n_expert; e++) {
            const expert_store_entry_t *en = expert_store_entry(&st, il, e);
            if (!en->gate)
                continue;
            const expert_mats_t m = {
                .gate = st.base + en->gate,
                .up = st.base + en->up,
                .down = st.base + en->down,
                .gate_type = L->gate_exps.type,
                .up_type = L->up_exps.type,
                .down_type = L->down_exps.type,
                .gate_row = en->gate_row,
                .up_row = en->up_row,
                .down_row = en->down_row,
                .gate_packed = (en->flags & EXPERT_STORE_GATE_PACKED) != 0,
                .up_packed = (en->flags & EXPERT_STORE_UP_PACKED) != 0,
                .down_packed = (en->flags & EXPERT_STORE_DOWN_PACKED) != 0,
                .gate_b = L->gate_exps_b.data ? model_tensor_row(&L->gate_exps_b, e, 0) : NULL,
                .up_b = L->up_exps_b.data ? model_tensor_row(&L->up_exps_b, e, 0) : NULL,
                .down_b = L->down_exps_b.data ? model_tensor_row(&L->down_exps_b, e, 0) : NULL,
            };
            if (expert_share_add(w->share, il, e, &m, err) < 0)
                return guild_err_prefix(err, "expert store %s: ", ref->name);
        }
    }
    return 0;
}

/* The split of each exchange with the other workers of its node (o->share_with, their stores named in the
 * Assign in that order): its own experts and every other's, read from their stores. */
static int share_node(cpu_worker_t *w, const Guild__Assign *a, const cpu_worker_options_t *o, int rank,
                      guild_err_t *err)
{
    const model_config_t *c = model_config(w->model);
    if (expert_share_new(&w->share, c, (int)o->n_share_with, rank, err) < 0)
        return -1;
    if (!(w->peer_stores = calloc(o->n_share_with, sizeof *w->peer_stores)))
        return guild_err_set(err, "out of memory");
    for (int32_t il = 0; il < c->n_layer; il++)
        for (int32_t e = 0; e < c->n_expert; e++) {
            const expert_mats_t *m = expert_shard_get(w->shard, il, e);
            if (m && expert_share_add(w->share, il, e, m, err) < 0)
                return -1;
        }
    for (size_t i = 0; i < o->n_share_with; i++)
        if ((int)i != rank && share_peer(w, a->expert_stores[i], err) < 0)
            return -1;
    return 0;
}

/* owned[layer * n_expert + e] from the Assign's shard list, every range checked against the model. */
static int owned_flags(const Guild__Assign *a, const model_config_t *c, uint8_t **out, guild_err_t *err)
{
    uint8_t *owned = calloc((size_t)c->n_layer * (size_t)c->n_expert, 1);
    if (!owned)
        return guild_err_set(err, "out of memory");
    for (size_t i = 0; i < a->n_shard; i++) {
        const Guild__LayerShard *ls = a->shard[i];
        if (ls->layer >= (uint32_t)c->n_layer) {
            free(owned);
            return guild_err_set(err, "assign: shard of layer %u, the model has %d layers", ls->layer, c->n_layer);
        }
        for (size_t j = 0; j < ls->n_experts; j++) {
            const Guild__ExpertRange *r = ls->experts[j];
            if (r->first >= (uint32_t)c->n_expert || r->count > (uint32_t)c->n_expert - r->first) {
                free(owned);
                return guild_err_set(err, "assign: layer %u: experts %u..%llu, the model has %d per layer",
                                     ls->layer, r->first, (unsigned long long)r->first + r->count - 1, c->n_expert);
            }
            for (uint32_t e = r->first; e < r->first + r->count; e++) {
                uint8_t *f = &owned[(size_t)ls->layer * (size_t)c->n_expert + e];
                if (*f) {
                    free(owned);
                    return guild_err_set(err, "assign: layer %u: expert %u listed twice", ls->layer, e);
                }
                *f = 1;
            }
        }
    }
    *out = owned;
    return 0;
}

/* The data socket of a worker without the arena (its hello comes once it is loaded). */
static int connect_data(cpu_worker_t *w, const cpu_worker_options_t *o, guild_err_t *err)
{
    char ep[1024], id[64];
    if (data_endpoint_resolve(o->data_endpoint, w->endpoint, ep, sizeof ep, err) < 0)
        return -1;
    if (!w->zctx && !(w->zctx = zmq_ctx_new()))
        return guild_err_set(err, "zmq_ctx_new: %s", zmq_strerror(zmq_errno()));
    snprintf(id, sizeof id, "cpu-worker-%d-data", (int)getpid());
    if (!(w->data = data_dealer_new(w->zctx, ep, id, w->curve, err)))
        return -1;
    return 0;
}

static bool fetch_stop(void *actor)
{
    return actor_stopping(actor, NULL) || actor_assign_pending(actor);
}

/* The model the shard is read from, and the shard's flags: this host's copy (--model), the coordinator's file
 * (a worker that maps the arena, on its host), or else the bytes the coordinator sends (shard_fetch.h). */
static int open_model(cpu_worker_t *w, const Guild__Assign *a, uint8_t **owned, guild_err_t *err)
{
    *owned = NULL;
    const char *path = w->own_model ? w->own_model : a->arena ? a->model_path : NULL;
    w->source = w->own_model ? w->own_model : "";
    if (w->fetch.fd >= 0 || !path) { /* a received model is received again for another assignment */
        model_destroy(&w->model);
        free(w->model_path);
        w->model_path = NULL;
        if (w->fetch.fd >= 0)
            close(w->fetch.fd);
        w->fetch.fd = -1;
    }
    if (path) {
        if (!w->model_path || strcmp(w->model_path, path) != 0) {
            model_destroy(&w->model);
            free(w->model_path);
            w->model_path = NULL;
            if (model_new(&w->model, path, err) < 0)
                return -1;
            if (!(w->model_path = strdup(path)))
                return guild_err_set(err, "out of memory");
        }
        return owned_flags(a, model_config(w->model), owned, err);
    }
    uint64_t t0 = guild_now_ns();
    w->source = "received";
    w->fetch = (shard_fetch_t){.data = w->data, .generation = a->generation, .worker = a->worker_index,
                               .stop = fetch_stop, .stop_ctx = w->actor, .timeout_ms = FETCH_TIMEOUT_MS, .fd = -1};
    if (shard_fetch_header(&w->fetch, err) < 0)
        return -1;
    /* the header tells where the experts are; after them, a fresh mapping shows the bytes written */
    if (model_new(&w->model, w->fetch.path, err) < 0 || owned_flags(a, model_config(w->model), owned, err) < 0 ||
        shard_fetch_experts(&w->fetch, w->model, *owned, err) < 0)
        return guild_err_prefix(err, "the model received from the coordinator: ");
    model_destroy(&w->model);
    if (model_new(&w->model, w->fetch.path, err) < 0)
        return guild_err_prefix(err, "the model received from the coordinator: ");
    guild_log(GUILD_LOG_INFO, "received its shard from the coordinator: %.1f MiB in %.1f ms",
              (double)w->fetch.bytes / 1048576.0, (double)(guild_now_ns() - t0) / 1e6);
    return 0;
}

/* A batch of up to max_tokens tokens finds its pages in place: the expert pipeline's scratch written for each
 * (gate, up, down) type triple of the model's expert layers, and the exchange region xr (size bytes) in this
 * process's page tables. Otherwise the first large batch faults in hundreds of MiB (4 KiB pages: a fault each)
 * in its own time, and that batch is the one the GPU worker's split measures the CPU side on. */
static int warm(cpu_worker_t *w, void *xr, size_t size, int32_t max_tokens, guild_err_t *err)
{
    const uint64_t t0 = guild_now_ns(), f0 = page_faults();
    guild_arena_populate(w->arena, xr, size);
    const model_config_t *c = model_config(w->model);
    const model_weights_t *mw = model_weights(w->model);
    guild_type_t seen[8][3];
    int n_seen = 0;
    for (int32_t il = 0; il < c->n_layer; il++) {
        const model_layer_t *L = &mw->layers[il];
        if (!model_layer_has_experts(L))
            continue;
        const guild_type_t t[3] = {L->gate_exps.type, L->up_exps.type, L->down_exps.type};
        int known = 0;
        for (int i = 0; i < n_seen && !known; i++)
            known = !memcmp(seen[i], t, sizeof t);
        if (known)
            continue;
        if (n_seen < 8)
            memcpy(seen[n_seen++], t, sizeof t);
        if (expert_pipe_warm(w->pipe, max_tokens, t[0], t[1], t[2], err) < 0)
            return -1;
    }
    guild_log(GUILD_LOG_INFO, "pages of a %d-token batch in place: %.1f ms, %llu page faults", max_tokens,
              (double)(guild_now_ns() - t0) / 1e6, (unsigned long long)(page_faults() - f0));
    return 0;
}

/* Loads what Assign asks for. -1 with err and the error code to report. */
static int load(cpu_worker_t *w, const Guild__Assign *a, Guild__ErrorCode *code, uint64_t *resident,
                guild_err_t *err)
{
    cpu_worker_options_t opt; /* points into the Assign */
    const cpu_worker_options_t *o = &opt;
    *code = GUILD__ERROR_CODE__ERROR_PROTOCOL;
    if (a->options_case != GUILD__ASSIGN__OPTIONS_CPU)
        return guild_err_set(err, "assign: no CPU worker options (the CPU worker needs options and an arena or a "
                             "data endpoint)");
    if (cpu_worker_options_from_proto(&opt, a->cpu, err) < 0)
        return -1;
    if (!a->arena && !o->data_endpoint)
        return guild_err_set(err, "assign: the CPU worker needs options and an arena or a data endpoint");
    if (a->arena && a->arena->layout_version != GUILD_ARENA_LAYOUT_VERSION)
        return guild_err_set(err, "assign: arena layout version %u, this build reads %u", a->arena->layout_version,
                             GUILD_ARENA_LAYOUT_VERSION);
    actor_set_silence(w->actor, o->silence_ms);
    if (cpu_worker_options_check(o, err) < 0)
        return -1;
    w->index = (int)a->worker_index;

    if (!a->arena) { /* exchanges as messages; a shard received the same way */
        *code = GUILD__ERROR_CODE__ERROR_RESOURCE;
        if (connect_data(w, o, err) < 0)
            return -1;
    }
    *code = GUILD__ERROR_CODE__ERROR_MODEL;
    uint8_t *owned = NULL;
    if (open_model(w, a, &owned, err) < 0)
        return -1;
    const model_config_t *cfg = model_config(w->model);

    *code = GUILD__ERROR_CODE__ERROR_RESOURCE;
    int *cpus = malloc(MAX_CPUS * sizeof *cpus);
    if (!cpus) {
        free(owned);
        return guild_err_set(err, "out of memory");
    }
    int n_cpus = 0;
    if (o->n_cpus && o->node == w->node) {
        for (size_t i = 0; i < o->n_cpus && i < MAX_CPUS; i++)
            cpus[n_cpus++] = (int)o->cpus[i];
    } else {
        n_cpus = topo_node_cpus(w->node, cpus, MAX_CPUS);
    }
    int rc = -1;
    if (n_cpus == 0) {
        guild_err_set(err, "NUMA node %d has no CPU this process may run on (%d node%s)", w->node, topo_node_count(),
                      topo_node_count() == 1 ? "" : "s");
        goto out;
    }
    int nt = o->n_threads ? o->n_threads : n_cpus;
    int *pin = malloc((size_t)nt * sizeof *pin);
    if (!pin) {
        guild_err_set(err, "out of memory");
        goto out;
    }
    for (int i = 0; i < nt; i++)
        pin[i] = cpus[i % n_cpus];
    /* threads first: the shard copy below then runs on the node too (its pages are bound there anyway) */
    int prc = guild_pool_new(&w->pool, nt, pin, err);
    free(pin);
    if (prc < 0)
        goto out;
    *code = GUILD__ERROR_CODE__ERROR_MODEL;
    /* the proof that a shard not read from the coordinator's file holds its experts (compared there) */
    if ((w->source[0] || !a->arena) &&
        expert_digest_compute(w->model, owned, w->pool, &w->digests, &w->n_digests, err) < 0)
        goto out;
    /* sharing the node's exchanges: its place among the workers that share, whose stores the Assign names */
    int rank = -1;
    for (size_t i = 0; i < o->n_share_with; i++)
        if (o->share_with[i] == a->worker_index)
            rank = (int)i;
    if (o->n_share_with && (rank < 0 || !a->arena || a->n_expert_stores != o->n_share_with)) {
        *code = GUILD__ERROR_CODE__ERROR_PROTOCOL;
        guild_err_set(err, "assign: worker %u shares exchanges with %zu workers%s, %zu expert stores named%s",
                      a->worker_index, o->n_share_with, rank < 0 ? " (not itself)" : "", a->n_expert_stores,
                      a->arena ? "" : ", no arena");
        goto out;
    }
    if (a->n_expert_stores && a->arena) {
        if (shard_into_store(w, a->expert_stores[rank < 0 ? 0 : rank], o, owned, err) < 0)
            goto out;
    } else if (expert_shard_new_copy(&w->shard, w->model, owned, w->node, o->mlock, o->interleave_gate_up,
                                     o->expert_layout, err) < 0) {
        goto out;
    }
    *resident = expert_shard_resident_bytes(w->shard);
    guild_err_t rerr = {{0}};
    if (shard_fetch_release(&w->fetch, &rerr) < 0) /* the copy holds the received bytes now */
        guild_log(GUILD_LOG_WARN, "%s", rerr.msg);
    *code = GUILD__ERROR_CODE__ERROR_RESOURCE;
    expert_pipe_src_t src;
    expert_pipe_src_from_shard(&src, w->shard);
    if (o->n_share_with > 1) {
        *code = GUILD__ERROR_CODE__ERROR_ARENA;
        if (share_node(w, a, o, rank, err) < 0)
            goto out;
        expert_share_src(&src, w->share);
        *code = GUILD__ERROR_CODE__ERROR_RESOURCE;
    }
    /* row blocks from the coordinator (the model's tuning file) */
    expert_pipe_tuning_t tuning = {.gate_up_rows = o->gate_up_rows, .down_rows = o->down_rows};
    if (tuning.gate_up_rows || tuning.down_rows || o->interleave_gate_up)
        guild_log(GUILD_LOG_INFO, "cpu worker %d: expert row blocks from the tuning: gate/up %d, down %d%s", w->index,
                  tuning.gate_up_rows, tuning.down_rows, o->interleave_gate_up ? "; gate/up rows interleaved" : "");
    if (expert_pipe_new(&w->pipe, &src, w->pool, &tuning, err) < 0)
        goto out;
    if (guild_log_level() >= GUILD_LOG_INFO && (w->prof = calloc(1, sizeof *w->prof))) {
        expert_pipe_set_prof(w->pipe, w->prof); /* a few clock reads a task: cheap beside its microseconds */
        w->prof_sleeps = guild_pool_sleeps(w->pool);
    }

    w->slice = (guild_wait_policy_t){.spin_ns = o->spin_ns,
                                     .timeout_ns = o->wait_slice_ns ? o->wait_slice_ns : DEFAULT_SLICE_NS};
    if (!a->arena) { /* exchanges as messages, once the coordinator has compared the digests */
        *code = GUILD__ERROR_CODE__ERROR_RESOURCE;
        if (data_send_hello(w->data, a->generation, a->worker_index, err) < 0)
            goto out;
        rc = 0;
        goto out;
    }
    *code = GUILD__ERROR_CODE__ERROR_ARENA;
    guild_arena_expect_t ex = {.tag = a->arena->tag, .size = a->arena->size};
    if (!(w->arena = guild_arena_attach(a->arena->name, &ex, err)))
        goto out;
    size_t size;
    void *xr = guild_arena_region(w->arena, GUILD_ARENA_KIND_EXCHANGE, 0, &size);
    if (!xr) {
        guild_err_set(err, "arena %s: no exchange region", a->arena->name);
        goto out;
    }
    if (!(w->x = guild_exchange_attach(xr, size, err)))
        goto out;
    const guild_exchange_shape_t *xs = guild_exchange_shape(w->x);
    if (xs->n_embd != (uint32_t)cfg->n_embd || xs->n_used != (uint32_t)cfg->n_expert_used) {
        guild_err_set(err, "arena %s: exchange for width %u, top-%u; the model has %d, top-%d", a->arena->name,
                      xs->n_embd, xs->n_used, cfg->n_embd, cfg->n_expert_used);
        goto out;
    }
    if (a->worker_index >= xs->n_workers) {
        *code = GUILD__ERROR_CODE__ERROR_PROTOCOL;
        guild_err_set(err, "assign: worker index %u, the exchange has %u workers", a->worker_index, xs->n_workers);
        goto out;
    }
    *code = GUILD__ERROR_CODE__ERROR_RESOURCE;
    /* a node's shared workers prefetch from every expert the node holds (their hint shares: prefetch_hinted), not
     * the last plan's, which is another layer's */
    expert_pipe_src_t pf_src = src;
    if (w->share)
        expert_share_src_held(&pf_src, w->share);
    if (warm(w, xr, size, (int32_t)xs->max_tokens, err) < 0 ||
        (xs->n_prefetch && expert_prefetch_new(&w->prefetch, &pf_src, w->pool, err) < 0))
        goto out;
    rc = 0;
out:
    free(cpus);
    free(owned);
    return rc;
}

/* Serves exchange requests from the data socket (no arena) until the actor stops or another Assign arrives.
 * A request that cannot be computed is reported and left unanswered. */
static void serve_messages(cpu_worker_t *w)
{
    actor_stats_t *st = actor_stats(w->actor);
    const model_config_t *c = model_config(w->model);
    while (!actor_stopping(w->actor, NULL) && !actor_assign_pending(w->actor)) {
        data_msg_t m;
        guild_err_t err = {{0}};
        uint64_t t0 = guild_now_ns();
        guild_msg_result_t r = data_recv(w->data, (int)(w->slice.timeout_ns / 1000000u), &m, &err);
        uint64_t t1 = guild_now_ns();
        atomic_fetch_add(&st->wait_ns, t1 - t0);
        if (r == GUILD_MSG_TIMEOUT)
            continue;
        if (r != GUILD_MSG_OK) {
            actor_error(w->actor, GUILD__ERROR_CODE__ERROR_PROTOCOL, false, w->generation, "data socket: %s", err.msg);
            if (r == GUILD_MSG_ERROR)
                return;
            continue;
        }
        const Guild__ExchangeRequest *q = m.hdr->body_case == GUILD__DATA__BODY_REQUEST ? m.hdr->request : NULL;
        if (!q || q->n_embd != (uint32_t)c->n_embd || q->n_used != (uint32_t)c->n_expert_used) {
            actor_error(w->actor, GUILD__ERROR_CODE__ERROR_PROTOCOL, false, w->generation,
                        "data socket: not an exchange request for width %d, top-%d", c->n_embd, c->n_expert_used);
            data_msg_close(&m);
            continue;
        }
        size_t np = (size_t)q->n_tokens * q->n_used, ny = np * q->n_embd;
        if (ny > w->cap_y || np > w->cap_pairs) {
            float *y = realloc(w->y, (ny ? ny : 1) * sizeof *y);
            int32_t *pairs = y ? realloc(w->pairs, (np ? np : 1) * sizeof *pairs) : NULL;
            if (y)
                w->y = y;
            if (!y || !pairs) {
                actor_error(w->actor, GUILD__ERROR_CODE__ERROR_RESOURCE, false, w->generation,
                            "exchange %llu: out of memory", (unsigned long long)q->seq);
                data_msg_close(&m);
                continue;
            }
            w->pairs = pairs;
            w->cap_y = ny;
            w->cap_pairs = np;
        }
        const float *x = m.array[0];
        const int32_t *ids = m.array[1];
        const uint64_t f0 = faults_if_large(q->n_tokens, q->n_used);
        if (w->prof)
            expert_pipe_set_prof(w->pipe, q->n_tokens <= PROF_MAX_TOKENS ? w->prof : NULL);
        int64_t n = expert_pipe_run(w->pipe, q->layer, (int32_t)q->n_tokens, x, ids, w->y, &err);
        if (n < 0) {
            actor_error(w->actor, GUILD__ERROR_CODE__ERROR_INTERNAL, false, w->generation,
                        "exchange %llu (layer %d, %u tokens): %s", (unsigned long long)q->seq, q->layer, q->n_tokens,
                        err.msg);
            data_msg_close(&m);
            continue;
        }
        /* the pairs this shard owns, ascending, their rows packed */
        uint32_t k = 0;
        for (size_t p = 0; p < np; p++)
            if (ids[p] >= 0 && expert_shard_get(w->shard, q->layer, ids[p])) {
                w->pairs[k] = (int32_t)p;
                if ((size_t)k != p)
                    memmove(w->y + (size_t)k * q->n_embd, w->y + p * q->n_embd, q->n_embd * sizeof *w->y);
                k++;
            }
        uint64_t t2 = guild_now_ns();
        note_exchange(w, q->seq, q->layer, (int32_t)q->n_tokens, ids, n, t2 - t1,
                      faults_if_large(q->n_tokens, q->n_used) - f0);
        if (data_send_result(w->data, q->seq, k, w->pairs, w->y, q->n_embd, &err) < 0)
            guild_log(GUILD_LOG_WARN, "exchange %llu: %s", (unsigned long long)q->seq, err.msg);
        atomic_fetch_add(&st->busy_ns, t2 - t1);
        atomic_fetch_add(&st->exchanges, 1);
        atomic_fetch_add(&st->tokens, k);
        atomic_store(&st->last_seq, q->seq);
        log_profile(w);
        data_msg_close(&m);
    }
}

static bool next_published(void *ctx)
{
    cpu_worker_t *w = ctx;
    return guild_exchange_step(w->x) >= w->wait_for;
}

/* While exchange seq is not published yet: the hinted experts of its layer toward the cores (until it is), and
 * the pipeline told to compute them first. The time goes to wait_ns, as the wait it fills. */
static void prefetch_hinted(cpu_worker_t *w, uint64_t seq, int32_t layer, int32_t n, const int32_t *ids,
                            actor_stats_t *st)
{
    int32_t mine[GUILD_EXCHANGE_HINT_MAX];
    if (w->share) { /* a node's workers split each exchange: this one's share of the hint */
        n = expert_share_hinted(w->share, layer, n, ids, mine);
        ids = mine;
        if (!n)
            return;
    }
    w->hint_layer = layer;
    w->n_hint = n;
    memcpy(w->hint_ids, ids, (size_t)n * sizeof *ids);
    expert_pipe_prefer(w->pipe, n, ids);
    w->wait_for = seq;
    if (next_published(w))
        return; /* too late: the exchange is there already */
    const uint64_t t0 = guild_now_ns();
    const uint64_t b = expert_prefetch_run(w->prefetch, layer, n, ids, next_published, w);
    atomic_fetch_add(&st->wait_ns, guild_now_ns() - t0);
    atomic_fetch_add(&st->prefetch_bytes, b);
    atomic_fetch_add(&st->prefetch_layers, 1);
}

/* The hinted experts that the exchange's tokens were routed to (a hint for another layer scores nothing). */
static void score_hint(cpu_worker_t *w, const guild_exchange_slot_t *slot, actor_stats_t *st)
{
    const int32_t K = (int32_t)guild_exchange_shape(w->x)->n_used;
    uint64_t hits = 0;
    if (slot->layer == w->hint_layer)
        for (int32_t i = 0; i < w->n_hint; i++) {
            bool hit = false;
            for (int64_t q = 0; q < (int64_t)slot->n_tokens * K && !hit; q++)
                hit = slot->ids[q] == w->hint_ids[i];
            hits += hit;
        }
    atomic_fetch_add(&st->hint_experts, (uint64_t)w->n_hint);
    atomic_fetch_add(&st->hint_hits, hits);
    w->n_hint = 0;
}

/* Serves exchanges from `seq` until the actor stops, another Assign arrives, or an exchange cannot be
 * computed (reported; the coordinator decides what to do with this worker). */
static void serve(cpu_worker_t *w, uint64_t seq)
{
    actor_stats_t *st = actor_stats(w->actor);
    guild_wait_stats_t ws = {0};
    while (!actor_stopping(w->actor, NULL) && !actor_assign_pending(w->actor)) {
        guild_err_t err = {{0}};
        guild_exchange_slot_t slot;
        uint64_t t0 = guild_now_ns();
        guild_wait_result_t r = guild_exchange_wait_step(w->x, seq, &w->slice, &slot, &ws, &err);
        uint64_t t1 = guild_now_ns();
        atomic_fetch_add(&st->wait_ns, t1 - t0);
        atomic_store(&st->futex_sleeps, ws.sleeps);
        if (r == GUILD_WAIT_TIMEOUT)
            continue;
        if (r == GUILD_WAIT_ERROR) {
            actor_error(w->actor, GUILD__ERROR_CODE__ERROR_INTERNAL, false, w->generation, "exchange %llu: %s",
                        (unsigned long long)seq, err.msg);
            return;
        }
        if (w->done_ns && slot.n_tokens == 1 && w->done_layer >= 0 && slot.layer > w->done_layer) {
            atomic_fetch_add(&st->turnaround_ns, t1 - w->done_ns);
            atomic_fetch_add(&st->turnarounds, 1);
        }
        if (w->prof && w->done_ns && slot.n_tokens <= PROF_MAX_TOKENS && w->n_turn < PROF_LOG_EXCHANGES)
            w->turn_s[w->n_turn++] = (double)(t1 - w->done_ns) / 1e9;
        if (w->n_hint) /* how good the prefetched hint was: its experts among this exchange's */
            score_hint(w, &slot, st);
        /* its part of the node's experts (a layer out of range: the pipeline names it) */
        if (w->share && slot.layer >= 0 && slot.layer < model_config(w->model)->n_layer)
            expert_share_plan(w->share, slot.layer, slot.n_tokens, slot.ids);
        const uint32_t n_used = guild_exchange_shape(w->x)->n_used;
        const uint64_t f0 = faults_if_large((uint32_t)slot.n_tokens, n_used);
        if (w->prof)
            expert_pipe_set_prof(w->pipe, slot.n_tokens <= PROF_MAX_TOKENS ? w->prof : NULL);
        int64_t pairs = expert_pipe_run(w->pipe, slot.layer, slot.n_tokens, slot.x, slot.ids, slot.y, &err);
        if (pairs < 0) {
            actor_error(w->actor, GUILD__ERROR_CODE__ERROR_INTERNAL, false, w->generation,
                        "exchange %llu (layer %d, %d tokens): %s", (unsigned long long)seq, slot.layer,
                        slot.n_tokens, err.msg);
            return;
        }
        /* the next exchange's hint, read before the done ring frees the slot */
        int32_t hint_layer = -1, hint[GUILD_EXCHANGE_HINT_MAX];
        const int32_t n_hint = w->prefetch ? guild_exchange_take_hint(w->x, seq, &hint_layer, hint) : 0;
        /* the clock before the done ring: once rung, the dense side may take this CPU before we read it */
        uint64_t t2 = guild_now_ns();
        /* a large one's note reads the slot's ids: before the slot is handed back (tens of us in 100s of ms) */
        note_exchange(w, seq, slot.layer, slot.n_tokens, slot.ids, pairs, t2 - t1,
                      faults_if_large((uint32_t)slot.n_tokens, n_used) - f0);
        guild_exchange_complete(w->x, w->index, seq);
        w->done_ns = guild_now_ns();
        w->done_layer = slot.n_tokens == 1 ? slot.layer : -1;
        atomic_fetch_add(&st->busy_ns, t2 - t1);
        atomic_fetch_add(&st->exchanges, 1);
        atomic_fetch_add(&st->tokens, (uint64_t)pairs);
        atomic_store(&st->last_seq, seq);
        seq++;
        log_profile(w);
        if (n_hint > 0)
            prefetch_hinted(w, seq, hint_layer, n_hint, hint, st);
    }
}

int cpu_worker_run(const cpu_worker_args_t *args)
{
    const int node = args->node;
    const char *endpoint = args->endpoint;
    char tag[48];
    snprintf(tag, sizeof tag, "cpu-worker(node %d)", node);
    guild_log_init(tag, args->verbose >= 2 ? GUILD_LOG_DEBUG : args->verbose ? GUILD_LOG_INFO : GUILD_LOG_WARN);
    int parent = (int)getppid(); /* the coordinator, when it spawned this worker */
    guild_err_t err = {{0}};
    cpu_worker_t w = {.node = node, .endpoint = endpoint, .own_model = args->model, .fetch = {.fd = -1}, .source = ""};
    guild_curve_t *curve = NULL;
    if (actor_install_signals(&signalled, &err) < 0 || guild_curve_load(&curve, &args->curve, endpoint, false, &err) < 0) {
        guild_log(GUILD_LOG_ERROR, "%s", err.msg);
        return 1;
    }
    w.curve = curve;
    actor_config_t ac = {
        .role = GUILD__ROLE__ROLE_CPU_WORKER,
        .node = node,
        .endpoint = endpoint,
        .name = "cpu-worker",
        .silence_ms = 3000,
        .signalled = &signalled,
        .no_shared_memory = !args->shared_memory,
        .curve = curve,
    };
    if (actor_new(&w.actor, &ac, &err) < 0) {
        guild_log(GUILD_LOG_ERROR, "%s", err.msg);
        guild_curve_destroy(&curve);
        return 1;
    }
    for (;;) {
        Guild__Envelope *env = actor_take_assign(w.actor, -1);
        if (!env)
            break;
        const Guild__Assign *a = env->assign;
        release(&w);
        w.generation = a->generation;
        uint64_t t0 = guild_now_ns(), resident = 0;
        Guild__ErrorCode code;
        if (load(&w, a, &code, &resident, &err) < 0) {
            actor_error(w.actor, code, false, a->generation, "%s", err.msg);
            release(&w);
            guild_msg_free(&env);
            continue;
        }
        /* resume after the last exchange this worker index completed (a predecessor's, after a restart); the
         * bridge knows that for a worker without the arena */
        uint64_t seq = w.x ? guild_exchange_done(w.x, w.index) + 1 : 0;
        actor_ready_shard(w.actor, a->generation, guild_now_ns() - t0, resident, seq, w.source, w.digests,
                          w.n_digests);
        char shared[96] = "";
        if (w.share)
            snprintf(shared, sizeof shared, "; splits each exchange between the %zu workers of its node (%lld experts)",
                     w.n_peer_stores + 1, (long long)expert_share_count(w.share));
        guild_log(GUILD_LOG_INFO, "ready as worker %d: %lld experts, %.1f MiB, layout %s (%lld matrices packed), "
                  "kernels %s, %d threads, %s%s", w.index, (long long)expert_shard_count(w.shard),
                  (double)resident / 1048576.0, expert_layout_name((expert_layout_t)a->cpu->expert_layout),
                  (long long)expert_shard_packed_count(w.shard), kern_level_name(kern_level()),
                  guild_pool_threads(w.pool),
                  w.x ? "exchanges through the arena" : "exchanges as messages", shared);
        guild_msg_free(&env);
        if (w.x)
            serve(&w, seq);
        else
            serve_messages(&w);
    }
    const char *why = "";
    actor_stopping(w.actor, &why);
    const bool failed = actor_failed(w.actor);
    guild_log(failed ? GUILD_LOG_ERROR : GUILD_LOG_INFO, "exiting: %s", why);
    release(&w);
    if (w.zctx)
        zmq_ctx_term(w.zctx);
    free(w.y);
    free(w.pairs);
    model_destroy(&w.model);
    free(w.model_path);
    if (w.fetch.fd >= 0)
        close(w.fetch.fd);
    actor_destroy(&w.actor);
    guild_curve_destroy(&curve);
    rundir_remove_orphaned(endpoint, parent);
    return failed ? 1 : 0;
}
