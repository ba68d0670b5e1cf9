/* The GPU memory plan (contract in gpu_plan.h). The sizes follow the CUDA backend's allocations
 * (gpu-worker/dense/cuda/cuda_backend.c, cuda_weights.c, cuda_moe_*.c); keep them in step. */
#include "gpu-worker/dense/gpu_plan.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/quant/quant.h"

#define ALIGN 256u
#define LOGIT_ROWS 32     /* cuda_backend.c */
#define ATTN_TOK 8        /* attn_decode.cu: rows the split-key scratch is sized for */
#define ATTN_SPLITS 32

static uint64_t round_up(uint64_t n, uint64_t a)
{
    return (n + a - 1) / a * a;
}

static uint64_t tensor_bytes(const model_tensor_t *t)
{
    return t->data ? round_up((uint64_t)t->mat_bytes * (uint64_t)(t->ne[2] ? t->ne[2] : 1), ALIGN) : 0;
}

/* Bytes of one row of n elements in the dot type of weights of `type`, rounded to 16. */
static uint64_t act_row(guild_type_t type, int64_t n)
{
    uint64_t b = 0;
    if (quant_row_bytes(quant_type_info(type)->dot_type, (uint64_t)n, &b, NULL) < 0)
        b = (uint64_t)n * 4u;
    return round_up(b, 16);
}

static uint64_t dense_bytes(const model_weights_t *w, uint64_t *widest_act)
{
    uint64_t sum = tensor_bytes(&w->token_embd) + tensor_bytes(&w->output_norm);
    if (!w->tied_output && w->output.data != w->token_embd.data)
        sum += tensor_bytes(&w->output);
    uint64_t a = act_row(w->output.type, w->output.ne[0]);
    for (int32_t il = 0; il < w->n_layer; il++) {
        const model_layer_t *L = &w->layers[il];
        const model_tensor_t *all[] = {&L->attn_norm, &L->wq, &L->wk, &L->wv, &L->bq, &L->bk, &L->bv, &L->q_norm,
                                       &L->k_norm, &L->wo, &L->ffn_norm, &L->router, &L->shexp_gate_inp,
                                       &L->shexp_gate, &L->shexp_up, &L->shexp_down};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
            sum += tensor_bytes(all[i]);
            if (all[i]->data && all[i]->ne[1] > 1) {
                uint64_t r = act_row(all[i]->type, all[i]->ne[0]);
                a = r > a ? r : a;
            }
        }
    }
    *widest_act = a;
    return sum;
}

static uint64_t layer_expert_bytes(const model_layer_t *L)
{
    return tensor_bytes(&L->gate_exps) + tensor_bytes(&L->up_exps) + tensor_bytes(&L->down_exps);
}

/* The types the kernels of gpu-worker/cuda take (matmul.cu, get_rows.cu, expert_mm.cu dispatch on them). */
bool gpu_plan_type_supported(guild_type_t type)
{
    switch (type) {
    case GUILD_TYPE_F32: case GUILD_TYPE_F16: case GUILD_TYPE_BF16:
    case GUILD_TYPE_Q8_0: case GUILD_TYPE_Q4_0: case GUILD_TYPE_Q4_1: case GUILD_TYPE_Q5_0: case GUILD_TYPE_Q5_1:
    case GUILD_TYPE_IQ4_NL: case GUILD_TYPE_Q4_K: case GUILD_TYPE_Q5_K: case GUILD_TYPE_Q6_K: case GUILD_TYPE_IQ4_XS:
        return true;
    default:
        return false;
    }
}

const char *gpu_plan_supported_types(void)
{
    return "f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl q4_K q5_K q6_K iq4_xs";
}

/* Whether n elements are whole blocks of the dot type of `type` weights (the device experts quantize to it). */
static bool whole_dot_blocks(guild_type_t type, int64_t n)
{
    uint64_t b;
    return quant_row_bytes(quant_type_info(type)->dot_type, (uint64_t)n, &b, NULL) == 0;
}

bool gpu_plan_layer_computable(const model_t *m, int32_t il)
{
    const model_config_t *c = model_config(m);
    const model_layer_t *L = &model_weights(m)->layers[il];
    return L->gate_exps.data && L->up_exps.data && L->down_exps.data && L->up_exps.type == L->gate_exps.type &&
           gpu_plan_type_supported(L->gate_exps.type) && gpu_plan_type_supported(L->down_exps.type) &&
           whole_dot_blocks(L->gate_exps.type, c->n_embd) && whole_dot_blocks(L->down_exps.type, c->n_ff_exp);
}

int gpu_plan_compute(gpu_plan_t *p, const model_t *m, const gpu_plan_options_t *o, guild_err_t *err)
{
    const model_config_t *c = model_config(m);
    const model_weights_t *w = model_weights(m);
    memset(p, 0, sizeof *p);
    p->budget = o->budget;
    p->reserve = o->budget ? GPU_PLAN_RESERVE : 0;
    p->n_layer = c->n_layer;
    p->n_ctx = o->n_ctx;
    p->n_batch = o->n_batch;
    if (!(p->resident = calloc((size_t)(c->n_layer > 0 ? c->n_layer : 1), sizeof *p->resident)))
        return guild_err_set(err, "gpu plan: out of memory");

    const uint64_t NB = (uint64_t)o->n_batch, E = (uint64_t)c->n_embd, HD = (uint64_t)c->head_dim;
    const uint64_t Q = (uint64_t)c->n_head * HD, KV = (uint64_t)c->n_head_kv * HD, K = (uint64_t)c->n_expert_used;
    const uint64_t F = (uint64_t)c->n_ff_shexp, FE = (uint64_t)c->n_ff_exp, f = 4;
    uint64_t widest = 0;
    p->dense = dense_bytes(w, &widest);
    p->kv = 2u * (uint64_t)c->n_layer * (uint64_t)o->n_ctx * KV * (o->kv_elem ? o->kv_elem : 2u);
    const uint64_t logit_rows = NB < LOGIT_ROWS ? NB : LOGIT_ROWS, attn_rows = NB < ATTN_TOK ? NB : ATTN_TOK;
    p->buffers = NB * E * f * 3 + NB * Q * f * 2 + NB * KV * f * 2 + NB * (uint64_t)c->n_expert * f + NB * K * 8 +
                 NB * F * f * 2 + NB * f + logit_rows * (uint64_t)c->n_vocab * f + (2 * NB + 2) * 4 + NB * widest +
                 attn_rows * (uint64_t)c->n_head * ATTN_SPLITS * (HD + 2) * f +
                 (uint64_t)o->n_ctx * (uint64_t)c->n_rot * f + /* RoPE table */
                 NB * K * E * f;                                /* y of the CPU experts' bridge */
    const uint64_t fixed = p->reserve + p->dense + p->kv + p->buffers;
    if (o->budget && fixed > o->budget) {
        guild_err_set(err, "--gpu-mem %.2f GiB: the dense part needs %.2f GiB (weights %.2f GiB, KV cache %.2f GiB "
                      "for %d positions, buffers %.2f GiB for batches of %d, CUDA context ~%.2f GiB) and does not "
                      "fit; lower --ctx or --batch, or raise --gpu-mem", (double)o->budget / 1073741824.0,
                      (double)fixed / 1073741824.0, (double)p->dense / 1073741824.0, (double)p->kv / 1073741824.0,
                      o->n_ctx, (double)p->buffers / 1073741824.0, o->n_batch, (double)p->reserve / 1073741824.0);
        gpu_plan_fini(p);
        return -1;
    }

    /* the device experts' working buffers: quantized x, h = silu(g) * u and its quantization, routing, y */
    uint64_t ax = 0, ah = 0;
    for (int32_t il = 0; il < c->n_layer; il++) {
        const model_layer_t *L = &w->layers[il];
        p->experts_all += layer_expert_bytes(L);
        if (L->gate_exps.data) {
            uint64_t a = act_row(L->gate_exps.type, c->n_embd), b = act_row(L->down_exps.type, c->n_ff_exp);
            ax = a > ax ? a : ax;
            ah = b > ah ? b : ah;
        }
    }
    const uint64_t pairs = NB * K;
    const uint64_t ebuf = NB * ax + pairs * FE * f + pairs * ah + pairs * 4 +
                          (pairs + (uint64_t)c->n_expert + 1) * 16 + 16 + pairs * E * f;
    if (o->max_expert_layers == GPU_EXPERTS_NONE || c->n_expert == 0)
        return 0;
    uint64_t used = fixed + ebuf, largest = 0;
    for (int32_t il = 0; il < c->n_layer; il++) {
        const uint64_t b = layer_expert_bytes(&w->layers[il]);
        largest = b > largest ? b : largest;
    }
    const bool all_fit = !o->budget || fixed + ebuf + p->experts_all <= o->budget;
    const bool capped = o->max_expert_layers > 0 && o->max_expert_layers < c->n_layer;
    if (!all_fit && !capped && used + 2 * largest <= o->budget) {
        p->staging = 2 * largest;
        used += p->staging;
    }
    for (int32_t il = 0; il < c->n_layer; il++) {
        if (o->max_expert_layers > 0 && p->n_resident >= o->max_expert_layers)
            break;
        const uint64_t b = layer_expert_bytes(&w->layers[il]);
        if (!b || !gpu_plan_layer_computable(m, il) || (o->budget && used + b > o->budget))
            continue;
        used += b;
        p->experts += b;
        p->resident[il] = true;
        p->n_resident++;
    }
    if (p->n_resident || p->staging)
        p->expert_buffers = ebuf;
    return 0;
}

void gpu_plan_fini(gpu_plan_t *p)
{
    free(p->resident);
    p->resident = NULL;
}

uint64_t gpu_plan_stage_slot_bytes(const gpu_plan_t *p)
{
    if (!p->staging)
        return 0;
    /* two slots in flight cover one layer, a third keeps the stager busy; more than 128 MiB a slot buys no
     * PCIe rate */
    const uint64_t MiB = (uint64_t)1 << 20;
    uint64_t slot = (p->staging / 4 + MiB - 1) / MiB * MiB;
    return slot < MiB ? MiB : slot > 128 * MiB ? 128 * MiB : slot;
}

uint64_t gpu_plan_total(const gpu_plan_t *p)
{
    return p->reserve + p->dense + p->kv + p->buffers + p->expert_buffers + p->staging + p->experts;
}

void gpu_plan_print(const gpu_plan_t *p, FILE *out)
{
    const double G = 1073741824.0;
    if (p->budget)
        fprintf(out, "gpu plan: budget %.2f GiB, planned %.2f GiB\n", (double)p->budget / G,
                (double)gpu_plan_total(p) / G);
    else
        fprintf(out, "gpu plan: no budget, planned %.2f GiB\n", (double)gpu_plan_total(p) / G);
    fprintf(out, "  dense weights %.2f GiB, KV cache %.2f GiB (%d positions), buffers %.2f GiB (batches of %d)",
            (double)p->dense / G, (double)p->kv / G, p->n_ctx, (double)p->buffers / G, p->n_batch);
    if (p->reserve)
        fprintf(out, ", CUDA context ~%.2f GiB", (double)p->reserve / G);
    fprintf(out, "\n  routed experts: %d of %d layers resident on the GPU (%.2f of %.2f GiB, buffers %.2f GiB)",
            p->n_resident, p->n_layer, (double)p->experts / G, (double)p->experts_all / G,
            (double)p->expert_buffers / G);
    if (p->n_resident && p->n_resident < p->n_layer) {
        fprintf(out, ": layers");
        int32_t run = -1;
        for (int32_t il = 0; il <= p->n_layer; il++) {
            const bool r = il < p->n_layer && p->resident[il];
            if (r && run < 0)
                run = il;
            if (!r && run >= 0) {
                if (il - 1 > run)
                    fprintf(out, " %d-%d", run, il - 1);
                else
                    fprintf(out, " %d", run);
                run = -1;
            }
        }
    }
    if (p->n_resident < p->n_layer)
        fprintf(out, "; the others on the CPU%s", p->staging ? ", or streamed to the GPU for large batches" : "");
    if (p->staging)
        fprintf(out, " (staging %.2f GiB)", (double)p->staging / G);
    fprintf(out, "\n");
}

int gpu_plan_parse_size(const char *s, const char *what, uint64_t *out, guild_err_t *err)
{
    char *end;
    errno = 0;
    const double v = strtod(s, &end);
    double mul = 1;
    switch (*end) {
    case 'k': case 'K': mul = 1024.0; end++; break;
    case 'm': case 'M': mul = 1048576.0; end++; break;
    case 'g': case 'G': mul = 1073741824.0; end++; break;
    case 't': case 'T': mul = 1099511627776.0; end++; break;
    default: break;
    }
    if ((*end == 'i' || *end == 'I') && mul > 1)
        end++;
    if ((*end == 'b' || *end == 'B'))
        end++;
    if (errno || end == s || *end || !(v > 0) || v * mul >= 18446744073709551615.0 || isnan(v))
        return guild_err_set(err, "%s %s: expected a size such as 8G, 512M or 24GiB", what, s);
    *out = (uint64_t)(v * mul);
    return 0;
}
