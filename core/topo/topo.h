/* core/topo/topo.h — the machine's NUMA nodes, their CPUs, and memory placed on a node (libnuma underneath).
 *
 * A machine (or kernel) without NUMA support is one node 0 holding every CPU. Only the CPUs this process may
 * run on (its affinity mask, e.g. under taskset or a cgroup) are reported.
 */
#ifndef GUILD_TOPO_H
#define GUILD_TOPO_H

#include <stddef.h>

#include "core/util/err.h"

/* Number of NUMA nodes (>= 1); nodes are numbered 0 .. count-1. */
int topo_node_count(void);

/* Fills cpus[0 .. min(count, max)) with the CPUs of `node` this process may use, in increasing order, and
 * returns their count (0 for a node without usable CPUs or out of range). */
int topo_node_cpus(int node, int *cpus, int max);

/* Every CPU this process may use, in increasing order; returns the count. */
int topo_all_cpus(int *cpus, int max);

/* Allocates `size` bytes of page-aligned, zeroed memory whose pages are bound to `node` (node < 0: no binding),
 * transparent hugepages requested. Returns NULL (message in err) when the memory or the binding is refused.
 * Free with topo_free(p, size). */
void *topo_alloc(size_t size, int node, guild_err_t *err);

/* Binds the pages of [p, p + size) (page-aligned; anonymous or shared memory: for a shared mapping the policy is
 * the shared object's) to `node` (node < 0, or one node: nothing); pages not yet touched are allocated there.
 * -1 with a message when refused. */
int topo_bind(void *p, size_t size, int node, guild_err_t *err);

/* Frees what topo_alloc returned (size as given to it). NULL-safe. */
void topo_free(void *p, size_t size);

/* Where the pages of [addr, addr + len) are now (move_pages(2) query, nothing moved): counts the pages present
 * in memory (*present) and, of those, the ones not on `node` (*off_node); pages not yet touched are not counted.
 * On a kernel without NUMA support every page counts as node 0's. -1 with a message when the query fails. */
int topo_pages_on_node(const void *addr, size_t len, int node, size_t *present, size_t *off_node, guild_err_t *err);

#endif
