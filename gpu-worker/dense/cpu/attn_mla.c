/* Multi-head latent attention (MODEL_ATTN_MLA, deepseek2) on the CPU backend, for the n rows of a batch, as
 * llama.cpp's deepseek2 graph computes it (H heads, a key K = nope + r, a value V, the latent R, r = n_rot):
 *
 *   q     = wq xn, or wq_b rmsnorm(wq_a xn, q_a_norm) with q LoRA       per head [q_nope (nope) | q_pe (r)]
 *   kv    = wkv_a xn: the latent c = rmsnorm(kv[0, R), kv_a_norm), k_pe = kv[R, R + r)
 *   q_pe, k_pe rotated (RoPE on adjacent pairs); [c | k_pe] -> the cache at the row's position (every row)
 *   then for the kept rows one of two forms of the same function (they differ by float rounding only):
 *     absorbed  qc = Wk_h^T q_nope, the query in the latent space (R);
 *               a  = softmax(([qc | q_pe] . [c_j | k_pe_j]) * scale) c_j over positions j <= pos   (R)
 *               att_h = Wv_h a                                                                    (V)
 *     expanded  k_j = [Wk_h c_j | k_pe_j], v_j = Wv_h c_j for every position j <= pos;
 *               att_h = softmax((q_h . k_j) * scale) v_j, the softmax online over blocks of positions
 *   x    += wo att
 *
 * Wk_h (nope x R) and Wv_h (V x R) are head h's rows of attn_kv_b, or attn_k_b's matrix h transposed and
 * attn_v_b's matrix h. A product over a matrix's rows goes through cpu_matmul (its input quantized to the
 * weight's dot type, as every dense product); one over its columns (Wk_h^T from attn_kv_b, Wk_h from attn_k_b)
 * dequantizes head h's block transposed and sums float products in dot8's order. scale is c->mla_kq_scale.
 *
 * The form is backend_options_t.mla_form; auto takes the expanded one for batches of at least expand_rows()
 * rows, where it needs fewer multiply-adds, when the up-projections are plain floats (up_projections_plain); in
 * a batch of several sequences, for the rows of a sequence with at least that many rows in it, the others
 * absorbed. Work is split by rows (the projections and the cache), by (row,
 * head) (absorbed attention) and by head (the rest), never inside a sum.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/quant/quant.h"
#include "gpu-worker/dense/cpu/cpu_matmul.h"
#include "gpu-worker/dense/cpu/cpu_parts.h"

#define BLOCK 64 /* positions whose keys and values the expanded form up-projects at a time */
#define ALIGN 64

typedef struct mla_dims {
    int64_t H, K, V, R, r, nope, RR; /* RR = R + r: a cache row, an absorbed query */
} mla_dims_t;

static mla_dims_t dims_of(const model_config_t *c)
{
    mla_dims_t d = {c->n_head, c->head_dim, c->head_dim_v, c->n_lora_kv, c->n_rot, 0, 0};
    d.nope = d.K - d.r;
    d.RR = d.R + d.r;
    return d;
}

/* Per-thread scratch (cpu_state.h: mla_scratch), at these byte offsets. */
typedef struct scratch_layout {
    size_t wt, row, blk, s, m, l, acc, act, total;
} scratch_layout_t;

static size_t up(size_t x)
{
    return (x + ALIGN - 1) / ALIGN * ALIGN;
}

/* The widest quantized input of the up-projections of any MLA layer (the MTP layers' too). */
static size_t up_act_row(const model_config_t *c, const model_weights_t *w)
{
    const mla_dims_t d = dims_of(c);
    size_t m = 0;
    for (int32_t il = 0; il < c->n_layer + w->n_mtp; il++) {
        if (model_layer_parts(c, il).attn->kind != MODEL_ATTN_MLA)
            continue;
        const model_layer_t *L = model_block(w, il);
        size_t a = c->mla_kv_split ? cpu_act_row_bytes(L->wk_b.type, d.nope) : 0;
        size_t v = cpu_act_row_bytes(c->mla_kv_split ? L->wv_b.type : L->wkv_b.type, d.R);
        m = a > m ? a : m;
        m = v > m ? v : m;
    }
    return m;
}

static scratch_layout_t layout_of(const model_config_t *c, const model_weights_t *w, int32_t n_batch)
{
    const mla_dims_t d = dims_of(c);
    const size_t NB = (size_t)n_batch, F = sizeof(float);
    const size_t rows = NB > BLOCK ? NB : BLOCK;
    scratch_layout_t s;
    s.wt = 0;
    s.row = up(s.wt + (size_t)(d.R * d.nope) * F);
    s.blk = up(s.row + (size_t)(d.R > d.nope ? d.R : d.nope) * F);
    s.s = up(s.blk + (size_t)BLOCK * (size_t)(d.K + d.V) * F);
    s.m = up(s.s + (size_t)BLOCK * F);
    s.l = up(s.m + NB * F);
    s.acc = up(s.l + NB * sizeof(double));
    s.act = up(s.acc + NB * (size_t)d.V * F);
    s.total = up(s.act + rows * up_act_row(c, w));
    return s;
}

size_t cpu_attn_mla_scratch_bytes(const model_config_t *c, const model_weights_t *w, int32_t n_batch)
{
    return layout_of(c, w, n_batch).total;
}

/* The smallest batch for which the expanded form takes fewer multiply-adds: per (row, position, head) the
 * absorbed form does 2R + r of them and the expanded one K + V, which it pays for with R (nope + V) per
 * (position, head) up-projecting the cache; the absorbed form's own per-row projections are left out. */
static int32_t expand_rows(const mla_dims_t *d)
{
    const int64_t gain = 2 * d->R + d->r - d->K - d->V;
    if (gain <= 0)
        return INT32_MAX;
    const int64_t rows = (d->R * (d->nope + d->V) + gain - 1) / gain;
    return rows > INT32_MAX ? INT32_MAX : (int32_t)rows;
}

/* Whether the up-projections (attn_k_b and attn_v_b, or attn_kv_b) are plain floats. Auto picks the expanded
 * form only then: with block types each form quantizes different activations to the weights' dot type (the
 * absorbed one the queries and the attended latent, the expanded one every cached latent), so the two differ by
 * that quantization, not float rounding; the absorbed form is llama.cpp's for files with attn_k_b/attn_v_b. */
static bool up_projections_plain(const model_layer_t *L, bool kv_split)
{
    const model_tensor_t *w[2] = {kv_split ? &L->wk_b : &L->wkv_b, kv_split ? &L->wv_b : &L->wkv_b};
    for (int i = 0; i < 2; i++) {
        const quant_type_info_t *t = quant_type_info(w[i]->type);
        if (!t || t->block_elems != 1)
            return false;
    }
    return true;
}

/* dot of n floats in 8 lanes, cpu_attention_head's order (cpu_kernels.h). */
static inline float dot8(const float *restrict a, const float *restrict b, int64_t n)
{
    float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            l[k] += a[i + k] * b[i + k];
    float s = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
    for (; i < n; i++)
        s += a[i] * b[i];
    return s;
}

typedef struct mla_job {
    cpu_backend_t *b;
    const model_layer_t *L;
    mla_dims_t d;
    scratch_layout_t sl;
    int32_t il;
    int32_t n;  /* the kept rows after the cache write, or (expanded) those of the expanded form */
    int32_t r0; /* the expanded form's first row: the kept rows [r0, r0 + n) */
    const int32_t *inv; /* the rows ordered by form: kept row t's attention output is row inv[t]; NULL: t */
} mla_job_t;

static char *scratch(const mla_job_t *j, int thread)
{
    return j->b->mla_scratch + (size_t)thread * j->b->mla_scratch_bytes;
}

/* Head h's value rows (V of R elements) and the tensor they are rows of. */
static const void *value_rows(const mla_job_t *j, int64_t h, const model_tensor_t **W)
{
    if (j->b->cfg->mla_kv_split) {
        *W = &j->L->wv_b;
        return model_tensor_row(*W, h, 0);
    }
    *W = &j->L->wkv_b;
    return model_tensor_row(*W, 0, h * (j->d.nope + j->d.V) + j->d.nope);
}

/* out[c * nrows + r] = element c of row r of the nrows rows from `first` (rows of W, ncols elements each),
 * dequantized: the columns of a matrix as rows. row: scratch of ncols floats. */
static void dequant_transposed(const model_tensor_t *W, const void *first, int64_t nrows, int64_t ncols, float *out,
                               float *row)
{
    for (int64_t r = 0; r < nrows; r++) {
        quant_dequantize_row_ref(W->type, (const char *)first + (size_t)r * W->row_bytes, row, ncols);
        for (int64_t c = 0; c < ncols; c++)
            out[c * nrows + r] = row[c];
    }
}

/* y[t * ldy + i] = dot of W's rows [first, first + nrows) with x_t (n_in floats, ldx apart), for n_tok rows:
 * cpu_matmul with the inputs quantized to the weight's dot type into act. */
static void rows_product(const model_tensor_t *W, const void *first, int64_t n_in, int64_t nrows, int32_t n_tok,
                         const float *x, int64_t ldx, float *y, int64_t ldy, char *act)
{
    const guild_type_t at = quant_type_info(W->type)->dot_type;
    const size_t stride = cpu_act_row_bytes(W->type, n_in);
    for (int32_t t = 0; t < n_tok; t++)
        cpu_quantize(at, x + (int64_t)t * ldx, act + (size_t)t * stride, n_in);
    cpu_matmul(W->type, n_in, nrows, n_tok, first, W->row_bytes, act, stride, y, (size_t)ldy);
}

/* ---- every row: the q LoRA's norm, the latent's norm, RoPE, the cache ---- */

static void qa_norm_task(void *ctx, int64_t t, int thread)
{
    mla_job_t *j = ctx;
    const model_config_t *c = j->b->cfg;
    float *qa = j->b->mla_qa + t * c->n_lora_q;
    (void)thread;
    cpu_rmsnorm(qa, qa, j->L->q_a_norm.data, c->n_lora_q, c->norm_eps);
}

static void prepare_task(void *ctx, int64_t t, int thread)
{
    mla_job_t *j = ctx;
    cpu_backend_t *b = j->b;
    const mla_dims_t *d = &j->d;
    float *kv = b->mla_kv + t * d->RR;
    const float *cs = b->rope_cs + t * d->r;
    (void)thread;
    cpu_rmsnorm(kv, kv, j->L->kv_a_norm.data, d->R, b->cfg->norm_eps);
    cpu_rope_apply(&b->rope, kv + d->R, 1, (int32_t)d->r, cs);
    /* each head's rope part starts nope floats into its K */
    cpu_rope_apply(&b->rope, b->q + t * d->H * d->K + d->nope, (int32_t)d->H, (int32_t)d->K, cs);
    memcpy((float *)b->k_layer[j->il] + cpu_cell(b, b->tok_seq[t], b->tok_pos[t]) * (size_t)d->RR, kv,
           (size_t)d->RR * sizeof *kv);
}

/* Whether kept row t takes the expanded form: backend_options_t.mla_form, auto by its sequence's rows in the
 * batch (for one sequence, the batch's size). */
static bool row_expanded(const cpu_backend_t *b, const mla_dims_t *d, bool plain, int32_t t)
{
    return b->mla_form == BACKEND_MLA_EXPANDED ||
           (b->mla_form == BACKEND_MLA_AUTO && b->seq_rows[b->row_seq[t]] >= expand_rows(d) && plain);
}

/* ---- absorbed ---- */

/* task = head: the kept rows' queries in the latent space, then their rope parts beside them. */
static void absorb_task(void *ctx, int64_t h, int thread)
{
    mla_job_t *j = ctx;
    cpu_backend_t *b = j->b;
    const mla_dims_t *d = &j->d;
    char *s = scratch(j, thread);
    const float *q = b->q + h * d->K;
    const int64_t ldq = d->H * d->K, ldk = d->H * d->RR;
    float *qk = b->mla_qk + h * d->RR;
    if (b->cfg->mla_kv_split) {
        const model_tensor_t *W = &j->L->wk_b;
        rows_product(W, model_tensor_row(W, h, 0), d->nope, d->R, j->n, q, ldq, qk, ldk, s + j->sl.act);
    } else {
        const model_tensor_t *W = &j->L->wkv_b;
        float *wt = (float *)(s + j->sl.wt);
        dequant_transposed(W, model_tensor_row(W, 0, h * (d->nope + d->V)), d->nope, d->R, wt,
                           (float *)(s + j->sl.row));
        for (int32_t t = 0; t < j->n; t++)
            for (int64_t r = 0; r < d->R; r++)
                qk[t * ldk + r] = dot8(wt + r * d->nope, q + t * ldq, d->nope);
    }
    for (int32_t t = 0; t < j->n; t++)
        memcpy(qk + t * ldk + d->R, q + t * ldq + d->nope, (size_t)d->r * sizeof *q);
}

/* task = t * H + h: head h of kept row t over the cached latents, into the latent space */
static void latent_attention_task(void *ctx, int64_t task, int thread)
{
    mla_job_t *j = ctx;
    cpu_backend_t *b = j->b;
    const mla_dims_t *d = &j->d;
    const int64_t t = task / d->H, h = task % d->H;
    const float *cache = (const float *)b->k_layer[j->il] + cpu_cell(b, b->row_seq[t], 0) * (size_t)d->RR;
    cpu_attention_head_kv(b->mla_lat + (t * d->H + h) * d->R, b->mla_qk + (t * d->H + h) * d->RR, cache, cache,
                          d->RR, b->row_pos[t] + 1, (int32_t)d->RR, (int32_t)d->R, b->cfg->mla_kq_scale, NULL,
                          b->scores + (size_t)thread * (size_t)b->n_ctx);
}

/* task = head: att_h = Wv_h a for the kept rows */
static void value_task(void *ctx, int64_t h, int thread)
{
    mla_job_t *j = ctx;
    const mla_dims_t *d = &j->d;
    const model_tensor_t *W;
    const void *first = value_rows(j, h, &W);
    rows_product(W, first, d->R, d->V, j->n, j->b->mla_lat + h * d->R, d->H * d->R, j->b->att + h * d->V,
                 d->H * d->V, scratch(j, thread) + j->sl.act);
}

/* ---- expanded ---- */

/* Keys and values of head h at positions p0 .. p0 + nb - 1 of sequence seq into blk (per position
 * [k_nope | k_pe | v]). */
static void expand_block(const mla_job_t *j, int64_t h, int32_t seq, int32_t p0, int32_t nb, char *s,
                         const float *wt)
{
    const mla_dims_t *d = &j->d;
    const int64_t ld = d->K + d->V;
    const float *cache = (const float *)j->b->k_layer[j->il] + cpu_cell(j->b, seq, p0) * (size_t)d->RR;
    float *blk = (float *)(s + j->sl.blk);
    const model_tensor_t *W;
    const void *vfirst = value_rows(j, h, &W);
    rows_product(W, vfirst, d->R, d->V, nb, cache, d->RR, blk + d->K, ld, s + j->sl.act);
    if (j->b->cfg->mla_kv_split) {
        for (int32_t p = 0; p < nb; p++)
            for (int64_t i = 0; i < d->nope; i++)
                blk[p * ld + i] = dot8(wt + i * d->R, cache + p * d->RR, d->R);
    } else {
        /* the key rows of head h of attn_kv_b, with the latents the value product just quantized */
        const model_tensor_t *kv = &j->L->wkv_b;
        cpu_matmul(kv->type, d->R, d->nope, nb, model_tensor_row(kv, 0, h * (d->nope + d->V)), kv->row_bytes,
                   s + j->sl.act, cpu_act_row_bytes(kv->type, d->R), blk, (size_t)ld);
    }
    for (int32_t p = 0; p < nb; p++)
        memcpy(blk + p * ld + d->nope, cache + p * d->RR + d->R, (size_t)d->r * sizeof *blk);
}

/* task = head: every row's head h over the up-projected keys and values of its sequence, block by block, with
 * the softmax kept online: per row the running maximum m, the sum l (double) of expf(s - m), and acc =
 * sum expf(s - m) v, rescaled by expf(m_old - m_new) when a block raises the maximum. The rows are those of
 * [r0, r0 + n), a sequence at a time (the blocks are of positions of one cache). */
static void expanded_task(void *ctx, int64_t h, int thread)
{
    mla_job_t *j = ctx;
    cpu_backend_t *b = j->b;
    const mla_dims_t *d = &j->d;
    const int64_t ld = d->K + d->V;
    char *s = scratch(j, thread);
    float *wt = (float *)(s + j->sl.wt), *blk = (float *)(s + j->sl.blk), *sc = (float *)(s + j->sl.s);
    float *m = (float *)(s + j->sl.m), *acc = (float *)(s + j->sl.acc);
    double *l = (double *)(s + j->sl.l);
    const float scale = b->cfg->mla_kq_scale;
    const int32_t t0 = j->r0, t1 = j->r0 + j->n;
    for (int32_t t = t0; t < t1; t++) {
        m[t] = -INFINITY;
        l[t] = 0;
        memset(acc + t * d->V, 0, (size_t)d->V * sizeof *acc);
    }
    if (b->cfg->mla_kv_split) {
        const model_tensor_t *W = &j->L->wk_b;
        dequant_transposed(W, model_tensor_row(W, h, 0), d->R, d->nope, wt, (float *)(s + j->sl.row));
    }
    for (int32_t first = t0; first < t1; first++) {
        const int32_t seq = b->row_seq[first];
        bool seen = false; /* the sequence's rows were done with an earlier row's */
        for (int32_t t = t0; t < first && !seen; t++)
            seen = b->row_seq[t] == seq;
        if (seen)
            continue;
        int32_t n_pos = 0;
        for (int32_t t = first; t < t1; t++)
            if (b->row_seq[t] == seq && b->row_pos[t] + 1 > n_pos)
                n_pos = b->row_pos[t] + 1;
        for (int32_t p0 = 0; p0 < n_pos; p0 += BLOCK) {
            const int32_t nb = n_pos - p0 < BLOCK ? n_pos - p0 : BLOCK;
            expand_block(j, h, seq, p0, nb, s, wt);
            for (int32_t t = first; t < t1; t++) {
                if (b->row_seq[t] != seq)
                    continue;
                const int32_t upto = b->row_pos[t] + 1 - p0 < nb ? b->row_pos[t] + 1 - p0 : nb;
                if (upto <= 0)
                    continue;
                const float *q = b->q + t * d->H * d->K + h * d->K;
                float bmax = -INFINITY;
                for (int32_t p = 0; p < upto; p++) {
                    sc[p] = dot8(q, blk + p * ld, d->K) * scale;
                    if (sc[p] > bmax)
                        bmax = sc[p];
                }
                float *a = acc + t * d->V;
                if (bmax > m[t]) {
                    const float corr = m[t] == -INFINITY ? 0.0f : expf(m[t] - bmax);
                    l[t] *= corr;
                    for (int64_t i = 0; i < d->V; i++)
                        a[i] *= corr;
                    m[t] = bmax;
                }
                for (int32_t p = 0; p < upto; p++) {
                    const float e = expf(sc[p] - m[t]);
                    const float *v = blk + p * ld + d->K;
                    l[t] += e;
                    for (int64_t i = 0; i < d->V; i++)
                        a[i] += e * v[i];
                }
            }
        }
    }
    for (int32_t t = t0; t < t1; t++) {
        const float inv = (float)(1.0 / l[t]);
        float *out = b->att + t * d->H * d->V + h * d->V;
        for (int64_t i = 0; i < d->V; i++)
            out[i] = acc[t * d->V + i] * inv;
    }
}

/* x += proj (row inv[t] of it when the rows were ordered by form) */
static void residual_task(void *ctx, int64_t t, int thread)
{
    mla_job_t *j = ctx;
    const int64_t E = j->b->cfg->n_embd;
    float *x = j->b->x + t * E;
    const float *p = j->b->proj + (j->inv ? j->inv[t] : t) * E;
    (void)thread;
    for (int64_t i = 0; i < E; i++)
        x[i] = p[i] + x[i];
}

static int mla_forward(cpu_backend_t *b, const model_part_t *p, int32_t il, int32_t n, const int32_t *keep,
                       int32_t n_keep, guild_err_t *err)
{
    const model_config_t *c = b->cfg;
    const model_layer_t *L = model_block(b->w, il);
    mla_job_t j = {b, L, dims_of(c), layout_of(c, b->w, b->n_batch), il, n, 0, NULL};
    const mla_dims_t *d = &j.d;
    const int64_t E = c->n_embd, Q = d->H * d->K;
    guild_pool_t *pool = b->pool;
    (void)p;
    (void)err;

    if (c->n_lora_q > 0) {
        cpu_linear(pool, &L->wq_a, 0, c->n_lora_q, n, b->xn, E, b->mla_qa, c->n_lora_q, b->act);
        guild_pool_run(pool, n, qa_norm_task, &j);
        cpu_linear(pool, &L->wq_b, 0, Q, n, b->mla_qa, c->n_lora_q, b->q, Q, b->act);
    } else {
        cpu_linear(pool, &L->wq, 0, Q, n, b->xn, E, b->q, Q, b->act);
    }
    cpu_linear(pool, &L->wkv_a, 0, d->RR, n, b->xn, E, b->mla_kv, d->RR, b->act);
    guild_pool_run(pool, n, prepare_task, &j);
    cpu_rows_where(b, n, keep, n_keep);
    if (keep) {
        /* att is free until the attention below writes it */
        cpu_gather_rows(b->q, Q, keep, n_keep, b->att);
        n = j.n = n_keep;
        if (n == 0)
            return 0;
    }
    /* the form of each row: by its sequence's rows in the batch (as if they ran alone); the absorbed rows are
     * put first, [0, na), the expanded ones after them */
    const bool plain = up_projections_plain(L, c->mla_kv_split);
    int32_t na = 0;
    for (int32_t t = 0; t < n; t++)
        na += !row_expanded(b, d, plain, t);
    const bool mixed = na > 0 && na < n;
    if (mixed) {
        int32_t *perm = b->mla_perm, *idx = b->mla_perm + b->n_batch;
        for (int32_t t = 0, a = 0, e = na; t < n; t++)
            perm[row_expanded(b, d, plain, t) ? e++ : a++] = t;
        for (int32_t t = 0; t < n; t++)
            idx[t] = keep ? keep[perm[t]] : perm[t];
        cpu_rows_where(b, n, idx, n);
        cpu_gather_rows(b->q, Q, perm, n, b->att);
    }
    if (na > 0) {
        j.n = na;
        guild_pool_run(pool, d->H, absorb_task, &j);
        guild_pool_run(pool, (int64_t)na * d->H, latent_attention_task, &j);
        guild_pool_run(pool, d->H, value_task, &j);
    }
    if (na < n) {
        j.r0 = na;
        j.n = n - na;
        guild_pool_run(pool, d->H, expanded_task, &j);
    }
    j.r0 = 0;
    j.n = n;
    if (mixed) { /* the residual takes kept row perm[t]'s output from row t */
        int32_t *perm = b->mla_perm, *inv = b->mla_perm + b->n_batch;
        for (int32_t t = 0; t < n; t++)
            inv[perm[t]] = t;
        j.inv = inv;
    }
    cpu_linear(pool, &L->wo, 0, E, n, b->att, d->H * d->V, b->proj, E, b->act);
    guild_pool_run(pool, n, residual_task, &j);
    return 0;
}

const cpu_attn_part_t cpu_attn_mla = {
    .opts = 0,
    .forward = mla_forward,
};
