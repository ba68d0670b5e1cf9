#include "core/model/weights.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum tensor_kind {
    KIND_F32,    /* norms and biases: read directly as float */
    KIND_MATRIX, /* used through dot products or row dequantization: any computable type */
} tensor_kind_t;

static void shape_str(char *buf, size_t size, uint32_t n_dims, const int64_t *ne)
{
    int off = snprintf(buf, size, "[");
    for (uint32_t d = 0; d < n_dims && off > 0 && (size_t)off < size; d++)
        off += snprintf(buf + off, size - (size_t)off, "%s%" PRId64, d ? ", " : "", ne[d]);
    if (off > 0 && (size_t)off < size)
        snprintf(buf + off, size - (size_t)off, "]");
}

/* Binds tensor `name` with the expected shape (n_dims entries of ne). Absent and !required: t->data = NULL. */
static int bind(model_tensor_t *t, const gguf_t *g, const char *name, tensor_kind_t kind, bool required,
                uint32_t n_dims, int64_t ne0, int64_t ne1, int64_t ne2, guild_err_t *err)
{
    memset(t, 0, sizeof *t);
    const gguf_tensor_t *gt = gguf_find_tensor(g, name);
    if (!gt) {
        if (required)
            return guild_err_set(err, "%s: tensor %s is missing", gguf_path(g), name);
        return 0;
    }
    int64_t want[4] = {ne0, ne1, ne2, 1};
    bool same = gt->n_dims == n_dims;
    for (uint32_t d = 0; d < n_dims && same; d++)
        same = gt->ne[d] == (uint64_t)want[d];
    if (!same) {
        char a[96], b[96];
        int64_t have[4];
        for (int d = 0; d < 4; d++)
            have[d] = (int64_t)gt->ne[d];
        shape_str(a, sizeof a, n_dims, want);
        shape_str(b, sizeof b, gt->n_dims, have);
        return guild_err_set(err, "%s: tensor %s has shape %s, expected %s", gguf_path(g), name, b, a);
    }
    const quant_type_info_t *info = quant_type_info(gt->type);
    if (kind == KIND_F32 && gt->type != GUILD_TYPE_F32)
        return guild_err_set(err, "%s: tensor %s: type %s is not supported here (f32 expected)", gguf_path(g),
                             name, info ? info->name : "?");
    if (kind == KIND_MATRIX && (!info || !info->computable))
        return guild_err_set(err, "%s: tensor %s: type %s (%u) is not supported", gguf_path(g), name,
                             info ? info->name : "unknown", gt->type);
    uint64_t row;
    guild_err_t e;
    if (quant_row_bytes(gt->type, gt->ne[0], &row, &e) < 0)
        return guild_err_set(err, "%s: tensor %s: %s", gguf_path(g), name, e.msg);
    t->name = gt->name;
    t->data = gt->data;
    t->type = (guild_type_t)gt->type;
    for (int d = 0; d < 4; d++)
        t->ne[d] = d < (int)gt->n_dims ? (int64_t)gt->ne[d] : 1;
    t->row_bytes = (size_t)row;
    t->mat_bytes = (size_t)row * (size_t)t->ne[1];
    return 0;
}

static int bind_layer(model_layer_t *L, int il, const gguf_t *g, const model_config_t *c, guild_err_t *err)
{
    const model_arch_info_t *info = model_arch_info(c->arch);
    const int64_t E = c->n_embd, Q = (int64_t)c->n_head * c->head_dim, KV = (int64_t)c->n_head_kv * c->head_dim;
    char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d." s, il), n)
    if (bind(&L->attn_norm, g, NAME("attn_norm.weight"), KIND_F32, true, 1, E, 1, 1, err) ||
        bind(&L->wq, g, NAME("attn_q.weight"), KIND_MATRIX, true, 2, E, Q, 1, err) ||
        bind(&L->wk, g, NAME("attn_k.weight"), KIND_MATRIX, true, 2, E, KV, 1, err) ||
        bind(&L->wv, g, NAME("attn_v.weight"), KIND_MATRIX, true, 2, E, KV, 1, err) ||
        bind(&L->wo, g, NAME("attn_output.weight"), KIND_MATRIX, true, 2, Q, E, 1, err) ||
        bind(&L->ffn_norm, g, NAME("ffn_norm.weight"), KIND_F32, true, 1, E, 1, 1, err) ||
        bind(&L->router, g, NAME("ffn_gate_inp.weight"), KIND_MATRIX, true, 2, E, c->n_expert, 1, err) ||
        bind(&L->gate_exps, g, NAME("ffn_gate_exps.weight"), KIND_MATRIX, true, 3, E, c->n_ff_exp, c->n_expert,
             err) ||
        bind(&L->up_exps, g, NAME("ffn_up_exps.weight"), KIND_MATRIX, true, 3, E, c->n_ff_exp, c->n_expert, err) ||
        bind(&L->down_exps, g, NAME("ffn_down_exps.weight"), KIND_MATRIX, true, 3, c->n_ff_exp, E, c->n_expert,
             err))
        return -1;
    if (info->qkv_bias &&
        (bind(&L->bq, g, NAME("attn_q.bias"), KIND_F32, true, 1, Q, 1, 1, err) ||
         bind(&L->bk, g, NAME("attn_k.bias"), KIND_F32, true, 1, KV, 1, 1, err) ||
         bind(&L->bv, g, NAME("attn_v.bias"), KIND_F32, true, 1, KV, 1, 1, err)))
        return -1;
    if (info->qk_norm != MODEL_QK_NORM_NONE) {
        bool head = info->qk_norm == MODEL_QK_NORM_HEAD;
        if (bind(&L->q_norm, g, NAME("attn_q_norm.weight"), KIND_F32, true, 1, head ? c->head_dim : Q, 1, 1,
                 err) ||
            bind(&L->k_norm, g, NAME("attn_k_norm.weight"), KIND_F32, true, 1, head ? c->head_dim : KV, 1, 1, err))
            return -1;
    }
    if (info->shared_expert) {
        const int64_t S = c->n_ff_shexp;
        if (bind(&L->shexp_gate_inp, g, NAME("ffn_gate_inp_shexp.weight"), KIND_MATRIX, true, 1, E, 1, 1, err) ||
            bind(&L->shexp_gate, g, NAME("ffn_gate_shexp.weight"), KIND_MATRIX, true, 2, E, S, 1, err) ||
            bind(&L->shexp_up, g, NAME("ffn_up_shexp.weight"), KIND_MATRIX, true, 2, E, S, 1, err) ||
            bind(&L->shexp_down, g, NAME("ffn_down_shexp.weight"), KIND_MATRIX, true, 2, S, E, 1, err))
            return -1;
    }
#undef NAME
    return 0;
}

int model_weights_bind(model_weights_t *w, const gguf_t *g, const model_config_t *c, guild_err_t *err)
{
    memset(w, 0, sizeof *w);
    if (bind(&w->token_embd, g, "token_embd.weight", KIND_MATRIX, true, 2, c->n_embd, c->n_vocab, 1, err) ||
        bind(&w->output_norm, g, "output_norm.weight", KIND_F32, true, 1, c->n_embd, 1, 1, err) ||
        bind(&w->output, g, "output.weight", KIND_MATRIX, false, 2, c->n_embd, c->n_vocab, 1, err) ||
        bind(&w->rope_freqs, g, "rope_freqs.weight", KIND_F32, false, 1, c->n_rot / 2, 1, 1, err))
        return -1;
    if (!w->output.data) {
        w->output = w->token_embd;
        w->tied_output = true;
    }
    w->layers = calloc((size_t)c->n_layer, sizeof *w->layers);
    if (!w->layers)
        return guild_err_set(err, "%s: out of memory for %d layers", gguf_path(g), c->n_layer);
    w->n_layer = c->n_layer;
    for (int il = 0; il < c->n_layer; il++) {
        if (bind_layer(&w->layers[il], il, g, c, err) < 0) {
            model_weights_fini(w);
            return -1;
        }
    }
    return 0;
}

void model_weights_fini(model_weights_t *w)
{
    free(w->layers);
    w->layers = NULL;
    w->n_layer = 0;
}
