/* The configuration: the keys every architecture has, the layout, then each part's own keys (core/model/KIND.c
 * through core/model/part_core.h). */
#include "core/model/config.h"

#include <math.h>
#include <string.h>

#include "core/model/keys.h"
#include "core/model/part_core.h"

static int read_rope_scaling(model_config_t *c, const model_keys_t *k)
{
    const gguf_t *g = k->g;
    char key[160];
    c->rope_scaling = MODEL_ROPE_SCALING_NONE;
    snprintf(key, sizeof key, "%s.rope.scaling.type", k->arch);
    if (gguf_find_key(g, key) >= 0) {
        const char *s;
        size_t len;
        if (gguf_get_str(g, key, &s, &len, k->err) < 0)
            return guild_err_prefix(k->err, "%s: ", gguf_path(g));
        if (len == 4 && !memcmp(s, "none", 4))
            c->rope_scaling = MODEL_ROPE_SCALING_NONE;
        else if (len == 6 && !memcmp(s, "linear", 6))
            c->rope_scaling = MODEL_ROPE_SCALING_LINEAR;
        else if (len == 4 && !memcmp(s, "yarn", 4))
            c->rope_scaling = MODEL_ROPE_SCALING_YARN;
        else
            return guild_err_set(k->err, "%s: %s = \"%.*s\" is not supported (none, linear, yarn)", gguf_path(g),
                                 key, (int)(len > 40 ? 40 : len), s);
    }
    float factor = 0;
    if (model_key_f32(k, "rope.scaling.factor", &factor, false, 0.0f) < 0)
        return -1;
    if (factor == 0 && model_key_f32(k, "rope.scale_linear", &factor, false, 0.0f) < 0)
        return -1;
    if (factor < 0)
        return guild_err_set(k->err, "%s: rope scaling factor %g is negative", gguf_path(g), (double)factor);
    /* llama.cpp: a factor without a type means linear scaling */
    if (factor != 0 && factor != 1 && gguf_find_key(g, key) < 0)
        c->rope_scaling = MODEL_ROPE_SCALING_LINEAR;
    c->rope_freq_scale = (c->rope_scaling == MODEL_ROPE_SCALING_NONE || factor == 0) ? 1.0f : 1.0f / factor;
    if (model_key_i32(k, "rope.scaling.original_context_length", &c->rope_n_ctx_orig, false, c->n_ctx_train, 1,
                MODEL_MAX_CTX) < 0)
        return -1;
    bool yarn = c->rope_scaling == MODEL_ROPE_SCALING_YARN;
    if (model_key_f32(k, "rope.scaling.yarn_ext_factor", &c->yarn_ext_factor, false, yarn ? 1.0f : 0.0f) < 0 ||
        model_key_f32(k, "rope.scaling.yarn_attn_factor", &c->yarn_attn_factor, false, 1.0f) < 0 ||
        model_key_f32(k, "rope.scaling.yarn_beta_fast", &c->yarn_beta_fast, false, 32.0f) < 0 ||
        model_key_f32(k, "rope.scaling.yarn_beta_slow", &c->yarn_beta_slow, false, 1.0f) < 0)
        return -1;
    if (!yarn) {
        c->yarn_ext_factor = 0.0f;
        c->yarn_attn_factor = 1.0f;
    }
    return 0;
}

static int read_vocab_size(model_config_t *c, const model_keys_t *k)
{
    const gguf_t *g = k->g;
    if (model_key_present(k, "vocab_size"))
        return model_key_i32(k, "vocab_size", &c->n_vocab, true, 0, 1, MODEL_MAX_VOCAB);
    if (gguf_find_key(g, "tokenizer.ggml.tokens") >= 0) {
        gguf_value_type_t et;
        uint64_t n;
        if (gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, k->err) < 0)
            return guild_err_prefix(k->err, "%s: ", gguf_path(g));
        if (n < 1 || n > MODEL_MAX_VOCAB)
            return guild_err_set(k->err, "%s: tokenizer.ggml.tokens has %llu entries", gguf_path(g),
                                 (unsigned long long)n);
        c->n_vocab = (int32_t)n;
        return 0;
    }
    const gguf_tensor_t *t = gguf_find_tensor(g, "token_embd.weight");
    if (!t)
        return guild_err_set(k->err, "%s: tensor token_embd.weight is missing", gguf_path(g));
    if (t->n_dims != 2 || t->ne[1] < 1 || t->ne[1] > MODEL_MAX_VOCAB)
        return guild_err_set(k->err, "%s: tensor token_embd.weight has an unusable shape", gguf_path(g));
    c->n_vocab = (int32_t)t->ne[1];
    return 0;
}

/* The layout's key: how many leading layers are dense, or how often a hybrid has full attention. */
static int read_layout(model_config_t *c, const model_keys_t *k)
{
    switch (c->layout) {
    case MODEL_LAYOUT_UNIFORM:
        return 0;
    case MODEL_LAYOUT_DENSE_FIRST:
        return model_key_i32(k, "leading_dense_block_count", &c->n_layer_dense_lead, false, 0, 0, c->n_layer);
    case MODEL_LAYOUT_HYBRID:
        return model_key_i32(k, "full_attention_interval", &c->full_attn_interval, false, 4, 1, c->n_layer);
    }
    GUILD_ASSERT(!"layout");
    return -1;
}

/* Each part kind some layer uses reads its keys once: attention, then FFN, then router (which reads the expert
 * count the FFN read). A part decides the options of its `maybe` from the file; then no part has any left. */
static int read_parts(model_config_t *c, const model_keys_t *k)
{
    const model_part_t *used[MODEL_PART_FAMILIES][MODEL_PART_KINDS_MAX] = {{0}};
    for (int32_t il = 0; il < c->n_layer + c->n_layer_mtp; il++) {
        const model_layer_parts_t lp = model_layer_parts(c, il);
        used[MODEL_PART_ATTN][lp.attn->kind] = lp.attn;
        used[MODEL_PART_FFN][lp.ffn->kind] = lp.ffn;
        if (lp.router)
            used[MODEL_PART_ROUTER][lp.router->kind] = lp.router;
    }
    static const model_part_family_t order[] = {MODEL_PART_ATTN, MODEL_PART_FFN, MODEL_PART_ROUTER};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
        for (int32_t kind = 0; kind < MODEL_PART_KINDS_MAX; kind++) {
            /* p is one of c's parts (model_layer_parts): its read_config may set options of its maybe */
            model_part_t *p = (model_part_t *)used[order[i]][kind];
            if (p && model_part_core(order[i], kind)->read_config(c, k, p) < 0)
                return -1;
        }
    model_part_t *all[] = {&c->attn, &c->attn_linear, &c->router, &c->ffn, &c->ffn_lead};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        all[i]->maybe = 0;
    return 0;
}

/* llama_expert_gating_func_type: 0 absent (llama.cpp reads it as softmax in the files of rows that pick their
 * router by it), 1 softmax, 2 sigmoid */
static int pick_router(model_config_t *c, const model_keys_t *k, const model_arch_info_t *info)
{
    int32_t gating;
    if (model_key_i32(k, "expert_gating_func", &gating, false, 0, 0, 255) < 0)
        return -1;
    if (gating == 0 || gating == 1)
        c->router = info->router_softmax;
    else if (gating != 2)
        return guild_err_set(k->err, "%s: %s.expert_gating_func = %d is not supported (1 softmax, 2 sigmoid)",
                             gguf_path(k->g), k->arch, gating);
    return 0;
}

int model_router_read_groups(model_config_t *c, const model_keys_t *k)
{
    const char *path = gguf_path(k->g);
    if (model_key_i32(k, "expert_group_count", &c->n_expert_groups, false, 0, 0, MODEL_MAX_EXPERTS) < 0 ||
        model_key_i32(k, "expert_group_used_count", &c->n_group_used, false, 0, 0, MODEL_MAX_EXPERTS) < 0)
        return -1;
    if (c->n_expert_groups > 1) {
        const int32_t per = c->n_expert / c->n_expert_groups;
        if (c->n_expert % c->n_expert_groups || per < 2)
            return guild_err_set(k->err, "%s: %s.expert_group_count = %d does not split %d experts into equal "
                                 "groups of at least 2", path, k->arch, c->n_expert_groups, c->n_expert);
        if (c->n_group_used < 1 || c->n_group_used > c->n_expert_groups ||
            (int64_t)c->n_group_used * per < c->n_expert_used)
            return guild_err_set(k->err, "%s: %s.expert_group_used_count = %d: must be 1..%d and hold the %d "
                                 "experts used (groups of %d)", path, k->arch, c->n_group_used,
                                 c->n_expert_groups, c->n_expert_used, per);
    }
    return 0;
}

bool model_part_has_tensor(const model_config_t *c, const model_keys_t *k, const model_part_t *p,
                           const char *suffix)
{
    for (int32_t il = 0; il < c->n_layer; il++) {
        const model_layer_parts_t lp = model_layer_parts(c, il);
        if (lp.attn == p || lp.ffn == p || lp.router == p) {
            char name[96];
            snprintf(name, sizeof name, "blk.%d.%s", il, suffix);
            return gguf_find_tensor(k->g, name) != NULL;
        }
    }
    return false;
}

int model_config_load(model_config_t *c, const gguf_t *g, guild_err_t *err)
{
    memset(c, 0, sizeof *c);
    const char *path = gguf_path(g);
    const char *as;
    size_t alen;
    if (gguf_find_key(g, "general.architecture") < 0)
        return guild_err_set(err, "%s: metadata key general.architecture is missing", path);
    if (gguf_get_str(g, "general.architecture", &as, &alen, err) < 0)
        return guild_err_prefix(err, "%s: ", path);
    int a = model_arch_from_name(as, alen);
    if (a < 0)
        return guild_err_set(err, "%s: architecture \"%.*s\" is not supported (Guild runs %s)", path,
                             (int)(alen > 40 ? 40 : alen), as, model_arch_list());
    c->arch = (model_arch_t)a;
    const model_arch_info_t *info = model_arch_info(c->arch);
    c->layout = info->layout;
    c->attn = info->attn;
    c->attn_linear = info->attn_linear;
    c->router = info->router;
    c->ffn = info->ffn;
    c->ffn_lead = info->ffn_lead;
    model_keys_t k = {g, info->name, err};

    if (gguf_find_key(g, "general.name") >= 0) {
        const char *s;
        size_t len;
        if (gguf_get_str(g, "general.name", &s, &len, NULL) == 0) {
            if (len >= sizeof c->name)
                len = sizeof c->name - 1;
            memcpy(c->name, s, len);
            for (size_t i = 0; i < len; i++)
                if ((unsigned char)c->name[i] < 0x20)
                    c->name[i] = '?';
        }
    }
    int64_t ft = -1;
    if (gguf_find_key(g, "general.file_type") >= 0 && gguf_get_int(g, "general.file_type", &ft, NULL) < 0)
        ft = -1;
    c->file_type = (ft >= 0 && ft < 1000) ? (int32_t)ft : -1;

    if (model_key_i32(&k, "block_count", &c->n_layer, true, 0, 1, MODEL_MAX_LAYERS) < 0 ||
        (info->nextn &&
         model_key_i32(&k, "nextn_predict_layers", &c->n_layer_mtp, false, 0, 0, c->n_layer - 1) < 0))
        return -1;
    c->n_layer -= c->n_layer_mtp;
    if (model_key_i32(&k, "context_length", &c->n_ctx_train, true, 0, 1, MODEL_MAX_CTX) < 0 ||
        model_key_i32(&k, "embedding_length", &c->n_embd, true, 0, 1, MODEL_MAX_WIDTH) < 0 ||
        model_key_i32(&k, "feed_forward_length", &c->n_ff, false, 0, 0, MODEL_MAX_WIDTH) < 0 ||
        model_key_f32(&k, "attention.layer_norm_rms_epsilon", &c->norm_eps, true, 0) < 0 ||
        model_key_f32(&k, "rope.freq_base", &c->rope_freq_base, false, 10000.0f) < 0 || read_layout(c, &k) < 0)
        return -1;
    if (!(c->norm_eps > 0) || c->norm_eps > 1)
        return guild_err_set(err, "%s: %s.attention.layer_norm_rms_epsilon = %g is not in (0, 1]", path,
                             info->name, (double)c->norm_eps);
    if (!(c->rope_freq_base > 0))
        return guild_err_set(err, "%s: %s.rope.freq_base = %g must be > 0", path, info->name,
                             (double)c->rope_freq_base);
    if (info->gating_picks_router && pick_router(c, &k, info) < 0)
        return -1;
    model_part_support_t core;
    model_part_core_support(&core);
    /* the rope scaling first: an attention part's scale may depend on it (attn_mla.c) */
    if (model_parts_check(c, &core, path, err) < 0 || read_rope_scaling(c, &k) < 0 || read_parts(c, &k) < 0)
        return -1;
    for (int32_t il = 0; il < c->n_layer; il++)
        c->n_layer_attn += !model_layer_recurrent(c, il);
    return read_vocab_size(c, &k);
}

int32_t model_config_ff_hidden(const model_config_t *c)
{
    int32_t f = c->n_ff_shexp;
    for (int32_t il = 0; il < c->n_layer; il++)
        if (model_layer_parts(c, il).ffn->kind == MODEL_FFN_DENSE && c->n_ff > f)
            f = c->n_ff;
    return f;
}

void model_config_print(const model_config_t *c, FILE *out)
{
    static const char *scaling[] = {"none", "linear", "yarn"};
    const model_arch_info_t *info = model_arch_info(c->arch);
    char part[256];
    fprintf(out, "model: %s%s%s\n", info->name, c->name[0] ? " " : "", c->name);
    fprintf(out, "  n_layer = %d, n_embd = %d, n_vocab = %d, n_ctx_train = %d\n", c->n_layer, c->n_embd,
            c->n_vocab, c->n_ctx_train);
    fprintf(out, "  n_head = %d, n_head_kv = %d, head_dim = %d, n_rot = %d, norm_eps = %g\n", c->n_head,
            c->n_head_kv, c->head_dim, c->n_rot, (double)c->norm_eps);
    fprintf(out, "  rope freq_base = %g, scaling = %s", (double)c->rope_freq_base, scaling[c->rope_scaling]);
    if (c->rope_scaling != MODEL_ROPE_SCALING_NONE)
        fprintf(out, " (freq_scale = %g, n_ctx_orig = %d)", (double)c->rope_freq_scale, c->rope_n_ctx_orig);
    fprintf(out, "\n  n_expert = %d, n_expert_used = %d, n_ff_exp = %d", c->n_expert, c->n_expert_used,
            c->n_ff_exp);
    if (c->n_ff_shexp)
        fprintf(out, ", n_ff_shexp = %d", c->n_ff_shexp);
    if (c->expert_weights_scale != 0 && c->expert_weights_scale != 1)
        fprintf(out, ", expert_weights_scale = %g", (double)c->expert_weights_scale);
    model_part_describe(part, sizeof part, MODEL_PART_ATTN, &c->attn);
    fprintf(out, "\n  attention = %s\n", part);
    if (c->attn.kind == MODEL_ATTN_MLA)
        fprintf(out, "  mla: latent %d, q lora %d, value %d per head, up-projections %s, kq scale %g\n",
                c->n_lora_kv, c->n_lora_q, c->head_dim_v, c->mla_kv_split ? "attn_k_b/attn_v_b" : "attn_kv_b",
                (double)c->mla_kq_scale);
    if (c->n_swa > 0)
        fprintf(out, "  sliding window = %d positions, on layers il with il %% %d < %d\n", c->n_swa, c->swa_period,
                c->swa_period - 1);
    if (c->layout == MODEL_LAYOUT_HYBRID) {
        model_part_describe(part, sizeof part, MODEL_PART_ATTN, &c->attn_linear);
        fprintf(out, "  hybrid: every %d-th layer has it, the others attention = %s\n", c->full_attn_interval, part);
        if (c->attn_linear.kind == MODEL_ATTN_GDN)
            fprintf(out, "  gated delta net: conv kernel %d, %d key heads and %d value heads of %d\n", c->ssm_d_conv,
                    c->ssm_n_group, c->ssm_dt_rank, c->ssm_d_state);
    }
    model_part_describe(part, sizeof part, MODEL_PART_FFN, &c->ffn);
    fprintf(out, "  ffn = %s", part);
    model_part_describe(part, sizeof part, MODEL_PART_ROUTER, &c->router);
    fprintf(out, ", router = %s\n", part);
    if (c->layout == MODEL_LAYOUT_DENSE_FIRST && c->n_layer_dense_lead > 0) {
        model_part_describe(part, sizeof part, MODEL_PART_FFN, &c->ffn_lead);
        fprintf(out, "  dense-first: the first %d layers have ffn = %s (n_ff = %d)\n", c->n_layer_dense_lead, part,
                c->n_ff);
    }
    if (c->n_expert_groups > 1)
        fprintf(out, "  expert groups: %d, the best %d compete\n", c->n_expert_groups, c->n_group_used);
    if (c->n_layer_mtp)
        fprintf(out, "  %d multi-token-prediction layer%s after them: loaded, not run\n", c->n_layer_mtp,
                c->n_layer_mtp == 1 ? "" : "s");
}
