/* guild bench sessions — aggregate decode throughput of N concurrent sessions decoded together (backend_forward_seq:
 * one forward pass a step over every session's next token, each session its own KV cache), for each N of a list
 * (default 1,2,4,8,16), beside the limit of such a step.
 *
 * A batched step reads each distinct routed expert once, whatever the number of its sessions' rows routed to it:
 * the step's cost is the dense part plus the distinct experts' bytes, read from DRAM for the experts the CPU side
 * holds. So per N this prints the distinct experts per layer and step (counted from the backend's routing counters
 * over a few extra steps after the timed ones, split into the GPU-resident ones and the CPU side's), and the step
 * limit they imply: the dense step, plus the GPU-resident distinct experts' bytes beyond the smallest N's at the
 * device's copy rate (they are read once a step from device memory, more of them with more sessions), plus the
 * CPU side's distinct expert bytes over the DRAM read probe (below), whoever reads them (the CPU workers, or the
 * copies of experts streamed to the device for a batch); the dense step is the smallest N's step less its wait
 * for the routed experts (the device's own work: larger batches only add to it, so the limit is an upper bound). Aggregate tok/s is N / step time, its limit N / limit
 * step. A second, bytes-only limit (every read at its memory's bandwidth: dense weights, KV and resident experts at
 * the device's copy rate) is printed beside it.
 *
 * Every session's prompt is `prompt` tokens of its own fixed LCG draw, prefilled alone once (a later size cuts the
 * cache of a session it shares with an earlier one back to the prompt and starts again from the same first token),
 * then all decode greedily: one warm-up step, `repeat` timed runs of `gen` steps, each after an untimed step (the
 * step's time and wait are the runs' medians, their spread printed), and the counting steps.
 *
 * The limit's rate is the best the CPU workers could read their experts at, probed the way they read them: as
 * many threads as the workers run, pinned to the same CPUs (pipeline_worker_threads), over shared memory of the
 * pages their expert stores get without a hugetlb pool (transparent huge pages where the kernel gives them to
 * shared memory, else 4 KiB), several times any last-level cache (--probe-gb), each thread reading one contiguous
 * share of every expert-matrix-sized piece in a shuffled order (bench_bw_shape_t), with no wait between pieces (the
 * workers' hand-offs between layers are theirs to cut, not the memory's). One process: every CPU streaming its
 * own slice (the executor's threads are not pinned). Every CPU streaming is probed once at the start too, for
 * comparison. The rate changes phase within seconds on a shared machine, so it is measured where the runs are: `probes`
 * probes (a flank) right before each timed run and after the last (the workers idle between steps), so that every run
 * lies between two flanks (probe, run, probe, run, ..., probe), as well as once before the workers start. Each run is
 * held against the limit at its own flanks (bench/paired.h: their mean, bracketed by the higher and the lower; a run
 * whose flanks disagree saw a phase change, one whose reads outran both flanks shows the probe bounds nothing: both are
 * left out), and the size's paired fraction is the median of the others'. A size's own limit takes the median of all
 * its probes; the strict limit takes the highest probe of the whole run (the rate the machine showed it can give).
 * Beside them, the rate the workers' reads reached: the CPU side's distinct expert bytes over the step's wait (a lower
 * bound: the wait holds the exchange's hand-offs too). --dram-gbs fixes the rate instead (no probes; every flank is
 * that rate).
 *
 * The model runs as `guild run` runs it (coordinator/backend_stack.h), with n_seq = the largest N. A table on
 * stdout, each size followed by where its step's time went (the GPU worker's step requests and its time in them,
 * the experts streamed to the device, the graph replays) and its runs between their probes; then the paired
 * fractions and the fractions at the strict limit; with --json, the same with provenance and every probe. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench.h"
#include "bench/bw.h"
#include "bench/paired.h"
#include "bench/paired_json.h"
#include "coordinator/backend_stack.h"
#include "coordinator/pipeline.h"
#include "coordinator/remote_backend.h"
#include "coordinator/stack_flags.h"
#include "coordinator/stack_plan.h"
#include "core/model/model.h"
#include "core/topo/topo.h"
#include "core/util/cli.h"
#include "core/util/clock.h"
#include "core/util/log.h"
#include "gpu-worker/dense/gpu_plan.h"
#ifdef GUILD_HAVE_CUDA
#include "gpu-worker/dense/cuda/cuda_probe.h"
#endif

#define MAX_SIZES 16
#define MAX_SESSIONS 256
#define MAX_CPUS 1024
#define COUNT_STEPS 8 /* steps after the timed ones whose routing is counted */
#define MAX_REPEAT 15
#define MAX_PROBES 8             /* probes at each flank of a timed run */
#define PROBE_PASSES 5           /* a probe's rate: the median of its passes */

enum {
    SESSIONS_STACK_FLAGS = STACK_FLAG_SINGLE | STACK_FLAG_THREADS | STACK_FLAG_CPU_WORKERS | STACK_FLAG_BACKEND |
                           STACK_FLAG_GPU_MEM | STACK_FLAG_GPU_EXPERTS | STACK_FLAG_NO_GRAPH | STACK_FLAG_CUDA_OFF |
                           STACK_FLAG_STAGER | STACK_FLAG_STAGER_THREADS | STACK_FLAG_SPIN_US | STACK_FLAG_MLOCK |
                           STACK_FLAG_HUGE_PAGES | STACK_FLAG_EXPERT_LAYOUT | STACK_FLAG_ROUTING | STACK_FLAG_KV_TYPE |
                           STACK_FLAG_CPU_NODES | STACK_FLAG_PREFETCH_EXPERTS | STACK_FLAG_GPU_PROF,
};

#define DEFAULT_BACKEND "auto" /* stack_flags_check resolves it */

typedef struct sess_cfg {
    const char *model, *json, *commit;
    int32_t sizes[MAX_SIZES];
    int n_sizes;
    int32_t prompt, gen, batch, repeat, probes;
    double dram_gbps, probe_gb;
    double flank_tol, target; /* --flank-tol, --target as fractions */
    bool verbose;
    stack_options_t flags;
    int argc;
    char **argv;
} sess_cfg_t;

/* One size's results. */
typedef struct sess_result {
    int32_t n;
    double prefill_s;                   /* the prefill of the sessions this size adds */
    double step_s, wait_s;              /* a decode step's time and its wait for the routed experts (run medians) */
    double step_min_s, step_max_s;      /* the spread of the runs' mean steps */
    double runs_step_s[MAX_REPEAT];     /* [repeat] each run's mean step */
    double runs_wait_s[MAX_REPEAT];     /* [repeat] each run's mean wait */
    double runs_early_bytes[MAX_REPEAT]; /* [repeat] a step's expert bytes the CPU workers read before its wait:
                                            their prefetch's bytes (--prefetch-experts) times its hit rate */
    double probes_gbps[(MAX_REPEAT + 1) * MAX_PROBES]; /* [n_probes] DRAM read probes, in their order */
    int n_probes;
    double flanks_gbps[MAX_REPEAT + 1]; /* [repeat + 1] the rate before run k and after run k - 1: the median of
                                           that flank's probes (--dram-gbs: that rate) */
    paired_run_t paired[MAX_REPEAT];    /* [repeat] each run against the limit at its flanks */
    paired_summary_t pair;              /* the runs together, against --target */
    double dram_gbps;                   /* the median of this size's probes (or --dram-gbs): its own limit's rate */
    double distinct_cpu, distinct_gpu;  /* distinct experts a step, per layer (mean), on each side */
    double cpu_bytes, gpu_bytes;        /* a step's reads: the CPU side's distinct experts; dense, KV, resident */
    double wait_gbps;                   /* cpu_bytes over wait_s: the rate the workers' reads reached */
    double dense_step_s;                /* the smallest N's step less its wait (the limit's dense part) */
    double gpu_expert_bytes;            /* a step's reads of GPU-resident distinct experts */
    double gpu_extra_s;                 /* the GPU-resident distinct experts' bytes beyond the smallest N's, at the
                                           device's copy rate (the dense step holds the smallest N's) */
    double limit_step_s, bytes_step_s;  /* the limits' step times, at this size's own DRAM rate */
    double strict_step_s;               /* the limit's step at the run's highest probe */
    paired_limit_t lim;                 /* the limit at any rate: dense step + GPU extra, the CPU side's bytes */
    double out_extra_s;                 /* the step outside the wait beyond dense_step_s + gpu_extra_s */
    /* where a step's time went, per step over the timed ones: multi-process, the step requests the GPU worker
     * answered and its time in them (the rest is the coordinator's: the request's round trip, the logits copied
     * out, the argmax); every mode, the experts streamed to the device (layers, bytes, streamed passes) and,
     * single process, the steps replayed from a CUDA graph */
    double requests, forward_s, streamed_layers, streamed_bytes, stream_passes, graph_steps;
} sess_result_t;

/* The counters a size's timed steps are measured by (their differences). */
typedef struct sess_counters {
    double wait_s;     /* waiting for the routed experts (the GPU worker's device wait, or the local executor's) */
    double forward_s;  /* multi-process: the GPU worker's time in forward passes; else 0 */
    uint64_t requests; /* multi-process: step requests answered; else 0 */
    backend_stats_t bs;
} sess_counters_t;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: guild bench sessions -m FILE [options]\n"
            "  -m, --model FILE        GGUF model\n"
            "      --sessions LIST     concurrent sessions decoded together (default 1,2,4,8,16)\n"
            "      --prompt N          tokens of each session's prompt (default 128)\n"
            "      --gen N             decode steps a timed run (default 32)\n"
            "      --repeat N          timed runs a size, medians reported (default 3, at most 15)\n"
            "      --probes N          DRAM read probes right before each timed run and after the last: each run\n"
            "                          between two flanks (default 1 a flank, at most 8)\n"
            "      --probe-gb G        bytes a probe's pass reads, in GB (default 4: several times any cache)\n"
            "      --flank-tol PCT     a run whose flanks differ by more than PCT%% saw a phase change and is left\n"
            "                          out of the paired fractions (default 10)\n"
            "      --target PCT        the fraction of the limit each size is judged against (default 90)\n"
            STACK_FLAGS_BATCH_HELP);
    stack_flags_usage(out, SESSIONS_STACK_FLAGS, DEFAULT_BACKEND);
    fprintf(out,
            "      --dram-gbs X        DRAM read bandwidth in GB/s for the limits (default: measured)\n"
            "      --json FILE         write the results with provenance\n"
            "      --commit ID         the source commit, when the binary runs away from its git checkout\n"
            "  -v, --verbose           the backend's and the workers' messages on stderr\n"
            "  -h, --help              this help\n");
}

static int parse_list(const char *arg, int32_t *out, int max, int *n)
{
    *n = 0;
    for (const char *s = arg;;) {
        char *end;
        errno = 0;
        const long v = strtol(s, &end, 10);
        if (errno || end == s || v < 1 || v > MAX_SESSIONS || *n == max || (*end && *end != ','))
            return -1;
        out[(*n)++] = (int32_t)v;
        if (!*end)
            return 0;
        s = end + 1;
    }
}

static int parse_args(int argc, char **argv, sess_cfg_t *c)
{
    enum {
        O_SESS = 256, O_PROMPT, O_GEN, O_BATCH, O_DRAM, O_JSON, O_COMMIT, O_REPEAT, O_PROBES, O_PROBE_GB, O_FLANK_TOL,
        O_TARGET,
    };
    static const struct option own[] = {
        {"model", required_argument, NULL, 'm'},     {"sessions", required_argument, NULL, O_SESS},
        {"prompt", required_argument, NULL, O_PROMPT}, {"gen", required_argument, NULL, O_GEN},
        {"batch", required_argument, NULL, O_BATCH}, {"dram-gbs", required_argument, NULL, O_DRAM},
        {"json", required_argument, NULL, O_JSON},   {"commit", required_argument, NULL, O_COMMIT},
        {"repeat", required_argument, NULL, O_REPEAT}, {"probes", required_argument, NULL, O_PROBES},
        {"probe-gb", required_argument, NULL, O_PROBE_GB}, {"flank-tol", required_argument, NULL, O_FLANK_TOL},
        {"target", required_argument, NULL, O_TARGET},
        {"verbose", no_argument, NULL, 'v'},         {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct option opts[64];
    stack_flags_options(opts, sizeof opts / sizeof opts[0], own, SESSIONS_STACK_FLAGS);
    memset(c, 0, sizeof *c);
    static const int32_t sizes[] = {1, 2, 4, 8, 16};
    memcpy(c->sizes, sizes, sizeof sizes);
    c->n_sizes = 5;
    c->prompt = 128;
    c->gen = 32;
    c->repeat = 3;
    c->probes = 1;
    c->probe_gb = 4;
    c->flank_tol = 0.10;
    c->target = 0.90;
    c->argc = argc;
    c->argv = argv;
    long cpus = topo_all_cpus((int[MAX_CPUS]){0}, MAX_CPUS);
    stack_options_init(&c->flags);
    c->flags.gpu.backend = DEFAULT_BACKEND;
    c->flags.n_threads = cpus > 0 ? (int)cpus : 1;
    guild_err_t e = {{0}};
    int o, sf;
    long v;
    optind = 1;
    opterr = 0;
    while ((o = getopt_long(argc, argv, "m:vh", opts, NULL)) != -1) {
        if ((sf = stack_flags_parse(&c->flags, o, optarg, &e)) != 0) {
            if (sf < 0)
                goto bad;
            continue;
        }
        switch (o) {
        case 'm': c->model = optarg; break;
        case O_SESS:
            if (parse_list(optarg, c->sizes, MAX_SIZES, &c->n_sizes) < 0) {
                guild_err_set(&e, "--sessions %s: expected up to %d counts of 1..%d such as 1,2,4,8,16", optarg,
                              MAX_SIZES, MAX_SESSIONS);
                goto bad;
            }
            break;
        case O_PROMPT:
            if (cli_parse_long("--prompt", optarg, 1, 1 << 20, &v, &e) < 0)
                goto bad;
            c->prompt = (int32_t)v;
            break;
        case O_GEN:
            if (cli_parse_long("--gen", optarg, 1, 1 << 20, &v, &e) < 0)
                goto bad;
            c->gen = (int32_t)v;
            break;
        case O_REPEAT:
            if (cli_parse_long("--repeat", optarg, 1, MAX_REPEAT, &v, &e) < 0)
                goto bad;
            c->repeat = (int32_t)v;
            break;
        case O_PROBES:
            if (cli_parse_long("--probes", optarg, 1, MAX_PROBES, &v, &e) < 0)
                goto bad;
            c->probes = (int32_t)v;
            break;
        case O_PROBE_GB:
            if (!((c->probe_gb = atof(optarg)) >= 0.001 && c->probe_gb <= 1024)) {
                guild_err_set(&e, "--probe-gb %s: expected 0.001 .. 1024", optarg);
                goto bad;
            }
            break;
        case O_FLANK_TOL:
            if (!((c->flank_tol = atof(optarg) / 100) > 0 && c->flank_tol <= 10)) {
                guild_err_set(&e, "--flank-tol %s: expected a percentage above 0, at most 1000", optarg);
                goto bad;
            }
            break;
        case O_TARGET:
            if (!((c->target = atof(optarg) / 100) > 0 && c->target <= 1)) {
                guild_err_set(&e, "--target %s: expected a percentage above 0, at most 100", optarg);
                goto bad;
            }
            break;
        case O_BATCH: if (stack_flags_parse_batch(optarg, &c->batch, &e) < 0) goto bad; break;
        case O_DRAM:
            if ((c->dram_gbps = atof(optarg)) <= 0) {
                guild_err_set(&e, "--dram-gbs %s: expected a rate in GB/s above 0", optarg);
                goto bad;
            }
            break;
        case O_JSON: c->json = optarg; break;
        case O_COMMIT: c->commit = optarg; break;
        case 'v': c->verbose = true; break;
        case 'h': usage(stdout); return 1;
        default:
            fprintf(stderr, "guild bench sessions: unknown option or missing value: %s\n", argv[optind - 1]);
            usage(stderr);
            return -1;
        }
    }
    for (int i = 1; i < c->n_sizes; i++) /* ascending: the smallest gives the limit's dense step */
        for (int j = i; j > 0 && c->sizes[j - 1] > c->sizes[j]; j--) {
            const int32_t x = c->sizes[j];
            c->sizes[j] = c->sizes[j - 1];
            c->sizes[j - 1] = x;
        }
    if (!c->model || optind < argc) {
        fprintf(stderr, "guild bench sessions: %s\n", c->model ? "unexpected argument" : "no model: give -m FILE.gguf");
        usage(stderr);
        return -1;
    }
    if (stack_flags_check(&c->flags, SESSIONS_STACK_FLAGS, NULL, false, &e) < 0)
        goto bad;
    return 0;
bad:
    fprintf(stderr, "guild bench sessions: %s\n", e.msg);
    return -1;
}

static double tensor_bytes(const model_tensor_t *t)
{
    return t->data ? (double)t->mat_bytes * (double)(t->ne[2] ? t->ne[2] : 1) : 0;
}

/* The dense weights a step reads (once, whatever its rows): one embedding row a row aside, every matrix but the
 * routed experts'. */
static double dense_bytes(const model_t *m)
{
    const model_config_t *c = model_config(m);
    const model_weights_t *w = model_weights(m);
    double b = tensor_bytes(&w->output_norm) +
               (w->output.data != w->token_embd.data ? tensor_bytes(&w->output) : tensor_bytes(&w->token_embd));
    for (int32_t il = 0; il < c->n_layer; il++) {
        const model_layer_t *L = &w->layers[il];
#define DENSE(name, kind) tensor_bytes(&L->name) +
        b += MODEL_LAYER_DENSE_TENSORS(DENSE) 0.0;
#undef DENSE
    }
    return b;
}

/* The routing counters (per layer and expert) of the stack's backend; -1 when it keeps none. */
static int routing(backend_t *be, uint64_t *counts)
{
    return backend_routing(be, counts);
}

/* The counters so far: the wait for the routed experts as bench run counts it (the GPU worker's in the
 * multi-process mode, every request; the local executor's wait in a single process), the GPU worker's requests and
 * forward time, the backend's streaming and graph counters. */
static void counters(backend_t *be, const moe_exec_t *experts, sess_counters_t *c)
{
    memset(c, 0, sizeof *c);
    if (backend_stats(be, &c->bs) < 0)
        memset(&c->bs, 0, sizeof c->bs);
    if (!experts) {
        remote_stats_t rs;
        remote_backend_stats(be, &rs);
        c->wait_s = (double)rs.moe_ns * 1e-9;
        c->forward_s = (double)rs.forward_ns * 1e-9;
        c->requests = rs.requests;
        return;
    }
    moe_exec_stats_t es;
    moe_exec_stats(experts, &es);
    c->wait_s = (double)es.wait_ns * 1e-9;
}

/* The limit's probe (the file's comment says how it reads): *pb, described in desc[n]. -1 with err. */
static int probe_new(const sess_cfg_t *c, const model_t *m, const stack_plan_t *sp, bench_bw_probe_t **pb, char *desc,
                     size_t n, guild_err_t *err)
{
    const size_t bytes = (size_t)(c->probe_gb * 1e9);
    if (c->flags.single_process) {
        if (bench_bw_probe_new_machine(pb, bytes, err) < 0)
            return -1;
        snprintf(desc, n, "one process: every CPU streaming, %d threads, %s pages, %.2f GB a pass",
                 bench_bw_probe_threads(*pb), bench_bw_probe_pages(*pb), (double)bench_bw_probe_bytes(*pb) / 1e9);
        return 0;
    }
    static int cpus[MAX_CPUS], nodes[MAX_CPUS];
    const int nt = pipeline_worker_threads(m, &c->flags, sp, cpus, nodes, MAX_CPUS, err);
    if (nt < 0)
        return -1;
    /* a piece: one expert matrix of the first layer with routed experts (the workers split each matrix's rows) */
    const model_config_t *mc = model_config(m);
    const model_weights_t *w = model_weights(m);
    size_t piece = 0;
    for (int32_t il = 0; il < mc->n_layer && !piece; il++) {
        const model_layer_t *L = &w->layers[il];
        if (L->gate_exps.data && L->down_exps.data)
            piece = (size_t)(L->gate_exps.mat_bytes + L->up_exps.mat_bytes + L->down_exps.mat_bytes) / 3;
    }
    if (piece < 256 * (size_t)nt) /* tiny models: a piece of 256 bytes a thread */
        piece = 256 * (size_t)nt;
    const size_t slice = (bytes / (size_t)nt) & ~(size_t)4095; /* bench_bw_probe_new_as's */
    if (piece > slice && slice >= 256 * (size_t)nt) /* a small --probe-gb: a piece a thread's slice */
        piece = slice;
    if (bench_bw_probe_new_as(pb, cpus, nodes, nt, bytes, &(bench_bw_shape_t){.shared = true, .piece = piece},
                              err) < 0)
        return -1;
    int len = snprintf(desc, n, "as the CPU workers read: %d threads on CPUs ", nt);
    for (int i = 0; i < nt && len > 0 && (size_t)len + 16 < n; i++) {
        int j = i;
        while (j + 1 < nt && cpus[j + 1] == cpus[j] + 1 && cpus[i] >= 0)
            j++;
        len += j > i ? snprintf(desc + len, n - (size_t)len, "%s%d-%d", i ? "," : "", cpus[i], cpus[j])
                     : snprintf(desc + len, n - (size_t)len, "%s%d", i ? "," : "", cpus[i]);
        i = j;
    }
    if (len > 0 && (size_t)len < n)
        snprintf(desc + len, n - (size_t)len, ", shared memory of %s pages, pieces of %.3f MB (%s) in a "
                 "shuffled order, %.2f GB a pass", bench_bw_probe_pages(*pb), (double)(piece & ~(size_t)255) / 1e6,
                 piece == slice ? "a thread's slice: --probe-gb is small" : "an expert matrix",
                 (double)bench_bw_probe_bytes(*pb) / 1e9);
    return 0;
}

/* Flank f of r's runs (before run f, after run f - 1): k probes of the DRAM read rate appended to r's, their median
 * the flank's rate. -1 with err. */
static int probe_flank(bench_bw_probe_t *pb, int k, int f, sess_result_t *r, guild_err_t *err)
{
    double v[MAX_PROBES];
    for (int i = 0; i < k; i++) {
        bench_bw_t bw;
        if (bench_bw_probe_run(pb, PROBE_PASSES, &bw, err) < 0)
            return -1;
        r->probes_gbps[r->n_probes++] = v[i] = bw.median_gbps;
    }
    r->flanks_gbps[f] = guild_median(v, k);
    return 0;
}

/* Session s's prompt into its cache, tok0[s] its first greedy token; a session prefilled at an earlier size
 * (s < *prefilled) is cut back to its prompt instead, where its backend can (a recurrent state may not go back:
 * then it is prefilled again). -1 with err. */
static int prefill(const sess_cfg_t *c, backend_t *be, int32_t s, int32_t V, int32_t *prefilled, int32_t *tok0,
                   int32_t *prompt, int32_t *seq, int32_t *pos, float *logits, guild_err_t *err)
{
    const int32_t NB = c->batch;
    if (s < *prefilled) {
        backend_seq_kv_truncate(be, s, c->prompt);
        if (backend_seq_kv_len(be, s) == c->prompt)
            return 0;
    }
    backend_seq_kv_truncate(be, s, 0);
    uint64_t lcg = 0x9e3779b97f4a7c15ull ^ ((uint64_t)s * 0x632be59bd9b4e019ull);
    for (int32_t i = 0; i < c->prompt; i++) {
        lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
        prompt[i] = (int32_t)((lcg >> 33) % (uint64_t)V);
    }
    for (int32_t p = 0; p < c->prompt; p += NB) {
        const int32_t k = c->prompt - p < NB ? c->prompt - p : NB, last = k - 1;
        for (int32_t i = 0; i < k; i++) {
            seq[i] = s;
            pos[i] = p + i;
        }
        const bool final = p + k == c->prompt;
        if (backend_forward_seq(be, k, prompt + p, seq, pos, final ? 1 : 0, &last, logits, err) < 0)
            return guild_err_prefix(err, "session %d prefill at %d: ", s, p);
    }
    tok0[s] = bench_argmax(logits, V);
    if (s >= *prefilled)
        *prefilled = s + 1;
    return 0;
}

/* dense_step: the limit's dense step, or < 0 for this run's own (the smallest N's, run first); gpu_bytes0: that
 * size's GPU-resident distinct expert bytes (ignored when dense_step < 0). pb: the DRAM probe
 * (NULL: c->dram_gbps). prefilled, tok0: the sessions prefilled so far and their first tokens (prefill()). */
static int run_size(const sess_cfg_t *c, const model_t *m, backend_t *be, const moe_exec_t *experts,
                    const gpu_plan_t *plan, int32_t n, bench_bw_probe_t *pb, double hbm, double dense_step,
                    double gpu_bytes0,
                    int32_t *prefilled, int32_t *tok0, sess_result_t *r, guild_err_t *err)
{
    const model_config_t *mc = model_config(m);
    const model_weights_t *w = model_weights(m);
    const int32_t V = mc->n_vocab, NB = c->batch;
    const size_t LN = (size_t)mc->n_layer * (size_t)mc->n_expert;
    float *logits = malloc((size_t)(n > NB ? n : NB) * (size_t)V * sizeof *logits);
    int32_t *buf = malloc((size_t)(5 * (n > NB ? n : NB) + c->prompt) * sizeof *buf);
    uint64_t *c0 = calloc(LN ? LN : 1, sizeof *c0), *c1 = calloc(LN ? LN : 1, sizeof *c1);
    double waits[MAX_REPEAT], fwd[MAX_REPEAT], steps[MAX_REPEAT];
    int rc = -1;
    memset(r, 0, sizeof *r);
    r->n = n;
    if (!logits || !buf || !c0 || !c1) {
        guild_err_set(err, "out of memory");
        goto out;
    }
    int32_t *tok = buf, *seq = tok + (n > NB ? n : NB), *pos = seq + (n > NB ? n : NB);
    int32_t *rows = pos + (n > NB ? n : NB), *prompt = rows + (n > NB ? n : NB);
    /* each session's prompt, alone */
    const double t0 = guild_clock_s();
    for (int32_t s = 0; s < n; s++) {
        if (prefill(c, be, s, V, prefilled, tok0, prompt, seq, pos, logits, err) < 0)
            goto out;
        tok[s] = tok0[s];
    }
    r->prefill_s = guild_clock_s() - t0;
    if (bench_decode_step(be, n, tok, seq, pos, rows, logits, V, err) < 0) /* warm-up (a graph captured, if any) */
        goto out;
    sess_counters_t k0, k1;
    double requests = 0, streamed_layers = 0, streamed_bytes = 0, stream_passes = 0, graph_steps = 0;
    for (int32_t k = 0; k < c->repeat; k++) {
        /* each run between two flanks: the probe right before it (the one after it is the next run's before) and
         * an untimed step, so that the run starts with the workers awake as between steps, not from the probe's
         * idle; the probes would else time the workers' wake-up into the first step */
        if (pb && probe_flank(pb, c->probes, k, r, err) < 0)
            goto out;
        if (bench_decode_step(be, n, tok, seq, pos, rows, logits, V, err) < 0)
            goto out;
        counters(be, experts, &k0);
        const double t1 = guild_clock_s();
        for (int32_t g = 0; g < c->gen; g++)
            if (bench_decode_step(be, n, tok, seq, pos, rows, logits, V, err) < 0)
                goto out;
        const double dt = guild_clock_s() - t1;
        counters(be, experts, &k1);
        r->runs_step_s[k] = steps[k] = dt / c->gen;
        r->runs_wait_s[k] = waits[k] = (k1.wait_s - k0.wait_s) / c->gen;
        /* the prefetched bytes of the hinted experts that were then routed: the hit rate's share of them (each
         * hinted expert's bytes alike) */
        const double hinted = (double)(k1.bs.hint_experts - k0.bs.hint_experts);
        r->runs_early_bytes[k] = hinted > 0 ? (double)(k1.bs.prefetch_bytes - k0.bs.prefetch_bytes) *
                                                  ((double)(k1.bs.hint_hits - k0.bs.hint_hits) / hinted) / c->gen
                                            : 0;
        fwd[k] = (k1.forward_s - k0.forward_s) / c->gen;
        requests += (double)(k1.requests - k0.requests);
        streamed_layers += (double)(k1.bs.streamed_layers - k0.bs.streamed_layers);
        streamed_bytes += (double)(k1.bs.streamed_bytes - k0.bs.streamed_bytes);
        stream_passes += (double)(k1.bs.stream_passes - k0.bs.stream_passes);
        graph_steps += (double)(k1.bs.graph_steps - k0.bs.graph_steps);
    }
    if (pb && probe_flank(pb, c->probes, c->repeat, r, err) < 0)
        goto out;
    const double timed = (double)c->gen * c->repeat;
    r->step_s = guild_median(steps, c->repeat);
    r->step_min_s = steps[0];
    r->step_max_s = steps[c->repeat - 1];
    r->wait_s = guild_median(waits, c->repeat);
    r->forward_s = guild_median(fwd, c->repeat);
    r->requests = requests / timed;
    r->streamed_layers = streamed_layers / timed;
    r->streamed_bytes = streamed_bytes / timed;
    r->stream_passes = stream_passes / timed;
    r->graph_steps = graph_steps / timed;
    if (pb) {
        double v[(MAX_REPEAT + 1) * MAX_PROBES];
        memcpy(v, r->probes_gbps, (size_t)r->n_probes * sizeof *v);
        r->dram_gbps = guild_median(v, r->n_probes);
    } else {
        r->dram_gbps = c->dram_gbps;
        for (int k = 0; k <= c->repeat; k++)
            r->flanks_gbps[k] = c->dram_gbps;
    }
    const double dram = r->dram_gbps;
    /* the distinct experts of a few more steps, each step's counters against the previous ones */
    int counted = 0;
    double cpu_bytes = 0, gpu_experts_bytes = 0, d_cpu = 0, d_gpu = 0;
    for (int k = 0; k < COUNT_STEPS; k++) {
        if (routing(be, c0) < 0)
            break;
        if (bench_decode_step(be, n, tok, seq, pos, rows, logits, V, err) < 0)
            goto out;
        if (routing(be, c1) < 0)
            break;
        counted++;
        for (int32_t il = 0; il < mc->n_layer; il++) {
            const model_layer_t *L = &w->layers[il];
            const double eb = (double)(L->gate_exps.mat_bytes + L->up_exps.mat_bytes + L->down_exps.mat_bytes);
            for (int32_t e = 0; e < mc->n_expert; e++) {
                const size_t i = (size_t)il * (size_t)mc->n_expert + (size_t)e;
                if (c1[i] == c0[i])
                    continue;
                if (plan && gpu_plan_expert_resident(plan, il, e)) {
                    d_gpu += 1;
                    gpu_experts_bytes += eb;
                } else {
                    d_cpu += 1;
                    cpu_bytes += eb;
                }
            }
        }
    }
    /* the KV a step reads: each session's cache at the timed steps' mean position */
    const double kv = (double)n * (double)(c->prompt + 1 + (timed + c->repeat) / 2) * 2.0 * mc->n_layer *
                      (double)mc->n_head_kv * (double)mc->head_dim * 2.0;
    if (counted) {
        r->distinct_cpu = d_cpu / counted / mc->n_layer;
        r->distinct_gpu = d_gpu / counted / mc->n_layer;
        r->cpu_bytes = cpu_bytes / counted;
        r->wait_gbps = r->wait_s > 0 ? r->cpu_bytes / r->wait_s / 1e9 : 0;
        r->gpu_bytes = dense_bytes(m) + kv + gpu_experts_bytes / counted;
        r->gpu_expert_bytes = gpu_experts_bytes / counted;
        if (dense_step < 0) {
            dense_step = r->step_s - r->wait_s > 0 ? r->step_s - r->wait_s : 0;
            gpu_bytes0 = r->gpu_expert_bytes;
        }
        r->dense_step_s = dense_step;
        /* more sessions touch more of the GPU's resident experts too: each read once from device memory */
        r->gpu_extra_s = hbm > 0 && r->gpu_expert_bytes > gpu_bytes0 ? (r->gpu_expert_bytes - gpu_bytes0) / (hbm * 1e9)
                                                                     : 0;
        r->lim = (paired_limit_t){.fixed_s = dense_step + r->gpu_extra_s, .dram_bytes = r->cpu_bytes};
        r->limit_step_s = paired_limit_step_s(&r->lim, dram);
        r->bytes_step_s = (hbm > 0 ? r->gpu_bytes / (hbm * 1e9) : 0) + (dram > 0 ? r->cpu_bytes / (dram * 1e9) : 0);
        paired_runs(&r->lim, r->flanks_gbps, r->runs_step_s, r->runs_wait_s, r->runs_early_bytes, c->repeat,
                    c->flank_tol, r->paired);
        paired_summarize(r->paired, c->repeat, c->target, &r->pair);
    }
    rc = 0;
out:
    free(logits);
    free(buf);
    free(c0);
    free(c1);
    return rc;
}

/* The paired runs of every size: all, with a phase change, and outrunning their probes. */
static void paired_totals(const sess_cfg_t *c, const sess_result_t *res, int *runs, int *phase, int *outran)
{
    *runs = *phase = *outran = 0;
    for (int i = 0; i < c->n_sizes; i++) {
        *runs += res[i].pair.runs;
        *phase += res[i].pair.phase;
        *outran += res[i].pair.outran;
    }
}

/* The paired table: each size's runs against the limit at their flanking probes (bench/paired.h), the verdict on
 * the target, and the runs that saw a phase change. */
static void print_paired(const sess_cfg_t *c, const sess_result_t *res)
{
    printf("# paired: each run against the limit at the DRAM probes right before and right after it, at their mean "
           "(median and spread of the runs); beside it the medians at the higher probe (the conservative fraction) "
           "and at the lower; left out (evidence neither way): a run whose probes differ by more than %.0f%% (a phase "
           "change) and one whose wait read faster than both its probes (they bound nothing then); the %.0f%% "
           "target: met where the median at the higher probe reaches it, missed where the median at the lower does "
           "not, else undecided; wait/probe: the kept runs' wait rate over their probes' mean\n",
           100 * c->flank_tol, 100 * c->target);
    printf("%8s %12s %9s %15s %9s %9s %7s %10s  %s\n", "sessions", "decode tok/s", "paired", "runs", "at higher",
           "at lower", "kept", "wait/probe", "target");
    for (int i = 0; i < c->n_sizes; i++) {
        const sess_result_t *r = &res[i];
        const paired_summary_t *p = &r->pair;
        if (!p->runs)
            continue;
        paired_cells_t cl;
        paired_summary_cells(p, &cl);
        printf("%8d %12.2f %9s %15s %9s %9s %4d/%-2d %10.2f  %s\n", r->n, r->n / r->step_s, cl.median, cl.spread, cl.hi,
               cl.lo, p->stable, p->runs, p->wait_over_flank, paired_verdict_name(p->verdict));
    }
    int runs, phase, outran;
    paired_totals(c, res, &runs, &phase, &outran);
    printf("# paired: %d of %d runs had flanking probes more than %.0f%% apart (a phase change during the run); %d "
           "more read faster than both their probes\n", phase, runs, 100 * c->flank_tol, outran);
}

int bench_sessions_main(int argc, char **argv)
{
    sess_cfg_t c;
    const int pr = parse_args(argc, argv, &c);
    if (pr)
        return pr > 0 ? 0 : 2;
    guild_log_init("guild", c.verbose ? GUILD_LOG_INFO : GUILD_LOG_WARN);
    c.flags.log_level = guild_log_level();
    guild_err_t err = {{0}};
    model_t *m = NULL;
    backend_stack_t *stack = NULL;
    stack_plan_t sp = {0};
    sess_result_t res[MAX_SIZES];
    bench_bw_probe_t *pb = NULL;
    int32_t *tok0 = NULL, prefilled = 0;
    json_t *root = NULL;
    int rc = 1;
    int32_t max_n = 0;
    for (int i = 0; i < c.n_sizes; i++)
        max_n = c.sizes[i] > max_n ? c.sizes[i] : max_n;
    if (model_new(&m, c.model, &err) < 0)
        goto out;
    const model_config_t *mc = model_config(m);
    c.flags.n_seq = max_n;
    c.flags.n_ctx = c.prompt + (c.gen + 1) * c.repeat + COUNT_STEPS + 2; /* a run: its untimed step and gen timed */
    if (!(tok0 = calloc((size_t)max_n, sizeof *tok0))) {
        guild_err_set(&err, "out of memory");
        goto out;
    }
    c.flags.n_batch = c.batch < c.flags.n_ctx ? c.batch : c.flags.n_ctx; /* 0: auto */
    c.flags.stats = true; /* the routing counters every step's distinct experts are read from */
    if (stack_flags_routing(&c.flags, c.model, &err) < 0 || stack_plan_fit(&c.flags, m, &err) < 0 ||
        stack_plan_make(&sp, &c.flags, m, &err) < 0)
        goto out;
    const gpu_plan_t *plan = sp.on ? &sp.gpu : NULL;
    double dram = c.dram_gbps, hbm = 0, machine = 0;
    char probe_desc[512] = "";
    if (dram <= 0) { /* the first probes before the workers are up to disturb them; the limit's buffer kept */
        bench_bw_t bw;
        if (!c.flags.single_process) { /* every CPU streaming, for comparison */
            if (bench_read_bw_machine((size_t)(c.probe_gb * 1e9), PROBE_PASSES, &bw, &err) < 0)
                goto out;
            machine = bw.median_gbps;
        }
        if (probe_new(&c, m, &sp, &pb, probe_desc, sizeof probe_desc, &err) < 0 ||
            bench_bw_probe_run(pb, PROBE_PASSES, &bw, &err) < 0)
            goto out;
        dram = bw.median_gbps;
        if (c.flags.single_process)
            machine = dram;
    }
    const double dram_start = dram;
    char gpu_name[256] = "none";
#ifdef GUILD_HAVE_CUDA
    if (!strcmp(c.flags.gpu.backend, "cuda")) {
        cuda_probe_t cp;
        if (cuda_probe(&cp, &err) < 0)
            goto out;
        snprintf(gpu_name, sizeof gpu_name, "%s", cp.name);
        hbm = cp.d2d_gbps;
        /* the GPU worker process gets the budget; in one process the backend takes over this context */
        if (!c.flags.single_process)
            cuda_probe_release();
    }
#endif
    fprintf(stderr, "guild bench sessions: %s, %s, %d sessions at most, prompt %d, gen %d; opening...\n", c.model,
            c.flags.single_process ? "single process" : "multi-process", max_n, c.prompt, c.gen);
    if (plan)
        gpu_plan_print(plan, stderr);
    if (backend_stack_open(&stack, &c.flags, m, c.model, &err) < 0)
        goto out;
    backend_t *be = backend_stack_backend(stack);
    c.batch = backend_stack_n_batch(stack);
    if (c.batch < max_n) {
        guild_err_set(&err, "batches of %d tokens hold fewer rows than %d sessions (--batch)", c.batch, max_n);
        goto out;
    }
    const moe_exec_t *experts = backend_stack_experts(stack);
    bench_print_provenance(stdout, argc, argv);
    printf("# model: %s (%s, %d layers, %d experts top-%d)\n# bandwidth: DRAM read %.1f GB/s (%s), device copy %.1f "
           "GB/s\n", c.model, model_arch_info(mc->arch)->name, mc->n_layer, mc->n_expert, mc->n_expert_used, dram,
           pb ? "probed before the workers start" : "--dram-gbs", hbm);
    if (pb)
        printf("# DRAM probe: %s (the median of %d passes; every CPU streaming its own slice: %.1f GB/s)\n",
               probe_desc, PROBE_PASSES, machine);
    printf("# %d timed runs of %d steps a size (medians; runs: the fastest and the slowest run's step); "
           "probes: %s\n", c.repeat, c.gen, pb ? "the DRAM read rate right before each run and after the last, "
           "each run between two (min - max; own: their median)" : "none (--dram-gbs)");
    printf("# distinct: experts a step touches per layer (CPU side + GPU-resident); out: the step outside the wait; "
           "limit: the dense step (the smallest count's step less its wait for the experts) plus the GPU-resident "
           "distinct experts' bytes beyond the smallest count's at the device's copy rate plus the CPU side's "
           "distinct expert bytes at the size's own DRAM rate; wait GB/s: those bytes over the wait; bytes: every "
           "read at its memory's rate\n");
    printf("%8s %12s %9s %13s %9s %9s %17s %10s %15s %11s %12s %9s %12s\n", "sessions", "decode tok/s", "step ms",
           "runs ms", "wait ms", "out ms", "distinct cpu+gpu", "expert GB", "probes GB/s", "wait GB/s", "limit tok/s",
           "fraction", "bytes tok/s");
    double strict = dram;
    for (int i = 0; i < c.n_sizes; i++) {
        sess_result_t *r = &res[i];
        if (run_size(&c, m, be, experts, plan, c.sizes[i], pb, hbm, i ? res[0].dense_step_s : -1,
                     i ? res[0].gpu_expert_bytes : 0, &prefilled, tok0,
                     r, &err) < 0)
            goto out;
        double lo = r->dram_gbps, hi = r->dram_gbps;
        for (int k = 0; k < r->n_probes; k++) {
            lo = r->probes_gbps[k] < lo ? r->probes_gbps[k] : lo;
            hi = r->probes_gbps[k] > hi ? r->probes_gbps[k] : hi;
        }
        strict = hi > strict ? hi : strict;
        const double tps = r->n / r->step_s, lim = r->limit_step_s > 0 ? r->n / r->limit_step_s : 0;
        char spread[64], probes[64];
        snprintf(spread, sizeof spread, "%.2f-%.2f", r->step_min_s * 1e3, r->step_max_s * 1e3);
        snprintf(probes, sizeof probes, "%.1f-%.1f", lo, hi);
        printf("%8d %12.2f %9.2f %13s %9.2f %9.2f %8.1f+%-8.1f %10.3f %15s %11.1f %12.2f %8.1f%% %12.2f\n", r->n,
               tps, r->step_s * 1e3, spread, r->wait_s * 1e3, (r->step_s - r->wait_s) * 1e3, r->distinct_cpu,
               r->distinct_gpu, r->cpu_bytes / 1e9, probes, r->wait_gbps, lim, lim > 0 ? 100 * tps / lim : 0,
               r->bytes_step_s > 0 ? r->n / r->bytes_step_s : 0);
        if (c.flags.single_process)
            printf("%8s a step: %.2f graph replays; streamed %.1f layers, %.3f GB (%.2f passes)\n", "", r->graph_steps,
                   r->streamed_layers, r->streamed_bytes / 1e9, r->stream_passes);
        else
            printf("%8s a step: %.2f requests, the GPU worker %.2f ms in them (the coordinator %.2f ms); streamed %.1f "
                   "layers, %.3f GB (%.2f passes)\n", "", r->requests, r->forward_s * 1e3,
                   (r->step_s - r->forward_s) * 1e3, r->streamed_layers, r->streamed_bytes / 1e9, r->stream_passes);
        for (int k = 0; k < r->pair.runs; k++) {
            const paired_run_t *p = &r->paired[k];
            char early[48] = "";
            if (p->early_bytes > 0)
                snprintf(early, sizeof early, ", %.3f GB prefetched before", p->early_bytes / 1e9);
            printf("#  run %d: probe %.1f | %.2f ms, wait %.2f ms (%.1f GB/s%s) | probe %.1f GB/s: %.1f%% of the "
                   "limit at their mean (%.1f-%.1f%%)%s\n", k + 1, p->before_gbps, p->step_s * 1e3, p->wait_s * 1e3,
                   p->wait_gbps, early, p->after_gbps, 100 * p->fraction, 100 * p->fraction_hi,
                   100 * p->fraction_lo, p->phase ? ": phase change" : p->outran ? ": the reads outran both probes" : "");
        }
        fflush(stdout);
    }
    print_paired(&c, res);
    /* the strict limit: the run's highest probe */
    printf("# strict: the limit at the run's highest DRAM probe, %.1f GB/s (own: each size's probes' median); where "
           "the rest goes: waits (the rate the waits read at, of the strict rate) and out+ (the step outside the wait "
           "beyond the limit's dense step and GPU-resident experts)\n", strict);
    printf("%8s %12s %12s %9s %12s %9s %9s %9s\n", "sessions", "decode tok/s", "strict tok/s", "fraction", "own tok/s",
           "fraction", "waits", "out+ ms");
    for (int i = 0; i < c.n_sizes; i++) {
        sess_result_t *r = &res[i];
        if (r->limit_step_s <= 0)
            continue;
        r->strict_step_s = paired_limit_step_s(&r->lim, strict);
        r->out_extra_s = r->step_s - r->wait_s - r->dense_step_s - r->gpu_extra_s;
        printf("%8d %12.2f %12.2f %8.1f%% %12.2f %8.1f%% %8.1f%% %9.2f\n", r->n, r->n / r->step_s,
               r->n / r->strict_step_s, 100 * r->strict_step_s / r->step_s, r->n / r->limit_step_s,
               100 * r->limit_step_s / r->step_s, 100 * r->wait_gbps / strict, r->out_extra_s * 1e3);
    }
    if (c.json) {
        char date[64];
        const time_t t = time(NULL);
        struct tm tm;
        strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tm));
        root = json_object();
        json_t *pv = json_object(), *arr = json_array();
        char cmd[4096] = "guild bench";
        for (int i = 0; i < argc; i++) {
            const size_t l = strlen(cmd);
            snprintf(cmd + l, sizeof cmd - l, " %s", argv[i]);
        }
        json_object_set_new(pv, "commit", json_string(c.commit ? c.commit : "unknown"));
        json_object_set_new(pv, "date", json_string(date));
        json_object_set_new(pv, "gpu", json_string(gpu_name));
        json_object_set_new(pv, "command", json_string(cmd));
        json_object_set_new(root, "provenance", pv);
        json_object_set_new(root, "model", json_string(c.model));
        json_object_set_new(root, "mode", json_string(c.flags.single_process ? "single process" : "multi-process"));
        json_object_set_new(root, "gpu_mem_budget_bytes", json_integer((json_int_t)c.flags.gpu.cuda.gpu_mem));
        json_object_set_new(root, "gpu_resident_experts_planned", json_integer(plan ? plan->n_resident_experts : 0));
        json_object_set_new(root, "prompt", json_integer(c.prompt));
        json_object_set_new(root, "gen", json_integer(c.gen));
        json_object_set_new(root, "repeat", json_integer(c.repeat));
        json_object_set_new(root, "probes_each_side", json_integer(pb ? c.probes : 0));
        json_object_set_new(root, "probe_bytes", json_integer(pb ? (json_int_t)bench_bw_probe_bytes(pb) : 0));
        json_object_set_new(root, "dram_read_gbps", json_real(dram_start));
        json_object_set_new(root, "dram_probe", json_string(pb ? probe_desc : "none (--dram-gbs)"));
        json_object_set_new(root, "probe_threads", json_integer(pb ? bench_bw_probe_threads(pb) : 0));
        json_object_set_new(root, "probe_pages", json_string(pb ? bench_bw_probe_pages(pb) : "none"));
        json_object_set_new(root, "dram_every_cpu_streaming_gbps", json_real(machine));
        json_object_set_new(root, "dram_strict_gbps", json_real(strict));
        json_object_set_new(root, "device_copy_gbps", json_real(hbm));
        json_object_set_new(root, "probe_layout", json_string(pb ? "paired: a flank before each run and after the "
                                                                   "last" : "none (--dram-gbs)"));
        json_object_set_new(root, "flank_tolerance", json_real(c.flank_tol));
        json_object_set_new(root, "target_fraction", json_real(c.target));
        int all_runs, phase_runs, outran_runs;
        paired_totals(&c, res, &all_runs, &phase_runs, &outran_runs);
        json_object_set_new(root, "paired_runs_total", json_integer(all_runs));
        json_object_set_new(root, "paired_runs_phase_change_total", json_integer(phase_runs));
        json_object_set_new(root, "paired_runs_outran_total", json_integer(outran_runs));
        for (int i = 0; i < c.n_sizes; i++) {
            const sess_result_t *r = &res[i];
            json_t *j = json_object();
            json_object_set_new(j, "sessions", json_integer(r->n));
            json_object_set_new(j, "decode_tok_s", json_real(r->n / r->step_s));
            json_object_set_new(j, "step_s", json_real(r->step_s));
            json_object_set_new(j, "expert_wait_s", json_real(r->wait_s));
            json_object_set_new(j, "step_outside_wait_s", json_real(r->step_s - r->wait_s));
            json_object_set_new(j, "step_min_s", json_real(r->step_min_s));
            json_object_set_new(j, "step_max_s", json_real(r->step_max_s));
            json_t *runs = json_array(), *probes = json_array();
            for (int k = 0; k < c.repeat; k++)
                json_array_append_new(runs, json_real(r->runs_step_s[k]));
            for (int k = 0; k < r->n_probes; k++)
                json_array_append_new(probes, json_real(r->probes_gbps[k]));
            json_object_set_new(j, "step_runs_s", runs);
            json_object_set_new(j, "dram_probes_gbps", probes);
            json_object_set_new(j, "dram_gbps", json_real(r->dram_gbps));
            json_object_set_new(j, "prefill_s", json_real(r->prefill_s));
            json_object_set_new(j, "distinct_cpu_experts_per_layer", json_real(r->distinct_cpu));
            json_object_set_new(j, "distinct_gpu_experts_per_layer", json_real(r->distinct_gpu));
            json_object_set_new(j, "cpu_expert_bytes_per_step", json_real(r->cpu_bytes));
            json_object_set_new(j, "wait_read_gbps", json_real(r->wait_gbps));
            json_object_set_new(j, "wait_fraction_of_strict", json_real(strict > 0 ? r->wait_gbps / strict : 0));
            json_object_set_new(j, "outside_beyond_limit_s", json_real(r->out_extra_s));
            json_object_set_new(j, "dense_step_s", json_real(r->dense_step_s));
            json_object_set_new(j, "gpu_expert_bytes_per_step", json_real(r->gpu_expert_bytes));
            json_object_set_new(j, "gpu_extra_expert_s", json_real(r->gpu_extra_s));
            json_object_set_new(j, "limit_tok_s", json_real(r->limit_step_s > 0 ? r->n / r->limit_step_s : 0));
            json_object_set_new(j, "fraction_of_limit",
                                json_real(r->limit_step_s > 0 ? r->limit_step_s / r->step_s : 0));
            json_object_set_new(j, "strict_limit_tok_s",
                                json_real(r->strict_step_s > 0 ? r->n / r->strict_step_s : 0));
            json_object_set_new(j, "strict_fraction_of_limit",
                                json_real(r->strict_step_s > 0 ? r->strict_step_s / r->step_s : 0));
            json_t *flanks = json_array(), *pruns = json_array();
            for (int k = 0; k <= c.repeat; k++)
                json_array_append_new(flanks, json_real(r->flanks_gbps[k]));
            for (int k = 0; k < r->pair.runs; k++) {
                json_array_append_new(pruns, paired_run_json(&r->paired[k]));
            }
            const paired_summary_t *ps = &r->pair;
            json_object_set_new(j, "dram_flanks_gbps", flanks);
            json_object_set_new(j, "paired_runs", pruns);
            paired_summary_json(j, ps);
            json_object_set_new(j, "bytes_limit_tok_s", json_real(r->bytes_step_s > 0 ? r->n / r->bytes_step_s : 0));
            json_object_set_new(j, "requests_per_step", json_real(r->requests));
            json_object_set_new(j, "gpu_worker_forward_s", json_real(r->forward_s));
            json_object_set_new(j, "streamed_layers_per_step", json_real(r->streamed_layers));
            json_object_set_new(j, "streamed_bytes_per_step", json_real(r->streamed_bytes));
            json_object_set_new(j, "stream_passes_per_step", json_real(r->stream_passes));
            json_object_set_new(j, "graph_replays_per_step", json_real(r->graph_steps));
            json_array_append_new(arr, j);
        }
        json_object_set_new(root, "sizes", arr);
        if (json_dump_file(root, c.json, JSON_INDENT(2)) < 0) {
            guild_err_set(&err, "%s: cannot write", c.json);
            goto out;
        }
    }
    rc = 0;
out:
    if (rc)
        fprintf(stderr, "guild bench sessions: %s\n", err.msg);
    json_decref(root);
    backend_stack_close(&stack);
    bench_bw_probe_destroy(&pb);
    free(tok0);
    stack_plan_fini(&sp);
    model_destroy(&m);
    return rc;
}
