/* guild run — generate text from a prompt with a GGUF MoE model: through the multi-process pipeline (a GPU worker
 * and CPU expert workers, coordinator/pipeline.h), or in one process (--single-process, the reference mode). */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coordinator/backend_stack.h"
#include "coordinator/cmd_model.h"
#include "coordinator/commands.h"
#include "coordinator/demo_model.h"
#include "coordinator/generate.h"
#include "coordinator/pipeline.h"
#include "coordinator/spec.h"
#include "coordinator/stack_flags.h"
#include "coordinator/stack_plan.h"
#include "core/model/model.h"
#include "core/sample/sampler.h"
#include "core/tokenizer/tok.h"
#include "core/util/cli.h"
#include "core/util/log.h"
#include "gpu-worker/dense/backend.h"

/* Everything `guild run` was asked to do, validated once and printed at start-up. */
typedef struct run_config {
    const char *model;        /* -m; NULL: the built-in demo model */
    const char *prompt;       /* -p */
    const char *prompt_file;  /* -f */
    int32_t n_predict;        /* -n; < 0: until EOS or the context is full */
    int32_t n_ctx;            /* --ctx; 0: min(n_ctx_train, 4096) */
    int32_t n_batch;          /* --batch (the stack's: at most the context) */
    sample_params_t sample;
    bool parse_special;       /* --parse-special */
    const char *logits_out;   /* --logits-out */
    const char *ids_out;      /* --ids-out */
    bool stats;               /* --stats */
    bool ignore_eos;          /* --ignore-eos */
    bool verbose;             /* -v */
    bool print_plan;          /* --print-plan */
    spec_options_t spec;      /* --spec, --spec-max, --spec-min-p, --draft-model */
    stack_options_t stack;    /* --single-process, --threads, --no-tuning, --backend, the pipeline's and GPU flags */
} run_config_t;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: guild run [-m FILE.gguf] [-p PROMPT | -f FILE] [options]\n"
            "\n"
            "Generates text from a prompt and streams it to stdout; timings go to stderr. Without -m, runs the\n"
            "built-in demo model (random weights, generated on first use with guild-mkmodel and cached).\n"
            "\n"
            "  -m, --model FILE        GGUF model (qwen3moe, qwen2moe, llama/Mixtral, olmoe)\n"
            "  -p, --prompt TEXT       the prompt\n"
            "  -f, --file FILE         read the prompt from FILE\n"
            "  -n, --n-predict N       tokens to generate (default 64; -1: until end of text or full context)\n"
            "      --temp T            temperature (default 0.8; 0: greedy)\n"
            "      --top-k N           keep the N most likely tokens (default 40; 0: off)\n"
            "      --top-p P           nucleus: smallest set with probability >= P (default 0.95; 1: off)\n"
            "      --min-p P           drop tokens below P times the best one's probability (default 0.05)\n"
            "      --repeat-penalty R  penalise recently seen tokens (default 1.0: off)\n"
            "      --repeat-last-n N   how many recent tokens the penalty looks at (default 64)\n"
            "      --seed S            sampling seed (default 0); same seed, same text\n"
            "      --ctx N             context length (default: the model's, at most 4096)\n"
            STACK_FLAGS_BATCH_HELP
            "      --parse-special     recognise control-token texts in the prompt (as guild tokenize does)\n"
            "      --logits-out FILE   write n_vocab float32 logits per generated token (row 0: the prompt's\n"
            "                          last position)\n"
            "      --ids-out FILE      write the generated token ids, space-separated, on one line\n"
            "      --stats             per layer: experts touched by prompt + generation, busiest expert's share;\n"
            "                          with a GPU plan, the share of routed pairs its resident experts served\n"
            "      --ignore-eos        do not stop at end-of-text tokens (benchmarks)\n"
            SPEC_FLAGS_HELP);
    stack_flags_usage(out, STACK_FLAGS_ALL, "auto");
    fprintf(out,
            "      --print-plan        print which worker owns which experts (with --backend cuda, also the GPU\n"
            "                          memory plan), and exit\n"
            "  -v, --verbose           more messages on stderr\n"
            "  -h, --help              this help\n");
}

enum {
    OPT_TEMP = 256,
    OPT_TOP_K,
    OPT_TOP_P,
    OPT_MIN_P,
    OPT_REPEAT_PENALTY,
    OPT_REPEAT_LAST_N,
    OPT_SEED,
    OPT_CTX,
    OPT_BATCH,
    OPT_LOGITS_OUT,
    OPT_IDS_OUT,
    OPT_STATS,
    OPT_PARSE_SPECIAL,
    OPT_IGNORE_EOS,
    OPT_PRINT_PLAN,
    OPT_SPEC,
};

/* 0, 1 (--help printed) or -1 (usage error printed). */
static int parse_args(int argc, char **argv, run_config_t *c)
{
    static const struct option own[] = {
        {"model", required_argument, NULL, 'm'},
        {"prompt", required_argument, NULL, 'p'},
        {"file", required_argument, NULL, 'f'},
        {"n-predict", required_argument, NULL, 'n'},
        {"temp", required_argument, NULL, OPT_TEMP},
        {"top-k", required_argument, NULL, OPT_TOP_K},
        {"top-p", required_argument, NULL, OPT_TOP_P},
        {"min-p", required_argument, NULL, OPT_MIN_P},
        {"repeat-penalty", required_argument, NULL, OPT_REPEAT_PENALTY},
        {"repeat-last-n", required_argument, NULL, OPT_REPEAT_LAST_N},
        {"seed", required_argument, NULL, OPT_SEED},
        {"ctx", required_argument, NULL, OPT_CTX},
        {"batch", required_argument, NULL, OPT_BATCH},
        {"logits-out", required_argument, NULL, OPT_LOGITS_OUT},
        {"ids-out", required_argument, NULL, OPT_IDS_OUT},
        {"stats", no_argument, NULL, OPT_STATS},
        {"parse-special", no_argument, NULL, OPT_PARSE_SPECIAL},
        {"ignore-eos", no_argument, NULL, OPT_IGNORE_EOS},
        {"print-plan", no_argument, NULL, OPT_PRINT_PLAN},
        {"spec", required_argument, NULL, OPT_SPEC},
        {"spec-max", required_argument, NULL, OPT_SPEC},
        {"spec-min-p", required_argument, NULL, OPT_SPEC},
        {"draft-model", required_argument, NULL, OPT_SPEC},
        {"draft-threads", required_argument, NULL, OPT_SPEC},
        {"draft-backend", required_argument, NULL, OPT_SPEC},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct option opts[72];
    stack_flags_options(opts, sizeof opts / sizeof opts[0], own, STACK_FLAGS_ALL);
    *c = (run_config_t){
        .n_predict = 64,
        .n_batch = 0, /* auto */
    };
    stack_options_init(&c->stack);
    c->stack.gpu.backend = "auto";
    spec_options_init(&c->spec);
    sample_params_default(&c->sample);
    guild_err_t e = {{0}};
    long v;
    int o, sf, li;
    optind = 1;
    opterr = 0; /* messages below name the command */
    while ((li = -1, o = getopt_long(argc, argv, "m:p:f:n:vh", opts, &li)) != -1) {
        if ((sf = stack_flags_parse(&c->stack, o, optarg, &e)) != 0) {
            if (sf < 0)
                goto bad;
            continue;
        }
        switch (o) {
        case 'm': c->model = optarg; break;
        case 'p': c->prompt = optarg; break;
        case 'f': c->prompt_file = optarg; break;
        case 'n':
            if (cli_parse_long("-n", optarg, -1, INT32_MAX, &v, &e) < 0)
                goto bad;
            c->n_predict = (int32_t)v;
            break;
        case OPT_TEMP:
            if (cli_parse_float("--temp", optarg, &c->sample.temp, &e) < 0)
                goto bad;
            break;
        case OPT_TOP_K:
            if (cli_parse_long("--top-k", optarg, 0, INT32_MAX, &v, &e) < 0)
                goto bad;
            c->sample.top_k = (int32_t)v;
            break;
        case OPT_TOP_P:
            if (cli_parse_float("--top-p", optarg, &c->sample.top_p, &e) < 0)
                goto bad;
            break;
        case OPT_MIN_P:
            if (cli_parse_float("--min-p", optarg, &c->sample.min_p, &e) < 0)
                goto bad;
            break;
        case OPT_REPEAT_PENALTY:
            if (cli_parse_float("--repeat-penalty", optarg, &c->sample.repeat_penalty, &e) < 0)
                goto bad;
            break;
        case OPT_REPEAT_LAST_N:
            if (cli_parse_long("--repeat-last-n", optarg, 0, 1 << 20, &v, &e) < 0)
                goto bad;
            c->sample.repeat_last_n = (int32_t)v;
            break;
        case OPT_SEED:
            if (cli_parse_u64("--seed", optarg, &c->sample.seed, &e) < 0)
                goto bad;
            break;
        case OPT_CTX:
            if (cli_parse_long("--ctx", optarg, 1, 1 << 24, &v, &e) < 0)
                goto bad;
            c->n_ctx = (int32_t)v;
            break;
        case OPT_BATCH:
            if (stack_flags_parse_batch(optarg, &c->n_batch, &e) < 0)
                goto bad;
            break;
        case OPT_LOGITS_OUT: c->logits_out = optarg; break;
        case OPT_IDS_OUT: c->ids_out = optarg; break;
        case OPT_STATS: c->stats = true; break;
        case OPT_PRINT_PLAN: c->print_plan = true; break;
        case OPT_SPEC:
            if (spec_flag(&c->spec, opts[li].name, optarg, &e) < 0)
                goto bad;
            break;
        case OPT_PARSE_SPECIAL: c->parse_special = true; break;
        case OPT_IGNORE_EOS: c->ignore_eos = true; break;
        case 'v': c->verbose = true; break;
        case 'h': usage(stdout); return 1;
        default:
            fprintf(stderr, "guild run: unknown option or missing value: %s\n", argv[optind - 1]);
            usage(stderr);
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "guild run: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return -1;
    }
    if (stack_flags_check(&c->stack, STACK_FLAGS_ALL, "--print-plan", c->print_plan, &e) < 0)
        goto bad;
    if (c->prompt && c->prompt_file) {
        fprintf(stderr, "guild run: -p and -f are exclusive\n");
        return -1;
    }
    if (!c->model && !c->prompt && !c->prompt_file)
        c->prompt = DEMO_MODEL_PROMPT;
    if (!c->prompt && !c->prompt_file && !c->print_plan) {
        fprintf(stderr, "guild run: no prompt: give -p TEXT or -f FILE\n");
        return -1;
    }
    return 0;
bad:
    fprintf(stderr, "guild run: %s\n", e.msg);
    return -1;
}

static char *read_file(const char *path, size_t *len, guild_err_t *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        guild_err_errno(err, errno, "cannot open %s", path);
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        char *bigger = realloc(buf, cap * 2);
        if (!bigger) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = bigger;
        cap *= 2;
    }
    if (!buf)
        guild_err_set(err, "%s: out of memory", path);
    else if (ferror(f)) {
        guild_err_errno(err, errno, "cannot read %s", path);
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = n;
    return buf;
}

static void print_config(const run_config_t *c, const char *model_path, const model_config_t *mc, int32_t n_ctx)
{
    fprintf(stderr, "guild run: model %s\n", model_path);
    model_config_print(mc, stderr);
    char batch[24] = "auto", backend[STACK_BACKEND_TEXT];
    if (c->n_batch)
        snprintf(batch, sizeof batch, "%d", c->n_batch);
    fprintf(stderr,
            "run: backend = %s, threads = %d, ctx = %d, batch = %s, n_predict = %d, %s\n"
            "sampling: temp = %g, top_k = %d, top_p = %g, min_p = %g, repeat_penalty = %g (last %d), seed = %llu\n",
            stack_options_backend_text(&c->stack, backend, sizeof backend), c->stack.n_threads, n_ctx, batch,
            c->n_predict,
            c->stack.single_process ? "single process" : "GPU worker + CPU expert workers", (double)c->sample.temp,
            c->sample.top_k,
            (double)c->sample.top_p, (double)c->sample.min_p, (double)c->sample.repeat_penalty,
            c->sample.repeat_last_n, (unsigned long long)c->sample.seed);
    if (c->stack.gpu_mem_why[0])
        fprintf(stderr, "run: --gpu-mem %s\n", c->stack.gpu_mem_why);
    if (c->spec.kind != SPEC_NONE)
        fprintf(stderr, "speculative: %s, up to %d drafts per verify step%s%s\n", spec_kind_name(c->spec.kind),
                c->spec.max, c->spec.draft_model ? ", draft model " : "",
                c->spec.draft_model ? c->spec.draft_model : "");
}

static int write_ids(const char *path, const int32_t *ids, int32_t n, guild_err_t *err)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return guild_err_errno(err, errno, "cannot create %s", path);
    for (int32_t i = 0; i < n; i++)
        fprintf(f, "%s%d", i ? " " : "", ids[i]);
    fputc('\n', f);
    if (fclose(f) != 0)
        return guild_err_errno(err, errno, "cannot write %s", path);
    return 0;
}

int cmd_run(int argc, char **argv)
{
    run_config_t c;
    int pr = parse_args(argc, argv, &c);
    if (pr != 0)
        return pr > 0 ? 0 : 2;
    guild_log_init("guild", c.verbose ? GUILD_LOG_INFO : GUILD_LOG_WARN);
    stack_options_t *st = &c.stack;
    st->log_level = guild_log_level();
    st->stats = c.stats;

    guild_err_t err = {{0}};
    int rc = 1;
    char *prompt_buf = NULL;
    cmd_model_t cm = {0};
    backend_stack_t *stack = NULL;
    sampler_t *smp = NULL;
    FILE *logits_f = NULL;
    tok_ids_t prompt_ids;
    gen_result_t res = {0};
    spec_setup_t spec = {0};
    tok_ids_init(&prompt_ids);

    if (cmd_model_init(&cm, c.model, &err) < 0)
        goto fail;
    const char *model_path = cm.path;
    const model_t *model = cm.model;
    const model_config_t *mc = model_config(model);
    const int32_t n_ctx = cmd_model_n_ctx(model, c.n_ctx);
    if (stack_flags_tune(&c.stack, model_path, "guild run", &err) < 0)
        goto fail;
    st->n_ctx = n_ctx;
    st->n_batch = c.n_batch < n_ctx ? c.n_batch : n_ctx; /* 0: auto, the stack's plan chooses */
    if (spec_options_check(&c.spec, model, &err) < 0)
        goto fail;
    spec_stack_options(&c.spec, st);
    if (stack_plan_fit(st, model, &err) < 0)
        goto fail;
    if (c.print_plan) {
        if (pipeline_print_plan(model, st, stdout, &err) == 0)
            rc = 0;
        goto fail;
    }
    print_config(&c, model_path, mc, n_ctx);

    size_t plen;
    const char *ptext = c.prompt;
    if (c.prompt_file) {
        prompt_buf = read_file(c.prompt_file, &plen, &err);
        if (!prompt_buf)
            goto fail;
        ptext = prompt_buf;
    } else {
        plen = strlen(ptext);
    }
    unsigned flags = TOK_ADD_SPECIAL | (c.parse_special ? TOK_PARSE_SPECIAL : 0);
    if (tok_encode(cm.tok, ptext, plen, flags, &prompt_ids, &err) < 0)
        goto fail;
    if (prompt_ids.n == 0) {
        guild_err_set(&err, "the prompt gives no tokens");
        goto fail;
    }
    if (prompt_ids.n > (size_t)n_ctx) {
        guild_err_set(&err, "the prompt has %zu tokens, more than the context of %d (--ctx)", prompt_ids.n, n_ctx);
        goto fail;
    }
    if (c.verbose) {
        fprintf(stderr, "prompt ids:");
        for (size_t i = 0; i < prompt_ids.n; i++)
            fprintf(stderr, " %d", prompt_ids.v[i]);
        fputc('\n', stderr);
    }

    if (backend_stack_open(&stack, st, model, model_path, &err) < 0 ||
        spec_setup_open(&spec, &c.spec, cm.model, cm.tok, n_ctx, st->n_threads, &err) < 0)
        goto fail;
    if (sampler_new(&smp, &c.sample, mc->n_vocab, &err) < 0)
        goto fail;
    if (c.logits_out && !(logits_f = fopen(c.logits_out, "wb"))) {
        guild_err_errno(&err, errno, "cannot create %s", c.logits_out);
        goto fail;
    }

    gen_options_t go = {
        .n_predict = c.n_predict,
        .n_batch = backend_stack_n_batch(stack),
        .n_ctx = n_ctx,
        .n_vocab = mc->n_vocab,
        .text_out = stdout,
        .logits_out = logits_f,
        .ignore_eog = c.ignore_eos,
        .check_finite = c.stack.gpu.check_finite,
        .drafter = spec.drafter,
        .spec_max = c.spec.max,
    };
    int grc = gen_run(backend_stack_backend(stack), smp, cm.tok, prompt_ids.v, (int32_t)prompt_ids.n, &go, &res, &err);
    if (isatty(STDOUT_FILENO))
        fputc('\n', stdout);
    fflush(stdout);
    if (grc < 0)
        goto fail;
    if (logits_f) {
        int e = fclose(logits_f) != 0 ? errno : 0;
        logits_f = NULL;
        if (e) {
            guild_err_errno(&err, e, "cannot write %s", c.logits_out);
            goto fail;
        }
    }
    if (c.ids_out && write_ids(c.ids_out, res.ids, res.n_sampled, &err) < 0)
        goto fail;

    static const char *why[] = {"length limit", "end of text", "context full"};
    fprintf(stderr, "\nguild run: stopped: %s\n", why[res.stop]);
    fprintf(stderr, "guild run: prefill: %d tokens in %.3f s (%.2f tok/s)\n", res.n_prompt, res.prefill_s,
            res.prefill_s > 0 ? res.n_prompt / res.prefill_s : 0.0);
    fprintf(stderr, "guild run: decode:  %d tokens in %.3f s (%.2f tok/s)\n", res.n_decoded, res.decode_s,
            res.decode_s > 0 ? res.n_decoded / res.decode_s : 0.0);
    if (spec.drafter)
        spec_stats_print(&res.spec, "guild run", stderr);
    backend_stack_print_stats(stack, stderr);
    if (st->record_routing) {
        routing_profile_merge_t mi;
        if (backend_stack_record_routing(stack, st->record_routing, false, &mi, &err) < 0)
            goto fail;
        fprintf(stderr, "guild run: routing counts %s %s: %llu tokens before, %llu now%s\n",
                mi.created ? "written to" : "added to", st->record_routing, (unsigned long long)mi.tokens_before,
                (unsigned long long)mi.tokens_after, mi.saturated ? " (some counts saturated at their limit)" : "");
    }
    rc = 0;
fail:
    if (rc)
        fprintf(stderr, "guild run: %s\n", err.msg);
    if (logits_f)
        fclose(logits_f);
    free(res.ids);
    sampler_destroy(&smp);
    spec_setup_close(&spec);
    backend_stack_close(&stack);
    tok_ids_fini(&prompt_ids);
    cmd_model_fini(&cm);
    free(prompt_buf);
    return rc;
}
