#include "config.h"

#include "coordinator/pipeline.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/remote_backend.h"
#include "coordinator/spawn.h"
#include "coordinator/supervisor.h"
#include "coordinator/placement.h"
#include "coordinator/stack_flags.h"
#include "coordinator/stack_plan.h"
#include "core/util/log.h"
#include "gpu-worker/dense/gpu_plan.h"
#include "cpu-expert-worker/experts/expert_shard.h"

struct pipeline {
    placement_t *plan;
    sup_t *sup;
    char model_path[PATH_MAX];
    char worker_dir[PATH_MAX];
};

/* The CPUs the plan leaves free for the GPU worker and the coordinator (placement_keep_free_for). */
static int keep_free(const stack_options_t *o)
{
    return placement_keep_free_for(o->gpu.backend, o->listen != NULL);
}

/* Whether some node of the plan has more than one CPU worker (they split each exchange: expert_share.h). */
static bool node_shared(const placement_t *plan)
{
    for (int k = 1; k < placement_workers(plan); k++)
        for (int j = 0; j < k; j++)
            if (placement_node(plan, j) == placement_node(plan, k))
                return true;
    return false;
}

/* More CPU workers on a node than its CPUs: said once, with the count that gives each its own CPU. */
static void warn_shared(const placement_t *plan)
{
    const int K = placement_workers(plan);
    int n_nodes = 0, fit = -1;
    for (int k = 0; k < K; k++)
        if (placement_node(plan, k) + 1 > n_nodes)
            n_nodes = placement_node(plan, k) + 1;
    for (int n = 0; n < n_nodes; n++) {
        const int nc = placement_node_cpus(plan, n);
        if (nc > 0 && (fit < 0 || nc < fit))
            fit = nc;
    }
    for (int k = 0; k < K; k++) {
        if (!placement_shared(plan, k))
            continue;
        const int node = placement_node(plan, k);
        int on_node = 0;
        for (int j = 0; j < K; j++)
            on_node += placement_node(plan, j) == node;
        const int nc = placement_node_cpus(plan, node);
        guild_log(GUILD_LOG_WARN, "--cpu-workers %d: node %d has %d CPU%s for %d workers, so workers share CPUs and "
                  "take turns on them (slower than fewer workers); give --cpu-workers %d or fewer", K, node, nc,
                  nc == 1 ? "" : "s", on_node, fit * n_nodes);
        return;
    }
}

int pipeline_print_plan(const model_t *m, const stack_options_t *o, FILE *out, guild_err_t *err)
{
    stack_plan_t sp;
    placement_t *plan = NULL;
    if (stack_plan_make(&sp, o, m, err) < 0)
        return -1;
    const int rc =
        placement_new_local(&plan, model_config(m), o->cpu_workers, stack_plan_gpu_experts(&sp), o->cpu_nodes,
                            keep_free(o), err);
    if (rc == 0) {
        warn_shared(plan);
        char backend[STACK_BACKEND_TEXT];
        fprintf(out, "backend: %s\n", stack_options_backend_text(o, backend, sizeof backend));
        if (o->gpu_mem_why[0])
            fprintf(out, "--gpu-mem %s\n", o->gpu_mem_why);
        placement_print(plan, m, o->n_threads, o->given & STACK_FLAG_THREADS, out);
        if (sp.on)
            gpu_plan_print(&sp.gpu, out);
    }
    placement_destroy(&plan);
    stack_plan_fini(&sp);
    return rc;
}

int pipeline_worker_threads(const model_t *m, const stack_options_t *o, const struct stack_plan *sp, int *cpus,
                            int *nodes, int max, guild_err_t *err)
{
    placement_t *plan = NULL;
    if (placement_new_local(&plan, model_config(m), o->cpu_workers, stack_plan_gpu_experts(sp), o->cpu_nodes,
                            keep_free(o), err) < 0)
        return -1;
    int n = 0;
    for (int k = 0; k < placement_workers(plan); k++) {
        const int *pc;
        const int npc = placement_cpus(plan, k, &pc);
        /* the supervisor's count (its Assign), pinned as the worker's pool pins them: thread i on pc[i % npc] */
        const int nt = placement_threads(plan, k, o->n_threads, o->given & STACK_FLAG_THREADS);
        for (int i = 0; i < nt; i++) {
            if (n == max) {
                placement_destroy(&plan);
                return guild_err_set(err, "the CPU workers run more than %d threads", max);
            }
            cpus[n] = npc > 0 ? pc[i % npc] : -1;
            nodes[n++] = placement_mem_node(plan, k);
        }
    }
    placement_destroy(&plan);
    return n;
}

/* The bytes of each CPU worker's expert copies (cpu-expert-worker/experts/expert_shard.h) for its expert store
 * (ipc/expert_store.h); *out: [workers], free it. */
static int store_sizes(const placement_t *plan, const model_t *m, uint64_t **out, guild_err_t *err)
{
    const model_config_t *c = model_config(m);
    const int nw = placement_workers(plan);
    uint64_t *b = calloc((size_t)nw + 1, sizeof *b);
    uint8_t *owned = calloc((size_t)c->n_layer * (size_t)c->n_expert + 1, 1);
    if (!b || !owned) {
        free(b);
        free(owned);
        return guild_err_set(err, "pipeline: out of memory");
    }
    for (int w = 0; w < nw; w++) {
        memset(owned, 0, (size_t)c->n_layer * (size_t)c->n_expert);
        for (int32_t il = 0; il < c->n_layer; il++)
            for (int32_t e = 0; e < c->n_expert; e++)
                owned[(size_t)il * (size_t)c->n_expert + (size_t)e] = placement_owner(plan, il, e) == w;
        b[w] = expert_shard_copy_bytes(m, owned);
    }
    free(owned);
    *out = b;
    return 0;
}

int pipeline_new(pipeline_t **out, const stack_options_t *o, const stack_plan_t *sp, const model_t *m,
                 const char *model_path, backend_t **be, guild_err_t *err)
{
    *out = NULL;
    *be = NULL;
    const model_config_t *mc = model_config(m);
    uint64_t *store_bytes = NULL;
    pipeline_t *p = calloc(1, sizeof *p);
    if (!p)
        return guild_err_set(err, "pipeline: out of memory");
    if (!realpath(model_path, p->model_path)) {
        guild_err_errno(err, errno, "%s", model_path);
        goto fail;
    }
    /* every stage sized for the plan's chunk */
    stack_options_t so = *o;
    so.n_batch = sp->n_batch;
    if (spawn_self_dir(p->worker_dir, sizeof p->worker_dir, err) < 0 ||
        placement_new_local(&p->plan, mc, o->cpu_workers, stack_plan_gpu_experts(sp), o->cpu_nodes, keep_free(o),
                            err) < 0)
        goto fail;
    /* --threads above a worker's share of its node: cut, said once (the plan line names it too) */
    const bool threads_given = o->given & STACK_FLAG_THREADS;
    for (int k = 0; threads_given && k < placement_workers(p->plan); k++) {
        const int nt = placement_threads(p->plan, k, o->n_threads, true);
        if (nt < o->n_threads) {
            const int kept = placement_kept(p->plan, &(const int *){NULL});
            guild_log(GUILD_LOG_WARN, "--threads %d: cpu-worker %d has %d CPUs of node %d (%d workers%s): it runs %d "
                      "threads, as more would spin against each other on shared cores (--threads is per process; "
                      "give --threads %d or fewer to silence this)", o->n_threads, k,
                      placement_cpus(p->plan, k, &(const int *){NULL}), placement_node(p->plan, k),
                      placement_workers(p->plan), kept ? "; node 0's last CPUs are left to the GPU worker" : "", nt,
                      nt);
            break;
        }
    }
    warn_shared(p->plan);
    if (guild_log_level() >= GUILD_LOG_INFO) {
        placement_print(p->plan, m, o->n_threads, threads_given, stderr);
        if (sp->on)
            gpu_plan_print(&sp->gpu, stderr);
    }
    /* the experts the GPU streams (a plan with staging) go through the staging slots */
    sup_setup_t setup = {
        .model_path = p->model_path,
        .worker_dir = p->worker_dir,
        .plan = p->plan,
        .stage_slot_bytes = sp->on ? gpu_plan_stage_slot_bytes(&sp->gpu) : 0,
        .gpu_plan = sp->on ? &sp->gpu : NULL,
        .count_routing = o->stats || o->record_routing,
    };
    /* one copy of each expert: the CPU workers copy theirs into stores the GPU worker maps, and the workers of
     * one node read each other's to split every exchange between them (not with workers started by hand, which
     * may be on another host) */
    setup.gpu_streams_stores = setup.stage_slot_bytes && o->gpu.cuda.stager == CUDA_STAGER_SHARED && !o->listen;
    setup.share_node = !o->listen && node_shared(p->plan);
    if ((setup.gpu_streams_stores || setup.share_node) && store_sizes(p->plan, m, &store_bytes, err) < 0)
        goto fail;
    setup.expert_store_bytes = store_bytes;
    const int sup_rc = sup_new(&p->sup, &so, &setup, mc, err);
    free(store_bytes); /* sup_new took the sizes */
    store_bytes = NULL;
    if (sup_rc < 0)
        goto fail;
    uint64_t epoch;
    if (sup_wait_ready(p->sup, o->start_ms, &epoch, err) < 0)
        goto fail;
    remote_options_t ro = {
        .n_ctx = o->n_ctx,
        .n_seq = o->n_seq,
        .n_batch = so.n_batch,
        .n_vocab = mc->n_vocab,
        .max_retries = 3,
        .ready_ms = o->start_ms,
        .spin_ns = o->spin_ns,
        .recurrent = model_recurrent(mc),
        .rollback = o->gpu.rollback,
    };
    if (remote_backend_new(be, p->sup, &ro, err) < 0)
        goto fail;
    *out = p;
    return 0;
fail:
    free(store_bytes);
    pipeline_destroy(&p);
    return -1;
}

int pipeline_health(pipeline_t *p, char *why, size_t n)
{
    return sup_health(p->sup, why, n);
}

void pipeline_destroy(pipeline_t **pp)
{
    pipeline_t *p = *pp;
    if (!p)
        return;
    sup_destroy(&p->sup);
    placement_destroy(&p->plan);
    free(p);
    *pp = NULL;
}

void pipeline_restarts(pipeline_t *p, int *gpu, int *cpu)
{
    sup_restarts(p->sup, gpu, cpu);
}

int pipeline_pids(pipeline_t *p, int *pids, char (*names)[32], int max)
{
    return sup_pids(p->sup, pids, names, max);
}

void pipeline_print_stats(pipeline_t *p, const backend_t *be, FILE *out)
{
    remote_stats_t rs;
    remote_backend_stats(be, &rs);
    int gpu_restarts, cpu_restarts;
    sup_restarts(p->sup, &gpu_restarts, &cpu_restarts);
    fprintf(out, "guild run: pipeline: %d CPU workers; restarts: GPU worker %d, CPU workers %d; %llu cache replays "
            "(%llu tokens)\n",
            placement_workers(p->plan), gpu_restarts, cpu_restarts, (unsigned long long)rs.replays,
            (unsigned long long)rs.replayed);
    if (rs.decode_requests) {
        double n = (double)rs.decode_requests;
        double xch = rs.decode_exchanges ? (double)rs.decode_exchanges : 1.0;
        fprintf(out, "guild run: pipeline: decode step %.3f ms (GPU worker forward %.3f ms, of which waiting for "
                "experts %.3f ms over %.1f exchanges, %.1f us each)\n",
                (double)rs.decode_wall_ns / n / 1e6, (double)rs.decode_forward_ns / n / 1e6,
                (double)rs.decode_moe_ns / n / 1e6, (double)rs.decode_exchanges / n,
                (double)rs.decode_moe_ns / xch / 1e3);
    }
    if (guild_log_level() >= GUILD_LOG_INFO)
        sup_print_stats(p->sup, out);
}
