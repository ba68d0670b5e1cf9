/* The core of the softmax-then-top-k router (MODEL_ROUTER_SOFTMAX_TOPK): its metadata keys and its tensor.
 *
 * Keys: ARCH.expert_weights_scale (optional: the weights are multiplied by it when it is neither 0 nor 1);
 * .expert_weights_norm (bool, default false: decides the option renorm where it is in the row's maybe);
 * .expert_group_count (above 1 refused: group-limited selection is the sigmoid router's only).
 * Tensors of layer L: blk.L.ffn_gate_inp.weight [n_embd, n_expert] (the logits).
 */
#include "core/model/part_core.h"

static int router_read_config(model_config_t *c, const model_keys_t *k, model_part_t *p)
{
    int32_t norm, groups;
    if (model_key_f32(k, "expert_weights_scale", &c->expert_weights_scale, false, 0.0f) < 0 ||
        model_key_i32(k, "expert_weights_norm", &norm, false, 0, 0, 1) < 0 ||
        model_key_i32(k, "expert_group_count", &groups, false, 0, 0, MODEL_MAX_EXPERTS) < 0)
        return -1;
    if (norm && (p->maybe & MODEL_ROUTER_RENORM))
        p->opts |= MODEL_ROUTER_RENORM;
    if (groups > 1)
        return guild_err_set(k->err, "%s: %s.expert_group_count = %d: expert groups with softmax gating are not "
                             "implemented", gguf_path(k->g), k->arch, groups);
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
