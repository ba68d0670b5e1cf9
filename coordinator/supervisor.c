#include "config.h"

#include "coordinator/supervisor.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "coordinator/bridge.h"
#include "coordinator/remote_backend.h"
#include "coordinator/shard_verify.h"
#include "coordinator/spawn.h"
#include "coordinator/stack_flags.h"
#include "coordinator/supervisor_slots.h"
#include "core/topo/topo.h"
#include "core/util/progress.h"
#include "gpu-worker/dense/backend.h"
#include "gpu-worker/dense/cuda/cuda_config.h"
#include "gpu-worker/dense/gpu_plan.h"
#include "ipc/arena.h"
#include "ipc/curve.h"
#include "ipc/doorbell.h"
#include "ipc/exchange.h"
#include "ipc/expert_store.h"
#include "ipc/msg.h"
#include "ipc/proc_stat.h"
#include "ipc/rundir.h"
#include "ipc/stage_ring.h"
#include "ipc/zap.h"
#include "stager/stager_options.h"

#define TICK_MS 10            /* supervisor loop period: bounds how late a death or a message is handled */
#define RESTART_WINDOW_NS (60ull * 1000000000ull)
#define SHUTDOWN_GRACE_NS (2ull * 1000000000ull)
/* past the grace, a child that still works (its CPU time advances or it waits in the kernel: a GPU worker unpinning
   a 12 GiB host-RAM KV cache takes seconds) is given up to this long before it is killed */
#define SHUTDOWN_BUSY_MAX_NS (30ull * 1000000000ull)
#define SHUTDOWN_LOOK_NS (250ull * 1000000ull) /* how often such a child is looked at */
#define BACKOFF_MAX_MS 60000u /* a worker given up on waits at most this long before it is started again */
#define BACKOFF_RESET_NS (5ull * RESTART_WINDOW_NS) /* a give-up this long after the last starts the back-off over */
#define LOADING_SILENCE 10 /* a remote worker's silence limit while it loads, in hang_ms */

static const char *state_name[] = {"empty", "starting", "loading", "ready", "killed"};

static const wslot_t *down_slot(const sup_t *s);

/* Under mu. The first failure wins; the GPU worker is told to give up the request it is waiting on. */
static void fail(sup_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(sup_t *s, const char *fmt, ...)
{
    if (s->failed)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->fail_msg, sizeof s->fail_msg, fmt, ap);
    va_end(ap);
    s->failed = true;
    guild_log(GUILD_LOG_ERROR, "pipeline failed: %s", s->fail_msg);
    guild_doorbell_ring(&s->step.sh->abort, guild_doorbell_load(&s->step.sh->request));
    pthread_cond_broadcast(&s->cond);
}

static void send_to(sup_t *s, wslot_t *w, Guild__Envelope *env)
{
    guild_err_t err = {{0}};
    env->msg_id = ++s->msg_id;
    if (w->peer.len && guild_msg_send(s->router, &w->peer, env, &err) < 0)
        guild_log(GUILD_LOG_INFO, "to %s: %s", w->name, err.msg);
}

static const char *worker_bin(Guild__Role role)
{
    return role == GUILD__ROLE__ROLE_GPU_WORKER ? "guild-gpu-worker"
           : role == GUILD__ROLE__ROLE_STAGER   ? "guild-stager"
                                                : "guild-cpu-worker";
}

/* The streamed experts' copy threads (guild-stager's, or the GPU worker's own): as asked (--stager-threads),
 * else half the online CPUs (the CPU workers and the GPU worker's host side keep the rest). */
static int stager_threads(const stack_options_t *o)
{
    if (o->gpu.cuda.stage_threads > 0)
        return o->gpu.cuda.stage_threads;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return cpus > 1 ? (int)(cpus / 2 < 256 ? cpus / 2 : 256) : 1;
}

static void start_worker(sup_t *s, wslot_t *w)
{
    char path[PATH_MAX + 32], node[16], threads[16];
    const char *bin = worker_bin(w->role);
    snprintf(path, sizeof path, "%s/%s", s->setup.worker_dir, bin);
    snprintf(node, sizeof node, "%d", w->node);
    snprintf(threads, sizeof threads, "%d", s->stager.threads);
    char *argv[16];
    int n = 0;
    argv[n++] = (char *)bin;
    if (w->role == GUILD__ROLE__ROLE_CPU_WORKER) {
        argv[n++] = "--node";
        argv[n++] = node;
    } else if (w->role == GUILD__ROLE__ROLE_STAGER) {
        /* its options come on the command line (it serves before it registers); the Assign repeats them */
        argv[n++] = "-m";
        argv[n++] = (char *)s->setup.model_path;
        argv[n++] = "--ring";
        argv[n++] = s->stager.rings[0];
        argv[n++] = "--threads";
        argv[n++] = threads;
    } else if (s->opts.gpu_prof) { /* the GPU worker: tracing starts before its CUDA context does */
        argv[n++] = "--prof";
        argv[n++] = (char *)s->opts.gpu_prof;
    }
    argv[n++] = "--connect";
    argv[n++] = s->endpoint;
    if (s->opts.log_level >= GUILD_LOG_INFO)
        argv[n++] = "-v";
    argv[n] = NULL;
    guild_err_t err = {{0}};
    pid_t pid;
    if (spawn_process(&pid, path, argv, &err) < 0) {
        fail(s, "%s: %s", w->name, err.msg);
        return;
    }
    w->pid = pid;
    w->peer.len = 0;
    w->state = W_SPAWNED;
    w->since_ns = guild_now_ns();
    guild_log(GUILD_LOG_INFO, "%s: started, pid %d", w->name, (int)pid);
}

/* The GPU worker's record for this assignment: the options' settings, the sizes, the plan's resident layers and
 * the streamed experts' copies. gpu_layers ([n_layer]) holds the layer list it points to. */
static void gpu_assignment(const sup_t *s, gpu_worker_options_t *g, uint32_t *gpu_layers)
{
    const stack_options_t *o = &s->opts;
    *g = o->gpu;
    g->n_ctx = o->n_ctx;
    g->n_batch = o->n_batch;
    g->max_out = s->max_out;
    g->n_seq = o->n_seq;
    g->n_threads = o->n_threads;
    g->spin_ns = o->spin_ns;
    g->wait_slice_ns = o->wait_slice_ns;
    g->silence_ms = o->silence_ms;
    g->cuda.n_resident_layers = 0;
    for (int il = 0; il < s->mc.n_layer; il++)
        if (placement_on_gpu(s->setup.plan, il))
            gpu_layers[g->cuda.n_resident_layers++] = (uint32_t)il;
    g->cuda.resident_layers = gpu_layers;
    /* the coordinator's plan, which the GPU worker's backend follows (the placement skipped its resident experts) */
    const gpu_plan_t *gp = s->setup.gpu_plan;
    g->count_routing = s->setup.count_routing;
    g->plan.given = gp != NULL;
    if (gp) {
        g->plan.budget = gp->budget;
        g->plan.n_batch = gp->n_batch;
        g->plan.stage_slots = gp->stage_slots;
        g->plan.stage_slot_experts = gp->stage_slot_experts;
        g->plan.expert_resident = gp->expert_resident;
        g->plan.n_expert_resident = (size_t)gp->n_layer * (size_t)gp->n_expert;
    }
    /* the streamed experts' copies: through our guild-stager's ring, a ring of its own, pinned, or pageable (a
     * plan that does not stream copies nothing) */
    g->cuda.stage_ring = NULL;
    g->cuda.stage_threads = 0;
    if (!s->setup.stage_slot_bytes)
        g->cuda.stager = CUDA_STAGER_NONE;
    else if (s->ring)
        g->cuda.stage_ring = stage_ring_name(s->ring);
    else if (g->cuda.stager == CUDA_STAGER_THREAD)
        g->cuda.stage_threads = stager_threads(o);
}

/* A CPU worker's record for this assignment: the options' settings, the plan's node and CPUs (cpus: room for
 * them), the data endpoint of a worker without the arena. */
/* The CPU workers that split each exchange with w (w among them, ascending) into share[], their count (0: w
 * computes the experts it owns): every local worker of its plan node, when the node has more than one. */
static size_t share_group(const sup_t *s, const wslot_t *w, uint32_t *share)
{
    if (!s->setup.share_node || !s->stores || w->remote)
        return 0;
    const int node = placement_node(s->setup.plan, w->index);
    size_t n = 0;
    for (int k = 0; k < s->n_cpu; k++)
        if (placement_node(s->setup.plan, k) == node)
            share[n++] = (uint32_t)k;
    return n > 1 ? n : 0;
}

static void cpu_assignment(const sup_t *s, const wslot_t *w, cpu_worker_options_t *c, uint32_t *cpus)
{
    const stack_options_t *o = &s->opts;
    *c = o->cpu;
    /* its share of its node's cores (placement_threads): workers on one node never oversubscribe it */
    c->n_threads = placement_threads(s->setup.plan, w->index, o->n_threads, o->given & STACK_FLAG_THREADS);
    /* a worker that takes turns on a CPU with another sleeps at once on its doorbell: spinning there would hold
     * the CPU the other needs to finish the step both wait for */
    c->spin_ns = placement_shared(s->setup.plan, w->index) ? 0 : o->spin_ns;
    c->wait_slice_ns = o->wait_slice_ns;
    c->silence_ms = o->silence_ms;
    c->node = w->node;
    const int *pc;
    const int npc = placement_cpus(s->setup.plan, w->index, &pc);
    for (int i = 0; i < npc; i++)
        cpus[i] = (uint32_t)pc[i];
    c->cpus = cpus;
    c->n_cpus = (size_t)npc;
    c->data_endpoint = w->remote ? s->data_public : NULL;
}

/* An expert store per CPU worker, its pages allocated as the worker fills it (bound to its node). */
static int stores_create(sup_t *s, const uint64_t *bytes, guild_err_t *err)
{
    if (!(s->stores = calloc((size_t)s->n_cpu, sizeof *s->stores)))
        return guild_err_set(err, "pipeline: out of memory");
    uint64_t total = 0;
    char pages[256] = ""; /* each store's page kind, for the log */
    for (int i = 0; i < s->n_cpu; i++) {
        const guild_arena_request_t req = {EXPERT_STORE_ARENA_KIND, 0,
                                           expert_store_memsize(s->mc.n_layer, s->mc.n_expert, bytes[i])};
        /* hugetlb pages where the worker's node has enough free (its pages come from that node's pool: bound
         * there, a short pool would fail a fault in the middle of the copy), else transparent hugepages */
        const int node = placement_node(s->setup.plan, i);
        const uint64_t huge = (uint64_t)2 << 20, layout = guild_arena_layout_bytes(&req, 1);
        const uint64_t need = (layout + huge - 1) / huge * huge; /* the stores before it reserved theirs */
        const uint64_t avail = guild_arena_hugetlb_free(topo_node_count() > 1 ? node : -1);
        const bool hugetlb = avail >= need;
        if (!hugetlb && avail)
            guild_log(GUILD_LOG_INFO, "cpu-worker[%d]'s expert store: %llu MiB of 2 MiB hugetlb pages free on node %d, "
                      "%llu MiB needed", i, (unsigned long long)(avail >> 20), node, (unsigned long long)(need >> 20));
        const guild_arena_opts_t ao = {.pages = hugetlb ? GUILD_ARENA_PAGES_HUGETLB : GUILD_ARENA_PAGES_THP,
                                       .dir = s->opts.arena_dir, .lazy = 1, .huge_only = s->opts.huge_pages_required};
        size_t rs = 0;
        void *r = NULL;
        if (!(s->stores[i] = guild_arena_create(&req, 1, &ao, err)) ||
            !(r = guild_arena_region(s->stores[i], EXPERT_STORE_ARENA_KIND, 0, &rs)) ||
            expert_store_init(r, rs, s->mc.n_layer, s->mc.n_expert, bytes[i], err) < 0)
            return guild_err_prefix(err, "cpu-worker[%d]'s expert store: ", i);
        guild_arena_publish(s->stores[i]);
        total += bytes[i];
        const size_t n = strlen(pages);
        if (n + 16 < sizeof pages)
            snprintf(pages + n, sizeof pages - n, "%s%s", i ? "," : "",
                     guild_arena_pages_name(guild_arena_pages(s->stores[i])));
    }
    guild_log(GUILD_LOG_INFO, "pipeline: %d expert stores (%.2f GiB of copies, %s pages):%s%s", s->n_cpu,
              (double)total / 1073741824.0, pages,
              s->setup.gpu_streams_stores ? " the GPU worker streams from the CPU workers' own copies" : "",
              s->setup.share_node ? " the CPU workers of a node split each exchange's experts" : "");
    return 0;
}

static void arena_ref(Guild__ArenaRef *r, const guild_arena_t *a)
{
    guild__arena_ref__init(r);
    r->name = (char *)guild_arena_name(a);
    r->layout_version = GUILD_ARENA_LAYOUT_VERSION;
    r->size = guild_arena_size(a);
    r->tag = guild_arena_tag(a);
}

static int send_assign(sup_t *s, wslot_t *w)
{
    Guild__Envelope env = GUILD__ENVELOPE__INIT;
    Guild__Assign a = GUILD__ASSIGN__INIT;
    Guild__ArenaRef ar = GUILD__ARENA_REF__INIT;
    gpu_worker_options_t gpu;
    gpu_worker_options_msg_t gpu_msg;
    cpu_worker_options_t cpu = {0};
    Guild__CpuWorkerOptions cpu_msg;
    Guild__StagerOptions stager_msg;
    char *ring_names[STAGER_MAX_RINGS];
    int n_layer = s->mc.n_layer;
    Guild__LayerShard *shards = NULL, **shard_ptrs = NULL;
    Guild__ArenaRef *store_refs = NULL, **store_ptrs = NULL;
    Guild__ExpertRange *ranges = NULL, **range_ptrs = NULL;
    uint32_t *cpus = NULL, *gpu_layers = NULL, *run_first = NULL, *run_count = NULL, *share = NULL;
    int rc = -1;

    a.model_path = (char *)s->setup.model_path;
    a.generation = ++s->generation;
    w->generation = a.generation;
    ar.name = (char *)guild_arena_name(s->arena);
    ar.layout_version = GUILD_ARENA_LAYOUT_VERSION;
    ar.size = guild_arena_size(s->arena);
    ar.tag = guild_arena_tag(s->arena);
    a.arena = w->remote || w->role == GUILD__ROLE__ROLE_STAGER ? NULL : &ar;
    if (w->role == GUILD__ROLE__ROLE_GPU_WORKER) {
        if (!(gpu_layers = calloc((size_t)n_layer + 1, sizeof *gpu_layers))) {
            fail(s, "%s: out of memory for its assignment", w->name);
            goto done;
        }
        gpu_assignment(s, &gpu, gpu_layers);
        gpu_worker_options_to_proto(&gpu, &gpu_msg);
        a.options_case = GUILD__ASSIGN__OPTIONS_GPU;
        a.gpu = &gpu_msg.m;
        a.n_expert_stores = s->stores && s->setup.gpu_streams_stores ? (size_t)s->n_cpu : 0; /* every CPU worker's */
    } else if (w->role == GUILD__ROLE__ROLE_STAGER) {
        stager_options_to_proto(&s->stager, &stager_msg, ring_names);
        a.options_case = GUILD__ASSIGN__OPTIONS_STAGER;
        a.stager = &stager_msg;
    } else if (w->role == GUILD__ROLE__ROLE_CPU_WORKER) {
        a.worker_index = (uint32_t)w->index;
        shards = calloc((size_t)n_layer, sizeof *shards);
        shard_ptrs = calloc((size_t)n_layer, sizeof *shard_ptrs);
        /* a worker's experts of a layer, less those on the GPU: at most (n_expert + 1) / 2 runs */
        const size_t max_runs = ((size_t)s->mc.n_expert + 1) / 2 + 1;
        ranges = calloc((size_t)n_layer * max_runs, sizeof *ranges);
        range_ptrs = calloc((size_t)n_layer * max_runs, sizeof *range_ptrs);
        run_first = calloc(max_runs, sizeof *run_first);
        run_count = calloc(max_runs, sizeof *run_count);
        cpus = calloc((size_t)placement_cpus(s->setup.plan, w->index, &(const int *){NULL}) + 1, sizeof *cpus);
        share = calloc((size_t)s->n_cpu, sizeof *share);
        if (!shards || !shard_ptrs || !ranges || !range_ptrs || !cpus || !run_first || !run_count || !share) {
            fail(s, "%s: out of memory for its assignment", w->name);
            goto done;
        }
        cpu_assignment(s, w, &cpu, cpus);
        cpu.share_with = share;
        cpu.n_share_with = share_group(s, w, share);
        cpu_worker_options_to_proto(&cpu, &cpu_msg);
        a.options_case = GUILD__ASSIGN__OPTIONS_CPU;
        a.cpu = &cpu_msg;
        size_t ns = 0, nr = 0;
        for (int il = 0; il < n_layer; il++) {
            const int runs = placement_shard(s->setup.plan, w->index, il, run_first, run_count, (int)max_runs);
            if (!runs)
                continue;
            for (int i = 0; i < runs; i++) {
                guild__expert_range__init(&ranges[nr + (size_t)i]);
                ranges[nr + (size_t)i].first = run_first[i];
                ranges[nr + (size_t)i].count = run_count[i];
                range_ptrs[nr + (size_t)i] = &ranges[nr + (size_t)i];
            }
            guild__layer_shard__init(&shards[ns]);
            shards[ns].layer = (uint32_t)il;
            shards[ns].n_experts = (size_t)runs;
            shards[ns].experts = &range_ptrs[nr];
            shard_ptrs[ns] = &shards[ns];
            nr += (size_t)runs;
            ns++;
        }
        a.n_shard = ns;
        a.shard = shard_ptrs;
        /* its own; or those of the workers it splits exchanges with, its own among them */
        a.n_expert_stores = cpu.n_share_with ? cpu.n_share_with : s->stores && !w->remote ? 1 : 0;
    }
    if (a.n_expert_stores) {
        const int first = w->role == GUILD__ROLE__ROLE_CPU_WORKER && !cpu.n_share_with ? w->index : 0;
        if (!(store_refs = calloc(a.n_expert_stores, sizeof *store_refs)) ||
            !(store_ptrs = calloc(a.n_expert_stores, sizeof *store_ptrs))) {
            fail(s, "%s: out of memory for its assignment", w->name);
            goto done;
        }
        for (size_t i = 0; i < a.n_expert_stores; i++) {
            arena_ref(&store_refs[i], s->stores[w->role == GUILD__ROLE__ROLE_CPU_WORKER && cpu.n_share_with
                                                    ? (int)share[i] : first + (int)i]);
            store_ptrs[i] = &store_refs[i];
        }
        a.expert_stores = store_ptrs;
    }
    env.body_case = GUILD__ENVELOPE__BODY_ASSIGN;
    env.assign = &a;
    /* the bridge first: the worker may read its shard as soon as it has the Assign */
    if (s->bridge && w->role == GUILD__ROLE__ROLE_CPU_WORKER)
        bridge_set_worker(s->bridge, w->index, w->remote ? a.generation : 0, w->peer.user, false);
    send_to(s, w, &env);
    w->state = W_LOADING;
    w->since_ns = guild_now_ns();
    rc = 0;
done:
    free(store_refs);
    free(store_ptrs);
    free(shards);
    free(shard_ptrs);
    free(ranges);
    free(range_ptrs);
    free(cpus);
    free(share);
    free(run_first);
    free(run_count);
    free(gpu_layers);
    return rc;
}

/* Under mu: w, our child, died too often: it is started again by watch() after a back-off. The request in flight
 * cannot complete without it: the GPU worker is told to give it up, and later ones fail at once (sup_check). */
static void back_off(sup_t *s, wslot_t *w, int recent, int was_pid, const char *why)
{
    const uint64_t now = guild_now_ns();
    if (!w->backoff_ms || now - w->gave_up_ns > BACKOFF_RESET_NS)
        w->backoff_ms = s->opts.backoff_ms ? s->opts.backoff_ms : 1;
    else
        w->backoff_ms = w->backoff_ms > BACKOFF_MAX_MS / 2 ? BACKOFF_MAX_MS : 2 * w->backoff_ms;
    w->gave_up_ns = now;
    w->backoff_until_ns = now + (uint64_t)w->backoff_ms * 1000000u;
    w->down = true;
    snprintf(w->down_why, sizeof w->down_why, "%s died %d times within a minute (last: pid %d %s); backing off: "
             "started again after %.1f s", w->name, recent, was_pid, why, w->backoff_ms / 1000.0);
    guild_log(GUILD_LOG_ERROR, "%s; until it is ready, requests fail", w->down_why);
    guild_doorbell_ring(&s->step.sh->abort, guild_doorbell_load(&s->step.sh->request));
    pthread_cond_broadcast(&s->cond);
}

static void record_death(sup_t *s, wslot_t *w, const char *why)
{
    uint64_t now = guild_now_ns();
    w->deaths[w->n_deaths++ % MAX_DEATHS] = now;
    int recent = 0;
    for (int i = 0; i < MAX_DEATHS && i < w->n_deaths; i++)
        if (now - w->deaths[i] < RESTART_WINDOW_NS)
            recent++;
    int was_pid = (int)w->pid;
    if (s->bridge && w->role == GUILD__ROLE__ROLE_CPU_WORKER)
        bridge_set_worker(s->bridge, w->index, 0, "", false);
    w->remote = false;
    w->verifying = false;
    w->pid = 0;
    w->peer.len = 0;
    w->state = W_EMPTY;
    w->since_ns = now;
    w->stall_since_ns = 0;
    if (s->failed || atomic_load(&s->stop))
        return;
    if (recent > s->opts.max_restarts && w->by_hand) {
        fail(s, "%s died %d times within a minute; giving up (last: pid %d %s)", w->name, recent, was_pid, why);
        return;
    }
    if (recent > s->opts.max_restarts) {
        back_off(s, w, recent, was_pid, why);
        return;
    }
    if (w->by_hand && s->opts.fallback_local) {
        /* its shard to a worker of ours on this host, which resumes the exchange it left (from the arena) */
        guild_log(GUILD_LOG_WARN, "%s (pid %d%s%s) %s; its shard goes to a worker on this host (--fallback-local)",
                  w->name, was_pid, w->hostname[0] ? " on " : "", w->hostname, why);
        w->by_hand = false;
        w->restarts++;
        start_worker(s, w);
        pthread_cond_broadcast(&s->cond);
        return;
    }
    if (w->by_hand) {
        w->lost_pid = was_pid;
        snprintf(w->lost_why, sizeof w->lost_why, "%s", why);
        guild_log(GUILD_LOG_WARN, "%s (pid %d%s%s) %s; waiting up to %u ms for it to register again", w->name, was_pid,
                  w->hostname[0] ? " on " : "", w->hostname, why, s->opts.rejoin_ms);
        return;
    }
    w->restarts++;
    guild_log(GUILD_LOG_WARN, "%s (pid %d) %s; restarting it", w->name, was_pid, why);
    start_worker(s, w);
    pthread_cond_broadcast(&s->cond);
}

/* A worker that must go: killed (our child: reaped on a later tick, then restarted). */
static void hung(sup_t *s, wslot_t *w, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void hung(sup_t *s, wslot_t *w, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->why, sizeof w->why, fmt, ap);
    va_end(ap);
    guild_log(GUILD_LOG_WARN, "%s (pid %d): %s; killing it", w->name, (int)w->pid, w->why);
    if (w->pid > 0 && !w->remote) /* a remote worker's pid is another host's */
        kill(w->pid, SIGKILL);
    if (w->by_hand || w->remote || w->pid <= 0) {
        char why[300];
        snprintf(why, sizeof why, "%s", w->why);
        record_death(s, w, why);
    } else {
        w->state = W_KILLING;
        w->peer.len = 0;
    }
    pthread_cond_broadcast(&s->cond); /* a stats request waiting for its answer stops waiting (refresh_stats) */
}

static wslot_t *slot_by_peer(sup_t *s, const guild_msg_peer_t *p)
{
    for (int i = 0; i < s->n_w; i++)
        if (s->w[i].peer.len == p->len && p->len && !memcmp(s->w[i].peer.id, p->id, p->len))
            return &s->w[i];
    return NULL;
}

static void reply_error(sup_t *s, const guild_msg_peer_t *to, Guild__ErrorCode code, const char *msg)
{
    guild_err_t err = {{0}};
    if (guild_msg_send_error(s->router, to, code, 0, msg, &err) < 0)
        guild_log(GUILD_LOG_INFO, "control: %s", err.msg);
}

static void on_register(sup_t *s, const guild_msg_peer_t *from, const Guild__Register *r)
{
    char msg[1400];
    if (r->role != GUILD__ROLE__ROLE_CPU_WORKER && r->role != GUILD__ROLE__ROLE_GPU_WORKER &&
        (r->role != GUILD__ROLE__ROLE_STAGER || !s->ring)) {
        reply_error(s, from, GUILD__ERROR_CODE__ERROR_PROTOCOL,
                    s->ring ? "this coordinator takes CPU and GPU workers and its own stager only"
                            : "this coordinator takes CPU and GPU workers only (it runs no stager)");
        return;
    }
    const char *role = r->role == GUILD__ROLE__ROLE_GPU_WORKER ? "GPU worker"
                       : r->role == GUILD__ROLE__ROLE_STAGER   ? "stager"
                                                               : "CPU worker";
    bool other_host = r->hostname && r->hostname[0] && strcmp(r->hostname, s->host) != 0;
    bool remote = other_host || (r->capabilities && !r->capabilities->shared_memory);
    if (remote && (r->role != GUILD__ROLE__ROLE_CPU_WORKER || !s->bridge)) {
        if (r->role != GUILD__ROLE__ROLE_CPU_WORKER)
            snprintf(msg, sizeof msg, "a %s must share memory with the coordinator (on %s)", role, s->host);
        else
            snprintf(msg, sizeof msg, "%s on host %s cannot share memory with the coordinator on %s, and its "
                     "exchanges can only travel as messages to a coordinator started with --listen", role,
                     other_host ? r->hostname : s->host, s->host);
        guild_log(GUILD_LOG_WARN, "refused a %s (pid %d): %s", role, (int)r->pid, msg);
        reply_error(s, from, GUILD__ERROR_CODE__ERROR_RESOURCE, msg);
        return;
    }
    wslot_t *w = slot_by_peer(s, from);
    if (w && (w->state == W_LOADING || w->state == W_READY)) {
        guild_log(GUILD_LOG_INFO, "%s registered again; ignored", w->name);
        return;
    }
    w = NULL;
    for (int i = 0; i < s->n_w && !w; i++)
        if (s->w[i].role == r->role && !s->w[i].by_hand && s->w[i].state == W_SPAWNED && s->w[i].pid == r->pid)
            w = &s->w[i];
    for (int pass = 0; pass < 2 && !w && r->role == GUILD__ROLE__ROLE_CPU_WORKER; pass++)
        for (int i = 0; i < s->n_cpu && !w; i++)
            if (s->w[i].by_hand && s->w[i].state == W_EMPTY && (pass == 1 || s->w[i].node == r->node))
                w = &s->w[i];
    if (!w) {
        snprintf(msg, sizeof msg, "no place for a %s (pid %d, node %d): the plan's %d CPU workers and the GPU "
                 "worker are all present or spawned by the coordinator", role, (int)r->pid, (int)r->node, s->n_cpu);
        guild_log(GUILD_LOG_WARN, "%s", msg);
        reply_error(s, from, GUILD__ERROR_CODE__ERROR_PROTOCOL, msg);
        return;
    }
    if (r->protocol_version != GUILD_PROTOCOL_VERSION || (r->build && strcmp(r->build, PACKAGE_STRING)))
        guild_log(GUILD_LOG_WARN, "%s runs %s (protocol %u), the coordinator %s (protocol %u)", w->name,
                  r->build ? r->build : "?", r->protocol_version, PACKAGE_STRING, GUILD_PROTOCOL_VERSION);
    w->peer = *from;
    w->pid = r->pid;
    w->remote = remote;
    w->lost_pid = 0;
    snprintf(w->hostname, sizeof w->hostname, "%s", r->hostname ? r->hostname : "");
    w->last_heard_ns = guild_now_ns();
    guild_log(GUILD_LOG_INFO, "%s: registered, pid %d%s%s%s%s%s", w->name, (int)r->pid, remote ? " on " : "",
              remote ? (other_host ? r->hostname : s->host) : "", remote ? ", exchanges as messages" : "",
              from->user[0] ? ", CURVE key " : "", from->user);
    send_assign(s, w);
}

/* Under mu: a worker that reported Ready (and whose shard, when not read from our file, proved the same) serves. */
static void set_ready(sup_t *s, wslot_t *w)
{
    if (w->down)
        guild_log(GUILD_LOG_WARN, "%s is ready again after its back-off; serving", w->name);
    w->down = false;
    w->state = W_READY;
    w->verifying = false;
    w->since_ns = guild_now_ns();
    w->stall_since_ns = 0;
    if (s->bridge && w->role == GUILD__ROLE__ROLE_CPU_WORKER && w->remote)
        bridge_set_worker(s->bridge, w->index, w->generation, w->peer.user, true);
    guild_log(GUILD_LOG_INFO, "%s: ready (pid %d, loaded in %.1f ms, %.1f MiB, first seq %llu)", w->name,
              (int)w->pid, (double)w->load_ns / 1e6, (double)w->resident / 1048576.0,
              (unsigned long long)w->ready_first_seq);
    pthread_cond_broadcast(&s->cond);
}

/* Under mu: compares a verifying worker's digests with ours once they are computed (the watch loop asks again
 * until then). A shard that differs fails the pipeline, as a load error does: another try reads the same file. */
static void verify(sup_t *s, wslot_t *w)
{
    guild_err_t err = {{0}};
    int rc = s->verify ? shard_verify_check(s->verify, w->index, w->digests, w->n_digests, &err)
                       : guild_err_set(&err, "no shard verification without --listen");
    if (rc == 0)
        return;
    if (rc < 0) {
        char msg[2 * GUILD_ERR_MAX + 512];
        snprintf(msg, sizeof msg, "%s (pid %d on %s, model %s) does not hold the experts of the coordinator's %s: %s",
                 w->name, (int)w->pid, w->hostname[0] ? w->hostname : s->host,
                 w->source[0] ? w->source : s->setup.model_path, s->setup.model_path, err.msg);
        reply_error(s, &w->peer, GUILD__ERROR_CODE__ERROR_MODEL, msg); /* the worker's log says it too */
        fail(s, "%s", msg);
        w->verifying = false;
        return;
    }
    guild_log(GUILD_LOG_INFO, "%s: its shard (%zu tensors, model %s) is the coordinator's", w->name,
              w->n_digests ? w->n_digests - 1 : 0, w->source[0] ? w->source : s->setup.model_path);
    set_ready(s, w);
}

/* Under mu: a Ready whose shard must be proved: its digests kept, then compared (verify). */
static void take_digests(sup_t *s, wslot_t *w, const Guild__Ready *r)
{
    free(w->digests);
    w->digests = NULL;
    w->n_digests = 0;
    snprintf(w->source, sizeof w->source, "%s", r->model_source && r->model_source[0] ? r->model_source : "");
    if (r->n_digests == 0) {
        fail(s, "%s (pid %d on %s) reports no digests of its shard, which a worker %s must (a build of another "
             "version?)", w->name, (int)w->pid, w->hostname[0] ? w->hostname : s->host,
             w->remote ? "without the shared memory" : "with its own model file");
        return;
    }
    if (!(w->digests = calloc(r->n_digests, sizeof *w->digests))) {
        fail(s, "%s: out of memory for its digests", w->name);
        return;
    }
    for (size_t i = 0; i < r->n_digests; i++) {
        const Guild__TensorDigest *t = r->digests[i];
        expert_digest_t *d = &w->digests[i];
        snprintf(d->tensor, sizeof d->tensor, "%s", t->tensor ? t->tensor : "");
        d->type = t->type;
        for (size_t k = 0; k < 4 && k < t->n_ne; k++)
            d->ne[k] = t->ne[k];
        d->first = t->first;
        d->last = t->last;
        d->hash = t->hash;
    }
    w->n_digests = r->n_digests;
    w->verifying = true;
    verify(s, w);
}

static void on_message(sup_t *s, const guild_msg_peer_t *from, Guild__Envelope *env)
{
    wslot_t *w = slot_by_peer(s, from);
    if (w)
        w->last_heard_ns = guild_now_ns();
    switch (env->body_case) {
    case GUILD__ENVELOPE__BODY_REGISTER_WORKER:
        on_register(s, from, env->register_worker);
        return;
    case GUILD__ENVELOPE__BODY_READY: {
        const Guild__Ready *r = env->ready;
        if (!w || w->state != W_LOADING || r->generation != w->generation || w->verifying)
            return; /* stale: from before a re-assignment */
        w->load_ns = r->load_ns;
        w->resident = r->resident_bytes;
        w->ready_first_seq = r->first_seq;
        if (w->role == GUILD__ROLE__ROLE_CPU_WORKER && (w->remote || (r->model_source && r->model_source[0])))
            take_digests(s, w, r);
        else
            set_ready(s, w);
        return;
    }
    case GUILD__ENVELOPE__BODY_HEARTBEAT: {
        if (!w)
            return;
        const Guild__Heartbeat *h = env->heartbeat;
        if (h->sent_ns)
            w->rtt_ns = guild_now_ns() - h->sent_ns;
        if (h->stats && !w->stats_pending)
            sup_take_stats(w, h->stats);
        return;
    }
    case GUILD__ENVELOPE__BODY_STATS:
        if (w) {
            sup_take_stats(w, env->stats);
            w->stats_pending = false;
            pthread_cond_broadcast(&s->cond);
        }
        return;
    case GUILD__ENVELOPE__BODY_ERROR: {
        const Guild__Error *e = env->error;
        const char *m = e->message ? e->message : "";
        if (!w) {
            guild_log(GUILD_LOG_WARN, "control: error from an unknown peer: %s", m);
            return;
        }
        guild_log(GUILD_LOG_WARN, "%s reports: %s", w->name, m);
        if (w->state == W_LOADING && e->generation == w->generation)
            fail(s, "%s: %s", w->name, m); /* its part cannot load: another try would fail the same way */
        else if (w->state == W_READY)
            hung(s, w, "it reported: %s", m);
        return;
    }
    default:
        guild_log(GUILD_LOG_INFO, "control: %s from %s ignored", guild_msg_body_name(env), w ? w->name : "a stranger");
        return;
    }
}

static void drain(sup_t *s)
{
    for (int i = 0; i < 256; i++) {
        guild_msg_peer_t from;
        Guild__Envelope *env = NULL;
        guild_err_t err = {{0}};
        guild_msg_result_t r = guild_msg_recv(s->router, 0, &from, &env, &err);
        if (r == GUILD_MSG_TIMEOUT)
            return;
        if (r == GUILD_MSG_ERROR) {
            fail(s, "control socket: %s", err.msg);
            return;
        }
        if (r == GUILD_MSG_BAD) {
            wslot_t *w = from.len ? slot_by_peer(s, &from) : NULL;
            guild_log(GUILD_LOG_WARN, "control: bad message from %s: %s", w ? w->name : "a peer", err.msg);
            if (from.len) {
                char msg[GUILD_ERR_MAX + 32];
                snprintf(msg, sizeof msg, "bad message: %s", err.msg);
                reply_error(s, &from, GUILD__ERROR_CODE__ERROR_PROTOCOL, msg);
            }
            continue;
        }
        on_message(s, &from, env);
        guild_msg_free(&env);
    }
}

static void reap(sup_t *s)
{
    for (int i = 0; i < s->n_w; i++) {
        wslot_t *w = &s->w[i];
        if (w->by_hand || w->pid <= 0)
            continue;
        int st;
        pid_t p = waitpid(w->pid, &st, WNOHANG);
        if (p != w->pid)
            continue;
        char why[320];
        spawn_describe_status(st, why, sizeof why);
        if (w->state == W_KILLING) {
            size_t n = strlen(why);
            snprintf(why + n, sizeof why - n, " (it %s)", w->why);
        }
        record_death(s, w, why);
    }
}

static void watch(sup_t *s, uint64_t now)
{
    const stack_options_t *c = &s->opts;
    uint64_t stall = (uint64_t)c->stall_ms * 1000000u;
    uint64_t start = (uint64_t)c->start_ms * 1000000u;
    bool send_hb = now - s->last_hb_ns >= (uint64_t)c->heartbeat_ms * 1000000u;
    if (send_hb) {
        s->last_hb_ns = now;
        s->hb_seq++;
    }
    uint64_t xstep = guild_exchange_step(s->x);
    bool cpu_pending = false;
    for (int i = 0; i < s->n_cpu; i++)
        if (guild_exchange_done(s->x, i) < xstep)
            cpu_pending = true;
    for (int i = 0; i < s->n_w && s->stats_wanted; i++) {
        wslot_t *w = &s->w[i];
        if (!w->stats_pending)
            continue;
        Guild__Envelope env = GUILD__ENVELOPE__INIT;
        Guild__StatsRequest sr = GUILD__STATS_REQUEST__INIT;
        env.body_case = GUILD__ENVELOPE__BODY_STATS_REQUEST;
        env.stats_request = &sr;
        send_to(s, w, &env);
    }
    s->stats_wanted = false;
    for (int i = 0; i < s->n_w && !s->failed; i++) {
        wslot_t *w = &s->w[i];
        if (w->state == W_EMPTY && w->backoff_until_ns && now >= w->backoff_until_ns && !atomic_load(&s->stop)) {
            w->backoff_until_ns = 0;
            w->restarts++;
            guild_log(GUILD_LOG_WARN, "%s: its back-off of %.1f s is over; starting it again", w->name,
                      w->backoff_ms / 1000.0);
            start_worker(s, w);
            continue;
        }
        if (w->state == W_LOADING || w->state == W_READY) {
            if (send_hb) {
                Guild__Envelope env = GUILD__ENVELOPE__INIT;
                Guild__Heartbeat hb = GUILD__HEARTBEAT__INIT;
                hb.seq = s->hb_seq;
                hb.sent_ns = now;
                env.body_case = GUILD__ENVELOPE__BODY_HEARTBEAT;
                env.heartbeat = &hb;
                send_to(s, w, &env);
            }
            /* a remote worker receiving its shard shares its link with that transfer: its heartbeats may wait
             * behind the data, so it is given longer while it loads */
            const uint32_t silent_ms = w->remote && w->state == W_LOADING ? LOADING_SILENCE * c->hang_ms : c->hang_ms;
            if (now - w->last_heard_ns > (uint64_t)silent_ms * 1000000u) {
                hung(s, w, "has been silent for %u ms", silent_ms);
                continue;
            }
        }
        if (w->verifying && w->state == W_LOADING)
            verify(s, w);
        if (s->failed)
            break;
        if ((w->state == W_SPAWNED || w->state == W_LOADING) && now - w->since_ns > start) {
            hung(s, w, "was not ready %u ms after it started", c->start_ms);
            continue;
        }
        if (w->state == W_EMPTY && w->by_hand && w->lost_pid &&
            now - w->since_ns > (uint64_t)c->rejoin_ms * 1000000u) {
            fail(s, "%s (pid %d%s%s) was lost (%s) and has not registered again within %u ms: its exchanges cannot "
                 "complete (start it again, or give --fallback-local for a worker on this host to take its shard)",
                 w->name, w->lost_pid, w->hostname[0] ? " on " : "", w->hostname, w->lost_why, c->rejoin_ms);
            continue;
        }
        if (w->state == W_EMPTY && w->by_hand && !w->lost_pid && now - w->since_ns > start) {
            fail(s, "%s (node %d) has not registered within %u ms (start `guild-cpu-worker --node %d --connect "
                 "ENDPOINT` on this host)", w->name, w->node, c->start_ms, w->node);
            continue;
        }
        if (w->state != W_READY)
            continue;
        /* doorbell timeout: pending work that does not move */
        bool pending;
        uint64_t mark;
        if (w->role == GUILD__ROLE__ROLE_STAGER) {
            /* its fills are the GPU worker's waits: a dead or hung stager makes that wait fail (stage_ring.h) */
            mark = 0;
            pending = false;
        } else if (w->role == GUILD__ROLE__ROLE_CPU_WORKER) {
            mark = guild_exchange_done(s->x, w->index);
            pending = mark < xstep;
        } else {
            pending = guild_doorbell_load(&s->step.sh->request) > guild_doorbell_load(&s->step.sh->response) &&
                      !cpu_pending;
            /* exchanges, and layers finished within a pass (a long prefill chunk without exchanges: resident or
             * streamed experts) */
            mark = xstep + __atomic_load_n(&s->step.sh->progress, __ATOMIC_RELAXED);
        }
        if (!pending) {
            w->stall_since_ns = 0;
        } else if (!w->stall_since_ns || mark != w->stall_mark) {
            w->stall_mark = mark;
            w->stall_since_ns = now;
        } else if (now - w->stall_since_ns > stall) {
            hung(s, w, "made no progress on pending work for %u ms", c->stall_ms);
        }
    }
}

static void shutdown_all(sup_t *s)
{
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n_w; i++) {
        wslot_t *w = &s->w[i];
        if (!w->peer.len) {
            /* a child not registered yet (just restarted) cannot hear a Shutdown: workers stop on SIGTERM */
            if (!w->by_hand && w->pid > 0 && w->state == W_SPAWNED)
                kill(w->pid, SIGTERM);
            continue;
        }
        Guild__Envelope env = GUILD__ENVELOPE__INIT;
        Guild__Shutdown sd = GUILD__SHUTDOWN__INIT;
        sd.reason = "the coordinator is done";
        env.body_case = GUILD__ENVELOPE__BODY_SHUTDOWN;
        env.shutdown = &sd;
        send_to(s, w, &env);
    }
    pthread_mutex_unlock(&s->mu);
    uint64_t t0 = guild_now_ns();
    for (;;) {
        int left = 0;
        for (int i = 0; i < s->n_w; i++) {
            wslot_t *w = &s->w[i];
            if (w->by_hand || w->pid <= 0)
                continue;
            int st;
            if (waitpid(w->pid, &st, WNOHANG) == w->pid) {
                if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                    char why[128];
                    spawn_describe_status(st, why, sizeof why);
                    guild_log(GUILD_LOG_WARN, "%s (pid %d) %s at shutdown", w->name, (int)w->pid, why);
                }
                w->pid = 0;
            } else if (guild_now_ns() - t0 > SHUTDOWN_GRACE_NS &&
                       (guild_now_ns() - t0 > SHUTDOWN_BUSY_MAX_NS ||
                        !proc_watch_busy(&w->exit_watch, w->pid, guild_now_ns(), SHUTDOWN_LOOK_NS))) {
                guild_log(GUILD_LOG_WARN, "%s (pid %d) did not exit within %.1f s; killing it", w->name, (int)w->pid,
                          (double)(guild_now_ns() - t0) / 1e9);
                kill(w->pid, SIGKILL);
                while (waitpid(w->pid, &st, 0) < 0 && errno == EINTR)
                    ;
                w->pid = 0;
            } else
                left++;
        }
        if (!left)
            break;
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
}

static void *sup_main(void *arg)
{
    sup_t *s = arg;
    pthread_mutex_lock(&s->mu);
    uint64_t now = guild_now_ns();
    /* the stager first: the GPU worker's first streamed copies wait for it */
    for (int k = 0; k < s->n_w && !s->failed; k++) {
        wslot_t *w = s->ring ? &s->w[(k + s->n_w - 1) % s->n_w] : &s->w[k];
        w->since_ns = now;
        if (!w->by_hand)
            start_worker(s, w);
    }
    pthread_mutex_unlock(&s->mu);
    while (!atomic_load(&s->stop)) {
        zmq_pollitem_t item = {s->router, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&item, 1, TICK_MS) < 0 && zmq_errno() != EINTR) {
            pthread_mutex_lock(&s->mu);
            fail(s, "control socket: %s", zmq_strerror(zmq_errno()));
            pthread_mutex_unlock(&s->mu);
            struct timespec ts = {0, TICK_MS * 1000000L};
            nanosleep(&ts, NULL);
        }
        pthread_mutex_lock(&s->mu);
        drain(s);
        reap(s);
        watch(s, guild_now_ns());
        pthread_mutex_unlock(&s->mu);
    }
    shutdown_all(s);
    return NULL;
}

int sup_new(sup_t **out, const stack_options_t *o, const sup_setup_t *setup, const model_config_t *mc,
            guild_err_t *err)
{
    *out = NULL;
    sup_t *s = calloc(1, sizeof *s);
    if (!s)
        return guild_err_set(err, "supervisor: out of memory");
    s->opts = *o;
    s->setup = *setup;
    s->mc = *mc;
    /* A batched decode step wants a logits row from every sequence: with fewer rows a request, the remote backend
     * cuts it into several requests, each a forward pass reading the step's routed experts again. */
    s->max_out = o->gpu.max_out > o->n_seq ? o->gpu.max_out : o->n_seq;
    if (s->max_out > o->n_batch)
        s->max_out = o->n_batch;
    /* a guild-stager of ours serves the GPU worker's streamed experts: a plan that streams, and --stager process */
    const bool stager = setup->stage_slot_bytes && o->gpu.cuda.stager == CUDA_STAGER_PROCESS;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cond, NULL);
    gethostname(s->host, sizeof s->host - 1);
    s->n_cpu = placement_workers(setup->plan);
    s->n_w = s->n_cpu + 1 + stager;
    if (!(s->w = calloc((size_t)s->n_w, sizeof *s->w))) {
        guild_err_set(err, "supervisor: out of memory");
        goto fail;
    }
    for (int i = 0; i < s->n_w; i++) {
        wslot_t *w = &s->w[i];
        if (i < s->n_cpu) {
            w->role = GUILD__ROLE__ROLE_CPU_WORKER;
            w->index = i;
            w->node = placement_mem_node(setup->plan, i);
            w->by_hand = o->listen != NULL;
            snprintf(w->name, sizeof w->name, "cpu-worker[%d]", i);
        } else {
            w->role = i == s->n_cpu ? GUILD__ROLE__ROLE_GPU_WORKER : GUILD__ROLE__ROLE_STAGER;
            w->index = -1;
            w->node = -1;
            snprintf(w->name, sizeof w->name, "%s", i == s->n_cpu ? "gpu-worker" : "stager");
        }
    }
    for (int i = 0; i < 3; i++) {
        const char *bin = worker_bin(i == 0 ? GUILD__ROLE__ROLE_CPU_WORKER
                                     : i == 1 ? GUILD__ROLE__ROLE_GPU_WORKER : GUILD__ROLE__ROLE_STAGER);
        char path[PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/%s", setup->worker_dir, bin);
        if ((i == 1 || (i == 0 && (!o->listen || o->fallback_local)) || (i == 2 && stager)) && access(path, X_OK) != 0) {
            guild_err_errno(err, errno, "%s (the multi-process mode needs it; --single-process does not)", path);
            goto fail;
        }
    }

    /* the arena: the exchange (one slot per in-flight layer, two for a later overlap) and the step region */
    guild_exchange_shape_t xs = {
        .max_tokens = (uint32_t)o->n_batch,
        .n_embd = (uint32_t)mc->n_embd,
        .n_used = (uint32_t)mc->n_expert_used,
        .n_slots = 2,
        .n_workers = (uint32_t)s->n_cpu,
        .n_prefetch = (uint32_t)(o->prefetch_experts < mc->n_expert_used ? o->prefetch_experts : mc->n_expert_used),
    };
    guild_step_shape_t ss = {(uint32_t)o->n_batch, (uint32_t)s->max_out, (uint32_t)mc->n_vocab};
    size_t xsize = guild_exchange_memsize(&xs), ssize = guild_step_memsize(&ss);
    if (!xsize || !ssize) {
        guild_err_set(err, "pipeline: invalid arena shape (batch %d, max_out %d, %d CPU workers)", o->n_batch,
                      s->max_out, s->n_cpu);
        goto fail;
    }
    guild_arena_request_t req[2] = {{GUILD_ARENA_KIND_EXCHANGE, 0, xsize}, {GUILD_ARENA_KIND_STEP, 0, ssize}};
    guild_arena_opts_t ao = {.dir = o->arena_dir, .huge_only = o->huge_pages_required};
    if (!(s->arena = guild_arena_create(req, 2, &ao, err)))
        goto fail;
    size_t rsize;
    void *xr = guild_arena_region(s->arena, GUILD_ARENA_KIND_EXCHANGE, 0, &rsize);
    if (guild_exchange_init(xr, rsize, &xs, err) < 0 || !(s->x = guild_exchange_attach(xr, rsize, err)))
        goto fail;
    void *sr = guild_arena_region(s->arena, GUILD_ARENA_KIND_STEP, 0, &rsize);
    if (guild_step_init(sr, rsize, &ss, err) < 0 || guild_step_attach(&s->step, sr, rsize, err) < 0)
        goto fail;
    guild_arena_publish(s->arena);
    if (setup->expert_store_bytes && stores_create(s, setup->expert_store_bytes, err) < 0)
        goto fail;
    /* three slots: two in flight to the device, one being filled */
    if (stager) {
        if (stage_ring_create(&s->ring, 3, (size_t)setup->stage_slot_bytes, &ao, err) < 0)
            goto fail;
        s->stager.model = setup->model_path;
        s->stager.n_rings = 1;
        if ((size_t)snprintf(s->stager.rings[0], sizeof s->stager.rings[0], "%s", stage_ring_name(s->ring)) >=
            sizeof s->stager.rings[0]) {
            guild_err_set(err, "staging ring %s: name too long for guild-stager", stage_ring_name(s->ring));
            goto fail;
        }
        s->stager.threads = stager_threads(o);
        if (stager_options_check(&s->stager, err) < 0)
            goto fail;
    }

    if (rundir_new(s->rundir, sizeof s->rundir, err) < 0)
        goto fail;
    snprintf(s->endpoint, sizeof s->endpoint, "ipc://%s/control", s->rundir);
    if (!(s->zctx = zmq_ctx_new())) {
        guild_err_set(err, "zmq_ctx_new: %s", zmq_strerror(zmq_errno()));
        goto fail;
    }
    if (!(s->router = guild_msg_router_new(s->zctx, s->endpoint, err)))
        goto fail;
    if (o->listen) {
        /* a tcp endpoint: its keys, and the judge of its clients before anyone can connect */
        if (guild_curve_load(&s->curve, &o->curve, o->listen, true, err) < 0 ||
            (s->curve && !s->curve->insecure && guild_zap_new(&s->zap, s->zctx, s->curve, err) < 0))
            goto fail;
        if (guild_msg_bind(s->router, o->listen, s->curve, err) < 0)
            goto fail;
        s->router_bound = true;
        /* the data socket beside it: tcp port + 1, or PATH.data */
        char bind[PATH_MAX + 32];
        const char *colon = strrchr(o->listen, ':');
        if (!strncmp(o->listen, "tcp://", 6) && colon && colon > o->listen + 6) {
            char *end;
            long port = strtol(colon + 1, &end, 10);
            if (*end || port < 1 || port > 65534) {
                guild_err_set(err, "--listen %s: expected tcp://HOST:PORT", o->listen);
                goto fail;
            }
            snprintf(bind, sizeof bind, "%.*s:%ld", (int)(colon - o->listen), o->listen, port + 1);
            snprintf(s->data_public, sizeof s->data_public, "tcp://*:%ld", port + 1);
        } else if (!strncmp(o->listen, "ipc://", 6)) {
            snprintf(bind, sizeof bind, "%s.data", o->listen);
            snprintf(s->data_public, sizeof s->data_public, "%s", bind);
        } else {
            bind[0] = '\0';
        }
        if (bind[0] && bridge_new(&s->bridge, s->zctx, bind, setup->model_path, s->curve, s->x, setup->plan, err) < 0)
            goto fail;
        if (shard_verify_new(&s->verify, setup->model_path, setup->plan, err) < 0)
            goto fail;
        s->bridge_bound = bind[0] != '\0';
    }
    int e = pthread_create(&s->thread, NULL, sup_main, s);
    if (e) {
        guild_err_errno(err, e, "supervisor: cannot start its thread");
        goto fail;
    }
    s->started = true;
    guild_log(GUILD_LOG_INFO, "pipeline: arena %s (%zu MiB, %s pages), control %s%s%s", guild_arena_name(s->arena),
              guild_arena_size(s->arena) >> 20, guild_arena_pages_name(guild_arena_pages(s->arena)), s->endpoint,
              o->listen ? " and " : "", o->listen ? o->listen : "");
    *out = s;
    return 0;
fail:
    sup_destroy(&s);
    return -1;
}

void sup_destroy(sup_t **ps)
{
    sup_t *s = *ps;
    if (!s)
        return;
    if (s->started) {
        atomic_store(&s->stop, 1);
        pthread_join(s->thread, NULL);
    }
    bridge_destroy(&s->bridge);
    shard_verify_destroy(&s->verify);
    guild_msg_close(&s->router);
    guild_zap_destroy(&s->zap); /* after the sockets it judged */
    if (s->zctx)
        zmq_ctx_term(s->zctx);
    guild_curve_destroy(&s->curve);
    /* ZeroMQ leaves the socket files of ipc endpoints it bound; these were ours */
    if (s->opts.listen && !strncmp(s->opts.listen, "ipc://", 6) && s->opts.listen[6] != '@' && s->router_bound) {
        char data[PATH_MAX + 32];
        unlink(s->opts.listen + 6);
        snprintf(data, sizeof data, "%s.data", s->opts.listen + 6);
        if (s->bridge_bound)
            unlink(data);
    }
    if (s->rundir[0])
        rundir_remove(s->rundir);
    guild_exchange_destroy(&s->x);
    guild_arena_destroy(&s->arena);
    stage_ring_destroy(&s->ring); /* after the workers: the stager and the GPU worker have let it go */
    for (int i = 0; s->w && i < s->n_w; i++)
        free(s->w[i].routing);
    for (int i = 0; s->w && i < s->n_w; i++)
        free(s->w[i].digests);
    for (int i = 0; s->stores && i < s->n_cpu; i++)
        guild_arena_destroy(&s->stores[i]);
    free(s->stores);
    free(s->w);
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->mu);
    free(s);
    *ps = NULL;
}

static bool all_ready(const sup_t *s)
{
    for (int i = 0; i < s->n_w; i++)
        if (s->w[i].state != W_READY)
            return false;
    return true;
}

int sup_wait_ready(sup_t *s, uint32_t timeout_ms, uint64_t *epoch, guild_err_t *err)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += timeout_ms / 1000;
    dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    int rc = 0;
    /* on a terminal, which workers are still loading (a large model takes a while) */
    guild_progress_t *pg = guild_progress_begin("waiting for the workers", 0, GUILD_PROGRESS_COUNT);
    pthread_mutex_lock(&s->mu);
    while (!s->failed && !down_slot(s) && !all_ready(s)) {
        struct timespec tick = dl;
        if (pg) {
            clock_gettime(CLOCK_REALTIME, &tick);
            tick.tv_nsec += 250000000L;
            if (tick.tv_nsec >= 1000000000L) {
                tick.tv_sec++;
                tick.tv_nsec -= 1000000000L;
            }
            if (tick.tv_sec > dl.tv_sec || (tick.tv_sec == dl.tv_sec && tick.tv_nsec > dl.tv_nsec))
                tick = dl;
        }
        if (pthread_cond_timedwait(&s->cond, &s->mu, &tick) == ETIMEDOUT &&
            tick.tv_sec == dl.tv_sec && tick.tv_nsec == dl.tv_nsec)
            break;
        if (pg) {
            char note[256];
            int ready = 0;
            size_t k = 0;
            for (int i = 0; i < s->n_w; i++)
                ready += s->w[i].state == W_READY;
            k += (size_t)snprintf(note, sizeof note, "%d of %d ready", ready, s->n_w);
            for (int i = 0; i < s->n_w && k < sizeof note - 48; i++)
                if (s->w[i].state != W_READY)
                    k += (size_t)snprintf(note + k, sizeof note - k, ", %s %s", s->w[i].name,
                                          state_name[s->w[i].state]);
            guild_progress_note(pg, note);
        }
    }
    guild_progress_end(&pg);
    if (s->failed) {
        rc = guild_err_set(err, "%s", s->fail_msg);
    } else if (down_slot(s)) {
        rc = guild_err_set(err, "the pipeline is degraded: %s", down_slot(s)->down_why);
    } else if (!all_ready(s)) {
        char what[512] = "";
        size_t n = 0;
        for (int i = 0; i < s->n_w && n < sizeof what - 64; i++)
            if (s->w[i].state != W_READY)
                n += (size_t)snprintf(what + n, sizeof what - n, "%s%s %s", n ? ", " : "", s->w[i].name,
                                      state_name[s->w[i].state]);
        rc = guild_err_set(err, "workers not ready after %u ms: %s", timeout_ms, what);
    } else {
        *epoch = gpu_slot(s)->generation;
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* Under mu: the first worker given up on and not ready since, or NULL. */
static const wslot_t *down_slot(const sup_t *s)
{
    for (int i = 0; i < s->n_w; i++)
        if (s->w[i].down)
            return &s->w[i];
    return NULL;
}

/* Under mu: a worker started by hand that was lost and has not registered again, or NULL. */
static const wslot_t *lost_slot(const sup_t *s)
{
    for (int i = 0; i < s->n_w; i++)
        if (s->w[i].by_hand && s->w[i].lost_pid && s->w[i].state == W_EMPTY)
            return &s->w[i];
    return NULL;
}

int sup_check(sup_t *s, uint64_t epoch, guild_err_t *err)
{
    int rc;
    pthread_mutex_lock(&s->mu);
    const wslot_t *g = gpu_slot(s), *d = down_slot(s);
    if (s->failed)
        rc = guild_err_set(err, "%s", s->fail_msg);
    else if (d)
        rc = guild_err_set(err, "the pipeline is degraded: %s", d->down_why);
    else
        rc = g->state == W_READY && g->generation == epoch ? 0 : 1;
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int sup_health(sup_t *s, char *why, size_t n)
{
    int rc = 0;
    pthread_mutex_lock(&s->mu);
    const wslot_t *d = down_slot(s);
    if (s->failed) {
        snprintf(why, n, "%s", s->fail_msg);
        rc = -1;
    } else if (d) {
        snprintf(why, n, "%s%s", d->down_why, d->backoff_until_ns ? "" : "; it is loading");
        rc = 1;
    } else if ((d = lost_slot(s))) {
        /* its exchanges wait for it to register again (rejoin_ms), or fail the pipeline after */
        snprintf(why, n, "%s (pid %d%s%s) was lost (%s); waiting up to %u ms for it to register again", d->name,
                 d->lost_pid, d->hostname[0] ? " on " : "", d->hostname, d->lost_why, s->opts.rejoin_ms);
        rc = 1;
    } else {
        snprintf(why, n, "%s", "");
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

guild_step_t *sup_step(sup_t *s)
{
    return &s->step;
}

const char *sup_stage_ring(const sup_t *s)
{
    return s->ring ? stage_ring_name(s->ring) : NULL;
}
