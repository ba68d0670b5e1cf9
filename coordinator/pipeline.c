#include "config.h"

#include "coordinator/pipeline.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/remote_backend.h"
#include "coordinator/spawn.h"
#include "coordinator/supervisor.h"
#include "gpu-worker/dense/gpu_plan.h"
#include "coordinator/placement.h"

struct pipeline {
    placement_t *plan;
    sup_t *sup;
    char model_path[PATH_MAX];
    char worker_dir[PATH_MAX];
};

/* The GPU worker's memory plan when its backend is cuda: gp->resident flags the layers whose experts it keeps
 * and computes, which no CPU worker is given. With another backend nothing stays on the GPU: *gp is zeroed
 * (resident NULL). */
static int gpu_resident_plan(gpu_plan_t *gp, const pipeline_config_t *pc, const model_t *m, int32_t n_ctx,
                             int32_t n_batch, guild_err_t *err)
{
    memset(gp, 0, sizeof *gp);
    if (!pc->backend || strcmp(pc->backend, "cuda") != 0)
        return 0;
    /* the GPU worker computes the same plan from the same options (its n_batch is our n_batch, F16 cache) */
    const gpu_plan_options_t po = {.budget = pc->gpu_mem, .n_ctx = n_ctx, .n_batch = n_batch, .kv_elem = 2,
                                   .max_expert_layers = pc->gpu_expert_layers};
    return gpu_plan_compute(gp, m, &po, err);
}

int pipeline_print_plan(const model_t *m, const pipeline_config_t *pc, int32_t n_ctx, int32_t n_batch, FILE *out,
                        guild_err_t *err)
{
    gpu_plan_t gp;
    placement_t *plan = NULL;
    if (gpu_resident_plan(&gp, pc, m, n_ctx, n_batch, err) < 0)
        return -1;
    const int rc = placement_new_local(&plan, model_config(m), pc->cpu_workers, gp.resident, err);
    if (rc == 0) {
        placement_print(plan, m, out);
        if (gp.resident)
            gpu_plan_print(&gp, out);
    }
    placement_destroy(&plan);
    gpu_plan_fini(&gp);
    return rc;
}

int pipeline_new(pipeline_t **out, const pipeline_config_t *pc, const model_t *m, const char *model_path,
                 int32_t n_ctx, int32_t n_batch, backend_t **be, guild_err_t *err)
{
    *out = NULL;
    *be = NULL;
    const model_config_t *mc = model_config(m);
    gpu_plan_t gp = {0};
    pipeline_t *p = calloc(1, sizeof *p);
    if (!p)
        return guild_err_set(err, "pipeline: out of memory");
    if (!realpath(model_path, p->model_path)) {
        guild_err_errno(err, errno, "%s", model_path);
        goto fail;
    }
    /* a budget the dense part does not fit fails here, before any process is started */
    if (spawn_self_dir(p->worker_dir, sizeof p->worker_dir, err) < 0 ||
        gpu_resident_plan(&gp, pc, m, n_ctx, n_batch, err) < 0 ||
        placement_new_local(&p->plan, mc, pc->cpu_workers, gp.resident, err) < 0)
        goto fail;
    if (guild_log_level() >= GUILD_LOG_INFO) {
        placement_print(p->plan, m, stderr);
        if (gp.resident)
            gpu_plan_print(&gp, stderr);
    }
    /* streamed experts (cuda only: another backend's plan is empty) through a guild-stager by default */
    const int stager = pc->stager < 0 ? BACKEND_STAGER_PROCESS : pc->stager;
    const uint64_t slot = gp.resident ? gpu_plan_stage_slot_bytes(&gp) : 0;
    gpu_plan_fini(&gp);
    sup_config_t sc;
    sup_config_defaults(&sc);
    sc.model_path = p->model_path;
    sc.worker_dir = p->worker_dir;
    sc.plan = p->plan;
    sc.listen = pc->listen;
    sc.arena_dir = pc->arena_dir;
    sc.backend = pc->backend;
    sc.n_threads = pc->n_threads;
    sc.n_ctx = n_ctx;
    sc.n_batch = n_batch;
    if (sc.max_out > n_batch)
        sc.max_out = n_batch;
    sc.mlock = pc->mlock;
    if (pc->spin_us >= 0)
        sc.spin_ns = (uint64_t)pc->spin_us * 1000u;
    sc.log_level = pc->log_level;
    sc.gpu_mem = pc->gpu_mem;
    sc.gpu_expert_layers = pc->gpu_expert_layers;
    sc.no_graph = pc->no_graph;
    sc.gate_up_rows = pc->gate_up_rows;
    sc.down_rows = pc->down_rows;
    sc.interleave_gate_up = pc->interleave_gate_up;
    sc.expert_layout = pc->expert_layout;
    sc.split_gpu_fraction = pc->split_gpu_fraction;
    if (slot) {
        sc.stager = stager;
        sc.stager_threads = pc->stager_threads;
        sc.stage_slot_bytes = stager == BACKEND_STAGER_PROCESS ? slot : 0;
    }
    if (sup_new(&p->sup, &sc, mc, err) < 0)
        goto fail;
    uint64_t epoch;
    if (sup_wait_ready(p->sup, sc.start_ms, &epoch, err) < 0)
        goto fail;
    remote_options_t ro = {
        .n_ctx = n_ctx,
        .n_batch = n_batch,
        .n_vocab = mc->n_vocab,
        .max_retries = 3,
        .ready_ms = sc.start_ms,
        .spin_ns = sc.spin_ns,
    };
    if (remote_backend_new(be, p->sup, &ro, err) < 0)
        goto fail;
    *out = p;
    return 0;
fail:
    gpu_plan_fini(&gp);
    pipeline_destroy(&p);
    return -1;
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
