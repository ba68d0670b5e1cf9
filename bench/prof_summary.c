#include "bench/prof_summary.h"

#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "core/util/clock.h"

static int cmp_rec_start(const void *a, const void *b)
{
    const prof_rec_t *x = a, *y = b;
    return (x->start > y->start) - (x->start < y->start);
}

static int cmp_u64(const void *a, const void *b)
{
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static int cmp_kernel_ns(const void *a, const void *b)
{
    const prof_kernel_stat_t *x = a, *y = b;
    return (x->ns < y->ns) - (x->ns > y->ns);
}

/* The p-quantile of v[0..n) (sorts v), nearest rank. */
static double quantile_u64(uint64_t *v, size_t n, double p)
{
    if (!n)
        return 0;
    qsort(v, n, sizeof *v, cmp_u64);
    const size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return (double)v[i < n ? i : n - 1];
}

static bool has_prefix(const char *name, const char *prefix)
{
    return name && !strncmp(name, prefix, strlen(prefix));
}

/* The length of the union of the intervals r[0..n) (sorted by start), as what each adds to it: the part of it past
 * both its start and every earlier one's end. With gaps, appends the idle time before each interval after the first
 * (0 when it overlaps or touches what came before); with ks, adds each interval's part to its name's busy_ns, and to
 * its shadow_ns where it starts after an exchange's publish and no later than the wait that ends the shadow. */
static uint64_t union_ns(const prof_rec_t *r, size_t n, uint64_t *gaps, size_t *n_gaps, prof_kernel_stat_t *ks)
{
    uint64_t busy = 0, cur_e = 0;
    bool shadow = false;
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && gaps)
            gaps[(*n_gaps)++] = r[i].start <= cur_e ? 0 : r[i].start - cur_e;
        const uint64_t from = i > 0 && r[i].start < cur_e ? cur_e : r[i].start;
        const char *name = ks ? ks[r[i].what].name : NULL;
        const bool publish = has_prefix(name, PROF_XCHG_PUBLISH_PREFIX) || has_prefix(name, PROF_ROUTER_PUBLISH_PREFIX),
                   in_shadow = shadow && !publish;
        if (r[i].end > from) {
            busy += r[i].end - from;
            if (ks) {
                ks[r[i].what].busy_ns += r[i].end - from;
                if (in_shadow)
                    ks[r[i].what].shadow_ns += r[i].end - from;
            }
            cur_e = r[i].end;
        }
        if (publish)
            shadow = true;
        else if (has_prefix(name, PROF_XCHG_WAIT_PREFIX))
            shadow = false;
    }
    return busy;
}

int prof_summarize(prof_summary_t *s, prof_rec_t *r, size_t n, const char *const *names, int n_names,
                   const uint64_t *t0, const uint64_t *t1, int32_t steps, guild_err_t *err)
{
    memset(s, 0, sizeof *s);
    s->steps = steps;
    qsort(r, n, sizeof *r, cmp_rec_start);
    const size_t S = (size_t)steps;
    prof_kernel_stat_t *ks = calloc((size_t)n_names + 1, sizeof *ks);
    prof_rec_t *step_k = malloc((n + 1) * sizeof *step_k), *step_all = malloc((n + 1) * sizeof *step_all);
    uint64_t *gaps = malloc((n + 1) * sizeof *gaps);
    double *v = malloc(7 * (S + 1) * sizeof *v); /* per step: wall, busy_k, busy_all, head, gap sum, tail, busy */
    if (!ks || !step_k || !step_all || !gaps || !v) {
        free(ks);
        free(step_k);
        free(step_all);
        free(gaps);
        free(v);
        return guild_err_set(err, "out of memory summing %zu records", n);
    }
    double *wall = v, *busy_k = v + S, *busy_all = v + 2 * S, *head = v + 3 * S, *gap_sum = v + 4 * S,
           *tail = v + 5 * S, *busy_ns = v + 6 * S;
    for (int k = 0; k < n_names; k++)
        ks[k].name = names[k];
    size_t n_gaps = 0, i = 0;
    double wall_sum = 0;
    for (size_t st = 0; st < S; st++) {
        size_t nk = 0, na = 0;
        for (; i < n && r[i].start < t0[st]; i++)
            s->outside++;
        for (; i < n && r[i].start < t1[st]; i++) {
            const prof_rec_t *x = &r[i];
            step_all[na++] = *x;
            if (x->kind == PROF_KERNEL) {
                GUILD_ASSERT(x->what >= 0 && x->what < n_names);
                step_k[nk++] = *x;
                ks[x->what].count++;
                ks[x->what].ns += x->end - x->start;
                ks[x->what].graph += x->graph;
                s->kernels++;
                s->graph_kernels += x->graph;
            } else {
                prof_bytes_stat_t *b = x->kind == PROF_MEMSET ? &s->memsets
                                     : &s->copies[x->what >= 0 && x->what < PROF_COPY_N ? x->what : 0];
                b->count++;
                b->bytes += x->bytes;
                b->ns += x->end - x->start;
            }
        }
        const double w = (double)(t1[st] - t0[st]);
        wall[st] = w;
        wall_sum += w;
        const size_t g0 = n_gaps;
        const uint64_t bk = union_ns(step_k, nk, gaps, &n_gaps, ks);
        busy_ns[st] = (double)bk;
        uint64_t gs = 0, last_end = 0;
        for (size_t g = g0; g < n_gaps; g++) {
            gs += gaps[g];
            ks[step_k[g - g0 + 1].what].idle_ns += gaps[g]; /* gap g - g0 comes before kernel g - g0 + 1 */
        }
        for (size_t k = 0; k < nk; k++)
            last_end = step_k[k].end > last_end ? step_k[k].end : last_end;
        gap_sum[st] = (double)gs;
        busy_k[st] = w > 0 ? (double)bk / w : 0;
        busy_all[st] = w > 0 ? (double)union_ns(step_all, na, NULL, NULL, NULL) / w : 0;
        head[st] = nk ? (double)(step_k[0].start - t0[st]) : w;
        tail[st] = nk && last_end < t1[st] ? (double)(t1[st] - last_end) : 0;
    }
    s->outside += n - i;
    s->wall_mean_ns = S ? wall_sum / (double)S : 0;
    s->wall_median_ns = guild_median(wall, steps);
    s->busy_kernels = guild_median(busy_k, steps);
    s->busy_all = guild_median(busy_all, steps);
    s->busy_step_ns = guild_median(busy_ns, steps);
    s->head_ns = guild_median(head, steps);
    s->gap_step_ns = guild_median(gap_sum, steps);
    s->tail_ns = guild_median(tail, steps);
    s->gap_median_ns = quantile_u64(gaps, n_gaps, 0.5);
    s->gap_p90_ns = quantile_u64(gaps, n_gaps, 0.9);
    qsort(ks, (size_t)n_names, sizeof *ks, cmp_kernel_ns);
    for (int k = 0; k < n_names; k++)
        s->n_names += ks[k].count > 0;
    s->kernels_by_name = ks;
    free(step_k);
    free(step_all);
    free(gaps);
    free(v);
    return 0;
}

void prof_summary_print(const prof_summary_t *s, FILE *out)
{
    const double S = s->steps > 0 ? s->steps : 1, wall = s->wall_median_ns;
    fprintf(out, "step wall (host, around the forward call): median %.1f us, mean %.1f us\n", wall / 1e3,
            s->wall_mean_ns / 1e3);
    fprintf(out, "kernels per step %.1f (%.1f from graphs); GPU busy: kernels %.1f%% of the wall (%.1f us), with "
            "copies and memsets %.1f%% (medians over steps)\n",
            (double)s->kernels / S, (double)s->graph_kernels / S, 100 * s->busy_kernels, s->busy_step_ns / 1e3,
            100 * s->busy_all);
    fprintf(out, "idle: %.1f us before the first kernel, %.1f us between kernels, %.1f us after the last (medians "
            "over steps); each gap between consecutive kernels: median %.2f us, p90 %.2f us\n",
            s->head_ns / 1e3, s->gap_step_ns / 1e3, s->tail_ns / 1e3, s->gap_median_ns / 1e3, s->gap_p90_ns / 1e3);
    if (s->outside)
        fprintf(out, "note: %zu records outside the traced steps (dropped)\n", s->outside);
    fprintf(out, "\nbusy us: what a launch adds to the kernels' busy time, mean (past its start and the end of every "
            "kernel that started before it; times n/step, summed over the names: the busy time of a step)\n");
    fprintf(out, "%-*s %7s %10s %9s %7s %6s %9s %9s\n", PROF_NAME_WIDTH, "kernel", "n/step", "us/step", "mean us",
            "share", "graph", "idle us", "busy us");
    for (int k = 0; k < s->n_names; k++) {
        const prof_kernel_stat_t *x = &s->kernels_by_name[k];
        const double per_step = (double)x->ns / S;
        fprintf(out, "%-*s %7.2f %10.1f %9.2f %6.1f%% %5.0f%% %9.1f %9.2f\n", PROF_NAME_WIDTH, x->name,
                (double)x->count / S, per_step / 1e3, (double)x->ns / (double)x->count / 1e3,
                wall > 0 ? 100 * per_step / wall : 0, 100.0 * (double)x->graph / (double)x->count,
                (double)x->idle_ns / S / 1e3, (double)x->busy_ns / (double)x->count / 1e3);
    }
    fprintf(out, "\n%-12s %7s %12s %10s\n", "copies", "n/step", "bytes/step", "us/step");
    for (int k = 0; k < PROF_COPY_N; k++)
        if (s->copies[k].count)
            fprintf(out, "memcpy %-5s %7.2f %12.0f %10.1f\n", prof_copy_name(k), (double)s->copies[k].count / S,
                    (double)s->copies[k].bytes / S, (double)s->copies[k].ns / S / 1e3);
    if (s->memsets.count)
        fprintf(out, "memset       %7.2f %12.0f %10.1f\n", (double)s->memsets.count / S,
                (double)s->memsets.bytes / S, (double)s->memsets.ns / S / 1e3);
}

/* Whether name begins with one of skip[] (NULL-terminated; NULL: none). */
static bool skipped(const char *name, const char *const *skip)
{
    for (; name && skip && *skip; skip++)
        if (has_prefix(name, *skip))
            return true;
    return false;
}

/* prof_summary_layer_ns's sum, leaving out the names that begin with one of skip[], and with path the launches' parts
 * in the exchange's shadow. */
static double layer_ns(const prof_summary_t *s, int32_t n_layer, const char *const *skip, bool path, int *n_kernels)
{
    int n = 0;
    double busy = 0;
    if (n_layer >= 1 && s->steps >= 1)
        for (int k = 0; k < s->n_names; k++) {
            const prof_kernel_stat_t *x = &s->kernels_by_name[k];
            if (skipped(x->name, skip))
                continue;
            /* count / steps >= n_layer / 4, in integers */
            if (4 * x->count >= (uint64_t)n_layer * (uint64_t)s->steps) {
                busy += (double)(path ? x->busy_ns - x->shadow_ns : x->busy_ns);
                n++;
            }
        }
    if (n_kernels)
        *n_kernels = n;
    return n ? busy / (double)s->steps / (double)n_layer : 0;
}

double prof_summary_layer_ns(const prof_summary_t *s, int32_t n_layer, int *n_kernels)
{
    return layer_ns(s, n_layer, NULL, false, n_kernels);
}

static const char *const not_dense[] = {PROF_EXPERT_PREFIX, PROF_XCHG_WAIT_PREFIX, NULL};

double prof_summary_dense_layer_ns(const prof_summary_t *s, int32_t n_layer, int *n_kernels)
{
    return layer_ns(s, n_layer, not_dense, false, n_kernels);
}

double prof_summary_path_layer_ns(const prof_summary_t *s, int32_t n_layer)
{
    return layer_ns(s, n_layer, not_dense, true, NULL);
}

void prof_summary_print_layer(const prof_summary_t *s, int32_t n_layer, FILE *out)
{
    int n = 0, nd = 0;
    const double ns = prof_summary_layer_ns(s, n_layer, &n);
    const double dense = prof_summary_dense_layer_ns(s, n_layer, &nd);
    fprintf(out, "busy a layer: %.2f us (the busy us of the %d kernel name(s) launched at least %d/4 times a step, "
            "times n/step, over %d layers)\n", ns / 1e3, n, n_layer, n_layer);
    if (nd < n)
        fprintf(out, "dense busy a layer: %.2f us (the same without %d kernel name(s): the routed experts', "
                "\"%s...\", and the exchange's wait, \"%s...\")\n", dense / 1e3, n - nd, PROF_EXPERT_PREFIX,
                PROF_XCHG_WAIT_PREFIX);
    const double path = prof_summary_path_layer_ns(s, n_layer);
    if (path < dense)
        fprintf(out, "dense busy a layer on the step's path: %.2f us (less %.2f us a layer in the exchange's shadow: "
                "kernels that start after \"%s...\" or \"%s...\", up to its wait, while the CPU workers compute)\n",
                path / 1e3, (dense - path) / 1e3, PROF_XCHG_PUBLISH_PREFIX, PROF_ROUTER_PUBLISH_PREFIX);
}

void prof_summary_fini(prof_summary_t *s)
{
    free(s->kernels_by_name);
    s->kernels_by_name = NULL;
}
