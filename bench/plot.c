/* guild bench plot — see bench/plot.h. */
#include "config.h"

#include "bench/plot.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RUNS 16
#define MAX_POINTS 64

/* Geometry, in SVG user units (px). */
enum {
    PANEL_W = 440, PANEL_H = 300,  /* the plotting area of one panel */
    MARGIN_L = 70, MARGIN_R = 20, MARGIN_T = 56, MARGIN_B = 52,
    GAP = 40,                      /* between the panels */
    LEGEND_ROW = 18,
};

/* Colours that stay apart for readers with the common colour-vision deficiencies (Okabe and Ito). */
static const char *const palette[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                      "#E69F00", "#56B4E9", "#000000", "#F0E442"};
#define N_PALETTE (sizeof palette / sizeof palette[0])

typedef struct point {
    double ctx, prefill, decode, limit; /* tok/s; <= 0: none */
    bool host;                          /* its KV cache in host RAM (drawn hollow): another stack than the others */
} point_t;

typedef struct series {
    const char *label;
    point_t p[MAX_POINTS];
    int n;
} series_t;

/* An axis: log scale from lo to hi (both > 0) onto [a, b] px. */
typedef struct axis {
    double lo, hi, a, b;
} axis_t;

static double axis_px(const axis_t *x, double v)
{
    return x->a + (x->b - x->a) * (log(v) - log(x->lo)) / (log(x->hi) - log(x->lo));
}

/* XML text: the five characters that need escaping, and nothing that is not printable. */
static void xml_text(FILE *o, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", o); break;
        case '<': fputs("&lt;", o); break;
        case '>': fputs("&gt;", o); break;
        case '"': fputs("&quot;", o); break;
        case '\'': fputs("&apos;", o); break;
        default:
            if ((unsigned char)*s >= 0x20 || *s == '\t')
                fputc(*s, o);
        }
    }
}

/* "512", "4K", "128K", "1M": contexts are powers of two, or close. */
static void ctx_label(char *buf, size_t n, double c)
{
    if (c >= 1048576 && fmod(c, 1048576) == 0)
        snprintf(buf, n, "%.0fM", c / 1048576);
    else if (c >= 1024 && fmod(c, 1024) == 0)
        snprintf(buf, n, "%.0fK", c / 1024);
    else
        snprintf(buf, n, "%.0f", c);
}

static void rate_label(char *buf, size_t n, double v)
{
    if (v >= 1e6)
        snprintf(buf, n, "%gM", v / 1e6);
    else if (v >= 1e3)
        snprintf(buf, n, "%gk", v / 1e3);
    else
        snprintf(buf, n, "%g", v);
}

/* A number field of a result, or 0 when absent or not a number. */
static double num(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : 0;
}

/* Adds run r's results to series s (empty, or holding the points of earlier files of the same label: a context
 * that two of them report is refused, since only one can be drawn). */
static int load_series(const plot_run_t *r, series_t *s, guild_err_t *err)
{
    const json_t *res = json_object_get(r->doc, "results");
    if (!json_is_array(res))
        return guild_err_set(err, "%s: no \"results\" array (not a guild bench run --json document)", r->label);
    if (json_array_size(res) > (size_t)(MAX_POINTS - s->n))
        return guild_err_set(err, "%s: %zu results, at most %d are drawn in a series", r->label,
                             json_array_size(res) + (size_t)s->n, MAX_POINTS);
    s->label = r->label;
    const int earlier = s->n;
    for (size_t i = 0; i < json_array_size(res); i++) {
        const json_t *x = json_array_get(res, i);
        const double c = num(x, "context");
        if (!json_is_object(x) || c < 1)
            return guild_err_set(err, "%s: results[%zu]: no positive \"context\"", r->label, i);
        for (int j = 0; j < earlier; j++)
            if (s->p[j].ctx == c)
                return guild_err_set(err, "%s: context %.0f is in two files of this label (one series)", r->label, c);
        const char *kv = json_string_value(json_object_get(x, "kv_cache"));
        s->p[s->n++] = (point_t){c, num(x, "prefill_tok_s"), num(x, "decode_tok_s"), num(x, "decode_limit_tok_s"),
                                 kv && !strcmp(kv, "host")};
    }
    /* drawn left to right */
    for (int i = 1; i < s->n; i++)
        for (int j = i; j > 0 && s->p[j].ctx < s->p[j - 1].ctx; j--) {
            point_t t = s->p[j];
            s->p[j] = s->p[j - 1];
            s->p[j - 1] = t;
        }
    return 0;
}

/* The 1-2-5 decade range around [lo, hi] (lo > 0). */
static void nice_log_range(double lo, double hi, double *a, double *b)
{
    static const double steps[] = {1, 2, 5, 10};
    double d = pow(10, floor(log10(lo)));
    *a = d;
    for (int i = 0; i < 4 && d * steps[i] <= lo; i++)
        *a = d * steps[i];
    d = pow(10, floor(log10(hi)));
    *b = d * 10;
    for (int i = 3; i >= 0 && d * steps[i] >= hi; i--)
        *b = d * steps[i];
    if (*b <= *a)
        *b = *a * 2;
}

/* Which of a point's rates a panel draws. */
typedef enum panel_kind { PANEL_PREFILL, PANEL_DECODE } panel_kind_t;

static void polyline(FILE *o, const series_t *s, const axis_t *x, const axis_t *y, panel_kind_t k, bool limit,
                     const char *colour)
{
    int drawn = 0;
    for (int i = 0; i < s->n; i++) {
        const double v = k == PANEL_PREFILL ? s->p[i].prefill : limit ? s->p[i].limit : s->p[i].decode;
        if (v <= 0)
            continue;
        if (!drawn++)
            fprintf(o, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%s\"%s points=\"", colour,
                    limit ? "1.5" : "2", limit ? " stroke-dasharray=\"6 4\"" : "");
        fprintf(o, "%s%.1f,%.1f", drawn > 1 ? " " : "", axis_px(x, s->p[i].ctx), axis_px(y, v));
    }
    if (drawn)
        fputs("\"/>\n", o);
    for (int i = 0; !limit && i < s->n; i++) { /* markers on the measured points, with the value on hover */
        const double v = k == PANEL_PREFILL ? s->p[i].prefill : s->p[i].decode;
        if (v <= 0)
            continue;
        if (s->p[i].host)
            fprintf(o, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"#ffffff\" stroke=\"%s\" "
                    "stroke-width=\"1.5\"><title>", axis_px(x, s->p[i].ctx), axis_px(y, v), colour);
        else
            fprintf(o, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"><title>", axis_px(x, s->p[i].ctx),
                    axis_px(y, v), colour);
        xml_text(o, s->label);
        fprintf(o, ": context %.0f, %s %.1f tok/s%s</title></circle>\n", s->p[i].ctx,
                k == PANEL_PREFILL ? "prefill" : "decode", v, s->p[i].host ? " (KV cache in host RAM)" : "");
    }
}

static void panel(FILE *o, const series_t *ss, int n, double x0, panel_kind_t k, const axis_t *cx)
{
    /* the y range over what this panel draws */
    double lo = INFINITY, hi = 0;
    for (int r = 0; r < n; r++)
        for (int i = 0; i < ss[r].n; i++) {
            const point_t *p = &ss[r].p[i];
            const double v[2] = {k == PANEL_PREFILL ? p->prefill : p->decode, k == PANEL_DECODE ? p->limit : 0};
            for (int j = 0; j < 2; j++)
                if (v[j] > 0) {
                    lo = fmin(lo, v[j]);
                    hi = fmax(hi, v[j]);
                }
        }
    if (hi <= 0)
        lo = 1, hi = 10;
    double ylo, yhi;
    nice_log_range(lo, hi, &ylo, &yhi);
    const axis_t y = {ylo, yhi, MARGIN_T + PANEL_H, MARGIN_T};
    axis_t x = *cx;
    x.a += x0;
    x.b += x0;

    fprintf(o, "<g>\n<rect x=\"%.1f\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#ffffff\" stroke=\"#444444\"/>\n",
            x.a, MARGIN_T, PANEL_W, PANEL_H);
    /* y grid: 1, 2, 5 in every decade */
    for (double d = pow(10, floor(log10(ylo))); d <= yhi; d *= 10)
        for (int m = 1; m <= 5; m += m == 1 ? 1 : 3) {
            const double v = d * m;
            if (v < ylo * 0.999 || v > yhi * 1.001)
                continue;
            char lab[32];
            rate_label(lab, sizeof lab, v);
            const double py = axis_px(&y, v);
            fprintf(o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#dddddd\"/>\n", x.a, py, x.b,
                    py);
            fprintf(o, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" font-size=\"11\">%s</text>\n", x.a - 6,
                    py + 4, lab);
        }
    /* x grid: powers of two */
    for (double c = pow(2, ceil(log2(cx->lo))); c <= cx->hi * 1.001; c *= 2) {
        char lab[32];
        ctx_label(lab, sizeof lab, c);
        const double px = axis_px(&x, c);
        fprintf(o, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#dddddd\"/>\n", px, MARGIN_T, px,
                MARGIN_T + PANEL_H);
        fprintf(o, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" font-size=\"11\">%s</text>\n", px,
                MARGIN_T + PANEL_H + 16, lab);
    }
    fprintf(o, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" font-size=\"12\">populated context (tokens, log "
            "scale)</text>\n", x.a + PANEL_W / 2.0, MARGIN_T + PANEL_H + 36);
    fprintf(o, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" font-size=\"14\" font-weight=\"bold\">%s</text>\n",
            x.a + PANEL_W / 2.0, MARGIN_T - 10,
            k == PANEL_PREFILL ? "prefill tok/s" : "decode tok/s (dashed: the run's limit)");
    fprintf(o, "<text transform=\"translate(%.1f %.1f) rotate(-90)\" text-anchor=\"middle\" font-size=\"12\">tokens "
            "per second (log scale)</text>\n", x.a - 52, MARGIN_T + PANEL_H / 2.0);
    for (int r = 0; r < n; r++) {
        const char *colour = palette[r % N_PALETTE];
        if (k == PANEL_DECODE)
            polyline(o, &ss[r], &x, &y, k, true, colour);
        polyline(o, &ss[r], &x, &y, k, false, colour);
    }
    fputs("</g>\n", o);
}

int plot_write_svg(const plot_run_t *runs, int n, const char *title, FILE *o, guild_err_t *err)
{
    if (n < 1 || n > MAX_RUNS)
        return guild_err_set(err, "%d runs: between 1 and %d can be drawn", n, MAX_RUNS);
    series_t *ss = calloc((size_t)n, sizeof *ss);
    if (!ss)
        return guild_err_set(err, "out of memory");
    int rc = -1;
    double clo = INFINITY, chi = 0;
    /* files of one label are one series: a KV format's contexts in GPU memory and in host RAM come from two runs
     * (two stacks, each its own guild bench run), drawn as one curve in one colour */
    const int n_runs = n;
    n = 0;
    bool given[MAX_RUNS] = {false};
    for (int r = 0; r < n_runs; r++) {
        int s = 0;
        while (s < n && !(runs[r].label_given && given[s] && !strcmp(ss[s].label, runs[r].label)))
            s++;
        given[s] = runs[r].label_given;
        n += s == n;
        if (load_series(&runs[r], &ss[s], err) < 0)
            goto done;
    }
    for (int r = 0; r < n; r++)
        for (int i = 0; i < ss[r].n; i++) {
            clo = fmin(clo, ss[r].p[i].ctx);
            chi = fmax(chi, ss[r].p[i].ctx);
        }
    if (chi <= 0)
        clo = 512, chi = 4096;
    /* whole powers of two around the contexts, at least one doubling wide */
    clo = pow(2, floor(log2(clo)));
    chi = pow(2, ceil(log2(chi)));
    if (chi <= clo)
        chi = clo * 2;
    const axis_t cx = {clo / 1.25, chi * 1.25, MARGIN_L, MARGIN_L + PANEL_W};

    /* the notes: points left out */
    int n_notes = 0, n_host = 0;
    for (int r = 0; r < n; r++)
        for (int i = 0; i < ss[r].n; i++) {
            n_notes += ss[r].p[i].prefill <= 0 || ss[r].p[i].decode <= 0;
            n_host += ss[r].p[i].host;
        }
    const int width = MARGIN_L + PANEL_W + GAP + MARGIN_L + PANEL_W + MARGIN_R;
    const int legend_y = MARGIN_T + PANEL_H + MARGIN_B + 8;
    const int height = legend_y + (n + (n_notes ? 1 : 0) + (n_host ? 1 : 0)) * LEGEND_ROW + 16;

    fprintf(o, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"Helvetica, Arial, sans-serif\">\n<title>",
            width, height, width, height);
    char deftitle[512];
    if (!title) {
        const json_t *model = json_object_get(runs[0].doc, "model"), *prov = json_object_get(runs[0].doc, "provenance");
        const char *arch = json_string_value(json_object_get(model, "arch"));
        const char *gpu = json_string_value(json_object_get(prov, "gpu"));
        snprintf(deftitle, sizeof deftitle, "guild bench run: %s%s%s", arch ? arch : "model",
                 gpu && strcmp(gpu, "none") ? " on " : "", gpu && strcmp(gpu, "none") ? gpu : "");
        title = deftitle;
    }
    xml_text(o, title);
    fprintf(o, "</title>\n<rect width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", width, height);
    fprintf(o, "<text x=\"%d\" y=\"22\" font-size=\"16\" font-weight=\"bold\">", MARGIN_L);
    xml_text(o, title);
    fputs("</text>\n", o);
    panel(o, ss, n, 0, PANEL_PREFILL, &cx);
    panel(o, ss, n, MARGIN_L + PANEL_W + GAP, PANEL_DECODE, &cx);

    /* legend: one row per run */
    for (int r = 0; r < n; r++) {
        const int y = legend_y + r * LEGEND_ROW;
        fprintf(o, "<g class=\"series\"><line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" "
                   "stroke-width=\"2\"/><circle cx=\"%d\" cy=\"%d\" r=\"3.5\" fill=\"%s\"/><text x=\"%d\" y=\"%d\" "
                   "font-size=\"12\">",
                MARGIN_L, y, MARGIN_L + 28, y, palette[r % N_PALETTE], MARGIN_L + 14, y, palette[r % N_PALETTE],
                MARGIN_L + 36, y + 4);
        xml_text(o, ss[r].label);
        fputs("</text></g>\n", o);
    }
    if (n_notes) {
        fprintf(o, "<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"#444444\">not drawn (no rate reported):",
                MARGIN_L, legend_y + n * LEGEND_ROW + 4);
        for (int r = 0; r < n; r++)
            for (int i = 0; i < ss[r].n; i++)
                if (ss[r].p[i].prefill <= 0 || ss[r].p[i].decode <= 0) {
                    fputc(' ', o);
                    xml_text(o, ss[r].label);
                    fprintf(o, " at %.0f;", ss[r].p[i].ctx);
                }
        fputs("</text>\n", o);
    }
    if (n_host)
        fprintf(o, "<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"#444444\">hollow markers: the KV cache in host "
                "RAM (the plan's placement at that context)</text>\n", MARGIN_L,
                legend_y + (n + (n_notes ? 1 : 0)) * LEGEND_ROW + 4);
    fputs("</svg>\n", o);
    if (ferror(o)) {
        guild_err_set(err, "cannot write the SVG");
        goto done;
    }
    rc = 0;
done:
    free(ss);
    return rc;
}

/* ---- guild bench plot --------------------------------------------------------------------------------- */

static void usage(FILE *out)
{
    fprintf(out,
            "usage: guild bench plot RESULTS.json... -o FILE.svg [options]\n"
            "Draws prefill and decode tok/s against populated context from guild bench run --json documents,\n"
            "one series per label (log-scale axes; the decode limit of each run dashed; hollow markers: the\n"
            "KV cache in host RAM).\n"
            "  -o, --output FILE       the SVG to write (- for stdout)\n"
            "  -l, --label TEXT        the legend label of the next file (repeat per file; default: its name\n"
            "                          without .json); files given one label are drawn as one series\n"
            "  -t, --title TEXT        the title (default: the first run's model architecture and GPU)\n"
            "  -h, --help              this help\n");
}

int bench_plot_main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"output", required_argument, NULL, 'o'}, {"label", required_argument, NULL, 'l'},
        {"title", required_argument, NULL, 't'},  {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *output = NULL, *title = NULL;
    const char *labels[MAX_RUNS] = {0};
    int n_labels = 0, o;
    optind = 1;
    opterr = 0;
    while ((o = getopt_long(argc, argv, "o:l:t:h", opts, NULL)) != -1) {
        switch (o) {
        case 'o': output = optarg; break;
        case 't': title = optarg; break;
        case 'l':
            if (n_labels == MAX_RUNS) {
                fprintf(stderr, "guild bench plot: more than %d labels\n", MAX_RUNS);
                return 2;
            }
            labels[n_labels++] = optarg;
            break;
        case 'h': usage(stdout); return 0;
        default:
            fprintf(stderr, "guild bench plot: unknown option or missing value: %s\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        }
    }
    const int n = argc - optind;
    if (!output || n < 1 || n > MAX_RUNS || n_labels > n) {
        fprintf(stderr, "guild bench plot: %s\n", !output ? "no output: give -o FILE.svg"
                                                  : n < 1 ? "no results: give one or more guild bench run JSON files"
                                                  : n > MAX_RUNS ? "too many files (at most 16)"
                                                                 : "more labels than files");
        usage(stderr);
        return 2;
    }
    plot_run_t runs[MAX_RUNS];
    char names[MAX_RUNS][256];
    int rc = 1, loaded = 0;
    guild_err_t err = {{0}};
    FILE *out = NULL;
    for (int i = 0; i < n; i++, loaded++) {
        const char *path = argv[optind + i];
        json_error_t je;
        runs[i].doc = json_load_file(path, 0, &je);
        if (!runs[i].doc) {
            guild_err_set(&err, "%s: not JSON: %s (line %d)", path, je.text, je.line);
            goto done;
        }
        runs[i].label_given = labels[i] != NULL;
        if (labels[i]) {
            runs[i].label = labels[i];
        } else {
            const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
            size_t len = strlen(base);
            if (len > 5 && !strcmp(base + len - 5, ".json"))
                len -= 5;
            snprintf(names[i], sizeof names[i], "%.*s", (int)len, base);
            runs[i].label = names[i];
        }
    }
    out = strcmp(output, "-") ? fopen(output, "w") : stdout;
    if (!out) {
        guild_err_errno(&err, errno, "cannot create %s", output);
        goto done;
    }
    if (plot_write_svg(runs, n, title, out, &err) < 0)
        goto done;
    if (out != stdout && fclose(out) != 0) {
        out = NULL;
        guild_err_errno(&err, errno, "cannot write %s", output);
        goto done;
    }
    out = NULL;
    rc = 0;
done:
    if (out && out != stdout)
        fclose(out);
    for (int i = 0; i < loaded; i++)
        json_decref((json_t *)runs[i].doc);
    if (rc)
        fprintf(stderr, "guild bench plot: %s\n", err.msg);
    return rc;
}
