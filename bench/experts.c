/* guild bench experts: the routed-expert pipeline (cpu-expert-worker/expert_pipe) alone, on real expert shapes,
 * against the machine's measured DRAM read bandwidth.
 *
 * Decode: one token per step, K experts per layer drawn from a per-layer random permutation that is used up
 * before any expert repeats, over enough layers that the working set (--gb) is many times the last-level
 * cache: every step reads its experts' weights from DRAM. weight_GBps = bytes of the experts' weights read per
 * second; read_GBps = the STREAM-like probe (bench/bw.c) on the same pinned threads, measured right before;
 * fraction = weight_GBps / read_GBps. Prefill: --prefill tokens per layer routed uniformly at random,
 * reported as GFLOP/s (2 flops per weight element per token) and tokens/s per layer.
 * Warm-up excluded, medians of --runs runs. */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "bench/bw.h"
#include "core/kern/kern.h"
#include "core/quant/fp16.h"
#include "core/quant/quant.h"
#include "core/topo/topo.h"
#include "core/util/pool.h"
#include "cpu-expert-worker/expert_pipe.h"

#define MAX_CPUS 1024
#define MAX_TYPES 16
#define TEMPLATE_ROWS 64 /* distinct quantized rows, repeated through the working set */

typedef struct shape {
    const char *name;
    int64_t n_embd, n_ff;
    int32_t n_expert, n_used;
} shape_t;

static const shape_t shapes[] = {
    {"qwen3-30b-a3b", 2048, 768, 128, 8},
    {"qwen3-235b-a22b", 4096, 1536, 128, 8},
    {"qwen3-coder-480b-a35b", 6144, 2560, 160, 8},
    {"mixtral-8x7b", 4096, 14336, 8, 2},
    {"olmoe-1b-7b", 2048, 1024, 64, 8},
    {"gpt-oss-120b", 2880, 2880, 128, 4},
    {"deepseek-v3", 7168, 2048, 256, 8},
};

typedef struct opts {
    const shape_t *shape;
    guild_type_t types[MAX_TYPES];
    int n_types;
    int down_type; /* -1: same as the type */
    int tokens, prefill, threads, runs, steps, node;
    double gb;
    expert_pipe_tuning_t tune;
} opts_t;

/* Synthetic experts of one type: [n_layer][n_expert] matrices in one node-local allocation. */
typedef struct bank {
    expert_pipe_src_t src;
    expert_mats_t *mats;
    char *mem;
    size_t mem_bytes, expert_bytes;
} bank_t;

static const expert_mats_t *bank_get(const void *ctx, int32_t layer, int32_t expert)
{
    const bank_t *b = ctx;
    return &b->mats[(size_t)layer * (size_t)b->src.n_expert + (size_t)expert];
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float rng_float(void)
{
    return (float)((double)(rng_next() >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

static size_t row_bytes(guild_type_t t, int64_t n)
{
    uint64_t b = 0;
    if (quant_row_bytes((uint32_t)t, (uint64_t)n, &b, NULL))
        return 0;
    return (size_t)b;
}

/* TEMPLATE_ROWS rows of n elements of `type`: quantized from random floats where the type has a quantizer,
 * else random bytes with a finite scale in each block's leading fp16 (every such IQ type keeps d there). */
static char *template_rows(guild_type_t type, int64_t n)
{
    const size_t rb = row_bytes(type, n);
    char *rows = malloc(rb * TEMPLATE_ROWS);
    float *f = malloc((size_t)n * sizeof *f);
    if (!rows || !f) {
        free(rows);
        free(f);
        return NULL;
    }
    const quant_type_info_t *info = quant_type_info((uint32_t)type);
    for (int r = 0; r < TEMPLATE_ROWS; r++) {
        char *row = rows + (size_t)r * rb;
        if (quant_can_quantize(type)) {
            for (int64_t i = 0; i < n; i++)
                f[i] = rng_float() * 0.05f;
            if (quant_quantize_row_ref(type, f, row, n, NULL)) {
                free(rows);
                free(f);
                return NULL;
            }
        } else {
            for (size_t i = 0; i < rb; i++)
                row[i] = (char)rng_next();
            for (size_t b = 0; b < rb; b += info->block_bytes) {
                uint16_t d = quant_f32_to_f16(0.001f + 0.002f * (float)(rng_next() % 100) / 100.0f);
                memcpy(row + b, &d, 2);
            }
        }
    }
    free(f);
    return rows;
}

static void fill_matrix(char *dst, const char *tmpl, size_t rb, int64_t rows)
{
    for (int64_t r = 0; r < rows; r++)
        memcpy(dst + (size_t)r * rb, tmpl + (size_t)(r % TEMPLATE_ROWS) * rb, rb);
}

static int bank_new(bank_t *b, const opts_t *o, guild_type_t type, guild_err_t *err)
{
    const shape_t *s = o->shape;
    const guild_type_t dtype = o->down_type >= 0 ? (guild_type_t)o->down_type : type;
    const size_t gu_row = row_bytes(type, s->n_embd), d_row = row_bytes(dtype, s->n_ff);
    if (!gu_row || !d_row)
        return guild_err_set(err, "%s: the shape %s (%lld x %lld) is not a whole number of its blocks",
                             quant_type_info(type)->name, s->name, (long long)s->n_embd, (long long)s->n_ff);
    memset(b, 0, sizeof *b);
    b->expert_bytes = 2 * gu_row * (size_t)s->n_ff + d_row * (size_t)s->n_embd;
    const double layer_bytes = (double)b->expert_bytes * s->n_expert;
    int32_t n_layer = (int32_t)(o->gb * 1e9 / layer_bytes + 0.999);
    if (n_layer < 2)
        n_layer = 2;
    b->src = (expert_pipe_src_t){n_layer, s->n_expert, s->n_used, s->n_embd, s->n_ff, bank_get, b};
    const size_t n = (size_t)n_layer * (size_t)s->n_expert;
    b->mem_bytes = n * b->expert_bytes;
    b->mats = calloc(n, sizeof *b->mats);
    b->mem = topo_alloc(b->mem_bytes, o->node, err);
    char *tg = template_rows(type, s->n_embd), *td = template_rows(dtype, s->n_ff);
    if (!b->mats || !b->mem || !tg || !td) {
        free(tg);
        free(td);
        free(b->mats);
        topo_free(b->mem, b->mem_bytes);
        return b->mem ? guild_err_set(err, "out of memory for the experts") : -1;
    }
    for (size_t i = 0; i < n; i++) {
        char *m = b->mem + i * b->expert_bytes;
        b->mats[i] = (expert_mats_t){m, m + gu_row * (size_t)s->n_ff, m + 2 * gu_row * (size_t)s->n_ff,
                                     type, type, dtype, gu_row, gu_row, d_row};
        fill_matrix(m, tg, gu_row, 2 * s->n_ff); /* gate and up back to back */
        fill_matrix(m + 2 * gu_row * (size_t)s->n_ff, td, d_row, s->n_embd);
    }
    free(tg);
    free(td);
    return 0;
}

static void bank_free(bank_t *b)
{
    free(b->mats);
    topo_free(b->mem, b->mem_bytes);
}

/* Per layer, a random permutation of the experts, consumed n_used at a time: an expert comes back only after
 * every other expert of its layer was read, i.e. after the whole working set went through the caches. */
typedef struct router {
    int32_t n_layer, n_expert, n_used;
    int32_t *perm; /* [n_layer][n_expert] */
    int32_t *next; /* [n_layer] position in perm */
} router_t;

static int router_new(router_t *r, const bank_t *b)
{
    r->n_layer = b->src.n_layer;
    r->n_expert = b->src.n_expert;
    r->n_used = b->src.n_expert_used;
    r->perm = malloc((size_t)r->n_layer * (size_t)r->n_expert * sizeof *r->perm);
    r->next = calloc((size_t)r->n_layer, sizeof *r->next);
    if (!r->perm || !r->next)
        return -1;
    for (int32_t l = 0; l < r->n_layer; l++) {
        r->next[l] = r->n_expert; /* shuffle on first use */
        for (int32_t e = 0; e < r->n_expert; e++)
            r->perm[(size_t)l * (size_t)r->n_expert + (size_t)e] = e;
    }
    return 0;
}

static void router_free(router_t *r)
{
    free(r->perm);
    free(r->next);
}

/* n_used distinct experts of `layer` for one token */
static void router_pick(router_t *r, int32_t layer, int32_t *ids)
{
    int32_t *p = r->perm + (size_t)layer * (size_t)r->n_expert;
    if (r->next[layer] + r->n_used > r->n_expert) {
        for (int32_t i = r->n_expert - 1; i > 0; i--) {
            int32_t j = (int32_t)(rng_next() % (uint64_t)(i + 1)), t = p[i];
            p[i] = p[j];
            p[j] = t;
        }
        r->next[layer] = 0;
    }
    memcpy(ids, p + r->next[layer], (size_t)r->n_used * sizeof *ids);
    r->next[layer] += r->n_used;
}

/* uniformly random distinct experts (prefill routing) */
static void random_pick(int32_t n_expert, int32_t n_used, int32_t *ids)
{
    for (int32_t k = 0; k < n_used; k++) {
        int32_t e, dup;
        do {
            e = (int32_t)(rng_next() % (uint64_t)n_expert);
            dup = 0;
            for (int32_t q = 0; q < k; q++)
                dup |= ids[q] == e;
        } while (dup);
        ids[k] = e;
    }
}

typedef struct result {
    double weight_gbps, read_gbps, step_us;
    double prefill_gflops, prefill_tok_s, prefill_gbps;
} result_t;

/* Decode: `steps` steps of `tokens` tokens, each on the next layer; weight bytes counted per distinct expert
 * of a step. Returns the median GB/s over the runs, after one warm-up run. */
static int run_decode(const opts_t *o, bank_t *b, expert_pipe_t *pipe, router_t *rt, result_t *res,
                      guild_err_t *err)
{
    const int32_t K = b->src.n_expert_used, T = o->tokens;
    const int64_t E = b->src.n_embd;
    float *x = malloc((size_t)T * (size_t)E * sizeof *x);
    float *y = malloc((size_t)T * (size_t)K * (size_t)E * sizeof *y);
    int32_t *ids = malloc((size_t)T * (size_t)K * sizeof *ids);
    double *gbps = malloc((size_t)o->runs * sizeof *gbps), *us = malloc((size_t)o->runs * sizeof *us);
    uint8_t *seen = calloc((size_t)b->src.n_expert, 1);
    int rc = -1;
    if (!x || !y || !ids || !gbps || !us || !seen) {
        guild_err_set(err, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < (size_t)T * (size_t)E; i++)
        x[i] = rng_float();
    int32_t layer = 0;
    for (int run = -1; run < o->runs; run++) {
        double bytes = 0, t0 = bench_now();
        for (int s = 0; s < o->steps; s++) {
            /* the tokens of a step: distinct experts from the permutation (several tokens: a verification
             * window, whose tokens share some experts in real models; here they do not, the worst case) */
            for (int32_t t = 0; t < T; t++)
                router_pick(rt, layer, ids + (size_t)t * (size_t)K);
            memset(seen, 0, (size_t)b->src.n_expert);
            for (int32_t q = 0; q < T * K; q++)
                if (!seen[ids[q]]) {
                    seen[ids[q]] = 1;
                    bytes += (double)b->expert_bytes;
                }
            if (expert_pipe_run(pipe, layer, T, x, ids, y, err) < 0)
                goto done;
            layer = (layer + 1) % b->src.n_layer;
        }
        double dt = bench_now() - t0;
        if (run >= 0) {
            gbps[run] = bytes / dt / 1e9;
            us[run] = dt / o->steps * 1e6;
        }
    }
    res->weight_gbps = bench_median(gbps, o->runs);
    res->step_us = bench_median(us, o->runs);
    rc = 0;
done:
    free(x);
    free(y);
    free(ids);
    free(gbps);
    free(us);
    free(seen);
    return rc;
}

/* Prefill: o->prefill tokens per layer, a few layers per run. */
static int run_prefill(const opts_t *o, bank_t *b, expert_pipe_t *pipe, result_t *res, guild_err_t *err)
{
    const int32_t K = b->src.n_expert_used, T = o->prefill;
    const int64_t E = b->src.n_embd, F = b->src.n_ff;
    const int layers = 2;
    float *x = malloc((size_t)T * (size_t)E * sizeof *x);
    float *y = malloc((size_t)T * (size_t)K * (size_t)E * sizeof *y);
    int32_t *ids = malloc((size_t)T * (size_t)K * sizeof *ids);
    double *gf = malloc((size_t)o->runs * sizeof *gf), *ts = malloc((size_t)o->runs * sizeof *ts);
    double *gb = malloc((size_t)o->runs * sizeof *gb);
    uint8_t *seen = calloc((size_t)b->src.n_expert, 1);
    int rc = -1;
    if (!x || !y || !ids || !gf || !ts || !gb || !seen) {
        guild_err_set(err, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < (size_t)T * (size_t)E; i++)
        x[i] = rng_float();
    int32_t layer = 0;
    for (int run = -1; run < o->runs; run++) {
        double t_all = 0, bytes = 0;
        for (int l = 0; l < layers; l++) {
            for (int32_t t = 0; t < T; t++)
                random_pick(b->src.n_expert, K, ids + (size_t)t * (size_t)K);
            memset(seen, 0, (size_t)b->src.n_expert);
            for (int32_t q = 0; q < T * K; q++)
                if (!seen[ids[q]]) {
                    seen[ids[q]] = 1;
                    bytes += (double)b->expert_bytes;
                }
            double t0 = bench_now();
            if (expert_pipe_run(pipe, layer, T, x, ids, y, err) < 0)
                goto done;
            t_all += bench_now() - t0;
            layer = (layer + 1) % b->src.n_layer;
        }
        if (run >= 0) {
            const double flops = 2.0 * 3.0 * (double)E * (double)F * (double)T * K * layers;
            gf[run] = flops / t_all / 1e9;
            ts[run] = (double)T * layers / t_all;
            gb[run] = bytes / t_all / 1e9;
        }
    }
    res->prefill_gflops = bench_median(gf, o->runs);
    res->prefill_tok_s = bench_median(ts, o->runs);
    res->prefill_gbps = bench_median(gb, o->runs);
    rc = 0;
done:
    free(x);
    free(y);
    free(ids);
    free(gf);
    free(ts);
    free(gb);
    free(seen);
    return rc;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: guild bench experts [--type T[,T...]] [--tokens N] [--shape NAME|EMBDxFF:EXPERTS:USED]\n"
            "                           [--threads K] [options]\n"
            "  --type T        weight types of gate/up/down (default q4_K,iq4_xs); --down-type T for down alone\n"
            "  --tokens N      tokens per decode step (default 1)\n"
            "  --shape S       expert shape (default qwen3-30b-a3b):");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        fprintf(out, " %s", shapes[i].name);
    fprintf(out,
            "\n"
            "  --threads K     threads, pinned to node --node's CPUs (default: all of them)\n"
            "  --node N        NUMA node of the threads and the weights (default 0)\n"
            "  --gb G          working set in GB (default 4; many times the last-level cache)\n"
            "  --runs R        timed runs after one warm-up, median reported (default 7)\n"
            "  --steps S       decode steps per run (default 96)\n"
            "  --prefill P     tokens per layer of the prefill measurement (default 256; 0: skip)\n"
            "  --gate-up-rows N, --down-rows N   pipeline row blocks (multiples of 16; default 0: automatic)\n"
            "  --kernels L     force a kernel level (scalar, avx2, avx512, avx512-vnni, amx)\n");
}

static int parse_shape(const char *arg, shape_t *custom, const shape_t **out)
{
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (!strcmp(arg, shapes[i].name)) {
            *out = &shapes[i];
            return 0;
        }
    long long e, f;
    int ne, nu;
    if (sscanf(arg, "%lldx%lld:%d:%d", &e, &f, &ne, &nu) == 4 && e > 0 && f > 0 && ne > 0 && nu > 0 && nu <= ne) {
        *custom = (shape_t){"custom", e, f, ne, nu};
        *out = custom;
        return 0;
    }
    return -1;
}

int bench_experts_main(int argc, char **argv)
{
    static const struct option lopts[] = {
        {"type", required_argument, NULL, 't'},      {"down-type", required_argument, NULL, 'D'},
        {"tokens", required_argument, NULL, 'n'},    {"shape", required_argument, NULL, 's'},
        {"threads", required_argument, NULL, 'j'},   {"node", required_argument, NULL, 'N'},
        {"gb", required_argument, NULL, 'g'},        {"runs", required_argument, NULL, 'r'},
        {"steps", required_argument, NULL, 'S'},     {"prefill", required_argument, NULL, 'p'},
        {"gate-up-rows", required_argument, NULL, 'G'}, {"down-rows", required_argument, NULL, 'R'},
        {"kernels", required_argument, NULL, 'k'},   {"help", no_argument, NULL, 'h'},
        {0, 0, 0, 0},
    };
    static shape_t custom;
    opts_t o = {.shape = &shapes[0], .down_type = -1, .tokens = 1, .prefill = 256, .runs = 7, .steps = 96,
                .node = 0, .gb = 4, .tune = {0, 0}};
    const char *types = "q4_K,iq4_xs";
    guild_err_t err;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", lopts, NULL)) != -1) {
        switch (c) {
        case 't': types = optarg; break;
        case 'D':
            o.down_type = quant_type_from_name(optarg);
            if (o.down_type < 0 || !kern_can_matmul((guild_type_t)o.down_type)) {
                fprintf(stderr, "guild bench experts: --down-type %s: not a weight type Guild computes\n", optarg);
                return 2;
            }
            break;
        case 'n': o.tokens = atoi(optarg); break;
        case 's':
            if (parse_shape(optarg, &custom, &o.shape)) {
                fprintf(stderr, "guild bench experts: --shape %s: unknown (name, or EMBDxFF:EXPERTS:USED)\n", optarg);
                return 2;
            }
            break;
        case 'j': o.threads = atoi(optarg); break;
        case 'N': o.node = atoi(optarg); break;
        case 'g': o.gb = atof(optarg); break;
        case 'r': o.runs = atoi(optarg); break;
        case 'S': o.steps = atoi(optarg); break;
        case 'p': o.prefill = atoi(optarg); break;
        case 'G': o.tune.gate_up_rows = atoi(optarg); break;
        case 'R': o.tune.down_rows = atoi(optarg); break;
        case 'k': {
            int l = kern_level_from_name(optarg);
            if (l < 0 || kern_set_level((kern_level_t)l, &err)) {
                fprintf(stderr, "guild bench experts: --kernels %s: %s\n", optarg,
                        l < 0 ? "unknown level" : err.msg);
                return 2;
            }
            break;
        }
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc || o.tokens < 1 || o.prefill < 0 || o.threads < 0 || o.runs < 1 || o.steps < 1 || o.gb <= 0 ||
        o.node < 0 || o.node >= topo_node_count()) {
        usage(stderr);
        return 2;
    }
    char *list = strdup(types), *save = NULL;
    for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int t = quant_type_from_name(tok);
        if (t < 0 || !kern_can_matmul((guild_type_t)t) || o.n_types == MAX_TYPES) {
            fprintf(stderr, "guild bench experts: --type %s: not a weight type Guild computes\n", tok);
            free(list);
            return 2;
        }
        o.types[o.n_types++] = (guild_type_t)t;
    }
    free(list);

    static int cpus[MAX_CPUS], nodes[MAX_CPUS];
    int n_cpus = topo_node_cpus(o.node, cpus, MAX_CPUS);
    if (o.threads > 0 && o.threads < n_cpus)
        n_cpus = o.threads;
    if (n_cpus == 0) {
        fprintf(stderr, "guild bench experts: node %d has no CPU this process may use\n", o.node);
        return 1;
    }
    for (int i = 0; i < n_cpus; i++)
        nodes[i] = o.node;

    bench_print_provenance(stdout, argc, argv);
    printf("# shape %s: n_embd=%lld n_ff=%lld experts=%d used=%d; threads=%d on node %d; working set %.1f GB;"
           " gate_up_rows=%d down_rows=%d\n",
           o.shape->name, (long long)o.shape->n_embd, (long long)o.shape->n_ff, o.shape->n_expert, o.shape->n_used,
           n_cpus, o.node, o.gb, o.tune.gate_up_rows, o.tune.down_rows);
    fflush(stdout);

    guild_pool_t *pool = NULL;
    if (guild_pool_new(&pool, n_cpus, cpus, &err)) {
        fprintf(stderr, "guild bench experts: %s\n", err.msg);
        return 1;
    }
    int status = 0;
    for (int ti = 0; ti < o.n_types && status == 0; ti++) {
        const guild_type_t type = o.types[ti];
        const char *tn = quant_type_info((uint32_t)type)->name;
        bank_t bank;
        router_t rt = {0};
        expert_pipe_t *pipe = NULL;
        result_t res = {0};
        bench_bw_t bw;
        if (bank_new(&bank, &o, type, &err)) {
            fprintf(stderr, "guild bench experts: %s: %s\n", tn, err.msg);
            status = 1;
            break;
        }
        if (router_new(&rt, &bank) || expert_pipe_new(&pipe, &bank.src, pool, &o.tune, &err)) {
            fprintf(stderr, "guild bench experts: %s: %s\n", tn, rt.perm ? err.msg : "out of memory");
            status = 1;
        }
        /* bandwidth right before the pipeline, same threads: a shared machine's bandwidth drifts */
        if (!status && bench_read_bw(cpus, nodes, n_cpus, (size_t)(o.gb * 0.5e9), 5, &bw, &err)) {
            fprintf(stderr, "guild bench experts: %s\n", err.msg);
            status = 1;
        }
        if (!status && run_decode(&o, &bank, pipe, &rt, &res, &err)) {
            fprintf(stderr, "guild bench experts: %s: %s\n", tn, err.msg);
            status = 1;
        }
        if (!status && o.prefill > 0 && run_prefill(&o, &bank, pipe, &res, &err)) {
            fprintf(stderr, "guild bench experts: %s: %s\n", tn, err.msg);
            status = 1;
        }
        if (!status) {
            res.read_gbps = bw.median_gbps;
            const double active = (double)bank.expert_bytes * o.shape->n_used;
            printf("# %s: %d layers x %d experts x %.2f MB = %.2f GB; %.2f MB of expert weights per token per layer\n",
                   tn, bank.src.n_layer, bank.src.n_expert, bank.expert_bytes / 1e6, bank.mem_bytes / 1e9,
                   active / 1e6);
            printf("# %s: read probe median %.2f GB/s (best %.2f); decode %.1f us per layer step (%d tokens)\n", tn,
                   bw.median_gbps, bw.best_gbps, res.step_us, o.tokens);
            if (o.prefill > 0)
                printf("# %s: prefill %d tokens/layer: %.1f GFLOP/s, %.0f tokens/s per layer, %.2f GB/s of weights\n",
                       tn, o.prefill, res.prefill_gflops, res.prefill_tok_s, res.prefill_gbps);
            printf("%s tokens=%d weight_GBps=%.2f read_GBps=%.2f fraction=%.3f", tn, o.tokens, res.weight_gbps,
                   res.read_gbps, res.weight_gbps / res.read_gbps);
            if (o.prefill > 0)
                printf(" prefill_tokens=%d prefill_GFLOPs=%.1f", o.prefill, res.prefill_gflops);
            printf("\n");
            fflush(stdout);
        }
        expert_pipe_destroy(&pipe);
        router_free(&rt);
        bank_free(&bank);
    }
    guild_pool_destroy(&pool);
    return status;
}
