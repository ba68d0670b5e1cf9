/* The KV cache's storage formats (contract in kv_format.h). */
#include "gpu-worker/dense/kv_format.h"

#include <math.h>
#include <string.h>

#include "core/model/parts.h"
#include "core/quant/quant.h"
#include "core/quant/ref_kernels.h"

int kv_type_parse(const char *s, int32_t *out, guild_err_t *err)
{
    for (int32_t t = KV_TYPE_F32; t <= KV_TYPE_LAST; t++)
        if (!strcmp(s, kv_type_name(t))) {
            *out = t;
            return 0;
        }
    return guild_err_set(err, "--kv-type %s: expected f32, f16, q8_0, q4_0 or k8v4", s);
}

guild_type_t kv_type_k(int32_t t)
{
    switch (t) {
    case KV_TYPE_F32: return GUILD_TYPE_F32;
    case KV_TYPE_Q8_0: case KV_TYPE_K8V4: return GUILD_TYPE_Q8_0;
    case KV_TYPE_Q4_0: return GUILD_TYPE_Q4_0;
    default: return GUILD_TYPE_F16;
    }
}

guild_type_t kv_type_v(int32_t t)
{
    return t == KV_TYPE_K8V4 ? GUILD_TYPE_Q4_0 : kv_type_k(t);
}

bool kv_type_rotates_v(int32_t t)
{
    return t == KV_TYPE_K8V4;
}

uint64_t kv_elem_bytes(guild_type_t et, int64_t n)
{
    const quant_type_info_t *ti = quant_type_info(et);
    GUILD_ASSERT(ti && n % ti->block_elems == 0);
    return (uint64_t)n / ti->block_elems * ti->block_bytes;
}

int kv_type_check(int32_t t, const model_config_t *c, unsigned mla_types, const char *who, guild_err_t *err)
{
    if (t < KV_TYPE_F32 || t > KV_TYPE_LAST)
        return guild_err_set(err, "%s: KV cache format %d is not one of f32, f16, q8_0, q4_0, k8v4", who, (int)t);
    for (int32_t il = 0; il < c->n_layer; il++) {
        const int kind = model_layer_parts(c, il).attn->kind;
        if (kind == MODEL_ATTN_MLA && !(mla_types & (1u << t)))
            return guild_err_set(err, "%s: --kv-type %s: multi-head latent attention (layer %d) keeps its latent "
                                 "cache in %s only", who, kv_type_name(t), (int)il,
                                 mla_types == (1u << KV_TYPE_F32) ? "f32" : "f16 or f32");
        if (kind != MODEL_ATTN_GQA)
            continue;
        if (kv_type_k(t) != GUILD_TYPE_F32 && kv_type_k(t) != GUILD_TYPE_F16 && c->head_dim % KV_BLOCK)
            return guild_err_set(err, "%s: --kv-type %s: head dimension %d is not a multiple of %d (blocks never "
                                 "straddle heads)", who, kv_type_name(t), (int)c->head_dim, KV_BLOCK);
        if (kv_type_rotates_v(t) && (c->head_dim & (c->head_dim - 1)))
            return guild_err_set(err, "%s: --kv-type %s: head dimension %d is not a power of two (the values' "
                                 "Walsh-Hadamard rotation)", who, kv_type_name(t), (int)c->head_dim);
    }
    return 0;
}

uint64_t kv_type_position_bytes(int32_t t, const model_config_t *c)
{
    t = kv_type_resolve(t, KV_TYPE_F16);
    int64_t k_row = 0, v_row = 0, kv_layers = 0;
    for (int32_t il = 0; il < c->n_layer; il++) {
        const model_cache_row_t r = model_layer_cache_row(c, il);
        k_row = r.k > k_row ? r.k : k_row;
        v_row = r.v > v_row ? r.v : v_row;
        kv_layers += r.k || r.v;
    }
    /* a row that is not whole blocks (an MLA latent with a block format) is refused by kv_type_check: count it
     * as f16 rather than assert here */
    guild_type_t kt = kv_type_k(t), vt = kv_type_v(t);
    if (k_row % KV_BLOCK && quant_type_info(kt)->block_elems > 1)
        kt = GUILD_TYPE_F16;
    if (v_row % KV_BLOCK && quant_type_info(vt)->block_elems > 1)
        vt = GUILD_TYPE_F16;
    return (kv_elem_bytes(kt, k_row) + kv_elem_bytes(vt, v_row)) * (uint64_t)kv_layers;
}

void kv_hadamard(float *x, int32_t n)
{
    for (int32_t len = 1; len < n; len <<= 1)
        for (int32_t i = 0; i < n; i += 2 * len)
            for (int32_t j = i; j < i + len; j++) {
                const float a = x[j], b = x[j + len];
                x[j] = a + b;
                x[j + len] = a - b;
            }
    const float s = (float)(1.0 / sqrt((double)n));
    for (int32_t i = 0; i < n; i++)
        x[i] *= s;
}

static void store_plain(guild_type_t et, const float *x, void *dst, int64_t n)
{
    switch (et) {
    case GUILD_TYPE_F32: memcpy(dst, x, (size_t)n * sizeof *x); break;
    case GUILD_TYPE_F16: quant_quant_f16_ref(x, dst, n); break;
    case GUILD_TYPE_Q8_0: quant_quant_q8_0_ref(x, dst, n / KV_BLOCK); break;
    case GUILD_TYPE_Q4_0: quant_quant_q4_0_ref(x, dst, n / KV_BLOCK); break;
    default: GUILD_ASSERT(!"a KV cache element type");
    }
}

void kv_store_row(guild_type_t et, bool rotate, const float *x, void *dst, int64_t n, int32_t head_dim,
                  float *scratch)
{
    if (!rotate) {
        store_plain(et, x, dst, n);
        return;
    }
    const uint64_t head_bytes = kv_elem_bytes(et, head_dim);
    for (int64_t h = 0; h < n / head_dim; h++) {
        memcpy(scratch, x + h * head_dim, (size_t)head_dim * sizeof *x);
        kv_hadamard(scratch, head_dim);
        store_plain(et, scratch, (char *)dst + (size_t)h * head_bytes, head_dim);
    }
}

void kv_load(guild_type_t et, const void *src, float *dst, int64_t n)
{
    if (et == GUILD_TYPE_F32)
        memcpy(dst, src, (size_t)n * sizeof *dst);
    else
        quant_dequantize_row_ref(et, src, dst, n);
}
