/* guild bench pool FILE.json... — the paired runs of several `guild bench sessions --json` calls of one build held
 * together against the target.
 *
 * On a shared machine few runs of a call keep flanks that agree and reads no faster than them (bench/paired.h), so
 * one call's verdict rests on one to three runs. Calls of the same build measure the same thing: their kept runs
 * pooled per size give a verdict with a real count behind it. Each run keeps the judgement its call made of it
 * (its fractions, its phase change at that call's --flank-tol, whether its reads outran the probes); the pool is
 * summarised by paired_summarize, the rule a single call uses, so a pool of one file says what that file says. */
#include "config.h"

#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "bench/paired.h"
#include "bench/paired_json.h"

#define POOL_MAX_FILES 64
#define POOL_MAX_SIZES 32

/* One size's runs from every file, in the files' order. */
typedef struct pool_size {
    int sessions;
    paired_run_t *runs; /* [n], grown as files add runs */
    int n, cap;
    int from[POOL_MAX_FILES]; /* runs each file gave */
    paired_summary_t sum;
} pool_size_t;

typedef struct pool_file {
    const char *path;
    json_t *doc;
    const char *commit, *date;
    double tol;
    long long resident; /* GPU-resident experts the call's plan gave (-1: not recorded) */
    int runs;
} pool_file_t;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: guild bench pool SESSIONS.json... [options]\n"
            "Pools the paired runs (each run against the limit at the DRAM probes flanking it) of several\n"
            "guild bench sessions --json files of one build, per number of sessions, and gives the pooled\n"
            "medians and the verdict by the rule of a single call.\n"
            "  --target PCT            the fraction of the limit to reach, in percent (default 90)\n"
            "  --any-commit            pool files whose commits differ (say why where the result is kept)\n"
            "  --json FILE             write the pooled sizes with the files' provenance\n"
            "  -h, --help              this help\n");
}

/* The size of `sessions` in sizes[0 .. *n), added when new. NULL with err when there are too many. */
static pool_size_t *size_of(pool_size_t *sizes, int *n, int sessions, guild_err_t *err)
{
    for (int i = 0; i < *n; i++)
        if (sizes[i].sessions == sessions)
            return &sizes[i];
    if (*n == POOL_MAX_SIZES) {
        guild_err_set(err, "more than %d numbers of sessions", POOL_MAX_SIZES);
        return NULL;
    }
    sizes[*n] = (pool_size_t){.sessions = sessions};
    return &sizes[(*n)++];
}

/* The settings that make two calls measure the same thing: the same model, mode, prompt, generated tokens and
 * GPU budget. Returns the first key on which doc differs from ref, or NULL. */
static const char *settings_differ(const json_t *ref, const json_t *doc)
{
    static const char *const keys[] = {"model", "mode", "prompt", "gen", "gpu_mem_budget_bytes"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (!json_equal(json_object_get(ref, keys[i]), json_object_get(doc, keys[i])))
            return keys[i];
    return NULL;
}

/* Loads file f (index fi) and adds its runs to the sizes. */
static int load_file(pool_file_t *f, int fi, pool_size_t *sizes, int *n_sizes, guild_err_t *err)
{
    json_error_t je;
    f->doc = json_load_file(f->path, 0, &je);
    if (!f->doc)
        return guild_err_set(err, "%s: %s", f->path, je.text);
    const json_t *arr = json_object_get(f->doc, "sizes");
    if (!json_is_object(f->doc) || !json_is_array(arr) || !json_object_get(f->doc, "repeat"))
        return guild_err_set(err, "%s: not a guild bench sessions --json document (no \"sizes\" array)", f->path);
    const json_t *pv = json_object_get(f->doc, "provenance");
    f->commit = json_string_value(json_object_get(pv, "commit"));
    f->date = json_string_value(json_object_get(pv, "date"));
    if (!f->commit)
        return guild_err_set(err, "%s: no provenance.commit: cannot tell its build", f->path);
    const json_t *probes = json_object_get(f->doc, "probes_each_side");
    if (!json_is_integer(probes) || json_integer_value(probes) < 1)
        return guild_err_set(err, "%s: no paired runs: its flanks were not probed (a --dram-gbs run, or a bench "
                             "older than the paired probes)", f->path);
    const json_t *tol = json_object_get(f->doc, "flank_tolerance");
    if (!json_is_number(tol))
        return guild_err_set(err, "%s: no number \"flank_tolerance\"", f->path);
    f->tol = json_number_value(tol);
    const json_t *res = json_object_get(f->doc, "gpu_resident_experts_planned");
    f->resident = json_is_integer(res) ? (long long)json_integer_value(res) : -1;
    for (size_t i = 0; i < json_array_size(arr); i++) {
        const json_t *s = json_array_get(arr, i);
        const json_t *ns = json_object_get(s, "sessions"), *runs = json_object_get(s, "paired_runs");
        if (!json_is_integer(ns) || json_integer_value(ns) < 1)
            return guild_err_set(err, "%s: sizes[%zu]: no positive \"sessions\"", f->path, i);
        const int sessions = (int)json_integer_value(ns);
        if (!json_is_array(runs) || !json_array_size(runs))
            return guild_err_set(err, "%s: %d sessions: no paired runs", f->path, sessions);
        pool_size_t *z = size_of(sizes, n_sizes, sessions, err);
        if (!z)
            return guild_err_prefix(err, "%s: ", f->path);
        const int add = (int)json_array_size(runs);
        if (z->n + add > PAIRED_MAX_RUNS)
            return guild_err_set(err, "%s: %d sessions: %d runs pooled, a summary takes at most %d", f->path,
                                 sessions, z->n + add, PAIRED_MAX_RUNS);
        if (z->n + add > z->cap) {
            paired_run_t *grown = realloc(z->runs, (size_t)(z->n + add) * sizeof *grown);
            if (!grown)
                return guild_err_set(err, "out of memory");
            z->runs = grown;
            z->cap = z->n + add;
        }
        for (int k = 0; k < add; k++) {
            char where[600];
            snprintf(where, sizeof where, "%s: %d sessions: paired_runs[%d]", f->path, sessions, k);
            if (paired_run_from_json(json_array_get(runs, (size_t)k), &z->runs[z->n], where, err) < 0)
                return -1;
            z->n++;
        }
        z->from[fi] += add;
        f->runs += add;
    }
    if (!f->runs)
        return guild_err_set(err, "%s: no paired runs (no sizes)", f->path);
    return 0;
}

static int by_sessions(const void *a, const void *b)
{
    return ((const pool_size_t *)a)->sessions - ((const pool_size_t *)b)->sessions;
}

static void print_pool(const pool_file_t *files, int n_files, const pool_size_t *sizes, int n_sizes, double target,
                       bool mixed)
{
    printf("# pool: %d guild bench sessions files%s\n", n_files,
           mixed ? " of DIFFERENT commits (--any-commit)" : ", one commit");
    for (int i = 0; i < n_files; i++)
        printf("#  %s: commit %s, %s, %d paired runs, flank tolerance %.0f%%, %lld GPU-resident experts planned\n",
               files[i].path, files[i].commit, files[i].date ? files[i].date : "no date", files[i].runs,
               100 * files[i].tol, files[i].resident);
    for (int i = 1; i < n_files; i++)
        if (files[i].tol != files[0].tol) {
            printf("# note: the files judged phase changes at different flank tolerances; each run keeps its own\n");
            break;
        }
    printf("# pooled paired runs per size, each judged by its own call; medians of the kept runs' fractions of the "
           "limit at their flanks' mean, higher and lower probe; verdict against %.0f%% by the rule of one call\n",
           100 * target);
    printf("%8s %5s %5s %6s %7s %9s %15s %9s %9s %10s  %s\n", "sessions", "runs", "kept", "phase", "outran", "paired",
           "spread", "at higher", "at lower", "wait/probe", "verdict");
    for (int i = 0; i < n_sizes; i++) {
        const paired_summary_t *p = &sizes[i].sum;
        paired_cells_t cl;
        paired_summary_cells(p, &cl);
        printf("%8d %5d %5d %6d %7d %9s %15s %9s %9s %10.2f  %s\n", sizes[i].sessions, p->runs, p->stable, p->phase,
               p->outran, cl.median, cl.spread, cl.hi, cl.lo, p->wait_over_flank, paired_verdict_name(p->verdict));
    }
}

static json_t *pool_json(const pool_file_t *files, int n_files, const pool_size_t *sizes, int n_sizes,
                         double target, bool mixed, int argc, char **argv)
{
    json_t *root = json_object(), *fa = json_array(), *sa = json_array();
    char cmd[4096] = "guild bench";
    for (int i = 0; i < argc; i++)
        if (strlen(cmd) + strlen(argv[i]) + 2 < sizeof cmd) {
            strcat(cmd, " ");
            strcat(cmd, argv[i]);
        }
    json_object_set_new(root, "command", json_string(cmd));
    json_object_set_new(root, "target_fraction", json_real(target));
    json_object_set_new(root, "mixed_commits", json_boolean(mixed));
    for (int i = 0; i < n_files; i++) {
        json_t *f = json_object();
        json_object_set_new(f, "path", json_string(files[i].path));
        json_object_set_new(f, "commit", json_string(files[i].commit));
        json_object_set_new(f, "date", files[i].date ? json_string(files[i].date) : json_null());
        json_object_set_new(f, "flank_tolerance", json_real(files[i].tol));
        json_object_set_new(f, "paired_runs", json_integer(files[i].runs));
        json_object_set_new(f, "gpu_resident_experts_planned", json_integer(files[i].resident));
        json_array_append_new(fa, f);
    }
    json_object_set_new(root, "files", fa);
    for (int i = 0; i < n_sizes; i++) {
        const paired_summary_t *p = &sizes[i].sum;
        json_t *s = json_object(), *from = json_array();
        for (int k = 0; k < n_files; k++)
            json_array_append_new(from, json_integer(sizes[i].from[k]));
        json_object_set_new(s, "sessions", json_integer(sizes[i].sessions));
        json_object_set_new(s, "runs_from_each_file", from);
        json_object_set_new(s, "paired_runs", json_integer(p->runs));
        paired_summary_json(s, p);
        json_array_append_new(sa, s);
    }
    json_object_set_new(root, "sizes", sa);
    return root;
}

int bench_pool_main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"target", required_argument, NULL, 't'}, {"any-commit", no_argument, NULL, 'a'},
        {"json", required_argument, NULL, 'j'},   {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *json_out = NULL;
    double target = 0.90;
    bool any_commit = false;
    int o;
    optind = 1;
    opterr = 0;
    while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (o) {
        case 't': {
            char *end;
            const double pct = strtod(optarg, &end);
            if (end == optarg || *end || !(pct > 0 && pct <= 1000)) {
                fprintf(stderr, "guild bench pool: --target %s: a percentage above 0\n", optarg);
                return 2;
            }
            target = pct / 100;
            break;
        }
        case 'a': any_commit = true; break;
        case 'j': json_out = optarg; break;
        case 'h': usage(stdout); return 0;
        default:
            fprintf(stderr, "guild bench pool: unknown option or missing value: %s\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        }
    }
    const int n_files = argc - optind;
    if (n_files < 1 || n_files > POOL_MAX_FILES) {
        fprintf(stderr, "guild bench pool: %s\n",
                n_files < 1 ? "no files: give one or more guild bench sessions --json files" : "more than 64 files");
        usage(stderr);
        return 2;
    }
    pool_file_t files[POOL_MAX_FILES] = {{0}};
    pool_size_t sizes[POOL_MAX_SIZES];
    int n_sizes = 0, rc = 1;
    guild_err_t err = {{0}};
    json_t *out = NULL;
    bool mixed = false;
    for (int i = 0; i < n_files; i++) {
        files[i].path = argv[optind + i];
        if (load_file(&files[i], i, sizes, &n_sizes, &err) < 0)
            goto done;
        const char *key = settings_differ(files[0].doc, files[i].doc);
        if (key) {
            guild_err_set(&err, "%s and %s differ in \"%s\": runs of other settings are not one measure",
                          files[0].path, files[i].path, key);
            goto done;
        }
        mixed |= strcmp(files[i].commit, files[0].commit) != 0;
    }
    if (mixed && !any_commit) {
        char list[GUILD_ERR_MAX - 128] = "";
        for (int i = 0; i < n_files; i++) {
            const size_t len = strlen(list);
            snprintf(list + len, sizeof list - len, "%s%s (%s)", i ? ", " : "", files[i].commit, files[i].path);
        }
        guild_err_set(&err, "the files are of different commits: %s; pool one build's runs, or give --any-commit "
                      "where the builds' engines are the same", list);
        goto done;
    }
    qsort(sizes, (size_t)n_sizes, sizeof sizes[0], by_sessions);
    for (int i = 0; i < n_sizes; i++)
        paired_summarize(sizes[i].runs, sizes[i].n, target, &sizes[i].sum);
    print_pool(files, n_files, sizes, n_sizes, target, mixed);
    if (json_out) {
        out = pool_json(files, n_files, sizes, n_sizes, target, mixed, argc, argv);
        if (json_dump_file(out, json_out, JSON_INDENT(2)) < 0) {
            guild_err_set(&err, "%s: cannot write", json_out);
            goto done;
        }
    }
    rc = 0;
done:
    if (rc)
        fprintf(stderr, "guild bench pool: %s\n", err.msg);
    json_decref(out);
    for (int i = 0; i < n_sizes; i++)
        free(sizes[i].runs);
    for (int i = 0; i < n_files; i++)
        json_decref(files[i].doc);
    return rc;
}
