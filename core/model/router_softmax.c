/* The core of the softmax-then-top-k router (MODEL_ROUTER_SOFTMAX_TOPK): its metadata keys and its tensor.
 *
 * Keys: ARCH.expert_weights_scale (optional: the weights are multiplied by it when it is neither 0 nor 1).
 * Tensors of layer L: blk.L.ffn_gate_inp.weight [n_embd, n_expert] (the logits).
 */
#include "core/model/part_core.h"

static int router_read_config(model_config_t *c, const model_keys_t *k, model_part_t *p)
{
    (void)p;
    return model_key_f32(k, "expert_weights_scale", &c->expert_weights_scale, false, 0.0f);
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
