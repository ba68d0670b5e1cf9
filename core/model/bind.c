#include "core/model/bind.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static void shape_str(char *buf, size_t size, uint32_t n_dims, const int64_t *ne)
{
    int off = snprintf(buf, size, "[");
    for (uint32_t d = 0; d < n_dims && off > 0 && (size_t)off < size; d++)
        off += snprintf(buf + off, size - (size_t)off, "%s%" PRId64, d ? ", " : "", ne[d]);
    if (off > 0 && (size_t)off < size)
        snprintf(buf + off, size - (size_t)off, "]");
}

int model_bind(model_tensor_t *t, const model_binder_t *b, const char *suffix, model_tensor_kind_t kind,
               bool required, uint32_t n_dims, int64_t ne0, int64_t ne1, int64_t ne2)
{
    const gguf_t *g = b->g;
    guild_err_t *err = b->err;
    char name[96];
    if (b->layer >= 0)
        snprintf(name, sizeof name, "blk.%d.%s", b->layer, suffix);
    else
        snprintf(name, sizeof name, "%s", suffix);
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
        char a[96], s[96];
        int64_t have[4];
        for (int d = 0; d < 4; d++)
            have[d] = (int64_t)gt->ne[d];
        shape_str(a, sizeof a, n_dims, want);
        shape_str(s, sizeof s, gt->n_dims, have);
        return guild_err_set(err, "%s: tensor %s has shape %s, expected %s", gguf_path(g), name, s, a);
    }
    const quant_type_info_t *info = quant_type_info(gt->type);
    if (kind == MODEL_TENSOR_F32 && gt->type != GUILD_TYPE_F32)
        return guild_err_set(err, "%s: tensor %s: type %s is not supported here (f32 expected)", gguf_path(g),
                             name, info ? info->name : "?");
    if (kind == MODEL_TENSOR_MATRIX && (!info || !info->computable))
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
