/* core/model/activation.h — the activation functions of the supported architectures, one definition shared by
 * the dense side (shared expert, router gate) and every routed-expert executor. */
#ifndef GUILD_MODEL_ACTIVATION_H
#define GUILD_MODEL_ACTIVATION_H

#include <math.h>

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

#endif
