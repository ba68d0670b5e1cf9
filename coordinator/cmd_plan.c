/* guild plan — print how the multi-process pipeline would place a model's routed experts (and, with the cuda
 * backend, the GPU's memory: the layers whose experts stay there are given to no CPU worker). */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "coordinator/cmd_model.h"
#include "coordinator/commands.h"
#include "coordinator/pipeline.h"
#include "coordinator/spec.h"
#include "coordinator/stack_flags.h"
#include "coordinator/stack_plan.h"
#include "core/model/model.h"
#include "core/util/cli.h"

/* The backend stack's flags that change the plan (coordinator/stack_flags.h). */
enum {
    PLAN_STACK_FLAGS = STACK_FLAG_SINGLE | STACK_FLAG_NO_TUNING | STACK_FLAG_CPU_WORKERS | STACK_FLAG_BACKEND |
                       STACK_FLAG_GPU_MEM | STACK_FLAG_GPU_EXPERTS | STACK_FLAG_STAGER | STACK_FLAG_ROUTING |
                       STACK_FLAG_KV_TYPE | STACK_FLAG_CPU_NODES,
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: guild plan -m FILE.gguf [--cpu-workers K] [--backend NAME [--gpu-mem SIZE] ...] [--batch N|auto]\n"
            "\n"
            "Prints the backend (the default, auto, says what it found), which CPU expert worker would own\n"
            "which routed experts of every layer, on which NUMA node and CPUs, and how many bytes of weights\n"
            "each would hold (what `guild run` starts). With the cuda backend (or --gpu-mem with the cpu\n"
            "backend, which then stands in for a device), also the GPU's memory plan and why: the chunk, the\n"
            "staging slots through which the other experts stream, and the experts resident on the GPU (the\n"
            "hottest of the model's routing profile, MODEL.gguf.routing, else whole layers), which no CPU\n"
            "worker is given.\n"
            "\n"
            "  -m, --model FILE        GGUF model\n"
            "      --ctx N             context length (default: the model's, at most 4096)\n"
            STACK_FLAGS_BATCH_HELP
            "      --spec KIND         plan for speculative decoding of KIND (none, ngram, draft, mtp): the GPU\n"
            "                          also keeps a hybrid model's recurrent states for a rollback over --spec-max\n"
            "                          + 1 rows a sequence, and with mtp the multi-token-prediction layer (a draft\n"
            "                          model's own stack is not planned here)\n"
            "      --spec-max K        most drafted tokens per verify step (default 4, at most 16)\n");
    stack_flags_usage(out, PLAN_STACK_FLAGS, "auto");
    fprintf(out, "  -h, --help              this help\n");
}

int cmd_plan(int argc, char **argv)
{
    enum { OPT_CTX = 256, OPT_BATCH, OPT_SPEC };
    static const struct option own[] = {
        {"model", required_argument, NULL, 'm'},
        {"ctx", required_argument, NULL, OPT_CTX},
        {"batch", required_argument, NULL, OPT_BATCH},
        {"spec", required_argument, NULL, OPT_SPEC},
        {"spec-max", required_argument, NULL, OPT_SPEC},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct option opts[24];
    stack_flags_options(opts, sizeof opts / sizeof opts[0], own, PLAN_STACK_FLAGS);
    stack_options_t f;
    stack_options_init(&f);
    f.gpu.backend = "auto";
    spec_options_t spec;
    spec_options_init(&spec);
    const char *path = NULL;
    int32_t n_ctx = 0, n_batch = 0; /* auto */
    guild_err_t e = {{0}};
    long v;
    int o, sf, li;
    optind = 1;
    opterr = 0;
    while ((li = -1, o = getopt_long(argc, argv, "m:h", opts, &li)) != -1) {
        if ((sf = stack_flags_parse(&f, o, optarg, &e)) != 0) {
            if (sf < 0)
                goto bad;
            continue;
        }
        switch (o) {
        case 'm': path = optarg; break;
        case OPT_CTX:
            if (cli_parse_long("--ctx", optarg, 1, 1 << 24, &v, &e) < 0)
                goto bad;
            n_ctx = (int32_t)v;
            break;
        case OPT_BATCH:
            if (stack_flags_parse_batch(optarg, &n_batch, &e) < 0)
                goto bad;
            break;
        case OPT_SPEC:
            if (spec_flag(&spec, opts[li].name, optarg, &e) < 0)
                goto bad;
            break;
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
    if (stack_flags_check(&f, PLAN_STACK_FLAGS, NULL, false, &e) < 0)
        goto bad;
    guild_err_t err = {{0}};
    model_t *m = NULL;
    int rc = 1;
    /* the target's stack only: a draft model is not opened (its stack plans its own memory) */
    spec_options_t target = spec;
    if (target.kind == SPEC_DRAFT)
        target.draft_model = path;
    if (model_new(&m, path, &err) == 0 && spec_options_check(&target, m, &err) == 0 &&
        stack_flags_tune(&f, path, "guild plan", &err) == 0) {
        spec_stack_options(&spec, &f);
        f.n_ctx = cmd_model_n_ctx(m, n_ctx);
        f.n_batch = n_batch < f.n_ctx ? n_batch : f.n_ctx;
        if (stack_plan_fit(&f, m, &err) == 0 && pipeline_print_plan(m, &f, stdout, &err) == 0)
            rc = 0;
    }
    if (rc)
        fprintf(stderr, "guild plan: %s\n", err.msg);
    model_destroy(&m);
    return rc;
bad:
    fprintf(stderr, "guild plan: %s\n", e.msg);
    return 2;
}
