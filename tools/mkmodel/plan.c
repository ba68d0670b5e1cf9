#include "tools/mkmodel/plan.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/mkmodel/recipe.h"

struct mkmodel_plan {
    mkmodel_tensor_t *t; /* [n] in file order */
    int64_t n, cap;
    uint64_t data_bytes;
    int64_t n_fallbacks;
};

/* Element scales (tuned with a NumPy model of the forward pass on 512 tokens of English; see README.md).
 * Every matrix is zero-mean gaussian with std gain / sqrt(fan_in): nothing has a common offset, so the router
 * (zero-mean, like a trained one) spreads tokens over experts, and its gain only sets how peaked the top-k
 * softmax weights are (router logits of std ~ROUTER_GAIN). What keeps routing spread in deep layers is that the
 * residual stream stays dominated by token-specific signal: attention is made peaked (scores of std ~QK_GAIN^2,
 * through q_norm/k_norm weights of mean QK_GAIN, or Wq/Wk gains where there are no Q/K norms), since diffuse
 * attention averages the context into a component common to all tokens that grows layer after layer and herds
 * every token into the same few experts; and the expert FFN output (down projection gain FFN_DOWN_GAIN) is
 * larger than the attention output. Norm weights are 1 + small noise as in trained models. The LM head gives
 * logits of std ~LOGIT_STD. */
#define EMBD_STD 1.0f      /* token_embd elements (the first RMSNorm removes the scale anyway) */
#define ROUTER_GAIN 2.0f
#define QK_GAIN 2.5f
#define FFN_DOWN_GAIN 3.0f
#define LOGIT_STD 4.0f
#define NORM_JITTER 0.05f  /* std of RMSNorm weights around 1 */
#define BIAS_STD 0.1f      /* q/k/v, attention output and expert biases */
#define SCORE_BIAS_STD 0.05f /* the sigmoid router's score bias, small beside the spread of its gates (a trained one
                                balances the experts' load; it does not decide most choices) */
#define SINK_STD 1.0f      /* gpt-oss attention sinks: logits of the order of the scores */

static float fan_in_std(float gain, int64_t fan_in) { return gain / sqrtf((float)fan_in); }

static int add(mkmodel_plan_t *p, const mkmodel_config_t *cfg, mkmodel_role_t role, int64_t layer, float mean,
               float std, uint32_t n_dims, int64_t ne0, int64_t ne1, int64_t ne2, guild_err_t *err, const char *fmt,
               ...) __attribute__((format(printf, 12, 13)));



static int add(mkmodel_plan_t *p, const mkmodel_config_t *cfg, mkmodel_role_t role, int64_t layer, float mean,
               float std, uint32_t n_dims, int64_t ne0, int64_t ne1, int64_t ne2, guild_err_t *err, const char *fmt,
               ...)
{
    if (p->n == p->cap) {
        int64_t cap = p->cap ? 2 * p->cap : 64;
        mkmodel_tensor_t *t = realloc(p->t, (size_t)cap * sizeof *t);
        if (!t)
            return guild_err_set(err, "tensor plan: out of memory");
        p->t = t;
        p->cap = cap;
    }
    mkmodel_tensor_t *t = &p->t[p->n];
    memset(t, 0, sizeof *t);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    t->role = role;
    t->layer = layer;
    t->n_dims = n_dims;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = ne2;
    t->ne[3] = 1;
    t->mean = mean;
    t->std = std;
    if (mkmodel_recipe_choose(cfg, t, err) < 0)
        return -1;
    if (quant_row_bytes(t->type, (uint64_t)ne0, &t->row_bytes, err) < 0)
        return guild_err_prefix(err, "tensor %s: ", t->name);
    t->n_rows = (uint64_t)ne1 * (uint64_t)ne2;
    p->data_bytes += t->row_bytes * t->n_rows;
    if (t->type != t->wanted)
        p->n_fallbacks++;
    p->n++;
    return 0;
}

/* The tensors of each part kind the architecture's row names, in file order (core/model/KIND.c binds them). */
typedef int (*part_plan_fn)(mkmodel_plan_t *p, const mkmodel_config_t *c, const model_part_t *part, int64_t l,
                            guild_err_t *err);

static int plan_attn_gqa(mkmodel_plan_t *p, const mkmodel_config_t *c, const model_part_t *part, int64_t l,
                         guild_err_t *err)
{
    const int64_t E = c->n_embd, q_dim = c->n_head * c->head_dim, kv_dim = c->n_head_kv * c->head_dim;
    const float norm_std = NORM_JITTER;
    const uint32_t opts = part->opts | (c->qk_norm ? part->maybe : 0); /* --qk-norm: the optional norms too */
    const bool norm_head = opts & MODEL_GQA_QK_NORM_HEAD, norm_full = opts & MODEL_GQA_QK_NORM_FULL;
    const float qk_gain = norm_head || norm_full ? 1.0f : QK_GAIN; /* with Q/K norms the gain is in their weights */
    /* option output gate: each head's query rows, then its gate rows */
    const int64_t qg_dim = (part->opts & MODEL_GQA_OUT_GATE) ? 2 * q_dim : q_dim;
    if (add(p, c, MKMODEL_ROLE_ATTN_Q, l, 0, fan_in_std(qk_gain, E), 2, E, qg_dim, 1, err, "blk.%lld.attn_q.weight",
            (long long)l) ||
        add(p, c, MKMODEL_ROLE_ATTN_K, l, 0, fan_in_std(qk_gain, E), 2, E, kv_dim, 1, err, "blk.%lld.attn_k.weight",
            (long long)l) ||
        add(p, c, MKMODEL_ROLE_ATTN_V, l, 0, fan_in_std(1, E), 2, E, kv_dim, 1, err, "blk.%lld.attn_v.weight",
            (long long)l))
        return -1;
    if ((part->opts & MODEL_GQA_QKV_BIAS) &&
        (add(p, c, MKMODEL_ROLE_BIAS, l, 0, BIAS_STD, 1, q_dim, 1, 1, err, "blk.%lld.attn_q.bias", (long long)l) ||
         add(p, c, MKMODEL_ROLE_BIAS, l, 0, BIAS_STD, 1, kv_dim, 1, 1, err, "blk.%lld.attn_k.bias", (long long)l) ||
         add(p, c, MKMODEL_ROLE_BIAS, l, 0, BIAS_STD, 1, kv_dim, 1, 1, err, "blk.%lld.attn_v.bias", (long long)l)))
        return -1;
    if (add(p, c, MKMODEL_ROLE_ATTN_OUTPUT, l, 0, fan_in_std(1, q_dim), 2, q_dim, E, 1, err,
            "blk.%lld.attn_output.weight", (long long)l))
        return -1;
    if ((part->opts & MODEL_GQA_SINKS) && add(p, c, MKMODEL_ROLE_BIAS, l, 0, SINK_STD, 1, c->n_head, 1, 1, err,
                                              "blk.%lld.attn_sinks.weight", (long long)l))
        return -1;
    if ((part->opts & MODEL_GQA_OUT_BIAS) &&
        add(p, c, MKMODEL_ROLE_BIAS, l, 0, BIAS_STD, 1, E, 1, 1, err, "blk.%lld.attn_output.bias", (long long)l))
        return -1;
    if ((norm_head || norm_full) &&
        (add(p, c, MKMODEL_ROLE_NORM, l, QK_GAIN, norm_std, 1, norm_head ? c->head_dim : q_dim, 1, 1, err,
             "blk.%lld.attn_q_norm.weight", (long long)l) ||
         add(p, c, MKMODEL_ROLE_NORM, l, QK_GAIN, norm_std, 1, norm_head ? c->head_dim : kv_dim, 1, 1, err,
             "blk.%lld.attn_k_norm.weight", (long long)l)))
        return -1;
    return 0;
}

/* Multi-head latent attention as DeepseekV2Model writes it: the q LoRA (attn_q_a, its norm, attn_q_b) or attn_q,
 * the latent and rotated key part (attn_kv_a_mqa, the latent's norm), the up-projections split per head
 * (attn_k_b [nope, latent, heads], attn_v_b [latent, value, heads]) and attn_output. There are no q/k norms, so
 * the queries and keys carry QK_GAIN: the q LoRA's output and the latent are normed (unit RMS) before attn_q_b and
 * attn_k_b, the rotated key part comes from the normed input through attn_kv_a_mqa. */
static int plan_attn_mla(mkmodel_plan_t *p, const mkmodel_config_t *c, const model_part_t *part, int64_t l,
                         guild_err_t *err)
{
    const int64_t E = c->n_embd, H = c->n_head, K = c->head_dim, V = c->head_dim_v, R = c->n_lora_kv;
    const int64_t RQ = c->n_lora_q, r = c->n_rot ? c->n_rot : mkmodel_arch_default_rot(c->arch, K);
    (void)part;
    if (RQ > 0) {
        if (add(p, c, MKMODEL_ROLE_ATTN_Q, l, 0, fan_in_std(1, E), 2, E, RQ, 1, err, "blk.%lld.attn_q_a.weight",
                (long long)l) ||
            add(p, c, MKMODEL_ROLE_NORM, l, 1, NORM_JITTER, 1, RQ, 1, 1, err, "blk.%lld.attn_q_a_norm.weight",
                (long long)l) ||
            add(p, c, MKMODEL_ROLE_ATTN_Q, l, 0, fan_in_std(QK_GAIN, RQ), 2, RQ, H * K, 1, err,
                "blk.%lld.attn_q_b.weight", (long long)l))
            return -1;
    } else if (add(p, c, MKMODEL_ROLE_ATTN_Q, l, 0, fan_in_std(QK_GAIN, E), 2, E, H * K, 1, err,
                   "blk.%lld.attn_q.weight", (long long)l)) {
        return -1;
    }
    if (add(p, c, MKMODEL_ROLE_ATTN_K, l, 0, fan_in_std(QK_GAIN, E), 2, E, R + r, 1, err,
            "blk.%lld.attn_kv_a_mqa.weight", (long long)l) ||
        add(p, c, MKMODEL_ROLE_NORM, l, 1, NORM_JITTER, 1, R, 1, 1, err, "blk.%lld.attn_kv_a_norm.weight",
            (long long)l) ||
        add(p, c, MKMODEL_ROLE_ATTN_K, l, 0, fan_in_std(QK_GAIN, R), 3, K - r, R, H, err, "blk.%lld.attn_k_b.weight",
            (long long)l) ||
        add(p, c, MKMODEL_ROLE_ATTN_V, l, 0, fan_in_std(1, R), 3, R, V, H, err, "blk.%lld.attn_v_b.weight",
            (long long)l) ||
        add(p, c, MKMODEL_ROLE_ATTN_OUTPUT, l, 0, fan_in_std(1, H * V), 2, H * V, E, 1, err,
            "blk.%lld.attn_output.weight", (long long)l))
        return -1;
    return 0;
}

/* The gated delta net (core/model/attn_gdn.c), llama.cpp's names: attn_qkv, attn_gate, ssm_conv1d, ssm_dt.bias,
 * ssm_a, ssm_ba (or ssm_beta and ssm_alpha), ssm_norm, ssm_out. The decay's rate ssm_a = -exp(A_log) is
 * negative (around -1, a memory of a few tokens at the drawn alphas); the convolution's taps and dt bias are
 * F32 as llama.cpp keeps them. */
static int plan_attn_gdn(mkmodel_plan_t *p, const mkmodel_config_t *c, const model_part_t *part, int64_t l,
                         guild_err_t *err)
{
    const int64_t E = c->n_embd, DK = c->ssm_state, NV = c->ssm_heads, IN = NV * DK;
    const int64_t CH = 2 * c->ssm_groups * DK + IN;
    const long long L = (long long)l;
    if (c->gdn_fused) { /* llama.cpp's first converter: one ssm_in of the split form's rows (fill.c) */
        if (add(p, c, MKMODEL_ROLE_ATTN_Q, l, 0, fan_in_std(1, E), 2, E, CH + IN, 1, err, "blk.%lld.ssm_in.weight",
                L))
            return -1;
        mkmodel_tensor_t *t = &p->t[p->n - 1];
        t->fuse_nk = c->ssm_groups;
        t->fuse_dk = DK;
        t->fuse_vr = IN / c->ssm_groups;
    } else if (add(p, c, MKMODEL_ROLE_ATTN_Q, l, 0, fan_in_std(1, E), 2, E, CH, 1, err, "blk.%lld.attn_qkv.weight",
                   L) ||
               add(p, c, MKMODEL_ROLE_ATTN_V, l, 0, fan_in_std(1, E), 2, E, IN, 1, err, "blk.%lld.attn_gate.weight",
                   L)) {
        return -1;
    }
    if (add(p, c, MKMODEL_ROLE_BIAS, l, 0, 0.5f, 2, c->ssm_conv, CH, 1, err, "blk.%lld.ssm_conv1d.weight", L) ||
        add(p, c, MKMODEL_ROLE_BIAS, l, 0, 1.0f, 1, NV, 1, 1, err, "blk.%lld.ssm_dt.bias", L) ||
        add(p, c, MKMODEL_ROLE_BIAS, l, -1.0f, 0.2f, 1, NV, 1, 1, err, "blk.%lld.ssm_a", L))
        return -1;
    if (part->opts & MODEL_GDN_BA_SPLIT) {
        if (add(p, c, MKMODEL_ROLE_ATTN_K, l, 0, fan_in_std(1, E), 2, E, NV, 1, err, "blk.%lld.ssm_beta.weight", L) ||
            add(p, c, MKMODEL_ROLE_ATTN_K, l, 0, fan_in_std(1, E), 2, E, NV, 1, err, "blk.%lld.ssm_alpha.weight", L))
            return -1;
    } else if (add(p, c, MKMODEL_ROLE_ATTN_K, l, 0, fan_in_std(1, E), 2, E, 2 * NV, 1, err, "blk.%lld.ssm_ba.weight",
                   L)) {
        return -1;
    }
    if (add(p, c, MKMODEL_ROLE_NORM, l, 1, NORM_JITTER, 1, DK, 1, 1, err, "blk.%lld.ssm_norm.weight", L) ||
        add(p, c, MKMODEL_ROLE_ATTN_OUTPUT, l, 0, fan_in_std(1, IN), 2, IN, E, 1, err, "blk.%lld.ssm_out.weight", L))
        return -1;
    return 0;
}

static int plan_router_softmax(mkmodel_plan_t *p, const mkmodel_config_t *c, const model_part_t *part, int64_t l,
                               guild_err_t *err)
{
    (void)part;
    return add(p, c, MKMODEL_ROLE_ROUTER, l, 0, fan_in_std(ROUTER_GAIN, c->n_embd), 2, c->n_embd, c->n_expert, 1,
               err, "blk.%lld.ffn_gate_inp.weight", (long long)l);
}

/* gpt-oss's router: the logits plus a bias (llama.cpp's ffn_gate_inp.bias), the top k of them weighted by their
 * softmax. The bias is small beside the logits, so the choice stays spread over the experts. */
static int plan_router_topk_softmax(mkmodel_plan_t *p, const mkmodel_config_t *c, const model_part_t *part,
                                    int64_t l, guild_err_t *err)
{
    if (plan_router_softmax(p, c, part, l, err))
        return -1;
    if ((part->opts & MODEL_ROUTER_LOGIT_BIAS) && add(p, c, MKMODEL_ROLE_BIAS, l, 0, BIAS_STD, 1, c->n_expert, 1, 1,
                                                      err, "blk.%lld.ffn_gate_inp.bias", (long long)l))
        return -1;
    return 0;
}

/* The grouped sigmoid router: the logits' matrix as the softmax router's, and the score bias. */
static int plan_router_sigmoid(mkmodel_plan_t *p, const mkmodel_config_t *c, const model_part_t *part, int64_t l,
                               guild_err_t *err)
{
    if (plan_router_softmax(p, c, part, l, err))
        return -1;
    if ((part->opts | part->maybe) & MODEL_ROUTER_SCORE_BIAS)
        return add(p, c, MKMODEL_ROLE_BIAS, l, 0, SCORE_BIAS_STD, 1, c->n_expert, 1, 1, err,
                   "blk.%lld.exp_probs_b.bias", (long long)l);
    return 0;
}

/* A dense FFN layer's matrices, scaled as an expert's. */
static int plan_ffn_dense(mkmodel_plan_t *p, const mkmodel_config_t *c, const model_part_t *part, int64_t l,
                          guild_err_t *err)
{
    const int64_t E = c->n_embd, F = c->n_ff;
    (void)part;
    if (add(p, c, MKMODEL_ROLE_FFN_GATE, l, 0, fan_in_std(1, E), 2, E, F, 1, err, "blk.%lld.ffn_gate.weight",
            (long long)l) ||
        add(p, c, MKMODEL_ROLE_FFN_UP, l, 0, fan_in_std(1, E), 2, E, F, 1, err, "blk.%lld.ffn_up.weight",
            (long long)l) ||
        add(p, c, MKMODEL_ROLE_FFN_DOWN, l, 0, fan_in_std(FFN_DOWN_GAIN, F), 2, F, E, 1, err,
            "blk.%lld.ffn_down.weight", (long long)l))
        return -1;
    return 0;
}

static int plan_ffn_moe(mkmodel_plan_t *p, const mkmodel_config_t *c, const model_part_t *part, int64_t l,
                        guild_err_t *err)
{
    const int64_t E = c->n_embd, F = c->n_ff_exp, X = c->n_expert;
    if (add(p, c, MKMODEL_ROLE_FFN_GATE, l, 0, fan_in_std(1, E), 3, E, F, X, err, "blk.%lld.ffn_gate_exps.weight",
            (long long)l) ||
        add(p, c, MKMODEL_ROLE_FFN_UP, l, 0, fan_in_std(1, E), 3, E, F, X, err, "blk.%lld.ffn_up_exps.weight",
            (long long)l) ||
        add(p, c, MKMODEL_ROLE_FFN_DOWN, l, 0, fan_in_std(FFN_DOWN_GAIN, F), 3, F, E, X, err,
            "blk.%lld.ffn_down_exps.weight", (long long)l))
        return -1;
    if ((part->opts & MODEL_FFN_SHEXP_GATED) &&
        add(p, c, MKMODEL_ROLE_SHEXP_GATE, l, 0, fan_in_std(1, E), 1, E, 1, 1, err,
            "blk.%lld.ffn_gate_inp_shexp.weight", (long long)l))
        return -1;
    if (part->opts & (MODEL_FFN_SHEXP_GATED | MODEL_FFN_SHEXP)) {
        const int64_t S = c->n_ff_shexp;
        if (add(p, c, MKMODEL_ROLE_FFN_GATE, l, 0, fan_in_std(1, E), 2, E, S, 1, err,
                "blk.%lld.ffn_gate_shexp.weight", (long long)l) ||
            add(p, c, MKMODEL_ROLE_FFN_UP, l, 0, fan_in_std(1, E), 2, E, S, 1, err, "blk.%lld.ffn_up_shexp.weight",
                (long long)l) ||
            add(p, c, MKMODEL_ROLE_FFN_DOWN, l, 0, fan_in_std(FFN_DOWN_GAIN, S), 2, S, E, 1, err,
                "blk.%lld.ffn_down_shexp.weight", (long long)l))
            return -1;
    }
    /* gpt-oss: each expert's biases, [width, n_expert] */
    if ((part->opts & MODEL_FFN_SWIGLU_OAI) &&
        (add(p, c, MKMODEL_ROLE_BIAS, l, 0, BIAS_STD, 2, F, X, 1, err, "blk.%lld.ffn_gate_exps.bias", (long long)l) ||
         add(p, c, MKMODEL_ROLE_BIAS, l, 0, BIAS_STD, 2, F, X, 1, err, "blk.%lld.ffn_up_exps.bias", (long long)l) ||
         add(p, c, MKMODEL_ROLE_BIAS, l, 0, BIAS_STD, 2, E, X, 1, err, "blk.%lld.ffn_down_exps.bias", (long long)l)))
        return -1;
    return 0;
}

void mkmodel_plan_support(model_part_support_t *s)
{
    static const uint32_t gqa = MODEL_GQA_ROPE_NEOX | MODEL_GQA_ROPE_PARTIAL | MODEL_GQA_QKV_BIAS |
                                MODEL_GQA_QK_NORM_HEAD | MODEL_GQA_QK_NORM_FULL | MODEL_GQA_SINKS |
                                MODEL_GQA_SLIDING | MODEL_GQA_OUT_BIAS | MODEL_GQA_OUT_GATE,
                          gdn = MODEL_GDN_BA_SPLIT | MODEL_GDN_KV_TILED,
                          softmax = MODEL_ROUTER_RENORM, topk_softmax = MODEL_ROUTER_LOGIT_BIAS,
                          sigmoid = MODEL_ROUTER_RENORM | MODEL_ROUTER_SCORE_BIAS,
                          moe = MODEL_FFN_SHEXP_GATED | MODEL_FFN_SHEXP | MODEL_FFN_SWIGLU_OAI, dense = 0;
    memset(s, 0, sizeof *s);
    static const uint32_t mla = 0;
    model_part_support_set(s, MODEL_PART_ATTN, MODEL_ATTN_GQA, &gqa);
    model_part_support_set(s, MODEL_PART_ATTN, MODEL_ATTN_MLA, &mla);
    model_part_support_set(s, MODEL_PART_ATTN, MODEL_ATTN_GDN, &gdn);
    model_part_support_set(s, MODEL_PART_ROUTER, MODEL_ROUTER_SOFTMAX_TOPK, &softmax);
    model_part_support_set(s, MODEL_PART_ROUTER, MODEL_ROUTER_TOPK_SOFTMAX, &topk_softmax);
    model_part_support_set(s, MODEL_PART_ROUTER, MODEL_ROUTER_SIGMOID_GROUPED, &sigmoid);
    model_part_support_set(s, MODEL_PART_FFN, MODEL_FFN_MOE, &moe);
    model_part_support_set(s, MODEL_PART_FFN, MODEL_FFN_DENSE, &dense);
}

static const part_plan_fn attn_plans[MODEL_ATTN_KINDS] = {[MODEL_ATTN_GQA] = plan_attn_gqa,
                                                         [MODEL_ATTN_MLA] = plan_attn_mla,
                                                         [MODEL_ATTN_GDN] = plan_attn_gdn};
static const part_plan_fn router_plans[MODEL_ROUTER_KINDS] = {
    [MODEL_ROUTER_SOFTMAX_TOPK] = plan_router_softmax,
    [MODEL_ROUTER_TOPK_SOFTMAX] = plan_router_topk_softmax,
    [MODEL_ROUTER_SIGMOID_GROUPED] = plan_router_sigmoid,
};
static const part_plan_fn ffn_plans[MODEL_FFN_KINDS] = {[MODEL_FFN_MOE] = plan_ffn_moe,
                                                       [MODEL_FFN_DENSE] = plan_ffn_dense};

/* The tensors of block l: attn_norm, its attention's, the FFN norm, its router's, its FFN's (a dense-first
 * model's leading blocks use the row's ffn_lead), and an MTP block's own after them. */
static int plan_block(mkmodel_plan_t *p, const mkmodel_config_t *c, int64_t l, int64_t n_vocab, guild_err_t *err)
{
    const model_arch_info_t *info = mkmodel_arch_info(c->arch);
    const int64_t E = c->n_embd;
    const bool lead = info->layout == MODEL_LAYOUT_DENSE_FIRST && l < c->n_dense_lead;
    const model_part_t *ffn = lead ? &info->ffn_lead : &info->ffn;
    /* a hybrid's attention as model_layer_parts picks it (its MTP layers have full attention) */
    const bool linear = info->layout == MODEL_LAYOUT_HYBRID && l < c->n_layer && (l + 1) % c->full_attn_interval;
    const model_part_t *attn = linear ? &info->attn_linear : &info->attn;
    if (add(p, c, MKMODEL_ROLE_NORM, l, 1, NORM_JITTER, 1, E, 1, 1, err, "blk.%lld.attn_norm.weight", (long long)l) ||
        attn_plans[attn->kind](p, c, attn, l, err) ||
        add(p, c, MKMODEL_ROLE_NORM, l, 1, NORM_JITTER, 1, E, 1, 1, err, "blk.%lld.%s.weight", (long long)l,
            info->ffn_norm ? info->ffn_norm : "ffn_norm") ||
        (ffn->kind == MODEL_FFN_MOE &&
         router_plans[mkmodel_router_part(c)->kind](p, c, mkmodel_router_part(c), l, err)) ||
        ffn_plans[ffn->kind](p, c, ffn, l, err))
        return -1;
    if (l < c->n_layer)
        return 0;
    /* an MTP layer: the projection of [normed embedding, normed hidden state] and its norms (llama.cpp's
     * nextn.*); GLM-4.5's checkpoints, like DeepSeek-V3's, also carry the layer's own embed_tokens and
     * shared_head.head, so files converted from them hold nextn.embed_tokens and nextn.shared_head_head (the
     * recipe's default type, as llama.cpp's quantizer gives tensors named neither token_embd nor output);
     * Qwen3.5's MTP block shares the model's */
    const bool own_head = c->arch == MKMODEL_ARCH_GLM4MOE || c->arch == MKMODEL_ARCH_DEEPSEEK2;
    if (add(p, c, MKMODEL_ROLE_MATRIX, l, 0, fan_in_std(1, 2 * E), 2, 2 * E, E, 1, err,
            "blk.%lld.nextn.eh_proj.weight", (long long)l) ||
        (own_head && add(p, c, MKMODEL_ROLE_MATRIX, l, 0, EMBD_STD, 2, E, n_vocab, 1, err,
                         "blk.%lld.nextn.embed_tokens.weight", (long long)l)) ||
        add(p, c, MKMODEL_ROLE_NORM, l, 1, NORM_JITTER, 1, E, 1, 1, err, "blk.%lld.nextn.enorm.weight", (long long)l) ||
        add(p, c, MKMODEL_ROLE_NORM, l, 1, NORM_JITTER, 1, E, 1, 1, err, "blk.%lld.nextn.hnorm.weight", (long long)l) ||
        (own_head && add(p, c, MKMODEL_ROLE_MATRIX, l, 0, fan_in_std(LOGIT_STD, E), 2, E, n_vocab, 1, err,
                         "blk.%lld.nextn.shared_head_head.weight", (long long)l)) ||
        add(p, c, MKMODEL_ROLE_NORM, l, 1, NORM_JITTER, 1, E, 1, 1, err, "blk.%lld.nextn.shared_head_norm.weight",
            (long long)l))
        return -1;
    return 0;
}


int mkmodel_plan_new(mkmodel_plan_t **out, const mkmodel_config_t *given, int64_t n_vocab, guild_err_t *err)
{
    mkmodel_config_t derived = *given;
    mkmodel_arch_derive(&derived);
    const mkmodel_config_t *c = &derived;
    *out = NULL;
    mkmodel_plan_t *p = calloc(1, sizeof *p);
    if (!p)
        return guild_err_set(err, "tensor plan: out of memory");
    const int64_t E = c->n_embd;
    const float norm_std = NORM_JITTER;
    /* With tied embeddings token_embd is also the LM head, so it takes the head's scale. */
    float embd_std = c->tie_embeddings ? fan_in_std(LOGIT_STD, E) : EMBD_STD;
    if (add(p, c, MKMODEL_ROLE_TOKEN_EMBD, -1, 0, embd_std, 2, E, n_vocab, 1, err, "token_embd.weight"))
        goto fail;
    for (int64_t l = 0; l < c->n_layer + c->n_nextn; l++)
        if (plan_block(p, c, l, n_vocab, err))
            goto fail;
    if (add(p, c, MKMODEL_ROLE_NORM, -1, 1, norm_std, 1, E, 1, 1, err, "output_norm.weight"))
        goto fail;
    if (!c->tie_embeddings &&
        add(p, c, MKMODEL_ROLE_OUTPUT, -1, 0, fan_in_std(LOGIT_STD, E), 2, E, n_vocab, 1, err, "output.weight"))
        goto fail;
    *out = p;
    return 0;
fail:
    mkmodel_plan_destroy(&p);
    return -1;
}

void mkmodel_plan_destroy(mkmodel_plan_t **pp)
{
    if (!*pp)
        return;
    free((*pp)->t);
    free(*pp);
    *pp = NULL;
}

int64_t mkmodel_plan_n_tensors(const mkmodel_plan_t *p) { return p->n; }
const mkmodel_tensor_t *mkmodel_plan_tensor(const mkmodel_plan_t *p, int64_t i) { return &p->t[i]; }
uint64_t mkmodel_plan_data_bytes(const mkmodel_plan_t *p) { return p->data_bytes; }
int64_t mkmodel_plan_n_fallbacks(const mkmodel_plan_t *p) { return p->n_fallbacks; }
