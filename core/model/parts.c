/* Names of the parts, the layer layout, the check that a place implements what a model uses, and the core's
 * table of part implementations. */
#include "core/model/parts.h"

#include <stdio.h>
#include <string.h>

#include "core/model/arch.h"
#include "core/model/config.h"
#include "core/model/part_core.h"

static const char *const family_names[MODEL_PART_FAMILIES] = {"attention", "router", "FFN"};

static const char *const attn_names[MODEL_ATTN_KINDS] = {"gqa", "mla", "gdn"};
static const char *const router_names[MODEL_ROUTER_KINDS] = {"softmax-topk", "sigmoid-grouped", "topk-softmax"};
static const char *const ffn_names[MODEL_FFN_KINDS] = {"dense", "moe"};

static const char *const gqa_opt_names[] = {"rope neox",     "partial rope",  "qkv bias",
                                            "q/k norm per head", "q/k norm of the whole vector", "output gate",
                                            "attention sinks", "sliding window", "output bias"};
static const char *const gdn_opt_names[] = {"separate beta and alpha", "key heads tiled"};
static const char *const router_opt_names[] = {"renorm", "logit bias", "score bias"};
static const char *const moe_opt_names[] = {"shared expert with sigmoid gate", "shared expert",
                                            "clamped swiglu with biases"};

_Static_assert(MODEL_ATTN_KINDS <= MODEL_PART_KINDS_MAX && MODEL_ROUTER_KINDS <= MODEL_PART_KINDS_MAX &&
                   MODEL_FFN_KINDS <= MODEL_PART_KINDS_MAX, "model_part_support_t holds every kind");

#define COUNT(a) ((int32_t)(sizeof(a) / sizeof((a)[0])))

const char *model_part_family_name(model_part_family_t family)
{
    return family >= 0 && family < MODEL_PART_FAMILIES ? family_names[family] : "?";
}

const char *model_part_kind_name(model_part_family_t family, int32_t kind)
{
    switch (family) {
    case MODEL_PART_ATTN:
        return kind >= 0 && kind < COUNT(attn_names) ? attn_names[kind] : "?";
    case MODEL_PART_ROUTER:
        return kind >= 0 && kind < COUNT(router_names) ? router_names[kind] : "?";
    case MODEL_PART_FFN:
        return kind >= 0 && kind < COUNT(ffn_names) ? ffn_names[kind] : "?";
    default:
        return "?";
    }
}

const char *model_part_opt_name(model_part_family_t family, int32_t kind, uint32_t bit)
{
    int32_t i = 0;
    while (i < 32 && bit != (1u << i))
        i++;
    if (family == MODEL_PART_ATTN && kind == MODEL_ATTN_GQA && i < COUNT(gqa_opt_names))
        return gqa_opt_names[i];
    if (family == MODEL_PART_ATTN && kind == MODEL_ATTN_GDN && i < COUNT(gdn_opt_names))
        return gdn_opt_names[i];
    if (family == MODEL_PART_ROUTER && i < COUNT(router_opt_names))
        return router_opt_names[i];
    if (family == MODEL_PART_FFN && kind == MODEL_FFN_MOE && i < COUNT(moe_opt_names))
        return moe_opt_names[i];
    return "?";
}

void model_part_describe(char *buf, size_t size, model_part_family_t family, const model_part_t *p)
{
    int off = snprintf(buf, size, "%s", model_part_kind_name(family, p->kind));
    int n = 0;
    for (uint32_t i = 0; i < 32 && off > 0 && (size_t)off < size; i++)
        if (p->opts & (1u << i))
            off += snprintf(buf + off, size - (size_t)off, "%s%s", n++ ? ", " : " (",
                            model_part_opt_name(family, p->kind, 1u << i));
    if (n && off > 0 && (size_t)off < size)
        snprintf(buf + off, size - (size_t)off, ")");
}

model_layer_parts_t model_layer_parts(const model_config_t *c, int32_t il)
{
    model_layer_parts_t lp = {&c->attn, &c->ffn, NULL};
    /* a hybrid's MTP layers (il >= n_layer) have full attention, as llama.cpp's is_recr */
    if (c->layout == MODEL_LAYOUT_HYBRID && il < c->n_layer && (il + 1) % c->full_attn_interval != 0)
        lp.attn = &c->attn_linear;
    if (c->layout == MODEL_LAYOUT_DENSE_FIRST && il < c->n_layer_dense_lead)
        lp.ffn = &c->ffn_lead;
    if (lp.ffn->kind == MODEL_FFN_MOE)
        lp.router = &c->router;
    return lp;
}

model_cache_row_t model_layer_cache_row(const model_config_t *c, int32_t il)
{
    const model_part_t *p = model_layer_parts(c, il).attn;
    const model_part_core_t *core = model_part_core(MODEL_PART_ATTN, p->kind);
    model_cache_row_t r = {0, 0};
    GUILD_ASSERT(core && core->cache_row);
    core->cache_row(c, p, &r.k, &r.v);
    return r;
}

void model_part_support_set(model_part_support_t *s, model_part_family_t family, int32_t kind,
                            const uint32_t *opts)
{
    GUILD_ASSERT(family >= 0 && family < MODEL_PART_FAMILIES && kind >= 0 && kind < MODEL_PART_KINDS_MAX);
    if (opts) {
        s->has[family][kind] = true;
        s->opts[family][kind] = *opts;
    }
}

static int check_part(const model_config_t *c, const model_part_support_t *s, const char *who,
                      model_part_family_t f, const model_part_t *p, guild_err_t *err)
{
    const char *arch = model_arch_info(c->arch)->name;
    if (p->kind < 0 || p->kind >= MODEL_PART_KINDS_MAX || !s->has[f][p->kind])
        return guild_err_set(err, "%s: architecture \"%s\": %s part \"%s\" is not implemented", who, arch,
                             model_part_family_name(f), model_part_kind_name(f, p->kind));
    const uint32_t missing = (p->opts | p->maybe) & ~s->opts[f][p->kind];
    if (missing) {
        const uint32_t bit = missing & -missing;
        return guild_err_set(err, "%s: architecture \"%s\": %s part \"%s\": option \"%s\" is not implemented", who,
                             arch, model_part_family_name(f), model_part_kind_name(f, p->kind),
                             model_part_opt_name(f, p->kind, bit));
    }
    return 0;
}

int model_parts_check(const model_config_t *c, const model_part_support_t *s, const char *who, guild_err_t *err)
{
    for (int32_t il = 0; il < c->n_layer; il++) {
        const model_layer_parts_t lp = model_layer_parts(c, il);
        if (check_part(c, s, who, MODEL_PART_ATTN, lp.attn, err) < 0 ||
            check_part(c, s, who, MODEL_PART_FFN, lp.ffn, err) < 0 ||
            (lp.router && check_part(c, s, who, MODEL_PART_ROUTER, lp.router, err) < 0))
            return -1;
    }
    return 0;
}

/* ---- the core's implementations ---------------------------------------------------------------------- */

static const model_part_core_t *const core_attn[MODEL_ATTN_KINDS] = {
    [MODEL_ATTN_GQA] = &model_attn_gqa_core,
    [MODEL_ATTN_MLA] = &model_attn_mla_core,
    [MODEL_ATTN_GDN] = &model_attn_gdn_core,
};
static const model_part_core_t *const core_router[MODEL_ROUTER_KINDS] = {
    [MODEL_ROUTER_SOFTMAX_TOPK] = &model_router_softmax_core,
    [MODEL_ROUTER_TOPK_SOFTMAX] = &model_router_topk_softmax_core,
    [MODEL_ROUTER_SIGMOID_GROUPED] = &model_router_sigmoid_grouped_core,
};
static const model_part_core_t *const core_ffn[MODEL_FFN_KINDS] = {
    [MODEL_FFN_DENSE] = &model_ffn_dense_core,
    [MODEL_FFN_MOE] = &model_ffn_moe_core,
};

const model_part_core_t *model_part_core(model_part_family_t family, int32_t kind)
{
    switch (family) {
    case MODEL_PART_ATTN:
        return kind >= 0 && kind < MODEL_ATTN_KINDS ? core_attn[kind] : NULL;
    case MODEL_PART_ROUTER:
        return kind >= 0 && kind < MODEL_ROUTER_KINDS ? core_router[kind] : NULL;
    case MODEL_PART_FFN:
        return kind >= 0 && kind < MODEL_FFN_KINDS ? core_ffn[kind] : NULL;
    default:
        return NULL;
    }
}

void model_part_core_support(model_part_support_t *s)
{
    memset(s, 0, sizeof *s);
    for (int f = 0; f < MODEL_PART_FAMILIES; f++)
        for (int32_t k = 0; k < MODEL_PART_KINDS_MAX; k++) {
            const model_part_core_t *p = model_part_core((model_part_family_t)f, k);
            model_part_support_set(s, (model_part_family_t)f, k, p ? &p->opts : NULL);
        }
}
