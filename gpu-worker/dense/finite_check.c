#include "gpu-worker/dense/finite_check.h"

#include <stdbool.h>
#include <stdio.h>

int finite_check_fits(const model_config_t *c, int32_t n_batch, guild_err_t *err)
{
    if ((int64_t)c->n_layer * 2 + 1 >= FINITE_MAX_SITES || n_batch >= (int32_t)FINITE_MAX_ROWS ||
        c->n_embd >= (int64_t)FINITE_MAX_ELEMS)
        return guild_err_set(err, "the non-finite check takes at most %u layers, batches of %u rows and rows of %u "
                             "values (%d layers, batches of %d, %lld values): turn it off (--check-finite off)",
                             FINITE_MAX_SITES / 2 - 1, FINITE_MAX_ROWS - 1, FINITE_MAX_ELEMS - 1, c->n_layer,
                             n_batch, (long long)c->n_embd);
    return 0;
}

int finite_report(uint64_t key, const model_config_t *c, int32_t pos0, guild_err_t *err)
{
    const uint32_t site = (uint32_t)(key >> 50), kind = (uint32_t)(key >> 49) & 1u;
    const uint32_t row = (uint32_t)(key >> 25) & (FINITE_MAX_ROWS - 1), elem = (uint32_t)key & FINITE_ELEM_NONE;
    const int32_t il = (int32_t)(site / 2);
    const bool output = il >= c->n_layer, ffn = !output && site % 2 == 1;
    char where[96];
    if (elem == FINITE_ELEM_NONE)
        snprintf(where, sizeof where, "its values are so large that their squares overflow");
    else
        snprintf(where, sizeof where, "element %u", elem);
    const long long pos = (long long)pos0 + row;
    const char *hint = " (--check-finite off skips this check)";
    if (kind == FINITE_NORMED) {
        char tensor[64];
        if (output)
            snprintf(tensor, sizeof tensor, "output_norm.weight");
        else
            snprintf(tensor, sizeof tensor, "blk.%d.%s.weight", il, ffn ? "ffn_norm" : "attn_norm");
        return guild_err_set(err, "non-finite value: layer %d: %s makes the normed residual stream not finite at "
                             "position %lld (row %u of the batch), element %u: the weight is not finite or too "
                             "large%s", output ? c->n_layer - 1 : il, tensor, pos, row, elem, hint);
    }
    if (ffn)
        return guild_err_set(err, "non-finite value: layer %d: the residual stream after its attention part "
                             "(blk.%d.attn_*) is not finite at position %lld (row %u of the batch), %s%s", il, il,
                             pos, row, where, hint);
    if (il == 0)
        return guild_err_set(err, "non-finite value: layer 0: its input, the token embedding (token_embd.weight), "
                             "is not finite at position %lld (row %u of the batch), %s%s", pos, row, where, hint);
    const int32_t from = il - 1;
    return guild_err_set(err, "non-finite value: layer %d: its output, the residual stream after its FFN part "
                         "(blk.%d.ffn_*), is not finite at position %lld (row %u of the batch), %s%s", from, from,
                         pos, row, where, hint);
}
