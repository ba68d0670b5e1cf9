/* stager/stage_bench.h — `guild-stager --bench`: the fill rate of a staging ring for a model's expert tensors. */
#ifndef GUILD_STAGER_STAGE_BENCH_H
#define GUILD_STAGER_STAGE_BENCH_H

#include "core/util/err.h"

#include <stddef.h>
#include <stdio.h>

/* Streams every routed-expert tensor ("*_exps") of the GGUF model through an in-process ring of 3 slots of
 * slot_bytes with `threads` copy threads, once to warm up and then `runs` times, and prints one line to out
 * with the median, min and max fill rate in GB/s. -1 with err (bad model, no expert tensors, no memory). */
int stage_bench_run(const char *model, int threads, int runs, size_t slot_bytes, FILE *out, guild_err_t *err);

#endif
