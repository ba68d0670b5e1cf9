/* bench/guild-cuda-prof — per-kernel GPU times of the cuda backend's decode step, inside the replayed CUDA graphs,
 * with CUPTI's activity API (the device host has no nsys). Issue #6: decide what to fuse.
 *
 * One process (the stack `guild run --single-process --backend cuda` drives, coordinator/backend_stack.h): a
 * synthetic prompt of --populate tokens (the LCG of `guild bench run`) fills the KV cache, 8 decode steps warm
 * up (graph capture), then --steps greedy decode steps are traced. CUPTI is enabled before the backend exists
 * so that every graph is instantiated under tracing (graph kernels are then reported per node); records that
 * start before the traced window are dropped.
 *
 * Prints (stdout): the step wall time (host, around backend_forward; median); per kernel name (demangled, without
 * its parameter list, truncated): launches per step, us per step, mean us, share of the median step, and what a
 * launch adds to the busy time (its end past its start and every earlier kernel's end: with programmatic dependent
 * launch a kernel's duration also holds its wait for the one before, which this does not); the GPU busy
 * fraction and time (union of kernel intervals over the step's wall time, and with memcpy/memset); the idle time before
 * the first kernel, between consecutive kernels (median, p90, sum per step) and after the last; memcpy and memset
 * per step by direction. --no-trace runs the same steps without CUPTI and prints the step wall time alone: what
 * tracing every graph node costs. --phases adds the backend's step clock (gpu-worker/dense/cuda/cuda_step_clock.h):
 * the host's times around the launch and the device's between marks, untraced with --no-trace. --timeline router|attn
 * has the fused router's cluster form or the decode attention stamp its phases (cuda_timeline.h) in every launch,
 * and prints the phases of each traced step's last layer (bench/prof_timeline.h), medians over the steps: inside the
 * step, what tests/cuda/cuda_head_time --timeline and cuda_attn_time --timeline give in graphs of the kernel alone. Traced, the launch
 * call itself is ~15x longer and the device runs the graph's first nodes while the host is still in it: the idle
 * time after them is that call, not the step (bench/results/stepgap-h200-2026-12-02-s26.md). --trace-prefill traces a prompt's forward passes instead of decode steps: the
 * prompt is prefilled once untraced (a streamed pass measures its costs there), then again over the same
 * positions, each chunk of --batch tokens a traced "step" (with streamed experts: the copies, the unpacking on
 * its own stream and the products; single process, so the CPU side is the in-process executor). --sessions N
 * decodes N sequences together (backend_forward_seq, a row each, as `guild bench sessions` and `guild serve
 * --parallel` do): each prefilled with its own prompt (session 0's is the one above, the others `guild bench
 * sessions`' draws), every traced step N rows: what a batched step's kernels cost per session.
 *
 * On the device (no registry there; libcupti travels in the ldd closure bench/device/pack.sh copies). The
 * profiler and libcupti do not fit in one carry beside the other device programs, so it has a pack of its own:
 *   here:   bash bench/device/repack.sh --prof build-prof     (then carry .carry)
 *   device: bash bench/device/prof.sh [SECONDS] [LAYERS]      (a Qwen3-30B-A3B-shaped model, three setups)
 *       or: export LD_LIBRARY_PATH=$PWD/.carry/lib
 *           .carry/bin/bench/guild-cuda-prof -m MODEL.gguf [--populate 512] [--steps 32] [--gpu-experts none]
 * The arithmetic on the records is bench/prof_summary.c (tested without a GPU).
 * Exit status: 0; 1 on a runtime failure (no GPU, no model, a CUPTI error); 2 on a usage error. */
#include "config.h"

#include <cuda_runtime_api.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "bench/prof_summary.h"
#include "bench/prof_timeline.h"
#include "coordinator/backend_stack.h"
#include "coordinator/stack_flags.h"
#include "coordinator/stack_plan.h"
#include "core/model/model.h"
#include "core/util/cli.h"
#include "core/util/clock.h"
#include "core/util/log.h"
#include "gpu-worker/dense/gpu_plan.h"
#include "gpu-worker/dense/cuda/cuda_kernels.h"
#include "gpu-worker/dense/cuda/cuda_step_clock.h"
#include "gpu-worker/prof/cupti_trace.h"

#define WHO "guild-cuda-prof"
#define WARMUP_STEPS 8
#define VERIFY_MAX 8       /* --verify sizes */
#define VERIFY_MAX_ROWS 32 /* rows of a --verify step (the decode attention kernel's batches) */
/* --timeline's buffer: block slots of 8 stamps, far more than a decode launch of the router (16 blocks a token) or
 * the attention (KV heads x rows x splits, about a wave of blocks) has */
#define TL_SLOTS (1u << 18)
#define TL_SLOT_STAMPS 8
enum { TL_NONE, TL_ROUTER, TL_ATTN };
_Static_assert((int)CUDA_ROUTER_TL_STAMPS <= TL_SLOT_STAMPS && (int)CUDA_ATTN_TL_STAMPS <= TL_SLOT_STAMPS, "a slot's stamps");
_Static_assert((int)PROF_TL_R_N <= (int)PROF_TL_A_N, "a step's phases: a row of PROF_TL_A_N holds the router's");

enum { PROF_FLAGS = STACK_FLAG_THREADS | STACK_FLAG_NO_TUNING | STACK_FLAG_GPU_MEM | STACK_FLAG_GPU_EXPERTS |
                    STACK_FLAG_NO_GRAPH | STACK_FLAG_CUDA_OFF | STACK_FLAG_STAGER | STACK_FLAG_STAGER_THREADS |
                    STACK_FLAG_CHECK_FINITE };

typedef struct prof_cfg {
    const char *model;
    int32_t populate, steps, batch;
    int32_t sessions;    /* --sessions: sequences decoded together, a row each a step */
    int32_t ctx;         /* --ctx: the KV cache's positions a sequence, at least what the steps need (0: that) */
    int32_t verify[VERIFY_MAX]; /* --verify K,...: no CUPTI, steps of K rows each */
    int n_verify;
    bool no_trace;       /* --no-trace: the same steps without CUPTI, for the wall time tracing costs */
    bool trace_prefill;  /* --trace-prefill: the prompt's chunks are the traced steps */
    bool phases;         /* --phases: the backend's step clock (cuda_step_clock.h) over the same steps */
    int timeline;        /* --timeline: TL_ROUTER, TL_ATTN; TL_NONE */
    stack_options_t flags; /* --threads, --gpu-mem, --no-cuda-graph, ...; always single process, backend cuda */
} prof_cfg_t;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: " WHO " -m FILE [options]\n"
            "Per-kernel GPU times of the cuda backend's decode step (CUPTI), in one process.\n"
            "  -m, --model FILE        GGUF model\n"
            "      --populate N        prompt tokens filling the KV cache first (default 512)\n"
            "      --steps S           decode steps traced, after %d warm-up steps (default 32)\n"
            "      --batch N           prompt tokens per forward pass (default 512)\n"
            "      --sessions N        N sequences, each with its own prompt, decoded together (default 1)\n"
            "      --ctx N             the KV cache's positions a sequence, at least what the steps need (the\n"
            "                          default); a captured step's attention grid is sized for them, as a\n"
            "                          server's with a long context\n"
            "      --verify K,...      no CUPTI: time steps of K rows (a speculative verify step, every row's\n"
            "                          logits out, the cache cut back after each) against one row, per K\n"
            "      --no-trace          no CUPTI: only the step wall time, to see what tracing costs\n"
            "      --trace-prefill     trace the prompt's forward passes (a second prefill) instead of decode\n"
            "      --phases            the backend's step clock over the same steps: host times around the launch,\n"
            "                          device time between marks (embedding, layer 0's parts, the other layers,\n"
            "                          LM head); with --no-trace, the step untraced (up to 12 one-thread kernels\n"
            "                          more a step)\n"
            "      --timeline router|attn\n"
            "                          the fused router's cluster form or the decode attention stamps its phases;\n"
            "                          the phases of each traced step's last layer, medians (the kernels with\n"
            "                          stamps are a little slower)\n",
            WARMUP_STEPS);
    stack_flags_usage(out, PROF_FLAGS, "cuda");
    fprintf(out, "  -h, --help              this help\n");
}

static int parse_args(int argc, char **argv, prof_cfg_t *c)
{
    enum { O_POP = 256, O_STEPS, O_BATCH, O_NO_TRACE, O_TRACE_PREFILL, O_SESSIONS, O_VERIFY, O_PHASES, O_CTX,
           O_TIMELINE };
    static const struct option own[] = {
        {"model", required_argument, NULL, 'm'}, {"populate", required_argument, NULL, O_POP},
        {"steps", required_argument, NULL, O_STEPS}, {"batch", required_argument, NULL, O_BATCH},
        {"no-trace", no_argument, NULL, O_NO_TRACE}, {"trace-prefill", no_argument, NULL, O_TRACE_PREFILL},
        {"sessions", required_argument, NULL, O_SESSIONS}, {"verify", required_argument, NULL, O_VERIFY},
        {"phases", no_argument, NULL, O_PHASES}, {"ctx", required_argument, NULL, O_CTX},
        {"timeline", required_argument, NULL, O_TIMELINE},
        {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0},
    };
    struct option opts[32];
    stack_flags_options(opts, sizeof opts / sizeof opts[0], own, PROF_FLAGS);
    memset(c, 0, sizeof *c);
    c->populate = 512;
    c->steps = 32;
    c->batch = 512;
    c->sessions = 1;
    stack_options_init(&c->flags);
    c->flags.gpu.backend = "cuda";
    c->flags.single_process = true;
    guild_err_t e = {{0}};
    int o, sf;
    long v;
    optind = 1;
    opterr = 0;
    while ((o = getopt_long(argc, argv, "m:h", opts, NULL)) != -1) {
        if ((sf = stack_flags_parse(&c->flags, o, optarg, &e)) != 0) {
            if (sf < 0)
                goto bad;
            continue;
        }
        switch (o) {
        case 'm': c->model = optarg; break;
        case O_POP: if (cli_parse_long("--populate", optarg, 1, 1 << 22, &v, &e) < 0) goto bad; c->populate = (int32_t)v; break;
        case O_STEPS: if (cli_parse_long("--steps", optarg, 1, 1 << 16, &v, &e) < 0) goto bad; c->steps = (int32_t)v; break;
        case O_BATCH: if (cli_parse_long("--batch", optarg, 1, 1 << 16, &v, &e) < 0) goto bad; c->batch = (int32_t)v; break;
        case O_SESSIONS: if (cli_parse_long("--sessions", optarg, 1, 256, &v, &e) < 0) goto bad; c->sessions = (int32_t)v; break;
        case O_CTX: if (cli_parse_long("--ctx", optarg, 1, 1 << 22, &v, &e) < 0) goto bad; c->ctx = (int32_t)v; break;
        case O_VERIFY:
            c->n_verify = 0;
            for (const char *q = optarg;;) {
                char *end = NULL;
                const long k = strtol(q, &end, 10);
                if (end == q || (*end && *end != ',') || k < 1 || k > VERIFY_MAX_ROWS || c->n_verify == VERIFY_MAX) {
                    guild_err_set(&e, "--verify %s: at most %d sizes of 1..%d rows, comma-separated", optarg,
                                  VERIFY_MAX, VERIFY_MAX_ROWS);
                    goto bad;
                }
                c->verify[c->n_verify++] = (int32_t)k;
                if (!*end)
                    break;
                q = end + 1;
            }
            c->no_trace = true;
            break;
        case O_NO_TRACE: c->no_trace = true; break;
        case O_TRACE_PREFILL: c->trace_prefill = true; break;
        case O_PHASES:
            c->phases = true;
            c->flags.gpu.cuda.step_clock = true;
            break;
        case O_TIMELINE:
            if (!strcmp(optarg, "router"))
                c->timeline = TL_ROUTER;
            else if (!strcmp(optarg, "attn"))
                c->timeline = TL_ATTN;
            else {
                guild_err_set(&e, "--timeline %s: expected router or attn", optarg);
                goto bad;
            }
            break;
        case 'h': usage(stdout); return 1;
        default:
            fprintf(stderr, WHO ": unknown option or missing value: %s\n", argv[optind - 1]);
            usage(stderr);
            return -1;
        }
    }
    if (!c->model || optind < argc) {
        fprintf(stderr, WHO ": %s\n", c->model ? "unexpected argument" : "no model: give -m FILE.gguf");
        usage(stderr);
        return -1;
    }
    if (c->n_verify && (c->trace_prefill || c->sessions > 1)) {
        guild_err_set(&e, "--verify times one sequence's decode-sized steps: not with --trace-prefill or --sessions");
        goto bad;
    }
    if (c->timeline && (c->trace_prefill || c->n_verify)) {
        guild_err_set(&e, "--timeline times decode steps: not with --trace-prefill or --verify");
        goto bad;
    }
    if (c->sessions > 1 && c->trace_prefill) {
        guild_err_set(&e, "--sessions traces decode steps: leave --trace-prefill out");
        goto bad;
    }
    if (stack_flags_check(&c->flags, PROF_FLAGS, NULL, false, &e) < 0)
        goto bad;
    return 0;
bad:
    fprintf(stderr, WHO ": %s\n", e.msg);
    return -1;
}

/* The step clock: CUPTI's (that of the records) when tracing, else CLOCK_MONOTONIC. */
static int now_ns(bool no_trace, uint64_t *t, guild_err_t *err)
{
    if (!no_trace)
        return cupti_trace_now(t, err);
    *t = (uint64_t)(guild_clock_s() * 1e9);
    return 0;
}

/* ---- driving the model ---- */

/* --phases: the backend's step clock over the passes since the last call, printed (print false: dropped). */
static int phases_take(backend_t *be, bool print, guild_err_t *err)
{
    enum { CAP = 4096 };
    cuda_step_times_t *t = malloc(CAP * sizeof *t);
    if (!t)
        return guild_err_set(err, "out of memory");
    int32_t n = 0;
    const int rc = cuda_backend_step_times(be, t, CAP, &n, err);
    if (rc == 0 && print)
        cuda_step_times_print(t, n, stdout);
    free(t);
    return rc;
}

/* --verify: after the warm-up at position p, for each size K, steps of K rows at positions p .. p + K - 1 (the
 * sampled token, then K - 1 drafts), every row's logits out, the cache cut back to p after each (a verify step
 * whose drafts are all rejected, at the same context every time); 2 steps of each size first (its graph's
 * capture). Prints the median wall of each size and its ratio to the first size's. */
static int verify_steps(backend_t *be, const prof_cfg_t *c, int32_t p, int32_t tok, int32_t V, guild_err_t *err)
{
    int32_t toks[VERIFY_MAX_ROWS], pos[VERIFY_MAX_ROWS], rows[VERIFY_MAX_ROWS];
    float *lg = malloc((size_t)VERIFY_MAX_ROWS * (size_t)V * sizeof *lg);
    double *w = malloc((size_t)c->steps * sizeof *w);
    if (!lg || !w) {
        free(lg);
        free(w);
        return guild_err_set(err, "out of memory");
    }
    double first = 0;
    int rc = 0;
    for (int v = 0; v < c->n_verify && rc == 0; v++) {
        const int32_t K = c->verify[v];
        for (int32_t i = 0; i < K; i++) {
            toks[i] = i ? (int32_t)(((int64_t)tok * 31 + i * 7919) % V) : tok;
            pos[i] = p + i;
            rows[i] = i;
        }
        for (int32_t g = 0; g < 2 + c->steps; g++) {
            if (g == 2 && c->phases && phases_take(be, false, err) < 0) { /* not the capture's steps */
                rc = -1;
                break;
            }
            const double t = guild_clock_s();
            if (backend_forward(be, K, toks, pos, K, rows, lg, err) < 0) {
                guild_err_prefix(err, "verify step of %d rows: ", K);
                rc = -1;
                break;
            }
            if (g >= 2)
                w[g - 2] = (guild_clock_s() - t) * 1e6;
            backend_kv_truncate(be, p);
        }
        if (rc)
            break;
        const double med = guild_median(w, c->steps);
        if (v == 0)
            first = med;
        printf("verify step of %2d rows: wall median %8.1f us, %5.2fx a step of %d row%s, %5.2fx per row\n", K, med,
               med / first, c->verify[0], c->verify[0] > 1 ? "s" : "", med / first * c->verify[0] / K);
        if (c->phases && phases_take(be, true, err) < 0)
            rc = -1;
    }
    free(lg);
    free(w);
    return rc;
}

/* --timeline: the stamps' buffer on the device, set as the kernel's timeline before the backend captures its
 * graphs (a captured launch keeps the pointer it had). -1 with err. */
static int timeline_start(int kind, unsigned long long **tl, guild_err_t *err)
{
    const size_t bytes = (size_t)TL_SLOTS * TL_SLOT_STAMPS * sizeof **tl;
    cudaError_t e = cudaMalloc((void **)tl, bytes);
    if (e == cudaSuccess)
        e = cudaMemset(*tl, 0, bytes);
    if (e != cudaSuccess)
        return guild_err_set(err, "--timeline: %s", cudaGetErrorString(e));
    if (kind == TL_ROUTER)
        cuda_set_router_timeline(*tl);
    else
        cuda_set_attn_timeline(*tl);
    return 0;
}

/* --timeline, before a traced step: the stamps cleared (a stamp a block does not reach keeps its old value). -1
 * with err on a CUDA failure. */
static int timeline_clear(unsigned long long *tl, guild_err_t *err)
{
    cudaError_t e = cudaMemset(tl, 0, (size_t)TL_SLOTS * TL_SLOT_STAMPS * sizeof *tl);
    if (e == cudaSuccess)
        e = cudaDeviceSynchronize();
    return e == cudaSuccess ? 0 : guild_err_set(err, "--timeline: %s", cudaGetErrorString(e));
}

/* --timeline, after a traced step: the phases of its last layer's launch into v; *v_ok false where that launch
 * wrote no timeline. host: TL_SLOTS * TL_SLOT_STAMPS. -1 with err on a CUDA failure. */
static int timeline_take(int kind, const unsigned long long *tl, uint64_t *host, double *v, bool *v_ok,
                         guild_err_t *err)
{
    const size_t n = (size_t)TL_SLOTS * TL_SLOT_STAMPS;
    const cudaError_t e = cudaMemcpy(host, tl, n * sizeof *host, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess)
        return guild_err_set(err, "--timeline: %s", cudaGetErrorString(e));
    *v_ok = (kind == TL_ROUTER ? prof_timeline_router(host, n / CUDA_ROUTER_TL_STAMPS, v)
                               : prof_timeline_attn(host, n / CUDA_ATTN_TL_STAMPS, v)) == 0;
    return 0;
}

/* --timeline's report: each phase's median over the steps whose last layer wrote a timeline (v: [steps][PROF_TL_A_N],
 * the rows of ok steps first, n_ok of them). */
static void timeline_print(int kind, double (*v)[PROF_TL_A_N], int32_t n_ok, int32_t steps)
{
    int np = 0;
    const char *const *names = kind == TL_ROUTER ? prof_timeline_router_names(&np) : prof_timeline_attn_names(&np);
    printf("\ntimeline of the %s (stamps of each step's last layer): %d of %d traced steps", kind == TL_ROUTER
           ? "fused router's cluster form" : "decode attention", (int)n_ok, (int)steps);
    if (!n_ok) {
        printf(": none wrote one (another launch form ran)\n");
        return;
    }
    double *col = malloc((size_t)n_ok * sizeof *col);
    if (!col) {
        printf(": out of memory\n");
        return;
    }
    printf("; medians, us:");
    for (int q = 0; q < np; q++) {
        for (int32_t k = 0; k < n_ok; k++)
            col[k] = v[k][q];
        printf(q == np - 1 ? " %s %.0f\n" : " %s %.2f;", names[q], guild_median(col, n_ok));
    }
    free(col);
}

int main(int argc, char **argv)
{
    prof_cfg_t c;
    const int pr = parse_args(argc, argv, &c);
    if (pr)
        return pr > 0 ? 0 : 2;
    guild_log_init(WHO, GUILD_LOG_WARN);
    c.flags.log_level = guild_log_level();
    guild_err_t err = {{0}};
    model_t *m = NULL;
    backend_stack_t *stack = NULL;
    float *logits = NULL;
    backend_t *logits_be = NULL; /* the backend logits is of */
    int32_t *prompt = NULL, *pos = NULL, *seq = NULL, *tok = NULL, *rows = NULL;
    uint64_t *t0 = NULL, *t1 = NULL;
    unsigned long long *tl = NULL; /* --timeline's stamps, on the device */
    uint64_t *tl_host = NULL;
    double (*tl_v)[PROF_TL_A_N] = NULL; /* [steps] phases of the steps with a timeline */
    int32_t tl_n = 0;
    prof_summary_t sum = {0};
    prof_trace_t trace; /* what CUPTI records in the traced window */
    prof_trace_init(&trace, 0);
    int rc = 1;

    int n_dev = 0;
    const cudaError_t ce = cudaGetDeviceCount(&n_dev);
    if (ce != cudaSuccess || n_dev < 1) {
        guild_err_set(&err, "no CUDA device: %s", ce != cudaSuccess ? cudaGetErrorString(ce) : "none found");
        goto out;
    }
    if (!c.no_trace) {
        if (cupti_trace_start(&trace, &err) < 0)
            goto out;
        cupti_trace_window(UINT64_MAX); /* nothing before the traced steps */
    }
    if (c.timeline && timeline_start(c.timeline, &tl, &err) < 0)
        goto out;
    if (model_new(&m, c.model, &err) < 0)
        goto out;
    if (stack_flags_tune(&c.flags, c.model, WHO, &err) < 0)
        goto out;
    const int32_t V = model_config(m)->n_vocab, S = c.sessions;
    c.flags.n_ctx = c.populate + WARMUP_STEPS + (c.steps > VERIFY_MAX_ROWS ? c.steps : VERIFY_MAX_ROWS);
    if (c.ctx > c.flags.n_ctx)
        c.flags.n_ctx = c.ctx;
    c.flags.n_batch = c.batch < c.populate ? c.batch : c.populate;
    if (c.flags.n_batch < S) /* a decode step's rows */
        c.flags.n_batch = S;
    c.flags.n_seq = S;
    if (stack_plan_fit(&c.flags, m, &err) < 0 || backend_stack_open(&stack, &c.flags, m, c.model, &err) < 0)
        goto out;
    backend_t *be = backend_stack_backend(stack);
    logits = backend_logits_alloc(be, (size_t)S * (size_t)V); /* what guild run and bench run take */
    logits_be = be;
    prompt = malloc((size_t)c.populate * sizeof *prompt);
    pos = malloc((size_t)c.flags.n_batch * sizeof *pos);
    seq = malloc((size_t)c.flags.n_batch * sizeof *seq);
    tok = malloc((size_t)S * sizeof *tok);
    rows = malloc((size_t)S * sizeof *rows);
    const int32_t chunks = (c.populate + c.flags.n_batch - 1) / c.flags.n_batch;
    const int32_t traced = c.trace_prefill ? chunks : c.steps; /* the traced "steps" */
    t0 = malloc((size_t)traced * sizeof *t0);
    t1 = malloc((size_t)traced * sizeof *t1);
    if (c.timeline) {
        tl_host = malloc((size_t)TL_SLOTS * TL_SLOT_STAMPS * sizeof *tl_host);
        tl_v = malloc((size_t)traced * sizeof *tl_v);
    }
    if (!logits || !prompt || !pos || !seq || !tok || !rows || !t0 || !t1 || (c.timeline && (!tl_host || !tl_v))) {
        guild_err_set(&err, "out of memory");
        goto out;
    }
    fprintf(stderr, WHO ": prefill %d tokens%s, %d warm-up steps, %d traced steps%s\n", c.populate,
            S > 1 ? " a session" : "", WARMUP_STEPS, c.steps, S > 1 ? " of every session" : "");
    const double tp = guild_clock_s();
    for (int32_t q = S - 1; q >= 0; q--) { /* session 0's prompt last: the one a traced prefill runs again */
        uint64_t lcg = 0x9e3779b97f4a7c15ull ^ ((uint64_t)q * 0x632be59bd9b4e019ull); /* bench run's, sessions' */
        for (int32_t i = 0; i < c.populate; i++) {
            lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
            prompt[i] = (int32_t)((lcg >> 33) % (uint64_t)V);
        }
        for (int32_t p = 0; p < c.populate; p += c.flags.n_batch) {
            const int32_t nb = c.populate - p < c.flags.n_batch ? c.populate - p : c.flags.n_batch, last = nb - 1;
            for (int32_t i = 0; i < nb; i++) {
                pos[i] = p + i;
                seq[i] = q;
            }
            if (backend_forward_seq(be, nb, prompt + p, seq, pos, p + nb == c.populate ? 1 : 0, &last, logits,
                                    &err) < 0) {
                guild_err_prefix(&err, "session %d prefill at %d: ", q, p);
                goto out;
            }
        }
        tok[q] = bench_argmax(logits, V);
    }
    fprintf(stderr, WHO ": prefill %.1f tok/s\n", (double)S * c.populate / (guild_clock_s() - tp));
    for (int32_t g = 0; g < WARMUP_STEPS; g++)
        if (bench_decode_step(be, S, tok, seq, pos, rows, logits, V, &err) < 0) {
            guild_err_prefix(&err, "warm-up step %d: ", g);
            goto out;
        }
    if (c.phases && phases_take(be, false, &err) < 0) /* the prefill's and warm-up's passes */
        goto out;
    if (c.n_verify) {
        const int32_t p = backend_kv_len(be);
        bench_print_provenance(stdout, argc, argv);
        printf("# " WHO ": %s; populate %d, verify steps at position %d after %d warm-up, %d timed steps a size, "
               "threads %d, experts %s, CUDA graphs %s, NOT traced\n", c.model, c.populate, p, WARMUP_STEPS, c.steps,
               c.flags.n_threads, c.flags.gpu.cuda.gpu_expert_layers == GPU_EXPERTS_NONE ? "in RAM" : "by the plan",
               c.flags.gpu.cuda.no_graph ? "off" : "on");
        if (verify_steps(be, &c, p, tok[0], V, &err) < 0)
            goto out;
        rc = 0;
        goto out;
    }
    backend_stats_t bs0 = {0}, bs1 = {0};
    const bool have_bs = backend_stats(be, &bs0) == 0;
    const moe_exec_t *experts = backend_stack_experts(stack); /* single process: the CPU experts' executor */
    moe_exec_stats_t es0 = {0}, es1 = {0};
    if (experts)
        moe_exec_stats(experts, &es0);
    if (now_ns(c.no_trace, &t0[0], &err) < 0)
        goto out;
    if (!c.no_trace)
        cupti_trace_window(t0[0]);
    if (c.trace_prefill)
        backend_kv_clear(be); /* the prompt again, over the same positions */
    for (int32_t g = 0; c.trace_prefill && g < chunks; g++) {
        const int32_t p0 = g * c.flags.n_batch, nb = c.populate - p0 < c.flags.n_batch ? c.populate - p0
                                                                                        : c.flags.n_batch;
        const int32_t last = nb - 1;
        for (int32_t i = 0; i < nb; i++)
            pos[i] = p0 + i;
        if (now_ns(c.no_trace, &t0[g], &err) < 0)
            goto out;
        if (backend_forward(be, nb, prompt + p0, pos, p0 + nb == c.populate ? 1 : 0, &last, logits, &err) < 0) {
            guild_err_prefix(&err, "traced prefill at %d: ", p0);
            goto out;
        }
        if (now_ns(c.no_trace, &t1[g], &err) < 0)
            goto out;
    }
    /* a traced step's window is the forward call, which gives each session's greedy pick (backend_forward_pick:
     * reduced on the device, as the pipeline's decode steps do): no row crosses to the host */
    for (int32_t g = 0; !c.trace_prefill && g < c.steps; g++) {
        bool tl_ok = false;
        if (c.timeline && timeline_clear(tl, &err) < 0)
            goto out;
        if (now_ns(c.no_trace, &t0[g], &err) < 0)
            goto out;
        if (bench_decode_step(be, S, tok, seq, pos, rows, logits, V, &err) < 0) {
            guild_err_prefix(&err, "decode step %d: ", g);
            goto out;
        }
        if (now_ns(c.no_trace, &t1[g], &err) < 0)
            goto out;
        if (c.timeline && timeline_take(c.timeline, tl, tl_host, tl_v[tl_n], &tl_ok, &err) < 0)
            goto out;
        tl_n += tl_ok;
    }
    if (!c.no_trace && cupti_trace_stop(&err) < 0)
        goto out;
    bench_print_provenance(stdout, argc, argv);
    if (c.no_trace) { /* the wall time alone */
        double *w = malloc((size_t)traced * sizeof *w);
        if (!w) {
            guild_err_set(&err, "out of memory");
            goto out;
        }
        for (int32_t g = 0; g < traced; g++)
            w[g] = (double)(t1[g] - t0[g]);
        printf("# " WHO ": %s; populate %d, %d session(s), %d %s after %d warm-up, threads %d, CUDA graphs %s, NOT "
               "traced\nstep wall (host, around the forward call): median %.1f us\n", c.model, c.populate, S, traced,
               c.trace_prefill ? "prefill chunks" : "decode steps", WARMUP_STEPS, c.flags.n_threads,
               c.flags.gpu.cuda.no_graph ? "off" : "on", guild_median(w, traced) / 1e3);
        free(w);
        if (c.phases && phases_take(be, true, &err) < 0)
            goto out;
        if (c.timeline)
            timeline_print(c.timeline, tl_v, tl_n, traced);
        rc = 0;
        goto out;
    }
    if (prof_summarize(&sum, trace.recs, trace.n_recs, (const char *const *)trace.names, trace.n_names, t0, t1,
                       traced, &err) < 0)
        goto out;
    printf("# " WHO ": %s; populate %d, %d session(s), %d traced %s after %d warm-up, threads %d, CUDA graphs %s\n",
           c.model, c.populate, S, traced, c.trace_prefill ? "prefill chunks (of --batch tokens)" : "decode steps", WARMUP_STEPS,
           c.flags.n_threads, c.flags.gpu.cuda.no_graph ? "off" : "on");
    if (trace.dropped)
        printf("note: CUPTI dropped %llu records (its buffers were full): the numbers below miss them\n",
               (unsigned long long)trace.dropped);
    prof_summary_print(&sum, stdout);
    if (!c.trace_prefill)
        prof_summary_print_layer(&sum, model_config(m)->n_layer, stdout);
    if (c.timeline)
        timeline_print(c.timeline, tl_v, tl_n, traced);
    if (c.phases && phases_take(be, true, &err) < 0)
        goto out;
    if (experts)
        moe_exec_stats(experts, &es1);
    if (have_bs && backend_stats(be, &bs1) == 0)
        printf("\nbackend: %u graphs captured, %llu of %d traced steps replayed a graph; wait for CPU experts %.1f "
               "us per step over %llu exchanges; %d layers' experts on the GPU\n",
               bs1.graphs, (unsigned long long)(bs1.graph_steps - bs0.graph_steps), traced,
               (double)(es1.wait_ns - es0.wait_ns) / traced / 1e3,
               (unsigned long long)(es1.exchanges - es0.exchanges), bs1.gpu_expert_layers);
    if (have_bs && c.trace_prefill && bs1.stream_passes > bs0.stream_passes) {
        const double span = (double)(bs1.stream_span_ns - bs0.stream_span_ns) / 1e6;
        printf("streamed: %llu layer batches over %llu passes, %.1f ms on the device: copy engine busy %.1f ms, "
               "waiting %.1f ms for copies and %.1f ms for the CPU side; split GPU %llu / CPU %llu experts\n",
               (unsigned long long)(bs1.streamed_layers - bs0.streamed_layers),
               (unsigned long long)(bs1.stream_passes - bs0.stream_passes), span,
               (double)(bs1.copy_busy_ns - bs0.copy_busy_ns) / 1e6, (double)(bs1.copy_wait_ns - bs0.copy_wait_ns) / 1e6,
               (double)(bs1.cpu_wait_ns - bs0.cpu_wait_ns) / 1e6,
               (unsigned long long)(bs1.split_gpu_experts - bs0.split_gpu_experts),
               (unsigned long long)(bs1.split_cpu_experts - bs0.split_cpu_experts));
    }
    rc = 0;
out:
    if (rc)
        fprintf(stderr, WHO ": %s\n", err.msg);
    if (logits)
        backend_logits_free(logits_be, logits);
    backend_stack_close(&stack);
    model_destroy(&m);
    free(prompt);
    free(pos);
    free(seq);
    free(tok);
    free(rows);
    free(t0);
    free(t1);
    prof_summary_fini(&sum);
    if (tl) { /* after the stack: no launch writes to it any more */
        cuda_set_router_timeline(NULL);
        cuda_set_attn_timeline(NULL);
        cudaFree(tl);
    }
    free(tl_host);
    free(tl_v);
    cupti_trace_abandon(); /* tracing may still be on (an error path): the callbacks keep nothing now */
    prof_trace_fini(&trace);
    return rc;
}
