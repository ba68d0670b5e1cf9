/* Process and machine memory from /proc (contract in procmem.h). */
#include "bench/procmem.h"

#include <stdio.h>
#include <string.h>

/* "Key:   1234 kB" lines of a /proc file: the values of keys[0..n) in bytes (0 when absent). */
static int read_kb(const char *path, const char *const *keys, uint64_t *vals, int n)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    for (int i = 0; i < n; i++)
        vals[i] = 0;
    char line[256];
    while (fgets(line, sizeof line, f))
        for (int i = 0; i < n; i++) {
            const size_t k = strlen(keys[i]);
            unsigned long long v;
            if (!strncmp(line, keys[i], k) && sscanf(line + k, " %llu", &v) == 1)
                vals[i] = (uint64_t)v * 1024u;
        }
    fclose(f);
    return 0;
}

int procmem_read(int pid, procmem_t *out)
{
    static const char *const keys[] = {"VmHWM:", "RssAnon:", "RssShmem:", "RssFile:"};
    char path[64];
    uint64_t v[4];
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    if (read_kb(path, keys, v, 4) < 0)
        return -1;
    *out = (procmem_t){v[0], v[1], v[2], v[3]};
    return 0;
}

uint64_t procmem_system_anon(void)
{
    static const char *const keys[] = {"AnonPages:", "Shmem:"};
    uint64_t v[2];
    return read_kb("/proc/meminfo", keys, v, 2) < 0 ? 0 : v[0] + v[1];
}
