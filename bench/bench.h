/* bench/bench.h — the benchmarks behind `guild bench` (each takes argv with argv[0] = its name and returns the
 * exit status: 0, 1 on a runtime failure, 2 on a usage error), and helpers they share. */
#ifndef GUILD_BENCH_H
#define GUILD_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/util/err.h"

int bench_experts_main(int argc, char **argv);
int bench_bw_main(int argc, char **argv);
int bench_run_main(int argc, char **argv);
int bench_sessions_main(int argc, char **argv);
int bench_route_predict_main(int argc, char **argv);
int bench_pool_main(int argc, char **argv);
int bench_trace_main(int argc, char **argv);

/* Prints "# key: value" provenance lines (commit, CPU model and features, kernel level, command line, date). */
void bench_print_provenance(FILE *out, int argc, char **argv);

/* The index of the first largest of x[0..n) (n >= 1), NaN counted as -infinity: the sampler's greedy choice
 * (logits_pick's id, core/sample/logits_pick.h, whose chunked scan vectorises: a 150k-entry vocabulary, which the
 * batched benchmarks pay per session, in a fraction of the element-by-element loop's time). */
int32_t bench_argmax(const float *x, int32_t n);

/* One greedy decode step of n sessions decoded together (guild bench sessions, guild-cuda-prof): a row each,
 * session s at sequence s's next position, each session's next token (backend_forward_pick: the pick of its row,
 * where the backend computed it; logits [n][V] is its room for the rows) into tok[s], which held the tokens fed.
 * seq, pos, rows: [n] scratch. -1 with err when the forward call fails. */
struct backend;
int bench_decode_step(struct backend *be, int32_t n, int32_t *tok, int32_t *seq, int32_t *pos, int32_t *rows,
                      float *logits, int32_t V, guild_err_t *err);

#endif
