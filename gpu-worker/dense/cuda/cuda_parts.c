/* The CUDA backend's tables of part implementations, indexed by kind. A kind without an entry is refused when
 * the backend is created (model_parts_check), naming the architecture and the part. */
#include "gpu-worker/dense/cuda/cuda_parts.h"

#include <string.h>

const cuda_attn_part_t *const cuda_attn_parts[MODEL_ATTN_KINDS] = {
    [MODEL_ATTN_GQA] = &cuda_attn_gqa,
    [MODEL_ATTN_GDN] = &cuda_attn_gdn,
    [MODEL_ATTN_MLA] = &cuda_attn_mla,
};
const cuda_router_part_t *const cuda_router_parts[MODEL_ROUTER_KINDS] = {
    [MODEL_ROUTER_SOFTMAX_TOPK] = &cuda_router_softmax,
    [MODEL_ROUTER_TOPK_SOFTMAX] = &cuda_router_topk_softmax,
    [MODEL_ROUTER_SIGMOID_GROUPED] = &cuda_router_sigmoid_grouped_part,
};
const cuda_ffn_part_t *const cuda_ffn_parts[MODEL_FFN_KINDS] = {
    [MODEL_FFN_DENSE] = &cuda_ffn_dense,
    [MODEL_FFN_MOE] = &cuda_ffn_moe,
};

void cuda_parts_support(model_part_support_t *s)
{
    memset(s, 0, sizeof *s);
    for (int32_t k = 0; k < MODEL_ATTN_KINDS; k++)
        model_part_support_set(s, MODEL_PART_ATTN, k, cuda_attn_parts[k] ? &cuda_attn_parts[k]->opts : NULL);
    for (int32_t k = 0; k < MODEL_ROUTER_KINDS; k++)
        model_part_support_set(s, MODEL_PART_ROUTER, k, cuda_router_parts[k] ? &cuda_router_parts[k]->opts : NULL);
    for (int32_t k = 0; k < MODEL_FFN_KINDS; k++)
        model_part_support_set(s, MODEL_PART_FFN, k, cuda_ffn_parts[k] ? &cuda_ffn_parts[k]->opts : NULL);
}
