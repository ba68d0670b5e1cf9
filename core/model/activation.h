/* core/model/activation.h — the activation functions of the supported architectures, one definition shared by
 * the dense side (shared expert, router gate) and every routed-expert executor. */
#ifndef GUILD_MODEL_ACTIVATION_H
#define GUILD_MODEL_ACTIVATION_H

#include <math.h>
#include <stdbool.h>

#include "core/model/config.h"

/* silu(x) = x / (1 + expf(-x)), as ggml's ggml_silu_f32. */
static inline float model_silu(float x)
{
    return x / (1.0f + expf(-x));
}

/* sigmoid(x) = 1 / (1 + expf(-x)). */
static inline float model_sigmoid(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

/* gpt-oss's clamped SwiGLU, as ggml's swiglu_oai: x = min(g, limit), y = clamp(u, -limit, limit),
 * (x / (1 + expf(alpha * -x))) * (y + 1). The comparisons are std::min's and std::clamp's (a NaN g or u passes
 * through). */
static inline float model_swiglu_oai(float g, float u, float alpha, float limit)
{
    const float x = limit < g ? limit : g;
    const float y = u < -limit ? -limit : (limit < u ? limit : u);
    return (x / (1.0f + expf(alpha * (-x)))) * (y + 1.0f);
}

/* How a routed expert makes its hidden vector h from its gate and up projections g and u, and whether its
 * projections have biases (added to g, u and the down projection before anything else reads them). */
typedef struct model_expert_act {
    bool oai;           /* h = model_swiglu_oai(g, u, alpha, limit), with biases (FFN option clamped swiglu);
                           else h = silu(g) * u, without */
    float alpha, limit;
} model_expert_act_t;

/* The routed experts' activation of the model (its MoE FFN's options). */
static inline model_expert_act_t model_expert_act_of(const model_config_t *c)
{
    model_expert_act_t a = {false, 0.0f, 0.0f};
    if (c->ffn.kind == MODEL_FFN_MOE && (c->ffn.opts & MODEL_FFN_SWIGLU_OAI)) {
        a.oai = true;
        a.alpha = c->swiglu_alpha;
        a.limit = c->swiglu_limit;
    }
    return a;
}

/* h = act(g, u): silu(g) * u, or the clamped SwiGLU. */
static inline float model_expert_act(const model_expert_act_t *a, float g, float u)
{
    return a->oai ? model_swiglu_oai(g, u, a->alpha, a->limit) : model_silu(g) * u;
}

#endif
