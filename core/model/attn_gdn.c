/* The core of the gated delta net (MODEL_ATTN_GDN), the linear attention of qwen3next and qwen35moe: its metadata
 * keys and its tensors, as llama.cpp's loaders read them (src/models/qwen3next.cpp, qwen35moe.cpp).
 *
 * Keys (all required): ARCH.ssm.conv_kernel (taps of the causal convolution), .ssm.state_size (size of a key
 * head), .ssm.group_count (key heads), .ssm.time_step_rank (value heads, a multiple of the key heads),
 * .ssm.inner_size (value heads * their size; Guild, like llama.cpp's delta net, needs value heads of the key
 * heads' size).
 * Tensors of layer L, with dk = state_size, nk = group_count, nv = time_step_rank, conv = 2 * nk * dk + inner:
 *   attn_qkv.weight [n_embd, conv]        q (nk heads), k (nk heads), v (nv heads), before the convolution
 *   attn_gate.weight [n_embd, inner]      z, the output norm's gate
 *   ssm_conv1d.weight [conv_kernel, conv] f32, the causal convolution's taps per channel (oldest first)
 *   ssm_dt.bias [nv] f32                  added to alpha before the softplus
 *   ssm_a [nv] f32                        -exp(A_log): the decay's rate per value head
 *   ssm_ba.weight [n_embd, 2 * nv]        per key head: its value heads' beta logits, then their alphas
 *                                         (without MODEL_GDN_BA_SPLIT)
 *   ssm_beta.weight, ssm_alpha.weight [n_embd, nv] (with MODEL_GDN_BA_SPLIT)
 *   ssm_norm.weight [dk] f32              the gated RMSNorm of each value head's output
 *   ssm_out.weight [inner, n_embd]
 * Older qwen3next files (llama.cpp's first converter, PR 16095; HF's in_proj_qkvz as it is) have instead of
 * attn_qkv and attn_gate one
 *   ssm_in.weight [n_embd, conv + inner]  per key head g: its q (dk), k (dk), v and z (dk * nv/nk each) rows
 * which is bound as the split form: its rows copied once into that order (memory the layer owns), so that both
 * forms compute the same bits.
 */
#include <stdlib.h>
#include <string.h>

#include "core/model/part_core.h"

static int gdn_read_config(model_config_t *c, const model_keys_t *k, model_part_t *p)
{
    const char *path = gguf_path(k->g);
    (void)p;
    if (model_key_i32(k, "ssm.conv_kernel", &c->ssm_d_conv, true, 0, 1, 64) < 0 ||
        model_key_i32(k, "ssm.state_size", &c->ssm_d_state, true, 0, 1, 4096) < 0 ||
        model_key_i32(k, "ssm.group_count", &c->ssm_n_group, true, 0, 1, MODEL_MAX_HEADS) < 0 ||
        model_key_i32(k, "ssm.time_step_rank", &c->ssm_dt_rank, true, 0, 1, MODEL_MAX_HEADS) < 0 ||
        model_key_i32(k, "ssm.inner_size", &c->ssm_d_inner, true, 0, 1, MODEL_MAX_WIDTH) < 0)
        return -1;
    if (c->ssm_dt_rank % c->ssm_n_group)
        return guild_err_set(k->err, "%s: %s.ssm.time_step_rank %d is not a multiple of ssm.group_count %d", path,
                             k->arch, c->ssm_dt_rank, c->ssm_n_group);
    if ((int64_t)c->ssm_dt_rank * c->ssm_d_state != c->ssm_d_inner)
        return guild_err_set(k->err, "%s: %s.ssm.inner_size %d != time_step_rank %d * state_size %d: value heads "
                             "of another size than the key heads are not supported", path, k->arch,
                             c->ssm_d_inner, c->ssm_dt_rank, c->ssm_d_state);
    if (model_gdn_conv_channels(c) > MODEL_MAX_WIDTH)
        return guild_err_set(k->err, "%s: %s: the gated delta net's %lld channels are too many", path, k->arch,
                             (long long)model_gdn_conv_channels(c));
    return 0;
}

int64_t model_gdn_conv_channels(const model_config_t *c)
{
    return 2 * (int64_t)c->ssm_n_group * c->ssm_d_state + c->ssm_d_inner;
}

int64_t model_gdn_conv_state(const model_config_t *c)
{
    return (int64_t)(c->ssm_d_conv - 1) * model_gdn_conv_channels(c);
}

int64_t model_gdn_ssm_state(const model_config_t *c)
{
    return (int64_t)c->ssm_dt_rank * c->ssm_d_state * c->ssm_d_state;
}

bool model_layer_recurrent(const model_config_t *c, int32_t il)
{
    return model_layer_parts(c, il).attn->kind == MODEL_ATTN_GDN;
}

bool model_recurrent(const model_config_t *c)
{
    for (int32_t il = 0; il < c->n_layer; il++)
        if (model_layer_recurrent(c, il))
            return true;
    return false;
}

/* Whether layer b->layer's file has tensor blk.L.<suffix>. */
static bool has_tensor(const model_binder_t *b, const char *suffix)
{
    char name[96];
    snprintf(name, sizeof name, "blk.%d.%s", b->layer, suffix);
    return gguf_find_tensor(b->g, name) != NULL;
}

/* The fused ssm_in as attn_qkv and attn_gate (the file's comment above): each key head's rows to their places. */
static int bind_fused(model_layer_t *L, const model_binder_t *b)
{
    const model_config_t *c = b->c;
    const int64_t E = c->n_embd, CH = model_gdn_conv_channels(c), IN = c->ssm_d_inner;
    const int64_t NK = c->ssm_n_group, DK = c->ssm_d_state, VR = IN / NK;
    model_tensor_t f;
    if (model_bind(&f, b, "ssm_in.weight", MODEL_TENSOR_MATRIX, true, 2, E, CH + IN, 1))
        return -1;
    const size_t row = f.row_bytes;
    char *buf = malloc((size_t)(CH + IN) * row);
    if (!buf)
        return guild_err_set(b->err, "%s: out of memory for %s in the split form", gguf_path(b->g), f.name);
    for (int64_t g = 0; g < NK; g++) {
        const char *src = model_tensor_row(&f, 0, g * (2 * DK + 2 * VR));
        memcpy(buf + (size_t)(g * DK) * row, src, (size_t)DK * row);                       /* q */
        memcpy(buf + (size_t)(NK * DK + g * DK) * row, src + DK * row, (size_t)DK * row);   /* k */
        memcpy(buf + (size_t)(2 * NK * DK + g * VR) * row, src + 2 * DK * row, (size_t)VR * row); /* v */
        memcpy(buf + (size_t)(CH + g * VR) * row, src + (2 * DK + VR) * row, (size_t)VR * row); /* z */
    }
    L->owned = buf;
    L->ssm_qkv = f;
    L->ssm_qkv.data = buf;
    L->ssm_qkv.ne[1] = CH;
    L->ssm_qkv.mat_bytes = (size_t)CH * row;
    L->ssm_gate = f;
    L->ssm_gate.data = buf + (size_t)CH * row;
    L->ssm_gate.ne[1] = IN;
    L->ssm_gate.mat_bytes = (size_t)IN * row;
    return 0;
}

static int gdn_bind(model_layer_t *L, const model_binder_t *b, const model_part_t *p)
{
    const model_config_t *c = b->c;
    const int64_t E = c->n_embd, CH = model_gdn_conv_channels(c), IN = c->ssm_d_inner, NV = c->ssm_dt_rank;
    const bool fused = !(p->opts & MODEL_GDN_BA_SPLIT) && !has_tensor(b, "attn_qkv.weight") &&
                       has_tensor(b, "ssm_in.weight");
    if ((fused ? bind_fused(L, b) < 0
               : model_bind(&L->ssm_qkv, b, "attn_qkv.weight", MODEL_TENSOR_MATRIX, true, 2, E, CH, 1) ||
                     model_bind(&L->ssm_gate, b, "attn_gate.weight", MODEL_TENSOR_MATRIX, true, 2, E, IN, 1)) ||
        model_bind(&L->ssm_conv1d, b, "ssm_conv1d.weight", MODEL_TENSOR_F32, true, 2, c->ssm_d_conv, CH, 1) ||
        model_bind(&L->ssm_dt, b, "ssm_dt.bias", MODEL_TENSOR_F32, true, 1, NV, 1, 1) ||
        model_bind(&L->ssm_a, b, "ssm_a", MODEL_TENSOR_F32, true, 1, NV, 1, 1) ||
        model_bind(&L->ssm_norm, b, "ssm_norm.weight", MODEL_TENSOR_F32, true, 1, c->ssm_d_state, 1, 1) ||
        model_bind(&L->ssm_out, b, "ssm_out.weight", MODEL_TENSOR_MATRIX, true, 2, IN, E, 1))
        return -1;
    if (p->opts & MODEL_GDN_BA_SPLIT)
        return model_bind(&L->ssm_beta, b, "ssm_beta.weight", MODEL_TENSOR_MATRIX, true, 2, E, NV, 1) ||
                       model_bind(&L->ssm_alpha, b, "ssm_alpha.weight", MODEL_TENSOR_MATRIX, true, 2, E, NV, 1)
                   ? -1
                   : 0;
    return model_bind(&L->ssm_ba, b, "ssm_ba.weight", MODEL_TENSOR_MATRIX, true, 2, E, 2 * NV, 1) ? -1 : 0;
}

/* no K/V: the layer's memory is its recurrent state, which the backends keep beside the cache */
static void gdn_cache_row(const model_config_t *c, const model_part_t *p, int64_t *k, int64_t *v)
{
    (void)c;
    (void)p;
    *k = 0;
    *v = 0;
}

const model_part_core_t model_attn_gdn_core = {
    .opts = MODEL_GDN_BA_SPLIT | MODEL_GDN_KV_TILED,
    .read_config = gdn_read_config,
    .bind = gdn_bind,
    .cache_row = gdn_cache_row,
};
