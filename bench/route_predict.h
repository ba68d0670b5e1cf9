/* bench/route_predict.h — how well a MoE layer's routed experts can be known before its router runs (the
 * question behind an expert prefetch that overlaps the CPU worker with the GPU's dense step: while the device
 * computes layer l+1's attention and router, the worker could pull layer l+1's likely experts into its cache).
 *
 * An observer executor: it wraps the process's host executor (moe_exec.h), hands every batch on unchanged, and
 * for each (layer, token) compares the router's true choice with three predictions of it:
 *   ROUTE_PREDICT_PREGATE  layer l+1's router on layer l's FFN input renormed with layer l+1's ffn_norm:
 *                          xn_l * ffn_norm_{l+1} / ffn_norm_l (RMSNorm is scale-free, so this is
 *                          rmsnorm(h, ffn_norm_{l+1}) of the residual h that entered layer l's FFN, up to eps)
 *   ROUTE_PREDICT_PREGATE_RAW  layer l+1's router on xn_l as it is (layer l's norm weights)
 *   ROUTE_PREDICT_PREV     the experts layer l+1 chose for the previous token (row t-1, or the previous batch's
 *                          last row)
 * Each predictor's list is ranked (the router's slot order: its best first), so a prefetch of only the m most
 * likely experts is scored too: hits(m) = how many of the first m predicted are among the true top-k.
 * The router is the backend's own (cpu_linear, then the cpu router kernel of the layer's kind), so ties and
 * groups resolve as the true routing does. Routers of kind softmax-top-k and top-k-softmax; a model with another
 * is refused. Rows of a batch are tokens in order (one sequence). Costs nothing unless installed. */
#ifndef GUILD_BENCH_ROUTE_PREDICT_H
#define GUILD_BENCH_ROUTE_PREDICT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/model/model.h"
#include "core/model/moe_exec.h"
#include "core/util/pool.h"

enum { ROUTE_PREDICT_PREGATE, ROUTE_PREDICT_PREGATE_RAW, ROUTE_PREDICT_PREV, ROUTE_PREDICT_KINDS };

typedef struct route_predict route_predict_t;

/* An observer of model m's routing around `inner` (a host executor, borrowed: it must outlive the observer),
 * for batches of up to n_batch rows; pool: threads for the predicted routers' products (borrowed). Counting
 * starts off. -1 with a message for a router kind it cannot predict, or out of memory. */
int route_predict_new(route_predict_t **out, const model_t *m, moe_exec_t *inner, guild_pool_t *pool,
                      int32_t n_batch, guild_err_t *err);

/* Frees; nulls *rp. NULL-safe. The executor it gave out dies with it. */
void route_predict_destroy(route_predict_t **rp);

/* The executor to give the backend (backend_options_t.moe): the observer's own. */
moe_exec_t *route_predict_exec(route_predict_t *rp);

/* Whether the batches from now on are counted (the previous token's routing is tracked either way). */
void route_predict_counting(route_predict_t *rp, bool on);

/* For layer il and predictor kind: the tokens scored (a token is scored at layer il when the predictor had a
 * prediction for it: PREGATE* need layer il-1 to be a MoE layer of the same batch, PREV a previous token), and
 * of those tokens' true experts, how many were among the predictor's first m (1 <= m <= experts_used). */
uint64_t route_predict_tokens(const route_predict_t *rp, int32_t il, int kind);
uint64_t route_predict_hits(const route_predict_t *rp, int32_t il, int kind, int32_t m);

/* Name of a predictor kind ("pregate", "pregate_raw", "prev"). */
const char *route_predict_kind_name(int kind);

#endif
