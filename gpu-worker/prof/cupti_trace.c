#include "gpu-worker/prof/cupti_trace.h"

#include <cupti.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUFFER_BYTES (8u << 20)

/* libstdc++'s demangler (C linkage); the CUDA libraries bring libstdc++ into the link. */
char *__cxa_demangle(const char *mangled, char *out, size_t *len, int *status);

/* The tracer. A global because CUPTI's buffer callbacks carry no context pointer. */
static struct {
    pthread_mutex_t mu;
    prof_trace_t *t;       /* the trace being filled; NULL: none (the callbacks keep nothing) */
    uint64_t window_start; /* records starting before this are not kept */
    const char **name_key; /* [t->n_names] CUPTI's name pointers, for the lookup */
    int32_t cap_keys;
    bool failed;           /* a record could not be kept */
    guild_err_t err;       /* why */
} g = {.mu = PTHREAD_MUTEX_INITIALIZER};

static const CUpti_ActivityKind kinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                           CUPTI_ACTIVITY_KIND_MEMSET};

static int cupti_check(CUptiResult r, const char *what, guild_err_t *err)
{
    if (r == CUPTI_SUCCESS)
        return 0;
    const char *s = NULL;
    if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || !s)
        s = "unknown CUPTI error";
    return guild_err_set(err, "CUPTI: %s: %s (%d)", what, s, (int)r);
}

/* "void ns::k<(int)64>(float const*, int)" -> "ns::k<(int)64>", at most PROF_NAME_MAX characters. */
static char *short_name(const char *mangled)
{
    int status = -1;
    char *d = __cxa_demangle(mangled, NULL, NULL, &status);
    char *s = status == 0 && d ? d : strdup(mangled);
    if (s != d)
        free(d);
    if (!s)
        return NULL;
    size_t n = strlen(s);
    if (n && s[n - 1] == ')') { /* drop the parameter list: back to its '(' */
        int depth = 0;
        for (size_t i = n; i-- > 0;) {
            depth += s[i] == ')' ? 1 : s[i] == '(' ? -1 : 0;
            if (depth == 0) {
                s[i] = '\0';
                break;
            }
        }
    }
    if (!strncmp(s, "void ", 5)) /* templates' return type */
        memmove(s, s + 5, strlen(s + 5) + 1);
    if (strlen(s) > PROF_NAME_MAX)
        strcpy(s + PROF_NAME_MAX - 3, "...");
    return s;
}

/* The name's index in the trace, added on first sight; -1 with g.err when out of memory. With the lock held. */
static int32_t name_index(const char *key)
{
    prof_trace_t *t = g.t;
    if (!key)
        key = "(unnamed)";
    for (int32_t i = 0; i < t->n_names; i++)
        if (g.name_key[i] == key)
            return i;
    char *s = short_name(key);
    if (!s) {
        guild_err_set(&g.err, "out of memory keeping kernel names");
        return -1;
    }
    for (int32_t i = 0; i < t->n_names; i++) /* the same kernel under another pointer (another module) */
        if (!strcmp(t->names[i], s)) {
            free(s);
            return i;
        }
    if (t->n_names == g.cap_keys) {
        const int32_t cap = g.cap_keys ? 2 * g.cap_keys : 64;
        const char **k = realloc(g.name_key, (size_t)cap * sizeof *k);
        if (!k) {
            free(s);
            guild_err_set(&g.err, "out of memory keeping kernel names");
            return -1;
        }
        g.name_key = k;
        g.cap_keys = cap;
    }
    const int32_t i = prof_trace_add_name(t, s, &g.err);
    free(s);
    if (i >= 0)
        g.name_key[i] = key;
    return i;
}

/* CUPTI's copy kinds, as the trace names them. */
static int32_t copy_kind(uint8_t k)
{
    switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return PROF_COPY_HTOD;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return PROF_COPY_DTOH;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return PROF_COPY_DTOD;
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return PROF_COPY_HTOH;
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return PROF_COPY_PTOP;
    default: return PROF_COPY_OTHER;
    }
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = aligned_alloc(8, BUFFER_BYTES); /* CUPTI wants 8-byte alignment */
    *size = *buffer ? BUFFER_BYTES : 0;
    *max_records = 0; /* as many as fit */
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid)
{
    pthread_mutex_lock(&g.mu);
    CUpti_Activity *a = NULL;
    while (g.t && !g.failed && cuptiActivityGetNextRecord(buffer, valid, &a) == CUPTI_SUCCESS) {
        prof_rec_t r = {0};
        switch (a->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
            const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)a;
            if (k->start < g.window_start)
                continue;
            r = (prof_rec_t){.start = k->start, .end = k->end, .kind = PROF_KERNEL, .graph = k->graphId != 0,
                             .what = name_index(k->name)};
            if (r.what < 0) {
                g.failed = true;
                continue;
            }
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
            const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)a;
            r = (prof_rec_t){.start = m->start, .end = m->end, .bytes = m->bytes, .kind = PROF_MEMCPY,
                             .graph = m->graphId != 0, .what = copy_kind(m->copyKind)};
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
            const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)a;
            r = (prof_rec_t){.start = m->start, .end = m->end, .bytes = m->bytes, .kind = PROF_MEMSET,
                             .graph = m->graphId != 0};
            break;
        }
        default: continue;
        }
        if (r.start >= g.window_start && prof_trace_add_rec(g.t, &r, &g.err) < 0)
            g.failed = true;
    }
    size_t dropped = 0;
    if (g.t && cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS)
        g.t->dropped += dropped;
    pthread_mutex_unlock(&g.mu);
    free(buffer);
}

int cupti_trace_start(prof_trace_t *t, guild_err_t *err)
{
    pthread_mutex_lock(&g.mu);
    const bool busy = g.t != NULL;
    if (!busy) {
        g.t = t;
        g.window_start = 0;
        g.failed = false;
    }
    pthread_mutex_unlock(&g.mu);
    if (busy)
        return guild_err_set(err, "CUPTI: a trace is already being taken");
    uint32_t version = 0;
    if (cupti_check(cuptiGetVersion(&version), "cuptiGetVersion", err) < 0)
        goto fail;
    if (version != CUPTI_API_VERSION)
        fprintf(stderr, "note: libcupti API version %u, built against %u\n", version, CUPTI_API_VERSION);
    if (cupti_check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed),
                    "cuptiActivityRegisterCallbacks", err) < 0)
        goto fail;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (cupti_check(cuptiActivityEnable(kinds[i]), "cuptiActivityEnable", err) < 0)
            goto fail;
    return 0;
fail:
    cupti_trace_abandon();
    return -1;
}

int cupti_trace_now(uint64_t *ns, guild_err_t *err)
{
    return cupti_check(cuptiGetTimestamp(ns), "cuptiGetTimestamp", err);
}

void cupti_trace_window(uint64_t start)
{
    pthread_mutex_lock(&g.mu);
    g.window_start = start;
    pthread_mutex_unlock(&g.mu);
}

int cupti_trace_add_step(const prof_step_t *s, guild_err_t *err)
{
    pthread_mutex_lock(&g.mu);
    const int rc = g.t ? prof_trace_add_step(g.t, s, err) : guild_err_set(err, "CUPTI: no trace is being taken");
    pthread_mutex_unlock(&g.mu);
    return rc;
}

int cupti_trace_stop(guild_err_t *err)
{
    pthread_mutex_lock(&g.mu);
    const bool running = g.t != NULL;
    pthread_mutex_unlock(&g.mu);
    if (!running)
        return 0;
    int rc = cupti_check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll", err);
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        cuptiActivityDisable(kinds[i]);
    pthread_mutex_lock(&g.mu);
    if (rc == 0 && g.failed)
        rc = guild_err_set(err, "%s", g.err.msg);
    pthread_mutex_unlock(&g.mu);
    cupti_trace_abandon();
    return rc;
}

void cupti_trace_abandon(void)
{
    pthread_mutex_lock(&g.mu);
    g.t = NULL;
    free(g.name_key);
    g.name_key = NULL;
    g.cap_keys = 0;
    pthread_mutex_unlock(&g.mu);
}
