#include "config.h"

#include "core/topo/topo.h"

#include <errno.h>
#include <numa.h>
#include <numaif.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

static bool numa_ok(void)
{
    /* numa_available() is cheap and idempotent; it must be called before any other libnuma function */
    return numa_available() >= 0;
}

int topo_node_count(void)
{
    if (!numa_ok())
        return 1;
    int n = numa_max_node() + 1;
    return n > 0 ? n : 1;
}

static int allowed_cpus(cpu_set_t *set)
{
    CPU_ZERO(set);
    return sched_getaffinity(0, sizeof *set, set);
}

int topo_all_cpus(int *cpus, int max)
{
    cpu_set_t set;
    int n = 0;
    if (allowed_cpus(&set) != 0)
        return 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set)) {
            if (n < max)
                cpus[n] = c;
            n++;
        }
    return n < max ? n : max;
}

int topo_node_cpus(int node, int *cpus, int max)
{
    if (node < 0 || node >= topo_node_count())
        return 0;
    if (!numa_ok())
        return topo_all_cpus(cpus, max);
    cpu_set_t set;
    if (allowed_cpus(&set) != 0)
        return 0;
    struct bitmask *mask = numa_allocate_cpumask();
    if (!mask)
        return 0;
    int n = 0;
    if (numa_node_to_cpus(node, mask) == 0) {
        for (int c = 0; c < CPU_SETSIZE && (unsigned)c < mask->size; c++)
            if (numa_bitmask_isbitset(mask, (unsigned)c) && CPU_ISSET(c, &set) && n < max)
                cpus[n++] = c;
    }
    numa_free_cpumask(mask);
    return n;
}

void *topo_alloc(size_t size, int node, guild_err_t *err)
{
    if (size == 0)
        size = 1;
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        guild_err_errno(err, errno, "cannot map %zu bytes", size);
        return NULL;
    }
    /* big streamed buffers: 2 MiB pages spare the TLB; refusal (THP off) only costs speed */
    (void)madvise(p, size, MADV_HUGEPAGE);
    if (topo_bind(p, size, node, err) < 0) {
        munmap(p, size);
        return NULL;
    }
    return p;
}

int topo_bind(void *p, size_t size, int node, guild_err_t *err)
{
    if (node < 0 || !numa_ok() || topo_node_count() <= 1)
        return 0;
    if (node >= topo_node_count())
        return guild_err_set(err, "NUMA node %d does not exist (%d nodes)", node, topo_node_count());
    unsigned long mask[16] = {0};
    if ((size_t)node >= sizeof mask * 8)
        return guild_err_set(err, "NUMA node %d is beyond what Guild supports", node);
    mask[node / 64] |= 1ul << (node % 64);
    if (mbind(p, size, MPOL_BIND, mask, sizeof mask * 8, 0) != 0)
        return guild_err_errno(err, errno, "cannot bind %zu bytes to NUMA node %d", size, node);
    return 0;
}

void topo_free(void *p, size_t size)
{
    if (p)
        munmap(p, size ? size : 1);
}

int topo_pages_on_node(const void *addr, size_t len, int node, size_t *present, size_t *off_node, guild_err_t *err)
{
    *present = *off_node = 0;
    if (!len)
        return 0;
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t first = (uintptr_t)addr & ~(uintptr_t)(page - 1);
    uintptr_t end = (uintptr_t)addr + len;
    enum { CHUNK = 4096 }; /* pages per query: bounded stack use whatever the range */
    void *pages[CHUNK];
    int status[CHUNK];
    for (uintptr_t p = first; p < end;) {
        unsigned long n = 0;
        for (; n < CHUNK && p < end; n++, p += (uintptr_t)page)
            pages[n] = (void *)p;
        if (!numa_ok()) {
            *present += n; /* one node: every page is node 0's */
            if (node != 0)
                *off_node += n;
            continue;
        }
        if (move_pages(0, n, pages, NULL, status, 0) != 0)
            return guild_err_errno(err, errno, "move_pages query of %lu pages at %p", n, pages[0]);
        for (unsigned long i = 0; i < n; i++) {
            if (status[i] < 0) /* -ENOENT: not present yet (or not a page that can be placed) */
                continue;
            (*present)++;
            if (status[i] != node)
                (*off_node)++;
        }
    }
    return 0;
}
