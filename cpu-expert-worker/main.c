/* guild-cpu-worker — the routed experts of one shard on one NUMA node (started by `guild run`, or by hand for
 * `guild run --listen`; see cpu-expert-worker/cpu_worker.h). */
#include "config.h"

#include <getopt.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util/cli.h"
#include "cpu-expert-worker/cpu_worker.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: guild-cpu-worker --node N --connect ENDPOINT [--no-shared-memory] [-v]\n"
            "\n"
            "Computes the routed experts of its shard for Guild's multi-process pipeline, with its memory and\n"
            "threads on NUMA node N. Started by `guild run`, or by hand (e.g. one systemd unit per socket) for\n"
            "`guild run --listen ENDPOINT`; the shard, threads and arena come from the coordinator.\n"
            "\n"
            "  --node N             NUMA node to serve (default 0)\n"
            "  --connect ENDPOINT   the coordinator's control socket (ipc://PATH or tcp://HOST:PORT)\n"
            "  --no-shared-memory   do not map the coordinator's arena: exchanges travel as messages (what a\n"
            "                       worker on another host does; the coordinator needs --listen)\n"
            "  -v, --verbose        more messages on stderr (-vv: debug)\n"
            "  -h, --help           this help\n");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"node", required_argument, NULL, 'n'},
        {"connect", required_argument, NULL, 'c'},
        {"no-shared-memory", no_argument, NULL, 'S'},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *endpoint = NULL;
    int verbose = 0, node = 0, o;
    bool shared_memory = true;
    opterr = 0;
    while ((o = getopt_long(argc, argv, "n:c:vh", opts, NULL)) != -1) {
        switch (o) {
        case 'n': {
            long v;
            guild_err_t e;
            if (cli_parse_long("--node", optarg, 0, 4095, &v, &e) < 0) {
                fprintf(stderr, "guild-cpu-worker: %s\n", e.msg);
                return 2;
            }
            node = (int)v;
            break;
        }
        case 'c': endpoint = optarg; break;
        case 'S': shared_memory = false; break;
        case 'v': verbose++; break;
        case 'h': usage(stdout); return 0;
        default:
            fprintf(stderr, "guild-cpu-worker: unknown option or missing value: %s\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc || !endpoint) {
        fprintf(stderr, "guild-cpu-worker: %s\n", endpoint ? "unexpected argument" : "--connect ENDPOINT is required");
        usage(stderr);
        return 2;
    }
    return cpu_worker_run(node, endpoint, verbose >= 2 ? GUILD_LOG_DEBUG : verbose ? GUILD_LOG_INFO : GUILD_LOG_WARN,
                          shared_memory);
}
