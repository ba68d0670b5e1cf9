/* The core of GQA attention (MODEL_ATTN_GQA): its metadata keys and its tensors.
 *
 * Keys: ARCH.attention.head_count, .attention.head_count_kv (default head_count), .attention.key_length and
 * .value_length (default n_embd / head_count; Guild needs them equal), .rope.dimension_count (default the head
 * size; below it only with MODEL_GQA_ROPE_PARTIAL); with MODEL_GQA_SLIDING .attention.sliding_window (required)
 * and .attention.sliding_window_pattern (default 2: as llama.cpp's gpt-oss reads them; layer il slides when
 * il % pattern < pattern - 1, so with 2 the even layers slide, and 0 makes every layer slide), and
 * .rope.freq_base_swa, which Guild takes only equal to rope.freq_base (sliding layers would rotate otherwise).
 * A q/k norm option in the row's maybe is on when the file has attn_q_norm.weight (glm4moe: GLM-4.5 has them,
 * GLM-4.5-Air not).
 * Tensors of layer L: blk.L.attn_q/k/v.weight, attn_output.weight; attn_q/k/v.bias (MODEL_GQA_QKV_BIAS);
 * attn_q_norm/attn_k_norm.weight (MODEL_GQA_QK_NORM_HEAD: [head_dim]; MODEL_GQA_QK_NORM_FULL: the whole width);
 * attn_sinks.weight [n_head] (MODEL_GQA_SINKS); attn_output.bias [n_embd] (MODEL_GQA_OUT_BIAS); with
 * MODEL_GQA_OUT_GATE attn_q.weight is [n_embd, 2 * n_head*head_dim], each head's query rows then its gate rows
 * (qwen3next's attention; llama.cpp splits Qcur_full per head the same way).
 */
#include "core/model/part_core.h"

/* ARCH.rope.dimension_sections (qwen35moe's IMRoPE, llama.cpp's rope_multi): with a text position p in the
 * time, height and width slots and 0 in the fourth, rotation pair i rotates by p when its sector (i modulo the
 * sections' sum) falls in one of the first three interleaved sections, else by 0. Guild rotates text as NEOX
 * RoPE by p, which is the same exactly when every pair of the rotated width falls in them; other sections are
 * refused. */
static int check_rope_sections(const model_config_t *c, const model_keys_t *k)
{
    char key[160];
    snprintf(key, sizeof key, "%s.rope.dimension_sections", k->arch);
    if (gguf_find_key(k->g, key) < 0)
        return 0;
    gguf_value_type_t et;
    uint64_t n;
    int64_t sec[4] = {0};
    if (gguf_get_arr(k->g, key, &et, &n, k->err) < 0 || n < 3 || n > 4 ||
        gguf_arr_copy_i64(k->g, key, sec, n, k->err) < 0)
        return guild_err_set(k->err, "%s: %s: an array of 3 or 4 integers expected", gguf_path(k->g), key);
    const int64_t sum = sec[0] + sec[1] + sec[2] + sec[3];
    for (int64_t i = 0; i < c->n_rot / 2; i++) {
        const int64_t sector = sum > 0 ? i % sum : 0;
        const bool text = (sector % 3 == 0 && sector < 3 * sec[0]) || (sector % 3 == 1 && sector < 3 * sec[1]) ||
                          (sector % 3 == 2 && sector < 3 * sec[2]);
        if (sum <= 0 || sec[0] < 0 || sec[1] < 0 || sec[2] < 0 || sec[3] < 0 || !text)
            return guild_err_set(k->err, "%s: %s = [%lld, %lld, %lld, %lld]: rotation pair %lld would not rotate "
                                 "by a text position: not supported", gguf_path(k->g), key, (long long)sec[0],
                                 (long long)sec[1], (long long)sec[2], (long long)sec[3], (long long)i);
    }
    return 0;
}

static int gqa_read_config(model_config_t *c, const model_keys_t *k, model_part_t *p)
{
    const char *path = gguf_path(k->g);
    guild_err_t *err = k->err;
    if (model_key_i32(k, "attention.head_count", &c->n_head, true, 0, 1, MODEL_MAX_HEADS) < 0 ||
        model_key_i32(k, "attention.head_count_kv", &c->n_head_kv, false, c->n_head, 1, MODEL_MAX_HEADS) < 0)
        return -1;
    int32_t head_dim_def = c->n_embd / c->n_head, head_dim_v;
    if (model_key_i32(k, "attention.key_length", &c->head_dim, false, head_dim_def, 1, MODEL_MAX_WIDTH) < 0 ||
        model_key_i32(k, "attention.value_length", &head_dim_v, false, c->head_dim, 1, MODEL_MAX_WIDTH) < 0)
        return -1;
    if (head_dim_v != c->head_dim)
        return guild_err_set(err, "%s: key_length %d != value_length %d is not supported", path, c->head_dim,
                             head_dim_v);
    c->head_dim_v = head_dim_v;
    if (c->n_head % c->n_head_kv)
        return guild_err_set(err, "%s: head_count %d is not a multiple of head_count_kv %d", path, c->n_head,
                             c->n_head_kv);
    if ((int64_t)c->n_head * c->head_dim > MODEL_MAX_WIDTH)
        return guild_err_set(err, "%s: head_count * key_length = %lld is too large", path,
                             (long long)c->n_head * c->head_dim);
    if (model_key_i32(k, "rope.dimension_count", &c->n_rot, false, c->head_dim, 2, MODEL_MAX_WIDTH) < 0)
        return -1;
    if (c->n_rot % 2 || c->n_rot > c->head_dim)
        return guild_err_set(err, "%s: rope.dimension_count %d must be even and <= the head size %d", path,
                             c->n_rot, c->head_dim);
    if (!(p->opts & MODEL_GQA_ROPE_PARTIAL) && c->n_rot != c->head_dim)
        return guild_err_set(err, "%s: %s needs rope.dimension_count (%d) == the head size (%d)", path, k->arch,
                             c->n_rot, c->head_dim);
    const uint32_t qk_norm = p->maybe & (MODEL_GQA_QK_NORM_HEAD | MODEL_GQA_QK_NORM_FULL);
    if (qk_norm && model_part_has_tensor(c, k, p, "attn_q_norm.weight"))
        p->opts |= qk_norm;
    c->rope_neox = p->opts & MODEL_GQA_ROPE_NEOX;
    if (c->rope_neox && check_rope_sections(c, k) < 0)
        return -1;
    if (p->opts & MODEL_GQA_SLIDING) {
        if (model_key_i32(k, "attention.sliding_window", &c->n_swa, true, 0, 1, MODEL_MAX_CTX) < 0 ||
            model_key_i32(k, "attention.sliding_window_pattern", &c->swa_period, false, 2, 0, MODEL_MAX_LAYERS) < 0)
            return -1;
        float base_swa;
        if (model_key_f32(k, "rope.freq_base_swa", &base_swa, false, c->rope_freq_base) < 0)
            return -1;
        if (base_swa != c->rope_freq_base)
            return guild_err_set(err, "%s: %s.rope.freq_base_swa = %g differs from rope.freq_base = %g: not "
                                 "supported", path, k->arch, (double)base_swa, (double)c->rope_freq_base);
    }
    return 0;
}

int32_t model_layer_window(const model_config_t *c, int32_t il)
{
    if (!(model_layer_parts(c, il).attn->opts & MODEL_GQA_SLIDING) || c->n_swa < 1)
        return 0;
    return c->swa_period == 0 || il % c->swa_period < c->swa_period - 1 ? c->n_swa : 0;
}

static int gqa_bind(model_layer_t *L, const model_binder_t *b, const model_part_t *p)
{
    const model_config_t *c = b->c;
    const int64_t E = c->n_embd, HD = c->head_dim, Q = (int64_t)c->n_head * HD, KV = (int64_t)c->n_head_kv * HD;
    const int64_t QG = (p->opts & MODEL_GQA_OUT_GATE) ? 2 * Q : Q;
    if (model_bind(&L->wq, b, "attn_q.weight", MODEL_TENSOR_MATRIX, true, 2, E, QG, 1) ||
        model_bind(&L->wk, b, "attn_k.weight", MODEL_TENSOR_MATRIX, true, 2, E, KV, 1) ||
        model_bind(&L->wv, b, "attn_v.weight", MODEL_TENSOR_MATRIX, true, 2, E, KV, 1) ||
        model_bind(&L->wo, b, "attn_output.weight", MODEL_TENSOR_MATRIX, true, 2, Q, E, 1))
        return -1;
    if ((p->opts & MODEL_GQA_QKV_BIAS) &&
        (model_bind(&L->bq, b, "attn_q.bias", MODEL_TENSOR_F32, true, 1, Q, 1, 1) ||
         model_bind(&L->bk, b, "attn_k.bias", MODEL_TENSOR_F32, true, 1, KV, 1, 1) ||
         model_bind(&L->bv, b, "attn_v.bias", MODEL_TENSOR_F32, true, 1, KV, 1, 1)))
        return -1;
    if (p->opts & (MODEL_GQA_QK_NORM_HEAD | MODEL_GQA_QK_NORM_FULL)) {
        const bool head = p->opts & MODEL_GQA_QK_NORM_HEAD;
        if (model_bind(&L->q_norm, b, "attn_q_norm.weight", MODEL_TENSOR_F32, true, 1, head ? HD : Q, 1, 1) ||
            model_bind(&L->k_norm, b, "attn_k_norm.weight", MODEL_TENSOR_F32, true, 1, head ? HD : KV, 1, 1))
            return -1;
    }
    if ((p->opts & MODEL_GQA_SINKS) &&
        model_bind(&L->sinks, b, "attn_sinks.weight", MODEL_TENSOR_F32, true, 1, c->n_head, 1, 1))
        return -1;
    if ((p->opts & MODEL_GQA_OUT_BIAS) &&
        model_bind(&L->bo, b, "attn_output.bias", MODEL_TENSOR_F32, true, 1, E, 1, 1))
        return -1;
    return 0;
}

/* Each position keeps its K/V heads' keys and values. */
static void gqa_cache_row(const model_config_t *c, const model_part_t *p, int64_t *k, int64_t *v)
{
    (void)p;
    *k = *v = (int64_t)c->n_head_kv * c->head_dim;
}

const model_part_core_t model_attn_gqa_core = {
    .opts = MODEL_GQA_ROPE_NEOX | MODEL_GQA_ROPE_PARTIAL | MODEL_GQA_QKV_BIAS | MODEL_GQA_QK_NORM_HEAD |
            MODEL_GQA_QK_NORM_FULL | MODEL_GQA_SINKS | MODEL_GQA_SLIDING | MODEL_GQA_OUT_BIAS | MODEL_GQA_OUT_GATE,
    .read_config = gqa_read_config,
    .bind = gqa_bind,
    .cache_row = gqa_cache_row,
};
