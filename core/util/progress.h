/* core/util/progress.h — one line of progress on the terminal for long operations (copying and repacking experts,
 * uploading weights, waiting for workers to load, guild optimize's measurements).
 *
 * Shown only in a process that asked for it (guild_progress_enable: the guild command does; the worker processes,
 * which share its terminal, do not) and only while stderr is a terminal: never in logs, pipes or tests. Nothing
 * is printed for an operation that ends within half a second; the line is rewritten at most four times a second
 * and erased at the end, so that the messages around it read as without it. */
#ifndef GUILD_UTIL_PROGRESS_H
#define GUILD_UTIL_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

typedef struct guild_progress guild_progress_t;

typedef enum guild_progress_unit {
    GUILD_PROGRESS_COUNT, /* "3 of 9" */
    GUILD_PROGRESS_BYTES, /* "45% (8.40 of 18.60 GB)" */
} guild_progress_unit_t;

/* Whether this process shows progress at all (default: no). Set once by the program, like the log level. */
void guild_progress_enable(bool on);

/* Starts a line about `what` (copied) with `total` units to go (0: unknown, the elapsed time only). NULL when no
 * line is shown (not enabled, stderr not a terminal, out of memory): the calls below take NULL and do nothing. */
guild_progress_t *guild_progress_begin(const char *what, uint64_t total, guild_progress_unit_t unit);

/* n more units done; any thread. */
void guild_progress_add(guild_progress_t *p, uint64_t n);

/* A short note after the numbers ("2 of 4 workers ready"), copied; any thread. */
void guild_progress_note(guild_progress_t *p, const char *note);

/* Erases the line (if it was shown) and frees; nulls *p. NULL-safe. */
void guild_progress_end(guild_progress_t **p);

#endif
