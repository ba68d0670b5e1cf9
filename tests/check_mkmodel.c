/* Tests for tools/guild-mkmodel: the command line (flags, presets, errors), the type recipe (llama.cpp's Q4_K_M
 * choices and block-size fallbacks), the built-in vocabulary (tokenizes English into multi-byte tokens with
 * core/tokenizer), the element statistics of every weight type after dequantization, and whole files: they
 * read back with core/gguf with every tensor and key, and their bytes depend on the seed only (not on
 * --threads); --fill pool: its tensors are made of their pools' blocks, small ones are exact. Shapes are small:
 * the suite runs in seconds. */
#include "core/gguf/gguf.h"
#include "core/model/model.h"
#include "core/quant/quant.h"
#include "core/quant/types.h"
#include "core/tokenizer/tok.h"
#include "tests/check_run.h"
#include "tools/mkmodel/cli.h"
#include "tools/mkmodel/config.h"
#include "tools/mkmodel/fill.h"
#include "tools/mkmodel/model.h"
#include "tools/mkmodel/plan.h"
#include "tools/mkmodel/pool.h"
#include "tools/mkmodel/recipe.h"
#include "tools/mkmodel/rng.h"
#include "tools/mkmodel/vocab.h"

#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* --- helpers ---------------------------------------------------------------------------------------------- */

static char tmpdir[256];

static void make_tmpdir(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/check_mkmodel.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void remove_tmpdir(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    ck_assert_int_eq(system(cmd), 0);
}

/* Parses a NULL-terminated argument list (argv[0] added). */
static int parse(mkmodel_config_t *cfg, guild_err_t *err, const char *first, ...)
{
    const char *argv[64] = {"guild-mkmodel"};
    int argc = 1;
    va_list ap;
    va_start(ap, first);
    for (const char *a = first; a; a = va_arg(ap, const char *))
        argv[argc++] = a;
    va_end(ap);
    bool quiet;
    int rc = mkmodel_cli_parse(argc, (char **)argv, cfg, &quiet, err);
    if (rc == 0)
        rc = mkmodel_config_validate(cfg, err);
    return rc;
}

#define EXPECT_ERROR(substr, ...)                                                                             \
    do {                                                                                                      \
        mkmodel_config_t c_;                                                                                  \
        guild_err_t e_ = {{0}};                                                                               \
        ck_assert_int_eq(parse(&c_, &e_, __VA_ARGS__, NULL), -1);                                             \
        ck_assert_msg(strstr(e_.msg, substr), "expected \"%s\" in: %s", substr, e_.msg);                      \
    } while (0)

static uint8_t *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *size = (size_t)n;
    return b;
}

/* Writes a model from flags (plus -q -o path). */
static void write_model(const char *path, const char *const *flags)
{
    const char *argv[64] = {"guild-mkmodel", "-q", "-o", path};
    int argc = 4;
    for (; *flags; flags++)
        argv[argc++] = *flags;
    mkmodel_config_t cfg;
    guild_err_t err;
    bool quiet;
    ck_assert_msg(mkmodel_cli_parse(argc, (char **)argv, &cfg, &quiet, &err) == 0, "%s", err.msg);
    ck_assert_msg(mkmodel_config_validate(&cfg, &err) == 0, "%s", err.msg);
    ck_assert_msg(mkmodel_write(&cfg, NULL, NULL, NULL, &err) == 0, "%s", err.msg);
}

/* --- command line ----------------------------------------------------------------------------------------- */

START_TEST(test_cli_preset_and_overrides)
{
    mkmodel_config_t c;
    guild_err_t err;
    /* Flags override the preset wherever they stand. */
    ck_assert_msg(parse(&c, &err, "--layers", "3", "--shape", "qwen3-30b-a3b", "-o", "x.gguf", NULL) == 0, "%s",
                  err.msg);
    ck_assert_int_eq(c.arch, MKMODEL_ARCH_QWEN3MOE);
    ck_assert_int_eq(c.n_layer, 3);
    ck_assert_int_eq(c.n_embd, 2048);
    ck_assert_int_eq(c.n_head, 32);
    ck_assert_int_eq(c.n_head_kv, 4);
    ck_assert_int_eq(c.head_dim, 128);
    ck_assert_int_eq(c.n_expert, 128);
    ck_assert_int_eq(c.n_expert_used, 8);
    ck_assert_int_eq(c.n_ff_exp, 768);
    ck_assert_int_eq(c.n_vocab, 151936);
    ck_assert_int_eq(c.recipe, MKMODEL_RECIPE_Q4_K_M);
    ck_assert_str_eq(c.out_path, "x.gguf");
    ck_assert_int_eq(c.fill, MKMODEL_FILL_EXACT);
    ck_assert_msg(parse(&c, &err, "--fill", "pool", "-o", "x.gguf", NULL) == 0, "%s", err.msg);
    ck_assert_int_eq(c.fill, MKMODEL_FILL_POOL);
    ck_assert_msg(parse(&c, &err, "--fill=pool", "--fill=exact", "-o", "x.gguf", NULL) == 0, "%s", err.msg);
    ck_assert_int_eq(c.fill, MKMODEL_FILL_EXACT);

    ck_assert_msg(parse(&c, &err, "--shape=mixtral-8x7b", "--type=q8_0", "--seed", "0x10", "--threads", "3", "-o",
                        "m.gguf", NULL) == 0, "%s", err.msg);
    ck_assert_int_eq(c.arch, MKMODEL_ARCH_MIXTRAL);
    ck_assert_str_eq(mkmodel_arch_gguf_name(c.arch), "llama");
    ck_assert_int_eq(c.n_expert, 8);
    ck_assert_int_eq(c.n_expert_used, 2);
    ck_assert_int_eq(c.n_ff, c.n_ff_exp);
    ck_assert_int_eq(c.recipe, MKMODEL_RECIPE_NONE);
    ck_assert_int_eq(c.type, GUILD_TYPE_Q8_0);
    ck_assert_uint_eq(c.seed, 16);
    ck_assert_int_eq(c.threads, 3);

    /* Mixtral and OLMoE take feed_forward_length from the expert size unless --ff is given. */
    ck_assert_msg(parse(&c, &err, "--arch", "olmoe", "--expert-ff", "64", "-o", "o.gguf", NULL) == 0, "%s", err.msg);
    ck_assert_int_eq(c.n_ff, 64);
    /* --shared-ff is ignored (with a warning) where there is no shared expert, defaults to --ff on qwen2moe. */
    ck_assert_msg(parse(&c, &err, "--arch", "mixtral", "--shared-ff", "64", "-o", "o.gguf", NULL) == 0, "%s",
                  err.msg);
    ck_assert_int_eq(c.n_ff_shexp, 0);
    ck_assert_msg(parse(&c, &err, "--arch", "qwen2moe", "--ff", "96", "-o", "o.gguf", NULL) == 0, "%s", err.msg);
    ck_assert_int_eq(c.n_ff_shexp, 96);
    /* glm4moe from another preset: its own defaults (a dense layer, one expert-wide shared expert, half rotary,
     * scale 1, no MTP layer, no q/k norms) */
    ck_assert_msg(parse(&c, &err, "--arch", "glm4moe", "--head-dim", "64", "-o", "g.gguf", NULL) == 0, "%s", err.msg);
    ck_assert_int_eq(c.n_dense_lead, 1);
    ck_assert_int_eq(c.n_ff_shexp, c.n_ff_exp);
    ck_assert_int_eq(mkmodel_arch_default_rot(c.arch, c.head_dim), 32);
    ck_assert(c.weights_scale == 1.0 && !c.qk_norm && c.n_nextn == 0);
    ck_assert_int_eq(mkmodel_config_validate(&c, &err), 0);
    /* the GLM presets, and cut down by --layers */
    ck_assert_msg(parse(&c, &err, "--shape", "glm-4.5", "-o", "g.gguf", NULL) == 0, "%s", err.msg);
    ck_assert_int_eq(c.arch, MKMODEL_ARCH_GLM4MOE);
    ck_assert(c.n_layer == 92 && c.n_dense_lead == 3 && c.n_nextn == 1 && c.qk_norm && c.weights_scale == 2.5);
    ck_assert(c.n_expert == 160 && c.n_ff_exp == 1536 && c.n_ff_shexp == 1536 && c.n_ff == 12288);
    ck_assert_msg(parse(&c, &err, "--shape", "glm-4.5", "--layers", "2", "-o", "g.gguf", NULL) == 0, "%s", err.msg);
    ck_assert_int_eq(c.n_dense_lead, 1);
    ck_assert_int_eq(mkmodel_config_validate(&c, &err), 0);
    ck_assert_msg(parse(&c, &err, "--shape", "glm-4.5-air", "--nextn", "0", "--dense-layers", "0", "-o", "g.gguf",
                        NULL) == 0, "%s", err.msg);
    ck_assert(c.n_layer == 46 && c.n_dense_lead == 0 && c.n_nextn == 0 && !c.qk_norm && c.weights_scale == 1.0);
    /* deepseek2 from another preset: small MLA defaults (a third of the key rotated in blocks of 32, a q LoRA of
     * half the width, a latent of two keys, values of the unrotated part), sigmoid gating, a dense layer */
    ck_assert_msg(parse(&c, &err, "--arch", "deepseek2", "--head-dim", "96", "-o", "d.gguf", NULL) == 0, "%s",
                  err.msg);
    ck_assert_int_eq(mkmodel_arch_default_rot(c.arch, c.head_dim), 32);
    ck_assert(c.n_lora_q == c.n_embd / 2 && c.n_lora_kv == 192 && c.head_dim_v == 64 && !c.gating_softmax);
    ck_assert(c.n_dense_lead == 1 && c.n_ff_shexp == c.n_ff_exp && c.yarn_factor == 0);
    ck_assert_int_eq(mkmodel_router_part(&c)->kind, MODEL_ROUTER_SIGMOID_GROUPED);
    ck_assert_int_eq(mkmodel_config_validate(&c, &err), 0);
    ck_assert_msg(parse(&c, &err, "--arch", "deepseek2", "--gating", "softmax", "--q-lora", "0", "-o", "d.gguf",
                        NULL) == 0, "%s", err.msg);
    ck_assert(c.gating_softmax && c.n_lora_q == 0);
    ck_assert_int_eq(mkmodel_router_part(&c)->kind, MODEL_ROUTER_SOFTMAX_TOPK);
    ck_assert_int_eq(mkmodel_config_validate(&c, &err), 0);
    /* the deepseek2 presets as their config.json files say, cut down by --layers */
    ck_assert_msg(parse(&c, &err, "--shape", "deepseek-v3", "--layers", "4", "-o", "d.gguf", NULL) == 0, "%s",
                  err.msg);
    ck_assert(c.arch == MKMODEL_ARCH_DEEPSEEK2 && c.n_layer == 4 && c.n_dense_lead == 3 && c.n_nextn == 0);
    ck_assert(c.n_head == 128 && c.head_dim == 192 && c.n_rot == 64 && c.head_dim_v == 128);
    ck_assert(c.n_lora_q == 1536 && c.n_lora_kv == 512 && !c.gating_softmax && c.weights_scale == 2.5);
    ck_assert(c.n_expert == 256 && c.n_expert_groups == 8 && c.n_group_used == 4 && c.n_ff_shexp == 2048);
    ck_assert(c.yarn_factor == 40 && c.yarn_orig_ctx == 4096 && c.yarn_mscale_all == 1.0);
    ck_assert_int_eq(mkmodel_config_validate(&c, &err), 0);
    ck_assert_msg(parse(&c, &err, "--shape", "deepseek-v2-lite", "-o", "d.gguf", NULL) == 0, "%s", err.msg);
    ck_assert(c.n_layer == 27 && c.n_lora_q == 0 && c.gating_softmax && c.n_ff_shexp == 2 * 1408);
    ck_assert(c.yarn_mscale_all == 0.707 && c.n_expert_groups == 0);
    ck_assert_msg(parse(&c, &err, "--shape", "kimi-k2", "--layers", "2", "-o", "d.gguf", NULL) == 0, "%s", err.msg);
    ck_assert(c.n_head == 64 && c.n_expert == 384 && c.n_dense_lead == 1 && c.rope_freq_base == 5e4);
    ck_assert(c.yarn_factor == 32 && c.weights_scale == 2.827);
    for (int i = 0; i < mkmodel_preset_count(); i++)
        ck_assert_msg(parse(&c, &err, "--shape", mkmodel_preset_name(i), "-o", "p.gguf", NULL) == 0, "%s: %s",
                      mkmodel_preset_name(i), err.msg);
    bool quiet;
    const char *help[] = {"guild-mkmodel", "--layers", "2", "--help"};
    ck_assert_int_eq(mkmodel_cli_parse(4, (char **)help, &c, &quiet, &err), 1);
}
END_TEST

START_TEST(test_cli_errors)
{
    EXPECT_ERROR("--bogus: unknown flag", "--bogus", "-o", "x.gguf");
    EXPECT_ERROR("--layers: missing value", "-o", "x.gguf", "--layers");
    EXPECT_ERROR("--fill fast: unknown fill (exact or pool)", "--fill", "fast", "-o", "x.gguf");
    EXPECT_ERROR("--fill: missing value", "-o", "x.gguf", "--fill");
    EXPECT_ERROR("--layers 2x: not an integer", "--layers", "2x", "-o", "x.gguf");
    EXPECT_ERROR("--layers 0: must be between", "--layers", "0", "-o", "x.gguf");
    EXPECT_ERROR("--shape nope: unknown shape", "--shape", "nope", "-o", "x.gguf");
    EXPECT_ERROR("--arch gpt2: unknown architecture", "--arch", "gpt2", "-o", "x.gguf");
    EXPECT_ERROR("--type q9_9: unknown type", "--type", "q9_9", "-o", "x.gguf");
    EXPECT_ERROR("--type q8_K: not a weight type", "--type", "q8_K", "-o", "x.gguf");
    EXPECT_ERROR("--recipe Q3_K_L: unknown recipe", "--recipe", "Q3_K_L", "-o", "x.gguf");
    EXPECT_ERROR("either --type or --recipe", "--type", "Q4_K", "--recipe", "Q4_K_M", "-o", "x.gguf");
    EXPECT_ERROR("either --vocab or --vocab-from", "--vocab", "500", "--vocab-from", "v.gguf", "-o", "x.gguf");
    EXPECT_ERROR("--heads 6 is not a multiple of --kv-heads 4", "--heads", "6", "--kv-heads", "4", "-o", "x.gguf");
    EXPECT_ERROR("--head-dim 33: must be even", "--head-dim", "33", "-o", "x.gguf");
    EXPECT_ERROR("--experts-used 9 is more than --experts 8", "--experts", "8", "--experts-used", "9", "-o",
                 "x.gguf");
    EXPECT_ERROR("mixtral: --ff 100 must equal --expert-ff 64", "--arch", "mixtral", "--expert-ff", "64", "--ff",
                 "100", "-o", "x.gguf");
    EXPECT_ERROR("olmoe: --ff 100 must equal --expert-ff 64 (olmoe's experts take their size from "
                 "olmoe.feed_forward_length)", "--arch", "olmoe", "--expert-ff", "64", "--ff", "100", "-o", "x.gguf");
    EXPECT_ERROR("--dense-layers 1: qwen3moe has no dense layers", "--dense-layers", "1", "-o", "x.gguf");
    EXPECT_ERROR("--nextn 1: qwen3moe has no MTP layers", "--nextn", "1", "-o", "x.gguf");
    EXPECT_ERROR("--qk-norm: qwen3moe's q/k norms are always there", "--qk-norm", "-o", "x.gguf");
    EXPECT_ERROR("--rope-dim 32: qwen3moe rotates whole heads", "--rope-dim", "32", "-o", "x.gguf");
    EXPECT_ERROR("--expert-groups/--groups-used: qwen3moe's router has no expert groups", "--expert-groups", "4",
                 "-o", "x.gguf");
    EXPECT_ERROR("--dense-layers 4: must be between 0 and --layers - 1 (3)", "--arch", "glm4moe", "--dense-layers",
                 "4", "-o", "x.gguf");
    EXPECT_ERROR("--shared-ff 300: glm4moe's shared expert is a whole number of routed experts wide", "--arch",
                 "glm4moe", "--shared-ff", "300", "-o", "x.gguf");
    EXPECT_ERROR("--expert-groups 3 --groups-used 1", "--arch", "glm4moe", "--expert-groups", "3", "--groups-used",
                 "1", "-o", "x.gguf");
    EXPECT_ERROR("--expert-groups 64 --groups-used 1", "--arch", "glm4moe", "--expert-groups", "64", "--groups-used",
                 "1", "-o", "x.gguf"); /* top-8 from one group of 2 */
    EXPECT_ERROR("--rope-dim 33: must be even", "--arch", "glm4moe", "--rope-dim", "33", "-o", "x.gguf");
    EXPECT_ERROR("--rope-dim 64: deepseek2 rotates an even part of each key", "--arch", "deepseek2", "--head-dim",
                 "64", "--rope-dim", "64", "-o", "x.gguf");
    EXPECT_ERROR("--kv-lora 0: must be between", "--arch", "deepseek2", "--kv-lora", "0", "-o", "x.gguf");
    EXPECT_ERROR("--q-lora/--kv-lora/--v-head-dim: qwen3moe has no latent attention", "--kv-lora", "64", "-o",
                 "x.gguf");
    EXPECT_ERROR("--gating softmax: qwen3moe's router is fixed", "--gating", "softmax", "-o", "x.gguf");
    EXPECT_ERROR("--gating max: softmax or sigmoid", "--arch", "deepseek2", "--gating", "max", "-o", "x.gguf");
    EXPECT_ERROR("--expert-groups/--groups-used: qwen3moe's router has no expert groups", "--expert-groups", "4",
                 "--groups-used", "2", "-o", "x.gguf");
    EXPECT_ERROR("--expert-groups 4 --groups-used 5: the groups must split", "--arch", "deepseek2", "--gating",
                 "softmax", "--expert-groups", "4", "--groups-used", "5", "-o", "x.gguf");
    EXPECT_ERROR("--split-max-size 0: not a size", "--split-max-size", "0", "-o", "x.gguf");
    EXPECT_ERROR("--split-max-size 4T: not a size", "--split-max-size", "4T", "-o", "x.gguf");
    EXPECT_ERROR("--threads 0", "--threads", "0", "-o", "x.gguf");
    EXPECT_ERROR("--seed -1: must not be negative", "--seed", "-1", "-o", "x.gguf");
    EXPECT_ERROR("--tie-embeddings takes no value", "--tie-embeddings=1", "-o", "x.gguf");
    EXPECT_ERROR("no output file", "--layers", "2");
}
END_TEST

/* The binary itself: exit status and message on bad flags, 0 on --help. */
START_TEST(test_cli_binary)
{
    const char *bd = getenv("GUILD_BUILDDIR");
    char bin[1024], cmd[2048];
    snprintf(bin, sizeof bin, "%s/tools/guild-mkmodel", bd ? bd : GUILD_BUILDDIR);
    if (access(bin, X_OK) != 0)
        return; /* built after the test in some make orders: the library calls above cover the logic */
    snprintf(cmd, sizeof cmd, "'%s' --help > /dev/null", bin);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "'%s' --experts 4 --experts-used 5 -o /dev/null 2>&1", bin);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    char out[512] = "";
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int status = pclose(p);
    ck_assert_int_ne(status, 0);
    ck_assert_msg(strstr(out, "--experts-used 5 is more than --experts 4"), "%s", out);
}
END_TEST

/* --- recipe ----------------------------------------------------------------------------------------------- */

static mkmodel_plan_t *plan_of(mkmodel_config_t *c, int64_t n_vocab)
{
    mkmodel_plan_t *p;
    guild_err_t err;
    ck_assert_msg(mkmodel_config_validate(c, &err) == 0, "%s", err.msg);
    ck_assert_msg(mkmodel_plan_new(&p, c, n_vocab, &err) == 0, "%s", err.msg);
    return p;
}

static const mkmodel_tensor_t *find(const mkmodel_plan_t *p, const char *name)
{
    for (int64_t i = 0; i < mkmodel_plan_n_tensors(p); i++)
        if (!strcmp(mkmodel_plan_tensor(p, i)->name, name))
            return mkmodel_plan_tensor(p, i);
    ck_abort_msg("tensor %s not in the plan", name);
    return NULL;
}

static guild_type_t type_of(const mkmodel_plan_t *p, const char *fmt, int64_t layer)
{
    char name[64];
    snprintf(name, sizeof name, fmt, (long long)layer);
    return find(p, name)->type;
}

START_TEST(test_recipe_q4_k_m)
{
    mkmodel_config_t c;
    guild_err_t err;
    ck_assert_int_eq(mkmodel_preset_apply(&c, "qwen3-30b-a3b", &err), 0);
    c.threads = 1;
    strcpy(c.out_path, "x");
    mkmodel_plan_t *p = plan_of(&c, 151936);
    /* 48 layers: llama.cpp's use_more_bits holds for i < 6, i >= 42, (i - 6) % 3 == 2. */
    int n_more = 0;
    for (int64_t l = 0; l < 48; l++) {
        bool more = l < 6 || l >= 42 || (l - 6) % 3 == 2;
        ck_assert_int_eq(mkmodel_recipe_more_bits(l, 48), more);
        n_more += more;
        guild_type_t want = more ? GUILD_TYPE_Q6_K : GUILD_TYPE_Q4_K;
        ck_assert_int_eq(type_of(p, "blk.%lld.attn_v.weight", l), want);
        ck_assert_int_eq(type_of(p, "blk.%lld.ffn_down_exps.weight", l), want);
        ck_assert_int_eq(type_of(p, "blk.%lld.attn_q.weight", l), GUILD_TYPE_Q4_K);
        ck_assert_int_eq(type_of(p, "blk.%lld.attn_k.weight", l), GUILD_TYPE_Q4_K);
        ck_assert_int_eq(type_of(p, "blk.%lld.attn_output.weight", l), GUILD_TYPE_Q4_K);
        ck_assert_int_eq(type_of(p, "blk.%lld.ffn_gate_exps.weight", l), GUILD_TYPE_Q4_K);
        ck_assert_int_eq(type_of(p, "blk.%lld.ffn_up_exps.weight", l), GUILD_TYPE_Q4_K);
        ck_assert_int_eq(type_of(p, "blk.%lld.ffn_gate_inp.weight", l), GUILD_TYPE_F32);
        ck_assert_int_eq(type_of(p, "blk.%lld.attn_norm.weight", l), GUILD_TYPE_F32);
        ck_assert_int_eq(type_of(p, "blk.%lld.attn_q_norm.weight", l), GUILD_TYPE_F32);
    }
    ck_assert_int_eq(n_more, 6 + 6 + 12);
    ck_assert_int_eq(find(p, "token_embd.weight")->type, GUILD_TYPE_Q4_K);
    ck_assert_int_eq(find(p, "output.weight")->type, GUILD_TYPE_Q6_K);
    ck_assert_int_eq(find(p, "output_norm.weight")->type, GUILD_TYPE_F32);
    ck_assert_int_eq(mkmodel_plan_n_fallbacks(p), 0);
    /* Qwen3-30B-A3B in Q4_K_M is ~17-18 GB (llama.cpp's files are 18.6 GB with 17.3 GiB of tensors). */
    uint64_t bytes = mkmodel_plan_data_bytes(p);
    ck_assert_msg(bytes > 17000000000ull && bytes < 19000000000ull, "%llu", (unsigned long long)bytes);
    ck_assert_uint_eq(mkmodel_recipe_file_type(&c), 15);
    mkmodel_plan_destroy(&p);

    /* Exactly 8 experts (Mixtral): attn_v and attn_k Q8_0, attn_output Q5_K; tied embeddings: token_embd Q6_K. */
    ck_assert_int_eq(mkmodel_preset_apply(&c, "mixtral-8x7b", &err), 0);
    c.n_layer = 4;
    c.tie_embeddings = true;
    p = plan_of(&c, 32000);
    ck_assert_int_eq(type_of(p, "blk.%lld.attn_v.weight", 1), GUILD_TYPE_Q8_0);
    ck_assert_int_eq(type_of(p, "blk.%lld.attn_k.weight", 1), GUILD_TYPE_Q8_0);
    ck_assert_int_eq(type_of(p, "blk.%lld.attn_output.weight", 1), GUILD_TYPE_Q5_K);
    /* 4 layers: use_more_bits holds for 2 ((2 - 0) % 3 == 2) and 3 (>= 7 * 4 / 8), not for 0 and 1. */
    ck_assert_int_eq(type_of(p, "blk.%lld.ffn_down_exps.weight", 0), GUILD_TYPE_Q4_K);
    ck_assert_int_eq(type_of(p, "blk.%lld.ffn_down_exps.weight", 2), GUILD_TYPE_Q6_K);
    ck_assert_int_eq(type_of(p, "blk.%lld.ffn_down_exps.weight", 3), GUILD_TYPE_Q6_K);
    ck_assert_int_eq(find(p, "token_embd.weight")->type, GUILD_TYPE_Q6_K);
    for (int64_t i = 0; i < mkmodel_plan_n_tensors(p); i++)
        ck_assert_str_ne(mkmodel_plan_tensor(p, i)->name, "output.weight");
    mkmodel_plan_destroy(&p);
}
END_TEST

static void check_file(const char *path, const char *const *flags);

/* qwen3next and qwen35moe: the derived defaults (Qwen3-Next's proportions), the preset cut by --layers, the
 * flags' errors, and small files that load with their parts. */
START_TEST(test_qwen3next)
{
    mkmodel_config_t c;
    guild_err_t err;
    ck_assert_msg(parse(&c, &err, "--arch", "qwen3next", "--heads", "8", "--head-dim", "32", "-o", "x.gguf", NULL) == 0,
                  "%s", err.msg);
    ck_assert_int_eq(c.arch, MKMODEL_ARCH_QWEN3NEXT);
    ck_assert_int_eq(mkmodel_arch_default_rot(c.arch, c.head_dim), 8);
    ck_assert(c.n_rot == 0 && c.full_attn_interval == 4 && c.ssm_conv == 4 && c.ssm_state == 16 &&
              c.ssm_groups == 8 && c.ssm_heads == 16);
    ck_assert_int_eq(c.n_ff_shexp, c.n_ff); /* a shared expert: --ff by default */
    ck_assert_msg(parse(&c, &err, "--arch", "qwen35moe", "--ssm-groups", "2", "--ssm-heads", "6", "--ssm-state", "8",
                        "--rope-dim", "4", "--full-attn-interval", "3", "-o", "x.gguf", NULL) == 0, "%s", err.msg);
    ck_assert(c.n_rot == 4 && c.full_attn_interval == 3 && c.ssm_state == 8 && c.ssm_groups == 2 && c.ssm_heads == 6);
    ck_assert_msg(parse(&c, &err, "--arch", "qwen3moe", "-o", "x.gguf", NULL) == 0, "%s", err.msg);
    ck_assert_int_eq(mkmodel_arch_default_rot(c.arch, c.head_dim), c.head_dim);
    EXPECT_ERROR("--ssm-heads 6 is not a multiple of --ssm-groups 4", "--arch", "qwen3next", "--ssm-groups", "4",
                 "--ssm-heads", "6", "-o", "x");
    EXPECT_ERROR("--rope-dim 7: must be even", "--arch", "qwen3next", "--rope-dim", "7", "-o", "x");

    /* the preset: Qwen3-Next-80B-A3B's numbers; the attention every 4th layer, the delta net on the others */
    ck_assert_msg(parse(&c, &err, "--shape", "qwen3-next-80b-a3b", "--layers", "4", "-o", "x.gguf", NULL) == 0, "%s",
                  err.msg);
    ck_assert(c.n_embd == 2048 && c.n_head == 16 && c.n_head_kv == 2 && c.head_dim == 256 && c.n_expert == 512 &&
              c.n_expert_used == 10 && c.n_ff_exp == 512 && c.n_ff_shexp == 512 && c.n_vocab == 151936 &&
              mkmodel_arch_default_rot(c.arch, c.head_dim) == 64 && c.ssm_state == 128 && c.ssm_groups == 16 && c.ssm_heads == 32);
    mkmodel_plan_t *p = plan_of(&c, c.n_vocab);
    ck_assert_int_eq(find(p, "blk.3.attn_q.weight")->ne[1], 2 * 16 * 256); /* query and gate */
    ck_assert_int_eq(find(p, "blk.0.attn_qkv.weight")->ne[1], 2 * 16 * 128 + 32 * 128);
    ck_assert_int_eq(find(p, "blk.0.ssm_ba.weight")->ne[1], 64);
    ck_assert_int_eq(type_of(p, "blk.%lld.ssm_conv1d.weight", 1), GUILD_TYPE_F32);
    ck_assert_int_eq(type_of(p, "blk.%lld.ssm_a", 2), GUILD_TYPE_F32);
    ck_assert_int_eq(type_of(p, "blk.%lld.attn_qkv.weight", 2), GUILD_TYPE_Q4_K);
    ck_assert_int_eq(type_of(p, "blk.%lld.post_attention_norm.weight", 1), GUILD_TYPE_F32);
    mkmodel_plan_destroy(&p);
    ck_assert_int_eq(mkmodel_preset_apply(&c, "qwen3-next-80b-a3b", &err), 0);
    c.threads = 1;
    strcpy(c.out_path, "x");
    p = plan_of(&c, c.n_vocab);
    /* 80B parameters at ~4.9 bits: llama.cpp's Q4_K_M file is ~48 GB */
    uint64_t bytes = mkmodel_plan_data_bytes(p);
    ck_assert_msg(bytes > 42000000000ull && bytes < 52000000000ull, "%llu", (unsigned long long)bytes);
    mkmodel_plan_destroy(&p);

    /* Qwen3.5-35B-A3B: the same linear attention, 256 experts top-8, its vocabulary; 35B parameters at ~4.9 bits
     * (llama.cpp's Q4_K_M file is ~21 GB) */
    ck_assert_msg(parse(&c, &err, "--shape", "qwen3.5-35b-a3b", "-o", "x.gguf", NULL) == 0, "%s", err.msg);
    ck_assert(c.arch == MKMODEL_ARCH_QWEN35MOE && c.n_layer == 40 && c.n_embd == 2048 && c.n_head == 16 &&
              c.n_head_kv == 2 && c.head_dim == 256 && c.n_expert == 256 && c.n_expert_used == 8 && c.n_ff_exp == 512 &&
              c.n_ff_shexp == 512 && c.n_vocab == 248320 && c.ssm_state == 128 && c.ssm_groups == 16 &&
              c.ssm_heads == 32 && c.full_attn_interval == 4 && c.n_nextn == 0 &&
              mkmodel_arch_default_rot(c.arch, c.head_dim) == 64);
    c.threads = 1;
    p = plan_of(&c, c.n_vocab);
    ck_assert_int_eq(find(p, "blk.0.attn_qkv.weight")->ne[1], 2 * 16 * 128 + 32 * 128);
    ck_assert_int_eq(find(p, "blk.3.attn_q.weight")->ne[1], 2 * 16 * 256);
    ck_assert_ptr_nonnull(find(p, "blk.0.ssm_beta.weight"));
    bytes = mkmodel_plan_data_bytes(p);
    ck_assert_msg(bytes > 18000000000ull && bytes < 24000000000ull, "%llu", (unsigned long long)bytes);
    mkmodel_plan_destroy(&p);

    make_tmpdir();
    for (int a = 0; a < 2; a++) {
        char path[512];
        snprintf(path, sizeof path, "%s/hybrid%d.gguf", tmpdir, a);
        const char *flags[] = {"--arch", a ? "qwen35moe" : "qwen3next", "--layers", "4", "--embd", "64", "--heads",
                               "4", "--kv-heads", "2", "--head-dim", "16", "--experts", "8", "--experts-used", "2",
                               "--expert-ff", "32", "--vocab", "300", "--ctx", "128", "--full-attn-interval", "2",
                               "--type", "Q8_0", "--threads", "2", NULL};
        write_model(path, flags);
        check_file(path, flags);
        model_t *m = NULL;
        ck_assert_msg(model_new(&m, path, &err) == 0, "%s", err.msg);
        const model_config_t *mc = model_config(m);
        ck_assert_int_eq(mc->arch, a ? MODEL_ARCH_QWEN35MOE : MODEL_ARCH_QWEN3NEXT);
        ck_assert(mc->n_rot == 4 && mc->ssm_d_state == 8 && mc->ssm_n_group == 4 && mc->ssm_dt_rank == 8 &&
                  mc->n_layer_attn == 2);
        ck_assert(model_layer_recurrent(mc, 0) && !model_layer_recurrent(mc, 1));
        ck_assert_int_eq(model_weights(m)->layers[2].ssm_beta.data != NULL, a);
        model_destroy(&m);
    }
    remove_tmpdir();
}
END_TEST

static const mkmodel_tensor_t *plan_find(const mkmodel_plan_t *p, const char *name)
{
    for (int64_t i = 0; i < mkmodel_plan_n_tensors(p); i++)
        if (!strcmp(mkmodel_plan_tensor(p, i)->name, name))
            return mkmodel_plan_tensor(p, i);
    return NULL;
}

/* An MTP layer's nextn tensors as converted files hold them: GLM-4.5's (and DeepSeek-V3's) with the layer's own
 * embedding and LM head [n_embd, n_vocab], Qwen3.5's without (it shares the model's). */
START_TEST(test_mtp_tensors)
{
    static const struct { const char *arch; bool own_head; } cases[] = {
        {"glm4moe", true}, {"deepseek2", true}, {"qwen35moe", false}};
    for (size_t a = 0; a < sizeof cases / sizeof *cases; a++) {
        mkmodel_config_t c;
        guild_err_t err;
        ck_assert_msg(parse(&c, &err, "--arch", cases[a].arch, "--layers", "2", "--nextn", "1", "-o", "x.gguf",
                            NULL) == 0, "%s: %s", cases[a].arch, err.msg);
        ck_assert_msg(mkmodel_config_validate(&c, &err) == 0, "%s: %s", cases[a].arch, err.msg);
        mkmodel_plan_t *p = plan_of(&c, 600);
        static const char *always[] = {"eh_proj", "enorm", "hnorm", "shared_head_norm"};
        static const char *own[] = {"embed_tokens", "shared_head_head"};
        char name[64];
        for (int i = 0; i < 4; i++) {
            snprintf(name, sizeof name, "blk.2.nextn.%s.weight", always[i]);
            ck_assert_msg(plan_find(p, name) != NULL, "%s: %s", cases[a].arch, name);
        }
        for (int i = 0; i < 2; i++) {
            snprintf(name, sizeof name, "blk.2.nextn.%s.weight", own[i]);
            const mkmodel_tensor_t *t = plan_find(p, name);
            ck_assert_msg((t != NULL) == cases[a].own_head, "%s: %s", cases[a].arch, name);
            if (t)
                ck_assert(t->n_dims == 2 && t->ne[0] == c.n_embd && t->ne[1] == 600);
        }
        mkmodel_plan_destroy(&p);
    }
}
END_TEST

/* gpt-oss: the arch's own defaults (window 128, yarn 32 over 4096, as its converter writes), the presets with
 * llama.cpp's MXFP4_MOE mix, the flags' errors, and a file that loads as gpt-oss with its parts. */
START_TEST(test_gpt_oss)
{
    mkmodel_config_t c;
    guild_err_t err;
    ck_assert_msg(parse(&c, &err, "--arch", "gpt-oss", "-o", "x.gguf", NULL) == 0, "%s", err.msg);
    ck_assert_int_eq(c.arch, MKMODEL_ARCH_GPT_OSS);
    ck_assert_int_eq(c.n_swa, 128);
    ck_assert(c.yarn_factor == 32.0 && c.yarn_orig_ctx == 4096);
    ck_assert_int_eq(c.n_ff, c.n_ff_exp);
    ck_assert_msg(parse(&c, &err, "--arch", "gpt-oss", "--sliding-window", "16", "--yarn-factor", "0", "-o", "x.gguf",
                        NULL) == 0, "%s", err.msg);
    ck_assert(c.n_swa == 16 && c.yarn_factor == 0);
    ck_assert_msg(parse(&c, &err, "--arch", "qwen3moe", "-o", "x.gguf", NULL) == 0, "%s", err.msg);
    ck_assert(c.n_swa == 0 && c.yarn_factor == 0);
    EXPECT_ERROR("--sliding-window 0: must be between 1", "--arch", "gpt-oss", "--sliding-window", "0", "-o", "x");
    EXPECT_ERROR("--sliding-window 8: qwen3moe has no sliding-window attention", "--sliding-window", "8", "-o", "x");
    EXPECT_ERROR("--yarn-factor 0.5: must be 0 (no scaling) or in [1, 1024]", "--yarn-factor", "0.5", "-o", "x");
    EXPECT_ERROR("--recipe Q3: unknown recipe (known: Q4_K_M, MXFP4_MOE)", "--recipe", "Q3", "-o", "x");

    /* the presets: gpt-oss-120b's numbers, its experts MXFP4 and every other matrix Q8_0 (2880 = 90 blocks of 32) */
    ck_assert_msg(parse(&c, &err, "--shape", "gpt-oss-120b", "--layers", "2", "-o", "x.gguf", NULL) == 0, "%s",
                  err.msg);
    ck_assert(c.n_embd == 2880 && c.n_head == 64 && c.n_head_kv == 8 && c.head_dim == 64 && c.n_expert == 128 &&
              c.n_expert_used == 4 && c.n_ff_exp == 2880 && c.n_vocab == 201088 && c.n_swa == 128);
    ck_assert_int_eq(c.recipe, MKMODEL_RECIPE_MXFP4_MOE);
    mkmodel_plan_t *p = plan_of(&c, c.n_vocab);
    ck_assert_int_eq(type_of(p, "blk.%lld.ffn_gate_exps.weight", 1), GUILD_TYPE_MXFP4);
    ck_assert_int_eq(type_of(p, "blk.%lld.ffn_down_exps.weight", 1), GUILD_TYPE_MXFP4);
    ck_assert_int_eq(type_of(p, "blk.%lld.attn_q.weight", 1), GUILD_TYPE_Q8_0);
    ck_assert_int_eq(type_of(p, "blk.%lld.ffn_gate_inp.weight", 1), GUILD_TYPE_F32);
    ck_assert_int_eq(type_of(p, "blk.%lld.ffn_gate_exps.bias", 1), GUILD_TYPE_F32);
    ck_assert_int_eq(type_of(p, "blk.%lld.attn_sinks.weight", 1), GUILD_TYPE_F32);
    ck_assert_int_eq(type_of(p, "blk.%lld.post_attention_norm.weight", 1), GUILD_TYPE_F32);
    ck_assert_int_eq(find(p, "output.weight")->type, GUILD_TYPE_Q8_0);
    ck_assert_int_eq(mkmodel_plan_n_fallbacks(p), 0);
    ck_assert_uint_eq(mkmodel_recipe_file_type(&c), 38);
    mkmodel_plan_destroy(&p);
    ck_assert_int_eq(mkmodel_preset_apply(&c, "gpt-oss-20b", &err), 0);
    ck_assert(c.n_layer == 24 && c.n_expert == 32 && c.n_swa == 128 && c.yarn_factor == 32.0);
    c.threads = 1;
    strcpy(c.out_path, "x");
    p = plan_of(&c, c.n_vocab);
    /* gpt-oss-20b's MXFP4 file is ~12-13 GB (llama.cpp's: 12.1 GB) */
    uint64_t bytes = mkmodel_plan_data_bytes(p);
    ck_assert_msg(bytes > 11500000000ull && bytes < 13500000000ull, "%llu", (unsigned long long)bytes);
    mkmodel_plan_destroy(&p);

    /* a small file loads as gpt-oss, its keys read back */
    make_tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s/oss.gguf", tmpdir);
    const char *flags[] = {"--arch", "gpt-oss", "--layers", "2", "--embd", "64", "--heads", "4", "--kv-heads", "2",
                           "--head-dim", "16", "--experts", "8", "--experts-used", "2", "--expert-ff", "32", "--vocab",
                           "300", "--ctx", "128", "--sliding-window", "16", "--type", "Q8_0", "--threads", "2", NULL};
    write_model(path, flags);
    check_file(path, flags);
    model_t *m = NULL;
    ck_assert_msg(model_new(&m, path, &err) == 0, "%s", err.msg);
    const model_config_t *mc = model_config(m);
    ck_assert_int_eq(mc->arch, MODEL_ARCH_GPT_OSS);
    ck_assert_int_eq(mc->n_swa, 16);
    ck_assert_int_eq(mc->rope_scaling, MODEL_ROPE_SCALING_YARN);
    ck_assert(mc->rope_freq_scale == 1.0f / 32 && mc->rope_n_ctx_orig == 4096);
    ck_assert_int_eq(model_layer_window(mc, 0), 16);
    ck_assert_int_eq(model_layer_window(mc, 1), 0);
    model_destroy(&m);
    remove_tmpdir();
}
END_TEST

START_TEST(test_recipe_fallbacks)
{
    mkmodel_config_t c;
    guild_err_t err;
    /* Qwen1.5-MoE's experts of 1408 (not whole 256-blocks): ffn_down_exps Q4_K -> Q5_0 and Q6_K -> Q8_0. */
    ck_assert_int_eq(mkmodel_preset_apply(&c, "qwen1.5-moe-a2.7b", &err), 0);
    c.n_layer = 8;
    c.threads = 1;
    strcpy(c.out_path, "x");
    mkmodel_plan_t *p = plan_of(&c, 1000);
    ck_assert_int_eq(type_of(p, "blk.%lld.ffn_down_exps.weight", 0), GUILD_TYPE_Q8_0);     /* wanted Q6_K */
    ck_assert_int_eq(type_of(p, "blk.%lld.ffn_down_exps.weight", 1), GUILD_TYPE_Q5_0);     /* wanted Q4_K */
    ck_assert_int_eq(type_of(p, "blk.%lld.ffn_gate_exps.weight", 1), GUILD_TYPE_Q4_K);
    ck_assert_int_eq(type_of(p, "blk.%lld.ffn_down_shexp.weight", 1), GUILD_TYPE_Q4_K); /* 5632 = 22 * 256 */
    ck_assert_int_eq(type_of(p, "blk.%lld.ffn_gate_inp_shexp.weight", 1), GUILD_TYPE_F32);
    ck_assert_int_eq(type_of(p, "blk.%lld.attn_q.bias", 1), GUILD_TYPE_F32);
    ck_assert_int_eq(mkmodel_plan_n_fallbacks(p), 8);
    mkmodel_plan_destroy(&p);

    /* IQ types fall back to IQ4_NL, then F16 when even 32-blocks do not fit. */
    ck_assert_int_eq(mkmodel_preset_apply(&c, "demo", &err), 0);
    c.recipe = MKMODEL_RECIPE_NONE;
    c.type = GUILD_TYPE_IQ2_XXS;
    c.n_ff_exp = 96;
    p = plan_of(&c, 1000);
    ck_assert_int_eq(type_of(p, "blk.%lld.ffn_down_exps.weight", 0), GUILD_TYPE_IQ4_NL);
    ck_assert_int_eq(type_of(p, "blk.%lld.ffn_up_exps.weight", 0), GUILD_TYPE_IQ2_XXS);
    mkmodel_plan_destroy(&p);
    c.n_ff_exp = 40;
    p = plan_of(&c, 1000);
    ck_assert_int_eq(type_of(p, "blk.%lld.ffn_down_exps.weight", 0), GUILD_TYPE_F16);
    mkmodel_plan_destroy(&p);

    /* 32-element types have no fallback in llama.cpp: a clear error naming the tensor. */
    c.type = GUILD_TYPE_Q8_0;
    ck_assert_int_eq(mkmodel_config_validate(&c, &err), 0);
    ck_assert_int_eq(mkmodel_plan_new(&p, &c, 1000, &err), -1);
    ck_assert_ptr_null(p);
    ck_assert_msg(strstr(err.msg, "blk.0.ffn_down_exps.weight") && strstr(err.msg, "q8_0"), "%s", err.msg);
}
END_TEST

/* --- element statistics ----------------------------------------------------------------------------------- */

/* Fills rows of a tensor of `type` with intended std and measures the dequantized mean and std. */
static void measure(guild_type_t type, float mean, float std, double *m, double *s)
{
    enum { N = 512, ROWS = 48 };
    mkmodel_tensor_t t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "blk.0.test_%s.weight", quant_type_info(type)->name);
    t.type = t.wanted = type;
    t.n_dims = 2;
    t.ne[0] = N;
    t.ne[1] = ROWS;
    t.ne[2] = t.ne[3] = 1;
    t.mean = mean;
    t.std = std;
    t.n_rows = ROWS;
    guild_err_t err;
    ck_assert_int_eq(quant_row_bytes(type, N, &t.row_bytes, &err), 0);
    uint8_t *data = malloc(t.row_bytes * ROWS);
    float scratch[N], row[N];
    ck_assert_msg(mkmodel_fill_rows(&t, 42, 0, ROWS, data, scratch, &err) == 0, "%s", err.msg);
    double sum = 0, sum2 = 0;
    for (int r = 0; r < ROWS; r++) {
        quant_dequantize_row_ref(type, data + r * t.row_bytes, row, N);
        for (int i = 0; i < N; i++) {
            ck_assert(isfinite(row[i]));
            sum += row[i];
            sum2 += (double)row[i] * row[i];
        }
    }
    *m = sum / (N * ROWS);
    *s = sqrt(sum2 / (N * ROWS) - *m * *m);
    free(data);
}

START_TEST(test_stats_every_type)
{
    /* Tolerance on the std: quantizers that minimise the error shrink the spread a little, the coarsest the
     * most; the IQ blocks without a quantizer are exact up to sampling (~1.5% at 24k elements). */
    static const struct {
        guild_type_t type;
        double std_tol;
    } types[] = {
        {GUILD_TYPE_F32, 0.03},    {GUILD_TYPE_F16, 0.03},    {GUILD_TYPE_BF16, 0.03},   {GUILD_TYPE_Q8_0, 0.03},
        {GUILD_TYPE_Q4_0, 0.06},   {GUILD_TYPE_Q4_1, 0.06},   {GUILD_TYPE_Q5_0, 0.05},   {GUILD_TYPE_Q5_1, 0.05},
        {GUILD_TYPE_Q2_K, 0.15},   {GUILD_TYPE_Q3_K, 0.10},   {GUILD_TYPE_Q4_K, 0.06},   {GUILD_TYPE_Q5_K, 0.05},
        {GUILD_TYPE_Q6_K, 0.04},   {GUILD_TYPE_IQ4_NL, 0.06}, {GUILD_TYPE_IQ4_XS, 0.06}, {GUILD_TYPE_MXFP4, 0.10},
        {GUILD_TYPE_IQ2_XXS, 0.05}, {GUILD_TYPE_IQ2_XS, 0.05}, {GUILD_TYPE_IQ2_S, 0.05}, {GUILD_TYPE_IQ3_XXS, 0.05},
        {GUILD_TYPE_IQ3_S, 0.05},  {GUILD_TYPE_IQ1_S, 0.05},  {GUILD_TYPE_IQ1_M, 0.05},
    };
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        const float want = 0.02f; /* 1/sqrt(2500): a typical fan-in scale */
        double m, s;
        measure(types[i].type, 0, want, &m, &s);
        ck_assert_msg(fabs(s - want) <= types[i].std_tol * want, "%s: std %g, intended %g",
                      quant_type_info(types[i].type)->name, s, want);
        ck_assert_msg(fabs(m) <= 0.02 * want, "%s: mean %g (std %g)", quant_type_info(types[i].type)->name, m, s);
    }
    /* Norm weights: mean 1 with a small spread. */
    double m, s;
    measure(GUILD_TYPE_F32, 1.0f, 0.05f, &m, &s);
    ck_assert(fabs(m - 1.0) < 0.01 && fabs(s - 0.05) < 0.005);
}
END_TEST

START_TEST(test_rng_gauss)
{
    mkmodel_rng_t r;
    mkmodel_rng_init(&r, 1, mkmodel_rng_hash("x"), 0);
    double s = 0, s2 = 0, s4 = 0;
    const int n = 200000;
    for (int i = 0; i < n; i++) {
        double g = mkmodel_rng_gauss(&r);
        ck_assert(g >= -6 && g <= 6);
        s += g;
        s2 += g * g;
        s4 += g * g * g * g;
    }
    ck_assert(fabs(s / n) < 0.01);
    ck_assert(fabs(s2 / n - 1) < 0.01);
    ck_assert(fabs(s4 / n - 2.9) < 0.1); /* Irwin-Hall(12) kurtosis: 3 - 1.2/12 */
    /* Streams of neighbouring rows differ. */
    mkmodel_rng_t a, b;
    mkmodel_rng_init(&a, 1, 7, 0);
    mkmodel_rng_init(&b, 1, 7, 1);
    ck_assert_uint_ne(mkmodel_rng_next(&a), mkmodel_rng_next(&b));
}
END_TEST

/* --- vocabulary ------------------------------------------------------------------------------------------- */

START_TEST(test_vocab_builtin)
{
    mkmodel_vocab_t *v;
    guild_err_t err;
    ck_assert_int_eq(mkmodel_vocab_new(&v, 100, &err), -1);
    ck_assert(strstr(err.msg, "at least 259"));
    ck_assert_int_eq(mkmodel_vocab_new(&v, 1000, &err), 0);
    ck_assert_int_eq(mkmodel_vocab_n_tokens(v), 1000);
    int64_t merges = mkmodel_vocab_n_merges(v);
    ck_assert_int_ge(merges, 400);
    ck_assert_int_eq(merges, mkmodel_vocab_max_merges());
    ck_assert_str_eq(mkmodel_vocab_token(v, mkmodel_vocab_endoftext(v)), "<|endoftext|>");
    ck_assert_str_eq(mkmodel_vocab_token(v, mkmodel_vocab_im_start(v)), "<|im_start|>");
    ck_assert_str_eq(mkmodel_vocab_token(v, mkmodel_vocab_im_end(v)), "<|im_end|>");
    ck_assert_int_eq(mkmodel_vocab_token_type(v, mkmodel_vocab_im_end(v)), MKMODEL_TOKEN_CONTROL);
    ck_assert_str_eq(mkmodel_vocab_token(v, 999), "[PAD999]");
    ck_assert_int_eq(mkmodel_vocab_token_type(v, 999), MKMODEL_TOKEN_UNUSED);
    ck_assert_str_eq(mkmodel_vocab_token(v, ' '), "\xc4\xa0"); /* GPT-2's U+0120 for the space byte */
    ck_assert_str_eq(mkmodel_vocab_token(v, 'a'), "a");
    /* Texts are unique (a tokenizer maps text to id). */
    for (int64_t i = 0; i < 1000; i++)
        for (int64_t j = i + 1; j < 1000; j++)
            ck_assert_str_ne(mkmodel_vocab_token(v, i), mkmodel_vocab_token(v, j));
    mkmodel_vocab_destroy(&v);
    ck_assert_ptr_null(v);
    /* A small size keeps a prefix of the merges. */
    ck_assert_int_eq(mkmodel_vocab_new(&v, 300, &err), 0);
    ck_assert_int_le(mkmodel_vocab_n_merges(v), 300 - 259);
    ck_assert_int_ge(mkmodel_vocab_n_merges(v), 300 - 259);
    ck_assert_str_eq(mkmodel_vocab_token(v, 299), "<|im_end|>");
    mkmodel_vocab_destroy(&v);
}
END_TEST

/* --- whole files ------------------------------------------------------------------------------------------ */

static void check_u32(const gguf_t *g, const char *key, int64_t want)
{
    int64_t v;
    guild_err_t err;
    ck_assert_msg(gguf_get_int(g, key, &v, &err) == 0, "%s", err.msg);
    ck_assert_msg(v == want, "%s = %lld, expected %lld", key, (long long)v, (long long)want);
}

/* Reads a generated file back: every planned tensor with its shape and type, the metadata keys. */
static void check_file(const char *path, const char *const *flags)
{
    const char *argv[64] = {"guild-mkmodel", "-o", path};
    int argc = 3;
    for (const char *const *f = flags; *f; f++)
        argv[argc++] = *f;
    mkmodel_config_t c;
    guild_err_t err;
    bool quiet;
    ck_assert_int_eq(mkmodel_cli_parse(argc, (char **)argv, &c, &quiet, &err), 0);
    gguf_t *g;
    ck_assert_msg(gguf_new(&g, path, &err) == 0, "%s", err.msg);
    mkmodel_plan_t *p = plan_of(&c, c.n_vocab);
    ck_assert_int_eq(gguf_n_tensors(g), mkmodel_plan_n_tensors(p));
    for (int64_t i = 0; i < mkmodel_plan_n_tensors(p); i++) {
        const mkmodel_tensor_t *t = mkmodel_plan_tensor(p, i);
        const gguf_tensor_t *gt = gguf_find_tensor(g, t->name);
        ck_assert_msg(gt != NULL, "%s missing", t->name);
        ck_assert_uint_eq(gt->type, t->type);
        ck_assert_uint_eq(gt->n_dims, t->n_dims);
        for (int d = 0; d < 4; d++)
            ck_assert_uint_eq(gt->ne[d], (uint64_t)t->ne[d]);
    }
    const char *arch = mkmodel_arch_gguf_name(c.arch);
    const char *s;
    size_t len;
    ck_assert_int_eq(gguf_get_str(g, "general.architecture", &s, &len, &err), 0);
    ck_assert(len == strlen(arch) && !memcmp(s, arch, len));
    ck_assert_int_eq(gguf_get_str(g, "general.name", &s, &len, &err), 0);
    check_u32(g, "general.file_type", mkmodel_recipe_file_type(&c));
    char k[128];
#define KEY(x) (snprintf(k, sizeof k, "%s." x, arch), k)
    check_u32(g, KEY("block_count"), c.n_layer + c.n_nextn);
    check_u32(g, KEY("embedding_length"), c.n_embd);
    check_u32(g, KEY("context_length"), c.n_ctx);
    check_u32(g, KEY("attention.head_count"), c.n_head);
    const int64_t rot = c.n_rot ? c.n_rot : mkmodel_arch_default_rot(c.arch, c.head_dim);
    if (c.arch == MKMODEL_ARCH_DEEPSEEK2) { /* DeepseekV2Model's MLA keys: the absorbed form's MQA view */
        check_u32(g, KEY("attention.head_count_kv"), 1);
        check_u32(g, KEY("attention.key_length"), c.n_lora_kv + rot);
        check_u32(g, KEY("attention.value_length"), c.n_lora_kv);
        check_u32(g, KEY("attention.key_length_mla"), c.head_dim);
        check_u32(g, KEY("attention.value_length_mla"), c.head_dim_v);
        check_u32(g, KEY("attention.kv_lora_rank"), c.n_lora_kv);
        check_u32(g, KEY("attention.q_lora_rank"), c.n_lora_q);
        check_u32(g, KEY("leading_dense_block_count"), c.n_dense_lead);
        check_u32(g, KEY("expert_shared_count"), c.n_ff_shexp / c.n_ff_exp);
        check_u32(g, KEY("expert_gating_func"), c.gating_softmax ? 1 : 2);
        ck_assert_int_eq(gguf_find_tensor(g, "blk.1.attn_q_a.weight") != NULL, c.n_lora_q > 0);
        ck_assert_int_eq(gguf_find_tensor(g, "blk.1.attn_q.weight") != NULL, c.n_lora_q == 0);
        ck_assert_ptr_nonnull(gguf_find_tensor(g, "blk.1.attn_kv_a_mqa.weight"));
        ck_assert_ptr_nonnull(gguf_find_tensor(g, "blk.1.attn_k_b.weight"));
        ck_assert_ptr_nonnull(gguf_find_tensor(g, "blk.1.attn_v_b.weight"));
        ck_assert_ptr_null(gguf_find_tensor(g, "blk.1.attn_kv_b.weight"));
        ck_assert_int_eq(gguf_find_tensor(g, "blk.1.exp_probs_b.bias") != NULL, !c.gating_softmax);
        ck_assert_ptr_nonnull(gguf_find_tensor(g, "blk.0.ffn_up.weight"));
        ck_assert_ptr_nonnull(gguf_find_tensor(g, "blk.1.ffn_down_shexp.weight"));
        if (c.yarn_factor > 0) {
            double lm;
            ck_assert_int_eq(gguf_get_float(g, KEY("rope.scaling.yarn_log_multiplier"), &lm, &err), 0);
            ck_assert(fabs(lm - 0.1 * c.yarn_mscale_all) < 1e-6);
        }
    } else {
        check_u32(g, KEY("attention.head_count_kv"), c.n_head_kv);
        check_u32(g, KEY("attention.key_length"), c.head_dim);
        check_u32(g, KEY("attention.value_length"), c.head_dim);
    }
    check_u32(g, KEY("rope.dimension_count"), rot);
    if (c.arch == MKMODEL_ARCH_QWEN35MOE) { /* the M-RoPE sections, every rotated pair in the first three */
        int64_t sec[4];
        ck_assert_int_eq(gguf_arr_copy_i64(g, KEY("rope.dimension_sections"), sec, 4, &err), 0);
        ck_assert(sec[0] == (rot / 2 + 2) / 3 && sec[1] == (rot / 2 + 1) / 3 && sec[2] == rot / 2 / 3 && sec[3] == 0);
    }
    if (c.arch == MKMODEL_ARCH_QWEN3NEXT || c.arch == MKMODEL_ARCH_QWEN35MOE) {
        check_u32(g, KEY("full_attention_interval"), c.full_attn_interval);
        check_u32(g, KEY("ssm.conv_kernel"), c.ssm_conv);
        check_u32(g, KEY("ssm.state_size"), c.ssm_state);
        check_u32(g, KEY("ssm.group_count"), c.ssm_groups);
        check_u32(g, KEY("ssm.time_step_rank"), c.ssm_heads);
        check_u32(g, KEY("ssm.inner_size"), c.ssm_heads * c.ssm_state);
        check_u32(g, KEY("expert_shared_feed_forward_length"), c.n_ff_shexp);
    }
    check_u32(g, KEY("expert_count"), c.n_expert);
    check_u32(g, KEY("expert_used_count"), c.n_expert_used);
    check_u32(g, KEY("vocab_size"), c.n_vocab);
    bool ff_is_expert = c.arch == MKMODEL_ARCH_MIXTRAL || c.arch == MKMODEL_ARCH_OLMOE;
    check_u32(g, KEY("feed_forward_length"), ff_is_expert ? c.n_ff_exp : c.n_ff);
    if (!ff_is_expert)
        check_u32(g, KEY("expert_feed_forward_length"), c.n_ff_exp);
    if (c.arch == MKMODEL_ARCH_GPT_OSS)
        check_u32(g, KEY("attention.sliding_window"), c.n_swa);
    if (c.arch == MKMODEL_ARCH_QWEN2MOE)
        check_u32(g, KEY("expert_shared_feed_forward_length"), c.n_ff_shexp);
    if (c.arch == MKMODEL_ARCH_GLM4MOE) { /* the keys glm4moe's converter writes */
        check_u32(g, KEY("leading_dense_block_count"), c.n_dense_lead);
        check_u32(g, KEY("nextn_predict_layers"), c.n_nextn);
        check_u32(g, KEY("expert_shared_count"), c.n_ff_shexp / c.n_ff_exp);
        check_u32(g, KEY("expert_gating_func"), 2);
        bool b;
        ck_assert_int_eq(gguf_get_bool(g, KEY("expert_weights_norm"), &b, &err), 0);
        ck_assert(b);
        double ws;
        ck_assert_int_eq(gguf_get_float(g, KEY("expert_weights_scale"), &ws, &err), 0);
        ck_assert(ws == c.weights_scale);
        if (c.n_expert_groups > 1) {
            check_u32(g, KEY("expert_group_count"), c.n_expert_groups);
            check_u32(g, KEY("expert_group_used_count"), c.n_group_used);
        }
        /* the tensors llama.cpp's glm4moe loads (the plan's are compared above) */
        ck_assert_ptr_nonnull(gguf_find_tensor(g, "blk.0.ffn_up.weight"));
        ck_assert_ptr_nonnull(gguf_find_tensor(g, "blk.1.post_attention_norm.weight"));
        ck_assert_ptr_nonnull(gguf_find_tensor(g, "blk.1.exp_probs_b.bias"));
        ck_assert_ptr_nonnull(gguf_find_tensor(g, "blk.1.ffn_down_shexp.weight"));
        ck_assert_ptr_null(gguf_find_tensor(g, "blk.1.ffn_gate_inp_shexp.weight"));
        ck_assert_int_eq(gguf_find_tensor(g, "blk.1.attn_q_norm.weight") != NULL, c.qk_norm);
        ck_assert_ptr_null(gguf_find_tensor(g, "blk.0.ffn_gate_inp.weight"));
        if (c.qk_norm) { /* per head, as llama.cpp's loader asks */
            const gguf_tensor_t *qn = gguf_find_tensor(g, "blk.1.attn_q_norm.weight");
            ck_assert(qn->n_dims == 1 && qn->ne[0] == (uint64_t)c.head_dim);
        }
        /* an MTP layer holds what converted GLM-4.5 files do: a whole block plus nextn.* with its own
         * embedding and LM head [n_embd, n_vocab] */
        static const struct { const char *name; uint32_t n_dims; int ne1; } nextn[] = {
            {"eh_proj", 2, 0}, {"embed_tokens", 2, 1}, {"enorm", 1, 0}, {"hnorm", 1, 0},
            {"shared_head_head", 2, 1}, {"shared_head_norm", 1, 0}};
        for (size_t i = 0; i < sizeof nextn / sizeof *nextn; i++) {
            snprintf(k, sizeof k, "blk.%lld.nextn.%s.weight", (long long)c.n_layer, nextn[i].name);
            const gguf_tensor_t *nt = gguf_find_tensor(g, k);
            ck_assert_msg((nt != NULL) == (c.n_nextn > 0), "%s", k);
            if (!nt)
                continue;
            ck_assert_uint_eq(nt->n_dims, nextn[i].n_dims);
            ck_assert_uint_eq(nt->ne[0], (uint64_t)(i == 0 ? 2 * c.n_embd : c.n_embd));
            if (nt->n_dims == 2)
                ck_assert_uint_eq(nt->ne[1], (uint64_t)(nextn[i].ne1 ? c.n_vocab : c.n_embd));
        }
        snprintf(k, sizeof k, "blk.%lld.ffn_gate_exps.weight", (long long)c.n_layer);
        ck_assert_int_eq(gguf_find_tensor(g, k) != NULL, c.n_nextn > 0);
    }
    double f;
    ck_assert_int_eq(gguf_get_float(g, KEY("attention.layer_norm_rms_epsilon"), &f, &err), 0);
    ck_assert(fabs(f - c.rms_eps) < 1e-9);
    ck_assert_int_eq(gguf_get_float(g, KEY("rope.freq_base"), &f, &err), 0);
    ck_assert(fabs(f - c.rope_freq_base) < 1e-3 * c.rope_freq_base);
#undef KEY
    ck_assert_int_eq(gguf_get_str(g, "tokenizer.ggml.model", &s, &len, &err), 0);
    ck_assert(len == 4 && !memcmp(s, "gpt2", 4));
    ck_assert_int_eq(gguf_get_str(g, "tokenizer.ggml.pre", &s, &len, &err), 0);
    gguf_value_type_t et;
    uint64_t n;
    ck_assert_int_eq(gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, &err), 0);
    ck_assert_uint_eq(n, (uint64_t)c.n_vocab);
    ck_assert_int_eq(gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &n, &err), 0);
    ck_assert_uint_eq(n, (uint64_t)c.n_vocab);
    ck_assert_int_eq(gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n, &err), 0);
    ck_assert_int_ge(gguf_find_key(g, "tokenizer.ggml.eos_token_id"), 0);
    ck_assert_int_ge(gguf_find_key(g, "tokenizer.ggml.bos_token_id"), 0);
    mkmodel_plan_destroy(&p);
    gguf_destroy(&g);
}

START_TEST(test_file_every_arch)
{
    static const char *archs[] = {"qwen3moe", "qwen2moe", "mixtral", "olmoe"};
    make_tmpdir();
    for (int a = 0; a < 4; a++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s.gguf", tmpdir, archs[a]);
        const char *flags[] = {"--arch", archs[a], "--layers", "2", "--embd", "64", "--heads", "4", "--kv-heads",
                               "2", "--head-dim", "16", "--experts", "8", "--experts-used", "2", "--expert-ff",
                               "32", "--ff", a == 2 || a == 3 ? "32" : "96", "--vocab", "300", "--ctx", "128",
                               "--type", a % 2 ? "Q8_0" : "F16", "--threads", "2", NULL};
        write_model(path, flags);
        check_file(path, flags);
    }
    /* Q4_K_M with 256-wide rows, and IQ blocks, also read back. */
    char path[512];
    snprintf(path, sizeof path, "%s/q4km.gguf", tmpdir);
    const char *q4km[] = {"--layers", "2", "--embd", "256", "--experts", "4", "--experts-used", "2", "--expert-ff",
                          "256", "--vocab", "400", "--recipe", "Q4_K_M", "--threads", "2", NULL};
    write_model(path, q4km);
    check_file(path, q4km);
    const char *iq[] = {"--layers", "1", "--embd", "256", "--experts", "2", "--experts-used", "1", "--expert-ff",
                        "256", "--vocab", "300", "--type", "IQ2_XS", "--threads", "2", NULL};
    write_model(path, iq);
    check_file(path, iq);
    /* glm4moe with an MTP layer, q/k norms and expert groups (Guild loading it: tests/check_model, tests/ref) */
    const char *glm[] = {"--arch", "glm4moe", "--layers", "3", "--embd", "64", "--heads", "4", "--kv-heads", "2",
                         "--head-dim", "16", "--experts", "8", "--experts-used", "2", "--expert-ff", "32",
                         "--shared-ff", "64", "--ff", "96", "--nextn", "1", "--qk-norm", "--expert-groups", "4",
                         "--groups-used", "2", "--weights-scale", "2.5", "--vocab", "300", "--type", "Q8_0",
                         "--threads", "2", NULL};
    write_model(path, glm);
    check_file(path, glm);
    /* deepseek2 with a q LoRA, groups, yarn and an MTP layer; as V2-Lite (no q LoRA, softmax gating) */
    const char *ds[] = {"--arch", "deepseek2", "--layers", "3", "--embd", "64", "--heads", "4", "--head-dim", "64",
                        "--experts", "8", "--experts-used", "2", "--expert-ff", "32", "--ff", "96", "--nextn", "1",
                        "--expert-groups", "4", "--groups-used", "2", "--yarn-factor", "4", "--vocab", "300",
                        "--type", "Q8_0", "--threads", "2", NULL};
    write_model(path, ds);
    check_file(path, ds);
    const char *lite[] = {"--arch", "deepseek2", "--layers", "2", "--embd", "64", "--heads", "4", "--head-dim", "64",
                          "--experts", "8", "--experts-used", "2", "--expert-ff", "32", "--q-lora", "0", "--gating",
                          "softmax", "--vocab", "300", "--type", "F16", "--threads", "2", NULL};
    write_model(path, lite);
    check_file(path, lite);
    remove_tmpdir();
}
END_TEST

/* Writes the model of `flags` plus --seed seed --threads threads into path and returns its bytes. */
static uint8_t *model_bytes(const char *path, const char *const *flags, const char *seed, const char *threads,
                            size_t *size)
{
    const char *f[64];
    int n = 0;
    for (; flags[n]; n++)
        f[n] = flags[n];
    f[n++] = "--seed", f[n++] = seed, f[n++] = "--threads", f[n++] = threads, f[n] = NULL;
    write_model(path, f);
    return read_file(path, size);
}

START_TEST(test_file_deterministic)
{
    make_tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s/d.gguf", tmpdir);
    /* F32 embeddings of 9000 x 256 are 9 MB: each is cut into several jobs, which threads share. */
    const char *f32[] = {"--arch", "qwen2moe", "--layers", "2", "--embd", "256", "--experts", "8", "--experts-used",
                         "2", "--expert-ff", "64", "--shared-ff", "64", "--vocab", "9000", "--type", "F32", NULL};
    size_t na, nb, nc;
    uint8_t *a = model_bytes(path, f32, "5", "1", &na), *b = model_bytes(path, f32, "5", "3", &nb),
            *c = model_bytes(path, f32, "6", "2", &nc);
    ck_assert_uint_eq(na, nb);
    ck_assert_msg(!memcmp(a, b, na), "--threads 1 and --threads 3 wrote different bytes");
    ck_assert_uint_eq(na, nc);
    ck_assert_msg(memcmp(a, c, na), "--seed 5 and --seed 6 wrote the same bytes");
    free(a);
    free(b);
    free(c);
    /* Quantized (Q4_K_M mix): the same seed twice, with other thread counts, gives the same bytes. */
    const char *q[] = {"--layers", "1", "--embd", "256", "--experts", "4", "--experts-used", "2", "--expert-ff",
                       "256", "--vocab", "300", "--recipe", "Q4_K_M", NULL};
    a = model_bytes(path, q, "9", "1", &na);
    b = model_bytes(path, q, "9", "2", &nb);
    ck_assert(na == nb && !memcmp(a, b, na));
    free(a);
    free(b);
    remove_tmpdir();
}
END_TEST

/* The built-in vocabulary through Guild's tokenizer: English becomes multi-byte tokens, and decodes back. */
START_TEST(test_file_tokenizes_english)
{
    make_tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s/v.gguf", tmpdir);
    const char *flags[] = {"--layers", "1", "--embd", "64", "--heads", "2", "--kv-heads", "1", "--head-dim", "32",
                           "--experts", "2", "--experts-used", "1", "--expert-ff", "32", "--type", "F32", NULL};
    write_model(path, flags);
    gguf_t *g;
    tok_t *t;
    guild_err_t err;
    ck_assert_msg(gguf_new(&g, path, &err) == 0, "%s", err.msg);
    ck_assert_msg(tok_new_from_gguf(&t, g, &err) == 0, "%s", err.msg);
    const char *text = "The people in the town were talking about the weather and the river, as they always do.";
    tok_ids_t ids;
    tok_ids_init(&ids);
    ck_assert_int_eq(tok_encode(t, text, strlen(text), 0, &ids, &err), 0);
    ck_assert_msg(ids.n * 3 < strlen(text), "%zu tokens for %zu bytes", ids.n, strlen(text));
    char *back;
    size_t back_len;
    ck_assert_int_eq(tok_decode(t, ids.v, ids.n, 0, &back, &back_len, &err), 0);
    ck_assert_str_eq(back, text);
    free(back);
    ck_assert_int_eq(tok_eos(t), tok_find(t, "<|im_end|>", 10));
    tok_ids_fini(&ids);
    tok_destroy(&t);
    gguf_destroy(&g);
    remove_tmpdir();
}
END_TEST

/* --- --fill pool ----------------------------------------------------------------------------------------- */

START_TEST(test_pool_rows)
{
    mkmodel_tensor_t t;
    memset(&t, 0, sizeof t);
    guild_err_t err;
    /* Q4_K rows of 256 (one block): 4096 rows from 1 MiB on; 2048-wide rows (8 blocks): 512 rows. */
    t.type = GUILD_TYPE_Q4_K, t.ne[0] = 256, t.n_rows = 8000;
    ck_assert_int_eq(quant_row_bytes(t.type, 256, &t.row_bytes, &err), 0);
    ck_assert_uint_eq(mkmodel_pool_rows(&t), MKMODEL_POOL_BLOCKS);
    t.n_rows = MKMODEL_POOL_MIN_BYTES / t.row_bytes; /* just under 1 MiB */
    ck_assert_uint_eq(mkmodel_pool_rows(&t), 0);
    t.n_rows++;
    ck_assert_uint_eq(mkmodel_pool_rows(&t), MKMODEL_POOL_BLOCKS);
    t.ne[0] = 2048, t.n_rows = 1000;
    ck_assert_int_eq(quant_row_bytes(t.type, 2048, &t.row_bytes, &err), 0);
    ck_assert_uint_eq(mkmodel_pool_rows(&t), MKMODEL_POOL_BLOCKS / 8);
    /* 3 blocks a row: the pool rounds up to whole rows. */
    t.ne[0] = 768, t.n_rows = 10000;
    ck_assert_int_eq(quant_row_bytes(t.type, 768, &t.row_bytes, &err), 0);
    ck_assert_uint_eq(mkmodel_pool_rows(&t), (MKMODEL_POOL_BLOCKS + 2) / 3);
    /* Huge rows: a one-row pool, and a tensor no larger than its pool is all pool. */
    t.ne[0] = 256 * 8192, t.n_rows = 3;
    ck_assert_int_eq(quant_row_bytes(t.type, (uint64_t)t.ne[0], &t.row_bytes, &err), 0);
    ck_assert_uint_eq(mkmodel_pool_rows(&t), 1);
    t.ne[0] = 256 * (MKMODEL_POOL_BLOCKS - 1), t.n_rows = 2;
    ck_assert_int_eq(quant_row_bytes(t.type, (uint64_t)t.ne[0], &t.row_bytes, &err), 0);
    ck_assert_uint_eq(mkmodel_pool_rows(&t), 2);
    /* Float types are never pooled. */
    t.type = GUILD_TYPE_F16, t.ne[0] = 4096, t.n_rows = 4096;
    ck_assert_int_eq(quant_row_bytes(t.type, 4096, &t.row_bytes, &err), 0);
    ck_assert_uint_eq(mkmodel_pool_rows(&t), 0);
}
END_TEST

static const uint8_t *sort_base;
static size_t sort_size;

static int cmp_block(const void *a, const void *b)
{
    return memcmp(sort_base + *(const uint32_t *)a * sort_size, sort_base + *(const uint32_t *)b * sort_size,
                  sort_size);
}

static int cmp_key(const void *key, const void *elem)
{
    return memcmp(key, sort_base + *(const uint32_t *)elem * sort_size, sort_size);
}

/* Standard deviation of the dequantized elements of n_rows rows of t at data. */
static double dequant_std(const mkmodel_tensor_t *t, const uint8_t *data, uint64_t n_rows)
{
    float *row = malloc((size_t)t->ne[0] * sizeof *row);
    double sum = 0, sum2 = 0;
    uint64_t n_bad = 0; /* counted, not asserted per element: each passing ck_assert costs a write */
    for (uint64_t r = 0; r < n_rows; r++) {
        quant_dequantize_row_ref(t->type, data + r * t->row_bytes, row, t->ne[0]);
        for (int64_t i = 0; i < t->ne[0]; i++) {
            n_bad += !isfinite(row[i]);
            sum += row[i];
            sum2 += (double)row[i] * row[i];
        }
    }
    free(row);
    ck_assert_msg(n_bad == 0, "%s: %llu elements not finite", t->name, (unsigned long long)n_bad);
    double n = (double)n_rows * (double)t->ne[0], m = sum / n;
    return sqrt(sum2 / n - m * m);
}

/* A pooled tensor as written: its first pool rows are the exact rows, every block after them is one of the
 * pool's blocks (found by value, not by re-deriving the choice), the blocks used cover most of the pool and
 * vary from row to row, and the elements keep the pool's spread. */
static void check_pooled(const mkmodel_tensor_t *t, uint64_t seed, const uint8_t *data)
{
    const uint64_t rows = mkmodel_pool_rows(t);
    const quant_type_info_t *info = quant_type_info(t->type);
    const uint64_t per_row = (uint64_t)t->ne[0] / info->block_elems, n_pool = rows * per_row;
    ck_assert_msg(t->n_rows > rows, "%s: the test needs rows beyond the pool", t->name);
    uint8_t *pool = malloc(rows * t->row_bytes);
    float *scratch = malloc((size_t)t->ne[0] * sizeof *scratch);
    guild_err_t err;
    ck_assert_msg(mkmodel_fill_rows(t, seed, 0, rows, pool, scratch, &err) == 0, "%s", err.msg);
    ck_assert_msg(!memcmp(pool, data, rows * t->row_bytes), "%s: the pool rows differ from exact mode", t->name);
    uint32_t *order = malloc(n_pool * sizeof *order);
    uint8_t *used = calloc(n_pool, 1);
    for (uint64_t i = 0; i < n_pool; i++)
        order[i] = (uint32_t)i;
    sort_base = pool, sort_size = info->block_bytes;
    qsort(order, n_pool, sizeof *order, cmp_block);
    uint64_t n_used = 0, same_as_previous = 0;
    for (uint64_t r = rows; r < t->n_rows; r++) {
        const uint8_t *row = data + r * t->row_bytes;
        for (uint64_t b = 0; b < per_row; b++) {
            const uint32_t *hit = bsearch(row + b * sort_size, order, n_pool, sizeof *order, cmp_key);
            ck_assert_msg(hit, "%s: row %llu block %llu is not a pool block", t->name, (unsigned long long)r,
                          (unsigned long long)b);
            n_used += !used[*hit];
            used[*hit] = 1;
        }
        same_as_previous += !memcmp(row, row - t->row_bytes, t->row_bytes);
    }
    uint64_t n_drawn = (t->n_rows - rows) * per_row;
    double expect_used = (double)n_pool * (1 - exp(-(double)n_drawn / (double)n_pool));
    ck_assert_msg(n_used > 0.95 * expect_used, "%s: %llu of %llu pool blocks used, expected ~%.0f", t->name,
                  (unsigned long long)n_used, (unsigned long long)n_pool, expect_used);
    /* One-block rows repeat their neighbour once in n_pool rows by chance. */
    ck_assert_msg(same_as_previous * 100 < t->n_rows - rows, "%s: %llu rows repeat the row before", t->name,
                  (unsigned long long)same_as_previous);
    double s_pool = dequant_std(t, pool, rows), s_rest = dequant_std(t, data + rows * t->row_bytes, t->n_rows - rows);
    ck_assert_msg(fabs(s_rest - s_pool) < 0.03 * s_pool, "%s: std %g beyond the pool, %g in it", t->name, s_rest,
                  s_pool);
    free(pool);
    free(scratch);
    free(order);
    free(used);
}

/* Every tensor of a --fill pool file: small and float tensors byte-identical to exact mode, the large
 * quantized ones made of their pools; and the same bytes with 1 and 2 threads. */
START_TEST(test_pool_file)
{
    make_tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s/pool.gguf", tmpdir);
    /* token_embd (Q4_K, 4.6 MB: two jobs, a 16-chunk pool) and output (Q6_K, 6.7 MB) are pooled; the attention
     * and expert matrices (under 1 MiB) and the F32 norms and router are exact. */
    const char *flags[] = {"--layers", "1", "--embd", "256", "--experts", "4", "--experts-used", "2",
                           "--expert-ff", "256", "--vocab", "32000", "--recipe", "Q4_K_M", "--fill", "pool", NULL};
    size_t na, nb;
    uint8_t *a = model_bytes(path, flags, "3", "1", &na), *b = model_bytes(path, flags, "3", "2", &nb);
    ck_assert_uint_eq(na, nb);
    ck_assert_msg(!memcmp(a, b, na), "--fill pool: --threads 1 and --threads 2 wrote different bytes");
    free(a);
    free(b);
    const char *argv[64] = {"guild-mkmodel", "-o", path, "--seed", "3"};
    int argc = 5;
    for (const char *const *f = flags; *f; f++)
        argv[argc++] = *f;
    argv[argc] = NULL;
    check_file(path, argv + 3);
    mkmodel_config_t c;
    guild_err_t err;
    bool quiet;
    ck_assert_int_eq(mkmodel_cli_parse(argc, (char **)argv, &c, &quiet, &err), 0);
    mkmodel_plan_t *p = plan_of(&c, c.n_vocab);
    gguf_t *g;
    ck_assert_msg(gguf_new(&g, path, &err) == 0, "%s", err.msg);
    int n_pooled = 0, n_exact = 0;
    for (int64_t i = 0; i < mkmodel_plan_n_tensors(p); i++) {
        const mkmodel_tensor_t *t = mkmodel_plan_tensor(p, i);
        const gguf_tensor_t *gt = gguf_find_tensor(g, t->name);
        ck_assert_uint_eq(gt->size, t->n_rows * t->row_bytes);
        if (mkmodel_pool_rows(t)) {
            check_pooled(t, c.seed, gt->data);
            n_pooled++;
            continue;
        }
        uint8_t *want = malloc(gt->size);
        float *scratch = malloc((size_t)t->ne[0] * sizeof *scratch);
        ck_assert_msg(mkmodel_fill_rows(t, c.seed, 0, t->n_rows, want, scratch, &err) == 0, "%s", err.msg);
        ck_assert_msg(!memcmp(want, gt->data, gt->size), "%s: differs from exact mode", t->name);
        free(want);
        free(scratch);
        n_exact++;
    }
    ck_assert_int_eq(n_pooled, 2);
    ck_assert_int_gt(n_exact, 5);
    gguf_destroy(&g);
    mkmodel_plan_destroy(&p);
    remove_tmpdir();
}
END_TEST

/* --split-max-size: the parts llama.cpp's gguf-split would write (names, split keys, the metadata in the first,
 * no tensor over two parts), which open as one model with the bytes of the unsplit file. */
START_TEST(test_file_split)
{
    make_tmpdir();
    char one[512], split[512], part[600];
    snprintf(one, sizeof one, "%s/one.gguf", tmpdir);
    snprintf(split, sizeof split, "%s/m.gguf", tmpdir);
    const char *base[] = {"--arch", "glm4moe", "--layers", "3", "--embd", "64", "--heads", "4", "--kv-heads", "2",
                          "--head-dim", "16", "--experts", "8", "--experts-used", "2", "--expert-ff", "32",
                          "--ff", "96", "--nextn", "1", "--vocab", "300", "--type", "Q8_0", "--threads", "2", NULL};
    write_model(one, base);
    const char *flags[64];
    int n = 0;
    for (; base[n]; n++)
        flags[n] = base[n];
    flags[n++] = "--split-max-size", flags[n++] = "20K", flags[n] = NULL;
    write_model(split, flags);
    gguf_t *a, *b, *p1;
    guild_err_t err;
    ck_assert_msg(gguf_new(&a, one, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(access(split, F_OK), -1); /* no file of that name: parts */
    int parts = 0;
    for (int k = 2; k < 100 && !parts; k++) {
        char p[600];
        ck_assert_int_eq(mkmodel_part_path(p, sizeof p, split, 0, k, &err), 0);
        if (access(p, R_OK) == 0)
            parts = k;
    }
    ck_assert_int_gt(parts, 3);
    ck_assert_int_eq(mkmodel_part_path(part, sizeof part, split, 0, parts, &err), 0);
    ck_assert_msg(gguf_new(&b, part, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(gguf_n_parts(b), parts);
    ck_assert_int_eq(gguf_n_tensors(b), gguf_n_tensors(a));
    for (int64_t i = 0; i < gguf_n_tensors(a); i++) {
        const gguf_tensor_t *t = gguf_tensor(a, i), *u = gguf_find_tensor(b, t->name);
        ck_assert_msg(u != NULL, "%s missing", t->name);
        ck_assert(u->type == t->type && u->n_dims == t->n_dims && u->size == t->size);
        ck_assert_msg(!memcmp(u->data, t->data, t->size), "%s: other bytes", t->name);
    }
    /* the model's metadata in the first part only, the split keys in every part */
    for (int64_t i = 0; i < gguf_n_kv(a); i++)
        ck_assert_msg(gguf_find_key(b, gguf_kv_key(a, i)) >= 0, "%s missing", gguf_kv_key(a, i));
    int64_t v;
    ck_assert_int_eq(gguf_get_int(b, "split.count", &v, &err), 0);
    ck_assert_int_eq(v, parts);
    ck_assert_int_eq(gguf_get_int(b, "split.tensors.count", &v, &err), 0);
    ck_assert_int_eq(v, gguf_n_tensors(a));
    ck_assert_int_eq(mkmodel_part_path(part, sizeof part, split, 1, parts, &err), 0);
    size_t size;
    uint8_t *bytes = read_file(part, &size);
    ck_assert_msg(gguf_new_from_memory(&p1, bytes, size, part, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(gguf_get_int(p1, "split.no", &v, &err), 0);
    ck_assert_int_eq(v, 1);
    ck_assert_int_lt(gguf_find_key(p1, "general.architecture"), 0);
    ck_assert_int_gt(gguf_n_tensors(p1), 0);
    gguf_destroy(&p1);
    free(bytes);
    /* Guild's model from the split file */
    model_t *m = NULL;
    ck_assert_int_eq(mkmodel_part_path(part, sizeof part, split, 0, parts, &err), 0);
    ck_assert_msg(model_new(&m, part, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(model_config(m)->n_layer, 3);
    model_destroy(&m);
    gguf_destroy(&a);
    gguf_destroy(&b);
    remove_tmpdir();
}
END_TEST

/* --vocab-from copies a real tokenizer (shared fixtures; skipped without them). */
START_TEST(test_file_vocab_from)
{
    const char *fx = getenv("GUILD_FIXTURES");
    char src[1024];
    snprintf(src, sizeof src, "%s/tokenizer/ggml-vocab-gpt-2.gguf", fx ? fx : GUILD_FIXTURES);
    if (access(src, R_OK) != 0)
        return;
    make_tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s/gpt2.gguf", tmpdir);
    const char *flags[] = {"--layers", "1", "--embd", "64", "--heads", "2", "--kv-heads", "1", "--head-dim", "32",
                           "--experts", "2", "--experts-used", "1", "--expert-ff", "32", "--type", "Q8_0",
                           "--vocab-from", src, NULL};
    write_model(path, flags);
    gguf_t *g, *o;
    guild_err_t err;
    ck_assert_msg(gguf_new(&g, path, &err) == 0, "%s", err.msg);
    ck_assert_msg(gguf_new(&o, src, &err) == 0, "%s", err.msg);
    gguf_value_type_t et;
    uint64_t n, n_src;
    ck_assert_int_eq(gguf_get_arr(o, "tokenizer.ggml.tokens", &et, &n_src, &err), 0);
    ck_assert_int_eq(gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, &err), 0);
    ck_assert_uint_eq(n, n_src);
    ck_assert_uint_eq(gguf_find_tensor(g, "token_embd.weight")->ne[1], n_src);
    check_u32(g, "qwen3moe.vocab_size", (int64_t)n_src);
    for (int64_t i = 0; i < gguf_n_kv(o); i++) {
        const char *key = gguf_kv_key(o, i);
        if (strncmp(key, "tokenizer.", 10))
            continue;
        ck_assert_msg(gguf_find_key(g, key) >= 0, "%s not copied", key);
        ck_assert_int_eq(gguf_kv_type(g, gguf_find_key(g, key)), gguf_kv_type(o, i));
    }
    const char *s1, *s2;
    size_t l1, l2;
    gguf_arr_str(o, "tokenizer.ggml.tokens", n_src - 1, &s1, &l1);
    gguf_arr_str(g, "tokenizer.ggml.tokens", n_src - 1, &s2, &l2);
    ck_assert(l1 == l2 && !memcmp(s1, s2, l1));
    gguf_destroy(&g);
    gguf_destroy(&o);
    remove_tmpdir();
}
END_TEST

/* A failure half-way leaves no file behind. */
START_TEST(test_file_error_leaves_nothing)
{
    mkmodel_config_t c;
    guild_err_t err;
    bool quiet;
    const char *argv[] = {"guild-mkmodel", "--layers", "1", "-o", "/nonexistent-dir/x.gguf"};
    ck_assert_int_eq(mkmodel_cli_parse(5, (char **)argv, &c, &quiet, &err), 0);
    ck_assert_int_eq(mkmodel_config_validate(&c, &err), 0);
    ck_assert_int_eq(mkmodel_write(&c, NULL, NULL, NULL, &err), -1);
    ck_assert_msg(strstr(err.msg, "/nonexistent-dir/x.gguf"), "%s", err.msg);
    const char *argv2[] = {"guild-mkmodel", "--layers", "1", "--vocab-from", "/nonexistent.gguf", "-o", "y.gguf"};
    ck_assert_int_eq(mkmodel_cli_parse(7, (char **)argv2, &c, &quiet, &err), 0);
    ck_assert_int_eq(mkmodel_write(&c, NULL, NULL, NULL, &err), -1);
    ck_assert_msg(strstr(err.msg, "--vocab-from") && strstr(err.msg, "/nonexistent.gguf"), "%s", err.msg);
    ck_assert_int_ne(access("y.gguf", F_OK), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("mkmodel");
    TCase *tc = tcase_create("cli");
    tcase_add_test(tc, test_cli_preset_and_overrides);
    tcase_add_test(tc, test_cli_errors);
    tcase_add_test(tc, test_cli_binary);
    suite_add_tcase(s, tc);
    tc = tcase_create("recipe");
    tcase_add_test(tc, test_recipe_q4_k_m);
    tcase_add_test(tc, test_recipe_fallbacks);
    tcase_add_test(tc, test_gpt_oss);
    tcase_add_test(tc, test_mtp_tensors);
    tcase_add_test(tc, test_qwen3next);
    suite_add_tcase(s, tc);
    tc = tcase_create("stats");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_stats_every_type);
    tcase_add_test(tc, test_rng_gauss);
    suite_add_tcase(s, tc);
    tc = tcase_create("vocab");
    tcase_add_test(tc, test_vocab_builtin);
    suite_add_tcase(s, tc);
    tc = tcase_create("file");
    tcase_set_timeout(tc, 120); /* a loaded 2-core machine; each case takes about a second */
    tcase_add_test(tc, test_file_every_arch);
    tcase_add_test(tc, test_file_split);
    tcase_add_test(tc, test_file_deterministic);
    tcase_add_test(tc, test_file_tokenizes_english);
    tcase_add_test(tc, test_file_vocab_from);
    tcase_add_test(tc, test_file_error_leaves_nothing);
    suite_add_tcase(s, tc);
    tc = tcase_create("pool");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_pool_rows);
    tcase_add_test(tc, test_pool_file);
    suite_add_tcase(s, tc);
    return check_run(s);
}
