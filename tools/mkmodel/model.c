#include "tools/mkmodel/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/gguf/gguf.h"
#include "core/gguf/gguf_writer.h"
#include "tools/mkmodel/fill.h"
#include "tools/mkmodel/plan.h"
#include "tools/mkmodel/recipe.h"
#include "tools/mkmodel/vocab.h"

/* ChatML, as Qwen's chat models use it. */
static const char chat_template[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

static int set_builtin_vocab(gguf_writer_t *w, const mkmodel_vocab_t *v)
{
    int64_t n = mkmodel_vocab_n_tokens(v), m = mkmodel_vocab_n_merges(v);
    const char **tokens = malloc((size_t)n * sizeof *tokens);
    int32_t *types = malloc((size_t)n * sizeof *types);
    const char **merges = malloc((size_t)(m + 1) * sizeof *merges);
    int rc = -1;
    if (tokens && types && merges) {
        for (int64_t i = 0; i < n; i++) {
            tokens[i] = mkmodel_vocab_token(v, i);
            types[i] = mkmodel_vocab_token_type(v, i);
        }
        for (int64_t i = 0; i < m; i++)
            merges[i] = mkmodel_vocab_merge(v, i);
        /* A failing setter is remembered by the writer and reported by gguf_writer_begin. */
        gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
        gguf_writer_set_str(w, "tokenizer.ggml.pre", "qwen2");
        gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tokens, NULL, (uint64_t)n);
        gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_VALUE_INT32, types, (uint64_t)n);
        gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, NULL, (uint64_t)m);
        gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)mkmodel_vocab_endoftext(v));
        gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)mkmodel_vocab_im_end(v));
        gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)mkmodel_vocab_endoftext(v));
        gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", false);
        gguf_writer_set_str(w, "tokenizer.chat_template", chat_template);
        rc = 0;
    }
    free(tokens);
    free(types);
    free(merges);
    return rc; /* -1: out of memory */
}

/* Opens the --vocab-from file and counts its tokens. */
static int open_vocab(gguf_t **g, const char *path, int64_t *n_vocab, guild_err_t *err)
{
    if (gguf_new(g, path, err) < 0)
        return guild_err_prefix(err, "--vocab-from: ");
    gguf_value_type_t et;
    uint64_t n;
    if (gguf_get_arr(*g, "tokenizer.ggml.tokens", &et, &n, NULL) < 0 || et != GGUF_VALUE_STRING || n == 0 ||
        n > INT32_MAX) {
        gguf_destroy(g);
        return guild_err_set(err, "--vocab-from %s: no usable tokenizer.ggml.tokens (a non-empty array of strings)",
                             path);
    }
    *n_vocab = (int64_t)n;
    return 0;
}

/* Copies every tokenizer.* key of g. */
static int copy_vocab(gguf_writer_t *w, const gguf_t *g, guild_err_t *err)
{
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        const char *key = gguf_kv_key(g, i);
        if (!strncmp(key, "tokenizer.", 10) && gguf_writer_set_copy(w, key, gguf_kv_value(g, i)) < 0)
            return guild_err_set(err, "--vocab-from %s: cannot copy %s", gguf_path(g), key);
    }
    return 0;
}

/* The keys of each part kind the architecture's row names (core/model/KIND.c reads them back). */
typedef void (*part_keys_fn)(gguf_writer_t *w, const mkmodel_config_t *c, const model_part_t *p, const char *arch);

static void gqa_keys(gguf_writer_t *w, const mkmodel_config_t *c, const model_part_t *p, const char *arch)
{
    char k[128];
#define KEY(s) (snprintf(k, sizeof k, "%s." s, arch), k)
    gguf_writer_set_u32(w, KEY("attention.head_count"), (uint32_t)c->n_head);
    gguf_writer_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)c->n_head_kv);
    gguf_writer_set_u32(w, KEY("attention.key_length"), (uint32_t)c->head_dim);
    gguf_writer_set_u32(w, KEY("attention.value_length"), (uint32_t)c->head_dim);
    const int64_t rot = c->n_rot ? c->n_rot : mkmodel_arch_default_rot(c->arch, c->head_dim);
    gguf_writer_set_u32(w, KEY("rope.dimension_count"), (uint32_t)rot);
    /* Qwen3_5MoeTextModel writes the interleaved M-RoPE sections (mrope_section [11, 11, 10] for the 32 rotated
     * pairs, padded to 4), which llama.cpp requires: here the pairs shared out the same way for any width, the
     * time, height and width slots holding every pair, none for the fourth (text rotates by its position) */
    if (c->arch == MKMODEL_ARCH_QWEN35MOE) {
        const int64_t pairs = rot / 2;
        const int32_t sec[4] = {(int32_t)((pairs + 2) / 3), (int32_t)((pairs + 1) / 3), (int32_t)(pairs / 3), 0};
        gguf_writer_set_arr(w, KEY("rope.dimension_sections"), GGUF_VALUE_INT32, sec, 4);
    }
    /* the window only: llama.cpp's gpt-oss slides every other layer by default, as its converter leaves it */
    if (p->opts & MODEL_GQA_SLIDING)
        gguf_writer_set_u32(w, KEY("attention.sliding_window"), (uint32_t)c->n_swa);
}

/* Multi-head latent attention's keys as DeepseekV2Model writes them since the k/v split: the MQA view of the
 * absorbed form (one key/value head of the latent and the rotated part) in head_count_kv, key_length and
 * value_length, the heads' own sizes in key_length_mla and value_length_mla; q_lora_rank always (llama.cpp
 * requires it but for 26 or 27 layers; 0 means attn_q); with yarn the log multiplier 0.1 mscale_all_dim. */
static void mla_keys(gguf_writer_t *w, const mkmodel_config_t *c, const model_part_t *p, const char *arch)
{
    char k[128];
    const int64_t rot = c->n_rot ? c->n_rot : mkmodel_arch_default_rot(c->arch, c->head_dim);
    (void)p;
    gguf_writer_set_u32(w, KEY("attention.head_count"), (uint32_t)c->n_head);
    gguf_writer_set_u32(w, KEY("attention.head_count_kv"), 1);
    gguf_writer_set_u32(w, KEY("attention.q_lora_rank"), (uint32_t)c->n_lora_q);
    gguf_writer_set_u32(w, KEY("attention.kv_lora_rank"), (uint32_t)c->n_lora_kv);
    gguf_writer_set_u32(w, KEY("attention.key_length"), (uint32_t)(c->n_lora_kv + rot));
    gguf_writer_set_u32(w, KEY("attention.value_length"), (uint32_t)c->n_lora_kv);
    gguf_writer_set_u32(w, KEY("attention.key_length_mla"), (uint32_t)c->head_dim);
    gguf_writer_set_u32(w, KEY("attention.value_length_mla"), (uint32_t)c->head_dim_v);
    gguf_writer_set_u32(w, KEY("rope.dimension_count"), (uint32_t)rot);
    if (c->yarn_factor > 0 && c->yarn_mscale_all > 0)
        gguf_writer_set_f32(w, KEY("rope.scaling.yarn_log_multiplier"), (float)(0.1 * c->yarn_mscale_all));
}

/* the gated delta net's shape, as llama.cpp's converter writes Qwen3-Next's linear_* settings */
static void gdn_keys(gguf_writer_t *w, const mkmodel_config_t *c, const model_part_t *p, const char *arch)
{
    char k[128];
    (void)p;
    gguf_writer_set_u32(w, KEY("ssm.conv_kernel"), (uint32_t)c->ssm_conv);
    gguf_writer_set_u32(w, KEY("ssm.state_size"), (uint32_t)c->ssm_state);
    gguf_writer_set_u32(w, KEY("ssm.group_count"), (uint32_t)c->ssm_groups);
    gguf_writer_set_u32(w, KEY("ssm.time_step_rank"), (uint32_t)c->ssm_heads);
    gguf_writer_set_u32(w, KEY("ssm.inner_size"), (uint32_t)(c->ssm_heads * c->ssm_state));
    gguf_writer_set_u32(w, KEY("full_attention_interval"), (uint32_t)c->full_attn_interval);
}

static void moe_keys(gguf_writer_t *w, const mkmodel_config_t *c, const model_part_t *p, const char *arch)
{
    char k[128];
    gguf_writer_set_u32(w, KEY("expert_count"), (uint32_t)c->n_expert);
    gguf_writer_set_u32(w, KEY("expert_used_count"), (uint32_t)c->n_expert_used);
    /* llama (Mixtral) and olmoe take their experts' size from feed_forward_length (as their converters write
     * it, and mkmodel_config_validate keeps the two equal); the Qwen MoE archs have a separate key and keep the
     * dense size in feed_forward_length; gpt-oss's converter writes both, equal. */
    if (mkmodel_arch_expert_ff_key(c->arch))
        gguf_writer_set_u32(w, KEY("expert_feed_forward_length"), (uint32_t)c->n_ff_exp);
    if (p->opts & MODEL_FFN_SHEXP_GATED)
        gguf_writer_set_u32(w, KEY("expert_shared_feed_forward_length"), (uint32_t)c->n_ff_shexp);
    /* llama.cpp's glm4moe and deepseek2 size the shared expert as this many routed experts */
    if (p->opts & MODEL_FFN_SHEXP)
        gguf_writer_set_u32(w, KEY("expert_shared_count"), (uint32_t)(c->n_ff_shexp / c->n_ff_exp));
}

/* The softmax router's keys where the row picks the router by the gating function (deepseek2 V2): softmax, the
 * weights scaled (routed_scaling_factor), not renormalised; the group counts only where there are groups. */
static void softmax_keys(gguf_writer_t *w, const mkmodel_config_t *c, const model_part_t *p, const char *arch)
{
    char k[128];
    (void)p;
    if (!mkmodel_arch_info(c->arch)->gating_picks_router)
        return; /* the other softmax routers have no keys of their own */
    gguf_writer_set_u32(w, KEY("expert_gating_func"), 1);
    gguf_writer_set_f32(w, KEY("expert_weights_scale"), (float)c->weights_scale);
    if (c->n_expert_groups > 1) { /* DeepSeek-V2's n_group / topk_group, as its converter writes them */
        gguf_writer_set_u32(w, KEY("expert_group_count"), (uint32_t)c->n_expert_groups);
        gguf_writer_set_u32(w, KEY("expert_group_used_count"), (uint32_t)c->n_group_used);
    }
}

/* The grouped sigmoid router's keys as glm4moe's and deepseek2's converters write them (gating sigmoid, weights
 * renormalised and scaled); the group counts only where there are groups. */
static void sigmoid_keys(gguf_writer_t *w, const mkmodel_config_t *c, const model_part_t *p, const char *arch)
{
    char k[128];
    (void)p;
    gguf_writer_set_u32(w, KEY("expert_gating_func"), 2);
    gguf_writer_set_bool(w, KEY("expert_weights_norm"), true);
    gguf_writer_set_f32(w, KEY("expert_weights_scale"), (float)c->weights_scale);
    if (c->n_expert_groups > 1) {
        gguf_writer_set_u32(w, KEY("expert_group_count"), (uint32_t)c->n_expert_groups);
        gguf_writer_set_u32(w, KEY("expert_group_used_count"), (uint32_t)c->n_group_used);
    }
#undef KEY
}

static const part_keys_fn attn_keys[MODEL_ATTN_KINDS] = {
    [MODEL_ATTN_GQA] = gqa_keys, [MODEL_ATTN_MLA] = mla_keys, [MODEL_ATTN_GDN] = gdn_keys};
static const part_keys_fn ffn_keys[MODEL_FFN_KINDS] = {[MODEL_FFN_MOE] = moe_keys};
static const part_keys_fn router_keys[MODEL_ROUTER_KINDS] = {[MODEL_ROUTER_SOFTMAX_TOPK] = softmax_keys,
                                                             [MODEL_ROUTER_SIGMOID_GROUPED] = sigmoid_keys};

static void set_hparams(gguf_writer_t *w, const mkmodel_config_t *c, int64_t n_vocab)
{
    const model_arch_info_t *info = mkmodel_arch_info(c->arch);
    const char *arch = info->name;
    char k[128];
#define KEY(s) (snprintf(k, sizeof k, "%s." s, arch), k)
    gguf_writer_set_str(w, "general.architecture", arch);
    gguf_writer_set_str(w, "general.name", c->name);
    gguf_writer_set_u32(w, "general.file_type", mkmodel_recipe_file_type(c));
    gguf_writer_set_u32(w, "general.quantization_version", 2);
    gguf_writer_set_u32(w, KEY("vocab_size"), (uint32_t)n_vocab);
    gguf_writer_set_u32(w, KEY("block_count"), (uint32_t)(c->n_layer + c->n_nextn));
    if (info->layout == MODEL_LAYOUT_DENSE_FIRST)
        gguf_writer_set_u32(w, KEY("leading_dense_block_count"), (uint32_t)c->n_dense_lead);
    if (info->nextn)
        gguf_writer_set_u32(w, KEY("nextn_predict_layers"), (uint32_t)c->n_nextn);
    gguf_writer_set_u32(w, KEY("context_length"), (uint32_t)c->n_ctx);
    gguf_writer_set_u32(w, KEY("embedding_length"), (uint32_t)c->n_embd);
    gguf_writer_set_u32(w, KEY("feed_forward_length"), (uint32_t)c->n_ff);
    gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), (float)c->rms_eps);
    gguf_writer_set_f32(w, KEY("rope.freq_base"), (float)c->rope_freq_base);
    if (c->yarn_factor > 0) {
        gguf_writer_set_str(w, KEY("rope.scaling.type"), "yarn");
        gguf_writer_set_f32(w, KEY("rope.scaling.factor"), (float)c->yarn_factor);
        gguf_writer_set_u32(w, KEY("rope.scaling.original_context_length"), (uint32_t)c->yarn_orig_ctx);
    }
#undef KEY
    attn_keys[info->attn.kind](w, c, &info->attn, arch);
    if (info->layout == MODEL_LAYOUT_HYBRID)
        attn_keys[info->attn_linear.kind](w, c, &info->attn_linear, arch);
    ffn_keys[info->ffn.kind](w, c, &info->ffn, arch);
    const model_part_t *router = mkmodel_router_part(c);
    if (router_keys[router->kind]) /* gpt-oss's router has no keys of its own */
        router_keys[router->kind](w, c, router, arch);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The parts of the model (--split-max-size): part k takes the plan's tensors from first[k], starting a new part
 * when the next tensor's data would take the current one past max bytes (a tensor larger than max gets a part of
 * its own); one part without a limit. first has room for every tensor; returns the parts' count. */
static int split_parts(const mkmodel_plan_t *plan, uint64_t max, int64_t *first)
{
    int n = 1;
    uint64_t bytes = 0;
    first[0] = 0;
    for (int64_t i = 0; i < mkmodel_plan_n_tensors(plan); i++) {
        const mkmodel_tensor_t *t = mkmodel_plan_tensor(plan, i);
        const uint64_t b = (t->row_bytes * t->n_rows + GGUF_DEFAULT_ALIGNMENT - 1) & ~(uint64_t)(GGUF_DEFAULT_ALIGNMENT - 1);
        if (max && bytes > 0 && bytes + b > max) {
            first[n++] = i;
            bytes = 0;
        }
        bytes += b;
    }
    return n;
}

int mkmodel_part_path(char *buf, size_t size, const char *out, int k, int n, guild_err_t *err)
{
    if (n == 1) {
        snprintf(buf, size, "%s", out);
        return 0;
    }
    char prefix[4096];
    size_t len = strlen(out);
    if (len > 5 && !strcmp(out + len - 5, ".gguf"))
        len -= 5;
    if (len >= sizeof prefix)
        return guild_err_set(err, "%s: name too long for a split model", out);
    memcpy(prefix, out, len);
    prefix[len] = '\0';
    if (gguf_split_path(buf, size, prefix, k, n) < 0)
        return guild_err_set(err, "%s: name too long for a split model", out);
    return 0;
}

int mkmodel_write(const mkmodel_config_t *given, mkmodel_progress_fn progress, void *progress_arg,
                  mkmodel_summary_t *summary, guild_err_t *err)
{
    mkmodel_config_t derived = *given;
    mkmodel_arch_derive(&derived);
    const mkmodel_config_t *cfg = &derived;
    gguf_writer_t **w = NULL;
    int64_t *first = NULL;
    int n_parts = 0;
    gguf_t *vocab_file = NULL;
    mkmodel_vocab_t *vocab = NULL;
    mkmodel_plan_t *plan = NULL;
    int rc = -1;
    int64_t n_vocab = cfg->n_vocab;
    if (cfg->vocab_from[0] ? open_vocab(&vocab_file, cfg->vocab_from, &n_vocab, err) < 0
                           : mkmodel_vocab_new(&vocab, n_vocab, err) < 0)
        return -1;
    if (mkmodel_plan_new(&plan, cfg, n_vocab, err) < 0)
        goto out;
    const int64_t n_tensors = mkmodel_plan_n_tensors(plan);
    if (!(first = malloc((size_t)(n_tensors + 1) * sizeof *first))) {
        guild_err_set(err, "out of memory");
        goto out;
    }
    const int n = split_parts(plan, cfg->split_max_bytes, first);
    first[n] = n_tensors;
    if (n > 65535) {
        guild_err_set(err, "--split-max-size %llu: %d parts, more than a split model may have (65535)",
                      (unsigned long long)cfg->split_max_bytes, n);
        goto out;
    }
    if (!(w = calloc((size_t)n, sizeof *w))) {
        guild_err_set(err, "out of memory");
        goto out;
    }
    n_parts = n;
    /* the first part has the model's metadata; every part of a split model its place in it (llama.cpp's keys) */
    for (int k = 0; k < n; k++) {
        if (gguf_writer_new(&w[k], err) < 0)
            goto out;
        if (k == 0) {
            set_hparams(w[0], cfg, n_vocab);
            if (vocab_file && copy_vocab(w[0], vocab_file, err) < 0)
                goto out;
            if (vocab && set_builtin_vocab(w[0], vocab) < 0) {
                guild_err_set(err, "built-in vocabulary: out of memory");
                goto out;
            }
        }
        if (n > 1) {
            gguf_writer_set_u16(w[k], "split.no", (uint16_t)k);
            gguf_writer_set_u16(w[k], "split.count", (uint16_t)n);
            gguf_writer_set_i32(w[k], "split.tensors.count", (int32_t)n_tensors);
        }
    }
    uint64_t n_params = 0;
    for (int k = 0; k < n; k++)
        for (int64_t i = first[k]; i < first[k + 1]; i++) {
            const mkmodel_tensor_t *t = mkmodel_plan_tensor(plan, i);
            GUILD_ASSERT(mkmodel_fill_supported(t->type));
            uint64_t ne[4] = {(uint64_t)t->ne[0], (uint64_t)t->ne[1], (uint64_t)t->ne[2], (uint64_t)t->ne[3]};
            if (gguf_writer_add_tensor(w[k], t->name, t->type, t->n_dims, ne, err) < 0)
                goto out;
            n_params += ne[0] * ne[1] * ne[2];
        }
    for (int k = 0; k < n; k++) {
        char path[4096 + 32];
        if (mkmodel_part_path(path, sizeof path, cfg->out_path, k, n, err) < 0 ||
            gguf_writer_begin(w[k], path, err) < 0)
            goto out;
    }
    double t0 = now();
    if (mkmodel_emit(w, first, n, plan, cfg->seed, cfg->fill, cfg->threads, progress, progress_arg, err) < 0)
        goto out;
    for (int k = 0; k < n; k++)
        if (gguf_writer_finish(w[k], err) < 0)
            goto out;
    if (summary) {
        summary->n_tensors = n_tensors;
        summary->n_vocab = n_vocab;
        summary->n_fallbacks = mkmodel_plan_n_fallbacks(plan);
        summary->data_bytes = mkmodel_plan_data_bytes(plan);
        summary->n_params = n_params;
        summary->seconds = now() - t0;
        summary->n_parts = n;
    }
    rc = 0;
out:
    for (int k = 0; k < n_parts; k++)
        gguf_writer_destroy(&w[k]); /* removes a begun but unfinished file: no part of a failed model is left */
    free(w);
    free(first);
    gguf_destroy(&vocab_file);
    mkmodel_plan_destroy(&plan);
    mkmodel_vocab_destroy(&vocab);
    return rc;
}
