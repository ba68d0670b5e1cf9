/* bench/plot.h — `guild bench run`'s results drawn as an SVG: prefill and decode tok/s against populated context,
 * one series per run (or per label given to several runs), the decode limit of each run as a dashed line of its
 * colour.
 *
 * Two panels side by side, both with a log-2 context axis (the populated contexts double) and a log-10 tok/s axis
 * with 1-2-5 ticks (prefill and the decode limit are often ten times the measured decode). The document is
 * self-contained (no scripts, fonts or styles from outside) and written by this code alone. A context a run
 * reports with no positive rate (unsupported, failed) is left out of its series and named in a note under the
 * plot, never drawn as zero. A point whose KV cache was in host RAM (the result's "kv_cache": "host", a stack of its
 * own) has a hollow marker, explained under the legend. */
#ifndef GUILD_BENCH_PLOT_H
#define GUILD_BENCH_PLOT_H

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

#include "core/util/err.h"

/* One run: a `guild bench run --json` document (borrowed) and its legend label. Runs whose label was given
 * (label_given) and is the same are one series: a KV format's contexts in GPU memory and in host RAM, two stacks
 * and so two runs, drawn as one curve. */
typedef struct plot_run {
    const json_t *doc;
    const char *label;
    bool label_given;
} plot_run_t;

/* Writes the SVG of runs[0..n) (n >= 1) to out. title NULL: a default naming the model and the GPU of the first
 * run. -1 with err naming the run and the field when a document is not guild bench run's (no results array, a
 * result without a context), or on a write error. */
int plot_write_svg(const plot_run_t *runs, int n, const char *title, FILE *out, guild_err_t *err);

/* guild bench plot RESULTS.json... -o FILE.svg: the exit status (0, 1 runtime failure, 2 usage error). */
int bench_plot_main(int argc, char **argv);

#endif
