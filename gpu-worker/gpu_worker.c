#include "config.h"

#include "gpu-worker/gpu_worker.h"

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/model/model.h"
#include "core/prof/prof_trace.h"
#include "core/util/log.h"
#include "core/util/pool.h"
#include "gpu-worker/dense/backend.h"
#include "gpu-worker/dense/gpu_plan.h"
#include "gpu-worker/dense/expert_host.h"
#include "gpu-worker/gpu_worker_options.h"
#include "gpu-worker/prof/cupti_trace.h"
#include "ipc/arena.h"
#include "ipc/exchange.h"
#include "ipc/expert_store.h"
#include "ipc/expert_store_map.h"
#include "ipc/actor.h"
#include "ipc/rundir.h"
#include "ipc/step.h"

#define DEFAULT_SLICE_NS 100000000u
/* --prof: the most activity records kept (32 bytes each), several thousand decode steps of a large model; the
 * rest are counted as dropped */
#define PROF_MAX_RECS (1u << 22)

static volatile sig_atomic_t signalled;

/* The worker's state (the actor's "self"). */
typedef struct gpu_worker {
    actor_t *actor;
    uint64_t generation;
    char *model_path;
    model_t *model;
    guild_pool_t *pool;
    guild_arena_t *arena;
    guild_exchange_t *x;
    guild_step_t step;
    moe_exec_t *moe;     /* the routed experts: the CPU workers through the exchange (its one executor) */
    bool count_routing;  /* the backend counts the routing: published to the actor after each request */
    uint64_t *routing;   /* [n_layer * n_expert] scratch of those counts */
    backend_t *be;
    /* the CPU workers' expert stores, mapped read-only (ipc/expert_store.h), and their experts as the backend
     * streams them */
    guild_arena_t **stores;
    size_t n_stores;
    expert_host_mats_t *host_mats;
    expert_host_t host;
    int32_t *positions;  /* [max_tokens] */
    int32_t max_tokens, max_out;
    guild_wait_policy_t slice;
    uint64_t cur_request; /* the request being served: what an abort compares to */
    bool aborted;
    bool tracing;        /* --prof: each request's interval goes into the trace (gpu-worker/prof/cupti_trace.h) */
    /* the snapshot in transit (GUILD_STEP_SAVE, GUILD_STEP_LOAD: ipc/step.h) */
    char *snap;          /* [snap_size] */
    size_t snap_size, snap_have; /* its bytes; LOAD: those received */
    int32_t snap_seq, snap_n;
} gpu_worker_t;

static void release(gpu_worker_t *g)
{
    backend_destroy(&g->be);
    for (size_t i = 0; i < g->n_stores; i++) /* after the backend: it registered their memory */
        guild_arena_destroy(&g->stores[i]);
    free(g->stores);
    g->stores = NULL;
    g->n_stores = 0;
    free(g->host_mats);
    g->host_mats = NULL;
    moe_exec_destroy(&g->moe);
    guild_exchange_destroy(&g->x);
    guild_arena_destroy(&g->arena);
    memset(&g->step, 0, sizeof g->step);
    guild_pool_destroy(&g->pool);
    free(g->positions);
    g->positions = NULL;
    free(g->routing);
    g->routing = NULL;
    g->count_routing = false;
    free(g->snap);
    g->snap = NULL;
}

static int interrupted(void *ctx, guild_err_t *err)
{
    gpu_worker_t *g = ctx;
    const char *why;
    if (actor_stopping(g->actor, &why))
        return guild_err_set(err, "the GPU worker is stopping (%s)", why);
    if (guild_doorbell_load(&g->step.sh->abort) >= g->cur_request) {
        g->aborted = true;
        return guild_err_set(err, "request %llu aborted by the coordinator", (unsigned long long)g->cur_request);
    }
    return 0;
}

/* While loading: only a stop of the worker interrupts. */
static int load_interrupted(void *ctx, guild_err_t *err)
{
    gpu_worker_t *g = ctx;
    const char *why;
    if (actor_stopping(g->actor, &why))
        return guild_err_set(err, "the GPU worker is stopping (%s)", why);
    return 0;
}

/* Maps the CPU workers' expert stores read-only, waits until each is filled, and describes their experts for the
 * backend (g->host). A store that is not filled in time is an error naming it. */
static int map_stores(gpu_worker_t *g, const Guild__Assign *a, guild_err_t *err)
{
    const model_config_t *c = model_config(g->model);
    const size_t n = (size_t)c->n_layer * (size_t)c->n_expert;
    if (!(g->stores = calloc(a->n_expert_stores, sizeof *g->stores)) ||
        !(g->host_mats = calloc(n ? n : 1, sizeof *g->host_mats)))
        return guild_err_set(err, "out of memory");
    const uint64_t t0 = guild_now_ns();
    for (size_t i = 0; i < a->n_expert_stores; i++) {
        const Guild__ArenaRef *ref = a->expert_stores[i];
        expert_store_t st;
        const int rc =
            expert_store_map(ref->name, ref->tag, ref->size, g->model, load_interrupted, g, &g->stores[i], &st, err);
        if (g->stores[i])
            g->n_stores = i + 1;
        if (rc < 0)
            return -1;
        for (int32_t il = 0; il < c->n_layer; il++)
            for (int32_t e = 0; e < c->n_expert; e++) {
                const expert_store_entry_t *en = expert_store_entry(&st, il, e);
                if (!en->gate)
                    continue;
                g->host_mats[(size_t)il * (size_t)c->n_expert + (size_t)e] = (expert_host_mats_t){
                    st.base + en->gate, st.base + en->up, st.base + en->down, en->gate_row, en->up_row, en->down_row,
                    (en->flags & EXPERT_STORE_GATE_PACKED) != 0, (en->flags & EXPERT_STORE_UP_PACKED) != 0,
                    (en->flags & EXPERT_STORE_DOWN_PACKED) != 0};
            }
    }
    g->host = (expert_host_t){c->n_layer, c->n_expert, g->host_mats};
    guild_log(GUILD_LOG_INFO, "%zu expert stores of the CPU workers mapped (filled after %.1f s)", a->n_expert_stores,
              (double)(guild_now_ns() - t0) / 1e9);
    return 0;
}

/* Loads what Assign asks for. -1 with err and the error code to report. */
static int load(gpu_worker_t *g, const Guild__Assign *a, Guild__ErrorCode *code, guild_err_t *err)
{
    gpu_worker_options_t o; /* points into the Assign, which outlives the backend's creation */
    *code = GUILD__ERROR_CODE__ERROR_PROTOCOL;
    if (a->options_case != GUILD__ASSIGN__OPTIONS_GPU)
        return guild_err_set(err, "assign: no GPU worker options (the GPU worker needs options backend, n_ctx, "
                             "n_batch and max_out)");
    if (gpu_worker_options_from_proto(&o, a->gpu, err) < 0)
        return -1;
    actor_set_silence(g->actor, o.silence_ms);
    if (gpu_worker_options_check(&o, err) < 0)
        return -1;
    if (!a->arena)
        return guild_err_set(err, "assign: no arena");
    if (a->arena->layout_version != GUILD_ARENA_LAYOUT_VERSION)
        return guild_err_set(err, "assign: arena layout version %u, this build reads %u", a->arena->layout_version,
                             GUILD_ARENA_LAYOUT_VERSION);
    if (guild_log_level() >= GUILD_LOG_INFO) {
        char what[512];
        gpu_worker_options_describe(&o, what, sizeof what);
        guild_log(GUILD_LOG_INFO, "options: %s", what);
    }

    *code = GUILD__ERROR_CODE__ERROR_MODEL;
    if (!g->model_path || strcmp(g->model_path, a->model_path) != 0) {
        model_destroy(&g->model);
        free(g->model_path);
        g->model_path = NULL;
        if (model_new(&g->model, a->model_path, err) < 0)
            return -1;
        if (!(g->model_path = strdup(a->model_path)))
            return guild_err_set(err, "out of memory");
    }
    const model_config_t *cfg = model_config(g->model);

    *code = GUILD__ERROR_CODE__ERROR_ARENA;
    guild_arena_expect_t ex = {.tag = a->arena->tag, .size = a->arena->size};
    if (!(g->arena = guild_arena_attach(a->arena->name, &ex, err)))
        return -1;
    size_t size;
    void *xr = guild_arena_region(g->arena, GUILD_ARENA_KIND_EXCHANGE, 0, &size);
    if (!xr)
        return guild_err_set(err, "arena %s: no exchange region", a->arena->name);
    if (!(g->x = guild_exchange_attach(xr, size, err)))
        return -1;
    void *sr = guild_arena_region(g->arena, GUILD_ARENA_KIND_STEP, 0, &size);
    if (!sr)
        return guild_err_set(err, "arena %s: no step region", a->arena->name);
    if (guild_step_attach(&g->step, sr, size, err) < 0)
        return -1;
    g->max_tokens = o.n_batch;
    g->max_out = o.max_out;
    if (g->step.shape.max_tokens < (uint32_t)o.n_batch || g->step.shape.max_out < (uint32_t)o.max_out ||
        g->step.shape.n_vocab != (uint32_t)cfg->n_vocab || guild_exchange_shape(g->x)->max_tokens < (uint32_t)o.n_batch)
        return guild_err_set(err, "arena %s: regions sized for batch %u, %u logits rows of %u; asked for batch %d, "
                             "%d rows of %d", a->arena->name, g->step.shape.max_tokens, g->step.shape.max_out,
                             g->step.shape.n_vocab, o.n_batch, o.max_out, cfg->n_vocab);

    *code = GUILD__ERROR_CODE__ERROR_RESOURCE;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = o.n_threads ? o.n_threads : (ncpu > 0 ? (int)ncpu : 1);
    if (guild_pool_new(&g->pool, nt, NULL, err) < 0)
        return -1;
    if (!(g->positions = malloc((size_t)g->max_tokens * sizeof *g->positions)))
        return guild_err_set(err, "out of memory");
    g->slice = (guild_wait_policy_t){.spin_ns = o.spin_ns, .timeout_ns = o.wait_slice_ns ? o.wait_slice_ns
                                                                                       : DEFAULT_SLICE_NS};
    /* the process's one executor over the exchange: driven from the device when the backend can (in-graph
     * doorbells), from the host otherwise */
    const moe_xchg_options_t xo = {.spin_ns = o.spin_ns, .slice_ns = g->slice.timeout_ns, .interrupted = interrupted,
                                   .ctx = g, .map = guild_arena_base(g->arena),
                                   .map_bytes = guild_arena_size(g->arena)};
    if (backend_exchange_exec_new(&g->moe, o.backend, cfg, g->x, &xo, err) < 0)
        return -1;
    *code = GUILD__ERROR_CODE__ERROR_MODEL;
    /* the coordinator's plan, when it sent one: its resident experts are those the CPU workers were not given */
    gpu_plan_t plan;
    const bool planned = o.plan.given;
    if (planned) {
        *code = GUILD__ERROR_CODE__ERROR_PROTOCOL;
        if (o.plan.n_expert_resident != (size_t)cfg->n_layer * (size_t)cfg->n_expert)
            return guild_err_set(err, "assign: a GPU plan of %zu resident flags, the model has %d layers x %d experts",
                                 o.plan.n_expert_resident, cfg->n_layer, cfg->n_expert);
        if (gpu_plan_import(&plan, g->model, o.plan.budget, o.n_ctx, o.n_seq, o.kv_type, o.plan.n_batch,
                            o.plan.stage_slots, o.plan.stage_slot_experts, o.plan.expert_resident, err) < 0)
            return guild_err_prefix(err, "assign: ");
        *code = GUILD__ERROR_CODE__ERROR_MODEL;
    }
    /* counting the routing runs every token through the last layer (the statistics want them all) */
    const backend_options_t bo = {.n_ctx = o.n_ctx, .n_batch = g->max_tokens, .pool = g->pool, .moe = g->moe,
                                  .all_rows = o.count_routing,
                                  /* resident experts: their hit rate is counted too */
                                  .count_routing = o.count_routing || (planned && plan.n_resident_experts > 0),
                                  .check_finite = o.check_finite,
                                  .n_seq = o.n_seq,
                                  .progress = &g->step.sh->progress,
                                  .kv_type = o.kv_type,
                                  .mtp = o.mtp,
                                  .rollback = o.rollback,
                                  .plan = planned ? &plan : NULL};
    /* the streamed experts' sources: the CPU workers' own copies */
    if (a->n_expert_stores && o.cuda.stager == CUDA_STAGER_SHARED && gpu_worker_options_backend_config(&o)) {
        *code = GUILD__ERROR_CODE__ERROR_RESOURCE;
        if (map_stores(g, a, err) < 0) {
            if (planned)
                gpu_plan_fini(&plan);
            return -1;
        }
        o.cuda.expert_host = &g->host;
        *code = GUILD__ERROR_CODE__ERROR_MODEL;
    }
    const int rc = backend_new(&g->be, o.backend, g->model, &bo, gpu_worker_options_backend_config(&o), err);
    if (planned)
        gpu_plan_fini(&plan);
    g->count_routing = o.count_routing;
    return rc;
}

/* The forward pass of a request's rows (seq_ids NULL: all of sequence 0), its logits or, for a pick request
 * (GUILD_STEP_PICK), its picks and the logits of the rows full[] names, into the step region. -1 with err. */
static int forward_out(gpu_worker_t *g, const guild_step_request_t *req, const int32_t *seq_ids,
                       const int32_t *positions, guild_err_t *err)
{
    if (req->flags & GUILD_STEP_PICK)
        return backend_forward_pick(g->be, req->n_tokens, g->step.tokens, seq_ids, positions, req->n_out,
                                    g->step.out_rows, (int32_t)g->step.shape.n_vocab, g->step.full, g->step.logits,
                                    g->step.picks, err);
    return backend_forward_seq(g->be, req->n_tokens, g->step.tokens, seq_ids, positions, req->n_out,
                               g->step.out_rows, g->step.logits, err);
}

/* A request of several sequences (GUILD_STEP_SEQS): each sequence of the batch truncated to its first row's
 * position, then the rows appended. -1 with err. */
static int forward_seqs(gpu_worker_t *g, uint64_t seq, const guild_step_request_t *req, guild_err_t *err)
{
    const int32_t n_seq = backend_n_seq(g->be);
    for (int32_t i = 0; i < req->n_tokens; i++) {
        const int32_t s = g->step.seq_ids[i], p = g->step.positions[i];
        if (s < 0 || s >= n_seq)
            return guild_err_set(err, "step request %llu: row %d is of sequence %d (the backend holds %d)",
                                 (unsigned long long)seq, i, s, n_seq);
        bool first = true;
        for (int32_t k = 0; k < i && first; k++)
            first = g->step.seq_ids[k] != s;
        if (!first)
            continue;
        if (p < 0 || p > backend_seq_kv_len(g->be, s))
            return guild_err_set(err, "step request %llu: sequence %d from position %d, its cache holds %d",
                                 (unsigned long long)seq, s, p, backend_seq_kv_len(g->be, s));
        backend_seq_kv_truncate(g->be, s, p);
    }
    return forward_out(g, req, g->step.seq_ids, g->step.positions, err);
}

/* A snapshot chunk (GUILD_STEP_SAVE or GUILD_STEP_LOAD, ipc/step.h) through the logits area. -1 with err. */
static int state_chunk(gpu_worker_t *g, uint64_t seq, const guild_step_request_t *req, guild_step_response_t *resp,
                       guild_err_t *err)
{
    const size_t window = (size_t)g->step.shape.max_out * g->step.shape.n_vocab * sizeof(float);
    char *win = (char *)g->step.logits;
    const unsigned long long id = (unsigned long long)seq;
    if (req->n_tokens != 0 || req->state_seq < 0 || req->state_seq >= backend_n_seq(g->be))
        return guild_err_set(err, "step request %llu: a snapshot chunk of sequence %d with %d tokens", id,
                             req->state_seq, req->n_tokens);
    const bool same = g->snap && g->snap_seq == req->state_seq && g->snap_n == req->state_n;
    if (req->flags & GUILD_STEP_SAVE) {
        if (req->state_offset == 0) {
            free(g->snap);
            g->snap = NULL;
            void *blob;
            if (backend_seq_save(g->be, req->state_seq, req->state_n, &blob, &g->snap_size, err) < 0)
                return -1;
            g->snap = blob;
            g->snap_seq = req->state_seq;
            g->snap_n = req->state_n;
        } else if (!same || req->state_offset >= g->snap_size) {
            return guild_err_set(err, "step request %llu: snapshot bytes from %llu of none taken", id,
                                 (unsigned long long)req->state_offset);
        }
        const size_t n = g->snap_size - req->state_offset < window ? g->snap_size - req->state_offset : window;
        memcpy(win, g->snap + req->state_offset, n);
        resp->state_total = g->snap_size;
        resp->chunk_bytes = n;
        if (req->state_offset + n == g->snap_size) {
            free(g->snap);
            g->snap = NULL;
        }
        return 0;
    }
    if (req->state_offset == 0) {
        free(g->snap);
        g->snap = NULL;
        if (req->state_total < sizeof(backend_state_header_t) || req->state_total > ((uint64_t)1 << 42) ||
            !(g->snap = malloc((size_t)req->state_total)))
            return guild_err_set(err, "step request %llu: no room for a snapshot of %llu bytes", id,
                                 (unsigned long long)req->state_total);
        g->snap_size = (size_t)req->state_total;
        g->snap_have = 0;
        g->snap_seq = req->state_seq;
        g->snap_n = req->state_n;
    } else if (!same || req->state_offset != g->snap_have || req->state_total != g->snap_size) {
        return guild_err_set(err, "step request %llu: snapshot bytes from %llu, expected %zu", id,
                             (unsigned long long)req->state_offset, g->snap ? g->snap_have : (size_t)0);
    }
    if (req->chunk_bytes > window || req->chunk_bytes > g->snap_size - g->snap_have)
        return guild_err_set(err, "step request %llu: a snapshot chunk of %llu bytes (window %zu, %zu left)", id,
                             (unsigned long long)req->chunk_bytes, window, g->snap_size - g->snap_have);
    memcpy(g->snap + g->snap_have, win, (size_t)req->chunk_bytes);
    g->snap_have += (size_t)req->chunk_bytes;
    if (g->snap_have < g->snap_size)
        return 0;
    const int rc = backend_seq_load(g->be, g->snap_seq, NULL, g->snap_n, g->snap, g->snap_size, err);
    free(g->snap);
    g->snap = NULL;
    return rc;
}

/* A step of the backend's multi-token-prediction layer (GUILD_STEP_MTP): the cache cut to `keep` first when it
 * holds more (a cut resets the steps, so an equal length is left alone). -1 with err. */
static int mtp_step(gpu_worker_t *g, uint64_t seq, const guild_step_request_t *req, guild_err_t *err)
{
    if (req->n_tokens != 1 || req->keep < 1 || req->keep > backend_kv_len(g->be))
        return guild_err_set(err, "step request %llu: a multi-token-prediction step of %d tokens after %d positions "
                             "(the cache holds %d)", (unsigned long long)seq, req->n_tokens, req->keep,
                             backend_kv_len(g->be));
    if (req->keep < backend_kv_len(g->be))
        backend_kv_truncate(g->be, req->keep);
    return backend_mtp_step(g->be, req->state_n, g->step.tokens[0], g->step.logits, err);
}

/* --prof: a failure to take the tracer's clock or keep a step stops adding steps (said once); the records go on. */
static void trace_steps_off(gpu_worker_t *g, const guild_err_t *err)
{
    guild_log(GUILD_LOG_WARN, "--prof: %s; no more step requests go into the trace", err->msg);
    g->tracing = false;
}

/* --prof: the request's interval, from start to now on the tracer's clock, into the trace. */
static void trace_step(gpu_worker_t *g, const guild_step_request_t *req, int status, uint64_t start)
{
    guild_err_t err = {{0}};
    const uint32_t f = req->flags;
    prof_step_t st = {
        .start = start,
        .n_tokens = req->n_tokens > 0 ? req->n_tokens : 0,
        .n_out = req->n_out > 0 ? req->n_out : 0,
        .kind = f & (GUILD_STEP_SAVE | GUILD_STEP_LOAD) ? PROF_STEP_STATE
                : f & GUILD_STEP_MTP                    ? PROF_STEP_MTP
                : f & GUILD_STEP_SEQS                   ? PROF_STEP_SEQS
                                                        : PROF_STEP_FORWARD,
        .ok = status == GUILD_STEP_OK,
    };
    if (cupti_trace_now(&st.end, &err) < 0 || cupti_trace_add_step(&st, &err) < 0)
        trace_steps_off(g, &err);
}

/* Runs the request in the step region and fills the response. */
static void serve_one(gpu_worker_t *g, uint64_t seq)
{
    guild_step_shared_t *sh = g->step.sh;
    guild_step_response_t *resp = &sh->resp;
    const guild_step_request_t req = sh->req;
    guild_err_t err = {{0}};
    int status = GUILD_STEP_FAILED;
    moe_exec_stats_t m0, m1;
    moe_exec_stats(g->moe, &m0);
    uint64_t t0 = guild_now_ns(), trace_t0 = 0;
    if (g->tracing && cupti_trace_now(&trace_t0, &err) < 0) {
        trace_steps_off(g, &err);
        guild_err_clear(&err);
    }
    g->cur_request = seq;
    g->aborted = false;
    resp->state_total = resp->chunk_bytes = 0;
    if (req.seq != seq) {
        guild_err_set(&err, "step region: request fields of %llu under doorbell %llu",
                      (unsigned long long)req.seq, (unsigned long long)seq);
    } else if (req.flags & (GUILD_STEP_SAVE | GUILD_STEP_LOAD)) {
        if (state_chunk(g, seq, &req, resp, &err) == 0)
            status = GUILD_STEP_OK;
    } else if (req.flags & GUILD_STEP_MTP) {
        if (mtp_step(g, seq, &req, &err) == 0)
            status = GUILD_STEP_OK;
    } else if (req.n_tokens < 1 || req.n_tokens > g->max_tokens || req.n_out < 0 || req.n_out > g->max_out ||
               req.n_out > req.n_tokens) {
        guild_err_set(&err, "step request %llu: %d tokens, %d logits rows (limits %d, %d)",
                      (unsigned long long)seq, req.n_tokens, req.n_out, g->max_tokens, g->max_out);
    } else if (req.flags & GUILD_STEP_SEQS) {
        if (forward_seqs(g, seq, &req, &err) == 0)
            status = GUILD_STEP_OK;
        else if (g->aborted)
            status = GUILD_STEP_ABORTED;
    } else if (req.keep < 0 || req.keep > backend_kv_len(g->be)) {
        guild_err_set(&err, "step request %llu: keep %d positions, the cache holds %d", (unsigned long long)seq,
                      req.keep, backend_kv_len(g->be));
    } else {
        backend_kv_truncate(g->be, req.keep);
        for (int32_t i = 0; i < req.n_tokens; i++)
            g->positions[i] = req.keep + i;
        if (forward_out(g, &req, NULL, g->positions, &err) == 0)
            status = GUILD_STEP_OK;
        else if (g->aborted)
            status = GUILD_STEP_ABORTED;
    }
    uint64_t t1 = guild_now_ns();
    if (g->tracing)
        trace_step(g, &req, status, trace_t0);
    moe_exec_stats(g->moe, &m1);
    backend_stats_t b1;
    backend_stats(g->be, &b1);
    resp->seq = seq;
    resp->status = status;
    resp->kv_len = backend_kv_len(g->be);
    resp->exchanges = m1.exchanges - m0.exchanges;
    resp->forward_ns = t1 - t0;
    resp->moe_ns = m1.wait_ns - m0.wait_ns;
    snprintf(resp->message, sizeof resp->message, "%s", status == GUILD_STEP_OK ? "" : err.msg);
    if (status != GUILD_STEP_OK)
        guild_log(GUILD_LOG_WARN, "request %llu: %s", (unsigned long long)seq, err.msg);
    guild_doorbell_ring(&sh->response, seq);

    actor_stats_t *st = actor_stats(g->actor);
    atomic_fetch_add(&st->exchanges, 1);
    atomic_fetch_add(&st->tokens, (uint64_t)(req.n_tokens > 0 ? req.n_tokens : 0));
    atomic_fetch_add(&st->busy_ns, (t1 - t0) - (m1.wait_ns - m0.wait_ns));
    atomic_fetch_add(&st->wait_ns, m1.wait_ns - m0.wait_ns);
    atomic_store(&st->futex_sleeps, m1.sleeps);
    atomic_store(&st->last_seq, seq);
    /* the stored counters are absolute: a new backend (after an Assign) starts them again */
    atomic_store(&st->streamed_layers, b1.streamed_layers);
    atomic_store(&st->streamed_bytes, b1.streamed_bytes);
    atomic_store(&st->split_gpu_experts, b1.split_gpu_experts);
    atomic_store(&st->split_cpu_experts, b1.split_cpu_experts);
    atomic_store(&st->split_gpu_pairs, b1.split_gpu_pairs);
    atomic_store(&st->split_cpu_pairs, b1.split_cpu_pairs);
    atomic_store(&st->staged_bytes, b1.staged_bytes);
    atomic_store(&st->stage_wait_ns, b1.stage_wait_ns);
    atomic_store(&st->stream_passes, b1.stream_passes);
    atomic_store(&st->stream_span_ns, b1.stream_span_ns);
    atomic_store(&st->copy_busy_ns, b1.copy_busy_ns);
    atomic_store(&st->copy_wait_ns, b1.copy_wait_ns);
    atomic_store(&st->cpu_wait_ns, b1.cpu_wait_ns);
    atomic_store(&st->routed_pairs, b1.routed_pairs);
    atomic_store(&st->resident_pairs, b1.resident_pairs);
    if (g->count_routing) {
        const model_config_t *cfg = model_config(g->model);
        const size_t n = (size_t)cfg->n_layer * (size_t)cfg->n_expert;
        if (!g->routing)
            g->routing = malloc((n ? n : 1) * sizeof *g->routing);
        if (g->routing && backend_routing(g->be, g->routing) == 0)
            actor_set_routing(g->actor, g->routing, n);
    }
}

/* Serves requests until the actor stops or another Assign arrives. */
static void serve(gpu_worker_t *g, uint64_t next)
{
    guild_step_shared_t *sh = g->step.sh;
    while (!actor_stopping(g->actor, NULL) && !actor_assign_pending(g->actor)) {
        guild_err_t err = {{0}};
        guild_wait_result_t r = guild_doorbell_wait(&sh->request, next, &g->slice, NULL, NULL, "step request", &err);
        if (r == GUILD_WAIT_TIMEOUT)
            continue;
        if (r == GUILD_WAIT_ERROR) {
            actor_error(g->actor, GUILD__ERROR_CODE__ERROR_INTERNAL, true, g->generation, "%s", err.msg);
            actor_stop(g->actor, "doorbell failure");
            return;
        }
        uint64_t seq = guild_doorbell_load(&sh->request);
        serve_one(g, seq);
        next = seq + 1;
    }
}

/* --prof at exit: stops tracing and writes the trace with the model's layers and path. A failure is logged. */
static void trace_finish(prof_trace_t *t, const char *path, const model_t *m, const char *model_path)
{
    guild_err_t err = {{0}};
    if (cupti_trace_stop(&err) < 0)
        guild_log(GUILD_LOG_WARN, "--prof: %s (the trace holds the records kept)", err.msg);
    t->n_layer = m ? model_config(m)->n_layer : 0;
    if (prof_trace_set_model(t, model_path, &err) < 0 || prof_trace_write(t, path, &err) < 0)
        guild_log(GUILD_LOG_ERROR, "--prof: %s", err.msg);
    else
        guild_log(GUILD_LOG_INFO, "--prof: %zu records (%llu dropped), %zu step requests in %s", t->n_recs,
                  (unsigned long long)t->dropped, t->n_steps, path);
}

int gpu_worker_run(const gpu_worker_args_t *args)
{
    const char *endpoint = args->endpoint;
    guild_log_init("gpu-worker", args->verbose >= 2 ? GUILD_LOG_DEBUG : args->verbose ? GUILD_LOG_INFO : GUILD_LOG_WARN);
    int parent = (int)getppid(); /* the coordinator, when it spawned this worker */
    guild_err_t err = {{0}};
    gpu_worker_t g = {0};
    guild_curve_t *curve = NULL;
    prof_trace_t trace; /* --prof's */
    prof_trace_init(&trace, PROF_MAX_RECS);
    if (args->prof && cupti_trace_start(&trace, &err) < 0) { /* before any CUDA context: graphs traced per node */
        guild_log(GUILD_LOG_ERROR, "--prof %s: %s", args->prof, err.msg);
        return 1;
    }
    g.tracing = args->prof != NULL;
    if (actor_install_signals(&signalled, &err) < 0 || guild_curve_load(&curve, &args->curve, endpoint, false, &err) < 0) {
        guild_log(GUILD_LOG_ERROR, "%s", err.msg);
        cupti_trace_abandon();
        prof_trace_fini(&trace);
        return 1;
    }
    actor_config_t ac = {
        .role = GUILD__ROLE__ROLE_GPU_WORKER,
        .node = -1,
        .endpoint = endpoint,
        .name = "gpu-worker",
        .silence_ms = 3000,
        .signalled = &signalled,
        .curve = curve,
    };
    if (actor_new(&g.actor, &ac, &err) < 0) {
        guild_log(GUILD_LOG_ERROR, "%s", err.msg);
        guild_curve_destroy(&curve);
        cupti_trace_abandon();
        prof_trace_fini(&trace);
        return 1;
    }
    for (;;) {
        Guild__Envelope *env = actor_take_assign(g.actor, -1);
        if (!env)
            break;
        const Guild__Assign *a = env->assign;
        release(&g);
        g.generation = a->generation;
        uint64_t t0 = guild_now_ns();
        Guild__ErrorCode code;
        if (load(&g, a, &code, &err) < 0) {
            actor_error(g.actor, code, false, a->generation, "%s", err.msg);
            release(&g);
            guild_msg_free(&env);
            continue;
        }
        uint64_t next = guild_doorbell_load(&g.step.sh->request) + 1;
        actor_ready(g.actor, a->generation, guild_now_ns() - t0, 0, next);
        guild_log(GUILD_LOG_INFO, "ready: backend %s, serving step requests from %llu", a->gpu->backend,
                  (unsigned long long)next);
        guild_msg_free(&env);
        serve(&g, next);
    }
    const char *why = "";
    actor_stopping(g.actor, &why);
    const bool failed = actor_failed(g.actor);
    guild_log(failed ? GUILD_LOG_ERROR : GUILD_LOG_INFO, "exiting: %s", why);
    if (args->prof) /* while the backend's context still exists */
        trace_finish(&trace, args->prof, g.model, g.model_path);
    release(&g);
    model_destroy(&g.model);
    free(g.model_path);
    actor_destroy(&g.actor);
    guild_curve_destroy(&curve);
    rundir_remove_orphaned(endpoint, parent);
    prof_trace_fini(&trace);
    return failed ? 1 : 0;
}
