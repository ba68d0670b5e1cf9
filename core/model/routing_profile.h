/* core/model/routing_profile.h — how often the router chose each expert of each MoE layer: the counts the GPU
 * memory plan (gpu-worker/dense/gpu_plan.h) fills the device with, hottest (layer, expert) pairs first.
 *
 * Collected by `guild optimize` (a calibration prompt) or by `guild run/serve --record-routing FILE` (the
 * requests served), stored beside the model's tuning file as MODEL.gguf.routing and read by guild run / serve /
 * plan / bench run unless --no-tuning. Profiles accumulate: both writers add their counts to the file's when it
 * exists (routing_profile_merge_file; `guild optimize --fresh-profile` replaces it, and deleting the file starts
 * over). A text file:
 *
 *     # comments
 *     version = 1
 *     layers = 48              the model's MoE layers (block_count)
 *     experts = 128            routed experts per layer
 *     experts_used = 8         experts per token
 *     tokens = 4096            tokens counted: each adds experts_used pairs to every layer it went through
 *     layer 0 = 31 0 977 ...   `experts` counts of routed (token, slot) pairs, expert 0 first
 *     ...                      one line per layer, each layer once
 *
 * Every key is required once; a line, key or value that is not one of these, a count that is not a decimal
 * integer below 2^63, a layer's pairs above tokens * experts_used, a missing layer, or a last line without its
 * newline (a truncated file) is an error naming the file and the line. A profile is for a model of the same shape
 * (routing_profile_check).
 *
 * Counts saturate: a sum that would pass ROUTING_PROFILE_MAX_COUNT (a pair count) or ROUTING_PROFILE_MAX_TOKENS
 * stays at that limit (routing_profile_add says so); `tokens` at its limit means "at least", and the pairs-per-
 * token check is then not made.
 */
#ifndef GUILD_MODEL_ROUTING_PROFILE_H
#define GUILD_MODEL_ROUTING_PROFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/model/config.h"
#include "core/util/err.h"

#define ROUTING_PROFILE_VERSION 1
#define ROUTING_PROFILE_MAX_EXPERTS 4096
#define ROUTING_PROFILE_MAX_LAYERS 4096
#define ROUTING_PROFILE_MAX_COUNT ((UINT64_C(1) << 63) - 1) /* a pair count's limit (the file's counts are < 2^63) */
#define ROUTING_PROFILE_MAX_TOKENS (UINT64_C(1) << 62)      /* the tokens' limit */

typedef struct routing_profile {
    int32_t n_layer, n_expert, n_used;
    uint64_t tokens;  /* tokens counted */
    uint64_t *count;  /* [n_layer * n_expert]: pairs routed to (layer, expert) */
} routing_profile_t;

/* An empty profile (every count 0) of that shape. -1 with a message on a bad shape or out of memory. */
int routing_profile_new(routing_profile_t **out, int32_t n_layer, int32_t n_expert, int32_t n_used,
                        guild_err_t *err);

/* Frees; nulls *p. NULL-safe. */
void routing_profile_destroy(routing_profile_t **p);

/* Reads `path` (the format above). -1 with a message naming the file and line when it is missing, unreadable
 * or malformed. */
int routing_profile_load(routing_profile_t **out, const char *path, guild_err_t *err);

/* Writes `path`, replaced atomically (a temporary file renamed over it). */
int routing_profile_save(const routing_profile_t *p, const char *path, guild_err_t *err);

/* 0 when p (read from `path`, for the message) has model configuration c's shape; else -1 naming both. */
int routing_profile_check(const routing_profile_t *p, const model_config_t *c, const char *path, guild_err_t *err);

/* Adds counts[n_layer * n_expert] of `tokens` more tokens, saturating: 0, or 1 with a message in err when a sum
 * stopped at its limit (ROUTING_PROFILE_MAX_COUNT / _MAX_TOKENS; the others are exact). Never fails. */
int routing_profile_add(routing_profile_t *p, const uint64_t *counts, uint64_t tokens, guild_err_t *err);

/* 0 when `path` does not exist or holds a readable profile of c's shape; else -1 with the message of
 * routing_profile_load or of the shape check naming the profile and the model (model_path; may be NULL). */
int routing_profile_check_file(const char *path, const model_config_t *c, const char *model_path, guild_err_t *err);

typedef struct routing_profile_merge {
    bool created;           /* there was no file (or replace): the file holds these counts only */
    bool saturated;         /* a sum stopped at its limit (routing_profile_add) */
    uint64_t tokens_before; /* the file's tokens before (0 when created) */
    uint64_t tokens_after;  /* its tokens now */
} routing_profile_merge_t;

/* Adds counts[c->n_layer * c->n_expert] of `tokens` tokens (a recording of the model at model_path, shape c) to
 * the profile at `path`: read and checked first (routing_profile_check_file), then the sum written atomically
 * (routing_profile_save). Created when absent; `replace`: the old file is neither read nor kept. -1 with a message
 * when the old file is unreadable, malformed or another model's (then it is left exactly as it was) or when the
 * new one cannot be written (the old one stays). info (may be NULL) says what was done. */
int routing_profile_merge_file(const char *path, const model_config_t *c, const char *model_path,
                               const uint64_t *counts, uint64_t tokens, bool replace, routing_profile_merge_t *info,
                               guild_err_t *err);

/* "<model_path>.routing" into path[n]. -1 when it does not fit. */
int routing_profile_path(const char *model_path, char *path, size_t n, guild_err_t *err);

/* The model's profile when there is one: 0 with *out set (NULL when the file does not exist), -1 (message
 * naming the file) when it exists but is unreadable, malformed or of another model's shape. */
int routing_profile_load_for_model(const char *model_path, const model_config_t *c, routing_profile_t **out,
                                   guild_err_t *err);

/* Share of p's routed pairs whose expert is flagged in resident[n_layer * n_expert] (0 without pairs). */
double routing_profile_share(const routing_profile_t *p, const uint8_t *resident);

#endif
