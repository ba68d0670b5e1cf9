#include "core/util/progress.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FIRST_NS 500000000ull /* nothing shown for an operation shorter than this */
#define EVERY_NS 250000000ull /* between two rewrites of the line */

static atomic_bool enabled;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

struct guild_progress {
    char what[160];
    uint64_t total;
    guild_progress_unit_t unit;
    uint64_t t0;
    _Atomic uint64_t done;
    _Atomic uint64_t next_ns;  /* the next rewrite is due then */
    pthread_mutex_t mu;        /* the note and the writing of the line */
    char note[160];
    bool shown;                /* under mu */
};

void guild_progress_enable(bool on)
{
    atomic_store(&enabled, on);
}

guild_progress_t *guild_progress_begin(const char *what, uint64_t total, guild_progress_unit_t unit)
{
    if (!atomic_load(&enabled) || !isatty(STDERR_FILENO))
        return NULL;
    guild_progress_t *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    snprintf(p->what, sizeof p->what, "%s", what);
    p->total = total;
    p->unit = unit;
    p->t0 = now_ns();
    atomic_store(&p->next_ns, p->t0 + FIRST_NS);
    pthread_mutex_init(&p->mu, NULL);
    return p;
}

/* Under mu: the line now. */
static void draw(guild_progress_t *p, uint64_t now)
{
    const uint64_t done = atomic_load(&p->done);
    const double secs = (double)(now - p->t0) / 1e9;
    char nums[96] = "";
    if (p->total && p->unit == GUILD_PROGRESS_BYTES)
        snprintf(nums, sizeof nums, "%3.0f%% (%.2f of %.2f GB), ", 100.0 * (double)done / (double)p->total,
                 (double)done / 1e9, (double)p->total / 1e9);
    else if (p->total)
        snprintf(nums, sizeof nums, "%llu of %llu, ", (unsigned long long)done, (unsigned long long)p->total);
    fprintf(stderr, "\r\033[K%s: %s%.0f s%s%s", p->what, nums, secs, p->note[0] ? "; " : "", p->note);
    fflush(stderr);
    p->shown = true;
}

/* Rewrites the line when it is due; one thread at a time, the others skip. */
static void maybe_draw(guild_progress_t *p)
{
    const uint64_t now = now_ns();
    uint64_t due = atomic_load(&p->next_ns);
    if (now < due || !atomic_compare_exchange_strong(&p->next_ns, &due, now + EVERY_NS))
        return;
    pthread_mutex_lock(&p->mu);
    draw(p, now);
    pthread_mutex_unlock(&p->mu);
}

void guild_progress_add(guild_progress_t *p, uint64_t n)
{
    if (!p)
        return;
    atomic_fetch_add(&p->done, n);
    maybe_draw(p);
}

void guild_progress_note(guild_progress_t *p, const char *note)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    snprintf(p->note, sizeof p->note, "%s", note);
    pthread_mutex_unlock(&p->mu);
    maybe_draw(p);
}

void guild_progress_end(guild_progress_t **pp)
{
    guild_progress_t *p = *pp;
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    if (p->shown) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
    }
    pthread_mutex_unlock(&p->mu);
    pthread_mutex_destroy(&p->mu);
    free(p);
    *pp = NULL;
}
