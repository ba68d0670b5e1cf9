/* guild-cpu-worker — the routed experts of one shard on one NUMA node (started by `guild run`, or by hand for
 * `guild run --listen`; see cpu-expert-worker/cpu_worker.h). Its command line: cpu-expert-worker/cpu_worker_options.h. */
#include "config.h"

#include <stdio.h>

#include "cpu-expert-worker/cpu_worker.h"
#include "cpu-expert-worker/cpu_worker_options.h"

int main(int argc, char **argv)
{
    cpu_worker_args_t args;
    guild_err_t err = {{0}};
    int rc = cpu_worker_args_parse(&args, argc, argv, &err);
    if (rc == 1)
        return 0;
    if (rc < 0) {
        fprintf(stderr, "guild-cpu-worker: %s\n", err.msg);
        if (rc == -2)
            cpu_worker_args_usage(stderr);
        return 2;
    }
    return cpu_worker_run(&args);
}
