#include "tools/mkmodel/fill.h"

#include <string.h>

#include "core/quant/quant.h"
#include "tools/mkmodel/iq_fill.h"
#include "tools/mkmodel/rng.h"

bool mkmodel_fill_supported(guild_type_t type)
{
    return type == GUILD_TYPE_F32 || quant_can_quantize(type) || mkmodel_iq_fill_supported(type);
}

int mkmodel_fill_rows(const mkmodel_tensor_t *t, uint64_t seed, uint64_t row0, uint64_t n_rows, void *dst,
                      float *scratch, guild_err_t *err)
{
    const int64_t n = t->ne[0];
    const uint64_t stream = mkmodel_rng_hash(t->name);
    uint8_t *out = dst;
    for (uint64_t r = row0; r < row0 + n_rows; r++, out += t->row_bytes) {
        mkmodel_rng_t rng;
        mkmodel_rng_init(&rng, seed, stream, r);
        if (mkmodel_iq_fill_supported(t->type)) {
            GUILD_ASSERT(t->mean == 0);
            mkmodel_iq_fill_row(t->type, &rng, t->std, out, n);
            continue;
        }
        float *x = t->type == GUILD_TYPE_F32 ? (float *)(void *)out : scratch;
        for (int64_t i = 0; i < n; i++)
            x[i] = t->mean + t->std * mkmodel_rng_gauss(&rng);
        if (t->type != GUILD_TYPE_F32 && quant_quantize_row_ref(t->type, x, out, n, err) < 0)
            return guild_err_prefix(err, "tensor %s: ", t->name);
    }
    return 0;
}
