/* bench/procmem.h — memory of processes as the kernel counts it (/proc/PID/status, /proc/meminfo), for the
 * benchmarks' reports: a process's peak resident set and its anonymous, shared-memory and file-backed pages,
 * and the machine's anonymous and shared memory (counted once, whichever processes map it). */
#ifndef GUILD_BENCH_PROCMEM_H
#define GUILD_BENCH_PROCMEM_H

#include <stdint.h>

typedef struct procmem {
    uint64_t peak;   /* VmHWM: the peak resident set, bytes */
    uint64_t anon;   /* RssAnon */
    uint64_t shmem;  /* RssShmem (shared memory and memfds it maps: counted in each process that maps them) */
    uint64_t file;   /* RssFile (file mappings: the model's pages among them) */
} procmem_t;

/* The counters of process pid; -1 when it cannot be read (gone, another user's). */
int procmem_read(int pid, procmem_t *out);

/* The machine's anonymous pages plus shared memory (AnonPages + Shmem of /proc/meminfo), bytes; 0 when
 * unreadable. */
uint64_t procmem_system_anon(void);

#endif
