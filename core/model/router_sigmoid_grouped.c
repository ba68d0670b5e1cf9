/* The core of the grouped sigmoid router (MODEL_ROUTER_SIGMOID_GROUPED): its metadata keys and its tensors.
 *
 * Keys (llama.cpp's names and defaults): ARCH.expert_gating_func (absent, 0 or 2 = sigmoid: this router computes
 * sigmoid gates; softmax (1) and the others are refused), .expert_weights_norm (bool, default false: decides the
 * option renorm where it is in the row's maybe), .expert_weights_scale (default 0: the weights are multiplied by
 * it when it is neither 0 nor 1), the expert groups (model_router_read_groups).
 * Tensors of layer L: blk.L.ffn_gate_inp.weight [n_embd, n_expert] (the logits); with option score bias
 * exp_probs_b.bias [n_expert] f32 (where it is in the row's maybe: on when the file has it).
 */
#include "core/model/part_core.h"

enum { GATING_NONE = 0, GATING_SIGMOID = 2 }; /* llama_expert_gating_func_type */

static int sigmoid_read_config(model_config_t *c, const model_keys_t *k, model_part_t *p)
{
    int32_t gating, norm;
    if (model_key_i32(k, "expert_gating_func", &gating, false, GATING_NONE, 0, 255) < 0 ||
        model_key_i32(k, "expert_weights_norm", &norm, false, 0, 0, 1) < 0 ||
        model_key_f32(k, "expert_weights_scale", &c->expert_weights_scale, false, 0.0f) < 0 ||
        model_router_read_groups(c, k) < 0)
        return -1;
    if (gating != GATING_NONE && gating != GATING_SIGMOID)
        return guild_err_set(k->err, "%s: %s.expert_gating_func = %d: %s's router gates by sigmoid (2)",
                             gguf_path(k->g), k->arch, gating, k->arch);
    if (norm && (p->maybe & MODEL_ROUTER_RENORM))
        p->opts |= MODEL_ROUTER_RENORM;
    if ((p->maybe & MODEL_ROUTER_SCORE_BIAS) && model_part_has_tensor(c, k, p, "exp_probs_b.bias"))
        p->opts |= MODEL_ROUTER_SCORE_BIAS;
    return 0;
}

static int sigmoid_bind(model_layer_t *L, const model_binder_t *b, const model_part_t *p)
{
    const int64_t E = b->c->n_embd, X = b->c->n_expert;
    if (model_bind(&L->router, b, "ffn_gate_inp.weight", MODEL_TENSOR_MATRIX, true, 2, E, X, 1) ||
        ((p->opts & MODEL_ROUTER_SCORE_BIAS) &&
         model_bind(&L->score_bias, b, "exp_probs_b.bias", MODEL_TENSOR_F32, true, 1, X, 1, 1)))
        return -1;
    return 0;
}

const model_part_core_t model_router_sigmoid_grouped_core = {
    .opts = MODEL_ROUTER_RENORM | MODEL_ROUTER_SCORE_BIAS,
    .read_config = sigmoid_read_config,
    .bind = sigmoid_bind,
};
