/* The CPU backend: buffers, the forward driver (embedding -> layers -> output norm -> LM head) and the KV
 * cache bookkeeping. The layer program is in cpu_layer.c, its parts in the files cpu_parts.h names. */
#include "gpu-worker/dense/cpu/cpu_backend.h"

#include <stdlib.h>
#include <string.h>

#include "core/quant/quant.h"
#include "gpu-worker/dense/cpu/cpu_matmul.h"
#include "gpu-worker/dense/cpu/cpu_parts.h"
#include "gpu-worker/dense/cpu/cpu_resident.h"
#include "gpu-worker/dense/cpu/cpu_snapshot.h"
#include "gpu-worker/dense/cpu/cpu_state.h"
#include "gpu-worker/dense/gpu_plan.h"

static void cpu_destroy(backend_t *base)
{
    cpu_backend_t *b = (cpu_backend_t *)base;
    moe_exec_destroy(&b->resident);
    cpu_rope_fini(&b->rope);
    free(b->kv_cache);
    free(b->k_layer);
    free(b->v_layer);
    free(b->kv_rows);
    free(b->mla_qa);
    free(b->mla_kv);
    free(b->mla_qk);
    free(b->mla_lat);
    free(b->mla_scratch);
    free(b->mla_perm);
    free(b->rec_slot);
    free(b->conv_state);
    free(b->ssm_state);
    free(b->rb_conv);
    free(b->rb_ssm);
    free(b->rb_from);
    free(b->rb_n);
    free(b->qg);
    free(b->gate);
    free(b->gdn_qkv);
    free(b->gdn_z);
    free(b->gdn_ba);
    free(b->gdn_beta);
    free(b->gdn_g);
    free(b->gdn_o);
    free(b->x);
    free(b->xn);
    free(b->q);
    free(b->k);
    free(b->v);
    free(b->att);
    free(b->proj);
    free(b->rope_cs);
    free(b->router_logits);
    free(b->ids);
    free(b->weights);
    free(b->sh_gate);
    free(b->sh_up);
    free(b->sh_logit);
    free(b->probs);
    free(b->scores);
    free(b->row_pos);
    free(b->row_seq);
    free(b->tok_seq);
    free(b->tok_pos);
    free(b->seq_rows);
    free(b->seq_len);
    free(b->act);
    free(b->mtp_h);
    free(b->mtp_tok);
    free(b->mtp_hc);
    free(b->mtp_cat);
    free(b->mtp_y);
    free(b->mtp_g);
    free(b->mtp_u);
    free(b->mtp_rows_h);
    free(b->mtp_rows_tok);
    free(b);
}

/* n * size bytes, or NULL (and *ok = false) on overflow or out of memory. */
static void *alloc_array(size_t n, size_t size, bool *ok)
{
    if (size && n > SIZE_MAX / size) {
        *ok = false;
        return NULL;
    }
    size_t bytes = n * size;
    void *p = malloc(bytes ? bytes : 1);
    if (!p)
        *ok = false;
    return p;
}

/* The KV cache: layer il's n_seq * n_ctx key rows, then its value rows, of the widths its attention part says, in
 * the cache's element types. false when out of memory or too large. */
static bool alloc_kv(cpu_backend_t *b, const model_config_t *c, bool *ok)
{
    const size_t L = (size_t)b->n_block, N = (size_t)b->n_ctx * (size_t)b->n_seq;
    b->k_layer = alloc_array(L, sizeof *b->k_layer, ok);
    b->v_layer = alloc_array(L, sizeof *b->v_layer, ok);
    b->kv_rows = alloc_array((size_t)b->n_threads, 2 * (size_t)c->head_dim * sizeof(float), ok);
    size_t total = 0;
    for (int32_t il = 0; il < b->n_block; il++) {
        const model_cache_row_t r = model_layer_cache_row(c, il);
        const size_t row = (size_t)kv_elem_bytes(b->kt, r.k) + (size_t)kv_elem_bytes(b->vt, r.v);
        if (row && N > (SIZE_MAX - total) / row)
            return *ok = false;
        total += N * row;
    }
    b->kv_cache = alloc_array(total, 1, ok);
    if (!*ok)
        return false;
    char *at = b->kv_cache;
    for (int32_t il = 0; il < b->n_block; il++) {
        const model_cache_row_t r = model_layer_cache_row(c, il);
        b->k_layer[il] = at;
        at += N * (size_t)kv_elem_bytes(b->kt, r.k);
        b->v_layer[il] = r.v ? at : NULL;
        at += N * (size_t)kv_elem_bytes(b->vt, r.v);
    }
    return true;
}

/* The buffers of the MLA part (cpu_state.h), when some layer has it. */
static void alloc_mla(cpu_backend_t *b, const model_config_t *c, bool *ok)
{
    bool mla = false;
    for (int32_t il = 0; il < b->n_block; il++)
        mla |= model_layer_parts(c, il).attn->kind == MODEL_ATTN_MLA;
    if (!mla)
        return;
    const size_t NB = (size_t)b->n_batch, H = (size_t)c->n_head, R = (size_t)c->n_lora_kv;
    const size_t RR = R + (size_t)c->n_rot;
    b->mla_qa = alloc_array(NB, (size_t)c->n_lora_q * sizeof(float), ok);
    b->mla_kv = alloc_array(NB, RR * sizeof(float), ok);
    b->mla_qk = alloc_array(NB * H, RR * sizeof(float), ok);
    b->mla_lat = alloc_array(NB * H, R * sizeof(float), ok);
    b->mla_scratch_bytes = cpu_attn_mla_scratch_bytes(c, b->w, b->n_batch);
    b->mla_scratch = alloc_array((size_t)b->n_threads, b->mla_scratch_bytes, ok);
    b->mla_perm = alloc_array(2 * NB, sizeof(int32_t), ok);
}

static size_t act_row_max(size_t m, const model_tensor_t *t)
{
    const size_t r = t->data ? cpu_act_row_bytes(t->type, t->ne[0]) : 0;
    return r > m ? r : m;
}

/* The widest quantized activation row any dense matrix of the model needs (n_block blocks: with the MTP layer's,
 * its input projection, head and routed experts). */
static size_t max_act_row(const model_config_t *c, const model_weights_t *w, int32_t n_block)
{
    size_t m = cpu_act_row_bytes(w->output.type, c->n_embd);
    if (n_block > c->n_layer) {
        const model_mtp_layer_t *M = &w->mtp[0];
        m = act_row_max(m, &M->eh_proj);
        m = act_row_max(m, &M->head);
        m = act_row_max(m, &M->block.gate_exps);
        m = act_row_max(m, &M->block.up_exps);
        m = act_row_max(m, &M->block.down_exps);
    }
    for (int32_t il = 0; il < n_block; il++) {
        const model_layer_t *L = model_block(w, il);
#define MATRIX(name, kind) (kind) == MODEL_TENSOR_MATRIX ? &L->name : NULL,
        const model_tensor_t *all[] = {MODEL_LAYER_DENSE_TENSORS(MATRIX)};
#undef MATRIX
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
            if (!all[i] || !all[i]->data)
                continue;
            size_t r = cpu_act_row_bytes(all[i]->type, all[i]->ne[0]);
            if (r > m)
                m = r;
        }
    }
    return m;
}

static int cpu_create(backend_t **out, const model_t *m, const backend_options_t *opt, const void *config,
                      guild_err_t *err)
{
    *out = NULL;
    const model_config_t *c = model_config(m);
    if (config)
        return guild_err_set(err, "cpu backend: takes no settings record (another backend's was given)");
    if (opt->n_ctx < 1 || opt->n_batch < 1)
        return guild_err_set(err, "cpu backend: n_ctx (%d) and n_batch (%d) must be >= 1", opt->n_ctx,
                             opt->n_batch);
    if (!opt->pool || !opt->moe)
        return guild_err_set(err, "cpu backend: a thread pool and a routed-expert executor are required");
    model_part_support_t parts;
    cpu_parts_support(&parts);
    if (model_parts_check(c, &parts, "cpu backend", err) < 0)
        return -1;
    if (opt->check_finite && finite_check_fits(c, opt->n_batch, err) < 0)
        return guild_err_prefix(err, "cpu backend: ");
    const int32_t kv_type = kv_type_resolve(opt->kv_type, KV_TYPE_F32);
    if (kv_type_check(kv_type, c, 1u << KV_TYPE_F32, "cpu backend", err) < 0)
        return -1;
    if (opt->moe->ops->mem != MOE_EXEC_HOST)
        return guild_err_set(err, "cpu backend: the routed-expert executor \"%s\" works on device memory",
                             opt->moe->ops->name);
    cpu_backend_t *b = calloc(1, sizeof *b);
    if (!b)
        return guild_err_set(err, "cpu backend: out of memory");
    b->base.ops = &cpu_backend_ops;
    b->cfg = c;
    b->w = model_weights(m);
    b->pool = opt->pool;
    b->moe = opt->moe;
    b->n_ctx = opt->n_ctx;
    b->n_seq = opt->n_seq > 1 ? opt->n_seq : 1;
    b->n_batch = opt->n_batch;
    b->all_rows = opt->all_rows || opt->mtp; /* the MTP layer takes every position's hidden state */
    b->mtp = opt->mtp;
    b->n_block = c->n_layer + (opt->mtp ? 1 : 0);
    b->check_finite = opt->check_finite;
    b->progress = opt->progress;
    b->mla_form = opt->mla_form;
    b->kv_type = kv_type;
    b->kt = kv_type_k(kv_type);
    b->vt = kv_type_v(kv_type);
    b->v_rot = kv_type_rotates_v(kv_type);
    b->n_threads = guild_pool_threads(opt->pool);

    const size_t NB = (size_t)opt->n_batch, E = (size_t)c->n_embd, HD = (size_t)c->head_dim;
    const size_t Q = (size_t)c->n_head * HD, KV = (size_t)c->n_head_kv * HD, K = (size_t)c->n_expert_used;
    b->ff_hidden = model_config_ff_hidden(c);
    b->probs_stride = cpu_router_sigmoid_scratch(c->n_expert, c->n_expert_groups);
    const size_t F = (size_t)b->ff_hidden, NT = (size_t)b->n_threads;
    /* the attention output: a value per head (wider than a key with MLA where so) */
    const size_t ATT = (size_t)c->n_head * (size_t)(c->head_dim_v > c->head_dim ? c->head_dim_v : c->head_dim);
    bool ok = true;
    alloc_kv(b, c, &ok);
    alloc_mla(b, c, &ok);
    /* a recurrent state for the gdn layers (they keep no K/V: their cache rows are empty) */
    b->rec_slot = alloc_array((size_t)c->n_layer, sizeof(int32_t), &ok);
    bool gate = false;
    for (int32_t il = 0; ok && il < c->n_layer; il++) {
        const model_part_t *a = model_layer_parts(c, il).attn;
        b->rec_slot[il] = model_layer_recurrent(c, il) ? b->n_recurrent++ : -1;
        gate |= a->kind == MODEL_ATTN_GQA && (a->opts & MODEL_GQA_OUT_GATE);
    }
    if (gate) {
        b->qg = alloc_array(NB, 2 * Q * sizeof(float), &ok);
        b->gate = alloc_array(NB, Q * sizeof(float), &ok);
    }
    if (b->n_recurrent) {
        const size_t CH = (size_t)model_gdn_conv_channels(c), IN = (size_t)c->ssm_d_inner;
        const size_t NV = (size_t)c->ssm_dt_rank;
        const size_t SR = (size_t)b->n_seq * (size_t)b->n_recurrent;
        b->conv_state = alloc_array(SR, (size_t)model_gdn_conv_state(c) * sizeof(float), &ok);
        b->ssm_state = alloc_array(SR, (size_t)model_gdn_ssm_state(c) * sizeof(float), &ok);
        if (opt->rollback > 0) {
            const size_t RR = SR * (size_t)opt->rollback;
            b->rb_rows = opt->rollback;
            b->rb_conv = alloc_array(RR, (size_t)model_gdn_conv_state(c) * sizeof(float), &ok);
            b->rb_ssm = alloc_array(RR, (size_t)model_gdn_ssm_state(c) * sizeof(float), &ok);
            b->rb_from = alloc_array((size_t)b->n_seq, sizeof(int32_t), &ok);
            if ((b->rb_n = calloc((size_t)b->n_seq, sizeof(int32_t))) == NULL)
                ok = false;
        }
        b->gdn_qkv = alloc_array(NB, CH * sizeof(float), &ok);
        b->gdn_z = alloc_array(NB, IN * sizeof(float), &ok);
        b->gdn_ba = alloc_array(NB, 2 * NV * sizeof(float), &ok);
        b->gdn_beta = alloc_array(NB, NV * sizeof(float), &ok);
        b->gdn_g = alloc_array(NB, NV * sizeof(float), &ok);
        b->gdn_o = alloc_array(NB, IN * sizeof(float), &ok);
    }
    b->x = alloc_array(NB, E * sizeof(float), &ok);
    b->xn = alloc_array(NB, E * sizeof(float), &ok);
    b->q = alloc_array(NB, Q * sizeof(float), &ok);
    b->k = alloc_array(NB, KV * sizeof(float), &ok);
    b->v = alloc_array(NB, KV * sizeof(float), &ok);
    b->att = alloc_array(NB, ATT * sizeof(float), &ok);
    b->proj = alloc_array(NB, E * sizeof(float), &ok);
    b->rope_cs = alloc_array(NB, (size_t)c->n_rot * sizeof(float), &ok);
    b->router_logits = alloc_array(NB, (size_t)c->n_expert * sizeof(float), &ok);
    b->ids = alloc_array(NB, K * sizeof(int32_t), &ok);
    b->weights = alloc_array(NB, K * sizeof(float), &ok);
    b->sh_gate = alloc_array(NB, F * sizeof(float), &ok);
    b->sh_up = alloc_array(NB, F * sizeof(float), &ok);
    b->sh_logit = alloc_array(NB, sizeof(float), &ok);
    b->probs = alloc_array(NT, (size_t)b->probs_stride * sizeof(float), &ok);
    b->scores = alloc_array(NT, (size_t)opt->n_ctx * sizeof(float), &ok);
    b->row_pos = alloc_array(NB, sizeof(int32_t), &ok);
    b->row_seq = alloc_array(NB, sizeof(int32_t), &ok);
    b->tok_seq = alloc_array(NB, sizeof(int32_t), &ok);
    b->tok_pos = alloc_array(NB, sizeof(int32_t), &ok);
    b->seq_rows = alloc_array((size_t)b->n_seq, sizeof(int32_t), &ok);
    b->seq_len = calloc((size_t)b->n_seq, sizeof(int32_t));
    ok = ok && b->seq_len;
    b->act = alloc_array(NB, max_act_row(c, b->w, b->n_block), &ok);
    if (b->mtp) {
        const size_t C = (size_t)opt->n_ctx, FE = (size_t)(c->n_ff_exp > 0 ? c->n_ff_exp : 1);
        b->mtp_h = alloc_array(C, E * sizeof(float), &ok);
        b->mtp_tok = alloc_array(C, sizeof(int32_t), &ok);
        b->mtp_hc = alloc_array(E, sizeof(float), &ok);
        b->mtp_cat = alloc_array(NB, 2 * E * sizeof(float), &ok);
        b->mtp_y = alloc_array(NB * (K ? K : 1), E * sizeof(float), &ok);
        b->mtp_g = alloc_array(FE, sizeof(float), &ok);
        b->mtp_u = alloc_array(FE, sizeof(float), &ok);
        b->mtp_rows_h = alloc_array(NB, sizeof *b->mtp_rows_h, &ok);
        b->mtp_rows_tok = alloc_array(NB, sizeof(int32_t), &ok);
    }
    if (!ok || cpu_rope_init(&b->rope, c, b->w->rope_freqs.data) < 0) {
        cpu_destroy(&b->base);
        return guild_err_set(err, "cpu backend: out of memory for a context of %d (%d sequences) and batches of %d",
                             opt->n_ctx, opt->n_seq > 1 ? opt->n_seq : 1, opt->n_batch);
    }
    /* a GPU plan's resident experts (no other process holds them) are computed here, as a device would */
    const bool plan_res = opt->plan && opt->plan->n_resident_experts > 0;
    if (plan_res || opt->count_routing) {
        if (cpu_resident_new(&b->resident, opt->moe, m, opt->pool, plan_res ? opt->plan->expert_resident : NULL,
                             err) < 0) {
            cpu_destroy(&b->base);
            return guild_err_prefix(err, "cpu backend: ");
        }
        b->moe = b->resident;
        b->plan_layers = plan_res ? opt->plan->n_resident : 0;
    }
    *out = &b->base;
    return 0;
}

typedef struct embed_job {
    cpu_backend_t *b;
    const int32_t *tokens;
} embed_job_t;

static void embed_task(void *ctx, int64_t t, int thread)
{
    embed_job_t *j = ctx;
    cpu_backend_t *b = j->b;
    const model_tensor_t *te = &b->w->token_embd;
    const int64_t E = b->cfg->n_embd;
    (void)thread;
    quant_dequantize_row_ref(te->type, model_tensor_row(te, 0, j->tokens[t]), b->x + t * E, E);
    cpu_rope_table(&b->rope, b->tok_pos[t], b->rope_cs + t * b->cfg->n_rot);
}

/* A failed call: the recurrent state of the batch's sequences has moved on by part of it, so they start afresh;
 * the others' caches are untouched (their lengths were not advanced yet). */
static void forward_failed(cpu_backend_t *b)
{
    for (int32_t s = 0; b->n_recurrent && s < b->n_seq; s++)
        if (b->seq_rows[s]) {
            b->seq_len[s] = 0;
            if (b->rb_n)
                b->rb_n[s] = 0;
        }
}

static int cpu_forward_seq(backend_t *base, int32_t n, const int32_t *tokens, const int32_t *seq,
                           const int32_t *positions, int32_t n_out, const int32_t *out_rows, float *logits,
                           guild_err_t *err)
{
    cpu_backend_t *b = (cpu_backend_t *)base;
    const model_config_t *c = b->cfg;
    if (n < 1 || n > b->n_batch)
        return guild_err_set(err, "forward: %d tokens in a batch (1..%d)", n, b->n_batch);
    if (n_out < 0 || n_out > n)
        return guild_err_set(err, "forward: %d output rows for %d tokens", n_out, n);
    memset(b->seq_rows, 0, (size_t)b->n_seq * sizeof *b->seq_rows);
    for (int32_t t = 0; t < n; t++) {
        const int32_t s = seq ? seq[t] : 0;
        if (s < 0 || s >= b->n_seq)
            return guild_err_set(err, "forward: token %d is of sequence %d (the backend holds %d)", t, s, b->n_seq);
        if (tokens[t] < 0 || tokens[t] >= c->n_vocab)
            return guild_err_set(err, "forward: token id %d is out of range (vocabulary of %d)", tokens[t],
                                 c->n_vocab);
        const int32_t want = b->seq_len[s] + b->seq_rows[s];
        if (want >= b->n_ctx) {
            int32_t rows = 0;
            for (int32_t u = 0; u < n; u++)
                rows += (seq ? seq[u] : 0) == s;
            if (b->n_seq == 1)
                return guild_err_set(err, "forward: the context is full (%d positions held + %d new > %d)",
                                     b->seq_len[s], rows, b->n_ctx);
            return guild_err_set(err, "forward: the context is full (sequence %d: %d positions held + %d new > %d)",
                                 s, b->seq_len[s], rows, b->n_ctx);
        }
        if (positions[t] != want)
            return guild_err_set(err, "forward: token %d has position %d, expected %d (batches append to the "
                                 "cache)", t, positions[t], want);
        b->tok_seq[t] = s;
        b->tok_pos[t] = want;
        b->seq_rows[s]++;
    }
    for (int32_t j = 0; j < n_out; j++)
        if (out_rows[j] < 0 || out_rows[j] >= n)
            return guild_err_set(err, "forward: output row %d is not in the batch of %d", out_rows[j], n);

    for (int32_t s = 0; b->n_recurrent && s < b->n_seq; s++) {
        if (!b->seq_rows[s] || b->seq_len[s])
            continue;
        /* a new sequence: its recurrence starts from zero */
        const size_t conv = (size_t)model_gdn_conv_state(c), ssm = (size_t)model_gdn_ssm_state(c);
        const size_t R = (size_t)b->n_recurrent;
        memset(b->conv_state + (size_t)s * R * conv, 0, R * conv * sizeof(float));
        memset(b->ssm_state + (size_t)s * R * ssm, 0, R * ssm * sizeof(float));
    }
    embed_job_t ej = {b, tokens};
    guild_pool_run(b->pool, n, embed_task, &ej);
    /* the last layer narrows the batch to the rows whose logits are wanted: they are rows 0..n_out-1 after it
     * (with all_rows, every row goes through, narrowed right after) */
    for (int32_t il = 0; il < c->n_layer; il++) {
        bool last = il == c->n_layer - 1 && !b->all_rows;
        if (cpu_layer_forward(b, il, n, last ? out_rows : NULL, last ? n_out : n, err) < 0) {
            forward_failed(b);
            return -1;
        }
        if (b->progress)
            __atomic_add_fetch(b->progress, 1, __ATOMIC_RELAXED);
    }
    if (b->mtp) { /* sequence 0's hidden states and tokens, for the MTP layer (cpu_mtp.c) */
        for (int32_t t = 0; t < n; t++)
            if (b->tok_seq[t] == 0) {
                memcpy(b->mtp_h + (int64_t)b->tok_pos[t] * c->n_embd, b->x + (int64_t)t * c->n_embd,
                       (size_t)c->n_embd * sizeof(float));
                b->mtp_tok[b->tok_pos[t]] = tokens[t];
            }
        b->mtp_next = 0;
    }
    if (b->all_rows && n_out > 0) {
        float *scratch = b->proj;
        for (int32_t j = 0; j < n_out; j++)
            memcpy(scratch + (int64_t)j * c->n_embd, b->x + (int64_t)out_rows[j] * c->n_embd,
                   (size_t)c->n_embd * sizeof(float));
        memcpy(b->x, scratch, (size_t)n_out * (size_t)c->n_embd * sizeof(float));
    }
    if (n_out > 0) {
        if (cpu_norm_rows(b, &b->w->output_norm, n_out, 2 * (uint32_t)c->n_layer, out_rows, err) < 0) {
            forward_failed(b);
            return -1;
        }
        cpu_linear(b->pool, &b->w->output, 0, c->n_vocab, n_out, b->xn, c->n_embd, logits, c->n_vocab, b->act);
    }
    for (int32_t s = 0; s < b->n_seq; s++) {
        if (b->rb_n && b->seq_rows[s]) { /* attn_gdn.c kept the states of the rows of a short call */
            b->rb_from[s] = b->seq_len[s];
            b->rb_n[s] = b->seq_rows[s] <= b->rb_rows ? b->seq_rows[s] : 0;
        }
        b->seq_len[s] += b->seq_rows[s];
    }
    return 0;
}

static int cpu_forward(backend_t *base, int32_t n, const int32_t *tokens, const int32_t *positions, int32_t n_out,
                       const int32_t *out_rows, float *logits, guild_err_t *err)
{
    return cpu_forward_seq(base, n, tokens, NULL, positions, n_out, out_rows, logits, err);
}

static int32_t cpu_seq_kv_len(const backend_t *base, int32_t seq)
{
    return ((const cpu_backend_t *)base)->seq_len[seq];
}

static void cpu_seq_kv_truncate(backend_t *base, int32_t seq, int32_t n_pos)
{
    cpu_backend_t *b = (cpu_backend_t *)base;
    if (n_pos < 0)
        n_pos = 0;
    if (n_pos < b->seq_len[seq] && b->n_recurrent) {
        /* a recurrent state holds no earlier position: the cache empties, unless the last call kept the state */
        const int32_t j = b->rb_n ? n_pos - b->rb_from[seq] - 1 : -1;
        if (j >= 0 && j < b->rb_n[seq]) {
            const size_t R = (size_t)b->n_recurrent, conv = R * (size_t)model_gdn_conv_state(b->cfg);
            const size_t ssm = R * (size_t)model_gdn_ssm_state(b->cfg);
            const size_t at = (size_t)seq * (size_t)b->rb_rows + (size_t)j;
            memcpy(b->conv_state + (size_t)seq * conv, b->rb_conv + at * conv, conv * sizeof(float));
            memcpy(b->ssm_state + (size_t)seq * ssm, b->rb_ssm + at * ssm, ssm * sizeof(float));
            b->rb_n[seq] = j + 1;
            b->seq_len[seq] = n_pos;
        } else {
            b->seq_len[seq] = 0;
            if (b->rb_n)
                b->rb_n[seq] = 0;
        }
    } else if (n_pos < b->seq_len[seq]) {
        b->seq_len[seq] = n_pos;
    }
    if (b->mtp && seq == 0) { /* the MTP layer's position p needs the token at p + 1 */
        const int32_t keep = b->seq_len[0] > 0 ? b->seq_len[0] - 1 : 0;
        if (b->mtp_len > keep)
            b->mtp_len = keep;
        b->mtp_next = 0;
    }
}

static int32_t cpu_kv_len(const backend_t *base)
{
    return cpu_seq_kv_len(base, 0);
}

static void cpu_kv_truncate(backend_t *base, int32_t n_pos)
{
    cpu_seq_kv_truncate(base, 0, n_pos);
}

static void cpu_stats(const backend_t *base, backend_stats_t *out)
{
    const cpu_backend_t *b = (const cpu_backend_t *)base;
    out->gpu_expert_layers = b->plan_layers;
    if (b->resident)
        cpu_resident_counts(b->resident, NULL, &out->routed_pairs, &out->resident_pairs);
}

static int cpu_routing(const backend_t *base, uint64_t *counts)
{
    const cpu_backend_t *b = (const cpu_backend_t *)base;
    if (!b->resident)
        return -1;
    uint64_t routed, resident;
    cpu_resident_counts(b->resident, counts, &routed, &resident);
    return 0;
}

const backend_ops_t cpu_backend_ops = {
    .name = "cpu",
    /* a stand-in for a device (tests): it computes a plan's resident experts itself and never streams */
    .plan_caps = GPU_PLAN_CAP_EXPERTS | GPU_PLAN_CAP_SLICES,
    .stats = cpu_stats,
    .routing = cpu_routing,
    .mtp_step = cpu_mtp_step,
    .create = cpu_create,
    .forward = cpu_forward,
    .kv_len = cpu_kv_len,
    .kv_truncate = cpu_kv_truncate,
    .forward_seq = cpu_forward_seq,
    .seq_kv_len = cpu_seq_kv_len,
    .seq_kv_truncate = cpu_seq_kv_truncate,
    .seq_save = cpu_seq_save,
    .seq_load = cpu_seq_load,
    .destroy = cpu_destroy,
};
