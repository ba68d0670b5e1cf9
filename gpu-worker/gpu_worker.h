/* gpu-worker/gpu_worker.h — the GPU worker process: the dense side of the pipeline.
 *
 * It registers with the coordinator (ipc/actor.h), and for each Assign: checks its options
 * (gpu-worker/gpu_worker_options.h), opens the model, creates the dense backend they name with that backend's
 * settings and the process's one routed-expert executor over the arena's exchange (backend_exchange_exec_new,
 * gpu-worker/dense/backend.h), attaches the arena's exchange and step regions, reports Ready, then serves step
 * requests (ipc/step.h) until a Shutdown, a new Assign, or the coordinator's disappearance. A request that
 * fails is answered with its error; the worker stays up.
 */
#ifndef GUILD_GPU_WORKER_GPU_WORKER_H
#define GUILD_GPU_WORKER_GPU_WORKER_H

#include "gpu-worker/gpu_worker_options.h"

/* Runs the worker its checked command line describes (the coordinator's endpoint and its keys) ; returns the
 * process exit status (0 after a Shutdown or when the coordinator is gone, 1 if it could not start or the
 * coordinator refused it). */
int gpu_worker_run(const gpu_worker_args_t *args);

#endif
