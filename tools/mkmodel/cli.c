#include "tools/mkmodel/cli.h"

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "core/quant/types.h"
#include "core/util/log.h"
#include "tools/mkmodel/pool.h"
#include "tools/mkmodel/vocab.h"

void mkmodel_cli_help(FILE *out)
{
    fprintf(out,
            "usage: guild-mkmodel [--shape NAME] [flags] -o OUT.gguf\n"
            "\n"
            "Writes a synthetic MoE model in GGUF (random weights of realistic scale, properly quantized) that Guild\n"
            "and any GGUF reader can load. Flags override the preset's values, whatever their order.\n"
            "\n"
            "shape:\n"
            "  --shape NAME        preset (default demo):\n");
    for (int i = 0; i < mkmodel_preset_count(); i++)
        fprintf(out, "    %-18s %s\n", mkmodel_preset_name(i), mkmodel_preset_description(i));
    fprintf(out,
            "  --arch A            qwen3moe | qwen2moe | mixtral (GGUF arch llama with experts) | olmoe | gpt-oss |\n"
            "                      glm4moe | deepseek2 |\n"
            "                      qwen3next | qwen35moe (hybrids: gated delta net layers, gated full attention)\n"
            "  --layers N          blocks\n"
            "  --embd N            hidden size\n"
            "  --heads N           query heads\n"
            "  --kv-heads N        key/value heads (must divide --heads)\n"
            "  --head-dim N        elements per head (even; deepseek2: a key, its unrotated part and --rope-dim)\n"
            "  --experts N         routed experts per layer\n"
            "  --experts-used N    experts per token (top-k)\n"
            "  --expert-ff N       hidden size of a routed expert\n"
            "  --shared-ff N       hidden size of the shared expert (qwen2moe: default --ff; glm4moe: a multiple\n"
            "                      of --expert-ff, default --expert-ff; ignored with a warning elsewhere)\n"
            "  --ff N              feed_forward_length (dense FFN size, metadata; mixtral and olmoe: must equal\n"
            "                      --expert-ff, the default, as llama.cpp reads their expert size from it)\n"
            "  --ctx N             context_length\n"
            "  --rope-dim N        rope.dimension_count (default --head-dim; glm4moe half of it, deepseek2 a third)\n"
            "  --dense-layers N    glm4moe, deepseek2: leading dense FFN layers of --ff (default 1)\n"
            "  --nextn N           glm4moe, deepseek2: MTP layers after --layers (nextn_predict_layers; default 0,\n"
            "                      the glm presets 1; deepseek2's converter leaves them out)\n"
            "  --expert-groups N   glm4moe, deepseek2: expert_group_count (default none)\n"
            "  --groups-used N     glm4moe, deepseek2: expert_group_used_count\n"
            "  --weights-scale F   glm4moe, deepseek2: expert_weights_scale (default 1)\n"
            "  --qk-norm           glm4moe: per-head q/k norms (GLM-4.5 has them, GLM-4.5-Air not)\n"
            "  --gdn-fused         qwen3next: the older files' single ssm_in (per key head its q, k, v and z rows)\n"
            "                      instead of attn_qkv and attn_gate, holding the same model as without it\n"
            "  --q-lora N          deepseek2: q_lora_rank, attn_q_a/attn_q_b (0: attn_q; default --embd / 2)\n"
            "  --kv-lora N         deepseek2: kv_lora_rank, the latent each position caches (default 2 x --head-dim)\n"
            "  --v-head-dim N      deepseek2: a head's value (default --head-dim less --rope-dim)\n"
            "  --gating G          deepseek2: sigmoid (V3, Kimi-K2: score bias, groups, renormalised) | softmax\n"
            "                      (V2)\n"
            "  --yarn-mscale F     deepseek2 with yarn: mscale_all_dim (yarn_log_multiplier 0.1 F; default 1)\n"
            "  --rope-base F       rope.freq_base\n"
            "  --yarn-factor F     rope.scaling.type yarn with this factor (0: none; gpt-oss default 32, as its\n"
            "                      converter always writes)\n"
            "  --yarn-orig-ctx N   rope.scaling.original_context_length (default 4096)\n"
            "  --sliding-window N  attention.sliding_window (gpt-oss: default 128; llama.cpp slides the even layers)\n"
            "  --rms-eps F         attention.layer_norm_rms_epsilon\n"
            "  --rope-dim N        rope.dimension_count (default the head; qwen3next/qwen35moe a quarter of it)\n"
            "  --name S            general.name\n"
            "  --tie-embeddings    no output.weight (the LM head is token_embd)\n"
            "\n"
            "hybrids (qwen3next, qwen35moe; defaults in Qwen3-Next's proportions):\n"
            "  --full-attn-interval N  full attention on every N-th layer, gated delta net on the others (4)\n"
            "  --ssm-conv N        taps of the causal convolution (4)\n"
            "  --ssm-state N       size of a linear-attention head (--head-dim / 2)\n"
            "  --ssm-groups N      linear-attention key heads (--heads)\n"
            "  --ssm-heads N       linear-attention value heads, a multiple of --ssm-groups (2 x --ssm-groups)\n"
            "\n"
            "vocabulary:\n"
            "  --vocab N           built-in byte-level BPE vocabulary (tokenizer.ggml.model gpt2, pre qwen2): 256\n"
            "                      byte tokens, %lld merges learned from an embedded English text, <|endoftext|>\n"
            "                      <|im_start|> <|im_end|>, padded with unused [PADn] tokens to N (>= %d)\n"
            "  --vocab-from FILE   copy every tokenizer.* key from a GGUF file; n_vocab = its token count\n"
            "\n"
            "types (norms, biases and the qwen2moe shared-expert gate are always F32):\n"
            "  --type T            one type for every matrix: F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K\n"
            "                      Q5_K Q6_K IQ4_NL IQ4_XS MXFP4, and IQ2_XXS IQ2_XS IQ2_S IQ3_XXS IQ3_S IQ1_S IQ1_M\n"
            "                      (no quantizer: valid random blocks of the intended mean and std)\n"
            "  --recipe MXFP4_MOE  llama.cpp's MXFP4_MOE: the routed experts MXFP4, every other matrix Q8_0 (the\n"
            "                      gpt-oss presets' default, as gpt-oss is published)\n"
            "  --recipe Q4_K_M     llama.cpp's Q4_K_M choices (the default): Q4_K everywhere (token_embd too)\n"
            "                      except output Q6_K, and attn_v and ffn_down (_exps, _shexp) Q6_K on the layers\n"
            "                      where llama.cpp's use_more_bits(i, n) holds (i < n/8, i >= 7n/8, or\n"
            "                      (i - n/8) %% 3 == 2); with exactly 8 experts attn_v/attn_k Q8_0, attn_output\n"
            "                      Q5_K; a tied token_embd takes output's Q6_K\n"
            "  --router-type T     type of ffn_gate_inp (default F32, as llama.cpp keeps it)\n"
            "  Rows that are not whole blocks of the chosen type fall back per tensor as llama.cpp does: Q4_K->Q5_0,\n"
            "  Q5_K->Q5_1, Q6_K->Q8_0, Q2_K/Q3_K/IQ4_XS/IQ1-3 types->IQ4_NL, then F16; the 32-element types have no\n"
            "  fallback (an error, as in llama.cpp).\n"
            "\n"
            "run:\n"
            "  --seed N            random seed (default 0); the bytes depend only on the seed and the flags\n"
            "  --threads N         worker threads (default: online CPUs); does not change the bytes\n"
            "  --fill exact|pool   exact (the default): every row drawn and quantized by itself. pool: for\n"
            "                      benchmarks, where only sizes, layout and realistic block statistics matter:\n"
            "                      each quantized tensor of %llu MiB or more is assembled from a pool of its\n"
            "                      first %d blocks (quantized as in exact mode; then each block of a later row\n"
            "                      is a seeded random pick among them), written at memory/disk speed; weights\n"
            "                      are not independent per row. Smaller and float tensors stay exact\n"
            "  --split-max-size S  a split model: OUT-00001-of-0000N.gguf ... (OUT: FILE less .gguf), each part\n"
            "                      holding at most S bytes of tensor data (a larger tensor gets a part of its own),\n"
            "                      llama.cpp's split.no/split.count/split.tensors.count keys; S in bytes or with\n"
            "                      K, M, G (powers of 1024)\n"
            "  -o, --output FILE   where to write (required)\n"
            "  -q, --quiet         no progress or summary\n"
            "  -h, --help          this text\n",
            (long long)mkmodel_vocab_max_merges(), MKMODEL_VOCAB_MIN,
            (unsigned long long)(MKMODEL_POOL_MIN_BYTES >> 20), MKMODEL_POOL_BLOCKS);
}

static int parse_i64(const char *flag, const char *s, int64_t *out, guild_err_t *err)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end)
        return guild_err_set(err, "%s %s: not an integer", flag, s);
    *out = v;
    return 0;
}

static int parse_u64(const char *flag, const char *s, uint64_t *out, guild_err_t *err)
{
    char *end;
    errno = 0;
    if (s[0] == '-')
        return guild_err_set(err, "%s %s: must not be negative", flag, s);
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s || *end)
        return guild_err_set(err, "%s %s: not an unsigned integer", flag, s);
    *out = v;
    return 0;
}

static int parse_f64(const char *flag, const char *s, double *out, guild_err_t *err)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end)
        return guild_err_set(err, "%s %s: not a number", flag, s);
    *out = v;
    return 0;
}

/* A size in bytes, with an optional K, M or G (powers of 1024); > 0. */
static int parse_size(const char *flag, const char *s, uint64_t *out, guild_err_t *err)
{
    char *end;
    errno = 0;
    if (s[0] == '-')
        return guild_err_set(err, "%s %s: must not be negative", flag, s);
    unsigned long long v = strtoull(s, &end, 10);
    int shift = 0;
    if (*end == 'K' || *end == 'k')
        shift = 10;
    else if (*end == 'M' || *end == 'm')
        shift = 20;
    else if (*end == 'G' || *end == 'g')
        shift = 30;
    if (shift)
        end++;
    if (errno || end == s || *end || v == 0 || v > (UINT64_MAX >> shift))
        return guild_err_set(err, "%s %s: not a size (bytes, or a number with K, M or G)", flag, s);
    *out = (uint64_t)v << shift;
    return 0;
}

static int parse_type(const char *flag, const char *s, int *out, guild_err_t *err)
{
    int t = quant_type_from_name(s);
    if (t < 0)
        return guild_err_set(err, "%s %s: unknown type (see --help)", flag, s);
    *out = t;
    return 0;
}

static int copy_str(const char *flag, const char *s, char *dst, size_t size, guild_err_t *err)
{
    if (strlen(s) >= size)
        return guild_err_set(err, "%s: value too long (%zu bytes, at most %zu)", flag, strlen(s), size - 1);
    memcpy(dst, s, strlen(s) + 1);
    return 0;
}

/* Flags that take a value, and where an int64 one goes. */
typedef struct int_flag {
    const char *name;
    size_t offset;
} int_flag_t;

#define INT_FLAG(n, field) {n, offsetof(mkmodel_config_t, field)}
static const int_flag_t int_flags[] = {
    INT_FLAG("--layers", n_layer),       INT_FLAG("--embd", n_embd),         INT_FLAG("--heads", n_head),
    INT_FLAG("--kv-heads", n_head_kv),   INT_FLAG("--head-dim", head_dim),   INT_FLAG("--experts", n_expert),
    INT_FLAG("--experts-used", n_expert_used), INT_FLAG("--expert-ff", n_ff_exp),
    INT_FLAG("--shared-ff", n_ff_shexp), INT_FLAG("--ff", n_ff),             INT_FLAG("--vocab", n_vocab),
    INT_FLAG("--ctx", n_ctx),            INT_FLAG("--yarn-orig-ctx", yarn_orig_ctx),
    INT_FLAG("--sliding-window", n_swa), INT_FLAG("--rope-dim", n_rot),      INT_FLAG("--dense-layers", n_dense_lead),
    INT_FLAG("--nextn", n_nextn),        INT_FLAG("--expert-groups", n_expert_groups),
    INT_FLAG("--groups-used", n_group_used), INT_FLAG("--q-lora", n_lora_q), INT_FLAG("--kv-lora", n_lora_kv),
    INT_FLAG("--v-head-dim", head_dim_v),
    INT_FLAG("--full-attn-interval", full_attn_interval), INT_FLAG("--ssm-conv", ssm_conv),
    INT_FLAG("--ssm-state", ssm_state), INT_FLAG("--ssm-groups", ssm_groups), INT_FLAG("--ssm-heads", ssm_heads),
};

static const char *const value_flags[] = {
    "--shape", "--arch", "--vocab-from", "--seed", "--type", "--recipe", "--router-type", "--rope-base",
    "--yarn-factor", "--rms-eps", "--name", "--threads", "--fill", "-o", "--output", "--weights-scale",
    "--split-max-size", "--gating", "--yarn-mscale",
};

static bool takes_value(const char *flag)
{
    for (size_t i = 0; i < sizeof int_flags / sizeof *int_flags; i++)
        if (!strcmp(flag, int_flags[i].name))
            return true;
    for (size_t i = 0; i < sizeof value_flags / sizeof *value_flags; i++)
        if (!strcmp(flag, value_flags[i]))
            return true;
    return false;
}

/* Splits argv[*i] into flag and value ("--x=v" or "--x v"), advancing *i past a separate value. */
static int next_flag(int argc, char **argv, int *i, char *flag, size_t size, const char **value, guild_err_t *err)
{
    const char *a = argv[*i];
    const char *eq = strncmp(a, "--", 2) ? NULL : strchr(a, '=');
    size_t len = eq ? (size_t)(eq - a) : strlen(a);
    if (len >= size)
        return guild_err_set(err, "%.40s...: unknown flag (see --help)", a);
    memcpy(flag, a, len);
    flag[len] = '\0';
    *value = NULL;
    if (!takes_value(flag)) {
        if (eq)
            return guild_err_set(err, "%s takes no value", flag);
        return 0;
    }
    if (eq) {
        *value = eq + 1;
    } else {
        if (*i + 1 >= argc)
            return guild_err_set(err, "%s: missing value", flag);
        *value = argv[++*i];
    }
    return 0;
}

int mkmodel_cli_parse(int argc, char **argv, mkmodel_config_t *cfg, bool *quiet, guild_err_t *err)
{
    char flag[64];
    const char *value, *shape = "demo";
    *quiet = false;
    /* Pass 1: the preset, so that the other flags override it wherever they stand. */
    for (int i = 1; i < argc; i++) {
        if (next_flag(argc, argv, &i, flag, sizeof flag, &value, err) < 0)
            return -1;
        if (!strcmp(flag, "--shape"))
            shape = value;
        if (!strcmp(flag, "-h") || !strcmp(flag, "--help"))
            return 1;
    }
    memset(cfg, 0, sizeof *cfg);
    if (mkmodel_preset_apply(cfg, shape, err) < 0)
        return -1;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    cfg->threads = cpus < 1 ? 1 : cpus > 256 ? 256 : (int)cpus;

    bool ff_given = false, shared_given = false, vocab_given = false, type_given = false, recipe_given = false;
    bool swa_given = false, yarn_given = false, yarn_ctx_given = false;
    bool dense_given = false, nextn_given = false, scale_given = false, qk_given = false;
    bool mla_given[3] = {false, false, false}, gating_given = false, mscale_given = false;
    const mkmodel_arch_t preset_arch = cfg->arch;
    for (int i = 1; i < argc; i++) {
        next_flag(argc, argv, &i, flag, sizeof flag, &value, err);
        bool done = false;
        for (size_t k = 0; k < sizeof int_flags / sizeof *int_flags && !done; k++)
            if (!strcmp(flag, int_flags[k].name)) {
                if (parse_i64(flag, value, (int64_t *)((char *)cfg + int_flags[k].offset), err) < 0)
                    return -1;
                ff_given |= !strcmp(flag, "--ff");
                shared_given |= !strcmp(flag, "--shared-ff");
                vocab_given |= !strcmp(flag, "--vocab");
                swa_given |= !strcmp(flag, "--sliding-window");
                yarn_ctx_given |= !strcmp(flag, "--yarn-orig-ctx");
                dense_given |= !strcmp(flag, "--dense-layers");
                nextn_given |= !strcmp(flag, "--nextn");
                mla_given[0] |= !strcmp(flag, "--q-lora");
                mla_given[1] |= !strcmp(flag, "--kv-lora");
                mla_given[2] |= !strcmp(flag, "--v-head-dim");
                done = true;
            }
        if (done || !strcmp(flag, "--shape"))
            continue;
        int rc = 0;
        if (!strcmp(flag, "--arch")) {
            int a = mkmodel_arch_from_name(value);
            if (a < 0)
                return guild_err_set(err, "--arch %s: unknown architecture (qwen3moe, qwen2moe, mixtral, olmoe, "
                                     "gpt-oss, glm4moe, deepseek2, qwen3next, qwen35moe)", value);
            cfg->arch = (mkmodel_arch_t)a;
        } else if (!strcmp(flag, "--vocab-from")) {
            rc = copy_str(flag, value, cfg->vocab_from, sizeof cfg->vocab_from, err);
        } else if (!strcmp(flag, "--seed")) {
            rc = parse_u64(flag, value, &cfg->seed, err);
        } else if (!strcmp(flag, "--type")) {
            rc = parse_type(flag, value, &cfg->type, err);
            cfg->recipe = MKMODEL_RECIPE_NONE;
            type_given = true;
        } else if (!strcmp(flag, "--recipe")) {
            if (!strcasecmp(value, "Q4_K_M"))
                cfg->recipe = MKMODEL_RECIPE_Q4_K_M;
            else if (!strcasecmp(value, "MXFP4_MOE"))
                cfg->recipe = MKMODEL_RECIPE_MXFP4_MOE;
            else
                return guild_err_set(err, "--recipe %s: unknown recipe (known: Q4_K_M, MXFP4_MOE)", value);
            recipe_given = true;
        } else if (!strcmp(flag, "--router-type")) {
            rc = parse_type(flag, value, &cfg->router_type, err);
        } else if (!strcmp(flag, "--rope-base")) {
            rc = parse_f64(flag, value, &cfg->rope_freq_base, err);
        } else if (!strcmp(flag, "--yarn-factor")) {
            rc = parse_f64(flag, value, &cfg->yarn_factor, err);
            yarn_given = true;
        } else if (!strcmp(flag, "--weights-scale")) {
            rc = parse_f64(flag, value, &cfg->weights_scale, err);
            scale_given = true;
        } else if (!strcmp(flag, "--gating")) {
            if (strcasecmp(value, "softmax") && strcasecmp(value, "sigmoid"))
                return guild_err_set(err, "--gating %s: softmax or sigmoid", value);
            cfg->gating_softmax = !strcasecmp(value, "softmax");
            gating_given = true;
        } else if (!strcmp(flag, "--yarn-mscale")) {
            rc = parse_f64(flag, value, &cfg->yarn_mscale_all, err);
            mscale_given = true;
        } else if (!strcmp(flag, "--split-max-size")) {
            rc = parse_size(flag, value, &cfg->split_max_bytes, err);
        } else if (!strcmp(flag, "--qk-norm")) {
            cfg->qk_norm = true;
            qk_given = true;
        } else if (!strcmp(flag, "--gdn-fused")) {
            cfg->gdn_fused = true;
        } else if (!strcmp(flag, "--rms-eps")) {
            rc = parse_f64(flag, value, &cfg->rms_eps, err);
        } else if (!strcmp(flag, "--name")) {
            rc = copy_str(flag, value, cfg->name, sizeof cfg->name, err);
        } else if (!strcmp(flag, "--threads")) {
            int64_t t;
            rc = parse_i64(flag, value, &t, err);
            cfg->threads = t < 0 ? 0 : t > 100000 ? 100000 : (int)t;
        } else if (!strcmp(flag, "--fill")) {
            if (!strcasecmp(value, "exact"))
                cfg->fill = MKMODEL_FILL_EXACT;
            else if (!strcasecmp(value, "pool"))
                cfg->fill = MKMODEL_FILL_POOL;
            else
                return guild_err_set(err, "--fill %s: unknown fill (exact or pool)", value);
        } else if (!strcmp(flag, "-o") || !strcmp(flag, "--output")) {
            rc = copy_str(flag, value, cfg->out_path, sizeof cfg->out_path, err);
        } else if (!strcmp(flag, "--tie-embeddings")) {
            cfg->tie_embeddings = true;
        } else if (!strcmp(flag, "-q") || !strcmp(flag, "--quiet")) {
            *quiet = true;
        } else {
            return guild_err_set(err, "%s: unknown flag (see --help)", flag);
        }
        if (rc < 0)
            return -1;
    }
    if (type_given && recipe_given)
        return guild_err_set(err, "give either --type or --recipe, not both");
    if (vocab_given && cfg->vocab_from[0])
        return guild_err_set(err, "give either --vocab or --vocab-from, not both (--vocab-from sets the size)");
    const model_arch_info_t *info = mkmodel_arch_info(cfg->arch);
    /* the preset applied its architecture's defaults (its own yarn where it has one) */
    if (cfg->arch != preset_arch) { /* the architecture's own defaults, not the preset's */
        mkmodel_arch_defaults(cfg, swa_given, yarn_given, yarn_ctx_given);
        if (!gating_given)
            cfg->gating_softmax = false;
        if (!mscale_given)
            cfg->yarn_mscale_all = info->attn.kind == MODEL_ATTN_MLA ? 1.0 : 0.0;
        mkmodel_mla_defaults(cfg, mla_given);
        if (!dense_given)
            cfg->n_dense_lead = info->layout == MODEL_LAYOUT_DENSE_FIRST ? 1 : 0;
        if (!nextn_given)
            cfg->n_nextn = 0;
        if (!scale_given)
            cfg->weights_scale = info->router.kind == MODEL_ROUTER_SIGMOID_GROUPED ? 1.0 : 0.0;
        if (!qk_given)
            cfg->qk_norm = false;
    }
    if (!dense_given && cfg->n_dense_lead >= cfg->n_layer) /* a preset cut down by --layers */
        cfg->n_dense_lead = cfg->n_layer > 1 ? cfg->n_layer - 1 : 0;
    mkmodel_arch_derive(cfg);
    if (info->expert_ff_default == MODEL_EXPERT_FF_IS_FF && !ff_given)
        cfg->n_ff = cfg->n_ff_exp;
    if (mkmodel_arch_has_shexp(cfg->arch) && !shared_given && (cfg->n_ff_shexp == 0 || cfg->arch != preset_arch))
        cfg->n_ff_shexp = (info->ffn.opts & MODEL_FFN_SHEXP) ? cfg->n_ff_exp : cfg->n_ff;
    if (!mkmodel_arch_has_shexp(cfg->arch) && cfg->n_ff_shexp != 0) {
        if (shared_given)
            guild_log(GUILD_LOG_WARN, "--shared-ff ignored: %s has no shared expert", mkmodel_arch_cli_name(cfg->arch));
        cfg->n_ff_shexp = 0;
    }
    return 0;
}
