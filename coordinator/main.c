/* guild — the coordinator binary: CLI entry point that dispatches to subcommands. */
#include "config.h"
#include "coordinator/commands.h"

#include <stdio.h>
#include <string.h>

#include "core/util/progress.h"

static int cmd_version(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    printf("%s\n", PACKAGE_STRING);
    return 0;
}

static const guild_cmd_t commands[] = {
    {"version", cmd_version, "print the version"},
    {"inspect", cmd_inspect, "print a GGUF file's metadata and tensor table"},
    {"run", cmd_run, "generate text from a prompt"},
    {"serve", cmd_serve, "serve a model over HTTP with OpenAI's API"},
    {"plan", cmd_plan, "print which CPU worker would own which experts of a model"},
    {"tokenize", cmd_tokenize, "print the token ids of the text on stdin"},
    {"bench", cmd_bench, "benchmarks: guild bench experts|bw"},
    {"optimize", cmd_optimize, "tune the CPU expert workers for this machine and model (writes a tuning file)"},
    {"keygen", cmd_keygen, "write a CURVE key pair for the pipeline's tcp endpoints"},
};

static void usage(FILE *out)
{
    fprintf(out, "usage: guild <command> [options]   (guild <command> --help for its options)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("%s\n", PACKAGE_STRING);
        return 0;
    }
    /* long operations show a line of progress on a terminal (never the workers: they share it) */
    guild_progress_enable(true);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "guild: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
