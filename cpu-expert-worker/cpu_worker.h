/* cpu-expert-worker/cpu_worker.h — the CPU expert worker process: routed experts of one shard, on one NUMA node.
 *
 * It registers with the coordinator (ipc/actor.h) and for each Assign: opens the model, copies the
 * experts of its shard (Assign.shard) into memory bound to its node (optionally locked), starts a thread pool
 * pinned to the node's CPUs (or to its options' cpus: cpu-expert-worker/cpu_worker_options.h), attaches the
 * arena's MoE exchange as worker Assign.worker_index, reports Ready, then serves exchanges: for each one, the (token, slot) pairs whose
 * expert it owns, written into the slot's y rows, then its done counter. It resumes at done + 1, so a worker
 * that replaces a dead one redoes the exchange its predecessor died in. A bad Assign (unknown layer, expert
 * out of range, unreadable model, unusable node) is answered with an Error naming the cause; the worker
 * stays up for the next one. A worker that cannot map the arena (another host) gets its exchanges as
 * messages on a data socket instead (its options' data_endpoint; the coordinator's bridge forwards them).
 */
#ifndef GUILD_CPU_EXPERT_WORKER_CPU_WORKER_H
#define GUILD_CPU_EXPERT_WORKER_CPU_WORKER_H

#include "cpu-expert-worker/cpu_worker_options.h"

/* Runs the worker its checked command line describes (cpu-expert-worker/cpu_worker_options.h: the node, the
 * coordinator's endpoint and its keys, ...); returns the process exit status (0 after a Shutdown or when the
 * coordinator is gone, 1 if it could not start or the coordinator refused it). Without shared memory it tells
 * the coordinator that it cannot map the arena, so that its exchanges travel as messages (ipc/data.h), as they
 * do for a worker on another host. */
int cpu_worker_run(const cpu_worker_args_t *args);

#endif
