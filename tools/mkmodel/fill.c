#include "tools/mkmodel/fill.h"

#include <stdio.h>
#include <string.h>

#include "core/quant/quant.h"
#include "tools/mkmodel/iq_fill.h"
#include "tools/mkmodel/rng.h"

bool mkmodel_fill_supported(guild_type_t type)
{
    return type == GUILD_TYPE_F32 || quant_can_quantize(type) || mkmodel_iq_fill_supported(type);
}

/* A fused ssm_in's row r: the split form's tensor (0 attn_qkv, 1 attn_gate) and row it is drawn as. */
static uint64_t fused_source(const mkmodel_tensor_t *t, uint64_t r, int *which)
{
    const uint64_t NK = (uint64_t)t->fuse_nk, DK = (uint64_t)t->fuse_dk, VR = (uint64_t)t->fuse_vr;
    const uint64_t g = r / (2 * DK + 2 * VR), i = r % (2 * DK + 2 * VR);
    *which = i >= 2 * DK + VR;
    if (i < DK)
        return g * DK + i;                          /* q */
    if (i < 2 * DK)
        return NK * DK + g * DK + (i - DK);         /* k */
    if (i < 2 * DK + VR)
        return 2 * NK * DK + g * VR + (i - 2 * DK); /* v */
    return g * VR + (i - 2 * DK - VR);              /* z: attn_gate */
}

int mkmodel_fill_rows(const mkmodel_tensor_t *t, uint64_t seed, uint64_t row0, uint64_t n_rows, void *dst,
                      float *scratch, guild_err_t *err)
{
    const int64_t n = t->ne[0];
    uint64_t stream = mkmodel_rng_hash(t->name), split[2] = {0, 0};
    if (t->fuse_nk) {
        char name[64];
        snprintf(name, sizeof name, "blk.%lld.attn_qkv.weight", (long long)t->layer);
        split[0] = mkmodel_rng_hash(name);
        snprintf(name, sizeof name, "blk.%lld.attn_gate.weight", (long long)t->layer);
        split[1] = mkmodel_rng_hash(name);
    }
    uint8_t *out = dst;
    for (uint64_t r = row0; r < row0 + n_rows; r++, out += t->row_bytes) {
        mkmodel_rng_t rng;
        uint64_t src = r;
        if (t->fuse_nk) {
            int which;
            src = fused_source(t, r, &which);
            stream = split[which];
        }
        mkmodel_rng_init(&rng, seed, stream, src);
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
