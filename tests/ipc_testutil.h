/* tests/ipc_testutil.h — helpers shared by the ipc tests: child processes and page-size inspection. */
#ifndef GUILD_TESTS_IPC_TESTUTIL_H
#define GUILD_TESTS_IPC_TESTUTIL_H

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* Waits for pid; returns its exit status, or 128 + signal if it was killed, or -1. */
static inline int ipc_test_wait(pid_t pid)
{
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    if (WIFSIGNALED(st))
        return 128 + WTERMSIG(st);
    return -1;
}

/* The "KernelPageSize" (kB) of the mapping holding addr, from /proc/self/smaps; -1 if not found. */
static inline long ipc_test_page_kb(const void *addr)
{
    FILE *f = fopen("/proc/self/smaps", "re");
    if (!f)
        return -1;
    char line[512];
    int inside = 0;
    long kb = -1;
    uintptr_t a = (uintptr_t)addr;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            inside = a >= lo && a < hi;
            continue;
        }
        if (inside && sscanf(line, "KernelPageSize: %ld kB", &kb) == 1)
            break;
    }
    fclose(f);
    return kb;
}

/* The bracketed choice in a sysfs file such as shmem_enabled; "" if unreadable. */
static inline void ipc_test_sysfs_choice(const char *path, char *out, size_t n)
{
    out[0] = '\0';
    FILE *f = fopen(path, "re");
    if (!f)
        return;
    char line[256];
    if (fgets(line, sizeof line, f)) {
        char *a = strchr(line, '['), *b = a ? strchr(a, ']') : NULL;
        if (a && b)
            snprintf(out, n, "%.*s", (int)(b - a - 1), a + 1);
    }
    fclose(f);
}

static inline long ipc_test_read_long(const char *path)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    long v = -1;
    if (fscanf(f, "%ld", &v) != 1)
        v = -1;
    fclose(f);
    return v;
}

/* Serializes tests that look at or change the hugetlb pool (they may run in parallel under make -j). */
static inline int ipc_test_hugetlb_lock(void)
{
    int fd = open("/tmp/guild-ipc-hugetlb.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd >= 0)
        while (flock(fd, LOCK_EX) < 0 && errno == EINTR)
            ;
    return fd;
}

static inline void ipc_test_hugetlb_unlock(int fd)
{
    if (fd >= 0)
        close(fd);
}

#endif
