/* guild keygen — writes a CURVE key pair for a tcp endpoint of the pipeline (ipc/curve.h holds the format). */
#include "config.h"

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>

#include "coordinator/commands.h"
#include "ipc/curve.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: guild keygen -o DIR [--name NAME] [--force]\n"
            "\n"
            "Writes a new CURVE key pair for a tcp endpoint of the pipeline: DIR/NAME.key (the pair: keep it\n"
            "private, mode 0600) and DIR/NAME.pub (the public key, one line `KEY NAME`). The coordinator takes\n"
            "its pair with --key and the workers' .pub lines with --allow; a worker takes its pair with --key\n"
            "and the coordinator's .pub with --server-key.\n"
            "\n"
            "  -o, --out DIR        directory for the files (created, mode 0700, when missing)\n"
            "      --name NAME      file name and the key's name in allow lists (default: coordinator)\n"
            "      --force          replace existing files (the old key stops working where it was used)\n"
            "  -h, --help           this help\n");
}

int cmd_keygen(int argc, char **argv)
{
    enum { OPT_NAME = 256, OPT_FORCE };
    static const struct option opts[] = {
        {"out", required_argument, NULL, 'o'},
        {"name", required_argument, NULL, OPT_NAME},
        {"force", no_argument, NULL, OPT_FORCE},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *dir = NULL, *name = "coordinator";
    bool force = false;
    int o;
    optind = 1;
    opterr = 0;
    while ((o = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
        switch (o) {
        case 'o': dir = optarg; break;
        case OPT_NAME: name = optarg; break;
        case OPT_FORCE: force = true; break;
        case 'h': usage(stdout); return 0;
        default:
            fprintf(stderr, "guild keygen: unknown option or missing value: %s\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        }
    }
    if (!dir || optind < argc) {
        fprintf(stderr, "guild keygen: %s\n", dir ? "unexpected argument" : "-o DIR is required");
        usage(stderr);
        return 2;
    }
    guild_err_t err = {{0}};
    char pub[GUILD_CURVE_Z85 + 1];
    if (guild_curve_keygen(dir, name, force, pub, &err) < 0) {
        fprintf(stderr, "guild keygen: %s\n", err.msg);
        return 1;
    }
    printf("%s/%s.key  key pair (private)\n%s/%s.pub  public key: %s %s\n", dir, name, dir, name, pub, name);
    return 0;
}
