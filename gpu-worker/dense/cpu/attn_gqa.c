/* GQA attention (MODEL_ATTN_GQA) on the CPU backend, for the n rows of a batch:
 *
 *   q,k,v = wq xn (+ bq), wk xn (+ bk), wv xn (+ bv)            (option qkv bias; option output gate: wq
 *                                                                  gives each head's query, then its gate)
 *   q,k   = RMSNorm per head or of the whole vector              (options q/k norm), then RoPE
 *   k,v   -> the KV cache at the row's position, in its format (kv_format.h: quantized from the row's own K/V;
 *           k8v4's values rotated head by head)
 *   att   = softmax(q k^T / sqrt(head_dim)) v over positions 0..pos (query head h uses KV head
 *           h / (n_head / n_head_kv)), for the kept rows only; a sliding layer (option sliding window) over the
 *           last window positions up to pos only; with option attention sinks head h's sink logit joins the
 *           softmax
 *           reading the cache's format directly (cpu_attention_head_cache), the rotation undone per head
 *   att  *= sigmoid(gate)                                        (option output gate)
 *   x    += wo att (+ bo)                                        (option output bias)
 */
#include <math.h>
#include <string.h>

#include "core/model/activation.h"
#include "gpu-worker/dense/cpu/cpu_matmul.h"
#include "gpu-worker/dense/cpu/cpu_parts.h"

typedef struct gqa_job {
    cpu_backend_t *b;
    const model_layer_t *L;
    uint32_t opts;
    int32_t il;
    int32_t window; /* model_layer_window: 0 for every position */
} gqa_job_t;

static void add_bias(float *x, const model_tensor_t *bias, int64_t n)
{
    const float *b = bias->data;
    for (int64_t i = 0; i < n; i++)
        x[i] += b[i];
}

/* Biases, Q/K norms, RoPE, and the K/V of token t into the cache. */
static void qk_prepare_task(void *ctx, int64_t t, int thread)
{
    gqa_job_t *j = ctx;
    cpu_backend_t *b = j->b;
    const model_config_t *c = b->cfg;
    const model_layer_t *L = j->L;
    const int64_t HD = c->head_dim, Q = (int64_t)c->n_head * HD, KV = (int64_t)c->n_head_kv * HD;
    float *q = b->q + t * Q, *k = b->k + t * KV, *v = b->v + t * KV;
    if (j->opts & MODEL_GQA_OUT_GATE) {
        const float *qg = b->qg + t * 2 * Q;
        for (int32_t h = 0; h < c->n_head; h++) {
            memcpy(q + h * HD, qg + 2 * h * HD, (size_t)HD * sizeof *q);
            memcpy(b->gate + t * Q + h * HD, qg + (2 * h + 1) * HD, (size_t)HD * sizeof *q);
        }
    }
    if (j->opts & MODEL_GQA_QKV_BIAS) {
        add_bias(q, &L->bq, Q);
        add_bias(k, &L->bk, KV);
        add_bias(v, &L->bv, KV);
    }
    if (j->opts & MODEL_GQA_QK_NORM_HEAD) {
        for (int32_t h = 0; h < c->n_head; h++)
            cpu_rmsnorm(q + h * HD, q + h * HD, L->q_norm.data, HD, c->norm_eps);
        for (int32_t h = 0; h < c->n_head_kv; h++)
            cpu_rmsnorm(k + h * HD, k + h * HD, L->k_norm.data, HD, c->norm_eps);
    } else if (j->opts & MODEL_GQA_QK_NORM_FULL) {
        cpu_rmsnorm(q, q, L->q_norm.data, Q, c->norm_eps);
        cpu_rmsnorm(k, k, L->k_norm.data, KV, c->norm_eps);
    }
    const float *cs = b->rope_cs + t * c->n_rot;
    cpu_rope_apply(&b->rope, q, c->n_head, c->head_dim, cs);
    cpu_rope_apply(&b->rope, k, c->n_head_kv, c->head_dim, cs);
    /* the cache row of this position, from its own K/V only (kv_format.h) */
    const size_t cell = cpu_cell(b, b->tok_seq[t], b->tok_pos[t]);
    float *scratch = b->kv_rows + (size_t)thread * 2 * (size_t)HD;
    kv_store_row(b->kt, false, k, (char *)b->k_layer[j->il] + cell * kv_elem_bytes(b->kt, KV), KV, c->head_dim,
                 scratch);
    kv_store_row(b->vt, b->v_rot, v, (char *)b->v_layer[j->il] + cell * kv_elem_bytes(b->vt, KV), KV, c->head_dim,
                 scratch);
}

/* task = t * n_head + h */
static void attention_task(void *ctx, int64_t task, int thread)
{
    gqa_job_t *j = ctx;
    cpu_backend_t *b = j->b;
    const model_config_t *c = b->cfg;
    const int64_t t = task / c->n_head;
    const int32_t h = (int32_t)(task % c->n_head);
    const int32_t hkv = h / (c->n_head / c->n_head_kv);
    const int64_t HD = c->head_dim, Q = (int64_t)c->n_head * HD, KV = (int64_t)c->n_head_kv * HD;
    const int32_t pos = b->row_pos[t];
    const int32_t first = j->window && pos + 1 > j->window ? pos + 1 - j->window : 0;
    const size_t at = cpu_cell(b, b->row_seq[t], first); /* the row of the first key */
    const float *sink = (j->opts & MODEL_GQA_SINKS) ? (const float *)j->L->sinks.data + h : NULL;
    float *out = b->att + t * Q + h * HD;
    const size_t krow = kv_elem_bytes(b->kt, KV), vrow = kv_elem_bytes(b->vt, KV);
    const cpu_kv_head_t kv = {
        .kt = b->kt,
        .vt = b->vt,
        .k = (const char *)b->k_layer[j->il] + at * krow + kv_elem_bytes(b->kt, hkv * HD),
        .v = (const char *)b->v_layer[j->il] + at * vrow + kv_elem_bytes(b->vt, hkv * HD),
        .k_stride = krow,
        .v_stride = vrow,
        .v_rot = b->v_rot,
    };
    cpu_attention_head_cache(out, b->q + t * Q + h * HD, &kv, pos + 1 - first, c->head_dim,
                             1.0f / sqrtf((float)c->head_dim), sink, b->scores + (size_t)thread * (size_t)b->n_ctx,
                             b->kv_rows + (size_t)thread * 2 * (size_t)HD);
    if (j->opts & MODEL_GQA_OUT_GATE) {
        const float *g = b->gate + t * Q + h * HD;
        for (int64_t d = 0; d < HD; d++)
            out[d] *= model_sigmoid(g[d]);
    }
}

/* x += proj, or x += (proj + bo) with option output bias */
static void residual_task(void *ctx, int64_t t, int thread)
{
    gqa_job_t *j = ctx;
    const int64_t E = j->b->cfg->n_embd;
    float *x = j->b->x + t * E;
    const float *p = j->b->proj + t * E;
    (void)thread;
    if (j->opts & MODEL_GQA_OUT_BIAS) {
        const float *bo = j->L->bo.data;
        for (int64_t i = 0; i < E; i++)
            x[i] = (p[i] + bo[i]) + x[i];
        return;
    }
    for (int64_t i = 0; i < E; i++)
        x[i] = p[i] + x[i];
}

static int gqa_forward(cpu_backend_t *b, const model_part_t *p, int32_t il, int32_t n, const int32_t *keep,
                       int32_t n_keep, guild_err_t *err)
{
    const model_config_t *c = b->cfg;
    const model_layer_t *L = model_block(b->w, il);
    const int64_t E = c->n_embd, HD = c->head_dim, Q = (int64_t)c->n_head * HD, KV = (int64_t)c->n_head_kv * HD;
    gqa_job_t j = {b, L, p->opts, il, model_layer_window(c, il)};
    guild_pool_t *pool = b->pool;
    (void)err;

    if (p->opts & MODEL_GQA_OUT_GATE)
        cpu_linear(pool, &L->wq, 0, 2 * Q, n, b->xn, E, b->qg, 2 * Q, b->act);
    else
        cpu_linear(pool, &L->wq, 0, Q, n, b->xn, E, b->q, Q, b->act);
    cpu_linear(pool, &L->wk, 0, KV, n, b->xn, E, b->k, KV, b->act);
    cpu_linear(pool, &L->wv, 0, KV, n, b->xn, E, b->v, KV, b->act);
    guild_pool_run(pool, n, qk_prepare_task, &j);
    cpu_rows_where(b, n, keep, n_keep);
    if (keep) {
        /* att is free until the attention below writes it */
        cpu_gather_rows(b->q, Q, keep, n_keep, b->att);
        if (p->opts & MODEL_GQA_OUT_GATE) /* qg is free: split into q and gate */
            cpu_gather_rows(b->gate, Q, keep, n_keep, b->qg);
        n = n_keep;
        if (n == 0)
            return 0;
    }
    guild_pool_run(pool, (int64_t)n * c->n_head, attention_task, &j);
    cpu_linear(pool, &L->wo, 0, E, n, b->att, Q, b->proj, E, b->act);
    guild_pool_run(pool, n, residual_task, &j);
    return 0;
}

const cpu_attn_part_t cpu_attn_gqa = {
    .opts = MODEL_GQA_ROPE_NEOX | MODEL_GQA_ROPE_PARTIAL | MODEL_GQA_QKV_BIAS | MODEL_GQA_QK_NORM_HEAD |
            MODEL_GQA_QK_NORM_FULL | MODEL_GQA_SINKS | MODEL_GQA_SLIDING | MODEL_GQA_OUT_BIAS | MODEL_GQA_OUT_GATE,
    .forward = gqa_forward,
};
