/* The core of the softmax-then-top-k router (MODEL_ROUTER_SOFTMAX_TOPK): its metadata keys and its tensor.
 *
 * Keys: ARCH.expert_weights_scale (optional: the weights are multiplied by it when it is neither 0 nor 1);
 * .expert_weights_norm (bool, default false: decides the option renorm where it is in the row's maybe);
 * the expert groups (model_router_read_groups: llama.cpp limits the choice to the best groups whatever the
 * gating, DeepSeek-V2's 8 groups of 20 with 3 used when its file says so).
 * Tensors of layer L: blk.L.ffn_gate_inp.weight [n_embd, n_expert] (the logits).
 */
#include "core/model/part_core.h"

static int router_read_config(model_config_t *c, const model_keys_t *k, model_part_t *p)
{
    int32_t norm;
    if (model_key_f32(k, "expert_weights_scale", &c->expert_weights_scale, false, 0.0f) < 0 ||
        model_key_i32(k, "expert_weights_norm", &norm, false, 0, 0, 1) < 0 || model_router_read_groups(c, k) < 0)
        return -1;
    if (norm && (p->maybe & MODEL_ROUTER_RENORM))
        p->opts |= MODEL_ROUTER_RENORM;
    return 0;
}

static int router_bind(model_layer_t *L, const model_binder_t *b, const model_part_t *p)
{
    (void)p;
    return model_bind(&L->router, b, "ffn_gate_inp.weight", MODEL_TENSOR_MATRIX, true, 2, b->c->n_embd,
                      b->c->n_expert, 1);
}

const model_part_core_t model_router_softmax_core = {
    .opts = MODEL_ROUTER_RENORM,
    .read_config = router_read_config,
    .bind = router_bind,
};
