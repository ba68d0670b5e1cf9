#include "core/model/config.h"

#include <math.h>
#include <string.h>

/* Limits that keep every size computed from them far from overflow; real models are well inside them. */
#define MAX_LAYERS 1024
#define MAX_WIDTH (1 << 20)   /* n_embd, n_ff, head_dim * n_head */
#define MAX_HEADS 4096
#define MAX_EXPERTS 4096
#define MAX_VOCAB (1 << 24)
#define MAX_CTX (1 << 24)

typedef struct keyreader {
    const gguf_t *g;
    const char *arch; /* prefix of the keys */
    guild_err_t *err;
} keyreader_t;

static void key_name(char *buf, size_t size, const keyreader_t *k, const char *suffix)
{
    snprintf(buf, size, "%s.%s", k->arch, suffix);
}

/* Reads ARCH.suffix into *out. Absent: *out = def when optional, else an error. Present: must be an integer in
 * [lo, hi]. */
static int get_i32(const keyreader_t *k, const char *suffix, int32_t *out, bool required, int32_t def, int64_t lo,
                   int64_t hi)
{
    char key[160];
    key_name(key, sizeof key, k, suffix);
    if (gguf_find_key(k->g, key) < 0) {
        if (required)
            return guild_err_set(k->err, "%s: metadata key %s is missing", gguf_path(k->g), key);
        *out = def;
        return 0;
    }
    int64_t v;
    if (gguf_get_int(k->g, key, &v, k->err) < 0)
        return guild_err_prefix(k->err, "%s: ", gguf_path(k->g));
    if (v < lo || v > hi)
        return guild_err_set(k->err, "%s: metadata key %s = %lld is out of range [%lld, %lld]", gguf_path(k->g),
                             key, (long long)v, (long long)lo, (long long)hi);
    *out = (int32_t)v;
    return 0;
}

static int get_f32(const keyreader_t *k, const char *suffix, float *out, bool required, float def)
{
    char key[160];
    key_name(key, sizeof key, k, suffix);
    if (gguf_find_key(k->g, key) < 0) {
        if (required)
            return guild_err_set(k->err, "%s: metadata key %s is missing", gguf_path(k->g), key);
        *out = def;
        return 0;
    }
    double v;
    if (gguf_get_float(k->g, key, &v, k->err) < 0)
        return guild_err_prefix(k->err, "%s: ", gguf_path(k->g));
    if (!isfinite(v) || fabs(v) > 1e30)
        return guild_err_set(k->err, "%s: metadata key %s = %g is not a usable number", gguf_path(k->g), key, v);
    *out = (float)v;
    return 0;
}

static int read_rope_scaling(model_config_t *c, const keyreader_t *k)
{
    const gguf_t *g = k->g;
    char key[160];
    c->rope_scaling = MODEL_ROPE_SCALING_NONE;
    key_name(key, sizeof key, k, "rope.scaling.type");
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
    if (get_f32(k, "rope.scaling.factor", &factor, false, 0.0f) < 0)
        return -1;
    if (factor == 0 && get_f32(k, "rope.scale_linear", &factor, false, 0.0f) < 0)
        return -1;
    if (factor < 0)
        return guild_err_set(k->err, "%s: rope scaling factor %g is negative", gguf_path(g), (double)factor);
    /* llama.cpp: a factor without a type means linear scaling */
    key_name(key, sizeof key, k, "rope.scaling.type");
    if (factor != 0 && factor != 1 && gguf_find_key(g, key) < 0)
        c->rope_scaling = MODEL_ROPE_SCALING_LINEAR;
    c->rope_freq_scale = (c->rope_scaling == MODEL_ROPE_SCALING_NONE || factor == 0) ? 1.0f : 1.0f / factor;
    if (get_i32(k, "rope.scaling.original_context_length", &c->rope_n_ctx_orig, false, c->n_ctx_train, 1,
                MAX_CTX) < 0)
        return -1;
    bool yarn = c->rope_scaling == MODEL_ROPE_SCALING_YARN;
    if (get_f32(k, "rope.scaling.yarn_ext_factor", &c->yarn_ext_factor, false, yarn ? 1.0f : 0.0f) < 0 ||
        get_f32(k, "rope.scaling.yarn_attn_factor", &c->yarn_attn_factor, false, 1.0f) < 0 ||
        get_f32(k, "rope.scaling.yarn_beta_fast", &c->yarn_beta_fast, false, 32.0f) < 0 ||
        get_f32(k, "rope.scaling.yarn_beta_slow", &c->yarn_beta_slow, false, 1.0f) < 0)
        return -1;
    if (!yarn) {
        c->yarn_ext_factor = 0.0f;
        c->yarn_attn_factor = 1.0f;
    }
    return 0;
}

static int read_vocab_size(model_config_t *c, const keyreader_t *k)
{
    const gguf_t *g = k->g;
    char key[160];
    key_name(key, sizeof key, k, "vocab_size");
    if (gguf_find_key(g, key) >= 0)
        return get_i32(k, "vocab_size", &c->n_vocab, true, 0, 1, MAX_VOCAB);
    if (gguf_find_key(g, "tokenizer.ggml.tokens") >= 0) {
        gguf_value_type_t et;
        uint64_t n;
        if (gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, k->err) < 0)
            return guild_err_prefix(k->err, "%s: ", gguf_path(g));
        if (n < 1 || n > MAX_VOCAB)
            return guild_err_set(k->err, "%s: tokenizer.ggml.tokens has %llu entries", gguf_path(g),
                                 (unsigned long long)n);
        c->n_vocab = (int32_t)n;
        return 0;
    }
    const gguf_tensor_t *t = gguf_find_tensor(g, "token_embd.weight");
    if (!t)
        return guild_err_set(k->err, "%s: tensor token_embd.weight is missing", gguf_path(g));
    if (t->n_dims != 2 || t->ne[1] < 1 || t->ne[1] > MAX_VOCAB)
        return guild_err_set(k->err, "%s: tensor token_embd.weight has an unusable shape", gguf_path(g));
    c->n_vocab = (int32_t)t->ne[1];
    return 0;
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
    keyreader_t k = {g, info->name, err};

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

    if (get_i32(&k, "block_count", &c->n_layer, true, 0, 1, MAX_LAYERS) < 0 ||
        get_i32(&k, "context_length", &c->n_ctx_train, true, 0, 1, MAX_CTX) < 0 ||
        get_i32(&k, "embedding_length", &c->n_embd, true, 0, 1, MAX_WIDTH) < 0 ||
        get_i32(&k, "feed_forward_length", &c->n_ff, false, 0, 0, MAX_WIDTH) < 0 ||
        get_i32(&k, "attention.head_count", &c->n_head, true, 0, 1, MAX_HEADS) < 0 ||
        get_i32(&k, "attention.head_count_kv", &c->n_head_kv, false, c->n_head, 1, MAX_HEADS) < 0 ||
        get_f32(&k, "attention.layer_norm_rms_epsilon", &c->norm_eps, true, 0) < 0 ||
        get_f32(&k, "rope.freq_base", &c->rope_freq_base, false, 10000.0f) < 0 ||
        get_i32(&k, "expert_count", &c->n_expert, true, 0, 0, MAX_EXPERTS) < 0 ||
        get_i32(&k, "expert_used_count", &c->n_expert_used, true, 0, 0, MAX_EXPERTS) < 0 ||
        get_f32(&k, "expert_weights_scale", &c->expert_weights_scale, false, 0.0f) < 0)
        return -1;

    int32_t head_dim_def = c->n_embd / c->n_head, head_dim_v;
    if (get_i32(&k, "attention.key_length", &c->head_dim, false, head_dim_def, 1, MAX_WIDTH) < 0 ||
        get_i32(&k, "attention.value_length", &head_dim_v, false, c->head_dim, 1, MAX_WIDTH) < 0)
        return -1;
    if (head_dim_v != c->head_dim)
        return guild_err_set(err, "%s: key_length %d != value_length %d is not supported", path, c->head_dim,
                             head_dim_v);
    if (c->n_head % c->n_head_kv)
        return guild_err_set(err, "%s: head_count %d is not a multiple of head_count_kv %d", path, c->n_head,
                             c->n_head_kv);
    if ((int64_t)c->n_head * c->head_dim > MAX_WIDTH)
        return guild_err_set(err, "%s: head_count * key_length = %lld is too large", path,
                             (long long)c->n_head * c->head_dim);
    if (get_i32(&k, "rope.dimension_count", &c->n_rot, false, c->head_dim, 2, MAX_WIDTH) < 0)
        return -1;
    if (c->n_rot % 2 || c->n_rot > c->head_dim)
        return guild_err_set(err, "%s: rope.dimension_count %d must be even and <= the head size %d", path,
                             c->n_rot, c->head_dim);
    if (c->arch != MODEL_ARCH_LLAMA && c->n_rot != c->head_dim)
        return guild_err_set(err, "%s: %s needs rope.dimension_count (%d) == the head size (%d)", path,
                             info->name, c->n_rot, c->head_dim);
    if (!(c->norm_eps > 0) || c->norm_eps > 1)
        return guild_err_set(err, "%s: %s.attention.layer_norm_rms_epsilon = %g is not in (0, 1]", path,
                             info->name, (double)c->norm_eps);
    if (!(c->rope_freq_base > 0))
        return guild_err_set(err, "%s: %s.rope.freq_base = %g must be > 0", path, info->name,
                             (double)c->rope_freq_base);
    if (read_rope_scaling(c, &k) < 0)
        return -1;

    if (c->n_expert < 1 || c->n_expert_used < 1)
        return guild_err_set(err, "%s: %s.expert_count = %d, expert_used_count = %d: Guild runs MoE models only "
                             "(both must be >= 1)", path, info->name, c->n_expert, c->n_expert_used);
    if (c->n_expert_used > c->n_expert)
        return guild_err_set(err, "%s: expert_used_count %d > expert_count %d", path, c->n_expert_used,
                             c->n_expert);
    int32_t ff_exp_def = 0;
    if (c->arch == MODEL_ARCH_QWEN3MOE || c->arch == MODEL_ARCH_QWEN2MOE)
        ff_exp_def = c->n_ff / c->n_expert_used;
    else
        ff_exp_def = c->n_ff;
    if (get_i32(&k, "expert_feed_forward_length", &c->n_ff_exp, false, ff_exp_def, 1, MAX_WIDTH) < 0)
        return -1;
    if (c->n_ff_exp < 1)
        return guild_err_set(err, "%s: metadata key %s.expert_feed_forward_length (or feed_forward_length) is "
                             "missing", path, info->name);
    if (info->shared_expert) {
        if (get_i32(&k, "expert_shared_feed_forward_length", &c->n_ff_shexp, false, c->n_ff, 1, MAX_WIDTH) < 0)
            return -1;
        if (c->n_ff_shexp < 1)
            return guild_err_set(err, "%s: metadata key %s.expert_shared_feed_forward_length (or "
                                 "feed_forward_length) is missing", path, info->name);
    }
    return read_vocab_size(c, &k);
}

void model_config_print(const model_config_t *c, FILE *out)
{
    static const char *scaling[] = {"none", "linear", "yarn"};
    const model_arch_info_t *info = model_arch_info(c->arch);
    fprintf(out, "model: %s%s%s\n", info->name, c->name[0] ? " " : "", c->name);
    fprintf(out, "  n_layer = %d, n_embd = %d, n_vocab = %d, n_ctx_train = %d\n", c->n_layer, c->n_embd,
            c->n_vocab, c->n_ctx_train);
    fprintf(out, "  n_head = %d, n_head_kv = %d, head_dim = %d, n_rot = %d, norm_eps = %g\n", c->n_head,
            c->n_head_kv, c->head_dim, c->n_rot, (double)c->norm_eps);
    fprintf(out, "  rope = %s, freq_base = %g, scaling = %s", info->rope == MODEL_ROPE_NEOX ? "neox" : "norm",
            (double)c->rope_freq_base, scaling[c->rope_scaling]);
    if (c->rope_scaling != MODEL_ROPE_SCALING_NONE)
        fprintf(out, " (freq_scale = %g, n_ctx_orig = %d)", (double)c->rope_freq_scale, c->rope_n_ctx_orig);
    fprintf(out, "\n  n_expert = %d, n_expert_used = %d, n_ff_exp = %d", c->n_expert, c->n_expert_used,
            c->n_ff_exp);
    if (c->n_ff_shexp)
        fprintf(out, ", n_ff_shexp = %d", c->n_ff_shexp);
    fprintf(out, ", router = softmax, top-k%s", info->router_renorm ? ", renormalised" : "");
    if (c->expert_weights_scale != 0 && c->expert_weights_scale != 1)
        fprintf(out, ", scale %g", (double)c->expert_weights_scale);
    fprintf(out, "\n  q/k norm = %s, qkv bias = %s\n",
            info->qk_norm == MODEL_QK_NORM_HEAD ? "per head" : info->qk_norm == MODEL_QK_NORM_FULL ? "full" : "none",
            info->qkv_bias ? "yes" : "no");
}
