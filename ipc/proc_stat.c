/* ipc/proc_stat.c — see proc_stat.h. */
#include "config.h"

#include "ipc/proc_stat.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int proc_stat_parse(const char *line, proc_stat_t *st)
{
    const char *p = strrchr(line, ')');
    if (!p || p[1] != ' ' || !p[2])
        return -1;
    proc_stat_t s = {.state = p[2]};
    p += 2; /* at field 3 */
    uint64_t utime = 0;
    for (int field = 3; field <= 22; field++) {
        if (field > 3) {
            p = strchr(p, ' ');
            if (!p)
                return -1;
            p++;
        }
        char *end;
        if (field == 14)
            utime = strtoull(p, &end, 10);
        else if (field == 15)
            s.cpu_ticks = utime + strtoull(p, &end, 10);
        else if (field == 22)
            s.start_time = strtoull(p, &end, 10);
        else
            continue;
        if (end == p)
            return -1;
    }
    *st = s;
    return 0;
}

int proc_stat_busy(const proc_stat_t *earlier, const proc_stat_t *later)
{
    if (later->state == 'Z' || later->state == 'X')
        return 0;
    return later->state == 'D' || later->cpu_ticks > earlier->cpu_ticks;
}

int proc_watch_busy(proc_watch_t *w, pid_t pid, uint64_t now_ns, uint64_t period_ns)
{
    if (w->last_ns && now_ns - w->last_ns < period_ns)
        return 1;
    proc_stat_t look;
    if (proc_stat_read(pid, &look) < 0)
        return 1;
    int busy = !w->last_ns || proc_stat_busy(&w->last, &look);
    w->last = look;
    w->last_ns = now_ns;
    return busy;
}

int proc_stat_read(pid_t pid, proc_stat_t *st)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    return proc_stat_parse(buf, st);
}
