/* The step hooks of a device executor (cuda_moe.h) through its ops, with the defaults of one that has none: not
 * capturable (it waits on the host), nothing to do around a step, a plain event wait. */
#include "gpu-worker/dense/cuda/cuda_moe.h"

#include "gpu-worker/dense/cuda/cuda_util.h"

bool cuda_moe_capturable(const moe_exec_t *m)
{
    return m->ops->capturable ? m->ops->capturable(m) : false;
}

int cuda_moe_step_begin(moe_exec_t *m, cudaStream_t s, guild_err_t *err)
{
    return m->ops->step_begin ? m->ops->step_begin(m, s, err) : 0;
}

int cuda_moe_step_end(moe_exec_t *m, cudaStream_t s, guild_err_t *err)
{
    return m->ops->step_end ? m->ops->step_end(m, s, err) : 0;
}

int cuda_moe_sync(moe_exec_t *m, cudaEvent_t done, guild_err_t *err)
{
    if (m->ops->sync)
        return m->ops->sync(m, done, err);
    return cuda_check(cudaEventSynchronize(done), "forward pass", err);
}

int cuda_moe_result(moe_exec_t *m, guild_err_t *err)
{
    return m->ops->result ? m->ops->result(m, err) : 0;
}
