/* gpu-worker/dense/cpu/cpu_parts.h — internal: the CPU backend's implementation of each part kind
 * (core/model/parts.h), one file per kind named after it, and the tables the layer program (cpu_layer.c)
 * indexes by kind.
 *
 * A part works on the batch in the backend state (cpu_state.h): b->x the residual stream, b->xn the normed
 * input of its block (the layer program computes it), and adds its output to b->x. Work is split between
 * threads by whole output vectors (tokens, heads or row blocks), never inside a sum.
 */
#ifndef GUILD_GPU_WORKER_CPU_PARTS_H
#define GUILD_GPU_WORKER_CPU_PARTS_H

#include "core/model/parts.h"
#include "gpu-worker/dense/cpu/cpu_state.h"

typedef struct cpu_attn_part {
    uint32_t opts; /* the options of its kind it implements */
    /* Layer il, the n rows of the batch: reads xn, writes each row's K/V (or state) at its position tok_pos[t] of
     * its sequence tok_seq[t];
     * then for the kept rows keep[0..n_keep) (keep NULL: all n rows, n_keep == n), x[j] += the attention output
     * of row keep[j] (the layer program has already moved x's kept rows to 0..n_keep-1). -1 with a message (the
     * layer program puts "layer IL: " before it). */
    int (*forward)(cpu_backend_t *b, const model_part_t *p, int32_t il, int32_t n, const int32_t *keep,
                   int32_t n_keep, guild_err_t *err);
} cpu_attn_part_t;

typedef struct cpu_router_part {
    uint32_t opts;
    /* Layer il, the n rows: from xn, b->ids[t][0..n_expert_used) (slot order) and b->weights[t][...]. */
    void (*route)(cpu_backend_t *b, const model_part_t *p, int32_t il, int32_t n);
} cpu_router_part_t;

typedef struct cpu_ffn_part {
    uint32_t opts;
    /* Layer il, the n rows: x[t] += ffn(xn[t]); a MoE FFN asks lp->router's part for the experts. -1 with a
     * message (the expert executor failed; the layer program puts "layer IL: " before it). */
    int (*forward)(cpu_backend_t *b, const model_layer_parts_t *lp, int32_t il, int32_t n, guild_err_t *err);
} cpu_ffn_part_t;

extern const cpu_attn_part_t cpu_attn_gqa;         /* attn_gqa.c */
extern const cpu_attn_part_t cpu_attn_mla;         /* attn_mla.c */
extern const cpu_attn_part_t cpu_attn_gdn;         /* attn_gdn.c */
extern const cpu_router_part_t cpu_router_softmax; /* router_softmax.c */
extern const cpu_router_part_t cpu_router_topk_softmax; /* router_topk_softmax.c */
extern const cpu_ffn_part_t cpu_ffn_moe;           /* ffn_moe.c */
extern const cpu_router_part_t cpu_router_sigmoid_grouped_part; /* router_sigmoid_grouped.c */
extern const cpu_ffn_part_t cpu_ffn_dense;         /* ffn_dense.c */

/* The implementations by kind (NULL: none). cpu_parts_support lets the backend refuse at create a model one of
 * whose parts has none, so the layer program indexes them without a check. */
extern const cpu_attn_part_t *const cpu_attn_parts[MODEL_ATTN_KINDS];
extern const cpu_router_part_t *const cpu_router_parts[MODEL_ROUTER_KINDS];
extern const cpu_ffn_part_t *const cpu_ffn_parts[MODEL_FFN_KINDS];

/* The bytes of per-thread scratch the MLA part needs for batches of n_batch rows (attn_mla.c; cpu_state.h:
 * mla_scratch). */
size_t cpu_attn_mla_scratch_bytes(const model_config_t *c, const model_weights_t *w, int32_t n_batch);

/* What the CPU backend implements, for model_parts_check. */
void cpu_parts_support(model_part_support_t *s);

/* row_pos and row_seq of the rows that go on: keep[0..n_keep) of the batch's, or (keep NULL) its n rows. */
void cpu_rows_where(cpu_backend_t *b, int32_t n, const int32_t *keep, int32_t n_keep);

/* Moves rows keep[j] of buf (width floats each) to rows j, through scratch (n_keep * width floats). */
void cpu_gather_rows(float *buf, int64_t width, const int32_t *keep, int32_t n_keep, float *scratch);

#endif
