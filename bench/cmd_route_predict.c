/* guild bench route-predict: how well each MoE layer's experts are predicted before its router runs
 * (bench/route_predict.h: next-layer pre-gating and the previous token's experts), on the cpu backend in one
 * process: a prompt of pseudo-random tokens, then greedy decode; only the decoded tokens are scored. Per layer
 * and overall: the share of the true experts among each predictor's experts, and among its first m, m the
 * experts that fit a prefetch budget (--budget-mb, what the CPU worker could read while the device computes a
 * layer's dense step), with the bytes a perfect prefetch of those hits would save. */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench.h"
#include "bench/route_predict.h"
#include "core/model/parts.h"
#include "core/util/cli.h"
#include "core/util/clock.h"
#include "cpu-expert-worker/experts/moe_local.h"
#include "gpu-worker/dense/backend.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: guild bench route-predict -m MODEL [--prompt N] [--gen N] [--threads K] [--budget-mb B]\n"
            "                                 [--repeat TOKEN] [--seed S]\n"
            "  For every MoE layer l+1 and decoded token, the true top-k experts against: pregate (layer l+1's\n"
            "  router on layer l's FFN input, renormed with layer l+1's ffn_norm), pregate_raw (the same input as\n"
            "  layer l normed it), prev (layer l+1's experts of the previous token). cpu backend, one process.\n"
            "  --prompt N     prompt tokens, pseudo-random (default 32; not scored)\n"
            "  --gen N        tokens decoded greedily and scored (default 128)\n"
            "  --threads K    threads (default: online CPUs)\n"
            "  --budget-mb B  prefetch budget per layer in MB (default 6.8: ~68 us of the device's layer step at\n"
            "                 ~100 GB/s); m = the whole experts it holds, hits@m scored\n"
            "  --repeat TOKEN feed TOKEN for every prompt and decode position instead of greedy decoding\n"
            "  --seed S       the prompt's seed (default 1)\n");
}

enum { O_PROMPT = 256, O_GEN, O_THREADS, O_BUDGET, O_REPEAT, O_SEED };

static double share(uint64_t hits, uint64_t tokens, int32_t m)
{
    return tokens ? (double)hits / ((double)tokens * m) : 0.0;
}

int bench_route_predict_main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"model", required_argument, NULL, 'm'},   {"prompt", required_argument, NULL, O_PROMPT},
        {"gen", required_argument, NULL, O_GEN},   {"threads", required_argument, NULL, O_THREADS},
        {"budget-mb", required_argument, NULL, O_BUDGET}, {"repeat", required_argument, NULL, O_REPEAT},
        {"seed", required_argument, NULL, O_SEED}, {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *path = NULL;
    long prompt = 32, gen = 128, threads = sysconf(_SC_NPROCESSORS_ONLN), repeat = -1;
    uint64_t seed = 1;
    float budget_mb = 6.8f;
    guild_err_t err = {{0}};
    int o;
    optind = 1;
    opterr = 0;
    while ((o = getopt_long(argc, argv, "m:h", opts, NULL)) != -1) {
        int bad = 0;
        switch (o) {
        case 'm': path = optarg; break;
        case O_PROMPT: bad = cli_parse_long("--prompt", optarg, 1, 1 << 20, &prompt, &err); break;
        case O_GEN: bad = cli_parse_long("--gen", optarg, 1, 1 << 20, &gen, &err); break;
        case O_THREADS: bad = cli_parse_long("--threads", optarg, 1, 4096, &threads, &err); break;
        case O_REPEAT: bad = cli_parse_long("--repeat", optarg, 0, 1L << 30, &repeat, &err); break;
        case O_SEED: bad = cli_parse_u64("--seed", optarg, &seed, &err); break;
        case O_BUDGET:
            bad = cli_parse_float("--budget-mb", optarg, &budget_mb, &err);
            if (!bad && !(budget_mb >= 0.0f))
                bad = guild_err_set(&err, "--budget-mb %s: expected a size >= 0", optarg);
            break;
        case 'h': usage(stdout); return 0;
        default:
            fprintf(stderr, "guild bench route-predict: unknown option or missing value: %s\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "guild bench route-predict: %s\n", err.msg);
            return 2;
        }
    }
    if (!path || optind < argc) {
        fprintf(stderr, "guild bench route-predict: %s\n", path ? "unexpected arguments" : "-m MODEL is required");
        usage(stderr);
        return 2;
    }
    if (threads < 1)
        threads = 1;

    model_t *m = NULL;
    guild_pool_t *pool = NULL;
    moe_exec_t *local = NULL;
    route_predict_t *rp = NULL;
    backend_t *be = NULL;
    float *logits = NULL;
    int32_t *toks = NULL;
    int rc = 1;
    if (model_new(&m, path, &err) < 0)
        goto out;
    const model_config_t *c = model_config(m);
    const int32_t V = c->n_vocab, K = c->n_expert_used, NB = prompt < 512 ? (int32_t)prompt : 512;
    if (repeat >= V) {
        guild_err_set(&err, "--repeat %ld: the vocabulary has %d tokens", repeat, V);
        goto out;
    }
    if (guild_pool_new(&pool, (int)threads, NULL, &err) < 0 || moe_local_new(&local, m, pool, &err) < 0 ||
        route_predict_new(&rp, m, local, pool, NB, &err) < 0)
        goto out;
    backend_options_t bo = {.n_ctx = (int32_t)(prompt + gen + 1), .n_batch = NB, .pool = pool,
                            .moe = route_predict_exec(rp), .all_rows = true};
    if (backend_new(&be, "cpu", m, &bo, NULL, &err) < 0)
        goto out;
    logits = malloc((size_t)V * sizeof *logits);
    toks = malloc((size_t)(prompt + gen) * sizeof *toks);
    if (!logits || !toks) {
        guild_err_set(&err, "out of memory");
        goto out;
    }
    bench_print_provenance(stdout, argc, argv);
    uint64_t lcg = seed * 0x9e3779b97f4a7c15ull;
    for (long i = 0; i < prompt; i++) {
        lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
        toks[i] = repeat >= 0 ? (int32_t)repeat : (int32_t)((lcg >> 33) % (uint64_t)V);
    }
    const double t0 = guild_clock_s();
    for (int32_t p = 0; p < prompt; p += NB) {
        const int32_t n = prompt - p < NB ? (int32_t)prompt - p : NB, last = n - 1;
        int32_t pos[512];
        for (int32_t i = 0; i < n; i++)
            pos[i] = p + i;
        if (backend_forward(be, n, toks + p, pos, 1, &last, logits, &err) < 0)
            goto out;
    }
    route_predict_counting(rp, true);
    const double t1 = guild_clock_s();
    for (long g = 0; g < gen; g++) {
        const int32_t p = (int32_t)(prompt + g), last = 0;
        toks[p] = repeat >= 0 ? (int32_t)repeat : bench_argmax(logits, V);
        if (backend_forward(be, 1, toks + p, &p, 1, &last, logits, &err) < 0)
            goto out;
    }
    const double t2 = guild_clock_s();

    /* the experts a budget holds, from the first MoE layer's expert size */
    double ebytes = 0;
    for (int32_t il = 0; il < c->n_layer && ebytes == 0; il++)
        if (model_layer_parts(c, il).router) {
            const model_layer_t *L = model_block(model_weights(m), il);
            ebytes = (double)(L->gate_exps.mat_bytes + L->up_exps.mat_bytes + L->down_exps.mat_bytes);
        }
    int32_t mb = ebytes > 0 ? (int32_t)((double)budget_mb * 1e6 / ebytes) : 0;
    mb = mb > K ? K : mb;
    printf("# model: %s (%d layers, %d experts, top-%d, %.3f MB an expert, %.1f MB a layer's top-k)\n", path,
           c->n_layer, c->n_expert, K, ebytes / 1e6, ebytes * K / 1e6);
    printf("# prompt %ld (not scored), gen %ld%s, threads %ld; prefill %.1f s, decode %.2f s a token\n", prompt, gen,
           repeat >= 0 ? " (one token repeated)" : " (greedy)", threads, t1 - t0, (t2 - t1) / (double)gen);
    printf("# budget %.2f MB a layer = the first %d of a predictor's experts (m); hit = share of the true top-%d "
           "among a predictor's first k (all) or first m\n", (double)budget_mb, mb, K);
    printf("%-5s %7s", "layer", "tokens");
    for (int kind = 0; kind < ROUTE_PREDICT_KINDS; kind++)
        printf(" %12s %12s", route_predict_kind_name(kind), "@m");
    printf("\n");
    uint64_t tok_all[ROUTE_PREDICT_KINDS] = {0}, hit_all[ROUTE_PREDICT_KINDS] = {0}, hitm_all[ROUTE_PREDICT_KINDS] = {0};
    for (int32_t il = 0; il < c->n_layer; il++) {
        if (!model_layer_parts(c, il).router)
            continue;
        printf("%-5d %7llu", il, (unsigned long long)route_predict_tokens(rp, il, ROUTE_PREDICT_PREV));
        for (int kind = 0; kind < ROUTE_PREDICT_KINDS; kind++) {
            const uint64_t t = route_predict_tokens(rp, il, kind), h = route_predict_hits(rp, il, kind, K),
                           hm = mb ? route_predict_hits(rp, il, kind, mb) : 0;
            tok_all[kind] += t;
            hit_all[kind] += h;
            hitm_all[kind] += hm;
            if (t)
                printf(" %12.3f %12.3f", share(h, t, K), mb ? share(hm, t, mb) : 0.0);
            else
                printf(" %12s %12s", "-", "-");
        }
        printf("\n");
    }
    printf("%-5s %7s", "all", "");
    for (int kind = 0; kind < ROUTE_PREDICT_KINDS; kind++)
        printf(" %12.3f %12.3f", share(hit_all[kind], tok_all[kind], K),
               mb ? share(hitm_all[kind], tok_all[kind], mb) : 0.0);
    printf("\n");
    for (int kind = 0; kind < ROUTE_PREDICT_KINDS; kind++) {
        /* bytes a perfect prefetch of the hits saves: per scored (layer, token), then per token over the layers */
        const double per_layer = tok_all[kind] ? (double)hitm_all[kind] / (double)tok_all[kind] * ebytes : 0;
        const double per_layer_k = tok_all[kind] ? (double)hit_all[kind] / (double)tok_all[kind] * ebytes : 0;
        const uint64_t layers_scored = tok_all[kind] / (uint64_t)gen;
        printf("%s: hit %.4f (all %d), %.4f (first %d); prefetch saves %.2f MB a layer within the budget "
               "(%.2f MB unbounded), %.1f MB a token over %llu scored layers\n",
               route_predict_kind_name(kind), share(hit_all[kind], tok_all[kind], K), K,
               mb ? share(hitm_all[kind], tok_all[kind], mb) : 0.0, mb, per_layer / 1e6, per_layer_k / 1e6,
               per_layer * (double)layers_scored / 1e6, (unsigned long long)layers_scored);
    }
    rc = 0;
out:
    if (rc)
        fprintf(stderr, "guild bench route-predict: %s\n", err.msg);
    free(logits);
    free(toks);
    backend_destroy(&be);
    route_predict_destroy(&rp);
    moe_exec_destroy(&local);
    guild_pool_destroy(&pool);
    model_destroy(&m);
    return rc;
}
