/* guild-gpu-worker — the dense side of Guild's multi-process pipeline (started by `guild run`; see
 * gpu-worker/gpu_worker.h). Its command line: gpu-worker/gpu_worker_options.h. */
#include "config.h"

#include <stdio.h>

#include "gpu-worker/dense/backend.h"
#include "gpu-worker/gpu_worker.h"
#include "gpu-worker/gpu_worker_options.h"

int main(int argc, char **argv)
{
    gpu_worker_args_t args;
    guild_err_t err = {{0}};
    int rc = gpu_worker_args_parse(&args, argc, argv, &err);
    if (rc == 1) {
        gpu_worker_args_usage(stdout, backend_names());
        return 0;
    }
    if (rc < 0) {
        fprintf(stderr, "guild-gpu-worker: %s\n", err.msg);
        if (rc == -2)
            gpu_worker_args_usage(stderr, backend_names());
        return 2;
    }
    return gpu_worker_run(&args);
}
