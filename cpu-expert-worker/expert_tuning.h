/* cpu-expert-worker/expert_tuning.h — the CPU expert workers' tuning file, written by `guild optimize` and read
 * by the workers at start-up (--tuning FILE). Text, one `key = value` per line, '#' comments:
 *     version = 1
 *     cpu = <brand string the values were measured on>
 *     threads = 16          (threads per worker; 0 = every CPU of the node)
 *     gate_up_rows = 0      (expert_pipe_tuning_t; 0 = automatic)
 *     down_rows = 0
 * Every choice here changes speed only: the pipeline's results are bit-identical for any of them. */
#ifndef GUILD_CPU_EXPERT_WORKER_EXPERT_TUNING_H
#define GUILD_CPU_EXPERT_WORKER_EXPERT_TUNING_H

#include <stdint.h>

#include "core/util/err.h"
#include "cpu-expert-worker/expert_pipe.h"

#define EXPERT_TUNING_VERSION 1

typedef struct expert_tuning {
    char cpu[64];              /* measured on; "" = portable defaults */
    int32_t threads;           /* per worker; 0 = all CPUs of the node */
    expert_pipe_tuning_t pipe; /* row blocks */
} expert_tuning_t;

/* The portable defaults (what a worker uses without a file). */
void expert_tuning_default(expert_tuning_t *t);

/* Reads `path`. Fails (message naming the file and line) on a missing file, an unknown key, a bad value or a
 * version this build does not know; *t is left at the defaults then. */
int expert_tuning_load(const char *path, expert_tuning_t *t, guild_err_t *err);

/* Writes `path` (replaced atomically: written to a temporary file, then renamed). */
int expert_tuning_save(const char *path, const expert_tuning_t *t, guild_err_t *err);

#endif
