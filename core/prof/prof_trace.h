/* core/prof/prof_trace.h — a trace of the GPU's activity: kernel, copy and memset records with their start and
 * end times, the kernels' names, and the intervals of the steps they ran in; and its file, the one form in which
 * a process that traced its device (guild-gpu-worker --prof) hands the trace to the program that reports it
 * (`guild bench trace`, bench/trace_report.c). Pure data and text: no CUDA here, so CI tests it without a GPU.
 * What fills a trace from the device is gpu-worker/prof/cupti_trace.h; what makes numbers of it is
 * bench/prof_summary.h.
 *
 * The file is text, one item a line, numbers in decimal:
 *   guild-trace 1                                the magic and version, first
 *   layers L                                     the model's layers (0: unknown)
 *   dropped N                                    records lost while tracing (buffers full, the cap reached)
 *   model PATH                                   optional; the rest of the line
 *   name I NAME                                  kernel name I (0, 1, ... in order); the rest of the line
 *   step START END KIND TOKENS OUT OK            a step (KIND: forward, seqs, mtp, state; OK: 1 or 0)
 *   kernel START END NAME GRAPH                  a kernel record (NAME: a name's index given before; GRAPH 0|1)
 *   memcpy START END BYTES DIRECTION GRAPH       a copy (DIRECTION: prof_copy_name's, "HtoD"...)
 *   memset START END BYTES GRAPH                 a memset
 * Times are ns of one clock (the tracer's), shared by the records and the steps. */
#ifndef GUILD_CORE_PROF_PROF_TRACE_H
#define GUILD_CORE_PROF_PROF_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/util/err.h"

/* The longest kernel name a tracer keeps (gpu-worker/prof/cupti_trace.c: longer ones end in "..."), and the
 * width of the reports' name column. */
#define PROF_NAME_MAX 72

/* prof_rec_t.kind */
enum { PROF_KERNEL, PROF_MEMCPY, PROF_MEMSET };

/* prof_rec_t.what of a copy */
enum { PROF_COPY_OTHER, PROF_COPY_HTOD, PROF_COPY_DTOH, PROF_COPY_DTOD, PROF_COPY_HTOH, PROF_COPY_PTOP, PROF_COPY_N };

/* One activity record. */
typedef struct prof_rec {
    uint64_t start, end; /* ns, the clock of the step intervals */
    uint64_t bytes;      /* copies and memsets */
    int32_t what;        /* kernel: index into the names; copy: PROF_COPY_*; memset: 0 */
    uint8_t kind;        /* PROF_KERNEL, PROF_MEMCPY, PROF_MEMSET */
    uint8_t graph;       /* 1: launched as a node of a CUDA graph */
} prof_rec_t;

/* prof_step_t.kind: what the step request was (ipc/step.h's flags) */
enum { PROF_STEP_FORWARD, PROF_STEP_SEQS, PROF_STEP_MTP, PROF_STEP_STATE, PROF_STEP_N };

/* One step: a forward pass (or another request) the tracing process served, over [start, end). */
typedef struct prof_step {
    uint64_t start, end; /* ns, the records' clock */
    int32_t n_tokens;    /* rows of the pass (0: a snapshot chunk) */
    int32_t n_out;       /* logits rows out */
    uint8_t kind;        /* PROF_STEP_* */
    uint8_t ok;          /* 1: served; 0: failed or aborted */
} prof_step_t;

/* A trace. Its arrays grow through prof_trace_add_*; read them directly, write them only through those. */
typedef struct prof_trace {
    prof_rec_t *recs;      /* [n_recs] in the order added */
    size_t n_recs, cap_recs;
    size_t max_recs;       /* most records kept (0: no cap); those past it count in dropped */
    char **names;          /* [n_names] kernel names, owned */
    int32_t n_names, cap_names;
    prof_step_t *steps;    /* [n_steps] in the order added */
    size_t n_steps, cap_steps;
    int32_t n_layer;       /* the model's layers (0: unknown) */
    char *model;           /* the model's path, owned; NULL: unknown */
    uint64_t dropped;      /* records lost while tracing */
} prof_trace_t;

/* An empty trace keeping at most max_recs records (0: no cap). */
void prof_trace_init(prof_trace_t *t, size_t max_recs);

/* Frees what the trace holds and empties it (the cap stays). */
void prof_trace_fini(prof_trace_t *t);

/* Appends a copy of name (without its line breaks' rest: a name is one line) as kernel name n_names; its index,
 * or -1 with err when out of memory. */
int32_t prof_trace_add_name(prof_trace_t *t, const char *name, guild_err_t *err);

/* Appends a record; past max_recs it only counts in dropped. -1 with err when out of memory or a kernel record's
 * name index is not one of the names. */
int prof_trace_add_rec(prof_trace_t *t, const prof_rec_t *r, guild_err_t *err);

/* Appends a step. -1 with err when out of memory. */
int prof_trace_add_step(prof_trace_t *t, const prof_step_t *s, guild_err_t *err);

/* Sets the model's path (a copy; NULL clears it). -1 with err when out of memory. */
int prof_trace_set_model(prof_trace_t *t, const char *path, guild_err_t *err);

/* Writes the trace to path (replaced). -1 with err naming the file when it cannot be written whole. */
int prof_trace_write(const prof_trace_t *t, const char *path, guild_err_t *err);

/* Reads path into *t (initialized here, without a cap; prof_trace_fini it after a success). -1 with err
 * ("FILE:LINE: ...") on a file that cannot be read or is not a trace of this version; *t then holds nothing. */
int prof_trace_read(prof_trace_t *t, const char *path, guild_err_t *err);

/* "HtoD"... for PROF_COPY_*; "forward"... for PROF_STEP_*. */
const char *prof_copy_name(int what);
const char *prof_step_kind_name(int kind);

#endif
