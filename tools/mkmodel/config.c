#include "tools/mkmodel/config.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/model/config.h"
#include "core/quant/types.h"
#include "tools/mkmodel/plan.h"

/* One row per preset; the real models' numbers come from their Hugging Face config.json files. */
typedef struct preset_row {
    const char *name, *description;
    mkmodel_arch_t arch;
    const char *gguf_name;
    int64_t n_layer, n_embd, n_head, n_head_kv, head_dim, n_expert, n_expert_used, n_ff_exp, n_ff_shexp, n_ff,
        n_vocab, n_ctx;
    double rope_freq_base, rms_eps;
    mkmodel_recipe_t recipe;
    /* dense-first and grouped-router architectures (0 elsewhere) */
    int64_t n_dense_lead, n_nextn;
    double weights_scale;
    bool qk_norm;
} preset_row_t;

/* What the deepseek2 presets have beyond preset_row_t: MLA sizes, rope dims, gating, yarn, groups. */
typedef struct mla_preset_row {
    const char *name;
    int64_t n_lora_q, n_lora_kv, head_dim_v, n_rot;
    bool gating_softmax;
    double yarn_factor, yarn_mscale_all;
    int64_t yarn_orig_ctx, n_expert_groups, n_group_used;
} mla_preset_row_t;

static const preset_row_t preset_rows[] = {
    {"demo", "qwen3moe, 4 layers, 256 wide, 4/2 heads of 64, 128 experts of 256, top-8, vocab 4096",
     MKMODEL_ARCH_QWEN3MOE, "Guild demo (random weights)", 4, 256, 4, 2, 64, 128, 8, 256, 0, 768, 4096, 4096, 1e6,
     1e-6, MKMODEL_RECIPE_Q4_K_M, 0, 0, 0, false},
    {"qwen3-30b-a3b", "qwen3moe, 48 layers, 2048 wide, 32/4 heads of 128, 128 experts of 768, top-8",
     MKMODEL_ARCH_QWEN3MOE, "Qwen3-30B-A3B (random weights)", 48, 2048, 32, 4, 128, 128, 8, 768, 0, 6144, 151936,
     40960, 1e6, 1e-6, MKMODEL_RECIPE_Q4_K_M, 0, 0, 0, false},
    {"qwen3-235b-a22b", "qwen3moe, 94 layers, 4096 wide, 64/4 heads of 128, 128 experts of 1536, top-8",
     MKMODEL_ARCH_QWEN3MOE, "Qwen3-235B-A22B (random weights)", 94, 4096, 64, 4, 128, 128, 8, 1536, 0, 12288,
     151936, 40960, 1e6, 1e-6, MKMODEL_RECIPE_Q4_K_M, 0, 0, 0, false},
    {"qwen1.5-moe-a2.7b", "qwen2moe, 24 layers, 2048 wide, 16 heads of 128, 60 experts of 1408, top-4, shared 5632",
     MKMODEL_ARCH_QWEN2MOE, "Qwen1.5-MoE-A2.7B (random weights)", 24, 2048, 16, 16, 128, 60, 4, 1408, 5632, 5632,
     151936, 8192, 1e6, 1e-6, MKMODEL_RECIPE_Q4_K_M, 0, 0, 0, false},
    {"mixtral-8x7b", "llama, 32 layers, 4096 wide, 32/8 heads of 128, 8 experts of 14336, top-2",
     MKMODEL_ARCH_MIXTRAL, "Mixtral-8x7B (random weights)", 32, 4096, 32, 8, 128, 8, 2, 14336, 0, 14336, 32000,
     32768, 1e6, 1e-5, MKMODEL_RECIPE_Q4_K_M, 0, 0, 0, false},
    {"olmoe-1b-7b", "olmoe, 16 layers, 2048 wide, 16 heads of 128, 64 experts of 1024, top-8",
     MKMODEL_ARCH_OLMOE, "OLMoE-1B-7B (random weights)", 16, 2048, 16, 16, 128, 64, 8, 1024, 0, 1024, 50304, 4096,
     1e4, 1e-5, MKMODEL_RECIPE_Q4_K_M, 0, 0, 0, false},
    /* gpt-oss: yarn 32 over 4096 positions, a window of 128 on the even layers (the arch's defaults), experts in
     * MXFP4 as OpenAI publishes them */
    {"gpt-oss-20b", "gpt-oss, 24 layers, 2880 wide, 64/8 heads of 64, 32 experts of 2880, top-4, MXFP4 experts",
     MKMODEL_ARCH_GPT_OSS, "gpt-oss-20b (random weights)", 24, 2880, 64, 8, 64, 32, 4, 2880, 0, 2880, 201088,
     131072, 150000, 1e-5, MKMODEL_RECIPE_MXFP4_MOE, 0, 0, 0, false},
    {"gpt-oss-120b", "gpt-oss, 36 layers, 2880 wide, 64/8 heads of 64, 128 experts of 2880, top-4, MXFP4 experts",
     MKMODEL_ARCH_GPT_OSS, "gpt-oss-120b (random weights)", 36, 2880, 64, 8, 64, 128, 4, 2880, 0, 2880, 201088,
     131072, 150000, 1e-5, MKMODEL_RECIPE_MXFP4_MOE, 0, 0, 0, false},
    /* GLM-4.5-Air and GLM-4.5: half-rotary GQA with q/k/v biases, 1 (3) dense layers of 10944 (12288) first,
     * sigmoid routing with the score bias, one shared expert, weights renormalised and scaled by 1 (2.5), q/k
     * norms in GLM-4.5 only, one MTP layer after the 46 (92) */
    {"glm-4.5-air", "glm4moe, 46+1 MTP layers, 4096 wide, 96/8 heads of 128, 128 experts of 1408, top-8, shared 1408",
     MKMODEL_ARCH_GLM4MOE, "GLM-4.5-Air (random weights)", 46, 4096, 96, 8, 128, 128, 8, 1408, 1408, 10944, 151552,
     131072, 1e6, 1e-5, MKMODEL_RECIPE_Q4_K_M, 1, 1, 1.0, false},
    {"glm-4.5", "glm4moe, 92+1 MTP layers, 5120 wide, 96/8 heads of 128, 160 experts of 1536, top-8, shared 1536",
     MKMODEL_ARCH_GLM4MOE, "GLM-4.5 (random weights)", 92, 5120, 96, 8, 128, 160, 8, 1536, 1536, 12288, 151552,
     131072, 1e6, 1e-5, MKMODEL_RECIPE_Q4_K_M, 3, 1, 2.5, true},
    /* deepseek2 as convert_hf_to_gguf writes it (attn_k_b/attn_v_b, no MTP layer: the converter skips it; head
     * counts of the latent's MQA view are 1): keys of 128 + 64 rotated, values of 128, a latent of 512, yarn over
     * 4096 positions. V2-Lite: no q LoRA, softmax gating, 2 shared experts; V3: q LoRA 1536, sigmoid gating with
     * the score bias, 8 groups of which 4 compete, weights renormalised and scaled by 2.5; Kimi-K2: V3's shape
     * with 64 heads, 384 experts, one group, scale 2.827, rope base 50000 */
    {"deepseek-v2-lite", "deepseek2, 27 layers, 2048 wide, 16 MLA heads, 64 experts of 1408, top-6, shared 2816",
     MKMODEL_ARCH_DEEPSEEK2, "DeepSeek-V2-Lite (random weights)", 27, 2048, 16, 1, 192, 64, 6, 1408, 2816, 10944,
     102400, 163840, 1e4, 1e-6, MKMODEL_RECIPE_Q4_K_M, 1, 0, 1.0, false},
    {"deepseek-v3", "deepseek2, 61 layers, 7168 wide, 128 MLA heads, 256 experts of 2048, top-8, shared 2048",
     MKMODEL_ARCH_DEEPSEEK2, "DeepSeek-V3 (random weights)", 61, 7168, 128, 1, 192, 256, 8, 2048, 2048, 18432,
     129280, 163840, 1e4, 1e-6, MKMODEL_RECIPE_Q4_K_M, 3, 0, 2.5, false},
    {"kimi-k2", "deepseek2, 61 layers, 7168 wide, 64 MLA heads, 384 experts of 2048, top-8, shared 2048",
     MKMODEL_ARCH_DEEPSEEK2, "Kimi-K2 (random weights)", 61, 7168, 64, 1, 192, 384, 8, 2048, 2048, 18432, 163840,
     131072, 5e4, 1e-6, MKMODEL_RECIPE_Q4_K_M, 1, 0, 2.827, false},
    /* Qwen3-Next: 3 gated delta net layers (16 key heads and 32 value heads of 128) to 1 gated full-attention
     * layer (16/2 heads of 256, a quarter of each rotated), 512 experts top-10 with a gated shared expert */
    {"qwen3-next-80b-a3b", "qwen3next, 48 layers, 2048 wide, 16/2 heads of 256 every 4th layer, gated delta net "
     "16/32 heads of 128, 512 experts of 512, top-10, shared 512", MKMODEL_ARCH_QWEN3NEXT,
     "Qwen3-Next-80B-A3B (random weights)", 48, 2048, 16, 2, 256, 512, 10, 512, 512, 5120, 151936, 262144, 1e7,
     1e-6, MKMODEL_RECIPE_Q4_K_M, 0, 0, 0, false}, /* its linear attention: the derived defaults */
    /* Qwen3.5-35B-A3B (Qwen3_5MoeTextModel's text tower): Qwen3-Next's layer pattern and linear attention (the
     * derived defaults: 16 key and 32 value heads of 128), 256 experts top-8 with a gated shared expert, the
     * 248320-token vocabulary, the M-RoPE sections; no MTP layer (--nextn 1 adds one) */
    {"qwen3.5-35b-a3b", "qwen35moe, 40 layers, 2048 wide, 16/2 heads of 256 every 4th layer, gated delta net "
     "16/32 heads of 128, 256 experts of 512, top-8, shared 512", MKMODEL_ARCH_QWEN35MOE,
     "Qwen3.5-35B-A3B (random weights)", 40, 2048, 16, 2, 256, 256, 8, 512, 512, 512, 248320, 262144, 1e7, 1e-6,
     MKMODEL_RECIPE_Q4_K_M, 0, 0, 0, false},
};

static const mla_preset_row_t mla_preset_rows[] = {
    {"deepseek-v2-lite", 0, 512, 128, 64, true, 40, 0.707, 4096, 0, 0},
    {"deepseek-v3", 1536, 512, 128, 64, false, 40, 1.0, 4096, 8, 4},
    {"kimi-k2", 1536, 512, 128, 64, false, 32, 1.0, 4096, 0, 0},
};

#define N_PRESETS (sizeof preset_rows / sizeof *preset_rows)

/* The CLI spelling of each architecture, the core's row of it, and what its converter writes beyond the row's
 * parts: expert_feed_forward_length, the sliding window and yarn scaling when the flags do not say, the share of
 * each head it rotates (rope.dimension_count = head_dim / rot_div). */
static const struct {
    const char *cli;
    model_arch_t arch;
    bool expert_ff_key;
    int64_t n_swa;
    double yarn_factor;
    int64_t yarn_orig_ctx;
    int rot_div;
} arch_rows[MKMODEL_ARCH_COUNT] = {
    [MKMODEL_ARCH_QWEN3MOE] = {"qwen3moe", MODEL_ARCH_QWEN3MOE, true, 0, 0, 0, 1},
    [MKMODEL_ARCH_QWEN2MOE] = {"qwen2moe", MODEL_ARCH_QWEN2MOE, true, 0, 0, 0, 1},
    [MKMODEL_ARCH_MIXTRAL] = {"mixtral", MODEL_ARCH_LLAMA, false, 0, 0, 0, 1},
    [MKMODEL_ARCH_OLMOE] = {"olmoe", MODEL_ARCH_OLMOE, false, 0, 0, 0, 1},
    /* convert_hf_to_gguf's GptOssModel: always yarn (gpt-oss's config: factor 32 over 4096 positions) */
    [MKMODEL_ARCH_GPT_OSS] = {"gpt-oss", MODEL_ARCH_GPT_OSS, true, 128, 32.0, 4096, 1},
    /* Glm4MoeModel: partial_rotary_factor 0.5 */
    [MKMODEL_ARCH_GLM4MOE] = {"glm4moe", MODEL_ARCH_GLM4MOE, true, 0, 0, 0, 2},
    /* DeepseekV2Model: qk_rope_head_dim of qk_nope + qk_rope (64 of 192) */
    [MKMODEL_ARCH_DEEPSEEK2] = {"deepseek2", MODEL_ARCH_DEEPSEEK2, true, 0, 0, 0, 3},
    /* Qwen3NextModel, Qwen3_5MoeModel: partial_rotary_factor 0.25 */
    [MKMODEL_ARCH_QWEN3NEXT] = {"qwen3next", MODEL_ARCH_QWEN3NEXT, true, 0, 0, 0, 4},
    [MKMODEL_ARCH_QWEN35MOE] = {"qwen35moe", MODEL_ARCH_QWEN35MOE, true, 0, 0, 0, 4},
};

const model_arch_info_t *mkmodel_arch_info(mkmodel_arch_t arch) { return model_arch_info(arch_rows[arch].arch); }
bool mkmodel_arch_expert_ff_key(mkmodel_arch_t arch) { return arch_rows[arch].expert_ff_key; }

void mkmodel_arch_defaults(mkmodel_config_t *cfg, bool swa_given, bool yarn_factor_given, bool yarn_ctx_given)
{
    const bool sliding = mkmodel_arch_info(cfg->arch)->attn.opts & MODEL_GQA_SLIDING;
    if (!swa_given)
        cfg->n_swa = sliding ? arch_rows[cfg->arch].n_swa : 0;
    if (!yarn_factor_given)
        cfg->yarn_factor = arch_rows[cfg->arch].yarn_factor;
    if (!yarn_ctx_given)
        cfg->yarn_orig_ctx = arch_rows[cfg->arch].yarn_orig_ctx ? arch_rows[cfg->arch].yarn_orig_ctx : 4096;
}

void mkmodel_arch_derive(mkmodel_config_t *cfg)
{
    const bool hybrid = mkmodel_arch_info(cfg->arch)->layout == MODEL_LAYOUT_HYBRID;
    if (!hybrid)
        return;
    if (cfg->full_attn_interval == 0)
        cfg->full_attn_interval = 4;
    if (cfg->ssm_conv == 0)
        cfg->ssm_conv = 4;
    if (cfg->ssm_state == 0)
        cfg->ssm_state = cfg->head_dim / 2 > 0 ? cfg->head_dim / 2 : 1;
    if (cfg->ssm_groups == 0)
        cfg->ssm_groups = cfg->n_head;
    if (cfg->ssm_heads == 0)
        cfg->ssm_heads = 2 * cfg->ssm_groups;
}

const char *mkmodel_arch_gguf_name(mkmodel_arch_t arch) { return mkmodel_arch_info(arch)->name; }
const char *mkmodel_arch_cli_name(mkmodel_arch_t arch) { return arch_rows[arch].cli; }

bool mkmodel_arch_has_shexp(mkmodel_arch_t arch)
{
    return mkmodel_arch_info(arch)->ffn.opts & (MODEL_FFN_SHEXP_GATED | MODEL_FFN_SHEXP);
}

int64_t mkmodel_arch_default_rot(mkmodel_arch_t arch, int64_t head_dim)
{
    if (mkmodel_arch_info(arch)->attn.kind == MODEL_ATTN_MLA) {
        /* the share rounded up to whole blocks of 32, so that the unrotated part (attn_k_b's rows) stays whole
         * blocks of the 32-element types where the key is (192: 64) */
        const int64_t rot = (head_dim / arch_rows[arch].rot_div + 31) / 32 * 32;
        return rot < head_dim ? rot : head_dim / 2 / 2 * 2;
    }
    return head_dim / arch_rows[arch].rot_div / 2 * 2;
}

const model_part_t *mkmodel_router_part(const mkmodel_config_t *cfg)
{
    const model_arch_info_t *info = mkmodel_arch_info(cfg->arch);
    return info->gating_picks_router && cfg->gating_softmax ? &info->router_softmax : &info->router;
}

void mkmodel_mla_defaults(mkmodel_config_t *cfg, const bool given[3])
{
    const bool mla = mkmodel_arch_info(cfg->arch)->attn.kind == MODEL_ATTN_MLA;
    const int64_t rot = cfg->n_rot ? cfg->n_rot : mkmodel_arch_default_rot(cfg->arch, cfg->head_dim);
    if (!given[0])
        cfg->n_lora_q = mla ? cfg->n_embd / 2 : 0;
    if (!given[1])
        cfg->n_lora_kv = mla ? 2 * cfg->head_dim : 0;
    if (!given[2])
        cfg->head_dim_v = mla ? cfg->head_dim - rot : 0;
}

int mkmodel_arch_from_name(const char *name)
{
    for (int a = 0; a < MKMODEL_ARCH_COUNT; a++)
        if (!strcasecmp(name, arch_rows[a].cli))
            return a;
    return -1;
}

int mkmodel_preset_count(void) { return (int)N_PRESETS; }
const char *mkmodel_preset_name(int i) { return preset_rows[i].name; }
const char *mkmodel_preset_description(int i) { return preset_rows[i].description; }

int mkmodel_preset_apply(mkmodel_config_t *cfg, const char *name, guild_err_t *err)
{
    const preset_row_t *p = NULL;
    for (size_t i = 0; i < N_PRESETS; i++)
        if (!strcasecmp(preset_rows[i].name, name))
            p = &preset_rows[i];
    if (!p) {
        char list[512] = "";
        for (size_t i = 0; i < N_PRESETS; i++) {
            strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
            strncat(list, preset_rows[i].name, sizeof list - strlen(list) - 1);
        }
        return guild_err_set(err, "--shape %s: unknown shape (known: %s)", name, list);
    }
    cfg->arch = p->arch;
    snprintf(cfg->name, sizeof cfg->name, "%s", p->gguf_name);
    cfg->n_layer = p->n_layer;
    cfg->n_embd = p->n_embd;
    cfg->n_head = p->n_head;
    cfg->n_head_kv = p->n_head_kv;
    cfg->head_dim = p->head_dim;
    cfg->n_expert = p->n_expert;
    cfg->n_expert_used = p->n_expert_used;
    cfg->n_ff_exp = p->n_ff_exp;
    cfg->n_ff_shexp = p->n_ff_shexp;
    cfg->n_ff = p->n_ff;
    cfg->n_vocab = p->n_vocab;
    cfg->vocab_from[0] = '\0';
    cfg->n_ctx = p->n_ctx;
    cfg->rope_freq_base = p->rope_freq_base;
    cfg->rms_eps = p->rms_eps;
    cfg->seed = 0;
    cfg->type = GUILD_TYPE_Q4_K;
    cfg->recipe = p->recipe;
    cfg->full_attn_interval = cfg->ssm_conv = cfg->ssm_state = cfg->ssm_groups = cfg->ssm_heads = 0;
    mkmodel_arch_defaults(cfg, false, false, false);
    cfg->router_type = GUILD_TYPE_F32;
    cfg->tie_embeddings = false;
    cfg->n_dense_lead = p->n_dense_lead;
    cfg->n_nextn = p->n_nextn;
    cfg->n_rot = 0;
    cfg->n_expert_groups = 0;
    cfg->n_group_used = 0;
    cfg->weights_scale = p->weights_scale;
    cfg->qk_norm = p->qk_norm;
    cfg->n_lora_q = cfg->n_lora_kv = cfg->head_dim_v = 0;
    cfg->gating_softmax = false;
    cfg->yarn_mscale_all = 0;
    for (size_t i = 0; i < sizeof mla_preset_rows / sizeof *mla_preset_rows; i++) {
        const mla_preset_row_t *m = &mla_preset_rows[i];
        if (strcasecmp(m->name, p->name))
            continue;
        cfg->n_lora_q = m->n_lora_q;
        cfg->n_lora_kv = m->n_lora_kv;
        cfg->head_dim_v = m->head_dim_v;
        cfg->n_rot = m->n_rot;
        cfg->gating_softmax = m->gating_softmax;
        cfg->yarn_factor = m->yarn_factor;
        cfg->yarn_mscale_all = m->yarn_mscale_all;
        cfg->yarn_orig_ctx = m->yarn_orig_ctx;
        cfg->n_expert_groups = m->n_expert_groups;
        cfg->n_group_used = m->n_group_used;
    }
    return 0;
}

/* Largest value any dimension may take: keeps every product of two or three dimensions below 2^63. */
#define DIM_MAX ((int64_t)1 << 20)

static int check_dim(const char *flag, int64_t v, int64_t lo, guild_err_t *err)
{
    if (v < lo || v > DIM_MAX)
        return guild_err_set(err, "%s %lld: must be between %lld and %lld", flag, (long long)v, (long long)lo,
                             (long long)DIM_MAX);
    return 0;
}

static int check_weight_type(const char *flag, int type, guild_err_t *err)
{
    const quant_type_info_t *info = quant_type_info((uint32_t)type);
    if (!info)
        return guild_err_set(err, "%s: unknown type id %d", flag, type);
    if (!info->computable)
        return guild_err_set(err, "%s %s: not a weight type Guild can compute with", flag, info->name);
    return 0;
}

int mkmodel_config_validate(const mkmodel_config_t *cfg, guild_err_t *err)
{
    mkmodel_config_t derived = *cfg;
    mkmodel_arch_derive(&derived);
    const mkmodel_config_t *c = &derived;
    if (check_dim("--layers", c->n_layer, 1, err) || check_dim("--embd", c->n_embd, 1, err) ||
        check_dim("--heads", c->n_head, 1, err) || check_dim("--kv-heads", c->n_head_kv, 1, err) ||
        check_dim("--head-dim", c->head_dim, 2, err) || check_dim("--experts", c->n_expert, 1, err) ||
        check_dim("--experts-used", c->n_expert_used, 1, err) || check_dim("--expert-ff", c->n_ff_exp, 1, err) ||
        check_dim("--shared-ff", c->n_ff_shexp, 0, err) || check_dim("--ff", c->n_ff, 1, err) ||
        check_dim("--ctx", c->n_ctx, 1, err))
        return -1;
    if (c->n_layer > 4096)
        return guild_err_set(err, "--layers %lld: at most 4096", (long long)c->n_layer);
    if (c->n_expert > 65536)
        return guild_err_set(err, "--experts %lld: at most 65536", (long long)c->n_expert);
    if (c->n_vocab < 1 || c->n_vocab > INT32_MAX)
        return guild_err_set(err, "--vocab %lld: must be between 1 and %d", (long long)c->n_vocab, INT32_MAX);
    const bool mla = mkmodel_arch_info(c->arch)->attn.kind == MODEL_ATTN_MLA;
    if (!mla && c->n_head % c->n_head_kv)
        return guild_err_set(err, "--heads %lld is not a multiple of --kv-heads %lld (grouped-query attention "
                                  "shares each key/value head among a whole number of query heads)",
                             (long long)c->n_head, (long long)c->n_head_kv);
    if (c->head_dim % 2)
        return guild_err_set(err, "--head-dim %lld: must be even (RoPE rotates pairs of elements)",
                             (long long)c->head_dim);
    if (c->n_expert_used > c->n_expert)
        return guild_err_set(err, "--experts-used %lld is more than --experts %lld", (long long)c->n_expert_used,
                             (long long)c->n_expert);
    const model_arch_info_t *info = mkmodel_arch_info(c->arch);
    const char *arch = mkmodel_arch_cli_name(c->arch);
    model_config_t parts; /* the row's parts, as the core would load them, checked against what mkmodel writes */
    memset(&parts, 0, sizeof parts);
    parts.arch = arch_rows[c->arch].arch;
    parts.n_layer = 2;
    parts.layout = info->layout;
    parts.full_attn_interval = 2; /* a hybrid's two attention kinds */
    parts.attn = info->attn;
    parts.attn_linear = info->attn_linear;
    parts.router = *mkmodel_router_part(c);
    parts.ffn = info->ffn;
    parts.ffn_lead = info->ffn_lead;
    parts.n_layer_dense_lead = 1; /* layer 0 of each kind, layer 1 of the other */
    parts.full_attn_interval = 2;
    model_part_support_t support;
    mkmodel_plan_support(&support);
    if (model_parts_check(&parts, &support, "guild-mkmodel", err) < 0)
        return -1;
    const bool dense_first = info->layout == MODEL_LAYOUT_DENSE_FIRST;
    if (!dense_first && c->n_dense_lead)
        return guild_err_set(err, "--dense-layers %lld: %s has no dense layers", (long long)c->n_dense_lead, arch);
    if (c->n_dense_lead < 0 || c->n_dense_lead >= c->n_layer)
        return guild_err_set(err, "--dense-layers %lld: must be between 0 and --layers - 1 (%lld)",
                             (long long)c->n_dense_lead, (long long)c->n_layer - 1);
    if (c->gdn_fused && c->arch != MKMODEL_ARCH_QWEN3NEXT)
        return guild_err_set(err, "--gdn-fused: only qwen3next files had the fused ssm_in (%s given)", arch);
    if (!info->nextn && c->n_nextn)
        return guild_err_set(err, "--nextn %lld: %s has no MTP layers", (long long)c->n_nextn, arch);
    if (c->n_nextn < 0 || c->n_nextn > 16)
        return guild_err_set(err, "--nextn %lld: must be between 0 and 16", (long long)c->n_nextn);
    const uint32_t attn_opts = info->attn.opts | info->attn.maybe;
    if (mla) {
        const int64_t rot = c->n_rot ? c->n_rot : mkmodel_arch_default_rot(c->arch, c->head_dim);
        if (rot < 2 || rot % 2 || rot >= c->head_dim)
            return guild_err_set(err, "--rope-dim %lld: %s rotates an even part of each key, 2 .. --head-dim %lld "
                                      "less at least 1", (long long)rot, arch, (long long)c->head_dim);
        if (check_dim("--kv-lora", c->n_lora_kv, 1, err) || check_dim("--q-lora", c->n_lora_q, 0, err) ||
            check_dim("--v-head-dim", c->head_dim_v, 1, err))
            return -1;
        if (!(c->yarn_mscale_all >= 0 && c->yarn_mscale_all <= 100))
            return guild_err_set(err, "--yarn-mscale %g: must be in [0, 100]", c->yarn_mscale_all);
    } else if (c->n_lora_q || c->n_lora_kv || c->head_dim_v) {
        return guild_err_set(err, "--q-lora/--kv-lora/--v-head-dim: %s has no latent attention", arch);
    }
    if (c->gating_softmax && !info->gating_picks_router)
        return guild_err_set(err, "--gating softmax: %s's router is fixed", arch);
    if (!mla && c->n_rot && (c->n_rot < 2 || c->n_rot % 2 || c->n_rot > c->head_dim))
        return guild_err_set(err, "--rope-dim %lld: must be even, between 2 and --head-dim %lld", (long long)c->n_rot,
                             (long long)c->head_dim);
    if (!mla && c->n_rot && c->n_rot != c->head_dim && !(attn_opts & MODEL_GQA_ROPE_PARTIAL))
        return guild_err_set(err, "--rope-dim %lld: %s rotates whole heads (--head-dim %lld)", (long long)c->n_rot,
                             arch, (long long)c->head_dim);
    if (c->qk_norm && !(info->attn.maybe & (MODEL_GQA_QK_NORM_HEAD | MODEL_GQA_QK_NORM_FULL)))
        return guild_err_set(err, "--qk-norm: %s's q/k norms are %s", arch,
                             info->attn.opts & (MODEL_GQA_QK_NORM_HEAD | MODEL_GQA_QK_NORM_FULL) ? "always there"
                                                                                               : "not a thing");
    /* groups where the file can say so: the sigmoid router, and the softmax one of the rows that pick their router
     * by the gating function (DeepSeek-V2's group-limited softmax) */
    const bool grouped = mkmodel_router_part(c)->kind == MODEL_ROUTER_SIGMOID_GROUPED || info->gating_picks_router;
    if (!grouped && (c->n_expert_groups || c->n_group_used))
        return guild_err_set(err, "--expert-groups/--groups-used: %s's router has no expert groups", arch);
    if (c->n_expert_groups < 0 || c->n_expert_groups > c->n_expert || c->n_group_used < 0 ||
        (c->n_expert_groups > 1 &&
         (c->n_expert % c->n_expert_groups || c->n_expert / c->n_expert_groups < 2 || c->n_group_used < 1 ||
          c->n_group_used > c->n_expert_groups ||
          c->n_group_used * (c->n_expert / c->n_expert_groups) < c->n_expert_used)))
        return guild_err_set(err, "--expert-groups %lld --groups-used %lld: the groups must split --experts %lld "
                                  "equally into groups of at least 2, and the groups used (1..groups) hold at least "
                                  "--experts-used %lld",
                             (long long)c->n_expert_groups, (long long)c->n_group_used, (long long)c->n_expert,
                             (long long)c->n_expert_used);
    if (!(c->weights_scale >= 0 && c->weights_scale <= 1e6))
        return guild_err_set(err, "--weights-scale %g: must be in [0, 1e6]", c->weights_scale);
    if (info->layout == MODEL_LAYOUT_HYBRID) {
        if (check_dim("--full-attn-interval", c->full_attn_interval, 1, err) ||
            check_dim("--ssm-conv", c->ssm_conv, 1, err) || check_dim("--ssm-state", c->ssm_state, 1, err) ||
            check_dim("--ssm-groups", c->ssm_groups, 1, err) || check_dim("--ssm-heads", c->ssm_heads, 1, err))
            return -1;
        if (c->ssm_conv > 64)
            return guild_err_set(err, "--ssm-conv %lld: at most 64", (long long)c->ssm_conv);
        if (c->ssm_heads % c->ssm_groups)
            return guild_err_set(err, "--ssm-heads %lld is not a multiple of --ssm-groups %lld (each key head of "
                                      "the gated delta net serves a whole number of value heads)",
                                 (long long)c->ssm_heads, (long long)c->ssm_groups);
        if (check_dim("--ssm-heads x --ssm-state", c->ssm_heads * c->ssm_state, 1, err))
            return -1;
    }
    if (mkmodel_arch_has_shexp(c->arch) && c->n_ff_shexp < 1)
        return guild_err_set(err, "%s needs a shared expert: --shared-ff must be at least 1", arch);
    if ((info->ffn.opts & MODEL_FFN_SHEXP) && c->n_ff_shexp % c->n_ff_exp)
        return guild_err_set(err, "--shared-ff %lld: %s's shared expert is a whole number of routed experts wide "
                                  "(a multiple of --expert-ff %lld)",
                             (long long)c->n_ff_shexp, arch, (long long)c->n_ff_exp);
    if (!mkmodel_arch_has_shexp(c->arch) && c->n_ff_shexp != 0)
        return guild_err_set(err, "--shared-ff %lld: %s has no shared expert", (long long)c->n_ff_shexp, arch);
    if (info->expert_ff_default == MODEL_EXPERT_FF_IS_FF && c->n_ff != c->n_ff_exp)
        return guild_err_set(err, "%s: --ff %lld must equal --expert-ff %lld (%s's experts take their size from "
                                  "%s.feed_forward_length)",
                             arch, (long long)c->n_ff, (long long)c->n_ff_exp, info->name, info->name);
    if (!(c->rope_freq_base > 0))
        return guild_err_set(err, "--rope-base %g: must be positive", c->rope_freq_base);
    if (c->yarn_factor != 0 && !(c->yarn_factor >= 1 && c->yarn_factor <= 1024))
        return guild_err_set(err, "--yarn-factor %g: must be 0 (no scaling) or in [1, 1024]", c->yarn_factor);
    if (c->yarn_factor != 0 && check_dim("--yarn-orig-ctx", c->yarn_orig_ctx, 1, err))
        return -1;
    const bool sliding = info->attn.opts & MODEL_GQA_SLIDING;
    if (sliding && check_dim("--sliding-window", c->n_swa, 1, err))
        return -1;
    if (!sliding && c->n_swa != 0)
        return guild_err_set(err, "--sliding-window %lld: %s has no sliding-window attention", (long long)c->n_swa,
                             arch);
    if (!(c->rms_eps > 0 && c->rms_eps < 1))
        return guild_err_set(err, "--rms-eps %g: must be in (0, 1)", c->rms_eps);
    if (c->threads < 1 || c->threads > 1024)
        return guild_err_set(err, "--threads %d: must be between 1 and 1024", c->threads);
    if (c->recipe == MKMODEL_RECIPE_NONE && check_weight_type("--type", c->type, err))
        return -1;
    if (check_weight_type("--router-type", c->router_type, err))
        return -1;
    if (!c->out_path[0])
        return guild_err_set(err, "no output file: give -o OUT.gguf");
    return 0;
}
