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
#include "coordinator/stack_plan.h"
#include "gpu-worker/dense/gpu_plan.h"

struct pipeline {
    placement_t *plan;
    sup_t *sup;
    char model_path[PATH_MAX];
    char worker_dir[PATH_MAX];
};

int pipeline_print_plan(const model_t *m, const stack_options_t *o, FILE *out, guild_err_t *err)
{
    stack_plan_t sp;
    placement_t *plan = NULL;
    if (stack_plan_make(&sp, o, m, err) < 0)
        return -1;
    const int rc = placement_new_local(&plan, model_config(m), o->cpu_workers, stack_plan_gpu_experts(&sp), err);
    if (rc == 0) {
        placement_print(plan, m, out);
        if (sp.on)
            gpu_plan_print(&sp.gpu, out);
    }
    placement_destroy(&plan);
    stack_plan_fini(&sp);
    return rc;
}

int pipeline_new(pipeline_t **out, const stack_options_t *o, const stack_plan_t *sp, const model_t *m,
                 const char *model_path, backend_t **be, guild_err_t *err)
{
    *out = NULL;
    *be = NULL;
    const model_config_t *mc = model_config(m);
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
        placement_new_local(&p->plan, mc, o->cpu_workers, stack_plan_gpu_experts(sp), err) < 0)
        goto fail;
    if (guild_log_level() >= GUILD_LOG_INFO) {
        placement_print(p->plan, m, stderr);
        if (sp->on)
            gpu_plan_print(&sp->gpu, stderr);
    }
    /* the experts the GPU streams (a plan with staging) go through the staging slots */
    const sup_setup_t setup = {
        .model_path = p->model_path,
        .worker_dir = p->worker_dir,
        .plan = p->plan,
        .stage_slot_bytes = sp->on ? gpu_plan_stage_slot_bytes(&sp->gpu) : 0,
        .gpu_plan = sp->on ? &sp->gpu : NULL,
        .count_routing = o->stats || o->record_routing,
    };
    if (sup_new(&p->sup, &so, &setup, mc, err) < 0)
        goto fail;
    uint64_t epoch;
    if (sup_wait_ready(p->sup, o->start_ms, &epoch, err) < 0)
        goto fail;
    remote_options_t ro = {
        .n_ctx = o->n_ctx,
        .n_batch = so.n_batch,
        .n_vocab = mc->n_vocab,
        .max_retries = 3,
        .ready_ms = o->start_ms,
        .spin_ns = o->spin_ns,
        .recurrent = model_recurrent(mc),
    };
    if (remote_backend_new(be, p->sup, &ro, err) < 0)
        goto fail;
    *out = p;
    return 0;
fail:
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
