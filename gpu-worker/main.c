/* guild-gpu-worker — the dense side of Guild's multi-process pipeline (started by `guild run`; see
 * gpu-worker/gpu_worker.h). */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "gpu-worker/dense/backend.h"
#include "gpu-worker/gpu_worker.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: guild-gpu-worker --connect ENDPOINT [-v]\n"
            "\n"
            "The dense side of Guild's multi-process pipeline: attention, router, shared expert and LM head\n"
            "(backends built in: %s), the routed experts through the CPU workers. Started by `guild run`;\n"
            "everything else (model, backend, sizes) comes from the coordinator.\n"
            "\n"
            "  --connect ENDPOINT   the coordinator's control socket (ipc://PATH or tcp://HOST:PORT)\n"
            "  -v, --verbose        more messages on stderr (-vv: debug)\n"
            "  -h, --help           this help\n",
            backend_names());
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"connect", required_argument, NULL, 'c'},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *endpoint = NULL;
    int verbose = 0, o;
    opterr = 0;
    while ((o = getopt_long(argc, argv, "c:vh", opts, NULL)) != -1) {
        switch (o) {
        case 'c': endpoint = optarg; break;
        case 'v': verbose++; break;
        case 'h': usage(stdout); return 0;
        default:
            fprintf(stderr, "guild-gpu-worker: unknown option or missing value: %s\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc || !endpoint) {
        fprintf(stderr, "guild-gpu-worker: %s\n", endpoint ? "unexpected argument" : "--connect ENDPOINT is required");
        usage(stderr);
        return 2;
    }
    return gpu_worker_run(endpoint, verbose >= 2 ? GUILD_LOG_DEBUG : verbose ? GUILD_LOG_INFO : GUILD_LOG_WARN);
}
