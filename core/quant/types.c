#include "core/quant/types.h"

#include <strings.h>

#define T(id, nm, be, bb, comp, dot) [GUILD_TYPE_##id] = {nm, be, bb, comp, GUILD_TYPE_##dot}

/* Block geometry is ggml's (ggml-common.h); blocks.h asserts each block struct against these sizes. */
static const quant_type_info_t type_table[GUILD_TYPE_COUNT] = {
    T(F32, "f32", 1, 4, true, F32),
    T(F16, "f16", 1, 2, true, F32),
    T(Q4_0, "q4_0", 32, 18, true, Q8_0),
    T(Q4_1, "q4_1", 32, 20, true, Q8_1),
    T(Q5_0, "q5_0", 32, 22, true, Q8_0),
    T(Q5_1, "q5_1", 32, 24, true, Q8_1),
    T(Q8_0, "q8_0", 32, 34, true, Q8_0),
    T(Q8_1, "q8_1", 32, 36, false, Q8_1),
    T(Q2_K, "q2_K", 256, 84, true, Q8_K),
    T(Q3_K, "q3_K", 256, 110, true, Q8_K),
    T(Q4_K, "q4_K", 256, 144, true, Q8_K),
    T(Q5_K, "q5_K", 256, 176, true, Q8_K),
    T(Q6_K, "q6_K", 256, 210, true, Q8_K),
    T(Q8_K, "q8_K", 256, 292, false, Q8_K),
    T(IQ2_XXS, "iq2_xxs", 256, 66, true, Q8_K),
    T(IQ2_XS, "iq2_xs", 256, 74, true, Q8_K),
    T(IQ3_XXS, "iq3_xxs", 256, 98, true, Q8_K),
    T(IQ1_S, "iq1_s", 256, 50, true, Q8_K),
    T(IQ4_NL, "iq4_nl", 32, 18, true, Q8_0),
    T(IQ3_S, "iq3_s", 256, 110, true, Q8_K),
    T(IQ2_S, "iq2_s", 256, 82, true, Q8_K),
    T(IQ4_XS, "iq4_xs", 256, 136, true, Q8_K),
    T(I8, "i8", 1, 1, false, F32),
    T(I16, "i16", 1, 2, false, F32),
    T(I32, "i32", 1, 4, false, F32),
    T(I64, "i64", 1, 8, false, F32),
    T(F64, "f64", 1, 8, false, F32),
    T(IQ1_M, "iq1_m", 256, 56, true, Q8_K),
    T(BF16, "bf16", 1, 2, true, F32),
    T(TQ1_0, "tq1_0", 256, 54, false, Q8_K),
    T(TQ2_0, "tq2_0", 256, 66, false, Q8_K),
    T(MXFP4, "mxfp4", 32, 17, true, Q8_0),
};

const quant_type_info_t *quant_type_info(uint32_t type)
{
    if (type >= GUILD_TYPE_COUNT || type_table[type].name == NULL)
        return NULL;
    return &type_table[type];
}

int quant_type_from_name(const char *name)
{
    for (int t = 0; t < GUILD_TYPE_COUNT; t++)
        if (type_table[t].name && !strcasecmp(type_table[t].name, name))
            return t;
    return -1;
}

int quant_row_bytes(uint32_t type, uint64_t n, uint64_t *out, guild_err_t *err)
{
    const quant_type_info_t *info = quant_type_info(type);
    if (!info)
        return guild_err_set(err, "unknown tensor type %u", type);
    if (n % info->block_elems)
        return guild_err_set(err, "a row of %llu elements is not a whole number of %s blocks (%u elements each)",
                             (unsigned long long)n, info->name, info->block_elems);
    uint64_t blocks = n / info->block_elems;
    if (blocks > UINT64_MAX / info->block_bytes)
        return guild_err_set(err, "a row of %llu %s elements overflows 64-bit sizes", (unsigned long long)n,
                             info->name);
    *out = blocks * info->block_bytes;
    return 0;
}
