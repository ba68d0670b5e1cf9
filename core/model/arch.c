#include "core/model/arch.h"

#include <string.h>

#include "core/util/err.h"

static const model_arch_info_t arch_table[MODEL_ARCH_COUNT] = {
    [MODEL_ARCH_QWEN3MOE] = {"qwen3moe", MODEL_ROPE_NEOX, MODEL_QK_NORM_HEAD, false, true, false},
    [MODEL_ARCH_QWEN2MOE] = {"qwen2moe", MODEL_ROPE_NEOX, MODEL_QK_NORM_NONE, true, false, true},
    [MODEL_ARCH_LLAMA] = {"llama", MODEL_ROPE_NORM, MODEL_QK_NORM_NONE, false, true, false},
    [MODEL_ARCH_OLMOE] = {"olmoe", MODEL_ROPE_NEOX, MODEL_QK_NORM_FULL, false, false, false},
};

int model_arch_from_name(const char *name, size_t len)
{
    for (int a = 0; a < MODEL_ARCH_COUNT; a++)
        if (strlen(arch_table[a].name) == len && !memcmp(arch_table[a].name, name, len))
            return a;
    return -1;
}

const model_arch_info_t *model_arch_info(model_arch_t arch)
{
    GUILD_ASSERT(arch >= 0 && arch < MODEL_ARCH_COUNT);
    return &arch_table[arch];
}

const char *model_arch_list(void)
{
    return "qwen3moe, qwen2moe, llama (Mixtral), olmoe";
}
