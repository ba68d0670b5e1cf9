/* Tests for core/model: configuration from GGUF metadata per architecture, weight binding and its errors. */
#include "core/model/model.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/check_run.h"
#include "tests/tiny_model.h"

static void *image;
static size_t image_size;
static model_t *model;

static void teardown(void)
{
    model_destroy(&model);
    free(image);
    image = NULL;
}

/* Builds and opens spec; returns the loader's result (message in err). */
static int open_spec(const tiny_spec_t *s, guild_err_t *err)
{
    model_destroy(&model);
    free(image);
    tiny_model_image(s, &image, &image_size);
    return tiny_model_open(image, image_size, &model, err);
}

static void open_ok(const tiny_spec_t *s)
{
    guild_err_t err = {{0}};
    ck_assert_msg(open_spec(s, &err) == 0, "%s", err.msg);
}

/* The load fails and the message contains every one of the fragments. */
static void open_fails(const tiny_spec_t *s, const char *frag1, const char *frag2)
{
    guild_err_t err = {{0}};
    ck_assert_int_eq(open_spec(s, &err), -1);
    ck_assert_ptr_null(model);
    ck_assert_msg(strstr(err.msg, frag1), "message \"%s\" lacks \"%s\"", err.msg, frag1);
    if (frag2)
        ck_assert_msg(strstr(err.msg, frag2), "message \"%s\" lacks \"%s\"", err.msg, frag2);
    ck_assert_msg(strstr(err.msg, "tiny.gguf"), "message \"%s\" does not name the file", err.msg);
}

/* ---- configuration ------------------------------------------------------------------------------------ */

START_TEST(test_config_of_each_architecture)
{
    static const char *archs[] = {"qwen3moe", "qwen2moe", "llama", "olmoe"};
    static const model_arch_t ids[] = {MODEL_ARCH_QWEN3MOE, MODEL_ARCH_QWEN2MOE, MODEL_ARCH_LLAMA, MODEL_ARCH_OLMOE};
    tiny_spec_t s = tiny_spec(archs[_i]);
    open_ok(&s);
    const model_config_t *c = model_config(model);
    ck_assert_int_eq(c->arch, ids[_i]);
    ck_assert_str_eq(c->name, "tiny test model");
    ck_assert_int_eq(c->n_layer, 2);
    ck_assert_int_eq(c->n_embd, 64);
    ck_assert_int_eq(c->n_vocab, 96);
    ck_assert_int_eq(c->n_ctx_train, 64);
    ck_assert_int_eq(c->n_head, 4);
    ck_assert_int_eq(c->n_head_kv, 2);
    ck_assert_int_eq(c->head_dim, 16);
    ck_assert_int_eq(c->n_rot, 16);
    ck_assert_int_eq(c->n_expert, 8);
    ck_assert_int_eq(c->n_expert_used, 2);
    ck_assert_int_eq(c->n_ff_exp, 32);
    ck_assert_int_eq(c->n_ff_shexp, ids[_i] == MODEL_ARCH_QWEN2MOE ? 48 : 0);
    ck_assert(c->norm_eps == 1e-6f);
    ck_assert(c->rope_freq_base == 10000.0f);
    ck_assert_int_eq(c->rope_scaling, MODEL_ROPE_SCALING_NONE);
    ck_assert(c->rope_freq_scale == 1.0f);

    /* the parts of each row, as llama.cpp's graphs have them */
    static const uint32_t attn_opts[] = {
        MODEL_GQA_ROPE_NEOX | MODEL_GQA_QK_NORM_HEAD, MODEL_GQA_ROPE_NEOX | MODEL_GQA_QKV_BIAS,
        MODEL_GQA_ROPE_PARTIAL, MODEL_GQA_ROPE_NEOX | MODEL_GQA_QK_NORM_FULL};
    ck_assert_int_eq(c->layout, MODEL_LAYOUT_UNIFORM);
    ck_assert_int_eq(c->attn.kind, MODEL_ATTN_GQA);
    ck_assert_uint_eq(c->attn.opts, attn_opts[_i]);
    ck_assert_int_eq(c->rope_neox, ids[_i] != MODEL_ARCH_LLAMA);
    ck_assert_int_eq(c->router.kind, MODEL_ROUTER_SOFTMAX_TOPK);
    ck_assert_uint_eq(c->router.opts, ids[_i] == MODEL_ARCH_QWEN3MOE || ids[_i] == MODEL_ARCH_LLAMA
                                          ? MODEL_ROUTER_RENORM
                                          : 0);
    ck_assert_int_eq(c->ffn.kind, MODEL_FFN_MOE);
    ck_assert_uint_eq(c->ffn.opts, ids[_i] == MODEL_ARCH_QWEN2MOE ? MODEL_FFN_SHEXP_GATED : 0);
    for (int32_t il = 0; il < c->n_layer; il++) {
        const model_layer_parts_t lp = model_layer_parts(c, il);
        ck_assert_ptr_eq(lp.attn, &c->attn);
        ck_assert_ptr_eq(lp.ffn, &c->ffn);
        ck_assert_ptr_eq(lp.router, &c->router);
    }

    const model_weights_t *w = model_weights(model);
    ck_assert_int_eq(w->n_layer, 2);
    ck_assert(!w->tied_output);
    ck_assert_ptr_nonnull(w->layers[1].down_exps.data);
    ck_assert_int_eq(w->layers[1].down_exps.ne[0], 32);
    ck_assert_int_eq(w->layers[1].down_exps.ne[1], 64);
    ck_assert_int_eq(w->layers[1].down_exps.ne[2], 8);
    ck_assert_uint_eq(w->layers[1].down_exps.row_bytes, 32 * 4);
    ck_assert_uint_eq(w->layers[1].down_exps.mat_bytes, 32 * 64 * 4);
    ck_assert_int_eq(w->layers[0].bq.data != NULL, ids[_i] == MODEL_ARCH_QWEN2MOE);
    ck_assert_int_eq(w->layers[0].q_norm.data != NULL,
                     ids[_i] == MODEL_ARCH_QWEN3MOE || ids[_i] == MODEL_ARCH_OLMOE);
    if (ids[_i] == MODEL_ARCH_OLMOE)
        ck_assert_int_eq(w->layers[0].q_norm.ne[0], 64);
    if (ids[_i] == MODEL_ARCH_QWEN3MOE)
        ck_assert_int_eq(w->layers[0].q_norm.ne[0], 16);
    ck_assert_int_eq(w->layers[0].shexp_down.data != NULL, ids[_i] == MODEL_ARCH_QWEN2MOE);
}
END_TEST

START_TEST(test_defaults_from_llama_cpp)
{
    /* no key_length: n_embd / n_head; no expert_feed_forward_length: qwen n_ff / n_used, llama n_ff */
    tiny_spec_t s = tiny_spec("qwen3moe");
    s.omit_key = "qwen3moe.expert_feed_forward_length";
    s.n_ff_exp = 32;
    s.n_used = 1; /* n_ff (32) / 1 = 32 keeps the tensors consistent */
    open_ok(&s);
    ck_assert_int_eq(model_config(model)->n_ff_exp, 32);
    s = tiny_spec("llama");
    s.omit_key = "llama.expert_feed_forward_length";
    open_ok(&s);
    ck_assert_int_eq(model_config(model)->n_ff_exp, 32);
    s = tiny_spec("olmoe");
    s.omit_key = "olmoe.attention.head_count_kv";
    s.n_head_kv = 4;
    open_ok(&s);
    ck_assert_int_eq(model_config(model)->n_head_kv, 4);
}
END_TEST

START_TEST(test_config_print)
{
    tiny_spec_t s = tiny_spec("qwen2moe");
    open_ok(&s);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    model_config_print(model_config(model), f);
    fclose(f);
    ck_assert_ptr_nonnull(strstr(buf, "model: qwen2moe tiny test model"));
    ck_assert_ptr_nonnull(strstr(buf, "n_layer = 2, n_embd = 64, n_vocab = 96"));
    ck_assert_ptr_nonnull(strstr(buf, "n_expert = 8, n_expert_used = 2, n_ff_exp = 32, n_ff_shexp = 48"));
    ck_assert_ptr_nonnull(strstr(buf, "attention = gqa (rope neox, qkv bias)"));
    ck_assert_ptr_nonnull(strstr(buf, "ffn = moe (shared expert with sigmoid gate), router = softmax-topk\n"));
    free(buf);
}
END_TEST

START_TEST(test_unsupported_architecture)
{
    tiny_spec_t s = tiny_spec("gpt2");
    open_fails(&s, "architecture \"gpt2\" is not supported", "qwen3moe");
    s = tiny_spec("qwen3moe");
    s.omit_key = "general.architecture";
    open_fails(&s, "general.architecture is missing", NULL);
}
END_TEST

/* qwen3next and qwen35moe: the hybrid layout (gated delta net on the even layers of the tiny model, gated full
 * attention on the odd ones), the ssm keys, each layer's tensors, and the refusals. */
START_TEST(test_qwen3next)
{
    const char *arch = _i ? "qwen35moe" : "qwen3next";
    tiny_spec_t s = tiny_spec(arch);
    s.n_layer = 4;
    open_ok(&s);
    const model_config_t *c = model_config(model);
    ck_assert_int_eq(c->arch, _i ? MODEL_ARCH_QWEN35MOE : MODEL_ARCH_QWEN3NEXT);
    ck_assert_int_eq(c->layout, MODEL_LAYOUT_HYBRID);
    ck_assert_int_eq(c->full_attn_interval, 2);
    ck_assert_uint_eq(c->attn.opts, MODEL_GQA_ROPE_NEOX | MODEL_GQA_ROPE_PARTIAL | MODEL_GQA_QK_NORM_HEAD |
                                        MODEL_GQA_OUT_GATE);
    ck_assert_int_eq(c->attn_linear.kind, MODEL_ATTN_GDN);
    ck_assert_uint_eq(c->attn_linear.opts, _i ? MODEL_GDN_BA_SPLIT | MODEL_GDN_KV_TILED : 0);
    ck_assert_uint_eq(c->router.opts, MODEL_ROUTER_RENORM);
    ck_assert_uint_eq(c->ffn.opts, MODEL_FFN_SHEXP_GATED);
    ck_assert_int_eq(c->n_rot, 8);
    ck_assert_int_eq(c->ssm_d_conv, 4);
    ck_assert_int_eq(c->ssm_d_state, 16);
    ck_assert_int_eq(c->ssm_n_group, 2);
    ck_assert_int_eq(c->ssm_dt_rank, 4);
    ck_assert_int_eq(c->ssm_d_inner, 64);
    ck_assert_int_eq(c->n_layer_attn, 2);
    ck_assert(model_recurrent(c));
    ck_assert_int_eq(model_gdn_conv_channels(c), 2 * 2 * 16 + 64);
    ck_assert_int_eq(model_gdn_conv_state(c), 3 * 128);
    ck_assert_int_eq(model_gdn_ssm_state(c), 4 * 16 * 16);
    const model_weights_t *w = model_weights(model);
    for (int il = 0; il < 4; il++) {
        const model_layer_t *L = &w->layers[il];
        ck_assert_int_eq(model_layer_recurrent(c, il), il % 2 == 0);
        ck_assert_int_eq(L->ssm_qkv.data != NULL, il % 2 == 0);
        ck_assert_int_eq(L->wq.data != NULL, il % 2 == 1);
        ck_assert_int_eq(L->ssm_ba.data != NULL, il % 2 == 0 && !_i);
        ck_assert_int_eq(L->ssm_beta.data != NULL, il % 2 == 0 && _i);
        ck_assert_ptr_nonnull(L->ffn_norm.data); /* post_attention_norm */
        ck_assert_ptr_nonnull(L->shexp_gate_inp.data);
    }
    ck_assert_int_eq(w->layers[1].wq.ne[1], 2 * 4 * 16); /* query and gate */
    ck_assert_int_eq(w->layers[0].ssm_conv1d.ne[0], 4);
    ck_assert_int_eq(w->layers[0].ssm_conv1d.ne[1], 128);

    ck_assert_int_eq(c->n_layer_mtp, 0);
    if (_i) { /* qwen35moe: an MTP block after the 4, with full attention (blk.4.attn_q with the gate rows) */
        s.n_mtp = 1;
        open_ok(&s);
        c = model_config(model);
        ck_assert_int_eq(c->n_layer, 4);
        ck_assert_int_eq(c->n_layer_mtp, 1);
        w = model_weights(model);
        ck_assert_int_eq(w->n_mtp, 1);
        ck_assert_int_eq(w->mtp[0].block.wq.ne[1], 2 * 4 * 16);
        ck_assert_ptr_null(w->mtp[0].block.ssm_qkv.data);
        ck_assert_ptr_nonnull(w->mtp[0].eh_proj.data);
        s.n_mtp = 0;
    }
    char key[96];
    snprintf(key, sizeof key, "%s.ssm.state_size", arch);
    s.omit_key = key;
    open_fails(&s, "ssm.state_size is missing", NULL);
    s.omit_key = NULL;
    s.omit_tensor = _i ? "blk.2.ssm_alpha.weight" : "blk.2.ssm_ba.weight";
    open_fails(&s, s.omit_tensor, "is missing");
    s.omit_tensor = "blk.0.ssm_a";
    open_fails(&s, "tensor blk.0.ssm_a is missing", NULL);
    s.omit_tensor = NULL;
    /* qwen35moe's IMRoPE sections: text positions rotate every pair of the 8 rotated dims as NEOX does, or the
     * file is refused */
    static const int32_t imrope[4] = {2, 1, 1, 0}, other[4] = {1, 1, 1, 1};
    s.rope_sections = imrope;
    open_ok(&s);
    s.rope_sections = other;
    open_fails(&s, "rope.dimension_sections = [1, 1, 1, 1]: rotation pair 3 would not rotate by a text position",
               NULL);
    s.rope_sections = NULL;
    s.reshape_tensor = "blk.1.attn_q.weight"; /* without room for the gate */
    open_fails(&s, "tensor blk.1.attn_q.weight has shape", NULL);
}
END_TEST

/* gpt-oss (llama.cpp's openai-moe): its parts, keys and tensors; which layers slide. */
START_TEST(test_gpt_oss)
{
    tiny_spec_t s = tiny_spec("gpt-oss");
    s.n_layer = 4;
    open_ok(&s);
    const model_config_t *c = model_config(model);
    ck_assert_int_eq(c->arch, MODEL_ARCH_GPT_OSS);
    ck_assert_uint_eq(c->attn.opts, MODEL_GQA_ROPE_NEOX | MODEL_GQA_QKV_BIAS | MODEL_GQA_OUT_BIAS |
                                        MODEL_GQA_SINKS | MODEL_GQA_SLIDING);
    ck_assert_int_eq(c->router.kind, MODEL_ROUTER_TOPK_SOFTMAX);
    ck_assert_uint_eq(c->router.opts, MODEL_ROUTER_LOGIT_BIAS);
    ck_assert_uint_eq(c->ffn.opts, MODEL_FFN_SWIGLU_OAI);
    ck_assert(c->swiglu_alpha == 1.702f && c->swiglu_limit == 7.0f);
    ck_assert_int_eq(c->n_swa, 5);
    ck_assert_int_eq(c->swa_period, 2);
    ck_assert_int_eq(c->n_ff_exp, 32); /* expert_feed_forward_length */
    static const int32_t window[] = {5, 0, 5, 0}; /* set_swa_pattern(2): the even layers slide */
    for (int32_t il = 0; il < 4; il++)
        ck_assert_int_eq(model_layer_window(c, il), window[il]);
    const model_layer_t *L = &model_weights(model)->layers[3];
    ck_assert_int_eq(L->sinks.ne[0], 4);
    ck_assert_int_eq(L->bo.ne[0], 64);
    ck_assert_int_eq(L->bq.ne[0], 64);
    ck_assert_int_eq(L->router_bias.ne[0], 8);
    ck_assert_str_eq(L->ffn_norm.name, "blk.3.post_attention_norm.weight");
    /* an expert's bias is its "matrix": one row of the [n, n_expert] tensor */
    ck_assert_uint_eq(L->gate_exps_b.mat_bytes, 32 * 4);
    ck_assert_uint_eq(L->down_exps_b.mat_bytes, 64 * 4);
    ck_assert_ptr_eq(model_tensor_row(&L->up_exps_b, 3, 0), (const char *)L->up_exps_b.data + 3 * 32 * 4);
    ck_assert_ptr_eq(model_expert_tensor(L, 5), &L->down_exps_b);

    /* the period from the file; 0 makes every layer slide */
    static const struct {
        int32_t period;
        int32_t window[4];
    } periods[] = {{3, {5, 5, 0, 5}}, {0, {5, 5, 5, 5}}, {1, {0, 0, 0, 0}}};
    for (size_t i = 0; i < sizeof periods / sizeof periods[0]; i++) {
        void *data;
        size_t size;
        s = tiny_spec("gpt-oss");
        s.n_layer = 4;
        tiny_model_image(&s, &data, &size);
        gguf_t *g = NULL;
        guild_err_t err = {{0}};
        ck_assert(gguf_new_from_memory(&g, data, size, "tiny.gguf", &err) == 0);
        model_config_t cfg;
        ck_assert_msg(model_config_load(&cfg, g, &err) == 0, "%s", err.msg);
        for (int32_t il = 0; il < 4; il++) {
            cfg.swa_period = periods[i].period;
            ck_assert_int_eq(model_layer_window(&cfg, il), periods[i].window[il]);
        }
        gguf_destroy(&g);
        free(data);
    }

    /* what it needs */
    s = tiny_spec("gpt-oss");
    s.omit_key = "gpt-oss.attention.sliding_window";
    open_fails(&s, "metadata key gpt-oss.attention.sliding_window is missing", NULL);
    static const char *const needed[] = {"blk.1.attn_sinks.weight", "blk.0.attn_output.bias",
                                         "blk.1.ffn_gate_inp.bias", "blk.0.ffn_down_exps.bias",
                                         "blk.1.post_attention_norm.weight"};
    for (size_t i = 0; i < sizeof needed / sizeof needed[0]; i++) {
        s = tiny_spec("gpt-oss");
        s.omit_tensor = needed[i];
        open_fails(&s, needed[i], "is missing");
    }
    s = tiny_spec("gpt-oss");
    s.reshape_tensor = "blk.0.ffn_up_exps.bias";
    open_fails(&s, "blk.0.ffn_up_exps.bias has shape [64, 8], expected [32, 8]", NULL);
}
END_TEST

/* glm4moe as llama.cpp's converter writes it: a dense first layer, the grouped sigmoid router with its score
 * bias and the keys' renorm and scale, the ungated shared expert one routed expert wide, the FFN norm called
 * post_attention_norm, q/k norms where the file has them, the MTP layer after the others loaded and checked. */
START_TEST(test_glm4moe)
{
    tiny_spec_t s = tiny_spec("glm4moe");
    s.n_layer = 3;
    s.n_mtp = 1;
    open_ok(&s);
    const model_config_t *c = model_config(model);
    ck_assert_int_eq(c->arch, MODEL_ARCH_GLM4MOE);
    ck_assert_int_eq(c->n_layer, 3);
    ck_assert_int_eq(c->n_layer_mtp, 1);
    ck_assert_int_eq(c->layout, MODEL_LAYOUT_DENSE_FIRST);
    ck_assert_int_eq(c->n_layer_dense_lead, 1);
    ck_assert_int_eq(c->n_ff, 80);
    ck_assert_int_eq(c->n_ff_exp, 32);
    ck_assert_int_eq(c->n_expert_shared, 1);
    ck_assert_int_eq(c->n_ff_shexp, 32);
    ck_assert(c->expert_weights_scale == 2.5f);
    ck_assert_int_eq(c->n_expert_groups, 0);
    ck_assert_uint_eq(c->attn.opts, MODEL_GQA_ROPE_NEOX | MODEL_GQA_ROPE_PARTIAL | MODEL_GQA_QKV_BIAS |
                                        MODEL_GQA_QK_NORM_HEAD);
    ck_assert_int_eq(c->router.kind, MODEL_ROUTER_SIGMOID_GROUPED);
    ck_assert_uint_eq(c->router.opts, MODEL_ROUTER_SCORE_BIAS | MODEL_ROUTER_RENORM);
    ck_assert_uint_eq(c->ffn.opts, MODEL_FFN_SHEXP);
    ck_assert_int_eq(c->ffn_lead.kind, MODEL_FFN_DENSE);
    ck_assert_uint_eq(c->attn.maybe | c->router.maybe | c->ffn.maybe, 0);
    const model_weights_t *w = model_weights(model);
    ck_assert(!model_layer_has_experts(&w->layers[0]));
    ck_assert_ptr_null(w->layers[0].router.data);
    ck_assert_int_eq(w->layers[0].ffn_down.ne[0], 80);
    ck_assert_ptr_nonnull(w->layers[0].ffn_norm.data);
    ck_assert_str_eq(w->layers[0].ffn_norm.name, "blk.0.post_attention_norm.weight");
    for (int il = 1; il < 3; il++) {
        const model_layer_t *L = &w->layers[il];
        ck_assert(model_layer_has_experts(L));
        ck_assert_ptr_null(L->ffn_gate.data);
        ck_assert_int_eq(L->score_bias.ne[0], 8);
        ck_assert_int_eq(L->shexp_down.ne[0], 32);
        ck_assert_ptr_null(L->shexp_gate_inp.data);
        ck_assert_int_eq(L->q_norm.ne[0], 16);
    }
    ck_assert_int_eq(w->n_layer, 3);
    ck_assert_int_eq(w->n_mtp, 1);
    ck_assert_str_eq(w->mtp[0].eh_proj.name, "blk.3.nextn.eh_proj.weight");
    ck_assert_int_eq(w->mtp[0].eh_proj.ne[0], 128);
    ck_assert_ptr_nonnull(w->mtp[0].block.gate_exps.data);
    ck_assert_ptr_nonnull(w->mtp[0].head_norm.data);
    ck_assert_ptr_null(w->mtp[0].head.data);

    /* GLM-4.5-Air: no q/k norms; expert_weights_norm absent: no renorm */
    s = tiny_spec("glm4moe");
    s.no_maybe = true;
    s.omit_key = "glm4moe.expert_weights_norm";
    open_ok(&s);
    c = model_config(model);
    ck_assert_uint_eq(c->attn.opts, MODEL_GQA_ROPE_NEOX | MODEL_GQA_ROPE_PARTIAL | MODEL_GQA_QKV_BIAS);
    ck_assert_uint_eq(c->router.opts, MODEL_ROUTER_SCORE_BIAS); /* llama.cpp requires exp_probs_b */
    ck_assert_int_eq(c->n_layer_mtp, 0);
    ck_assert_ptr_null(model_weights(model)->layers[1].q_norm.data);
    ck_assert_ptr_null(model_weights(model)->mtp);
    /* groups of 2, the best 2 of 4 */
    s = tiny_spec("glm4moe");
    s.n_groups = 4;
    s.n_group_used = 2;
    open_ok(&s);
    ck_assert_int_eq(model_config(model)->n_expert_groups, 4);
    ck_assert_int_eq(model_config(model)->n_group_used, 2);
    /* all layers dense but the MTP one: no router anywhere the model runs */
    s = tiny_spec("glm4moe");
    s.n_dense_lead = 2;
    s.n_mtp = 1;
    open_ok(&s);
    ck_assert(!model_layer_has_experts(&model_weights(model)->layers[1]));
    ck_assert(model_layer_has_experts(&model_weights(model)->mtp[0].block));
}
END_TEST

START_TEST(test_glm4moe_errors)
{
    tiny_spec_t s = tiny_spec("glm4moe");
    s.gating = 1;
    open_fails(&s, "glm4moe.expert_gating_func = 1", "sigmoid");
    s = tiny_spec("glm4moe");
    s.n_groups = 3;
    s.n_group_used = 1;
    open_fails(&s, "expert_group_count = 3 does not split 8 experts", NULL);
    s.n_groups = 4;
    s.n_group_used = 0;
    open_fails(&s, "expert_group_used_count = 0", NULL);
    s.n_groups = 8; /* groups of 1 */
    s.n_group_used = 4;
    open_fails(&s, "groups of at least 2", NULL);
    s = tiny_spec("glm4moe");
    s.omit_key = "glm4moe.expert_shared_count";
    open_fails(&s, "glm4moe.expert_shared_count is missing", NULL);
    s = tiny_spec("glm4moe");
    s.n_shared = 0;
    open_fails(&s, "expert_shared_count = 0", NULL);
    s = tiny_spec("glm4moe");
    s.omit_tensor = "blk.0.ffn_up.weight";
    open_fails(&s, "tensor blk.0.ffn_up.weight is missing", NULL);
    s.omit_tensor = "blk.1.post_attention_norm.weight";
    open_fails(&s, "tensor blk.1.post_attention_norm.weight is missing", NULL);
    s.omit_tensor = "blk.1.ffn_down_shexp.weight";
    open_fails(&s, "tensor blk.1.ffn_down_shexp.weight is missing", NULL);
    s.omit_tensor = "blk.1.attn_k_norm.weight"; /* the file has q norms: it needs k norms in every layer */
    open_fails(&s, "tensor blk.1.attn_k_norm.weight is missing", NULL);
    s.omit_tensor = NULL;
    s.reshape_tensor = "blk.1.exp_probs_b.bias";
    open_fails(&s, "blk.1.exp_probs_b.bias has shape [40], expected [8]", NULL);
    s = tiny_spec("glm4moe");
    s.n_mtp = 1;
    s.omit_tensor = "blk.2.nextn.eh_proj.weight";
    open_fails(&s, "tensor blk.2.nextn.eh_proj.weight is missing", NULL);
    s.omit_tensor = "blk.2.ffn_gate_exps.weight";
    open_fails(&s, "tensor blk.2.ffn_gate_exps.weight is missing", NULL);
    s.omit_tensor = NULL;
    s.n_mtp = 2; /* nextn_predict_layers must leave a layer to run */
    s.n_layer = 0;
    open_fails(&s, "nextn_predict_layers = 2 is out of range", NULL);
    s = tiny_spec("glm4moe");
    s.n_dense_lead = 3;
    open_fails(&s, "leading_dense_block_count = 3 is out of range", NULL);
}
END_TEST

/* deepseek2 (llama.cpp's reading): MLA with the compressed cache's row, q LoRA where present, the split or joined
 * up-projections, YaRN's scale, dense first, the ungated shared expert, the router by expert_gating_func, an MTP
 * layer. */
START_TEST(test_deepseek2)
{
    tiny_spec_t s = tiny_spec("deepseek2");
    s.n_layer = 3;
    s.n_mtp = 1;
    open_ok(&s);
    const model_config_t *c = model_config(model);
    ck_assert_int_eq(c->arch, MODEL_ARCH_DEEPSEEK2);
    ck_assert_int_eq(c->n_layer, 3);
    ck_assert_int_eq(c->n_layer_mtp, 1);
    ck_assert_int_eq(c->attn.kind, MODEL_ATTN_MLA);
    ck_assert_int_eq(c->n_head, 4);
    ck_assert_int_eq(c->n_head_kv, 4);
    ck_assert_int_eq(c->head_dim, 40);
    ck_assert_int_eq(c->head_dim_v, 32);
    ck_assert_int_eq(c->n_rot, 8);
    ck_assert_int_eq(c->n_lora_kv, 64);
    ck_assert_int_eq(c->n_lora_q, 32);
    ck_assert(c->mla_kv_split);
    ck_assert(!c->rope_neox);
    ck_assert(c->mla_kq_scale == 1.0f / sqrtf(40.0f));
    const model_cache_row_t row = model_layer_cache_row(c, 1);
    ck_assert_int_eq(row.k, 64 + 8);
    ck_assert_int_eq(row.v, 0);
    ck_assert_int_eq(c->layout, MODEL_LAYOUT_DENSE_FIRST);
    ck_assert_int_eq(c->ffn_lead.kind, MODEL_FFN_DENSE);
    ck_assert_uint_eq(c->ffn.opts, MODEL_FFN_SHEXP);
    ck_assert_int_eq(c->router.kind, MODEL_ROUTER_SIGMOID_GROUPED);
    ck_assert_uint_eq(c->router.opts, MODEL_ROUTER_SCORE_BIAS | MODEL_ROUTER_RENORM);
    const model_weights_t *w = model_weights(model);
    for (int il = 0; il < 3; il++) {
        const model_layer_t *L = &w->layers[il];
        ck_assert_ptr_null(L->wq.data);
        ck_assert_int_eq(L->wq_b.ne[1], 4 * 40);
        ck_assert_int_eq(L->wkv_a.ne[1], 64 + 8);
        ck_assert_int_eq(L->wk_b.ne[0], 32);
        ck_assert_int_eq(L->wk_b.ne[2], 4);
        ck_assert_int_eq(L->wv_b.ne[1], 32);
        ck_assert_ptr_null(L->wkv_b.data);
        ck_assert_int_eq(L->wo.ne[0], 4 * 32);
        ck_assert(model_layer_has_experts(L) == (il > 0));
    }
    ck_assert_int_eq(w->n_mtp, 1);
    ck_assert_ptr_nonnull(w->mtp[0].block.wk_b.data);

    /* DeepSeek-V2-Lite's shape: no q LoRA, softmax gating; an older file's attn_kv_b */
    s = tiny_spec("deepseek2");
    s.n_lora_q = 0;
    s.gating = 1;
    s.mla_kv_b = true;
    open_ok(&s);
    c = model_config(model);
    ck_assert_int_eq(c->router.kind, MODEL_ROUTER_SOFTMAX_TOPK);
    ck_assert_uint_eq(c->router.opts, 0);
    ck_assert(c->expert_weights_scale == 2.5f);
    ck_assert_int_eq(c->n_lora_q, 0);
    ck_assert(!c->mla_kv_split);
    ck_assert_int_eq(c->head_dim, 40);
    ck_assert_int_eq(c->head_dim_v, 32);
    w = model_weights(model);
    ck_assert_int_eq(w->layers[1].wq.ne[1], 4 * 40);
    ck_assert_int_eq(w->layers[1].wkv_b.ne[1], 4 * (32 + 32));
    ck_assert_ptr_null(w->layers[1].wk_b.data);

    /* YaRN as llama.cpp takes it for deepseek2 (yarn_log_multiplier = 0.1 mscale_all_dim): the rope's magnitude
     * 1 after ggml's own factor, the logits scaled by (1 + 0.1 mscale_all_dim ln s)^2 / sqrt(key) */
    s = tiny_spec("deepseek2");
    s.yarn_factor = 4.0f;
    open_ok(&s);
    c = model_config(model);
    ck_assert_int_eq(c->rope_scaling, MODEL_ROPE_SCALING_YARN);
    ck_assert(fabsf(c->yarn_attn_factor * (1.0f + 0.1f * logf(4.0f)) - 1.0f) < 1e-6f);
    const float m = 1.0f + 0.1f * 0.707f * logf(4.0f);
    ck_assert_msg(fabsf(c->mla_kq_scale - m * m / sqrtf(40.0f)) < 1e-6f, "%g", (double)c->mla_kq_scale);
}
END_TEST

START_TEST(test_deepseek2_errors)
{
    tiny_spec_t s = tiny_spec("deepseek2");
    s.omit_key = "deepseek2.attention.kv_lora_rank";
    open_fails(&s, "deepseek2.attention.kv_lora_rank", NULL);
    s = tiny_spec("deepseek2");
    s.omit_key = "deepseek2.attention.value_length_mla";
    open_fails(&s, "value_length_mla", NULL);
    s = tiny_spec("deepseek2");
    s.omit_tensor = "blk.1.attn_k_b.weight";
    open_fails(&s, "blk.1.attn_k_b.weight", NULL);
    s = tiny_spec("deepseek2");
    s.omit_tensor = "blk.0.attn_q_a_norm.weight";
    open_fails(&s, "blk.0.attn_q_a_norm.weight", NULL);
    s = tiny_spec("deepseek2");
    s.reshape_tensor = "blk.1.attn_kv_a_mqa.weight";
    open_fails(&s, "blk.1.attn_kv_a_mqa.weight", NULL);
    s = tiny_spec("deepseek2");
    s.n_rot = 7;
    open_fails(&s, "rope.dimension_count = 7 must be even", NULL);
    s = tiny_spec("deepseek2");
    s.gating = 3;
    open_fails(&s, "expert_gating_func = 3", NULL);
    s = tiny_spec("deepseek2"); /* softmax gating with groups (DeepSeek-V2): the softmax router takes them */
    s.gating = 1;
    s.n_groups = 4;
    s.n_group_used = 2;
    open_ok(&s);
    ck_assert_int_eq(model_config(model)->router.kind, MODEL_ROUTER_SOFTMAX_TOPK);
    ck_assert_int_eq(model_config(model)->n_expert_groups, 4);
    ck_assert_int_eq(model_config(model)->n_group_used, 2);
    s.n_group_used = 5;
    open_fails(&s, "expert_group_used_count = 5", NULL);
    s.n_groups = 3;
    s.n_group_used = 1;
    open_fails(&s, "expert_group_count = 3 does not split 8 experts", NULL);
}
END_TEST

START_TEST(test_layer_parts_by_layout)
{
    model_config_t c;
    memset(&c, 0, sizeof c);
    c.n_layer = 8;
    c.attn = (model_part_t){.kind = MODEL_ATTN_GQA, .opts = MODEL_GQA_OUT_GATE};
    c.attn_linear = (model_part_t){.kind = MODEL_ATTN_GDN, .opts = 0};
    c.ffn = (model_part_t){.kind = MODEL_FFN_MOE, .opts = MODEL_FFN_SHEXP};
    c.ffn_lead = (model_part_t){.kind = MODEL_FFN_DENSE, .opts = 0};
    c.router = (model_part_t){.kind = MODEL_ROUTER_SIGMOID_GROUPED, .opts = 0};
    c.layout = MODEL_LAYOUT_HYBRID;
    c.full_attn_interval = 4;
    for (int32_t il = 0; il < c.n_layer; il++) {
        const model_layer_parts_t lp = model_layer_parts(&c, il);
        ck_assert_ptr_eq(lp.attn, il == 3 || il == 7 ? &c.attn : &c.attn_linear);
        ck_assert_ptr_eq(lp.ffn, &c.ffn);
        ck_assert_ptr_eq(lp.router, &c.router);
    }
    c.layout = MODEL_LAYOUT_DENSE_FIRST;
    c.n_layer_dense_lead = 3;
    for (int32_t il = 0; il < c.n_layer; il++) {
        const model_layer_parts_t lp = model_layer_parts(&c, il);
        ck_assert_ptr_eq(lp.attn, &c.attn);
        ck_assert_ptr_eq(lp.ffn, il < 3 ? &c.ffn_lead : &c.ffn);
        ck_assert_ptr_eq(lp.router, il < 3 ? NULL : &c.router);
    }
}
END_TEST

/* model_parts_check against what a place implements: kinds, then options, per layer as the layout has them. */
START_TEST(test_parts_check)
{
    model_config_t c;
    memset(&c, 0, sizeof c);
    c.arch = MODEL_ARCH_QWEN3NEXT;
    c.n_layer = 4;
    c.layout = MODEL_LAYOUT_HYBRID;
    c.full_attn_interval = 4;
    c.attn = (model_part_t){.kind = MODEL_ATTN_GQA, .opts = MODEL_GQA_QK_NORM_HEAD | MODEL_GQA_OUT_GATE};
    c.attn_linear = (model_part_t){.kind = MODEL_ATTN_GDN, .opts = 0};
    c.ffn = (model_part_t){.kind = MODEL_FFN_MOE, .opts = MODEL_FFN_SHEXP_GATED};
    c.router = (model_part_t){.kind = MODEL_ROUTER_SOFTMAX_TOPK, .opts = MODEL_ROUTER_RENORM};
    model_part_support_t s;
    memset(&s, 0, sizeof s);
    s.has[MODEL_PART_ATTN][MODEL_ATTN_GQA] = true;
    s.opts[MODEL_PART_ATTN][MODEL_ATTN_GQA] = MODEL_GQA_QK_NORM_HEAD;
    s.has[MODEL_PART_FFN][MODEL_FFN_MOE] = true;
    s.opts[MODEL_PART_FFN][MODEL_FFN_MOE] = MODEL_FFN_SHEXP_GATED;
    s.has[MODEL_PART_ROUTER][MODEL_ROUTER_SOFTMAX_TOPK] = true;
    guild_err_t err = {{0}};
    ck_assert_int_eq(model_parts_check(&c, &s, "test backend", &err), -1);
    ck_assert_str_eq(err.msg, "test backend: architecture \"qwen3next\": attention part \"gdn\" is not implemented");
    s.has[MODEL_PART_ATTN][MODEL_ATTN_GDN] = true;
    ck_assert_int_eq(model_parts_check(&c, &s, "test backend", &err), -1);
    ck_assert_str_eq(err.msg, "test backend: architecture \"qwen3next\": router part \"softmax-topk\": option "
                              "\"renorm\" is not implemented");
    s.opts[MODEL_PART_ROUTER][MODEL_ROUTER_SOFTMAX_TOPK] = MODEL_ROUTER_RENORM;
    ck_assert_int_eq(model_parts_check(&c, &s, "test backend", &err), -1); /* layer 3 has full attention */
    ck_assert_str_eq(err.msg, "test backend: architecture \"qwen3next\": attention part \"gqa\": option \"output "
                              "gate\" is not implemented");
    s.opts[MODEL_PART_ATTN][MODEL_ATTN_GQA] |= MODEL_GQA_OUT_GATE;
    ck_assert_int_eq(model_parts_check(&c, &s, "test backend", &err), 0);
    /* with three layers, no layer has full attention: its options need no implementation */
    c.n_layer = 3;
    s.opts[MODEL_PART_ATTN][MODEL_ATTN_GQA] = 0;
    ck_assert_int_eq(model_parts_check(&c, &s, "test backend", &err), 0);
}
END_TEST

START_TEST(test_missing_or_bad_keys)
{
    tiny_spec_t s = tiny_spec("qwen3moe");
    s.omit_key = "qwen3moe.block_count";
    open_fails(&s, "metadata key qwen3moe.block_count is missing", NULL);
    s.omit_key = "qwen3moe.attention.layer_norm_rms_epsilon";
    open_fails(&s, "layer_norm_rms_epsilon is missing", NULL);
    s.omit_key = "qwen3moe.expert_count";
    open_fails(&s, "qwen3moe.expert_count is missing", NULL);
    s = tiny_spec("llama");
    s.n_head_kv = 3; /* 4 % 3 != 0 */
    open_fails(&s, "head_count 4 is not a multiple of head_count_kv 3", NULL);
    s = tiny_spec("olmoe");
    s.n_used = 9;
    open_fails(&s, "expert_used_count 9 > expert_count 8", NULL);
    s = tiny_spec("qwen2moe");
    s.n_used = 0;
    open_fails(&s, "MoE models only", NULL);
}
END_TEST

/* ---- weights ------------------------------------------------------------------------------------------ */

START_TEST(test_missing_tensor)
{
    tiny_spec_t s = tiny_spec("qwen3moe");
    s.omit_tensor = "blk.1.ffn_up_exps.weight";
    open_fails(&s, "tensor blk.1.ffn_up_exps.weight is missing", NULL);
    s = tiny_spec("qwen2moe");
    s.omit_tensor = "blk.0.attn_k.bias";
    open_fails(&s, "tensor blk.0.attn_k.bias is missing", NULL);
    s.omit_tensor = "blk.1.ffn_gate_inp_shexp.weight";
    open_fails(&s, "tensor blk.1.ffn_gate_inp_shexp.weight is missing", NULL);
    s = tiny_spec("olmoe");
    s.omit_tensor = "token_embd.weight";
    open_fails(&s, "token_embd.weight is missing", NULL);
}
END_TEST

START_TEST(test_wrong_shape)
{
    tiny_spec_t s = tiny_spec("llama");
    s.reshape_tensor = "blk.0.attn_q.weight";
    open_fails(&s, "tensor blk.0.attn_q.weight has shape [96, 64], expected [64, 64]", NULL);
    s = tiny_spec("qwen3moe");
    s.reshape_tensor = "blk.1.ffn_down_exps.weight";
    open_fails(&s, "blk.1.ffn_down_exps.weight has shape [64, 64, 8], expected [32, 64, 8]", NULL);
    s.reshape_tensor = "blk.0.attn_q_norm.weight";
    open_fails(&s, "blk.0.attn_q_norm.weight has shape [48], expected [16]", NULL);
}
END_TEST

START_TEST(test_unsupported_tensor_type)
{
    tiny_spec_t s = tiny_spec("qwen3moe");
    s.f16_tensor = "blk.1.ffn_norm.weight";
    open_fails(&s, "tensor blk.1.ffn_norm.weight: type f16 is not supported here", NULL);
    s.f16_tensor = "blk.1.attn_q.weight"; /* fine for a matrix */
    open_ok(&s);
    ck_assert_int_eq(model_weights(model)->layers[1].wq.type, GUILD_TYPE_F16);
}
END_TEST

START_TEST(test_tied_output)
{
    tiny_spec_t s = tiny_spec("qwen3moe");
    s.tied = true;
    open_ok(&s);
    const model_weights_t *w = model_weights(model);
    ck_assert(w->tied_output);
    ck_assert_ptr_eq(w->output.data, w->token_embd.data);
}
END_TEST

START_TEST(test_quantized_weights_bind)
{
    tiny_spec_t s = tiny_spec("qwen2moe");
    s.wtype = GUILD_TYPE_Q8_0;
    s.n_ff_shexp = 64;
    open_ok(&s);
    const model_tensor_t *t = &model_weights(model)->layers[0].gate_exps;
    ck_assert_int_eq(t->type, GUILD_TYPE_Q8_0);
    ck_assert_uint_eq(t->row_bytes, 64 / 32 * 34);
    ck_assert_ptr_eq(model_tensor_row(t, 3, 5), (const char *)t->data + 3 * t->mat_bytes + 5 * t->row_bytes);
}
END_TEST

START_TEST(test_missing_file)
{
    model_t *m = NULL;
    guild_err_t err = {{0}};
    ck_assert_int_eq(model_new(&m, "/nonexistent/model.gguf", &err), -1);
    ck_assert_ptr_null(m);
    ck_assert_ptr_nonnull(strstr(err.msg, "/nonexistent/model.gguf"));
}
END_TEST

int main(void)
{
    Suite *su = suite_create("model");
    TCase *tc = tcase_create("config");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_loop_test(tc, test_config_of_each_architecture, 0, 4);
    tcase_add_test(tc, test_defaults_from_llama_cpp);
    tcase_add_test(tc, test_config_print);
    tcase_add_test(tc, test_layer_parts_by_layout);
    tcase_add_test(tc, test_parts_check);
    tcase_add_test(tc, test_glm4moe);
    tcase_add_test(tc, test_deepseek2);
    suite_add_tcase(su, tc);
    tc = tcase_create("config_errors");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, test_unsupported_architecture);
    tcase_add_test(tc, test_gpt_oss);
    tcase_add_loop_test(tc, test_qwen3next, 0, 2);
    tcase_add_test(tc, test_missing_or_bad_keys);
    tcase_add_test(tc, test_glm4moe_errors);
    tcase_add_test(tc, test_deepseek2_errors);
    tcase_add_test(tc, test_missing_file);
    suite_add_tcase(su, tc);
    tc = tcase_create("weights");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, test_tied_output);
    tcase_add_test(tc, test_quantized_weights_bind);
    suite_add_tcase(su, tc);
    tc = tcase_create("weight_errors");
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, test_missing_tensor);
    tcase_add_test(tc, test_wrong_shape);
    tcase_add_test(tc, test_unsupported_tensor_type);
    suite_add_tcase(su, tc);
    return check_run(su);
}
