/* The layer program of the CPU backend: one transformer block of a MoE model, for the n tokens of a batch.
 *
 *   xn  = rmsnorm(x, attn_norm)
 *   q,k,v = wq xn (+ bq), wk xn (+ bk), wv xn (+ bv)
 *   q,k = qk-norm (per head: qwen3moe; whole vector: olmoe), then RoPE; k,v -> KV cache at the token's position
 *   att = softmax(q k^T / sqrt(head_dim)) v over positions 0..pos (each query head h uses KV head
 *         h / (n_head / n_head_kv))
 *   x  += wo att
 *   xn  = rmsnorm(x, ffn_norm)
 *   ids, w = top-k(softmax(router xn)) (+ renorm per architecture)
 *   y   = routed experts (moe_exec_t: unweighted, per slot)
 *   x  += (sum over slots k ascending of w[k] * y[k]) [+ sigmoid(shexp_gate_inp xn) * shexp(xn)]
 *
 * Work is split between threads by whole output vectors (tokens, heads or row blocks), never inside a sum.
 */
#include <math.h>
#include <string.h>

#include "core/model/activation.h"
#include "core/quant/quant.h"
#include "gpu-worker/dense/cpu/cpu_matmul.h"
#include "gpu-worker/dense/cpu/cpu_state.h"

typedef struct layer_job {
    cpu_backend_t *b;
    const model_layer_t *L;
    int32_t il;
    int32_t n;
} layer_job_t;

static void attn_norm_task(void *ctx, int64_t t, int thread)
{
    layer_job_t *j = ctx;
    const int64_t E = j->b->cfg->n_embd;
    (void)thread;
    cpu_rmsnorm(j->b->xn + t * E, j->b->x + t * E, j->L->attn_norm.data, E, j->b->cfg->norm_eps);
}

static void add_bias(float *x, const model_tensor_t *bias, int64_t n)
{
    const float *b = bias->data;
    for (int64_t i = 0; i < n; i++)
        x[i] += b[i];
}

/* Biases, Q/K norms, RoPE, and the K/V of token t into the cache. */
static void qk_prepare_task(void *ctx, int64_t t, int thread)
{
    layer_job_t *j = ctx;
    cpu_backend_t *b = j->b;
    const model_config_t *c = b->cfg;
    const model_layer_t *L = j->L;
    const model_arch_info_t *info = model_arch_info(c->arch);
    const int64_t HD = c->head_dim, Q = (int64_t)c->n_head * HD, KV = (int64_t)c->n_head_kv * HD;
    float *q = b->q + t * Q, *k = b->k + t * KV, *v = b->v + t * KV;
    (void)thread;
    if (info->qkv_bias) {
        add_bias(q, &L->bq, Q);
        add_bias(k, &L->bk, KV);
        add_bias(v, &L->bv, KV);
    }
    if (info->qk_norm == MODEL_QK_NORM_HEAD) {
        for (int32_t h = 0; h < c->n_head; h++)
            cpu_rmsnorm(q + h * HD, q + h * HD, L->q_norm.data, HD, c->norm_eps);
        for (int32_t h = 0; h < c->n_head_kv; h++)
            cpu_rmsnorm(k + h * HD, k + h * HD, L->k_norm.data, HD, c->norm_eps);
    } else if (info->qk_norm == MODEL_QK_NORM_FULL) {
        cpu_rmsnorm(q, q, L->q_norm.data, Q, c->norm_eps);
        cpu_rmsnorm(k, k, L->k_norm.data, KV, c->norm_eps);
    }
    const float *cs = b->rope_cs + t * c->n_rot;
    cpu_rope_apply(&b->rope, q, c->n_head, c->head_dim, cs);
    cpu_rope_apply(&b->rope, k, c->n_head_kv, c->head_dim, cs);
    const int64_t pos = b->kv_len + t;
    const size_t cell = ((size_t)j->il * (size_t)b->n_ctx + (size_t)pos) * (size_t)KV;
    memcpy(b->k_cache + cell, k, (size_t)KV * sizeof *k);
    memcpy(b->v_cache + cell, v, (size_t)KV * sizeof *v);
}

/* task = t * n_head + h */
static void attention_task(void *ctx, int64_t task, int thread)
{
    layer_job_t *j = ctx;
    cpu_backend_t *b = j->b;
    const model_config_t *c = b->cfg;
    const int64_t t = task / c->n_head;
    const int32_t h = (int32_t)(task % c->n_head);
    const int32_t hkv = h / (c->n_head / c->n_head_kv);
    const int64_t HD = c->head_dim, Q = (int64_t)c->n_head * HD, KV = (int64_t)c->n_head_kv * HD;
    const size_t layer0 = (size_t)j->il * (size_t)b->n_ctx * (size_t)KV;
    cpu_attention_head(b->att + t * Q + h * HD, b->q + t * Q + h * HD, b->k_cache + layer0 + hkv * HD,
                       b->v_cache + layer0 + hkv * HD, KV, b->row_pos[t] + 1, c->head_dim,
                       1.0f / sqrtf((float)c->head_dim), b->scores + (size_t)thread * (size_t)b->n_ctx);
}

static void attn_residual_task(void *ctx, int64_t t, int thread)
{
    layer_job_t *j = ctx;
    const int64_t E = j->b->cfg->n_embd;
    float *x = j->b->x + t * E;
    const float *p = j->b->proj + t * E;
    (void)thread;
    for (int64_t i = 0; i < E; i++)
        x[i] = p[i] + x[i];
}

static void ffn_norm_task(void *ctx, int64_t t, int thread)
{
    layer_job_t *j = ctx;
    const int64_t E = j->b->cfg->n_embd;
    (void)thread;
    cpu_rmsnorm(j->b->xn + t * E, j->b->x + t * E, j->L->ffn_norm.data, E, j->b->cfg->norm_eps);
}

static void router_task(void *ctx, int64_t t, int thread)
{
    layer_job_t *j = ctx;
    cpu_backend_t *b = j->b;
    const model_config_t *c = b->cfg;
    const int64_t K = c->n_expert_used;
    cpu_router_topk(b->router_logits + t * c->n_expert, c->n_expert, c->n_expert_used,
                    model_arch_info(c->arch)->router_renorm, c->expert_weights_scale, b->ids + t * K,
                    b->weights + t * K, b->probs + (size_t)thread * (size_t)c->n_expert);
}

static void swiglu_task(void *ctx, int64_t t, int thread)
{
    layer_job_t *j = ctx;
    const int64_t F = j->b->cfg->n_ff_shexp;
    float *g = j->b->sh_gate + t * F;
    const float *u = j->b->sh_up + t * F;
    (void)thread;
    for (int64_t i = 0; i < F; i++)
        g[i] = model_silu(g[i]) * u[i];
}

/* x[t] = (sum_k w[t][k] * y[t][k] [+ sigmoid(logit) * shexp]) + x[t] */
static void combine_task(void *ctx, int64_t t, int thread)
{
    layer_job_t *j = ctx;
    cpu_backend_t *b = j->b;
    const model_config_t *c = b->cfg;
    const int64_t E = c->n_embd, K = c->n_expert_used;
    const bool shared = model_arch_info(c->arch)->shared_expert;
    const float gate = shared ? model_sigmoid(b->sh_logit[t]) : 0.0f;
    const float *w = b->weights + t * K;
    const float *y = b->y + t * K * E;
    const float *sh = b->proj + t * E;
    float *x = b->x + t * E;
    (void)thread;
    for (int64_t i = 0; i < E; i++) {
        float acc = w[0] * y[i];
        for (int64_t k = 1; k < K; k++)
            acc += w[k] * y[k * E + i];
        if (shared)
            acc += sh[i] * gate;
        x[i] = acc + x[i];
    }
}

/* Moves rows keep[j] of buf (width floats each) to rows j, through scratch (n_keep * width floats). */
static void gather_rows(float *buf, int64_t width, const int32_t *keep, int32_t n_keep, float *scratch)
{
    for (int32_t j = 0; j < n_keep; j++)
        memcpy(scratch + j * width, buf + (int64_t)keep[j] * width, (size_t)width * sizeof *buf);
    memcpy(buf, scratch, (size_t)n_keep * (size_t)width * sizeof *buf);
}

int cpu_layer_forward(cpu_backend_t *b, int32_t il, int32_t n, const int32_t *keep, int32_t n_keep,
                      guild_err_t *err)
{
    const model_config_t *c = b->cfg;
    const model_layer_t *L = &b->w->layers[il];
    const int64_t E = c->n_embd, HD = c->head_dim, Q = (int64_t)c->n_head * HD, KV = (int64_t)c->n_head_kv * HD;
    layer_job_t j = {b, L, il, n};
    guild_pool_t *pool = b->pool;

    /* attention */
    guild_pool_run(pool, n, attn_norm_task, &j);
    cpu_linear(pool, &L->wq, 0, Q, n, b->xn, E, b->q, Q, b->act);
    cpu_linear(pool, &L->wk, 0, KV, n, b->xn, E, b->k, KV, b->act);
    cpu_linear(pool, &L->wv, 0, KV, n, b->xn, E, b->v, KV, b->act);
    guild_pool_run(pool, n, qk_prepare_task, &j);
    for (int32_t t = 0; t < n; t++)
        b->row_pos[t] = b->kv_len + t;
    if (keep) {
        /* att and proj are free until the attention and attn_output below write them */
        gather_rows(b->q, Q, keep, n_keep, b->att);
        gather_rows(b->x, E, keep, n_keep, b->proj);
        for (int32_t t = 0; t < n_keep; t++)
            b->row_pos[t] = b->kv_len + keep[t];
        n = n_keep;
        j.n = n;
        if (n == 0)
            return 0;
    }
    guild_pool_run(pool, (int64_t)n * c->n_head, attention_task, &j);
    cpu_linear(pool, &L->wo, 0, E, n, b->att, Q, b->proj, E, b->act);
    guild_pool_run(pool, n, attn_residual_task, &j);

    /* mixture of experts */
    guild_pool_run(pool, n, ffn_norm_task, &j);
    cpu_linear(pool, &L->router, 0, c->n_expert, n, b->xn, E, b->router_logits, c->n_expert, b->act);
    guild_pool_run(pool, n, router_task, &j);
    if (moe_exec_run(b->moe, il, n, b->xn, b->ids, b->y, err) < 0)
        return guild_err_prefix(err, "layer %d: routed experts: ", il);
    if (model_arch_info(c->arch)->shared_expert) {
        const int64_t F = c->n_ff_shexp;
        cpu_linear(pool, &L->shexp_gate_inp, 0, 1, n, b->xn, E, b->sh_logit, 1, b->act);
        cpu_linear(pool, &L->shexp_gate, 0, F, n, b->xn, E, b->sh_gate, F, b->act);
        cpu_linear(pool, &L->shexp_up, 0, F, n, b->xn, E, b->sh_up, F, b->act);
        guild_pool_run(pool, n, swiglu_task, &j);
        cpu_linear(pool, &L->shexp_down, 0, E, n, b->sh_gate, F, b->proj, E, b->act);
    }
    guild_pool_run(pool, n, combine_task, &j);
    return 0;
}
