/* The core of the top-k-then-softmax router (MODEL_ROUTER_TOPK_SOFTMAX, gpt-oss): its metadata keys and its
 * tensors.
 *
 * Keys: ARCH.expert_weights_scale (optional: the weights are multiplied by it when it is neither 0 nor 1).
 * Tensors of layer L: blk.L.ffn_gate_inp.weight [n_embd, n_expert] (the logits); with MODEL_ROUTER_LOGIT_BIAS
 * ffn_gate_inp.bias [n_expert], added to the logits before the choice.
 */
#include "core/model/part_core.h"

static int topk_softmax_read_config(model_config_t *c, const model_keys_t *k, model_part_t *p)
{
    (void)p;
    return model_key_f32(k, "expert_weights_scale", &c->expert_weights_scale, false, 0.0f);
}

static int topk_softmax_bind(model_layer_t *L, const model_binder_t *b, const model_part_t *p)
{
    const int64_t E = b->c->n_embd, X = b->c->n_expert;
    if (model_bind(&L->router, b, "ffn_gate_inp.weight", MODEL_TENSOR_MATRIX, true, 2, E, X, 1))
        return -1;
    if ((p->opts & MODEL_ROUTER_LOGIT_BIAS) &&
        model_bind(&L->router_bias, b, "ffn_gate_inp.bias", MODEL_TENSOR_F32, true, 1, X, 1, 1))
        return -1;
    return 0;
}

const model_part_core_t model_router_topk_softmax_core = {
    .opts = MODEL_ROUTER_LOGIT_BIAS,
    .read_config = topk_softmax_read_config,
    .bind = topk_softmax_bind,
};
