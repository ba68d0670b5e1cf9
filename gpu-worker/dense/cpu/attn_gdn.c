/* The gated delta net (MODEL_ATTN_GDN) on the CPU backend, for the n rows of a batch, in its sequential form: each
 * row is one step of the recurrence, so a prefill in any chunks and decoding one token at a time give the same
 * bits. As llama.cpp's qwen3next/qwen35moe graphs (build_layer_attn_linear, delta-net-base.cpp), with
 * dk = ssm_d_state, nk key heads, nv value heads:
 *
 *   qkv = attn_qkv xn; z = attn_gate xn; beta, alpha logits = ssm_ba xn (or ssm_beta xn, ssm_alpha xn)
 *   c   = silu(causal conv1d of qkv over the channel's last ssm_d_conv inputs, the earlier ones from the state)
 *   q,k = L2-normalised key heads of c (q also times 1/sqrt(dk)); v = the value heads of c
 *   beta = sigmoid(beta logit); decay = exp(softplus(alpha + ssm_dt) * ssm_a)   per value head
 *   S_h  = decay * S_h; S_h += beta * (v - S_h k) k^T; o = S_h q       S_h: dk x dk, value head h, its key head
 *                                                                      h / (nv / nk) or h % nk (option tiled)
 *   o    = rmsnorm(o per value head, ssm_norm) * silu(z);  x += ssm_out o
 *
 * Float orders: the convolution sums its taps oldest first from 0; every dot product (S_h k, S_h q) sums over
 * ascending index in float; L2 norm: sum of squares in double, scale 1 / max(sqrt, eps) (ggml_l2_norm); the
 * output norm is cpu_rmsnorm. The state is written for every row; only the kept rows' outputs go on. With
 * backend_options_t.rollback, a short call's state after each row is also copied aside (cpu_state.h's rb_*). Each
 * sequence has its own state: a row steps its sequence's, rows in batch order (a sequence's rows are in position
 * order there).
 */
#include <math.h>
#include <string.h>

#include "core/model/activation.h"
#include "gpu-worker/dense/cpu/cpu_matmul.h"
#include "gpu-worker/dense/cpu/cpu_parts.h"

#define CONV_BLOCK 64 /* channels per convolution task */

typedef struct gdn_job {
    cpu_backend_t *b;
    const model_layer_t *L;
    uint32_t opts;
    int32_t n;
    float *conv_state; /* this layer's, of sequence 0 */
    float *ssm_state;  /* this layer's, of sequence 0 */
    size_t conv_seq, ssm_seq; /* floats from a sequence's state to the next's */
    float *rb_conv, *rb_ssm;  /* this layer's states after row 0 of sequence 0's call (backend_options_t.rollback),
                                 NULL: none kept */
    size_t rb_conv_row, rb_ssm_row; /* floats from a row's kept state to the next row's (of a sequence) */
} gdn_job_t;

/* The row of row t of the batch in its sequence's part of the call, when the states after its rows are kept
 * (rollback: a call of at most rb_rows rows of the sequence), else -1. */
static inline int64_t kept_row(const cpu_backend_t *b, int32_t t)
{
    const int32_t s = b->tok_seq[t];
    if (!b->rb_rows || b->seq_rows[s] > b->rb_rows)
        return -1;
    return (int64_t)s * b->rb_rows + (b->tok_pos[t] - b->seq_len[s]);
}

/* ggml_softplus */
static inline float softplus(float x)
{
    return x > 20.0f ? x : log1pf(expf(x));
}

/* channels [task * CONV_BLOCK, ...): every row in order through the channel's window */
static void conv_task(void *ctx, int64_t task, int thread)
{
    gdn_job_t *j = ctx;
    const model_config_t *c = j->b->cfg;
    const int64_t CH = model_gdn_conv_channels(c), K = c->ssm_d_conv;
    int64_t c1 = (task + 1) * CONV_BLOCK;
    if (c1 > CH)
        c1 = CH;
    (void)thread;
    for (int64_t ch = task * CONV_BLOCK; ch < c1; ch++) {
        const float *w = (const float *)j->L->ssm_conv1d.data + ch * K;
        for (int32_t t = 0; t < j->n; t++) {
            float *s = j->conv_state + (size_t)j->b->tok_seq[t] * j->conv_seq + ch * (K - 1);
            float *x = j->b->gdn_qkv + t * CH + ch;
            float sum = 0.0f;
            for (int64_t k = 0; k < K - 1; k++)
                sum += s[k] * w[k];
            sum += *x * w[K - 1];
            if (K > 1) {
                memmove(s, s + 1, (size_t)(K - 2) * sizeof *s);
                s[K - 2] = *x;
            }
            *x = model_silu(sum);
            const int64_t kr = kept_row(j->b, t);
            if (kr >= 0 && K > 1)
                memcpy(j->rb_conv + (size_t)kr * j->rb_conv_row + ch * (K - 1), s, (size_t)(K - 1) * sizeof *s);
        }
    }
}

/* y = x / max(||x||, eps) */
static void l2_norm(float *x, int64_t n, float eps)
{
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)(x[i] * x[i]);
    const float scale = 1.0f / fmaxf(sqrtf((float)sum), eps);
    for (int64_t i = 0; i < n; i++)
        x[i] *= scale;
}

/* row t: its key heads normalised, beta and the decay's log per value head */
static void prep_task(void *ctx, int64_t t, int thread)
{
    gdn_job_t *j = ctx;
    cpu_backend_t *b = j->b;
    const model_config_t *c = b->cfg;
    const int64_t CH = model_gdn_conv_channels(c), DK = c->ssm_d_state, NK = c->ssm_n_group, NV = c->ssm_dt_rank;
    const float qscale = 1.0f / sqrtf((float)DK);
    (void)thread;
    float *qk = b->gdn_qkv + t * CH;
    for (int64_t h = 0; h < 2 * NK; h++)
        l2_norm(qk + h * DK, DK, c->norm_eps);
    for (int64_t i = 0; i < NK * DK; i++)
        qk[i] *= qscale;
    const float *dt = j->L->ssm_dt.data, *A = j->L->ssm_a.data;
    const float *ba = b->gdn_ba + t * 2 * NV;
    const int64_t R = NV / NK;
    for (int64_t h = 0; h < NV; h++) {
        float bl, al;
        if (j->opts & MODEL_GDN_BA_SPLIT) {
            bl = ba[h];
            al = ba[NV + h];
        } else { /* per key head g: the betas of its value heads g*R.., then their alphas */
            const int64_t g = h / R, r = h % R;
            bl = ba[g * 2 * R + r];
            al = ba[g * 2 * R + R + r];
        }
        b->gdn_beta[t * NV + h] = model_sigmoid(bl);
        b->gdn_g[t * NV + h] = softplus(al + dt[h]) * A[h];
    }
}

/* value head h: every row of the batch in order through its state, then its output normed and gated */
static void delta_task(void *ctx, int64_t h, int thread)
{
    gdn_job_t *j = ctx;
    cpu_backend_t *b = j->b;
    const model_config_t *c = b->cfg;
    const int64_t CH = model_gdn_conv_channels(c), DK = c->ssm_d_state, NK = c->ssm_n_group, NV = c->ssm_dt_rank;
    const int64_t IN = c->ssm_d_inner;
    const int64_t kh = (j->opts & MODEL_GDN_KV_TILED) ? h % NK : h / (NV / NK);
    (void)thread;
    for (int32_t t = 0; t < j->n; t++) {
        float *S = j->ssm_state + (size_t)b->tok_seq[t] * j->ssm_seq + h * DK * DK;
        const float *row = b->gdn_qkv + t * CH;
        const float *q = row + kh * DK, *k = row + NK * DK + kh * DK, *v = row + 2 * NK * DK + h * DK;
        const float decay = expf(b->gdn_g[t * NV + h]), beta = b->gdn_beta[t * NV + h];
        float *o = b->gdn_o + t * IN + h * DK;
        for (int64_t r = 0; r < DK; r++) {
            float *s = S + r * DK;
            float sk = 0.0f;
            for (int64_t i = 0; i < DK; i++) {
                s[i] *= decay;
                sk += s[i] * k[i];
            }
            const float d = (v[r] - sk) * beta;
            float sq = 0.0f;
            for (int64_t i = 0; i < DK; i++) {
                s[i] += k[i] * d;
                sq += s[i] * q[i];
            }
            o[r] = sq;
        }
        const int64_t kr = kept_row(b, t);
        if (kr >= 0)
            memcpy(j->rb_ssm + (size_t)kr * j->rb_ssm_row + h * DK * DK, S, (size_t)(DK * DK) * sizeof *S);
        const float *z = b->gdn_z + t * IN + h * DK;
        cpu_rmsnorm(o, o, j->L->ssm_norm.data, DK, c->norm_eps);
        for (int64_t r = 0; r < DK; r++)
            o[r] *= model_silu(z[r]);
    }
}

static void residual_task(void *ctx, int64_t t, int thread)
{
    gdn_job_t *j = ctx;
    const int64_t E = j->b->cfg->n_embd;
    float *x = j->b->x + t * E;
    const float *p = j->b->proj + t * E;
    (void)thread;
    for (int64_t i = 0; i < E; i++)
        x[i] = p[i] + x[i];
}

static int gdn_forward(cpu_backend_t *b, const model_part_t *p, int32_t il, int32_t n, const int32_t *keep,
                       int32_t n_keep, guild_err_t *err)
{
    const model_config_t *c = b->cfg;
    const model_layer_t *L = &b->w->layers[il];
    const int64_t E = c->n_embd, CH = model_gdn_conv_channels(c), IN = c->ssm_d_inner, NV = c->ssm_dt_rank;
    const int32_t slot = b->rec_slot[il];
    const size_t conv = (size_t)model_gdn_conv_state(c), ssm = (size_t)model_gdn_ssm_state(c);
    gdn_job_t j = {b,
                   L,
                   p->opts,
                   n,
                   b->conv_state + (size_t)slot * conv,
                   b->ssm_state + (size_t)slot * ssm,
                   (size_t)b->n_recurrent * conv,
                   (size_t)b->n_recurrent * ssm,
                   b->rb_conv ? b->rb_conv + (size_t)slot * conv : NULL,
                   b->rb_ssm ? b->rb_ssm + (size_t)slot * ssm : NULL,
                   (size_t)b->n_recurrent * conv,
                   (size_t)b->n_recurrent * ssm};
    guild_pool_t *pool = b->pool;
    (void)err;

    cpu_linear(pool, &L->ssm_qkv, 0, CH, n, b->xn, E, b->gdn_qkv, CH, b->act);
    cpu_linear(pool, &L->ssm_gate, 0, IN, n, b->xn, E, b->gdn_z, IN, b->act);
    if (p->opts & MODEL_GDN_BA_SPLIT) {
        cpu_linear(pool, &L->ssm_beta, 0, NV, n, b->xn, E, b->gdn_ba, 2 * NV, b->act);
        cpu_linear(pool, &L->ssm_alpha, 0, NV, n, b->xn, E, b->gdn_ba + NV, 2 * NV, b->act);
    } else {
        cpu_linear(pool, &L->ssm_ba, 0, 2 * NV, n, b->xn, E, b->gdn_ba, 2 * NV, b->act);
    }
    guild_pool_run(pool, (CH + CONV_BLOCK - 1) / CONV_BLOCK, conv_task, &j);
    guild_pool_run(pool, n, prep_task, &j);
    guild_pool_run(pool, NV, delta_task, &j);
    if (keep) {
        /* z is free: the gate has been applied */
        cpu_gather_rows(b->gdn_o, IN, keep, n_keep, b->gdn_z);
        n = n_keep;
        if (n == 0)
            return 0;
    }
    cpu_linear(pool, &L->ssm_out, 0, E, n, b->gdn_o, IN, b->proj, E, b->act);
    guild_pool_run(pool, n, residual_task, &j);
    return 0;
}

const cpu_attn_part_t cpu_attn_gdn = {
    .opts = MODEL_GDN_BA_SPLIT | MODEL_GDN_KV_TILED,
    .forward = gdn_forward,
};
