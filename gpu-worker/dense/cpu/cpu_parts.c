/* The CPU backend's tables of part implementations, indexed by kind. A kind without an entry is refused when
 * the backend is created (model_parts_check), naming the architecture and the part. */
#include "gpu-worker/dense/cpu/cpu_parts.h"

#include <string.h>

const cpu_attn_part_t *const cpu_attn_parts[MODEL_ATTN_KINDS] = {
    [MODEL_ATTN_GQA] = &cpu_attn_gqa,
    [MODEL_ATTN_MLA] = &cpu_attn_mla,
    [MODEL_ATTN_GDN] = &cpu_attn_gdn,
};
const cpu_router_part_t *const cpu_router_parts[MODEL_ROUTER_KINDS] = {
    [MODEL_ROUTER_SOFTMAX_TOPK] = &cpu_router_softmax,
    [MODEL_ROUTER_TOPK_SOFTMAX] = &cpu_router_topk_softmax,
    [MODEL_ROUTER_SIGMOID_GROUPED] = &cpu_router_sigmoid_grouped_part,
};
const cpu_ffn_part_t *const cpu_ffn_parts[MODEL_FFN_KINDS] = {
    [MODEL_FFN_DENSE] = &cpu_ffn_dense,
    [MODEL_FFN_MOE] = &cpu_ffn_moe,
};

void cpu_parts_support(model_part_support_t *s)
{
    memset(s, 0, sizeof *s);
    for (int32_t k = 0; k < MODEL_ATTN_KINDS; k++)
        model_part_support_set(s, MODEL_PART_ATTN, k, cpu_attn_parts[k] ? &cpu_attn_parts[k]->opts : NULL);
    for (int32_t k = 0; k < MODEL_ROUTER_KINDS; k++)
        model_part_support_set(s, MODEL_PART_ROUTER, k, cpu_router_parts[k] ? &cpu_router_parts[k]->opts : NULL);
    for (int32_t k = 0; k < MODEL_FFN_KINDS; k++)
        model_part_support_set(s, MODEL_PART_FFN, k, cpu_ffn_parts[k] ? &cpu_ffn_parts[k]->opts : NULL);
}
