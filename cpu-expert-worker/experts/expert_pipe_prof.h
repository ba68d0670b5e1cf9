/* cpu-expert-worker/experts/expert_pipe_prof.h — an optional profile of expert_pipe_run: where a run's time goes,
 * thread by thread (issues 17 and 18: how far the pipeline's read rate falls short of the DRAM probe, and why).
 *
 * Each run is seen from the pool hand-off (the moment expert_pipe_run gives the pool its job) to the return; every
 * thread's share of that window is one of:
 *   lag    from the hand-off to its first task (waking up; a thread that ran no task lags the whole window),
 *   x      quantizing the tokens' activations,
 *   x_wait gate/up tasks waiting for the last token's activations,
 *   h_wait down tasks waiting for their expert's hidden vectors,
 *   work   inside the tasks' kernels (the waits excluded),
 *   other  between tasks (claims, the pinned slices' bookkeeping),
 *   tail   from the end of its last task to the return (the layer's end barrier).
 * setup (from the call to the hand-off: grouping the pairs) is counted apart. The pipeline writes a thread's
 * fields from that thread only, and the run's totals from the calling thread after the pool's join; with no
 * profile attached (expert_pipe_set_prof) it costs one predictable branch per task.
 */
#ifndef GUILD_CPU_EXPERT_WORKER_EXPERT_PIPE_PROF_H
#define GUILD_CPU_EXPERT_WORKER_EXPERT_PIPE_PROF_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* The most pool threads a profile follows (the others are counted in the run's totals only). */
#define EXPERT_PIPE_PROF_THREADS 256

/* One thread: written by that thread only during a run, read by the caller after the join. */
typedef struct expert_pipe_prof_thread {
    /* this run (expert_pipe_prof_end_run folds them into the totals and clears them) */
    uint64_t run_start, run_end; /* CLOCK_MONOTONIC ns: its first task entered, its last one left (0: none) */
    uint64_t x_ns;               /* ns quantizing activations */
    uint64_t x_wait_ns;          /* gate/up waiting for the activations */
    uint64_t h_wait_ns;          /* down waiting for the hidden vectors */
    uint64_t task_ns;            /* inside gate/up and down tasks, their waits included */
    uint64_t tasks;              /* gate/up and down calls */
} __attribute__((aligned(64))) expert_pipe_prof_thread_t;

typedef struct expert_pipe_prof {
    int n_threads;        /* the pool's threads in the last run */
    uint64_t runs;        /* runs with work */
    uint64_t setup_ns;    /* sums over runs, ns: call to hand-off */
    uint64_t window_ns;   /* hand-off to return */
    uint64_t lag_ns;      /* over runs and threads: hand-off to first task (no task: the whole window) */
    uint64_t max_lag_ns;  /* over runs: the run's largest lag */
    uint64_t tail_ns;     /* over runs and threads: last task's end to return */
    uint64_t spread_ns;   /* over runs: last thread's end - first thread's end */
    uint64_t x_ns, x_wait_ns, h_wait_ns, task_ns; /* over runs and threads */
    uint64_t tasks;
    uint64_t idle_threads; /* over runs: threads that ran no task */
    expert_pipe_prof_thread_t t[EXPERT_PIPE_PROF_THREADS];
} expert_pipe_prof_t;

/* Means per run of a profile, in microseconds, and shares of the threads' time in the runs' windows. */
typedef struct expert_pipe_prof_summary {
    double runs;
    double setup_us, window_us, lag_us, max_lag_us, tail_us, spread_us; /* lag and tail: mean over threads */
    double work, x, x_wait, h_wait, lag, tail, other;                  /* shares, summing to 1 */
    double idle_threads, tasks;                                        /* per run */
} expert_pipe_prof_summary_t;

static inline uint64_t expert_pipe_prof_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Zeroes every sum. */
void expert_pipe_prof_reset(expert_pipe_prof_t *prof);

/* Folds one run into the sums: called by the pipeline after the pool's join, with the call's entry, the
 * hand-off and the return; clears the threads' run_start/run_end for the next run. */
void expert_pipe_prof_end_run(expert_pipe_prof_t *prof, int n_threads, uint64_t entry, uint64_t handoff,
                              uint64_t ret);

/* The means and shares of the runs so far (zeros when there were none). */
void expert_pipe_prof_summarize(const expert_pipe_prof_t *prof, expert_pipe_prof_summary_t *out);

/* The summary as one line of key=value pairs (no newline) into buf; returns snprintf's count. */
int expert_pipe_prof_format(const expert_pipe_prof_summary_t *s, char *buf, size_t n);

#endif
