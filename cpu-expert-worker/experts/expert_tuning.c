#include "cpu-expert-worker/experts/expert_tuning.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void expert_tuning_default(expert_tuning_t *t)
{
    memset(t, 0, sizeof *t);
    t->threads = 0;
    t->pipe.gate_up_rows = 0; /* automatic */
    t->pipe.down_rows = 0;
    t->layout = EXPERT_LAYOUT_AUTO;
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    char *e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r'))
        *--e = '\0';
    return s;
}

static int parse_int(const char *v, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi)
        return -1;
    *out = x;
    return 0;
}

int expert_tuning_load(const char *path, expert_tuning_t *t, guild_err_t *err)
{
    expert_tuning_default(t);
    FILE *f = fopen(path, "r");
    if (!f)
        return guild_err_errno(err, errno, "%s", path);
    char line[256];
    int lineno = 0, rc = 0;
    long version = -1;
    expert_tuning_t r;
    expert_tuning_default(&r);
    while (rc == 0 && fgets(line, sizeof line, f)) {
        lineno++;
        char *s = trim(line);
        if (!*s || *s == '#')
            continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            rc = guild_err_set(err, "%s:%d: expected `key = value`", path, lineno);
            break;
        }
        *eq = '\0';
        char *key = trim(s), *val = trim(eq + 1);
        long x;
        if (!strcmp(key, "version")) {
            if (parse_int(val, 0, 1000000, &version) || version < 1 || version > EXPERT_TUNING_VERSION)
                rc = guild_err_set(err, "%s:%d: version %s is not one this build reads (1..%d)", path, lineno, val,
                                   EXPERT_TUNING_VERSION);
        } else if (!strcmp(key, "cpu")) {
            snprintf(r.cpu, sizeof r.cpu, "%s", val);
        } else if (!strcmp(key, "threads")) {
            if (parse_int(val, 0, 4096, &x))
                rc = guild_err_set(err, "%s:%d: threads = %s: expected 0..4096", path, lineno, val);
            r.threads = (int32_t)x;
        } else if (!strcmp(key, "gate_up_rows") || !strcmp(key, "down_rows")) {
            if (parse_int(val, 0, 1 << 20, &x) || x % 16)
                rc = guild_err_set(err, "%s:%d: %s = %s: expected a multiple of 16 (0: automatic)", path, lineno, key,
                                   val);
            if (!strcmp(key, "gate_up_rows"))
                r.pipe.gate_up_rows = (int32_t)x;
            else
                r.pipe.down_rows = (int32_t)x;
        } else if (!strcmp(key, "interleave_gate_up")) {
            if (parse_int(val, 0, 1, &x))
                rc = guild_err_set(err, "%s:%d: interleave_gate_up = %s: expected 0 or 1", path, lineno, val);
            r.interleave_gate_up = x == 1;
        } else if (!strcmp(key, "layout")) {
            if (expert_layout_from_name(val, &r.layout) < 0)
                rc = guild_err_set(err, "%s:%d: layout = %s: expected auto, plain or packed", path, lineno, val);
        } else if (version >= 2 && (!strcmp(key, "cpu_tflops") || !strcmp(key, "cpu_gbps") ||
                                    !strcmp(key, "h2d_gbps") || !strcmp(key, "gpu_tflops"))) {
            char *end;
            errno = 0;
            const double d = strtod(val, &end);
            if (errno || end == val || *end || !(d >= 0 && d < 1e6))
                rc = guild_err_set(err, "%s:%d: %s = %s: expected a rate from 0 to 1e6", path, lineno, key, val);
            *(!strcmp(key, "cpu_tflops") ? &r.cost.cpu_tflops : !strcmp(key, "cpu_gbps") ? &r.cost.cpu_gbps
              : !strcmp(key, "h2d_gbps") ? &r.cost.h2d_gbps : &r.cost.gpu_tflops) = d;
        } else {
            rc = guild_err_set(err, "%s:%d: unknown key '%s'", path, lineno, key);
        }
    }
    if (rc == 0 && ferror(f))
        rc = guild_err_errno(err, errno, "%s", path);
    fclose(f);
    if (rc == 0 && version < 0)
        rc = guild_err_set(err, "%s: no `version` line", path);
    if (rc == 0)
        *t = r;
    return rc;
}

int expert_tuning_save(const char *path, const expert_tuning_t *t, guild_err_t *err)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return guild_err_set(err, "%s: path too long", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return guild_err_errno(err, errno, "%s", tmp);
    fprintf(f,
            "# Guild CPU expert worker tuning, written by `guild optimize`. Speed only: results are bit-identical\n"
            "# whatever these values are.\n"
            "version = %d\ncpu = %s\nthreads = %d\ngate_up_rows = %d\ndown_rows = %d\ninterleave_gate_up = %d\n"
            "layout = %s\n"
            "# the GPU memory plan's costs (gpu-worker/dense/gpu_cost.h); 0: its default\n"
            "cpu_tflops = %.3f\ncpu_gbps = %.2f\nh2d_gbps = %.2f\ngpu_tflops = %.2f\n",
            EXPERT_TUNING_VERSION, t->cpu, t->threads, t->pipe.gate_up_rows, t->pipe.down_rows,
            t->interleave_gate_up ? 1 : 0, expert_layout_name(t->layout), t->cost.cpu_tflops, t->cost.cpu_gbps,
            t->cost.h2d_gbps, t->cost.gpu_tflops);
    if (fclose(f) != 0) {
        int e = errno;
        remove(tmp);
        return guild_err_errno(err, e, "%s", tmp);
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        remove(tmp);
        return guild_err_errno(err, e, "%s", path);
    }
    return 0;
}

int expert_tuning_path(const char *model_path, char *path, size_t n, guild_err_t *err)
{
    if ((size_t)snprintf(path, n, "%s.tuning", model_path) >= n)
        return guild_err_set(err, "%s: path too long for its tuning file", model_path);
    return 0;
}

int expert_tuning_load_for_model(const char *model_path, expert_tuning_t *t, bool *found, guild_err_t *err)
{
    char path[4096];
    *found = false;
    expert_tuning_default(t);
    if (expert_tuning_path(model_path, path, sizeof path, err) < 0)
        return -1;
    if (access(path, F_OK) != 0) {
        if (errno == ENOENT)
            return 0;
        return guild_err_errno(err, errno, "%s", path);
    }
    if (expert_tuning_load(path, t, err) < 0)
        return -1;
    *found = true;
    return 0;
}

void expert_tuning_describe(const expert_tuning_t *t, char *buf, size_t n)
{
    char th[32], gu[32], dn[32];
    snprintf(th, sizeof th, t->threads ? "%d" : "all CPUs", t->threads);
    snprintf(gu, sizeof gu, t->pipe.gate_up_rows ? "%d" : "automatic", t->pipe.gate_up_rows);
    snprintf(dn, sizeof dn, t->pipe.down_rows ? "%d" : "automatic", t->pipe.down_rows);
    char lay[32] = "";
    if (t->layout != EXPERT_LAYOUT_AUTO)
        snprintf(lay, sizeof lay, ", layout %s", expert_layout_name(t->layout));
    snprintf(buf, n, "threads %s, gate_up_rows %s, down_rows %s%s%s (measured on %s)", th, gu, dn,
             t->interleave_gate_up ? ", gate/up interleaved" : "", lay, t->cpu[0] ? t->cpu : "an unnamed CPU");
}

int expert_tuning_apply(const char *model_path, const char *who, bool threads_given, int *n_threads,
                        int32_t *gate_up_rows, int32_t *down_rows, bool *interleave_gate_up, int *layout,
                        guild_err_t *err)
{
    expert_tuning_t t;
    bool found;
    if (expert_tuning_load_for_model(model_path, &t, &found, err) < 0) {
        guild_err_prefix(err, "tuning file (--no-tuning ignores it): ");
        return -1;
    }
    if (!found)
        return 0;
    char desc[256];
    expert_tuning_describe(&t, desc, sizeof desc);
    const bool layout_given = *layout >= 0;
    fprintf(stderr, "%s: tuning %s.tuning: %s%s%s\n", who, model_path, desc,
            threads_given && t.threads ? "; threads from --threads" : "",
            layout_given && t.layout != EXPERT_LAYOUT_AUTO ? "; layout from --expert-layout" : "");
    if (t.threads && !threads_given)
        *n_threads = t.threads;
    *gate_up_rows = t.pipe.gate_up_rows;
    *down_rows = t.pipe.down_rows;
    *interleave_gate_up = t.interleave_gate_up;
    if (!layout_given)
        *layout = (int)t.layout;
    return 0;
}
