/* The core of the MoE FFN (MODEL_FFN_MOE): its metadata keys and its tensors.
 *
 * Keys: ARCH.expert_count, .expert_used_count (both >= 1), .expert_feed_forward_length (default by the
 * architecture's row: feed_forward_length, or feed_forward_length / expert_used_count), with
 * MODEL_FFN_SHEXP_GATED .expert_shared_feed_forward_length (default feed_forward_length); with MODEL_FFN_SHEXP
 * .expert_shared_count (>= 1: the shared expert is that many routed experts wide, n_ff_shexp = count * n_ff_exp,
 * as llama.cpp's glm4moe and deepseek2 size it).
 * Tensors of layer L: blk.L.ffn_gate_exps/ffn_up_exps.weight [n_embd, n_ff_exp, n_expert],
 * ffn_down_exps.weight [n_ff_exp, n_embd, n_expert]; with either shared-expert option ffn_gate_shexp/ffn_up_shexp
 * .weight [n_embd, n_ff_shexp], ffn_down_shexp.weight [n_ff_shexp, n_embd], and with MODEL_FFN_SHEXP_GATED its
 * gate ffn_gate_inp_shexp.weight [n_embd]; with MODEL_FFN_SWIGLU_OAI the experts' biases
 * ffn_gate_exps/ffn_up_exps.bias [n_ff_exp, n_expert] and ffn_down_exps.bias [n_embd, n_expert], and the
 * activation's alpha 1.702 and limit 7, which llama.cpp's build_moe_ffn fixes for gpt-oss (no metadata key
 * carries them).
 * The router's tensors are the router part's (router_softmax.c, router_topk_softmax.c, ...).
 */
#include "core/model/arch.h"
#include "core/model/part_core.h"

static int moe_read_config(model_config_t *c, const model_keys_t *k, model_part_t *p)
{
    const char *path = gguf_path(k->g);
    guild_err_t *err = k->err;
    if (model_key_i32(k, "expert_count", &c->n_expert, true, 0, 0, MODEL_MAX_EXPERTS) < 0 ||
        model_key_i32(k, "expert_used_count", &c->n_expert_used, true, 0, 0, MODEL_MAX_EXPERTS) < 0)
        return -1;
    if (c->n_expert < 1 || c->n_expert_used < 1)
        return guild_err_set(err, "%s: %s.expert_count = %d, expert_used_count = %d: Guild runs MoE models only "
                             "(both must be >= 1)", path, k->arch, c->n_expert, c->n_expert_used);
    if (c->n_expert_used > c->n_expert)
        return guild_err_set(err, "%s: expert_used_count %d > expert_count %d", path, c->n_expert_used,
                             c->n_expert);
    const int32_t ff_exp_def = model_arch_info(c->arch)->expert_ff_default == MODEL_EXPERT_FF_PER_USED
                                   ? c->n_ff / c->n_expert_used
                                   : c->n_ff;
    if (model_key_i32(k, "expert_feed_forward_length", &c->n_ff_exp, false, ff_exp_def, 1, MODEL_MAX_WIDTH) < 0)
        return -1;
    if (c->n_ff_exp < 1)
        return guild_err_set(err, "%s: metadata key %s.expert_feed_forward_length (or feed_forward_length) is "
                             "missing", path, k->arch);
    if (p->opts & MODEL_FFN_SHEXP_GATED) {
        if (model_key_i32(k, "expert_shared_feed_forward_length", &c->n_ff_shexp, false, c->n_ff, 1,
                          MODEL_MAX_WIDTH) < 0)
            return -1;
        if (c->n_ff_shexp < 1)
            return guild_err_set(err, "%s: metadata key %s.expert_shared_feed_forward_length (or "
                                 "feed_forward_length) is missing", path, k->arch);
    }
    if (p->opts & MODEL_FFN_SHEXP) {
        if (model_key_i32(k, "expert_shared_count", &c->n_expert_shared, true, 0, 0, MODEL_MAX_EXPERTS) < 0)
            return -1;
        if (c->n_expert_shared < 1)
            return guild_err_set(err, "%s: %s.expert_shared_count = 0: %s's MoE layers have a shared expert", path,
                                 k->arch, k->arch);
        if ((int64_t)c->n_expert_shared * c->n_ff_exp > MODEL_MAX_WIDTH)
            return guild_err_set(err, "%s: the shared expert (%d x %d) is too wide", path, c->n_expert_shared,
                                 c->n_ff_exp);
        c->n_ff_shexp = c->n_expert_shared * c->n_ff_exp;
    }
    if (p->opts & MODEL_FFN_SWIGLU_OAI) {
        c->swiglu_alpha = 1.702f;
        c->swiglu_limit = 7.0f;
    }
    return 0;
}

/* An expert bias tensor [n, n_expert]: expert e's bias is "matrix" e (weights.h). */
static int bind_expert_bias(model_tensor_t *t, const model_binder_t *b, const char *name, int64_t n)
{
    if (model_bind(t, b, name, MODEL_TENSOR_F32, true, 2, n, b->c->n_expert, 1))
        return -1;
    t->mat_bytes = t->row_bytes;
    return 0;
}

static int moe_bind(model_layer_t *L, const model_binder_t *b, const model_part_t *p)
{
    const model_config_t *c = b->c;
    const int64_t E = c->n_embd, F = c->n_ff_exp, X = c->n_expert;
    if (model_bind(&L->gate_exps, b, "ffn_gate_exps.weight", MODEL_TENSOR_MATRIX, true, 3, E, F, X) ||
        model_bind(&L->up_exps, b, "ffn_up_exps.weight", MODEL_TENSOR_MATRIX, true, 3, E, F, X) ||
        model_bind(&L->down_exps, b, "ffn_down_exps.weight", MODEL_TENSOR_MATRIX, true, 3, F, E, X))
        return -1;
    if ((p->opts & MODEL_FFN_SHEXP_GATED) &&
        model_bind(&L->shexp_gate_inp, b, "ffn_gate_inp_shexp.weight", MODEL_TENSOR_MATRIX, true, 1, E, 1, 1))
        return -1;
    if (p->opts & (MODEL_FFN_SHEXP_GATED | MODEL_FFN_SHEXP)) {
        const int64_t S = c->n_ff_shexp;
        if (model_bind(&L->shexp_gate, b, "ffn_gate_shexp.weight", MODEL_TENSOR_MATRIX, true, 2, E, S, 1) ||
            model_bind(&L->shexp_up, b, "ffn_up_shexp.weight", MODEL_TENSOR_MATRIX, true, 2, E, S, 1) ||
            model_bind(&L->shexp_down, b, "ffn_down_shexp.weight", MODEL_TENSOR_MATRIX, true, 2, S, E, 1))
            return -1;
    }
    if ((p->opts & MODEL_FFN_SWIGLU_OAI) && (bind_expert_bias(&L->gate_exps_b, b, "ffn_gate_exps.bias", F) ||
                                             bind_expert_bias(&L->up_exps_b, b, "ffn_up_exps.bias", F) ||
                                             bind_expert_bias(&L->down_exps_b, b, "ffn_down_exps.bias", E)))
        return -1;
    return 0;
}

const model_part_core_t model_ffn_moe_core = {
    .opts = MODEL_FFN_SHEXP_GATED | MODEL_FFN_SHEXP | MODEL_FFN_SWIGLU_OAI,
    .read_config = moe_read_config,
    .bind = moe_bind,
};
