/* cpu-expert-worker/cpu_worker_options.h — a CPU expert worker's options: one record (its threads and the CPUs
 * they run on, its node, its doorbell waits, how its shard is copied and computed), its one wire form
 * (CpuWorkerOptions in proto/guild.proto, carried by Assign) and its one check.
 *
 * The coordinator fills the shard settings from its command line and the model's tuning file
 * (coordinator/stack_flags.h; a single process computes its experts with the same record's settings), the
 * supervisor adds what each assignment decides (threads, node and CPUs, the data endpoint) and sends it;
 * guild-cpu-worker reads it back and checks it. Beside it, the worker's own command line (cpu_worker_args_t:
 * where and how it connects, its node, its model), parsed and checked once, never sent. */
#ifndef GUILD_CPU_EXPERT_WORKER_CPU_WORKER_OPTIONS_H
#define GUILD_CPU_EXPERT_WORKER_CPU_WORKER_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/util/err.h"
#include "cpu-expert-worker/experts/expert_shard.h"
#include "ipc/curve.h"
#include "proto/guild.pb-c.h"

typedef struct cpu_worker_options {
    int32_t n_threads;          /* threads of its pool; 0: one per CPU it runs on */
    uint64_t spin_ns;           /* doorbell spin before sleeping */
    uint64_t wait_slice_ns;     /* doorbell wait slice (a peer silent this long is checked); 0: 100 ms */
    uint32_t silence_ms;        /* the worker exits when the coordinator is silent this long; 0: its default */
    int32_t node;               /* the NUMA node `cpus` belong to; -1: none (the worker's own --node applies) */
    const uint32_t *cpus;       /* [n_cpus] CPUs to pin its threads to; none: every CPU of its node */
    size_t n_cpus;
    bool mlock;                 /* lock the shard in memory (--mlock) */
    const char *data_endpoint;  /* NULL: exchanges through the arena; else as messages on a DEALER connected here */
    int32_t gate_up_rows;       /* the expert pipeline's row blocks (the model's tuning file); 0: automatic */
    int32_t down_rows;
    bool interleave_gate_up;    /* gate and up rows alternate in the shard copy (tuning file) */
    expert_layout_t expert_layout; /* the shard copy's layout (--expert-layout, else the tuning file) */
    const uint32_t *share_with; /* [n_share_with] the workers of its node that split each exchange's experts
                                 * (expert_share.h), ascending, its own index among them; none: it computes the
                                 * experts it owns */
    size_t n_share_with;
} cpu_worker_options_t;

/* Fills *m from o; its strings and arrays point into o, which must outlive the message. Every field travels. */
void cpu_worker_options_to_proto(const cpu_worker_options_t *o, Guild__CpuWorkerOptions *m);

/* The record of a received message (its strings and arrays point into m, which must outlive *o). -1 with err
 * on a number the record cannot hold. */
int cpu_worker_options_from_proto(cpu_worker_options_t *o, const Guild__CpuWorkerOptions *m, guild_err_t *err);

/* The one check of a CPU worker's options (guild-cpu-worker runs it on every Assign): -1 with err naming the
 * field ("CPU worker options: ...") when one is out of range. */
int cpu_worker_options_check(const cpu_worker_options_t *o, guild_err_t *err);

/* guild-cpu-worker's command line. */
typedef struct cpu_worker_args {
    int node;                    /* --node N (default 0) */
    const char *endpoint;        /* --connect ENDPOINT: the coordinator's control socket */
    bool shared_memory;          /* false: --no-shared-memory (exchanges as messages, as on another host) */
    const char *model;           /* --model PATH: this host's copy of the model, proved the same as the
                                    coordinator's by the digests of the shard's tensors; NULL: the coordinator's
                                    path when the worker maps its arena, else the shard received over the data
                                    socket */
    guild_curve_options_t curve; /* --key, --server-key, --insecure (ipc/curve.h): a tcp ENDPOINT needs them */
    int verbose;                 /* -v count */
} cpu_worker_args_t;

/* The --help text. */
void cpu_worker_args_usage(FILE *out);

/* Parses argv (getopt_long from optind 1) into *a and checks it (cpu_worker_args_check): 0, 1 when --help was
 * asked (printed on stdout), -1 with err on a bad value or combination, -2 with err on an unknown flag or a
 * stray argument (the caller adds the usage). */
int cpu_worker_args_parse(cpu_worker_args_t *a, int argc, char **argv, guild_err_t *err);

/* The one check of the command line: an endpoint, and the keys a tcp one needs (guild_curve_check). */
int cpu_worker_args_check(const cpu_worker_args_t *a, guild_err_t *err);

#endif
