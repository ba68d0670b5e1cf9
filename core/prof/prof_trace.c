#include "core/prof/prof_trace.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAGIC "guild-trace"
#define VERSION 1
#define LINE_MAX_BYTES 4096

static const char *const copy_names[PROF_COPY_N] = {"other", "HtoD", "DtoH", "DtoD", "HtoH", "PtoP"};
static const char *const step_names[PROF_STEP_N] = {"forward", "seqs", "mtp", "state"};

const char *prof_copy_name(int what)
{
    return what >= 0 && what < PROF_COPY_N ? copy_names[what] : "?";
}

const char *prof_step_kind_name(int kind)
{
    return kind >= 0 && kind < PROF_STEP_N ? step_names[kind] : "?";
}

void prof_trace_init(prof_trace_t *t, size_t max_recs)
{
    memset(t, 0, sizeof *t);
    t->max_recs = max_recs;
}

void prof_trace_fini(prof_trace_t *t)
{
    for (int32_t i = 0; i < t->n_names; i++)
        free(t->names[i]);
    free(t->names);
    free(t->recs);
    free(t->steps);
    free(t->model);
    prof_trace_init(t, t->max_recs);
}

/* Room for one more item of size `size` in *a (*cap items); -1 when out of memory. */
static int grow(void **a, size_t *cap, size_t n, size_t size, size_t first)
{
    if (n < *cap)
        return 0;
    const size_t c = *cap ? 2 * *cap : first;
    void *p = realloc(*a, c * size);
    if (!p)
        return -1;
    *a = p;
    *cap = c;
    return 0;
}

int32_t prof_trace_add_name(prof_trace_t *t, const char *name, guild_err_t *err)
{
    size_t cap = (size_t)t->cap_names;
    if (t->n_names == INT32_MAX || grow((void **)&t->names, &cap, (size_t)t->n_names, sizeof *t->names, 64) < 0)
        return guild_err_set(err, "out of memory keeping %d kernel names", t->n_names);
    t->cap_names = (int32_t)cap;
    const size_t len = strcspn(name, "\r\n");
    char *s = malloc(len + 1);
    if (!s)
        return guild_err_set(err, "out of memory keeping %d kernel names", t->n_names);
    memcpy(s, name, len);
    s[len] = '\0';
    t->names[t->n_names] = s;
    return t->n_names++;
}

int prof_trace_add_rec(prof_trace_t *t, const prof_rec_t *r, guild_err_t *err)
{
    if (r->kind == PROF_KERNEL && (r->what < 0 || r->what >= t->n_names))
        return guild_err_set(err, "a kernel record of name %d (%d names)", (int)r->what, (int)t->n_names);
    if (t->max_recs && t->n_recs >= t->max_recs) {
        t->dropped++;
        return 0;
    }
    if (grow((void **)&t->recs, &t->cap_recs, t->n_recs, sizeof *t->recs, 65536) < 0)
        return guild_err_set(err, "out of memory keeping %zu activity records", t->n_recs);
    t->recs[t->n_recs++] = *r;
    return 0;
}

int prof_trace_add_step(prof_trace_t *t, const prof_step_t *s, guild_err_t *err)
{
    if (grow((void **)&t->steps, &t->cap_steps, t->n_steps, sizeof *t->steps, 1024) < 0)
        return guild_err_set(err, "out of memory keeping %zu steps", t->n_steps);
    t->steps[t->n_steps++] = *s;
    return 0;
}

int prof_trace_set_model(prof_trace_t *t, const char *path, guild_err_t *err)
{
    char *s = NULL;
    if (path) {
        const size_t len = strcspn(path, "\r\n");
        if (!(s = malloc(len + 1)))
            return guild_err_set(err, "out of memory");
        memcpy(s, path, len);
        s[len] = '\0';
    }
    free(t->model);
    t->model = s;
    return 0;
}

int prof_trace_write(const prof_trace_t *t, const char *path, guild_err_t *err)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return guild_err_errno(err, errno, "%s", path);
    fprintf(f, MAGIC " %d\nlayers %d\ndropped %" PRIu64 "\n", VERSION, (int)t->n_layer, t->dropped);
    if (t->model)
        fprintf(f, "model %s\n", t->model);
    for (int32_t i = 0; i < t->n_names; i++)
        fprintf(f, "name %d %s\n", (int)i, t->names[i]);
    for (size_t i = 0; i < t->n_steps; i++) {
        const prof_step_t *s = &t->steps[i];
        fprintf(f, "step %" PRIu64 " %" PRIu64 " %s %d %d %d\n", s->start, s->end, prof_step_kind_name(s->kind),
                (int)s->n_tokens, (int)s->n_out, s->ok ? 1 : 0);
    }
    for (size_t i = 0; i < t->n_recs; i++) {
        const prof_rec_t *r = &t->recs[i];
        const int g = r->graph ? 1 : 0;
        if (r->kind == PROF_KERNEL)
            fprintf(f, "kernel %" PRIu64 " %" PRIu64 " %d %d\n", r->start, r->end, (int)r->what, g);
        else if (r->kind == PROF_MEMCPY)
            fprintf(f, "memcpy %" PRIu64 " %" PRIu64 " %" PRIu64 " %s %d\n", r->start, r->end, r->bytes,
                    prof_copy_name(r->what), g);
        else
            fprintf(f, "memset %" PRIu64 " %" PRIu64 " %" PRIu64 " %d\n", r->start, r->end, r->bytes, g);
    }
    const bool bad = ferror(f) != 0;
    if (fclose(f) != 0 || bad)
        return guild_err_errno(err, errno ? errno : EIO, "%s: writing the trace", path);
    return 0;
}

/* The index of s in names[0..n), or -1. */
static int lookup(const char *const *names, int n, const char *s)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], s))
            return i;
    return -1;
}

/* One line's item into t; -1 with err (without the place) on a malformed line. */
static int read_item(prof_trace_t *t, char *line, guild_err_t *err)
{
    char word[16], text[32];
    int used = 0;
    if (sscanf(line, "%15s %n", word, &used) != 1)
        return guild_err_set(err, "an empty line");
    char *rest = line + used;
    uint64_t a, b, c;
    int i, j, k, end = 0;
    if (!strcmp(word, "layers")) {
        if (sscanf(rest, "%d %n", &i, &end) != 1 || rest[end] || i < 0)
            return guild_err_set(err, "layers: expected a count");
        t->n_layer = i;
        return 0;
    }
    if (!strcmp(word, "dropped")) {
        if (sscanf(rest, "%" SCNu64 " %n", &a, &end) != 1 || rest[end])
            return guild_err_set(err, "dropped: expected a count");
        t->dropped = a;
        return 0;
    }
    if (!strcmp(word, "model"))
        return prof_trace_set_model(t, rest, err);
    if (!strcmp(word, "name")) {
        if (sscanf(rest, "%d %n", &i, &end) != 1 || !rest[end])
            return guild_err_set(err, "name: expected an index and a name");
        if (i != t->n_names)
            return guild_err_set(err, "name %d: expected name %d next", i, (int)t->n_names);
        return prof_trace_add_name(t, rest + end, err) < 0 ? -1 : 0;
    }
    if (!strcmp(word, "step")) {
        if (sscanf(rest, "%" SCNu64 " %" SCNu64 " %31s %d %d %d %n", &a, &b, text, &i, &j, &k, &end) != 6 ||
            rest[end])
            return guild_err_set(err, "step: expected START END KIND TOKENS OUT OK");
        const int kind = lookup(step_names, PROF_STEP_N, text);
        if (kind < 0 || b < a || i < 0 || j < 0 || (k != 0 && k != 1))
            return guild_err_set(err, "step: a kind of forward, seqs, mtp, state, END >= START, counts >= 0, OK 0 "
                                 "or 1");
        const prof_step_t s = {.start = a, .end = b, .n_tokens = i, .n_out = j, .kind = (uint8_t)kind,
                               .ok = (uint8_t)k};
        return prof_trace_add_step(t, &s, err);
    }
    prof_rec_t r = {0};
    if (!strcmp(word, "kernel")) {
        if (sscanf(rest, "%" SCNu64 " %" SCNu64 " %d %d %n", &a, &b, &i, &k, &end) != 4 || rest[end])
            return guild_err_set(err, "kernel: expected START END NAME GRAPH");
        r = (prof_rec_t){.start = a, .end = b, .what = i, .kind = PROF_KERNEL, .graph = (uint8_t)k};
    } else if (!strcmp(word, "memcpy")) {
        if (sscanf(rest, "%" SCNu64 " %" SCNu64 " %" SCNu64 " %31s %d %n", &a, &b, &c, text, &k, &end) != 5 ||
            rest[end])
            return guild_err_set(err, "memcpy: expected START END BYTES DIRECTION GRAPH");
        if ((i = lookup(copy_names, PROF_COPY_N, text)) < 0)
            return guild_err_set(err, "memcpy: direction %s is none of other, HtoD, DtoH, DtoD, HtoH, PtoP", text);
        r = (prof_rec_t){.start = a, .end = b, .bytes = c, .what = i, .kind = PROF_MEMCPY, .graph = (uint8_t)k};
    } else if (!strcmp(word, "memset")) {
        if (sscanf(rest, "%" SCNu64 " %" SCNu64 " %" SCNu64 " %d %n", &a, &b, &c, &k, &end) != 4 || rest[end])
            return guild_err_set(err, "memset: expected START END BYTES GRAPH");
        r = (prof_rec_t){.start = a, .end = b, .bytes = c, .kind = PROF_MEMSET, .graph = (uint8_t)k};
    } else {
        return guild_err_set(err, "unknown item \"%s\"", word);
    }
    if (r.end < r.start || (k != 0 && k != 1))
        return guild_err_set(err, "%s: END >= START and GRAPH 0 or 1 expected", word);
    return prof_trace_add_rec(t, &r, err);
}

int prof_trace_read(prof_trace_t *t, const char *path, guild_err_t *err)
{
    prof_trace_init(t, 0);
    FILE *f = fopen(path, "r");
    if (!f)
        return guild_err_errno(err, errno, "%s", path);
    char line[LINE_MAX_BYTES];
    long no = 0;
    int rc = 0;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        no++;
        size_t len = strlen(line);
        if (len && line[len - 1] == '\n')
            line[--len] = '\0';
        else if (!feof(f)) {
            rc = guild_err_set(err, "a line longer than %d bytes", LINE_MAX_BYTES - 2);
            break;
        }
        if (no == 1) {
            int v = 0, end = 0;
            if (sscanf(line, MAGIC " %d %n", &v, &end) != 1 || line[end])
                rc = guild_err_set(err, "not a trace (its first line is not \"" MAGIC " %d\")", VERSION);
            else if (v != VERSION)
                rc = guild_err_set(err, "a trace of version %d; this program reads version %d", v, VERSION);
            continue;
        }
        rc = read_item(t, line, err);
    }
    if (rc == 0 && ferror(f))
        rc = guild_err_errno(err, EIO, "reading");
    if (rc == 0 && no == 0)
        rc = guild_err_set(err, "an empty file, not a trace");
    fclose(f);
    if (rc < 0) {
        if (no > 0)
            guild_err_prefix(err, "%s:%ld: ", path, no);
        else
            guild_err_prefix(err, "%s: ", path);
        prof_trace_fini(t);
        return -1;
    }
    return 0;
}
