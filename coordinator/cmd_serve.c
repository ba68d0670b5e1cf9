/* guild serve — an OpenAI-compatible HTTP server for one model (coordinator/server/api.h lists the endpoints).
 * Requests are served from a bounded queue, one at a time or (--parallel N) N decoded together in batched steps
 * (coordinator/server/engine.h), on the multi-process pipeline or, with --single-process, in this process
 * (coordinator/backend_stack.h). */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "coordinator/backend_stack.h"
#include "coordinator/cmd_model.h"
#include "coordinator/spec.h"
#include "coordinator/commands.h"
#include "coordinator/server/api.h"
#include "coordinator/server/engine.h"
#include "coordinator/server/http.h"
#include "coordinator/server/strbuf.h"
#include "coordinator/server/textfilt.h"
#include "coordinator/stack_flags.h"
#include "coordinator/stack_plan.h"
#include "gpu-worker/dense/gpu_plan.h"
#include "core/util/cli.h"
#include "core/chat/chat.h"
#include "core/model/model.h"
#include "core/tokenizer/tok.h"
#include "core/util/log.h"

/* Everything `guild serve` was asked to do, validated once and printed at start-up. */
typedef struct serve_config {
    const char *model;         /* -m; NULL: the built-in demo model */
    const char *host;          /* --host */
    int port;                  /* --port; 0: any free port */
    int32_t n_ctx;             /* --ctx; 0: min(n_ctx_train, 4096) */
    int32_t n_batch;           /* --batch */
    int queue;                 /* --queue: requests that may wait */
    int parallel;              /* --parallel: requests decoded together */
    const char *api_key;       /* --api-key */
    const char *chat_template; /* --chat-template NAME|FILE */
    const char *alias;         /* --alias: the model's name in the API */
    size_t max_body;           /* --max-body */
    bool prefix_cache;         /* --no-prefix-cache clears it */
    uint64_t cache_ram;        /* --cache-ram: bytes of prefix snapshots in RAM */
    const char *cache_dir;     /* --cache-dir */
    uint64_t cache_disk;       /* --cache-disk: bytes of snapshot files */
    spec_options_t spec;       /* --spec, --spec-max, --spec-min-p, --draft-model */
    stack_options_t stack;     /* --single-process, --threads, --no-tuning, --backend, the pipeline's flags */
    int verbosity;             /* -q: -1, default 0, -v: 1 */
} serve_config_t;

/* The backend stack's flags guild serve takes (coordinator/stack_flags.h). */
enum {
    SERVE_STACK_FLAGS = STACK_FLAG_SINGLE | STACK_FLAG_THREADS | STACK_FLAG_NO_TUNING | STACK_FLAG_CPU_WORKERS |
                        STACK_FLAG_ARENA_DIR | STACK_FLAG_MLOCK | STACK_FLAG_HUGE_PAGES | STACK_FLAG_SPIN_US |
                        STACK_FLAG_PREFETCH_EXPERTS | STACK_FLAG_BACKEND |
                        STACK_FLAG_STAGER | STACK_FLAG_STAGER_THREADS | STACK_FLAG_EXPERT_LAYOUT |
                        STACK_FLAG_RECORD_ROUTING | STACK_FLAG_ROUTING | STACK_FLAG_CHECK_FINITE | STACK_FLAG_LISTEN |
                        STACK_FLAG_KEY | STACK_FLAG_ALLOW | STACK_FLAG_INSECURE | STACK_FLAG_FALLBACK_LOCAL |
                        STACK_FLAG_REJOIN_MS | STACK_FLAG_KV_TYPE | STACK_FLAG_CPU_NODES | STACK_FLAG_GPU_PROF,
};

/* Prints words (space-separated) from column `indent` on, wrapped before column 110. */
static void print_wrapped(FILE *out, const char *words, int indent)
{
    int col = indent;
    fprintf(out, "%*s", indent, "");
    for (const char *w = words; *w;) {
        size_t n = strcspn(w, " ");
        if (col > indent && col + 1 + (int)n > 110) {
            fprintf(out, "\n%*s", indent, "");
            col = indent;
        }
        col += fprintf(out, "%s%.*s", col > indent ? " " : "", (int)n, w);
        w += n + (w[n] == ' ');
    }
    fputc('\n', out);
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: guild serve [-m FILE.gguf] [options]\n"
            "\n"
            "Serves one model over HTTP with OpenAI's API: GET /health, GET /v1/models, POST /v1/completions,\n"
            "POST /v1/chat/completions (\"stream\": true for Server-Sent Events), POST /tokenize, POST /detokenize,\n"
            "GET /metrics (Prometheus). Requests are served in arrival order, one at a time or, with --parallel N,\n"
            "up to N decoded together in one forward pass per step (each reply the same as the request alone would\n"
            "get); the others wait in a queue. The KV cache of one request is reused by the next when its prompt\n"
            "starts the same way. Stop with SIGINT or SIGTERM. Without -m, serves the built-in demo model (random\n"
            "weights: gibberish).\n"
            "\n"
            "  -m, --model FILE        GGUF model (qwen3moe, qwen2moe, llama/Mixtral, olmoe)\n"
            "      --host ADDR         address to listen on (default 127.0.0.1; 0.0.0.0 or :: for all)\n"
            "      --port N            port (default 8080; 0: any free one, printed at start-up)\n"
            "      --ctx N             context length of every request (default: the model's, at most 4096)\n"
            STACK_FLAGS_BATCH_HELP
            "      --queue N           requests that may wait while others run; more get 503 (default 8)\n"
            "      --parallel N        requests decoded together in batched steps, each with its own KV cache of\n"
            "                          --ctx positions (default 1; more: no --spec)\n"
            "      --api-key KEY       require \"Authorization: Bearer KEY\" on every endpoint but /health\n"
            "      --chat-template T   a built-in template name, or a file holding a Jinja template to\n"
            "                          recognise (default: the model's tokenizer.chat_template); see below\n"
            "      --alias NAME        the model's name in /v1/models and replies (default: the file name)\n"
            "      --max-body BYTES    largest request body (default 8 MiB); larger ones get 413\n"
            "      --no-prefix-cache   start every request from an empty KV cache\n"
            "      --cache-ram SIZE    prefix snapshots kept in RAM, least recently used out first (default 2G;\n"
            "                          0: each sequence's own cache only)\n"
            "      --cache-dir DIR     keep prefix snapshots as files in DIR too, read again at start-up\n"
            "      --cache-disk SIZE   bytes of snapshot files kept in --cache-dir (default 16G)\n"
            SPEC_FLAGS_HELP);
    stack_flags_usage(out, SERVE_STACK_FLAGS, "auto");
    fprintf(out,
            "  -q, --quiet             only warnings and errors on stderr (default: one line per request)\n"
            "  -v, --verbose           more messages on stderr\n"
            "  -h, --help              this help\n"
            "\n"
            "Request fields: model (ignored: there is one), prompt (text, [text] or token ids) / messages,\n"
            "max_tokens (max_completion_tokens), temperature, top_p, top_k, min_p, seed, stop, stream,\n"
            "stream_options.include_usage, repetition_penalty (repeat_penalty), repeat_last_n, ignore_eos;\n"
            "presence_penalty and frequency_penalty only 0; n and best_of only 1. Absent sampling fields take\n"
            "guild run's defaults.\n"
            "\n"
            "Chat templates built in (recognised in the model's Jinja template, or named by --chat-template):\n");
    print_wrapped(out, chat_tmpl_names(), 2);
}

enum {
    OPT_HOST = 256,
    OPT_PORT,
    OPT_CTX,
    OPT_BATCH,
    OPT_QUEUE,
    OPT_PARALLEL,
    OPT_API_KEY,
    OPT_CHAT_TEMPLATE,
    OPT_ALIAS,
    OPT_MAX_BODY,
    OPT_NO_PREFIX_CACHE,
    OPT_CACHE_RAM,
    OPT_CACHE_DIR,
    OPT_CACHE_DISK,
    OPT_SPEC,
};

/* 0, 1 (--help printed) or -1 (usage error printed). */
static int parse_args(int argc, char **argv, serve_config_t *c)
{
    static const struct option own[] = {
        {"model", required_argument, NULL, 'm'},
        {"host", required_argument, NULL, OPT_HOST},
        {"port", required_argument, NULL, OPT_PORT},
        {"ctx", required_argument, NULL, OPT_CTX},
        {"batch", required_argument, NULL, OPT_BATCH},
        {"queue", required_argument, NULL, OPT_QUEUE},
        {"parallel", required_argument, NULL, OPT_PARALLEL},
        {"api-key", required_argument, NULL, OPT_API_KEY},
        {"chat-template", required_argument, NULL, OPT_CHAT_TEMPLATE},
        {"alias", required_argument, NULL, OPT_ALIAS},
        {"max-body", required_argument, NULL, OPT_MAX_BODY},
        {"no-prefix-cache", no_argument, NULL, OPT_NO_PREFIX_CACHE},
        {"cache-ram", required_argument, NULL, OPT_CACHE_RAM},
        {"cache-dir", required_argument, NULL, OPT_CACHE_DIR},
        {"cache-disk", required_argument, NULL, OPT_CACHE_DISK},
        {"spec", required_argument, NULL, OPT_SPEC},
        {"spec-max", required_argument, NULL, OPT_SPEC},
        {"spec-min-p", required_argument, NULL, OPT_SPEC},
        {"draft-model", required_argument, NULL, OPT_SPEC},
        {"draft-threads", required_argument, NULL, OPT_SPEC},
        {"draft-backend", required_argument, NULL, OPT_SPEC},
        {"quiet", no_argument, NULL, 'q'},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct option opts[64];
    stack_flags_options(opts, sizeof opts / sizeof opts[0], own, SERVE_STACK_FLAGS);
    *c = (serve_config_t){
        .host = "127.0.0.1",
        .port = 8080,
        .n_batch = 0, /* auto */
        .queue = 8,
        .parallel = 1,
        .max_body = 8u << 20,
        .prefix_cache = true,
        .cache_ram = 2ull << 30,
        .cache_disk = 16ull << 30,
    };
    stack_options_init(&c->stack);
    c->stack.gpu.backend = "auto";
    spec_options_init(&c->spec);
    guild_err_t e = {{0}};
    long v;
    int o, sf, li;
    optind = 1;
    opterr = 0; /* messages below name the command */
    while ((li = -1, o = getopt_long(argc, argv, "m:qvh", opts, &li)) != -1) {
        if ((sf = stack_flags_parse(&c->stack, o, optarg, &e)) != 0) {
            if (sf < 0)
                goto bad;
            continue;
        }
        switch (o) {
        case 'm': c->model = optarg; break;
        case OPT_HOST: c->host = optarg; break;
        case OPT_PORT:
            if (cli_parse_long("--port", optarg, 0, 65535, &v, &e) < 0)
                goto bad;
            c->port = (int)v;
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
        case OPT_QUEUE:
            if (cli_parse_long("--queue", optarg, 1, 1 << 16, &v, &e) < 0)
                goto bad;
            c->queue = (int)v;
            break;
        case OPT_PARALLEL:
            if (cli_parse_long("--parallel", optarg, 1, 256, &v, &e) < 0)
                goto bad;
            c->parallel = (int)v;
            break;
        case OPT_API_KEY:
            if (!optarg[0]) {
                fprintf(stderr, "guild serve: --api-key: the key is empty\n");
                return -1;
            }
            c->api_key = optarg;
            break;
        case OPT_CHAT_TEMPLATE: c->chat_template = optarg; break;
        case OPT_ALIAS: c->alias = optarg; break;
        case OPT_MAX_BODY:
            if (cli_parse_long("--max-body", optarg, 1024, 1L << 30, &v, &e) < 0)
                goto bad;
            c->max_body = (size_t)v;
            break;
        case OPT_NO_PREFIX_CACHE: c->prefix_cache = false; break;
        case OPT_CACHE_RAM:
            if (!strcmp(optarg, "0"))
                c->cache_ram = 0;
            else if (gpu_plan_parse_size(optarg, "--cache-ram", &c->cache_ram, &e) < 0)
                goto bad;
            break;
        case OPT_CACHE_DISK:
            if (gpu_plan_parse_size(optarg, "--cache-disk", &c->cache_disk, &e) < 0)
                goto bad;
            break;
        case OPT_CACHE_DIR:
            if (!optarg[0]) {
                fprintf(stderr, "guild serve: --cache-dir: the directory name is empty\n");
                return -1;
            }
            c->cache_dir = optarg;
            break;
        case OPT_SPEC:
            if (spec_flag(&c->spec, opts[li].name, optarg, &e) < 0)
                goto bad;
            break;
        case 'q': c->verbosity = -1; break;
        case 'v': c->verbosity = 1; break;
        case 'h': usage(stdout); return 1;
        default:
            fprintf(stderr, "guild serve: unknown option or missing value: %s\n", argv[optind - 1]);
            fprintf(stderr, "(guild serve --help lists the options)\n");
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "guild serve: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (stack_flags_check(&c->stack, SERVE_STACK_FLAGS, NULL, false, &e) < 0)
        goto bad;
    return 0;
bad:
    fprintf(stderr, "guild serve: %s\n", e.msg);
    return -1;
}

static char *read_text_file(const char *path, guild_err_t *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        guild_err_errno(err, errno, "cannot open %s", path);
        return NULL;
    }
    strbuf_t b = STRBUF_INIT;
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0 && b.len < (64u << 20))
        strbuf_put(&b, chunk, n);
    bool bad = ferror(f) != 0;
    fclose(f);
    if (bad || !strbuf_ok(&b)) {
        guild_err_set(err, "cannot read %s", path);
        strbuf_fini(&b);
        return NULL;
    }
    if (!b.p)
        strbuf_puts(&b, "");
    return b.p;
}

/* The chat template to use: -1 only for a bad --chat-template (usage error). For a model whose template is
 * absent or unrecognised, *tmpl is CHAT_TMPL_UNKNOWN and why[] says so. */
static int choose_template(const serve_config_t *c, const model_t *m, chat_tmpl_t *tmpl, char *why, size_t why_len)
{
    *tmpl = CHAT_TMPL_UNKNOWN;
    if (c->chat_template) {
        *tmpl = chat_tmpl_from_name(c->chat_template);
        if (*tmpl != CHAT_TMPL_UNKNOWN)
            return 0;
        guild_err_t err = {{0}};
        char *src = read_text_file(c->chat_template, &err);
        if (!src) {
            fprintf(stderr, "guild serve: --chat-template %s: not a built-in template (%s), and %s\n",
                    c->chat_template, chat_tmpl_names(), err.msg);
            return -1;
        }
        *tmpl = chat_tmpl_detect(src);
        free(src);
        if (*tmpl == CHAT_TMPL_UNKNOWN) {
            fprintf(stderr, "guild serve: --chat-template %s: the template in this file is not one Guild "
                            "recognises; give a built-in name instead: %s\n",
                    c->chat_template, chat_tmpl_names());
            return -1;
        }
        return 0;
    }
    const char *s;
    size_t len;
    if (gguf_get_str(model_gguf(m), "tokenizer.chat_template", &s, &len, NULL) < 0) {
        snprintf(why, why_len, "the model has no chat template (tokenizer.chat_template): /v1/chat/completions "
                               "is off; restart guild serve with --chat-template NAME (%s)",
                 chat_tmpl_names());
        return 0;
    }
    char *src = strndup(s, len);
    if (!src) {
        snprintf(why, why_len, "out of memory reading the chat template");
        return 0;
    }
    *tmpl = chat_tmpl_detect(src);
    free(src);
    if (*tmpl == CHAT_TMPL_UNKNOWN)
        snprintf(why, why_len, "the model's chat template (tokenizer.chat_template) is not one Guild recognises: "
                               "/v1/chat/completions is off; restart guild serve with --chat-template NAME (%s)",
                 chat_tmpl_names());
    return 0;
}

/* The model's name in the API: --alias, else the file name, as valid UTF-8. */
static char *model_id(const serve_config_t *c, const char *path)
{
    char *copy = strdup(path);
    if (!copy)
        return NULL;
    const char *name = c->alias ? c->alias : basename(copy);
    strbuf_t b = STRBUF_INIT;
    textfilt_sanitize(name, strlen(name), &b);
    free(copy);
    if (!strbuf_ok(&b)) {
        strbuf_fini(&b);
        return NULL;
    }
    return b.p ? b.p : strdup("");
}

int cmd_serve(int argc, char **argv)
{
    serve_config_t c;
    int pr = parse_args(argc, argv, &c);
    if (pr != 0)
        return pr > 0 ? 0 : 2;
    guild_log_init("guild serve", c.verbosity < 0 ? GUILD_LOG_WARN : c.verbosity > 0 ? GUILD_LOG_DEBUG
                                                                                   : GUILD_LOG_INFO);
    /* SIGINT/SIGTERM are taken by sigwait below: blocked here, before any thread exists, so that every thread
     * inherits the mask (spawned workers get a clean one: coordinator/spawn.c). SIGPIPE: a client that closes
     * early is an error return, not a death. */
    sigset_t stop_sigs;
    sigemptyset(&stop_sigs);
    sigaddset(&stop_sigs, SIGINT);
    sigaddset(&stop_sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    guild_err_t err = {{0}};
    int rc = 1;
    char *id = NULL;
    cmd_model_t cm = {0};
    engine_t *engine = NULL;
    http_server_t *http = NULL;
    char why[1024] = "";
    chat_tmpl_t tmpl;

    /* the port first: a port in use is said at once, not after the model loads; until the model is ready every
     * request gets 503 (api_server_t.ready) */
    api_server_t api = {.ready = 0};
    metrics_t *metrics = NULL;
    if (metrics_new(&metrics) < 0) {
        guild_err_set(&err, "out of memory");
        goto fail;
    }
    api.metrics = metrics;
    http_options_t ho = {
        .host = c.host,
        .port = c.port,
        .max_body = c.max_body,
        .max_connections = 64,
        .idle_timeout_s = 60,
    };
    if (http_server_start(&http, &ho, api_handle, &api, &err) < 0)
        goto fail;
    if (cmd_model_init(&cm, c.model, &err) < 0)
        goto fail;
    const char *model_path = cm.path;
    const model_t *model = cm.model;
    tok_t *tok = cm.tok;
    const model_config_t *mc = model_config(model);
    if (choose_template(&c, model, &tmpl, why, sizeof why) < 0) {
        rc = 2;
        goto fail;
    }
    if (!(id = model_id(&c, model_path))) {
        guild_err_set(&err, "out of memory");
        goto fail;
    }
    const int32_t n_ctx = cmd_model_n_ctx(model, c.n_ctx);
    int32_t n_batch = c.n_batch < n_ctx ? c.n_batch : n_ctx;
    if (stack_flags_tune(&c.stack, model_path, "guild serve", &err) < 0)
        goto fail;

    guild_log(GUILD_LOG_INFO, "model %s (%s)", model_path, id);
    if (guild_log_level() >= GUILD_LOG_INFO)
        model_config_print(mc, stderr);
    c.stack.n_ctx = n_ctx;
    c.stack.n_batch = n_batch;
    c.stack.n_seq = c.parallel;
    if (spec_options_check(&c.spec, model, &err) < 0)
        goto fail;
    spec_stack_options(&c.spec, &c.stack);
    if (stack_plan_fit(&c.stack, model, &err) < 0)
        goto fail;
    if (c.stack.gpu_mem_why[0])
        guild_log(GUILD_LOG_INFO, "--gpu-mem %s", c.stack.gpu_mem_why);
    c.stack.log_level = c.verbosity > 0 ? GUILD_LOG_INFO : GUILD_LOG_WARN;
    engine_config_t ec = {
        .stack = &c.stack,
        .model = model,
        .model_path = model_path,
        .tok = tok,
        .queue_max = c.queue,
        .parallel = c.parallel,
        .prefix_cache = c.prefix_cache,
        .cache_ram = (size_t)c.cache_ram,
        .cache_dir = c.cache_dir,
        .cache_disk = (size_t)c.cache_disk,
        .spec = c.spec.kind != SPEC_NONE ? &c.spec : NULL,
    };
    if (engine_new(&engine, &ec, &err) < 0)
        goto fail;

    size_t eos_len = 0;
    api.tok = tok;
    api.engine = engine;
    api.chat = tmpl;
    api.chat_error = why;
    api.eos_text = tok_eos(tok) >= 0 ? tok_text(tok, tok_eos(tok), &eos_len) : NULL;
    api.model_id = id;
    api.n_ctx = n_ctx;
    api.n_vocab = mc->n_vocab;
    api.api_key = c.api_key;
    api.created = (int64_t)time(NULL);
    __atomic_store_n(&api.ready, 1, __ATOMIC_RELEASE);
    char backend[STACK_BACKEND_TEXT];
    guild_log(GUILD_LOG_INFO, "%s, backend %s, threads %d, ctx %d, batch %d, parallel %d, queue %d, prefix cache %s",
              c.stack.single_process ? "single process" : "GPU worker + CPU expert workers",
              stack_options_backend_text(&c.stack, backend, sizeof backend), c.stack.n_threads,
              n_ctx, engine_n_batch(engine), c.parallel, c.queue, c.prefix_cache ? "on" : "off");
    if (tmpl == CHAT_TMPL_UNKNOWN)
        guild_log(GUILD_LOG_WARN, "%s", why);
    else
        guild_log(GUILD_LOG_INFO, "chat template: %s", chat_tmpl_name(tmpl));
    /* the one line a script waits for (on stderr whatever the level) */
    fprintf(stderr, "guild serve: listening on http://%s%s%s:%d/ (model %s)\n", strchr(c.host, ':') ? "[" : "",
            c.host, strchr(c.host, ':') ? "]" : "", http_server_port(http), id);

    /* until SIGINT or SIGTERM; a pipeline that failed for good (a worker that cannot load its part) ends the
     * server with status 1, for a service manager to start it again (a worker that died too often is backed
     * off from and started again within: /health says 503 meanwhile) */
    int sig = 0;
    for (;;) {
        const struct timespec tick = {1, 0};
        sig = sigtimedwait(&stop_sigs, NULL, &tick);
        if (sig == SIGINT || sig == SIGTERM)
            break;
        char health[1024];
        if (engine_health(engine, health, sizeof health) < 0) {
            guild_err_set(&err, "the pipeline failed: %s; exiting (status 1)", health);
            http_server_quiesce(http);
            engine_shutdown(engine);
            goto fail;
        }
    }
    fprintf(stderr, "guild serve: %s: shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    http_server_quiesce(http); /* no new connections; the engine ends the jobs in flight */
    engine_shutdown(engine);
    rc = 0;
fail:
    if (rc == 1)
        fprintf(stderr, "guild serve: %s\n", err.msg);
    http_server_stop(&http);
    engine_destroy(&engine);
    metrics_destroy(&metrics);
    cmd_model_fini(&cm);
    free(id);
    return rc;
}
