#include "coordinator/backend_stack.h"

#include <stdlib.h>

#include "coordinator/expert_stats.h"
#include "coordinator/pipeline.h"
#include "core/util/pool.h"
#include "cpu-expert-worker/experts/moe_local.h"

struct backend_stack {
    guild_pool_t *pool;    /* single process */
    moe_exec_t *moe;       /* single process */
    const model_config_t *cfg;
    bool stats;            /* single process with stack_options_t.stats: moe counts the routing */
    pipeline_t *pipe;      /* multi-process */
    backend_t *be;
    bool single_process;
};

int backend_stack_open(backend_stack_t **out, const stack_options_t *o, const model_t *m, const char *model_path,
                       guild_err_t *err)
{
    *out = NULL;
    backend_stack_t *s = calloc(1, sizeof *s);
    if (!s)
        return guild_err_set(err, "out of memory");
    GUILD_ASSERT(!o->stats || o->single_process);
    s->single_process = o->single_process;
    if (o->single_process) {
        const cpu_worker_options_t *cpu = &o->cpu; /* what a CPU worker would be given */
        const expert_pipe_tuning_t rows = {cpu->gate_up_rows, cpu->down_rows}; /* the tuning file's */
        if (guild_pool_new(&s->pool, o->n_threads, NULL, err) < 0 ||
            moe_local_new_tuned(&s->moe, m, s->pool, &rows, cpu->interleave_gate_up, cpu->expert_layout, err) < 0 ||
            (o->stats && moe_local_count_routing(s->moe, err) < 0))
            goto fail;
        s->cfg = model_config(m);
        s->stats = o->stats;
        /* the statistics count every token's routing in every layer, so the last layer must not skip rows */
        const backend_options_t bo = {.n_ctx = o->n_ctx, .n_batch = o->n_batch, .pool = s->pool,
                                      .moe = s->moe, .all_rows = o->stats};
        /* the dense backend's own settings as the GPU worker would take them (stack_flags_check refused a
         * guild-stager process: no supervisor here runs one) */
        GUILD_ASSERT(o->gpu.cuda.stager != CUDA_STAGER_PROCESS);
        if (backend_new(&s->be, o->gpu.backend, m, &bo, gpu_worker_options_backend_config(&o->gpu), err) < 0)
            goto fail;
    } else if (pipeline_new(&s->pipe, o, m, model_path, &s->be, err) < 0) {
        goto fail;
    }
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

void backend_stack_print_stats(backend_stack_t *s, FILE *out)
{
    if (s->stats)
        expert_stats_print(s->moe, s->cfg, out);
    if (s->pipe)
        pipeline_print_stats(s->pipe, s->be, out);
    backend_stats_t bs; /* multi-process: the GPU worker's, carried by its Stats */
    if (backend_stats(s->be, &bs) == 0 && (bs.streamed_layers || bs.split_gpu_pairs || bs.split_cpu_pairs))
        fprintf(out, "guild run: streamed experts: %llu layer batches on the GPU (%.1f MB copied, %.1f MB through "
                "the stager's ring, %.1f ms waiting for its fills); split of streamable layers: GPU %llu experts / "
                "%llu pairs, CPU %llu experts / %llu pairs\n",
                (unsigned long long)bs.streamed_layers, (double)bs.streamed_bytes / 1e6,
                (double)bs.staged_bytes / 1e6, (double)bs.stage_wait_ns / 1e6,
                (unsigned long long)bs.split_gpu_experts, (unsigned long long)bs.split_gpu_pairs,
                (unsigned long long)bs.split_cpu_experts, (unsigned long long)bs.split_cpu_pairs);
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
    free(s);
    *sp = NULL;
}
