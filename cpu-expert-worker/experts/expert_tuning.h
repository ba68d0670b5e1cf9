/* cpu-expert-worker/experts/expert_tuning.h — the CPU expert workers' tuning file, written by `guild optimize` beside
 * the model (MODEL.gguf.tuning) and read at start-up by `guild run` / `guild serve` (unless --no-tuning): the
 * single process uses it directly, CPU worker processes get it in their Assign options (threads, row blocks).
 * Text, one `key = value` per line, '#' comments:
 *     version = 1
 *     cpu = <brand string the values were measured on>
 *     threads = 16          (threads per worker; 0 = every CPU of the node)
 *     gate_up_rows = 0      (expert_pipe_tuning_t; 0 = automatic)
 *     down_rows = 0
 *     interleave_gate_up = 0  (1: gate and up rows alternate in the workers' shard copies: one stream per task)
 *     layout = auto           (expert_layout_t of the shard copies: auto, plain or packed; packing wins over
 *                              interleave_gate_up where both apply)
 *   version 2 adds the costs the GPU memory plan decides with (gpu-worker/dense/gpu_cost.h), each optional (0 or
 *   absent: the plan's default), measured by `guild optimize` on this machine:
 *     cpu_tflops = 2.1          (the CPU side's routed-expert products at prefill batches, every node)
 *     cpu_gbps = 88             (the CPU side's expert reads at one token, every node)
 *     h2d_gbps = 54.2           (pinned host to device copies; only with a CUDA device)
 *     gpu_tflops = 50           (the device's expert products; not measured by optimize: written by hand)
 *   A version 1 file still reads (without costs).
 * Every choice here changes speed only: the pipeline's results are bit-identical for any of them. */
#ifndef GUILD_CPU_EXPERT_WORKER_EXPERT_TUNING_H
#define GUILD_CPU_EXPERT_WORKER_EXPERT_TUNING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/util/err.h"
#include "cpu-expert-worker/experts/expert_pipe.h"

#define EXPERT_TUNING_VERSION 2

typedef struct expert_tuning {
    char cpu[64];              /* measured on; "" = portable defaults */
    int32_t threads;           /* per worker; 0 = all CPUs of the node */
    expert_pipe_tuning_t pipe; /* row blocks */
    bool interleave_gate_up;   /* expert_shard_new_copy's gate/up rows alternating */
    expert_layout_t layout;    /* expert_shard_new_copy's matrix layout (EXPERT_LAYOUT_AUTO by default) */
    struct {
        double cpu_tflops, cpu_gbps, h2d_gbps, gpu_tflops; /* version 2 costs; 0: not measured */
    } cost;
} expert_tuning_t;

/* The portable defaults (what a worker uses without a file). */
void expert_tuning_default(expert_tuning_t *t);

/* Reads `path`. Fails (message naming the file and line) on a missing file, an unknown key, a bad value or a
 * version this build does not know; *t is left at the defaults then. */
int expert_tuning_load(const char *path, expert_tuning_t *t, guild_err_t *err);

/* Writes `path` (replaced atomically: written to a temporary file, then renamed). */
int expert_tuning_save(const char *path, const expert_tuning_t *t, guild_err_t *err);

/* The tuning file of a model: "<model_path>.tuning" (what `guild optimize -m` writes), into `path` (n bytes).
 * Fails when the name does not fit. */
int expert_tuning_path(const char *model_path, char *path, size_t n, guild_err_t *err);

/* Loads the model's tuning file when there is one: 0 with *found = true and *t filled, or 0 with *found = false
 * and *t the defaults when the file does not exist; -1 (message naming the file) when it exists but cannot be
 * read or is malformed. */
int expert_tuning_load_for_model(const char *model_path, expert_tuning_t *t, bool *found, guild_err_t *err);

/* "threads 8, gate_up_rows 32, down_rows automatic, gate/up interleaved, layout plain (measured on CPU)" into
 * buf (n bytes), for start-up messages (the layout named only when it is not auto). */
void expert_tuning_describe(const expert_tuning_t *t, char *buf, size_t n);

/* What a command does with the model's tuning file (guild run, guild serve): when there is one, prints
 * "<who>: tuning FILE: <description>" on stderr and sets *n_threads (unless threads_given, or the file says
 * 0 = all CPUs), the row blocks, interleave_gate_up and *layout (an expert_layout_t; only when *layout < 0,
 * i.e. not chosen on the command line). No file: nothing changes. -1 (message naming the file, and
 * --no-tuning) when the file is unreadable or malformed. */
int expert_tuning_apply(const char *model_path, const char *who, bool threads_given, int *n_threads,
                        int32_t *gate_up_rows, int32_t *down_rows, bool *interleave_gate_up, int *layout,
                        guild_err_t *err);

#endif
