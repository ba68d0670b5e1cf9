/* The GPU memory plan (contract in gpu_plan.h). The sizes follow the CUDA backend's allocations
 * (gpu-worker/dense/cuda/cuda_backend.c, cuda_weights.c, cuda_moe_*.c); keep them in step.
 *
 * How it decides: for each chunk from the largest allowed down (halving), and each staging ring (a slot size from
 * a whole layer down to GPU_PLAN_MIN_SLICE_DIV's share, slices only with GPU_PLAN_CAP_SLICES; 2 to 16 slots, at
 * most two layers in all; slices in three slots or more where three fit), what fits the budget gets the rest
 * filled with resident experts (the hottest of the routing profile, else whole layers in index order) and is
 * scored by the predicted time of a reference request (a prompt, then generated tokens) under the cost model.
 * A streamed layer's time comes from a simulation of the ring (gpu_plan_ring_ns): the copy engine can only run
 * ahead of the products into released slots, and the dense part between two layers' experts releases none, so
 * a ring too small for the copies to run ahead through it leaves the copy engine idle there and the products
 * waiting after it. A plan that streams every layer not wholly resident is taken whenever one fits (the rule of
 * issue 14: streaming never loses at run time, the split falls back to the CPU side per batch); the best score
 * wins, a tie (within TIE) going to the larger chunk, then the larger slot, then the fewer slots. */
#include "config.h"

#include "gpu-worker/dense/gpu_plan.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/quant/quant.h"
#include "gpu-worker/dense/kv_format.h"

#define ALIGN GPU_PLAN_ALIGN
#define LOGIT_ROWS 32     /* cuda_backend.c */
#define ATTN_TOK 32       /* attn_decode.cu: rows the split-key scratch is sized for (CUDA_DECODE_ROWS) */
#define ATTN_SPLITS 64    /* attn_decode.cu: AD_MAX_SPLITS */
#define MLA_SPLITS 16     /* mla_attention_mma.cu: ML_SPLITS */
#define MLA_SPLIT_MIN 256 /* mla_attention_mma.cu: ML_SPLIT_MIN */
#define GDN_CHUNK 64          /* cuda_kernels.h CUDA_GDN_CHUNK: rows of a chunk of the gated delta net's chunked */
#define GDN_CHUNK_MIN_ROWS 33 /* form, the fewest rows of a batch that take it (CUDA_GDN_CHUNK_MIN_ROWS) and the */
#define GDN_CHUNK_MAX_DK 128  /* widest heads (cuda_gdn_chunk_fits) */
#define TIE 0.005         /* scores within this fraction are equal */
#define REF_GEN 256
#define REF_PROMPT_MAX 16384
#define MAX_CHUNKS 32
/* The staging rings planned: slot counts tried for each slot size. */
static const int32_t stage_slot_counts[] = {2, 3, 4, 6, 8, 12, 16};
#define GiB 1073741824.0
#define GPU_PLAN_GRAPH_TOKENS 4 /* decode steps up to this many tokens replay CUDA graphs: never split */

/* bytes in GiB rounded up to the hundredth that a message prints with %.2f, so that the size it names holds them */
static double gib_up(uint64_t bytes)
{
    return ceil((double)bytes / GiB * 100.0) / 100.0;
}

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
#define DENSE(name, kind) &L->name,
        const model_tensor_t *all[] = {MODEL_LAYER_DENSE_TENSORS(DENSE)};
#undef DENSE
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

/* The types the kernels of gpu-worker/cuda take (matmul.cu, get_rows.cu, expert_mm.cu dispatch on them). */
bool gpu_plan_type_supported(guild_type_t type)
{
    switch (type) {
    case GUILD_TYPE_F32: case GUILD_TYPE_F16: case GUILD_TYPE_BF16:
    case GUILD_TYPE_Q8_0: case GUILD_TYPE_Q4_0: case GUILD_TYPE_Q4_1: case GUILD_TYPE_Q5_0: case GUILD_TYPE_Q5_1:
    case GUILD_TYPE_IQ4_NL: case GUILD_TYPE_Q4_K: case GUILD_TYPE_Q5_K: case GUILD_TYPE_Q6_K: case GUILD_TYPE_IQ4_XS:
    case GUILD_TYPE_MXFP4: case GUILD_TYPE_Q2_K: case GUILD_TYPE_Q3_K:
    case GUILD_TYPE_IQ2_XXS: case GUILD_TYPE_IQ2_XS: case GUILD_TYPE_IQ2_S: case GUILD_TYPE_IQ3_XXS: case GUILD_TYPE_IQ3_S:
    case GUILD_TYPE_IQ1_S: case GUILD_TYPE_IQ1_M:
        return true;
    default:
        return false;
    }
}

const char *gpu_plan_supported_types(void)
{
    return "f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl mxfp4 q2_K q3_K q4_K q5_K q6_K iq4_xs iq2_xxs iq2_xs iq2_s iq3_xxs iq3_s iq1_s iq1_m";
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

/* ---- what the plan needs of the model ---- */

typedef struct facts {
    const model_config_t *c;
    int32_t L, N, K;
    uint64_t dense, widest, ax, ah; /* dense weights; widest dense activation row; the experts' x and h rows */
    uint64_t bias;                  /* the experts' biases (gpt-oss) of every layer, as the device keeps them */
    bool *computable;               /* [L] */
    uint64_t *gmat, *umat, *dmat;   /* [L] one expert's matrices (0: no experts) */
    uint64_t gmax, umax, dmax;      /* the largest of the computable layers */
    double flop;                    /* per (token, expert) pair */
    double *dflop;                  /* [L] the dense part's matrix products per token */
    double attn_flop;               /* attention per token and position attended (scores and values) */
    int32_t n_computable;
    uint64_t mtp_weights;           /* the first MTP layer's tensors and every expert of it, as the device holds them */
    uint64_t mtp_act;               /* its widest quantized activation row beyond `widest` (eh_proj's 2 * n_embd) */
} facts_t;

static void facts_fini(facts_t *f)
{
    free(f->computable);
    free(f->gmat);
    free(f->umat);
    free(f->dmat);
    free(f->dflop);
}

static int facts_init(facts_t *f, const model_t *m, guild_err_t *err)
{
    const model_config_t *c = model_config(m);
    const model_weights_t *w = model_weights(m);
    memset(f, 0, sizeof *f);
    f->c = c;
    f->L = c->n_layer;
    f->N = c->n_expert;
    f->K = c->n_expert_used;
    const size_t n = (size_t)(c->n_layer > 0 ? c->n_layer : 1);
    f->computable = calloc(n, sizeof *f->computable);
    f->gmat = calloc(n, sizeof *f->gmat);
    f->umat = calloc(n, sizeof *f->umat);
    f->dmat = calloc(n, sizeof *f->dmat);
    f->dflop = calloc(n, sizeof *f->dflop);
    if (!f->computable || !f->gmat || !f->umat || !f->dmat || !f->dflop) {
        facts_fini(f);
        return guild_err_set(err, "gpu plan: out of memory");
    }
    f->dense = dense_bytes(w, &f->widest);
    for (int32_t il = 0; il < c->n_layer; il++) {
        const model_layer_t *L = &w->layers[il];
        if (L->gate_exps.data) {
            f->gmat[il] = L->gate_exps.mat_bytes;
            f->umat[il] = L->up_exps.data ? L->up_exps.mat_bytes : 0;
            f->dmat[il] = L->down_exps.data ? L->down_exps.mat_bytes : 0;
            uint64_t a = act_row(L->gate_exps.type, c->n_embd), b = act_row(L->down_exps.type, c->n_ff_exp);
            f->ax = a > f->ax ? a : f->ax;
            f->ah = b > f->ah ? b : f->ah;
            if (L->gate_exps_b.data) /* cuda_moe_gpu.c: every expert's gate, up and down biases, F32 */
                f->bias += round_up((uint64_t)c->n_expert * (uint64_t)(2 * c->n_ff_exp + c->n_embd) * 4, ALIGN);
        }
#define DENSE(name, kind) &L->name,
        const model_tensor_t *all[] = {MODEL_LAYER_DENSE_TENSORS(DENSE)};
#undef DENSE
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            if (all[i]->data && all[i]->ne[1] > 1)
                f->dflop[il] += 2.0 * (double)all[i]->ne[0] * (double)all[i]->ne[1] *
                                (double)(all[i]->ne[2] ? all[i]->ne[2] : 1);
        f->computable[il] = c->n_expert > 0 && gpu_plan_layer_computable(m, il);
        if (f->computable[il]) {
            f->n_computable++;
            f->gmax = f->gmat[il] > f->gmax ? f->gmat[il] : f->gmax;
            f->umax = f->umat[il] > f->umax ? f->umat[il] : f->umax;
            f->dmax = f->dmat[il] > f->dmax ? f->dmat[il] : f->dmax;
        }
    }
    if (w->n_mtp > 0) { /* what the CUDA backend uploads of it (cuda_weights.c, cuda_mtp.c) */
        const model_mtp_layer_t *M = &w->mtp[0];
        const model_layer_t *L = &M->block;
        const model_tensor_t *own[] = {&M->eh_proj, &M->enorm, &M->hnorm, &M->embed_tokens, &M->head, &M->head_norm};
        for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
            f->mtp_weights += round_up(tensor_bytes(own[i]), ALIGN);
#define DENSE(name, kind) &L->name,
        const model_tensor_t *all[] = {MODEL_LAYER_DENSE_TENSORS(DENSE)};
#undef DENSE
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            f->mtp_weights += round_up(tensor_bytes(all[i]), ALIGN);
        const uint64_t N = (uint64_t)c->n_expert;
        if (L->gate_exps.data)
            f->mtp_weights += round_up(N * L->gate_exps.mat_bytes, ALIGN) +
                              round_up(N * L->up_exps.mat_bytes, ALIGN) + round_up(N * L->down_exps.mat_bytes, ALIGN);
        const uint64_t a = act_row(M->eh_proj.type, M->eh_proj.ne[0]);
        f->mtp_act = a > f->widest ? a - f->widest : 0;
    }
    f->flop = gpu_cost_pair_flop(c->n_embd, c->n_ff_exp);
    f->attn_flop = 4.0 * (double)c->n_head * (double)(c->head_dim > 0 ? c->head_dim : 0);
    return 0;
}

static uint64_t expert_bytes(const facts_t *f, int32_t il)
{
    return f->gmat[il] + f->umat[il] + f->dmat[il];
}

/* Device bytes of r resident experts of layer il: each matrix region rounded to the alignment. */
static uint64_t resident_bytes(const facts_t *f, int32_t il, int32_t r)
{
    if (r <= 0)
        return 0;
    const uint64_t R = (uint64_t)r;
    return round_up(R * f->gmat[il], ALIGN) + round_up(R * f->umat[il], ALIGN) + round_up(R * f->dmat[il], ALIGN);
}

static uint64_t slot_bytes(const facts_t *f, int32_t k)
{
    const uint64_t K = (uint64_t)k;
    return round_up(K * f->gmax, ALIGN) + round_up(K * f->umax, ALIGN) + round_up(K * f->dmax, ALIGN);
}

uint64_t gpu_plan_slot_bytes(const model_t *m, int32_t k)
{
    guild_err_t err;
    facts_t f;
    if (facts_init(&f, m, &err) < 0)
        return 0;
    const uint64_t b = slot_bytes(&f, k);
    facts_fini(&f);
    return b;
}

/* The activations, logits and exchange staging of chunks of NB tokens. */
static uint64_t buffers_bytes(const facts_t *f, uint64_t NB, int32_t n_ctx)
{
    const model_config_t *c = f->c;
    const uint64_t E = (uint64_t)c->n_embd, HD = (uint64_t)c->head_dim;
    const uint64_t Q = (uint64_t)c->n_head * HD, KV = (uint64_t)c->n_head_kv * HD, K = (uint64_t)c->n_expert_used;
    const uint64_t F = (uint64_t)model_config_ff_hidden(c), fl = 4; /* the shared expert's or a dense layer's */
    const uint64_t logit_rows = NB < LOGIT_ROWS ? NB : LOGIT_ROWS, attn_rows = NB < ATTN_TOK ? NB : ATTN_TOK;
    return NB * E * fl * 3 + NB * Q * fl * 2 + NB * KV * fl * 2 + NB * (uint64_t)c->n_expert * fl + NB * K * 8 +
           NB * F * fl * 2 + NB * fl + logit_rows * (uint64_t)c->n_vocab * fl + (3 * NB + 2) * 4 + NB * f->widest +
           attn_rows * (uint64_t)c->n_head * ATTN_SPLITS * (HD + 2) * fl +
           (uint64_t)n_ctx * (uint64_t)c->n_rot * fl + /* RoPE table */
           NB * K * E * fl;                            /* y of the CPU experts' bridge */
}

/* The device experts' working buffers: quantized x, h = silu(g) * u and its quantization, routing, y; with
 * biased experts (gpt-oss) the biases, u apart from g (the clamped SwiGLU) and the pairs' global ids. */
static uint64_t expert_buffers_bytes(const facts_t *f, uint64_t NB)
{
    const model_config_t *c = f->c;
    const uint64_t pairs = NB * (uint64_t)c->n_expert_used, E = (uint64_t)c->n_embd, FE = (uint64_t)c->n_ff_exp;
    return NB * f->ax + pairs * FE * 4 + pairs * f->ah + pairs * 4 + (pairs + (uint64_t)c->n_expert + 1) * 16 + 16 +
           pairs * E * 4 + (f->bias ? f->bias + pairs * FE * 4 + pairs * 4 : 0);
}

/* ---- the resident fill and the predictions ---- */

typedef struct cand {
    int32_t chunk, slots, k;  /* k: slot experts (0 with no slots) */
    uint8_t *res;             /* [L * N] */
    int32_t *r;               /* [L] resident experts per layer */
    uint64_t experts;         /* their bytes */
    bool dev;                 /* some expert is computed on the device (expert buffers counted) */
    bool streams_all;         /* every layer not wholly resident streams (or there is none) */
    bool kv_host;             /* the KV cache's rows in host RAM */
    double prefill_ns, decode_ns, score;
} cand_t;

typedef struct planner {
    const facts_t *f;
    const gpu_plan_options_t *o;
    gpu_cost_t cost;
    int64_t *order;           /* [n_order] (layer * N + expert), hottest first (per-expert fill) */
    int64_t n_order;
    bool per_expert;          /* fill expert by expert from the profile */
    int64_t cap;              /* most resident experts (per_expert) or layers; < 0: no limit */
    int32_t ref_prompt, ref_gen;
} planner_t;

/* qsort_r's order of (layer * N + expert) indices: more routed pairs first. */
static int hotter(const void *a, const void *b, void *ctx)
{
    const uint64_t *routing = ctx;
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    const uint64_t cx = routing[x], cy = routing[y];
    if (cx != cy)
        return cx > cy ? -1 : 1;
    return (x > y) - (x < y); /* lower layer, then lower expert */
}

/* Fills c's resident set within R bytes (R < 0: none, UINT64_MAX-ish: no limit). */
static void fill(const planner_t *pl, cand_t *c, int64_t R)
{
    const facts_t *f = pl->f;
    memset(c->res, 0, (size_t)f->L * (size_t)f->N);
    memset(c->r, 0, (size_t)f->L * sizeof *c->r);
    c->experts = 0;
    if (R <= 0 || pl->cap == 0)
        return;
    uint64_t left = (uint64_t)R;
    if (pl->per_expert) {
        int64_t taken = 0;
        for (int64_t i = 0; i < pl->n_order && (pl->cap < 0 || taken < pl->cap); i++) {
            const int32_t il = (int32_t)(pl->order[i] / f->N);
            const uint64_t d = resident_bytes(f, il, c->r[il] + 1) - resident_bytes(f, il, c->r[il]);
            if (d > left)
                continue;
            left -= d;
            c->experts += d;
            c->res[pl->order[i]] = 1;
            c->r[il]++;
            taken++;
        }
        return;
    }
    int64_t layers = 0;
    for (int32_t il = 0; il < f->L && (pl->cap < 0 || layers < pl->cap); il++) {
        const uint64_t b = resident_bytes(f, il, f->N);
        if (!f->computable[il] || !b || b > left)
            continue;
        left -= b;
        c->experts += b;
        memset(c->res + (size_t)il * (size_t)f->N, 1, (size_t)f->N);
        c->r[il] = f->N;
        layers++;
    }
}

/* Share of layer il's routed pairs (profile) on c's resident experts; without a profile (or no pairs) the
 * share of its experts. */
static double hot_share(const planner_t *pl, const uint8_t *res, const int32_t *r, int32_t il)
{
    const facts_t *f = pl->f;
    if (pl->o->routing) {
        const uint64_t *cnt = pl->o->routing + (size_t)il * (size_t)f->N;
        uint64_t all = 0, hit = 0;
        for (int32_t e = 0; e < f->N; e++) {
            all += cnt[e];
            hit += res[(size_t)il * (size_t)f->N + (size_t)e] ? cnt[e] : 0;
        }
        if (all)
            return (double)hit / (double)all;
    }
    return f->N ? (double)r[il] / (double)f->N : 0.0;
}

/* Device ns of a layer's dense part (its matrix products and the attention of a chunk of n tokens from the
 * prompt's start) at the device's rate: while it runs no staging slot is released, so it is when the copies
 * of the next layer's experts need room to run ahead. */
static double dense_ns(const planner_t *pl, int32_t il, double n)
{
    const facts_t *f = pl->f;
    return n * (f->dflop[il] + f->attn_flop * n / 2) / (pl->cost.gpu_tflops * 1e3);
}

/* Contract in gpu_plan.h. */
double gpu_plan_ring_ns(double d, int32_t m, double cc, double gc, double refill, int32_t slots)
{
    enum { LAYERS = 6, MAX_M = 64 };
    if (m < 1)
        return 0;
    if (m > MAX_M) { /* the same bytes and products in fewer, larger chunks (slots scaled alike) */
        const double f = (double)m / MAX_M;
        cc *= f;
        gc *= f;
        slots = (int32_t)(slots / f) > 1 ? (int32_t)(slots / f) : 1;
        m = MAX_M;
    }
    double rel[LAYERS * MAX_M], t = 0, engine = 0, end_prev = 0, end_last = 0;
    for (int32_t l = 0; l < LAYERS; l++) {
        t += d;
        for (int32_t j = 0; j < m; j++) {
            const int32_t i = l * m + j;
            const double room = i >= slots ? rel[i - slots] + refill : 0;
            engine = (engine > room ? engine : room) + cc;
            t = (t > engine ? t : engine) + gc;
            rel[i] = t;
        }
        end_prev = end_last;
        end_last = t;
    }
    const double period = end_last - end_prev;
    return period > d ? period - d : 0;
}

/* Predicted ns of layer il's routed experts for a batch of n tokens: r resident taking share h of the pairs,
 * the others on the CPU side (its products or its reads of the experts touched, whichever is longer), or, for
 * batches the host plans (more than GPU_PLAN_GRAPH_TOKENS: smaller steps replay graphs), split with the
 * device through `slots` slots of k experts when streamed (gpu_plan_ring_ns): two sides working at once on a divisible
 * load. */
static double layer_ns(const planner_t *pl, int32_t il, int32_t r, double h, bool streamed, int32_t k,
                       int32_t slots, double n)
{
    const facts_t *f = pl->f;
    const gpu_cost_t *c = &pl->cost;
    const double P = n * f->K, P_res = P * h, P_non = P - P_res;
    const double t_res = P_res * f->flop / (c->gpu_tflops * 1e3);
    if (r >= f->N || P_non <= 0)
        return t_res;
    const double nr = (double)(f->N - r), touched = nr * (1.0 - exp(-P_non / nr));
    const double eb = (double)expert_bytes(f, il);
    const double t_prod = P_non * f->flop / (c->cpu_tflops * 1e3), t_read = touched * eb / c->cpu_gbps;
    const double t_cpu = c->exchange_us * 1e3 + (t_prod > t_read ? t_prod : t_read);
    if (!streamed || n <= GPU_PLAN_GRAPH_TOKENS)
        return t_res + t_cpu;
    const int32_t m = (int32_t)ceil(touched / (double)k);
    const double t_copy = touched * eb / c->h2d_gbps;
    const double t_gpu = P_non * f->flop / (c->gpu_tflops * 1e3);
    const double t_s = c->pass_us * 1e3 + gpu_plan_ring_ns(dense_ns(pl, il, n) + t_res, m, t_copy / m,
                                                           t_gpu / m + c->slice_us * 1e3, c->refill_us * 1e3,
                                                           slots);
    const double t_split = t_s * t_cpu / (t_s + t_cpu);
    return t_res + (t_split < t_cpu ? t_split : t_cpu);
}

/* Predicted ns of layer il's CPU side for one generated token (resident experts cost the device ~nothing). */
static double decode_ns(const planner_t *pl, int32_t il, int32_t r, double h)
{
    const facts_t *f = pl->f;
    if (r >= f->N || !f->gmat[il])
        return 0;
    return pl->cost.exchange_us * 1e3 + (1.0 - h) * f->K * (double)expert_bytes(f, il) / pl->cost.cpu_gbps;
}

static void score(const planner_t *pl, cand_t *c)
{
    const facts_t *f = pl->f;
    double pre = 0, dec = 0;
    const int32_t full = pl->ref_prompt / c->chunk, rest = pl->ref_prompt % c->chunk;
    c->streams_all = true;
    for (int32_t il = 0; il < f->L; il++) {
        if (!f->gmat[il])
            continue;
        const double h = hot_share(pl, c->res, c->r, il);
        const bool streamed = c->slots > 0 && f->computable[il] && c->r[il] < f->N;
        if (c->r[il] < f->N && f->computable[il] && !streamed)
            c->streams_all = false;
        pre += full * (layer_ns(pl, il, c->r[il], h, streamed, c->k, c->slots, c->chunk) + pl->cost.pass_us * 1e3);
        if (rest)
            pre += layer_ns(pl, il, c->r[il], h, streamed, c->k, c->slots, rest) + pl->cost.pass_us * 1e3;
        dec += decode_ns(pl, il, c->r[il], h);
    }
    c->prefill_ns = pre;
    c->decode_ns = dec;
    c->score = pre + (double)pl->ref_gen * dec;
}

/* ---- the plan ---- */

static int plan_alloc(gpu_plan_t *p, int32_t L, int32_t N, guild_err_t *err)
{
    const size_t nl = (size_t)(L > 0 ? L : 1);
    p->n_layer = L;
    p->n_expert = N;
    p->resident = calloc(nl, sizeof *p->resident);
    p->layer = calloc(nl, sizeof *p->layer);
    p->expert_resident = calloc(nl * (size_t)(N > 0 ? N : 1), 1);
    if (!p->resident || !p->layer || !p->expert_resident) {
        gpu_plan_fini(p);
        return guild_err_set(err, "gpu plan: out of memory");
    }
    return 0;
}

/* The per-layer fields from p's resident sets and staging (and h_of: the hot share, or NULL). */
static void plan_layers(gpu_plan_t *p, const facts_t *f)
{
    p->n_resident = 0;
    p->n_resident_experts = 0;
    p->experts = 0;
    for (int32_t il = 0; il < f->L; il++) {
        gpu_plan_layer_t *ly = &p->layer[il];
        int32_t r = 0;
        for (int32_t e = 0; e < f->N; e++)
            r += p->expert_resident[(size_t)il * (size_t)f->N + (size_t)e] != 0;
        ly->n_resident = r;
        ly->expert_bytes = expert_bytes(f, il);
        ly->resident_bytes = resident_bytes(f, il, r);
        ly->mode = f->gmat[il] && r == f->N ? GPU_PLAN_RESIDENT
                   : f->computable[il] && p->stage_slots > 0 ? GPU_PLAN_STREAMED
                                                            : GPU_PLAN_CPU;
        p->resident[il] = ly->mode == GPU_PLAN_RESIDENT;
        p->n_resident += p->resident[il];
        p->n_resident_experts += r;
        p->experts += ly->resident_bytes;
    }
}

/* The cache of one sequence as the backends allocate it: each layer with a key or value row (model_layer_cache_row)
 * the widest key and value rows of the layers' attention parts (GQA: n_head_kv * head_dim each; MLA: the latent
 * and its rotated part, no value row) at every position, in the bytes of the cache's format
 * (kv_type_position_bytes), and each gated delta net layer its recurrent state instead (the convolution's last
 * inputs and the delta rule's matrices, F32, whatever the context and the format). */
/* One sequence's F32 recurrent states: the convolution and delta-rule states of every gated delta net layer. */
static uint64_t recurrent_state_bytes(const model_config_t *c)
{
    uint64_t recurrent = 0;
    for (int32_t il = 0; il < c->n_layer; il++)
        recurrent += model_layer_recurrent(c, il);
    return recurrent ? recurrent * (uint64_t)(model_gdn_conv_state(c) + model_gdn_ssm_state(c)) * 4u : 0;
}

uint64_t gpu_plan_cache_bytes(const model_config_t *c, int32_t n_ctx, int32_t kv_type)
{
    return kv_type_position_bytes(kv_type, c) * (uint64_t)n_ctx + recurrent_state_bytes(c);
}

uint64_t gpu_plan_rollback_bytes(const model_config_t *c, int32_t rows)
{
    return rows > 0 ? (uint64_t)rows * recurrent_state_bytes(c) : 0;
}

/* The gated delta net's and the output gate's activations for chunks of NB tokens (the CUDA backend's
 * alloc_hybrid), with the chunked form's scratch (cuda_gdn_chunk_scratch): per value head, the rows padded to whole
 * chunks, two rows of a head's width, a chunk's row of decayed query-key products and a cumulative decay. */
static uint64_t hybrid_buffers_bytes(const model_config_t *c, uint64_t NB)
{
    const uint64_t Q = (uint64_t)c->n_head * (uint64_t)c->head_dim, fl = 4;
    bool gate = false, gdn = false;
    for (int32_t il = 0; il < c->n_layer; il++) {
        const model_part_t *a = model_layer_parts(c, il).attn;
        gate |= a->kind == MODEL_ATTN_GQA && (a->opts & MODEL_GQA_OUT_GATE);
        gdn |= a->kind == MODEL_ATTN_GDN;
    }
    uint64_t bytes = gate ? NB * 3 * Q * fl : 0;
    if (gdn) {
        const uint64_t CH = (uint64_t)model_gdn_conv_channels(c), IN = (uint64_t)c->ssm_d_inner;
        const uint64_t NV = (uint64_t)c->ssm_dt_rank;
        bytes += NB * (CH + 2 * IN + 4 * NV) * fl;
        const uint64_t DK = (uint64_t)c->ssm_d_state, rows = (NB + GDN_CHUNK - 1) / GDN_CHUNK * GDN_CHUNK;
        if (NB >= GDN_CHUNK_MIN_ROWS && DK <= GDN_CHUNK_MAX_DK && DK % (DK < 16 ? DK : 16) == 0)
            bytes += NV * rows * (2 * DK + GDN_CHUNK + 1) * fl;
    }
    return bytes;
}

/* Multi-head latent attention's activations for chunks of NB tokens (the CUDA backend's mla_* buffers): the q LoRA's
 * inner rows, the latent with its rotated key, the queries in the latent space with their rotated parts, the heads'
 * latent outputs, and the decode splits' scratch (cuda_mla_attention_scratch: at most ML_SPLITS splits of at least
 * ML_SPLIT_MIN positions, each CUDA_MLA_SPLIT_ROWS rows of a head's latent row, maximum and sum). */
static uint64_t mla_buffers_bytes(const model_config_t *c, uint64_t NB, int32_t n_ctx)
{
    bool mla = false;
    for (int32_t il = 0; il < c->n_layer; il++)
        mla |= model_layer_parts(c, il).attn->kind == MODEL_ATTN_MLA;
    if (!mla)
        return 0;
    const uint64_t H = (uint64_t)c->n_head, R = (uint64_t)c->n_lora_kv, RR = R + (uint64_t)c->n_rot, fl = 4;
    const uint64_t RQ = c->n_lora_q > 0 ? (uint64_t)c->n_lora_q : 1;
    uint64_t splits = ((uint64_t)(n_ctx > 0 ? n_ctx : 1) + MLA_SPLIT_MIN - 1) / MLA_SPLIT_MIN;
    splits = splits < MLA_SPLITS ? splits : MLA_SPLITS;
    return NB * RQ * fl + NB * RR * fl + NB * H * RR * fl + NB * H * R * fl + splits * ATTN_TOK * H * (R + 2) * fl;
}

bool gpu_plan_kv_host_possible(const model_config_t *c)
{
    bool rows = false;
    for (int32_t il = 0; il < c->n_layer; il++) {
        const model_cache_row_t r = model_layer_cache_row(c, il);
        if ((r.k || r.v) && model_layer_parts(c, il).attn->kind != MODEL_ATTN_GQA)
            return false;
        rows |= r.k || r.v;
    }
    return rows;
}

/* The attention layers' K and V rows of n_ctx positions (the cache less the recurrent states), and one layer's. */
static uint64_t kv_rows_bytes(const model_config_t *c, int32_t n_ctx, int32_t kv_type, uint64_t *layer)
{
    int32_t n = 0;
    for (int32_t il = 0; il < c->n_layer; il++) {
        const model_cache_row_t r = model_layer_cache_row(c, il);
        n += r.k || r.v;
    }
    const uint64_t all = kv_type_position_bytes(kv_type, c) * (uint64_t)n_ctx;
    if (layer)
        *layer = n ? round_up(all / (uint64_t)n, ALIGN) : 0;
    return all;
}

/* The first multi-token-prediction layer on the device for chunks of NB tokens (cuda_mtp.c): its weights and
 * experts, a cache slot of n_ctx positions, every position's hidden state, its input rows, its experts' working
 * buffers and the wider activation rows of its projection. */
static uint64_t mtp_bytes(const facts_t *f, uint64_t NB, int32_t n_ctx, int32_t kv_type)
{
    const model_config_t *c = f->c;
    uint64_t slot = 0;
    kv_rows_bytes(c, n_ctx, kv_type, &slot);
    const uint64_t E = (uint64_t)c->n_embd, fl = 4;
    return f->mtp_weights + slot + (uint64_t)n_ctx * E * fl + NB * 2 * E * fl + E * fl + NB * f->mtp_act +
           (c->n_expert > 0 ? expert_buffers_bytes(f, NB) : 0);
}

/* Sizes of the parts for chunk NB, the KV cache's rows in host RAM or not, with the MTP layer or not, with the
 * recurrent states of `rollback` rows kept (0: none). */
/* The driver's share (gpu_plan_driver_bytes) from the model's facts. */
static uint64_t driver_bytes(const facts_t *f, int32_t n_ctx, int32_t n_seq, int32_t kv_type, gpu_copy_path_t path)
{
    uint64_t experts = 0;
    for (int32_t il = 0; il < f->L && path == GPU_COPY_PINNED; il++)
        experts += resident_bytes(f, il, f->gmat[il] ? f->N : 0);
    const uint64_t rows = (uint64_t)(n_seq > 1 ? n_seq : 1) * kv_rows_bytes(f->c, n_ctx, kv_type, NULL);
    return (uint64_t)GPU_PLAN_ALLOCS * GPU_PLAN_ALLOC_SLACK + GPU_PLAN_KERNELS + (experts + rows) / GPU_PLAN_MAP_DIV +
           (uint64_t)GPU_PLAN_GRAPHS * (uint64_t)(f->L + 1) * GPU_PLAN_GRAPH_LAYER;
}

uint64_t gpu_plan_driver_bytes(const model_t *m, int32_t n_ctx, int32_t n_seq, int32_t kv_type, gpu_copy_path_t path)
{
    guild_err_t err;
    facts_t f;
    if (facts_init(&f, m, &err) < 0)
        return 0;
    const uint64_t b = driver_bytes(&f, n_ctx, n_seq, kv_type, path);
    facts_fini(&f);
    return b;
}

static void plan_sizes(gpu_plan_t *p, const facts_t *f, uint64_t budget, uint64_t context, gpu_copy_path_t path,
                       int32_t n_ctx, int32_t n_seq, int32_t kv_type, int32_t NB, bool kv_host, bool mtp,
                       int32_t rollback)
{
    const model_config_t *c = f->c;
    p->budget = budget;
    p->reserve = budget ? (context ? context : GPU_PLAN_CONTEXT) : 0;
    p->driver = budget ? driver_bytes(f, n_ctx, n_seq, kv_type, path) : 0;
    p->dense = f->dense;
    p->n_seq = n_seq > 1 ? n_seq : 1;
    p->kv = (uint64_t)p->n_seq * gpu_plan_cache_bytes(c, n_ctx, kv_type); /* a cache and states per sequence */
    p->kv_type = kv_type_resolve(kv_type, KV_TYPE_F16);
    p->kv_host = kv_host;
    p->kv_host_bytes = 0;
    p->kv_stage = 0;
    if (kv_host) { /* every sequence's rows there, one layer of one sequence's staged at a time */
        p->kv_host_bytes = (uint64_t)p->n_seq * kv_rows_bytes(c, n_ctx, kv_type, &p->kv_stage);
        p->kv -= p->kv_host_bytes;
    }
    p->n_ctx = n_ctx;
    p->n_batch = NB;
    p->buffers = buffers_bytes(f, (uint64_t)NB, n_ctx) + hybrid_buffers_bytes(c, (uint64_t)NB) +
                 mla_buffers_bytes(c, (uint64_t)NB, n_ctx);
    p->mtp = mtp && f->mtp_weights ? mtp_bytes(f, (uint64_t)NB, n_ctx, kv_type) : 0;
    p->rollback = (uint64_t)p->n_seq * gpu_plan_rollback_bytes(c, rollback);
    p->experts_all = 0;
    for (int32_t il = 0; il < f->L; il++)
        p->experts_all += resident_bytes(f, il, f->gmat[il] ? f->N : 0);
}

static uint64_t fixed_bytes(const facts_t *f, const gpu_plan_options_t *o, int32_t NB, bool kv_host)
{
    gpu_plan_t t;
    memset(&t, 0, sizeof t);
    plan_sizes(&t, f, o->budget, o->context, o->copy_path, o->n_ctx, o->n_seq, o->kv_type, NB, kv_host, o->mtp,
               o->rollback);
    return t.reserve + t.driver + t.dense + t.kv + t.kv_stage + t.buffers + t.mtp + t.rollback;
}

/* What streaming at chunks of NB needs at least: the dense part and buffers (fixed_bytes), the experts' buffers and
 * the smallest ring, two slots of k experts (k the smallest slot the backend takes); no ring without computable
 * layers. */
static uint64_t stream_min_bytes(const facts_t *f, const gpu_plan_options_t *o, int32_t NB, bool kv_host, int32_t k)
{
    return fixed_bytes(f, o, NB, kv_host) + expert_buffers_bytes(f, (uint64_t)NB) +
           (f->n_computable ? 2 * slot_bytes(f, k) : 0);
}

/* The decode attention's reads of a cache of format t (a generated token's, and a prefill chunk's of at most
 * ATTN_TOK rows, which takes the decode kernels): GB/s in GPU memory, and the share of the PCIe rate it reaches
 * from host RAM, where it reads the rows in place. The CUDA kernels' rates at long spans on the H200
 * (bench/results/attnblk-h200-2026-12-02.md): the block formats' kernel is bound by its arithmetic per position,
 * not by the bytes, so the compact formats read fewer GB/s than f16's. */
static double kv_decode_gbps(const planner_t *pl, int32_t t, bool host)
{
    double dev = 1200, share = 0.93; /* f16, f32 */
    if (t == KV_TYPE_Q8_0)
        dev = 450, share = 0.68;
    else if (t == KV_TYPE_Q4_0)
        dev = 230, share = 0.55;
    else if (t == KV_TYPE_K8V4)
        dev = 330, share = 0.63;
    return host ? pl->cost.h2d_gbps * share : dev < GPU_PLAN_KV_HBM_GBPS ? dev : GPU_PLAN_KV_HBM_GBPS;
}

/* Predicted ns the attention spends reading the cache over the reference request: each prefill chunk of its prompt
 * reads the rows before it and its own (chunks of more than ATTN_TOK rows at GPU_PLAN_KV_HBM_GBPS in GPU memory,
 * from host RAM its layer's rows copied to the staging at the PCIe rate; smaller ones as decode reads them), each
 * generated token a full cache (the context planned for is the one to be used: a reference prompt of at most
 * REF_PROMPT_MAX would hide a long context's cost) at kv_decode_gbps. *per_token: a generated token's share. */
static double kv_read_ns(const planner_t *pl, int32_t chunk, bool host, double *per_token)
{
    const int32_t t = kv_type_resolve(pl->o->kv_type, KV_TYPE_F16);
    const double bpp = (double)kv_type_position_bytes(t, pl->f->c);
    const double dec = kv_decode_gbps(pl, t, host);
    const double rate = chunk <= ATTN_TOK ? dec : host ? pl->cost.h2d_gbps : GPU_PLAN_KV_HBM_GBPS;
    double pre = 0;
    for (int32_t p = 0; p < pl->ref_prompt; p += chunk)
        pre += (double)(p + chunk < pl->ref_prompt ? p + chunk : pl->ref_prompt);
    const double G = pl->ref_gen, tok = (double)pl->o->n_ctx * bpp / dec;
    if (per_token)
        *per_token = tok;
    return pre * bpp / rate + G * tok;
}

static void types_of(const model_t *m, int32_t il, char *buf, size_t n)
{
    const model_layer_t *L = &model_weights(m)->layers[il];
    snprintf(buf, n, "%s/%s/%s", quant_type_info(L->gate_exps.type)->name, quant_type_info(L->up_exps.type)->name,
             quant_type_info(L->down_exps.type)->name);
}

/* The per-layer reasons. */
static void layer_whys(gpu_plan_t *p, const model_t *m, const facts_t *f)
{
    for (int32_t il = 0; il < f->L; il++) {
        gpu_plan_layer_t *ly = &p->layer[il];
        char share[48] = "";
        if (ly->hot_share >= 0 && ly->n_resident && ly->n_resident < f->N)
            snprintf(share, sizeof share, " (%.0f%% of its routed pairs)", 100 * ly->hot_share);
        if (!f->gmat[il]) {
            snprintf(ly->why, sizeof ly->why, "no routed experts");
        } else if (ly->mode == GPU_PLAN_RESIDENT) {
            snprintf(ly->why, sizeof ly->why, "resident: all %d experts on the GPU, no exchange", f->N);
        } else if (!f->computable[il]) {
            char t[40];
            types_of(m, il, t, sizeof t);
            snprintf(ly->why, sizeof ly->why, "cpu: expert types %s are not for the device kernels", t);
        } else if (ly->mode == GPU_PLAN_STREAMED) {
            if (ly->n_resident)
                snprintf(ly->why, sizeof ly->why, "streamed: %d/%d experts resident%s, the others streamed",
                         ly->n_resident, f->N, share);
            else
                snprintf(ly->why, sizeof ly->why, "streamed: its experts copied to the GPU per large batch");
        } else if (ly->n_resident) {
            snprintf(ly->why, sizeof ly->why, "cpu: %d/%d experts resident%s, the others on the CPU (no staging)",
                     ly->n_resident, f->N, share);
        } else {
            snprintf(ly->why, sizeof ly->why, "cpu: no staging, its experts on the CPU side");
        }
    }
}

static void plan_hit_rate(gpu_plan_t *p, const facts_t *f, const uint64_t *routing)
{
    p->hit_rate = -1;
    uint64_t all = 0, hit = 0;
    for (int32_t il = 0; il < f->L; il++) {
        p->layer[il].hot_share = -1;
        if (!routing)
            continue;
        uint64_t la = 0, lh = 0;
        for (int32_t e = 0; e < f->N; e++) {
            const uint64_t n = routing[(size_t)il * (size_t)f->N + (size_t)e];
            la += n;
            lh += p->expert_resident[(size_t)il * (size_t)f->N + (size_t)e] ? n : 0;
        }
        p->layer[il].hot_share = la ? (double)lh / (double)la : 0.0;
        all += la;
        hit += lh;
    }
    if (routing)
        p->hit_rate = all ? (double)hit / (double)all : 0.0;
}

static void layer_runs(const gpu_plan_t *p, char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int32_t il = 0, run = -1; il <= p->n_layer && len + 16 < n; il++) {
        const bool r = il < p->n_layer && p->resident[il];
        if (r && run < 0)
            run = il;
        if (!r && run >= 0) {
            if (il - 1 > run)
                len += (size_t)snprintf(buf + len, n - len, "%s%d-%d", len ? "," : "", run, il - 1);
            else
                len += (size_t)snprintf(buf + len, n - len, "%s%d", len ? "," : "", run);
            run = -1;
        }
    }
}

/* The smallest chunk the options allow, and the chunks to try, largest first. */
static int32_t chunk_list(const gpu_plan_options_t *o, int32_t *list, int32_t *top_out)
{
    int32_t top = o->n_batch > 0 ? o->n_batch : GPU_PLAN_BATCH_AUTO_MAX;
    if (o->n_ctx > 0 && top > o->n_ctx)
        top = o->n_ctx;
    if (top < 1)
        top = 1;
    int32_t lo = o->n_batch > 0 && o->n_batch_min <= 0 ? top : o->n_batch_min > 0 ? o->n_batch_min : 1;
    if (lo > top)
        lo = top;
    int32_t n = 0;
    for (int32_t c = top;; c = c / 2 > lo ? c / 2 : lo) {
        list[n++] = c;
        if (c == lo || n == MAX_CHUNKS)
            break;
    }
    *top_out = top;
    return n;
}

/* The compact formats (of the cache's format's size or smaller) whose cache would fit in GPU memory at chunk lo,
 * as "; --kv-type q8_0 (3.19 GiB) or k8v4 (2.44 GiB) fits in GPU memory" (empty: none, or no budget). */
static void kv_compact_fits(const facts_t *f, const gpu_plan_options_t *o, int32_t lo, char *buf, size_t n)
{
    static const int32_t compact[] = {KV_TYPE_Q8_0, KV_TYPE_K8V4, KV_TYPE_Q4_0};
    const int32_t asked = kv_type_resolve(o->kv_type, KV_TYPE_F16);
    size_t len = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof compact / sizeof *compact && o->budget; i++) {
        gpu_plan_options_t t = *o;
        t.kv_type = compact[i];
        if (compact[i] == asked || kv_type_position_bytes(compact[i], f->c) >= kv_type_position_bytes(asked, f->c) ||
            fixed_bytes(f, &t, lo, false) > o->budget)
            continue;
        const double gib = (double)kv_rows_bytes(f->c, o->n_ctx, compact[i], NULL) / GiB;
        len += (size_t)snprintf(buf + len, len < n ? n - len : 0, "%s%s (%.2f GiB)", len ? " or " : "; --kv-type ",
                                kv_type_name(compact[i]), gib);
    }
    if (len && len < n)
        snprintf(buf + len, n - len, " fits in GPU memory");
}

/* Why the KV cache is where the plan put it. */
static void kv_why(gpu_plan_t *p, const planner_t *pl, int32_t chunk, bool compared, int32_t lo, const char *compact)
{
    const facts_t *f = pl->f;
    const double G = GiB;
    double other = 0;
    kv_read_ns(pl, chunk, !p->kv_host, &other);
    const double bpp = (double)kv_type_position_bytes(p->kv_type, f->c);
    if (!p->kv_host) {
        char alt[128] = "";
        if (compared)
            snprintf(alt, sizeof alt, " (from host RAM over PCIe: %.2f ms)", other / 1e6);
        snprintf(p->why_kv, sizeof p->why_kv, "in GPU memory: %s, %.2f GiB for %d positions (%.0f bytes a "
                 "position); the attention reads %.2f ms of it a generated token at a full cache%s",
                 kv_type_name(p->kv_type),
                 (double)p->n_seq * (double)kv_rows_bytes(f->c, p->n_ctx, p->kv_type, NULL) / G, p->n_ctx, bpp,
                 p->pred_kv_ms, alt);
        return;
    }
    const uint64_t on_dev = fixed_bytes(f, pl->o, lo, false);
    snprintf(p->why_kv, sizeof p->why_kv, "in host RAM (mapped): %s, %.2f GiB for %d positions; in GPU memory the "
             "dense part would need %.2f GiB (%s GPU memory's %.2f ms a token against %.2f ms over PCIe at %.0f "
             "GB/s); a layer's rows staged on the GPU for prefill (%.2f GiB)%s", kv_type_name(p->kv_type),
             (double)p->kv_host_bytes / G, p->n_ctx, (double)on_dev / G,
             on_dev > p->budget ? "over the budget;" : "slower overall;", other / 1e6, p->pred_kv_ms,
             kv_decode_gbps(pl, p->kv_type, true), (double)p->kv_stage / G, compact);
}

int gpu_plan_compute(gpu_plan_t *p, const model_t *m, const gpu_plan_options_t *o, guild_err_t *err)
{
    memset(p, 0, sizeof *p);
    facts_t f;
    if (facts_init(&f, m, err) < 0)
        return -1;
    planner_t pl = {.f = &f, .o = o};
    if (o->cost)
        pl.cost = *o->cost;
    else
        gpu_cost_default(&pl.cost, o->copy_path);
    pl.ref_prompt = o->ref_prompt > 0 ? o->ref_prompt : o->n_ctx < REF_PROMPT_MAX ? o->n_ctx : REF_PROMPT_MAX;
    pl.ref_prompt = pl.ref_prompt > 0 ? pl.ref_prompt : 1;
    pl.ref_gen = o->ref_gen > 0 ? o->ref_gen : REF_GEN;
    pl.per_expert = o->routing && (o->caps & GPU_PLAN_CAP_EXPERTS);
    pl.cap = o->max_expert_layers == GPU_EXPERTS_NONE ? 0
             : o->max_expert_layers > 0 ? (int64_t)o->max_expert_layers * (pl.per_expert ? f.N : 1)
                                        : -1;
    cand_t best = {0}, cur = {0}, dev = {0};
    int rc = -1;
    const size_t LN = (size_t)(f.L > 0 ? f.L : 1) * (size_t)(f.N > 0 ? f.N : 1);
    best.res = calloc(LN, 1);
    cur.res = calloc(LN, 1);
    best.r = calloc((size_t)(f.L > 0 ? f.L : 1), sizeof *best.r);
    cur.r = calloc((size_t)(f.L > 0 ? f.L : 1), sizeof *cur.r);
    dev.res = calloc(LN, 1);
    dev.r = calloc((size_t)(f.L > 0 ? f.L : 1), sizeof *dev.r);
    if (pl.per_expert && (pl.order = malloc(LN * sizeof *pl.order))) {
        for (int32_t il = 0; il < f.L; il++)
            for (int32_t e = 0; e < f.N && f.computable[il]; e++)
                pl.order[pl.n_order++] = (int64_t)il * f.N + e;
        qsort_r(pl.order, (size_t)pl.n_order, sizeof *pl.order, hotter, (void *)o->routing);
    }
    if (!best.res || !cur.res || !best.r || !cur.r || !dev.res || !dev.r || (pl.per_expert && !pl.order)) {
        guild_err_set(err, "gpu plan: out of memory");
        goto done;
    }

    int32_t chunks[MAX_CHUNKS], top;
    const int32_t n_chunks = chunk_list(o, chunks, &top);
    const bool any_dev = f.n_computable > 0 && o->max_expert_layers != GPU_EXPERTS_NONE;
    /* no budget: nothing to save, no staging (every expert the device computes is resident, up to the cap);
     * --gpu-experts none: every expert on the CPU side, neither resident nor streamed */
    const bool can_stream = f.n_computable > 0 && o->budget && o->max_expert_layers != GPU_EXPERTS_NONE;
    const int32_t kmin = f.N / GPU_PLAN_MIN_SLICE_DIV > 1 ? f.N / GPU_PLAN_MIN_SLICE_DIV : 1;
    const int32_t kmin_ok = (o->caps & GPU_PLAN_CAP_SLICES) ? kmin : f.N; /* the smallest slot the backend takes */
    bool have = false, fits_any = false, have_dev = false;
    double top_score = -1, top_dev = -1; /* the best at the largest chunk, for the why */
    /* the KV cache in GPU memory (kh 0), then in host RAM (kh 1) where the backend can keep it there: the best
     * candidate of each placement, the one with the shorter reference request (with the cache's reads) taken */
    const int n_place = o->budget && (o->caps & GPU_PLAN_CAP_KV_HOST) && gpu_plan_kv_host_possible(f.c) ? 2 : 1;
    for (int kh = 0; kh < n_place; kh++) {
    if (kh == 1) { /* the device's best aside in dev */
        cand_t t = dev;
        dev = best;
        best = t;
        have_dev = have;
        have = false;
        top_dev = top_score;
        top_score = -1;
    }
    for (int ci = 0; ci < n_chunks; ci++) {
        const int32_t NB = chunks[ci];
        const uint64_t fx = fixed_bytes(&f, o, NB, kh), eb = expert_buffers_bytes(&f, (uint64_t)NB);
        const double kv_ns = kv_read_ns(&pl, NB, kh, NULL);
        if (o->budget && fx > o->budget)
            continue;
        fits_any = true;
        /* streaming: rings of slots of k experts, from a whole layer down, at most two layers in all; rings of
         * slices have three slots or more whenever three of the smallest fit, so that a chunk copies while two
         * compute (two slices only at the budgets where three do not fit) */
        const int32_t min_slots = !o->budget || fx + eb + 3 * slot_bytes(&f, kmin_ok) <= o->budget ? 3 : 2;
        for (int32_t k = f.N; can_stream && k >= kmin; k = k / 2 >= kmin && k > kmin ? k / 2 : 0)
            for (size_t si = 0; si < sizeof stage_slot_counts / sizeof *stage_slot_counts; si++) {
                const int32_t ns = stage_slot_counts[si], kk = k;
                if ((ns < min_slots && kk < f.N) || (int64_t)ns * kk > 2 * (int64_t)f.N)
                    continue;
                const uint64_t need = fx + eb + (uint64_t)ns * slot_bytes(&f, kk);
                if (!(o->caps & GPU_PLAN_CAP_SLICES) && kk < f.N)
                    continue;
                if (o->budget && need > o->budget)
                    continue;
                cur.chunk = NB;
                cur.slots = ns;
                cur.k = kk;
                cur.dev = true;
                fill(&pl, &cur, o->budget ? (int64_t)(o->budget - need) : INT64_MAX);
                bool left = false; /* a layer the slots would stream */
                for (int32_t il = 0; il < f.L && !left; il++)
                    left = f.computable[il] && cur.r[il] < f.N;
                if (!left)
                    continue;
                score(&pl, &cur);
                cur.score += kv_ns;
                cur.kv_host = kh;
                if (NB == top && (top_score < 0 || cur.score < top_score))
                    top_score = cur.score;
                if (!have || (cur.streams_all && !best.streams_all) ||
                    (cur.streams_all == best.streams_all && cur.score < best.score * (1 - TIE))) {
                    cand_t t = best;
                    best = cur;
                    cur = t;
                    have = true;
                }
            }
        /* no staging: the resident experts (if any fit beside their buffers) and the CPU side */
        int64_t R = !any_dev ? -1 : !o->budget ? INT64_MAX : fx + eb <= o->budget ? (int64_t)(o->budget - fx - eb) : -1;
        cur.chunk = NB;
        cur.slots = 0;
        cur.k = 0;
        fill(&pl, &cur, R);
        cur.dev = cur.experts > 0;
        score(&pl, &cur);
        cur.score += kv_ns;
        cur.kv_host = kh;
        if (NB == top && (top_score < 0 || cur.score < top_score))
            top_score = cur.score;
        if (!have || (cur.streams_all && !best.streams_all) ||
            (cur.streams_all == best.streams_all && cur.score < best.score * (1 - TIE))) {
            cand_t t = best;
            best = cur;
            cur = t;
            have = true;
        }
    }
    }
    if (n_place == 2 && have_dev && (!have || dev.score <= best.score)) {
        cand_t t = dev;
        dev = best;
        best = t;
        top_score = top_dev;
        have = true;
    }
    const int32_t lo = chunks[n_chunks - 1];
    char compact[160];
    kv_compact_fits(&f, o, lo, compact, sizeof compact);
    if (!fits_any) {
        gpu_plan_t t;
        memset(&t, 0, sizeof t);
        plan_sizes(&t, &f, o->budget, o->context, o->copy_path, o->n_ctx, o->n_seq, o->kv_type, lo, false, o->mtp,
                   o->rollback);
        const uint64_t fixed = t.reserve + t.driver + t.dense + t.kv + t.buffers + t.mtp + t.rollback;
        char host[160] = "", extra[224] = "";
        int at = 0;
        if (t.mtp)
            at = snprintf(extra, sizeof extra, ", the multi-token-prediction layer %.2f GiB", (double)t.mtp / GiB);
        if (t.rollback)
            snprintf(extra + at, sizeof extra - (size_t)at, ", the recurrent states a --spec rollback keeps %.2f GiB for "
                     "%d rows a sequence", (double)t.rollback / GiB, o->rollback);
        if (n_place == 2)
            snprintf(host, sizeof host, "; with its rows in host RAM the GPU still needs %.2f GiB",
                     (double)fixed_bytes(&f, o, lo, true) / GiB);
        else if (o->budget && !(o->caps & GPU_PLAN_CAP_KV_HOST))
            snprintf(host, sizeof host, "; this backend keeps the cache in GPU memory only");
        guild_err_set(err, "--gpu-mem %.2f GiB: the dense part needs %.2f GiB (weights %.2f GiB, KV cache %.2f GiB "
                      "(%s) for %d positions x %d sequences, buffers %.2f GiB for batches of %d, CUDA context and "
                      "the driver's share ~%.2f GiB%s) and does not fit%s; lower --ctx%s%s%s, or raise --gpu-mem "
                      "(%.2f GiB also streams the experts)",
                      (double)o->budget / GiB, (double)fixed / GiB, (double)t.dense / GiB, (double)t.kv / GiB,
                      kv_type_name(t.kv_type), o->n_ctx, t.n_seq, (double)t.buffers / GiB, lo,
                      (double)(t.reserve + t.driver) / GiB,
                      extra, host, lo > 1 ? " or --batch" : "", t.rollback ? " or --spec-max" : "", compact,
                      (double)stream_min_bytes(&f, o, lo, false, kmin_ok) / GiB);
        goto done;
    }

    /* the plan from the best candidate */
    if (plan_alloc(p, f.L, f.N, err) < 0)
        goto done;
    plan_sizes(p, &f, o->budget, o->context, o->copy_path, o->n_ctx, o->n_seq, o->kv_type, best.chunk, best.kv_host,
               o->mtp, o->rollback);
    kv_read_ns(&pl, best.chunk, best.kv_host, &p->pred_kv_ms);
    p->pred_kv_ms /= 1e6;
    kv_why(p, &pl, best.chunk, n_place == 2, lo, compact);
    p->n_batch_asked = o->n_batch;
    p->caps = o->caps;
    p->cost = pl.cost;
    p->have_routing = o->routing != NULL;
    memcpy(p->expert_resident, best.res, LN);
    p->stage_slots = best.slots;
    p->stage_slot_experts = best.k;
    p->stage_slot_bytes = best.slots ? slot_bytes(&f, best.k) : 0;
    p->staging = (uint64_t)best.slots * p->stage_slot_bytes;
    plan_layers(p, &f);
    p->expert_buffers = best.slots || p->n_resident_experts ? expert_buffers_bytes(&f, (uint64_t)best.chunk) : 0;
    plan_hit_rate(p, &f, o->routing);
    p->pred_prefill_tps = best.prefill_ns > 0 ? (double)pl.ref_prompt / best.prefill_ns * 1e9 : 0;
    p->pred_decode_ms = best.decode_ns / 1e6;
    layer_whys(p, m, &f);

    /* from how many tokens streaming beats the CPU side, on the first streamed layer */
    for (int32_t il = 0; il < f.L && p->stage_slots && !p->stream_min_tokens; il++) {
        if (p->layer[il].mode != GPU_PLAN_STREAMED)
            continue;
        const int32_t r = p->layer[il].n_resident;
        const double h = hot_share(&pl, best.res, best.r, il);
        for (int32_t n = 1; n <= p->n_batch && !p->stream_min_tokens; n *= 2)
            if (layer_ns(&pl, il, r, h, true, best.k, best.slots, n) <
                0.95 * layer_ns(&pl, il, r, h, false, best.k, best.slots, n))
                p->stream_min_tokens = n;
        if (!p->stream_min_tokens)
            p->stream_min_tokens = -1;
    }

    /* why this chunk */
    const double G = GiB;
    char asked[64];
    if (o->n_batch > 0)
        snprintf(asked, sizeof asked, "--batch %d", o->n_batch);
    else
        snprintf(asked, sizeof asked, "--batch auto: up to %d", top);
    if (best.chunk == top) {
        snprintf(p->why_batch, sizeof p->why_batch, "%d tokens (%s): buffers %.2f GiB", best.chunk, asked,
                 (double)(p->buffers + p->expert_buffers) / G);
    } else if (o->budget && fixed_bytes(&f, o, top, best.kv_host) > o->budget) {
        snprintf(p->why_batch, sizeof p->why_batch, "%d tokens (%s): the dense part with buffers for %d needs "
                 "%.2f GiB, over the budget", best.chunk, asked, top,
                 (double)fixed_bytes(&f, o, top, best.kv_host) / G);
    } else {
        int at = snprintf(p->why_batch, sizeof p->why_batch, "%d tokens (%s): %d's buffers would take the room of "
                          "staging or resident experts; predicted %.2f s for the reference request against %.2f s",
                          best.chunk, asked, top, best.score / 1e9, top_score / 1e9);
        /* what a user raises --gpu-mem to for the large chunk: its dense part and buffers with the smallest ring
         * (two slots of the smallest slice), rounded up to the hundredth of a GiB the message prints, so that
         * that budget holds it */
        if (can_stream && at > 0 && (size_t)at < sizeof p->why_batch) {
            snprintf(p->why_batch + at, sizeof p->why_batch - (size_t)at, "; %d-token chunks with a ring of 2 slots "
                     "need --gpu-mem %.2fG", top, gib_up(stream_min_bytes(&f, o, top, best.kv_host, kmin_ok)));
        }
    }
    /* why this staging */
    const uint64_t min_stage = expert_buffers_bytes(&f, (uint64_t)lo) + 2 * slot_bytes(&f, kmin_ok);
    if (best.slots) {
        char slice[96] = "a whole layer";
        if (best.k < f.N)
            snprintf(slice, sizeof slice, "%d of a layer's %d experts", best.k, f.N);
        char from[48] = "";
        if (p->stream_min_tokens > 0)
            snprintf(from, sizeof from, " from ~%d tokens a batch", p->stream_min_tokens);
        snprintf(p->why_stage, sizeof p->why_stage, "a ring of %d slots of %s (%.2f GiB each, %.2f GiB): every "
                 "layer not wholly resident streams its other experts at %.0f GB/s%s, a layer's chunks computed as "
                 "they land while the next ones copy, split with the CPU side by measured times",
                 best.slots, slice, (double)p->stage_slot_bytes / G, (double)p->staging / G, pl.cost.h2d_gbps,
                 from);
    } else if (o->max_expert_layers == GPU_EXPERTS_NONE) {
        snprintf(p->why_stage, sizeof p->why_stage, "none (--gpu-experts none: every expert on the CPU side)");
    } else if (!f.n_computable) {
        snprintf(p->why_stage, sizeof p->why_stage, "none: no layer's experts are of types the device kernels "
                 "take (%s)", gpu_plan_supported_types());
    } else if (!o->budget) {
        snprintf(p->why_stage, sizeof p->why_stage, "none: no budget%s", best.streams_all ? ", every expert "
                 "the device computes is resident" : " (--gpu-experts caps the resident layers; the others on "
                 "the CPU side)");
    } else if (best.streams_all) {
        snprintf(p->why_stage, sizeof p->why_stage, "none: every expert the device can compute is resident");
    } else {
        snprintf(p->why_stage, sizeof p->why_stage, "none: two slots of %d experts with their buffers need %.2f GiB "
                 "more; the experts not resident run on the CPU side (--gpu-mem %.2f GiB would stream them)",
                 kmin_ok, (double)min_stage / G, (double)stream_min_bytes(&f, o, lo, best.kv_host, kmin_ok) / G);
    }
    /* why these resident experts */
    char runs[160];
    layer_runs(p, runs, sizeof runs);
    if (!p->n_resident_experts) {
        snprintf(p->why_resident, sizeof p->why_resident, "%s",
                 o->max_expert_layers == GPU_EXPERTS_NONE ? "none (--gpu-experts none)"
                 : !f.n_computable                        ? "none"
                                                          : "none: no room left for one");
    } else if (pl.per_expert) {
        snprintf(p->why_resident, sizeof p->why_resident, "the hottest experts of the routing profile%s%s: %lld "
                 "(%.2f GiB), %d layers whole; %.1f%% of its routed pairs", o->routing_name ? " " : "",
                 o->routing_name ? o->routing_name : "", (long long)p->n_resident_experts, (double)p->experts / G,
                 p->n_resident, 100 * p->hit_rate);
    } else {
        snprintf(p->why_resident, sizeof p->why_resident, "whole layers in index order (%s): %s", runs,
                 !o->routing ? "no routing profile" : "the backend keeps whole layers only");
    }
    rc = 0;
done:
    if (rc < 0)
        gpu_plan_fini(p);
    free(best.res);
    free(cur.res);
    free(best.r);
    free(cur.r);
    free(dev.res);
    free(dev.r);
    free(pl.order);
    facts_fini(&f);
    return rc;
}

int gpu_plan_import(gpu_plan_t *p, const model_t *m, uint64_t budget, int32_t n_ctx, int32_t n_seq, int32_t kv_type,
                    int32_t n_batch, int32_t stage_slots, int32_t stage_slot_experts, const uint8_t *expert_resident,
                    guild_err_t *err)
{
    memset(p, 0, sizeof *p);
    facts_t f;
    if (facts_init(&f, m, err) < 0)
        return -1;
    int rc = -1;
    if (n_batch < 1 || n_ctx < 1) {
        guild_err_set(err, "gpu plan: chunk of %d tokens, %d positions", n_batch, n_ctx);
        goto done;
    }
    if (stage_slots && (stage_slots < 2 || stage_slot_experts < 1 || stage_slot_experts > f.N || !f.n_computable)) {
        guild_err_set(err, "gpu plan: %d staging slots of %d experts (expected 0, or >= 2 of 1..%d, and a layer "
                      "the device computes)", stage_slots, stage_slot_experts, f.N);
        goto done;
    }
    if (plan_alloc(p, f.L, f.N, err) < 0)
        goto done;
    /* the driver's share without the streamed experts' page tables, which the coordinator counted for a stager that
     * maps them (it knows the stager): a plan it fit in the budget is never refused here */
    plan_sizes(p, &f, budget, 0, GPU_COPY_RING, n_ctx, n_seq, kv_type, n_batch, false, false, 0);
    p->n_batch_asked = n_batch;
    p->caps = GPU_PLAN_CAP_EXPERTS | GPU_PLAN_CAP_SLICES;
    gpu_cost_default(&p->cost, GPU_COPY_PINNED);
    snprintf(p->cost.source, sizeof p->cost.source, "the coordinator's");
    for (int32_t il = 0; il < f.L; il++)
        for (int32_t e = 0; e < f.N; e++) {
            const size_t i = (size_t)il * (size_t)f.N + (size_t)e;
            if (!expert_resident || !expert_resident[i])
                continue;
            if (!f.computable[il]) {
                guild_err_set(err, "gpu plan: layer %d expert %d resident, the device cannot compute that layer",
                              il, e);
                goto done;
            }
            p->expert_resident[i] = 1;
        }
    p->stage_slots = stage_slots;
    p->stage_slot_experts = stage_slots ? stage_slot_experts : 0;
    p->stage_slot_bytes = stage_slots ? slot_bytes(&f, stage_slot_experts) : 0;
    p->staging = (uint64_t)stage_slots * p->stage_slot_bytes;
    plan_layers(p, &f);
    p->expert_buffers = stage_slots || p->n_resident_experts ? expert_buffers_bytes(&f, (uint64_t)n_batch) : 0;
    if (budget && gpu_plan_total(p) > budget && gpu_plan_kv_host_possible(f.c)) /* gpu_plan_compute's choice */
        plan_sizes(p, &f, budget, 0, GPU_COPY_RING, n_ctx, n_seq, kv_type, n_batch, true, false, 0);
    plan_hit_rate(p, &f, NULL);
    layer_whys(p, m, &f);
    snprintf(p->why_kv, sizeof p->why_kv, "%s (the coordinator's plan)", p->kv_host ? "in host RAM" : "in GPU memory");
    snprintf(p->why_batch, sizeof p->why_batch, "%d tokens (the coordinator's plan)", n_batch);
    snprintf(p->why_stage, sizeof p->why_stage, "the coordinator's plan");
    snprintf(p->why_resident, sizeof p->why_resident, "the coordinator's plan");
    if (budget && gpu_plan_total(p) > budget) {
        guild_err_set(err, "gpu plan: %.2f GiB planned, over the budget of %.2f GiB", (double)gpu_plan_total(p) / GiB,
                      (double)budget / GiB);
        goto done;
    }
    rc = 0;
done:
    if (rc < 0)
        gpu_plan_fini(p);
    facts_fini(&f);
    return rc;
}

int gpu_plan_copy(gpu_plan_t *dst, const gpu_plan_t *src, guild_err_t *err)
{
    *dst = *src;
    dst->resident = NULL;
    dst->layer = NULL;
    dst->expert_resident = NULL;
    if (plan_alloc(dst, src->n_layer, src->n_expert, err) < 0)
        return -1;
    const size_t L = (size_t)(src->n_layer > 0 ? src->n_layer : 1);
    memcpy(dst->resident, src->resident, L * sizeof *dst->resident);
    memcpy(dst->layer, src->layer, L * sizeof *dst->layer);
    memcpy(dst->expert_resident, src->expert_resident, L * (size_t)(src->n_expert > 0 ? src->n_expert : 1));
    return 0;
}

void gpu_plan_fini(gpu_plan_t *p)
{
    free(p->resident);
    free(p->layer);
    free(p->expert_resident);
    p->resident = NULL;
    p->layer = NULL;
    p->expert_resident = NULL;
}

uint64_t gpu_plan_stage_slot_bytes(const gpu_plan_t *p)
{
    if (!p->staging)
        return 0;
    /* two slots in flight cover one device slot, a third keeps the stager busy; more than 128 MiB a slot buys
     * no PCIe rate */
    const uint64_t MiB = (uint64_t)1 << 20;
    uint64_t slot = (p->staging / 4 + MiB - 1) / MiB * MiB;
    return slot < MiB ? MiB : slot > 128 * MiB ? 128 * MiB : slot;
}

uint64_t gpu_plan_total(const gpu_plan_t *p)
{
    return p->reserve + p->driver + p->dense + p->kv + p->kv_stage + p->buffers + p->expert_buffers + p->staging +
           p->experts + p->mtp + p->rollback;
}

void gpu_plan_print(const gpu_plan_t *p, FILE *out)
{
    const double G = GiB;
    if (p->budget)
        fprintf(out, "gpu plan: budget %.2f GiB, planned %.2f GiB\n", (double)p->budget / G,
                (double)gpu_plan_total(p) / G);
    else
        fprintf(out, "gpu plan: no budget, planned %.2f GiB\n", (double)gpu_plan_total(p) / G);
    fprintf(out, "  dense weights %.2f GiB, KV cache %.2f GiB (%d positions", (double)p->dense / G,
            (double)(p->kv + p->kv_stage) / G, p->n_ctx);
    if (p->n_seq > 1)
        fprintf(out, " x %d sequences", p->n_seq);
    fprintf(out, "%s), buffers %.2f GiB (batches of %d)", p->kv_host ? ", its rows in host RAM: a layer's staging" : "",
            (double)p->buffers / G, p->n_batch);
    if (p->reserve)
        fprintf(out, ", CUDA context ~%.2f GiB", (double)p->reserve / G);
    if (p->driver)
        fprintf(out, ", the driver's share ~%.2f GiB", (double)p->driver / G);
    if (p->mtp)
        fprintf(out, ", the multi-token-prediction layer %.2f GiB", (double)p->mtp / G);
    if (p->rollback)
        fprintf(out, ", recurrent states kept for a rollback %.2f GiB", (double)p->rollback / G);
    fprintf(out, "\n  routed experts: %d of %d layers resident on the GPU, %lld experts in all (%.2f of %.2f GiB, "
            "buffers %.2f GiB)", p->n_resident, p->n_layer, (long long)p->n_resident_experts,
            (double)p->experts / G, (double)p->experts_all / G, (double)p->expert_buffers / G);
    if (p->n_resident && p->n_resident < p->n_layer) {
        char runs[160];
        layer_runs(p, runs, sizeof runs);
        fprintf(out, ": layers %s", runs);
    }
    if (p->n_resident < p->n_layer)
        fprintf(out, "; the others on the CPU%s", p->staging ? ", or streamed to the GPU for large batches" : "");
    if (p->staging)
        fprintf(out, " (staging %.2f GiB)", (double)p->staging / G);
    fprintf(out, "\n");
    fprintf(out, "  chunk: %s\n  staging: %s\n  resident: %s\n  KV cache: %s\n", p->why_batch, p->why_stage,
            p->why_resident, p->why_kv);
    if (p->pred_prefill_tps > 0)
        fprintf(out, "  predicted (routed experts only): prefill %.0f tok/s, decode %.2f ms a token on the CPU "
                "side; costs: %s: PCIe %.1f GB/s, GPU %.0f TFLOP/s, CPU %.1f TFLOP/s and %.0f GB/s\n",
                p->pred_prefill_tps, p->pred_decode_ms, p->cost.source,
                p->cost.h2d_gbps, p->cost.gpu_tflops, p->cost.cpu_tflops, p->cost.cpu_gbps);
    if (p->hit_rate >= 0)
        fprintf(out, "  hit rate of the routing profile: %.1f%% of its routed pairs on resident experts\n",
                100 * p->hit_rate);
    /* one line per run of layers with the same reason */
    for (int32_t il = 0; il < p->n_layer;) {
        int32_t j = il;
        while (j + 1 < p->n_layer && !strcmp(p->layer[j + 1].why, p->layer[il].why))
            j++;
        if (j > il)
            fprintf(out, "    layers %d-%d: %s\n", il, j, p->layer[il].why);
        else
            fprintf(out, "    layer %d: %s\n", il, p->layer[il].why);
        il = j + 1;
    }
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
