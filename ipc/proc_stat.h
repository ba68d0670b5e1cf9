/* ipc/proc_stat.h — what /proc/<pid>/stat says of another process: its state, CPU time and start time.
 *
 * The run directory's and the arena's stale-owner checks and the supervisor's shutdown read the same file;
 * its second field (the command name) may hold spaces and parentheses, so fields are counted from its last ')'.
 */
#ifndef GUILD_IPC_PROC_STAT_H
#define GUILD_IPC_PROC_STAT_H

#include <stdint.h>
#include <sys/types.h>

typedef struct proc_stat {
    char state;          /* field 3: 'R', 'S', 'D' (uninterruptible: in the kernel, e.g. unpinning memory), 'Z', ... */
    uint64_t cpu_ticks;  /* fields 14 + 15: user + system time, clock ticks */
    uint64_t start_time; /* field 22: clock ticks since boot */
} proc_stat_t;

/* Reads pid's /proc/<pid>/stat into *st: 0, or -1 when there is no such process (or no /proc). */
int proc_stat_read(pid_t pid, proc_stat_t *st);

/* Whether a process still works between two readings, earlier then later: its CPU time advanced (a process
 * unpinning gigabytes at exit spends it in the kernel) or it waits uninterruptibly in the kernel ('D'). A
 * process asleep ('S') without CPU time since, or a zombie, does not. */
int proc_stat_busy(const proc_stat_t *earlier, const proc_stat_t *later);

/* Watching a process over time: its last look and when (zeroed: none yet). */
typedef struct proc_watch {
    proc_stat_t last;
    uint64_t last_ns;
} proc_watch_t;

/* Whether pid still works (proc_stat_busy since the previous look), looking at most every period_ns: true at the
 * first look, in between looks, and when pid is already gone (its reaper finds it next). */
int proc_watch_busy(proc_watch_t *w, pid_t pid, uint64_t now_ns, uint64_t period_ns);

/* Parses one /proc/<pid>/stat line (NUL-terminated): 0, or -1 when it is not one. */
int proc_stat_parse(const char *line, proc_stat_t *st);

#endif
