#include "coordinator/backend_stack.h"

#include <stdlib.h>

#include "coordinator/expert_stats.h"
#include "core/util/pool.h"
#include "cpu-expert-worker/experts/moe_local.h"

struct backend_stack {
    guild_pool_t *pool;    /* single process */
    moe_exec_t *moe;       /* single process */
    expert_stats_t *stats; /* single process with config.stats: wraps moe */
    pipeline_t *pipe;      /* multi-process */
    backend_t *be;
    bool single_process;
};

int backend_stack_open(backend_stack_t **out, const backend_stack_config_t *c, const model_t *m,
                       const char *model_path, guild_err_t *err)
{
    *out = NULL;
    backend_stack_t *s = calloc(1, sizeof *s);
    if (!s)
        return guild_err_set(err, "out of memory");
    GUILD_ASSERT(!c->stats || c->single_process);
    s->single_process = c->single_process;
    if (c->single_process) {
        const expert_pipe_tuning_t rows = {c->pipe.gate_up_rows, c->pipe.down_rows}; /* the tuning file's */
        if (guild_pool_new(&s->pool, c->n_threads, NULL, err) < 0 ||
            moe_local_new_tuned(&s->moe, m, s->pool, &rows, c->pipe.interleave_gate_up,
                                c->pipe.expert_layout > 0 ? (expert_layout_t)c->pipe.expert_layout
                                                          : EXPERT_LAYOUT_AUTO, err) < 0 ||
            (c->stats && expert_stats_new(&s->stats, s->moe, model_config(m), err) < 0))
            goto fail;
        /* the statistics count every token's routing in every layer, so the last layer must not skip rows */
        backend_options_t bo = {.n_ctx = c->n_ctx, .n_batch = c->n_batch, .pool = s->pool,
                                .moe = s->stats ? expert_stats_exec(s->stats) : s->moe, .all_rows = c->stats,
                                .gpu_mem = c->pipe.gpu_mem, .gpu_expert_layers = c->pipe.gpu_expert_layers,
                                .no_graph = c->pipe.no_graph,
                                .stager = c->pipe.stager < 0 ? BACKEND_STAGER_THREAD : (backend_stager_t)c->pipe.stager,
                                .stage_threads = c->pipe.stager_threads,
                                .split_gpu_fraction = c->pipe.split_gpu_fraction};
        if (bo.stager == BACKEND_STAGER_PROCESS) /* no supervisor here to run guild-stager */
            bo.stager = BACKEND_STAGER_THREAD;
        if (backend_new(&s->be, c->backend, m, &bo, err) < 0)
            goto fail;
    } else {
        pipeline_config_t pc = c->pipe;
        pc.backend = c->backend;
        pc.n_threads = c->n_threads;
        if (pipeline_new(&s->pipe, &pc, m, model_path, c->n_ctx, c->n_batch, &s->be, err) < 0)
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

void backend_stack_print_stats(backend_stack_t *s, FILE *out)
{
    if (s->stats)
        expert_stats_print(s->stats, out);
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
    expert_stats_destroy(&s->stats);
    moe_exec_destroy(&s->moe);
    guild_pool_destroy(&s->pool);
    free(s);
    *sp = NULL;
}
