/* cpu-expert-worker/experts/expert_exec.h — the expert side of one MoE exchange: for the (token, slot) pairs whose
 * expert a shard owns, the unweighted expert output
 *     y[t][k] = down( silu(gate x[t]) * up x[t] )     with the expert ids[t][k] of layer `layer`
 * (or the model's other activation, with the experts' biases: expert_mats_t, core/model/activation.h)
 * x is quantized to each matrix's activation type (quant_type_info(type)->dot_type), the hidden vector
 * silu(g) * u (float32) to down's; every dot product goes through expert_matmul. Each y[t][k] depends only on
 * (layer, expert, x[t]): the same bits whichever shard, thread count or batch computed it.
 *
 * Pairs are grouped by expert so a weight row is read once for all the tokens routed to it; threads split the
 * work by (expert, block of output rows).
 */
#ifndef GUILD_CPU_EXPERT_WORKER_EXPERT_EXEC_H
#define GUILD_CPU_EXPERT_WORKER_EXPERT_EXEC_H

#include <stdint.h>

#include "core/util/err.h"
#include "core/util/pool.h"
#include "cpu-expert-worker/experts/expert_shard.h"

typedef struct expert_exec expert_exec_t;

/* shard and pool are borrowed and must outlive the executor. -1 on out of memory. */
int expert_exec_new(expert_exec_t **out, const expert_shard_t *shard, guild_pool_t *pool, guild_err_t *err);

/* Frees; sets *e to NULL. NULL-safe. */
void expert_exec_destroy(expert_exec_t **e);

/* x: [n_tokens][n_embd]; ids: [n_tokens][n_expert_used]; y: [n_tokens][n_expert_used][n_embd]. Writes y[t][k] for
 * every pair whose expert the shard owns and leaves the others (and skipped pairs, id < 0) untouched. Returns
 * the number of pairs written, or -1 with a message (an expert id >= n_expert, a layer out of range, out of
 * memory for the scratch). */
int64_t expert_exec_run(expert_exec_t *e, int32_t layer, int32_t n_tokens, const float *x, const int32_t *ids,
                        float *y, guild_err_t *err);

#endif
