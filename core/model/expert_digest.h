/* core/model/expert_digest.h — the fingerprint of a shard of routed experts: the bytes a CPU worker computes
 * with, so that the coordinator can tell that a worker's copy of the model (a file on another host, or the bytes
 * it received) holds the same experts as its own, and say which tensor differs when it does not.
 *
 * One entry for the settings the expert computation reads (counts and widths, the FFN part), then one per
 * (layer with an owned expert, gate/up/down tensor, then their biases where the model has them) in that order: a hash64 (core/util/hash64.h) of the
 * tensor's name, type and shape, then of each owned expert's index and the hash64 of its matrix's bytes in the
 * file. Only owned experts count: the rest of the file may differ (another host's copy need not hold them). */
#ifndef GUILD_MODEL_EXPERT_DIGEST_H
#define GUILD_MODEL_EXPERT_DIGEST_H

#include <stddef.h>
#include <stdint.h>

#include "core/model/model.h"
#include "core/util/err.h"
#include "core/util/pool.h"

#define EXPERT_DIGEST_CONFIG "config" /* the name of the settings' entry */

typedef struct expert_digest {
    char tensor[64];   /* "blk.3.ffn_up_exps", or EXPERT_DIGEST_CONFIG */
    uint32_t type;     /* guild_type_t of the tensor (0 for the settings) */
    int64_t ne[4];     /* its shape (0s for the settings) */
    uint32_t first, last; /* the owned experts it covers, lowest and highest (for messages) */
    uint64_t hash;
} expert_digest_t;

/* The digest of model m's experts flagged in owned ([n_layer * n_expert], layer-major; NULL: all) into *out
 * (malloc'd, [*n]; the caller frees). pool (may be NULL) spreads the hashing of the matrices over its threads;
 * the result does not depend on it. -1 with err when owned flags a layer without routed experts, or on out of
 * memory. */
int expert_digest_compute(const model_t *m, const uint8_t *owned, guild_pool_t *pool, expert_digest_t **out,
                          size_t *n, guild_err_t *err);

/* 0 when `got` (a worker's) equals `want` (ours); -1 with err naming the first entry that differs and how
 * ("tensor blk.1.ffn_up_exps (experts 0-7): its bytes differ", "... type q4_K here, q6_K there", "tensor ...
 * missing", "the expert settings differ (counts, widths or the FFN kind)"). */
int expert_digest_compare(const expert_digest_t *want, size_t n_want, const expert_digest_t *got, size_t n_got,
                          guild_err_t *err);

#endif
