/* guild bench run — end-to-end throughput of a model at populated contexts: for each context size, a prompt
 * of that many tokens really fills the KV cache (prefill), then `gen` tokens are decoded greedily one at a
 * time. Prefill and decode tok/s are medians of `runs` runs after one warm-up run (the smallest context, at most
 * WARM_MAX), with the share of a decode step spent waiting for the CPU workers' experts, and decode as a fraction
 * of its physical limit: the bytes a decode token must read (dense weights, the active experts, the KV cache) over
 * the bandwidth of the memory they live in (HBM for what is on the GPU, DRAM for the CPU workers' experts;
 * both measured here: a device-to-device copy and `guild bench bw`'s read probe). A table on stdout; with
 * --json, the same with provenance (commit, machine, GPU, model shape and types, command line, date).
 *
 * The model runs as `guild run` runs it (coordinator/backend_stack.h): the multi-process pipeline by default,
 * or everything in this process with --single-process. The prompt's ids are drawn by a fixed LCG over the
 * vocabulary, so every run and every configuration sees the same tokens (--prompt-period N: the first N of them
 * repeated, a prompt the ngram drafter finds matches in). With --spec the decode is guild run's loop
 * (coordinator/generate.h) with verify steps, greedy, and the speculative counters join the results. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>

#include "bench/bench.h"
#include "bench/bw.h"
#include "bench/plot.h"
#include "bench/procmem.h"
#include "coordinator/backend_stack.h"
#include "coordinator/generate.h"
#include "coordinator/spec.h"
#include "coordinator/stack_plan.h"
#include "coordinator/remote_backend.h"
#include "coordinator/stack_flags.h"
#include "core/util/cli.h"
#include "core/kern/cpu.h"
#include "core/model/model.h"
#include "core/quant/quant.h"
#include "core/topo/topo.h"
#include "core/util/clock.h"
#include "gpu-worker/dense/gpu_plan.h"
#include "gpu-worker/dense/kv_format.h"
#ifdef GUILD_HAVE_CUDA
#include "gpu-worker/dense/cuda/cuda_probe.h"
#endif

#define MAX_POP 16
#define MAX_RUNS 64
#define MAX_CPUS 1024
/* The warm-up run's context at most: it captures the graphs and faults in the stack's buffers, which a short prompt
 * does as well as a long one, and a placement whose smallest context is long (a KV cache in host RAM from 131,072
 * positions) would otherwise fill that whole context once more before the measured runs (~2 minutes on the H200). */
#define WARM_MAX 4096

typedef struct run_cfg {
    const char *model;
    const char *json;
    const char *svg;           /* --svg: the results drawn (bench/plot.h) */
    const char *commit;        /* --commit: provenance where the binary runs away from its git checkout */
    int32_t populate[MAX_POP];
    int n_populate;
    int32_t gen, runs, batch;
    int32_t period;            /* --prompt-period: the prompt repeats its first `period` tokens; 0: no */
    bool sweep;                /* --sweep: a placement's contexts along one prompt (one_run's from) */
    spec_options_t spec;       /* --spec, --spec-max, --spec-min-p, --draft-model */
    double dram_gbps;          /* 0: measure */
    bool verbose;              /* -v: the backend's and the workers' messages */
    stack_options_t flags;       /* the stack: --backend, --single-process, --cpu-workers, --threads, GPU flags */
    int argc;
    char **argv;
} run_cfg_t;

/* One measured run. */
typedef struct run_result {
    double prefill_s, decode_s;
    double wait_s;             /* decode time waiting for the CPU workers */
    double step_s;             /* decode time as the wait's denominator sees it */
    spec_stats_t spec;         /* with --spec */
    /* the prefill's forward passes that streamed experts (device time, s): their span, the copy engine busy, the
     * device waiting for copies and for the CPU side (busy the rest of the span) */
    double stream_span_s, copy_busy_s, copy_wait_s, cpu_wait_s;
    /* the decode's mean turnaround a layer as the CPU workers see it (backend_stats_t.turnaround_ns), us; 0: none
     * counted (one process, every expert on the GPU, --spec) */
    double turn_us;
} run_result_t;

/* Bytes a decode token reads, from the model and the GPU plan. */
typedef struct token_bytes {
    double dense;              /* dense weights read per token (one embedding row, every other matrix) */
    double experts_gpu;        /* active experts of the layers resident on the GPU */
    double experts_cpu;        /* active experts of the other layers */
    double kv_per_pos;         /* K and V bytes per cached position (every layer) */
} token_bytes_t;

/* The backend stack's flags guild bench run takes (coordinator/stack_flags.h); no tuning file: the command line
 * says everything a measurement depends on. */
enum {
    BENCH_STACK_FLAGS = STACK_FLAG_SINGLE | STACK_FLAG_THREADS | STACK_FLAG_CPU_WORKERS | STACK_FLAG_BACKEND |
                        STACK_FLAG_PREFETCH_EXPERTS |
                        STACK_FLAG_GPU_MEM | STACK_FLAG_GPU_EXPERTS | STACK_FLAG_NO_GRAPH | STACK_FLAG_CUDA_OFF |
                        STACK_FLAG_STAGER | STACK_FLAG_STAGER_THREADS | STACK_FLAG_SPIN_US | STACK_FLAG_MLOCK |
                        STACK_FLAG_HUGE_PAGES | STACK_FLAG_EXPERT_LAYOUT | STACK_FLAG_ROUTING | STACK_FLAG_CHECK_FINITE |
                        STACK_FLAG_KV_TYPE | STACK_FLAG_FORCE_SPLIT | STACK_FLAG_CPU_NODES | STACK_FLAG_GPU_PROF,
};

#define DEFAULT_BACKEND "auto" /* stack_flags_check resolves it */

static void usage(FILE *out)
{
    fprintf(out,
            "usage: guild bench run -m FILE [options]\n"
            "  -m, --model FILE        GGUF model\n"
            "      --populate LIST     context sizes filled by the prompt (default 512,4096,16384)\n"
            "      --gen N             tokens decoded after each prompt (default 64)\n"
            "      --runs N            measured runs per context, after one warm-up (default 3)\n"
            "      --prompt-period N   the prompt repeats its first N tokens (default 0: no repetition)\n"
            "      --sweep             measure the contexts along one prompt: each context's prefill is the time\n"
            "                          from position 0 to it, the cache kept from the previous (smaller) context\n"
            SPEC_FLAGS_HELP
            STACK_FLAGS_BATCH_HELP);
    stack_flags_usage(out, BENCH_STACK_FLAGS, DEFAULT_BACKEND);
    fprintf(out,
            "      --dram-gbs X        DRAM read bandwidth in GB/s for the limits (default: measured)\n"
            "      --json FILE         write the results with provenance\n"
            "      --svg FILE          draw the results: tok/s against populated context (as guild bench plot)\n"
            "      --commit ID         the source commit, when the binary runs away from its git checkout\n"
            "  -v, --verbose           the backend's and the workers' messages (plan, streaming) on stderr\n"
            "  -h, --help              this help\n");
}

static int parse_args(int argc, char **argv, run_cfg_t *c)
{
    enum { O_POP = 256, O_GEN, O_RUNS, O_BATCH, O_DRAM, O_JSON, O_SVG, O_COMMIT, O_PERIOD, O_SPEC, O_SWEEP };
    static const struct option own[] = {
        {"model", required_argument, NULL, 'm'},       {"populate", required_argument, NULL, O_POP},
        {"gen", required_argument, NULL, O_GEN},       {"runs", required_argument, NULL, O_RUNS},
        {"batch", required_argument, NULL, O_BATCH},   {"dram-gbs", required_argument, NULL, O_DRAM},
        {"json", required_argument, NULL, O_JSON},     {"commit", required_argument, NULL, O_COMMIT},
        {"svg", required_argument, NULL, O_SVG},
        {"prompt-period", required_argument, NULL, O_PERIOD},
        {"spec", required_argument, NULL, O_SPEC},     {"spec-max", required_argument, NULL, O_SPEC},
        {"spec-min-p", required_argument, NULL, O_SPEC}, {"draft-model", required_argument, NULL, O_SPEC},
        {"draft-threads", required_argument, NULL, O_SPEC},
        {"draft-backend", required_argument, NULL, O_SPEC},
        {"verbose", no_argument, NULL, 'v'},           {"help", no_argument, NULL, 'h'},
        {"sweep", no_argument, NULL, O_SWEEP},
        {NULL, 0, NULL, 0},
    };
    struct option opts[48];
    stack_flags_options(opts, sizeof opts / sizeof opts[0], own, BENCH_STACK_FLAGS);
    memset(c, 0, sizeof *c);
    c->populate[0] = 512, c->populate[1] = 4096, c->populate[2] = 16384;
    c->n_populate = 3;
    c->gen = 64;
    c->runs = 3;
    c->batch = 0; /* auto */
    c->argc = argc;
    c->argv = argv;
    long cpus = topo_all_cpus((int[MAX_CPUS]){0}, MAX_CPUS);
    stack_options_init(&c->flags);
    spec_options_init(&c->spec);
    c->flags.gpu.backend = DEFAULT_BACKEND;
    c->flags.n_threads = cpus > 0 ? (int)cpus : 1;
    guild_err_t e = {{0}};
    int o, sf, li;
    long v;
    optind = 1;
    opterr = 0;
    while ((li = -1, o = getopt_long(argc, argv, "m:vh", opts, &li)) != -1) {
        if ((sf = stack_flags_parse(&c->flags, o, optarg, &e)) != 0) {
            if (sf < 0)
                goto bad;
            continue;
        }
        switch (o) {
        case 'm': c->model = optarg; break;
        case O_POP: {
            c->n_populate = 0;
            char *s = optarg;
            for (;;) {
                char *end;
                errno = 0;
                long p = strtol(s, &end, 10);
                if (errno || end == s || p < 1 || p > (1 << 22) || c->n_populate == MAX_POP || (*end && *end != ',')) {
                    fprintf(stderr, "guild bench run: --populate %s: expected up to %d sizes such as 512,4096\n",
                            optarg, MAX_POP);
                    return -1;
                }
                c->populate[c->n_populate++] = (int32_t)p;
                if (!*end)
                    break;
                s = end + 1;
            }
            break;
        }
        case O_GEN: if (cli_parse_long("--gen", optarg, 1, 1 << 20, &v, &e) < 0) goto bad; c->gen = (int32_t)v; break;
        case O_RUNS: if (cli_parse_long("--runs", optarg, 1, MAX_RUNS, &v, &e) < 0) goto bad; c->runs = (int32_t)v; break;
        case O_BATCH: if (stack_flags_parse_batch(optarg, &c->batch, &e) < 0) goto bad; break;
        case O_DRAM: c->dram_gbps = atof(optarg); break;
        case O_JSON: c->json = optarg; break;
        case O_SVG: c->svg = optarg; break;
        case O_COMMIT: c->commit = optarg; break;
        case O_PERIOD:
            if (cli_parse_long("--prompt-period", optarg, 0, 1 << 22, &v, &e) < 0)
                goto bad;
            c->period = (int32_t)v;
            break;
        case O_SPEC:
            if (spec_flag(&c->spec, opts[li].name, optarg, &e) < 0)
                goto bad;
            break;
        case O_SWEEP: c->sweep = true; break;
        case 'v': c->verbose = true; break;
        case 'h': usage(stdout); return 1;
        default:
            fprintf(stderr, "guild bench run: unknown option or missing value: %s\n", argv[optind - 1]);
            usage(stderr);
            return -1;
        }
    }
    if (!c->model || optind < argc) {
        fprintf(stderr, "guild bench run: %s\n", c->model ? "unexpected argument" : "no model: give -m FILE.gguf");
        usage(stderr);
        return -1;
    }
    if (stack_flags_check(&c->flags, BENCH_STACK_FLAGS, NULL, false, &e) < 0)
        goto bad;
    if (c->sweep && c->spec.kind != SPEC_NONE) {
        guild_err_set(&e, "--sweep measures plain decoding: leave out --spec");
        goto bad;
    }
    return 0;
bad:
    fprintf(stderr, "guild bench run: %s\n", e.msg);
    return -1;
}

/* The CPU workers' share of the decode so far: (waiting, step) seconds, as the GPU worker counts them, or in a
 * single process as the routed-expert executor `experts` does. */
static void wait_counters(backend_t *be, const moe_exec_t *experts, bool spec, double *wait_s, double *step_s)
{
    if (!experts) {
        remote_stats_t rs;
        remote_backend_stats(be, &rs);
        /* verify steps run several tokens a request: the decode counters take single tokens only */
        *wait_s = (double)(spec ? rs.moe_ns : rs.decode_moe_ns) * 1e-9;
        *step_s = (double)(spec ? rs.wall_ns : rs.decode_wall_ns) * 1e-9;
        return;
    }
    moe_exec_stats_t es;
    moe_exec_stats(experts, &es);
    *wait_s = (double)es.wait_ns * 1e-9;
    *step_s = -1; /* the caller's decode time */
}

/* The drafter and the tokenizer (gen_run's) of a --spec run. */
typedef struct spec_run {
    spec_drafter_t *drafter;
    const tok_t *tok;
    int32_t n_ctx;
} spec_run_t;

/* With --spec: the prompt's last token and gen more through gen_run's loop (greedy, end of text ignored) on a
 * cache that holds the rest of the prompt; its first step is the prefill's last. */
static int spec_decode(const run_cfg_t *c, backend_t *be, const spec_run_t *sr, const int32_t *prompt,
                       int32_t populate, int32_t gen, int32_t n_vocab, run_result_t *r, guild_err_t *err)
{
    sample_params_t spp;
    sample_params_default(&spp);
    spp.temp = 0;
    sampler_t *smp = NULL;
    if (sampler_new(&smp, &spp, n_vocab, err) < 0)
        return -1;
    const gen_options_t go = {.n_predict = gen + 1, .n_batch = c->batch, .n_ctx = sr->n_ctx, .n_vocab = n_vocab,
                              .ignore_eog = true, .check_finite = c->flags.gpu.check_finite,
                              .n_past = populate - 1, .drafter = sr->drafter, .spec_max = c->spec.max};
    gen_result_t res;
    const int grc = gen_run(be, smp, sr->tok, prompt, populate, &go, &res, err);
    sampler_destroy(&smp);
    free(res.ids);
    if (grc < 0)
        return guild_err_prefix(err, "decode: ");
    r->prefill_s += res.prefill_s;
    r->decode_s = res.decode_s;
    r->spec = res.spec;
    return 0;
}

/* One run: the cache cut back to `from` positions (0: emptied; else they hold the prompt's first `from` tokens),
 * the prompt's tokens from there to `populate` in batches, then gen greedy tokens. The prefill's counters are
 * those of the tokens from `from` on. */
static int one_run(const run_cfg_t *c, backend_t *be, const moe_exec_t *experts, const spec_run_t *sr,
                   const int32_t *prompt, int32_t from, int32_t populate, int32_t gen, int32_t n_vocab, float *logits,
                   int32_t *pos, run_result_t *r, guild_err_t *err)
{
    backend_kv_truncate(be, from);
    memset(r, 0, sizeof *r);
    const bool spec = sr->drafter != NULL;
    const int32_t fill = spec ? populate - 1 : populate; /* spec: gen_run runs the last prompt token */
    backend_stats_t b0, b1, b2; /* before the prefill, after it (the decode's start), after the decode */
    const bool streams = backend_stats(be, &b0) == 0;
    const double t0 = guild_clock_s();
    for (int32_t p = from; p < fill; p += c->batch) {
        const int32_t n = fill - p < c->batch ? fill - p : c->batch, last = n - 1;
        const bool final = !spec && p + n == populate;
        for (int32_t i = 0; i < n; i++)
            pos[i] = p + i;
        if (backend_forward(be, n, prompt + p, pos, final ? 1 : 0, &last, logits, err) < 0)
            return guild_err_prefix(err, "prefill at %d: ", p);
    }
    r->prefill_s = guild_clock_s() - t0;
    const bool have_b1 = streams && backend_stats(be, &b1) == 0;
    if (have_b1) {
        r->stream_span_s = (double)(b1.stream_span_ns - b0.stream_span_ns) / 1e9;
        r->copy_busy_s = (double)(b1.copy_busy_ns - b0.copy_busy_ns) / 1e9;
        r->copy_wait_s = (double)(b1.copy_wait_ns - b0.copy_wait_ns) / 1e9;
        r->cpu_wait_s = (double)(b1.cpu_wait_ns - b0.cpu_wait_ns) / 1e9;
    }
    double w0, s0, w1, s1;
    wait_counters(be, experts, spec, &w0, &s0);
    const double t1 = guild_clock_s();
    if (spec) {
        const double filled_s = r->prefill_s;
        if (spec_decode(c, be, sr, prompt, populate, gen, n_vocab, r, err) < 0)
            return -1;
        wait_counters(be, experts, spec, &w1, &s1);
        r->wait_s = w1 - w0;
        r->step_s = s0 >= 0 ? s1 - s0 : r->prefill_s - filled_s + r->decode_s;
        return 0;
    }
    /* the greedy pick where the backend computed the row (backend_forward_pick), counted in the decode rate */
    int32_t tok = bench_argmax(logits, n_vocab), row = 0;
    for (int32_t g = 0; g < gen; g++) {
        const int32_t p = populate + g;
        logits_pick_t pick;
        if (backend_forward_pick(be, 1, &tok, NULL, &p, 1, &row, n_vocab, NULL, logits, &pick, err) < 0)
            return guild_err_prefix(err, "decode step %d: ", g);
        tok = pick.id;
    }
    const double t2 = guild_clock_s();
    wait_counters(be, experts, spec, &w1, &s1);
    /* the turnaround counters read outside the decode's clock (a stats request of the workers) */
    if (have_b1 && backend_stats(be, &b2) == 0 && b2.turnarounds > b1.turnarounds)
        r->turn_us = (double)(b2.turnaround_ns - b1.turnaround_ns) / (double)(b2.turnarounds - b1.turnarounds) / 1e3;
    r->decode_s = t2 - t1;
    r->wait_s = w1 - w0;
    r->step_s = s0 >= 0 ? s1 - s0 : r->decode_s;
    return 0;
}

/* The speculative counters with their ratios. */
static json_t *spec_json(const spec_stats_t *s)
{
    json_t *j = json_object();
    json_object_set_new(j, "verify_steps", json_integer((json_int_t)s->steps));
    json_object_set_new(j, "drafted", json_integer((json_int_t)s->drafted));
    json_object_set_new(j, "accepted", json_integer((json_int_t)s->accepted));
    json_object_set_new(j, "acceptance_rate", json_real(s->drafted ? (double)s->accepted / (double)s->drafted : 0));
    json_object_set_new(j, "tokens_per_step", json_real(s->steps ? (double)s->tokens / (double)s->steps : 0));
    json_object_set_new(j, "draft_s", json_real(s->draft_s));
    json_object_set_new(j, "verify_s", json_real(s->verify_s));
    return j;
}

static double tensor_bytes(const model_tensor_t *t)
{
    return t->data ? (double)t->mat_bytes * (double)(t->ne[2] ? t->ne[2] : 1) : 0;
}

/* plan (NULL: none): a resident expert's reads are the GPU's, in the share of the routing it takes (the profile's,
 * else the share of the layer's experts). */
static void bytes_per_token(const model_t *m, const gpu_plan_t *plan, int32_t kv_type, token_bytes_t *b)
{
    const model_config_t *c = model_config(m);
    const model_weights_t *w = model_weights(m);
    memset(b, 0, sizeof *b);
    b->dense = (double)w->token_embd.row_bytes + tensor_bytes(&w->output_norm) +
               (w->output.data != w->token_embd.data ? tensor_bytes(&w->output) : tensor_bytes(&w->token_embd));
    for (int32_t il = 0; il < c->n_layer; il++) {
        const model_layer_t *L = &w->layers[il];
#define DENSE(name, kind) &L->name,
        const model_tensor_t *all[] = {MODEL_LAYER_DENSE_TENSORS(DENSE)};
#undef DENSE
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) /* MLA decodes absorbed: wk_b, wv_b, not wkv_b */
            if (all[i] != &L->wkv_b || !L->wk_b.data)
                b->dense += tensor_bytes(all[i]);
        const double bias = L->gate_exps_b.data ? (double)(2 * c->n_ff_exp + c->n_embd) * 4.0 : 0.0;
        const double active = (double)c->n_expert_used *
                              ((double)(L->gate_exps.mat_bytes + L->up_exps.mat_bytes + L->down_exps.mat_bytes) + bias);
        const gpu_plan_layer_t *pl = plan ? &plan->layer[il] : NULL;
        const double share = !pl ? 0.0 : pl->hot_share >= 0 ? pl->hot_share
                                                            : (double)pl->n_resident / (double)(c->n_expert ? c->n_expert : 1);
        b->experts_gpu += share * active;
        b->experts_cpu += (1.0 - share) * active;
    }
    b->kv_per_pos = (double)kv_type_position_bytes(kv_type, c); /* the format asked for, MLA's latent rows */
}

static json_t *provenance(const run_cfg_t *c, const char *gpu_name, double gpu_mem)
{
    char date[64], cmd[4096] = "guild bench", commit[256] = "unknown";
    time_t t = time(NULL);
    struct tm tm;
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tm));
    for (int i = 0; i < c->argc; i++) {
        size_t l = strlen(cmd);
        snprintf(cmd + l, sizeof cmd - l, " %s", c->argv[i]);
    }
    FILE *p = c->commit ? NULL : popen("git -C '" GUILD_SRCDIR "' describe --always --dirty --abbrev=12 2>/dev/null", "r");
    if (c->commit)
        snprintf(commit, sizeof commit, "%s", c->commit);
    if (p) {
        if (fgets(commit, sizeof commit, p))
            commit[strcspn(commit, "\n")] = '\0';
        pclose(p);
    }
    struct utsname u;
    const kern_cpu_t *cpu = kern_cpu();
    int cpus[MAX_CPUS];
    json_t *j = json_object();
    json_object_set_new(j, "guild", json_string(PACKAGE_VERSION));
    json_object_set_new(j, "commit", json_string(commit));
    json_object_set_new(j, "date", json_string(date));
    if (uname(&u) == 0) {
        char host[512];
        snprintf(host, sizeof host, "%s, %s %s %s", u.nodename, u.sysname, u.release, u.machine);
        json_object_set_new(j, "host", json_string(host));
    }
    json_object_set_new(j, "cpu", json_string(cpu->model));
    json_object_set_new(j, "cpus", json_integer(topo_all_cpus(cpus, MAX_CPUS)));
    json_object_set_new(j, "numa_nodes", json_integer(topo_node_count()));
    json_object_set_new(j, "gpu", json_string(gpu_name));
    json_object_set_new(j, "gpu_mem_gib", json_real(gpu_mem));
    json_object_set_new(j, "command", json_string(cmd));
    return j;
}

static json_t *model_json(const run_cfg_t *c, const model_t *m)
{
    const model_config_t *mc = model_config(m);
    const model_weights_t *w = model_weights(m);
    struct stat st;
    json_t *j = json_object();
    json_object_set_new(j, "path", json_string(c->model));
    json_object_set_new(j, "bytes", json_integer(stat(c->model, &st) == 0 ? (json_int_t)st.st_size : -1));
    json_object_set_new(j, "arch", json_string(model_arch_info(mc->arch)->name));
    json_object_set_new(j, "n_layer", json_integer(mc->n_layer));
    json_object_set_new(j, "n_embd", json_integer(mc->n_embd));
    json_object_set_new(j, "n_head", json_integer(mc->n_head));
    json_object_set_new(j, "n_head_kv", json_integer(mc->n_head_kv));
    json_object_set_new(j, "head_dim", json_integer(mc->head_dim));
    json_object_set_new(j, "n_expert", json_integer(mc->n_expert));
    json_object_set_new(j, "n_expert_used", json_integer(mc->n_expert_used));
    json_object_set_new(j, "n_ff_exp", json_integer(mc->n_ff_exp));
    json_object_set_new(j, "n_vocab", json_integer(mc->n_vocab));
    json_object_set_new(j, "file_type", json_integer(mc->file_type));
    if (w->n_layer > 0) {
        const model_layer_t *L = &w->layers[0];
        char types[256];
        snprintf(types, sizeof types, "token_embd %s, output %s, attn_q %s, attn_v %s (layer 0), experts gate/up %s, "
                 "down %s (layer 0), router %s", quant_type_info(w->token_embd.type)->name,
                 quant_type_info(w->output.type)->name, quant_type_info(L->wq.type)->name,
                 quant_type_info(L->wv.type)->name, quant_type_info(L->gate_exps.type)->name,
                 quant_type_info(L->down_exps.type)->name, quant_type_info(L->router.type)->name);
        json_object_set_new(j, "types", json_string(types));
    }
    return j;
}

/* Memory over a benchmark: the machine's anonymous and shared memory above its level before the stack opened,
 * sampled after each run (its peak), and each process of the stack at the end. */
#define MAX_PROCS 64
typedef struct mem {
    uint64_t base, peak;
    int n;
    int pids[MAX_PROCS];
    char names[MAX_PROCS][32];
    procmem_t pm[MAX_PROCS];
} mem_t;

static void mem_sample(mem_t *m)
{
    const uint64_t now = procmem_system_anon();
    if (now > m->base && now - m->base > m->peak)
        m->peak = now - m->base;
}

static void mem_processes(mem_t *m, backend_stack_t *stack)
{
    mem_sample(m);
    m->n = stack ? backend_stack_pids(stack, m->pids, m->names, MAX_PROCS) : 0;
    for (int i = 0; i < m->n; i++)
        if (procmem_read(m->pids[i], &m->pm[i]) < 0)
            memset(&m->pm[i], 0, sizeof m->pm[i]);
}

static void mem_print(const mem_t *m, double file_bytes)
{
    uint64_t peak = 0, anon = 0, shmem = 0;
    for (int i = 0; i < m->n; i++) {
        fprintf(stderr, "guild bench run: memory: %-14s pid %-7d peak resident %.2f GB (anonymous %.2f GB, shared "
                "%.2f GB, file %.2f GB at the end)\n", m->names[i], m->pids[i], (double)m->pm[i].peak / 1e9,
                (double)m->pm[i].anon / 1e9, (double)m->pm[i].shmem / 1e9, (double)m->pm[i].file / 1e9);
        peak += m->pm[i].peak;
        anon += m->pm[i].anon;
        shmem += m->pm[i].shmem;
    }
    fprintf(stderr, "guild bench run: memory: processes' peak resident sets %.2f GB in all; the machine's anonymous + "
            "shared memory rose by %.2f GB at most (each page once: %.2fx the model file's %.2f GB)\n",
            (double)peak / 1e9, (double)m->peak / 1e9, file_bytes > 0 ? (double)m->peak / file_bytes : 0.0,
            file_bytes / 1e9);
    (void)anon;
    (void)shmem;
}

static json_t *mem_json(const mem_t *m, double file_bytes)
{
    json_t *j = json_object(), *arr = json_array();
    for (int i = 0; i < m->n; i++) {
        json_t *p = json_object();
        json_object_set_new(p, "name", json_string(m->names[i]));
        json_object_set_new(p, "peak_resident_bytes", json_integer((json_int_t)m->pm[i].peak));
        json_object_set_new(p, "anon_bytes", json_integer((json_int_t)m->pm[i].anon));
        json_object_set_new(p, "shmem_bytes", json_integer((json_int_t)m->pm[i].shmem));
        json_object_set_new(p, "file_bytes", json_integer((json_int_t)m->pm[i].file));
        json_array_append_new(arr, p);
    }
    json_object_set_new(j, "processes", arr);
    json_object_set_new(j, "system_anon_shmem_peak_bytes", json_integer((json_int_t)m->peak));
    json_object_set_new(j, "model_file_bytes", json_real(file_bytes));
    json_object_set_new(j, "anon_shmem_over_file", json_real(file_bytes > 0 ? (double)m->peak / file_bytes : 0));
    return j;
}

int bench_run_main(int argc, char **argv)
{
    run_cfg_t c;
    const int pr = parse_args(argc, argv, &c);
    if (pr)
        return pr > 0 ? 0 : 2;
    guild_log_init("guild", c.verbose ? GUILD_LOG_INFO : GUILD_LOG_WARN);
    c.flags.log_level = guild_log_level();
    guild_err_t err = {{0}};
    model_t *m = NULL;
    backend_stack_t *stack = NULL;
    float *logits = NULL;
    backend_t *logits_be = NULL; /* the backend logits is of */
    int32_t *prompt = NULL, *pos = NULL;
    run_result_t *res = NULL;
    json_t *root = NULL;
    tok_t *tok = NULL;
    spec_setup_t spec = {0};
    spec_run_t sr = {0};
    spec_stats_t spec_all = {0};
    uint64_t hit_routed = 0, hit_resident = 0;
    int rc = 1;
    int32_t max_pop = 0;
    for (int i = 0; i < c.n_populate; i++)
        max_pop = c.populate[i] > max_pop ? c.populate[i] : max_pop;
    stack_plan_t sps[2] = {{0}};
    const gpu_plan_t *plan = NULL;   /* the first placement's plan that ran (the JSON's config) */
    token_bytes_t tbs[2];
    int place[MAX_POP];              /* per context: 0 its cache in GPU memory (or no plan), 1 in host RAM,
                                        -1 unsupported (unsup[i] says why) */
    static guild_err_t unsup[MAX_POP];
    int n_place[2] = {0, 0};
    int32_t top[2] = {0, 0};
    backend_stats_t bs;
    bool have_bs = false;
    double open_s = 0;
    mem_t mem = {0};
    const int32_t batch_asked = c.batch;

    if (model_new(&m, c.model, &err) < 0)
        goto out;
    const model_config_t *mc = model_config(m);
    const bool gpu = !strcmp(c.flags.gpu.backend, "cuda");
    if (spec_options_check(&c.spec, m, &err) < 0)
        goto out;
    spec_stack_options(&c.spec, &c.flags);
    if (stack_flags_routing(&c.flags, c.model, &err) < 0) /* the model's routing profile, or --routing's */
        goto out;
    c.flags.n_ctx = max_pop + c.gen; /* --gpu-mem auto: against the largest context */
    c.flags.n_batch = batch_asked < c.flags.n_ctx ? batch_asked : c.flags.n_ctx;
    if (stack_plan_fit(&c.flags, m, &err) < 0)
        goto out;
    if (c.flags.gpu_mem_why[0])
        fprintf(stderr, "guild bench run: --gpu-mem %s\n", c.flags.gpu_mem_why);
    /* each context's plan at its own size (the stack will make the same from the same options) says whether it
     * runs and where its cache lives; the contexts of a placement run in one stack sized for the largest */
    for (int i = 0; i < c.n_populate; i++) {
        stack_options_t fo = c.flags;
        fo.n_ctx = c.populate[i] + c.gen;
        fo.n_batch = batch_asked < fo.n_ctx ? batch_asked : fo.n_ctx; /* 0: auto */
        stack_plan_t pi;
        if (stack_plan_make(&pi, &fo, m, &unsup[i]) < 0) {
            place[i] = -1;
            fprintf(stderr, "guild bench run: context %d is unsupported: %s\n", c.populate[i], unsup[i].msg);
            continue;
        }
        place[i] = pi.on && pi.gpu.kv_host ? 1 : 0;
        n_place[place[i]]++;
        top[place[i]] = c.populate[i] > top[place[i]] ? c.populate[i] : top[place[i]];
        stack_plan_fini(&pi);
    }
    if (!n_place[0] && !n_place[1]) {
        guild_err_set(&err, "no context runs: %s", unsup[0].msg);
        goto out;
    }

    /* DRAM read bandwidth first (the model's workers are not up yet to disturb it) */
    double dram = c.dram_gbps;
    if (dram <= 0) {
        bench_bw_t bw;
        if (bench_read_bw_machine((size_t)4e9, 5, &bw, &err) < 0)
            goto out;
        dram = bw.median_gbps;
    }

    const int32_t V = mc->n_vocab;
    prompt = malloc((size_t)max_pop * sizeof *prompt);
    pos = malloc((size_t)(max_pop + c.gen) * sizeof *pos);
    res = calloc((size_t)c.n_populate * (size_t)c.runs, sizeof *res);
    if (!prompt || !pos || !res) {
        guild_err_set(&err, "out of memory");
        goto out;
    }
    uint64_t lcg = 0x9e3779b97f4a7c15ull;
    for (int32_t i = 0; i < max_pop; i++) {
        lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
        prompt[i] = c.period > 0 && i >= c.period ? prompt[i % c.period] : (int32_t)((lcg >> 33) % (uint64_t)V);
    }
    mem.base = procmem_system_anon();
    for (int g = 0; g < 2; g++) {
        if (!n_place[g])
            continue;
        c.flags.n_ctx = top[g] + c.gen;
        c.flags.n_batch = batch_asked < c.flags.n_ctx ? batch_asked : c.flags.n_ctx; /* 0: auto */
        if (stack_plan_make(&sps[g], &c.flags, m, &err) < 0)
            goto out;
        const gpu_plan_t *gp = sps[g].on ? &sps[g].gpu : NULL;
        if (!plan)
            plan = gp;
        bytes_per_token(m, gp, kv_type_resolve(c.flags.gpu.kv_type, gpu ? KV_TYPE_F16 : KV_TYPE_F32), &tbs[g]);
        int32_t first = 0;
        for (int i = 0; i < c.n_populate; i++)
            if (place[i] == g && (!first || c.populate[i] < first))
                first = c.populate[i];
        fprintf(stderr, "guild bench run: %s, %s, populate up to %d (the KV cache in %s), gen %d, %d runs; "
                "opening...\n", c.model, c.flags.single_process ? "single process" : "multi-process", top[g],
                g ? "host RAM" : "GPU memory", c.gen, c.runs);
        if (gp)
            gpu_plan_print(gp, stderr);
        const double t_open = guild_clock_s();
        if (backend_stack_open(&stack, &c.flags, m, c.model, &err) < 0)
            goto out;
        open_s += guild_clock_s() - t_open;
        backend_t *be = backend_stack_backend(stack);
        c.batch = backend_stack_n_batch(stack);
        /* the kind of memory the backend writes the logits into itself (pinned for the GPU: no copy after a step) */
        logits_be = be;
        if (!(logits = backend_logits_alloc(be, (size_t)V))) {
            guild_err_set(&err, "out of memory for %d logits", V);
            goto out;
        }
        if (c.spec.kind != SPEC_NONE) {
            if ((!tok && tok_new_from_gguf(&tok, model_gguf(m), &err) < 0) ||
                spec_setup_open(&spec, &c.spec, m, tok, c.flags.n_ctx, c.flags.n_threads, &err) < 0)
                goto out;
            sr = (spec_run_t){.drafter = spec.drafter, .tok = tok, .n_ctx = c.flags.n_ctx};
        }
        run_result_t warm;
        backend_stats_t bs0;
        const moe_exec_t *experts = backend_stack_experts(stack);
        const int32_t warm_n = first < WARM_MAX ? first : WARM_MAX;
        if (one_run(&c, be, experts, &sr, prompt, 0, warm_n, c.gen, V, logits, pos, &warm, &err) < 0)
            goto out;
        mem_sample(&mem);
        if (c.flags.single_process && backend_stats(be, &bs0) == 0)
            fprintf(stderr, "guild bench run: %d layers' experts on the GPU; warm-up streamed %llu layer batches\n",
                    bs0.gpu_expert_layers, (unsigned long long)bs0.streamed_layers);
        fprintf(stderr, "guild bench run: warm-up (context %d): prefill %.1f tok/s, decode %.1f tok/s\n", warm_n,
                warm_n / warm.prefill_s, c.gen / warm.decode_s);
        /* each context's runs in turn; with --sweep each run takes the contexts in increasing order along one
         * prompt, a context's prefill the sum of its segments' (the same batches from position 0 as alone when
         * the contexts are multiples of the batch) */
        int order[MAX_POP], n_order = 0;
        for (int i = 0; i < c.n_populate; i++)
            if (place[i] == g) {
                int k = n_order++;
                for (; k > 0 && c.sweep && c.populate[order[k - 1]] > c.populate[i]; k--)
                    order[k] = order[k - 1];
                order[k] = i;
            }
        run_result_t carried[MAX_RUNS] = {{0}};
        int32_t from[MAX_RUNS] = {0};
        for (int k = 0; k < n_order * c.runs; k++) {
            const int i = order[c.sweep ? k % n_order : k / c.runs], r = c.sweep ? k / n_order : k % c.runs;
            run_result_t *x = &res[i * c.runs + r];
            if (one_run(&c, be, experts, &sr, prompt, c.sweep ? from[r] : 0, c.populate[i], c.gen, V, logits, pos,
                        x, &err) < 0)
                goto out;
            if (c.sweep) {
                x->prefill_s += carried[r].prefill_s;
                x->stream_span_s += carried[r].stream_span_s;
                x->copy_busy_s += carried[r].copy_busy_s;
                x->copy_wait_s += carried[r].copy_wait_s;
                x->cpu_wait_s += carried[r].cpu_wait_s;
                carried[r] = *x;
                from[r] = c.populate[i];
            }
            spec_stats_add(&spec_all, &x->spec);
            char turn[64] = "";
            if (x->turn_us > 0)
                snprintf(turn, sizeof turn, ", turnaround %.1f us", x->turn_us);
            fprintf(stderr, "  context %6d run %d: prefill %8.1f tok/s (%.2f s), decode %7.2f tok/s, wait %.0f%%%s\n",
                    c.populate[i], r, c.populate[i] / x->prefill_s, x->prefill_s, c.gen / x->decode_s,
                    x->step_s > 0 ? 100.0 * x->wait_s / x->step_s : 0.0, turn);
            if (x->stream_span_s > 0)
                fprintf(stderr, "    streamed prefill: %.3f s on the device, copy engine busy %.3f s (%.0f%%), "
                        "GPU busy %.3f s (%.0f%%; waiting %.3f s for copies, %.3f s for the CPU side)\n",
                        x->stream_span_s, x->copy_busy_s, 100 * x->copy_busy_s / x->stream_span_s,
                        x->stream_span_s - x->copy_wait_s - x->cpu_wait_s,
                        100 * (x->stream_span_s - x->copy_wait_s - x->cpu_wait_s) / x->stream_span_s,
                        x->copy_wait_s, x->cpu_wait_s);
            mem_sample(&mem);
        }
        /* multi-process: the GPU worker's streaming counters, carried by its Stats (graphs and layers stay local) */
        have_bs = backend_stats(be, &bs) == 0;
        if (have_bs && c.flags.single_process)
            fprintf(stderr, "guild bench run: %u graphs, %llu graph steps\n", bs.graphs,
                    (unsigned long long)bs.graph_steps);
        if (have_bs)
            fprintf(stderr, "guild bench run: %llu layer batches streamed (%.1f GB, %.1f GB through the stager's "
                    "ring, %.1f ms waiting for its fills); split of streamable layers: GPU %llu experts / %llu pairs, "
                    "CPU %llu experts / %llu pairs\n",
                    (unsigned long long)bs.streamed_layers, (double)bs.streamed_bytes / 1e9,
                    (double)bs.staged_bytes / 1e9, (double)bs.stage_wait_ns / 1e6,
                    (unsigned long long)bs.split_gpu_experts, (unsigned long long)bs.split_gpu_pairs,
                    (unsigned long long)bs.split_cpu_experts, (unsigned long long)bs.split_cpu_pairs);
        if (have_bs && bs.hint_experts)
            fprintf(stderr, "guild bench run: prefetch (--prefetch-experts %d): %llu of %llu hinted experts routed "
                    "(hit rate %.1f%%), %.1f MB prefetched before %llu exchanges (%.2f MB each)\n",
                    c.flags.prefetch_experts, (unsigned long long)bs.hint_hits, (unsigned long long)bs.hint_experts,
                    100.0 * (double)bs.hint_hits / (double)bs.hint_experts, (double)bs.prefetch_bytes / 1e6,
                    (unsigned long long)bs.prefetch_layers,
                    bs.prefetch_layers ? (double)bs.prefetch_bytes / 1e6 / (double)bs.prefetch_layers : 0.0);
        /* the GPU's hit rate: routed pairs its resident experts served (the plan's, counted by the backend) */
        uint64_t hr = 0, hres = 0;
        if (backend_stack_hit_rate(stack, &hr, &hres) == 0 && hr) {
            fprintf(stderr, "guild bench run: GPU hit rate %.2f%%: %llu of %llu routed pairs on the %lld resident "
                    "experts\n", 100.0 * (double)hres / (double)hr, (unsigned long long)hres, (unsigned long long)hr,
                    (long long)(gp ? gp->n_resident_experts : 0));
            hit_routed += hr;
            hit_resident += hres;
        }
        spec_setup_close(&spec);
        sr.drafter = NULL;
        mem_processes(&mem, stack);
        backend_logits_free(logits_be, logits);
        logits = NULL;
        backend_stack_close(&stack);
    }
    if (c.spec.kind != SPEC_NONE)
        spec_stats_print(&spec_all, "guild bench run (measured runs)", stderr);
    const bool single = c.flags.single_process;
    c.flags.n_ctx = max_pop + c.gen;
    struct stat mst;
    const double file_bytes = stat(c.model, &mst) == 0 ? (double)mst.st_size : 0;
    mem_print(&mem, file_bytes);
    const token_bytes_t tb = tbs[n_place[0] ? 0 : 1];

    char gpu_name[256] = "none";
    double gpu_mem = 0, h2d = 0, d2h = 0, hbm = 0;
#ifdef GUILD_HAVE_CUDA
    if (gpu) {
        cuda_probe_t pb;
        if (cuda_probe(&pb, &err) < 0)
            goto out;
        snprintf(gpu_name, sizeof gpu_name, "%s", pb.name);
        gpu_mem = pb.mem_gib;
        h2d = pb.h2d_gbps;
        d2h = pb.d2h_gbps;
        hbm = pb.d2d_gbps;
    }
#endif

    root = json_object();
    json_object_set_new(root, "provenance", provenance(&c, gpu_name, gpu_mem));
    json_object_set_new(root, "model", model_json(&c, m));
    json_t *cfg = json_object();
    json_object_set_new(cfg, "backend", json_string(c.flags.gpu.backend));
    json_object_set_new(cfg, "mode", json_string(c.flags.single_process ? "single process" : "multi-process"));
    json_object_set_new(cfg, "cpu_workers", json_integer(c.flags.cpu_workers));
    json_object_set_new(cfg, "threads", json_integer(c.flags.n_threads));
    json_object_set_new(cfg, "batch", json_integer(c.batch));
    json_object_set_new(cfg, "n_ctx", json_integer(c.flags.n_ctx));
    json_object_set_new(cfg, "gpu_mem_budget_bytes", json_integer((json_int_t)c.flags.gpu.cuda.gpu_mem));
    json_object_set_new(cfg, "gpu_expert_layers_planned", json_integer(plan ? plan->n_resident : 0));
    json_object_set_new(cfg, "gpu_resident_experts_planned", json_integer(plan ? plan->n_resident_experts : 0));
    json_object_set_new(cfg, "gpu_plan_bytes", json_integer(plan ? (json_int_t)gpu_plan_total(plan) : 0));
    json_object_set_new(cfg, "gpu_plan_chunk", json_integer(plan ? plan->n_batch : 0));
    json_object_set_new(cfg, "gpu_plan_stage_slots", json_integer(plan ? plan->stage_slots : 0));
    json_object_set_new(cfg, "gpu_plan_stage_slot_experts", json_integer(plan ? plan->stage_slot_experts : 0));
    if (hit_routed) {
        json_object_set_new(cfg, "gpu_hit_rate", json_real((double)hit_resident / (double)hit_routed));
        json_object_set_new(cfg, "routed_pairs", json_integer((json_int_t)hit_routed));
    }
    json_object_set_new(cfg, "cuda_graphs", json_boolean(!c.flags.gpu.cuda.no_graph));
    json_object_set_new(cfg, "gen", json_integer(c.gen));
    json_object_set_new(cfg, "runs", json_integer(c.runs));
    json_object_set_new(cfg, "open_s", json_real(open_s));
    json_object_set_new(cfg, "prompt_period", json_integer(c.period));
    json_object_set_new(cfg, "sweep", json_boolean(c.sweep));
    json_t *specj = json_object();
    json_object_set_new(specj, "kind", json_string(spec_kind_name(c.spec.kind)));
    if (c.spec.kind != SPEC_NONE) {
        json_object_set_new(specj, "max", json_integer(c.spec.max));
        json_object_set_new(specj, "min_p", json_real(c.spec.min_p));
        if (c.spec.draft_model)
            json_object_set_new(specj, "draft_model", json_string(c.spec.draft_model));
    }
    json_object_set_new(cfg, "spec", specj);
    if (have_bs && single) {
        json_object_set_new(cfg, "gpu_expert_layers", json_integer(bs.gpu_expert_layers));
        json_object_set_new(cfg, "graphs_captured", json_integer(bs.graphs));
        json_object_set_new(cfg, "graph_steps", json_integer((json_int_t)bs.graph_steps));
    }
    if (have_bs) {
        json_object_set_new(cfg, "streamed_layer_batches", json_integer((json_int_t)bs.streamed_layers));
        json_object_set_new(cfg, "streamed_bytes", json_integer((json_int_t)bs.streamed_bytes));
        json_object_set_new(cfg, "split_gpu_experts", json_integer((json_int_t)bs.split_gpu_experts));
        json_object_set_new(cfg, "split_gpu_pairs", json_integer((json_int_t)bs.split_gpu_pairs));
        json_object_set_new(cfg, "split_cpu_experts", json_integer((json_int_t)bs.split_cpu_experts));
        json_object_set_new(cfg, "split_cpu_pairs", json_integer((json_int_t)bs.split_cpu_pairs));
        json_object_set_new(cfg, "staged_bytes", json_integer((json_int_t)bs.staged_bytes));
        json_object_set_new(cfg, "stage_wait_ms", json_real((double)bs.stage_wait_ns / 1e6));
        json_object_set_new(cfg, "prefetch_experts", json_integer(c.flags.prefetch_experts));
        json_object_set_new(cfg, "prefetch_hinted_experts", json_integer((json_int_t)bs.hint_experts));
        json_object_set_new(cfg, "prefetch_hint_hits", json_integer((json_int_t)bs.hint_hits));
        if (bs.hint_experts)
            json_object_set_new(cfg, "prefetch_hit_rate", json_real((double)bs.hint_hits / (double)bs.hint_experts));
        json_object_set_new(cfg, "prefetch_bytes", json_integer((json_int_t)bs.prefetch_bytes));
        json_object_set_new(cfg, "prefetch_exchanges", json_integer((json_int_t)bs.prefetch_layers));
        static const char *stager_name[] = {"none", "thread", "process", "pin", "shared"}; /* cuda_stager_t */
        json_object_set_new(cfg, "stager", json_string(stager_name[c.flags.gpu.cuda.stager]));
    }
    json_object_set_new(root, "config", cfg);
    json_object_set_new(root, "memory", mem_json(&mem, file_bytes));
    json_t *bwj = json_object();
    json_object_set_new(bwj, "dram_read_gbps", json_real(dram));
    json_object_set_new(bwj, "pcie_h2d_gbps", json_real(h2d));
    json_object_set_new(bwj, "pcie_d2h_gbps", json_real(d2h));
    json_object_set_new(bwj, "hbm_copy_gbps", json_real(hbm));
    json_object_set_new(root, "bandwidth", bwj);
    json_t *tbj = json_object();
    json_object_set_new(tbj, "dense", json_real(tb.dense));
    json_object_set_new(tbj, "experts_gpu", json_real(tb.experts_gpu));
    json_object_set_new(tbj, "experts_cpu", json_real(tb.experts_cpu));
    json_object_set_new(tbj, "kv_per_position", json_real(tb.kv_per_pos));
    json_object_set_new(root, "decode_bytes_per_token", tbj);

    printf("# guild bench run: %s; %s, backend %s, batch %d, gpu-mem %s, %d of %d layers' experts on the GPU (plan)\n",
           c.model, c.flags.single_process ? "single process" : "multi-process", c.flags.gpu.backend, c.batch,
           c.flags.gpu.cuda.gpu_mem ? "budget" : "none", plan ? plan->n_resident : 0, mc->n_layer);
    if (hit_routed)
        printf("# GPU hit rate %.2f%% of %llu routed pairs (%lld resident experts)\n",
               100.0 * (double)hit_resident / (double)hit_routed, (unsigned long long)hit_routed,
               (long long)(plan ? plan->n_resident_experts : 0));
    printf("# bandwidth: DRAM read %.1f GB/s, HBM copy %.1f GB/s, PCIe H2D %.1f GB/s, D2H %.1f GB/s\n", dram, hbm, h2d,
           d2h);
    printf("# decode bytes/token: dense %.3f GB, GPU experts %.3f GB, CPU experts %.3f GB, KV %.1f KB/position (%s)\n",
           tb.dense / 1e9, tb.experts_gpu / 1e9, tb.experts_cpu / 1e9, tb.kv_per_pos / 1e3,
           kv_type_name(kv_type_resolve(c.flags.gpu.kv_type, gpu ? KV_TYPE_F16 : KV_TYPE_F32)));
    printf("%8s %14s %13s %10s %14s %10s\n", "context", "prefill tok/s", "decode tok/s", "wait share",
           "limit tok/s", "fraction");
    json_t *arr = json_array();
    for (int i = 0; i < c.n_populate; i++) {
        double pf[MAX_RUNS], dc[MAX_RUNS], ws[MAX_RUNS];
        if (place[i] < 0) { /* reported with the plan's reason, never as a zero */
            printf("%8d unsupported: %s\n", c.populate[i], unsup[i].msg);
            json_t *pj = json_object();
            json_object_set_new(pj, "context", json_integer(c.populate[i]));
            json_object_set_new(pj, "unsupported", json_string(unsup[i].msg));
            json_array_append_new(arr, pj);
            continue;
        }
        const token_bytes_t *tp = &tbs[place[i]];
        json_t *runs = json_array();
        for (int r = 0; r < c.runs; r++) {
            const run_result_t *x = &res[i * c.runs + r];
            pf[r] = c.populate[i] / x->prefill_s;
            dc[r] = c.gen / x->decode_s;
            ws[r] = x->step_s > 0 ? x->wait_s / x->step_s : 0;
            json_t *rj = json_object();
            json_object_set_new(rj, "prefill_s", json_real(x->prefill_s));
            json_object_set_new(rj, "decode_s", json_real(x->decode_s));
            json_object_set_new(rj, "prefill_tok_s", json_real(pf[r]));
            json_object_set_new(rj, "decode_tok_s", json_real(dc[r]));
            json_object_set_new(rj, "wait_share", json_real(ws[r]));
            if (x->turn_us > 0)
                json_object_set_new(rj, "dense_turnaround_us", json_real(x->turn_us));
            if (c.spec.kind != SPEC_NONE)
                json_object_set_new(rj, "spec", spec_json(&x->spec));
            if (x->stream_span_s > 0) {
                json_object_set_new(rj, "stream_span_s", json_real(x->stream_span_s));
                json_object_set_new(rj, "copy_busy_s", json_real(x->copy_busy_s));
                json_object_set_new(rj, "gpu_busy_s", json_real(x->stream_span_s - x->copy_wait_s - x->cpu_wait_s));
                json_object_set_new(rj, "gpu_wait_copy_s", json_real(x->copy_wait_s));
                json_object_set_new(rj, "gpu_wait_cpu_s", json_real(x->cpu_wait_s));
            }
            json_array_append_new(runs, rj);
        }
        const double pfm = guild_median(pf, c.runs), dcm = guild_median(dc, c.runs), wsm = guild_median(ws, c.runs);
        /* the bytes of a decode token at the middle of the generated stretch, each over its memory's bandwidth (a
         * cache in host RAM over PCIe) */
        const double ctx = c.populate[i] + c.gen / 2.0, kv_bytes = tp->kv_per_pos * ctx;
        const bool kv_host = place[i] == 1;
        const double gpu_bytes = tp->dense + tp->experts_gpu + (kv_host ? 0 : kv_bytes);
        const double t_min = (gpu && hbm > 0 ? gpu_bytes / (hbm * 1e9) : 0) +
                             (kv_host && h2d > 0 ? kv_bytes / (h2d * 1e9) : 0) +
                             (dram > 0 ? (tp->experts_cpu + (gpu ? 0 : gpu_bytes)) / (dram * 1e9) : 0);
        const double limit = t_min > 0 ? 1.0 / t_min : 0;
        printf("%8d %14.1f %13.2f %9.1f%% %14.1f %9.1f%%%s\n", c.populate[i], pfm, dcm, 100 * wsm, limit,
               limit > 0 ? 100 * dcm / limit : 0, kv_host ? "  (KV cache in host RAM)" : "");
        json_t *pj = json_object();
        json_object_set_new(pj, "context", json_integer(c.populate[i]));
        json_object_set_new(pj, "prefill_tok_s", json_real(pfm));
        json_object_set_new(pj, "decode_tok_s", json_real(dcm));
        json_object_set_new(pj, "decode_wait_share", json_real(wsm));
        json_object_set_new(pj, "decode_limit_tok_s", json_real(limit));
        json_object_set_new(pj, "decode_fraction_of_limit", json_real(limit > 0 ? dcm / limit : 0));
        json_object_set_new(pj, "kv_cache", json_string(kv_host ? "host" : "gpu"));
        if (c.spec.kind != SPEC_NONE) {
            spec_stats_t sum = {0};
            for (int r = 0; r < c.runs; r++)
                spec_stats_add(&sum, &res[i * c.runs + r].spec);
            json_object_set_new(pj, "spec", spec_json(&sum));
        }
        json_object_set_new(pj, "runs", runs);
        json_array_append_new(arr, pj);
    }
    json_object_set_new(root, "results", arr);
    if (c.json && json_dump_file(root, c.json, JSON_INDENT(2) | JSON_SORT_KEYS) < 0) {
        guild_err_set(&err, "cannot write %s", c.json);
        goto out;
    }
    if (c.svg) {
        const char *base = strrchr(c.model, '/') ? strrchr(c.model, '/') + 1 : c.model;
        const plot_run_t drawn = {.doc = root, .label = base};
        FILE *f = fopen(c.svg, "w");
        if (!f) {
            guild_err_errno(&err, errno, "cannot create %s", c.svg);
            goto out;
        }
        const int prc = plot_write_svg(&drawn, 1, NULL, f, &err);
        if (fclose(f) != 0 && prc == 0) {
            guild_err_errno(&err, errno, "cannot write %s", c.svg);
            goto out;
        }
        if (prc < 0)
            goto out;
    }
    rc = 0;
out:
    if (rc)
        fprintf(stderr, "guild bench run: %s\n", err.msg);
    json_decref(root);
    if (logits)
        backend_logits_free(logits_be, logits);
    backend_stack_close(&stack);
    stack_plan_fini(&sps[0]);
    stack_plan_fini(&sps[1]);
    spec_setup_close(&spec);
    tok_destroy(&tok);
    free(prompt);
    free(pos);
    free(res);
    model_destroy(&m);
    return rc;
}
