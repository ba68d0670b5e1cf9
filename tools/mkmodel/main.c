/* guild-mkmodel: writes synthetic GGUF MoE models (sources in tools/mkmodel; usage: --help). --fill pool makes
 * benchmark-size models fast from pools of real blocks (tools/mkmodel/pool.h). */
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "core/quant/types.h"
#include "core/util/log.h"
#include "tools/mkmodel/cli.h"
#include "tools/mkmodel/model.h"
#include "tools/mkmodel/vocab.h"

typedef struct progress {
    double start, last;
} progress_t;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One line on the terminal, at most twice a second. */
static void show_progress(uint64_t done, uint64_t total, void *arg)
{
    progress_t *p = arg;
    double t = now();
    if (done < total && t - p->last < 0.5)
        return;
    p->last = t;
    double secs = t - p->start;
    fprintf(stderr, "\r%.2f / %.2f GB  %3.0f%%  %.2f GB/s ", done / 1e9, total / 1e9,
            total ? 100.0 * (double)done / (double)total : 100.0, secs > 0 ? done / 1e9 / secs : 0.0);
    if (done == total)
        fputc('\n', stderr);
    fflush(stderr);
}

int main(int argc, char **argv)
{
    guild_log_init("guild-mkmodel", GUILD_LOG_INFO);
    mkmodel_config_t cfg;
    guild_err_t err;
    bool quiet;
    int rc = mkmodel_cli_parse(argc, argv, &cfg, &quiet, &err);
    if (rc == 1) {
        mkmodel_cli_help(stdout);
        return 0;
    }
    if (rc < 0 || mkmodel_config_validate(&cfg, &err) < 0 ||
        (!cfg.vocab_from[0] && cfg.n_vocab < MKMODEL_VOCAB_MIN &&
         guild_err_set(&err, "--vocab %lld: the built-in vocabulary needs at least %d tokens", (long long)cfg.n_vocab,
                       MKMODEL_VOCAB_MIN) < 0)) {
        fprintf(stderr, "guild-mkmodel: %s\n", err.msg);
        return 2;
    }
    if (quiet)
        guild_log_init("guild-mkmodel", GUILD_LOG_ERROR);
    progress_t p = {now(), 0};
    mkmodel_summary_t s;
    if (mkmodel_write(&cfg, !quiet && isatty(STDERR_FILENO) ? show_progress : NULL, &p, &s, &err) < 0) {
        fprintf(stderr, "guild-mkmodel: %s\n", err.msg);
        return 1;
    }
    if (!quiet) {
        const char *types = cfg.recipe == MKMODEL_RECIPE_Q4_K_M      ? "Q4_K_M"
                            : cfg.recipe == MKMODEL_RECIPE_MXFP4_MOE ? "MXFP4_MOE"
                                                                     : quant_type_info((uint32_t)cfg.type)->name;
        printf("%s: %s, %lld layers, %lld experts (top %lld), %s, vocab %lld, %lld tensors (%lld with a block-size "
               "fallback), %.3f B params, %.3f GB data, written in %.2f s (%.3f GB/s, %d threads%s)\n",
               cfg.out_path, mkmodel_arch_gguf_name(cfg.arch), (long long)cfg.n_layer, (long long)cfg.n_expert,
               (long long)cfg.n_expert_used, types, (long long)s.n_vocab, (long long)s.n_tensors,
               (long long)s.n_fallbacks, s.n_params / 1e9, s.data_bytes / 1e9, s.seconds,
               s.seconds > 0 ? s.data_bytes / 1e9 / s.seconds : 0.0, cfg.threads,
               cfg.fill == MKMODEL_FILL_POOL ? ", --fill pool" : "");
        char first[4096 + 32];
        if (s.n_parts > 1 && mkmodel_part_path(first, sizeof first, cfg.out_path, 0, s.n_parts, &err) == 0)
            printf("split into %d files: %s (open this one) ...\n", s.n_parts, first);
    }
    return 0;
}
