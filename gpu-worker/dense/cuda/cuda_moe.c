/* The bridge hooks of cuda_moe.h through an implementation's ops, with the defaults of one that has none: not
 * capturable (it waits on the host), nothing to do around a step, a plain event wait. */
#include "gpu-worker/dense/cuda/cuda_moe.h"

#include <string.h>

#include "gpu-worker/dense/cuda/cuda_util.h"

bool cuda_moe_capturable(const cuda_moe_t *m)
{
    return m->ops->capturable ? m->ops->capturable(m) : false;
}

int cuda_moe_step_begin(cuda_moe_t *m, cudaStream_t s, guild_err_t *err)
{
    return m->ops->step_begin ? m->ops->step_begin(m, s, err) : 0;
}

int cuda_moe_step_end(cuda_moe_t *m, cudaStream_t s, guild_err_t *err)
{
    return m->ops->step_end ? m->ops->step_end(m, s, err) : 0;
}

int cuda_moe_sync(cuda_moe_t *m, cudaEvent_t done, guild_err_t *err)
{
    if (m->ops->sync)
        return m->ops->sync(m, done, err);
    return cuda_check(cudaEventSynchronize(done), "forward pass", err);
}

int cuda_moe_result(cuda_moe_t *m, guild_err_t *err)
{
    return m->ops->result ? m->ops->result(m, err) : 0;
}

void cuda_moe_stats(const cuda_moe_t *m, cuda_moe_stats_t *out)
{
    memset(out, 0, sizeof *out);
    if (m->ops->stats)
        m->ops->stats(m, out);
}

void cuda_moe_destroy(cuda_moe_t **m)
{
    if (*m) {
        (*m)->ops->destroy(*m);
        *m = NULL;
    }
}
