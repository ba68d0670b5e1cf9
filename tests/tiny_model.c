#include "tests/tiny_model.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/gguf/gguf_writer.h"
#include "core/quant/quant.h"
#include "core/sample/rng.h"

tiny_spec_t tiny_spec(const char *arch)
{
    const int a = model_arch_from_name(arch, strlen(arch));
    if (a >= 0 && model_arch_info((model_arch_t)a)->attn.kind == MODEL_ATTN_MLA) {
        tiny_spec_t s = tiny_spec("");
        s.arch = arch;
        s.head_dim = 40;
        s.n_rot = 8;
        s.head_dim_v = 32;
        s.n_lora_kv = 64;
        s.n_lora_q = 32;
        s.n_head_kv = s.n_head;
        return s;
    }
    return (tiny_spec_t){
        .arch = arch,
        .n_layer = 2,
        .n_embd = 64,
        .n_head = 4,
        .n_head_kv = 2,
        .head_dim = 16,
        .n_expert = 8,
        .n_used = 2,
        .n_ff_exp = 32,
        .n_ff_shexp = 48,
        .n_vocab = 96,
        .n_ctx = 64,
        .n_ff = 80,
        .n_dense_lead = 1,
        .n_shared = 1,
        .wtype = GUILD_TYPE_F32,
        .seed = 1,
    };
}

typedef struct tensor_plan {
    char name[64];
    guild_type_t type;
    uint32_t n_dims;
    uint64_t ne[3];
    float scale; /* uniform in [-scale, scale]; 0 = a norm (1 + small noise) */
} tensor_plan_t;

typedef struct builder {
    const tiny_spec_t *s;
    tensor_plan_t t[512];
    int n;
} builder_t;

static void plan(builder_t *b, const char *name, uint32_t n_dims, uint64_t ne0, uint64_t ne1, uint64_t ne2,
                 float scale, bool matrix)
{
    if (b->s->omit_tensor && !strcmp(b->s->omit_tensor, name))
        return;
    ck_assert(b->n < 512);
    tensor_plan_t *t = &b->t[b->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->type = matrix ? b->s->wtype : GUILD_TYPE_F32;
    if (b->s->f16_tensor && !strcmp(b->s->f16_tensor, name))
        t->type = GUILD_TYPE_F16;
    const size_t nl = strlen(name), rl = strlen("ffn_gate_inp.weight");
    if (b->s->f32_router && nl >= rl && !strcmp(name + nl - rl, "ffn_gate_inp.weight"))
        t->type = GUILD_TYPE_F32;
    t->n_dims = n_dims;
    t->ne[0] = ne0 + (b->s->reshape_tensor && !strcmp(b->s->reshape_tensor, name) ? 32 : 0);
    t->ne[1] = ne1;
    t->ne[2] = ne2;
    t->scale = scale;
}

static void set_u32(gguf_writer_t *w, const tiny_spec_t *s, const char *suffix, uint32_t v)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", s->arch, suffix);
    if (!s->omit_key || strcmp(s->omit_key, key))
        gguf_writer_set_u32(w, key, v);
}

static void set_bool(gguf_writer_t *w, const tiny_spec_t *s, const char *suffix, bool v)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", s->arch, suffix);
    if (!s->omit_key || strcmp(s->omit_key, key))
        gguf_writer_set_bool(w, key, v);
}

static void set_f32(gguf_writer_t *w, const tiny_spec_t *s, const char *suffix, float v)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", s->arch, suffix);
    if (!s->omit_key || strcmp(s->omit_key, key))
        gguf_writer_set_f32(w, key, v);
}

void tiny_model_image(const tiny_spec_t *s, void **data, size_t *size)
{
    guild_err_t err = {{0}};
    gguf_writer_t *w = NULL;
    ck_assert(gguf_writer_new(&w, &err) == 0);
    if (!s->omit_key || strcmp(s->omit_key, "general.architecture"))
        gguf_writer_set_str(w, "general.architecture", s->arch);
    gguf_writer_set_str(w, "general.name", "tiny test model");
    const int arch = model_arch_from_name(s->arch, strlen(s->arch));
    const model_arch_info_t *info = arch >= 0 ? model_arch_info((model_arch_t)arch) : NULL;
    const bool dense_first = info && info->layout == MODEL_LAYOUT_DENSE_FIRST;
    const int n_mtp = info && info->nextn ? s->n_mtp : 0;
    set_u32(w, s, "block_count", (uint32_t)(s->n_layer + n_mtp));
    if (n_mtp)
        set_u32(w, s, "nextn_predict_layers", (uint32_t)n_mtp);
    set_u32(w, s, "context_length", (uint32_t)s->n_ctx);
    set_u32(w, s, "embedding_length", (uint32_t)s->n_embd);
    set_u32(w, s, "feed_forward_length", (uint32_t)(dense_first && s->n_ff ? s->n_ff : s->n_ff_exp));
    if (dense_first)
        set_u32(w, s, "leading_dense_block_count", (uint32_t)s->n_dense_lead);
    const bool mla = info && info->attn.kind == MODEL_ATTN_MLA;
    set_u32(w, s, "attention.head_count", (uint32_t)s->n_head);
    if (mla) { /* as llama.cpp's converter writes deepseek2's */
        set_u32(w, s, "attention.head_count_kv", s->mla_kv_b ? (uint32_t)s->n_head : 1);
        set_u32(w, s, "attention.kv_lora_rank", (uint32_t)s->n_lora_kv);
        if (s->n_lora_q)
            set_u32(w, s, "attention.q_lora_rank", (uint32_t)s->n_lora_q);
        if (s->mla_kv_b) {
            set_u32(w, s, "attention.key_length", (uint32_t)s->head_dim);
            set_u32(w, s, "attention.value_length", (uint32_t)s->head_dim_v);
        } else {
            set_u32(w, s, "attention.key_length", (uint32_t)(s->n_lora_kv + s->n_rot));
            set_u32(w, s, "attention.value_length", (uint32_t)s->n_lora_kv);
            set_u32(w, s, "attention.key_length_mla", (uint32_t)s->head_dim);
            set_u32(w, s, "attention.value_length_mla", (uint32_t)s->head_dim_v);
        }
        if (s->yarn_factor) {
            char key[96];
            snprintf(key, sizeof key, "%s.rope.scaling.type", s->arch);
            gguf_writer_set_str(w, key, "yarn");
            set_f32(w, s, "rope.scaling.factor", s->yarn_factor);
            set_u32(w, s, "rope.scaling.original_context_length", (uint32_t)s->n_ctx / 4);
            set_f32(w, s, "rope.scaling.yarn_log_multiplier", 0.0707f);
        }
    } else {
        set_u32(w, s, "attention.head_count_kv", (uint32_t)s->n_head_kv);
        set_u32(w, s, "attention.key_length", (uint32_t)s->head_dim);
        set_u32(w, s, "attention.value_length", (uint32_t)s->head_dim);
    }
    set_f32(w, s, "rope.freq_base", 10000.0f);
    if (s->n_rot)
        set_u32(w, s, "rope.dimension_count", (uint32_t)s->n_rot);
    set_f32(w, s, "attention.layer_norm_rms_epsilon", 1e-6f);
    set_u32(w, s, "expert_count", (uint32_t)s->n_expert);
    set_u32(w, s, "expert_used_count", (uint32_t)s->n_used);
    set_u32(w, s, "expert_feed_forward_length", (uint32_t)s->n_ff_exp);
    set_u32(w, s, "vocab_size", (uint32_t)s->n_vocab);
    const uint32_t ffn_opts = info && info->ffn.kind == MODEL_FFN_MOE ? info->ffn.opts : 0;
    set_u32(w, s, "expert_shared_feed_forward_length", (uint32_t)s->n_ff_shexp);
    if (ffn_opts & MODEL_FFN_SHEXP)
        set_u32(w, s, "expert_shared_count", (uint32_t)s->n_shared);
    /* a row that picks its router by expert_gating_func: sigmoid unless gating says softmax (1) */
    const bool sigmoid = info && info->router.kind == MODEL_ROUTER_SIGMOID_GROUPED &&
                         !(info->gating_picks_router && s->gating == 1);
    if (info && info->gating_picks_router && !sigmoid) {
        set_u32(w, s, "expert_gating_func", 1);
        set_f32(w, s, "expert_weights_scale", 2.5f);
    }
    if (sigmoid) { /* as llama.cpp's converter writes glm4moe's and deepseek2's */
        set_u32(w, s, "expert_gating_func", (uint32_t)(s->gating ? s->gating : 2));
        set_bool(w, s, "expert_weights_norm", true);
        set_f32(w, s, "expert_weights_scale", 2.5f);
    }
    if (s->n_groups && (sigmoid || info->gating_picks_router)) {
        set_u32(w, s, "expert_group_count", (uint32_t)s->n_groups);
        set_u32(w, s, "expert_group_used_count", (uint32_t)s->n_group_used);
    }

    /* the tensors of the row's parts (the GQA and MoE ones; any other arch name gets those of a plain one); the
     * options a file may have (maybe) are written */
    const uint32_t attn_opts =
        info && info->attn.kind == MODEL_ATTN_GQA ? info->attn.opts | (s->no_maybe ? 0 : info->attn.maybe) : 0;
    const uint32_t router_opts = info ? info->router.opts | (s->no_maybe ? 0 : info->router.maybe) : 0;
    char ffn_norm[40];
    snprintf(ffn_norm, sizeof ffn_norm, "%s.weight", info && info->ffn_norm ? info->ffn_norm : "ffn_norm");
    if (attn_opts & MODEL_GQA_SLIDING) /* a window shorter than the tests' sequences, on the even layers */
        set_u32(w, s, "attention.sliding_window", 5);
    /* a hybrid: full attention on the odd layers, a gated delta net (4 taps, 2 key heads and 4 value heads of
     * 16) on the even ones; partial RoPE over half the head */
    const bool hybrid = info && info->layout == MODEL_LAYOUT_HYBRID;
    const uint32_t gdn_opts = hybrid ? info->attn_linear.opts : 0;
    const uint64_t DK = 16, NK = 2, NV = 4, CONV = 4, IN = NV * DK, CH = 2 * NK * DK + IN;
    if (hybrid) {
        set_u32(w, s, "full_attention_interval", 2);
        set_u32(w, s, "rope.dimension_count", (uint32_t)s->head_dim / 2);
        set_u32(w, s, "ssm.conv_kernel", (uint32_t)CONV);
        set_u32(w, s, "ssm.state_size", (uint32_t)DK);
        set_u32(w, s, "ssm.group_count", (uint32_t)NK);
        set_u32(w, s, "ssm.time_step_rank", (uint32_t)NV);
        set_u32(w, s, "ssm.inner_size", (uint32_t)IN);
    }
    if (s->rope_sections) {
        char key[128];
        snprintf(key, sizeof key, "%s.rope.dimension_sections", s->arch);
        gguf_writer_set_arr(w, key, GGUF_VALUE_INT32, s->rope_sections, 4);
    }
    builder_t b = {.s = s};
    const uint64_t E = (uint64_t)s->n_embd, Q = (uint64_t)s->n_head * (uint64_t)s->head_dim;
    const uint64_t KV = (uint64_t)s->n_head_kv * (uint64_t)s->head_dim, F = (uint64_t)s->n_ff_exp;
    const uint64_t S = (uint64_t)((ffn_opts & MODEL_FFN_SHEXP) ? (s->n_shared ? s->n_shared : 1) * s->n_ff_exp
                                                                : s->n_ff_shexp);
    const uint64_t X = (uint64_t)s->n_expert, FD = (uint64_t)(dense_first && s->n_ff ? s->n_ff : s->n_ff_exp);
    const float ws = 1.0f / sqrtf((float)E);
    plan(&b, "token_embd.weight", 2, E, (uint64_t)s->n_vocab, 1, 1.0f, true);
    plan(&b, "output_norm.weight", 1, E, 1, 1, 0, false);
    if (!s->tied)
        plan(&b, "output.weight", 2, E, (uint64_t)s->n_vocab, 1, ws, true);
    for (int il = 0; il < s->n_layer + n_mtp; il++) {
        char n[64];
#define P(suffix) (snprintf(n, sizeof n, "blk.%d." suffix, il), n)
        plan(&b, P("attn_norm.weight"), 1, E, 1, 1, 0, false);
        if (mla) {
            const uint64_t H = (uint64_t)s->n_head, K = (uint64_t)s->head_dim, V = (uint64_t)s->head_dim_v;
            const uint64_t R = (uint64_t)s->n_lora_kv, r = (uint64_t)s->n_rot, RQ = (uint64_t)s->n_lora_q;
            if (RQ) {
                plan(&b, P("attn_q_a.weight"), 2, E, RQ, 1, ws, true);
                plan(&b, P("attn_q_a_norm.weight"), 1, RQ, 1, 1, 0, false);
                plan(&b, P("attn_q_b.weight"), 2, RQ, H * K, 1, 1.0f / sqrtf((float)RQ), true);
            } else {
                plan(&b, P("attn_q.weight"), 2, E, H * K, 1, ws, true);
            }
            plan(&b, P("attn_kv_a_mqa.weight"), 2, E, R + r, 1, ws, true);
            plan(&b, P("attn_kv_a_norm.weight"), 1, R, 1, 1, 0, false);
            if (s->mla_kv_b) {
                plan(&b, P("attn_kv_b.weight"), 2, R, H * (K - r + V), 1, 1.0f / sqrtf((float)R), true);
            } else {
                plan(&b, P("attn_k_b.weight"), 3, K - r, R, H, 1.0f / sqrtf((float)R), true);
                plan(&b, P("attn_v_b.weight"), 3, R, V, H, 1.0f / sqrtf((float)R), true);
            }
            plan(&b, P("attn_output.weight"), 2, H * V, E, 1, 1.0f / sqrtf((float)(H * V)), true);
        } else if (hybrid && il < s->n_layer && il % 2 == 0) {
            plan(&b, P("attn_qkv.weight"), 2, E, CH, 1, ws, true);
            plan(&b, P("attn_gate.weight"), 2, E, IN, 1, ws, true);
            plan(&b, P("ssm_conv1d.weight"), 2, CONV, CH, 1, 0.5f, false);
            plan(&b, P("ssm_dt.bias"), 1, NV, 1, 1, 1.0f, false);
            plan(&b, P("ssm_a"), 1, NV, 1, 1, 0.5f, false);
            if (gdn_opts & MODEL_GDN_BA_SPLIT) {
                plan(&b, P("ssm_beta.weight"), 2, E, NV, 1, ws, true);
                plan(&b, P("ssm_alpha.weight"), 2, E, NV, 1, ws, true);
            } else {
                plan(&b, P("ssm_ba.weight"), 2, E, 2 * NV, 1, ws, true);
            }
            plan(&b, P("ssm_norm.weight"), 1, DK, 1, 1, 0, false);
            plan(&b, P("ssm_out.weight"), 2, IN, E, 1, 1.0f / sqrtf((float)IN), true);
            goto ffn;
        } else {
            plan(&b, P("attn_q.weight"), 2, E, (attn_opts & MODEL_GQA_OUT_GATE) ? 2 * Q : Q, 1, ws, true);
            plan(&b, P("attn_k.weight"), 2, E, KV, 1, ws, true);
            plan(&b, P("attn_v.weight"), 2, E, KV, 1, ws, true);
            plan(&b, P("attn_output.weight"), 2, Q, E, 1, 1.0f / sqrtf((float)Q), true);
        }
        if (attn_opts & MODEL_GQA_QKV_BIAS) {
            plan(&b, P("attn_q.bias"), 1, Q, 1, 1, 0.1f, false);
            plan(&b, P("attn_k.bias"), 1, KV, 1, 1, 0.1f, false);
            plan(&b, P("attn_v.bias"), 1, KV, 1, 1, 0.1f, false);
        }
        if (attn_opts & MODEL_GQA_QK_NORM_HEAD) {
            plan(&b, P("attn_q_norm.weight"), 1, (uint64_t)s->head_dim, 1, 1, 0, false);
            plan(&b, P("attn_k_norm.weight"), 1, (uint64_t)s->head_dim, 1, 1, 0, false);
        }
        if (attn_opts & MODEL_GQA_QK_NORM_FULL) {
            plan(&b, P("attn_q_norm.weight"), 1, Q, 1, 1, 0, false);
            plan(&b, P("attn_k_norm.weight"), 1, KV, 1, 1, 0, false);
        }
        if (attn_opts & MODEL_GQA_SINKS)
            plan(&b, P("attn_sinks.weight"), 1, (uint64_t)s->n_head, 1, 1, 2.0f, false);
        if (attn_opts & MODEL_GQA_OUT_BIAS)
            plan(&b, P("attn_output.bias"), 1, E, 1, 1, 0.1f, false);
    ffn:
        snprintf(n, sizeof n, "blk.%d.%s", il, ffn_norm);
        plan(&b, n, 1, E, 1, 1, 0, false);
        if (dense_first && il < s->n_dense_lead) {
            plan(&b, P("ffn_gate.weight"), 2, E, FD, 1, ws, true);
            plan(&b, P("ffn_up.weight"), 2, E, FD, 1, ws, true);
            plan(&b, P("ffn_down.weight"), 2, FD, E, 1, 1.0f / sqrtf((float)FD), true);
            continue;
        }
        plan(&b, P("ffn_gate_inp.weight"), 2, E, X, 1, 4 * ws, true);
        if (router_opts & MODEL_ROUTER_LOGIT_BIAS)
            plan(&b, P("ffn_gate_inp.bias"), 1, X, 1, 1, 0.5f, false);
        if (sigmoid && (router_opts & MODEL_ROUTER_SCORE_BIAS))
            plan(&b, P("exp_probs_b.bias"), 1, X, 1, 1, 0.05f, false);
        plan(&b, P("ffn_gate_exps.weight"), 3, E, F, X, ws, true);
        plan(&b, P("ffn_up_exps.weight"), 3, E, F, X, ws, true);
        plan(&b, P("ffn_down_exps.weight"), 3, F, E, X, 1.0f / sqrtf((float)F), true);
        if (ffn_opts & MODEL_FFN_SWIGLU_OAI) {
            plan(&b, P("ffn_gate_exps.bias"), 2, F, X, 1, 0.1f, false);
            plan(&b, P("ffn_up_exps.bias"), 2, F, X, 1, 0.1f, false);
            plan(&b, P("ffn_down_exps.bias"), 2, E, X, 1, 0.1f, false);
        }
        if (ffn_opts & MODEL_FFN_SHEXP_GATED)
            plan(&b, P("ffn_gate_inp_shexp.weight"), 1, E, 1, 1, ws, true);
        if (ffn_opts & (MODEL_FFN_SHEXP_GATED | MODEL_FFN_SHEXP)) {
            plan(&b, P("ffn_gate_shexp.weight"), 2, E, S, 1, ws, true);
            plan(&b, P("ffn_up_shexp.weight"), 2, E, S, 1, ws, true);
            plan(&b, P("ffn_down_shexp.weight"), 2, S, E, 1, 1.0f / sqrtf((float)S), true);
        }
        if (il >= s->n_layer) { /* an MTP layer's own tensors */
            plan(&b, P("nextn.eh_proj.weight"), 2, 2 * E, E, 1, ws, true);
            plan(&b, P("nextn.enorm.weight"), 1, E, 1, 1, 0, false);
            plan(&b, P("nextn.hnorm.weight"), 1, E, 1, 1, 0, false);
            plan(&b, P("nextn.shared_head_norm.weight"), 1, E, 1, 1, 0, false);
        }
#undef P
    }
    for (int i = 0; i < b.n; i++)
        ck_assert_msg(gguf_writer_add_tensor(w, b.t[i].name, b.t[i].type, b.t[i].n_dims, b.t[i].ne, &err) == 0,
                      "%s", err.msg);
    ck_assert_msg(gguf_writer_begin_memory(w, &err) == 0, "%s", err.msg);
    rng_t r;
    rng_seed(&r, s->seed);
    for (int i = 0; i < b.n; i++) {
        const tensor_plan_t *t = &b.t[i];
        uint64_t n = t->ne[0] * t->ne[1] * t->ne[2], row_bytes;
        ck_assert(quant_row_bytes(t->type, t->ne[0], &row_bytes, &err) == 0);
        float *f = malloc(n * sizeof *f);
        uint64_t bytes = row_bytes * t->ne[1] * t->ne[2];
        void *q = malloc(bytes);
        ck_assert(f && q);
        const size_t len = strlen(t->name);
        const bool decay = len >= 6 && !strcmp(t->name + len - 6, ".ssm_a"); /* -exp(A_log) < 0 */
        for (uint64_t k = 0; k < n; k++) {
            double u = 2 * rng_uniform(&r) - 1;
            f[k] = t->scale == 0 ? (float)(1 + 0.1 * u) : (float)(t->scale * u);
            if (decay)
                f[k] = -0.1f - fabsf(f[k]);
        }
        for (uint64_t row = 0; row < t->ne[1] * t->ne[2]; row++)
            ck_assert_msg(quant_quantize_row_ref(t->type, f + row * t->ne[0], (char *)q + row * row_bytes,
                                                 (int64_t)t->ne[0], &err) == 0, "%s", err.msg);
        ck_assert_msg(gguf_writer_write_tensor(w, i, q, bytes, &err) == 0, "%s", err.msg);
        free(f);
        free(q);
    }
    ck_assert_msg(gguf_writer_finish(w, &err) == 0, "%s", err.msg);
    gguf_writer_take_memory(w, data, size);
    gguf_writer_destroy(&w);
}

int tiny_model_open(const void *data, size_t size, model_t **out, guild_err_t *err)
{
    gguf_t *g = NULL;
    *out = NULL;
    if (gguf_new_from_memory(&g, data, size, "tiny.gguf", err) < 0)
        return -1;
    return model_new_from_gguf(out, &g, err);
}

tiny_spec_t tiny_spec_blocks(guild_type_t wt)
{
    tiny_spec_t spec = tiny_spec("qwen3moe");
    spec.wtype = wt;
    spec.n_embd = 256;
    spec.head_dim = 64;
    spec.n_ff_exp = 256;
    spec.n_ff_shexp = 256;
    return spec;
}

model_t *tiny_model_load(const tiny_spec_t *spec, void **img)
{
    size_t size;
    tiny_model_image(spec, img, &size);
    model_t *m = NULL;
    guild_err_t err = {{0}};
    ck_assert_msg(tiny_model_open(*img, size, &m, &err) == 0, "%s", err.msg);
    return m;
}
