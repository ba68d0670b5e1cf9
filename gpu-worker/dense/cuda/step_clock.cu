/* cuda_clock_mark: a mark of the decode step's clock (cuda_config_t.step_clock, cuda_step_clock.h). One thread
 * writes the GPU's global timer (ns) into a word of host memory mapped for the device once every kernel before it
 * on the stream has finished (the programmatic dependent launch's wait), so the host reads where a replayed
 * graph's time went without tracing it (CUPTI's tracing of every graph node changes the step it measures). */
#include "gpu-worker/dense/cuda/cuda_common.cuh"

static __global__ void clock_mark_kernel(unsigned long long *slot)
{
    pdl_begin();
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    *slot = t;
}

extern "C" int cuda_clock_mark(uint64_t *slot, cudaStream_t s, guild_err_t *err)
{
    cuda_launch_pdl(clock_mark_kernel, dim3(1), dim3(1), 0, s, (unsigned long long *)slot);
    return cuda_launch_check("clock mark", err);
}
