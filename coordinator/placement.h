/* coordinator/placement.h — the placement plan: which CPU expert worker computes which routed experts, on which NUMA
 * node and CPUs.
 *
 * Every expert of every layer has exactly one owner: a CPU worker, or for the experts the GPU keeps resident
 * (gpu-worker/dense/gpu_plan.h: whole layers, or individual hot experts) the GPU worker alone, which computes them
 * there: the CPU workers skip them (their Assign leaves them out, and the GPU worker hands their pairs to the
 * exchange as skip slots, core/model/moe_exec.h); streamed experts (copied to the GPU for large batches only) keep
 * their CPU owners. Workers are spread over the nodes round-robin (worker k
 * on node k % n_nodes); each layer's experts are cut into n_workers contiguous ranges whose sizes differ by at
 * most one (the first n_expert % n_workers workers take one more). Routing is data-dependent, so no static
 * split balances better in expectation; contiguous ranges keep the Assign message one range per layer. Owning is
 * holding the copy: the workers of one node compute each exchange's experts by a split made per exchange
 * (cpu-expert-worker/experts/expert_share.h), reading each other's copies.
 * Workers that share a node share its CPUs: each takes an equal disjoint slice when there are enough CPUs, else
 * one CPU each, round robin (workers then double up on a CPU, which is only slower; placement_shared says which,
 * and the coordinator warns with the worker count that fits).
 */
#ifndef GUILD_COORDINATOR_PLACEMENT_H
#define GUILD_COORDINATOR_PLACEMENT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/model/model.h"
#include "core/util/err.h"

/* The machine as the plan sees it (from core/topo in the coordinator; made up in tests). */
typedef struct placement_topo {
    int n_nodes;           /* >= 1 */
    const int *const *cpus; /* cpus[node]: the node's usable CPUs */
    const int *n_cpus;     /* n_cpus[node] (may be 0: then the worker is not pinned) */
    const int *mem_node;   /* mem_node[node]: the NUMA node its workers' memory is bound to; NULL: node itself */
    int keep_free;         /* the last CPUs of node 0 to leave to other processes (placement_new_local) */
} placement_topo_t;

typedef struct plan placement_t;

/* The most CPUs placement_new_local leaves free. */
#define PLACEMENT_MAX_KEEP 8

/* A plan for model configuration cfg over n_workers CPU workers (0: one per node). gpu_experts[cfg->n_layer *
 * cfg->n_expert] (copied; NULL: none) flags the experts that stay on the GPU (gpu_plan_t.expert_resident): no
 * CPU worker owns them. Fails (message) when n_workers exceeds the experts per layer or the exchange's worker
 * limit, or on out of memory. */
int placement_new(placement_t **out, const model_config_t *cfg, int n_workers, const uint8_t *gpu_experts,
                  const placement_topo_t *topo, guild_err_t *err);

/* The last CPUs of node 0 a pipeline of dense backend `backend` ("cuda", "cpu"; NULL: none) leaves free for the GPU
 * worker and the coordinator (placement_new_local's keep_free): one with the cuda backend, none with another or
 * when the CPU workers are started by hand (by_hand: --listen; they may be on other hosts). */
int placement_keep_free_for(const char *backend, bool by_hand);

/* The same with the machine's real topology (core/topo), or, when cpu_nodes is not NULL, with the nodes it
 * gives (--cpu-nodes: CPU lists separated by '/' between nodes, "0-7/8-15"; every CPU one this process may use,
 * none twice; each node's memory on the NUMA node of its first CPU). That is how workers are kept to some of
 * the CPUs, and how a machine of several nodes is planned on one of one node (the topology a test fakes).
 * keep_free (machine topology only; placement_topo_t.keep_free): the last CPUs of node 0 no worker is pinned
 * to, for the processes that share the machine with the workers (the GPU worker's host thread, which must run at
 * once when a step's experts are in, and the coordinator): at most a quarter of node 0's CPUs (and at most
 * PLACEMENT_MAX_KEEP), and a CPU per worker there stays. Workers pinned to every CPU would have a thread
 * preempted by those in every step, and a step waits for its slowest thread. */
int placement_new_local(placement_t **out, const model_config_t *cfg, int n_workers, const uint8_t *gpu_experts,
                        const char *cpu_nodes, int keep_free, guild_err_t *err);

/* The CPUs placement_new_local left free (count returned). Owned by the plan. */
int placement_kept(const placement_t *p, const int **cpus);

/* Frees; nulls *p. NULL-safe. */
void placement_destroy(placement_t **p);

int placement_workers(const placement_t *p);
int placement_layers(const placement_t *p);
int placement_node(const placement_t *p, int worker);

/* The NUMA node worker's memory is bound to (placement_node's, unless the nodes were given). */
int placement_mem_node(const placement_t *p, int worker);

/* The CPUs worker's threads are pinned to (count returned; 0: none known, do not pin). Owned by the plan. */
int placement_cpus(const placement_t *p, int worker, const int **cpus);

/* The threads worker runs: as many as its CPUs (divided among the workers pinned to the same CPUs, when a node has
 * more workers than CPUs; at least 1), or `requested` when the user gave fewer (given: --threads). More threads
 * than CPUs would only spin against each other: workers on one node split it, never share a core. A worker
 * whose CPUs are not known runs `requested`. */
int placement_threads(const placement_t *p, int worker, int requested, bool given);

/* Whether some CPU of worker's is another worker's too (more workers on its node than CPUs): their threads then
 * take turns on it, and should not spin while they wait. */
bool placement_shared(const placement_t *p, int worker);

/* The distinct CPUs the plan's workers on `node` are pinned to (0: none, or none known). */
int placement_node_cpus(const placement_t *p, int node);

/* Whether every expert of `layer` stays on the GPU (no CPU worker owns any). */
bool placement_on_gpu(const placement_t *p, int layer);

/* Whether expert `expert` of `layer` stays on the GPU. */
bool placement_expert_on_gpu(const placement_t *p, int layer, int expert);

/* The range of expert ids [*first, *first + *count) of `layer` that is worker's (count 0 for a layer wholly on
 * the GPU); the experts in it that stay on the GPU are not the worker's (placement_shard lists those that are). */
void placement_range(const placement_t *p, int worker, int layer, uint32_t *first, uint32_t *count);

/* The experts of `layer` that worker owns, as runs [first[i], first[i] + count[i]) ascending (its range less the
 * experts on the GPU), into first[max] and count[max]; returns the number of runs (0: none). max >= (the
 * worker's range + 1) / 2 always suffices. */
int placement_shard(const placement_t *p, int worker, int layer, uint32_t *first, uint32_t *count, int max);

/* The CPU worker that owns (layer, expert); -1 for an expert on the GPU. */
int placement_owner(const placement_t *p, int layer, int expert);

/* Prints the plan: the layers on the GPU if any (and how many individual experts of the others), then one line
 * per worker with its node, CPUs, threads (placement_threads of threads, given), experts and their bytes in
 * model m (whose configuration the plan was made for); a --threads above a worker's CPUs is named. */
void placement_print(const placement_t *p, const model_t *m, int threads, bool given, FILE *out);

#endif
