/* guild bench trace: a GPU trace's decode steps summed per kernel (bench/prof_summary.h), from the file that
 * `--gpu-prof FILE` has the multi-process pipeline's GPU worker write (core/prof/prof_trace.h). The same report
 * as bench/guild-cuda-prof's, of the step users run: the dense side in its own process, the routed experts on the
 * CPU workers through the exchange, every step one replayed CUDA graph. The steps are the worker's step requests
 * of --tokens rows that it served (forward passes, one sequence's or several's), after the first --skip of them
 * (the graphs' captures, the warm-up); each one's interval is the worker's forward call. Reads a file only: no
 * GPU needed. */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "bench/prof_summary.h"
#include "core/prof/prof_trace.h"
#include "core/util/cli.h"

#define WHO "guild bench trace"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: " WHO " FILE [--tokens N] [--skip W] [--steps S] [--layers L]\n"
            "  A GPU trace (written by `guild bench run --gpu-prof FILE` and the other commands' --gpu-prof)\n"
            "  summed per kernel over its decode steps: the step wall, the GPU's busy time and idle gaps, each\n"
            "  kernel name's launches and time a step, copies, and the busy time a layer (issue 17's measure;\n"
            "  \"dense busy a layer\" leaves out the routed experts' kernels and the exchange's wait for the CPU\n"
            "  workers).\n"
            "  --tokens N   the steps summed are the served forward passes of N rows (default 1: decode)\n"
            "  --skip W     leave out the first W such steps (default 8: graph captures and warm-up)\n"
            "  --steps S    sum at most S steps after those (default: all)\n"
            "  --layers L   the model's layers, for the per-layer line (default: the trace's)\n");
}

/* The intervals of the steps chosen: served forward passes of `tokens` rows, the first `skip` left out, at most
 * `max` (0: all). Their count; t0/t1 get [n_steps] each. */
static int32_t choose_steps(const prof_trace_t *t, int32_t tokens, int32_t skip, int32_t max, uint64_t *t0,
                            uint64_t *t1, int32_t *n_matching)
{
    int32_t seen = 0, n = 0;
    for (size_t i = 0; i < t->n_steps; i++) {
        const prof_step_t *s = &t->steps[i];
        if (!s->ok || s->n_tokens != tokens || (s->kind != PROF_STEP_FORWARD && s->kind != PROF_STEP_SEQS))
            continue;
        if (seen++ < skip || (max && n >= max))
            continue;
        t0[n] = s->start;
        t1[n] = s->end;
        n++;
    }
    *n_matching = seen;
    return n;
}

/* The steps must be ascending and disjoint for prof_summarize: a worker serves one request at a time. */
static int check_order(const uint64_t *t0, const uint64_t *t1, int32_t n, const char *path, guild_err_t *err)
{
    for (int32_t i = 1; i < n; i++)
        if (t0[i] < t1[i - 1])
            return guild_err_set(err, "%s: step %d starts before step %d ends (the trace's steps overlap)", path, i,
                                 i - 1);
    return 0;
}

int bench_trace_main(int argc, char **argv)
{
    enum { O_TOKENS = 256, O_SKIP, O_STEPS, O_LAYERS };
    static const struct option opts[] = {
        {"tokens", required_argument, NULL, O_TOKENS}, {"skip", required_argument, NULL, O_SKIP},
        {"steps", required_argument, NULL, O_STEPS},   {"layers", required_argument, NULL, O_LAYERS},
        {"help", no_argument, NULL, 'h'},              {NULL, 0, NULL, 0},
    };
    long tokens = 1, skip = 8, max = 0, layers = 0, v;
    guild_err_t err = {{0}};
    optind = 1;
    opterr = 0;
    int o;
    while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (o) {
        case O_TOKENS: if (cli_parse_long("--tokens", optarg, 1, 1 << 16, &v, &err) < 0) goto bad; tokens = v; break;
        case O_SKIP: if (cli_parse_long("--skip", optarg, 0, 1 << 30, &v, &err) < 0) goto bad; skip = v; break;
        case O_STEPS: if (cli_parse_long("--steps", optarg, 1, 1 << 30, &v, &err) < 0) goto bad; max = v; break;
        case O_LAYERS: if (cli_parse_long("--layers", optarg, 1, 1 << 16, &v, &err) < 0) goto bad; layers = v; break;
        case 'h': usage(stdout); return 0;
        default:
            fprintf(stderr, WHO ": unknown option or missing value: %s\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc - 1) {
        fprintf(stderr, WHO ": expected one trace FILE\n");
        usage(stderr);
        return 2;
    }
    const char *path = argv[optind];
    prof_trace_t t;
    prof_summary_t sum = {0};
    uint64_t *t0 = NULL, *t1 = NULL;
    int rc = 1;
    if (prof_trace_read(&t, path, &err) < 0) {
        fprintf(stderr, WHO ": %s\n", err.msg);
        return 1;
    }
    const int32_t n_layer = layers ? (int32_t)layers : t.n_layer;
    t0 = malloc((t.n_steps ? t.n_steps : 1) * sizeof *t0);
    t1 = malloc((t.n_steps ? t.n_steps : 1) * sizeof *t1);
    if (!t0 || !t1) {
        guild_err_set(&err, "out of memory");
        goto out;
    }
    int32_t matching = 0;
    const int32_t n = choose_steps(&t, (int32_t)tokens, (int32_t)skip, (int32_t)max, t0, t1, &matching);
    if (n == 0) {
        guild_err_set(&err, "%s: no served forward pass of %ld row(s) past the first %ld (it has %d such, of %zu "
                      "step requests)", path, tokens, skip, matching, t.n_steps);
        goto out;
    }
    if (check_order(t0, t1, n, path, &err) < 0 ||
        prof_summarize(&sum, t.recs, t.n_recs, (const char *const *)t.names, t.n_names, t0, t1, n, &err) < 0)
        goto out;
    bench_print_provenance(stdout, argc, argv);
    printf("# " WHO ": %s (model %s, %d layers): %d step(s) of %ld row(s) after %ld skipped, of %d such and %zu "
           "step requests; %zu records\n", path, t.model ? t.model : "not named", (int)n_layer, (int)n, tokens,
           skip, (int)matching, t.n_steps, t.n_recs);
    if (t.dropped)
        printf("note: %llu records were dropped while tracing (buffers full, or the tracer's cap): the numbers "
               "below miss them\n", (unsigned long long)t.dropped);
    prof_summary_print(&sum, stdout);
    if (n_layer > 0)
        prof_summary_print_layer(&sum, n_layer, stdout);
    rc = 0;
out:
    if (rc)
        fprintf(stderr, WHO ": %s\n", err.msg);
    prof_summary_fini(&sum);
    prof_trace_fini(&t);
    free(t0);
    free(t1);
    return rc;
bad:
    fprintf(stderr, WHO ": %s\n", err.msg);
    return 2;
}
