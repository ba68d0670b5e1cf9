#include "tools/mkmodel/recipe.h"

#include <string.h>

#include "core/quant/types.h"

bool mkmodel_recipe_more_bits(int64_t layer, int64_t n_layer)
{
    return layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
}

static bool is_matrix(mkmodel_role_t role)
{
    return role != MKMODEL_ROLE_NORM && role != MKMODEL_ROLE_BIAS && role != MKMODEL_ROLE_SHEXP_GATE &&
           role != MKMODEL_ROLE_ROUTER;
}

static guild_type_t q4_k_m_type(const mkmodel_config_t *cfg, const mkmodel_tensor_t *t)
{
    bool eight_experts = cfg->n_expert == 8;
    switch (t->role) {
    case MKMODEL_ROLE_OUTPUT:
        return t->ne[0] % 256 ? GUILD_TYPE_Q8_0 : GUILD_TYPE_Q6_K;
    case MKMODEL_ROLE_TOKEN_EMBD:
        /* A tied token_embd is also the output: llama.cpp gives it the output's type. */
        if (cfg->tie_embeddings)
            return t->ne[0] % 256 ? GUILD_TYPE_Q8_0 : GUILD_TYPE_Q6_K;
        return GUILD_TYPE_Q4_K;
    case MKMODEL_ROLE_ATTN_V:
        if (eight_experts)
            return GUILD_TYPE_Q8_0;
        return mkmodel_recipe_more_bits(t->layer, cfg->n_layer) ? GUILD_TYPE_Q6_K : GUILD_TYPE_Q4_K;
    case MKMODEL_ROLE_ATTN_K:
        return eight_experts ? GUILD_TYPE_Q8_0 : GUILD_TYPE_Q4_K;
    case MKMODEL_ROLE_ATTN_OUTPUT:
        return eight_experts ? GUILD_TYPE_Q5_K : GUILD_TYPE_Q4_K;
    case MKMODEL_ROLE_FFN_DOWN:
        return mkmodel_recipe_more_bits(t->layer, cfg->n_layer) ? GUILD_TYPE_Q6_K : GUILD_TYPE_Q4_K;
    default:
        return GUILD_TYPE_Q4_K;
    }
}

/* llama.cpp's convert_incompatible_tensor table; -1 where llama.cpp has none. */
static int fallback_of(guild_type_t t)
{
    switch (t) {
    case GUILD_TYPE_IQ2_XXS:
    case GUILD_TYPE_IQ2_XS:
    case GUILD_TYPE_IQ2_S:
    case GUILD_TYPE_IQ3_XXS:
    case GUILD_TYPE_IQ3_S:
    case GUILD_TYPE_IQ1_S:
    case GUILD_TYPE_IQ1_M:
    case GUILD_TYPE_Q2_K:
    case GUILD_TYPE_Q3_K:
    case GUILD_TYPE_IQ4_XS:
        return GUILD_TYPE_IQ4_NL;
    case GUILD_TYPE_Q4_K:
        return GUILD_TYPE_Q5_0;
    case GUILD_TYPE_Q5_K:
        return GUILD_TYPE_Q5_1;
    case GUILD_TYPE_Q6_K:
        return GUILD_TYPE_Q8_0;
    default:
        return -1;
    }
}

int mkmodel_recipe_choose(const mkmodel_config_t *cfg, mkmodel_tensor_t *t, guild_err_t *err)
{
    guild_type_t want;
    if (t->role == MKMODEL_ROLE_ROUTER)
        want = (guild_type_t)cfg->router_type;
    else if (!is_matrix(t->role))
        want = GUILD_TYPE_F32;
    else if (cfg->recipe == MKMODEL_RECIPE_Q4_K_M)
        want = q4_k_m_type(cfg, t);
    else if (cfg->recipe == MKMODEL_RECIPE_MXFP4_MOE) /* llama.cpp: 3-D (expert) tensors MXFP4, the rest Q8_0 */
        want = t->n_dims == 3 ? GUILD_TYPE_MXFP4 : GUILD_TYPE_Q8_0;
    else
        want = (guild_type_t)cfg->type;
    t->wanted = want;
    t->type = want;
    uint32_t block = quant_type_info(want)->block_elems;
    if (t->ne[0] % block == 0)
        return 0;
    int fb = fallback_of(want);
    if (fb < 0)
        return guild_err_set(err, "tensor %s: rows of %lld elements are not whole %s blocks of %u, and llama.cpp "
                                  "has no fallback for %s (choose dimensions that are multiples of %u or another "
                                  "type)",
                             t->name, (long long)t->ne[0], quant_type_info(want)->name, block,
                             quant_type_info(want)->name, block);
    if (t->ne[0] % quant_type_info((uint32_t)fb)->block_elems)
        fb = GUILD_TYPE_F16;
    t->type = (guild_type_t)fb;
    return 0;
}

uint32_t mkmodel_recipe_file_type(const mkmodel_config_t *cfg)
{
    if (cfg->recipe == MKMODEL_RECIPE_Q4_K_M)
        return 15; /* LLAMA_FTYPE_MOSTLY_Q4_K_M */
    if (cfg->recipe == MKMODEL_RECIPE_MXFP4_MOE)
        return 38; /* LLAMA_FTYPE_MOSTLY_MXFP4_MOE */
    switch (cfg->type) {
    case GUILD_TYPE_F32: return 0;
    case GUILD_TYPE_F16: return 1;
    case GUILD_TYPE_Q4_0: return 2;
    case GUILD_TYPE_Q4_1: return 3;
    case GUILD_TYPE_Q8_0: return 7;
    case GUILD_TYPE_Q5_0: return 8;
    case GUILD_TYPE_Q5_1: return 9;
    case GUILD_TYPE_Q2_K: return 10;
    case GUILD_TYPE_Q3_K: return 11; /* Q3_K_S: all Q3_K */
    case GUILD_TYPE_Q4_K: return 14; /* Q4_K_S */
    case GUILD_TYPE_Q5_K: return 16; /* Q5_K_S */
    case GUILD_TYPE_Q6_K: return 18;
    case GUILD_TYPE_IQ2_XXS: return 19;
    case GUILD_TYPE_IQ2_XS: return 20;
    case GUILD_TYPE_IQ3_XXS: return 23;
    case GUILD_TYPE_IQ1_S: return 24;
    case GUILD_TYPE_IQ4_NL: return 25;
    case GUILD_TYPE_IQ3_S: return 26;
    case GUILD_TYPE_IQ2_S: return 28;
    case GUILD_TYPE_IQ4_XS: return 30;
    case GUILD_TYPE_IQ1_M: return 31;
    case GUILD_TYPE_BF16: return 32;
    case GUILD_TYPE_MXFP4: return 38;
    default: return 1024; /* LLAMA_FTYPE_GUESSED */
    }
}
