/* bench/bw.h — a STREAM-like probe of the machine's DRAM read bandwidth.
 *
 * Threads pinned to CPUs each read their own slice of a buffer that lives in the memory of their CPU's NUMA
 * node, over and over; the time of a pass is from a common start (barrier) to the last thread's end. The
 * buffer is several times the last-level cache so that the reads come from DRAM. This is the denominator of
 * the expert benchmark's `fraction`.
 */
#ifndef GUILD_BENCH_BW_H
#define GUILD_BENCH_BW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/util/err.h"

typedef struct bench_bw {
    double median_gbps; /* median over the passes, 1e9 bytes per second */
    double best_gbps;
    int passes;
} bench_bw_t;

/* Reads `bytes` in total (split evenly over the threads) with one thread per entry of cpus[0 .. n_cpus),
 * each slice placed on nodes[i] (-1: wherever the kernel puts it), `passes` timed passes after one warm-up.
 * Fails (message in err) when memory or threads cannot be had. */
int bench_read_bw(const int *cpus, const int *nodes, int n_cpus, size_t bytes, int passes, bench_bw_t *out,
                  guild_err_t *err);

/* The machine's read bandwidth as the benchmarks' limits count it (guild bench run, sessions): one thread on each
 * CPU of every NUMA node (up to BENCH_BW_MAX_CPUS), each slice in its node's memory, as bench_read_bw. -1 with
 * err when no CPU is found or bench_read_bw fails. */
#define BENCH_BW_MAX_CPUS 1024
int bench_read_bw_machine(size_t bytes, int passes, bench_bw_t *out, guild_err_t *err);

/* A probe kept for repeated measurements (guild bench sessions probes before and after each size's runs): the
 * slices are allocated and written once by bench_bw_probe_new (as bench_read_bw's), each bench_bw_probe_run starts
 * the pinned threads for `passes` timed passes after one warm-up. new: -1 with err when memory cannot be had (the
 * caller's pointer NULL); run: -1 with err when threads cannot be started. destroy is NULL-safe and nulls *p. */
typedef struct bench_bw_probe bench_bw_probe_t;
int bench_bw_probe_new(bench_bw_probe_t **out, const int *cpus, const int *nodes, int n_cpus, size_t bytes,
                       guild_err_t *err);
/* Every CPU of every NUMA node, each slice in its node's memory (bench_read_bw_machine's threads). */
int bench_bw_probe_new_machine(bench_bw_probe_t **out, size_t bytes, guild_err_t *err);

/* How a probe's memory is had and read (bench_bw_probe_new_as). The zero value is bench_bw_probe_new's: private
 * anonymous memory advised for huge pages, each thread streaming its own slice. */
typedef struct bench_bw_shape {
    bool shared;  /* the slices in one shared-memory arena (ipc/arena.h, a memfd): transparent huge pages where the
                     kernel gives them to shared memory, else 4 KiB pages, never hugetlb pages (a CPU worker's
                     expert store's pages when no hugetlb pool holds it; the pool is left to the stores) */
    size_t piece; /* 0: each thread streams its own slice. Else the threads of one node (a run of consecutive
                     entries of cpus with the same node) read their slices together as pieces of this many bytes
                     (rounded down to 256), in one fixed shuffled order, each thread one contiguous share of every
                     piece: the way a CPU worker's threads split each expert matrix's rows between them;
                     shared only (a node's slices lie one after another there) */
    bool ahead;   /* read with bench_read_ahead (the workers' kernels' prefetch), else bench_read */
} bench_bw_shape_t;
int bench_bw_probe_new_as(bench_bw_probe_t **out, const int *cpus, const int *nodes, int n_cpus, size_t bytes,
                          const bench_bw_shape_t *shape, guild_err_t *err);
int bench_bw_probe_run(bench_bw_probe_t *p, int passes, bench_bw_t *out, guild_err_t *err);
size_t bench_bw_probe_bytes(const bench_bw_probe_t *p); /* bytes a pass reads */
int bench_bw_probe_threads(const bench_bw_probe_t *p);
/* The pages of the probe's memory: "thp", "4k" (shared) or "anon" (private, advised for huge pages). */
const char *bench_bw_probe_pages(const bench_bw_probe_t *p);
void bench_bw_probe_destroy(bench_bw_probe_t **p);

/* Reads p[0 .. n) (64-byte aligned, n a multiple of 256) with the widest loads this CPU has; returns a value
 * that depends on every byte, so that the reads cannot be optimised away. */
uint64_t bench_read(const void *p, size_t n);

/* bench_read's value, read as the CPU workers' kernels stream their weights: a software prefetch into L2 of every
 * 64-byte line BENCH_READ_AHEAD bytes ahead of the loads, never past p + n (core/kern/x86/avx512_kquants.h's
 * kq_pf cursor, KQ_PF and KQ_PF_HINT): guild bench bw --read ahead weighs that way of reading against the loads
 * alone, the question being whether the probe's plain loads understate what the workers can read. */
#define BENCH_READ_AHEAD 4096
uint64_t bench_read_ahead(const void *p, size_t n);

/* Sums the bytes of p[0 .. n) (any alignment and length) with the widest loads this CPU has: the simplest
 * computation that reads every byte, the ceiling of a kernel on the same access pattern. */
uint64_t bench_sum_bytes(const void *p, size_t n);

#endif
