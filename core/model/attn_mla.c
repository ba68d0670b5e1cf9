/* The core of multi-head latent attention (MODEL_ATTN_MLA, deepseek2): its metadata keys, its tensors and its
 * cache row, as llama.cpp's deepseek2 loads them.
 *
 * Keys: ARCH.attention.head_count; .attention.kv_lora_rank (required: the latent's width); .attention.q_lora_rank
 * (absent or 0: no q LoRA, attn_q); .rope.dimension_count (required: the rotated part of a key, decoupled from the
 * latent and shared by every head); the head sizes either as the converter writes them since the k/v split,
 * .attention.key_length_mla and .value_length_mla (a head's key nope + rope and value widths; then .key_length
 * and .value_length, where present, are the absorbed form's kv_lora_rank + rope and kv_lora_rank), or as older
 * files do, .attention.key_length and .value_length (default n_embd / head_count); .attention.head_count_kv is
 * not used (1 in newer files, head_count in older ones). YaRN (rope.scaling.type yarn) adds
 * .rope.scaling.yarn_log_multiplier (0.1 * mscale_all_dim as the converter writes it; llama.cpp divides it by
 * 0.1) and .rope.scaling.attn_factor (default 1).
 *
 * Tensors of layer L: with q LoRA blk.L.attn_q_a.weight [n_embd, q_lora_rank], attn_q_a_norm.weight
 * [q_lora_rank] f32, attn_q_b.weight [q_lora_rank, n_head * key]; else attn_q.weight [n_embd, n_head * key];
 * attn_kv_a_mqa.weight [n_embd, kv_lora_rank + rope], attn_kv_a_norm.weight [kv_lora_rank] f32; the up-projections
 * attn_k_b.weight [nope, kv_lora_rank, n_head] and attn_v_b.weight [kv_lora_rank, value, n_head] (files with
 * key_length_mla), else attn_kv_b.weight [kv_lora_rank, n_head * (nope + value)] (per head nope key rows, then
 * value rows); attn_output.weight [n_head * value, n_embd].
 *
 * The attention scale and YaRN (llama.cpp's context and deepseek2 graph): with YaRN the rope's magnitude is
 * yarn_attn_factor = m / (1 + 0.1 ln s) * attn_factor (s = 1 / freq_scale; m = 1 when yarn_log_multiplier is
 * set, deepseek2 taking mscale = mscale_all_dim, else 1 + 0.1 ln s), which ggml's rope_yarn multiplies by
 * 1 + 0.1 ln s again; the logits are scaled by mscale^2 / sqrt(key), mscale = yarn_attn_factor * (1 + 0.1 ln s)
 * * (1 + 0.1 * log_mul * ln s). Without YaRN mscale = 1.
 */
#include <math.h>

#include "core/model/part_core.h"

/* llama.cpp's get_mscale in its context: the YaRN magnitude of a scaling factor s for a given mscale. */
static float yarn_mscale(float s, float mscale)
{
    return s <= 1.0f ? 1.0f : 0.1f * mscale * logf(s) + 1.0f;
}

static int mla_read_config(model_config_t *c, const model_keys_t *k, model_part_t *p)
{
    const char *path = gguf_path(k->g);
    guild_err_t *err = k->err;
    (void)p;
    if (model_key_i32(k, "attention.head_count", &c->n_head, true, 0, 1, MODEL_MAX_HEADS) < 0 ||
        model_key_i32(k, "attention.kv_lora_rank", &c->n_lora_kv, true, 0, 1, MODEL_MAX_WIDTH) < 0 ||
        model_key_i32(k, "attention.q_lora_rank", &c->n_lora_q, false, 0, 0, MODEL_MAX_WIDTH) < 0 ||
        model_key_i32(k, "rope.dimension_count", &c->n_rot, true, 0, 2, MODEL_MAX_WIDTH) < 0)
        return -1;
    if (c->n_rot % 2)
        return guild_err_set(err, "%s: %s.rope.dimension_count = %d must be even", path, k->arch, c->n_rot);
    c->mla_kv_split = model_key_present(k, "attention.key_length_mla");
    if (c->mla_kv_split) {
        int32_t key_len, value_len;
        if (model_key_i32(k, "attention.key_length_mla", &c->head_dim, true, 0, 1, MODEL_MAX_WIDTH) < 0 ||
            model_key_i32(k, "attention.value_length_mla", &c->head_dim_v, true, 0, 1, MODEL_MAX_WIDTH) < 0 ||
            model_key_i32(k, "attention.key_length", &key_len, false, c->n_lora_kv + c->n_rot, 1,
                          MODEL_MAX_WIDTH) < 0 ||
            model_key_i32(k, "attention.value_length", &value_len, false, c->n_lora_kv, 1, MODEL_MAX_WIDTH) < 0)
            return -1;
        if (key_len != c->n_lora_kv + c->n_rot || value_len != c->n_lora_kv)
            return guild_err_set(err, "%s: %s.attention.key_length %d and value_length %d must be kv_lora_rank + "
                                 "rope = %d and kv_lora_rank = %d with key_length_mla", path, k->arch, key_len,
                                 value_len, c->n_lora_kv + c->n_rot, c->n_lora_kv);
    } else if (model_key_i32(k, "attention.key_length", &c->head_dim, false, c->n_embd / c->n_head, 1,
                             MODEL_MAX_WIDTH) < 0 ||
               model_key_i32(k, "attention.value_length", &c->head_dim_v, false, c->head_dim, 1,
                             MODEL_MAX_WIDTH) < 0)
        return -1;
    if (c->head_dim <= c->n_rot)
        return guild_err_set(err, "%s: %s: a key of %d (nope + rope) leaves no part without rope (rope %d)", path,
                             k->arch, c->head_dim, c->n_rot);
    if ((int64_t)c->n_head * (c->head_dim > c->head_dim_v ? c->head_dim : c->head_dim_v) > MODEL_MAX_WIDTH ||
        (int64_t)c->n_head * c->n_lora_kv > MODEL_MAX_WIDTH)
        return guild_err_set(err, "%s: %d heads of key %d, value %d and a latent of %d are too large", path,
                             c->n_head, c->head_dim, c->head_dim_v, c->n_lora_kv);
    /* the heads after the up-projections: multi-head attention */
    c->n_head_kv = c->n_head;
    c->rope_neox = false; /* llama_model_rope_type: deepseek2 rotates adjacent pairs */

    float log_mul = 0.0f, attn_factor = 1.0f;
    if (model_key_f32(k, "rope.scaling.yarn_log_multiplier", &log_mul, false, 0.0f) < 0 ||
        model_key_f32(k, "rope.scaling.attn_factor", &attn_factor, false, 1.0f) < 0)
        return -1;
    c->yarn_log_mul = log_mul / 0.1f;
    float attn = c->yarn_attn_factor;
    if (c->rope_scaling == MODEL_ROPE_SCALING_YARN && c->yarn_ext_factor != 0.0f) {
        const float s = 1.0f / c->rope_freq_scale;
        attn = (c->yarn_log_mul != 0.0f ? 1.0f : yarn_mscale(s, 1.0f)) / (1.0f + 0.1f * logf(s)) * attn_factor;
        c->yarn_attn_factor = attn;
    }
    const float l = logf(1.0f / c->rope_freq_scale);
    const float mscale = attn * (1.0f + 0.1f * l) * (1.0f + 0.1f * c->yarn_log_mul * l);
    c->mla_kq_scale = mscale * mscale / sqrtf((float)c->head_dim);
    return 0;
}

static int mla_bind(model_layer_t *L, const model_binder_t *b, const model_part_t *p)
{
    const model_config_t *c = b->c;
    const int64_t E = c->n_embd, H = c->n_head, K = c->head_dim, V = c->head_dim_v, R = c->n_lora_kv;
    const int64_t nope = K - c->n_rot;
    (void)p;
    if (c->n_lora_q > 0) {
        const int64_t RQ = c->n_lora_q;
        if (model_bind(&L->wq_a, b, "attn_q_a.weight", MODEL_TENSOR_MATRIX, true, 2, E, RQ, 1) ||
            model_bind(&L->q_a_norm, b, "attn_q_a_norm.weight", MODEL_TENSOR_F32, true, 1, RQ, 1, 1) ||
            model_bind(&L->wq_b, b, "attn_q_b.weight", MODEL_TENSOR_MATRIX, true, 2, RQ, H * K, 1))
            return -1;
    } else if (model_bind(&L->wq, b, "attn_q.weight", MODEL_TENSOR_MATRIX, true, 2, E, H * K, 1))
        return -1;
    if (model_bind(&L->wkv_a, b, "attn_kv_a_mqa.weight", MODEL_TENSOR_MATRIX, true, 2, E, R + c->n_rot, 1) ||
        model_bind(&L->kv_a_norm, b, "attn_kv_a_norm.weight", MODEL_TENSOR_F32, true, 1, R, 1, 1) ||
        model_bind(&L->wo, b, "attn_output.weight", MODEL_TENSOR_MATRIX, true, 2, H * V, E, 1))
        return -1;
    if (c->mla_kv_split)
        return model_bind(&L->wk_b, b, "attn_k_b.weight", MODEL_TENSOR_MATRIX, true, 3, nope, R, H) ||
                       model_bind(&L->wv_b, b, "attn_v_b.weight", MODEL_TENSOR_MATRIX, true, 3, R, V, H)
                   ? -1
                   : 0;
    return model_bind(&L->wkv_b, b, "attn_kv_b.weight", MODEL_TENSOR_MATRIX, true, 2, R, H * (nope + V), 1) ? -1
                                                                                                          : 0;
}

/* The cache holds the normed latent and the rotated key part of each position; the values are the latent. */
static void mla_cache_row(const model_config_t *c, const model_part_t *p, int64_t *k, int64_t *v)
{
    (void)p;
    *k = (int64_t)c->n_lora_kv + c->n_rot;
    *v = 0;
}

const model_part_core_t model_attn_mla_core = {
    .opts = 0,
    .read_config = mla_read_config,
    .bind = mla_bind,
    .cache_row = mla_cache_row,
};
