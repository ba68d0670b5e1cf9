/* gpu-worker/dense/cuda/cuda_free_mem.h — what device 0 has free for this process now, asked without keeping any of
 * it: what `--gpu-mem auto` plans against beside the device's size (coordinator/stack_plan.h), so that memory that
 * other processes hold (another engine, a desktop, a second Guild) is not planned for. Plain C types. */
#ifndef GUILD_GPU_WORKER_CUDA_FREE_MEM_H
#define GUILD_GPU_WORKER_CUDA_FREE_MEM_H

#include <stddef.h>
#include <stdint.h>

/* The free memory of device 0 as a context made for the asking sees it (cudaMemGetInfo: the device less what the
 * driver reserves, what other processes hold and that context itself), in *free_b; the context is destroyed after
 * (cudaDeviceReset), so a coordinator that asks before it starts a GPU worker process holds none of the device. 0 when
 * asked; -1 with the reason in why (and *free_b 0) when not: no device, a driver that cannot be asked, or a process
 * that holds device 0's context already (what it holds would count as taken, and the reset would destroy it). */
int cuda_free_mem(uint64_t *free_b, char *why, size_t why_len);

#endif
