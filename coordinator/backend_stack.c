#include "coordinator/backend_stack.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "coordinator/expert_stats.h"
#include "coordinator/pipeline.h"
#include "coordinator/remote_backend.h"
#include "coordinator/stack_plan.h"
#include "core/model/routing_profile.h"
#include "core/util/pool.h"
#include "cpu-expert-worker/experts/moe_local.h"
#include "gpu-worker/dense/expert_host.h"

struct backend_stack {
    guild_pool_t *pool;    /* single process */
    moe_exec_t *moe;       /* single process */
    const model_config_t *cfg;
    const char *model_path; /* the caller's, for messages */
    bool stats;            /* stack_options_t.stats */
    expert_host_mats_t *host_mats; /* single process: where moe's experts are, for a GPU that streams them */
    expert_host_t host;
    pipeline_t *pipe;      /* multi-process */
    backend_t *be;
    bool single_process;
    stack_plan_t plan;     /* the GPU memory plan every process follows (when plan.on) */
};

/* The in-process executor's experts as a GPU backend sees them (gpu-worker/dense/expert_host.h). */
static int host_from_shard(backend_stack_t *s, const model_t *m, guild_err_t *err)
{
    const model_config_t *c = model_config(m);
    const expert_shard_t *sh = moe_local_shard(s->moe);
    const size_t n = (size_t)c->n_layer * (size_t)c->n_expert;
    if (!(s->host_mats = calloc(n ? n : 1, sizeof *s->host_mats)))
        return guild_err_set(err, "out of memory");
    for (int32_t il = 0; il < c->n_layer; il++)
        for (int32_t e = 0; e < c->n_expert; e++) {
            const expert_mats_t *x = expert_shard_get(sh, il, e);
            if (x)
                s->host_mats[(size_t)il * (size_t)c->n_expert + (size_t)e] = (expert_host_mats_t){
                    x->gate, x->up, x->down, x->gate_row, x->up_row, x->down_row, x->gate_packed, x->up_packed,
                    x->down_packed};
        }
    s->host = (expert_host_t){c->n_layer, c->n_expert, s->host_mats};
    return 0;
}

int backend_stack_open(backend_stack_t **out, const stack_options_t *o, const model_t *m, const char *model_path,
                       guild_err_t *err)
{
    *out = NULL;
    backend_stack_t *s = calloc(1, sizeof *s);
    if (!s)
        return guild_err_set(err, "out of memory");
    s->single_process = o->single_process;
    s->cfg = model_config(m);
    s->model_path = model_path;
    s->stats = o->stats;
    /* the profile the counts will be added to, checked before the work, not after: a malformed one or another
     * model's would otherwise cost the whole run's recording */
    if (o->record_routing && !o->record_replace &&
        routing_profile_check_file(o->record_routing, s->cfg, model_path, err) < 0) {
        guild_err_prefix(err, "--record-routing: ");
        goto fail;
    }
    /* the plan first: it chooses the chunk every stage is sized for */
    if (stack_plan_make(&s->plan, o, m, err) < 0)
        goto fail;
    if (o->single_process) {
        const cpu_worker_options_t *cpu = &o->cpu; /* what a CPU worker would be given */
        const expert_pipe_tuning_t rows = {.gate_up_rows = cpu->gate_up_rows, .down_rows = cpu->down_rows}; /* the tuning file's */
        if (guild_pool_new(&s->pool, o->n_threads, NULL, err) < 0 ||
            moe_local_new_tuned(&s->moe, m, s->pool, &rows, cpu->interleave_gate_up, cpu->expert_layout, err) < 0 ||
            (o->stats && moe_local_count_routing(s->moe, err) < 0))
            goto fail;
        if (host_from_shard(s, m, err) < 0)
            goto fail;
        /* the statistics count every token's routing in every layer, so the last layer must not skip rows; the
         * backend counts before it keeps a plan's resident experts to itself */
        const backend_options_t bo = {.n_ctx = o->n_ctx, .n_batch = s->plan.n_batch, .pool = s->pool,
                                      .moe = s->moe, .all_rows = o->stats || o->record_routing,
                                      .count_routing = o->stats || o->record_routing ||
                                                       (s->plan.on && s->plan.gpu.n_resident_experts > 0),
                                      .check_finite = o->gpu.check_finite, .kv_type = o->gpu.kv_type,
                                      .n_seq = o->n_seq, .mtp = o->gpu.mtp, .rollback = o->gpu.rollback,
                                      .plan = s->plan.on ? &s->plan.gpu : NULL};
        /* the dense backend's own settings as the GPU worker would take them (stack_flags_check refused a
         * guild-stager process: no supervisor here runs one) */
        GUILD_ASSERT(o->gpu.cuda.stager != CUDA_STAGER_PROCESS);
        /* ... streaming, when it streams, from the in-process executor's own copies */
        const void *config = gpu_worker_options_backend_config(&o->gpu);
        cuda_config_t cuda;
        if (config) {
            cuda = *(const cuda_config_t *)config;
            cuda.expert_host = &s->host;
            config = &cuda;
        }
        if (backend_new(&s->be, o->gpu.backend, m, &bo, config, err) < 0)
            goto fail;
    } else if (pipeline_new(&s->pipe, o, &s->plan, m, model_path, &s->be, err) < 0) {
        goto fail;
    }
    if (guild_log_level() >= GUILD_LOG_INFO && s->plan.on && o->single_process)
        gpu_plan_print(&s->plan.gpu, stderr);
    *out = s;
    return 0;
fail:
    backend_stack_close(&s);
    return -1;
}

backend_t *backend_stack_backend(backend_stack_t *s)
{
    return s->be;
}

const moe_exec_t *backend_stack_experts(const backend_stack_t *s)
{
    return s->moe;
}

int32_t backend_stack_n_batch(const backend_stack_t *s)
{
    return s->plan.n_batch;
}

const gpu_plan_t *backend_stack_plan(const backend_stack_t *s)
{
    return s->plan.on ? &s->plan.gpu : NULL;
}

/* The routing counts per (layer, expert) into counts[n_layer * n_expert]: the backend's (counted before a
 * plan's resident experts leave the executor; multi-process: the GPU worker's), else a single process's local
 * executor's. -1 when nobody counted. */
static int stack_routing(const backend_stack_t *s, uint64_t *counts)
{
    if (backend_routing(s->be, counts) == 0)
        return 0;
    if (!s->moe || !s->stats)
        return -1;
    for (int32_t il = 0; il < s->cfg->n_layer; il++)
        for (int32_t e = 0; e < s->cfg->n_expert; e++)
            counts[(size_t)il * (size_t)s->cfg->n_expert + (size_t)e] = (uint64_t)moe_local_routed(s->moe, il, e);
    return 0;
}

int backend_stack_hit_rate(const backend_stack_t *s, uint64_t *routed, uint64_t *resident)
{
    backend_stats_t bs;
    *routed = *resident = 0;
    if (!s->plan.on || backend_stats(s->be, &bs) < 0 || !bs.routed_pairs)
        return -1;
    *routed = bs.routed_pairs;
    *resident = bs.resident_pairs;
    return 0;
}

int backend_stack_record_routing(const backend_stack_t *s, const char *path, bool replace,
                                routing_profile_merge_t *info, guild_err_t *err)
{
    const model_config_t *c = s->cfg;
    const size_t n = (size_t)c->n_layer * (size_t)c->n_expert;
    uint64_t *counts = calloc(n ? n : 1, sizeof *counts);
    int rc = -1;
    if (!counts) {
        guild_err_set(err, "%s: out of memory for the routing counts", path);
        goto done;
    }
    if (stack_routing(s, counts) < 0) {
        guild_err_set(err, "%s: the backend counted no routing", path);
        goto done;
    }
    /* tokens: the most that went through a layer (the last one may have skipped rows nobody read) */
    uint64_t tokens = 0;
    for (int32_t il = 0; il < c->n_layer; il++) {
        uint64_t sum = 0;
        for (int32_t e = 0; e < c->n_expert; e++)
            sum += counts[(size_t)il * (size_t)c->n_expert + (size_t)e];
        const uint64_t t = (sum + (uint64_t)c->n_expert_used - 1) / (uint64_t)c->n_expert_used;
        tokens = t > tokens ? t : tokens;
    }
    rc = routing_profile_merge_file(path, c, s->model_path, counts, tokens, replace, info, err);
done:
    free(counts);
    return rc;
}

void backend_stack_print_stats(backend_stack_t *s, FILE *out)
{
    if (s->stats) {
        const size_t n = (size_t)s->cfg->n_layer * (size_t)s->cfg->n_expert;
        uint64_t *counts = calloc(n ? n : 1, sizeof *counts);
        if (counts && stack_routing(s, counts) == 0) {
            expert_stats_print_counts(counts, s->cfg, out);
            if (s->plan.on) {
                uint64_t routed, resident;
                if (backend_stack_hit_rate(s, &routed, &resident) == 0)
                    fprintf(out, "stats: GPU hit rate %.2f%%: %llu of %llu routed pairs served by the %lld experts "
                            "resident on the GPU\n", 100.0 * (double)resident / (double)routed,
                            (unsigned long long)resident, (unsigned long long)routed,
                            (long long)s->plan.gpu.n_resident_experts);
                else if (stack_plan_hit_rate(&s->plan, counts) >= 0)
                    fprintf(out, "stats: GPU hit rate %.2f%% of the routed pairs on the %lld experts resident on "
                            "the GPU\n", 100.0 * stack_plan_hit_rate(&s->plan, counts),
                            (long long)s->plan.gpu.n_resident_experts);
            }
        } else {
            fputs("stats: the backend counted no routing\n", out);
        }
        free(counts);
    }
    if (s->pipe)
        pipeline_print_stats(s->pipe, s->be, out);
    backend_stats_t bs; /* multi-process: the GPU worker's, carried by its Stats (one request of the workers) */
    if (backend_stats(s->be, &bs) != 0)
        return;
    if (bs.streamed_layers || bs.split_gpu_pairs || bs.split_cpu_pairs)
        fprintf(out, "guild run: streamed experts: %llu layer batches on the GPU (%.1f MB copied, %.1f MB through "
                "the stager's ring, %.1f ms waiting for its fills); split of streamable layers: GPU %llu experts / "
                "%llu pairs, CPU %llu experts / %llu pairs\n",
                (unsigned long long)bs.streamed_layers, (double)bs.streamed_bytes / 1e6,
                (double)bs.staged_bytes / 1e6, (double)bs.stage_wait_ns / 1e6,
                (unsigned long long)bs.split_gpu_experts, (unsigned long long)bs.split_gpu_pairs,
                (unsigned long long)bs.split_cpu_experts, (unsigned long long)bs.split_cpu_pairs);
    if (bs.hint_experts)
        fprintf(out, "guild run: prefetch: %llu of %llu hinted experts routed (hit rate %.1f%%), %.1f MB prefetched "
                "by the CPU workers before %llu exchanges\n", (unsigned long long)bs.hint_hits,
                (unsigned long long)bs.hint_experts, 100.0 * (double)bs.hint_hits / (double)bs.hint_experts,
                (double)bs.prefetch_bytes / 1e6, (unsigned long long)bs.prefetch_layers);
    if (bs.turnarounds)
        fprintf(out, "guild run: the dense side's turnaround between a decode step's exchanges, as the CPU workers see "
                "it: %.1f us a layer (mean of %llu)\n", (double)bs.turnaround_ns / (double)bs.turnarounds / 1e3,
                (unsigned long long)bs.turnarounds);
    if (bs.stream_passes && bs.stream_span_ns) {
        const double span = (double)bs.stream_span_ns, busy = span - (double)bs.copy_wait_ns - (double)bs.cpu_wait_ns;
        fprintf(out, "guild run: streamed forward passes: %llu, %.3f s on the device: copy engine busy %.3f s (%.0f%%), "
                "GPU busy %.3f s (%.0f%%; waiting %.3f s for copies, %.3f s for the CPU side)\n",
                (unsigned long long)bs.stream_passes, span / 1e9, (double)bs.copy_busy_ns / 1e9,
                100.0 * (double)bs.copy_busy_ns / span, busy / 1e9, 100.0 * busy / span,
                (double)bs.copy_wait_ns / 1e9, (double)bs.cpu_wait_ns / 1e9);
    }
}

int backend_stack_pids(backend_stack_t *s, int *pids, char (*names)[32], int max)
{
    if (max < 1)
        return 0;
    pids[0] = (int)getpid();
    snprintf(names[0], 32, "%s", s->single_process ? "guild" : "coordinator");
    return 1 + (s->pipe ? pipeline_pids(s->pipe, pids + 1, names + 1, max - 1) : 0);
}

uint64_t backend_stack_expert_wait_ns(backend_stack_t *s)
{
    if (s->pipe) {
        remote_stats_t rs;
        remote_backend_stats(s->be, &rs);
        return rs.moe_ns;
    }
    moe_exec_stats_t es = {0};
    if (s->moe)
        moe_exec_stats(s->moe, &es);
    return es.wait_ns;
}

void backend_stack_restarts(backend_stack_t *s, int *gpu, int *cpu)
{
    *gpu = *cpu = 0;
    if (s->pipe)
        pipeline_restarts(s->pipe, gpu, cpu);
}

int backend_stack_health(backend_stack_t *s, char *why, size_t n)
{
    if (s->pipe)
        return pipeline_health(s->pipe, why, n);
    snprintf(why, n, "%s", "");
    return 0;
}

const char *backend_stack_describe(const backend_stack_t *s)
{
    return s->single_process ? "single process" : "GPU worker + CPU expert workers";
}

void backend_stack_close(backend_stack_t **sp)
{
    backend_stack_t *s = *sp;
    if (!s)
        return;
    backend_destroy(&s->be); /* before the pipeline, as pipeline_new asks */
    pipeline_destroy(&s->pipe);
    moe_exec_destroy(&s->moe);
    guild_pool_destroy(&s->pool);
    stack_plan_fini(&s->plan);
    free(s->host_mats);
    free(s);
    *sp = NULL;
}
