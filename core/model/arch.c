#include "core/model/arch.h"

#include <string.h>

#include "core/util/err.h"

#define GQA(o) {MODEL_ATTN_GQA, (o)}
#define MLA(o) {MODEL_ATTN_MLA, (o)}
#define GDN(o) {MODEL_ATTN_GDN, (o)}
#define SOFTMAX_TOPK(o) {MODEL_ROUTER_SOFTMAX_TOPK, (o)}
#define SIGMOID_GROUPED(o) {MODEL_ROUTER_SIGMOID_GROUPED, (o)}
#define TOPK_SOFTMAX(o) {MODEL_ROUTER_TOPK_SOFTMAX, (o)}
#define MOE(o) {MODEL_FFN_MOE, (o)}
#define DENSE(o) {MODEL_FFN_DENSE, (o)}

/* Gated delta net layers between gated full-attention ones (llama.cpp's qwen3next.cpp, qwen35moe.cpp); the FFN's
 * norm is post_attention_norm. qwen35moe differs in the GDN's tensor layout and head mapping (its options) and
 * rotates with IMRoPE, which for text positions is NEOX RoPE (attn_gqa.c reads rope.dimension_sections). */
#define QWEN3NEXT_ROW(arch_name, gdn_opts, mtp)                                                                   \
    {                                                                                                             \
        .name = arch_name, .layout = MODEL_LAYOUT_HYBRID,                                                         \
        .attn = GQA(MODEL_GQA_ROPE_NEOX | MODEL_GQA_ROPE_PARTIAL | MODEL_GQA_QK_NORM_HEAD | MODEL_GQA_OUT_GATE), \
        .attn_linear = GDN(gdn_opts), .router = SOFTMAX_TOPK(MODEL_ROUTER_RENORM),                                \
        .ffn = MOE(MODEL_FFN_SHEXP_GATED), .expert_ff_default = MODEL_EXPERT_FF_PER_USED,                         \
        .ffn_norm = "post_attention_norm", .nextn = mtp,                                                          \
    }

static const model_arch_info_t arch_table[MODEL_ARCH_COUNT] = {
    [MODEL_ARCH_QWEN3MOE] = {
        .name = "qwen3moe",
        .attn = GQA(MODEL_GQA_ROPE_NEOX | MODEL_GQA_QK_NORM_HEAD),
        .router = SOFTMAX_TOPK(MODEL_ROUTER_RENORM),
        .ffn = MOE(0),
        .expert_ff_default = MODEL_EXPERT_FF_PER_USED,
    },
    [MODEL_ARCH_QWEN2MOE] = {
        .name = "qwen2moe",
        .attn = GQA(MODEL_GQA_ROPE_NEOX | MODEL_GQA_QKV_BIAS),
        .router = SOFTMAX_TOPK(0),
        .ffn = MOE(MODEL_FFN_SHEXP_GATED),
        .expert_ff_default = MODEL_EXPERT_FF_PER_USED,
    },
    [MODEL_ARCH_LLAMA] = {
        .name = "llama",
        .attn = GQA(MODEL_GQA_ROPE_PARTIAL),
        .router = SOFTMAX_TOPK(MODEL_ROUTER_RENORM),
        .ffn = MOE(0),
        .expert_ff_default = MODEL_EXPERT_FF_IS_FF,
    },
    [MODEL_ARCH_OLMOE] = {
        .name = "olmoe",
        .attn = GQA(MODEL_GQA_ROPE_NEOX | MODEL_GQA_QK_NORM_FULL),
        .router = SOFTMAX_TOPK(0),
        .ffn = MOE(0),
        .expert_ff_default = MODEL_EXPERT_FF_IS_FF,
    },
    /* issue 15 */
    [MODEL_ARCH_QWEN3NEXT] = QWEN3NEXT_ROW("qwen3next", 0, false),
    /* llama.cpp reads qwen35moe's nextn_predict_layers: an MTP block (full attention) after the others */
    [MODEL_ARCH_QWEN35MOE] = QWEN3NEXT_ROW("qwen35moe", MODEL_GDN_BA_SPLIT | MODEL_GDN_KV_TILED, true),
    /* llama.cpp's deepseek2 (DeepSeek-V2, -V2-Lite, -V3, -R1, Kimi-K2): multi-head latent attention, dense first
     * layers, an ungated shared expert; the router by ARCH.expert_gating_func: softmax (V2) or sigmoid with the
     * score bias exp_probs_b and expert groups (V3, Kimi-K2), renormalised where ARCH.expert_weights_norm says */
    [MODEL_ARCH_DEEPSEEK2] = {
        .name = "deepseek2",
        .layout = MODEL_LAYOUT_DENSE_FIRST,
        .attn = MLA(0),
        .router = {MODEL_ROUTER_SIGMOID_GROUPED, MODEL_ROUTER_SCORE_BIAS, MODEL_ROUTER_RENORM},
        .ffn = MOE(MODEL_FFN_SHEXP),
        .ffn_lead = DENSE(0),
        /* its files always have expert_feed_forward_length (llama.cpp requires it); feed_forward_length is the
         * dense layers' */
        .expert_ff_default = MODEL_EXPERT_FF_PER_USED,
        .nextn = true,
        .gating_picks_router = true,
        .router_softmax = {MODEL_ROUTER_SOFTMAX_TOPK, 0, MODEL_ROUTER_RENORM},
    },
    /* llama.cpp's glm4moe: q/k norms only where the file has them (GLM-4.5, not -Air), the weights renormalised
     * when ARCH.expert_weights_norm says so, the shared expert's width expert_shared_count routed experts' */
    [MODEL_ARCH_GLM4MOE] = {
        .name = "glm4moe",
        .layout = MODEL_LAYOUT_DENSE_FIRST,
        .attn = {MODEL_ATTN_GQA, MODEL_GQA_ROPE_NEOX | MODEL_GQA_ROPE_PARTIAL | MODEL_GQA_QKV_BIAS,
                 MODEL_GQA_QK_NORM_HEAD},
        .router = {MODEL_ROUTER_SIGMOID_GROUPED, MODEL_ROUTER_SCORE_BIAS, MODEL_ROUTER_RENORM},
        .ffn = MOE(MODEL_FFN_SHEXP),
        .ffn_lead = DENSE(0),
        .expert_ff_default = MODEL_EXPERT_FF_PER_USED,
        .ffn_norm = "post_attention_norm",
        .nextn = true,
    },
    /* llama.cpp's openai-moe: every layer has sinks and the sliding-window option, which slides the layers that
     * ARCH.attention.sliding_window_pattern says (the even ones); the FFN's norm is post_attention_norm */
    [MODEL_ARCH_GPT_OSS] = {
        .name = "gpt-oss",
        .attn = GQA(MODEL_GQA_ROPE_NEOX | MODEL_GQA_QKV_BIAS | MODEL_GQA_OUT_BIAS | MODEL_GQA_SINKS |
                    MODEL_GQA_SLIDING),
        .router = TOPK_SOFTMAX(MODEL_ROUTER_LOGIT_BIAS),
        .ffn = MOE(MODEL_FFN_SWIGLU_OAI),
        .expert_ff_default = MODEL_EXPERT_FF_IS_FF,
        .ffn_norm = "post_attention_norm",
    },
};

int model_arch_from_name(const char *name, size_t len)
{
    for (int a = 0; a < MODEL_ARCH_COUNT; a++)
        if (strlen(arch_table[a].name) == len && !memcmp(arch_table[a].name, name, len))
            return a;
    return -1;
}

const model_arch_info_t *model_arch_info(model_arch_t arch)
{
    GUILD_ASSERT(arch >= 0 && arch < MODEL_ARCH_COUNT);
    return &arch_table[arch];
}

const char *model_arch_list(void)
{
    return "qwen3moe, qwen2moe, llama (Mixtral), olmoe, deepseek2, glm4moe, gpt-oss, qwen3next, qwen35moe";
}
