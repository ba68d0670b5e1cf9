/* guild bench — benchmarks. `guild bench experts` (bench/experts.c): DRAM read bandwidth, then the routed-expert
 * pipeline on real expert shapes, one summary line per weight type. `guild bench bw`: the bandwidth probe
 * alone. `guild bench run` (bench/run.c): a whole model at populated contexts. `guild bench plot` (bench/plot.c): runs'
 * results drawn as an SVG. `guild bench sessions` (bench/sessions.c): concurrent sessions decoded together.
 * `guild bench pool` (bench/pool.c): several sessions calls' paired runs pooled per size. `guild bench route-predict`
 * (bench/cmd_route_predict.c): how well a layer's experts are predicted before its router runs. `guild bench trace`
 * (bench/trace_report.c): a GPU worker's trace (--gpu-prof) summed per kernel over its decode steps. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "bench/bench.h"
#include "bench/plot.h"
#include "coordinator/commands.h"

static const struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} benches[] = {
    {"experts", bench_experts_main, "routed-expert pipeline vs DRAM read bandwidth (decode and prefill)"},
    {"bw", bench_bw_main, "STREAM-like read bandwidth per NUMA node and of all nodes"},
    {"run", bench_run_main, "a model end to end: prefill and decode tok/s at populated contexts (JSON)"},
    {"plot", bench_plot_main, "guild bench run results as an SVG: tok/s against populated context"},
    {"sessions", bench_sessions_main, "aggregate decode tok/s of N sessions in batched steps, beside its limit"},
    {"pool", bench_pool_main, "guild bench sessions files of one build: their paired runs pooled per size"},
    {"route-predict", bench_route_predict_main, "how well next-layer pre-gating and the previous token predict experts"},
    {"trace", bench_trace_main, "a GPU trace (--gpu-prof FILE) summed per kernel over its decode steps"},
};

static void usage(FILE *out)
{
    fprintf(out, "usage: guild bench <benchmark> [options]   (guild bench <benchmark> --help)\n\nbenchmarks:\n");
    for (size_t i = 0; i < sizeof benches / sizeof benches[0]; i++)
        fprintf(out, "  %-10s %s\n", benches[i].name, benches[i].summary);
}

int cmd_bench(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof benches / sizeof benches[0]; i++)
        if (!strcmp(argv[1], benches[i].name))
            return benches[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "guild bench: unknown benchmark '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
