/* bench/bench.h — the benchmarks behind `guild bench` (each takes argv with argv[0] = its name and returns the
 * exit status: 0, 1 on a runtime failure, 2 on a usage error), and helpers they share. */
#ifndef GUILD_BENCH_H
#define GUILD_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

int bench_experts_main(int argc, char **argv);
int bench_bw_main(int argc, char **argv);
int bench_run_main(int argc, char **argv);
int bench_sessions_main(int argc, char **argv);

/* Prints "# key: value" provenance lines (commit, CPU model and features, kernel level, command line, date). */
void bench_print_provenance(FILE *out, int argc, char **argv);

/* The index of the first largest of x[0..n) (n >= 1), the one `x[i] > x[best]` picks: a greedy decode's next
 * token. The running maximum is kept in a register: comparing against x[best] chains each element's compare to a
 * load through the last move, several times slower over a 150k-entry vocabulary, which the batched benchmarks pay
 * per session. */
int32_t bench_argmax(const float *x, int32_t n);


#endif
