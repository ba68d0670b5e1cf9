/* guild-cuda-chain-bench — what a chain of dependent steps costs on the GPU, apart from what the steps compute
 * (issue 17: a decode layer is ~10 dependent kernels; how much of its time is the chain, and how much would a
 * persistent kernel with grid-wide barriers between its phases give back?).
 *
 * A modelled decode step of --layers x --phases dependent phases, each reading --kib KiB of its own weights and
 * the activation vector the phase before wrote (chain_kernels.h), run five ways, each captured in a CUDA graph:
 *   stream           one kernel reading all the step's weights, no dependency: the read rate's ceiling;
 *   kernels          a kernel a phase, in stream order;
 *   kernels+pdl      a kernel a phase with programmatic dependent launch, the weights read before the wait
 *                    (how the engine's decode step launches today);
 *   persistent/layer a cooperative kernel a layer, its phases separated by grid barriers, the next phase's
 *                    weights read before the barrier;
 *   persistent/step  one cooperative kernel for the whole step.
 * Every variant's final activation vector is checked against the scalar reference (chain_ref.c): a mismatch is
 * a failure (exit 1). Reported: the step's median over --reps graph replays, per phase, and the read rate. */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "bench/chain/chain_kernels.h"
#include "core/util/cli.h"
#include "core/util/clock.h"
#include "gpu-worker/dense/cuda/cuda_util.h"

#define MAX_SIZES 16
#define N_VARIANTS 5

static const char *const variant_name[N_VARIANTS] = {"stream", "kernels", "kernels+pdl", "persistent/layer",
                                                     "persistent/step"};

typedef struct chain_cfg {
    int32_t layers, phases, act, threads, blocks, reps;
    long kib[MAX_SIZES];
    int n_sizes;
} chain_cfg_t;

static void usage(FILE *f)
{
    fprintf(f, "usage: guild-cuda-chain-bench [options]\n"
               "  A modelled decode step of LAYERS x PHASES dependent phases on the GPU, as separate kernels, with\n"
               "  programmatic dependent launch, and as persistent kernels with grid barriers (issue 17).\n"
               "      --layers L      layers of the step (default 48)\n"
               "      --phases P      dependent phases a layer (default 10)\n"
               "      --kib LIST      KiB of weights each phase reads, comma-separated (default 0,256,1024,4096)\n"
               "      --act N         words of the activation vector each phase reads and writes (default 2048)\n"
               "      --threads T     threads a block (default 256)\n"
               "      --blocks G      blocks of every variant (default: the persistent kernel's resident grid)\n"
               "      --reps R        timed graph replays a variant (default 20; the median is reported)\n"
               "  -h, --help\n");
}

static int parse_sizes(const char *s, chain_cfg_t *c, guild_err_t *err)
{
    c->n_sizes = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (c->n_sizes == MAX_SIZES)
            return guild_err_set(err, "--kib: at most %d sizes", MAX_SIZES);
        if (cli_parse_long("--kib", t, 0, 1 << 20, &c->kib[c->n_sizes], err) < 0)
            return -1;
        c->n_sizes++;
    }
    return c->n_sizes ? 0 : guild_err_set(err, "--kib: no size in '%s'", s);
}

/* 0 to run, 1 when --help was printed, -1 on a usage error. */
static int parse(int argc, char **argv, chain_cfg_t *c, guild_err_t *err)
{
    *c = (chain_cfg_t){.layers = 48, .phases = 10, .act = 2048, .threads = 256, .reps = 20};
    if (parse_sizes("0,256,1024,4096", c, err) < 0)
        return -1;
    enum { O_LAYERS = 256, O_PHASES, O_KIB, O_ACT, O_THREADS, O_BLOCKS, O_REPS };
    static const struct option opts[] = {
        {"layers", required_argument, NULL, O_LAYERS}, {"phases", required_argument, NULL, O_PHASES},
        {"kib", required_argument, NULL, O_KIB},       {"act", required_argument, NULL, O_ACT},
        {"threads", required_argument, NULL, O_THREADS}, {"blocks", required_argument, NULL, O_BLOCKS},
        {"reps", required_argument, NULL, O_REPS},     {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    optind = 1;
    for (int o; (o = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
        long v = 0;
        switch (o) {
        case O_LAYERS:
        case O_PHASES:
        case O_ACT:
        case O_THREADS:
        case O_BLOCKS:
        case O_REPS: {
            const char *flag = o == O_LAYERS ? "--layers" : o == O_PHASES ? "--phases" : o == O_ACT ? "--act"
                             : o == O_THREADS ? "--threads" : o == O_BLOCKS ? "--blocks" : "--reps";
            const long lo = o == O_THREADS ? 32 : 1, hi = o == O_THREADS ? 1024 : o == O_ACT ? 1 << 20 : 100000;
            if (cli_parse_long(flag, optarg, lo, hi, &v, err) < 0)
                return -1;
            if (o == O_THREADS && v % 32)
                return guild_err_set(err, "--threads %ld: a multiple of 32", v);
            *(o == O_LAYERS ? &c->layers : o == O_PHASES ? &c->phases : o == O_ACT ? &c->act
              : o == O_THREADS ? &c->threads : o == O_BLOCKS ? &c->blocks : &c->reps) = (int32_t)v;
            break;
        }
        case O_KIB:
            if (parse_sizes(optarg, c, err) < 0)
                return -1;
            break;
        case 'h':
            usage(stdout);
            return 1;
        default:
            return guild_err_set(err, "unknown option (see --help)");
        }
    }
    if (optind < argc)
        return guild_err_set(err, "unexpected argument '%s'", argv[optind]);
    return 0;
}

/* Enqueues variant v of the step on s. */
static int enqueue(int v, const chain_args_t *a, uint32_t *sink, cudaStream_t s, guild_err_t *err)
{
    switch (v) {
    case 0:
        return chain_launch_stream(a->w, (size_t)a->layers * a->phases * a->words, a->blocks, a->threads, sink, s,
                                   err);
    case 1:
    case 2:
        return chain_launch_kernels(a, v == 2, s, err);
    default:
        return chain_launch_persistent(a, v == 4, s, err);
    }
}

typedef struct timing {
    double step_us;
    int graph;   /* 1: replays of a captured graph; 0: the launches themselves (the capture was refused) */
    int checked; /* 1: the final vector equals the reference; 0: mismatch; -1: not checked (stream) */
} timing_t;

/* One variant: its result against ref (act words), then reps timed replays. */
static int run_variant(int v, const chain_args_t *a, const uint32_t *ref, uint32_t *host, uint32_t *sink,
                       cudaStream_t s, int reps, timing_t *t, guild_err_t *err)
{
    int rc = -1;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    double *ms = calloc((size_t)reps, sizeof *ms);
    if (!ms)
        return guild_err_set(err, "out of memory");
    t->graph = 0;
    if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
        guild_err_t e2 = {0};
        int st = enqueue(v, a, sink, s, &e2);
        cudaError_t ce = cudaStreamEndCapture(s, &graph);
        if (st == 0 && ce == cudaSuccess && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess)
            t->graph = 1;
        (void)cudaGetLastError(); /* a refused capture is not an error: the launches are timed instead */
    }
    if (cuda_check(cudaMemsetAsync(a->vec, 0, 2 * (size_t)a->act * sizeof *a->vec, s), "reset", err) < 0 ||
        cuda_check(cudaMemsetAsync(a->barrier, 0, CHAIN_BARRIER_WORDS * sizeof *a->barrier, s), "reset", err) < 0)
        goto out;
    if (t->graph ? cuda_check(cudaGraphLaunch(exec, s), "graph launch", err) : enqueue(v, a, sink, s, err))
        goto out;
    const int64_t n = (int64_t)a->layers * a->phases;
    if (cuda_check(cudaMemcpyAsync(host, a->vec + (size_t)(n % 2) * a->act, (size_t)a->act * sizeof *host,
                                   cudaMemcpyDeviceToHost, s), "result", err) < 0 ||
        cuda_check(cudaStreamSynchronize(s), "first run", err) < 0)
        goto out;
    t->checked = v == 0 ? -1 : memcmp(host, ref, (size_t)a->act * sizeof *host) == 0;
    if (cuda_check(cudaEventCreate(&e0), "event", err) < 0 || cuda_check(cudaEventCreate(&e1), "event", err) < 0)
        goto out;
    for (int r = -3; r < reps; r++) { /* 3 warm-up replays */
        if (cuda_check(cudaEventRecord(e0, s), "event", err) < 0 ||
            (t->graph ? cuda_check(cudaGraphLaunch(exec, s), "graph launch", err) : enqueue(v, a, sink, s, err)) ||
            cuda_check(cudaEventRecord(e1, s), "event", err) < 0 ||
            cuda_check(cudaEventSynchronize(e1), "replay", err) < 0)
            goto out;
        float elapsed;
        if (r >= 0) {
            if (cuda_check(cudaEventElapsedTime(&elapsed, e0, e1), "elapsed", err) < 0)
                goto out;
            ms[r] = elapsed;
        }
    }
    t->step_us = 1e3 * guild_median(ms, reps);
    rc = 0;
out:
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    if (exec)
        cudaGraphExecDestroy(exec);
    if (graph)
        cudaGraphDestroy(graph);
    free(ms);
    return rc;
}

static int run(const chain_cfg_t *c, int *mismatches, guild_err_t *err)
{
    int rc = -1;
    char why[256];
    if (cuda_device_count(why, sizeof why) < 1)
        return guild_err_set(err, "no CUDA device: %s", why);
    int dev = 0;
    struct cudaDeviceProp prop;
    if (cuda_check(cudaGetDeviceProperties(&prop, dev), "device properties", err) < 0)
        return -1;
    int32_t resident = 0;
    if (chain_persistent_blocks(dev, c->threads, &resident, err) < 0)
        return -1;
    const int32_t blocks = c->blocks ? c->blocks : resident;
    if (blocks > resident)
        return guild_err_set(err, "--blocks %d: the persistent kernel keeps at most %d blocks of %d threads resident",
                             blocks, resident, c->threads);
    long kib_max = 0;
    for (int i = 0; i < c->n_sizes; i++)
        kib_max = c->kib[i] > kib_max ? c->kib[i] : kib_max;
    const size_t words_max = (size_t)c->layers * c->phases * (size_t)kib_max * 256;
    uint32_t *w = NULL, *vec = NULL, *bar = NULL, *sink = NULL, *host = NULL, *ref = NULL, *scratch = NULL;
    cudaStream_t s = NULL;
    host = malloc((size_t)c->act * sizeof *host);
    ref = malloc((size_t)c->act * sizeof *ref);
    scratch = malloc((size_t)c->act * sizeof *scratch);
    if (!host || !ref || !scratch) {
        guild_err_set(err, "out of memory");
        goto out;
    }
    if (cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream", err) < 0 ||
        cuda_check(cudaMalloc((void **)&w, words_max ? words_max * 4 : 16), "weights", err) < 0 ||
        cuda_check(cudaMalloc((void **)&vec, 2 * (size_t)c->act * 4), "vectors", err) < 0 ||
        cuda_check(cudaMalloc((void **)&bar, CHAIN_BARRIER_WORDS * 4), "barrier", err) < 0 ||
        cuda_check(cudaMalloc((void **)&sink, 4), "sink", err) < 0 ||
        chain_fill(w, words_max, vec, c->act, bar, s, err) < 0 ||
        cuda_check(cudaStreamSynchronize(s), "fill", err) < 0)
        goto out;
    printf("# device: %s, %d SMs; %d blocks of %d threads in every variant (the persistent kernel's resident grid: "
           "%d)\n# step: %d layers x %d phases; activation %d words; median of %d replays after 3\n",
           prop.name, prop.multiProcessorCount, blocks, c->threads, resident, c->layers, c->phases, c->act, c->reps);
    printf("%10s %-17s %12s %10s %9s %10s %s\n", "KiB/phase", "variant", "step us", "us/phase", "GB/s", "launch",
           "result");
    for (int i = 0; i < c->n_sizes; i++) {
        chain_args_t a = {.w = w, .vec = vec, .barrier = bar, .layers = c->layers, .phases = c->phases,
                          .words = (size_t)c->kib[i] * 256, .act = c->act, .blocks = blocks, .threads = c->threads};
        chain_reference(&a, ref, scratch);
        const double bytes = (double)c->layers * c->phases * (double)a.words * 4;
        for (int v = 0; v < N_VARIANTS; v++) {
            if (v == 0 && a.words == 0)
                continue;
            timing_t t = {0};
            if (run_variant(v, &a, ref, host, sink, s, c->reps, &t, err) < 0) {
                guild_err_prefix(err, "%s at %ld KiB", variant_name[v], c->kib[i]);
                goto out;
            }
            if (t.checked == 0)
                (*mismatches)++;
            printf("%10ld %-17s %12.1f %10.3f %9.1f %10s %s\n", c->kib[i], variant_name[v], t.step_us,
                   t.step_us / ((double)c->layers * c->phases), bytes / (t.step_us * 1e3),
                   t.graph ? "graph" : "direct",
                   t.checked < 0 ? "-" : t.checked ? "= reference" : "MISMATCH");
            fflush(stdout);
        }
    }
    rc = 0;
out:
    cudaFree(w);
    cudaFree(vec);
    cudaFree(bar);
    cudaFree(sink);
    if (s)
        cudaStreamDestroy(s);
    free(host);
    free(ref);
    free(scratch);
    return rc;
}

int main(int argc, char **argv)
{
    guild_err_t err = {0};
    chain_cfg_t c;
    int p = parse(argc, argv, &c, &err);
    if (p == 1)
        return 0;
    if (p < 0) {
        fprintf(stderr, "guild-cuda-chain-bench: %s\n", err.msg);
        return 2;
    }
    int mismatches = 0;
    if (run(&c, &mismatches, &err) < 0) {
        fprintf(stderr, "guild-cuda-chain-bench: %s\n", err.msg);
        return 1;
    }
    if (mismatches) {
        fprintf(stderr, "guild-cuda-chain-bench: %d variant(s) differ from the scalar reference\n", mismatches);
        return 1;
    }
    return 0;
}
