/* guild plan — print how the multi-process pipeline would place a model's routed experts. */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "coordinator/commands.h"
#include "coordinator/pipeline.h"
#include "core/util/cli.h"
#include "core/model/model.h"
#include "core/topo/topo.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: guild plan -m FILE.gguf [--cpu-workers K]\n"
            "\n"
            "Prints which CPU expert worker would own which routed experts of every layer, on which NUMA node\n"
            "and CPUs, and how many bytes of weights each would hold (what `guild run` starts).\n"
            "\n"
            "  -m, --model FILE     GGUF model\n"
            "      --cpu-workers K  number of CPU workers (default: one per NUMA node; %d here)\n"
            "  -h, --help           this help\n",
            topo_node_count());
}

int cmd_plan(int argc, char **argv)
{
    static const struct option opts[] = {
        {"model", required_argument, NULL, 'm'},
        {"cpu-workers", required_argument, NULL, 'k'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *path = NULL;
    int workers = 0, o;
    optind = 1;
    opterr = 0;
    while ((o = getopt_long(argc, argv, "m:h", opts, NULL)) != -1) {
        switch (o) {
        case 'm': path = optarg; break;
        case 'k': {
            long v;
            guild_err_t e;
            if (cli_parse_long("--cpu-workers", optarg, 1, 4096, &v, &e) < 0) {
                fprintf(stderr, "guild plan: %s\n", e.msg);
                return 2;
            }
            workers = (int)v;
            break;
        }
        case 'h': usage(stdout); return 0;
        default:
            fprintf(stderr, "guild plan: unknown option or missing value: %s\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        }
    }
    if (!path || optind < argc) {
        fprintf(stderr, "guild plan: %s\n", path ? "unexpected argument" : "no model: give -m FILE.gguf");
        usage(stderr);
        return 2;
    }
    guild_err_t err = {{0}};
    model_t *m = NULL;
    int rc = 1;
    if (model_new(&m, path, &err) == 0 && pipeline_print_plan(m, workers, stdout, &err) == 0)
        rc = 0;
    else
        fprintf(stderr, "guild plan: %s\n", err.msg);
    model_destroy(&m);
    return rc;
}
