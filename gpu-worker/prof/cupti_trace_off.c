/* cupti_trace.h without CUPTI (configure found no cupti.h and libcupti beside the CUDA runtime, or no CUDA). */
#include "gpu-worker/prof/cupti_trace.h"

int cupti_trace_start(prof_trace_t *t, guild_err_t *err)
{
    (void)t;
    return guild_err_set(err, "this build cannot trace the GPU: configure found no CUPTI (cupti.h and libcupti "
                         "beside the CUDA runtime)");
}

int cupti_trace_now(uint64_t *ns, guild_err_t *err)
{
    *ns = 0;
    return guild_err_set(err, "this build has no CUPTI");
}

void cupti_trace_window(uint64_t start)
{
    (void)start;
}

int cupti_trace_add_step(const prof_step_t *s, guild_err_t *err)
{
    (void)s;
    return guild_err_set(err, "this build has no CUPTI");
}

int cupti_trace_stop(guild_err_t *err)
{
    (void)err;
    return 0;
}

void cupti_trace_abandon(void)
{
}
