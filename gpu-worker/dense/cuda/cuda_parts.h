/* gpu-worker/dense/cuda/cuda_parts.h — internal: the CUDA backend's implementation of each part kind
 * (core/model/parts.h), one file per kind named after it (the CPU backend's counterpart is
 * gpu-worker/dense/cpu/cpu_parts.h), and the tables the layer program (cuda_layer.c) indexes by kind.
 *
 * A part only enqueues kernels on b->stream (a MoE FFN also exchanges with the routed-expert bridge): it reads
 * b->xn, the normed input of its block, and adds its output to b->x. Each one is its CPU counterpart step for
 * step, one kernel per step.
 */
#ifndef GUILD_GPU_WORKER_CUDA_PARTS_H
#define GUILD_GPU_WORKER_CUDA_PARTS_H

#include "core/model/parts.h"
#include "gpu-worker/dense/cuda/cuda_state.h"

typedef struct cuda_attn_part {
    uint32_t opts; /* the options of its kind it implements */
    /* Layer il, the n rows of the batch (positions from b->d_pos): writes each row's K/V (or state), then
     * x[t] += attention output. -1 with a message (the layer program puts "layer IL: " before it). */
    int (*forward)(cuda_backend_t *b, const model_part_t *p, int32_t il, int32_t n, guild_err_t *err);
} cuda_attn_part_t;

typedef struct cuda_router_part {
    uint32_t opts;
    bool counts; /* route() also counts the routing into b->route_counts (when set): no cuda_route_count after it */
    /* Layer il, the n rows: from xn, b->ids[t][0..n_expert_used) (slot order) and b->route_w[t][...]. */
    int (*route)(cuda_backend_t *b, const model_part_t *p, int32_t il, int32_t n, guild_err_t *err);
} cuda_router_part_t;

typedef struct cuda_ffn_part {
    uint32_t opts;
    /* Layer il, the n rows: x[t] += ffn(xn[t]); a MoE FFN asks lp->router's part for the experts. */
    int (*forward)(cuda_backend_t *b, const model_layer_parts_t *lp, int32_t il, int32_t n, guild_err_t *err);
} cuda_ffn_part_t;

extern const cuda_attn_part_t cuda_attn_gqa;         /* attn_gqa.c */
extern const cuda_attn_part_t cuda_attn_gdn;         /* attn_gdn.c */
extern const cuda_attn_part_t cuda_attn_mla;         /* attn_mla.c */
extern const cuda_router_part_t cuda_router_softmax; /* router_softmax.c */
extern const cuda_router_part_t cuda_router_topk_softmax; /* router_topk_softmax.c */
extern const cuda_ffn_part_t cuda_ffn_moe;           /* ffn_moe.c */
extern const cuda_router_part_t cuda_router_sigmoid_grouped_part; /* router_sigmoid_grouped.c */
extern const cuda_ffn_part_t cuda_ffn_dense;         /* ffn_dense.c */

/* Whether layer il's softmax router (router_softmax.c) takes the FFN's block norm into its launch for n rows
 * (cuda_router_fused_norm): the layer program then leaves the norm in b->norm_defer instead of launching it. */
bool cuda_router_softmax_takes_norm(const cuda_backend_t *b, const model_layer_parts_t *lp, int32_t il, int32_t n);

/* The implementations by kind (NULL: none). cuda_parts_support lets the backend refuse at create a model one of
 * whose parts has none, so the layer program indexes them without a check. */
extern const cuda_attn_part_t *const cuda_attn_parts[MODEL_ATTN_KINDS];
extern const cuda_router_part_t *const cuda_router_parts[MODEL_ROUTER_KINDS];
extern const cuda_ffn_part_t *const cuda_ffn_parts[MODEL_FFN_KINDS];

/* What the CUDA backend implements, for model_parts_check. */
void cuda_parts_support(model_part_support_t *s);

#endif
