/* The weights: the model's own tensors, then each layer's through its parts. */
#include "core/model/weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/model/bind.h"
#include "core/model/part_core.h"

/* A layer's norms, then the tensors of its attention, FFN and router. */
static int bind_layer(model_layer_t *L, int32_t il, const gguf_t *g, const model_config_t *c, guild_err_t *err)
{
    const model_binder_t b = {g, c, il, err};
    const model_layer_parts_t lp = model_layer_parts(c, il);
    const char *ffn_norm = model_arch_info(c->arch)->ffn_norm;
    char ffn_norm_name[64];
    snprintf(ffn_norm_name, sizeof ffn_norm_name, "%s.weight", ffn_norm ? ffn_norm : "ffn_norm");
    if (model_bind(&L->attn_norm, &b, "attn_norm.weight", MODEL_TENSOR_F32, true, 1, c->n_embd, 1, 1) ||
        model_bind(&L->ffn_norm, &b, ffn_norm_name, MODEL_TENSOR_F32, true, 1, c->n_embd, 1, 1) ||
        model_part_core(MODEL_PART_ATTN, lp.attn->kind)->bind(L, &b, lp.attn) < 0 ||
        model_part_core(MODEL_PART_FFN, lp.ffn->kind)->bind(L, &b, lp.ffn) < 0 ||
        (lp.router && model_part_core(MODEL_PART_ROUTER, lp.router->kind)->bind(L, &b, lp.router) < 0))
        return -1;
    return 0;
}

/* A multi-token-prediction layer: its block as any layer of its index, and the nextn tensors (llama.cpp's
 * shapes; the three last optional). */
static int bind_mtp(model_mtp_layer_t *M, int32_t il, const gguf_t *g, const model_config_t *c, guild_err_t *err)
{
    const model_binder_t b = {g, c, il, err};
    const int64_t E = c->n_embd, V = c->n_vocab;
    if (bind_layer(&M->block, il, g, c, err) < 0 ||
        model_bind(&M->eh_proj, &b, "nextn.eh_proj.weight", MODEL_TENSOR_MATRIX, true, 2, 2 * E, E, 1) ||
        model_bind(&M->enorm, &b, "nextn.enorm.weight", MODEL_TENSOR_F32, true, 1, E, 1, 1) ||
        model_bind(&M->hnorm, &b, "nextn.hnorm.weight", MODEL_TENSOR_F32, true, 1, E, 1, 1) ||
        model_bind(&M->embed_tokens, &b, "nextn.embed_tokens.weight", MODEL_TENSOR_MATRIX, false, 2, E, V, 1) ||
        model_bind(&M->head, &b, "nextn.shared_head_head.weight", MODEL_TENSOR_MATRIX, false, 2, E, V, 1) ||
        model_bind(&M->head_norm, &b, "nextn.shared_head_norm.weight", MODEL_TENSOR_F32, false, 1, E, 1, 1))
        return -1;
    return 0;
}

int model_weights_bind(model_weights_t *w, const gguf_t *g, const model_config_t *c, guild_err_t *err)
{
    memset(w, 0, sizeof *w);
    const model_binder_t b = {g, c, -1, err};
    if (model_bind(&w->token_embd, &b, "token_embd.weight", MODEL_TENSOR_MATRIX, true, 2, c->n_embd, c->n_vocab,
                   1) ||
        model_bind(&w->output_norm, &b, "output_norm.weight", MODEL_TENSOR_F32, true, 1, c->n_embd, 1, 1) ||
        model_bind(&w->output, &b, "output.weight", MODEL_TENSOR_MATRIX, false, 2, c->n_embd, c->n_vocab, 1) ||
        model_bind(&w->rope_freqs, &b, "rope_freqs.weight", MODEL_TENSOR_F32, false, 1, c->n_rot / 2, 1, 1))
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
    if (c->n_layer_mtp > 0) {
        if (!(w->mtp = calloc((size_t)c->n_layer_mtp, sizeof *w->mtp))) {
            model_weights_fini(w);
            return guild_err_set(err, "%s: out of memory for %d MTP layers", gguf_path(g), c->n_layer_mtp);
        }
        w->n_mtp = c->n_layer_mtp;
        for (int32_t j = 0; j < c->n_layer_mtp; j++)
            if (bind_mtp(&w->mtp[j], c->n_layer + j, g, c, err) < 0) {
                model_weights_fini(w);
                return -1;
            }
    }
    return 0;
}

void model_weights_fini(model_weights_t *w)
{
    for (int32_t il = 0; w->layers && il < w->n_layer; il++)
        free(w->layers[il].owned);
    for (int32_t j = 0; w->mtp && j < w->n_mtp; j++)
        free(w->mtp[j].block.owned);
    free(w->mtp);
    w->mtp = NULL;
    w->n_mtp = 0;
    free(w->layers);
    w->layers = NULL;
    w->n_layer = 0;
}
