#include "coordinator/backend_stack.h"

#include <stdlib.h>

#include "core/util/pool.h"
#include "cpu-expert-worker/moe_local.h"

struct backend_stack {
    guild_pool_t *pool;  /* single process */
    moe_exec_t *moe;     /* single process */
    pipeline_t *pipe;    /* multi-process */
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
    s->single_process = c->single_process;
    if (c->single_process) {
        const expert_pipe_tuning_t rows = {c->pipe.gate_up_rows, c->pipe.down_rows}; /* the tuning file's */
        if (guild_pool_new(&s->pool, c->n_threads, NULL, err) < 0 ||
            moe_local_new_tuned(&s->moe, m, s->pool, &rows, c->pipe.interleave_gate_up, err) < 0)
            goto fail;
        backend_options_t bo = {.n_ctx = c->n_ctx, .n_batch = c->n_batch, .pool = s->pool, .moe = s->moe,
                                .gpu_mem = c->pipe.gpu_mem, .gpu_expert_layers = c->pipe.gpu_expert_layers,
                                .no_graph = c->pipe.no_graph};
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
