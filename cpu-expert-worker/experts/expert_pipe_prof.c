#include "cpu-expert-worker/experts/expert_pipe_prof.h"

#include <stdio.h>
#include <string.h>

void expert_pipe_prof_reset(expert_pipe_prof_t *prof)
{
    memset(prof, 0, sizeof *prof);
}

void expert_pipe_prof_end_run(expert_pipe_prof_t *prof, int n_threads, uint64_t entry, uint64_t handoff,
                              uint64_t ret)
{
    const int n = n_threads < EXPERT_PIPE_PROF_THREADS ? n_threads : EXPERT_PIPE_PROF_THREADS;
    const uint64_t window = ret - handoff;
    uint64_t max_lag = 0, first_end = UINT64_MAX, last_end = 0;
    prof->n_threads = n;
    prof->runs++;
    prof->setup_ns += handoff - entry;
    prof->window_ns += window * (uint64_t)n;
    for (int i = 0; i < n; i++) {
        expert_pipe_prof_thread_t *t = &prof->t[i];
        if (!t->run_start) { /* no task: idle from the hand-off to the return */
            prof->idle_threads++;
            prof->lag_ns += window;
            max_lag = window;
            continue;
        }
        /* a thread's clock may run a little before the hand-off's: clamp, so the shares stay in the window */
        const uint64_t start = t->run_start < handoff ? handoff : t->run_start > ret ? ret : t->run_start;
        const uint64_t end = t->run_end < start ? start : t->run_end > ret ? ret : t->run_end;
        prof->lag_ns += start - handoff;
        prof->tail_ns += ret - end;
        max_lag = start - handoff > max_lag ? start - handoff : max_lag;
        first_end = end < first_end ? end : first_end;
        last_end = end > last_end ? end : last_end;
        prof->x_ns += t->x_ns;
        prof->x_wait_ns += t->x_wait_ns;
        prof->h_wait_ns += t->h_wait_ns;
        prof->task_ns += t->task_ns;
        prof->tasks += t->tasks;
        t->run_start = t->run_end = t->x_ns = t->x_wait_ns = t->h_wait_ns = t->task_ns = t->tasks = 0;
    }
    prof->max_lag_ns += max_lag;
    if (last_end >= first_end && first_end != UINT64_MAX)
        prof->spread_ns += last_end - first_end;
}

void expert_pipe_prof_summarize(const expert_pipe_prof_t *prof, expert_pipe_prof_summary_t *s)
{
    memset(s, 0, sizeof *s);
    if (!prof->runs || !prof->n_threads || !prof->window_ns)
        return;
    const double r = (double)prof->runs, nt = (double)prof->n_threads, w = (double)prof->window_ns;
    s->runs = r;
    s->setup_us = (double)prof->setup_ns / r / 1e3;
    s->window_us = w / nt / r / 1e3;
    s->lag_us = (double)prof->lag_ns / nt / r / 1e3;
    s->max_lag_us = (double)prof->max_lag_ns / r / 1e3;
    s->tail_us = (double)prof->tail_ns / nt / r / 1e3;
    s->spread_us = (double)prof->spread_ns / r / 1e3;
    s->idle_threads = (double)prof->idle_threads / r;
    s->tasks = (double)prof->tasks / r;
    const double waits_in_tasks = (double)prof->x_wait_ns + (double)prof->h_wait_ns;
    s->work = ((double)prof->task_ns - waits_in_tasks) / w;
    s->x = (double)prof->x_ns / w;
    s->x_wait = (double)prof->x_wait_ns / w;
    s->h_wait = (double)prof->h_wait_ns / w;
    s->lag = (double)prof->lag_ns / w;
    s->tail = (double)prof->tail_ns / w;
    s->other = 1.0 - s->work - s->x - s->x_wait - s->h_wait - s->lag - s->tail;
}

int expert_pipe_prof_format(const expert_pipe_prof_summary_t *s, char *buf, size_t n)
{
    return snprintf(buf, n,
                    "runs=%.0f setup_us=%.2f window_us=%.1f lag_us=%.2f max_lag_us=%.2f tail_us=%.2f spread_us=%.2f "
                    "work=%.4f x=%.4f x_wait=%.4f h_wait=%.4f lag=%.4f tail=%.4f other=%.4f idle_threads=%.2f "
                    "tasks=%.1f",
                    s->runs, s->setup_us, s->window_us, s->lag_us, s->max_lag_us, s->tail_us, s->spread_us, s->work,
                    s->x, s->x_wait, s->h_wait, s->lag, s->tail, s->other, s->idle_threads, s->tasks);
}
