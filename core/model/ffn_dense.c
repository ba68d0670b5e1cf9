/* The core of the dense FFN (MODEL_FFN_DENSE, the leading layers of a dense-first model): its metadata keys and
 * its tensors.
 *
 * Keys: ARCH.feed_forward_length (read with every architecture's keys, core/model/config.c; required here, >= 1).
 * Tensors of layer L: blk.L.ffn_gate.weight, ffn_up.weight [n_embd, n_ff], ffn_down.weight [n_ff, n_embd].
 */
#include "core/model/part_core.h"

static int dense_read_config(model_config_t *c, const model_keys_t *k, model_part_t *p)
{
    (void)p;
    if (c->n_ff < 1)
        return guild_err_set(k->err, "%s: metadata key %s.feed_forward_length is missing (the dense FFN layers' "
                             "width)", gguf_path(k->g), k->arch);
    return 0;
}

static int dense_bind(model_layer_t *L, const model_binder_t *b, const model_part_t *p)
{
    const int64_t E = b->c->n_embd, F = b->c->n_ff;
    (void)p;
    if (model_bind(&L->ffn_gate, b, "ffn_gate.weight", MODEL_TENSOR_MATRIX, true, 2, E, F, 1) ||
        model_bind(&L->ffn_up, b, "ffn_up.weight", MODEL_TENSOR_MATRIX, true, 2, E, F, 1) ||
        model_bind(&L->ffn_down, b, "ffn_down.weight", MODEL_TENSOR_MATRIX, true, 2, F, E, 1))
        return -1;
    return 0;
}

const model_part_core_t model_ffn_dense_core = {
    .opts = 0,
    .read_config = dense_read_config,
    .bind = dense_bind,
};
