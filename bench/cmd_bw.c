/* guild bench bw: the read-bandwidth probe per NUMA node and across all nodes. */
#include "config.h"

#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "bench/bw.h"
#include "core/topo/topo.h"
#include "core/util/cli.h"

#define MAX_CPUS 1024

static void usage(FILE *out)
{
    fprintf(out, "usage: guild bench bw [--gb G] [--passes N] [--threads K] [--piece BYTES] [--read R]\n"
                 "  --gb G         bytes read per pass, in GB (default 2; make it several times the LLC)\n"
                 "  --passes N     timed passes after one warm-up (default 5); the median is reported\n"
                 "  --threads K    threads per node (default: every usable CPU of the node)\n"
                 "  --piece BYTES  read as a CPU worker's threads split expert matrices: shared memory, pieces of\n"
                 "                 BYTES in a shuffled order, each thread one contiguous share of each (default 0:\n"
                 "                 each thread streams its own slice of private memory)\n"
                 "  --read R       plain (default: the loads alone, as the benchmarks' probes read) or ahead (with\n"
                 "                 the software prefetch the CPU workers' kernels stream weights with)\n");
}

/* Probes node `node` (-1: all nodes together, each thread reading memory of its own node), as shape says (the zero
 * shape is bench_read_bw's way). */
static int probe(int node, int threads_per_node, size_t bytes, int passes, const bench_bw_shape_t *shape,
                 bench_bw_t *res)
{
    static int cpus[MAX_CPUS], nodes[MAX_CPUS];
    int n = 0;
    for (int nd = 0; nd < topo_node_count(); nd++) {
        if (node >= 0 && nd != node)
            continue;
        int c = topo_node_cpus(nd, cpus + n, MAX_CPUS - n);
        if (threads_per_node > 0 && c > threads_per_node)
            c = threads_per_node;
        for (int i = 0; i < c; i++)
            nodes[n + i] = nd;
        n += c;
    }
    if (n == 0)
        return 0;
    guild_err_t err;
    bench_bw_probe_t *p = NULL;
    if (bench_bw_probe_new_as(&p, cpus, nodes, n, bytes, shape, &err) < 0 ||
        bench_bw_probe_run(p, passes, res, &err) < 0) {
        bench_bw_probe_destroy(&p);
        fprintf(stderr, "guild bench bw: %s\n", err.msg);
        return -1;
    }
    bench_bw_probe_destroy(&p);
    return n;
}

int bench_bw_main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"gb", required_argument, NULL, 'g'},
        {"passes", required_argument, NULL, 'p'},
        {"threads", required_argument, NULL, 't'},
        {"piece", required_argument, NULL, 'c'},
        {"read", required_argument, NULL, 'r'},
        {"help", no_argument, NULL, 'h'},
        {0, 0, 0, 0},
    };
    double gb = 2;
    int passes = 5, threads = 0, c;
    long piece = 0;
    bool ahead = false, bad = false;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'g': gb = atof(optarg); break;
        case 'p': passes = atoi(optarg); break;
        case 't': threads = atoi(optarg); break;
        case 'c': {
            guild_err_t e;
            if (cli_parse_long("--piece", optarg, 0, LONG_MAX, &piece, &e) < 0) {
                fprintf(stderr, "guild bench bw: %s\n", e.msg);
                bad = true;
            }
            break;
        }
        case 'r':
            ahead = !strcmp(optarg, "ahead");
            if (!ahead && strcmp(optarg, "plain")) {
                fprintf(stderr, "guild bench bw: --read %s: expected plain or ahead\n", optarg);
                bad = true;
            }
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (gb <= 0 || passes < 1 || threads < 0 || bad || optind != argc) {
        usage(stderr);
        return 2;
    }
    bench_print_provenance(stdout, argc, argv);
    size_t bytes = (size_t)(gb * 1e9);
    bench_bw_t res;
    const bench_bw_shape_t shape = {.shared = piece > 0, .piece = (size_t)piece, .ahead = ahead};
    int nodes = topo_node_count();
    for (int nd = 0; nd < nodes; nd++) {
        int n = probe(nd, threads, bytes, passes, &shape, &res);
        if (n < 0)
            return 1;
        if (n == 0) {
            printf("read node=%d threads=0 (no usable CPU on this node)\n", nd);
            continue;
        }
        printf("read node=%d threads=%d read=%s piece=%ld median_GBps=%.2f best_GBps=%.2f\n", nd, n,
               ahead ? "ahead" : "plain", piece, res.median_gbps,
               res.best_gbps);
    }
    if (nodes > 1) {
        int n = probe(-1, threads, bytes, passes, &shape, &res);
        if (n <= 0)
            return 1;
        printf("read node=all threads=%d read=%s piece=%ld median_GBps=%.2f best_GBps=%.2f\n", n,
               ahead ? "ahead" : "plain", piece, res.median_gbps, res.best_gbps);
    }
    return 0;
}
