/* guild optimize -m model.gguf: measures, on this machine and this model's experts, the CPU expert pipeline's
 * speed choices (threads per worker, row blocks of its tasks, the layout of the experts' copies: packed, plain
 * or gate/up rows interleaved) and writes the tuning file the workers load (cpu-expert-worker/experts/expert_tuning.h). A choice replaces the portable default only when it beats it by more
 * than the measurement noise. Every choice gives bit-identical results; the command checks that on one layer
 * before writing the file. It also measures the costs the GPU memory plan decides with (gpu-worker/dense/gpu_cost.h:
 * the CPU side's prefill and decode rates, the pinned host-to-device rate when a CUDA device is there) into the
 * tuning file, and runs a calibration text through the model to write its routing profile (MODEL.gguf.routing,
 * core/model/routing_profile.h), which fills a GPU budget with the hottest experts. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coordinator/backend_stack.h"
#include "coordinator/cmd_model.h"
#include "coordinator/commands.h"
#include "core/model/routing_profile.h"
#include "gpu-worker/dense/gpu_cost.h"
#ifdef GUILD_HAVE_CUDA
#include "gpu-worker/dense/cuda/cuda_probe.h"
#endif
#include "core/kern/cpu.h"
#include "core/model/model.h"
#include "core/topo/topo.h"
#include "core/util/clock.h"
#include "core/util/pool.h"
#include "core/util/progress.h"
#include "cpu-expert-worker/experts/expert_pipe.h"
#include "cpu-expert-worker/experts/expert_shard.h"
#include "cpu-expert-worker/experts/expert_tuning.h"

#define MAX_CPUS 1024

typedef struct ctx {
    expert_pipe_src_t src;
    const int *cpus;
    int runs, steps;
    float *x, *y;
    int32_t *ids;
    uint64_t rng;
} ctx_t;

static uint64_t next_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* n_used distinct random experts */
static void pick(ctx_t *c, int32_t *ids)
{
    for (int32_t k = 0; k < c->src.n_expert_used; k++) {
        int32_t e, dup;
        do {
            e = (int32_t)(next_rand(&c->rng) % (uint64_t)c->src.n_expert);
            dup = 0;
            for (int32_t q = 0; q < k; q++)
                dup |= ids[q] == e;
        } while (dup);
        ids[k] = e;
    }
}

/* Median and quartile spread of the per-step decode time (us) with `threads` threads and row blocks `rows`. */
static int measure(ctx_t *c, int threads, expert_pipe_tuning_t rows, double *median, double *spread,
                   guild_err_t *err)
{
    guild_pool_t *pool = NULL;
    expert_pipe_t *pipe = NULL;
    double t[64];
    int runs = c->runs > 64 ? 64 : c->runs;
    if (guild_pool_new(&pool, threads, c->cpus, err) || expert_pipe_new(&pipe, &c->src, pool, &rows, err)) {
        guild_pool_destroy(&pool);
        return -1;
    }
    int32_t layer = 0;
    char what[128]; /* a line on the terminal while it measures (core/util/progress.h) */
    snprintf(what, sizeof what, "guild optimize: measuring %d threads, row blocks %d/%d", threads, rows.gate_up_rows,
             rows.down_rows);
    guild_progress_t *pg = guild_progress_begin(what, (uint64_t)runs + 1, GUILD_PROGRESS_COUNT);
    for (int r = -1; r < runs; r++) {
        double t0 = guild_clock_s();
        for (int s = 0; s < c->steps; s++) {
            pick(c, c->ids);
            if (expert_pipe_run(pipe, layer, 1, c->x, c->ids, c->y, err) < 0) {
                guild_progress_end(&pg);
                expert_pipe_destroy(&pipe);
                guild_pool_destroy(&pool);
                return -1;
            }
            layer = (layer + 1) % c->src.n_layer;
        }
        if (r >= 0)
            t[r] = (guild_clock_s() - t0) / c->steps * 1e6;
        guild_progress_add(pg, 1);
    }
    guild_progress_end(&pg);
    expert_pipe_destroy(&pipe);
    guild_pool_destroy(&pool);
    *median = guild_median(t, runs); /* sorts t */
    *spread = (t[(3 * runs) / 4] - t[runs / 4]) / *median;
    return 0;
}

/* y of one layer with the given choices, for the bit-identity check */
static int one_layer(ctx_t *c, int threads, expert_pipe_tuning_t rows, int T, float *y, guild_err_t *err)
{
    guild_pool_t *pool = NULL;
    expert_pipe_t *pipe = NULL;
    int rc = -1;
    if (guild_pool_new(&pool, threads, c->cpus, err) == 0 && expert_pipe_new(&pipe, &c->src, pool, &rows, err) == 0)
        rc = expert_pipe_run(pipe, 0, T, c->x, c->ids, y, err) < 0 ? -1 : 0;
    expert_pipe_destroy(&pipe);
    guild_pool_destroy(&pool);
    return rc;
}

/* A layout of the experts' copies (expert_shard_new_copy) measured against the others. */
typedef struct layout_cand {
    const char *name;
    expert_layout_t layout;
    bool interleave;
    expert_shard_t *copy; /* the first layers copied that way */
    ctx_t cx;             /* measuring context over the copy (shares x, y and ids) */
    double med;           /* us per layer, mean of the rounds' medians */
} layout_cand_t;

/* The matrices (1 gate, 2 up, 4 down) that `layout` packs in an expert of src's shape with m's types. */
static unsigned packed_mask(expert_layout_t layout, const expert_mats_t *m, const expert_pipe_src_t *src)
{
    return (expert_layout_packs(layout, m->gate_type, src->n_ff) ? 1u : 0u) |
           (expert_layout_packs(layout, m->up_type, src->n_ff) ? 2u : 0u) |
           (expert_layout_packs(layout, m->down_type, src->n_embd) ? 4u : 0u);
}

/* The calibration text of the routing profile: prose, code, numbers and dialogue, repeated to the tokens asked. */
static const char calibration_text[] =
    "The committee met on a grey Tuesday morning to review the quarterly figures. Revenue had risen by 4.2 percent, "
    "but costs in the northern region had grown faster than anyone expected, and the chair asked for a plan.\n"
    "def merge(a, b):\n    out = []\n    i = j = 0\n    while i < len(a) and j < len(b):\n"
    "        if a[i] <= b[j]:\n            out.append(a[i]); i += 1\n        else:\n            out.append(b[j]); j += 1\n"
    "    return out + a[i:] + b[j:]\n"
    "Q: What is the capital of Australia? A: Canberra, although many people guess Sydney or Melbourne.\n"
    "In 1687 Newton published the Principia, in which he set out the laws of motion and universal gravitation; "
    "the mathematics of orbits followed from three short statements.\n"
    "SELECT name, COUNT(*) FROM orders WHERE created_at > '2024-01-01' GROUP BY name ORDER BY 2 DESC LIMIT 10;\n"
    "\"Can you help me write a polite email declining the invitation?\" \"Of course. Dear Maria, thank you so much "
    "for thinking of me; unfortunately I will be travelling that week...\"\n"
    "Photosynthesis converts light, water and carbon dioxide into glucose and oxygen inside the chloroplasts.\n"
    "1, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144 -- each number is the sum of the two before it.\n"
    "La reunion commence a neuf heures; der Zug kommt um zehn Uhr an; el mercado abre los domingos.\n";

static void usage(FILE *out)
{
    fprintf(out, "usage: guild optimize -m MODEL.gguf [-o FILE] [--node N] [--runs R] [--steps S]\n"
                 "                      [--profile-tokens N] [--no-profile | --fresh-profile]\n"
                 "  measures the CPU expert pipeline's speed choices on this machine (threads, row blocks, the\n"
                 "  experts' layout: packed, plain, gate/up rows interleaved) and writes the tuning file guild run /\n"
                 "  serve and the CPU workers load (default: MODEL.gguf.tuning). Results are bit-identical whatever\n"
                 "  it picks. The file also gets the costs the GPU memory plan decides with (the CPU side's prefill\n"
                 "  and decode rates; the host-to-device copy rate when a CUDA device is there). Then a calibration\n"
                 "  text of --profile-tokens tokens (default 512) runs through the model in this process, and the\n"
                 "  experts its router chose are added to MODEL.gguf.routing, the routing profile whose hottest\n"
                 "  experts a GPU budget keeps resident (created when absent; the counts already there, e.g. from\n"
                 "  guild run/serve --record-routing, are kept: a malformed profile or another model's stops it\n"
                 "  before any measurement). --fresh-profile: the profile is replaced by the calibration's counts;\n"
                 "  --no-profile: not done.\n");
}

/* The CPU side's prefill rate: one layer of T tokens (K random experts each) through the pipeline, median of
 * `runs`; TFLOP/s. */
static int measure_prefill(ctx_t *c, int threads, expert_pipe_tuning_t rows, int32_t T, double *tflops,
                           guild_err_t *err)
{
    guild_pool_t *pool = NULL;
    expert_pipe_t *pipe = NULL;
    const size_t E = (size_t)c->src.n_embd, K = (size_t)c->src.n_expert_used;
    float *x = malloc((size_t)T * E * sizeof *x), *y = malloc((size_t)T * K * E * sizeof *y);
    int32_t *ids = malloc((size_t)T * K * sizeof *ids);
    double t[16];
    const int runs = c->runs > 16 ? 16 : c->runs;
    int rc = -1;
    if (!x || !y || !ids) {
        guild_err_set(err, "out of memory for a prefill batch of %d tokens", T);
        goto done;
    }
    for (size_t i = 0; i < (size_t)T * E; i++)
        x[i] = (float)((double)(next_rand(&c->rng) >> 11) / 9007199254740992.0 - 0.5);
    for (int32_t i = 0; i < T; i++)
        pick(c, ids + (size_t)i * K);
    if (guild_pool_new(&pool, threads, c->cpus, err) || expert_pipe_new(&pipe, &c->src, pool, &rows, err))
        goto done;
    for (int r = -1; r < runs; r++) {
        const double t0 = guild_clock_s();
        if (expert_pipe_run(pipe, 0, T, x, ids, y, err) < 0)
            goto done;
        if (r >= 0)
            t[r] = guild_clock_s() - t0;
    }
    const double med = guild_median(t, runs);
    *tflops = (double)T * (double)K * gpu_cost_pair_flop(c->src.n_embd, c->src.n_ff) / med / 1e12;
    rc = 0;
done:
    expert_pipe_destroy(&pipe);
    guild_pool_destroy(&pool);
    free(x);
    free(y);
    free(ids);
    return rc;
}

/* The routing profile: the calibration text (tokens repeated up to n_tokens) through the model in this process,
 * its router's choices counted and added to `path` (routing_profile_merge_file; `fresh`: replacing it). */
static int write_profile(const char *model_path, int threads, int32_t n_tokens, const char *path, bool fresh,
                         routing_profile_merge_t *mi, guild_err_t *err)
{
    cmd_model_t cm = {0};
    backend_stack_t *stack = NULL;
    tok_ids_t ids;
    int32_t *tokens = NULL, *pos = NULL;
    int rc = -1;
    tok_ids_init(&ids);
    if (cmd_model_init(&cm, model_path, err) < 0 ||
        tok_encode(cm.tok, calibration_text, sizeof calibration_text - 1, TOK_ADD_SPECIAL, &ids, err) < 0)
        goto done;
    if (!ids.n) {
        guild_err_set(err, "%s: the calibration text gives no tokens", model_path);
        goto done;
    }
    if (!(tokens = malloc((size_t)n_tokens * sizeof *tokens)) || !(pos = malloc((size_t)n_tokens * sizeof *pos))) {
        guild_err_set(err, "out of memory");
        goto done;
    }
    for (int32_t i = 0; i < n_tokens; i++)
        tokens[i] = ids.v[(size_t)i % ids.n];
    stack_options_t o;
    stack_options_init(&o);
    o.single_process = true;
    o.n_threads = threads;
    o.n_ctx = n_tokens;
    o.n_batch = n_tokens < 256 ? n_tokens : 256;
    o.record_routing = path; /* counts every token in every layer */
    o.record_replace = fresh;
    o.cpu.expert_layout = EXPERT_LAYOUT_PLAIN; /* the mapping as it is: no copy of the experts */
    if (backend_stack_open(&stack, &o, cm.model, cm.path, err) < 0)
        goto done;
    backend_t *be = backend_stack_backend(stack);
    const int32_t nb = backend_stack_n_batch(stack);
    for (int32_t s = 0; s < n_tokens; s += nb) {
        const int32_t n = n_tokens - s < nb ? n_tokens - s : nb;
        for (int32_t i = 0; i < n; i++)
            pos[i] = s + i;
        if (backend_forward(be, n, tokens + s, pos, 0, NULL, NULL, err) < 0)
            goto done;
    }
    rc = backend_stack_record_routing(stack, path, fresh, mi, err);
done:
    backend_stack_close(&stack);
    tok_ids_fini(&ids);
    cmd_model_fini(&cm);
    free(tokens);
    free(pos);
    return rc;
}

int cmd_optimize(int argc, char **argv)
{
    static const struct option lopts[] = {
        {"model", required_argument, NULL, 'm'}, {"output", required_argument, NULL, 'o'},
        {"node", required_argument, NULL, 'N'},  {"runs", required_argument, NULL, 'r'},
        {"steps", required_argument, NULL, 's'}, {"help", no_argument, NULL, 'h'},
        {"profile-tokens", required_argument, NULL, 'P'}, {"no-profile", no_argument, NULL, 'p'},
        {"fresh-profile", no_argument, NULL, 'F'},
        {0, 0, 0, 0},
    };
    const char *model_path = NULL, *out_path = NULL;
    int node = 0, runs = 7, steps = 48, c, profile_tokens = 512;
    bool profile = true, fresh = false;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:o:", lopts, NULL)) != -1) {
        switch (c) {
        case 'm': model_path = optarg; break;
        case 'o': out_path = optarg; break;
        case 'N': node = atoi(optarg); break;
        case 'r': runs = atoi(optarg); break;
        case 's': steps = atoi(optarg); break;
        case 'P': profile_tokens = atoi(optarg); break;
        case 'p': profile = false; break;
        case 'F': fresh = true; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    const char *bad = !model_path                              ? "no model: give -m MODEL.gguf"
                      : optind != argc                         ? "an argument that is not an option"
                      : runs < 3                               ? "--runs must be at least 3 (a median of noisy timings)"
                      : steps < 1                              ? "--steps must be at least 1"
                      : node < 0 || node >= topo_node_count() ? "--node is not a node of this machine"
                      : profile_tokens < 1 || profile_tokens > 1 << 20 ? "--profile-tokens must be 1 to 1048576"
                      : fresh && !profile ? "--fresh-profile and --no-profile: one or the other"
                                                                         : NULL;
    if (bad) {
        fprintf(stderr, "guild optimize: %s\n", bad);
        usage(stderr);
        return 2;
    }
    char default_out[4096];
    if (!out_path) {
        snprintf(default_out, sizeof default_out, "%s.tuning", model_path);
        out_path = default_out;
    }
    guild_err_t err;
    model_t *model = NULL;
    expert_shard_t *shard = NULL; /* the mapping: the reference */
    layout_cand_t cand[4];
    int n_cand = 0;
    int status = 1;
    if (model_new(&model, model_path, &err)) {
        fprintf(stderr, "guild optimize: %s\n", err.msg);
        return 1;
    }
    const model_config_t *cfg = model_config(model);
    if (cfg->n_expert <= 0) {
        fprintf(stderr, "guild optimize: %s: the model has no routed experts; nothing to tune\n", model_path);
        model_destroy(&model);
        return 1;
    }
    /* the profile its counts go to, checked before minutes of measurements: one that cannot be added to stops
     * here, left as it is */
    char rp[4096];
    if (profile && (routing_profile_path(model_path, rp, sizeof rp, &err) < 0 ||
                    (!fresh && routing_profile_check_file(rp, cfg, model_path, &err) < 0))) {
        fprintf(stderr, "guild optimize: %s\nguild optimize: nothing done: the profile is left as it is (delete it or "
                "give --fresh-profile to start it over, --no-profile to tune without it)\n", err.msg);
        model_destroy(&model);
        return 1;
    }
    if (expert_shard_new(&shard, model, NULL, &err)) {
        fprintf(stderr, "guild optimize: %s\n", err.msg);
        model_destroy(&model);
        return 1;
    }
    static int cpus[MAX_CPUS];
    const int n_cpus = topo_node_cpus(node, cpus, MAX_CPUS);
    ctx_t cx = {.cpus = cpus, .runs = runs, .steps = steps, .rng = 12345};
    expert_pipe_src_from_shard(&cx.src, shard);
    const int T_check = 3;
    const size_t E = (size_t)cx.src.n_embd, K = (size_t)cx.src.n_expert_used;
    cx.x = malloc(T_check * E * sizeof *cx.x);
    cx.y = malloc(T_check * K * E * sizeof *cx.y);
    cx.ids = malloc(T_check * K * sizeof *cx.ids);
    float *y_ref = malloc(T_check * K * E * sizeof *y_ref);
    if (!cx.x || !cx.y || !cx.ids || !y_ref || n_cpus == 0) {
        fprintf(stderr, "guild optimize: %s\n", n_cpus ? "out of memory" : "no usable CPU on the node");
        goto done;
    }
    for (size_t i = 0; i < T_check * E; i++)
        cx.x[i] = (float)((double)(next_rand(&cx.rng) >> 11) / 9007199254740992.0 - 0.5);

    printf("guild optimize: %s: %d layers x %d experts (%d used), %d x %d; node %d, %d CPUs (%s)\n", model_path,
           cx.src.n_layer, cx.src.n_expert, cx.src.n_expert_used, (int)cx.src.n_embd, (int)cx.src.n_ff, node, n_cpus,
           kern_cpu()->model);

    /* The layouts a worker's copy can take: auto (the default: packed where this CPU has packed kernels),
     * plain and packed where they differ from it, gate/up rows interleaved where gate and up have one type.
     * Each is a copy of the first layers (a few GB in all), measured in turns with the others. */
    const expert_mats_t *m0 = NULL;
    for (int32_t e = 0; e < cx.src.n_expert && !m0; e++)
        m0 = expert_shard_get(shard, 0, e);
    GUILD_ASSERT(m0); /* a shard of the mapping owns every expert */
    const unsigned auto_mask = packed_mask(EXPERT_LAYOUT_AUTO, m0, &cx.src);
    cand[n_cand++] = (layout_cand_t){.name = "auto", .layout = EXPERT_LAYOUT_AUTO};
    if (auto_mask)
        cand[n_cand++] = (layout_cand_t){.name = "plain", .layout = EXPERT_LAYOUT_PLAIN};
    if (packed_mask(EXPERT_LAYOUT_PACKED, m0, &cx.src) != auto_mask)
        cand[n_cand++] = (layout_cand_t){.name = "packed", .layout = EXPERT_LAYOUT_PACKED};
    if (m0->gate_type == m0->up_type && m0->gate_row == m0->up_row)
        cand[n_cand++] = (layout_cand_t){.name = "interleaved", .layout = EXPERT_LAYOUT_PLAIN, .interleave = true};
    const double layer_bytes = (double)(m0->gate_row + m0->up_row) * (double)cx.src.n_ff * cx.src.n_expert +
                               (double)m0->down_row * (double)cx.src.n_embd * cx.src.n_expert;
    int32_t L = (int32_t)(4e9 / n_cand / layer_bytes);
    L = L < 2 ? 2 : L > cx.src.n_layer ? cx.src.n_layer : L;
    uint8_t *owned = calloc((size_t)cx.src.n_layer * (size_t)cx.src.n_expert, 1);
    if (!owned) {
        guild_err_set(&err, "out of memory");
        goto fail;
    }
    memset(owned, 1, (size_t)L * (size_t)cx.src.n_expert);
    for (int i = 0; i < n_cand; i++) {
        layout_cand_t *lc = &cand[i];
        if (expert_shard_new_copy(&lc->copy, model, owned, node, false, lc->interleave, lc->layout, &err)) {
            free(owned);
            goto fail;
        }
        lc->cx = cx;
        expert_pipe_src_from_shard(&lc->cx.src, lc->copy);
        lc->cx.src.n_layer = L;
    }
    free(owned);
    printf("  default layout: auto, here %s (%d layers copied for the measurements)\n",
           auto_mask == 7 ? "packed" : auto_mask ? "partly packed" : "plain", L);

    /* threads, then row blocks, on the default layout */
    ctx_t *dx = &cand[0].cx;
    expert_tuning_t def, best;
    expert_tuning_default(&def);
    double def_med, def_spread, med, spread;
    if (measure(dx, n_cpus, def.pipe, &def_med, &def_spread, &err))
        goto fail;
    printf("  default: threads=%d, automatic row blocks: %.1f us/layer (spread %.1f%%)\n", n_cpus, def_med,
           100 * def_spread);
    best = def;
    double best_med = def_med;
    int best_threads = n_cpus;
    for (int th = n_cpus / 2; th >= 1; th /= 2) {
        if (measure(dx, th, def.pipe, &med, &spread, &err))
            goto fail;
        printf("  threads=%d: %.1f us/layer\n", th, med);
        if (med < best_med) {
            best_med = med;
            best_threads = th;
        }
    }
    static const int gu_cand[] = {16, 32, 64, 128}, dn_cand[] = {32, 64, 128, 256};
    for (size_t i = 0; i < sizeof gu_cand / sizeof gu_cand[0]; i++)
        for (size_t j = 0; j < sizeof dn_cand / sizeof dn_cand[0]; j++) {
            expert_pipe_tuning_t rows = {.gate_up_rows = gu_cand[i], .down_rows = dn_cand[j]};
            if (rows.gate_up_rows == def.pipe.gate_up_rows && rows.down_rows == def.pipe.down_rows &&
                best_threads == n_cpus)
                continue;
            if (rows.gate_up_rows > cx.src.n_ff + 15 || rows.down_rows > cx.src.n_embd + 15)
                continue;
            if (measure(dx, best_threads, rows, &med, &spread, &err))
                goto fail;
            printf("  threads=%d gate_up_rows=%d down_rows=%d: %.1f us/layer\n", best_threads, rows.gate_up_rows,
                   rows.down_rows, med);
            if (med < best_med) {
                best_med = med;
                best.pipe = rows;
            }
        }
    best.threads = best_threads == n_cpus ? 0 : best_threads;
    /* a tie within noise keeps the portable default */
    const double noise = def_spread * 2 > 0.03 ? def_spread * 2 : 0.03;
    if ((def_med - best_med) / def_med < noise) {
        printf("  best %.1f us/layer is within noise (%.1f%%) of the default: keeping the default\n", best_med,
               100 * noise);
        best = def;
    }
    snprintf(best.cpu, sizeof best.cpu, "%s", kern_cpu()->model);

    /* then the layout, with those threads and blocks: two rounds over the candidates */
    const int th = best.threads ? best.threads : n_cpus;
    int pick_i = 0;
    if (n_cand > 1) {
        for (int round = 0; round < 2; round++)
            for (int i = 0; i < n_cand; i++) {
                if (measure(&cand[i].cx, th, best.pipe, &med, &spread, &err))
                    goto fail;
                cand[i].med += med / 2;
            }
        for (int i = 0; i < n_cand; i++) {
            printf("  layout %s: %.1f us/layer\n", cand[i].name, cand[i].med);
            if (cand[i].med < cand[pick_i].med)
                pick_i = i;
        }
        if (pick_i != 0 && (cand[0].med - cand[pick_i].med) / cand[0].med < noise) {
            printf("  layout %s is within noise (%.1f%%) of auto: keeping auto\n", cand[pick_i].name, 100 * noise);
            pick_i = 0;
        }
    } else {
        printf("  layout: auto is the only one for these types\n");
    }
    best.layout = cand[pick_i].layout;
    best.interleave_gate_up = cand[pick_i].interleave;
    const bool rows_default = best.pipe.gate_up_rows == def.pipe.gate_up_rows &&
                              best.pipe.down_rows == def.pipe.down_rows && best.threads == def.threads;

    /* the promise: whatever was picked, and every layout measured, the same bits (a prefill-like batch of 3
     * tokens on layer 0) */
    for (int t = 0; t < T_check; t++)
        pick(&cx, cx.ids + (size_t)t * K);
    for (size_t i = 0; i < T_check * K * E; i++)
        y_ref[i] = cx.y[i] = 0.0f;
    if (one_layer(&cx, n_cpus, def.pipe, T_check, y_ref, &err) ||
        one_layer(&cx, th, best.pipe, T_check, cx.y, &err))
        goto fail;
    if (memcmp(y_ref, cx.y, T_check * K * E * sizeof *cx.y)) {
        fprintf(stderr, "guild optimize: the chosen settings change the expert outputs: a bug; not writing %s\n",
                out_path);
        goto done;
    }
    for (int i = 0; i < n_cand; i++) {
        for (size_t q = 0; q < T_check * K * E; q++)
            cx.y[q] = 0.0f;
        /* the candidates share cx's x and ids (copies of the context) */
        if (one_layer(&cand[i].cx, th, best.pipe, T_check, cx.y, &err))
            goto fail;
        if (memcmp(y_ref, cx.y, T_check * K * E * sizeof *cx.y)) {
            fprintf(stderr, "guild optimize: layout %s changes the expert outputs: a bug; not writing %s\n",
                    cand[i].name, out_path);
            goto done;
        }
    }
    /* the GPU plan's costs: the CPU side's rates on this node, times the nodes (one worker each) */
    const int nodes = topo_node_count();
    const expert_mats_t *ml = NULL;
    for (int32_t e = 0; e < cx.src.n_expert && !ml; e++)
        ml = expert_shard_get(shard, 0, e);
    const double expert_bytes = (double)(ml->gate_row + ml->up_row) * (double)cx.src.n_ff +
                                (double)ml->down_row * (double)cx.src.n_embd;
    const double dec_us = rows_default ? def_med : best_med;
    best.cost.cpu_gbps = (double)cx.src.n_expert_used * expert_bytes / (dec_us * 1e3) * nodes;
    double pf = 0;
    if (measure_prefill(&cand[pick_i].cx, th, best.pipe, 256, &pf, &err))
        goto fail;
    best.cost.cpu_tflops = pf * nodes;
    printf("  GPU plan costs: CPU experts %.2f TFLOP/s at prefill (256 tokens), %.1f GB/s at decode (%d node%s)\n",
           best.cost.cpu_tflops, best.cost.cpu_gbps, nodes, nodes == 1 ? "" : "s");
#ifdef GUILD_HAVE_CUDA
    {
        cuda_probe_t pb;
        guild_err_t perr = {{0}};
        if (cuda_probe(&pb, &perr) == 0) {
            best.cost.h2d_gbps = pb.h2d_gbps;
            printf("  GPU plan costs: %s, pinned host to device %.1f GB/s\n", pb.name, pb.h2d_gbps);
        } else {
            printf("  GPU plan costs: no host to device rate (%s): the plan's default\n", perr.msg);
        }
    }
#endif
    if (expert_tuning_save(out_path, &best, &err))
        goto fail;
    /* the threads and blocks against the default in one measurement set, the layout against auto in another */
    printf("wrote %s: threads=%d gate_up_rows=%d down_rows=%d interleave_gate_up=%d layout=%s (%.1f us/layer, "
           "default %.1f; layout %s %.1f, auto %.1f)\n",
           out_path, best.threads, best.pipe.gate_up_rows, best.pipe.down_rows, best.interleave_gate_up ? 1 : 0,
           expert_layout_name(best.layout), rows_default ? def_med : best_med, def_med, cand[pick_i].name,
           cand[pick_i].med > 0 ? cand[pick_i].med : def_med, cand[0].med > 0 ? cand[0].med : def_med);
    if (profile) {
        routing_profile_merge_t mi;
        if (write_profile(model_path, th, profile_tokens, rp, fresh, &mi, &err) < 0)
            goto fail;
        if (mi.created)
            printf("wrote %s: the routing of %d calibration tokens%s\n", rp, profile_tokens,
                   fresh ? " (--fresh-profile: what it held is replaced)" : "");
        else
            printf("added the routing of %d calibration tokens to %s: it held %llu tokens, now %llu%s\n",
                   profile_tokens, rp, (unsigned long long)mi.tokens_before, (unsigned long long)mi.tokens_after,
                   mi.saturated ? " (some counts saturated at their limit)" : "");
    }
    status = 0;
    goto done;
fail:
    fprintf(stderr, "guild optimize: %s\n", err.msg);
done:
    free(cx.x);
    free(cx.y);
    free(cx.ids);
    free(y_ref);
    for (int i = 0; i < n_cand; i++)
        expert_shard_destroy(&cand[i].copy);
    expert_shard_destroy(&shard);
    model_destroy(&model);
    return status;
}
