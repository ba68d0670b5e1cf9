/* The multi-token-prediction layer on the CPU backend (backend_mtp_step, gpu-worker/dense/backend.h; the layer's
 * computation in core/model/weights.h: model_mtp_layer_t). Its block is block n_layer of the layer program
 * (cpu_layer.c, model_block), with a K/V cache of its own (k_layer[n_layer]); the forward driver keeps every
 * position's hidden state and token (cpu_backend.c) so that the layer takes in the positions it has not seen
 * when a draft begins:
 *
 *   row of position p:  x = eh_proj [rmsnorm(embed(token at p + 1), enorm) ; rmsnorm(h_p, hnorm)]
 *                       x = block n_layer (x) at position p
 *   the last row:       h' = x, logits = head (rmsnorm(x, head_norm))
 */
#include <string.h>

#include "core/model/activation.h"
#include "core/quant/quant.h"
#include "gpu-worker/dense/cpu/cpu_matmul.h"
#include "gpu-worker/dense/cpu/cpu_parts.h"

void cpu_mtp_experts(cpu_backend_t *b, const model_layer_t *L, int32_t n)
{
    const model_config_t *c = b->cfg;
    const int64_t E = c->n_embd, F = c->n_ff_exp, K = c->n_expert_used;
    for (int32_t t = 0; t < n; t++)
        for (int64_t k = 0; k < K; k++) {
            const int32_t e = b->ids[t * K + k];
            const float *x = b->xn + t * E;
            cpu_linear(b->pool, &L->gate_exps, e, F, 1, x, E, b->mtp_g, F, b->act);
            cpu_linear(b->pool, &L->up_exps, e, F, 1, x, E, b->mtp_u, F, b->act);
            for (int64_t i = 0; i < F; i++)
                b->mtp_g[i] = model_silu(b->mtp_g[i]) * b->mtp_u[i];
            cpu_linear(b->pool, &L->down_exps, e, E, 1, b->mtp_g, F, b->mtp_y + (t * K + k) * E, E, b->act);
        }
    b->y = b->mtp_y;
}

typedef struct mtp_job {
    cpu_backend_t *b;
    const int32_t *tokens; /* [n] the token after each row's position */
    const float *const *h; /* [n] each row's hidden state */
    int32_t pos0;          /* row t is at position pos0 + t */
} mtp_job_t;

/* Row t's input to the projection: the normed embedding, then the normed hidden state. */
static void input_task(void *ctx, int64_t t, int thread)
{
    mtp_job_t *j = ctx;
    cpu_backend_t *b = j->b;
    const model_mtp_layer_t *M = &b->w->mtp[0];
    const model_tensor_t *te = M->embed_tokens.data ? &M->embed_tokens : &b->w->token_embd;
    const int64_t E = b->cfg->n_embd;
    const float eps = b->cfg->norm_eps;
    float *cat = b->mtp_cat + t * 2 * E, *tmp = b->proj + t * E;
    (void)thread;
    quant_dequantize_row_ref(te->type, model_tensor_row(te, 0, j->tokens[t]), tmp, E);
    cpu_rmsnorm(cat, tmp, M->enorm.data, E, eps);
    cpu_rmsnorm(cat + E, j->h[t], M->hnorm.data, E, eps);
    b->tok_seq[t] = 0;
    b->tok_pos[t] = j->pos0 + (int32_t)t;
    cpu_rope_table(&b->rope, b->tok_pos[t], b->rope_cs + t * b->cfg->n_rot);
}

/* Runs the n rows of j through the layer; with out, the last row goes on to the head: its output into mtp_hc,
 * its logits into out. */
static int run_rows(cpu_backend_t *b, mtp_job_t *j, int32_t n, float *out, guild_err_t *err)
{
    const model_config_t *c = b->cfg;
    const model_mtp_layer_t *M = &b->w->mtp[0];
    const int64_t E = c->n_embd;
    guild_pool_run(b->pool, n, input_task, j);
    cpu_linear(b->pool, &M->eh_proj, 0, E, n, b->mtp_cat, 2 * E, b->x, E, b->act);
    const int32_t last = n - 1;
    if (cpu_layer_forward(b, c->n_layer, n, &last, out ? 1 : 0, err) < 0)
        return guild_err_prefix(err, "multi-token-prediction ");
    if (!out)
        return 0;
    memcpy(b->mtp_hc, b->x, (size_t)E * sizeof(float));
    const model_tensor_t *norm = M->head_norm.data ? &M->head_norm : &b->w->output_norm;
    const model_tensor_t *head = M->head.data ? &M->head : &b->w->output;
    if (cpu_norm_rows(b, norm, 1, 0, NULL, err) < 0)
        return -1;
    cpu_linear(b->pool, head, 0, c->n_vocab, 1, b->xn, E, out, c->n_vocab, b->act);
    return 0;
}

int cpu_mtp_step(backend_t *base, int32_t step, int32_t token, float *logits, guild_err_t *err)
{
    cpu_backend_t *b = (cpu_backend_t *)base;
    const model_config_t *c = b->cfg;
    const int64_t E = c->n_embd;
    if (!b->mtp)
        return guild_err_set(err, "mtp: the cpu backend was created without the multi-token-prediction layer");
    if (token < 0 || token >= c->n_vocab)
        return guild_err_set(err, "mtp: token id %d is out of range (vocabulary of %d)", token, c->n_vocab);
    const int32_t kv = b->seq_len[0];
    if (kv < 1)
        return guild_err_set(err, "mtp: the cache is empty (no hidden state to predict from)");
    if (step != b->mtp_next)
        return guild_err_set(err, "mtp: step %d asked, step %d comes next (steps run in order after a forward call)",
                             step, b->mtp_next);
    if (kv - 1 + step >= b->n_ctx)
        return guild_err_set(err, "mtp: the context is full (step %d would be at position %d of %d)", step,
                             kv - 1 + step, b->n_ctx);
    /* drafts change no output: a non-finite value in them only makes a bad draft, and the check's sites name
     * the model's layers */
    const bool check = b->check_finite;
    b->check_finite = false;
    int rc = 0;
    const float *h[1];
    mtp_job_t j = {.b = b, .h = h};
    if (step > 0) {
        h[0] = b->mtp_hc;
        j.tokens = &token;
        b->seq_rows[0] = 1; /* (MLA's automatic form counts a sequence's rows) */
        j.pos0 = kv - 1 + step;
        rc = run_rows(b, &j, 1, logits, err);
    } else {
        /* the positions the layer has not taken in, then kv - 1 with `token`, in batches: the rows' tokens are
         * the next positions' (mtp_tok), and `token` for the last */
        for (int32_t s = b->mtp_len; rc == 0 && s < kv;) {
            const int32_t n = kv - s < b->n_batch ? kv - s : b->n_batch;
            for (int32_t t = 0; t < n; t++) {
                b->mtp_rows_h[t] = b->mtp_h + (int64_t)(s + t) * E;
                b->mtp_rows_tok[t] = s + t + 1 < kv ? b->mtp_tok[s + t + 1] : token;
            }
            b->seq_rows[0] = n;
            mtp_job_t jb = {.b = b, .tokens = b->mtp_rows_tok, .h = b->mtp_rows_h, .pos0 = s};
            rc = run_rows(b, &jb, n, s + n == kv ? logits : NULL, err);
            s += n;
        }
        if (rc == 0)
            b->mtp_len = kv - 1; /* position kv - 1's token is not in the cache yet */
    }
    b->check_finite = check;
    if (rc < 0) {
        b->mtp_next = 0;
        return -1;
    }
    b->mtp_next = step + 1;
    return 0;
}
